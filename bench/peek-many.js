#!/usr/bin/env node
// An engine's batched lookup from Node: N READY chunks asked at once (SGLang's batch_exists,
// LMCache's batched_contains) as one `peekMany` or `peekPrefix` call, against a loop of `peek`.
// Beside them their floors: the addon's flat `peekMany` call with its buffers made beforehand
// (the crossing and the C work, no LeaseTable code), and the C work alone (N peeks inside one
// call of 64 x N). Each implementation runs in a fresh process; the median of the rounds, in ns
// per whole batch of the process's CPU time (user + system), not wall time: on a shared host the
// time a process waits for a core is noise larger than the difference measured.
//
//   node bench/peek-many.js                    table (after `npm run build`)
//   node bench/peek-many.js --json             one JSON object on stdout, nothing else
//   ... --chunks 128 --iterations 20000 --rounds 7 --impl native,js
//
// A benchmark, not a test: it checks its own results (every chunk found ready, every time) and
// never judges a time.
import { fileURLToPath } from 'node:url';
import { implementation, openLeaseTable, unlinkLeaseTable } from 'waitprep';
import { EXCHANGE } from 'waitprep/layout';
import { nativeAddon } from 'waitprep/testing';
import { benchEnv, benchKey, commandLine, eachImplementation } from './common.js';

const { flag, option, count } = commandLine();
const chunks = count('chunks', 128);
const iterations = count('iterations', 20000);
const rounds = count('rounds', 7);
const REPEAT = 64;

/** Median ns of CPU time per call of `fn` over `rounds` rounds of `n` calls. */
function median(fn, n) {
  for (let i = 0; i < n / 10; i++) fn();
  const samples = [];
  for (let r = 0; r < rounds; r++) {
    const t0 = process.cpuUsage();
    for (let i = 0; i < n; i++) fn();
    const used = process.cpuUsage(t0);
    samples.push(((used.user + used.system) * 1000) / n);
  }
  return samples.sort((a, b) => a - b)[Math.floor(samples.length / 2)];
}

/** One implementation, in this process: each way's median ns per batch, and its floor's name. */
function measure(impl) {
  const name = `waitprep-bench-peek-${process.pid}-${impl}`;
  const producer = openLeaseTable({ name, role: 'producer', create: { capacity: Math.max(chunks * 4, 64) }, implementation: impl });
  const table = openLeaseTable({ name, role: 'consumer', implementation: impl, ...(producer.sharedBuffer ? { buffer: producer.sharedBuffer } : {}) });
  const raw = impl === 'native' ? nativeAddon.open(name, false, 0, 0o600, new BigUint64Array(EXCHANGE.WORDS)) : null;
  try {
    if (raw !== null && raw[0] !== 0) throw new Error(`the addon's open failed with status ${raw[0]}`);
    const keys = Array.from({ length: chunks }, (_, i) => benchKey(i));
    const packed = new Uint8Array(32 * chunks);
    keys.forEach((key, i) => {
      producer.publish(producer.reserve(key), { sizeBytes: 4096, location: i, checksum: i, codecId: 1, representationVersion: 1 });
      packed.set(key.digest, 32 * i);
    });
    const allReady = (answers) => answers.length === chunks && answers.every((a) => a.kind === 'ready');
    const check = (ok, way) => {
      if (!ok) throw new Error(`${way}: not every chunk was found ready`);
    };
    const rows = [];
    const add = (way, ns, floor = null) => rows.push({ way, ns, floor });
    add(`${chunks} x peek(key)`, median(() => check(allReady(keys.map((k) => table.peek(k))), 'peek loop'), iterations / 4));
    let flat = null;
    if (raw !== null) {
      const h = raw[1];
      const statuses = new Uint8Array(chunks);
      flat = median(() => check(nativeAddon.peekMany(h, packed, chunks, statuses) === chunks, 'flat'), iterations * 4);
      const big = new Uint8Array(32 * chunks * REPEAT);
      for (let r = 0; r < REPEAT; r++) big.set(packed, r * packed.length);
      const bigStatuses = new Uint8Array(chunks * REPEAT);
      const inside = median(() => check(nativeAddon.peekMany(h, big, chunks * REPEAT, bigStatuses) === chunks * REPEAT, 'inside'), iterations / REPEAT) / REPEAT;
      add(`addon peekMany(h, digests, ${chunks}, statuses), flat`, flat, inside);
    }
    add('peekMany(keys)', median(() => check(allReady(table.peekMany(keys)), 'peekMany keys'), iterations), flat);
    add('peekMany(digests)', median(() => check(allReady(table.peekMany(packed)), 'peekMany digests'), iterations), flat);
    add('peekPrefix(keys)', median(() => check(table.peekPrefix(keys) === chunks, 'peekPrefix keys'), iterations), flat);
    add('peekPrefix(digests)', median(() => check(table.peekPrefix(packed) === chunks, 'peekPrefix digests'), iterations), flat);
    if (table.summary().pinnedSlots !== 0) throw new Error('a peek left a pin');
    return rows;
  } finally {
    if (raw !== null && raw[0] === 0) nativeAddon.close(raw[1]);
    table.close();
    producer.close();
    if (impl === 'native') unlinkLeaseTable(name);
  }
}

const child = option('child', null);
if (child !== null) {
  process.stdout.write(JSON.stringify(measure(child)) + '\n');
} else {
  const available = implementation === 'native' ? ['native', 'js'] : ['js'];
  const childArgs = ['--chunks', String(chunks), '--iterations', String(iterations), '--rounds', String(rounds)];
  const results = [];
  for (const [impl, result] of eachImplementation(fileURLToPath(import.meta.url), childArgs, option('impl', null), available)) {
    for (const { way, ns, floor } of result) results.push({ implementation: impl, way, ns_per_batch: ns, floor_ns: floor, x_floor: floor ? ns / floor : null });
  }
  const env = benchEnv({ chunks, iterations, rounds });
  if (flag('json')) {
    process.stdout.write(JSON.stringify({ env, results }) + '\n');
  } else {
    console.log(`batched peek of ${chunks} READY chunks — ${env.date}, ${env.cpu} (${env.cores} cores), Node ${env.node}; median of ${rounds} rounds, CPU time`);
    console.log(`floor: for the addon's row, the C work alone (${chunks} peeks inside one call of ${REPEAT} x ${chunks}); for the LeaseTable rows, the addon's flat call`);
    console.table(
      results.map((r) => ({
        implementation: r.implementation,
        way: r.way,
        ns_per_batch: Math.round(r.ns_per_batch),
        floor_ns: r.floor_ns === null ? '-' : Math.round(r.floor_ns),
        x_floor: r.x_floor === null ? '-' : r.x_floor.toFixed(2),
      })),
    );
  }
}
