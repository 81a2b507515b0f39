// The trace's events as the replay plays them: a wait starts, wakes or is cancelled, and the
// turns between waits. What a policy does at each (keep the KV, hand the wait to the coordinator)
// is its runtime's (runtimes.js, planner-runtime.js); what happens to bytes and time is the
// engines' (gpu.js), the storage worker's (storage.js) and the original path's.
import { arrive, causeOf, endWait } from './accounting.js';

/** A wait starts: the agent's turn ends, a wait it replaces ends, and the policy decides. */
export function onWait(sim, w) {
  const e = sim.agentEngine(w.agent);
  w.engine = e;
  const previous = sim.open.get(w.agent);
  if (previous !== undefined) {
    endWait(sim, previous, 'replaced');
    sim.runtime.onEnd(previous, 'replaced');
    sim.gpus.release(previous);
  }
  const turn = sim.turnOf.get(w.agent);
  if (turn !== undefined) {
    sim.turnOf.delete(w.agent);
    sim.gpus.endTurn(turn);
  }
  sim.open.set(w.agent, w);
  w.consumer = Object.freeze({ engine: sim.engineNames[e], request: w.agent, generation: w.generation });
  w.want = sim.device ? sim.deviceWants[e] : HOST;
  sim.runtime.onWait(w, previous);
  if (previous !== undefined) sim.storage.leave(previous);
  sim.storage.pump();
}

const HOST = Object.freeze({ readiness: 'host' });

/**
 * A wait wakes: the policy's lookup (the coordinator's onWake for a wait it admitted, the
 * engine's own lookup otherwise) gives a hit or a miss; the next turn is ready when its KV is on
 * the GPU and its engine has room for it.
 */
export function onWake(sim, w) {
  sim.open.delete(w.agent);
  w.woke = sim.q.now;
  w.pending = 2;
  const e = w.engine;
  const result = sim.runtime.wake(w);
  sim.storage.leave(w);
  endWait(sim, w, 'wake');
  sim.runtime.onEnd(w, 'wake');
  let inPlace = false;
  if (result.kind === 'hit') {
    const lease = result.lease;
    w.hit = lease.meta.tier;
    if (w.hit === 'gpu') {
      inPlace = sim.gpus.take(w) === 'own';
      lease.close();
      arrive(sim, w);
    } else {
      sim.gpus.release(w);
      if (w.hit === 'host') {
        sim.net.transfer(lease.meta.bytes, [sim.h2d[e]], sim.preset.h2dBytesPerSecPerEngine, () => {
          lease.close();
          arrive(sim, w);
        });
      } else {
        lease.close();
        arrive(sim, w);
      }
    }
  } else {
    w.cause = causeOf(sim, w, result.reason, sim.storage.idOf(w.key, w.want));
    sim.gpus.release(w);
    sim.original.run(w, e);
  }
  beginTurn(sim, w, inPlace, true);
  sim.storage.pump();
}

/** A wait is cancelled (the tool call abandoned): the agent's next turn runs, unmeasured. */
export function onCancel(sim, w) {
  sim.open.delete(w.agent);
  endWait(sim, w, 'cancel');
  sim.runtime.onCancel(w);
  sim.runtime.onEnd(w, 'cancel');
  sim.storage.leave(w);
  const inPlace = sim.gpus.take(w) === 'own';
  beginTurn(sim, w, inPlace, false);
  sim.storage.pump();
}

/**
 * An agent's first turn, before its first wait: it holds that wait's context for the trace's
 * median turn (its start is not in the trace).
 */
export function onFirstTurn(sim, w) {
  const turn = sim.gpus.beginTurn(sim.agentEngine(w.agent), w.bytes, false, null);
  sim.turnOf.set(w.agent, turn);
}

/** The turn after `w` ends; it holds `w`'s context until the agent's next wait (or the median turn after its last). */
function beginTurn(sim, w, inPlace, measured) {
  const turn = sim.gpus.beginTurn(w.engine, w.bytes, inPlace, measured ? () => arrive(sim, w) : null);
  sim.turnOf.set(w.agent, turn);
  if (w.last) {
    sim.q.after(sim.turnSeconds, () => {
      if (sim.turnOf.get(w.agent) === turn) sim.turnOf.delete(w.agent);
      sim.gpus.endTurn(turn);
    });
  }
}

// ---- what runtimes share ------------------------------------------------------------------

/** Hands `w` to the coordinator (onWait); a refused replacement leaves `previous` registered, so it is cancelled. */
export function admit(sim, w, previous) {
  const admission = sim.coordinator.onWait(w.consumer, w.key, w.want);
  w.admission = admission.status;
  w.ticket = admission.ticket;
  if (w.ticket !== undefined) sim.storage.hold(w);
  else cancelPrevious(sim, previous);
}

/** `previous` was replaced by a wait the coordinator did not take: end its registration, as the engine would. */
export function cancelPrevious(sim, previous) {
  if (previous?.ticket !== undefined && previous.holdId !== undefined) sim.coordinator.onCancel(previous.ticket);
}

/** A wake's lookup: the coordinator's for a wait it admitted, the engine's own otherwise. */
export function lookup(sim, w) {
  if (w.ticket !== undefined) {
    sim.counters.lookups.coordinator++;
    return sim.coordinator.onWake(w.ticket);
  }
  sim.counters.lookups.direct++;
  const looked = sim.storage.backend.tryPinReady(w.key, w.consumer, w.want);
  return looked.kind === 'lease' ? { kind: 'hit', lease: looked } : looked;
}
