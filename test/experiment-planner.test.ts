// The experiment's `planner` and `keep-hazard` policies are the package's PausePlanner played as
// an orchestrator would play it (experiment/sim/planner-runtime.js), and `oracle-jit` is the
// bound every table divides by. Checked: every coordinator call a planner replay makes is the
// planner's own, each pause is begun once and ends once, keep-hazard never prepares, and the
// oracle prepares only waits that wake. No figure is asserted.
import { describe, expect, it } from 'vitest';
import { POLICIES } from '../experiment/policies.js';
import { PRESETS, resolvePreset } from '../experiment/presets.js';
import { replay } from '../experiment/replay.js';
import { generatorTrace } from '../experiment/traces.js';

const policy = (name: string) => POLICIES.find((p) => p.name === name)!;

describe('experiment: the planner policies', () => {
  const trace = generatorTrace({ agents: 80, seconds: 900, seed: 11 });

  for (const presetName of Object.keys(PRESETS)) {
    it(`planner: every onWait the coordinator saw is the planner's, every pause begun once and ended once (${presetName})`, () => {
      const r = replay(trace, resolvePreset(presetName), policy('planner'), { seed: 2, checkAborts: true, checkWaits: true });
      const planner = r.planner!;
      expect(planner.begins).toBe(r.waits);
      expect(planner.wakes + planner.cancels + planner.replaced).toBe(r.waits);
      expect(planner.open).toBe(0);
      expect(planner.overflows).toBe(0);
      // The replay calls no onWait of its own for this policy.
      expect(r.coordinator.waits).toBe(planner.admissions);
      // Every wake the planner held a ticket for went through the coordinator's onWake.
      expect(r.coordinator.wakes).toBe(r.lookups.coordinator);
      expect(planner.admittedBytes).toBe(0);
      expect(planner.retainedBytes).toBe(0);
    });
  }

  it('keep-hazard is the planner with no arena or pool: it keeps, never prepares', () => {
    const r = replay(trace, resolvePreset('70b-b300-pcie6'), policy('keep-hazard'), { seed: 1, checkWaits: true });
    expect(r.planner!.admissions).toBe(0);
    expect(r.units.issued).toBe(0);
    expect(r.hitsByTier.gpu).toBe(r.hits);
    expect(r.hits).toBeGreaterThan(0);
  });

  it('oracle-jit hands the coordinator only waits that wake, and none that a unit could not serve in time', () => {
    const r = replay(trace, resolvePreset('8b-pcie5-nvme'), policy('oracle-jit'), { seed: 1, checkAborts: true, checkWaits: true });
    expect(r.coordinator.waits).toBeLessThanOrEqual(r.wakes);
    expect(r.misses.cancelled).toBe(0);
    expect(r.misses['not-prepared']).toBe(0);
  });
});
