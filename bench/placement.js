#!/usr/bin/env node
// How often a publish finds no room at a steady load: the table is filled with random keys to the
// load asked, then each round evicts a random resident and reserves fresh keys until one takes a
// slot. A reserve answered ERR_TABLE_FULL (every slot the key may use is taken) is a failure; the
// rate is failures / reserves. Keys are bench keys of fresh indexes, so their digests are random.
// Native and the JavaScript fallback run the same sequence and must fail identically (the same
// placement); a difference is an error, not a figure. Also printed: the share of the residents at
// the end that sit in their first bucket (a hit there probes one bucket; docs/lease-table.md,
// "Placement"). Run after `npm run build`.
//
//   node bench/placement.js                            table
//   node bench/placement.js --json                     one JSON object on stdout, nothing else
//   ... --capacity 4096 --rounds 100000 --loads 0.5,0.75
import { implementation, openLeaseTable, unlinkLeaseTable } from 'waitprep';
import * as testing from 'waitprep/testing';
import { benchEnv, benchKey } from './common.js';

const args = process.argv.slice(2);
function option(name, fallback) {
  const at = args.indexOf(name);
  return at >= 0 ? args[at + 1] : fallback;
}
const capacity = Number(option('--capacity', '4096'));
const rounds = Number(option('--rounds', '100000'));
const loads = option('--loads', '0.5,0.75').split(',').map(Number);
const json = args.includes('--json');
if (!Number.isInteger(capacity) || capacity < 1) throw new Error(`--capacity: a positive integer, got ${option('--capacity')}`);
if (!Number.isInteger(rounds) || rounds < 1) throw new Error(`--rounds: a positive integer, got ${option('--rounds')}`);
if (loads.some((l) => !(l > 0 && l < 1))) throw new Error(`--loads: fractions in (0, 1), got ${option('--loads')}`);
const impls = implementation === 'native' ? ['native', 'js'] : ['js'];
const META = { sizeBytes: 1, location: 0, checksum: 0, codecId: 1, representationVersion: 1 };

/** A small seeded generator (xorshift32), so that every implementation evicts the same residents. */
function generator(seed) {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 0x1_0000_0000;
  };
}

/** Keys are built once per index and shared by the implementations: the key, not the hashing, is measured. */
const keys = [];
function keyOf(i) {
  while (keys.length <= i) keys.push(benchKey(keys.length));
  return keys[i];
}

/** Reserves fresh keys until one takes a slot; returns how many reserves failed first. */
function placeOne(table, next) {
  for (let failed = 0; ; failed++) {
    const key = keyOf(next.index++);
    try {
      const reservation = table.reserve(key);
      table.publish(reservation, META);
      return { key, slot: reservation.slot, failed };
    } catch (error) {
      if (error.code !== 'ERR_TABLE_FULL') throw error;
    }
  }
}

function measure(impl, load) {
  const name = `waitprep-bench-placement-${process.pid}-${impl}-${load}`;
  const table = openLeaseTable({ name, role: 'producer', create: { capacity }, implementation: impl });
  try {
    const random = generator(0x9e3779b9 ^ Math.round(load * 1000));
    const next = { index: 0 };
    const residents = [];
    const target = Math.round(load * capacity);
    while (residents.length < target) residents.push(placeOne(table, next));
    let failures = 0;
    for (let r = 0; r < rounds; r++) {
      const at = Math.floor(random() * residents.length);
      if (table.tryEvict(residents[at].key) !== 'evicted') throw new Error('bench: a resident did not evict');
      const placed = placeOne(table, next);
      failures += placed.failed;
      residents[at] = placed;
    }
    const reserves = rounds + failures;
    // Before ABI 4 (one window per key) waitprep/testing has no keyBucketsFor: the share is not asked.
    const first = testing.keyBucketsFor === undefined ? null : residents.filter((r) => testing.keyBucketsFor(r.key.digest, capacity)[0].includes(r.slot)).length / residents.length;
    return { implementation: impl, capacity, load, rounds, reserves, failures, failure_rate: failures / reserves, first_bucket_share: first };
  } finally {
    table.close();
    if (impl === 'native') unlinkLeaseTable(name);
  }
}

const results = [];
for (const load of loads) {
  const byImpl = impls.map((impl) => measure(impl, load));
  if (byImpl.some((r) => r.failures !== byImpl[0].failures)) {
    throw new Error(`native and the fallback placed differently at load ${load}: ${byImpl.map((r) => `${r.implementation} ${r.failures}`).join(', ')}`);
  }
  results.push(...byImpl);
}

if (json) {
  console.log(JSON.stringify({ env: benchEnv({ implementation }), results }));
} else {
  console.log(`publish failures at steady load: ${capacity} slots, ${rounds} rounds of evict + reserve (${implementation} addon)`);
  for (const r of results) {
    const first = r.first_bucket_share === null ? '' : `; ${(100 * r.first_bucket_share).toFixed(1)}% of residents in their first bucket`;
    console.log(`  ${r.implementation.padEnd(6)} load ${String(r.load).padEnd(5)} ${r.failures} of ${r.reserves} reserves failed: ${(100 * r.failure_rate).toFixed(4)}%${first}`);
  }
}
