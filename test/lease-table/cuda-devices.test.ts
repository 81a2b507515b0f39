// cudaDevices() dlopens libcuda.so.1 only when called. With no driver (this
// machine) it says so; with a fake driver on LD_LIBRARY_PATH, in a child
// process, it lists the fake's devices and UUIDs.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { implementation } from '../../lib/index.js';
import { NATIVE, runsIf } from '../skip-reasons.js';

const root = join(import.meta.dirname, '..', '..');
const probe = `const m = await import(${JSON.stringify(join(root, 'dist', 'index.js'))}); console.log(JSON.stringify(m.cudaDevices()));`;
const hasCompiler = spawnSync('cc', ['--version'], { stdio: 'ignore' }).status === 0;

function devicesIn(env: NodeJS.ProcessEnv): { devices: Array<{ ordinal: number; uuid: string }> | null; reason: string | null } {
  return JSON.parse(execFileSync(process.execPath, ['--input-type=module', '-e', probe], { encoding: 'utf8', env: { ...process.env, ...env } }));
}

describe('cudaDevices', () => {
  const scratch = mkdtempSync(join(tmpdir(), 'waitprep-cuda-'));
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));

  it('says why there are no devices when the driver is absent, and everything else still loads', () => {
    const result = devicesIn({ LD_LIBRARY_PATH: join(scratch, 'nothing-here') });
    expect(result.devices).toBeNull();
    expect(result.reason).toMatch(implementation === 'native' ? /libcuda\.so\.1/ : /addon is not loaded/);
  });

  it.runIf(runsIf('cudaDevices() with a driver on LD_LIBRARY_PATH', NATIVE, [hasCompiler, 'no C compiler (cc) on PATH']))('lists the devices of a driver found on LD_LIBRARY_PATH', () => {
    execFileSync('cc', ['-shared', '-fPIC', '-o', join(scratch, 'libcuda.so.1'), join(root, 'test', 'fixtures', 'fake-libcuda.c')]);
    const result = devicesIn({ LD_LIBRARY_PATH: scratch });
    expect(result.reason).toBeNull();
    expect(result.devices).toEqual([
      { ordinal: 0, uuid: 'GPU-40414243-4445-4647-4849-4a4b4c4d4e4f' },
      { ordinal: 1, uuid: 'GPU-50515253-5455-5657-5859-5a5b5c5d5e5f' },
    ]);
  });

  it('is not touched when waitprep loads: loading with a broken driver on the path still works', () => {
    // A "libcuda.so.1" that is not a library: dlopen would fail loudly if anything opened it at load.
    const broken = join(scratch, 'broken');
    execFileSync('mkdir', ['-p', broken]);
    execFileSync('sh', ['-c', `echo garbage > ${join(broken, 'libcuda.so.1')}`]);
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', `const m = await import(${JSON.stringify(join(root, 'dist', 'index.js'))}); console.log(m.implementation);`], {
      encoding: 'utf8',
      env: { ...process.env, LD_LIBRARY_PATH: broken },
    });
    expect(out.trim()).toBe(implementation);
  });
});
