#!/usr/bin/env node
// What a wake costs when it comes after the event loop sat idle, as wakes on a serving host do:
// `onWake(ticket)` + `lease.close()` timed alone, 2 ms, 20 ms and 200 ms after the loop last ran,
// against the same call in a hot loop and against this run's memory floor (a dependent random
// load over 1 GiB). Each backend runs in a fresh process; the parent measures the floor first.
//
//   npm run bench:sporadic                    table
//   npm run -s bench:sporadic -- --json       one JSON object on stdout, nothing else
//   npm run bench:sporadic -- --quick         smaller run (a 256 MiB floor, few wakes), ~10 s
//   ... -- --impl native,js,stub,noop --idle 2,20  choose backends and idle times (ms)
//   ... -- --tickets number                    the coordinator's numeric tickets (default string)
//   node <V8 or Node flags> bench/sporadic.js  each backend's process runs with the same flags (not --inspect)
//
// One wake: onWait (a new consumer on a key that must queue), beginNext, the producer's reserve +
// publish of the key in the lease table, complete, then the idle time (a setTimeout, so the loop
// really is idle and nothing of this process runs), then the timed onWake + close, then the
// eviction of the key (outside the timed part). Backends: `native` and `js` are the lease table
// through leaseTableBackend (a consumer handle beside the producer, 65,536 slots); `stub` hands
// out a fresh lease object and pins nothing (the coordinator's own part, as bench:coordinator);
// `noop` is the floor under them: the same cycle on the stub, but the timed call only reads one
// field of an object (the wake itself runs after the second clock read, untimed). After an idle
// it is what the runtime's own clock reads and one load cost when the process wakes; the rest of
// a sporadic wake is waitprep's code (and the table) running cold.
// Each sporadic sample also times a second wake, on another wait admitted before the same idle,
// right after the first: its code is warm again and its own data is not, which tells the cost of
// cold code from that of a cold wait.
// "In optimized code": every process first runs the same cycle hot (HOT cycles, no idle), which
// is also the hot figure reported beside the sporadic ones.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { WaitCoordinator, implementation, leaseTableBackend, openLeaseTable, unlinkLeaseTable } from 'waitprep';
import { nearestRank } from '../experiment/percentile.js';
import { benchEnv, benchKey, commandLine, lastLine, stubBackend } from './common.js';

const { flag, option } = commandLine();

const IMPLS = ['native', 'js', 'stub', 'noop'];
const RING = 4096;
const HISTORY_LIMIT = 16;
const CAPACITY = 1 << 16;
const HOT = 20_000;
const CHASE_BATCH = 1000;
/** Wakes measured per idle time, full and --quick; the longer idles get fewer (each costs its idle). */
const WAKES = { full: { 2: 1000, 20: 300, 200: 50 }, quick: { 2: 40, 20: 15, 200: 4 } };
const META = { sizeBytes: 1 << 20, location: 4096, checksum: 0xc0ffee, codecId: 1, representationVersion: 1 };

if (flag('child')) {
  const idles = option('idle').split(',').map(Number);
  process.stdout.write(JSON.stringify(await child(option('impl'), idles, flag('quick'), option('tickets', 'string'))) + '\n');
} else {
  await main();
}

async function main() {
  const quick = flag('quick');
  const impls = option('impl', IMPLS.join(',')).split(',');
  if (impls.some((i) => !IMPLS.includes(i))) throw new Error(`--impl wants some of ${IMPLS.join(',')}, got ${impls}`);
  const idles = option('idle', '2,20,200');
  const tickets = option('tickets', 'string');
  if (tickets !== 'string' && tickets !== 'number') throw new Error(`--tickets wants string or number, got ${tickets}`);
  if (idles.split(',').some((ms) => !(Number(ms) >= 0))) throw new Error(`--idle wants milliseconds, got ${idles}`);
  const floorMiB = Number(option('floor-mib', quick ? '256' : '1024'));
  const floor = memoryFloor(floorMiB, quick ? 500_000 : 4_000_000);
  const script = fileURLToPath(import.meta.url);
  const results = [];
  for (const impl of impls) {
    if (impl === 'native' && implementation !== 'native') {
      results.push({ implementation: impl, skipped: `the native addon is not loaded (implementation ${implementation})` });
      continue;
    }
    const out = execFileSync(process.execPath, [...process.execArgv, script, '--child', '--impl', impl, '--idle', idles, '--tickets', tickets, ...(quick ? ['--quick'] : [])], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    results.push(JSON.parse(lastLine(out)));
  }
  for (const r of results) {
    for (const row of r.rows ?? []) {
      row.p50_floors = Math.round((row.p50_ns / floor.ns_per_load) * 10) / 10;
      row.p99_floors = Math.round((row.p99_ns / floor.ns_per_load) * 10) / 10;
    }
  }
  const env = benchEnv({ implementation, quick, floor, tickets, timing: 'one wake per sample: onWake + lease.close between two process.hrtime.bigint() reads (~50 ns of clock inside each)' });
  if (flag('json')) {
    process.stdout.write(JSON.stringify({ env, results }) + '\n');
    return;
  }
  console.log(`waitprep sporadic wake (onWake + lease.close) — ${env.date}, ${env.cpu} (${env.cores} cores), Node ${env.node}${quick ? ', --quick' : ''}`);
  console.log(`tickets: ${tickets}`);
  console.log(`memory floor: ${floor.ns_per_load} ns per dependent random load over ${floor.mib} MiB (${floor.pages})`);
  const table = [];
  for (const r of results) {
    if (r.skipped) {
      console.log(`skipped ${r.implementation}: ${r.skipped}`);
      continue;
    }
    for (const row of r.rows) {
      table.push({ backend: r.implementation, idle: row.idle_ms === null ? 'hot loop' : `${row.idle_ms} ms`, 'p50 ns': row.p50_ns, 'p99 ns': row.p99_ns, 'max ns': row.max_ns, 'p50 / floor': row.p50_floors, 'second wake p50 ns': row.second_p50_ns ?? '', wakes: row.wakes });
    }
  }
  console.table(table);
}

/**
 * ns per load of a pointer chase over `mib` MiB: one index per 64-byte line, the lines in one
 * random cycle (Sattolo), so each load waits for the last and no prefetcher can guess the next;
 * the median over batches of CHASE_BATCH loads.
 * The page size is what the kernel gave the ArrayBuffer: read from AnonHugePages around it.
 */
function memoryFloor(mib, loads) {
  const before = anonHugeKiB();
  const words = (mib * 1024 * 1024) / 4;
  const lines = words / 16;
  const a = new Uint32Array(words);
  const order = new Uint32Array(lines);
  for (let i = 0; i < lines; i++) order[i] = i;
  let x = 0x2545f491;
  for (let i = lines - 1; i > 0; i--) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    const j = (x >>> 0) % i;
    const t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  for (let i = 0; i < lines; i++) a[order[i] * 16] = order[(i + 1) % lines] * 16;
  const huge = anonHugeKiB();
  // Timed in batches of CHASE_BATCH loads and read at the median batch, as the wakes are read
  // at their median: on a shared machine a long run would also time other processes' turns.
  let at = chase(a, 0, loads / 4);
  const batches = Math.max(1, Math.floor(loads / CHASE_BATCH));
  const perLoad = new Float64Array(batches);
  for (let b = 0; b < batches; b++) {
    const t0 = process.hrtime.bigint();
    at = chase(a, at, CHASE_BATCH);
    perLoad[b] = Number(process.hrtime.bigint() - t0) / CHASE_BATCH;
  }
  if (at >= words) throw new Error('memory floor: the chase left the array');
  const ns = nearestRank(perLoad.sort(), 0.5);
  const thp = readOr('/sys/kernel/mm/transparent_hugepage/enabled', 'unknown').trim();
  const hugeMiB = before === null || huge === null ? null : Math.round((huge - before) / 1024);
  const pages = hugeMiB === null ? `page size unknown; transparent_hugepage: ${thp}` : hugeMiB >= mib / 2 ? `2 MiB pages (${hugeMiB} MiB AnonHugePages), transparent_hugepage: ${thp}` : `4 KiB pages (${hugeMiB} MiB AnonHugePages), transparent_hugepage: ${thp}`;
  return { mib, loads: batches * CHASE_BATCH, batch: CHASE_BATCH, ns_per_load: Math.round(ns * 10) / 10, pages };
}

/** `loads` dependent loads from `at`; one function for the warm-up and the timed run, so the timed one runs optimized. */
function chase(a, at, loads) {
  for (let k = 0; k < loads; k++) at = a[at];
  return at;
}

function readOr(path, fallback) {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return fallback;
  }
}

function anonHugeKiB() {
  const m = /AnonHugePages:\s+(\d+) kB/.exec(readOr('/proc/self/smaps_rollup', ''));
  return m === null ? null : Number(m[1]);
}

async function child(impl, idles, quick, tickets) {
  const keys = Array.from({ length: RING }, (_, i) => benchKey(i));
  const name = `waitprep-bench-sporadic-${process.pid}`;
  let producer = null;
  let consumer = null;
  let backend;
  if (impl === 'stub' || impl === 'noop') {
    backend = stubBackend();
  } else {
    producer = openLeaseTable({ name, role: 'producer', create: { capacity: CAPACITY }, implementation: impl });
    consumer = openLeaseTable({ name, role: 'consumer', implementation: impl, ...(impl === 'js' ? { buffer: producer.sharedBuffer } : {}) });
    backend = leaseTableBackend(consumer);
  }
  try {
    const coordinator = new WaitCoordinator({ backend, maxQueued: 4, maxWaiting: 4, historyLimit: HISTORY_LIMIT, tickets });
    const grant = { worker: 'bench-worker', grant: 'bench-grant' };
    const ok = { ok: true };
    let n = 0;
    // Everything up to the idle: the wait, its preparation issued, published and completed.
    const prepare = () => {
      const key = keys[n % RING];
      const admission = coordinator.onWait({ engine: 'engine-0', request: `req-${n}`, generation: 0 }, key);
      if (admission.status !== 'queued') throw new Error(`sporadic: expected queued, got ${admission.status}`);
      n++;
      const work = coordinator.beginNext(grant);
      if (work === null || work.key !== key) throw new Error('sporadic: beginNext did not issue the wait\'s unit');
      if (producer !== null) producer.publish(producer.reserve(key), META);
      if (coordinator.complete(work, ok) !== 'applied') throw new Error('sporadic: completion was stale');
      return { ticket: admission.ticket, key };
    };
    // The timed part, one function for the hot and the sporadic runs, so both run the same code.
    const wakeTimed = (ticket) => {
      const t0 = process.hrtime.bigint();
      const result = coordinator.onWake(ticket);
      if (result.kind === 'hit') result.lease.close();
      const t1 = process.hrtime.bigint();
      if (result.kind !== 'hit') throw new Error(`sporadic: expected a hit, got ${result.reason}`);
      return Number(t1 - t0);
    };
    // noop: the same two clock reads around one field read of an object the idle left alone; the
    // read's value is checked, so it cannot be dropped. The wake then runs untimed.
    const probe = { field: 1 };
    const readOne = (o) => o.field;
    const noopTimed = (ticket) => {
      const t0 = process.hrtime.bigint();
      const value = readOne(probe);
      const t1 = process.hrtime.bigint();
      if (value !== 1) throw new Error('sporadic: the probe changed');
      const result = coordinator.onWake(ticket);
      if (result.kind !== 'hit') throw new Error(`sporadic: expected a hit, got ${result.reason}`);
      result.lease.close();
      return Number(t1 - t0);
    };
    const wake = impl === 'noop' ? noopTimed : wakeTimed;
    const after = (key) => {
      if (producer !== null && producer.tryEvict(key) !== 'evicted') throw new Error('sporadic: the key did not evict after its wake');
    };
    // The hot phase runs the sporadic phase's own sequence (two waits, two wakes), so each path
    // the sporadic wakes take was optimized with its own feedback: a path the hot phase never ran
    // (a second live wait, say) would deoptimize on its first sporadic run and time the deopt.
    const hot = new Float64Array(HOT);
    for (let i = 0; i < HOT; i += 2) {
      const first = prepare();
      const second = prepare();
      hot[i] = wake(first.ticket);
      hot[i + 1] = impl === 'noop' ? noopTimed(second.ticket) : wakeTimed(second.ticket);
      after(first.key);
      after(second.key);
    }
    const rows = [summary(null, hot.subarray(HOT / 2))];
    const counts = WAKES[quick ? 'quick' : 'full'];
    for (const idle of idles) {
      const count = counts[idle] ?? Math.max(4, Math.round(counts[20] * (20 / Math.max(idle, 1))));
      const samples = new Float64Array(count);
      const seconds = new Float64Array(count);
      for (let i = 0; i < count; i++) {
        const first = prepare();
        const second = prepare();
        await new Promise((resolve) => setTimeout(resolve, idle));
        samples[i] = wake(first.ticket);
        // A second wake right after the first, on another wait: the code is warm again, the
        // data of its own wait is not. For noop there is no timed first wake to follow.
        seconds[i] = impl === 'noop' ? (noopTimed(second.ticket), Number.NaN) : wakeTimed(second.ticket);
        after(first.key);
        after(second.key);
      }
      rows.push({ ...summary(idle, samples), second_p50_ns: impl === 'noop' ? null : Math.round(nearestRank(Float64Array.from(seconds).sort(), 0.5)) });
    }
    const stats = coordinator.stats();
    if (stats.hits !== n || stats.waiting !== 0) throw new Error(`sporadic: bench miscounted: ${JSON.stringify(stats)}`);
    return { implementation: impl, rows };
  } finally {
    consumer?.close();
    producer?.close();
    if (impl === 'native') unlinkLeaseTable(name);
  }
}

function summary(idle, samples) {
  const sorted = Float64Array.from(samples).sort();
  const at = (q) => Math.round(nearestRank(sorted, q));
  return { idle_ms: idle, wakes: samples.length, p50_ns: at(0.5), p99_ns: at(0.99), max_ns: at(1) };
}
