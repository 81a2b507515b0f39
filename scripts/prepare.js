#!/usr/bin/env node
// npm's `prepare` step: compiles lib/ into dist/ with the package's own TypeScript.
//
// In a clone where `npm install` ran (or in a git dependency, where npm installs the
// devDependencies first) TypeScript is there and this is `tsc -p .`. When a project installs a
// folder instead (`npm install /path/to/waitprep`, which links the folder, or the same with
// `--install-links`, which packs it), npm runs this step in that folder without installing any
// of its dependencies: there is no tsc, no dist/ and no node-gyp-build. Then this step runs
// `npm install` in the folder, as a contributor would: it installs the dependencies from the
// lockfile, builds the native part (the install step) and then dist/ (this step again, now with
// tsc), so the linked or packed package works as the clone does.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const note = (message) => process.stderr.write(`waitprep: ${message}\n`);

/** The TypeScript compiler's entry in this package's node_modules, or null. */
function localTsc() {
  try {
    const manifest = createRequire(join(root, 'package.json')).resolve('typescript/package.json');
    const { bin } = JSON.parse(readFileSync(manifest, 'utf8'));
    return join(dirname(manifest), typeof bin === 'string' ? bin : bin.tsc);
  } catch {
    return null;
  }
}

/**
 * The environment for the nested `npm install`: this one less what npm exported for the outer
 * install. Its `npm_config_local_prefix` and `npm_config_prefix` point at the project that
 * installs waitprep, and would make the nested npm install into that project instead of this
 * folder; the package and lifecycle variables describe the outer step. Only the settings that
 * say where packages come from (cache, registry, certificates, offline preference) carry over.
 */
function nestedEnv() {
  const keep = /^npm_config_(cache|userconfig|globalconfig|registry|cafile|ca|strict_ssl|proxy|https_proxy|noproxy|prefer_offline|prefer_online|offline|nodedir|loglevel|foreground_scripts|.*:registry|\/\/.*)$/i;
  const env = {};
  for (const [name, value] of Object.entries(process.env)) {
    if ((/^npm_/i.test(name) && !keep.test(name)) || name === 'INIT_CWD') continue;
    env[name] = value;
  }
  // Marks the nested install: its own prepare step must find tsc, never install again.
  env.WAITPREP_PREPARE_NESTED = '1';
  return env;
}

// Both builds print on stderr: `npm pack` prints the tarball's name on stdout, which scripts read.
const stdio = ['ignore', 2, 2];
const tsc = localTsc();
if (tsc !== null) {
  const result = spawnSync(process.execPath, [tsc, '-p', '.'], { cwd: root, stdio });
  process.exit(result.status ?? 1);
}
if (process.env.WAITPREP_PREPARE_NESTED === '1') {
  note('TypeScript is not installed even after `npm install` in this folder: cannot build dist/');
  process.exit(1);
}
note(`the dependencies of ${root} are not installed (a fresh clone that npm packs, or links for a project without installing what it needs): running \`npm install\` there, which builds dist/ and the native part`);
// npm_execpath is the npm that runs this step; the same npm does the nested install.
const npm = process.env.npm_execpath;
const [command, args] = npm ? [process.execPath, [npm]] : ['npm', []];
const result = spawnSync(command, [...args, 'install', '--include=dev', '--no-audit', '--no-fund'], { cwd: root, stdio, env: nestedEnv() });
if (result.error) note(`could not run npm: ${result.error.message}`);
process.exit(result.status ?? 1);
