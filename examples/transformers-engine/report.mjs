// The replay's report as text: what a person reads after npm run e2e:transformers.

/** How far a leased hit's logits may be from a full recompute's, relative to max(1, |largest logit|). */
export const SAME_OUTPUT_TOLERANCE = 1e-5;
const ms = (s) => (s === null || s === undefined ? '-' : `${(s * 1000).toFixed(s < 0.1 ? 1 : 0)} ms`);
const pct = (p) => (p === null ? 'none' : `p50 ${ms(p.p50)}, p95 ${ms(p.p95)} (n=${p.n})`);
const mib = (b) => `${(b / 2 ** 20).toFixed(1)} MiB`;
const counts = (o) => Object.entries(o).sort(([a], [b]) => a.localeCompare(b)).map(([k, v]) => `${k} ${v}`).join(', ') || 'none';

/** The report's lines. */
export function formatReport(r) {
  const lines = [
    `transformers engine replay: a CPU run of a randomly initialised Llama-architecture model (${r.engine.geometry}),`,
    `  ${r.engine.identity.profile}, ${r.engine.threads} torch threads, ${r.engine.identity.runtime}; it measures the mechanism`,
    `  and its costs on this host, not a GPU serving speedup.`,
    `profile ${r.profile}, seed ${r.seed}, ${r.agents} agents, tool-call time x${r.timeScale} capped at ${r.maxWaitS} s, ${r.wallS.toFixed(1)} s wall${r.lateLookup ? ', late lookup after a missed wake' : ''}`,
    `engine LRU ${mib(r.engine.cacheBudgetBytes)}, arena budget ${mib(r.storage.budgetBytes)}, ${r.engine.kvBytesPerToken} bytes of KV per token`,
    '',
    `waits ${sum(r.admissions)} (${counts(r.admissions)}); wakes ${r.wakes}`,
    `wake outcome: ${counts(r.byWake)}`,
    `next turn's path: ${counts(r.byPath)}`,
    `  by outcome: ${counts(r.byWakeAndPath)}`,
    '',
    'time to first token of the turn after a wake (engine side: restore + prefill):',
    `  leased (pin, read, check, rebuild, prefill the new tokens): ${pct(r.ttftS.leased)}`,
    `  recompute (prefill the whole prompt):                       ${pct(r.ttftS.recompute)}`,
    `  resident in the engine's LRU:                               ${pct(r.ttftS.resident)}`,
    `  first turns (from scratch, not after a wake):               ${pct(r.ttftS.firstTurns)}`,
    `  restore alone on a lease: ${pct(r.restoreS)}`,
  ];
  if (r.saving !== null) {
    lines.push(
      `prefill saved per leased hit (the same prompt also recomputed in full, ${r.saving.checkedHits} hits): ${pct(r.saving.savedPerHitS)}, mean ${ms(r.saving.meanSavedPerHitS)}`,
      `  full prefill of those prompts: ${pct(r.saving.fullPrefillS)}; mean ${Math.round(r.saving.meanCachedTokens)} tokens came from the lease`,
    );
    if (r.saving.tooSmall !== null) {
      lines.push(
        `  profile ${r.profile} is too small to show a saving: ${r.saving.tooSmall}.`,
        '  It is sized for tests. --profile medium (under 3 minutes on 2 cores) and --profile large show the real balance: a prefill far above a restore.',
      );
    }
  }
  lines.push(
    `preparation: ${r.preparation.units} units (${counts(r.preparation.byResult)}), disk tier -> arena ${pct(r.preparation.prepS)}, mean ${ms(r.preparation.meanPrepS)}`,
  );
  if (r.planner) {
    const p = r.plannerStats;
    lines.push(`planner: ${p.begins} pauses, ${p.admissions} admissions (${p.readmissions} again), ${p.withdrawals} withdrawn, ${p.replans} replans`);
  }
  if (r.preparation.errors.length > 0) lines.push(`  failures: ${r.preparation.errors.join('; ')}`);
  lines.push(
    `storage tier: ${r.storage.prepared} prepared, ${r.storage.alreadyReady} already ready, ${r.storage.evicted} evicted, ${r.storage.evictRefusedPinned} evictions refused (pinned)` +
      (r.planner ? `, ${r.storage.worthMoreSkips} kept as worth more (eviction values sent ${r.storage.valueUpdates} times)` : ''),
    `bytes: engine -> disk tier ${mib(r.bytes.diskWritten)}, disk tier -> arena ${mib(r.bytes.diskToArena)}, arena -> engine ${mib(r.bytes.arenaToEngine)}`,
  );
  if (r.sameOutput !== null) {
    const s = r.sameOutput;
    const tolerance = SAME_OUTPUT_TOLERANCE * Math.max(1, s.maxLogitScale);
    lines.push(
      `same output: ${s.sameTokens} of ${s.checkedHits} leased hits decoded the same greedy tokens as a full recompute of the same prompt;`,
      `  their logits differ from it by at most ${s.maxAbsDiff.toExponential(2)}, ${s.maxAbsDiff <= tolerance ? 'within' : 'OUTSIDE'} the tolerance ${tolerance.toExponential(2)} (1e-5 x the largest logit, ${s.maxLogitScale.toFixed(2)}).`,
      `  ${s.bitExact} of ${s.checkedHits} were also bit-identical: not required, as a recompute sums in another order and fp32 rounds differently.`,
    );
  }
  return lines.join('\n');
}

function sum(o) {
  return Object.values(o).reduce((a, b) => a + b, 0);
}
