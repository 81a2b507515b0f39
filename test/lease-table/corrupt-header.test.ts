// A header overwritten after the table was opened (its capacity, or its producer word) makes
// inspect() and summary() fail with ERR_BAD_SEGMENT, in both implementations: never a RangeError,
// a listing of the wrong number of slots, or a producer index outside 0-63. Both read with the
// capacity fixed at open. The native table is corrupted through its file in /dev/shm (the same
// pages the handle maps), the fallback through its SharedArrayBuffer.
import { closeSync, openSync, readFileSync, writeSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { openLeaseTable, unlinkLeaseTable, WaitprepError, type LeaseTable } from '../../lib/index.js';
import { inspectSegment } from '../../lib/lease-table/inspect.js';
import { HDR, segmentSize } from '../../lib/lease-table/layout.js';
import { makeKey } from '../helpers.js';
import { NATIVE, runsIf } from '../skip-reasons.js';

const CAPACITY = 16;
let serial = 0;
let open: { table: LeaseTable; name: string; native: boolean }[] = [];
afterEach(() => {
  for (const { table, name, native } of open) {
    table.close();
    if (native) unlinkLeaseTable(name);
  }
  open = [];
});

interface Subject {
  table: LeaseTable;
  /** Writes `bytes` over the shared header at `offset`. */
  poke(offset: number, bytes: Uint8Array): void;
  /** A copy of the whole segment as it is now. */
  copy(): Uint8Array;
}

function openSubject(native: boolean): Subject {
  const name = `waitprep-corrupt-${process.pid}-${serial++}`;
  const table = openLeaseTable({ name, role: 'producer', create: { capacity: CAPACITY }, implementation: native ? 'native' : 'js' });
  open.push({ table, name, native });
  table.publish(table.reserve(makeKey(1)), { sizeBytes: 4096, location: 5, checksum: 7, codecId: 1, representationVersion: 1 });
  if (native) {
    return {
      table,
      poke(offset, bytes) {
        const fd = openSync(`/dev/shm/${name}`, 'r+');
        try {
          writeSync(fd, bytes, 0, bytes.length, offset);
        } finally {
          closeSync(fd);
        }
      },
      copy: () => new Uint8Array(readFileSync(`/dev/shm/${name}`)),
    };
  }
  const shared = new Uint8Array(table.sharedBuffer!);
  return { table, poke: (offset, bytes) => shared.set(bytes, offset), copy: () => shared.slice() };
}

const u32 = (v: number) => new Uint8Array(new Uint32Array([v]).buffer);
const u64 = (v: bigint) => new Uint8Array(new BigUint64Array([v]).buffer);

/** The WaitprepError code `call` throws (a RangeError or no throw fails the test). */
function codeOf(call: () => unknown): string {
  try {
    call();
  } catch (e) {
    expect(e).toBeInstanceOf(WaitprepError);
    return (e as WaitprepError).code;
  }
  return 'no error';
}

const corruptions: [string, number, Uint8Array][] = [
  ['capacity 0', HDR.CAPACITY, u32(0)],
  ['capacity 2^32-1', HDR.CAPACITY, u32(0xffff_ffff)],
  ['capacity doubled (past the mapping)', HDR.CAPACITY, u32(CAPACITY * 2)],
  ['capacity 1 (fewer slots than mapped)', HDR.CAPACITY, u32(1)],
  ['producer index 64', HDR.PRODUCER, u64(65n)],
  ['producer index 254', HDR.PRODUCER, u64(0xffn)],
  ['producer word without an index', HDR.PRODUCER, u64(0x100n)],
];

for (const native of [false, true]) {
  const label = native ? 'native' : 'js fallback';
  const run = native ? runsIf('corrupt header (native)', NATIVE) : true;
  describe.runIf(run)(`${label}: a header corrupted after open`, () => {
    for (const [what, offset, bytes] of corruptions) {
      it(`${what}: inspect() and summary() are ERR_BAD_SEGMENT, and a restored header reads again`, () => {
        const { table, poke, copy } = openSubject(native);
        const before = table.inspect();
        const original = copy().slice(offset, offset + bytes.length);
        poke(offset, bytes);
        expect(codeOf(() => table.inspect())).toBe('ERR_BAD_SEGMENT');
        expect(codeOf(() => table.summary())).toBe('ERR_BAD_SEGMENT');
        poke(offset, original);
        expect(table.inspect()).toEqual(before);
        expect(table.summary()).toMatchObject({ capacity: CAPACITY, slots: { ready: 1 } });
      });
    }
  });
}

describe('inspectSegment of a copy read without opening it', () => {
  it('checks the header capacity against the copy length and refuses a short copy', () => {
    const bytes = new Uint8Array(segmentSize(4));
    new DataView(bytes.buffer).setUint32(HDR.CAPACITY, 4, true);
    expect(inspectSegment(bytes).capacity).toBe(4);
    new DataView(bytes.buffer).setUint32(HDR.CAPACITY, 5, true);
    expect(codeOf(() => inspectSegment(bytes))).toBe('ERR_BAD_SEGMENT');
    expect(codeOf(() => inspectSegment(bytes.subarray(0, 100)))).toBe('ERR_BAD_SEGMENT');
    expect(codeOf(() => inspectSegment(bytes, 4))).toBe('ERR_BAD_SEGMENT');
  });
});

describe.runIf(runsIf('segment of another ABI (native)', NATIVE))('native: a segment made by ABI 1', () => {
  it('is refused at open with ERR_BAD_SEGMENT naming the version that made it', () => {
    const name = `waitprep-corrupt-${process.pid}-${serial++}`;
    openLeaseTable({ name, role: 'producer', create: { capacity: CAPACITY }, implementation: 'native' }).close();
    try {
      const fd = openSync(`/dev/shm/${name}`, 'r+');
      writeSync(fd, u32(1), 0, 4, HDR.ABI_VERSION);
      closeSync(fd);
      let error: unknown = null;
      try {
        openLeaseTable({ name, role: 'consumer', implementation: 'native' }).close();
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(WaitprepError);
      expect((error as WaitprepError).code).toBe('ERR_BAD_SEGMENT');
      expect((error as WaitprepError).message).toContain('made by ABI version 1');
    } finally {
      unlinkLeaseTable(name);
    }
  });
});
