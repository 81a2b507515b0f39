// What the demo prints when it ends without --json: the text reports of a trace replay
// (run.js), of a policy comparison (compare.js) and of the scripted sequence (scripted.js). Each
// takes the summary object that --json would print, so the two outputs never say different things.

/** `reason count, ...` of a misses-by-reason object, or `none`. */
function missesText(misses) {
  return Object.entries(misses).map(([reason, n]) => `${reason} ${n}`).join(', ') || 'none';
}

/** The report of one trace replay, from DemoRun's summary. */
export function printSummary(s) {
  const st = s.stats;
  const missText = missesText(st.misses);
  const prep = s.preparation;
  const mib = (n) => (n / (1024 * 1024)).toFixed(1);
  console.log(`
summary: ${s.trace.source === 'generated' ? `generated trace (${s.trace.requestedAgents} agents, ${s.trace.seconds} s, seed ${s.trace.seed}: ${s.trace.summary.waits} waits, ${s.trace.summary.distinctKeys} distinct keys)` : `trace ${s.trace.source}`}, time scale ${s.trace.timeScale}, replayed in ${s.replaySeconds.toFixed(1)} s
  waits ${st.waits}: dedup joins ${st.joins}, overloaded ${st.overloads}, rejected ${st.rejected}; cancels ${st.cancels}
  wakes ${st.wakes}: hits ${st.hits}; misses: ${missText}${s.wakesWithoutTicket ? ` (+${s.wakesWithoutTicket} wakes of waits never admitted)` : ''}
  wake pin latency (onWake, hrtime): p50 ${s.wakeLatencyNs.p50} ns, p99 ${s.wakeLatencyNs.p99} ns, max ${s.wakeLatencyNs.max} ns over ${s.wakeLatencyNs.count} wakes
  units issued ${st.issued}: completed ${st.completed}, failed ${st.failed}, wasted ${st.wasted}; shutdown drained: ${s.drained}
  storage worker: prepared ${prep.storage.prepared} artifacts (${mib(prep.storage.preparedBytes)} MiB), evicted ${prep.storage.evicted} (pinned skipped ${prep.storage.pinnedSkips}), refused ${prep.storage.failed}, reaped clients ${prep.storage.reaped}
  preparation throughput: ${prep.artifactsPerSecond.toFixed(0)} artifacts/s, ${mib(prep.bytesPerSecond)} MiB/s of storage-worker busy time (synthetic source, copy and checksum; no compression); ${prep.wallArtifactsPerSecond.toFixed(1)} artifacts/s over the replay
  storage: ${s.storage.mode === 'child-process' ? `child process ${s.storage.pid}, ${s.storage.table}` : `${s.storage.note}`}
  lease table: ${s.implementation} (${s.implementationReason})
  (figures from a synthetic trace and a stand-in preparation on this machine; not a serving-host measurement)`);
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
compare: ${t.source === 'generated' ? `generated trace (${t.requestedAgents} agents, ${t.seconds} s, seed ${t.seed}: ${t.summary.waits} waits, ${t.summary.wakes} wakes, ${t.summary.distinctKeys} distinct keys)` : `trace ${t.source}`}, time scale ${t.timeScale}
${line(rows[0])}
${rows.slice(1).map(line).join('\n')}

  wake latency: a hit costs its measured onWake pin time (hrtime); a miss costs ${out.missCostMs} ms, a STAND-IN
  for the engine's original path (--miss-cost-ms), not a measurement.
  no-preparation: nothing issued, every wake a miss (counted off the trace). fifo-no-dedup: each wait's key
  spec namespace becomes "<namespace>/no-dedup/<agent>#<generation>", so no two waits share a unit.
  lease table: ${out.implementation} (${out.implementationReason})
  (synthetic trace and stand-in preparation on this machine; not a serving-host measurement)`);
}

/** The report of the scripted sequence, from its summary; `prepareMs` is its stand-in worker's timer. */
export function printScriptedSummary(summary, prepareMs) {
  const { stats } = summary;
  console.log(`
summary (stand-in preparation: a ${prepareMs} ms timer; nothing here is a performance figure)
  waits ${stats.waits}, of them dedup joins ${stats.joins}, overloaded ${stats.overloads}, rejected ${stats.rejected}
  units issued ${stats.issued}: completed ${stats.completed}, failed ${stats.failed}, wasted ${stats.wasted}
  wakes ${stats.wakes}: hits ${stats.hits}; misses: ${missesText(stats.misses)}
  cancels ${stats.cancels}, stale events ${stats.staleEvents}, still waiting ${stats.waiting}, history ${stats.historySize}
  shutdown drained: ${summary.drained}
  backend: ${summary.backend}
  native parts: ${summary.implementation} (${summary.implementationReason})`);
}
