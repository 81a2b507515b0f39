// The transformers engine example (examples/transformers-engine/): its Python unittest suite and a
// tiny replay through the orchestrator, run with the interpreter of the venv
// `npm run e2e:transformers` creates (or TFENGINE_PYTHON), on the tiny geometry. Where that venv
// is missing or cannot import torch and transformers, or libwaitprep.so is not built, it is
// skipped saying so: npm test never installs torch.
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
// @ts-expect-error: a plain ES module of the example, without type declarations
import { runReplay } from '../examples/transformers-engine/replay.mjs';
// @ts-expect-error: as above
import { EXAMPLE_DIR, probe, pythonEnv, venvPython } from '../examples/transformers-engine/venv.mjs';
import { nativeLibraryPath } from '../lib/index.js';
import { runsIf } from './skip-reasons.js';

const found = probe() as { ok: boolean; reason?: string };
const library = nativeLibraryPath();

/** `python -m unittest <module> -v` in the example's tests folder; its exit status and both streams. */
function unittest(module: string): { status: number | null; output: string } {
  const run = spawnSync(venvPython() as string, ['-m', 'unittest', module, '-v'], {
    cwd: `${EXAMPLE_DIR}tests`,
    env: pythonEnv(library === null ? {} : { WAITPREP_LIBRARY: library }),
    encoding: 'utf8',
    timeout: 300_000,
  });
  return { status: run.status, output: `${run.stdout}${run.stderr}` };
}

function passes(module: string): void {
  const { status, output } = unittest(module);
  expect(status, output).toBe(0);
  expect(output).toMatch(/^Ran [1-9]\d* tests? in /m);
  expect(output).toMatch(/^OK$/m);
}

describe.runIf(runsIf('transformers engine', [found.ok, found.reason ?? '']))('examples/transformers-engine', () => {
  it('same output: the next turn from KV rebuilt out of bytes equals the live cache bit for bit, and a full recompute within tolerance', () => {
    passes('test_engine');
  }, 300_000);

  describe.runIf(runsIf('transformers engine with the table', [library !== null, 'libwaitprep.so is not built']))('with the lease table', () => {
    it('the storage tier publishes only checked records and never evicts a pinned one', () => {
      passes('test_storage');
    }, 300_000);

    it('identity: a changed token, task, namespace or page generation is another key, a miss, and never the original KV', () => {
      passes('test_identity');
    }, 300_000);

    it('lifetimes: eviction is refused while the engine process holds its pin; a SIGKILLed engine is reaped to nothing pinned', () => {
      passes('test_lifetimes');
    }, 300_000);

    it('a tiny replay: every wake hits once its unit settled, each hit is leased by the engine with the same output as a full recompute', async () => {
      const report = await runReplay({ profile: 'tiny', seed: 3, cacheTokens: 0, settleBeforeWake: true, timeScale: 0.01 });
      const cancelled = report.byWake['miss:cancelled'] ?? 0;
      expect(report.wakes).toBeGreaterThan(0);
      expect(report.byWake.hit + cancelled).toBe(report.wakes);
      // No engine LRU: every hit is leased, and every cancelled wait recomputes.
      expect(report.byPath.leased).toBe(report.byWake.hit);
      expect(report.preparation.byResult.failed ?? 0).toBe(0);
      expect(report.sameOutput.checkedHits).toBe(report.byWake.hit);
      expect(report.sameOutput.sameTokens).toBe(report.byWake.hit);
      expect(report.sameOutput.maxAbsDiff).toBeLessThanOrEqual(1e-5 * Math.max(1, report.sameOutput.maxLogitScale));
      expect(report.bytes.arenaToEngine).toBeGreaterThan(0);
      expect(report.pinnedSlotsAtEnd).toBe(0);
    }, 300_000);
  });
});
