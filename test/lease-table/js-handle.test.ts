// The lease table's JavaScript fallback, exercised through its TableHandle directly:
// the same layout and protocol as native/src/table.c over a SharedArrayBuffer.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { threadId, Worker } from 'node:worker_threads';
import { transformWithOxc } from 'vite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TableHandle } from '../../lib/lease-table/handle.js';
import { taskStartTime, threadReleased } from '../fixtures/os-thread.mjs';
import { bucketOf, jsTableBuffer, keyBucketsFor, openJsHandle, unlinkJsTable } from '../../lib/lease-table/js-handle.js';
import {
  CLIENT_FIELD,
  CLIENT_SIZE,
  CLIENT_STATE,
  CLIENTS_OFFSET,
  HDR,
  MAX_CAPACITY,
  MAX_CLIENTS,
  SLOT,
  SLOT_SIZE,
  SLOT_STATE,
  SLOTS_OFFSET,
  STATUS,
  WP_MAGIC,
  segmentSize,
} from '../../lib/lease-table/layout.js';

/** This process's time namespace inode, as the table records it (0 without time namespaces). */
const OWN_TIME_NS = (() => {
  try {
    return statSync('/proc/self/ns/time', { bigint: true }).ino;
  } catch {
    return 0n;
  }
})();
const root = join(import.meta.dirname, '..', '..');
/** The client-entry bytes where the fallback records a worker's OS thread (js-handle.ts): tid u32, start time u64. */
const OS_THREAD = 36;
const OS_THREAD_START = 48;
let names = 0;
const uniqueName = (): string => `jsh-${process.pid}-${++names}`;

/** Releases the lease a 64-bit token names (index in the low half, record generation in the high half). */
function unpinToken(handle: TableHandle, slot: number, token: bigint): void {
  handle.unpin(slot, Number(BigInt.asUintN(32, token)), Number(token >> 32n));
}

function sha(text: string): Uint8Array {
  return new Uint8Array(createHash('sha256').update(text).digest());
}
/**
 * A digest whose two buckets in a table of 64 slots (buckets 0-3 for the first choice, 4-7 for the
 * second: docs/lease-table.md, "Placement") are `first` and `second`, so its slots are under test
 * control.
 */
function digestIn(first: number, second: number, tag: number): Uint8Array {
  const d = sha(`tag-${tag}`);
  const view = new DataView(d.buffer, d.byteOffset, 32);
  view.setUint32(0, Math.ceil((first * 2 ** 32) / 4), true);
  view.setUint32(4, Math.ceil(((second - 4) * 2 ** 32) / 4), true);
  const slotsOf = (b: number) => Array.from({ length: 8 }, (_, i) => b * 8 + i);
  expect(keyBucketsFor(d, 64)).toEqual([slotsOf(first), slotsOf(second)]);
  return d;
}
function meta(location: number, size = 100): BigUint64Array {
  return new BigUint64Array([BigInt(size), BigInt(location), 0xc0ffeen, 3n, 4n]);
}
/** A 40-byte wp_device_record. */
function deviceRecord(uuidByte: number, arena: bigint, arenaGeneration: bigint, writeSeq = 1n): Uint8Array {
  const r = new Uint8Array(40);
  for (let i = 0; i < 16; i++) r[i] = (uuidByte + i) & 0xff;
  const v = new DataView(r.buffer);
  v.setBigUint64(16, arena, true);
  v.setBigUint64(24, arenaGeneration, true);
  v.setBigUint64(32, writeSeq, true);
  return r;
}

function open(name: string, producer: boolean, createCapacity = 0, buffer?: SharedArrayBuffer): TableHandle {
  const r = openJsHandle({ name, producer, createCapacity, ...(buffer ? { buffer } : {}) });
  expect(r.status).toBe(STATUS.OK);
  expect(r.handle).not.toBeNull();
  return r.handle!;
}

/** Reserves and publishes `digest` with meta.location = location; returns [slot, generation]. */
function put(p: TableHandle, digest: Uint8Array, location: number): [number, bigint] {
  expect(p.reserve(digest)).toBe(STATUS.OK);
  const slot = Number(p.out[0]);
  const generation = p.out[1]!;
  expect(p.publish(slot, generation, meta(location))).toBe(STATUS.OK);
  return [slot, generation];
}

/** Reads shared words of a table the way an inspector would. */
class Peek {
  readonly u64: BigUint64Array;
  readonly view: DataView;
  constructor(readonly buffer: SharedArrayBuffer) {
    this.u64 = new BigUint64Array(buffer, 0, Math.floor(buffer.byteLength / 8));
    this.view = new DataView(buffer);
  }
  stateGen(slot: number): bigint {
    return Atomics.load(this.u64, (SLOTS_OFFSET + slot * SLOT_SIZE + SLOT.STATE_GEN) / 8);
  }
  setStateGen(slot: number, v: bigint): void {
    Atomics.store(this.u64, (SLOTS_OFFSET + slot * SLOT_SIZE + SLOT.STATE_GEN) / 8, v);
  }
  state(slot: number): number {
    return Number(this.stateGen(slot) & 0xffn);
  }
  generation(slot: number): bigint {
    return this.stateGen(slot) >> 8n;
  }
  mask(slot: number): bigint {
    return Atomics.load(this.u64, (SLOTS_OFFSET + slot * SLOT_SIZE + SLOT.PIN_MASK) / 8);
  }
  setMask(slot: number, v: bigint): void {
    Atomics.store(this.u64, (SLOTS_OFFSET + slot * SLOT_SIZE + SLOT.PIN_MASK) / 8, v);
  }
  deviceSeq(slot: number): bigint {
    return Atomics.load(this.u64, (SLOTS_OFFSET + slot * SLOT_SIZE + SLOT.DEVICE) / 8);
  }
  setDeviceSeq(slot: number, v: bigint): void {
    Atomics.store(this.u64, (SLOTS_OFFSET + slot * SLOT_SIZE + SLOT.DEVICE) / 8, v);
  }
  producer(): bigint {
    return Atomics.load(this.u64, HDR.PRODUCER / 8);
  }
  setProducer(v: bigint): void {
    Atomics.store(this.u64, HDR.PRODUCER / 8, v);
  }
  clientWord(i: number): bigint {
    return Atomics.load(this.u64, (CLIENTS_OFFSET + i * CLIENT_SIZE + CLIENT_FIELD.WORD) / 8);
  }
  /** Writes a client entry; its time namespace is this process's unless given. */
  setClient(i: number, word: bigint, startTime: bigint, pidNs: bigint, timeNs = OWN_TIME_NS): void {
    const e = CLIENTS_OFFSET + i * CLIENT_SIZE;
    this.view.setBigUint64(e + CLIENT_FIELD.START_TIME, startTime, true);
    this.view.setBigUint64(e + CLIENT_FIELD.PID_NS, pidNs, true);
    this.view.setBigUint64(e + CLIENT_FIELD.TIME_NS, timeNs, true);
    Atomics.store(this.u64, (e + CLIENT_FIELD.WORD) / 8, word);
  }
  clientField64(i: number, field: number): bigint {
    return this.view.getBigUint64(CLIENTS_OFFSET + i * CLIENT_SIZE + field, true);
  }
  clientField32(i: number, field: number): number {
    return this.view.getUint32(CLIENTS_OFFSET + i * CLIENT_SIZE + field, true);
  }
}
const clientState = (w: bigint): number => Number(w & 3n);
const clientPid = (w: bigint): number => Number((w >> 2n) & 0x3fffffn);
const clientSerial = (w: bigint): bigint => w >> 24n;
const clientWord = (state: number, pid: number, serial: bigint): bigint => (serial << 24n) | (BigInt(pid) << 2n) | BigInt(state);

describe('JS lease table: open and create', () => {
  it('creates, opens by name and from a buffer, and refuses duplicates and unknown names', () => {
    const name = uniqueName();
    const created = openJsHandle({ name, producer: true, createCapacity: 32 });
    expect(created.status).toBe(STATUS.OK);
    const p = created.handle!;
    expect(p.capacity).toBe(32);
    expect(p.producer).toBe(true);
    expect(created.buffer).toBeInstanceOf(SharedArrayBuffer);
    expect(created.buffer!.byteLength).toBe(segmentSize(32));
    expect(jsTableBuffer(p)).toBe(created.buffer);
    expect(p.segment().byteLength).toBe(segmentSize(32));
    expect(new DataView(p.segment().buffer).getBigUint64(HDR.MAGIC, true)).toBe(WP_MAGIC);

    expect(openJsHandle({ name, producer: false, createCapacity: 8 })).toEqual({ status: STATUS.ERR_EXISTS, handle: null, buffer: null });
    expect(openJsHandle({ name: uniqueName(), producer: false, createCapacity: 0 }).status).toBe(STATUS.ERR_NOT_FOUND);

    const byName = openJsHandle({ name, producer: false, createCapacity: 0 });
    expect(byName.status).toBe(STATUS.OK);
    expect(byName.buffer).toBe(created.buffer);
    expect(byName.handle!.producer).toBe(false);
    expect(byName.handle!.clientIndex).not.toBe(p.clientIndex);

    // A worker's way in: the buffer, under a name this thread's registry does not hold.
    const other = uniqueName();
    const byBuffer = open(other, false, 0, created.buffer!);
    expect(byBuffer.capacity).toBe(32);
    expect(openJsHandle({ name: other, producer: false, createCapacity: 0 }).buffer).toBe(created.buffer);

    // Unlinking removes the name; open handles keep working.
    expect(unlinkJsTable(name)).toBe(STATUS.OK);
    expect(unlinkJsTable(name)).toBe(STATUS.ERR_NOT_FOUND);
    expect(openJsHandle({ name, producer: false, createCapacity: 0 }).status).toBe(STATUS.ERR_NOT_FOUND);
    const d = sha('after-unlink');
    put(p, d, 1);
    expect(byName.handle!.tryPin(d, null)).toBe(STATUS.OK);
    byName.handle!.close();
    byBuffer.close();
    p.close();
    unlinkJsTable(other);
  });

  it('rejects bad names and capacities as invalid arguments', () => {
    for (const name of ['', '.hidden', 'a/b', 'sp ace', 'x'.repeat(201)]) {
      expect(openJsHandle({ name, producer: false, createCapacity: 8 }).status).toBe(STATUS.ERR_INVALID_ARGUMENT);
    }
    for (const capacity of [-1, 1.5, MAX_CAPACITY + 1, Number.NaN]) {
      expect(openJsHandle({ name: uniqueName(), producer: false, createCapacity: capacity }).status).toBe(STATUS.ERR_INVALID_ARGUMENT);
    }
  });

  it('registers each handle as a client: pid, start time, namespace, flags and thread id', () => {
    const name = uniqueName();
    const p = open(name, true, 8);
    const c = open(name, false);
    const peek = new Peek(jsTableBuffer(p)!);
    for (const h of [p, c]) {
      const w = peek.clientWord(h.clientIndex);
      expect(clientState(w)).toBe(CLIENT_STATE.ACTIVE);
      expect(clientPid(w)).toBe(process.pid);
      expect(clientSerial(w)).toBe(1n);
      expect(peek.clientField32(h.clientIndex, CLIENT_FIELD.THREAD)).toBe(threadId);
    }
    expect(peek.clientField32(p.clientIndex, CLIENT_FIELD.FLAGS)).toBe(1);
    expect(peek.clientField32(c.clientIndex, CLIENT_FIELD.FLAGS)).toBe(0);
    const stat = readFileSync('/proc/self/stat', 'latin1');
    const startTime = BigInt(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]!);
    expect(peek.clientField64(c.clientIndex, CLIENT_FIELD.START_TIME)).toBe(startTime);
    expect(peek.clientField64(c.clientIndex, CLIENT_FIELD.PID_NS)).toBeGreaterThan(0n);
    // The producer word: (client + 1) | serial << 8.
    expect(peek.producer()).toBe(BigInt(p.clientIndex + 1) | (1n << 8n));

    const index = c.clientIndex;
    c.close();
    const freed = peek.clientWord(index);
    expect(clientState(freed)).toBe(CLIENT_STATE.FREE);
    expect(clientPid(freed)).toBe(0);
    expect(clientSerial(freed)).toBe(1n); // kept: the next occupant takes serial 2
    const again = open(name, false);
    expect(again.clientIndex).toBe(index);
    expect(clientSerial(peek.clientWord(index))).toBe(2n);
    again.close();
    p.close();
    expect(peek.producer()).toBe(0n);
  });

  it('admits 64 clients, refuses the 65th, and admits again after a close', () => {
    const name = uniqueName();
    const handles: TableHandle[] = [open(name, true, 8)];
    for (let i = 1; i < MAX_CLIENTS; i++) handles.push(open(name, false));
    expect(new Set(handles.map((h) => h.clientIndex)).size).toBe(MAX_CLIENTS);
    expect(openJsHandle({ name, producer: false, createCapacity: 0 }).status).toBe(STATUS.ERR_NO_CLIENT_SLOT);
    handles.pop()!.close();
    handles.push(open(name, false));
    for (const h of handles) h.close();
  });
});

describe('JS lease table: corrupt segments', () => {
  const capacity = 16;
  const base = (): SharedArrayBuffer => {
    const name = uniqueName();
    const h = open(name, false, capacity);
    const buffer = jsTableBuffer(h)!;
    h.close();
    unlinkJsTable(name);
    return buffer;
  };
  const copy = (src: SharedArrayBuffer, length = src.byteLength): SharedArrayBuffer => {
    const dst = new SharedArrayBuffer(length);
    new Uint8Array(dst).set(new Uint8Array(src, 0, Math.min(length, src.byteLength)));
    return dst;
  };
  const openBuffer = (buffer: SharedArrayBuffer) => openJsHandle({ name: uniqueName(), producer: false, createCapacity: 0, buffer });
  const withField = (at: number, bytes: 4 | 8, value: number | bigint): SharedArrayBuffer => {
    const b = copy(base());
    const v = new DataView(b);
    if (bytes === 4) v.setUint32(at, Number(value), true);
    else v.setBigUint64(at, BigInt(value), true);
    return b;
  };

  it('opens an intact copy, and one with spare bytes at the end', () => {
    expect(openBuffer(copy(base())).status).toBe(STATUS.OK);
    const larger = openBuffer(copy(base(), segmentSize(capacity) + 3));
    expect(larger.status).toBe(STATUS.OK);
    expect(larger.handle!.capacity).toBe(capacity);
    larger.handle!.close();
  });

  const cases: Array<[string, () => SharedArrayBuffer]> = [
    ['bad magic', () => withField(HDR.MAGIC, 8, 0x5045525054494158n)],
    ['zero magic (not initialised)', () => withField(HDR.MAGIC, 8, 0n)],
    ['wrong ABI version', () => withField(HDR.ABI_VERSION, 4, 1)],
    ['wrong header size', () => withField(HDR.HEADER_SIZE, 4, 128)],
    ['capacity 0', () => withField(HDR.CAPACITY, 4, 0)],
    ['huge capacity', () => withField(HDR.CAPACITY, 4, 0xffffffff)],
    ['capacity past the maximum', () => withField(HDR.CAPACITY, 4, MAX_CAPACITY + 1)],
    ['capacity not matching the segment size', () => withField(HDR.CAPACITY, 4, capacity + 1)],
    ['wrong probe window', () => withField(HDR.PROBE_WINDOW, 4, 16)],
    ['wrong max clients', () => withField(HDR.MAX_CLIENTS, 4, 32)],
    ['wrong slot size', () => withField(HDR.SLOT_SIZE, 4, 64)],
    ['wrong client size', () => withField(HDR.CLIENT_SIZE, 4, 128)],
    ['wrong clients offset', () => withField(HDR.CLIENTS_OFFSET, 8, 512)],
    ['wrong slots offset', () => withField(HDR.SLOTS_OFFSET, 8, 256)],
    ['wrong segment size', () => withField(HDR.SEGMENT_SIZE, 8, segmentSize(capacity) + 64)],
    ['huge segment size', () => withField(HDR.SEGMENT_SIZE, 8, 0xffff_ffff_ffff_ffffn)],
    ['truncated by one byte', () => copy(base(), segmentSize(capacity) - 1)],
    ['truncated to the header', () => copy(base(), 256)],
    ['shorter than the header', () => copy(base(), 100)],
    ['empty', () => new SharedArrayBuffer(0)],
    ['all zero', () => new SharedArrayBuffer(segmentSize(capacity))],
  ];
  for (const [what, make] of cases) {
    it(`${what} -> ERR_BAD_SEGMENT`, () => {
      expect(openBuffer(make())).toEqual({ status: STATUS.ERR_BAD_SEGMENT, handle: null, buffer: null });
    });
  }

  it('a plain ArrayBuffer -> ERR_BAD_SEGMENT', () => {
    const ab = new ArrayBuffer(segmentSize(capacity)) as unknown as SharedArrayBuffer;
    expect(openBuffer(ab).status).toBe(STATUS.ERR_BAD_SEGMENT);
  });
});

describe('JS lease table: pin, unpin, evict', () => {
  let name: string;
  let p: TableHandle;
  let c: TableHandle;
  let peek: Peek;
  beforeAll(() => {
    name = uniqueName();
    p = open(name, true, 64);
    c = open(name, false);
    peek = new Peek(jsTableBuffer(p)!);
  });
  afterAll(() => {
    c.close();
    p.close();
    unlinkJsTable(name);
  });

  it('reserve, preparing miss, publish, pin, evict while pinned, unpin, evict', () => {
    const d = sha('artifact-1');
    expect(c.tryPin(d, null)).toBe(STATUS.MISS_ABSENT);
    expect(p.reserve(d)).toBe(STATUS.OK);
    const slot = Number(p.out[0]);
    const generation = p.out[1]!;
    expect(slot).toBe(keyBucketsFor(d, 64)[0]![0]); // a lone key: the first slot of its first bucket
    expect(generation).toBe(0n);
    expect(peek.state(slot)).toBe(SLOT_STATE.RESERVED);
    expect(p.reserve(d)).toBe(STATUS.EXISTS);
    expect(c.tryPin(d, null)).toBe(STATUS.MISS_PREPARING);
    expect(p.tryEvict(d)).toBe(STATUS.ABSENT); // a reservation is not an artifact

    expect(p.publish(slot, generation + 1n, meta(7))).toBe(STATUS.STALE);
    expect(p.publish(slot, generation, meta(7, 4096))).toBe(STATUS.OK);
    expect(p.publish(slot, generation, meta(7))).toBe(STATUS.STALE); // no longer RESERVED
    expect(peek.stateGen(slot)).toBe((generation << 8n) | BigInt(SLOT_STATE.READY));

    expect(c.tryPin(d, null)).toBe(STATUS.OK);
    expect([...c.out]).toEqual([BigInt(slot), generation, c.out[2], 4096n, 7n, 0xc0ffeen, 3n, 4n]);
    const token = c.out[2]!;
    expect(c.clientPins(slot)).toBe(1);
    expect(peek.mask(slot)).toBe(1n << BigInt(c.clientIndex));

    expect(p.tryEvict(d)).toBe(STATUS.PINNED);
    expect(peek.stateGen(slot)).toBe((generation << 8n) | BigInt(SLOT_STATE.READY)); // rolled back

    unpinToken(c, slot, token);
    expect(c.clientPins(slot)).toBe(0);
    expect(peek.mask(slot)).toBe(0n);
    expect(p.tryEvict(d)).toBe(STATUS.OK);
    expect(peek.stateGen(slot)).toBe(((generation + 1n) << 8n) | BigInt(SLOT_STATE.FREE));
    expect(c.tryPin(d, null)).toBe(STATUS.MISS_ABSENT);
    expect(p.tryEvict(d)).toBe(STATUS.ABSENT);

    // Reuse: the next reservation of the slot carries the next generation.
    const [slot2, generation2] = put(p, d, 8);
    expect(slot2).toBe(slot);
    expect(generation2).toBe(generation + 1n);
    expect(c.tryPin(d, null)).toBe(STATUS.OK);
    expect(c.out[1]).toBe(generation + 1n);
    expect(c.out[4]).toBe(8n);
    unpinToken(c, slot, c.out[2]!);
    expect(p.tryEvict(d)).toBe(STATUS.OK);
  });

  it('abandon frees a reservation with the next generation; stale reservations are refused', () => {
    const d = sha('abandoned');
    expect(p.reserve(d)).toBe(STATUS.OK);
    const slot = Number(p.out[0]);
    const generation = p.out[1]!;
    expect(p.abandon(slot, generation + 1n)).toBe(STATUS.STALE);
    expect(p.abandon(slot, generation)).toBe(STATUS.OK);
    expect(peek.stateGen(slot)).toBe(((generation + 1n) << 8n) | BigInt(SLOT_STATE.FREE));
    expect(p.abandon(slot, generation)).toBe(STATUS.STALE);
    expect(p.publish(slot, generation, meta(1))).toBe(STATUS.STALE);
    expect(p.abandon(64, 0n)).toBe(STATUS.ERR_INVALID_ARGUMENT);
    expect(p.publish(-1, 0n, meta(1))).toBe(STATUS.ERR_INVALID_ARGUMENT);
    expect(c.tryPin(d, null)).toBe(STATUS.MISS_ABSENT);
  });

  it('a second unpin of the same lease releases nothing', () => {
    const d = sha('double-unpin');
    const [slot] = put(p, d, 2);
    expect(c.tryPin(d, null)).toBe(STATUS.OK);
    const first = c.out[2]!;
    expect(c.tryPin(d, null)).toBe(STATUS.OK); // the holder's second pin: count++
    const second = c.out[2]!;
    expect(second).not.toBe(first);
    expect(c.clientPins(slot)).toBe(2);

    unpinToken(c, slot, first);
    unpinToken(c, slot, first);
    unpinToken(c, slot, first);
    expect(c.clientPins(slot)).toBe(1);
    expect(peek.mask(slot)).not.toBe(0n);
    expect(p.tryEvict(d)).toBe(STATUS.PINNED);

    unpinToken(c, slot + 1, second); // the wrong slot: not this lease
    unpinToken(c, slot, second ^ 1n); // another record index
    unpinToken(c, slot, 1n << 40n); // an index never handed out
    expect(c.clientPins(slot)).toBe(1);
    unpinToken(c, slot, second);
    expect(c.clientPins(slot)).toBe(0);
    expect(peek.mask(slot)).toBe(0n);
    expect(p.tryEvict(d)).toBe(STATUS.OK);
  });

  it('another handle’s token names none of this handle’s records: releasing it here releases nothing', () => {
    const d = sha('cross-handle');
    const [slot] = put(p, d, 3);
    const other = open(name, false, 0, jsTableBuffer(p)!);
    try {
      expect(c.tryPin(d, null)).toBe(STATUS.OK);
      const mine = c.out[2]!;
      expect(other.tryPin(d, null)).toBe(STATUS.OK);
      const theirs = other.out[2]!;
      // Record generations start at each handle's own seed, so the two tokens differ even where their record indexes are equal.
      expect(theirs >> 32n).not.toBe(mine >> 32n);
      unpinToken(c, slot, theirs);
      expect(c.clientPins(slot)).toBe(1);
      unpinToken(other, slot, mine);
      expect(other.clientPins(slot)).toBe(1);
      unpinToken(c, slot, mine);
      unpinToken(other, slot, theirs);
      expect(c.clientPins(slot) + other.clientPins(slot)).toBe(0);
      expect(p.tryEvict(d)).toBe(STATUS.OK);
    } finally {
      other.close();
    }
  });

  it('an old token, after its record and its slot were reused, releases nothing', () => {
    const a = digestIn(1, 5, 1);
    const b = digestIn(1, 5, 2);
    const [slot] = put(p, a, 10);
    expect(c.tryPin(a, null)).toBe(STATUS.OK);
    const oldToken = c.out[2]!;
    unpinToken(c, slot, oldToken);
    expect(p.tryEvict(a)).toBe(STATUS.OK);

    const [slotB] = put(p, b, 11);
    expect(slotB).toBe(slot); // b now lives where a did
    expect(c.tryPin(b, null)).toBe(STATUS.OK);
    expect(c.out[4]).toBe(11n);
    const newToken = c.out[2]!;
    expect(newToken & 0xffff_ffffn).toBe(oldToken & 0xffff_ffffn); // the same record, reused
    expect(newToken).not.toBe(oldToken); // with a new record generation

    unpinToken(c, slot, oldToken);
    expect(c.clientPins(slot)).toBe(1);
    expect(p.tryEvict(b)).toBe(STATUS.PINNED);
    unpinToken(c, slot, newToken);
    expect(p.tryEvict(b)).toBe(STATUS.OK);
  });

  it('a holder pins again while its slot shows EVICTING; others miss with evicting', () => {
    const d = sha('evicting');
    const [slot, generation] = put(p, d, 5);
    expect(c.tryPin(d, null)).toBe(STATUS.OK);
    const token = c.out[2]!;
    const other = open(name, false);
    // An evictor between its claim and its pin check.
    peek.setStateGen(slot, (generation << 8n) | BigInt(SLOT_STATE.EVICTING));
    expect(other.tryPin(d, null)).toBe(STATUS.MISS_EVICTING);
    expect(other.clientPins(slot)).toBe(0);
    expect(c.tryPin(d, null)).toBe(STATUS.OK);
    expect(c.out[1]).toBe(generation);
    expect(c.clientPins(slot)).toBe(2);
    unpinToken(c, slot, c.out[2]!);
    peek.setStateGen(slot, (generation << 8n) | BigInt(SLOT_STATE.READY)); // rolled back
    unpinToken(c, slot, token);
    other.close();
    expect(p.tryEvict(d)).toBe(STATUS.OK);
  });

  it('a pinner backs out when the state changed under it (a racing bit alone reads as pinned)', () => {
    const d = sha('racing-bit');
    const [slot] = put(p, d, 6);
    // A losing pinner's bit, not yet withdrawn: the eviction reports PINNED and rolls back.
    peek.setMask(slot, 1n << 63n);
    expect(p.tryEvict(d)).toBe(STATUS.PINNED);
    expect(peek.state(slot)).toBe(SLOT_STATE.READY);
    peek.setMask(slot, 0n);
    expect(p.tryEvict(d)).toBe(STATUS.OK);
  });

  it('a key takes the emptier of its two buckets, ties to the first; FULL when both are full', () => {
    const keys = Array.from({ length: 17 }, (_, i) => digestIn(3, 7, 100 + i));
    const slots: number[] = [];
    for (let i = 0; i < 16; i++) slots.push(put(p, keys[i]!, 100 + i)[0]);
    // Bucket 3 is slots 24-31, bucket 7 slots 56-63: a tie goes to the first, then the other is emptier.
    expect(slots).toEqual([24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63]);
    expect(p.reserve(keys[16]!)).toBe(STATUS.FULL);
    expect(c.tryPin(keys[16]!, null)).toBe(STATUS.MISS_ABSENT);
    expect(c.peek(keys[16]!)).toBe(STATUS.MISS_ABSENT);
    for (let i = 0; i < 16; i++) {
      expect(c.tryPin(keys[i]!, null)).toBe(STATUS.OK);
      expect(c.out[0]).toBe(BigInt(slots[i]!));
      expect(c.out[4]).toBe(BigInt(100 + i));
      unpinToken(c, slots[i]!, c.out[2]!);
    }
    // A hole in the second bucket: it is now the emptier, and a key found beyond the hole still hits.
    expect(p.tryEvict(keys[3]!)).toBe(STATUS.OK);
    expect(c.tryPin(keys[5]!, null)).toBe(STATUS.OK);
    unpinToken(c, Number(c.out[0]), c.out[2]!);
    expect(put(p, keys[16]!, 116)[0]).toBe(57);
    // A key sharing only the full first bucket goes to its own second, empty, bucket.
    const spill = digestIn(3, 5, 200);
    expect(put(p, spill, 200)[0]).toBe(40);
    expect(c.peek(spill)).toBe(STATUS.OK);
    for (const k of [...keys.slice(0, 3), ...keys.slice(4), spill]) expect(p.tryEvict(k)).toBe(STATUS.OK);
  });

  it('consumers cannot produce', () => {
    const d = sha('not-producer');
    expect(c.reserve(d)).toBe(STATUS.ERR_NOT_PRODUCER);
    expect(c.publish(0, 0n, meta(1))).toBe(STATUS.ERR_NOT_PRODUCER);
    expect(c.abandon(0, 0n)).toBe(STATUS.ERR_NOT_PRODUCER);
    expect(c.tryEvict(d)).toBe(STATUS.ERR_NOT_PRODUCER);
    expect(c.recordDeviceWrite(d, deviceRecord(1, 1n, 1n))).toBe(STATUS.ERR_NOT_PRODUCER);
  });

  it('a bucket is (h * buckets) >> 32, exactly, up to the most buckets a half can have', () => {
    const heads = [0, 1, 0xffff, 0x10000, 0x7fffffff, 0x80000000, 0xdeadbeef, 0xfffffffe, 0xffffffff];
    for (const buckets of [1, 2, 3, 7, 64, 1000, 1 << 19, (1 << 19) + 1, 999_999, (1 << 20) - 1, 1 << 20]) {
      for (const h of heads) {
        expect(bucketOf(h, buckets)).toBe(Number((BigInt(h) * BigInt(buckets)) >> 32n));
      }
    }
  });

  it('the buckets split a table in halves, the last bucket short when the capacity is not a multiple of 8', () => {
    const ones = new Uint8Array(32).fill(0xff); // both words 2^32 - 1: the last bucket of each half
    const range = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => from + i);
    expect(keyBucketsFor(ones, 1)).toEqual([[0]]);
    expect(keyBucketsFor(ones, 8)).toEqual([range(0, 8)]);
    expect(keyBucketsFor(ones, 9)).toEqual([range(0, 8), [8]]);
    expect(keyBucketsFor(ones, 33)).toEqual([range(16, 24), [32]]); // 5 buckets: 3 first, 2 second
    expect(keyBucketsFor(ones, MAX_CAPACITY)).toEqual([range(MAX_CAPACITY / 2 - 8, MAX_CAPACITY / 2), range(MAX_CAPACITY - 8, MAX_CAPACITY)]);
    expect(keyBucketsFor(new Uint8Array(32), MAX_CAPACITY)).toEqual([range(0, 8), range(MAX_CAPACITY / 2, MAX_CAPACITY / 2 + 8)]);
  });
});

describe('JS lease table: the producer role', () => {
  it('one producer at a time; the role is free again after it closes', () => {
    const name = uniqueName();
    const first = open(name, true, 16);
    const second = openJsHandle({ name, producer: true, createCapacity: 0 });
    expect(second).toEqual({ status: STATUS.ERR_WRITER_EXISTS, handle: null, buffer: null });
    const peek = new Peek(jsTableBuffer(first)!);
    // The refused producer gave its registry entry back.
    let active = 0;
    for (let i = 0; i < MAX_CLIENTS; i++) if (clientState(peek.clientWord(i)) !== CLIENT_STATE.FREE) active++;
    expect(active).toBe(1);

    const d = sha('survives-producer-change');
    put(first, d, 3);
    const reserved = sha('reserved-at-close');
    expect(first.reserve(reserved)).toBe(STATUS.OK);
    const reservedSlot = Number(first.out[0]);
    first.close();
    expect(peek.producer()).toBe(0n);
    // Closing settled its reservation: abandoned, with the next generation.
    expect(peek.stateGen(reservedSlot)).toBe((1n << 8n) | BigInt(SLOT_STATE.FREE));

    const next = open(name, true);
    expect(next.producer).toBe(true);
    const c = open(name, false);
    expect(c.tryPin(d, null)).toBe(STATUS.OK);
    expect(c.out[4]).toBe(3n);
    unpinToken(c, Number(c.out[0]), c.out[2]!);
    expect(next.tryEvict(d)).toBe(STATUS.OK);
    c.close();
    next.close();
    unlinkJsTable(name);
  });

  it('a producer taking over settles what a vanished producer left: EVICTING -> READY, RESERVED -> FREE, odd record -> absent', () => {
    const name = uniqueName();
    const old = open(name, true, 16);
    const peek = new Peek(jsTableBuffer(old)!);
    const evicting = sha('left-evicting');
    const [es, eg] = put(old, evicting, 1);
    const reserved = sha('left-reserved');
    expect(old.reserve(reserved)).toBe(STATUS.OK);
    const rs = Number(old.out[0]);
    // The producer "vanishes" mid-evict: state EVICTING, the producer word released by a reaper.
    peek.setStateGen(es, (eg << 8n) | BigInt(SLOT_STATE.EVICTING));
    const device = sha('left-half-written');
    const [ds] = put(old, device, 2);
    expect(old.recordDeviceWrite(device, deviceRecord(1, 1n, 1n))).toBe(STATUS.OK);
    peek.setDeviceSeq(ds, 3n); // died between the odd store and the even one
    peek.setProducer(0n);
    expect(old.tryEvict(evicting)).toBe(STATUS.PINNED); // EVICTING is never finished by a lookup

    const next = open(name, true);
    expect(peek.stateGen(es)).toBe((eg << 8n) | BigInt(SLOT_STATE.READY));
    expect(peek.stateGen(rs)).toBe((1n << 8n) | BigInt(SLOT_STATE.FREE));
    const c = open(name, false);
    expect(c.tryPin(evicting, null)).toBe(STATUS.OK);
    unpinToken(c, es, c.out[2]!);
    expect(c.tryPin(reserved, null)).toBe(STATUS.MISS_ABSENT);
    // The half-written record is absent now (finished as an all-zero record under the next
    // even sequence: the sequence never goes back while readers may hold pins), and the next
    // write is complete.
    expect(peek.deviceSeq(ds)).toBe(4n);
    expect(c.tryPin(device, deviceRecord(1, 1n, 1n))).toBe(STATUS.MISS_NO_DEVICE_RECORD);
    expect(next.recordDeviceWrite(device, deviceRecord(1, 1n, 2n))).toBe(STATUS.OK);
    expect(peek.deviceSeq(ds)).toBe(6n);
    expect(c.tryPin(device, deviceRecord(1, 1n, 2n))).toBe(STATUS.OK);
    unpinToken(c, ds, c.out[2]!);
    c.close();
    next.close();
    unlinkJsTable(name);
  });
});

describe('JS lease table: device records', () => {
  const target = deviceRecord(0x5e, 3n, 7n);
  const mismatchedDevice = deviceRecord(0x5f, 3n, 7n);
  const mismatchedArena = deviceRecord(0x5e, 4n, 7n);
  const newerGeneration = deviceRecord(0x5e, 3n, 8n);

  it('absent, mismatch, arena-generation mismatch, hit; a newer record replaces; eviction clears', () => {
    const name = uniqueName();
    const p = open(name, true, 16);
    const c = open(name, false);
    const peek = new Peek(jsTableBuffer(p)!);
    const d = sha('device-artifact');
    expect(p.recordDeviceWrite(d, target)).toBe(STATUS.ABSENT);
    expect(p.reserve(d)).toBe(STATUS.OK);
    const slot = Number(p.out[0]);
    const generation = p.out[1]!;
    expect(p.recordDeviceWrite(d, target)).toBe(STATUS.ABSENT); // only READY artifacts
    expect(p.publish(slot, generation, meta(9))).toBe(STATUS.OK);

    expect(c.tryPin(d, target)).toBe(STATUS.MISS_NO_DEVICE_RECORD);
    expect(peek.mask(slot)).toBe(0n); // a miss leaves no pin behind
    expect(c.clientPins(slot)).toBe(0);

    expect(p.recordDeviceWrite(d, target)).toBe(STATUS.OK);
    expect(peek.deviceSeq(slot)).toBe(2n);
    expect(c.tryPin(d, mismatchedDevice)).toBe(STATUS.MISS_DEVICE_MISMATCH);
    expect(c.tryPin(d, mismatchedArena)).toBe(STATUS.MISS_DEVICE_MISMATCH);
    expect(c.tryPin(d, newerGeneration)).toBe(STATUS.MISS_ARENA_GENERATION_MISMATCH);
    expect(peek.mask(slot)).toBe(0n);
    expect(c.tryPin(d, target)).toBe(STATUS.OK);
    expect(c.out[4]).toBe(9n);
    const hostToken = c.out[2]!;
    // Host readiness does not look at the record; a write_seq difference does not matter.
    expect(c.tryPin(d, null)).toBe(STATUS.OK);
    unpinToken(c, slot, c.out[2]!);
    expect(c.tryPin(d, deviceRecord(0x5e, 3n, 7n, 99n))).toBe(STATUS.OK);
    unpinToken(c, slot, c.out[2]!);
    // A holder's device miss keeps its other pin.
    expect(c.tryPin(d, mismatchedDevice)).toBe(STATUS.MISS_DEVICE_MISMATCH);
    expect(c.clientPins(slot)).toBe(1);
    expect(peek.mask(slot)).not.toBe(0n);
    unpinToken(c, slot, hostToken);

    expect(p.recordDeviceWrite(d, newerGeneration)).toBe(STATUS.OK);
    expect(peek.deviceSeq(slot)).toBe(4n);
    expect(c.tryPin(d, target)).toBe(STATUS.MISS_ARENA_GENERATION_MISMATCH);
    expect(c.tryPin(d, newerGeneration)).toBe(STATUS.OK);
    unpinToken(c, slot, c.out[2]!);

    expect(p.tryEvict(d)).toBe(STATUS.OK);
    expect(peek.deviceSeq(slot)).toBe(0n);
    put(p, d, 10);
    expect(c.tryPin(d, newerGeneration)).toBe(STATUS.MISS_NO_DEVICE_RECORD);
    c.close();
    p.close();
    unlinkJsTable(name);
  });

  it('a write in progress reads as incomplete; the next write restores even parity', () => {
    const name = uniqueName();
    const p = open(name, true, 16);
    const c = open(name, false);
    const peek = new Peek(jsTableBuffer(p)!);
    const d = sha('device-in-progress');
    const [slot] = put(p, d, 1);
    expect(p.recordDeviceWrite(d, target)).toBe(STATUS.OK);
    peek.setDeviceSeq(slot, 3n); // a writer stopped between its two sequence stores
    expect(c.tryPin(d, target)).toBe(STATUS.MISS_DEVICE_WRITE_INCOMPLETE);
    expect(peek.mask(slot)).toBe(0n);
    expect(p.recordDeviceWrite(d, newerGeneration)).toBe(STATUS.OK);
    expect(peek.deviceSeq(slot)).toBe(6n); // odd 5 while writing, then even
    expect(c.tryPin(d, newerGeneration)).toBe(STATUS.OK);
    unpinToken(c, slot, c.out[2]!);
    c.close();
    p.close();
    unlinkJsTable(name);
  });
});

describe('JS lease table: close and reap', () => {
  it('close releases every pin, gives up the producer role and frees the entry; a closed handle does nothing', () => {
    const name = uniqueName();
    const p = open(name, true, 16);
    const c = open(name, false);
    const peek = new Peek(jsTableBuffer(p)!);
    const keys = [sha('c1'), sha('c2'), sha('c3')];
    const slots = keys.map((k, i) => put(p, k, i)[0]);
    for (const k of keys) expect(c.tryPin(k, null)).toBe(STATUS.OK);
    expect(c.tryPin(keys[0]!, null)).toBe(STATUS.OK);
    const token = c.out[2]!;
    for (const s of slots) expect(peek.mask(s)).toBe(1n << BigInt(c.clientIndex));
    const index = c.clientIndex;
    c.close();
    c.close(); // idempotent
    for (const s of slots) expect(peek.mask(s)).toBe(0n);
    expect(clientState(peek.clientWord(index))).toBe(CLIENT_STATE.FREE);
    expect(c.tryPin(keys[0]!, null)).toBe(STATUS.ERR_INVALID_ARGUMENT);
    unpinToken(c, slots[0]!, token);
    expect(c.clientPins(slots[0]!)).toBe(0);
    for (const k of keys) expect(p.tryEvict(k)).toBe(STATUS.OK);
    p.close();
    expect(peek.producer()).toBe(0n);
    expect(p.reserve(keys[0]!)).toBe(STATUS.ERR_INVALID_ARGUMENT);
    unlinkJsTable(name);
  });

  it('reaps dead clients from the exact snapshot, and leaves live and foreign-namespace ones', () => {
    const name = uniqueName();
    const p = open(name, false, 16);
    const peek = new Peek(jsTableBuffer(p)!);
    const child = spawnSync(process.execPath, ['-e', '0']);
    const deadPid = child.pid!;
    const ownNs = peek.clientField64(p.clientIndex, CLIENT_FIELD.PID_NS);
    const ownStart = peek.clientField64(p.clientIndex, CLIENT_FIELD.START_TIME);
    const d = sha('reaped');

    // 10: a dead producer holding a pin; 11: a dead registrant (CLAIMING); 12: a live pid with
    // another start time (pid reuse); 13: a dead pid of another pid namespace; 14: ourselves.
    peek.setClient(10, clientWord(CLIENT_STATE.ACTIVE, deadPid, 5n), 12345n, ownNs);
    peek.setClient(11, clientWord(CLIENT_STATE.CLAIMING, deadPid, 6n), 0n, 0n);
    peek.setClient(12, clientWord(CLIENT_STATE.ACTIVE, process.ppid, 7n), 1n, ownNs);
    peek.setClient(13, clientWord(CLIENT_STATE.ACTIVE, deadPid, 8n), 12345n, ownNs + 1n);
    peek.setClient(14, clientWord(CLIENT_STATE.ACTIVE, process.pid, 9n), ownStart, ownNs);
    peek.setProducer(11n | (5n << 8n));
    peek.setMask(3, (1n << 10n) | (1n << 13n) | (1n << 14n));
    // What the dead producer left: a reservation, an eviction, a half-written device record.
    peek.setStateGen(5, (4n << 8n) | BigInt(SLOT_STATE.RESERVED));
    peek.setStateGen(6, (2n << 8n) | BigInt(SLOT_STATE.EVICTING));
    peek.setStateGen(7, (9n << 8n) | BigInt(SLOT_STATE.READY));
    peek.setDeviceSeq(7, 5n);
    peek.setDeviceSeq(8, 6n); // a complete record stays

    expect(p.reapDeadClients()).toBe(3);
    // The reaper of the dead producer settled its slots before freeing the role.
    expect(peek.stateGen(5)).toBe((5n << 8n) | BigInt(SLOT_STATE.FREE));
    expect(peek.stateGen(6)).toBe((2n << 8n) | BigInt(SLOT_STATE.READY));
    expect(peek.stateGen(7)).toBe((9n << 8n) | BigInt(SLOT_STATE.READY));
    expect(peek.deviceSeq(7)).toBe(6n); // 5 was half-written: finished as an absent record
    expect(peek.deviceSeq(8)).toBe(6n);
    expect(peek.clientWord(10)).toBe(5n << 24n);
    expect(peek.clientWord(11)).toBe(6n << 24n);
    expect(peek.clientWord(12)).toBe(7n << 24n);
    expect(clientState(peek.clientWord(13))).toBe(CLIENT_STATE.ACTIVE);
    expect(clientState(peek.clientWord(14))).toBe(CLIENT_STATE.ACTIVE);
    expect(peek.mask(3)).toBe((1n << 13n) | (1n << 14n));
    expect(peek.producer()).toBe(0n);
    expect(new DataView(jsTableBuffer(p)!).getBigUint64(HDR.REAPED, true)).toBe(3n);
    expect(p.reapDeadClients()).toBe(0);

    // A producer can now claim the role the dead one held.
    const q = open(name, true);
    expect(q.producer).toBe(true);
    put(q, d, 1);
    q.close();
    p.close();
    unlinkJsTable(name);
  });

  it('reaping a dead consumer leaves the live producer\'s work alone', () => {
    const name = uniqueName();
    const p = open(name, true, 16);
    const c = open(name, false);
    const peek = new Peek(jsTableBuffer(p)!);
    const d = sha('in-progress');
    expect(p.reserve(d)).toBe(STATUS.OK);
    const slot = Number(p.out[0]);
    const generation = p.out[1]!;
    const deadPid = spawnSync(process.execPath, ['-e', '0']).pid!;
    peek.setClient(30, clientWord(CLIENT_STATE.ACTIVE, deadPid, 1n), 77n, peek.clientField64(c.clientIndex, CLIENT_FIELD.PID_NS));
    peek.setMask(slot, 1n << 30n);
    expect(c.reapDeadClients()).toBe(1);
    expect(peek.mask(slot)).toBe(0n);
    expect(peek.state(slot)).toBe(SLOT_STATE.RESERVED);
    expect(peek.producer()).toBe(BigInt(p.clientIndex + 1) | (1n << 8n));
    expect(p.publish(slot, generation, meta(1))).toBe(STATUS.OK);
    c.close();
    p.close();
    unlinkJsTable(name);
  });

  it('a new producer reaps a dead holder of the role; open reaps when the registry is full', () => {
    const name = uniqueName();
    const first = open(name, false, 16);
    const peek = new Peek(jsTableBuffer(first)!);
    const deadPid = spawnSync(process.execPath, ['-e', '0']).pid!;
    const ns = peek.clientField64(first.clientIndex, CLIENT_FIELD.PID_NS);
    peek.setClient(20, clientWord(CLIENT_STATE.ACTIVE, deadPid, 3n), 999n, ns);
    peek.setProducer(21n | (3n << 8n));
    const producer = open(name, true); // claim fails, reaps, claims
    expect(producer.producer).toBe(true);
    expect(peek.clientWord(20)).toBe(3n << 24n);

    const handles: TableHandle[] = [];
    while (true) {
      const r = openJsHandle({ name, producer: false, createCapacity: 0 });
      if (r.status !== STATUS.OK) {
        expect(r.status).toBe(STATUS.ERR_NO_CLIENT_SLOT);
        break;
      }
      handles.push(r.handle!);
    }
    const victim = handles.pop()!;
    const index = victim.clientIndex;
    victim.close();
    peek.setClient(index, clientWord(CLIENT_STATE.ACTIVE, deadPid, 50n), 999n, ns);
    const late = open(name, false);
    expect(late.clientIndex).toBe(index);
    expect(clientSerial(peek.clientWord(index))).toBe(51n);
    for (const h of [late, ...handles, producer, first]) h.close();
    unlinkJsTable(name);
  });
});

describe('JS lease table: worker_threads', () => {
  let dir: string;
  beforeAll(async () => {
    // Workers run plain Node, not vitest's transform: strip the types of the modules here.
    dir = mkdtempSync(join(tmpdir(), 'waitprep-js-handle-'));
    for (const file of ['layout.ts', 'liveness.ts', 'js-handle.ts']) {
      const source = readFileSync(join(root, 'lib', 'lease-table', file), 'utf8');
      const { code } = await transformWithOxc(source, file, {});
      writeFileSync(join(dir, file.replace(/\.ts$/, '.js')), code);
    }
    writeFileSync(join(dir, 'package.json'), '{"type":"module"}');
    writeFileSync(join(dir, 'pinner.js'), PINNER);
    writeFileSync(join(dir, 'leaver.js'), LEAVER);
    writeFileSync(join(dir, 'holder.js'), HOLDER);
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('a worker that ends without closing still releases its pins and its entry', async () => {
    const name = uniqueName();
    const p = open(name, true, 16);
    const buffer = jsTableBuffer(p)!;
    const peek = new Peek(buffer);
    const d = sha('left-pinned');
    const [slot] = put(p, d, 1);
    const worker = new Worker(pathToFileURL(join(dir, 'leaver.js')), { workerData: { name, buffer, digest: d } });
    const [report] = await Promise.all([
      new Promise<{ status: number; pin: number; mask: string; client: number }>((resolve, reject) => {
        worker.once('message', resolve);
        worker.once('error', reject);
      }),
      new Promise((resolve) => worker.once('exit', resolve)),
    ]);
    expect(report.status).toBe(STATUS.OK);
    expect(report.pin).toBe(STATUS.OK);
    expect(BigInt(report.mask)).toBe(1n << BigInt(report.client)); // it held the pin while running
    expect(peek.mask(slot)).toBe(0n);
    expect(clientState(peek.clientWord(report.client))).toBe(CLIENT_STATE.FREE);
    expect(p.tryEvict(d)).toBe(STATUS.OK);
    p.close();
    unlinkJsTable(name);
  });

  /** A holder worker (see HOLDER): opens and pins when given a table, reports, holds until terminated. */
  async function holder(hold: 'wait' | 'spin', table?: { name: string; buffer: SharedArrayBuffer; digest: Uint8Array }): Promise<Held> {
    const worker = new Worker(pathToFileURL(join(dir, 'holder.js')), { workerData: { hold, control: new Int32Array(new SharedArrayBuffer(4)), ...table } });
    const report = await new Promise<Omit<Held, 'worker' | 'startTime'>>((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
    });
    return { worker, ...report, startTime: taskStartTime(report.tid) };
  }

  it('a worker\'s entry names its OS thread (the main thread\'s names none); a terminated worker is reaped, a live one never', async () => {
    const name = uniqueName();
    const p = open(name, true, 16);
    const buffer = jsTableBuffer(p)!;
    const peek = new Peek(buffer);
    // The main thread's entry is the C core's, byte for byte: no thread recorded.
    expect(peek.clientField32(p.clientIndex, OS_THREAD)).toBe(0);
    expect(peek.clientField64(p.clientIndex, OS_THREAD_START)).toBe(0n);
    const d = sha('held-by-workers');
    const [slot] = put(p, d, 1);
    const waiting = await holder('wait', { name, buffer, digest: d });
    const spinning = await holder('spin', { name, buffer, digest: d });
    for (const w of [waiting, spinning]) {
      expect([w.status, w.pin]).toEqual([STATUS.OK, STATUS.OK]);
      expect(w.tid).not.toBe(process.pid);
      // ACTIVE under our pid, and the thread beside it.
      expect(clientState(peek.clientWord(w.client))).toBe(CLIENT_STATE.ACTIVE);
      expect(clientPid(peek.clientWord(w.client))).toBe(process.pid);
      expect(peek.clientField32(w.client, OS_THREAD)).toBe(w.tid);
      expect(peek.clientField64(w.client, OS_THREAD_START)).toBe(w.startTime);
    }
    const bits = (...clients: number[]): bigint => clients.reduce((m, c) => m | (1n << BigInt(c)), 0n);
    expect(peek.mask(slot)).toBe(bits(waiting.client, spinning.client));
    // Both run no JavaScript the reaper could see, one blocked, one in a loop: both live.
    expect(p.reapDeadClients()).toBe(0);
    await spinning.worker.terminate();
    expect(await threadReleased(spinning.tid)).toBe(true);
    expect(p.reapDeadClients()).toBe(1);
    expect(clientState(peek.clientWord(spinning.client))).toBe(CLIENT_STATE.FREE);
    expect(peek.mask(slot)).toBe(bits(waiting.client));
    expect(p.tryEvict(d)).toBe(STATUS.PINNED);
    expect(p.reapDeadClients()).toBe(0);
    await waiting.worker.terminate();
    expect(await threadReleased(waiting.tid)).toBe(true);
    expect(p.reapDeadClients()).toBe(1);
    expect(peek.mask(slot)).toBe(0n);
    expect(p.tryEvict(d)).toBe(STATUS.OK);
    p.close();
    unlinkJsTable(name);
  });

  it('reaps entries whose thread is gone or reused, and a reap whose reaper\'s thread is gone; keeps live threads\' entries', async () => {
    const name = uniqueName();
    const p = open(name, false, 16);
    const peek = new Peek(jsTableBuffer(p)!);
    const ns = peek.clientField64(p.clientIndex, CLIENT_FIELD.PID_NS);
    const start = peek.clientField64(p.clientIndex, CLIENT_FIELD.START_TIME);
    const live = await holder('wait');
    const dead = await holder('spin');
    await dead.worker.terminate();
    expect(await threadReleased(dead.tid)).toBe(true);
    const ofThread = (i: number, word: bigint, tid: number, tidStart: bigint): void => {
      peek.setClient(i, word, start, ns);
      peek.view.setUint32(CLIENTS_OFFSET + i * CLIENT_SIZE + OS_THREAD, tid, true);
      peek.view.setBigUint64(CLIENTS_OFFSET + i * CLIENT_SIZE + OS_THREAD_START, tidStart, true);
    };
    // 10: REAPING, its reaper client 12 (serial 9) a thread that is gone; 11: CLAIMING by a gone
    // thread (its tid where the pid goes); 12: ACTIVE, its thread gone; 13: ACTIVE, its tid alive
    // under another start time (reused); 14: ACTIVE, a live thread; 15: CLAIMING by a live thread.
    const REAPER_NAMED = 1 << 21;
    ofThread(10, clientWord(CLIENT_STATE.REAPING, REAPER_NAMED | (9 << 6) | 12, 4n), 0, 0n);
    ofThread(11, clientWord(CLIENT_STATE.CLAIMING, dead.tid, 5n), 0, 0n);
    ofThread(12, clientWord(CLIENT_STATE.ACTIVE, process.pid, 9n), dead.tid, dead.startTime);
    ofThread(13, clientWord(CLIENT_STATE.ACTIVE, process.pid, 6n), live.tid, live.startTime + 1n);
    ofThread(14, clientWord(CLIENT_STATE.ACTIVE, process.pid, 7n), live.tid, live.startTime);
    ofThread(15, clientWord(CLIENT_STATE.CLAIMING, live.tid, 8n), 0, 0n);
    const all = [10, 11, 12, 13, 14, 15].reduce((m, c) => m | (1n << BigInt(c)), 0n);
    peek.setMask(3, all);

    expect(p.reapDeadClients()).toBe(4);
    for (const [i, serial] of [[10, 4n], [11, 5n], [12, 9n], [13, 6n]] as const) expect(peek.clientWord(i)).toBe(serial << 24n);
    expect(clientState(peek.clientWord(14))).toBe(CLIENT_STATE.ACTIVE);
    expect(clientState(peek.clientWord(15))).toBe(CLIENT_STATE.CLAIMING);
    expect(peek.mask(3)).toBe((1n << 14n) | (1n << 15n));
    expect(p.reapDeadClients()).toBe(0);
    await live.worker.terminate();
    expect(await threadReleased(live.tid)).toBe(true);
    expect(p.reapDeadClients()).toBe(2);
    expect(peek.mask(3)).toBe(0n);
    p.close();
    unlinkJsTable(name);
  });

  it('two consumer workers pin and unpin while the producer evicts and republishes: no violation', async () => {
    const name = uniqueName();
    const capacity = 16;
    const keyCount = 12; // in 16 slots: evicted slots are taken by other keys
    const p = open(name, true, capacity);
    const buffer = jsTableBuffer(p)!;
    const peek = new Peek(buffer);
    const digests = Array.from({ length: keyCount }, (_, i) => sha(`worker-key-${i}`));
    const present = digests.map((d, i) => p.reserve(d) === STATUS.OK && p.publish(Number(p.out[0]), p.out[1]!, meta(i)) === STATUS.OK);
    expect(present.some(Boolean)).toBe(true);

    // control: [0] stop, [1] workers ready, [2 + w] attempts of worker w, [4 + w] worker w exited.
    const control = new Int32Array(new SharedArrayBuffer(64));
    const workers = [0, 1].map(
      (id) =>
        new Worker(pathToFileURL(join(dir, 'pinner.js')), {
          workerData: { name, buffer, control, id, digests },
        }),
    );
    const results = workers.map(
      (w) =>
        new Promise<WorkerResult>((resolve, reject) => {
          w.once('message', resolve);
          w.once('error', reject);
          w.once('exit', (code) => reject(new Error(`worker exited with ${code} before reporting`)));
        }),
    );
    while (Atomics.load(control, 1) < 2 && Atomics.load(control, 4) === 0 && Atomics.load(control, 5) === 0) {
      await new Promise((r) => setTimeout(r, 2));
    }

    const counts = { evicted: 0, pinned: 0, republished: 0, full: 0, deviceWrites: 0 };
    const minRounds = 300_000;
    const minAttempts = 100_000;
    let round = 0;
    let x = 12345;
    const progress = (w: number): number => Atomics.load(control, 2 + w);
    const exited = (): boolean => Atomics.load(control, 4) !== 0 || Atomics.load(control, 5) !== 0;
    while ((round < minRounds || progress(0) < minAttempts || progress(1) < minAttempts) && round < 20_000_000 && !exited()) {
      round++;
      x = (Math.imul(x, 1103515245) + 12345) >>> 0;
      const k = x % keyCount;
      const rc = p.tryEvict(digests[k]!);
      if (rc === STATUS.OK) counts.evicted++;
      else if (rc === STATUS.PINNED) counts.pinned++;
      else if (rc === STATUS.ABSENT) {
        // Republish an absent key: it may land in a slot another key just left.
        const r = p.reserve(digests[k]!);
        if (r === STATUS.FULL) counts.full++;
        else {
          expect(r).toBe(STATUS.OK);
          expect(p.publish(Number(p.out[0]), p.out[1]!, meta(k))).toBe(STATUS.OK);
          counts.republished++;
          if (round % 3 === 0) {
            // The record the workers' device pins of key k ask for (arena and generation k).
            expect(p.recordDeviceWrite(digests[k]!, deviceRecord(k, BigInt(k), BigInt(k), BigInt(round)))).toBe(STATUS.OK);
            counts.deviceWrites++;
          }
        }
      } else throw new Error(`tryEvict returned ${rc}`);
    }
    Atomics.store(control, 0, 1);
    const reports = await Promise.all(results);

    for (const r of reports) {
      expect(r.openStatus).toBe(STATUS.OK);
      expect(r.violations).toEqual([]);
      expect(r.hits).toBeGreaterThan(0);
      expect(r.attempts).toBeGreaterThanOrEqual(minAttempts);
    }
    expect(counts.evicted).toBeGreaterThan(0);
    expect(counts.republished).toBeGreaterThan(0);
    // The workers closed: every pin mask is 0 and only the producer is registered.
    for (let s = 0; s < capacity; s++) expect(peek.mask(s)).toBe(0n);
    for (let i = 0; i < MAX_CLIENTS; i++) {
      expect(clientState(peek.clientWord(i))).toBe(i === p.clientIndex ? CLIENT_STATE.ACTIVE : CLIENT_STATE.FREE);
    }
    for (const r of reports) expect(r.threadId).not.toBe(threadId);
    // Everything evicts now.
    for (const d of digests) expect([STATUS.OK, STATUS.ABSENT]).toContain(p.tryEvict(d));
    p.close();
    unlinkJsTable(name);
  });
});

interface WorkerResult {
  openStatus: number;
  threadId: number;
  attempts: number;
  hits: number;
  deviceHits: number;
  misses: Record<string, number>;
  violations: string[];
}

/**
 * The pinner worker. A violation is a lease whose metadata names another key, a lease on a slot
 * that does not hold the key's digest, or a slot whose generation changes while it is pinned.
 */
const PINNER = `
import { threadId, workerData, parentPort } from 'node:worker_threads';
import { openJsHandle } from './js-handle.js';
import { SLOTS_OFFSET, SLOT_SIZE, SLOT } from './layout.js';

const { name, buffer, control, id, digests } = workerData;
const report = { openStatus: -1, threadId, attempts: 0, hits: 0, deviceHits: 0, misses: {}, violations: [] };
try {
  const opened = openJsHandle({ name, producer: false, createCapacity: 0, buffer });
  report.openStatus = opened.status;
  Atomics.add(control, 1, 1);
  if (opened.status === 0) {
    const h = opened.handle;
    const out = h.out;
    const u64 = new BigUint64Array(buffer, 0, buffer.byteLength >> 3);
    const bytes = new Uint8Array(buffer);
    const K = digests.length;
    // Device targets as the test's deviceRecord(k, k, k) builds them.
    const targets = digests.map((_, k) => {
      const r = new Uint8Array(40);
      for (let b = 0; b < 16; b++) r[b] = (k + b) & 0xff;
      const v = new DataView(r.buffer);
      v.setBigUint64(16, BigInt(k), true);
      v.setBigUint64(24, BigInt(k), true);
      return r;
    });
    const violation = (text) => { if (report.violations.length < 20) report.violations.push(text); };
    const check = (k, slot, generation) => {
      const sg = Atomics.load(u64, (SLOTS_OFFSET + slot * SLOT_SIZE + SLOT.STATE_GEN) >> 3);
      if (sg >> 8n !== generation) violation('slot ' + slot + ' generation ' + (sg >> 8n) + ' while pinned at ' + generation);
      const state = Number(sg & 0xffn);
      if (state !== 2 && state !== 3) violation('slot ' + slot + ' state ' + state + ' while pinned');
      const at = SLOTS_OFFSET + slot * SLOT_SIZE + SLOT.DIGEST;
      for (let b = 0; b < 32; b++) {
        if (bytes[at + b] !== digests[k][b]) { violation('slot ' + slot + ' lost the digest of key ' + k + ' while pinned'); break; }
      }
    };
    let i = 0;
    while (Atomics.load(control, 0) === 0) {
      const k = (i * 5 + id * 3) % K;
      i++;
      const device = i % 7 === 0 ? targets[k] : null;
      const rc = h.tryPin(digests[k], device);
      if (rc === 0) {
        report.hits++;
        if (device) report.deviceHits++;
        const slot = Number(out[0]);
        const generation = out[1];
        const token = out[2];
        if (out[4] !== BigInt(k)) violation('key ' + k + ' leased with meta.location ' + out[4]);
        check(k, slot, generation);
        if (i % 4 === 0) {
          // The holder's second pin on the same key, released in the other order.
          if (h.tryPin(digests[k], null) === 0) {
            if (Number(out[0]) !== slot || out[1] !== generation || out[4] !== BigInt(k)) violation('second pin of key ' + k + ' differs');
            h.unpin(slot, Number(BigInt.asUintN(32, token)), Number(token >> 32n));
            check(k, slot, generation);
            h.unpin(slot, Number(BigInt.asUintN(32, out[2])), Number(out[2] >> 32n));
          } else violation('holder of key ' + k + ' could not pin it again');
        } else {
          for (let spin = 0; spin < 20; spin++) check(k, slot, generation);
          h.unpin(slot, Number(BigInt.asUintN(32, token)), Number(token >> 32n));
          if (i % 8 === 1) h.unpin(slot, Number(BigInt.asUintN(32, token)), Number(token >> 32n)); // a second unpin releases nothing
        }
        if (h.clientPins(slot) !== 0) violation('slot ' + slot + ' still counted after unpin');
      } else {
        report.misses[rc] = (report.misses[rc] ?? 0) + 1;
      }
      Atomics.store(control, 2 + id, i);
    }
    report.attempts = i;
    h.close();
  }
} catch (error) {
  report.violations.push('worker threw: ' + (error && error.stack || error));
} finally {
  Atomics.store(control, 4 + id, 1);
  parentPort.postMessage(report);
}
`;

interface Held {
  worker: Worker;
  status: number;
  pin: number;
  client: number;
  tid: number;
  startTime: bigint;
}

/**
 * Opens the table and pins when given one, reports its OS thread id, then holds until terminated:
 * blocked in Atomics.wait ('wait') or in a synchronous loop ('spin'), running nothing else.
 */
const HOLDER = `
import { readlinkSync } from 'node:fs';
import { workerData, parentPort } from 'node:worker_threads';
import { openJsHandle } from './js-handle.js';
const { name, buffer, digest, hold, control } = workerData;
const opened = buffer ? openJsHandle({ name, producer: false, createCapacity: 0, buffer }) : null;
const h = opened && opened.handle;
parentPort.postMessage({
  status: opened ? opened.status : -1,
  pin: h ? h.tryPin(digest, null) : -1,
  client: h ? h.clientIndex : -1,
  tid: Number(readlinkSync('/proc/thread-self').split('/')[2]),
});
if (hold === 'wait') for (;;) Atomics.wait(control, 0, 0);
for (;;);
`;

/** Opens the table, pins, reports, and ends without closing its handle. */
const LEAVER = `
import { workerData, parentPort } from 'node:worker_threads';
import { openJsHandle } from './js-handle.js';
import { SLOTS_OFFSET, SLOT_SIZE, SLOT } from './layout.js';
const { name, buffer, digest } = workerData;
const opened = openJsHandle({ name, producer: false, createCapacity: 0, buffer });
const h = opened.handle;
const pin = h ? h.tryPin(digest, null) : -1;
const slot = h ? Number(h.out[0]) : 0;
const mask = new BigUint64Array(buffer, 0, buffer.byteLength >> 3)[(SLOTS_OFFSET + slot * SLOT_SIZE + SLOT.PIN_MASK) >> 3];
parentPort.postMessage({ status: opened.status, pin, mask: String(mask), client: h ? h.clientIndex : -1 });
`;
