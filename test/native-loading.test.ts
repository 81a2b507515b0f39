// The native part is optional: install never fails without a compiler, the
// loader says which implementation it chose and why, and a switch forces the
// JavaScript fallback.
import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { implementation, implementationReason, nativeLibraryPath, nativeLoadError } from '../lib/index.js';

const root = join(import.meta.dirname, '..');

function loadIn(dir: string, env: NodeJS.ProcessEnv = {}): { implementation: string; reason: string; error: string | null } {
  const out = execFileSync(
    process.execPath,
    ['--input-type=module', '-e', `
      const m = await import(${JSON.stringify(join(dir, 'dist', 'index.js'))});
      console.log(JSON.stringify({ implementation: m.implementation, reason: m.implementationReason,
        error: m.nativeLoadError ? m.nativeLoadError.message : null }));`],
    { encoding: 'utf8', env: { ...process.env, ...env } },
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
