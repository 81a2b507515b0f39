// Lease-table stress with real concurrency: a producer in this thread keeps evicting and
// republishing 8 keys while 3 pinners pin, hold and release them, in child processes (native
// table, POSIX shared memory) or in worker_threads (JavaScript fallback, SharedArrayBuffer).
// The pinners (test/fixtures/lease-pinner.mjs, which imports ../../dist/index.js: run
// `npm run build` first) check every lease and count violations; a held lease whose slot the
// producer evicted shows up as a re-pin that misses or lands on another generation.
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { childWithResult, stepUntilEnded, workerWithResult, type Running } from '../children.js';
import { artifactKey, openLeaseTable, unlinkLeaseTable, type LeaseTable } from '../../lib/index.js';
import { KEY_COUNT, LOCATION_BASE, keyFields, publicationMeta } from '../fixtures/lease-stress-common.mjs';
import { NATIVE, runsIf } from '../skip-reasons.js';

const PINNER = join(import.meta.dirname, '..', 'fixtures', 'lease-pinner.mjs');
const KEYS = Array.from({ length: KEY_COUNT }, (_, k) => artifactKey(keyFields(k)));
const PINNERS = 3;

/** What each pinner reports. */
interface PinnerResult {
  pins: number;
  hits: number;
  rechecks: number;
  doubleCloses: number;
  violations: number;
  samples: string[];
  misses: Record<string, number>;
  clientIndex: number;
}

type Pinner = Running<PinnerResult>;

const cleanups: Array<() => void | Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function processPinner(name: string, ops: number, seed: number): Pinner {
  return tracked(childWithResult<PinnerResult>(PINNER, [name, String(ops), String(seed)]));
}

function workerPinner(name: string, ops: number, seed: number, buffer: SharedArrayBuffer): Pinner {
  return tracked(workerWithResult<PinnerResult>(PINNER, { name, ops, seed, implementation: 'js', buffer }));
}

/** Stops the pinner after the test if it is still running. */
function tracked(pinner: Pinner): Pinner {
  cleanups.push(async () => {
    pinner.kill();
    await pinner.done;
  });
  return pinner;
}

/**
 * Publishes the 8 keys, starts the pinners, then evicts and republishes round-robin until
 * every pinner has exited (yielding to the event loop every few hundred operations).
 */
async function stress(producer: LeaseTable, startPinners: () => Pinner[]) {
  let serial = 0;
  const lastSerial = new Array<number>(KEY_COUNT).fill(0);
  const publish = (k: number) => {
    const reservation = producer.reserve(KEYS[k]!);
    lastSerial[k] = ++serial;
    producer.publish(reservation, publicationMeta(k, serial));
  };
  for (let k = 0; k < KEY_COUNT; k++) publish(k);

  const outcomes = { evicted: 0, pinned: 0, absent: 0 };
  let round = 0;
  const finished = await stepUntilEnded(startPinners(), () => {
    const k = round++ % KEY_COUNT;
    const outcome = producer.tryEvict(KEYS[k]!);
    outcomes[outcome]++;
    if (outcome === 'evicted') publish(k);
  });
  return { finished, outcomes, lastSerial };
}

/** The checks both implementations share, once every pinner has exited. */
function checkAfterStress(producer: LeaseTable, run: Awaited<ReturnType<typeof stress>>, minPins: number): void {
  const { finished, outcomes, lastSerial } = run;
  for (const { result, code, signal, log } of finished) {
    expect({ code, signal }, log).toEqual({ code: 0, signal: null });
    expect(result, log).not.toBeNull();
    expect(result!.samples, `violations: ${result!.samples.join('; ')}`).toEqual([]);
    expect(result!.violations).toBe(0);
    expect(result!.hits).toBeGreaterThan(0);
    expect(result!.rechecks).toBeGreaterThan(0);
  }
  const pins = finished.reduce((sum, f) => sum + f.result!.pins, 0);
  expect(pins).toBeGreaterThanOrEqual(minPins);
  // Pinners in separate threads/processes hold separate client entries.
  expect(new Set(finished.map((f) => f.result!.clientIndex)).size).toBe(finished.length);

  expect(outcomes.absent).toBe(0); // every key was always reserved or published again
  expect(outcomes.evicted).toBeGreaterThan(0);

  // Every pinner closed its table: nobody but the producer is registered, no pin is left.
  const view = producer.inspect();
  expect(view.clients.map((c) => c.index)).toEqual([producer.clientIndex]);
  expect(view.producer).toBe(producer.clientIndex);
  expect(view.slots).toHaveLength(KEY_COUNT);
  for (const slot of view.slots) {
    expect(slot.state).toBe('ready');
    expect(slot.pinHolders).toEqual([]);
    const k = Number(slot.meta.location) - LOCATION_BASE;
    expect(slot.digestHex).toBe(KEYS[k]!.hex);
    expect(slot.meta.checksum).toBe(BigInt(publicationMeta(k, lastSerial[k]!).checksum));
  }
  for (let s = 0; s < producer.capacity; s++) expect(producer.clientPins(s)).toBe(0);
  expect(producer.reapDeadClients()).toBe(0);
  for (const key of KEYS) expect(producer.tryEvict(key)).toBe('evicted');

  console.log(
    `${producer.implementation}: ${pins} pins by ${finished.length} pinners ` +
      `(hits ${finished.map((f) => f.result!.hits).join('/')}, re-pins of held leases ${finished.map((f) => f.result!.rechecks).join('/')}, ` +
      `misses ${JSON.stringify(finished.map((f) => f.result!.misses))}); producer: ${JSON.stringify(outcomes)}`,
  );
}

describe.runIf(runsIf('lease table stress (native)', NATIVE))('lease table stress: pinner processes vs an evicting producer (native)', () => {
  it('3 processes x 1,000,000 pins: every lease is its key\'s, no held slot is evicted, no pin is left', async () => {
    const name = `wp-stress-${process.pid}-${randomBytes(4).toString('hex')}`;
    const producer = openLeaseTable({ name, role: 'producer', create: { capacity: 64 }, implementation: 'native' });
    cleanups.push(() => {
      producer.close();
      unlinkLeaseTable(name);
    });
    const ops = 1_000_000;
    const run = await stress(producer, () => Array.from({ length: PINNERS }, (_, i) => processPinner(name, ops, i + 1)));
    checkAfterStress(producer, run, PINNERS * ops);
  });
});

describe('lease table stress: worker_threads vs an evicting producer (JavaScript fallback)', () => {
  it('3 workers x 300,000 pins over one SharedArrayBuffer', async () => {
    const name = `wp-stress-js-${process.pid}-${randomBytes(4).toString('hex')}`;
    const producer = openLeaseTable({ name, role: 'producer', create: { capacity: 64 }, implementation: 'js' });
    cleanups.push(() => producer.close());
    expect(producer.implementation).toBe('js');
    const buffer = producer.sharedBuffer!;
    const ops = 300_000;
    const run = await stress(producer, () => Array.from({ length: PINNERS }, (_, i) => workerPinner(name, ops, i + 1, buffer)));
    checkAfterStress(producer, run, PINNERS * ops);
  });
});
