// The lease table at the edges of its input, on both implementations:
// a device target changed after it was pinned with, bad tryPin arguments, forged keys, and the
// ways a caller could try to release a pin that is not its own.
import { afterEach, describe, expect, it } from 'vitest';
import {
  ArtifactKey,
  WaitprepError,
  isArtifactKey,
  openLeaseTable,
  unlinkLeaseTable,
  type Lease,
  type LeaseTable,
  type Miss,
  type WaitprepErrorCode,
} from '../../lib/index.js';
import { TARGET_A, makeKey } from '../helpers.js';
import { NATIVE, runsIf } from '../skip-reasons.js';

type Impl = 'native' | 'js';

const META = { sizeBytes: 64, location: 1, checksum: 2, codecId: 3, representationVersion: 1 };

let counter = 0;
const opened: LeaseTable[] = [];

afterEach(() => {
  for (const table of opened.splice(0)) {
    table.close();
    if (table.implementation === 'native' && table.role === 'producer') unlinkLeaseTable(table.name);
  }
});

/** A producer and a consumer of one fresh table of `impl`, `key` published. */
function publishedPair(impl: Impl, key: ArtifactKey): { producer: LeaseTable; reader: LeaseTable } {
  const name = `wp-edges-${process.pid}-${++counter}`;
  const producer = openLeaseTable({ name, role: 'producer', implementation: impl, create: { capacity: 16 } });
  opened.push(producer);
  const reader = openLeaseTable({ name, role: 'consumer', implementation: impl, ...(impl === 'js' ? { buffer: producer.sharedBuffer! } : {}) });
  opened.push(reader);
  producer.publish(producer.reserve(key), META);
  return { producer, reader };
}

function codeOf(fn: () => unknown): WaitprepErrorCode | string {
  try {
    fn();
  } catch (error) {
    return error instanceof WaitprepError ? error.code : `not a WaitprepError: ${String(error)}`;
  }
  return 'no error';
}

function asLease(result: Lease | Miss): Lease {
  if (result.kind !== 'lease') throw new Error(`expected a lease, got the miss ${result.reason}`);
  return result;
}

const edges = (impl: Impl) => () => {
  describe('a device target changed after use', () => {
    it('follows the current arenaGeneration of a target object the caller mutates', () => {
      const key = makeKey(1);
      const { producer, reader } = publishedPair(impl, key);
      expect(producer.recordDeviceWrite(key, { ...TARGET_A, writeSeq: 1 })).toBe('recorded');
      const target = { device: TARGET_A.device, arena: TARGET_A.arena, arenaGeneration: TARGET_A.arenaGeneration };
      const want = { readiness: 'device', target } as const;
      asLease(reader.tryPin(key, want)).close();
      (target as { arenaGeneration: number }).arenaGeneration = Number(TARGET_A.arenaGeneration) + 1;
      expect(reader.tryPin(key, want)).toEqual({ kind: 'miss', reason: 'arena-generation-mismatch' });
      (target as { arena: number }).arena = Number(TARGET_A.arena) + 1;
      expect(reader.tryPin(key, want)).toMatchObject({ kind: 'miss' });
      Object.assign(target, { arena: TARGET_A.arena, arenaGeneration: BigInt(TARGET_A.arenaGeneration) });
      asLease(reader.tryPin(key, want)).close();
      (target as { device: string }).device = 'GPU-00000000-0000-0000-0000-000000000001';
      expect(reader.tryPin(key, want)).toEqual({ kind: 'miss', reason: 'device-mismatch' });
      (target as { device: string }).device = 'not a uuid';
      expect(reader.tryPin(key, want)).toEqual({ kind: 'miss', reason: 'invalid-target' });
      (target as { device: string }).device = TARGET_A.device.toUpperCase();
      asLease(reader.tryPin(key, want)).close();
    });

    it('reads a getter each time, and a frozen target keeps its one record', () => {
      const key = makeKey(2);
      const { producer, reader } = publishedPair(impl, key);
      producer.recordDeviceWrite(key, { ...TARGET_A, writeSeq: 1 });
      let generation = Number(TARGET_A.arenaGeneration);
      const live = Object.freeze({
        device: TARGET_A.device,
        arena: TARGET_A.arena,
        get arenaGeneration() {
          return generation;
        },
      });
      asLease(reader.tryPin(key, { readiness: 'device', target: live })).close();
      generation++;
      expect(reader.tryPin(key, { readiness: 'device', target: live })).toEqual({ kind: 'miss', reason: 'arena-generation-mismatch' });
      const frozen = Object.freeze({ ...TARGET_A });
      for (let i = 0; i < 3; i++) asLease(reader.tryPin(key, { readiness: 'device', target: frozen })).close();
      const other = Object.freeze({ ...TARGET_A, arenaGeneration: generation });
      expect(reader.tryPin(key, { readiness: 'device', target: other })).toEqual({ kind: 'miss', reason: 'arena-generation-mismatch' });
    });

    it("reads the target's fields from its own properties only", () => {
      const key = makeKey(3);
      const { producer, reader } = publishedPair(impl, key);
      producer.recordDeviceWrite(key, { ...TARGET_A, writeSeq: 1 });
      const inherited = Object.create({ ...TARGET_A }) as typeof TARGET_A;
      expect(reader.tryPin(key, { readiness: 'device', target: inherited })).toEqual({ kind: 'miss', reason: 'invalid-target' });
      const partly = Object.assign(Object.create({ arenaGeneration: TARGET_A.arenaGeneration }), { device: TARGET_A.device, arena: TARGET_A.arena });
      expect(reader.tryPin(key, { readiness: 'device', target: partly })).toEqual({ kind: 'miss', reason: 'invalid-target' });
    });
  });

  describe('table.tryPin with bad arguments', () => {
    it('refuses a non-key and a forged key with ERR_INVALID_KEY', () => {
      const key = makeKey(4);
      const { reader } = publishedPair(impl, key);
      for (const bad of [undefined, null, 7, 'key', {}, key.toFields(), Object.create(ArtifactKey.prototype)]) {
        expect(codeOf(() => reader.tryPin(bad as ArtifactKey))).toBe('ERR_INVALID_KEY');
      }
      asLease(reader.tryPin(key)).close();
    });

    it('refuses a want that is null, not an object, or of an unknown readiness with ERR_INVALID_ARGUMENT', () => {
      const key = makeKey(5);
      const { reader } = publishedPair(impl, key);
      for (const want of [null, 'host', 1, {}, { readiness: 'persisted' }, { readiness: 'HOST' }, { readiness: undefined }, { target: TARGET_A }]) {
        expect(codeOf(() => reader.tryPin(key, want as never))).toBe('ERR_INVALID_ARGUMENT');
      }
      asLease(reader.tryPin(key, { readiness: 'host' })).close();
    });

    it('refuses a malformed consumer with ERR_INVALID_ARGUMENT, and names a good one on the lease', () => {
      const key = makeKey(6);
      const { reader } = publishedPair(impl, key);
      const bad = [null, 'c', {}, { engine: '', request: 'r', generation: 0 }, { engine: 'e', request: 7, generation: 0 }, { engine: 'e', request: 'r', generation: -1 }, { engine: 'e', request: 'r', generation: 0.5 }, { engine: 'e', request: 'r', generation: 2 ** 53 }];
      for (const consumer of bad) expect(codeOf(() => reader.tryPin(key, { readiness: 'host' }, consumer as never))).toBe('ERR_INVALID_ARGUMENT');
      const holder = { engine: 'e', request: 'r', generation: 3 };
      const lease = asLease(reader.tryPin(key, { readiness: 'host' }, holder));
      expect(lease.consumer).toBe(holder);
      expect(lease.readiness).toBe('host');
      lease.close();
    });

    it('still checks its arguments on a closed table, then misses with table-closed', () => {
      const key = makeKey(7);
      const { reader } = publishedPair(impl, key);
      reader.close();
      expect(codeOf(() => reader.tryPin({} as ArtifactKey))).toBe('ERR_INVALID_KEY');
      expect(reader.tryPin(key)).toEqual({ kind: 'miss', reason: 'table-closed' });
    });
  });

  describe('forged leases', () => {
    it('has no public way to release a pin by slot and token, so a guessed token cannot free a held slot', () => {
      const key = makeKey(8);
      const { producer, reader } = publishedPair(impl, key);
      const lease = asLease(reader.tryPin(key));
      expect('release' in reader).toBe(false);
      // What a caller could try: the table's methods with guessed tokens, and the lease's own close on another object.
      const release = (reader as unknown as { release?: (...args: number[]) => void }).release;
      if (typeof release === 'function') for (let i = 0; i < 4; i++) for (let g = 0; g < 4; g++) release.call(reader, lease.slot, i, g);
      const close = Object.getPrototypeOf(lease).close as () => void;
      expect(() => close.call({ slot: lease.slot })).toThrow(TypeError);
      expect(producer.tryEvict(key)).toBe('pinned');
      expect(reader.clientPins(lease.slot)).toBe(1);
      lease.close();
      expect(producer.tryEvict(key)).toBe('evicted');
    });

    it('releases the slot it pinned even when a caller assigns lease.slot', () => {
      const key = makeKey(9);
      const { producer, reader } = publishedPair(impl, key);
      const lease = asLease(reader.tryPin(key));
      const slot = lease.slot;
      try {
        (lease as { slot: number }).slot = slot + 1;
      } catch {
        // a getter without a setter: assignment throws in strict mode, which is fine
      }
      expect(lease.slot).toBe(slot);
      lease.close();
      expect(reader.clientPins(slot)).toBe(0);
      expect(producer.tryEvict(key)).toBe('evicted');
    });
  });
};

describe.runIf(runsIf('lease table edges: native', NATIVE))('lease table edges: native', edges('native'));
describe('lease table edges: js', edges('js'));

describe('forged keys', () => {
  it('an object with ArtifactKey.prototype is not a key, nor equal to one', () => {
    const key = makeKey(10);
    const forged = Object.create(ArtifactKey.prototype) as ArtifactKey;
    Object.defineProperty(forged, 'hex', { value: key.hex });
    expect(isArtifactKey(forged)).toBe(false);
    expect(isArtifactKey(key)).toBe(true);
    expect(key.equals(forged)).toBe(false);
    expect(forged instanceof ArtifactKey).toBe(true);
    const renamed = Object.setPrototypeOf({ hex: key.hex }, ArtifactKey.prototype) as ArtifactKey;
    expect(isArtifactKey(renamed)).toBe(false);
  });
});
