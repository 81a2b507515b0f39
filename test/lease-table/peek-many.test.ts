// Batched peeks (peekMany, peekPrefix; C wp_peek_many) on both lease-table implementations: the
// same assertions against the native table (when the addon loaded) and the JavaScript fallback,
// then the two handles side by side on the same random tables, answer for answer.
import * as fs from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { WaitprepError, implementation, implementationReason, openLeaseTable, unlinkLeaseTable, type ArtifactKey, type LeaseTable } from '../../lib/index.js';
import { SLOT, SLOT_SIZE, SLOTS_OFFSET } from '../../lib/lease-table/layout.js';
import { makeKey } from '../helpers.js';

type Impl = 'native' | 'js';
const META = { sizeBytes: 4096, location: 0n, checksum: 0n, codecId: 1, representationVersion: 1 };

let counter = 0;
const open: LeaseTable[] = [];
const names = new Set<string>();
afterEach(() => {
  for (const table of open.splice(0)) table.close();
  for (const name of names) unlinkLeaseTable(name);
  names.clear();
});

/** A producer and a consumer of one fresh table of `impl`. */
function pair(impl: Impl, capacity = 64): { producer: LeaseTable; consumer: LeaseTable } {
  const name = `wp-peekmany-${process.pid}-${++counter}`;
  const producer = openLeaseTable({ name, role: 'producer', implementation: impl, create: { capacity } });
  if (impl === 'native') names.add(name);
  const consumer =
    impl === 'native'
      ? openLeaseTable({ name, role: 'consumer', implementation: 'native' })
      : openLeaseTable({ name, role: 'consumer', implementation: 'js', buffer: producer.sharedBuffer! });
  open.push(consumer, producer);
  return { producer, consumer };
}

/** Rewrites a slot's state word in place: the native segment's file, or the fallback's buffer. */
function setState(table: LeaseTable, slot: number, word: bigint): void {
  const offset = SLOTS_OFFSET + slot * SLOT_SIZE + SLOT.STATE_GEN;
  if (table.implementation === 'js') {
    Atomics.store(new BigUint64Array(table.sharedBuffer!), offset / 8, word);
    return;
  }
  const bytes = Buffer.alloc(8);
  bytes.writeBigUInt64LE(word);
  const fd = fs.openSync(`/dev/shm/${table.name}`, 'r+');
  try {
    fs.writeSync(fd, bytes, 0, 8, offset);
  } finally {
    fs.closeSync(fd);
  }
}

function packed(keys: readonly ArtifactKey[]): Uint8Array {
  const out = new Uint8Array(32 * keys.length);
  keys.forEach((k, i) => out.set(k.digest, 32 * i));
  return out;
}

function code(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(WaitprepError);
    return (error as WaitprepError).code;
  }
  return undefined;
}

const noNative = implementation !== 'native';
if (noNative) console.warn(`batched peeks: the native tests are skipped: the native implementation is not in use (${implementationReason})`);

describe.skipIf(noNative).each([['native' as Impl]])('batched peeks: %s', conformance);
describe.each([['js' as Impl]])('batched peeks: %s', conformance);

function conformance(impl: Impl): void {
  it('peekMany answers, chunk by chunk, what peek answers, and pins nothing', () => {
    const { producer, consumer } = pair(impl);
    const keys = Array.from({ length: 9 }, (_, i) => makeKey(100 + i));
    for (const k of keys.slice(0, 3)) producer.publish(producer.reserve(k), META);
    producer.reserve(keys[3]!); // preparing
    const ready = producer.reserve(keys[4]!);
    producer.publish(ready, META);
    const evicting = producer.reserve(keys[5]!);
    producer.publish(evicting, META);
    setState(producer, evicting.slot, (evicting.generation << 8n) | 3n); // EVICTING, as a producer stopped mid-claim leaves it
    const answers = consumer.peekMany(keys);
    expect(answers).toEqual(keys.map((k) => consumer.peek(k)));
    expect(answers.map((a) => (a.kind === 'ready' ? 'ready' : a.reason))).toEqual(['ready', 'ready', 'ready', 'preparing', 'ready', 'evicting', 'absent', 'absent', 'absent']);
    expect(consumer.peekMany(packed(keys))).toEqual(answers);
    expect(consumer.peekMany([])).toEqual([]);
    expect(consumer.summary().pinnedSlots).toBe(0);
    setState(producer, evicting.slot, (evicting.generation << 8n) | 2n);
  });

  it('peekPrefix counts the leading ready chunks and stops at the first that is not', () => {
    const { producer, consumer } = pair(impl, 256);
    const keys = Array.from({ length: 150 }, (_, i) => makeKey(1000 + i));
    for (const k of keys) if (k !== keys[130]) producer.publish(producer.reserve(k), META);
    expect(consumer.peekPrefix(keys)).toBe(130);
    expect(consumer.peekPrefix(packed(keys))).toBe(130);
    expect(consumer.peekPrefix(keys.slice(130))).toBe(0);
    expect(consumer.peekPrefix(keys.slice(131))).toBe(19);
    expect(producer.tryEvict(keys[0]!)).toBe('evicted');
    expect(consumer.peekPrefix(keys)).toBe(0);
    // A batch larger than any before grows the buffers and still answers every chunk.
    expect(consumer.peekMany(keys).filter((a) => a.kind === 'ready').length).toBe(148);
  });

  it('refuses what is not keys or packed digests; a closed table answers table-closed', () => {
    const { producer, consumer } = pair(impl);
    const key = makeKey(1);
    producer.publish(producer.reserve(key), META);
    for (const call of [(c: unknown) => consumer.peekMany(c as ArtifactKey[]), (c: unknown) => consumer.peekPrefix(c as ArtifactKey[])]) {
      expect(code(() => call([key, {}]))).toBe('ERR_INVALID_KEY');
      expect(code(() => call(new Uint8Array(33)))).toBe('ERR_INVALID_ARGUMENT');
      expect(code(() => call('keys'))).toBe('ERR_INVALID_ARGUMENT');
    }
    consumer.close();
    expect(consumer.peekMany([key, key])).toEqual([
      { kind: 'miss', reason: 'table-closed' },
      { kind: 'miss', reason: 'table-closed' },
    ]);
    expect(consumer.peekPrefix([key])).toBe(0);
  });
}

// The two handles on the same random tables: every status and every leading count agree. The
// addon's and the fallback's tables are built alike (same capacity, same keys published, reserved
// or evicted in the same order), so the same key lands in the same slot of each.
describe.skipIf(noNative)('batched peeks: native and fallback agree', () => {
  it('on random mixes of ready, preparing, evicted and absent chunks', () => {
    let seed = 12345;
    const next = () => (seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32;
    for (let round = 0; round < 20; round++) {
      const tables = { native: pair('native', 128), js: pair('js', 128) };
      const keys = Array.from({ length: 40 }, (_, i) => makeKey(round * 1000 + i));
      const fate = keys.map(() => Math.floor(next() * 4)); // 0 ready, 1 preparing, 2 evicted, 3 never
      for (const { producer } of Object.values(tables)) {
        keys.forEach((k, i) => {
          if (fate[i] === 3) return;
          const r = producer.reserve(k);
          if (fate[i] !== 1) producer.publish(r, META);
          if (fate[i] === 2) expect(producer.tryEvict(k)).toBe('evicted');
        });
      }
      const order = keys.map((k) => ({ k, r: next() })).sort((a, b) => a.r - b.r).map(({ k }) => k);
      for (const batch of [keys, order, order.slice(0, 7), keys.slice(fate.indexOf(0))]) {
        expect(tables.native.consumer.peekMany(batch)).toEqual(tables.js.consumer.peekMany(batch));
        expect(tables.native.consumer.peekPrefix(packed(batch))).toBe(tables.js.consumer.peekPrefix(packed(batch)));
      }
      for (const t of Object.values(tables)) expect(t.consumer.peekMany(keys).filter((a) => a.kind === 'ready').length).toBe(fate.filter((f) => f === 0).length);
      for (const { producer, consumer } of Object.values(tables)) {
        consumer.close();
        producer.close();
      }
    }
  });
});
