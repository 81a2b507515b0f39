// What the demo prints when it ends without --json: the text reports of a trace replay
// (run.js), of a policy comparison (compare.js) and of the scripted sequence (scripted.js). Each
// takes the summary object that --json would print, so the two outputs never say different things.

/** `reason count, ...` of a misses-by-reason object, or `none`. */
function missesText(misses) {
  return Object.entries(misses).map(([reason, n]) => `${reason} ${n}`).join(', ') || 'none';
}

/**
 * What an admitted or refused wait found, as `stats().waitsByStatus` counts it: [status, label,
 * one-line definition]. Together they account for every `onWait` call of the run.
 */
const WAIT_OUTCOMES = [
  ['queued', 'new unit', 'nothing for its key yet: a new unit of preparation was queued'],
  ['joined', 'joined', 'joined a unit still queued for the same key (dedup)'],
  ['in-flight', 'in flight', 'joined the unit being prepared for the same key (dedup)'],
  ['completed', 'already completed', 'its key was prepared before (dedup against history): no new unit'],
  ['failed', 'already failed', 'its key failed before: not retried until forget(key)'],
  ['overloaded', 'overloaded', 'refused, a bound was full (maxQueued, maxWaiting): no ticket, original path'],
  ['rejected', 'rejected', 'refused (bad readiness or target, older generation, shut down): no ticket'],
];

/** How an issued unit ended, as the summary's `units` object counts it: [field, label, one-line definition]. */
const UNIT_OUTCOMES = [
  ['completed', 'completed', 'prepared and published while a consumer still waited for it'],
  ['wasted', 'wasted', 'prepared and published after every consumer had left (woken first, or cancelled)'],
  ['drained', 'drained', 'every consumer left first; the worker stopped at its safe boundary (not a failure)'],
  ['failed', 'failed', 'preparation failed (refused, crashed, past its deadline): the key is remembered as failed'],
  ['inFlight', 'in flight', 'still being prepared when the run ended'],
];

/**
 * How the issued units ended, from the coordinator's counters and the number of failed units
 * that were drained (their abort fired before they reported failure, which the coordinator does
 * not count as evidence against the key). Each unit is in exactly one field.
 */
export function unitOutcomes(stats, drained) {
  return {
    issued: stats.issued,
    completed: stats.completed - stats.wasted,
    wasted: stats.wasted,
    drained,
    failed: stats.failed - drained,
    inFlight: stats.inFlight,
  };
}

/** A labelled count per line, each with its definition. */
function accountLines(rows) {
  const width = Math.max(...rows.map(([label]) => label.length));
  const countWidth = Math.max(...rows.map(([, n]) => String(n).length));
  return rows.map(([label, n, definition]) => `    ${label.padEnd(width)}  ${String(n).padStart(countWidth)}  ${definition}`).join('\n');
}

/** The waits and units account shared by the replay's and the scripted run's summaries. */
function accountText(stats, units) {
  const waits = accountLines(WAIT_OUTCOMES.map(([status, label, definition]) => [label, stats.waitsByStatus[status], definition]));
  const ended = accountLines(UNIT_OUTCOMES.map(([field, label, definition]) => [label, units[field], definition]));
  return `  waits ${stats.waits}, by what each found:\n${waits}\n  units issued ${units.issued}, by how each ended:\n${ended}`;
}

/** Nanoseconds in the unit that reads best: ns, µs or ms. */
export function durationText(ns) {
  if (ns < 1_000) return `${ns} ns`;
  if (ns < 1_000_000) return `${(ns / 1_000).toFixed(1)} µs`;
  return `${(ns / 1_000_000).toFixed(2)} ms`;
}

/** The report of one trace replay, from DemoRun's summary. */
export function printSummary(s) {
  const st = s.stats;
  const missText = missesText(st.misses);
  const prep = s.preparation;
  const mib = (n) => (n / (1024 * 1024)).toFixed(1);
  const t = s.trace;
  const lat = s.wakeLatencyNs;
  const traceText = t.source === 'generated' ? `generated trace (${t.seconds} s, seed ${t.seed})` : `trace ${t.source}`;
  console.log(`
summary: ${traceText}: ${t.summary.agents} agents, ${t.summary.waits} waits, ${t.summary.distinctKeys} distinct keys; time scale ${t.timeScale}, replayed in ${s.replaySeconds.toFixed(1)} s
${accountText(st, s.units)}
  cancels ${st.cancels}; shutdown drained: ${s.drained} (no unit in flight when the coordinator shut down)
  wakes ${st.wakes}: hits ${st.hits}; misses: ${missText}${s.wakesWithoutTicket ? ` (+${s.wakesWithoutTicket} wakes of waits never admitted)` : ''}
  wake latency (onWake: the coordinator's checks and the table pin, timed with hrtime): p50 ${durationText(lat.p50)}, p99 ${durationText(lat.p99)}, max ${durationText(lat.max)} over ${lat.count} wakes.
    Each wake is a sporadic, cold call on an otherwise idle event loop (caches, branch predictors and JIT cold);
    the steady-state pin + close is \`npm run bench:pin\`, with figures in docs/benchmarks.md.
  storage worker: prepared ${prep.storage.prepared} artifacts (${mib(prep.storage.preparedBytes)} MiB), evicted ${prep.storage.evicted} (pinned skipped ${prep.storage.pinnedSkips}), refused ${prep.storage.failed}, reaped clients ${prep.storage.reaped}
  preparation throughput: ${prep.artifactsPerSecond.toFixed(0)} artifacts/s, ${mib(prep.bytesPerSecond)} MiB/s of storage-worker busy time (synthetic source, copy and checksum; no compression); ${prep.wallArtifactsPerSecond.toFixed(1)} artifacts/s over the replay${prep.errors.length > 0 ? `\n  preparation errors (first ${prep.errors.length}): ${prep.errors.join('; ')}` : ''}
  storage: ${s.storage.mode === 'child-process' ? `child process ${s.storage.pid}, ${s.storage.table}` : `${s.storage.note}`}
  lease table: ${s.implementation} (${s.implementationReason})
  (figures from a synthetic trace and a stand-in preparation on this machine; not a serving-host measurement)`);
  if (s.baselines !== undefined) console.log(`\n${readySentence(s)}`);
}

const share = (x) => `${(100 * x).toFixed(1)}%`;

/**
 * The demo's last line: the share of next turns (wakes) that found their context ready (a hit)
 * with waitprep, against each baseline on the same trace.
 */
export function readySentence(s) {
  const against = Object.entries(s.baselines).map(([name, b]) => `${share(b.readyShare)} with ${name.replace(/-/g, ' ')}`);
  return `With waitprep (policy ${s.policy.name}), ${share(s.readyShare)} of next turns (${s.hits} of ${s.wakes} wakes) found their context ready, against ${against.join(' and ')}.`;
}

/** The table of `--compare`, from its output object. */
export function printComparison(out) {
  const t = out.trace;
  const mib = (n) => (n / (1024 * 1024)).toFixed(1);
  const pct = (x) => `${(100 * x).toFixed(1)}%`;
  const ms = (x) => (x >= 1 ? x.toFixed(1) : x.toFixed(4));
  const rows = [
    ['policy', 'waits', 'wakes', 'hits', 'hit rate', 'misses by reason', 'wasted', 'units prepared', 'MiB prepared', 'wake p50 ms', 'wake p95 ms'],
    ...out.policies.map((p) => [
      p.name, String(p.waits), String(p.wakes), String(p.hits), pct(p.hitRate),
      missesText(p.misses),
      String(p.wasted), String(p.unitsPrepared), mib(p.bytesPrepared), ms(p.wakeLatencyMs.p50), ms(p.wakeLatencyMs.p95),
    ]),
  ];
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  const line = (r) => '  ' + r.map((c, i) => (i === 0 || i === 5 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
  console.log(`
compare: ${t.source === 'generated' ? `generated trace (${t.seconds} s, seed ${t.seed})` : `trace ${t.source}`}: ${t.summary.agents} agents, ${t.summary.waits} waits, ${t.summary.wakes} wakes, ${t.summary.distinctKeys} distinct keys; time scale ${t.timeScale}
${line(rows[0])}
${rows.slice(1).map(line).join('\n')}

  wake latency: a hit costs its measured onWake pin time (hrtime); a miss costs ${out.missCostMs} ms, a STAND-IN
  for the engine's original path (--miss-cost-ms), not a measurement.
  no-preparation: nothing issued, every wake a miss (counted off the trace). fifo-no-dedup: each wait's key
  spec namespace becomes "<namespace>/no-dedup/<agent>#<generation>", so no two waits share a unit.
  lease table: ${out.implementation} (${out.implementationReason})
  (synthetic trace and stand-in preparation on this machine; not a serving-host measurement)`);
}

/** The report of the scripted sequence, from its summary; `prepareMs` is its stand-in worker's timer (virtual ms). */
export function printScriptedSummary(summary, prepareMs) {
  const { stats } = summary;
  console.log(`
summary (stand-in preparation: a ${prepareMs} ms timer, in virtual time; nothing here is a performance figure)
${accountText(stats, summary.units)}
  wakes ${stats.wakes}: hits ${stats.hits}; misses: ${missesText(stats.misses)}
  cancels ${stats.cancels}, stale events ${stats.staleEvents}, still waiting ${stats.waiting}, history ${stats.historySize}
  shutdown drained: ${summary.drained}
  backend: ${summary.backend}
  native parts: ${summary.implementation} (${summary.implementationReason})`);
}
