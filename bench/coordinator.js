#!/usr/bin/env node
// Cost of one full coordinator cycle (onWait, beginNext, complete, onWake,
// lease close) with N consumers already waiting, and bytes per waiting
// consumer. Each size runs in a fresh process (node --expose-gc).
//
//   npm run bench:coordinator                 table
//   npm run -s bench:coordinator -- --json    one JSON object on stdout, nothing else
//   npm run bench:coordinator -- --quick      smaller run, under 30 s
//   ... -- --sizes 1000,100000                choose the waiting counts
//   ... -- --request-chars 36                 flat request names of that many characters (default
//                                             `req-<i>`, 5-11): the coordinator hashes each name
//   node <V8 or Node flags> bench/coordinator.js   the children run with the same flags, after the
//                                             bench's own (for example
//                                             --max-inlined-bytecode-size-cumulative=5000; not --inspect)
//
// Steady state: N units are queued, one consumer each, on distinct keys. A
// cycle admits one new wait at the tail, issues the head, completes it, wakes
// its consumer (a hit) and closes the lease, so N stays constant. Keys are
// reused in a ring of N + 1024 with historyLimit 1000, so a reused key never
// finds terminal history and always queues anew. The backend hands out a
// fresh lease object per wake and pins nothing: the figure is the
// coordinator's own cost, not the lease table's (bench:pin measures that).
// cycle_cpu_ns is the process's CPU time over the same loop: on a shared
// machine it moves less than wall time with the neighbours' load.
// Each size runs once per ticket form (--tickets string,number: the
// coordinator's `tickets` option). alloc_floor_ns, measured in the same
// process, is what a cycle hands out, as this package makes it, and nothing else:
// the admission, the frozen consumer copy, the frozen work unit with its id
// and issue time, the lease and the hit result.
import { execFileSync } from 'node:child_process';
import { PerformanceObserver, performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { WaitCoordinator, implementation } from 'waitprep';
import { benchEnv, benchKey, commandLine, lastLine, stubBackend } from './common.js';

const { flag, option } = commandLine();

const RING_SPARE = 1024;
const HISTORY_LIMIT = 1000;

if (flag('child')) {
  const waiting = Number(option('waiting', '1000'));
  const cycles = Number(option('cycles', '100000'));
  const tickets = option('tickets', 'string');
  const requestChars = option('request-chars', null);
  process.stdout.write(JSON.stringify(await measure(waiting, cycles, tickets, requestChars === null ? null : Number(requestChars))) + '\n');
} else {
  await main();
}

async function main() {
  const quick = flag('quick');
  const json = flag('json');
  const sizes = option('sizes', '1000,100000,1000000').split(',').map(Number);
  const forms = option('tickets', 'string,number').split(',');
  if (forms.some((f) => f !== 'string' && f !== 'number')) throw new Error(`--tickets wants string and/or number, got ${option('tickets')}`);
  if (sizes.some((n) => !Number.isSafeInteger(n) || n < 1)) throw new Error(`--sizes wants positive integers, got ${option('sizes')}`);
  const requestChars = option('request-chars', null);
  if (requestChars !== null && !(Number.isSafeInteger(Number(requestChars)) && Number(requestChars) >= 12 && Number(requestChars) <= 4096)) {
    throw new Error(`--request-chars wants an integer in [12, 4096] (room for a unique name), got ${requestChars}`);
  }
  const cycles = Number(option('cycles', quick ? '200000' : '1000000'));
  const repeats = quick ? 1 : 3;
  const script = fileURLToPath(import.meta.url);
  const results = [];
  for (const waiting of sizes) {
    for (const tickets of forms) {
      const runs = [];
      for (let r = 0; r < repeats; r++) {
        const out = execFileSync(
          process.execPath,
          ['--expose-gc', '--max-old-space-size=8192', ...process.execArgv, script, '--child', '--waiting', String(waiting), '--cycles', String(cycles), '--tickets', tickets, ...(requestChars === null ? [] : ['--request-chars', requestChars])],
          { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] },
        );
        runs.push(JSON.parse(lastLine(out)));
      }
      runs.sort((a, b) => a.cycle_ns - b.cycle_ns);
      const median = runs[Math.floor(runs.length / 2)];
      results.push({ ...median, cycles, runs: runs.length });
    }
  }
  const env = benchEnv({ implementation, quick });
  if (json) {
    process.stdout.write(JSON.stringify({ env, results }) + '\n');
    return;
  }
  console.log(`waitprep coordinator cycle — ${env.date}, ${env.cpu} (${env.cores} cores), Node ${env.node}`);
  console.table(results.map((r) => ({ waiting: r.waiting, tickets: r.tickets, 'cycle ns': r.cycle_ns, 'CPU ns': r.cycle_cpu_ns, 'of which GC ns': r.gc_ns, 'harness ns': r.harness_ns, 'alloc floor ns': r.alloc_floor_ns, 'heap B/waiting': r.bytes_per_waiting, 'ArrayBuffer B/waiting': r.array_buffer_bytes_per_waiting, 'total B/waiting': r.total_bytes_per_waiting, cycles: r.cycles, runs: r.runs })));
  for (const tickets of forms) {
    const rows = results.filter((r) => r.tickets === tickets);
    const first = rows[0];
    const last = rows[rows.length - 1];
    if (rows.length > 1) console.log(`${tickets} tickets: growth ${first.waiting} -> ${last.waiting} waiting: ${(last.cycle_ns / first.cycle_ns).toFixed(2)}x`);
  }
}

async function measure(waiting, cycles, form, requestChars) {
  const ring = waiting + RING_SPARE;
  const keys = new Array(ring);
  for (let i = 0; i < ring; i++) keys[i] = benchKey(i);
  // As an orchestrator would, each wait names its consumer with a fresh object.
  // With --request-chars, names of that length: a fixed prefix, then the number in 12 digits, so
  // names differ only at the end, as ids with a common prefix (`chatcmpl-…`) do. Joined by
  // Array#join, which makes a flat string as a parsed JSON request would bring; a concatenation
  // or padStart of that length makes a rope, which the first read of its characters flattens.
  const prefix = requestChars === null ? '' : 'r'.repeat(requestChars - 12);
  const consumer = requestChars === null
    ? (i) => ({ engine: 'engine-0', request: `req-${i}`, generation: 0 })
    : (i) => ({ engine: 'engine-0', request: [prefix, String(i).padStart(12, '0')].join(''), generation: 0 });
  const tickets = new Array(ring).fill(null);
  const grant = { worker: 'bench-worker', grant: 'bench-grant' };
  const ok = { ok: true };
  const backend = stubBackend();
  const coordinator = new WaitCoordinator({ backend, maxQueued: waiting + 1, maxWaiting: waiting + 1, historyLimit: HISTORY_LIMIT, tickets: form });

  // Heap bytes per waiting consumer: what the coordinator holds for N waits,
  // measured after full GCs. Keys, the callers' consumers (their request
  // strings) and the ticket array were allocated before the baseline, so they
  // are not counted; the tickets the coordinator issues are.
  const callers = Array.from({ length: waiting }, (_, i) => consumer(i));
  // The coordinator's typed arrays (wait slots, demand records, their index) keep their memory
  // outside the JS heap, in ArrayBuffer backing stores: `heapUsed` does not count them, so they
  // are counted apart (`arrayBuffers`) and in the total.
  const memory = () => {
    for (let i = 0; i < 4; i++) globalThis.gc();
    const { heapUsed, arrayBuffers } = process.memoryUsage();
    return { heapUsed, arrayBuffers };
  };
  const before = memory();
  for (let i = 0; i < waiting; i++) {
    const admission = coordinator.onWait(callers[i], keys[i]);
    if (admission.status !== 'queued') throw new Error(`fill: expected queued, got ${admission.status}`);
    tickets[i] = admission.ticket;
  }
  const after = memory();
  const bytesPerWaiting = Math.round((after.heapUsed - before.heapUsed) / waiting);
  const bufferBytesPerWaiting = Math.round((after.arrayBuffers - before.arrayBuffers) / waiting);
  callers.length = 0;

  let next = waiting; // ring index of the next new wait
  let head = 0; // ring index of the oldest waiting consumer
  const cycle = () => {
    const admission = coordinator.onWait(consumer(next), keys[next]);
    if (admission.status !== 'queued') throw new Error(`cycle: expected queued, got ${admission.status}`);
    tickets[next] = admission.ticket;
    next = next + 1 === ring ? 0 : next + 1;
    const work = coordinator.beginNext(grant);
    if (work === null || work.key !== keys[head]) throw new Error('cycle: beginNext did not issue the head of the FIFO');
    if (coordinator.complete(work, ok) !== 'applied') throw new Error('cycle: completion was stale');
    const wake = coordinator.onWake(tickets[head]);
    if (wake.kind !== 'hit') throw new Error(`cycle: expected a hit, got ${wake.reason}`);
    wake.lease.close();
    tickets[head] = null;
    head = head + 1 === ring ? 0 : head + 1;
  };

  const warmup = Math.min(cycles, 50_000);
  for (let i = 0; i < warmup; i++) cycle();
  let gcNs = 0;
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) gcNs += entry.duration * 1e6;
  });
  observer.observe({ entryTypes: ['gc'] });
  const cpuStart = process.cpuUsage();
  const start = process.hrtime.bigint();
  for (let i = 0; i < cycles; i++) cycle();
  const elapsed = Number(process.hrtime.bigint() - start);
  const cpu = process.cpuUsage(cpuStart);
  await new Promise((resolve) => setTimeout(resolve, 50)); // let the observer deliver
  observer.disconnect();

  // The harness alone: the same ring walk and the same reads of keys,
  // consumers and tickets, with no coordinator call. Part of cycle_ns is this
  // (at 1M waiting, mostly cache misses on pre-built keys a real caller would
  // have just made); it is reported beside it, not subtracted.
  let sink = 0;
  const harnessStart = process.hrtime.bigint();
  for (let i = 0; i < cycles; i++) {
    const c = consumer(next);
    sink += keys[next].hex.length + c.request.length + keys[head].hex.length + (tickets[head]?.length ?? 0);
    tickets[next] = tickets[head];
    next = next + 1 === ring ? 0 : next + 1;
    head = head + 1 === ring ? 0 : head + 1;
  }
  const harnessNs = Number(process.hrtime.bigint() - harnessStart) / cycles;
  if (sink === 0) throw new Error('harness read nothing');

  const allocFloorNs = allocFloor(cycles, keys, backend, grant);

  const stats = coordinator.stats();
  if (stats.waiting !== waiting || stats.queued !== waiting || stats.hits !== warmup + cycles || stats.inFlight !== 0) {
    throw new Error(`bench miscounted: ${JSON.stringify(stats)}`);
  }
  return { waiting, cycle_ns: Math.round(elapsed / cycles), cycle_cpu_ns: Math.round(((cpu.user + cpu.system) * 1000) / cycles), gc_ns: Math.round(gcNs / cycles), harness_ns: Math.round(harnessNs), alloc_floor_ns: allocFloorNs, bytes_per_waiting: bytesPerWaiting, array_buffer_bytes_per_waiting: bufferBytesPerWaiting, total_bytes_per_waiting: bytesPerWaiting + bufferBytesPerWaiting, tickets: form, request_chars: requestChars };
}

/**
 * What one cycle hands out, as this package makes it (frozen), and nothing else, per cycle in ns: the
 * admission with a numeric ticket, the frozen consumer copy, the frozen work unit (its id
 * string, issue time and two private fields, as IssuedWorkUnit has), the backend's lease and
 * the hit result. No lookup, no validation, no bookkeeping: a floor, not a coordinator.
 */
function allocFloor(cycles, keys, backend, grant) {
  class Unit {
    #controller = null;
    #aborted = false;
    constructor(id, key, issuedAt) {
      this.id = id;
      this.key = key;
      this.readiness = 'host';
      this.target = null;
      this.grant = grant;
      this.issuedAt = issuedAt;
      Object.freeze(this);
    }
    get aborted() {
      return this.#aborted || this.#controller !== null;
    }
  }
  const want = Object.freeze({ readiness: 'host' });
  const ring = keys.length;
  const held = new Array(ring).fill(null);
  let sink = 0;
  const once = (i) => {
    const at = i % ring;
    const c = Object.freeze({ engine: 'engine-0', request: `req-${at}`, generation: 0 });
    const admission = { status: 'queued', ticket: 2 ** 31 + i };
    const work = new Unit(`wp0123456789abcdef.u${i}`, keys[at], performance.now());
    const result = { kind: 'hit', lease: backend.tryPinReady(work.key, c, want) };
    held[at] = admission;
    sink += result.lease.slot + work.id.length + (work.aborted ? 1 : 0);
  };
  const warmup = Math.min(cycles, 50_000);
  for (let i = 0; i < warmup; i++) once(i);
  const start = process.hrtime.bigint();
  for (let i = 0; i < cycles; i++) once(i);
  const ns = Number(process.hrtime.bigint() - start) / cycles;
  if (sink === 0 || held[0] === null) throw new Error('alloc floor made nothing');
  return Math.round(ns);
}
