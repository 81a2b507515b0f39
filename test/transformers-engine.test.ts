// The transformers engine example (examples/transformers-engine/): its Python unittest suite, run
// with the interpreter of the venv `npm run e2e:transformers` creates (or TFENGINE_PYTHON), on the
// tiny geometry. Where that venv is missing or cannot import torch and transformers, it is
// skipped saying so: npm test never installs torch.
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
// @ts-expect-error: a plain ES module of the example, without type declarations
import { EXAMPLE_DIR, probe, pythonEnv, venvPython } from '../examples/transformers-engine/venv.mjs';
import { nativeLibraryPath } from '../lib/index.js';
import { runsIf } from './skip-reasons.js';

const found = probe() as { ok: boolean; reason?: string };
const library = nativeLibraryPath();

/** `python -m unittest <modules> -v` in the example's folder; its exit status and both streams. */
function unittest(...modules: string[]): { status: number | null; output: string } {
  const run = spawnSync(venvPython() as string, ['-m', 'unittest', ...modules, '-v'], {
    cwd: `${EXAMPLE_DIR}tests`,
    env: pythonEnv(library === null ? {} : { WAITPREP_LIBRARY: library }),
    encoding: 'utf8',
    timeout: 300_000,
  });
  return { status: run.status, output: `${run.stdout}${run.stderr}` };
}

describe.runIf(runsIf('transformers engine', [found.ok, found.reason ?? '']))('examples/transformers-engine', () => {
  it('the next turn from KV rebuilt out of bytes equals the live cache bit for bit, and a full recompute within tolerance', () => {
    const { status, output } = unittest('test_engine');
    expect(status, output).toBe(0);
    expect(output).toMatch(/^Ran [1-9]\d* tests? in /m);
    expect(output).toMatch(/^OK$/m);
  }, 300_000);
});
