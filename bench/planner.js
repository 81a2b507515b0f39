#!/usr/bin/env node
// What the pause planner (lib/planner) costs the orchestrator's event loop, with N pauses open
// (default 5,000), over a WaitCoordinator on a stub backend:
//
//   event_ns    one pause event: a pause wakes (planner.wake, which learns its length and, for an
//               admitted pause, calls onWake) and a new one begins (planner.begin: keep, prepare
//               through onWait, or neither), so the open count stays N; the cycle's time over
//               its two events, median of the runs of CYCLES cycles each
//   replan_us   one replan with N open: every pause re-scored at its age, hints revised, the
//               prepared set chosen, admissions and withdrawals through the coordinator; median
//               of the runs, the clock moved 1 s between them
//   *_cpu_*     the same in the process's CPU time (process.cpuUsage: microsecond ticks, GC
//               helper threads included): on a shared machine wall time holds others' turns too
//   mix         what the pauses got: kept, admitted, neither (at the end)
//
// The statistics are trained first on the trace generator's tool mix (docs/agent-trace.md), so
// pauses differ as they would. Keys are built before the timing starts.
//
//   npm run bench:planner                  table
//   npm run -s bench:planner -- --json     one JSON object on stdout, nothing else
//   npm run bench:planner -- --quick       fewer runs (CI: proves it runs, never gates a time)
//   ... -- --open 1000,5000                the open-pause counts to measure
import { PausePlanner, WaitCoordinator, WaitLengthStats } from 'waitprep';
import { benchEnv, benchKey, commandLine, stubBackend } from './common.js';

const { flag, option } = commandLine();
const quick = flag('quick');
const sizes = option('open', '5000').split(',').map(Number);
if (sizes.some((n) => !Number.isSafeInteger(n) || n < 10)) throw new Error(`--open wants counts of at least 10, got ${option('open')}`);
const RUNS = quick ? 5 : 21;
const CYCLES = quick ? 500 : 2000;
const REPLANS = quick ? 5 : 41;
const GB = 1e9;

/** The generator's tool mix (lib/trace/trace.ts DEFAULT_TOOL_MIX): weight, and lognormal mu, sigma of seconds. */
const MIX = [['file', 0.6, -3.2, 1.0], ['shell', 0.2, -2.0, 1.6], ['build', 0.17, 1.0, 1.5], ['web', 0.015, 2.4, 0.4], ['subagent', 0.015, 4.5, 0.8]];

/** A deterministic stream (xorshift32) so every run measures the same pauses. */
function rng(seed) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return (s + 0.5) / 4294967296;
  };
}

function pickClass(u) {
  let acc = 0;
  for (const c of MIX) {
    acc += c[1];
    if (u < acc) return c;
  }
  return MIX[MIX.length - 1];
}

function trainedStats(random) {
  const stats = new WaitLengthStats();
  for (let i = 0; i < 20_000; i++) {
    const [name, , mu, sigma] = pickClass(random());
    const normal = Math.sqrt(-2 * Math.log(random())) * Math.cos(2 * Math.PI * random());
    stats.observe(stats.classOf(name), Math.exp(mu + sigma * normal));
  }
  return stats;
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor((s.length - 1) / 2)];
};

function measure(open) {
  const random = rng(0x5eed + open);
  const clock = { ms: 0 };
  const coordinator = new WaitCoordinator({ backend: stubBackend(), maxQueued: 1_000_000, maxWaiting: 1_000_000, historyLimit: 0, now: () => clock.ms });
  const planner = new PausePlanner({
    coordinator,
    // Retention for about a third of the open pauses (8 engines), an arena for about a tenth.
    budgets: { gpuRetainBytes: (open / 3 / 8) * 2 * GB, arenaBytes: (open / 10) * 2 * GB },
    links: { tierBytesPerSec: 96 * GB, unitBytesPerSec: 6 * GB },
    statistics: trainedStats(random),
    now: () => clock.ms,
  });
  const total = open + RUNS * CYCLES + 10;
  const keys = Array.from({ length: total }, (_, i) => benchKey(i));
  const starts = keys.map((key, i) => ({
    consumer: { engine: `engine-${i % 8}`, request: `agent-${i}`, generation: 0 },
    key,
    toolClass: pickClass(random())[0],
    bytes: (0.5 + 3.5 * random()) * GB,
  }));
  const live = [];
  let next = 0;
  for (; next < open; next++) live.push(planner.begin(starts[next]).pause);
  // Replans first (every pause aged, the prepared set revised), then the per-event cycles.
  const replanUs = [];
  const replanCpuUs = [];
  for (let r = 0; r < REPLANS; r++) {
    clock.ms += 1000;
    const c0 = process.cpuUsage();
    const t0 = process.hrtime.bigint();
    planner.replan();
    replanUs.push(Number(process.hrtime.bigint() - t0) / 1000);
    const c = process.cpuUsage(c0);
    replanCpuUs.push(c.user + c.system);
  }
  const eventNs = [];
  const eventCpuNs = [];
  let head = 0;
  for (let r = 0; r < RUNS; r++) {
    const c0 = process.cpuUsage();
    const t0 = process.hrtime.bigint();
    for (let c = 0; c < CYCLES; c++) {
      const result = planner.wake(live[head]);
      if (result !== null && result.kind === 'hit') result.lease.close();
      live[head] = planner.begin(starts[next++]).pause;
      head = (head + 1) % open;
      clock.ms += 1;
    }
    eventNs.push(Number(process.hrtime.bigint() - t0) / (2 * CYCLES));
    const c = process.cpuUsage(c0);
    eventCpuNs.push(((c.user + c.system) * 1000) / (2 * CYCLES));
  }
  const stats = planner.stats();
  // The benchmark checks its own counts: every pause begun, every woken one ended, N still open.
  if (stats.open !== open || stats.begins !== next || stats.wakes !== RUNS * CYCLES || stats.replans !== REPLANS) {
    throw new Error(`bench:planner counts are off: ${JSON.stringify(stats)}`);
  }
  let kept = 0;
  let admitted = 0;
  for (const p of live) {
    if (p.retained) kept++;
    else if (p.admitted) admitted++;
  }
  return {
    open,
    event_ns: Math.round(median(eventNs)),
    event_cpu_ns: Math.round(median(eventCpuNs)),
    replan_us: Math.round(median(replanUs)),
    replan_cpu_us: Math.round(median(replanCpuUs)),
    runs: RUNS,
    cycles_per_run: CYCLES,
    replans: REPLANS,
    mix: { kept, admitted, neither: open - kept - admitted },
    units_in_flight: planner.unitsInFlight,
  };
}

const results = sizes.map(measure);
const out = { env: benchEnv({ bench: 'planner', quick }), targets: { event_ns: 5000, replan_us: 2000 }, results };
if (flag('json')) {
  process.stdout.write(JSON.stringify(out) + '\n');
} else {
  console.log(`bench:planner on ${out.env.cpu} (${out.env.cores} cores), Node ${out.env.node}; targets: <= 5 us per pause event, <= 2 ms per replan at 5,000 open`);
  console.table(results.map((r) => ({ open: r.open, 'event (ns)': r.event_ns, 'event cpu (ns)': r.event_cpu_ns, 'replan (us)': r.replan_us, 'replan cpu (us)': r.replan_cpu_us, kept: r.mix.kept, admitted: r.mix.admitted, neither: r.mix.neither })));
}
