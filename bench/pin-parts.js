#!/usr/bin/env node
// Where a native pin's time goes: the same hit and miss as bench:pin, taken
// apart by calling the addon's flat functions directly (no LeaseTable, no
// lease object), against wp_pin_loop (no crossing at all). Means over a plain
// loop, median of 5 runs; run after `npm run build` with the addon built.
//
//   node bench/pin-parts.js [--ops 5000000]
import { openLeaseTable, unlinkLeaseTable } from 'waitprep';
import { EXCHANGE } from 'waitprep/layout';
import { nativeAddon } from 'waitprep/testing';
import { benchKey } from './common.js';

if (nativeAddon === null) throw new Error('pin-parts needs the native addon (npm run build:native)');
const at = process.argv.indexOf('--ops');
const ops = at > 0 ? Number(process.argv[at + 1]) : 5_000_000;

const name = `waitprep-pin-parts-${process.pid}`;
const producer = openLeaseTable({ name, role: 'producer', create: { capacity: 1024 }, implementation: 'native' });
const consumer = openLeaseTable({ name, role: 'consumer', implementation: 'native' });
const out = new BigUint64Array(EXCHANGE.WORDS);
const [status, h, pinHost, , unpin] = nativeAddon.open(name, false, 0, 0o600, out);
try {
  if (status !== 0) throw new Error(`open failed with status ${status}`);
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

  const time = (label, fn, n = ops, per = 1) => {
    for (let i = 0; i < n / 10; i++) fn();
    const runs = [];
    for (let r = 0; r < 5; r++) {
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < n; i++) fn();
      runs.push(Number(process.hrtime.bigint() - t0) / n / per);
    }
    runs.sort((a, b) => a - b);
    console.log(`${label.padEnd(58)} ${runs[2].toFixed(1).padStart(7)} ns`);
  };
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
} finally {
  nativeAddon.close(h);
  consumer.close();
  producer.close();
  unlinkLeaseTable(name);
}
