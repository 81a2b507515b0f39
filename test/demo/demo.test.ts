// `npm start` runs `waitprep demo`: the end-to-end demo (trace replay, coordinator, driver, storage
// worker process, lease table). `demo --scripted` keeps the earlier scripted sequence. Both print
// a JSON summary with --json that must be internally consistent. The tests drive the demo as a user
// does: its command line, stdout (text or --json), stderr and exit code. Needs the built dist/.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { implementation } from '../../lib/index.js';

const bin = join(import.meta.dirname, '..', '..', 'bin', 'waitprep.js');
const sum = (counts: Record<string, number>): number => Object.values(counts).reduce((a, b) => a + b, 0);

interface Units { issued: number; completed: number; wasted: number; drained: number; failed: number; inFlight: number }

/** The summary's `units` put every issued unit in exactly one outcome, and agree with the coordinator's counters. */
function expectUnitsAccounted(stats: Record<string, number>, units: Units): void {
  expect(units.issued).toBe(stats.issued);
  expect(units.completed + units.wasted + units.drained + units.failed + units.inFlight).toBe(units.issued);
  expect(units.completed + units.wasted).toBe(stats.completed);
  expect(units.wasted).toBe(stats.wasted);
  expect(units.drained + units.failed).toBe(stats.failed);
  expect(units.inFlight).toBe(stats.inFlight);
  for (const n of Object.values(units)) expect(n).toBeGreaterThanOrEqual(0);
}

/** Every wait outcome and every unit outcome has a line: its label, its count, a definition. */
const ACCOUNT_LINES = [
  'new unit', 'joined', 'in flight', 'already completed', 'already failed', 'overloaded', 'rejected',
  'completed', 'wasted', 'drained', 'failed',
];
function expectAccountText(text: string): void {
  expect(text).toMatch(/^ {2}waits \d+, by what each found:$/m);
  expect(text).toMatch(/^ {2}units issued \d+, by how each ended:$/m);
  for (const label of ACCOUNT_LINES) expect(text).toMatch(new RegExp(`^ {4}${label} +\\d+ {2}\\S.{20,}$`, 'm'));
}

describe('waitprep demo --scripted', () => {
  it('ends with a consistent summary', () => {
    const summary = JSON.parse(execFileSync(process.execPath, [bin, 'demo', '--scripted', '--json'], { encoding: 'utf8' }));
    const { stats } = summary;
    expect(stats.hits + sum(stats.misses)).toBe(stats.wakes);
    expect(stats.completed + stats.failed).toBe(stats.issued);
    expect(stats.hits).toBeGreaterThan(0);
    expect(stats.joins).toBeGreaterThan(0);
    expect(stats.overloads).toBeGreaterThan(0);
    expect(stats.misses['stale-ticket']).toBeGreaterThan(0);
    expect(summary.drained).toBe(true);
    expect(['native', 'js']).toContain(summary.implementation);
  });

  it('accounts for every wait by what it found and every unit by how it ended; a drained unit is not failed', () => {
    const { stats, units } = JSON.parse(execFileSync(process.execPath, [bin, 'demo', '--scripted', '--json'], { encoding: 'utf8' }));
    expect(sum(stats.waitsByStatus)).toBe(stats.waits);
    expect(stats.waitsByStatus.overloaded).toBe(stats.overloads);
    expectUnitsAccounted(stats, units);
    // The script's second try of the flaky key fails after its only consumer cancelled: drained.
    // Its first try is a genuine failure, and the other-task unit is published after its consumer woke: wasted.
    expect(units.drained).toBe(1);
    expect(units.failed).toBe(1);
    expect(units.wasted).toBe(1);
  });

  it('runs in virtual time: every run takes the same path and prints the same summary, the table name aside', () => {
    const run = () => execFileSync(process.execPath, [bin, 'demo', '--scripted', '--json'], { encoding: 'utf8' }).replace(/waitprep-demo-\d+/g, 'waitprep-demo-PID');
    const first = run();
    for (let i = 0; i < 3; i++) expect(run()).toBe(first);
    const text = execFileSync(process.execPath, [bin, 'demo', '--scripted'], { encoding: 'utf8' });
    // The stand-in worker's completion lands on its 25 ms beat: the log's times are the timeline's.
    expect(text).toMatch(/^ {2}25 ms {2}worker published sharedPrefix \(applied\)$/m);
  });

  it('prints its summary as text without --json', () => {
    const text = execFileSync(process.execPath, [bin, 'demo', '--scripted'], { encoding: 'utf8' });
    expect(text).toMatch(/^summary \(stand-in preparation: a \d+ ms timer/m);
    expectAccountText(text);
    expect(text).toMatch(/^ {4}overloaded +[1-9]\d* {2}/m);
    expect(text).toMatch(/^ {4}drained +1 {2}/m);
    expect(text).toMatch(/^ {2}shutdown drained: true$/m);
  });

  it("prints JSON through npm with the README's command, npm start -s -- --json", () => {
    const readme = readFileSync(join(import.meta.dirname, '..', '..', 'README.md'), 'utf8');
    expect(readme).toContain('`npm start -s -- --json`');
    const npm = spawnSync('npm', ['start', '-s', '--', '--scripted', '--json'], { cwd: join(import.meta.dirname, '..', '..'), encoding: 'utf8', timeout: 60_000 });
    expect(npm.status).toBe(0);
    expect(JSON.parse(npm.stdout).stats.waits).toBeGreaterThan(0);
  });
});

describe('waitprep demo --help', () => {
  it('lists every option on stdout and exits 0', () => {
    const result = spawnSync(process.execPath, [bin, 'demo', '--help'], { encoding: 'utf8' });
    expect(result.status).toBe(0);
    expect(result.stderr).toBe('');
    expect(result.stdout).toMatch(/^usage: waitprep demo \[options\]/);
    const options = ['--agents', '--seconds', '--seed', '--trace', '--time-scale', '--budget-mb', '--implementation',
      '--metrics-port', '--json', '--scripted', '--storage-exit-after', '--compare', '--miss-cost-ms'];
    for (const option of options) expect(result.stdout).toContain(`  ${option} `);
  });
});

describe('waitprep demo (end to end)', () => {
  it('replays a short trace and ends with a consistent JSON summary, nothing else on stdout', () => {
    const stdout = execFileSync(process.execPath, [bin, 'demo', '--seconds', '3', '--json'], { encoding: 'utf8', timeout: 110_000 });
    const summary = JSON.parse(stdout);
    const { stats, preparation } = summary;
    expect(['native', 'js']).toContain(summary.implementation);
    expect(summary.implementation).toBe(implementation);
    expect(summary.storage.mode).toBe(implementation === 'native' ? 'child-process' : 'in-process');
    expect(stats.waits).toBeGreaterThan(0);
    expect(stats.hits + sum(stats.misses)).toBe(stats.wakes);
    expect(stats.completed + stats.failed).toBeLessThanOrEqual(stats.issued);
    expect(summary.wakeLatencyNs.count).toBe(stats.wakes);
    expect(summary.wakeLatencyNs.p50).toBeLessThanOrEqual(summary.wakeLatencyNs.p99);
    expect(summary.drained).toBe(true);
    // Every unit the driver reported as succeeded was published by (or already resident at) the storage worker.
    expect(preparation.driver.succeeded).toBe(stats.completed);
    expect(preparation.storage.prepared + preparation.storage.alreadyReady).toBeGreaterThanOrEqual(stats.completed);
    expect(preparation.storage.usedBytes).toBeLessThanOrEqual(preparation.storage.budgetBytes);
    expect(sum(stats.waitsByStatus)).toBe(stats.waits);
    expectUnitsAccounted(stats, summary.units);
    expect(summary.wakeLatencyNs.what).toMatch(/sporadic, cold/);
    expect(summary.wakeLatencyNs.what).toMatch(/bench:pin/);
    // waitprep's own run is the top level: every wake of the trace, a never-admitted one a miss.
    const traceWakes = summary.trace.summary.wakes;
    expect(summary.policy.name).toBe('fifo');
    expect(summary.wakes).toBe(traceWakes);
    expect(summary.wakes).toBe(stats.wakes + summary.wakesWithoutTicket);
    expect(summary.hits).toBe(stats.hits);
    expect(summary.hits + sum(summary.misses)).toBe(summary.wakes);
    expect(summary.readyShare).toBe(summary.wakes > 0 ? summary.hits / summary.wakes : 0);
    // The baselines, on the same trace, under their own key: nothing prepared (every wake a miss),
    // and the planner replayed (the run's own policy, fifo, is not replayed again).
    expect(Object.keys(summary.baselines)).toEqual(['no-preparation', 'planner']);
    expect(summary.baselines['no-preparation']).toMatchObject({ wakes: traceWakes, hits: 0, readyShare: 0, misses: { 'no-preparation': traceWakes } });
    const planner = summary.baselines.planner;
    expect(planner.wakes).toBe(traceWakes);
    expect(planner.hits + sum(planner.misses)).toBe(planner.wakes);
    expect(planner.readyShare).toBe(planner.wakes > 0 ? planner.hits / planner.wakes : 0);
  });

  it('prints a text summary with one agent count, every outcome defined, and the wake latency in readable units with what it includes', () => {
    const run = spawnSync(process.execPath, [bin, 'demo', '--seconds', '3'], { encoding: 'utf8', timeout: 110_000 });
    expect(run.status).toBe(0);
    const all = run.stdout + run.stderr;
    const agentCounts = new Set([...all.matchAll(/(\d+) agents?\b/g)].map((m) => m[1]));
    expect(agentCounts.size).toBe(1);
    expectAccountText(run.stdout);
    expect(run.stdout).toMatch(/wake latency \(onWake[^)]*\): p50 \d+(\.\d+)? (ns|µs|ms), p99 \d+(\.\d+)? (ns|µs|ms), max \d+(\.\d+)? (ns|µs|ms) over \d+ wakes/);
    expect(run.stdout).toMatch(/sporadic, cold call/);
    expect(run.stdout).toMatch(/npm run bench:pin.*docs\/benchmarks\.md/);
    expect(run.stdout).not.toMatch(/\d{5,} ns/);
    // It ends with the share of next turns that found their context ready, against the baseline.
    const last = run.stdout.trimEnd().split('\n').at(-1)!;
    const share = /^With waitprep \(policy fifo\), (\d+\.\d)% of next turns \((\d+) of (\d+) wakes\) found their context ready, against 0\.0% with no preparation and (\d+\.\d)% with planner\.$/.exec(last);
    expect(share, last).not.toBeNull();
    expect(Number(share![1])).toBeCloseTo((100 * Number(share![2])) / Number(share![3]), 1);
    // Progress lines report what moves (waits by outcome, consumers waiting), not the queue gauges that sit at 0.
    const progress = run.stderr.split('\n').filter((line) => /^\[ *\d+\.\d s\]/.test(line));
    expect(progress.length).toBeGreaterThan(0);
    for (const line of progress) {
      expect(line).toMatch(/waits \d+ \(new units \d+, joined \d+, already completed \d+\), waiting now \d+/);
      expect(line).not.toMatch(/queued|in flight/);
    }
  });

  it('exits non-zero with a clear message when the storage worker dies mid-run', () => {
    const result = spawnSync(process.execPath, [bin, 'demo', '--seconds', '5', '--storage-exit-after', '2', '--json'], { encoding: 'utf8', timeout: 60_000 });
    expect(result.signal).toBeNull(); // it ended by itself, not by the timeout
    expect(result.status).not.toBe(0);
    expect(result.stdout).toBe('');
    expect(result.stderr).toMatch(/storage worker/);
    if (implementation === 'native') expect(result.stderr).toMatch(/storage worker process \(pid \d+\) exited unexpectedly \(code 3\)/);
  });

  it('serves Prometheus metrics on 127.0.0.1 while it runs', async () => {
    const child = spawn(process.execPath, [bin, 'demo', '--metrics-port', '0', '--seconds', '3', '--json'], { stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = once(child, 'exit');
    let stderr = '';
    let stdout = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    const port = await new Promise<number>((resolve, reject) => {
      child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
        stderr += chunk;
        const match = /metrics: http:\/\/127\.0\.0\.1:(\d+)\/metrics/.exec(stderr);
        if (match) resolve(Number(match[1]));
      });
      child.once('exit', () => reject(new Error(`demo exited before printing its metrics port: ${stderr}`)));
    });
    const response = await fetch(`http://127.0.0.1:${port}/metrics`);
    expect(response.status).toBe(200);
    const text = await response.text();
    expect(text).toContain('waitprep_waits_total');
    expect(text).toContain('waitprep_table_slots');
    const [code] = await exited;
    expect(code, stderr).toBe(0);
    expect(JSON.parse(stdout).stats.waits).toBeGreaterThan(0);
  });

  it('--planner: the planner admits every unit, the storage worker gets its eviction values, and the summary stays consistent', () => {
    const stdout = execFileSync(process.execPath, [bin, 'demo', '--planner', '--seconds', '3', '--json'], { encoding: 'utf8', timeout: 110_000 });
    const { stats, planner, preparation, drained } = JSON.parse(stdout);
    expect(stats.waits).toBeGreaterThan(0);
    // Every onWait the coordinator saw is the planner's; every wake of a pause it admitted went through onWake.
    expect(stats.waits).toBe(planner.admissions);
    expect(planner.begins).toBe(planner.wakes + planner.cancels + planner.replaced);
    expect(stats.wakes).toBe(planner.wakes - planner.wakesWithoutTicket);
    expect(stats.hits + sum(stats.misses)).toBe(stats.wakes);
    expect(planner.replans).toBeGreaterThan(0);
    expect(preparation.storage.valueUpdates).toBeGreaterThan(0);
    expect(preparation.driver.succeeded).toBe(stats.completed);
    expect(drained).toBe(true);
  });

  it('--compare replays one trace under no-preparation, fifo-dedup and fifo-no-dedup', () => {
    const stdout = execFileSync(process.execPath, [bin, 'demo', '--compare', '--seconds', '3', '--json'], { encoding: 'utf8', timeout: 90_000 });
    const out = JSON.parse(stdout);
    expect(out.standIn).toBe(true);
    expect(out.missCostMs).toBe(50);
    expect(out.trace.seconds).toBe(3);
    const byName = Object.fromEntries(out.policies.map((p: { name: string }) => [p.name, p]));
    expect(Object.keys(byName).sort()).toEqual(['fifo-dedup', 'fifo-no-dedup', 'no-preparation']);
    expect(byName['no-preparation'].hits).toBe(0);
    expect(byName['no-preparation'].unitsPrepared).toBe(0);
    expect(byName['no-preparation'].bytesPrepared).toBe(0);
    expect(byName['fifo-no-dedup'].unitsPrepared).toBeGreaterThanOrEqual(byName['fifo-dedup'].unitsPrepared);
    for (const p of out.policies) {
      expect(p.wakes).toBe(out.trace.summary.wakes);
      expect(p.waits).toBe(out.trace.summary.waits);
      expect(p.hits + sum(p.misses)).toBe(p.wakes);
      expect(p.wakeLatencyMs.count).toBe(p.wakes);
      expect(p.wakeLatencyMs.p95).toBeGreaterThanOrEqual(p.wakeLatencyMs.p50);
    }
  });

  it('rejects an unknown option with exit code 2', () => {
    const result = spawnSync(process.execPath, [bin, 'demo', '--no-such-option'], { encoding: 'utf8' });
    expect(result.status).toBe(2);
    expect(result.stderr).toMatch(/unknown option/);
  });

  it('rejects options --compare does not take, and a malformed number, with exit code 2', () => {
    const both = spawnSync(process.execPath, [bin, 'demo', '--compare', '--planner'], { encoding: 'utf8' });
    expect(both.status).toBe(2);
    expect(both.stderr).toMatch(/--compare runs its own three policies, not --planner/);
    for (const args of [['--compare', '--metrics-port', '0'], ['--compare', '--storage-exit-after', '1'], ['--seconds', 'soon']]) {
      const result = spawnSync(process.execPath, [bin, 'demo', ...args], { encoding: 'utf8' });
      expect(result.status).toBe(2);
      expect(result.stdout).toBe('');
      expect(result.stderr).toMatch(/^waitprep demo: .*\n\nusage: waitprep demo/);
    }
  });
});

describe('waitprep', () => {
  it('rejects an unknown command with exit code 2', () => {
    let status = 0;
    try {
      execFileSync(process.execPath, [bin, 'no-such-command'], { stdio: 'pipe' });
    } catch (error) {
      status = (error as { status: number }).status;
    }
    expect(status).toBe(2);
  });
});
