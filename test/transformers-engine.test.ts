// The transformers engine example (examples/transformers-engine/): its Python unittest suite and a
// tiny replay through the orchestrator, run with the interpreter of the venv
// `npm run e2e:transformers` creates (or TFENGINE_PYTHON), on the tiny geometry. Where that venv
// is missing or cannot import torch and transformers, or libwaitprep.so is not built, it is
// skipped saying so: npm test never installs torch.
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
// @ts-expect-error: a plain ES module of the example, without type declarations
import { NOISE_S, runReplay, summarize } from '../examples/transformers-engine/replay.mjs';
// @ts-expect-error: as above
import { formatReport } from '../examples/transformers-engine/report.mjs';
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

    it('a tiny replay with the planner: it admits through the coordinator, the storage tier evicts by its values, hits keep the same output', async () => {
      // An arena of about three contexts: preparing one evicts another.
      const report = await runReplay({ profile: 'tiny', seed: 3, cacheTokens: 0, settleBeforeWake: true, timeScale: 0.05, planner: true, arenaTokens: 1200 });
      expect(report.planner).toBe(true);
      expect(report.plannerStats.begins).toBe(report.wakes);
      expect(report.plannerStats.admissions).toBeGreaterThan(0);
      expect(report.storage.valueUpdates).toBeGreaterThan(0);
      expect(report.storage.valueUpdates).toBe(report.plannerStats.evictionValueUpdates);
      expect(report.storage.evicted).toBeGreaterThan(0);
      expect(report.byWake.hit).toBeGreaterThan(0);
      expect(report.byPath.leased).toBe(report.byWake.hit);
      expect(report.sameOutput.sameTokens).toBe(report.byWake.hit);
      expect(report.preparation.byResult.failed ?? 0).toBe(0);
      expect(report.pinnedSlotsAtEnd).toBe(0);
    }, 300_000);
  });
});

describe("the replay's report (no model needed: turns made up)", () => {
  /** A wake turn leased from a hit, checked against a full prefill of the same prompt. */
  const hit = (ttftS: number, fullPrefillS: number, bitExact = false) => ({
    agent: 'agent-0', kind: 'wake', tool: 'file', toolS: 1, wake: 'hit', path: 'leased', tokens: 1200, cachedTokens: 1000,
    ttftS, restoreS: 0.04, prefillS: ttftS - 0.04, waitedS: 0, bytesWritten: 0, bytesRead: 8e6,
    check: { fullPrefillS, bitExact, sameTokens: true, maxAbsDiff: 2e-7, logitScale: 1.5 },
  });
  const first = { agent: 'agent-0', kind: 'first', tool: null, toolS: 0, wake: null, path: 'recompute', cause: 'first', tokens: 1000, cachedTokens: 0, ttftS: 1, restoreS: 0, prefillS: 1, waitedS: 0, bytesWritten: 8e6, bytesRead: 0 };
  const prep = { result: 'succeeded', value: { alreadyReady: false, prepS: 0.03, sizeBytes: 8e6 }, error: null };

  /** The text report of a made-up run of `turns`. */
  function report(profile: string, turns: object[]): string {
    const summary = summarize([first, ...turns], [prep]);
    return formatReport({
      ...summary, profile, seed: 7, agents: 1, timeScale: 1, maxWaitS: 4, wallS: 10, lateLookup: false, admissions: { queued: turns.length },
      engine: { geometry: 'g', identity: { profile: 'p', runtime: 'r' }, threads: 2, cacheBudgetBytes: 0, kvBytesPerToken: 8192 },
      storage: { budgetBytes: 1, prepared: 1, alreadyReady: 0, evicted: 0, evictRefusedPinned: 0 },
    }) as string;
  }

  it('says a profile is too small to show a saving when its prompts prefill within the timing noise, and which profiles show it', () => {
    const text = report('tiny', [hit(0.03, NOISE_S / 2), hit(0.02, NOISE_S / 3)]);
    expect(text).toMatch(/^ {2}profile tiny is too small to show a saving: its prompts' full prefill takes \d+ ms \(p50\), under the 100 ms this host's timing noise reaches/m);
    expect(text).toMatch(/--profile medium \(under 3 minutes on 2 cores\) and --profile large show the real balance/);
  });

  it('says so when a hit saved nothing, and says nothing of the kind when hits saved prefill', () => {
    expect(report('tiny', [hit(1.3, 1.0), hit(1.2, 1.1)])).toMatch(/too small to show a saving: a leased turn \(restore p50 40 ms plus the new tokens' prefill\) took as long as the full prefill/);
    const shown = report('medium', [hit(0.4, 3.0), hit(0.5, 2.5)]);
    expect(shown).toMatch(/^prefill saved per leased hit .*: p50 \d+ ms/m);
    expect(shown).not.toMatch(/too small/);
  });

  it('reads the same-output check as what it is: same tokens and within tolerance, bit-identity not required', () => {
    const text = report('medium', [hit(0.4, 3.0), hit(0.5, 2.5, true)]);
    expect(text).toContain('same output: 2 of 2 leased hits decoded the same greedy tokens as a full recompute of the same prompt;');
    expect(text).toMatch(/their logits differ from it by at most 2\.00e-7, within the tolerance 1\.50e-5 \(1e-5 x the largest logit, 1\.50\)\./);
    expect(text).toContain('1 of 2 were also bit-identical: not required');
    expect(text).not.toMatch(/\d bit-exact logits/);
  });
});
