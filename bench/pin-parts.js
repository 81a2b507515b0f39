#!/usr/bin/env node
// Where a native pin's time goes: the same hit and miss as bench:pin, taken
// apart by calling the addon's flat functions directly (no LeaseTable, no
// lease object), against wp_pin_loop (no crossing at all). Means over a plain
// loop, median of 5 runs; run after `npm run build` with the addon built.
//
//   node bench/pin-parts.js [--ops 5000000]
//   node bench/pin-parts.js --cold [--capacity 1048576] [--ops 2000000]
//
// --cold takes the cold-slot pin apart the same way: a table of `capacity` slots filled to 25%
// with READY keys, each op the next of them (their slots far apart, as in bench:pin's
// cold-slot-25), pinned and released (1) through the addon's two flat calls, the digests read in
// sequence from one flat array as `core_bench cold` (bench/native/) reads them (no key object, no lease
// object, no LeaseTable code), and (2) through `table.tryPin(key)` + `lease.close()`; and (3)
// the same two flat calls on one hot slot, which is the crossings' own cost.
import { openLeaseTable, unlinkLeaseTable } from 'waitprep';
import { EXCHANGE } from 'waitprep/layout';
import { nativeAddon } from 'waitprep/testing';
import { benchKey } from './common.js';
import { fillCold } from './pin/lease-table.js';

if (nativeAddon === null) throw new Error('pin-parts needs the native addon (npm run build:native)');
const numberOption = (name, fallback) => {
  const at = process.argv.indexOf(`--${name}`);
  const value = at > 0 ? Number(process.argv[at + 1]) : fallback;
  if (!Number.isSafeInteger(value) || value < 1) throw new Error(`--${name} wants a positive integer, got ${process.argv[at + 1]}`);
  return value;
};
const cold = process.argv.includes('--cold');
const ops = numberOption('ops', cold ? 2_000_000 : 5_000_000);
const capacity = numberOption('capacity', 1 << 20);

const name = `waitprep-pin-parts-${process.pid}`;
const producer = openLeaseTable({ name, role: 'producer', create: { capacity: cold ? capacity : 1024 }, implementation: 'native' });
const consumer = openLeaseTable({ name, role: 'consumer', implementation: 'native' });
const out = new BigUint64Array(EXCHANGE.WORDS);
const [status, h, pinHost, , unpin] = nativeAddon.open(name, false, 0, 0o600, out);
try {
  if (status !== 0) throw new Error(`open failed with status ${status}`);
  if (cold) coldParts();
  else hotParts();
} finally {
  nativeAddon.close(h);
  consumer.close();
  producer.close();
  unlinkLeaseTable(name);
}

/** Median of 5 runs of `n` calls of `fn(i)`, per call / `per`, after `n / 10` untimed ones. */
function time(label, fn, n = ops, per = 1) {
  for (let i = 0; i < n / 10; i++) fn(i);
  const runs = [];
  for (let r = 0; r < 5; r++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < n; i++) fn(i);
    runs.push(Number(process.hrtime.bigint() - t0) / n / per);
  }
  runs.sort((a, b) => a - b);
  console.log(`${label.padEnd(58)} ${runs[2].toFixed(1).padStart(7)} ns`);
}

function hotParts() {
  const hit = benchKey(0);
  const absent = benchKey(1);
  const reservation = producer.reserve(hit);
  producer.publish(reservation, { sizeBytes: 1, location: 2, checksum: 3, codecId: 1, representationVersion: 1 });
  const hitDigest = new Uint8Array(Buffer.from(hit.hex, 'hex'));
  const absentDigest = new Uint8Array(Buffer.from(absent.hex, 'hex'));
  const out32 = new Uint32Array(out.buffer);
  const out8 = new Uint8Array(out.buffer);
  // The bound wake-path calls read their inputs from the exchange buffer (layout.ts EXCHANGE).
  const setDigest = (digest) => out8.set(digest, EXCHANGE.DIGEST * 8);

  time('C: wp_pin_loop hit, per iteration', () => nativeAddon.pinLoop(h, hitDigest, 1000n), ops / 1000, 1000);
  time('C: wp_pin_loop miss, per iteration', () => nativeAddon.pinLoop(h, absentDigest, 1000n), ops / 1000, 1000);
  setDigest(absentDigest);
  time('addon pinHost() miss (1 crossing)', () => pinHost());
  setDigest(hitDigest);
  time('addon pinHost() hit + unpin() (2 crossings)', () => {
    pinHost();
    out32[EXCHANGE.UNPIN_SLOT * 2] = out32[0];
    out32[EXCHANGE.UNPIN_TOKEN * 2] = out32[4];
    out32[EXCHANGE.UNPIN_TOKEN * 2 + 1] = out32[5];
    unpin();
  });
  time('table.tryPin miss', () => consumer.tryPin(absent));
  time('table.tryPin hit + lease.close()', () => consumer.tryPin(hit).close());
  if (nativeAddon.clientPins(h, reservation.slot) !== 0 || consumer.clientPins(reservation.slot) !== 0) throw new Error('pin-parts miscounted: pins left');
}

function coldParts() {
  // bench:pin's cold-slot-25 fill: the same keys, in the same order.
  const keys = fillCold(producer, { cold: { capacity, load: 0.25 } });
  const n = keys.length;
  const digests = new Uint8Array(32 * n);
  keys.forEach((key, k) => digests.set(Buffer.from(key.hex, 'hex'), 32 * k));
  const out32 = new Uint32Array(out.buffer);
  const exchange = new Uint8Array(out.buffer, EXCHANGE.DIGEST * 8, 32);
  const flat = (k) => {
    const at = 32 * k;
    for (let b = 0; b < 32; b++) exchange[b] = digests[at + b];
    // Every key is READY and nothing evicts: anything but a hit is the bench's error.
    const status = pinHost();
    if (status !== 0) throw new Error(`pin-parts --cold: key ${k} gave status ${status}, not a hit`);
    out32[EXCHANGE.UNPIN_SLOT * 2] = out32[0];
    out32[EXCHANGE.UNPIN_TOKEN * 2] = out32[4];
    out32[EXCHANGE.UNPIN_TOKEN * 2 + 1] = out32[5];
    unpin();
  };
  console.log(`cold: ${n} READY keys in ${capacity} slots, each op the next key`);
  time('addon pinHost() + unpin(), digests from one flat array', (i) => flat(i % n));
  time('addon pinHost() + unpin() on one hot slot (the crossings)', () => flat(0));
  time('table.tryPin(key) + lease.close()', (i) => {
    const lease = consumer.tryPin(keys[i % n]);
    if (lease.kind !== 'lease') throw new Error(`pin-parts --cold: key ${i % n} missed (${lease.reason})`);
    lease.close();
  });
  // Nothing is left pinned, by either path: each sampled key's slot holds only the lease taken here.
  for (let k = 0; k < n; k += Math.max(1, Math.floor(n / 256))) {
    const lease = consumer.tryPin(keys[k]);
    if (lease.kind !== 'lease') throw new Error(`pin-parts --cold: key ${k} is no longer READY`);
    const left = nativeAddon.clientPins(h, lease.slot) + consumer.clientPins(lease.slot) - 1;
    lease.close();
    if (left !== 0) throw new Error(`pin-parts --cold: key ${k}'s slot has ${left} pins left`);
  }
}
