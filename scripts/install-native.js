#!/usr/bin/env node
// Builds the optional native addon at install time. It never fails the
// install: without a compiler (or cmake) the JavaScript fallback is used, and
// `implementation` / `implementationReason` say so at run time.
//
// Order: a prebuild for this platform wins; else cmake-js (when the package's
// dev tools are present and cmake exists); else node-gyp as bundled with npm.
// Nothing here downloads: cmake-js takes headers from node-api-headers
// (package.json "binary.napi_versions") and node-gyp from npm's nodedir.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(import.meta.url);
const note = (message) => process.stderr.write(`waitprep: ${message}\n`);

if (process.env.WAITPREP_SKIP_NATIVE_BUILD === '1') {
  note('WAITPREP_SKIP_NATIVE_BUILD=1: not building the native addon; the JavaScript fallback will be used');
  process.exit(0);
}
if (existsSync(join(root, 'prebuilds', `${process.platform}-${process.arch}`))) {
  note(`using the prebuild in prebuilds/${process.platform}-${process.arch}`);
  process.exit(0);
}

function run(label, command, args) {
  const result = spawnSync(command, args, { cwd: root, stdio: ['ignore', 'inherit', 'inherit'] });
  if (result.status === 0) return true;
  note(`${label} failed (${result.error ? result.error.message : `exit ${result.status}`})`);
  return false;
}

function has(command) {
  return spawnSync(command, ['--version'], { stdio: 'ignore' }).status === 0;
}

let cmakeJs = null;
try {
  cmakeJs = require.resolve('cmake-js/bin/cmake-js');
} catch {
  // cmake-js is a devDependency: absent in a user's install, where node-gyp builds instead.
}

// Both build paths need a C++ compiler; without one, say so plainly instead of letting a build
// tool fail with a page of stack traces.
const compiler = [process.env.CXX, 'c++', 'g++', 'clang++'].find((c) => c && has(c));
if (compiler === undefined) {
  note(
    'no C++ compiler on PATH (c++, g++, clang++ or $CXX): the native addon is not built; the JavaScript fallback will be used. ' +
      'To build it later, install a compiler and run `npm rebuild waitprep` (in a clone: `npm run build:native`)',
  );
  process.exit(0);
}

const attempts = [];
if (cmakeJs && has('cmake')) attempts.push(['cmake-js', process.execPath, [cmakeJs, 'compile', '--log-level', 'warn']]);
const nodeGyp = process.env.npm_config_node_gyp;
if (nodeGyp && existsSync(nodeGyp) && has('make')) attempts.push(['node-gyp', process.execPath, [nodeGyp, 'rebuild']]);

for (const [label, command, args] of attempts) {
  if (run(label, command, args)) {
    note(`native addon built with ${label}`);
    process.exit(0);
  }
}
note(
  attempts.length === 0
    ? 'no native build tool found (cmake-js with cmake, or node-gyp through npm with make); the JavaScript fallback will be used'
    : 'the native addon could not be built; the JavaScript fallback will be used',
);
process.exit(0);
