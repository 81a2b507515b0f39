// Arena records (lib/lease-table/arena-record.ts, docs/arena-records.md): the location split, the arena
// naming rule, the 96-byte header (the worked example's bytes, which the Python side also
// writes), and a reader that hands out a payload only when it belongs to the key and the meta;
// and a record Node writes read back by the Python package.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, truncateSync, writeFileSync, openSync, writeSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  ARENA_RECORD_HEADER_BYTES,
  MAX_ARENA_INDEX,
  MAX_ARENA_OFFSET,
  arenaDirectory,
  arenaLocation,
  arenaPath,
  artifactKey,
  checkRecordHeader,
  decodeRecordHeader,
  encodeArenaRecord,
  encodeRecordHeader,
  isArenaFileName,
  readArenaRecord,
  recordChecksum,
  splitLocation,
  type ArenaRecordHeader,
} from '../../lib/index.js';
import { makeKey } from '../helpers.js';
import { runsIf } from '../skip-reasons.js';

/** The worked example of docs/arena-records.md: digest SHA-256("waitprep"), payload "hello arena", 2 tokens, format bf16/NHD. */
const EXAMPLE_DIGEST = new Uint8Array(createHash('sha256').update('waitprep').digest());
const EXAMPLE_HEADER =
  '5750415201006000c0567d5ebeed3882d0a1ce75d45cf397eee6de82bfab7db697f04caca15870760b000000000000000200000000000000' +
  '626631362f4e484400000000000000000000000000000000fcb96c5cafa683370000000000000000';

const roots: string[] = [];
afterEach(() => {
  for (const root of roots.splice(0)) rmSync(root, { recursive: true, force: true });
});
function root(): string {
  const dir = mkdtempSync(join(tmpdir(), 'wp-arena-test-'));
  roots.push(dir);
  return dir;
}

describe('arena locations and names', () => {
  it('puts the arena index in the top 16 bits and the offset in the low 48', () => {
    expect(arenaLocation(3, 4096)).toBe((3n << 48n) | 4096n);
    expect(splitLocation((3n << 48n) | 4096n)).toEqual({ arena: 3, offset: 4096n });
    expect(splitLocation(arenaLocation(MAX_ARENA_INDEX, MAX_ARENA_OFFSET))).toEqual({ arena: MAX_ARENA_INDEX, offset: MAX_ARENA_OFFSET });
    expect(splitLocation(7)).toEqual({ arena: 0, offset: 7n });
    for (const [arena, offset, field] of [[MAX_ARENA_INDEX + 1, 0, 'arena'], [-1, 0, 'arena'], [0, 2 ** 48, 'offset'], [0, -1, 'offset'], [0, 0.5, 'offset']] as const) {
      expect(() => arenaLocation(arena, offset)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', field }));
    }
    expect(() => splitLocation(-1)).toThrow(expect.objectContaining({ field: 'location' }));
    expect(() => splitLocation(1n << 64n)).toThrow(expect.objectContaining({ field: 'location' }));
  });

  it('derives arena names from the table name', () => {
    expect(arenaDirectory('engine0-kv')).toBe('/dev/shm/engine0-kv-arena');
    expect(arenaPath('engine0-kv', 3)).toBe('/dev/shm/engine0-kv-arena/3.wpa');
    expect(arenaPath('engine0-kv', 0, '/tmp/x')).toBe('/tmp/x/engine0-kv-arena/0.wpa');
    expect(() => arenaDirectory('../etc')).toThrow(expect.objectContaining({ field: 'tableName' }));
    expect(() => arenaPath('t', 65536)).toThrow(expect.objectContaining({ field: 'arena' }));
    for (const name of ['0.wpa', '3.wpa', '65535.wpa']) expect(isArenaFileName(name)).toBe(true);
    for (const name of ['03.wpa', '65536.wpa', '1.safetensors', 'x.wpa', '.wpa', '1.wpa.tmp']) expect(isArenaFileName(name)).toBe(false);
  });
});

describe('record header', () => {
  it('writes the worked example byte for byte', () => {
    const { bytes, header } = encodeArenaRecord(EXAMPLE_DIGEST, Buffer.from('hello arena'), { tokenCount: 2, format: 'bf16/NHD' });
    expect(Buffer.from(bytes.subarray(0, ARENA_RECORD_HEADER_BYTES)).toString('hex')).toBe(EXAMPLE_HEADER);
    expect(Buffer.from(bytes.subarray(ARENA_RECORD_HEADER_BYTES)).toString()).toBe('hello arena');
    expect(header).toMatchObject({ payloadLength: 11n, tokenCount: 2n, format: 'bf16/NHD', checksum: recordChecksum(Buffer.from('hello arena')) });
    expect(recordChecksum(Buffer.from('hello arena'))).toBe(createHash('sha256').update('hello arena').digest().readBigUInt64BE(0));
    expect(decodeRecordHeader(Buffer.from(EXAMPLE_HEADER, 'hex'))).toEqual(header);
  });

  it('takes a key for its digest and token count', () => {
    const key = makeKey(3);
    const { header } = encodeArenaRecord(key, new Uint8Array(5), { format: 'raw' });
    expect(header.digestHex).toBe(key.hex);
    expect(header.tokenCount).toBe(BigInt(key.tokenCount));
  });

  it('reads only its own version of header, and says why not', () => {
    const good = Buffer.from(EXAMPLE_HEADER, 'hex');
    const variant = (at: number, byte: number): Buffer => {
      const b = Buffer.from(good);
      b[at] = byte;
      return b;
    };
    for (const bad of [variant(0, 0x58), variant(4, 2), variant(6, 64), variant(56 + 10, 0x41), variant(56, 0x20), variant(56, 0), variant(90, 1)]) {
      expect(decodeRecordHeader(bad)).toMatchObject({ kind: 'mismatch', reason: 'bad-header' });
    }
    expect(decodeRecordHeader(good.subarray(0, 95))).toMatchObject({ kind: 'mismatch', reason: 'out-of-bounds' });
    expect(() => encodeRecordHeader({ digest: EXAMPLE_DIGEST, payloadLength: 0, tokenCount: 0, format: 'has space', checksum: 0 })).toThrow(expect.objectContaining({ field: 'format' }));
    expect(() => encodeRecordHeader({ digest: EXAMPLE_DIGEST, payloadLength: 0, tokenCount: 0, format: 'x'.repeat(25), checksum: 0 })).toThrow(expect.objectContaining({ field: 'format' }));
    expect(() => encodeRecordHeader({ digest: new Uint8Array(31), payloadLength: 0, tokenCount: 0, format: 'x', checksum: 0 })).toThrow(expect.objectContaining({ field: 'digest' }));
  });

  it('checks a header against the key and the meta', () => {
    const header = decodeRecordHeader(Buffer.from(EXAMPLE_HEADER, 'hex')) as ArenaRecordHeader;
    const meta = { location: 0, sizeBytes: 11, checksum: header.checksum };
    expect(checkRecordHeader(header, EXAMPLE_DIGEST, meta)).toBeNull();
    expect(checkRecordHeader(header, makeKey(1), meta)).toMatchObject({ reason: 'wrong-key' });
    expect(checkRecordHeader(header, EXAMPLE_DIGEST, { ...meta, sizeBytes: 12 })).toMatchObject({ reason: 'wrong-size' });
    expect(checkRecordHeader(header, EXAMPLE_DIGEST, { ...meta, checksum: 1n })).toMatchObject({ reason: 'wrong-checksum' });
  });
});

describe('readArenaRecord', () => {
  /** Two records in arena 5 of table `t` (at 0 and at a later 8-aligned offset); returns their keys, payloads and metas. */
  function twoRecords(dir: string) {
    const keys = [makeKey(10), makeKey(11)];
    const payloads = [Buffer.from('first payload'), Buffer.alloc(70_000, 7)];
    const records = keys.map((key, i) => encodeArenaRecord(key, payloads[i]!, { format: 'bf16/NHD' }));
    const second = Math.ceil(records[0]!.bytes.length / 8) * 8;
    mkdirSync(arenaDirectory('t', dir), { recursive: true });
    const file = Buffer.alloc(second + records[1]!.bytes.length);
    file.set(records[0]!.bytes, 0);
    file.set(records[1]!.bytes, second);
    writeFileSync(arenaPath('t', 5, dir), file);
    const metas = [0, second].map((offset, i) => ({ location: arenaLocation(5, offset), sizeBytes: payloads[i]!.length, checksum: records[i]!.header.checksum }));
    return { keys, payloads, metas, path: arenaPath('t', 5, dir) };
  }

  it('finds each record from the table name and the meta, and returns its payload', () => {
    const dir = root();
    const { keys, payloads, metas } = twoRecords(dir);
    for (let i = 0; i < 2; i++) {
      const got = readArenaRecord({ tableName: 't', key: keys[i]!, meta: metas[i]!, root: dir });
      if (got.kind !== 'record') throw new Error(`expected a record, got ${got.reason}: ${got.message}`);
      expect(got.payload.equals(payloads[i]!)).toBe(true);
      expect(got.header.digestHex).toBe(keys[i]!.hex);
    }
  });

  it('reports every way the bytes can fail to belong, as a value', () => {
    const dir = root();
    const { keys, metas, path } = twoRecords(dir);
    const read = (over: Partial<Parameters<typeof readArenaRecord>[0]>) => readArenaRecord({ tableName: 't', key: keys[1]!, meta: metas[1]!, root: dir, ...over });
    expect(read({ key: keys[0]! })).toMatchObject({ kind: 'mismatch', reason: 'wrong-key' });
    expect(read({ meta: { ...metas[1]!, sizeBytes: 1 } })).toMatchObject({ reason: 'wrong-size' });
    expect(read({ meta: { ...metas[1]!, checksum: 0 } })).toMatchObject({ reason: 'wrong-checksum' });
    expect(read({ meta: { ...metas[1]!, location: arenaLocation(6, 0) } })).toMatchObject({ reason: 'no-arena' });
    expect(read({ meta: { ...metas[1]!, location: arenaLocation(5, 1 << 20) } })).toMatchObject({ reason: 'out-of-bounds' });
    expect(read({ meta: { ...metas[1]!, location: arenaLocation(5, 8) } })).toMatchObject({ reason: 'bad-header' });
    expect(read({ tableName: 'other' })).toMatchObject({ reason: 'no-arena' });
    // One payload byte flipped: only the payload's own checksum notices, unless asked not to look.
    const fd = openSync(path, 'r+');
    const offset = Number(splitLocation(metas[1]!.location).offset) + ARENA_RECORD_HEADER_BYTES + 500;
    writeSync(fd, Buffer.from([8]), 0, 1, offset);
    closeSync(fd);
    expect(read({})).toMatchObject({ reason: 'corrupt-payload' });
    expect(read({ verifyChecksum: false })).toMatchObject({ kind: 'record' });
    truncateSync(path, offset);
    expect(read({})).toMatchObject({ reason: 'out-of-bounds' });
    expect(() => read({ meta: { location: -1 } })).toThrow(expect.objectContaining({ field: 'meta.location' }));
  });
});

const hasPython = spawnSync('python3', ['--version']).status === 0;

describe.runIf(runsIf('arena record read from Python', [hasPython, 'python3 is not installed']))('arena records across languages', () => {
  it('a record Node writes is read back by waitprep.arena, and the Python header equals the worked example', () => {
    const dir = root();
    const key = artifactKey({ source: { snapshotKind: 'kv', runtime: 'rt', model: 'm', adapter: 'none', profile: 'p', positionPolicy: 'abs', task: 't', namespace: 'n', tokenLayout: [1, 2, 3] }, sourcePageGeneration: 0, codec: 'none', codecConfig: 'none', representationVersion: 1 });
    const payload = Buffer.from('bytes the engine loads');
    const { bytes, header } = encodeArenaRecord(key, payload, { format: 'safetensors' });
    mkdirSync(arenaDirectory('xlang', dir), { recursive: true });
    writeFileSync(arenaPath('xlang', 2, dir), Buffer.concat([Buffer.alloc(64), bytes]));
    const meta = { location: arenaLocation(2, 64).toString(), size_bytes: payload.length, checksum: header.checksum.toString() };
    const script = [
      'import hashlib, json, sys',
      'from waitprep.arena import encode_arena_record, read_arena_record',
      'a = json.loads(sys.argv[1])',
      'meta = {"location": int(a["meta"]["location"]), "size_bytes": a["meta"]["size_bytes"], "checksum": int(a["meta"]["checksum"])}',
      'got = read_arena_record("xlang", bytes.fromhex(a["digest"]), meta, root=a["root"])',
      'example = encode_arena_record(hashlib.sha256(b"waitprep").digest(), b"hello arena", 2, "bf16/NHD")[0][:96].hex()',
      'print(json.dumps({"payload": got.payload.decode() if hasattr(got, "payload") else None, "tokens": got.header.token_count if hasattr(got, "header") else None, "reason": getattr(got, "reason", None), "example": example}))',
    ].join('\n');
    const run = spawnSync('python3', ['-c', script, JSON.stringify({ digest: key.hex, meta, root: dir })], {
      encoding: 'utf8',
      env: { ...process.env, PYTHONPATH: join(import.meta.dirname, '..', '..', 'python'), PYTHONDONTWRITEBYTECODE: '1' },
    });
    expect(run.status, run.stderr).toBe(0);
    expect(JSON.parse(run.stdout)).toEqual({ payload: 'bytes the engine loads', tokens: 3, reason: null, example: EXAMPLE_HEADER });
  });
});
