// `waitprep demo --compare`: the same trace (same --agents/--seconds/--seed or --trace, same
// --time-scale and --budget-mb) replayed under three policies in one invocation:
//
//   no-preparation  no coordinator, no driver, no storage worker: nothing is ever issued, so every
//                   wake is a miss (reason "no-preparation"). Nothing in it depends on time, so it
//                   is counted straight off the trace instead of replayed on the clock.
//   fifo-dedup      the normal `waitprep demo` path (run.js DemoRun): waits that demand the
//                   same key share one unit.
//   fifo-no-dedup   the same DemoRun (same FIFO coordinator, driver, one grant, storage worker,
//                   budget), but every wait's key spec has "/no-dedup/<agent>#<generation>"
//                   appended to its `namespace` (run.js perWaitSpec) before keyFromSpec, so no
//                   two waits share a key: each gets its own unit. Tokens, and so artifact sizes,
//                   are unchanged.
//
// Per policy: waits, wakes, hits, misses by reason, hit rate, wasted units, preparation work
// (units issued/completed, artifacts and bytes the storage worker prepared), and the wake latency
// the engine would see: a hit costs its measured pin time (process.hrtime around onWake), a miss
// costs --miss-cost-ms (default 50 ms). That miss cost is a STAND-IN, not a measurement of any
// engine's original path; the JSON says so with `missCostMs` and `standIn: true`.
// A wake whose wait was never admitted (overloaded or rejected, no ticket) counts as a miss with
// reason "not-admitted", so hits + misses = the trace's wakes under every policy.
// The table it prints without --json: report.js printComparison.
import { traceSummary } from 'waitprep/trace';
import { nearestRank } from '../experiment/percentile.js';
import { printComparison } from './report.js';
import { DemoRun, loadEvents } from './run.js';

const POLICIES = [
  { name: 'no-preparation', description: 'no coordinator issue at all: every wake is a miss (counted off the trace, not replayed)' },
  { name: 'fifo-dedup', keyMode: 'shared', description: 'the normal demo path: FIFO, waits on one key share one unit' },
  { name: 'fifo-no-dedup', keyMode: 'per-wait', description: 'the same FIFO policy, each wait\'s key spec namespace + "/no-dedup/<agent>#<generation>": no shared units' },
];

const sum = (counts) => Object.values(counts).reduce((a, b) => a + b, 0);

function latencySummary(hitNs, misses, missCostMs) {
  const ms = hitNs.map((ns) => Number(ns) / 1e6);
  for (let i = 0; i < misses; i++) ms.push(missCostMs);
  ms.sort((a, b) => a - b);
  const hitMs = hitNs.map((ns) => Number(ns) / 1e6).sort((a, b) => a - b);
  return {
    count: ms.length,
    p50: nearestRank(ms, 0.5),
    p95: nearestRank(ms, 0.95),
    hitPinP50: nearestRank(hitMs, 0.5),
    hitPinP95: nearestRank(hitMs, 0.95),
  };
}

function noPreparation(events, missCostMs) {
  let waits = 0;
  let wakes = 0;
  for (const event of events) {
    if (event.event === 'wait') waits++;
    else if (event.event === 'wake') wakes++;
  }
  const misses = wakes > 0 ? { 'no-preparation': wakes } : {};
  return {
    waits,
    wakes,
    hits: 0,
    misses,
    hitRate: 0,
    wasted: 0,
    unitsIssued: 0,
    unitsCompleted: 0,
    unitsPrepared: 0,
    bytesPrepared: 0,
    wakeLatencyMs: latencySummary([], wakes, missCostMs),
  };
}

async function replay(options, policy) {
  const run = new DemoRun({ ...options, keyMode: policy.keyMode, runLabel: policy.name });
  let summary;
  try {
    summary = await run.run();
  } catch (error) {
    await run.fail(`${policy.name}: ${error instanceof Error ? error.message : String(error)}`);
  }
  const { stats } = summary;
  const misses = { ...stats.misses };
  if (summary.wakesWithoutTicket > 0) misses['not-admitted'] = summary.wakesWithoutTicket;
  const wakes = stats.hits + sum(misses);
  if (run.hitLatenciesNs.length !== stats.hits) throw new Error(`${policy.name}: ${run.hitLatenciesNs.length} hit latencies for ${stats.hits} hits`);
  return {
    result: {
      waits: stats.waits,
      wakes,
      hits: stats.hits,
      misses,
      hitRate: wakes > 0 ? stats.hits / wakes : 0,
      wasted: stats.wasted,
      unitsIssued: stats.issued,
      unitsCompleted: stats.completed,
      unitsPrepared: summary.preparation.storage.prepared,
      bytesPrepared: summary.preparation.storage.preparedBytes,
      alreadyReady: summary.preparation.storage.alreadyReady,
      evicted: summary.preparation.storage.evicted,
      joins: stats.joins,
      overloads: stats.overloads,
      drained: summary.drained,
      replaySeconds: summary.replaySeconds,
      wakeLatencyMs: latencySummary(run.hitLatenciesNs, sum(misses), options.missCostMs),
    },
    summary,
  };
}

/** `waitprep demo --compare`: the three policies over one trace, as a table or one JSON object. */
export async function compareDemo(options) {
  const log = options.json ? () => {} : (line) => process.stderr.write(line + '\n');
  const events = loadEvents(options);
  const policies = [];
  let traceInfo = null;
  let implementationInfo = null;
  for (const policy of POLICIES) {
    log(`--- ${policy.name}: ${policy.description}`);
    let result;
    if (policy.keyMode === undefined) {
      result = noPreparation(events, options.missCostMs);
    } else {
      const replayed = await replay(options, policy);
      result = replayed.result;
      traceInfo ??= replayed.summary.trace;
      implementationInfo ??= { implementation: replayed.summary.implementation, implementationReason: replayed.summary.implementationReason };
    }
    policies.push({ name: policy.name, description: policy.description, ...result });
  }
  const output = {
    policies,
    missCostMs: options.missCostMs,
    standIn: true,
    standInNote: 'a miss costs missCostMs, a stand-in for the engine\'s original path, not a measurement; a hit costs its measured onWake pin time',
    noDedupKeys: 'fifo-no-dedup: each wait\'s key spec namespace becomes "<namespace>/no-dedup/<agent>#<generation>" before keyFromSpec',
    trace: traceInfo ?? { source: options.trace ?? 'generated', requestedAgents: options.agents, seconds: options.seconds, seed: options.seed, timeScale: options.timeScale, summary: traceSummary(events) },
    ...implementationInfo,
  };
  if (options.json) process.stdout.write(JSON.stringify(output, null, 2) + '\n');
  else printComparison(output);
}
