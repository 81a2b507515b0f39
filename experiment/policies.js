// The policies the experiment compares, on the same trace and the same resources. Each is data
// read by replay.js: what it keeps on the GPU across a wait, which waits it hands to the
// coordinator, and how the coordinator and its storage worker are configured. docs/experiment.md
// § Policies defines each one in words.
//
//   runtime          how it plays the events (sim/runtimes.js): rules (the default: retain and
//                    prepare below), 'oracle-jit' or 'planner' (the package's PausePlanner)
//   retain(w, ctx)   keep the wait's KV on the GPU for `retainSeconds`
//   prepare(w, ctx)  call onWait for it (otherwise the wake goes straight to the engine's lookup)
//   maxInFlight      the coordinator's option (1, its default: one unit at a time)
//   keys             'shared': a wait's key is its context's; 'per-wait': every wait its own key
//                    (no unit is ever joined, no completed history ever matches)
//   historyLimit     the coordinator's; 0 keeps no completed history to reuse
//   window           budget window: units start only while this window's bytes are under budget

/**
 * What every wait is, to the policies that look at classes: its class's median wait against its
 * own unit. The median is learned from the waits of that class that have ended so far (a class
 * nothing has been learned of yet counts as long: it is prepared).
 */
function longerThanItsUnit(w, ctx) {
  return ctx.classMedian(w.tool) > ctx.unitSeconds(w);
}

const all = () => true;
const nothing = () => false;

/** The policies by name, in report order. */
export const POLICIES = Object.freeze([
  { name: 'none', description: 'no preparation, no retention: every wake takes the original path', retain: nothing, prepare: nothing },
  { name: 'keep-gpu-2s', description: 'keep the KV on the GPU for 2 s after the tool call starts (Continuum\'s fixed pin), no preparation', retainSeconds: 2, retain: all, prepare: nothing },
  { name: 'keep-gpu-10s', description: 'keep the KV on the GPU for 10 s, no preparation', retainSeconds: 10, retain: all, prepare: nothing },
  { name: 'budget-window', description: 'STAND-IN for a budget-window baseline (its real definition is left open): every wait admitted, units start only while the 1 s window has used under half the source tier\'s bytes per second, up to 8 at once', retain: nothing, prepare: all, maxInFlight: 8, window: { seconds: 1, fractionOfSource: 0.5 } },
  { name: 'fifo-1', description: 'the coordinator\'s default: FIFO, dedup, one unit in flight', retain: nothing, prepare: all, maxInFlight: 1 },
  { name: 'fifo-1-no-join', description: 'FIFO/1 without dedup: every wait its own key, so no joins (and no completed history matches)', retain: nothing, prepare: all, maxInFlight: 1, keys: 'per-wait' },
  { name: 'fifo-1-no-history', description: 'FIFO/1 with joins but no reuse of completed history (historyLimit 0)', retain: nothing, prepare: all, maxInFlight: 1, historyLimit: 0 },
  { name: 'fifo-2', description: 'FIFO, dedup, 2 units in flight', retain: nothing, prepare: all, maxInFlight: 2 },
  { name: 'fifo-4', description: 'FIFO, dedup, 4 units in flight', retain: nothing, prepare: all, maxInFlight: 4 },
  { name: 'fifo-8', description: 'FIFO, dedup, 8 units in flight', retain: nothing, prepare: all, maxInFlight: 8 },
  { name: 'class-aware-1', description: 'FIFO/1, admitting only waits whose tool class\'s median wait (learned from the waits that ended) is longer than the wait\'s own unit', retain: nothing, prepare: longerThanItsUnit, maxInFlight: 1 },
  { name: 'class-aware-4', description: 'the same admission, 4 units in flight', retain: nothing, prepare: longerThanItsUnit, maxInFlight: 4 },
  { name: 'keep-10s+class-aware-4', description: 'the classes class-aware leaves out are kept on the GPU for 10 s; the others prepared, 4 in flight', retainSeconds: 10, retain: (w, ctx) => !longerThanItsUnit(w, ctx), prepare: longerThanItsUnit, maxInFlight: 4 },
  { name: 'keep-hazard', description: 'the planner\'s retention alone (lib/planner, no arena or pool): every wait kept on the GPU at a priority that is its hazard, P(it ends within 10 s | its age), learned online per class; lowest dropped first', runtime: 'planner', prepares: false },
  { name: 'planner', description: 'the package\'s PausePlanner (lib/planner) as an orchestrator runs it: retention by hazard, preparation of the likely-long waits not kept, ranked by hazard, within the arena or pool, units in flight from the tier over one unit, its eviction order', runtime: 'planner', prepares: true },
  { name: 'oracle-jit', description: 'the bound: knows every wake; hands each wait that lasts at least twice its unit to the coordinator that long before its wake (units finish just before they are needed, within the arena, the pool and the links; the worker evicts what is needed last first), and keeps the shorter ones on the GPU until their wake, the soonest at the highest priority', runtime: 'oracle-jit', bound: true },
]);

/** The policies `names` picks (all when null), in report order; an unknown name is an error. */
export function pickPolicies(names) {
  if (names === null) return POLICIES;
  const known = new Map(POLICIES.map((p) => [p.name, p]));
  return names.map((name) => {
    const policy = known.get(name);
    if (policy === undefined) throw new Error(`unknown policy ${JSON.stringify(name)}; known: ${[...known.keys()].join(', ')}`);
    return policy;
  });
}
