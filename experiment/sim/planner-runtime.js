// The policies `planner` and `keep-hazard`: the package's own PausePlanner (lib/planner) plays
// the replay, as an orchestrator would run it. Nothing here decides anything: the planner is
// told what an orchestrator would tell it (a pause's class, KV bytes, key, unit estimate; its
// end; the engine dropping kept KV; the storage worker evicting) and its answers are applied:
// keep hints to the engine, admissions and withdrawals through the coordinator (the planner's own
// onWait and onCancel), and its eviction values to the storage worker.
//
// `keep-hazard` is the planner's retention alone: no arena, no device pool, so it never prepares.
import { PausePlanner, plannedUnitsInFlight } from 'waitprep';
import { lookup } from './events.js';

/** The planner's default share of the tier (lib/planner), given to the coordinator as its units in flight. */
const TIER_SHARE = 0.125;

/** How often the orchestrator calls replan, in seconds of virtual time. */
export const REPLAN_SECONDS = 1;

/** `options`: PausePlanner options over the defaults (a policy's `plannerOptions`, for tuning runs). */
export function plannerRuntime(sim, { prepares, options = {} }) {
  const { preset, q } = sim;
  const links = { tierBytesPerSec: preset.sourceBytesPerSec, unitBytesPerSec: preset.perUnitBytesPerSec };
  let planner = null;

  /** Mirrors a pause's admission in the replay's own books (its unit's consumers, its miss cause). */
  const sync = (w) => {
    const admitted = w.plan !== null && w.plan.open && w.plan.admitted;
    if (admitted && w.ticket === undefined) {
      w.ticket = 'planner';
      w.admission = 'planned';
      sim.storage.hold(w);
    } else if (!admitted && w.ticket !== undefined && w.outcome === undefined) {
      w.ticket = undefined;
      w.withdrawn = true;
      sim.storage.leave(w);
    }
  };

  const dropped = (w) => {
    const { withdrawn } = planner.retentionDropped(w.plan);
    for (const pause of withdrawn) sync(pause.tag);
    sync(w);
  };

  const keep = (w, priority) => {
    if (!sim.gpus.retain(w, priority)) dropped(w);
  };

  const replan = () => {
    const { admitted, withdrawn, hints } = planner.replan();
    for (const { pause, hint } of hints) sim.gpus.setPriority(pause.tag, hint.priority);
    for (const pause of withdrawn) sync(pause.tag);
    for (const pause of admitted) sync(pause.tag);
    sim.storage.pump();
    if (q.now + REPLAN_SECONDS <= sim.lastT) q.after(REPLAN_SECONDS, replan);
  };

  const runtime = {
    maxInFlight: prepares ? plannedUnitsInFlight(links, 64, options.tierShare ?? TIER_SHARE) : 1,
    start() {
      planner = new PausePlanner({
        coordinator: sim.coordinator,
        budgets: {
          gpuRetainBytes: sim.gpus.engines[0].capacity,
          arenaBytes: prepares ? preset.hostArenaBytes : 0,
          devicePoolBytes: prepares ? preset.devicePoolBytesPerEngine : 0,
          stagingBytesPerUnit: preset.stagingBytesPerUnit,
        },
        links,
        unitOverheadSeconds: preset.unitOverheadSec,
        tierShare: TIER_SHARE,
        now: () => q.now * 1000,
        ...options,
      });
      // The engine reports what its priority eviction dropped (as engines' KV events do).
      sim.gpus.onDropped = (w) => {
        if (w.plan !== null && w.outcome === undefined) dropped(w);
      };
      q.at(REPLAN_SECONDS, replan);
    },
    onWait(w) {
      const plan = planner.begin({ consumer: w.consumer, key: w.key, toolClass: w.tool, bytes: w.bytes, unitSeconds: sim.unitSeconds(w), readiness: w.want, tag: w });
      w.plan = plan.pause;
      w.admission = 'not-prepared';
      // Given up for this one: the engine may drop them first.
      for (const pause of plan.released) {
        sim.gpus.setPriority(pause.tag, 0);
        sync(pause.tag);
      }
      for (const pause of plan.withdrawn) sync(pause.tag);
      if (plan.action === 'keep') keep(w, plan.hint.priority);
      sync(w);
    },
    wake(w) {
      const result = w.plan === null ? null : planner.wake(w.plan);
      if (result === null) {
        // The planner held no ticket: the engine's own lookup (kept KV, or an artifact prepared for another pause).
        const ticket = w.ticket;
        w.ticket = undefined;
        const looked = lookup(sim, w);
        w.ticket = ticket;
        return looked;
      }
      sim.counters.lookups.coordinator++;
      return result;
    },
    onCancel(w) {
      if (w.plan !== null) planner.cancel(w.plan);
    },
    onEnd() {},
    summary: () => planner.stats(),
  };
  if (prepares) {
    runtime.evictionValue = (hex) => planner.evictionValue(hex);
    runtime.onEvicted = (key) => {
      for (const pause of planner.evicted(key)) sync(pause.tag);
    };
  }
  return runtime;
}
