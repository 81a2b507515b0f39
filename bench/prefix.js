#!/usr/bin/env node
// A chunked request's prefix lookup from Node: pin and release a prefix of READY chunks with one
// `tryPinPrefix` + one `unpinMany` (one addon crossing each), against one `tryPin` + one
// `lease.close()` per chunk. Also the prefix by packed digests (digest leases). Each
// implementation runs in a fresh process; the median of the rounds, in ns per whole prefix, of
// the process's CPU time (user + system), not wall time: on a shared host the time a process
// waits for a core is noise larger than the difference measured.
// The C floor of the same comparison is `core_bench prefix` (bench/native/) (docs/benchmarks.md).
//
//   node bench/prefix.js                          table (after `npm run build`)
//   node bench/prefix.js --json                   one JSON object on stdout, nothing else
//   ... --chunks 128 --iterations 2000 --rounds 7 --impl native,js
//
// A benchmark, not a test: it checks its own results (every chunk pinned and released, every
// time) and never judges a time.
import { fileURLToPath } from 'node:url';
import { implementation, openLeaseTable, unlinkLeaseTable } from 'waitprep';
import { benchEnv, benchKey, commandLine, eachImplementation } from './common.js';

const { flag, option, count } = commandLine();
const chunks = count('chunks', 128);
const iterations = count('iterations', 2000);
const rounds = count('rounds', 7);

/** One implementation, in this process: the median ns per prefix of each way. */
function measure(impl) {
  const name = `waitprep-bench-prefix-${process.pid}-${impl}`;
  const producer = openLeaseTable({ name, role: 'producer', create: { capacity: chunks * 4 }, implementation: impl });
  const table = openLeaseTable({ name, role: 'consumer', implementation: impl, ...(producer.sharedBuffer ? { buffer: producer.sharedBuffer } : {}) });
  try {
    const keys = Array.from({ length: chunks }, (_, i) => benchKey(i));
    const packed = new Uint8Array(32 * chunks);
    keys.forEach((key, i) => {
      producer.publish(producer.reserve(key), { sizeBytes: 4096, location: i, checksum: i, codecId: 1, representationVersion: 1 });
      packed.set(key.digest, 32 * i);
    });
    const ways = {
      'tryPinPrefix(keys) + unpinMany': () => {
        const leases = table.tryPinPrefix(keys);
        if (leases.length !== chunks || table.unpinMany(leases) !== chunks) throw new Error('prefix: not every chunk pinned and released');
      },
      'tryPinPrefix(digests) + unpinMany': () => {
        const leases = table.tryPinPrefix(packed);
        if (leases.length !== chunks || table.unpinMany(leases) !== chunks) throw new Error('packed prefix: not every chunk pinned and released');
      },
      [`${chunks} x (tryPin + close)`]: () => {
        const leases = [];
        for (const key of keys) {
          const lease = table.tryPin(key);
          if (lease.kind !== 'lease') break;
          leases.push(lease);
        }
        if (leases.length !== chunks) throw new Error('single pins: not every chunk pinned');
        for (const lease of leases) lease.close();
      },
    };
    const samples = Object.fromEntries(Object.keys(ways).map((way) => [way, []]));
    for (const fn of Object.values(ways)) for (let i = 0; i < iterations / 10; i++) fn(); // warm up
    for (let r = 0; r < rounds; r++) {
      for (const [way, fn] of Object.entries(ways)) {
        const t0 = process.cpuUsage();
        for (let i = 0; i < iterations; i++) fn();
        const used = process.cpuUsage(t0);
        samples[way].push(((used.user + used.system) * 1000) / iterations);
      }
    }
    if (table.summary().pinnedSlots !== 0) throw new Error('a pin was left behind');
    return Object.fromEntries(Object.entries(samples).map(([way, ns]) => [way, ns.sort((a, b) => a - b)[Math.floor(ns.length / 2)]]));
  } finally {
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
    for (const [way, ns] of Object.entries(result)) results.push({ implementation: impl, way, ns_per_prefix: ns, ns_per_chunk: ns / chunks });
  }
  const env = benchEnv({ chunks, iterations, rounds });
  if (flag('json')) {
    process.stdout.write(JSON.stringify({ env, results }) + '\n');
  } else {
    console.log(`prefix lookup of ${chunks} READY chunks — ${env.date}, ${env.cpu} (${env.cores} cores), Node ${env.node}; median of ${rounds} rounds of ${iterations}, CPU time`);
    console.table(results.map((r) => ({ ...r, ns_per_prefix: Math.round(r.ns_per_prefix), ns_per_chunk: r.ns_per_chunk.toFixed(1) })));
  }
}
