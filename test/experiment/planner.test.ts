// The experiment's `planner` and `keep-hazard` policies are the package's PausePlanner played as
// an orchestrator would play it (experiment/sim/planner-runtime.js), and `oracle-jit` is the
// bound every table divides by. Checked: every coordinator call a planner replay makes is the
// planner's own, each pause is begun once and ends once, keep-hazard never prepares, and the
// oracle prepares only waits that wake. No figure is asserted.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { experimentOptions } from '../../experiment/cli.js';
import { POLICIES } from '../../experiment/policies.js';
import { PRESETS, resolvePreset } from '../../experiment/presets.js';
import { replay } from '../../experiment/replay.js';
import { checkTargets, formatTargets } from '../../experiment/targets.js';
import { runExperiment } from '../../experiment/run.js';
import { generatorTrace } from '../../experiment/traces.js';

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

describe('experiment: the planner\'s targets and docs/planner.md', () => {
  it('checks each target as stated and prints it met or NOT MET; a policy over oracle-jit is flagged', () => {
    const output = runExperiment({
      presets: ['70b-b300-pcie6'], agents: [1000, 5000].map((n) => n / 50), seconds: 300, seeds: [1], trace: 'generator',
      mooncakeFile: '', sharedPrefixTokens: 0, policies: ['none', 'keep-gpu-10s', 'fifo-1', 'planner', 'oracle-jit'], sampleSeconds: 10,
    });
    // Sizes other than 1,000 and 5,000 get only the tail comparison, reported, not a target.
    const { trace, checks } = checkTargets(output);
    expect(trace).toBe('generator');
    expect(checks.map((c) => c.what)).toEqual(["p95 at most none's", "p95 at most keep-gpu-10s's", "p95 at most none's", "p95 at most keep-gpu-10s's"]);
    for (const c of checks) expect(c.met).toBe(c.figure <= c.target);
    expect(checks.every((c) => c.reported === true)).toBe(true);
    expect(formatTargets(output)).toMatch(/^ {2}(below {2}|ABOVE {2}) {2}70b-b300-pcie6, 20 agents: planner p95 at most none's: \d+ ms \(\d+ ms; reported, not a target\)$/m);
    // The same object relabelled at 1,000 and 5,000 agents gets every check.
    const relabelled = { ...output, runs: output.runs.map((r, i) => ({ ...r, agents: [1000, 5000][i] })) };
    const relabelledChecks = checkTargets(relabelled).checks;
    const all = relabelledChecks.map((c) => c.what);
    // The tail rule is a target at 1,000 agents; at 5,000 it is reported.
    expect(relabelledChecks.filter((c) => c.what.startsWith('p95')).map((c) => [c.agents, c.reported === true])).toEqual([[1000, false], [1000, false], [5000, true], [5000, true]]);
    expect(all).toContain('hits of oracle-jit');
    expect(all).toContain('wasted share of prepared bytes');
    expect(all.some((w) => w.startsWith('hit rate within 2 points of the best other'))).toBe(true);
    const text = formatTargets(relabelled);
    expect(text).toMatch(/^ {2}(met {4}|NOT MET) {2}70b-b300-pcie6, 1000 agents: planner hits of oracle-jit: \d\.\d\d \(target >= 0\.92\)$/m);
    const flagged = structuredClone(relabelled);
    flagged.runs[0].policies.find((p: { name: string }) => p.name === 'none').summary.hitsOfOracle = { mean: 1.02, min: 1.01, max: 1.03 };
    expect(checkTargets(flagged).flags).toContainEqual({ preset: '70b-b300-pcie6', agents: 1000, policy: 'none', ofBound: 1.02 });
    expect(formatTargets(flagged)).toMatch(/^ {2}flagged {2}70b-b300-pcie6, 1000 agents: none beats oracle-jit on some seed \(1\.02 /m);
  });

  it("docs/planner.md's experiment commands parse, and its figures name every target", () => {
    const doc = readFileSync(join(import.meta.dirname, '..', '..', 'docs', 'planner.md'), 'utf8');
    const block = /## Reproducing[\s\S]*?```sh\n([\s\S]*?)```/.exec(doc)![1]!;
    const commands = block.replace(/\\\n\s*/g, '').split('\n').map((l) => l.trim()).filter((l) => l.startsWith('node bin/waitprep.js experiment '));
    expect(commands.length).toBeGreaterThanOrEqual(2);
    const exit = vi.spyOn(process, 'exit').mockImplementation((code) => {
      throw new Error(`usage error (exit ${code})`);
    });
    try {
      for (const command of commands) experimentOptions(command.slice('node bin/waitprep.js experiment '.length).split(/ +> +/)[0]!.split(/ +/));
    } finally {
      exit.mockRestore();
    }
    const figures = doc.slice(doc.indexOf('### The figures'), doc.indexOf('## What the figures do not cover'));
    for (const trace of ['generator', 'mooncake', 'held-out']) for (const preset of Object.keys(PRESETS)) expect(figures).toMatch(new RegExp(`^\\| ${trace}[^|]* \\| ${preset} \\|`, 'm'));
  });
});
