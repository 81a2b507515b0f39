// The native part is optional: install never fails without a compiler, the
// loader says which implementation it chose and why, and a switch forces the
// JavaScript fallback.
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { implementation, implementationReason, nativeLibraryPath, nativeLoadError } from '../../lib/index.js';
import { LAYOUT, STATUS } from '../../lib/lease-table/layout.js';
import { layoutMismatch, type NativeAddon } from '../../lib/lease-table/native.js';
import { NATIVE, runsIf } from '../skip-reasons.js';

const root = join(import.meta.dirname, '..', '..');

/** The addon node-gyp-build finds in this checkout, without the loader's layout check, or why there is none. */
function loadBuiltAddon(): NativeAddon | Error {
  try {
    return (createRequire(import.meta.url)('node-gyp-build') as (dir: string) => NativeAddon)(root);
  } catch (error) {
    return error instanceof Error ? error : new Error(String(error));
  }
}

/**
 * Imports the package built in `dir` in a child, after the CommonJS `preload` script if given.
 * The caller's own WAITPREP_IMPLEMENTATION is left out, so each case sets only what it tests.
 */
function loadIn(dir: string, env: NodeJS.ProcessEnv = {}, preload?: string): { implementation: string; reason: string; error: string | null } {
  const { WAITPREP_IMPLEMENTATION: _ignored, ...inherited } = process.env;
  const out = execFileSync(
    process.execPath,
    [...(preload === undefined ? [] : ['--require', preload]), '--input-type=module', '-e', `
      const m = await import(${JSON.stringify(join(dir, 'dist', 'index.js'))});
      console.log(JSON.stringify({ implementation: m.implementation, reason: m.implementationReason,
        error: m.nativeLoadError ? m.nativeLoadError.message : null }));`],
    { encoding: 'utf8', env: { ...inherited, ...env } },
  );
  return JSON.parse(out);
}

/**
 * Imports the package built in `dir` in a child with only `env` added to this environment, less
 * the switches this file tests: what it exported, or the error the import threw, and its stderr.
 */
function importIn(dir: string, env: NodeJS.ProcessEnv = {}): { loaded?: { implementation: string; reason: string; library: string | null }; error?: { code: string; message: string; cause: string | null }; stderr: string } {
  const { WAITPREP_IMPLEMENTATION: _i, WAITPREP_NO_FALLBACK_WARNING: _w, ...inherited } = process.env;
  const index = pathToFileURL(join(dir, 'dist', 'index.js')).href;
  const result = spawnSync(process.execPath, ['--input-type=module', '-e', `
    try {
      const m = await import(${JSON.stringify(index)});
      // A second copy of the loader (another URL, so evaluated again) in the same process.
      await import(${JSON.stringify(`${pathToFileURL(join(dir, 'dist', 'lease-table', 'native.js')).href}?second-copy`)});
      console.log(JSON.stringify({ loaded: { implementation: m.implementation, reason: m.implementationReason, library: m.nativeLibraryPath() } }));
    } catch (error) {
      console.log(JSON.stringify({ error: { code: error.code, message: error.message, cause: error.cause ? error.cause.message : null } }));
    }`], { encoding: 'utf8', env: { ...inherited, ...env } });
  expect(result.status, result.stderr).toBe(0);
  return { ...JSON.parse(result.stdout), stderr: result.stderr };
}

/** Node's print of each WAITPREP_FALLBACK warning on stderr. */
const fallbackWarnings = (stderr: string) => stderr.split('\n').filter((line) => line.includes('[WAITPREP_FALLBACK]'));

describe('native loading', () => {
  const scratch = mkdtempSync(join(tmpdir(), 'waitprep-load-'));
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));

  /** A copy of the package with no build/ and no prebuilds/, as an install without a compiler leaves it. */
  function unbuiltCopy(name: string): string {
    const pkg = join(scratch, name);
    cpSync(join(root, 'dist'), join(pkg, 'dist'), { recursive: true });
    cpSync(join(root, 'package.json'), join(pkg, 'package.json'));
    for (const script of ['install-native.js', 'build-advice.cjs']) cpSync(join(root, 'scripts', script), join(pkg, 'scripts', script));
    symlinkSync(join(root, 'node_modules'), join(pkg, 'node_modules'));
    return pkg;
  }
  const unbuilt = unbuiltCopy('pkg');

  it('reports which implementation loaded and why', () => {
    expect(['native', 'js']).toContain(implementation);
    expect(implementationReason.length).toBeGreaterThan(0);
    if (implementation === 'native') {
      expect(nativeLoadError).toBeNull();
      expect(nativeLibraryPath()).toMatch(/libwaitprep\.so$/);
      expect(existsSync(nativeLibraryPath()!)).toBe(true);
    } else {
      expect(implementationReason).toMatch(/fallback/);
    }
  });

  it('WAITPREP_IMPLEMENTATION=js forces the JavaScript fallback', () => {
    const loaded = loadIn(root, { WAITPREP_IMPLEMENTATION: 'js' });
    expect(loaded).toEqual({ implementation: 'js', reason: expect.stringMatching(/WAITPREP_IMPLEMENTATION=js/), error: null });
  });

  it('falls back to JavaScript with the load error kept when no addon is built', () => {
    const loaded = loadIn(unbuilt);
    expect(loaded.implementation).toBe('js');
    // No build and no install record: the install step never ran, which the reason says.
    expect(loaded.reason).toMatch(/^no Node-API addon is built, and the install step left no record \(it did not run: .*--ignore-scripts.*\); using the JavaScript fallback$/);
    expect(loaded.error).toMatch(/No native build was found/);
  });

  describe('the fallback warning', () => {
    it("'auto' falling back warns once per process through process.emitWarning, with the reason and how to build", () => {
      const { loaded, stderr } = importIn(unbuilt);
      expect(loaded!.implementation).toBe('js');
      const warnings = fallbackWarnings(stderr);
      expect(warnings).toHaveLength(1);
      expect(warnings[0]).toContain(`waitprep is using its JavaScript fallback: ${loaded!.reason.replace(/; using the JavaScript fallback$/, '')}`);
      expect(stderr).toContain('npm rebuild waitprep');
      expect(stderr).toContain('WAITPREP_NO_FALLBACK_WARNING=1');
    });
    it('WAITPREP_NO_FALLBACK_WARNING=1 silences it and keeps the fallback', () => {
      const { loaded, stderr } = importIn(unbuilt, { WAITPREP_NO_FALLBACK_WARNING: '1' });
      expect(loaded!.implementation).toBe('js');
      expect(fallbackWarnings(stderr)).toEqual([]);
    });
    it('WAITPREP_IMPLEMENTATION=js chooses the fallback, so nothing warns', () => {
      const { loaded, stderr } = importIn(unbuilt, { WAITPREP_IMPLEMENTATION: 'js' });
      expect(loaded!.reason).toMatch(/WAITPREP_IMPLEMENTATION=js/);
      expect(fallbackWarnings(stderr)).toEqual([]);
    });
    it.runIf(runsIf('native-loading: no fallback warning with the addon', NATIVE))('a process whose addon loaded does not warn', () => {
      const { loaded, stderr } = importIn(root);
      expect(loaded!.implementation).toBe('native');
      expect(fallbackWarnings(stderr)).toEqual([]);
    });
  });

  describe('WAITPREP_IMPLEMENTATION', () => {
    it('=native without the addon refuses to load the package: ERR_NATIVE_UNAVAILABLE, why, and how to build', () => {
      const { loaded, error } = importIn(unbuilt, { WAITPREP_IMPLEMENTATION: 'native' });
      expect(loaded).toBeUndefined();
      expect(error!.code).toBe('ERR_NATIVE_UNAVAILABLE');
      expect(error!.message).toMatch(/^WAITPREP_IMPLEMENTATION=native needs the native implementation, but no Node-API addon is built, and the install step left no record/);
      expect(error!.message).toContain('To get it: install a C++ compiler, make and python3, then run `npm rebuild waitprep`');
      expect(error!.cause).toMatch(/No native build was found/);
    });
    it.runIf(runsIf('native-loading: WAITPREP_IMPLEMENTATION=native with the addon', NATIVE))('=native with the addon loads it', () => {
      expect(importIn(root, { WAITPREP_IMPLEMENTATION: 'native' }).loaded).toMatchObject({ implementation: 'native', reason: 'the Node-API addon loaded' });
    });
    it('=js: a caller that needs the addon is told to unset it, not to build', () => {
      const native = pathToFileURL(join(root, 'dist', 'lease-table', 'native.js')).href;
      const out = execFileSync(process.execPath, ['--input-type=module', '-e', `
        const { nativeUnavailableError } = await import(${JSON.stringify(native)});
        const error = nativeUnavailableError('openLeaseTable("t")');
        console.log(JSON.stringify({ code: error.code, message: error.message }));`], { encoding: 'utf8', env: { ...process.env, WAITPREP_IMPLEMENTATION: 'js' } });
      expect(JSON.parse(out)).toEqual({
        code: 'ERR_NATIVE_UNAVAILABLE',
        message: 'openLeaseTable("t") needs the native implementation, but WAITPREP_IMPLEMENTATION=js forces the JavaScript fallback. To get it: unset WAITPREP_IMPLEMENTATION, or set it to native',
      });
    });
    it("=js: openLeaseTable({ implementation: 'native' }) says why it cannot have it and what to do", () => {
      const index = pathToFileURL(join(root, 'dist', 'index.js')).href;
      const out = execFileSync(process.execPath, ['--input-type=module', '-e', `
        const { openLeaseTable } = await import(${JSON.stringify(index)});
        try { openLeaseTable({ name: 't', role: 'consumer', implementation: 'native' }); } catch (error) {
          console.log(JSON.stringify({ code: error.code, message: error.message }));
        }`], { encoding: 'utf8', env: { ...process.env, WAITPREP_IMPLEMENTATION: 'js' } });
      expect(JSON.parse(out)).toEqual({
        code: 'ERR_NATIVE_UNAVAILABLE',
        message: `openLeaseTable("t") with implementation 'native' needs the native implementation, but WAITPREP_IMPLEMENTATION=js forces the JavaScript fallback. To get it: unset WAITPREP_IMPLEMENTATION, or set it to native`,
      });
    });
    it.each(['auto', ''])('=%j is the default, auto', (value) => {
      expect(importIn(unbuilt, { WAITPREP_IMPLEMENTATION: value, WAITPREP_NO_FALLBACK_WARNING: '1' }).loaded!.implementation).toBe('js');
    });
    it.each(['Native', 'nativ', 'none', '0'])('=%j is refused with ERR_INVALID_ENV, not ignored', (value) => {
      const { loaded, error } = importIn(root, { WAITPREP_IMPLEMENTATION: value });
      expect(loaded).toBeUndefined();
      expect(error).toEqual({ code: 'ERR_INVALID_ENV', message: `Expected WAITPREP_IMPLEMENTATION to be 'auto', 'native' or 'js' (or unset), got ${JSON.stringify(value)}`, cause: null });
    });
  });

  it.runIf(runsIf('native-loading: the renumbered-status check', NATIVE))('an addon with a renumbered status is kept out, with a reason that names the status', () => {
    // Loaded before the package: the addon's exports are cached, so the package's load sees this table.
    const preload = join(scratch, 'renumber-status.cjs');
    writeFileSync(preload, `
      const addon = require(${JSON.stringify(join(root, 'node_modules', 'node-gyp-build'))})(${JSON.stringify(root)});
      addon.statuses.WP_MISS_EVICTING = 9;`);
    const loaded = loadIn(root, {}, preload);
    expect(loaded.implementation).toBe('js');
    expect(loaded.reason).toBe(
      'waitprep addon layout differs from the JavaScript layout: status WP_MISS_EVICTING is 9 in the addon, 3 in JavaScript; using the JavaScript fallback',
    );
    expect(loaded.error).toMatch(/WP_MISS_EVICTING/);
  });

  describe('the layout check covers every status', () => {
    const statuses = Object.fromEntries(Object.entries(STATUS).map(([name, value]) => [`WP_${name}`, value]));
    const check = (table: unknown) => layoutMismatch({ layout: LAYOUT, statuses: table as Record<string, number> });

    // The built addon, loaded here past the loader: nativeAddon is null exactly when this check
    // failed at load, so only the raw addon can show a build whose table has drifted from STATUS.
    const built = loadBuiltAddon();
    const isBuilt = !(built instanceof Error);
    const unbuilt = isBuilt ? '' : `no addon is built (${built.message.split('\n')[0]})`;
    it.runIf(runsIf("native-loading: the built addon's status table", [isBuilt, unbuilt]))('passes the built addon’s own table', () => {
      expect(check((built as NativeAddon).statuses)).toBeNull();
    });
    it('names a renumbered status', () => {
      expect(check({ ...statuses, WP_STALE: 25 })).toBe('status WP_STALE is 25 in the addon, 24 in JavaScript');
    });
    it('names a status the addon lacks', () => {
      const { WP_MISS_CONTENDED: _, ...fewer } = statuses;
      expect(check(fewer)).toBe('status WP_MISS_CONTENDED is missing in the addon, 4 in JavaScript');
    });
    it('names a status JavaScript lacks', () => {
      expect(check({ ...statuses, WP_MISS_NEW: 9 })).toBe('status WP_MISS_NEW is 9 in the addon, missing in JavaScript');
    });
    it('refuses an addon without a status table', () => {
      expect(check(undefined)).toBe('the addon reports no status table');
    });
  });

  describe('the install step', () => {
    /** Runs the copy's install step with `PATH` and npm's node-gyp set to `nodeGyp`; its stderr and record. */
    function install(pkg: string, path: string, nodeGyp: string): { stderr: string; record: { outcome: string; reason: string } } {
      const result = spawnSync(process.execPath, [join(pkg, 'scripts', 'install-native.js')], {
        cwd: pkg,
        encoding: 'utf8',
        env: { PATH: path, npm_config_node_gyp: nodeGyp },
      });
      expect(result.status, result.stderr).toBe(0);
      return { stderr: result.stderr, record: JSON.parse(readFileSync(join(pkg, 'build', 'waitprep-install.json'), 'utf8')) };
    }

    it('succeeds with no compiler or build tool at all, and implementationReason names the missing compiler', () => {
      const pkg = unbuiltCopy('no-compiler');
      const { stderr, record } = install(pkg, join(scratch, 'no-tools'), '');
      expect(stderr).toMatch(/JavaScript fallback will be used/);
      expect(record).toMatchObject({ outcome: 'skipped', reason: 'no C++ compiler on PATH (c++, g++, clang++ or $CXX)' });
      const loaded = loadIn(pkg);
      expect(loaded.implementation).toBe('js');
      expect(loaded.reason).toBe('the Node-API addon was not built at install: no C++ compiler on PATH (c++, g++, clang++ or $CXX); using the JavaScript fallback');
      expect(loaded.error).toMatch(/No native build was found/);
    });

    it("a folder whose dependencies npm did not install: says so and builds nothing, instead of node-gyp's failure", () => {
      // What `npm install /path/to/clone` runs the step in: the folder, with no node_modules.
      const pkg = unbuiltCopy('no-dependencies');
      rmSync(join(pkg, 'node_modules'));
      const nodeGyp = join(scratch, 'node-gyp-must-not-run.js');
      writeFileSync(nodeGyp, "process.stderr.write('node-gyp ran\\n'); process.exit(1);");
      const { stderr, record } = install(pkg, process.env.PATH ?? '', nodeGyp);
      expect(stderr).not.toContain('node-gyp ran');
      expect(stderr).toMatch(/dependencies are not installed here \(node-addon-api is missing\)/);
      expect(record).toMatchObject({ outcome: 'skipped', reason: expect.stringMatching(/node-addon-api is missing/) });
    });

    const hasScript = spawnSync('script', ['--version'], { stdio: 'ignore' }).status === 0;
    it.runIf(runsIf('native-loading: the install line on the terminal', [hasScript, "util-linux's script(1) is not installed"]))(
      'with its output captured, as npm captures it, the step still tells the terminal that it built nothing and why',
      () => {
        const pkg = unbuiltCopy('terminal');
        // script(1) gives the step a terminal; its stderr, what npm would capture, goes nowhere.
        const command = `env -u WAITPREP_NO_FALLBACK_WARNING PATH=${join(scratch, 'no-tools')} ${process.execPath} ${join(pkg, 'scripts', 'install-native.js')} 2>/dev/null`;
        const run = spawnSync('script', ['-qec', command, '/dev/null'], { cwd: pkg, encoding: 'utf8', timeout: 30_000 });
        expect(run.status).toBe(0);
        expect(run.stdout).toMatch(/^waitprep: no C\+\+ compiler on PATH .*JavaScript fallback will be used\. .*Check what loads: `npx waitprep doctor`\r?$/m);
      },
    );

    it('the install step, the fallback warning and ERR_NATIVE_UNAVAILABLE give the same advice on how to build', () => {
      const advice = createRequire(import.meta.url)('../../scripts/build-advice.cjs') as string;
      const pkg = unbuiltCopy('same-advice');
      expect(install(pkg, join(scratch, 'no-tools'), '').stderr).toContain(`To build it later: ${advice}`);
      expect(importIn(pkg).stderr).toContain(`To get the addon: ${advice}.`);
      expect(importIn(pkg, { WAITPREP_IMPLEMENTATION: 'native' }).error!.message).toContain(`To get it: ${advice}`);
    });

    it('a failed build: implementationReason names the tool and its first error', () => {
      // Stand-ins: a compiler and make that answer --version, and a node-gyp whose build fails
      // the way a compile error does (the real tools' output is the same shape).
      const pkg = unbuiltCopy('failed-build');
      const tools = join(scratch, 'stand-in-tools');
      mkdirSync(tools);
      for (const tool of ['c++', 'make']) {
        writeFileSync(join(tools, tool), '#!/bin/sh\nexit 0\n');
        chmodSync(join(tools, tool), 0o755);
      }
      const nodeGyp = join(scratch, 'failing-node-gyp.js');
      writeFileSync(nodeGyp, `process.stderr.write([
        'gyp info using node-gyp@11.0.0',
        '../native/src/table.c:12:3: error: unknown type name ‘wp_slot’',
        'make: *** [waitprep.target.mk:120: Release/obj.target/waitprep/native/src/table.o] Error 1',
        'gyp ERR! build error',
        'gyp ERR! stack Error: make failed with exit code: 2',
      ].join('\\n') + '\\n'); process.exit(1);`);
      const { stderr, record } = install(pkg, tools, nodeGyp);
      expect(stderr).toContain('gyp ERR! build error');
      const failure = "node-gyp failed (exit 1; first error: ../native/src/table.c:12:3: error: unknown type name ‘wp_slot’)";
      expect(record).toMatchObject({ outcome: 'failed', reason: failure });
      expect(loadIn(pkg).reason).toBe(`the Node-API addon was not built at install: ${failure}; using the JavaScript fallback`);
    });
  });

  it.runIf(runsIf("native-loading: nativeLibraryPath's prebuild lookup", NATIVE))('nativeLibraryPath() finds libwaitprep.so beside an addon loaded from prebuilds/<platform>-<arch>', () => {
    const pkg = unbuiltCopy('prebuilt');
    const prebuilds = join(pkg, 'prebuilds', `${process.platform}-${process.arch}`);
    mkdirSync(prebuilds, { recursive: true });
    // The checkout's own build, moved to where prebuildify puts it.
    const built = dirname(nativeLibraryPath()!);
    cpSync(join(built, 'waitprep.node'), join(prebuilds, 'waitprep.node'));
    cpSync(join(built, 'libwaitprep.so'), join(prebuilds, 'libwaitprep.so'));
    expect(importIn(pkg).loaded).toEqual({ implementation: 'native', reason: 'the Node-API addon loaded', library: join(prebuilds, 'libwaitprep.so') });
  });
});
