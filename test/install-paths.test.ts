// The package installed as a dependency, the way a user's project gets it: `npm pack`, then
// `npm install` of the tarball into a fresh project, once per supported build path. Each path
// must end with the addon and libwaitprep.so where nativeLibraryPath() finds them (or, without a
// compiler, with the JavaScript fallback and a reason naming the compiler). The npm package
// carries no Python package: Python users install the wheel (python/README.md). npm takes the package's dependencies
// from its cache (--prefer-offline): the registry is asked only for what the cache lacks.
import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runsIf, type Requirement } from './skip-reasons.js';

const root = join(import.meta.dirname, '..');
const platformDir = `${process.platform}-${process.arch}`;

/** Whether `command --version` runs on this PATH. */
const has = (command: string) => spawnSync(command, ['--version'], { stdio: 'ignore' }).status === 0;

/** Each hook packs or installs with npm, and one builds prebuilds: far past vitest's 10 s default. */
const HOOK_TIMEOUT = 300_000;
const missingBuildTools = ['c++', 'make', 'python3'].filter((tool) => !has(tool));
const BUILD_TOOLS: Requirement = [missingBuildTools.length === 0, `node-gyp needs c++, make and python3 on PATH; missing: ${missingBuildTools.join(', ')}`];

/**
 * The names .ci/run hides to make a machine without a compiler: compilers, preprocessors,
 * linkers, assemblers and build tools, cross-prefixed ones included.
 */
const HIDDEN = /^(cc|c\+\+|cpp|cpp-.*|gcc.*|g\+\+.*|clang.*|c89.*|c99.*|make|gmake|cmake|ctest|ninja|nvcc|ld|ld\..*|as|.*-linux-gnu-.*)$/;

/** A directory of links to every executable on PATH except {@link HIDDEN}: PATH for a machine without a compiler. */
function pathWithoutCompilers(dir: string): string {
  mkdirSync(dir);
  const dirs = [...(process.env.PATH ?? '').split(delimiter), '/usr/local/sbin', '/usr/local/bin', '/usr/sbin', '/usr/bin', '/sbin', '/bin'];
  for (const from of dirs) {
    let names: string[];
    try {
      names = readdirSync(from);
    } catch {
      continue;
    }
    for (const name of names) {
      const tool = join(from, name);
      if (HIDDEN.test(name) || existsSync(join(dir, name))) continue;
      try {
        const stat = statSync(tool);
        if (stat.isFile() && (stat.mode & 0o111) !== 0) symlinkSync(tool, join(dir, name));
      } catch {
        // A dangling link on PATH: nothing to offer.
      }
    }
  }
  return dir;
}

/**
 * This environment for npm and the probes, with `PATH` replaced, less what `npm test` exports to
 * its scripts (npm_*, the lifecycle's own node-gyp included) and the package's switches.
 */
function cleanEnv(path: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (/^npm_/i.test(name) && !/^npm_config_(cache|registry|userconfig)$/i.test(name)) continue;
    if (name.startsWith('WAITPREP_') || name === 'INIT_CWD' || name === 'CC' || name === 'CXX') continue;
    env[name] = value;
  }
  env.PATH = path;
  return env;
}

/** Runs a command, and fails the test with its output when it exits non-zero. */
function run(command: string, args: string[], options: { cwd: string; env: NodeJS.ProcessEnv }): SpawnSyncReturns<string> {
  const result = spawnSync(command, args, { ...options, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  expect(result.status, `${command} ${args.join(' ')} in ${options.cwd}:\n${result.error?.message ?? ''}${result.stdout}${result.stderr}`).toBe(0);
  return result;
}

/** `npm pack` of the package directory `dir` into `into`; the tarball's path. */
function pack(dir: string, into: string, env: NodeJS.ProcessEnv): string {
  const out = run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', into], { cwd: dir, env }).stdout;
  return join(into, (JSON.parse(out) as [{ filename: string }])[0].filename);
}

interface Installed {
  /** The installed package: `<project>/node_modules/waitprep`. */
  pkg: string;
  project: string;
  log: string;
  seconds: number;
}

/** A fresh project that `npm install`s the tarball with `PATH`; prints how long the install took. */
function install(label: string, tarball: string, dir: string, path: string): Installed {
  mkdirSync(dir);
  writeFileSync(join(dir, 'package.json'), `${JSON.stringify({ name: `install-${label.replace(/\W+/g, '-')}`, version: '1.0.0', private: true }, null, 2)}\n`);
  const start = process.hrtime.bigint();
  // The install step's notice to the terminal is silenced: this test reads it from npm's output.
  const env = { ...cleanEnv(path), WAITPREP_NO_FALLBACK_WARNING: '1' };
  const result = run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--foreground-scripts', tarball], { cwd: dir, env });
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  console.log(`install-paths: npm install of the tarball, ${label}: ${seconds.toFixed(1)} s`);
  return { pkg: join(dir, 'node_modules', 'waitprep'), project: dir, log: result.stdout + result.stderr, seconds };
}

interface Probe {
  loaded?: { implementation: string; reason: string; library: string | null; loadError: string | null };
  error?: { code: string; message: string };
}

/** What `import('waitprep')` from the project exports (or throws), in a process with `PATH` and `env`. */
function probe(installed: Installed, path: string, env: NodeJS.ProcessEnv = {}): Probe {
  const script = `
    try {
      const m = await import('waitprep');
      console.log(JSON.stringify({ loaded: { implementation: m.implementation, reason: m.implementationReason,
        library: m.nativeLibraryPath(), loadError: m.nativeLoadError ? m.nativeLoadError.message : null } }));
    } catch (error) {
      console.log(JSON.stringify({ error: { code: error.code, message: error.message } }));
    }`;
  const out = run(process.execPath, ['--input-type=module', '-e', script], { cwd: installed.project, env: { ...cleanEnv(path), WAITPREP_NO_FALLBACK_WARNING: '1', ...env } });
  return JSON.parse(out.stdout) as Probe;
}

const installRecord = (installed: Installed) => JSON.parse(readFileSync(join(installed.pkg, 'build', 'waitprep-install.json'), 'utf8')) as { outcome: string; reason: string };

describe('the package installed as a dependency', () => {
  const withCompiler = process.env.PATH ?? '';
  // Set up in beforeAll, so that collecting the skipped suite makes nothing.
  let scratch = '';
  let noCompiler = '';
  afterAll(() => {
    if (scratch !== '') rmSync(scratch, { recursive: true, force: true });
  });
  /** The package as packed from this checkout, less any prebuilds/ the checkout has: the source-only tarball. */
  let source = '';
  /** Where that tarball was unpacked. */
  let unpacked = '';

  beforeAll(() => {
    scratch = mkdtempSync(join(tmpdir(), 'waitprep-install-'));
    noCompiler = pathWithoutCompilers(join(scratch, 'no-compiler-bin'));
    expect(existsSync(join(root, 'dist', 'index.js')), 'dist/ is built (npm run build)').toBe(true);
    const env = cleanEnv(withCompiler);
    const first = pack(root, scratch, env);
    mkdirSync(join(scratch, 'unpacked'));
    run('tar', ['-xzf', first, '-C', join(scratch, 'unpacked')], { cwd: scratch, env });
    unpacked = join(scratch, 'unpacked', 'package');
    rmSync(join(unpacked, 'prebuilds'), { recursive: true, force: true });
    mkdirSync(join(scratch, 'source'));
    source = pack(unpacked, join(scratch, 'source'), env);
  }, HOOK_TIMEOUT);

  describe.runIf(runsIf('install-paths: with a compiler', BUILD_TOOLS))('with a compiler: node-gyp builds the addon and libwaitprep.so', () => {
    let installed: Installed;
    beforeAll(() => {
      installed = install('with a compiler', source, join(scratch, 'with-compiler'), withCompiler);
    }, HOOK_TIMEOUT);

    it('loads the addon, and nativeLibraryPath() is build/Release/libwaitprep.so', () => {
      expect(installRecord(installed)).toMatchObject({ outcome: 'built', reason: 'the native addon and libwaitprep.so were built with node-gyp' });
      expect(probe(installed, withCompiler).loaded).toEqual({
        implementation: 'native',
        reason: 'the Node-API addon loaded',
        library: join(installed.pkg, 'build', 'Release', 'libwaitprep.so'),
        loadError: null,
      });
    });
  });

  describe('without a compiler: the JavaScript fallback, and the reason names the compiler', () => {
    let installed: Installed;
    beforeAll(() => {
      installed = install('without a compiler', source, join(scratch, 'without-compiler'), noCompiler);
    }, HOOK_TIMEOUT);

    it('PATH has no compiler or build tool', () => {
      for (const tool of ['cc', 'c++', 'g++', 'gcc', 'clang++', 'make', 'cmake']) {
        expect(spawnSync(tool, ['--version'], { env: { PATH: noCompiler } }).error, tool).toBeDefined();
      }
    });
    it('installs, says why on the install output, and loads the fallback with that reason', () => {
      expect(installed.log).toContain('waitprep: no C++ compiler on PATH');
      expect(probe(installed, noCompiler).loaded).toEqual({
        implementation: 'js',
        reason: 'the Node-API addon was not built at install: no C++ compiler on PATH (c++, g++, clang++ or $CXX); using the JavaScript fallback',
        library: null,
        loadError: expect.stringMatching(/^No native build was found/),
      });
    });
    it('WAITPREP_IMPLEMENTATION=native refuses to load, naming the missing compiler and how to build', () => {
      const { error } = probe(installed, noCompiler, { WAITPREP_IMPLEMENTATION: 'native' });
      expect(error?.code).toBe('ERR_NATIVE_UNAVAILABLE');
      expect(error?.message).toContain('the Node-API addon was not built at install: no C++ compiler on PATH');
      expect(error?.message).toContain('npm rebuild waitprep');
    });
  });

  describe.runIf(runsIf('install-paths: prebuilds', BUILD_TOOLS))('prebuilds from prebuildify, installed without a compiler', () => {
    let installed: Installed;
    let shipped: string[] = [];
    beforeAll(() => {
      // The maintainer's step: `npm run prebuildify` in the package, with its dev dependencies.
      const stage = join(scratch, 'prebuild-stage');
      cpSync(unpacked, stage, { recursive: true });
      symlinkSync(join(root, 'node_modules'), join(stage, 'node_modules'));
      run('npm', ['run', '-s', 'prebuildify'], { cwd: stage, env: cleanEnv(withCompiler) });
      rmSync(join(stage, 'build'), { recursive: true, force: true });
      shipped = readdirSync(join(stage, 'prebuilds', platformDir)).sort();
      mkdirSync(join(scratch, 'prebuilt'));
      const tarball = pack(stage, join(scratch, 'prebuilt'), cleanEnv(withCompiler));
      installed = install('prebuilds, without a compiler', tarball, join(scratch, 'prebuilds-install'), noCompiler);
    }, HOOK_TIMEOUT);

    it(`prebuilds/${platformDir} ships libwaitprep.so beside the addon`, () => {
      expect(shipped).toEqual(['libwaitprep.so', 'waitprep.node']);
    });
    it('the install uses the prebuild, which loads; nativeLibraryPath() is the shipped libwaitprep.so', () => {
      expect(installRecord(installed)).toMatchObject({ outcome: 'prebuild' });
      expect(existsSync(join(installed.pkg, 'build', 'Release'))).toBe(false);
      expect(probe(installed, noCompiler).loaded).toEqual({
        implementation: 'native',
        reason: 'the Node-API addon loaded',
        library: join(installed.pkg, 'prebuilds', platformDir, 'libwaitprep.so'),
        loadError: null,
      });
    });
  });
});
