import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));
const hasPython = spawnSync('python3', ['--version'], { encoding: 'utf8' }).status === 0;

describe.runIf(hasPython)('examples/python reference encoder', () => {
  it('reproduces every vector and rejects every invalid case in test/vectors/keys.json', () => {
    const result = spawnSync('python3', ['examples/python/check_vectors.py', 'test/vectors/keys.json'], {
      cwd: root,
      encoding: 'utf8',
      env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1' },
    });
    const output = `${result.stdout}${result.stderr}`;
    expect(result.status, output).toBe(0);
    expect(result.stdout).toMatch(/^[1-9]\d* passed, 0 failed$/m);
  });
});
