// The native part is optional: install never fails without a compiler, the
// loader says which implementation it chose and why, and a switch forces the
// JavaScript fallback.
import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { implementation, implementationReason, nativeLibraryPath, nativeLoadError } from '../lib/index.js';
import { LAYOUT, STATUS } from '../lib/lease-table/layout.js';
import { layoutMismatch, type NativeAddon } from '../lib/native.js';
import { NATIVE, runsIf } from './skip-reasons.js';

const root = join(import.meta.dirname, '..');

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

describe('native loading', () => {
  const scratch = mkdtempSync(join(tmpdir(), 'waitprep-load-'));
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));

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
    // A copy of the package with no build/ and no prebuilds/.
    const pkg = join(scratch, 'pkg');
    cpSync(join(root, 'dist'), join(pkg, 'dist'), { recursive: true });
    cpSync(join(root, 'package.json'), join(pkg, 'package.json'));
    symlinkSync(join(root, 'node_modules'), join(pkg, 'node_modules'));
    const loaded = loadIn(pkg);
    expect(loaded.implementation).toBe('js');
    expect(loaded.reason).toMatch(/did not load/);
    expect(loaded.error).toMatch(/No native build was found/);
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

  it('the install step succeeds with no compiler or build tool at all', () => {
    const result = spawnSync(process.execPath, [join(root, 'scripts', 'install-native.js')], {
      cwd: scratch,
      encoding: 'utf8',
      env: { PATH: join(scratch, 'no-tools'), npm_config_node_gyp: '' },
    });
    expect(result.status).toBe(0);
    expect(result.stderr).toMatch(/JavaScript fallback will be used/);
  });
});
