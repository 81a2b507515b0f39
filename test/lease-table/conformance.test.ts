// One conformance suite for both lease-table implementations: the native one
// (POSIX shared memory through the addon, when it loaded) and the JavaScript
// fallback (a SharedArrayBuffer). Every test in `conformance` runs against
// both and asserts the same values; what only one implementation has
// (files in /dev/shm, the addon's layout constants, SharedArrayBuffer copies)
// is in the describes after it.
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import {
  LeaseTable,
  WaitprepError,
  implementation,
  implementationReason,
  InMemoryBackend,
  leaseHandoffToken,
  leaseTableBackend,
  parseHandoffToken,
  type DigestLease,
  openLeaseTable,
  unlinkLeaseTable,
  type ArtifactBackend,
  type ArtifactMeta,
  type Lease,
  type Miss,
  type OpenLeaseTableOptions,
  type WaitprepErrorCode,
} from '../../lib/index.js';
import { CLIENT_FIELD, CLIENT_SIZE, CLIENT_STATE, CLIENTS_OFFSET, EXCHANGE, HDR, LAYOUT, MAX_CAPACITY, PROBE_WINDOW, SLOT, SLOT_SIZE, SLOTS_OFFSET, STATUS, WP_ABI_VERSION, WP_MAGIC, segmentSize } from '../../lib/lease-table/layout.js';
import { summarizeInspection } from '../../lib/lease-table/inspect.js';
import { MISS, MISS_BY_STATUS, MISS_REASONS, TABLE_MISS_REASON } from '../../lib/coordinator/miss-reasons.js';
import { nativeAddon } from '../../lib/lease-table/native.js';
import { MAX_PREFIX_CHUNKS } from '../../lib/lease-table/prefix-input.js';
import type { ArtifactKey } from '../../lib/keys/key.js';
import { TARGET_A, consumer, makeKey, withBackend } from '../helpers.js';

const PREFIX_BOUNDS = new URL('../fixtures/prefix-bounds.mjs', import.meta.url).pathname;

type Impl = 'native' | 'js';

// ---- bookkeeping: unique names, every table closed, every native name unlinked ----------

let counter = 0;
const openTables: LeaseTable[] = [];
const nativeNames = new Set<string>();
const shmFiles = new Set<string>();

/** A name no other test (or concurrent run) uses: pid plus a counter. */
function uniqueName(tag = 't'): string {
  return `wp-conf-${process.pid}-${++counter}-${tag}`;
}

function track(table: LeaseTable): LeaseTable {
  openTables.push(table);
  if (table.implementation === 'native') nativeNames.add(table.name);
  return table;
}

/** openLeaseTable, tracked so that a call expected to throw is still closed if it succeeds. */
function openTracked(options: OpenLeaseTableOptions): LeaseTable {
  return track(openLeaseTable(options));
}

function shmPath(name: string): string {
  return `/dev/shm/${name}`;
}

afterEach(() => {
  for (const table of openTables.splice(0)) table.close();
  for (const name of nativeNames) unlinkLeaseTable(name);
  nativeNames.clear();
  for (const name of shmFiles) fs.rmSync(shmPath(name), { force: true });
  shmFiles.clear();
});

/** The error `fn` throws (fails the test when it throws nothing). */
function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error('expected the call to throw, it returned normally');
}

/** Asserts `fn` throws a WaitprepError with `code`. */
function expectCode(fn: () => unknown, code: WaitprepErrorCode): WaitprepError {
  const error = thrown(fn);
  expect(error).toBeInstanceOf(WaitprepError);
  expect((error as WaitprepError).code).toBe(code);
  return error as WaitprepError;
}

function asLease<L extends Lease | DigestLease = Lease>(result: L | Miss): L {
  if (result.kind !== 'lease') throw new Error(`expected a lease, got a miss: ${result.reason}`);
  return result;
}

const HOST = { readiness: 'host' } as const;
/** TARGET_A with the next arena generation. */
const OTHER_GEN_TARGET = { ...TARGET_A, arenaGeneration: 8 };
const device = (target: { device: string; arena: number | bigint; arenaGeneration: number | bigint }) =>
  ({ readiness: 'device', target }) as const;

/** Metadata with every field distinct, a location above 2^53 and a checksum at 2^64-1. */
const META: ArtifactMeta = {
  sizeBytes: 4096,
  location: (1n << 60n) + 5n,
  checksum: (1n << 64n) - 1n,
  codecId: 7,
  representationVersion: 3,
};
/** What a lease reports for META: exact numbers below 2^53, bigints above. */
const META_SEEN = { sizeBytes: 4096, location: (1n << 60n) + 5n, checksum: (1n << 64n) - 1n, codecId: 7, representationVersion: 3 };

// ---- the two implementations ----------------------------------------------------------

interface Harness {
  impl: Impl;
  /** Creates a table with a unique name; this client is `role`. */
  create(role: 'producer' | 'consumer', capacity?: number, extra?: Partial<OpenLeaseTableOptions>): LeaseTable;
  /** Opens a second client of `first`'s table. */
  join(first: LeaseTable, role: 'producer' | 'consumer'): LeaseTable;
  /** Opens a table by name only (no buffer), to see open errors. */
  openByName(name: string, role: 'producer' | 'consumer', create?: { capacity: number; mode?: number }): LeaseTable;
}

function harness(impl: Impl): Harness {
  const openByName = (name: string, role: 'producer' | 'consumer', create?: { capacity: number; mode?: number }) => {
    if (impl === 'native') nativeNames.add(name);
    return track(openLeaseTable({ name, role, implementation: impl, ...(create ? { create } : {}) }));
  };
  return {
    impl,
    create: (role, capacity = 64, extra = {}) => openByName(extra.name ?? uniqueName(), role, { capacity, ...(extra.create ?? {}) }),
    join: (first, role) =>
      track(
        impl === 'native'
          ? openLeaseTable({ name: first.name, role, implementation: 'native' })
          : openLeaseTable({ name: first.name, role, implementation: 'js', buffer: first.sharedBuffer! }),
      ),
    openByName,
  };
}

// Without the addon the native tests are still registered, as skipped, so that the summary counts
// them instead of losing them; the reason is printed once for the whole file.
const noNative = implementation !== 'native';
if (noNative) console.warn(`lease table conformance: the native tests are skipped: the native implementation is not in use (${implementationReason})`);

/** A producer and a consumer of one fresh table. */
function pair(h: Harness, capacity = 64): { producer: LeaseTable; consumer: LeaseTable } {
  const producer = h.create('producer', capacity);
  return { producer, consumer: h.join(producer, 'consumer') };
}

/**
 * The key's two buckets as the C ABI defines them (docs/lease-table.md, "Placement"): the slots cut
 * into buckets of 8, the first half (rounded up) for the first choice, (digest word 0 × half) >> 32,
 * the rest for the second, (word 1 × rest) >> 32 after them. Computed here from that rule, not
 * taken from either implementation.
 */
function bucketsOf(key: ReturnType<typeof makeKey>, capacity: number): [number, number] {
  const digest = Buffer.from(key.digest);
  const buckets = Math.ceil(capacity / 8);
  const left = Math.ceil(buckets / 2);
  const first = Number((BigInt(digest.readUInt32LE(0)) * BigInt(left)) >> 32n);
  if (buckets === left) return [first, first];
  return [first, left + Number((BigInt(digest.readUInt32LE(4)) * BigInt(buckets - left)) >> 32n)];
}

/** `count` keys (from makeKey(start), makeKey(start+1), …) whose two buckets are `first` and `second`. */
function keysInBuckets(first: number, second: number, capacity: number, count: number, start = 1): Array<ReturnType<typeof makeKey>> {
  const found: Array<ReturnType<typeof makeKey>> = [];
  for (let n = start; found.length < count; n++) {
    if (n > start + 100_000) throw new Error('no keys found');
    const key = makeKey(n);
    const [a, b] = bucketsOf(key, capacity);
    if (a === first && b === second) found.push(key);
  }
  return found;
}

/**
 * Writes a u64 into the table's shared segment behind the implementation's back, to recreate
 * what a producer that died mid-operation leaves. Native: through the /dev/shm file (the same
 * pages the table maps); js: an Atomics store into the SharedArrayBuffer.
 */
function poke(table: LeaseTable, offset: number, value: bigint): void {
  if (table.implementation === 'js') {
    Atomics.store(new BigUint64Array(table.sharedBuffer!), offset / 8, value);
    return;
  }
  const bytes = Buffer.alloc(8);
  bytes.writeBigUInt64LE(value);
  const fd = fs.openSync(shmPath(table.name), 'r+');
  try {
    expect(fs.writeSync(fd, bytes, 0, 8, offset)).toBe(8);
  } finally {
    fs.closeSync(fd);
  }
}

function slotOffset(slot: number, field: number): number {
  return SLOTS_OFFSET + slot * SLOT_SIZE + field;
}

/** Reserves and publishes `key` with META. */
function publish(producer: LeaseTable, key = makeKey(1), meta: ArtifactMeta = META) {
  const reservation = producer.reserve(key);
  producer.publish(reservation, meta);
  return reservation;
}

describe.skipIf(noNative).each([['native', harness('native')]] as Array<[Impl, Harness]>)('lease table conformance: %s', conformance);
describe.each([['js', harness('js')]] as Array<[Impl, Harness]>)('lease table conformance: %s', conformance);

function conformance(impl: Impl, h: Harness): void {
  describe('open and create', () => {
    it('reports its implementation, name, role, capacity and a client index', () => {
      const producer = h.create('producer', 16);
      const consumerTable = h.join(producer, 'consumer');
      expect(producer.implementation).toBe(impl);
      expect(consumerTable.implementation).toBe(impl);
      expect(producer.role).toBe('producer');
      expect(consumerTable.role).toBe('consumer');
      expect(producer.capacity).toBe(16);
      expect(consumerTable.capacity).toBe(16);
      expect(consumerTable.name).toBe(producer.name);
      expect(producer.clientIndex).toBeGreaterThanOrEqual(0);
      expect(producer.clientIndex).toBeLessThan(64);
      expect(consumerTable.clientIndex).not.toBe(producer.clientIndex);
      if (impl === 'js') {
        expect(producer.sharedBuffer).toBeInstanceOf(SharedArrayBuffer);
        expect(consumerTable.sharedBuffer).toBe(producer.sharedBuffer);
      } else {
        expect(producer.sharedBuffer).toBeNull();
      }
    });

    it('creating a name that exists is ERR_TABLE_EXISTS, also after the creator closed', () => {
      const first = h.create('producer', 8);
      expectCode(() => h.openByName(first.name, 'consumer', { capacity: 8 }), 'ERR_TABLE_EXISTS');
      first.close();
      expectCode(() => h.openByName(first.name, 'producer', { capacity: 8 }), 'ERR_TABLE_EXISTS');
    });

    it('opening a name that does not exist is ERR_TABLE_NOT_FOUND', () => {
      expectCode(() => h.openByName(uniqueName('absent'), 'consumer'), 'ERR_TABLE_NOT_FOUND');
      expectCode(() => h.openByName(uniqueName('absent'), 'producer'), 'ERR_TABLE_NOT_FOUND');
    });

    it('a name of exactly 200 characters is accepted', () => {
      const base = uniqueName('long');
      const name = base + 'x'.repeat(200 - base.length);
      expect(name).toHaveLength(200);
      const table = h.openByName(name, 'producer', { capacity: 4 });
      expect(table.name).toBe(name);
      expect(h.join(table, 'consumer').capacity).toBe(4);
    });

    it.each([
      ['empty', ''],
      ['parent path', '../x'],
      ['slash', 'a/b'],
      ['leading dot', '.hidden'],
      ['201 characters', 'n'.repeat(201)],
      ['space', 'a b'],
      ['number', 42],
      ['undefined', undefined],
      ['null', null],
    ])('name %s is ERR_INVALID_ARGUMENT for open and create', (_, name) => {
      const error = expectCode(() => openTracked({ name: name as string, role: 'producer', implementation: impl, create: { capacity: 8 } }), 'ERR_INVALID_ARGUMENT');
      expect(error.field).toBe('options.name');
      expectCode(() => openTracked({ name: name as string, role: 'consumer', implementation: impl }), 'ERR_INVALID_ARGUMENT');
      if (typeof name === 'string' && name !== '' && !name.includes('/')) expect(fs.existsSync(shmPath(name))).toBe(false);
    });

    it.each([['writer'], [''], ['Producer'], [undefined], [1]])('role %j is ERR_INVALID_ARGUMENT', (role) => {
      const name = uniqueName('role');
      if (impl === 'native') nativeNames.add(name);
      const error = expectCode(
        () => openLeaseTable({ name, role: role as 'producer', implementation: impl, create: { capacity: 8 } }),
        'ERR_INVALID_ARGUMENT',
      );
      expect(error.field).toBe('options.role');
      // Nothing was created: the name is still free.
      expectCode(() => h.openByName(name, 'consumer'), 'ERR_TABLE_NOT_FOUND');
    });

    it.each([[0], [-1], [1.5], [MAX_CAPACITY + 1], [Number.NaN], ['8'], [2n]])('capacity %s is ERR_INVALID_ARGUMENT', (capacity) => {
      const name = uniqueName('cap');
      if (impl === 'native') nativeNames.add(name);
      const error = expectCode(
        () => openLeaseTable({ name, role: 'producer', implementation: impl, create: { capacity: capacity as number } }),
        'ERR_INVALID_ARGUMENT',
      );
      expect(error.field).toBe('options.create.capacity');
      expectCode(() => h.openByName(name, 'consumer'), 'ERR_TABLE_NOT_FOUND');
    });

    it.each([[0o1000], [-1], [1.5], ['600'], [0o7777]])('create.mode %s is ERR_INVALID_ARGUMENT', (mode) => {
      const name = uniqueName('mode');
      if (impl === 'native') nativeNames.add(name);
      const error = expectCode(
        () => openLeaseTable({ name, role: 'producer', implementation: impl, create: { capacity: 8, mode: mode as number } }),
        'ERR_INVALID_ARGUMENT',
      );
      expect(error.field).toBe('options.create.mode');
      expectCode(() => h.openByName(name, 'consumer'), 'ERR_TABLE_NOT_FOUND');
    });

    it('non-object options, create and implementation are ERR_INVALID_ARGUMENT', () => {
      expectCode(() => openTracked(null as unknown as OpenLeaseTableOptions), 'ERR_INVALID_ARGUMENT');
      expectCode(() => openTracked('x' as unknown as OpenLeaseTableOptions), 'ERR_INVALID_ARGUMENT');
      expectCode(
        () => openLeaseTable({ name: uniqueName(), role: 'producer', implementation: impl, create: 8 as unknown as { capacity: number } }),
        'ERR_INVALID_ARGUMENT',
      );
      expectCode(
        () => openLeaseTable({ name: uniqueName(), role: 'producer', implementation: 'wasm' as 'js', create: { capacity: 8 } }),
        'ERR_INVALID_ARGUMENT',
      );
    });

    it('a second producer is ERR_WRITER_EXISTS, and is allowed once the first closed', () => {
      const first = h.create('producer', 8);
      const clientsBefore = first.inspect().clients.length;
      expectCode(() => h.join(first, 'producer'), 'ERR_WRITER_EXISTS');
      // The failed open took no client entry.
      expect(first.inspect().clients).toHaveLength(clientsBefore);
      // Consumers are still welcome.
      const reader = h.join(first, 'consumer');
      expect(reader.role).toBe('consumer');
      first.close();
      const second = h.join(reader, 'producer');
      expect(second.role).toBe('producer');
      expect(second.inspect().producer).toBe(second.clientIndex);
      const key = makeKey(1);
      publish(second, key);
      asLease(reader.tryPin(key)).close();
    });

    it('a consumer calling producer operations gets ERR_NOT_PRODUCER', () => {
      const { producer, consumer: reader } = pair(h);
      const key = makeKey(1);
      const reservation = producer.reserve(key);
      expectCode(() => reader.reserve(makeKey(2)), 'ERR_NOT_PRODUCER');
      expectCode(() => reader.publish(reservation, META), 'ERR_NOT_PRODUCER');
      expectCode(() => reader.abandon(reservation), 'ERR_NOT_PRODUCER');
      expectCode(() => reader.tryEvict(key), 'ERR_NOT_PRODUCER');
      expectCode(() => reader.recordDeviceWrite(key, { ...TARGET_A, writeSeq: 1 }), 'ERR_NOT_PRODUCER');
      // None of them changed the slot: it is still reserved by the producer.
      expect(reader.tryPin(key)).toEqual({ kind: 'miss', reason: 'preparing' });
      producer.publish(reservation, META);
      expectCode(() => reader.recordDeviceWrite(key, { ...TARGET_A, writeSeq: 1 }), 'ERR_NOT_PRODUCER');
      expectCode(() => reader.tryEvict(key), 'ERR_NOT_PRODUCER');
      asLease(reader.tryPin(key)).close();
    });

    it('the segment size for a capacity is segmentSize(capacity)', () => {
      for (const capacity of [1, 8, 100]) {
        const table = h.create('producer', capacity);
        const seen = table.inspect();
        expect(seen.segmentSize).toBe(BigInt(segmentSize(capacity)));
        expect(seen.capacity).toBe(capacity);
        if (impl === 'native') expect(fs.statSync(shmPath(table.name)).size).toBe(segmentSize(capacity));
        else expect(table.sharedBuffer!.byteLength).toBe(segmentSize(capacity));
      }
    });
  });

  describe('lifecycle', () => {
    it('an absent key is a miss "absent"; a reserved key is a miss "preparing"', () => {
      const { producer, consumer: reader } = pair(h);
      const key = makeKey(1);
      expect(reader.tryPin(key)).toEqual({ kind: 'miss', reason: 'absent' });
      expect(producer.tryEvict(key)).toBe('absent');
      const reservation = producer.reserve(key);
      expect(reservation.key).toBe(key);
      expect(typeof reservation.generation).toBe('bigint');
      expect(reader.tryPin(key)).toEqual({ kind: 'miss', reason: 'preparing' });
      expect(reader.tryPin(key, HOST)).toEqual({ kind: 'miss', reason: 'preparing' });
      expect(reader.tryPin(key, device(TARGET_A))).toEqual({ kind: 'miss', reason: 'preparing' });
      // A miss leaves no pin bit behind (the fallback publishes its bit before reading the state).
      expect(producer.inspect().slots.find((s) => s.slot === reservation.slot)!.pinHolders).toEqual([]);
      // Another key is still absent.
      expect(reader.tryPin(makeKey(2))).toEqual({ kind: 'miss', reason: 'absent' });
    });

    it('publish then tryPin hits with the exact metadata and lease fields', () => {
      const { producer, consumer: reader } = pair(h);
      const key = makeKey(1);
      const reservation = publish(producer, key);
      const who = consumer(5, 2, 'engine-x');
      const lease = asLease(reader.tryPin(key, HOST, who));
      expect(lease.kind).toBe('lease');
      expect(lease.key).toBe(key);
      expect(lease.readiness).toBe('host');
      expect(lease.slot).toBe(reservation.slot);
      expect(BigInt(lease.generation)).toBe(reservation.generation);
      expect(lease.consumer).toEqual(who);
      expect(lease.closed).toBe(false);
      expect(lease.meta).toEqual(META_SEEN);
      expect(typeof lease.meta.location).toBe('bigint');
      expect(typeof lease.meta.sizeBytes).toBe('number');
      expect(reader.clientPins(lease.slot)).toBe(1);
      lease.close();
      expect(lease.closed).toBe(true);
      expect(reader.clientPins(lease.slot)).toBe(0);
    });

    it('metadata round-trips at the number/bigint boundary and at zero', () => {
      const { producer, consumer: reader } = pair(h);
      const edge = makeKey(1);
      publish(producer, edge, {
        sizeBytes: Number.MAX_SAFE_INTEGER,
        location: 1n << 53n,
        checksum: 0n,
        codecId: 0xffff_ffff,
        representationVersion: 0,
      });
      const lease = asLease(reader.tryPin(edge));
      expect(lease.meta).toEqual({
        sizeBytes: Number.MAX_SAFE_INTEGER,
        location: 1n << 53n,
        checksum: 0,
        codecId: 0xffff_ffff,
        representationVersion: 0,
      });
      lease.close();
    });

    it('a lease without a consumer names the direct consumer', () => {
      const { producer, consumer: reader } = pair(h);
      const key = makeKey(1);
      publish(producer, key);
      const lease = asLease(reader.tryPin(key));
      expect(lease.consumer).toEqual({ engine: 'direct', request: 'direct', generation: 0 });
      lease.close();
    });

    it('bad metadata is ERR_INVALID_ARGUMENT and leaves the reservation publishable', () => {
      const { producer, consumer: reader } = pair(h);
      const key = makeKey(1);
      const reservation = producer.reserve(key);
      expectCode(() => producer.publish(reservation, { ...META, sizeBytes: -1 }), 'ERR_INVALID_ARGUMENT');
      expectCode(() => producer.publish(reservation, { ...META, location: 1n << 64n }), 'ERR_INVALID_ARGUMENT');
      expectCode(() => producer.publish(reservation, { ...META, codecId: 2 ** 32 }), 'ERR_INVALID_ARGUMENT');
      expectCode(() => producer.publish(reservation, { ...META, checksum: 1.5 }), 'ERR_INVALID_ARGUMENT');
      expectCode(() => producer.publish(reservation, null as unknown as ArtifactMeta), 'ERR_INVALID_ARGUMENT');
      expect(reader.tryPin(key)).toEqual({ kind: 'miss', reason: 'preparing' });
      producer.publish(reservation, META);
      asLease(reader.tryPin(key)).close();
    });

    it('tryEvict is "pinned" while any lease is open, "evicted" after all closed, then "absent"', () => {
      const { producer, consumer: reader } = pair(h);
      const other = h.join(producer, 'consumer');
      const key = makeKey(1);
      publish(producer, key);
      const a = asLease(reader.tryPin(key));
      const b = asLease(reader.tryPin(key));
      const c = asLease(other.tryPin(key));
      expect(a.slot).toBe(b.slot);
      expect(reader.clientPins(a.slot)).toBe(2);
      expect(other.clientPins(a.slot)).toBe(1);
      expect(producer.tryEvict(key)).toBe('pinned');
      a.close();
      expect(producer.tryEvict(key)).toBe('pinned');
      c.close();
      expect(producer.tryEvict(key)).toBe('pinned');
      // A pinned evict rolled back: the artifact is still READY and pinnable.
      const d = asLease(other.tryPin(key));
      expect(d.meta).toEqual(META_SEEN);
      d.close();
      b.close();
      expect(reader.clientPins(a.slot)).toBe(0);
      expect(producer.tryEvict(key)).toBe('evicted');
      expect(producer.tryEvict(key)).toBe('absent');
      expect(reader.tryPin(key)).toEqual({ kind: 'miss', reason: 'absent' });
    });

    it('lease.close() is idempotent: closing one of two leases twice keeps the other pinned', () => {
      const { producer, consumer: reader } = pair(h);
      const key = makeKey(1);
      publish(producer, key);
      const first = asLease(reader.tryPin(key));
      const second = asLease(reader.tryPin(key));
      expect(reader.clientPins(first.slot)).toBe(2);
      first.close();
      first.close();
      first.close();
      expect(first.closed).toBe(true);
      expect(second.closed).toBe(false);
      expect(reader.clientPins(first.slot)).toBe(1);
      expect(producer.tryEvict(key)).toBe('pinned');
      expect(producer.inspect().slots.find((s) => s.slot === first.slot)!.pinHolders).toEqual([reader.clientIndex]);
      second.close();
      second.close();
      expect(reader.clientPins(first.slot)).toBe(0);
      expect(producer.tryEvict(key)).toBe('evicted');
    });

    it('republishing after eviction gives the same slot a higher generation', () => {
      const { producer, consumer: reader } = pair(h);
      const key = makeKey(1);
      const r1 = publish(producer, key);
      const l1 = asLease(reader.tryPin(key));
      l1.close();
      expect(producer.tryEvict(key)).toBe('evicted');
      const r2 = publish(producer, key, { ...META, sizeBytes: 8192 });
      expect(r2.slot).toBe(r1.slot);
      expect(r2.generation).toBeGreaterThan(r1.generation);
      const l2 = asLease(reader.tryPin(key));
      expect(l2.slot).toBe(l1.slot);
      expect(BigInt(l2.generation)).toBe(r2.generation);
      expect(BigInt(l2.generation)).toBeGreaterThan(BigInt(l1.generation));
      // slotGeneration is the same value under the name that says whose it is.
      expect(l2.slotGeneration).toBe(l2.generation);
      expect(l1.slotGeneration).toBe(l1.generation);
      expect(l2.meta).toEqual({ ...META_SEEN, sizeBytes: 8192 });
      l2.close();
    });

    it('a lease from before an eviction, closed again after the slot was reused, releases nothing', () => {
      const { producer, consumer: reader } = pair(h);
      const key = makeKey(1);
      publish(producer, key);
      const old1 = asLease(reader.tryPin(key));
      const old2 = asLease(reader.tryPin(key));
      old1.close();
      old2.close();
      expect(producer.tryEvict(key)).toBe('evicted');
      publish(producer, key);
      const fresh = asLease(reader.tryPin(key));
      expect(fresh.slot).toBe(old1.slot);
      expect(reader.clientPins(fresh.slot)).toBe(1);
      old1.close();
      old2.close();
      expect(reader.clientPins(fresh.slot)).toBe(1);
      expect(fresh.closed).toBe(false);
      expect(producer.tryEvict(key)).toBe('pinned');
      fresh.close();
      expect(reader.clientPins(fresh.slot)).toBe(0);
      expect(producer.tryEvict(key)).toBe('evicted');
    });

    it('abandon frees the slot: absent again, reservable with a higher generation', () => {
      const { producer, consumer: reader } = pair(h);
      const key = makeKey(1);
      const r1 = producer.reserve(key);
      producer.abandon(r1);
      expect(reader.tryPin(key)).toEqual({ kind: 'miss', reason: 'absent' });
      expect(producer.tryEvict(key)).toBe('absent');
      expectCode(() => producer.abandon(r1), 'ERR_STALE_RESERVATION');
      expectCode(() => producer.publish(r1, META), 'ERR_STALE_RESERVATION');
      expect(reader.tryPin(key)).toEqual({ kind: 'miss', reason: 'absent' });
      const r2 = producer.reserve(key);
      expect(r2.slot).toBe(r1.slot);
      expect(r2.generation).toBeGreaterThan(r1.generation);
      producer.publish(r2, META);
      const lease = asLease(reader.tryPin(key));
      expect(BigInt(lease.generation)).toBe(r2.generation);
      lease.close();
    });

    it('a reservation whose slot is not a u32 integer or whose generation is not a bigint below 2^56 is ERR_INVALID_ARGUMENT, and the slot stays reserved', () => {
      const { producer, consumer: reader } = pair(h);
      const key = makeKey(1);
      const r = producer.reserve(key);
      const forged = [
        { ...r, slot: r.slot + 2 ** 32 },
        { ...r, slot: r.slot + 0.5 },
        { ...r, slot: -1 },
        { ...r, generation: r.generation - 1n - (1n << 64n) },
        { ...r, generation: r.generation + (1n << 64n) },
        { ...r, generation: r.generation + (1n << 56n) }, // 56 generation bits: it would wrap onto this slot
        { ...r, generation: 1n << 56n },
        { ...r, generation: -1n },
      ];
      for (const bad of forged) {
        expectCode(() => producer.publish(bad, META), 'ERR_INVALID_ARGUMENT');
        expectCode(() => producer.abandon(bad), 'ERR_INVALID_ARGUMENT');
      }
      expect(reader.tryPin(key)).toMatchObject({ kind: 'miss', reason: 'preparing' });
      producer.publish(r, META);
      asLease(reader.tryPin(key)).close();
    });

    it('publishing a reservation twice is ERR_STALE_RESERVATION, and so is abandoning a published one', () => {
      const { producer, consumer: reader } = pair(h);
      const key = makeKey(1);
      const reservation = publish(producer, key);
      expectCode(() => producer.publish(reservation, { ...META, sizeBytes: 1 }), 'ERR_STALE_RESERVATION');
      expectCode(() => producer.abandon(reservation), 'ERR_STALE_RESERVATION');
      // The first publication stands.
      const lease = asLease(reader.tryPin(key));
      expect(lease.meta).toEqual(META_SEEN);
      lease.close();
    });

    it('a reservation from before an eviction cannot publish into the reused slot', () => {
      const { producer } = pair(h);
      const key = makeKey(1);
      const old = publish(producer, key);
      expect(producer.tryEvict(key)).toBe('evicted');
      const now = producer.reserve(key);
      expect(now.slot).toBe(old.slot);
      expectCode(() => producer.publish(old, META), 'ERR_STALE_RESERVATION');
      producer.publish(now, META);
    });

    it('reserving a key that is reserved or published is ERR_KEY_EXISTS', () => {
      const { producer } = pair(h);
      const key = makeKey(1);
      const reservation = producer.reserve(key);
      expectCode(() => producer.reserve(key), 'ERR_KEY_EXISTS');
      producer.publish(reservation, META);
      expectCode(() => producer.reserve(key), 'ERR_KEY_EXISTS');
      expect(producer.tryEvict(key)).toBe('evicted');
      expect(producer.reserve(key).slot).toBe(reservation.slot);
    });

    it('ERR_TABLE_FULL when every slot of the probe window is taken; evicting one makes room', () => {
      expect(PROBE_WINDOW).toBe(8);
      const { producer, consumer: reader } = pair(h, 8);
      const keys = Array.from({ length: 8 }, (_, i) => makeKey(i + 1));
      const slots = new Set<number>();
      for (const key of keys) slots.add(publish(producer, key).slot);
      expect(slots.size).toBe(8);
      expectCode(() => producer.reserve(makeKey(100)), 'ERR_TABLE_FULL');
      expectCode(() => producer.reserve(makeKey(101)), 'ERR_TABLE_FULL');
      // Every published key is still there.
      for (const key of keys) asLease(reader.tryPin(key)).close();
      expect(producer.tryEvict(keys[3]!)).toBe('evicted');
      const r = producer.reserve(makeKey(100));
      expectCode(() => producer.reserve(makeKey(101)), 'ERR_TABLE_FULL');
      producer.abandon(r);
      producer.reserve(makeKey(101));
    });

    it('a table of capacity 1 holds one key', () => {
      const { producer, consumer: reader } = pair(h, 1);
      publish(producer, makeKey(1));
      expectCode(() => producer.reserve(makeKey(2)), 'ERR_TABLE_FULL');
      const lease = asLease(reader.tryPin(makeKey(1)));
      expect(lease.slot).toBe(0);
      expect(reader.tryPin(makeKey(2))).toEqual({ kind: 'miss', reason: 'absent' });
      lease.close();
    });

    it('table.close() releases all its pins; later lease.close() releases nothing', () => {
      const { producer, consumer: reader } = pair(h);
      const key = makeKey(1);
      publish(producer, key);
      const a = asLease(reader.tryPin(key));
      const b = asLease(reader.tryPin(key));
      expect(producer.tryEvict(key)).toBe('pinned');
      reader.close();
      expect(reader.closed).toBe(true);
      expect(producer.inspect().slots[0]!.pinHolders).toEqual([]);
      expect(producer.tryEvict(key)).toBe('evicted');
      // Republished and pinned by a new client, which may reuse the closed client's index.
      publish(producer, key);
      const next = h.join(producer, 'consumer');
      const c = asLease(next.tryPin(key));
      a.close();
      b.close();
      expect(a.closed).toBe(true);
      expect(b.closed).toBe(true);
      expect(next.clientPins(c.slot)).toBe(1);
      expect(producer.tryEvict(key)).toBe('pinned');
      c.close();
      expect(producer.tryEvict(key)).toBe('evicted');
    });

    it('a closed table: tryPin is a miss "table-closed", every other call is ERR_CLOSED; close is idempotent', () => {
      const { producer, consumer: reader } = pair(h);
      const key = makeKey(1);
      publish(producer, key);
      const pending = producer.reserve(makeKey(2));
      reader.close();
      reader.close();
      expect(reader.tryPin(key)).toEqual({ kind: 'miss', reason: 'table-closed' });
      expect(reader.tryPin(key, device(TARGET_A))).toEqual({ kind: 'miss', reason: 'table-closed' });
      expectCode(() => reader.inspect(), 'ERR_CLOSED');
      expectCode(() => reader.clientPins(0), 'ERR_CLOSED');
      producer.close();
      expect(producer.closed).toBe(true);
      expect(producer.tryPin(key)).toEqual({ kind: 'miss', reason: 'table-closed' });
      expectCode(() => producer.reserve(makeKey(3)), 'ERR_CLOSED');
      expectCode(() => producer.publish(pending, META), 'ERR_CLOSED');
      expectCode(() => producer.abandon(pending), 'ERR_CLOSED');
      expectCode(() => producer.tryEvict(key), 'ERR_CLOSED');
      expectCode(() => producer.recordDeviceWrite(key, { ...TARGET_A, writeSeq: 1 }), 'ERR_CLOSED');
      expectCode(() => producer.reapDeadClients(), 'ERR_CLOSED');
      expectCode(() => producer.inspect(), 'ERR_CLOSED');
    });

    it('closing the producer abandons its reservations; a new producer takes over', () => {
      const producer = h.create('producer');
      const reader = h.join(producer, 'consumer');
      publish(producer, makeKey(1));
      producer.reserve(makeKey(2));
      expect(reader.tryPin(makeKey(2))).toEqual({ kind: 'miss', reason: 'preparing' });
      producer.close();
      expect(reader.tryPin(makeKey(2))).toEqual({ kind: 'miss', reason: 'absent' });
      expect(reader.inspect().producer).toBeNull();
      // A published artifact outlives its producer.
      const lease = asLease(reader.tryPin(makeKey(1)));
      expect(lease.meta).toEqual(META_SEEN);
      const next = h.join(reader, 'producer');
      expect(next.tryEvict(makeKey(1))).toBe('pinned');
      publish(next, makeKey(2));
      asLease(reader.tryPin(makeKey(2))).close();
      lease.close();
      expect(next.tryEvict(makeKey(1))).toBe('evicted');
    });

    it('operations with a non-key are ERR_INVALID_KEY', () => {
      const { producer } = pair(h);
      expectCode(() => producer.reserve({} as never), 'ERR_INVALID_KEY');
      expectCode(() => producer.tryEvict('k' as never), 'ERR_INVALID_KEY');
      expectCode(() => producer.recordDeviceWrite(null as never, { ...TARGET_A, writeSeq: 1 }), 'ERR_INVALID_KEY');
    });

    it('reapDeadClients reaps nobody while every client is alive', () => {
      const { producer, consumer: reader } = pair(h);
      const key = makeKey(1);
      publish(producer, key);
      const lease = asLease(reader.tryPin(key));
      expect(producer.reapDeadClients()).toBe(0);
      expect(reader.reapDeadClients()).toBe(0);
      expect(producer.tryEvict(key)).toBe('pinned');
      expect(producer.inspect().reapedClients).toBe(0n);
      lease.close();
    });
  });

  describe('device readiness', () => {
    const OTHER_DEVICE = { ...TARGET_A, device: 'GPU-00000000-1111-2222-3333-444444444444' };
    const OTHER_ARENA = { ...TARGET_A, arena: 4 };
    const OTHER_ARENA_GEN = { ...TARGET_A, arenaGeneration: 8 };

    it('no record: a device pin misses "no-device-record"; host pins never need one', () => {
      const { producer, consumer: reader } = pair(h);
      const key = makeKey(1);
      publish(producer, key);
      expect(reader.tryPin(key, device(TARGET_A))).toEqual({ kind: 'miss', reason: 'no-device-record' });
      expect(reader.clientPins(0) + reader.clientPins(1)).toBe(0);
      const host = asLease(reader.tryPin(key, HOST));
      expect(host.readiness).toBe('host');
      expect(reader.clientPins(host.slot)).toBe(1);
      // A device miss while this client already holds the slot keeps the existing pin.
      expect(reader.tryPin(key, device(TARGET_A))).toEqual({ kind: 'miss', reason: 'no-device-record' });
      expect(reader.clientPins(host.slot)).toBe(1);
      host.close();
      expect(producer.tryEvict(key)).toBe('evicted');
    });

    it('recordDeviceWrite then an exact target hits with readiness "device"; others say which part differs', () => {
      const { producer, consumer: reader } = pair(h);
      const key = makeKey(1);
      const reservation = publish(producer, key);
      expect(producer.recordDeviceWrite(key, { ...TARGET_A, writeSeq: 1 })).toBe('recorded');
      const who = consumer(9);
      const lease = asLease(reader.tryPin(key, device(TARGET_A), who));
      expect(lease.readiness).toBe('device');
      expect(lease.slot).toBe(reservation.slot);
      expect(BigInt(lease.generation)).toBe(reservation.generation);
      expect(lease.meta).toEqual(META_SEEN);
      expect(lease.consumer).toEqual(who);
      expect(reader.tryPin(key, device(OTHER_DEVICE))).toEqual({ kind: 'miss', reason: 'device-mismatch' });
      expect(reader.tryPin(key, device(OTHER_ARENA))).toEqual({ kind: 'miss', reason: 'device-mismatch' });
      expect(reader.tryPin(key, device(OTHER_ARENA_GEN))).toEqual({ kind: 'miss', reason: 'arena-generation-mismatch' });
      // Misses while holding the slot keep the lease's pin.
      expect(reader.clientPins(lease.slot)).toBe(1);
      // bigint and upper-case forms of the same target hit too.
      const same = asLease(reader.tryPin(key, device({ device: TARGET_A.device.toUpperCase(), arena: 3n, arenaGeneration: 7n })));
      expect(same.readiness).toBe('device');
      expect(reader.clientPins(lease.slot)).toBe(2);
      // Host pins still work with a record present.
      const host = asLease(reader.tryPin(key));
      expect(host.readiness).toBe('host');
      host.close();
      same.close();
      expect(producer.tryEvict(key)).toBe('pinned');
      lease.close();
      expect(reader.clientPins(lease.slot)).toBe(0);
    });

    it('a device miss from a client that holds no pin leaves no pin behind', () => {
      const { producer, consumer: reader } = pair(h);
      const key = makeKey(1);
      publish(producer, key);
      producer.recordDeviceWrite(key, { ...TARGET_A, writeSeq: 1 });
      expect(reader.tryPin(key, device(OTHER_DEVICE))).toEqual({ kind: 'miss', reason: 'device-mismatch' });
      expect(reader.tryPin(key, device(OTHER_ARENA_GEN))).toEqual({ kind: 'miss', reason: 'arena-generation-mismatch' });
      const slot = producer.inspect().slots[0]!;
      expect(slot.pinHolders).toEqual([]);
      expect(reader.clientPins(slot.slot)).toBe(0);
      expect(producer.tryEvict(key)).toBe('evicted');
    });

    it('a malformed target is a miss "invalid-target"', () => {
      const { producer, consumer: reader } = pair(h);
      const key = makeKey(1);
      publish(producer, key);
      producer.recordDeviceWrite(key, { ...TARGET_A, writeSeq: 1 });
      expect(reader.tryPin(key, device({ ...TARGET_A, device: 'GPU-nope' }))).toEqual({ kind: 'miss', reason: 'invalid-target' });
      expect(reader.tryPin(key, device({ ...TARGET_A, arena: -1 }))).toEqual({ kind: 'miss', reason: 'invalid-target' });
      expect(producer.tryEvict(key)).toBe('evicted');
    });

    it('a newer record replaces the older one', () => {
      const { producer, consumer: reader } = pair(h);
      const key = makeKey(1);
      publish(producer, key);
      producer.recordDeviceWrite(key, { ...TARGET_A, writeSeq: 1 });
      asLease(reader.tryPin(key, device(TARGET_A))).close();
      expect(producer.recordDeviceWrite(key, { ...OTHER_ARENA_GEN, writeSeq: 2 })).toBe('recorded');
      expect(reader.tryPin(key, device(TARGET_A))).toEqual({ kind: 'miss', reason: 'arena-generation-mismatch' });
      const lease = asLease(reader.tryPin(key, device(OTHER_ARENA_GEN)));
      expect(lease.readiness).toBe('device');
      const record = producer.inspect().slots.find((s) => s.slot === lease.slot)!.device;
      expect(record).toEqual({
        deviceUuidHex: TARGET_A.device.slice(4).replaceAll('-', ''),
        arena: 3n,
        arenaGeneration: 8n,
        writeSeq: 2n,
      });
      lease.close();
      expect(producer.recordDeviceWrite(key, { ...OTHER_DEVICE, writeSeq: 3n })).toBe('recorded');
      expect(reader.tryPin(key, device(OTHER_ARENA_GEN))).toEqual({ kind: 'miss', reason: 'device-mismatch' });
      asLease(reader.tryPin(key, device(OTHER_DEVICE))).close();
    });

    it('recordDeviceWrite on an absent or reserved key is "absent"; a bad write is ERR_INVALID_ARGUMENT', () => {
      const { producer, consumer: reader } = pair(h);
      const key = makeKey(1);
      expect(producer.recordDeviceWrite(key, { ...TARGET_A, writeSeq: 1 })).toBe('absent');
      const reservation = producer.reserve(key);
      expect(producer.recordDeviceWrite(key, { ...TARGET_A, writeSeq: 1 })).toBe('absent');
      producer.publish(reservation, META);
      expect(reader.tryPin(key, device(TARGET_A))).toEqual({ kind: 'miss', reason: 'no-device-record' });
      expectCode(() => producer.recordDeviceWrite(key, { ...TARGET_A, device: 'GPU-x', writeSeq: 1 }), 'ERR_INVALID_ARGUMENT');
      expectCode(() => producer.recordDeviceWrite(key, { ...TARGET_A, writeSeq: -1 }), 'ERR_INVALID_ARGUMENT');
      expectCode(() => producer.recordDeviceWrite(key, null as never), 'ERR_INVALID_ARGUMENT');
      expect(reader.tryPin(key, device(TARGET_A))).toEqual({ kind: 'miss', reason: 'no-device-record' });
    });

    it('eviction clears the record: the republished artifact has none', () => {
      const { producer, consumer: reader } = pair(h);
      const key = makeKey(1);
      publish(producer, key);
      producer.recordDeviceWrite(key, { ...TARGET_A, writeSeq: 1 });
      asLease(reader.tryPin(key, device(TARGET_A))).close();
      expect(producer.tryEvict(key)).toBe('evicted');
      publish(producer, key);
      expect(reader.tryPin(key, device(TARGET_A))).toEqual({ kind: 'miss', reason: 'no-device-record' });
      expect(producer.inspect().slots[0]!.device).toBeNull();
      asLease(reader.tryPin(key, HOST)).close();
    });

    it('a slot reused by another key after eviction carries no record', () => {
      const { producer, consumer: reader } = pair(h, 1);
      const a = makeKey(1);
      publish(producer, a);
      producer.recordDeviceWrite(a, { ...TARGET_A, writeSeq: 1 });
      expect(producer.tryEvict(a)).toBe('evicted');
      const b = makeKey(2);
      const r = producer.reserve(b);
      expect(r.slot).toBe(0);
      producer.publish(r, META);
      expect(reader.tryPin(b, device(TARGET_A))).toEqual({ kind: 'miss', reason: 'no-device-record' });
    });
  });

  describe('probing', () => {
    it('a key takes the emptier of its two buckets (ties to the first), its first free slot; ERR_TABLE_FULL only when both are full', () => {
      const capacity = 64; // buckets 0-3 (slots 0-31) for a first choice, 4-7 (32-63) for a second
      const { producer, consumer: reader } = pair(h, capacity);
      const crowded = keysInBuckets(2, 6, capacity, 17);
      const slots = crowded.slice(0, 16).map((key) => publish(producer, key).slot);
      expect(slots).toEqual([16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55]);
      expectCode(() => producer.reserve(crowded[16]!), 'ERR_TABLE_FULL');
      expect(producer.inspect().slots.map((s) => s.slot)).toEqual([...slots].sort((a, b) => a - b));
      for (const [i, key] of crowded.slice(0, 16).entries()) {
        const lease = asLease(reader.tryPin(key));
        expect(lease.slot).toBe(slots[i]);
        lease.close();
        expect(reader.peek(key)).toEqual({ kind: 'ready' });
      }
      expect(reader.tryPin(crowded[16]!)).toEqual({ kind: 'miss', reason: 'absent' });
      expect(reader.peek(crowded[16]!)).toEqual({ kind: 'miss', reason: 'absent' });
      // A key that shares only the full first bucket goes to its own second one; a key elsewhere
      // takes the first slot of its first bucket.
      const [spill] = keysInBuckets(2, 4, capacity, 1, 100_000);
      expect(publish(producer, spill!).slot).toBe(32);
      const [elsewhere] = keysInBuckets(0, 7, capacity, 1, 200_000);
      expect(publish(producer, elsewhere!).slot).toBe(0);
      // Evicting one in the middle of the second bucket: a key beyond the hole still finds its
      // slot, and the seventeenth key takes the hole (that bucket is now the emptier).
      expect(producer.tryEvict(crowded[5]!)).toBe('evicted');
      expect(asLease(reader.tryPin(crowded[7]!)).slot).toBe(51);
      expect(publish(producer, crowded[16]!).slot).toBe(50);
      const lease = asLease(reader.tryPin(crowded[16]!));
      expect(lease.slot).toBe(50);
      lease.close();
    });

    it('a table whose last bucket is short: a key placed there is found, and the bucket is full at its size', () => {
      const capacity = 9; // bucket 0 is slots 0-7, bucket 1 is slot 8 alone
      const { producer, consumer: reader } = pair(h, capacity);
      const keys = Array.from({ length: 10 }, (_, i) => makeKey(300 + i));
      const slots = keys.slice(0, 9).map((key) => publish(producer, key).slot);
      expect(slots).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8]); // ties go to the first bucket until it is full
      expectCode(() => producer.reserve(keys[9]!), 'ERR_TABLE_FULL');
      for (const [i, key] of keys.slice(0, 9).entries()) {
        const lease = asLease(reader.tryPin(key));
        expect(lease.slot).toBe(slots[i]);
        lease.close();
      }
    });
  });

  describe('clients', () => {
    it('64 clients fit; the 65th is ERR_NO_CLIENT_SLOT until one closes', () => {
      const producer = h.create('producer', 8);
      const clients = [producer];
      for (let i = 1; i < 64; i++) clients.push(h.join(producer, 'consumer'));
      expect(new Set(clients.map((c) => c.clientIndex)).size).toBe(64);
      expect(producer.inspect().clients).toHaveLength(64);
      expectCode(() => h.join(producer, 'consumer'), 'ERR_NO_CLIENT_SLOT');
      const freed = clients[10]!.clientIndex;
      clients[10]!.close();
      const late = h.join(producer, 'consumer');
      expect(late.clientIndex).toBe(freed);
      const key = makeKey(1);
      publish(producer, key);
      const lease = asLease(late.tryPin(key));
      expect(producer.inspect().slots[0]!.pinHolders).toEqual([freed]);
      lease.close();
    });

    it('with the registry full, opening reaps a dead client to make room, whichever entry it holds (entry 0 too)', () => {
      const first = h.create('consumer', 8);
      const clients = [first];
      for (let i = 1; i < 64; i++) clients.push(h.join(first, 'consumer'));
      expect(first.clientIndex).toBe(0);
      // Entry 0's client looks dead: its pid is one that has exited.
      const dead = spawnSync(process.execPath, ['-e', '']);
      expect(dead.status).toBe(0);
      const entry0 = first.inspect().clients.find((c) => c.index === 0)!;
      poke(first, CLIENTS_OFFSET + CLIENT_FIELD.WORD, (BigInt(entry0.serial) << 24n) | (BigInt(dead.pid!) << 2n) | BigInt(CLIENT_STATE.ACTIVE));
      const late = h.join(first, 'consumer'); // registry full: reaps before it registers
      expect(late.clientIndex).toBe(0);
      expect(late.inspect().reapedClients).toBe(1n);
      late.close();
    });

    it('hundreds of leases on one slot are counted and released one by one', () => {
      const { producer, consumer: reader } = pair(h);
      const key = makeKey(1);
      publish(producer, key);
      const leases = Array.from({ length: 600 }, () => asLease(reader.tryPin(key)));
      const slot = leases[0]!.slot;
      expect(reader.clientPins(slot)).toBe(600);
      for (let i = 0; i < 600; i += 2) leases[i]!.close();
      for (let i = 0; i < 600; i += 2) leases[i]!.close();
      expect(reader.clientPins(slot)).toBe(300);
      expect(producer.tryEvict(key)).toBe('pinned');
      for (let i = 599; i > 0; i -= 2) leases[i]!.close();
      expect(reader.clientPins(slot)).toBe(0);
      expect(producer.tryEvict(key)).toBe('evicted');
    });
  });

  describe('states a producer that died leaves behind (written into the segment directly)', () => {
    it('EVICTING: others miss "evicting", a holder may pin again, the next producer rolls it back to READY', () => {
      const producer = h.create('producer');
      const reader = h.join(producer, 'consumer');
      const other = h.join(producer, 'consumer');
      const key = makeKey(1);
      const r = publish(producer, key);
      const held = asLease(reader.tryPin(key));
      poke(producer, slotOffset(r.slot, SLOT.STATE_GEN), (r.generation << 8n) | 3n);
      expect(reader.inspect().slots[0]!.state).toBe('evicting');
      expect(other.tryPin(key)).toEqual({ kind: 'miss', reason: 'evicting' });
      expect(other.clientPins(r.slot)).toBe(0);
      expect(reader.inspect().slots[0]!.pinHolders).toEqual([reader.clientIndex]);
      const again = asLease(reader.tryPin(key));
      expect(BigInt(again.generation)).toBe(r.generation);
      expect(reader.clientPins(r.slot)).toBe(2);
      expect(producer.tryEvict(key)).toBe('pinned');
      producer.close();
      expect(reader.inspect().slots[0]!.state).toBe('ready');
      expect(reader.inspect().slots[0]!.generation).toBe(r.generation);
      asLease(other.tryPin(key)).close();
      const next = h.join(reader, 'producer');
      expect(next.tryEvict(key)).toBe('pinned');
      held.close();
      again.close();
      expect(next.tryEvict(key)).toBe('evicted');
    });

    it('a reap whose reaper is gone is taken over by the next reap; a live or foreign reaper\'s is not', () => {
      const producer = h.create('producer');
      const victim = h.join(producer, 'consumer');
      const live = h.join(producer, 'consumer');
      const foreign = h.join(producer, 'consumer');
      const ghost = h.join(producer, 'consumer');
      const key = makeKey(1);
      publish(producer, key);
      const lease = asLease(victim.tryPin(key));
      const clients = producer.inspect().clients;
      const entryOf = (t: LeaseTable) => clients.find((c) => c.index === t.clientIndex)!;
      const wordAt = (t: LeaseTable) => CLIENTS_OFFSET + t.clientIndex * CLIENT_SIZE;
      const myNs = entryOf(producer).pidNamespace;
      // `foreign` looks like a client of another pid namespace; `ghost` like one whose process died.
      poke(producer, wordAt(foreign) + CLIENT_FIELD.PID_NS, myNs + 1n);
      const dead = spawnSync(process.execPath, ['-e', '']);
      expect(dead.status).toBe(0); // an exited, waited-for process: its pid is gone
      const ghostEntry = entryOf(ghost);
      poke(producer, wordAt(ghost) + CLIENT_FIELD.WORD, (BigInt(ghostEntry.serial) << 24n) | (BigInt(dead.pid!) << 2n) | BigInt(CLIENT_STATE.ACTIVE));
      // What a reaper's claim leaves in the victim's entry: the serial kept, REAPING, and the
      // reaper named in the pid bits (1 << 21 | low 15 bits of its serial << 6 | its index).
      const stageReapedBy = (index: number, serial: number) =>
        poke(producer, wordAt(victim) + CLIENT_FIELD.WORD,
          (BigInt(entryOf(victim).serial) << 24n) | ((BigInt(1 << 21) | (BigInt(serial & 0x7fff) << 6n) | BigInt(index)) << 2n) | BigInt(CLIENT_STATE.REAPING));
      for (const reaper of [live, foreign, producer]) {
        stageReapedBy(reaper.clientIndex, entryOf(reaper).serial);
        expect(producer.reapDeadClients()).toBe(reaper === live ? 1 : 0); // ghost, a dead client, is reaped the first time
        expect(producer.inspect().clients.find((c) => c.index === victim.clientIndex)).toMatchObject({
          state: 'reaping',
          reaper: { client: reaper.clientIndex, serialLow15: entryOf(reaper).serial & 0x7fff },
        });
        expect(producer.tryEvict(key)).toBe('pinned');
      }
      // Named by a client that is gone: the entry no longer holds it (ghost was reaped above).
      stageReapedBy(ghost.clientIndex, ghostEntry.serial);
      expect(producer.reapDeadClients()).toBe(1);
      expect(producer.inspect().clients.map((c) => c.index).sort()).toEqual([producer.clientIndex, live.clientIndex, foreign.clientIndex].sort());
      expect(producer.inspect().slots[0]!.pinHolders).toEqual([]);
      expect(producer.tryEvict(key)).toBe('evicted');
      lease.close(); // releases nothing now
      victim.close();
      foreign.close();
      live.close();
    });

    it('an odd device sequence is a write in progress: "device-write-incomplete", never a hit', () => {
      const { producer, consumer: reader } = pair(h);
      const key = makeKey(1);
      const r = publish(producer, key);
      producer.recordDeviceWrite(key, { ...TARGET_A, writeSeq: 1 });
      poke(producer, slotOffset(r.slot, SLOT.DEVICE), 3n);
      expect(reader.tryPin(key, device(TARGET_A))).toEqual({ kind: 'miss', reason: 'device-write-incomplete' });
      expect(reader.inspect().slots[0]!.device).toBeNull();
      expect(reader.clientPins(r.slot)).toBe(0);
      asLease(reader.tryPin(key, HOST)).close();
    });

    it('a device record left half-written (odd) is replaced by the next producer\'s write', () => {
      const producer = h.create('producer');
      const reader = h.join(producer, 'consumer');
      const key = makeKey(1);
      const r = publish(producer, key);
      producer.recordDeviceWrite(key, { ...TARGET_A, writeSeq: 1 });
      poke(producer, slotOffset(r.slot, SLOT.DEVICE), 3n); // died between the odd store and the even one
      producer.close();
      const next = h.join(reader, 'producer');
      const before = reader.tryPin(key, device(TARGET_A));
      expect(before.kind).toBe('miss');
      expect(next.recordDeviceWrite(key, { ...OTHER_GEN_TARGET, writeSeq: 2 })).toBe('recorded');
      const lease = reader.tryPin(key, device(OTHER_GEN_TARGET));
      expect(lease.kind === 'lease' ? { kind: lease.kind, readiness: lease.readiness, slot: lease.slot } : lease).toEqual({
        kind: 'lease',
        readiness: 'device',
        slot: r.slot,
      });
      if (lease.kind === 'lease') lease.close();
      const record = reader.inspect().slots[0]!.device;
      expect(record).toEqual({ deviceUuidHex: TARGET_A.device.slice(4).replaceAll('-', ''), arena: 3n, arenaGeneration: 8n, writeSeq: 2n });
    });
  });

  describe('inspect()', () => {
    it('summary() counts what inspect() lists, read in place', () => {
      const producer = h.create('producer', 32);
      const reader = h.join(producer, 'consumer');
      const other = h.join(producer, 'consumer');
      const a = publish(producer, makeKey(1));
      publish(producer, makeKey(2));
      const c = publish(producer, makeKey(3));
      producer.reserve(makeKey(4));
      const lease = asLease(reader.tryPin(makeKey(1)));
      const lease2 = asLease(other.tryPin(makeKey(2)));
      poke(producer, slotOffset(c.slot, SLOT.STATE_GEN), (c.generation << 8n) | 3n); // EVICTING
      const summary = producer.summary();
      expect(summary).toEqual({
        capacity: 32,
        slots: { free: 28, reserved: 1, ready: 2, evicting: 1 },
        pinnedSlots: 2,
        clients: { claiming: 0, active: 3, reaping: 0 },
        producer: producer.clientIndex,
        reapedClients: 0n,
      });
      expect(summarizeInspection(reader.inspect())).toEqual(summary);
      expect(reader.summary()).toEqual(summary);
      lease.close();
      lease2.close();
      other.close();
      expect(producer.summary()).toMatchObject({ pinnedSlots: 0, clients: { active: 2 } });
      expect(a.slot).toBeGreaterThanOrEqual(0);
      producer.close();
      expect(reader.summary()).toMatchObject({ producer: null, slots: { reserved: 0, evicting: 0 } });
      reader.close();
      expectCode(() => reader.summary(), 'ERR_CLOSED');
    });

    it('lists capacity, ABI version, producer, clients, and a READY slot with its pin holders', () => {
      const { producer, consumer: reader } = pair(h, 32);
      const key = makeKey(1);
      const reservation = publish(producer, key);
      const pending = producer.reserve(makeKey(2));
      const lease = asLease(reader.tryPin(key));
      const seen = reader.inspect();
      expect(seen.capacity).toBe(32);
      expect(seen.abiVersion).toBe(WP_ABI_VERSION);
      expect(seen.segmentSize).toBe(BigInt(segmentSize(32)));
      expect(seen.producer).toBe(producer.clientIndex);
      expect(seen.reapedClients).toBe(0n);
      expect(seen.clients.map((c) => c.index).sort((x, y) => x - y)).toEqual([producer.clientIndex, reader.clientIndex].sort((x, y) => x - y));
      for (const client of seen.clients) {
        expect(client.pid).toBe(process.pid);
        expect(client.state).toBe('active');
        expect(client.producer).toBe(client.index === producer.clientIndex);
        expect(client.startTime).toBeGreaterThan(0n);
      }
      expect(seen.slots).toHaveLength(2);
      const ready = seen.slots.find((s) => s.slot === reservation.slot)!;
      expect(ready).toEqual({
        slot: reservation.slot,
        state: 'ready',
        generation: reservation.generation,
        pinHolders: [reader.clientIndex],
        digestHex: key.hex,
        meta: { sizeBytes: 4096n, location: (1n << 60n) + 5n, checksum: (1n << 64n) - 1n, codecId: 7, representationVersion: 3 },
        device: null,
      });
      const reserved = seen.slots.find((s) => s.slot === pending.slot)!;
      expect(reserved.state).toBe('reserved');
      expect(reserved.digestHex).toBe(makeKey(2).hex);
      expect(reserved.pinHolders).toEqual([]);
      lease.close();
      expect(producer.inspect().slots.find((s) => s.slot === reservation.slot)!.pinHolders).toEqual([]);
      reader.close();
      expect(producer.inspect().clients.map((c) => c.index)).toEqual([producer.clientIndex]);
    });

    it('pin holders list every client that pins', () => {
      const { producer, consumer: a } = pair(h);
      const b = h.join(producer, 'consumer');
      const key = makeKey(1);
      publish(producer, key);
      const la = asLease(a.tryPin(key));
      const lb = asLease(b.tryPin(key));
      const lp = asLease(producer.tryPin(key));
      expect(producer.inspect().slots[0]!.pinHolders).toEqual([a.clientIndex, b.clientIndex, producer.clientIndex].sort((x, y) => x - y));
      expect(producer.tryEvict(key)).toBe('pinned');
      la.close();
      lp.close();
      expect(producer.inspect().slots[0]!.pinHolders).toEqual([b.clientIndex]);
      lb.close();
      expect(producer.tryEvict(key)).toBe('evicted');
      expect(producer.inspect().slots).toEqual([]);
    });
  });

  describe('leaseTableBackend with a WaitCoordinator', () => {
    it('a wake on a published key is a hit whose lease pins the table', () => {
      const { producer, consumer: reader } = pair(h);
      const coord = withBackend(leaseTableBackend(reader));
      const key = makeKey(1);
      const admission = coord.onWait(consumer(1), key);
      expect(admission.status).toBe('queued');
      const reservation = publish(producer, key);
      const woke = coord.onWake(admission.ticket!);
      expect(woke.kind).toBe('hit');
      if (woke.kind !== 'hit') return;
      const { lease } = woke;
      expect(lease.key).toBe(key);
      expect(lease.readiness).toBe('host');
      expect(lease.consumer).toEqual(consumer(1));
      expect(lease.slot).toBe(reservation.slot);
      expect(BigInt(lease.generation)).toBe(reservation.generation);
      expect(lease.meta).toEqual(META_SEEN);
      expect(reader.clientPins(lease.slot)).toBe(1);
      expect(producer.inspect().slots[0]!.pinHolders).toEqual([reader.clientIndex]);
      expect(producer.tryEvict(key)).toBe('pinned');
      expect(coord.stats().hits).toBe(1);
      expect(coord.shutdown().drained).toBe(true);
      // Valid after the coordinator shut down.
      expect(lease.closed).toBe(false);
      expect(producer.tryEvict(key)).toBe('pinned');
      lease.close();
      expect(producer.tryEvict(key)).toBe('evicted');
    });

    it("a backend over the table is still held to its lease: one closed, of another key or of another consumer is refused", () => {
      // leaseTableBackend vouches for a table lease's slot, generation and meta (it has them by
      // construction, and meta is built on first read), so the coordinator does not read them;
      // whether it is open, and whose, it still checks. Each wrong backend here vouches the same way.
      const { producer, consumer: reader } = pair(h);
      const keys = [makeKey(1), makeKey(2)];
      for (const key of keys) publish(producer, key);
      const wrong: Array<[string, ArtifactBackend['tryPinReady'], string]> = [
        ['closed', (key, owner, want) => { const l = reader.tryPin(key, want, owner); if (l.kind === 'lease') l.close(); return l; }, 'backend-error'],
        ['of another key', (_key, owner, want) => reader.tryPin(keys[1]!, want, owner), 'identity-mismatch'],
        ['of another consumer', (key, _owner, want) => reader.tryPin(key, want, consumer(9)), 'backend-error'],
      ];
      const { leaseIsWellFormed } = leaseTableBackend(reader);
      // It vouches for this table's leases, and for nothing else.
      const own = reader.tryPin(keys[0]!);
      expect(own.kind).toBe('lease');
      if (own.kind === 'lease') {
        expect(leaseIsWellFormed!(own)).toBe(true);
        own.close();
      }
      const lookalike = { kind: 'lease', key: keys[0]!, consumer: consumer(1), readiness: 'host', slot: 0, generation: 1, meta: {}, closed: false, close() {} };
      expect(leaseIsWellFormed!(lookalike as never)).toBe(false);
      for (const [, tryPinReady, reason] of wrong) {
        const coord = withBackend({ tryPinReady, leaseIsWellFormed });
        expect(coord.onWake(coord.onWait(consumer(1), keys[0]!).ticket!)).toEqual({ kind: 'miss', reason });
        // A refused lease is released: nothing stays pinned.
        expect(producer.inspect().slots.map((slot) => slot.pinHolders)).toEqual([[], []]);
      }
    });

    it('a wake on an unpublished key is a miss "absent"; on a reserved key "preparing"', () => {
      const { producer, consumer: reader } = pair(h);
      const coord = withBackend(leaseTableBackend(reader));
      const t1 = coord.onWait(consumer(1), makeKey(1)).ticket!;
      expect(coord.onWake(t1)).toEqual({ kind: 'miss', reason: 'absent' });
      producer.reserve(makeKey(2));
      const t2 = coord.onWait(consumer(2), makeKey(2)).ticket!;
      expect(coord.onWake(t2)).toEqual({ kind: 'miss', reason: 'preparing' });
      expect(coord.stats().misses).toEqual({ absent: 1, preparing: 1 });
    });

    it('a device wake hits only with a matching record', () => {
      const { producer, consumer: reader } = pair(h);
      const coord = withBackend(leaseTableBackend(reader));
      const key = makeKey(1);
      publish(producer, key);
      const t1 = coord.onWait(consumer(1), key, { readiness: 'device', target: TARGET_A }).ticket!;
      expect(coord.onWake(t1)).toEqual({ kind: 'miss', reason: 'no-device-record' });
      producer.recordDeviceWrite(key, { ...TARGET_A, writeSeq: 1 });
      const t2 = coord.onWait(consumer(2), key, { readiness: 'device', target: TARGET_A }).ticket!;
      const woke = coord.onWake(t2);
      expect(woke.kind).toBe('hit');
      if (woke.kind !== 'hit') return;
      expect(woke.lease.readiness).toBe('device');
      expect(reader.clientPins(woke.lease.slot)).toBe(1);
      woke.lease.close();
      expect(reader.clientPins(woke.lease.slot)).toBe(0);
    });

    it('a closed table makes every wake a miss "table-closed"', () => {
      const { producer, consumer: reader } = pair(h);
      const coord = withBackend(leaseTableBackend(reader));
      publish(producer, makeKey(1));
      reader.close();
      const t = coord.onWait(consumer(1), makeKey(1)).ticket!;
      expect(coord.onWake(t)).toEqual({ kind: 'miss', reason: 'table-closed' });
    });

    it('leaseTableBackend rejects anything but a LeaseTable', () => {
      expectCode(() => leaseTableBackend({} as LeaseTable), 'ERR_INVALID_ARGUMENT');
    });
  });

  describe('handoff: tryPinExact of a lease handoff token', () => {
    it('a token names table, slot, generation and digest; the receiver pins the same artifact for itself', () => {
      const { producer, consumer: orchestrator } = pair(h);
      const engine = h.join(producer, 'consumer');
      const key = makeKey(1);
      const reservation = publish(producer, key);
      const held = asLease(orchestrator.tryPin(key));
      const token = (held as Lease & { handoffToken(): string }).handoffToken();
      expect(token).toBe(`wp1:${producer.name}:${reservation.slot}:${reservation.generation}:${key.hex}`);
      expect(leaseHandoffToken(held)).toBe(token);
      expect(parseHandoffToken(token)).toEqual({ table: producer.name, slot: reservation.slot, generation: reservation.generation, digest: key.hex });
      const taken = asLease<DigestLease>(engine.tryPinExact(token));
      expect(taken).toMatchObject({ kind: 'lease', digest: key.hex, readiness: 'host', slot: held.slot, generation: held.generation, closed: false });
      expect(taken.slotGeneration).toBe(held.generation);
      expect(taken.meta).toEqual(META_SEEN);
      expect(taken.handoffToken()).toBe(token);
      expect(engine.clientPins(held.slot)).toBe(1);
      expect(producer.inspect().slots.find((s) => s.slot === held.slot)!.pinHolders.sort()).toEqual([orchestrator.clientIndex, engine.clientIndex].sort());
      // The rule: the orchestrator closes once the engine holds its own pin; that pin alone holds the artifact.
      held.close();
      expect(producer.tryEvict(key)).toBe('pinned');
      taken.close();
      taken.close();
      expect(taken.closed).toBe(true);
      expect(engine.clientPins(held.slot)).toBe(0);
      expect(producer.tryEvict(key)).toBe('evicted');
    });

    it('a stale token (the artifact evicted, or its slot filled again at the next generation) is the miss "stale-handoff"', () => {
      const { producer, consumer: orchestrator } = pair(h);
      const engine = h.join(producer, 'consumer');
      const key = makeKey(1);
      publish(producer, key);
      const held = asLease(orchestrator.tryPin(key));
      const token = leaseHandoffToken(held);
      held.close();
      expect(producer.tryEvict(key)).toBe('evicted');
      expect(engine.tryPinExact(token)).toEqual({ kind: 'miss', reason: 'stale-handoff' });
      const again = publish(producer, key);
      expect(again.slot).toBe(held.slot);
      expect(again.generation).toBe(BigInt(held.generation) + 1n);
      expect(engine.tryPinExact(token)).toEqual({ kind: 'miss', reason: 'stale-handoff' });
      expect(engine.clientPins(held.slot)).toBe(0);
      expect(producer.inspect().slots.find((s) => s.slot === held.slot)!.pinHolders).toEqual([]);
    });

    it('a slot recycled for another artifact: the old token misses, the new artifact’s token hits', () => {
      const { producer, consumer: engine } = pair(h, 1); // one slot: every key lands in it
      const first = makeKey(1);
      const second = makeKey(2);
      publish(producer, first);
      const lease = asLease(producer.tryPin(first));
      const token = leaseHandoffToken(lease);
      lease.close();
      expect(producer.tryEvict(first)).toBe('evicted');
      publish(producer, second);
      expect(engine.tryPinExact(token)).toEqual({ kind: 'miss', reason: 'stale-handoff' });
      // The right slot and generation under the old digest: another artifact is there now.
      const forged = token.replace(/:(\d+):([0-9a-f]{64})$/, (_, g: string) => `:${BigInt(g) + 1n}:${first.hex}`);
      expect(engine.tryPinExact(forged)).toEqual({ kind: 'miss', reason: 'stale-handoff' });
      const current = asLease(producer.tryPin(second));
      const pinned = asLease<DigestLease>(engine.tryPinExact(leaseHandoffToken(current)));
      expect(pinned.digest).toBe(second.hex);
      pinned.close();
      current.close();
    });

    it('a malformed or forged token throws ERR_INVALID_ARGUMENT; a well-formed one naming what is not there misses', () => {
      const { producer, consumer: engine } = pair(h);
      const key = makeKey(1);
      const r = publish(producer, key);
      const good = `wp1:${producer.name}:${r.slot}:${r.generation}:${key.hex}`;
      const bad: unknown[] = [
        undefined,
        42,
        '',
        good.toUpperCase(),
        `wp2${good.slice(3)}`,
        `${good} `,
        good.replace(`:${r.slot}:`, `:0${r.slot}:`),
        good.replace(`:${r.slot}:`, ':4294967296:'),
        good.replace(/:[0-9a-f]{64}$/, `:${key.hex.slice(2)}`),
        good.replace(/:[0-9a-f]{64}$/, `:${key.hex.toUpperCase()}`),
        `wp1:${producer.name}:${r.slot}:${1n << 56n}:${key.hex}`,
        `wp1:.hidden:${r.slot}:0:${key.hex}`,
        `wp1:other-table:${r.slot}:0:${key.hex}`,
        `wp1:${producer.name}:64:0:${key.hex}`, // the table's capacity is 64
        `wp1:${producer.name}:-1:0:${key.hex}`,
      ];
      for (const token of bad) {
        const error = expectCode(() => engine.tryPinExact(token as string), 'ERR_INVALID_ARGUMENT');
        expect(error.field).toBe('token');
      }
      expectCode(() => parseHandoffToken(`wp1:${producer.name}:1:2`), 'ERR_INVALID_ARGUMENT');
      // Well formed, but naming a generation the slot never reached, or a free slot.
      expect(engine.tryPinExact(good.replace(`:${r.generation}:`, ':5:'))).toEqual({ kind: 'miss', reason: 'stale-handoff' });
      expect(engine.tryPinExact(`wp1:${producer.name}:${(r.slot + 1) % 64}:0:${key.hex}`)).toEqual({ kind: 'miss', reason: 'stale-handoff' });
      expect(engine.inspect().slots.every((s) => s.pinHolders.length === 0)).toBe(true);
    });

    it('a reservation’s slot and generation misses "preparing"; want and a closed table as for tryPin', () => {
      const { producer, consumer: engine } = pair(h);
      const key = makeKey(1);
      const r = producer.reserve(key);
      const token = `wp1:${producer.name}:${r.slot}:${r.generation}:${key.hex}`;
      expect(engine.tryPinExact(token)).toEqual({ kind: 'miss', reason: 'preparing' });
      producer.publish(r, META);
      expect(engine.tryPinExact(token, device(TARGET_A))).toEqual({ kind: 'miss', reason: 'no-device-record' });
      expect(engine.tryPinExact(token, device({ device: 'not-a-gpu', arena: 0, arenaGeneration: 0 }))).toEqual({ kind: 'miss', reason: 'invalid-target' });
      producer.recordDeviceWrite(key, { ...TARGET_A, writeSeq: 1 });
      expect(engine.tryPinExact(token, device(OTHER_GEN_TARGET))).toEqual({ kind: 'miss', reason: 'arena-generation-mismatch' });
      const lease = asLease<DigestLease>(engine.tryPinExact(token, device(TARGET_A)));
      expect(lease.readiness).toBe('device');
      lease.close();
      expect(engine.clientPins(r.slot)).toBe(0);
      expectCode(() => engine.tryPinExact(token, { readiness: 'persisted' } as never), 'ERR_INVALID_ARGUMENT');
      engine.close();
      expect(engine.tryPinExact(token)).toEqual({ kind: 'miss', reason: 'table-closed' });
    });

    it('a closed lease gives no token (ERR_CLOSED); a lease of another backend has none (ERR_INVALID_ARGUMENT)', () => {
      const { producer, consumer: reader } = pair(h);
      const key = makeKey(1);
      publish(producer, key);
      const lease = asLease(reader.tryPin(key));
      lease.close();
      expectCode(() => leaseHandoffToken(lease), 'ERR_CLOSED');
      const memory = new InMemoryBackend();
      memory.publish(key);
      const other = memory.tryPinReady(key, consumer(1), HOST);
      expectCode(() => leaseHandoffToken(other as Lease), 'ERR_INVALID_ARGUMENT');
      expectCode(() => leaseHandoffToken({} as Lease), 'ERR_INVALID_ARGUMENT');
    });
  });

  describe('prefix lookups: tryPinPrefix, unpinMany, peek', () => {
    it('pins the longest READY leading run of keys in order, for the consumer given', () => {
      const { producer, consumer: reader } = pair(h);
      const keys = [1, 2, 3, 4, 5].map((n) => makeKey(n));
      for (const k of keys.slice(0, 3)) publish(producer, k);
      producer.reserve(keys[3]!);
      publish(producer, keys[4]!);
      const who = consumer(7);
      const run = reader.tryPinPrefix(keys, HOST, who);
      expect(run.map((l) => l.key)).toEqual(keys.slice(0, 3));
      for (const lease of run) {
        expect(lease).toMatchObject({ kind: 'lease', readiness: 'host', consumer: who, closed: false, meta: META_SEEN });
        expect(reader.clientPins(lease.slot)).toBe(1);
        expect(producer.tryEvict(lease.key)).toBe('pinned');
      }
      expect(reader.peek(keys[3]!)).toEqual({ kind: 'miss', reason: 'preparing' });
      expect(reader.unpinMany(run)).toBe(3);
      expect(run.every((l) => l.closed)).toBe(true);
      expect(reader.unpinMany(run)).toBe(0);
      for (const lease of run) expect(reader.clientPins(lease.slot)).toBe(0);
      expect(reader.tryPinPrefix([])).toEqual([]);
      expect(reader.tryPinPrefix(keys.slice(3))).toEqual([]);
    });

    it('packed digests give digest leases; a device request applies to every chunk', () => {
      const { producer, consumer: reader } = pair(h);
      const keys = [1, 2, 3].map((n) => makeKey(n));
      for (const k of keys) publish(producer, k);
      const packed = new Uint8Array(96);
      keys.forEach((k, i) => packed.set(k.digest, 32 * i));
      const run = reader.tryPinPrefix(packed);
      expect(run.map((l) => l.digest)).toEqual(keys.map((k) => k.hex));
      expect(run[1]!.handoffToken()).toBe(`wp1:${reader.name}:${run[1]!.slot}:${run[1]!.generation}:${keys[1]!.hex}`);
      expect(reader.unpinMany(run)).toBe(3);
      producer.recordDeviceWrite(keys[0]!, { ...TARGET_A, writeSeq: 1 });
      const onDevice = reader.tryPinPrefix(keys, device(TARGET_A));
      expect(onDevice.map((l) => [l.key, l.readiness])).toEqual([[keys[0], 'device']]);
      onDevice[0]!.close();
      expect(reader.clientPins(onDevice[0]!.slot)).toBe(0);
    });

    it('a prefix longer than the addon’s batch (64) crosses once and stops at the first gap', () => {
      const { producer, consumer: reader } = pair(h, 1024);
      const keys = Array.from({ length: 150 }, (_, i) => makeKey(1000 + i));
      for (const k of keys) if (k !== keys[130]) publish(producer, k);
      const run = reader.tryPinPrefix(keys);
      expect(run.length).toBe(130);
      expect(run.map((l) => l.key)).toEqual(keys.slice(0, 130));
      expect(reader.summary().pinnedSlots).toBe(130);
      expect(reader.unpinMany(run)).toBe(130);
      expect(reader.summary().pinnedSlots).toBe(0);
    });

    it('unpinMany: only this table’s leases (others throw before any is closed), closed ones skipped', () => {
      const { producer, consumer: reader } = pair(h);
      const other = pair(h);
      const key = makeKey(1);
      publish(producer, key);
      publish(other.producer, key);
      const mine = asLease(reader.tryPin(key));
      const theirs = asLease(other.consumer.tryPin(key));
      const error = expectCode(() => reader.unpinMany([mine, theirs]), 'ERR_INVALID_ARGUMENT');
      expect(error.field).toBe('leases');
      expect(mine.closed).toBe(false);
      expectCode(() => reader.unpinMany([mine, { kind: 'lease' } as unknown as Lease]), 'ERR_INVALID_ARGUMENT');
      expectCode(() => reader.unpinMany(mine as unknown as Lease[]), 'ERR_INVALID_ARGUMENT');
      theirs.close();
      expect(reader.unpinMany([mine, theirs, mine])).toBe(1); // a closed lease of any table is skipped
      expect(reader.clientPins(mine.slot)).toBe(0);
      // On a closed table the leases are only marked closed: the close released every pin.
      const again = asLease(reader.tryPin(key));
      reader.close();
      expect(reader.unpinMany([again])).toBe(0);
      expect(again.closed).toBe(true);
    });

    it('tryPinPrefix refuses what is not keys or packed digests, a malformed target, a closed table', () => {
      const { producer, consumer: reader } = pair(h);
      publish(producer, makeKey(1));
      expectCode(() => reader.tryPinPrefix([makeKey(1), {} as never]), 'ERR_INVALID_KEY');
      expect(reader.clientPins(0) + reader.summary().pinnedSlots).toBe(0); // checked before anything is pinned
      expectCode(() => reader.tryPinPrefix(new Uint8Array(33)), 'ERR_INVALID_ARGUMENT');
      expectCode(() => reader.tryPinPrefix('keys' as never), 'ERR_INVALID_ARGUMENT');
      expectCode(() => reader.tryPinPrefix([makeKey(1)], device({ device: 'x', arena: 0, arenaGeneration: 0 })), 'ERR_INVALID_ARGUMENT');
      expectCode(() => reader.tryPinPrefix([makeKey(1)], HOST, { engine: '' } as never), 'ERR_INVALID_ARGUMENT');
      reader.close();
      expectCode(() => reader.tryPinPrefix([makeKey(1)]), 'ERR_CLOSED');
    });

    it('peek reads the state a pin would see and pins nothing', () => {
      const { producer, consumer: reader } = pair(h);
      const key = makeKey(1);
      expect(reader.peek(key)).toEqual({ kind: 'miss', reason: 'absent' });
      const r = producer.reserve(key);
      expect(reader.peek(key)).toEqual({ kind: 'miss', reason: 'preparing' });
      producer.publish(r, META);
      expect(reader.peek(key)).toEqual({ kind: 'ready' });
      expect(reader.clientPins(r.slot)).toBe(0);
      expect(producer.inspect().slots.find((s) => s.slot === r.slot)!.pinHolders).toEqual([]);
      poke(producer, slotOffset(r.slot, SLOT.STATE_GEN), (r.generation << 8n) | 3n); // EVICTING, as a producer stopped mid-claim leaves it
      expect(reader.peek(key)).toEqual({ kind: 'miss', reason: 'evicting' });
      poke(producer, slotOffset(r.slot, SLOT.STATE_GEN), (r.generation << 8n) | 2n);
      expect(reader.peek(key)).toEqual({ kind: 'ready' });
      expectCode(() => reader.peek({} as never), 'ERR_INVALID_KEY');
      reader.close();
      expect(reader.peek(key)).toEqual({ kind: 'miss', reason: 'table-closed' });
    });

    it('an exact pin of a slot stuck EVICTING gives up after its bounded retries', () => {
      const { producer, consumer: reader } = pair(h);
      const key = makeKey(1);
      const r = publish(producer, key);
      const token = `wp1:${producer.name}:${r.slot}:${r.generation}:${key.hex}`;
      poke(producer, slotOffset(r.slot, SLOT.STATE_GEN), (r.generation << 8n) | 3n);
      expect(reader.tryPinExact(token)).toEqual({ kind: 'miss', reason: 'evicting' });
      expect(producer.inspect().slots.find((s) => s.slot === r.slot)!.pinHolders).toEqual([]);
      poke(producer, slotOffset(r.slot, SLOT.STATE_GEN), (r.generation << 8n) | 2n);
      asLease<DigestLease>(reader.tryPinExact(token)).close();
    });

    describe('hostile chunks: each element read once, the length checked before anything is sized', () => {
      /** Asserts that `run` names `named` in order and holds a pin on each: the producer cannot evict them. */
      function expectPinnedAsNamed(producer: LeaseTable, reader: LeaseTable, run: Lease[], named: ReturnType<typeof makeKey>[]): void {
        expect(run.map((l) => l.key)).toEqual(named);
        for (const lease of run) {
          expect(reader.clientPins(lease.slot)).toBeGreaterThan(0);
          expect(producer.tryEvict(lease.key)).toBe('pinned');
        }
      }

      it('an index getter that answers otherwise on a second read: each lease names the key it pinned', () => {
        const { producer, consumer: reader } = pair(h);
        const [a, b, c] = [1, 2, 3].map((n) => makeKey(n));
        for (const k of [a, b, c]) publish(producer, k!);
        let reads = 0;
        const chunks = [a!, a!];
        Object.defineProperty(chunks, 1, { get: () => (reads++ === 0 ? b : c) });
        const run = reader.tryPinPrefix(chunks);
        expect(reads).toBe(1);
        expectPinnedAsNamed(producer, reader, run, [a!, b!]);
        expect(producer.tryEvict(c!)).toBe('evicted'); // named by no lease, pinned by none
        expect(reader.unpinMany(run)).toBe(2);
      });

      it('a Proxy of keys: each index is read once, and the leases name what the traps answered', () => {
        const { producer, consumer: reader } = pair(h);
        const keys = [1, 2, 3, 4].map((n) => makeKey(n));
        for (const k of keys) publish(producer, k);
        const reads = new Map<PropertyKey, number>();
        // Index i answers keys[i] on its first read and keys[3] after.
        const chunks = new Proxy([keys[0]!, keys[1]!, keys[2]!], {
          get(target, property, receiver) {
            if (typeof property === 'string' && /^\d+$/.test(property)) {
              const seen = reads.get(property) ?? 0;
              reads.set(property, seen + 1);
              return seen === 0 ? Reflect.get(target, property, receiver) : keys[3];
            }
            return Reflect.get(target, property, receiver);
          },
        });
        const run = reader.tryPinPrefix(chunks);
        expect([...reads.values()]).toEqual([1, 1, 1]);
        expectPinnedAsNamed(producer, reader, run, keys.slice(0, 3));
        expect(producer.tryEvict(keys[3]!)).toBe('evicted');
        expect(reader.unpinMany(run)).toBe(3);
      });

      it('a getter that pins and unpins on the same table mid-read does not change what is pinned', () => {
        const { producer, consumer: reader } = pair(h);
        const [a, b, c] = [1, 2, 3].map((n) => makeKey(n));
        for (const k of [a, b, c]) publish(producer, k!);
        const chunks = [a!, a!];
        // Another prefix pin and its release run while the outer call reads index 1; both use the
        // table's reusable buffers, which the outer call must not have filled yet.
        Object.defineProperty(chunks, 1, { get: () => (reader.unpinMany(reader.tryPinPrefix([c!, c!])), b) });
        const run = reader.tryPinPrefix(chunks);
        expectPinnedAsNamed(producer, reader, run, [a!, b!]);
        expect(producer.tryEvict(c!)).toBe('evicted');
        expect(reader.unpinMany(run)).toBe(2);
      });

      it('a getter that closes the table mid-read: ERR_CLOSED, nothing pinned', () => {
        const { producer, consumer: reader } = pair(h);
        const key = makeKey(1);
        publish(producer, key);
        const chunks = [key, key];
        Object.defineProperty(chunks, 1, { get: () => (reader.close(), key) });
        expectCode(() => reader.tryPinPrefix(chunks), 'ERR_CLOSED');
        expect(producer.tryEvict(key)).toBe('evicted');
      });

      it('unpinMany detaches only what it releases, whatever a second read of the array answers', () => {
        const { producer, consumer: reader } = pair(h);
        const [a, b] = [1, 2].map((n) => makeKey(n));
        for (const k of [a, b]) publish(producer, k!);
        const [first] = reader.tryPinPrefix([a!]);
        const more = reader.tryPinPrefix([a!, b!, a!, b!]);
        // The validating read sees one lease; the releasing read sees five.
        let pass = 0;
        const leases = new Proxy([first!], {
          get(target, property, receiver) {
            if (property === Symbol.iterator) pass++;
            return pass > 1 && property === Symbol.iterator ? () => [first!, ...more][Symbol.iterator]() : Reflect.get(target, property, receiver);
          },
        });
        const released = reader.unpinMany(leases);
        expect(released).toBe(5);
        for (const lease of [first!, ...more]) {
          expect(lease.closed).toBe(true);
          expect(reader.clientPins(lease.slot)).toBe(0);
        }
        expect(reader.summary().pinnedSlots).toBe(0);
      });

      it('an iterator that calls unpinMany mid-release does not change which pins are released', () => {
        const { producer, consumer: reader } = pair(h);
        const [a, b, c] = [1, 2, 3].map((n) => makeKey(n));
        for (const k of [a, b, c]) publish(producer, k!);
        const outer = reader.tryPinPrefix([a!, b!]);
        const inner = reader.tryPinPrefix([c!]);
        let pass = 0;
        let innerReleased = -1;
        const leases = [...outer];
        // The releasing (second) pass releases `inner` between the two leases it yields.
        Object.defineProperty(leases, Symbol.iterator, {
          value: function* () {
            pass++;
            yield outer[0]!;
            if (pass === 2) innerReleased = reader.unpinMany(inner);
            yield outer[1]!;
          },
        });
        expect(reader.unpinMany(leases)).toBe(2);
        expect(innerReleased).toBe(1);
        for (const lease of [...outer, ...inner]) {
          expect(lease.closed).toBe(true);
          expect(reader.clientPins(lease.slot)).toBe(0);
        }
        expect(reader.summary().pinnedSlots).toBe(0);
      });

      it('an iterator that throws mid-release: the leases it closed have their pins released', () => {
        const { producer, consumer: reader } = pair(h);
        const [a, b] = [1, 2].map((n) => makeKey(n));
        for (const k of [a, b]) publish(producer, k!);
        const run = reader.tryPinPrefix([a!, b!]);
        let pass = 0;
        const leases = [...run];
        Object.defineProperty(leases, Symbol.iterator, {
          value: function* () {
            pass++;
            yield run[0]!;
            if (pass === 2) throw new Error('the caller’s iterator');
            yield run[1]!;
          },
        });
        expect(() => reader.unpinMany(leases)).toThrow('the caller’s iterator');
        expect(run[0]!.closed).toBe(true);
        expect(reader.clientPins(run[0]!.slot)).toBe(0);
        expect(producer.tryEvict(a!)).toBe('evicted');
        expect(run[1]!.closed).toBe(false);
        expect(reader.unpinMany([run[1]!])).toBe(1);
      });

      it('packed digests: a Proxy of a Uint8Array is refused, a Buffer is taken', () => {
        const { producer, consumer: reader } = pair(h);
        const [a, b] = [1, 2].map((n) => makeKey(n));
        for (const k of [a, b]) publish(producer, k!);
        const both = new Uint8Array(64);
        both.set(a!.digest, 0);
        both.set(b!.digest, 32);
        // Copying a Proxy would read its length and every byte through its traps a second time.
        expectCode(() => reader.tryPinPrefix(new Proxy(both, {})), 'ERR_INVALID_ARGUMENT');
        expect(reader.summary().pinnedSlots).toBe(0);
        const run = reader.tryPinPrefix(Buffer.from(both));
        expect(run.map((l) => l.digest)).toEqual([a!.hex, b!.hex]);
        expect(reader.unpinMany(run)).toBe(2);
      });

      it('a length over MAX_PREFIX_CHUNKS, or one that is not a length, is ERR_INVALID_ARGUMENT naming chunks.length', () => {
        const { producer, consumer: reader } = pair(h);
        const key = makeKey(1);
        publish(producer, key);
        const claiming = (length: unknown) => new Proxy([key], { get: (t, p, r) => (p === 'length' ? length : Reflect.get(t, p, r)) }) as ArtifactKey[];
        for (const length of [MAX_PREFIX_CHUNKS + 1, 2 ** 53, -1, 1.5, Number.NaN, '1']) {
          expect(expectCode(() => reader.tryPinPrefix(claiming(length)), 'ERR_INVALID_ARGUMENT').field).toBe('chunks.length');
        }
        expect(expectCode(() => reader.tryPinPrefix(new Uint8Array(32 * (MAX_PREFIX_CHUNKS + 1))), 'ERR_INVALID_ARGUMENT').field).toBe('chunks.length');
        expect(reader.summary().pinnedSlots).toBe(0);
        expect(reader.tryPinPrefix(claiming(1)).map((l) => l.key)).toEqual([key]);
      });

      // Each case in a fresh process: a table that sized its buffers from the length it was told
      // allocated (and kept) hundreds of MiB, or never returned; the child's own limit turns that
      // into a failed test instead of a hung suite. Memory, not time, is what is asserted.
      const bounds = (which: string) => {
        const child = spawnSync(process.execPath, ['--expose-gc', PREFIX_BOUNDS, impl, which], { encoding: 'utf8', timeout: 60_000 });
        expect(child.signal, child.stderr).toBeNull();
        expect(child.status, child.stderr).toBe(0);
        return JSON.parse(child.stdout) as { code: string | null; message: string | null; released: number | null; keptMiB: number; peakMiB: number };
      };

      it.each([
        ['sparse 2^20', 'ERR_INVALID_ARGUMENT'],
        ['sparse 2^28', 'ERR_INVALID_ARGUMENT'],
        ['sparse 2^32-1', 'ERR_INVALID_ARGUMENT'],
        ['hole at the maximum', 'ERR_INVALID_KEY'],
      ])('%s is refused with %s, under 32 MiB, leaving the table’s buffers as they were', (which, code) => {
        const result = bounds(which);
        expect(result.code, result.message ?? '').toBe(code);
        expect(result.peakMiB).toBeLessThan(32);
        expect(result.keptMiB).toBeLessThan(4);
      });

      it('unpinMany of 4 x MAX_PREFIX_CHUNKS leases releases them all through buffers that stay bounded', () => {
        const result = bounds('unpinMany of 4 runs');
        expect(result.message).toBeNull();
        expect(result.released).toBe(4 * MAX_PREFIX_CHUNKS);
        expect(result.keptMiB).toBeLessThan(32);
      });
    });
  });
}

// ---- native only: the addon's layout, files in /dev/shm --------------------------------

describe.skipIf(nativeAddon === null)('native only', () => {
  // Only the tests dereference it, and they are skipped when it is null.
  const addon = nativeAddon!;

  describe('native layout', () => {
    it('every LAYOUT constant equals the addon’s', () => {
      expect(addon.abiVersion).toBe(WP_ABI_VERSION);
      expect(Object.keys(LAYOUT).length).toBeGreaterThan(10);
      for (const [name, value] of Object.entries(LAYOUT)) {
        expect({ name, value: addon.layout[name] }).toEqual({ name, value });
      }
    });

    it('the addon’s status table is STATUS, name for name and number for number', () => {
      expect(addon.statuses).toEqual(Object.fromEntries(Object.entries(STATUS).map(([name, value]) => [`WP_${name}`, value])));
    });

    it('the addon refuses an exchange buffer shorter than EXCHANGE.WORDS, creating nothing', () => {
      const name = uniqueName('exchange');
      nativeNames.add(name);
      const [status, handle] = addon.open(name, true, 8, 0o600, new BigUint64Array(EXCHANGE.WORDS - 1));
      expect(status).toBe(STATUS.ERR_INVALID_ARGUMENT);
      expect(handle).toBeNull();
      expect(fs.existsSync(shmPath(name))).toBe(false);
    });

    it('the exchange buffer must be a BigUint64Array: other typed arrays of that length are refused', () => {
      for (const wrong of [new Uint8Array(EXCHANGE.WORDS), new BigInt64Array(EXCHANGE.WORDS), new Float64Array(EXCHANGE.WORDS)]) {
        const name = uniqueName('exchange-type');
        nativeNames.add(name);
        expect(addon.open(name, true, 8, 0o600, wrong as never)[0]).toBe(STATUS.ERR_INVALID_ARGUMENT);
        expect(fs.existsSync(shmPath(name))).toBe(false);
      }
    });

    it('a bound wake-path function kept after its handle was collected answers ERR_INVALID_ARGUMENT', () => {
      // In a child with --expose-gc (from dist/: run `npm run build` first): drop the handle's
      // External, collect it (its finalizer closes the table), then call the kept functions.
      const name = uniqueName('bound');
      nativeNames.add(name);
      const dist = new URL('../../dist/', import.meta.url).href;
      const script = `
        const { nativeAddon } = await import(${JSON.stringify(dist + 'lease-table/native.js')});
        const { EXCHANGE } = await import(${JSON.stringify(dist + 'lease-table/layout.js')});
        let [status, h, pinHost, pinDevice, unpin] = nativeAddon.open(${JSON.stringify(name)}, true, 8, 0o600, new BigUint64Array(EXCHANGE.WORDS));
        const before = pinHost();
        h = null;
        for (let i = 0; i < 10; i++) { globalThis.gc(); await new Promise((r) => setTimeout(r, 5)); }
        console.log(JSON.stringify({ status, before, after: [pinHost(), pinDevice()], unpin: unpin() ?? null }));`;
      const child = spawnSync(process.execPath, ['--expose-gc', '--input-type=module', '-e', script], { encoding: 'utf8', timeout: 30_000 });
      expect(child.status, child.stderr).toBe(0);
      expect(JSON.parse(child.stdout)).toEqual({
        status: STATUS.OK,
        before: STATUS.MISS_ABSENT,
        after: [STATUS.ERR_INVALID_ARGUMENT, STATUS.ERR_INVALID_ARGUMENT],
        unpin: null,
      });
    });

    it('a native table of capacity N is a /dev/shm file of segmentSize(N) bytes', () => {
      for (const capacity of [1, 7, 8, 9, 1000]) {
        const name = uniqueName('size');
        nativeNames.add(name);
        const table = track(openLeaseTable({ name, role: 'producer', implementation: 'native', create: { capacity } }));
        expect(table.inspect().segmentSize).toBe(BigInt(segmentSize(capacity)));
        expect(fs.statSync(shmPath(name)).size).toBe(segmentSize(capacity));
        const bytes = fs.readFileSync(shmPath(name));
        expect(bytes.readBigUInt64LE(HDR.MAGIC)).toBe(WP_MAGIC);
        expect(bytes.readUInt32LE(HDR.ABI_VERSION)).toBe(WP_ABI_VERSION);
        expect(bytes.readUInt32LE(HDR.CAPACITY)).toBe(capacity);
      }
    });

    it('a native table and the JS fallback write the same header bytes', () => {
      const name = uniqueName('hdr');
      nativeNames.add(name);
      const native = track(openLeaseTable({ name, role: 'consumer', implementation: 'native', create: { capacity: 12 } }));
      const js = track(openLeaseTable({ name: uniqueName('hdrjs'), role: 'consumer', implementation: 'js', create: { capacity: 12 } }));
      native.close();
      js.close();
      const a = fs.readFileSync(shmPath(name)).subarray(0, 256);
      const b = Buffer.from(new Uint8Array(js.sharedBuffer!, 0, 256));
      expect(a.equals(b)).toBe(true);
    });
  });

  describe('native and JS segments are interchangeable', () => {
    /** Publishes keys 1..40 (key 2 evicted and republished, a device record on key 1) and closes. */
    function fill(producer: LeaseTable): Map<string, { slot: number; generation: bigint }> {
      const placed = new Map<string, { slot: number; generation: bigint }>();
      for (let n = 1; n <= 40; n++) {
        const r = publish(producer, makeKey(n), { ...META, sizeBytes: n * 1000 });
        placed.set(makeKey(n).hex, { slot: r.slot, generation: r.generation });
      }
      expect(producer.tryEvict(makeKey(2))).toBe('evicted');
      const again = publish(producer, makeKey(2), { ...META, sizeBytes: 2000 });
      placed.set(makeKey(2).hex, { slot: again.slot, generation: again.generation });
      expect(producer.recordDeviceWrite(makeKey(1), { ...TARGET_A, writeSeq: 9 })).toBe('recorded');
      producer.close();
      return placed;
    }

    function expectSameTable(reader: LeaseTable, placed: Map<string, { slot: number; generation: bigint }>): void {
      for (let n = 1; n <= 40; n++) {
        const lease = asLease(reader.tryPin(makeKey(n)));
        expect({ n, slot: lease.slot, generation: BigInt(lease.generation) }).toEqual({ n, ...placed.get(makeKey(n).hex)! });
        expect(lease.meta).toEqual({ ...META_SEEN, sizeBytes: n * 1000 });
        lease.close();
      }
      expect(BigInt(asLease(reader.tryPin(makeKey(2))).generation)).toBe(1n);
      asLease(reader.tryPin(makeKey(1), device(TARGET_A))).close();
      expect(reader.tryPin(makeKey(3), device(TARGET_A))).toEqual({ kind: 'miss', reason: 'no-device-record' });
      expect(reader.tryPin(makeKey(41))).toEqual({ kind: 'miss', reason: 'absent' });
    }

    it('a segment the native core wrote reads the same through the JS fallback', () => {
      const name = uniqueName('n2j');
      nativeNames.add(name);
      const placed = fill(track(openLeaseTable({ name, role: 'producer', implementation: 'native', create: { capacity: 1000 } })));
      const bytes = fs.readFileSync(shmPath(name));
      const buffer = new SharedArrayBuffer(bytes.length);
      new Uint8Array(buffer).set(bytes);
      const js = track(openLeaseTable({ name: uniqueName('n2j-js'), role: 'consumer', implementation: 'js', buffer }));
      const native = track(openLeaseTable({ name, role: 'consumer', implementation: 'native' }));
      expect(js.inspect().slots).toEqual(native.inspect().slots);
      expectSameTable(js, placed);
      expectSameTable(native, placed);
      // The JS fallback can take over as producer of the native segment's copy.
      const jsProducer = track(openLeaseTable({ name: uniqueName('n2j-jsp'), role: 'producer', implementation: 'js', buffer }));
      expect(jsProducer.tryEvict(makeKey(7))).toBe('evicted');
      expectCode(() => jsProducer.reserve(makeKey(8)), 'ERR_KEY_EXISTS');
    });

    it('a segment the JS fallback wrote reads the same through the native core', () => {
      const source = track(openLeaseTable({ name: uniqueName('j2n-js'), role: 'producer', implementation: 'js', create: { capacity: 1000 } }));
      const placed = fill(source);
      const name = uniqueName('j2n');
      shmFiles.add(name);
      fs.writeFileSync(shmPath(name), new Uint8Array(source.sharedBuffer!), { mode: 0o600 });
      const native = track(openLeaseTable({ name, role: 'consumer', implementation: 'native' }));
      const js = track(openLeaseTable({ name: uniqueName('j2n-js2'), role: 'consumer', implementation: 'js', buffer: source.sharedBuffer! }));
      expect(native.inspect().slots).toEqual(js.inspect().slots);
      expectSameTable(native, placed);
      const nativeProducer = track(openLeaseTable({ name, role: 'producer', implementation: 'native' }));
      expect(nativeProducer.tryEvict(makeKey(7))).toBe('evicted');
      expectCode(() => nativeProducer.reserve(makeKey(8)), 'ERR_KEY_EXISTS');
    });
  });

  describe('native segments: corrupt files and permissions', () => {
    /** A valid, closed segment's bytes (no clients registered). */
    function validSegment(capacity = 8): Buffer {
      const name = uniqueName('src');
      nativeNames.add(name);
      const table = track(openLeaseTable({ name, role: 'producer', implementation: 'native', create: { capacity } }));
      table.close();
      return fs.readFileSync(shmPath(name));
    }

    /** Writes `bytes` as /dev/shm/<new name> and returns the name. */
    function writeSegment(bytes: Uint8Array): string {
      const name = uniqueName('bad');
      shmFiles.add(name);
      fs.writeFileSync(shmPath(name), bytes, { mode: 0o600 });
      return name;
    }

    function expectBadSegment(name: string): void {
      for (const role of ['consumer', 'producer'] as const) {
        expectCode(() => openTracked({ name, role, implementation: 'native' }), 'ERR_BAD_SEGMENT');
      }
    }

    it('an unmutated copy of a valid segment opens (the mutations below are what fail)', () => {
      const name = writeSegment(validSegment());
      const producer = track(openLeaseTable({ name, role: 'producer', implementation: 'native' }));
      expect(producer.capacity).toBe(8);
      const reader = track(openLeaseTable({ name, role: 'consumer', implementation: 'native' }));
      const key = makeKey(1);
      publish(producer, key);
      asLease(reader.tryPin(key)).close();
    });

    const mutations: Array<[string, (bytes: Buffer) => Buffer]> = [
      ['an empty file', () => Buffer.alloc(0)],
      ['100 bytes of zeros', () => Buffer.alloc(100)],
      ['a full-size file of zeros', (b) => Buffer.alloc(b.length)],
      ['a changed magic', (b) => (b.writeUInt8(b.readUInt8(0) ^ 0xff, 0), b)],
      ['ABI version 1 (the previous one)', (b) => (b.writeUInt32LE(1, HDR.ABI_VERSION), b)],
      ['ABI version 0', (b) => (b.writeUInt32LE(0, HDR.ABI_VERSION), b)],
      ['a larger capacity', (b) => (b.writeUInt32LE(16, HDR.CAPACITY), b)],
      ['a smaller capacity', (b) => (b.writeUInt32LE(4, HDR.CAPACITY), b)],
      ['capacity 0', (b) => (b.writeUInt32LE(0, HDR.CAPACITY), b)],
      ['capacity 2^24+1', (b) => (b.writeUInt32LE(MAX_CAPACITY + 1, HDR.CAPACITY), b)],
      ['a larger capacity and segment size than the file', (b) => {
        b.writeUInt32LE(1000, HDR.CAPACITY);
        b.writeBigUInt64LE(BigInt(segmentSize(1000)), HDR.SEGMENT_SIZE);
        return b;
      }],
      ['another probe window', (b) => (b.writeUInt32LE(4, HDR.PROBE_WINDOW), b)],
      ['another header size', (b) => (b.writeUInt32LE(128, HDR.HEADER_SIZE), b)],
      ['another slot size', (b) => (b.writeUInt32LE(64, HDR.SLOT_SIZE), b)],
      ['another segment size', (b) => (b.writeBigUInt64LE(b.readBigUInt64LE(HDR.SEGMENT_SIZE) + 128n, HDR.SEGMENT_SIZE), b)],
      ['another slots offset', (b) => (b.writeBigUInt64LE(0n, HDR.SLOTS_OFFSET), b)],
      ['truncated to half its size', (b) => b.subarray(0, b.length >> 1)],
      ['truncated by one byte', (b) => b.subarray(0, b.length - 1)],
      ['only the header', (b) => b.subarray(0, 256)],
      ['255 bytes of the header', (b) => b.subarray(0, 255)],
    ];

    it.each(mutations)('%s is ERR_BAD_SEGMENT', (_, mutate) => {
      const name = writeSegment(mutate(Buffer.from(validSegment())));
      expectBadSegment(name);
      // The file is left as it was (opening does not repair or remove it).
      expect(fs.existsSync(shmPath(name))).toBe(true);
    });

    it('a created table file has mode 0o600 by default and create.mode when given', () => {
      const plain = uniqueName('mode');
      nativeNames.add(plain);
      track(openLeaseTable({ name: plain, role: 'producer', implementation: 'native', create: { capacity: 8 } }));
      expect(fs.statSync(shmPath(plain)).mode & 0o777).toBe(0o600);
      const group = uniqueName('mode');
      nativeNames.add(group);
      track(openLeaseTable({ name: group, role: 'producer', implementation: 'native', create: { capacity: 8, mode: 0o660 }, trust: { groupWritable: true } }));
      expect(fs.statSync(shmPath(group)).mode & 0o777).toBe(0o660);
      const readable = uniqueName('mode');
      nativeNames.add(readable);
      track(openLeaseTable({ name: readable, role: 'producer', implementation: 'native', create: { capacity: 8, mode: 0o640 } }));
      expect(fs.statSync(shmPath(readable)).mode & 0o777).toBe(0o640);
    });

    it('unlinkLeaseTable removes the name; open handles keep working', () => {
      const name = uniqueName('unlink');
      nativeNames.add(name);
      const producer = track(openLeaseTable({ name, role: 'producer', implementation: 'native', create: { capacity: 8 } }));
      const reader = track(openLeaseTable({ name, role: 'consumer', implementation: 'native' }));
      expect(unlinkLeaseTable(name)).toBe(true);
      expect(fs.existsSync(shmPath(name))).toBe(false);
      expect(unlinkLeaseTable(name)).toBe(false);
      expectCode(() => openTracked({ name, role: 'consumer', implementation: 'native' }), 'ERR_TABLE_NOT_FOUND');
      publish(producer, makeKey(1));
      asLease(reader.tryPin(makeKey(1))).close();
      expectCode(() => unlinkLeaseTable('../x'), 'ERR_INVALID_ARGUMENT');
    });
  });
});

// ---- JS fallback only: corrupt SharedArrayBuffers -------------------------------------

describe('js fallback: corrupt buffers', () => {
  /** A copy of a valid, closed table's buffer (no clients registered). */
  function validBuffer(capacity = 8): SharedArrayBuffer {
    const table = track(openLeaseTable({ name: uniqueName('jssrc'), role: 'producer', implementation: 'js', create: { capacity } }));
    table.close();
    return copy(table.sharedBuffer!);
  }

  function copy(source: SharedArrayBuffer, length = source.byteLength): SharedArrayBuffer {
    const target = new SharedArrayBuffer(length);
    new Uint8Array(target).set(new Uint8Array(source, 0, Math.min(length, source.byteLength)));
    return target;
  }

  function mutate(buffer: SharedArrayBuffer, edit: (view: DataView) => void): SharedArrayBuffer {
    edit(new DataView(buffer));
    return buffer;
  }

  function openBuffer(buffer: SharedArrayBuffer, role: 'producer' | 'consumer' = 'consumer'): LeaseTable {
    return track(openLeaseTable({ name: uniqueName('jsbad'), role, implementation: 'js', buffer }));
  }

  it('an unmutated copy of a valid buffer opens (the mutations below are what fail)', () => {
    const buffer = validBuffer();
    const producer = openBuffer(buffer, 'producer');
    const reader = openBuffer(buffer);
    expect(producer.capacity).toBe(8);
    expect(reader.sharedBuffer).toBe(buffer);
    publish(producer, makeKey(1));
    asLease(reader.tryPin(makeKey(1))).close();
  });

  const cases: Array<[string, () => SharedArrayBuffer]> = [
    ['an empty buffer', () => new SharedArrayBuffer(0)],
    ['100 bytes of zeros', () => new SharedArrayBuffer(100)],
    ['a full-size buffer of zeros', () => new SharedArrayBuffer(segmentSize(8))],
    ['a changed magic', () => mutate(validBuffer(), (v) => v.setUint8(0, v.getUint8(0) ^ 0xff))],
    ['ABI version 1 (the previous one)', () => mutate(validBuffer(), (v) => v.setUint32(HDR.ABI_VERSION, 1, true))],
    ['a larger capacity', () => mutate(validBuffer(), (v) => v.setUint32(HDR.CAPACITY, 16, true))],
    ['a smaller capacity', () => mutate(validBuffer(), (v) => v.setUint32(HDR.CAPACITY, 4, true))],
    ['capacity 0', () => mutate(validBuffer(), (v) => v.setUint32(HDR.CAPACITY, 0, true))],
    ['another probe window', () => mutate(validBuffer(), (v) => v.setUint32(HDR.PROBE_WINDOW, 4, true))],
    ['another segment size', () => mutate(validBuffer(), (v) => v.setBigUint64(HDR.SEGMENT_SIZE, v.getBigUint64(HDR.SEGMENT_SIZE, true) + 128n, true))],
    ['truncated to half its size', () => { const b = validBuffer(); return copy(b, b.byteLength >> 1); }],
    ['truncated by 8 bytes', () => { const b = validBuffer(); return copy(b, b.byteLength - 8); }],
    ['only the header', () => copy(validBuffer(), 256)],
  ];

  it.each(cases)('%s is ERR_BAD_SEGMENT', (_, make) => {
    const buffer = make();
    expectCode(() => openBuffer(buffer, 'consumer'), 'ERR_BAD_SEGMENT');
    expectCode(() => openBuffer(buffer, 'producer'), 'ERR_BAD_SEGMENT');
  });

  it('a buffer that is not a SharedArrayBuffer is ERR_INVALID_ARGUMENT', () => {
    const error = expectCode(
      () => openLeaseTable({ name: uniqueName(), role: 'consumer', implementation: 'js', buffer: new ArrayBuffer(segmentSize(8)) as unknown as SharedArrayBuffer }),
      'ERR_INVALID_ARGUMENT',
    );
    expect(error.field).toBe('options.buffer');
  });
});

describe('miss reasons', () => {
  it('the table’s are named after its MISS_ statuses', () => {
    expect(TABLE_MISS_REASON).toEqual({
      [STATUS.MISS_ABSENT]: 'absent',
      [STATUS.MISS_PREPARING]: 'preparing',
      [STATUS.MISS_EVICTING]: 'evicting',
      [STATUS.MISS_CONTENDED]: 'contended',
      [STATUS.MISS_NO_DEVICE_RECORD]: 'no-device-record',
      [STATUS.MISS_DEVICE_MISMATCH]: 'device-mismatch',
      [STATUS.MISS_ARENA_GENERATION_MISMATCH]: 'arena-generation-mismatch',
      [STATUS.MISS_DEVICE_WRITE_INCOMPLETE]: 'device-write-incomplete',
      [STATUS.MISS_STALE_HANDOFF]: 'stale-handoff',
    });
  });

  it('every reason has one shared frozen miss, and the wake path’s array reads each miss status’s own', () => {
    expect(new Set(MISS_REASONS).size).toBe(MISS_REASONS.length);
    for (const reason of MISS_REASONS) {
      expect(MISS[reason]).toEqual({ kind: 'miss', reason });
      expect(Object.isFrozen(MISS[reason])).toBe(true);
    }
    for (const [status, reason] of Object.entries(TABLE_MISS_REASON)) expect(MISS_BY_STATUS[Number(status)]).toBe(MISS[reason]);
    expect(MISS_BY_STATUS[STATUS.OK]).toBe(MISS.contended);
    expect(MISS_BY_STATUS.length).toBe(STATUS.MISS_STALE_HANDOFF + 1);
  });
});
