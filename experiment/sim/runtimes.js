// How a policy of policies.js plays a replay's events: its runtime. Every runtime has
//
//   maxInFlight          the coordinator's option
//   onWait(w, previous)  a wait starts: keep its KV on the GPU (gpus.retain), hand it to the
//                        coordinator (events.admit), or neither
//   wake(w)              the wake's lookup (events.lookup unless the policy holds the ticket)
//   onCancel(w)          a wait is cancelled: its coordinator registration ends
//   onEnd(w, outcome)    a wait ended ('wake', 'cancel', 'replaced'): what a policy learns from
//   evictionValue(hex)   optional: the storage worker's eviction order (lowest value first)
//
// Two runtimes live here: the table policies (retain/prepare rules read as data) and
// `oracle-jit`, the bound. The package's planner has its own (planner-runtime.js).
import { admit, cancelPrevious, lookup } from './events.js';

const NOTHING = () => {};

/** The policies of policies.js that are rules: `retain(w, ctx)`, `prepare(w, ctx)`, `maxInFlight`. */
export function ruleRuntime(sim) {
  const { policy, q } = sim;
  const ctx = sim.policyContext;
  return {
    maxInFlight: policy.maxInFlight ?? 1,
    onWait(w, previous) {
      // All KV kept this way has one priority: the oldest goes first.
      if (policy.retain(w, ctx)) sim.gpus.retain(w, 0, q.now + policy.retainSeconds);
      if (policy.prepare(w, ctx)) {
        admit(sim, w, previous);
      } else {
        w.admission = 'not-prepared';
        cancelPrevious(sim, previous);
      }
    },
    wake: (w) => lookup(sim, w),
    onCancel(w) {
      if (w.ticket !== undefined) sim.coordinator.onCancel(w.ticket);
    },
    onEnd: ctx.observe ?? NOTHING,
  };
}

/**
 * `oracle-jit`: knows every wait's end and how it ends. A wait that will not wake gets nothing.
 * One that lasts at least twice its uncontended unit (plus 10 ms) is handed to the coordinator
 * that long before its wake, so its unit finishes just before it is needed and holds the arena
 * or pool only then; the storage worker evicts what is needed last first (Belady). The others
 * are kept on the GPU until their wake, the soonest wake at the highest priority. Units in
 * flight are not the limit (256); the links, the arena and the pool are.
 */
export function oracleJitRuntime(sim) {
  const { q } = sim;
  /** keyHex -> admitted waits on it, for the eviction order. */
  const demand = new Map();
  const issue = (w) => {
    if (w.outcome !== undefined) return;
    admit(sim, w, null);
    if (w.ticket !== undefined) {
      let set = demand.get(w.keyHex);
      if (set === undefined) demand.set(w.keyHex, (set = new Set()));
      set.add(w);
    }
    sim.storage.pump();
  };
  const forget = (w) => {
    const set = demand.get(w.keyHex);
    if (set === undefined || !set.delete(w)) return;
    if (set.size === 0) demand.delete(w.keyHex);
  };
  return {
    maxInFlight: 256,
    onWait(w, previous) {
      w.admission = 'not-prepared';
      cancelPrevious(sim, previous);
      if (w.endKind !== 'wake') return;
      const lead = 2 * sim.unitSeconds(w) + 0.01;
      if (w.end - w.start >= lead) q.at(w.end - lead, issue, w);
      else sim.gpus.retain(w, -w.end);
    },
    wake: (w) => lookup(sim, w),
    onCancel(w) {
      if (w.ticket !== undefined) sim.coordinator.onCancel(w.ticket);
    },
    onEnd: forget,
    evictionValue(hex) {
      const set = demand.get(hex);
      if (set === undefined) return -Infinity;
      let soonest = Infinity;
      for (const w of set) soonest = Math.min(soonest, w.end);
      return -soonest;
    },
  };
}
