// The Python package (python/waitprep) from npm test: its own unittest suite (python/tests:
// keys against test/vectors/keys.json, both table roles, errors, threads on one handle) run from
// the checkout against the library nativeLibraryPath() names, and once more with no library, where
// the key tests still run and every table test is skipped saying why.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { nativeLibraryPath } from '../../lib/index.js';
import { runsIf } from '../skip-reasons.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const hasPython = spawnSync('python3', ['--version'], { encoding: 'utf8' }).status === 0;
const libPath = nativeLibraryPath();

/** `python3 -m unittest discover -s python/tests -v` from the checkout; its exit status and both streams. */
function unittest(env: NodeJS.ProcessEnv): { status: number | null; output: string } {
  const { WAITPREP_LIB: _old, ...rest } = process.env;
  const run = spawnSync('python3', ['-m', 'unittest', 'discover', '-s', 'python/tests', '-v'], {
    cwd: root,
    env: { ...rest, PYTHONPATH: `${root}python`, PYTHONDONTWRITEBYTECODE: '1', WAITPREP_THREAD_SECONDS: '3', ...env },
    encoding: 'utf8',
    timeout: 120_000,
  });
  return { status: run.status, output: `${run.stdout}${run.stderr}` };
}

describe.runIf(runsIf('python package', [hasPython, 'python3 is not installed']))('python/waitprep: the package\'s unittest suite', () => {
  it.runIf(runsIf('python package against the library', [libPath !== null, 'libwaitprep.so is not built']))(
    'passes against the built libwaitprep.so, skipping nothing',
    () => {
      const { status, output } = unittest({ WAITPREP_LIBRARY: libPath! });
      expect(status, output).toBe(0);
      expect(output).toMatch(/^Ran [1-9]\d* tests? in /m);
      expect(output).toMatch(/^OK$/m);
      expect(output).not.toMatch(/ \.\.\. skipped /);
      console.log(output.match(/^python threads: .*$/m)?.[0] ?? 'python threads: no figures printed');
    },
    120_000,
  );

  it('without the library, runs the key tests and skips each table test naming where it looked', () => {
    const { status, output } = unittest({ WAITPREP_LIBRARY: '/nonexistent/libwaitprep.so' });
    expect(status, output).toBe(0);
    expect(output).toMatch(/test_every_vector_reproduces_its_bytes_and_digest .* ok$/m);
    expect(output).toMatch(/skipped 'libwaitprep\.so: libwaitprep\.so not found; looked at: \/nonexistent\/libwaitprep\.so \(WAITPREP_LIBRARY\): no such file/);
    expect(output).toMatch(/^OK \(skipped=[1-9]\d*\)$/m);
  }, 60_000);
});
