/**
 * Differential test: the native lease table (the C core through the addon) and the JavaScript
 * fallback must answer every call alike, in the spirit of bufferutil's "bindings match fallback".
 *
 * Random command sequences (fast-check) run against one native table and one fallback table,
 * opened side by side, each with a producer and a consumer handle. Nothing models what the
 * answers should be: the two implementations are each other's oracle. After every command the
 * test compares the outcome (each status, miss reason, thrown error's code and message, lease
 * and reservation fields), both handles' summary(), inspect() and private pin counts, and the
 * two segments byte for byte; the run ends by closing everything and comparing what a fresh
 * client then sees.
 *
 * Small capacities and keys crowded onto one or two home slots make full probe windows, windows
 * that wrap past the last slot, and slot reuse at later generations common.
 *
 * What may legitimately differ, and so is not compared: the THREAD word of a client entry (only
 * the fallback writes it, layout.ts CLIENT_FIELD) and lease tokens (private to each client). The
 * fallback's other documented difference (docs/lease-table.md, "the bit first, then one read":
 * no `contended` from a lost race, a brief stray pin bit on a `preparing` miss) needs a second
 * thread racing the first; these sequences are single-threaded, so both answer alike there too.
 *
 * Reproducing a failure: the test prints its seed; fast-check prints seed, path and the shrunk
 * command list. `WAITPREP_DIFF_SEED=<seed> WAITPREP_DIFF_PATH=<path> npx vitest run
 * test/lease-table-differential.test.ts` replays it.
 */
import * as fs from 'node:fs';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  implementation,
  implementationReason,
  openLeaseTable,
  unlinkLeaseTable,
  type ArtifactKey,
  type ArtifactMeta,
  type DeviceTarget,
  type Lease,
  type LeaseTable,
  type Miss,
  type Reservation,
  type TableInspection,
} from '../lib/index.js';
import { CLIENT_FIELD, CLIENT_SIZE, CLIENTS_OFFSET, HEADER_SIZE, MAX_CLIENTS, SLOT, SLOT_SIZE, SLOTS_OFFSET } from '../lib/lease-table/layout.js';
import { homeSlotFor } from '../lib/testing.js';
import { TARGET_A, makeKey } from './helpers.js';

type Impl = 'native' | 'js';
type Who = 'producer' | 'consumer';

// ---- fixtures ----------------------------------------------------------------------------

const NUM_RUNS = 200;
const MAX_COMMANDS = 80;
const KEYS_PER_RUN = 10;
const CAPACITIES = [1, 2, 3, 5, 8, 9, 16, 33] as const;

const METAS: readonly ArtifactMeta[] = [
  { sizeBytes: 4096, location: 1, checksum: 2, codecId: 3, representationVersion: 1 },
  // Above 2^53 a lease reports bigints; 2^64-1 and 2^32-1 are the largest each field takes.
  { sizeBytes: (1n << 60n) + 5n, location: (1n << 64n) - 1n, checksum: 2 ** 53 - 1, codecId: 0xffff_ffff, representationVersion: 0xffff_ffff },
  { sizeBytes: 0, location: 0n, checksum: 0, codecId: 0, representationVersion: 0 },
];

/**
 * Device targets for pins and records: TARGET_A, two later arena generations, another arena,
 * another GPU, and TARGET_A spelled differently (upper-case UUID, bigint fields).
 */
const TARGETS: readonly DeviceTarget[] = [
  TARGET_A,
  { ...TARGET_A, arenaGeneration: 8 },
  { ...TARGET_A, arenaGeneration: 9 },
  { ...TARGET_A, arena: 4 },
  { ...TARGET_A, device: 'GPU-00000000-1111-4222-8333-444444444444' },
  { device: 'GPU-' + TARGET_A.device.slice(4).toUpperCase(), arena: 3n, arenaGeneration: 7n },
];
/** A pin target that is not a device target at all: a miss before either implementation is asked. */
const INVALID_TARGET = -1;

/**
 * Slots of forged reservations, by name (the capacity is known only at run time). A Reservation
 * is a plain object a caller can build by hand: whatever it holds, both implementations must
 * answer alike (`half` and `wrapped` name a real slot once truncated to a u32).
 */
const FORGED_SLOTS = ['home', 'last', 'capacity', 'minus-one', 'half', 'wrapped'] as const;
type ForgedSlot = (typeof FORGED_SLOTS)[number];

/** Keys made once: the pool each run's keys are drawn from by home slot. */
const POOL: ArtifactKey[] = Array.from({ length: 1500 }, (_, n) => makeKey(1000 + n));

function homeOf(key: ArtifactKey, capacity: number): number {
  return homeSlotFor(Buffer.from(key.digest).readUInt32LE(0), capacity);
}

/**
 * The run's keys for `capacity`: up to 9 slots, any ten keys crowd the table; above that, seven keys
 * whose home is the last slot (their window wraps to slot 0) and three homed four slots before
 * it (the two windows overlap), so windows fill either way.
 */
const keySets = new Map<number, ArtifactKey[]>();
function keysFor(capacity: number): ArtifactKey[] {
  let keys = keySets.get(capacity);
  if (keys !== undefined) return keys;
  if (capacity <= 9) {
    keys = POOL.slice(0, KEYS_PER_RUN);
  } else {
    const last = POOL.filter((k) => homeOf(k, capacity) === capacity - 1).slice(0, 7);
    const before = POOL.filter((k) => homeOf(k, capacity) === capacity - 5).slice(0, KEYS_PER_RUN - last.length);
    keys = [...last, ...before];
    if (keys.length !== KEYS_PER_RUN) throw new Error(`the key pool is too small for capacity ${capacity}`);
  }
  keySets.set(capacity, keys);
  return keys;
}

// ---- commands (plain data, so that fast-check prints a shrunk sequence readably) ---------------

type Command =
  | { op: 'reserve'; who: Who; key: number }
  | { op: 'prepare'; key: number; meta: number }
  | { op: 'publish'; who: Who; reservation: number; meta: number }
  | { op: 'abandon'; who: Who; reservation: number }
  | { op: 'forged'; action: 'publish' | 'abandon'; slot: ForgedSlot; generation: bigint }
  | { op: 'pin'; who: Who; key: number; target: number | null }
  | { op: 'close-lease'; lease: number }
  | { op: 'evict'; who: Who; key: number }
  | { op: 'record'; who: Who; key: number; target: number; writeSeq: number | bigint }
  | { op: 'reap'; who: Who }
  | { op: 'restart'; who: Who }
  | { op: 'second-producer' }
  | { op: 'visit'; key: number };

const who = fc.constantFrom<Who>('producer', 'producer', 'producer', 'consumer');
const pinner = fc.constantFrom<Who>('producer', 'consumer', 'consumer');
/** Keys 0-3 are hot (so that pins hit and evictions meet pins); all ten together fill windows. */
const key = fc.oneof({ weight: 4, arbitrary: fc.integer({ min: 0, max: 3 }) }, { weight: 1, arbitrary: fc.integer({ min: 0, max: KEYS_PER_RUN - 1 }) });
/** Counted from the newest: 0 is the latest reservation or lease, so fresh ones come up often. */
const recent = fc.oneof({ weight: 2, arbitrary: fc.constant(0) }, { weight: 3, arbitrary: fc.integer({ min: 0, max: 7 }) });
const meta = fc.integer({ min: 0, max: METAS.length - 1 });

const commandArb: fc.Arbitrary<Command> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ op: fc.constant('reserve' as const), who, key }) },
  { weight: 4, arbitrary: fc.record({ op: fc.constant('prepare' as const), key, meta }) },
  { weight: 5, arbitrary: fc.record({ op: fc.constant('publish' as const), who, reservation: recent, meta }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('abandon' as const), who, reservation: recent }) },
  {
    weight: 1,
    arbitrary: fc.record({
      op: fc.constant('forged' as const),
      action: fc.constantFrom('publish' as const, 'abandon' as const),
      slot: fc.constantFrom(...FORGED_SLOTS),
      generation: fc.constantFrom(0n, 1n, 2n, -1n, 1n << 56n, 1n << 64n),
    }),
  },
  {
    weight: 8,
    arbitrary: fc.record({
      op: fc.constant('pin' as const),
      who: pinner,
      key,
      target: fc.oneof({ weight: 2, arbitrary: fc.constant(null) }, { weight: 4, arbitrary: fc.integer({ min: 0, max: TARGETS.length - 1 }) }, { weight: 1, arbitrary: fc.constant(INVALID_TARGET) }),
    }),
  },
  { weight: 4, arbitrary: fc.record({ op: fc.constant('close-lease' as const), lease: recent }) },
  { weight: 3, arbitrary: fc.record({ op: fc.constant('evict' as const), who, key }) },
  {
    weight: 4,
    arbitrary: fc.record({
      op: fc.constant('record' as const),
      who,
      key,
      target: fc.integer({ min: 0, max: TARGETS.length - 1 }),
      writeSeq: fc.oneof(fc.nat(5), fc.constant((1n << 64n) - 1n)),
    }),
  },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('reap' as const), who }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('restart' as const), who: fc.constantFrom<Who>('producer', 'consumer') }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('second-producer' as const) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('visit' as const), key }) },
);

// ---- one side: a table of one implementation and what its handles gave out ---------------------

let counter = 0;

class Side {
  readonly name: string;
  producer: LeaseTable;
  consumer: LeaseTable;
  /** Every reservation and lease given out, newest last; used ones stay (to be used again). */
  readonly reservations: Reservation[] = [];
  readonly leases: Lease[] = [];
  /** The fallback's buffer, which the other handles open (a SharedArrayBuffer has no global name). */
  readonly buffer: SharedArrayBuffer | undefined;

  constructor(
    readonly impl: Impl,
    readonly capacity: number,
    tag: number,
  ) {
    // One name for both: /dev/shm and the fallback's per-thread registry are separate namespaces,
    // and error messages name the table.
    this.name = `wp-diff-${process.pid}-${tag}`;
    this.producer = openLeaseTable({ name: this.name, role: 'producer', implementation: impl, create: { capacity } });
    this.buffer = this.producer.sharedBuffer ?? undefined;
    this.consumer = this.open('consumer');
  }

  open(role: Who): LeaseTable {
    return openLeaseTable({ name: this.name, role, implementation: this.impl, ...(this.buffer ? { buffer: this.buffer } : {}) });
  }

  table(role: Who): LeaseTable {
    return role === 'producer' ? this.producer : this.consumer;
  }

  dispose(): void {
    this.producer.close();
    this.consumer.close();
    if (this.impl === 'native') unlinkLeaseTable(this.name);
  }
}

// ---- outcomes as plain values --------------------------------------------------------------

function errorShape(error: unknown): Record<string, unknown> {
  if (!(error instanceof Error)) return { thrown: String(error) };
  const { code, field } = error as Error & { code?: unknown; field?: unknown };
  return { name: error.name, code, field, message: error.message };
}

function leaseShape(lease: Lease): Record<string, unknown> {
  return { kind: lease.kind, slot: lease.slot, generation: lease.generation, readiness: lease.readiness, meta: lease.meta, closed: lease.closed };
}

function resultShape(result: Lease | Miss): Record<string, unknown> {
  return result.kind === 'lease' ? leaseShape(result) : { kind: 'miss', reason: result.reason };
}

/** From the end of `list`: `index` 0 is the newest. */
function nth<T>(list: readonly T[], index: number): T | undefined {
  return list.length === 0 ? undefined : list[list.length - 1 - (index % list.length)];
}

function forgedSlot(slot: ForgedSlot, capacity: number, home: number): number {
  switch (slot) {
    case 'home':
      return home;
    case 'last':
      return capacity - 1;
    case 'capacity':
      return capacity;
    case 'minus-one':
      return -1;
    case 'half':
      return home + 0.5;
    case 'wrapped':
      return 2 ** 32 + home;
  }
}

/**
 * Runs `command` on one side; returns what a caller observed, with a short label for the
 * coverage tally. Every call goes through the public LeaseTable surface.
 */
function apply(side: Side, command: Command, keys: readonly ArtifactKey[]): { outcome: unknown; label: string } {
  const attempt = <T>(label: string, fn: () => T, detail?: (value: T) => string): { outcome: unknown; label: string } => {
    try {
      const value = fn();
      return { outcome: { value }, label: detail === undefined ? label : `${label}:${detail(value)}` };
    } catch (error) {
      const shape = errorShape(error);
      return { outcome: { threw: shape }, label: `${label}:${String(shape.code ?? shape.name)}` };
    }
  };
  switch (command.op) {
    case 'reserve':
      return attempt('reserve', () => {
        const reservation = side.table(command.who).reserve(keys[command.key]!);
        side.reservations.push(reservation);
        return { slot: reservation.slot, generation: reservation.generation, key: reservation.key.toString() };
      });
    case 'prepare':
      // reserve then publish, the producer's common path, in one command.
      return attempt('prepare', () => {
        const reservation = side.producer.reserve(keys[command.key]!);
        side.reservations.push(reservation);
        side.producer.publish(reservation, METAS[command.meta]!);
        return { slot: reservation.slot, generation: reservation.generation };
      });
    case 'publish':
    case 'abandon': {
      const reservation = nth(side.reservations, command.reservation);
      if (reservation === undefined) return { outcome: 'no reservation yet', label: 'skip' };
      const table = side.table(command.who);
      return attempt(command.op, () =>
        command.op === 'publish' ? table.publish(reservation, METAS[command.meta]!) : table.abandon(reservation),
      );
    }
    case 'forged': {
      const forged: Reservation = {
        key: keys[0]!,
        slot: forgedSlot(command.slot, side.capacity, homeOf(keys[0]!, side.capacity)),
        generation: command.generation,
      };
      return attempt(`forged-${command.action}`, () =>
        command.action === 'publish' ? side.producer.publish(forged, METAS[0]!) : side.producer.abandon(forged),
      );
    }
    case 'pin': {
      const want =
        command.target === null
          ? ({ readiness: 'host' } as const)
          : ({ readiness: 'device', target: command.target === INVALID_TARGET ? ({ device: 'not-a-gpu', arena: 0, arenaGeneration: 0 } as DeviceTarget) : TARGETS[command.target]! } as const);
      return attempt(
        'pin',
        () => {
          const result = side.table(command.who).tryPin(keys[command.key]!, want);
          if (result.kind === 'lease') side.leases.push(result);
          return resultShape(result);
        },
        (shape) => (shape.kind === 'miss' ? String(shape.reason) : shape.generation === 0 ? 'lease' : 'lease-reused-slot'),
      );
    }
    case 'close-lease': {
      const lease = nth(side.leases, command.lease);
      if (lease === undefined) return { outcome: 'no lease yet', label: 'skip' };
      const wasClosed = lease.closed;
      return attempt(wasClosed ? 'close-again' : 'close', () => {
        lease.close();
        return { wasClosed, closed: lease.closed };
      });
    }
    case 'evict':
      return attempt('evict', () => side.table(command.who).tryEvict(keys[command.key]!), String);
    case 'record':
      return attempt('record', () =>
        side.table(command.who).recordDeviceWrite(keys[command.key]!, { ...TARGETS[command.target]!, writeSeq: command.writeSeq }), String);
    case 'reap':
      return attempt('reap', () => side.table(command.who).reapDeadClients());
    case 'restart':
      // Close and reopen: closing releases the handle's pins (its leases then release nothing)
      // and, for the producer, abandons what it still had reserved.
      return attempt(`restart-${command.who}`, () => {
        side.table(command.who).close();
        const table = side.open(command.who);
        if (command.who === 'producer') side.producer = table;
        else side.consumer = table;
        return { clientIndex: table.clientIndex, role: table.role };
      });
    case 'second-producer':
      return attempt('second-producer', () => {
        const table = side.open('producer');
        table.close();
        return 'opened';
      });
    case 'visit':
      // A third client pins once and closes: its close alone must release the pin.
      return attempt('visit', () => {
        const visitor = side.open('consumer');
        try {
          return { clientIndex: visitor.clientIndex, pin: resultShape(visitor.tryPin(keys[command.key]!)) };
        } finally {
          visitor.close();
        }
      });
  }
}

// ---- state comparison --------------------------------------------------------------------

/** inspect() without the one field only the fallback writes (the client's thread id). */
function comparableInspection(view: TableInspection): unknown {
  return { ...view, clients: view.clients.map(({ thread: _thread, ...client }) => client) };
}

function pinCounts(table: LeaseTable): number[] {
  return Array.from({ length: table.capacity }, (_, slot) => table.clientPins(slot));
}

/** Names the field at a segment offset, for a readable byte-diff message. */
function fieldAt(offset: number): string {
  if (offset < HEADER_SIZE) return `header byte ${offset}`;
  if (offset < SLOTS_OFFSET) {
    const client = Math.floor((offset - CLIENTS_OFFSET) / CLIENT_SIZE);
    return `client ${client} byte ${(offset - CLIENTS_OFFSET) % CLIENT_SIZE}`;
  }
  const slot = Math.floor((offset - SLOTS_OFFSET) / SLOT_SIZE);
  const within = (offset - SLOTS_OFFSET) % SLOT_SIZE;
  const field = Object.entries(SLOT)
    .filter(([, at]) => at <= within)
    .sort((a, b) => b[1] - a[1])[0]![0];
  return `slot ${slot} byte ${within} (${field})`;
}

/** The first byte at which the two segments differ, skipping each client's THREAD word; null when none. */
function segmentDifference(native: Uint8Array, js: Uint8Array): string | null {
  if (native.length !== js.length) return `segment sizes differ: native ${native.length}, js ${js.length}`;
  const skip = new Set<number>();
  for (let c = 0; c < MAX_CLIENTS; c++) for (let b = 0; b < 4; b++) skip.add(CLIENTS_OFFSET + c * CLIENT_SIZE + CLIENT_FIELD.THREAD + b);
  for (let i = 0; i < native.length; i++) {
    if (native[i] !== js[i] && !skip.has(i)) return `${fieldAt(i)}: native 0x${native[i]!.toString(16)}, js 0x${js[i]!.toString(16)}`;
  }
  return null;
}

/** A copy of the side's segment: the /dev/shm file the native table maps, or the fallback's buffer. */
function segmentOf(side: Side): Uint8Array {
  return side.impl === 'native' ? new Uint8Array(fs.readFileSync(`/dev/shm/${side.name}`)) : new Uint8Array(side.buffer!.slice(0));
}

function expectSameState(native: Side, js: Side, where: string): void {
  for (const role of ['producer', 'consumer'] as const) {
    const n = native.table(role);
    const j = js.table(role);
    expect(j.clientIndex, `${where}: ${role} client index`).toBe(n.clientIndex);
    expect(j.summary(), `${where}: ${role} summary()`).toEqual(n.summary());
    expect(pinCounts(j), `${where}: ${role} clientPins`).toEqual(pinCounts(n));
  }
  expect(comparableInspection(js.consumer.inspect()), `${where}: inspect()`).toEqual(comparableInspection(native.consumer.inspect()));
  expect(segmentDifference(segmentOf(native), segmentOf(js)), `${where}: segment bytes`).toBeNull();
}

// ---- the property ------------------------------------------------------------------------

const seedFromEnv = process.env.WAITPREP_DIFF_SEED;
const SEED = seedFromEnv !== undefined ? Number(seedFromEnv) : (Date.now() ^ Math.floor(Math.random() * 0x1_0000_0000)) | 0;
const PATH = process.env.WAITPREP_DIFF_PATH;

describe('lease table: native and the JavaScript fallback agree', () => {
  if (implementation !== 'native') {
    // Counted as skipped, with the reason in its name (and printed once).
    console.warn(`lease-table differential test skipped: the native implementation is not in use (${implementationReason})`);
    it.skip(`needs the native implementation, which is not in use: ${implementationReason}`, () => {});
    return;
  }

  it('on random command sequences: every outcome, summary, inspection, pin count and segment byte', () => {
    console.log(`lease-table differential: seed ${SEED}${PATH ? `, path ${PATH}` : ''} (replay with WAITPREP_DIFF_SEED=${SEED})`);
    const tally = new Map<string, number>();
    const count = (label: string) => tally.set(label, (tally.get(label) ?? 0) + 1);
    let commands = 0;
    fc.assert(
      fc.property(fc.constantFrom(...CAPACITIES), fc.array(commandArb, { maxLength: MAX_COMMANDS, size: 'max' }), (capacity, sequence) => {
        const keys = keysFor(capacity);
        const tag = ++counter;
        const native = new Side('native', capacity, tag);
        let js: Side | undefined;
        try {
          js = new Side('js', capacity, tag);
          expectSameState(native, js, 'after open');
          sequence.forEach((command, step) => {
            const where = `step ${step} ${JSON.stringify(command, (_, v) => (typeof v === 'bigint' ? `${v}n` : v))} (capacity ${capacity})`;
            const n = apply(native, command, keys);
            const j = apply(js!, command, keys);
            expect(j.outcome, `${where}: outcome`).toEqual(n.outcome);
            count(n.label);
            expectSameState(native, js!, where);
          });
          commands += sequence.length;
          // Second closes of every lease, then both handles close: what a fresh client sees must agree too.
          for (const side of [native, js]) for (const lease of side.leases) lease.close();
          expectSameState(native, js, 'after closing every lease');
          native.producer.close();
          native.consumer.close();
          js.producer.close();
          js.consumer.close();
          native.consumer = native.open('consumer');
          js.consumer = js.open('consumer');
          expect(comparableInspection(js.consumer.inspect()), 'after close: inspect()').toEqual(comparableInspection(native.consumer.inspect()));
          expect(js.consumer.summary(), 'after close: summary()').toEqual(native.consumer.summary());
        } finally {
          native.dispose();
          js?.dispose();
        }
      }),
      { numRuns: NUM_RUNS, seed: SEED, ...(PATH ? { path: PATH } : {}) },
    );
    // The sequences reach the interesting answers, not only the easy ones.
    const reached = [...tally].sort().map(([label, n]) => `${label} ${n}`).join(', ');
    for (const label of [
      'reserve:ERR_TABLE_FULL',
      'reserve:ERR_KEY_EXISTS',
      'reserve:ERR_NOT_PRODUCER',
      'publish:ERR_STALE_RESERVATION',
      'abandon:ERR_STALE_RESERVATION',
      'pin:lease',
      'pin:lease-reused-slot',
      'pin:absent',
      'pin:preparing',
      'pin:no-device-record',
      'pin:device-mismatch',
      'pin:arena-generation-mismatch',
      'pin:invalid-target',
      'evict:evicted',
      'evict:pinned',
      'evict:absent',
      'evict:ERR_NOT_PRODUCER',
      'record:recorded',
      'record:absent',
      'visit',
      'close-again',
      'restart-producer',
      'second-producer:ERR_WRITER_EXISTS',
    ]) {
      expect(tally.has(label), `no command sequence reached ${label}; reached: ${reached}`).toBe(true);
    }
    expect(commands).toBeGreaterThan(NUM_RUNS * 20);
  });
});
