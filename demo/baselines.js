// What `npm start` runs beside waitprep's own run, on the same trace, so that its last line can
// say what waitprep changed: the share of next turns that found their context ready (a wake
// that hit), against each baseline's share.
//
//   no-preparation  nothing is prepared, so every wake misses (reason "no-preparation"). Nothing
//                   in it depends on time: it is counted off the trace instead of replayed.
//   fifo            the coordinator's default alone (one FIFO queue, one unit in flight),
//                   replayed on the same trace;
//   planner         the package's PausePlanner above it (`--planner`), replayed likewise.
//
// The run's own policy (fifo by default, planner with --planner) is not replayed again.

/** The baselines, in the order the summary lists them. */
export const BASELINES = Object.freeze([
  {
    name: 'no-preparation',
    description: 'nothing prepared: every wake takes the original path (counted off the trace, not replayed)',
    count: (events) => {
      const wakes = events.reduce((n, event) => n + (event.event === 'wake' ? 1 : 0), 0);
      return { wakes, hits: 0, misses: wakes > 0 ? { 'no-preparation': wakes } : {} };
    },
  },
  {
    name: 'fifo',
    description: "the coordinator's default: one FIFO queue, waits on one key share one unit, one unit in flight",
    replay: { planner: false },
  },
  {
    name: 'planner',
    description: "the package's PausePlanner above the coordinator: keep, prepare or neither per pause",
    replay: { planner: true },
  },
]);

/** `hits / wakes`, 0 when nothing woke. */
export const readyShare = (hits, wakes) => (wakes > 0 ? hits / wakes : 0);

/**
 * What one DemoRun summary says of every wake in the trace: a wake whose wait was never
 * admitted (overloaded or rejected, so no ticket) is a miss "not-admitted", so hits + misses
 * equal the trace's wakes, as they do for the baselines.
 */
export function wakeOutcomes(summary) {
  const misses = { ...summary.stats.misses };
  if (summary.wakesWithoutTicket > 0) misses['not-admitted'] = summary.wakesWithoutTicket;
  const wakes = summary.stats.hits + Object.values(misses).reduce((a, b) => a + b, 0);
  return { wakes, hits: summary.stats.hits, misses, readyShare: readyShare(summary.stats.hits, wakes) };
}

/** Each baseline's wakes, hits, misses and ready share on `events`, by name; `own` (the run's own policy) is left out. */
export async function runBaselines(events, replay, own) {
  const out = {};
  for (const baseline of BASELINES) {
    if (baseline.name === own) continue;
    const counted = baseline.count !== undefined ? baseline.count(events) : wakeOutcomes(await replay(baseline.replay, baseline.name));
    out[baseline.name] = { description: baseline.description, ...counted, readyShare: readyShare(counted.hits, counted.wakes) };
  }
  return out;
}
