// The Python package's key encoder (python/waitprep/key.py) against the vectors Node passes:
// python/tests/test_key.py reads test/vectors/keys.json, and needs no library.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { runsIf } from '../skip-reasons.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const hasPython = spawnSync('python3', ['--version'], { encoding: 'utf8' }).status === 0;

describe.runIf(runsIf('python key encoder', [hasPython, 'python3 is not installed']))('python/waitprep key encoder', () => {
  it('reproduces every vector and rejects every invalid case in test/vectors/keys.json', () => {
    const result = spawnSync('python3', ['-m', 'unittest', 'discover', '-s', 'python/tests', '-p', 'test_key.py', '-v'], {
      cwd: root,
      encoding: 'utf8',
      env: { ...process.env, PYTHONPATH: `${root}python`, PYTHONDONTWRITEBYTECODE: '1' },
    });
    const output = `${result.stdout}${result.stderr}`;
    expect(result.status, output).toBe(0);
    expect(output).toMatch(/^test_every_vector_reproduces_its_bytes_and_digest .* ok$/m);
    expect(output).toMatch(/^test_every_invalid_case_is_rejected_naming_its_field .* ok$/m);
    expect(output).toMatch(/^OK$/m);
  });
});
