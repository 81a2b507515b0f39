// Arena records under hostile input (lib/lease-table/arena-record.ts, lib/lease-table/arena-directory.ts,
// docs/arena-records.md): whatever sits at an arena's path (a FIFO, a directory, a link, a sparse
// file announcing gigabytes) is a mismatch value, returned without blocking or allocating; a
// malformed meta or argument is ERR_INVALID_ARGUMENT before the file is opened; a lease's meta
// from either table implementation is read as it comes; and an arena directory is created or
// accepted only under the lease table's trust rules (ERR_UNTRUSTED_ARENA otherwise).
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, closeSync, ftruncateSync, mkdirSync, mkdtempSync, openSync, rmSync, statSync, symlinkSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  MAX_ARENA_RECORD_PAYLOAD_BYTES,
  WaitprepError,
  arenaDirectory,
  arenaLocation,
  arenaPath,
  checkArenaDirectory,
  checkRecordHeader,
  decodeRecordHeader,
  encodeArenaRecord,
  encodeRecordHeader,
  ensureArenaDirectory,
  openLeaseTable,
  readArenaRecord,
  unlinkLeaseTable,
  type ArenaRecordHeader,
  type LeaseTable,
} from '../../lib/index.js';
import { ROOT } from '../as-nobody.js';
import { makeKey } from '../helpers.js';
import { NATIVE, runsIf } from '../skip-reasons.js';

const roots: string[] = [];
const children: ChildProcess[] = [];
const tables: LeaseTable[] = [];
const tableNames: string[] = [];
afterEach(() => {
  for (const child of children.splice(0)) child.kill('SIGKILL');
  for (const table of tables.splice(0)) table.close();
  for (const name of tableNames.splice(0)) unlinkLeaseTable(name);
  for (const root of roots.splice(0)) rmSync(root, { recursive: true, force: true });
});
function root(): string {
  const dir = mkdtempSync(join(tmpdir(), 'wp-arena-hostile-'));
  roots.push(dir);
  return dir;
}
const hasMkfifo = spawnSync('mkfifo', ['--version']).status === 0;
const mkfifo = (path: string): void => {
  const made = spawnSync('mkfifo', [path]);
  if (made.status !== 0) throw new Error(`mkfifo ${path}: ${made.stderr}`);
};
const refusal = (call: () => unknown): WaitprepError => {
  try {
    call();
  } catch (e) {
    if (e instanceof WaitprepError) return e;
    throw e;
  }
  throw new Error('expected a WaitprepError');
};

/** Table `t`'s arena 0 under a fresh root, holding one record of key 1; its key, meta and path. */
function oneRecord(payload: Buffer = Buffer.from('eleven byte')) {
  const dir = root();
  const key = makeKey(1);
  const { bytes, header } = encodeArenaRecord(key, payload, { format: 'raw' });
  mkdirSync(arenaDirectory('t', dir));
  writeFileSync(arenaPath('t', 0, dir), bytes);
  return { dir, key, meta: { location: arenaLocation(0, 0), sizeBytes: payload.length, checksum: header.checksum }, path: arenaPath('t', 0, dir) };
}

describe('readArenaRecord: what sits at the arena path', () => {
  it.runIf(runsIf('a FIFO as the arena', [hasMkfifo, 'mkfifo is not installed']))('a FIFO is no-arena at once, never a wait for a writer', () => {
    const { dir, key, meta, path } = oneRecord();
    rmSync(path);
    mkfifo(path);
    // A blocking open would wait for a writer for ever: this child is one, after 3 s, so that a
    // reader that blocks ends (and fails the test) instead of hanging the run. A reader that did
    // not block has left by then, and the child's nonblocking open finds no reader and exits.
    const rescuer = spawn(process.execPath, ['-e', `const fs = require('node:fs'); setTimeout(() => { try { fs.closeSync(fs.openSync(${JSON.stringify(path)}, fs.constants.O_WRONLY | fs.constants.O_NONBLOCK)); } catch {} }, 3000);`], { stdio: 'ignore' });
    children.push(rescuer);
    const got = readArenaRecord({ tableName: 't', key, meta, root: dir });
    expect(got).toMatchObject({ kind: 'mismatch', reason: 'no-arena' });
    expect((got as { message: string }).message).toContain('FIFO');
  });

  it('a directory is no-arena, not an exception', () => {
    const { dir, key, meta, path } = oneRecord();
    rmSync(path);
    mkdirSync(path);
    const got = readArenaRecord({ tableName: 't', key, meta, root: dir });
    expect(got).toMatchObject({ kind: 'mismatch', reason: 'no-arena' });
    expect((got as { message: string }).message).toContain('directory');
  });

  it('a symbolic link is never followed, even to a record that would belong', () => {
    const { dir, key, meta, path } = oneRecord();
    const elsewhere = join(dir, 'elsewhere.wpa');
    writeFileSync(elsewhere, encodeArenaRecord(key, Buffer.from('eleven byte'), { format: 'raw' }).bytes);
    rmSync(path);
    symlinkSync(elsewhere, path);
    const got = readArenaRecord({ tableName: 't', key, meta, root: dir });
    expect(got).toMatchObject({ kind: 'mismatch', reason: 'no-arena' });
    expect((got as { message: string }).message).toContain('symbolic link');
  });

  it('a sparse file announcing 5 GiB is out-of-bounds before anything is allocated, with or without sizeBytes', () => {
    const { dir, key, meta, path } = oneRecord();
    const huge = 5n * 2n ** 30n;
    const fd = openSync(path, 'w');
    writeSync(fd, encodeRecordHeader({ digest: key, payloadLength: huge, tokenCount: 1, format: 'raw', checksum: 0 }));
    ftruncateSync(fd, 96 + Number(huge)); // sparse: no page of it is written
    closeSync(fd);
    const before = process.memoryUsage().arrayBuffers;
    for (const m of [{ location: meta.location }, { location: meta.location, sizeBytes: huge }]) {
      const got = readArenaRecord({ tableName: 't', key, meta: m, root: dir });
      expect(got).toMatchObject({ kind: 'mismatch', reason: 'out-of-bounds' });
      expect((got as { message: string }).message).toContain(String(MAX_ARENA_RECORD_PAYLOAD_BYTES));
    }
    expect(process.memoryUsage().arrayBuffers - before).toBeLessThan(64 * 2 ** 20);
  });

  it('a payload over the maximum is out-of-bounds even where the file holds it', () => {
    const { dir, key, meta, path } = oneRecord();
    const over = BigInt(MAX_ARENA_RECORD_PAYLOAD_BYTES) + 1n;
    const fd = openSync(path, 'w');
    writeSync(fd, encodeRecordHeader({ digest: key, payloadLength: over, tokenCount: 1, format: 'raw', checksum: 0 }));
    ftruncateSync(fd, 96 + Number(over));
    closeSync(fd);
    expect(readArenaRecord({ tableName: 't', key, meta: { location: meta.location }, root: dir })).toMatchObject({ reason: 'out-of-bounds' });
  });
});

describe('readArenaRecord: malformed arguments', () => {
  it('a meta field that is not a u64 is ERR_INVALID_ARGUMENT naming it, whatever the file holds', () => {
    const { dir, key, meta } = oneRecord();
    const bad: Array<[string, Record<string, unknown>]> = [];
    for (const value of [1.5, Number.NaN, -1, '11', true, {}, 2 ** 64, Infinity, null]) {
      bad.push(['meta.sizeBytes', { ...meta, sizeBytes: value }], ['meta.checksum', { ...meta, checksum: value }], ['meta.location', { ...meta, location: value }]);
    }
    bad.push(['meta.location', { sizeBytes: 11 }], ['meta.sizeBytes', { ...meta, sizeBytes: -1n }], ['meta.checksum', { ...meta, checksum: 1n << 64n }]);
    for (const [field, m] of bad) {
      const e = refusal(() => readArenaRecord({ tableName: 't', key, meta: m as never, root: dir }));
      expect([e.code, e.field], `${field} = ${String(m[field.slice(5)])}`).toEqual(['ERR_INVALID_ARGUMENT', field]);
    }
    for (const m of [null, undefined, 'x', 7]) {
      expect(refusal(() => readArenaRecord({ tableName: 't', key, meta: m as never, root: dir }))).toMatchObject({ code: 'ERR_INVALID_ARGUMENT', field: 'meta' });
    }
  });

  it('the other arguments are checked before the file is opened', () => {
    const { dir, key, meta } = oneRecord();
    const missing = { ...meta, location: arenaLocation(9, 0) }; // no such arena: a value, unless an argument is wrong
    expect(readArenaRecord({ tableName: 't', key, meta: missing, root: dir })).toMatchObject({ reason: 'no-arena' });
    const cases: Array<[string, Record<string, unknown>]> = [
      ['key', { key: new Uint8Array(31) }],
      ['key', { key: 'not a key' }],
      ['root', { root: 5 }],
      ['root', { root: '' }],
      ['verifyChecksum', { verifyChecksum: 'no' }],
      ['tableName', { tableName: '../t' }],
    ];
    for (const [field, over] of cases) {
      const e = refusal(() => readArenaRecord({ tableName: 't', key, meta: missing, root: dir, ...over } as never));
      expect([e.code, e.field], field).toEqual(['ERR_INVALID_ARGUMENT', field]);
    }
    expect(refusal(() => readArenaRecord(null as never))).toMatchObject({ code: 'ERR_INVALID_ARGUMENT', field: 'options' });
  });

  it('checkRecordHeader refuses a malformed meta or header instead of comparing it', () => {
    const { key, meta } = oneRecord();
    const header = decodeRecordHeader(encodeArenaRecord(key, Buffer.from('eleven byte'), { format: 'raw' }).bytes) as ArenaRecordHeader;
    expect(checkRecordHeader(header, key, meta)).toBeNull();
    for (const sizeBytes of ['11', 11.5, true]) {
      expect(refusal(() => checkRecordHeader(header, key, { ...meta, sizeBytes } as never))).toMatchObject({ code: 'ERR_INVALID_ARGUMENT', field: 'meta.sizeBytes' });
    }
    expect(refusal(() => checkRecordHeader({ digest: 'x' } as never, key, meta))).toMatchObject({ code: 'ERR_INVALID_ARGUMENT', field: 'header' });
  });
});

const IMPLEMENTATIONS = [
  ['native', runsIf('arena records through a native lease', NATIVE)],
  ['js', true],
] as const;

describe.each(IMPLEMENTATIONS)('a lease meta from the %s table', (impl, runs) => {
  it.runIf(runs)('is read as it comes, and a directory at its arena is still a value', () => {
    const dir = root();
    const name = `wp-arena-hostile-${process.pid}-${impl}`;
    const producer = openLeaseTable({ name, role: 'producer', create: { capacity: 16 }, implementation: impl });
    tables.push(producer);
    if (impl === 'native') tableNames.push(name);
    const keys = [makeKey(21), makeKey(22)];
    mkdirSync(arenaDirectory(name, dir));
    const payload = Buffer.from('bytes a consumer loads');
    const record = encodeArenaRecord(keys[0]!, payload, { format: 'raw' });
    writeFileSync(arenaPath(name, 0, dir), record.bytes);
    mkdirSync(arenaPath(name, 1, dir));
    keys.forEach((key, i) => {
      producer.publish(producer.reserve(key), { sizeBytes: payload.length, location: arenaLocation(i, 0), checksum: record.header.checksum, codecId: 0, representationVersion: 1 });
    });
    const answers = keys.map((key) => {
      const lease = producer.tryPin(key);
      if (lease.kind !== 'lease') throw new Error(`expected a lease, got ${lease.reason}`);
      try {
        return readArenaRecord({ tableName: name, key, meta: lease.meta, root: dir });
      } finally {
        lease.close();
      }
    });
    expect(answers[0]).toMatchObject({ kind: 'record' });
    expect((answers[0] as { payload: Buffer }).payload.equals(payload)).toBe(true);
    expect(answers[1]).toMatchObject({ kind: 'mismatch', reason: 'no-arena' });
  });
});

describe('the arena directory under the table trust rules', () => {
  it('is created owner-writable only, and found again trusted', () => {
    const dir = root();
    expect(checkArenaDirectory('t', { root: dir })).toBe(false);
    const made = ensureArenaDirectory('t', { root: dir });
    expect(made).toBe(arenaDirectory('t', dir));
    expect(statSync(made).mode & 0o777).toBe(0o755 & ~process.umask());
    writeFileSync(join(made, '0.wpa'), 'x', { mode: 0o644 });
    expect(checkArenaDirectory('t', { root: dir })).toBe(true);
    expect(ensureArenaDirectory('t', { root: dir })).toBe(made);
  });

  it('refuses a link, a group- or world-writable directory, and entries that are not trusted regular files', () => {
    const cases: Array<[string, (arena: string, dir: string) => void, string]> = [
      ['a link to a directory', (arena, dir) => { mkdirSync(join(dir, 'real')); symlinkSync(join(dir, 'real'), arena); }, 'symbolic link'],
      ['a group-writable directory', (arena) => { mkdirSync(arena); chmodSync(arena, 0o775); }, 'mode 0o775'],
      ['a world-writable directory', (arena) => { mkdirSync(arena); chmodSync(arena, 0o757); }, 'mode 0o757'],
      ['a file, not a directory', (arena) => writeFileSync(arena, ''), 'not a directory'],
      ['a linked entry', (arena) => { mkdirSync(arena); symlinkSync('/etc/passwd', join(arena, '0.wpa')); }, 'symbolic link'],
      ['a world-writable entry', (arena) => { mkdirSync(arena); writeFileSync(join(arena, '0.wpa'), ''); chmodSync(join(arena, '0.wpa'), 0o666); }, 'mode 0o666'],
      ['a directory entry', (arena) => { mkdirSync(arena); mkdirSync(join(arena, '0.wpa')); }, 'not a regular file'],
      ...(hasMkfifo ? [['a FIFO entry', (arena: string) => { mkdirSync(arena); mkfifo(join(arena, '0.wpa')); }, 'not a regular file'] as [string, (arena: string, dir: string) => void, string]] : []),
    ];
    for (const [what, plant, says] of cases) {
      const dir = root();
      const arena = arenaDirectory('t', dir);
      plant(arena, dir);
      for (const call of [() => checkArenaDirectory('t', { root: dir }), () => ensureArenaDirectory('t', { root: dir })]) {
        const e = refusal(call);
        expect(e.code, what).toBe('ERR_UNTRUSTED_ARENA');
        expect(e.message, what).toContain(says);
      }
    }
  });

  it('refuses a root others may write without the sticky bit, before creating anything in it', () => {
    const dir = root();
    chmodSync(dir, 0o777);
    expect(refusal(() => ensureArenaDirectory('t', { root: dir })).code).toBe('ERR_UNTRUSTED_ARENA');
    expect(checkArenaDirectory.bind(null, 't', { root: join(dir, 'absent') })()).toBe(false);
    expect(() => statSync(arenaDirectory('t', dir))).toThrow();
    chmodSync(dir, 0o1777); // as /dev/shm and /tmp: others cannot rename what is ours
    expect(ensureArenaDirectory('t', { root: dir })).toBe(arenaDirectory('t', dir));
  });

  it('accepts group write bits when trusted, as a table open does', () => {
    const dir = root();
    mkdirSync(arenaDirectory('t', dir));
    chmodSync(arenaDirectory('t', dir), 0o775);
    expect(checkArenaDirectory('t', { root: dir, trust: { groupWritable: true } })).toBe(true);
    expect(refusal(() => ensureArenaDirectory('u', { root: dir, mode: 0o775 }))).toMatchObject({ code: 'ERR_INVALID_ARGUMENT', field: 'options.mode' });
  });

  it.runIf(runsIf('an arena directory of another uid', ROOT))('refuses a directory or entry of another uid unless that uid is trusted', () => {
    const dir = root();
    const arena = arenaDirectory('t', dir);
    mkdirSync(arena);
    chownSync(arena, 65534, 65534);
    expect(refusal(() => ensureArenaDirectory('t', { root: dir })).message).toContain('owned by uid 65534');
    expect(ensureArenaDirectory('t', { root: dir, trust: { uid: 65534 } })).toBe(arena);
    chownSync(arena, 0, 0);
    writeFileSync(join(arena, '3.wpa'), '');
    chownSync(join(arena, '3.wpa'), 65534, 65534);
    expect(refusal(() => checkArenaDirectory('t', { root: dir })).message).toContain('3.wpa is owned by uid 65534');
  });

  it('refuses malformed arguments', () => {
    const dir = root();
    const cases: Array<[() => unknown, string]> = [
      [() => ensureArenaDirectory('../x', { root: dir }), 'tableName'],
      [() => ensureArenaDirectory('t', { root: 5 as never }), 'options.root'],
      [() => ensureArenaDirectory('t', { root: dir, mode: 0o600 }), 'options.mode'],
      [() => ensureArenaDirectory('t', { root: dir, mode: 1.5 }), 'options.mode'],
      [() => checkArenaDirectory('t', { root: dir, trust: { groupWritable: 'yes' } as never }), 'options.trust.groupWritable'],
      [() => checkArenaDirectory('t', 'x' as never), 'options'],
    ];
    for (const [call, field] of cases) expect(refusal(call), field).toMatchObject({ code: 'ERR_INVALID_ARGUMENT', field });
  });
});
