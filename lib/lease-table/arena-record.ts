/**
 * Where an artifact's bytes are (docs/arena-records.md). A lease's `meta.location` is one u64:
 * the top {@link ARENA_INDEX_BITS} bits name an arena, the rest are the byte offset of a record
 * in it. Arena `i` of table `T` is the file `<root>/T-arena/<i>.wpa` (root `/dev/shm`), so a
 * reader holding only the table's name and a lease finds the bytes. Each record starts with a
 * fixed 96-byte header (magic, the artifact key's digest, payload length, token count, a short
 * format string, the payload's checksum) that a reader checks against the key and the meta
 * before it trusts the payload.
 */
import { createHash } from 'node:crypto';
import { closeSync, constants as fsConstants, fstatSync, openSync, readSync, type BigIntStats } from 'node:fs';
import { join } from 'node:path';
import { invalidArgument } from '../errors.js';
import { isArtifactKey, keyDigestBytes, type ArtifactKey } from '../keys/key.js';
import { isTableName } from './layout.js';
import { u64OrNull } from '../internal/validate.js';

/** First bytes of every record: ASCII `WPAR` ("waitprep arena record"). */
export const ARENA_RECORD_MAGIC = Uint8Array.of(0x57, 0x50, 0x41, 0x52);
/** The record header's version; a reader refuses any other. */
export const ARENA_RECORD_VERSION = 1;
/** Bytes of the record header; the payload follows it. */
export const ARENA_RECORD_HEADER_BYTES = 96;
/** Bytes of the format field: ASCII, NUL-padded. */
export const ARENA_RECORD_FORMAT_BYTES = 24;
/** Bits of `location` that name the arena (its top bits). */
export const ARENA_INDEX_BITS = 16;
/** Bits of `location` that give the record's byte offset in its arena (its low bits). */
export const ARENA_OFFSET_BITS = 48;
/** The largest arena index: 65535. */
export const MAX_ARENA_INDEX = (1 << ARENA_INDEX_BITS) - 1;
/** The largest record offset: 2^48 - 1. */
export const MAX_ARENA_OFFSET = (1n << BigInt(ARENA_OFFSET_BITS)) - 1n;
/** Where arenas live unless a reader or writer says otherwise. */
export const DEFAULT_ARENA_ROOT = '/dev/shm';
/**
 * The largest payload {@link readArenaRecord} reads: 1 GiB. It copies the payload into memory, so
 * a record announcing more (a damaged header, or a sparse file that says 5 GiB) is the mismatch
 * `out-of-bounds` before anything is allocated. A reader of larger records maps the arena itself
 * and checks the header with {@link decodeRecordHeader} and {@link checkRecordHeader}.
 */
export const MAX_ARENA_RECORD_PAYLOAD_BYTES = 2 ** 30;

const OFFSET_MASK = MAX_ARENA_OFFSET;
const U64_MAX = (1n << 64n) - 1n;
const FORMAT = /^[\x21-\x7e]{1,24}$/;
const ARENA_FILE = /^(0|[1-9][0-9]{0,4})\.wpa$/;

/** What a record header says. */
export interface ArenaRecordHeader {
  /** The artifact key's 32-byte digest. */
  digest: Uint8Array;
  /** The same, as 64 lowercase hex characters. */
  digestHex: string;
  /** Bytes of payload after the header. */
  payloadLength: bigint;
  /** Tokens the payload covers (the key's token count). */
  tokenCount: bigint;
  /** A short dtype/layout string: 1-24 printable ASCII characters, no space (`bf16/NHD`, `safetensors`). */
  format: string;
  /** {@link recordChecksum} of the payload. */
  checksum: bigint;
}

/** Why a record does not belong to the key (or to the meta) it was read for. */
export type ArenaRecordMismatchReason = 'no-arena' | 'out-of-bounds' | 'bad-header' | 'wrong-key' | 'wrong-size' | 'wrong-checksum' | 'corrupt-payload';

/** A read that found no record belonging to the key: a value, as a miss is. */
export interface ArenaRecordMismatch {
  kind: 'mismatch';
  reason: ArenaRecordMismatchReason;
  /** What was expected and what was there. */
  message: string;
}

/** A record that belongs to the key: its header and a copy of its payload. */
export interface ArenaRecord {
  kind: 'record';
  header: ArenaRecordHeader;
  payload: Buffer;
}

/** The lease meta fields a reader checks a record against (a `LeaseMeta` has them). */
export interface ArenaRecordMeta {
  location: number | bigint;
  sizeBytes?: number | bigint;
  checksum?: number | bigint;
}

const mismatch = (reason: ArenaRecordMismatchReason, message: string): ArenaRecordMismatch => ({ kind: 'mismatch', reason, message });

/** The first 8 bytes of the payload's SHA-256 as a big-endian u64: the record's and the meta's `checksum`. */
export function recordChecksum(payload: Uint8Array): bigint {
  return createHash('sha256').update(payload).digest().readBigUInt64BE(0);
}

/** `location` for the record at byte `offset` of arena `arena`. Throws `ERR_INVALID_ARGUMENT` out of range. */
export function arenaLocation(arena: number, offset: number | bigint): bigint {
  if (!Number.isInteger(arena) || arena < 0 || arena > MAX_ARENA_INDEX) throw invalidArgument('arena', `an integer in [0, ${MAX_ARENA_INDEX}]`, arena);
  const at = typeof offset === 'bigint' ? offset : Number.isSafeInteger(offset) ? BigInt(offset) : -1n;
  if (at < 0n || at > MAX_ARENA_OFFSET) throw invalidArgument('offset', 'an integer in [0, 2^48-1]', offset);
  return (BigInt(arena) << BigInt(ARENA_OFFSET_BITS)) | at;
}

/** The arena index and record offset a `location` names. Throws `ERR_INVALID_ARGUMENT` for a non-u64. */
export function splitLocation(location: number | bigint): { arena: number; offset: bigint } {
  const value = typeof location === 'bigint' ? location : Number.isSafeInteger(location) ? BigInt(location) : -1n;
  if (value < 0n || value > U64_MAX) throw invalidArgument('location', 'a u64', location);
  return { arena: Number(value >> BigInt(ARENA_OFFSET_BITS)), offset: value & OFFSET_MASK };
}

/** The directory holding table `tableName`'s arenas: `<root>/<tableName>-arena`. */
export function arenaDirectory(tableName: string, root: string = DEFAULT_ARENA_ROOT): string {
  if (!isTableName(tableName)) throw invalidArgument('tableName', 'a lease table name (1-200 of A-Z a-z 0-9 . _ -, not starting with a dot)', tableName);
  return join(root, `${tableName}-arena`);
}

/** The file of arena `arena` of table `tableName`: `<root>/<tableName>-arena/<arena>.wpa`. */
export function arenaPath(tableName: string, arena: number, root: string = DEFAULT_ARENA_ROOT): string {
  if (!Number.isInteger(arena) || arena < 0 || arena > MAX_ARENA_INDEX) throw invalidArgument('arena', `an integer in [0, ${MAX_ARENA_INDEX}]`, arena);
  return join(arenaDirectory(tableName, root), `${arena}.wpa`);
}

/** True for a file name the arena rule gives (`<index>.wpa`, the index in decimal without leading zeros, at most 65535). */
export function isArenaFileName(name: string): boolean {
  return ARENA_FILE.test(name) && Number(name.slice(0, -4)) <= MAX_ARENA_INDEX;
}

function digestOf(field: string, value: ArtifactKey | Uint8Array): Uint8Array {
  if (isArtifactKey(value)) return keyDigestBytes(value);
  if (value instanceof Uint8Array && value.length === 32) return value;
  throw invalidArgument(field, 'an ArtifactKey or its 32-byte digest', value);
}

function u64Field(field: string, value: number | bigint): bigint {
  const v = typeof value === 'bigint' ? value : Number.isSafeInteger(value) ? BigInt(value) : -1n;
  if (v < 0n || v > U64_MAX) throw invalidArgument(field, 'a u64', value);
  return v;
}

/**
 * The 96-byte record header:
 *
 * ```
 *  0  4  magic "WPAR"            40  8  payload length, u64le
 *  4  2  version, u16le (1)      48  8  token count, u64le
 *  6  2  header bytes, u16le (96) 56 24  format, ASCII, NUL-padded
 *  8 32  the artifact key's digest 80  8  payload checksum, u64le
 *                                 88  8  reserved, zero
 * ```
 */
export function encodeRecordHeader(header: { digest: ArtifactKey | Uint8Array; payloadLength: number | bigint; tokenCount: number | bigint; format: string; checksum: number | bigint }): Uint8Array {
  const digest = digestOf('digest', header.digest);
  if (typeof header.format !== 'string' || !FORMAT.test(header.format)) throw invalidArgument('format', '1-24 printable ASCII characters, no space', header.format);
  const out = Buffer.alloc(ARENA_RECORD_HEADER_BYTES);
  out.set(ARENA_RECORD_MAGIC, 0);
  out.writeUInt16LE(ARENA_RECORD_VERSION, 4);
  out.writeUInt16LE(ARENA_RECORD_HEADER_BYTES, 6);
  out.set(digest, 8);
  out.writeBigUInt64LE(u64Field('payloadLength', header.payloadLength), 40);
  out.writeBigUInt64LE(u64Field('tokenCount', header.tokenCount), 48);
  out.write(header.format, 56, 'latin1');
  out.writeBigUInt64LE(u64Field('checksum', header.checksum), 80);
  return new Uint8Array(out.buffer, out.byteOffset, out.byteLength);
}

/**
 * A whole record, header and payload, for `key`: what a producer writes at the record's offset.
 * Returns the bytes and the header (its `checksum` is the meta's `checksum`, its `payloadLength`
 * the meta's `sizeBytes`).
 */
export function encodeArenaRecord(key: ArtifactKey | Uint8Array, payload: Uint8Array, options: { tokenCount?: number | bigint; format: string }): { bytes: Uint8Array; header: ArenaRecordHeader } {
  if (!(payload instanceof Uint8Array)) throw invalidArgument('payload', 'a Uint8Array', payload);
  const digest = digestOf('key', key);
  const tokenCount = options.tokenCount ?? (isArtifactKey(key) ? key.tokenCount : 0);
  const checksum = recordChecksum(payload);
  const head = encodeRecordHeader({ digest, payloadLength: payload.length, tokenCount, format: options.format, checksum });
  const bytes = new Uint8Array(head.length + payload.length);
  bytes.set(head, 0);
  bytes.set(payload, head.length);
  return { bytes, header: decodedHeader(Buffer.from(head)) as ArenaRecordHeader };
}

/** The header's fields, or why the bytes are not a record header of this version. */
export function decodeRecordHeader(bytes: Uint8Array): ArenaRecordHeader | ArenaRecordMismatch {
  if (!(bytes instanceof Uint8Array)) throw invalidArgument('bytes', 'a Uint8Array', bytes);
  if (bytes.length < ARENA_RECORD_HEADER_BYTES) return mismatch('out-of-bounds', `a record header is ${ARENA_RECORD_HEADER_BYTES} bytes, got ${bytes.length}`);
  return decodedHeader(Buffer.from(bytes.buffer, bytes.byteOffset, ARENA_RECORD_HEADER_BYTES));
}

function decodedHeader(b: Buffer): ArenaRecordHeader | ArenaRecordMismatch {
  if (!b.subarray(0, 4).equals(ARENA_RECORD_MAGIC)) return mismatch('bad-header', `expected the magic WPAR (57 50 41 52), got ${b.subarray(0, 4).toString('hex')}`);
  const version = b.readUInt16LE(4);
  const size = b.readUInt16LE(6);
  if (version !== ARENA_RECORD_VERSION || size !== ARENA_RECORD_HEADER_BYTES) {
    return mismatch('bad-header', `expected version ${ARENA_RECORD_VERSION} with a ${ARENA_RECORD_HEADER_BYTES}-byte header, got version ${version}, ${size} bytes`);
  }
  const field = b.subarray(56, 56 + ARENA_RECORD_FORMAT_BYTES);
  const end = field.indexOf(0);
  const format = field.subarray(0, end < 0 ? field.length : end).toString('latin1');
  if (!FORMAT.test(format) || (end >= 0 && field.subarray(end).some((byte) => byte !== 0))) {
    return mismatch('bad-header', 'expected a format of 1-24 printable ASCII characters, NUL-padded');
  }
  if (b.readBigUInt64LE(88) !== 0n) return mismatch('bad-header', 'expected the reserved bytes 88-95 to be zero');
  const digest = new Uint8Array(b.subarray(8, 40));
  return {
    digest,
    digestHex: Buffer.from(digest).toString('hex'),
    payloadLength: b.readBigUInt64LE(40),
    tokenCount: b.readBigUInt64LE(48),
    format,
    checksum: b.readBigUInt64LE(80),
  };
}

/**
 * Checks a decoded header against the key it was read for and, when given, the lease's meta:
 * the digest, `meta.sizeBytes` = the payload length, `meta.checksum` = the header's checksum.
 * Returns `null` when everything matches, else the mismatch. A header that is not one
 * {@link decodeRecordHeader} returned, or a meta field that is not a u64, throws
 * `ERR_INVALID_ARGUMENT`.
 */
export function checkRecordHeader(header: ArenaRecordHeader, key: ArtifactKey | Uint8Array, meta?: ArenaRecordMeta): ArenaRecordMismatch | null {
  if (typeof header !== 'object' || header === null || !(header.digest instanceof Uint8Array) || typeof header.payloadLength !== 'bigint' || typeof header.checksum !== 'bigint') {
    throw invalidArgument('header', 'a decoded record header (decodeRecordHeader)', header);
  }
  const digest = digestOf('key', key);
  const { sizeBytes, checksum } = meta === undefined ? NO_META : checkedMeta(meta, false);
  return headerMismatch(header, digest, sizeBytes, checksum);
}

const NO_META: { sizeBytes: bigint | null; checksum: bigint | null } = { sizeBytes: null, checksum: null };

/**
 * The meta's fields as u64s (`null`: not given). A field that is there but not a u64 (a fraction,
 * NaN, a negative, a string, a boolean) is `ERR_INVALID_ARGUMENT` naming it: a caller's mistake,
 * not a record that fails to belong.
 */
function checkedMeta(meta: unknown, needLocation: boolean): { location?: bigint; sizeBytes: bigint | null; checksum: bigint | null } {
  if (typeof meta !== 'object' || meta === null) throw invalidArgument('meta', 'an object { location, sizeBytes?, checksum? } (a lease\'s meta)', meta);
  const m = meta as Record<string, unknown>;
  const optional = (field: 'sizeBytes' | 'checksum'): bigint | null => {
    const value = m[field];
    if (value === undefined) return null;
    const v = u64OrNull(value);
    if (v === null) throw invalidArgument(`meta.${field}`, 'a u64 (a non-negative safe integer or a bigint), or absent', value);
    return v;
  };
  const out: { location?: bigint; sizeBytes: bigint | null; checksum: bigint | null } = { sizeBytes: optional('sizeBytes'), checksum: optional('checksum') };
  if (needLocation) {
    const location = u64OrNull(m.location);
    if (location === null) throw invalidArgument('meta.location', 'a u64 (a non-negative safe integer or a bigint)', m.location);
    out.location = location;
  }
  return out;
}

function headerMismatch(header: ArenaRecordHeader, digest: Uint8Array, sizeBytes: bigint | null, checksum: bigint | null): ArenaRecordMismatch | null {
  if (!Buffer.from(header.digest).equals(digest)) return mismatch('wrong-key', `the record is for ${header.digestHex}, not ${Buffer.from(digest).toString('hex')}`);
  if (sizeBytes !== null && sizeBytes !== header.payloadLength) {
    return mismatch('wrong-size', `the meta says ${sizeBytes} bytes, the record holds ${header.payloadLength}`);
  }
  if (checksum !== null && checksum !== header.checksum) {
    return mismatch('wrong-checksum', `the meta's checksum is ${checksum}, the record's ${header.checksum}`);
  }
  return null;
}

/**
 * Reads the record `meta.location` names for `key`, from table `tableName`'s arenas (under
 * `root`, default `/dev/shm`), and checks it belongs: header, digest, meta size and checksum,
 * and (unless `verifyChecksum: false`) the payload's own checksum. Returns the record, or a
 * {@link ArenaRecordMismatch} saying why not. Hold a pin on the artifact while reading: a record
 * whose artifact was evicted may be gone or replaced, which this reports, never returns.
 *
 * Whatever is at the arena's path is a value, never an exception or a wait: anything but a
 * regular file (a FIFO, a directory, a device, a symbolic link) is `no-arena`; a header or payload
 * past the file's end, or a payload over {@link MAX_ARENA_RECORD_PAYLOAD_BYTES}, is
 * `out-of-bounds`, found before the payload is allocated. A malformed argument (`meta.location`,
 * `meta.sizeBytes` or `meta.checksum` not a u64, a bad key, table name or root) throws
 * `ERR_INVALID_ARGUMENT` before the file is opened.
 */
export function readArenaRecord(options: { tableName: string; key: ArtifactKey | Uint8Array; meta: ArenaRecordMeta; root?: string; verifyChecksum?: boolean }): ArenaRecord | ArenaRecordMismatch {
  if (typeof options !== 'object' || options === null) throw invalidArgument('options', 'an object { tableName, key, meta, root?, verifyChecksum? }', options);
  const { tableName, key, meta, root = DEFAULT_ARENA_ROOT, verifyChecksum = true } = options;
  // Every argument is checked before the file is looked at: a caller's mistake throws, whatever
  // the arena holds.
  const digest = digestOf('key', key);
  const { location, sizeBytes, checksum } = checkedMeta(meta, true);
  if (typeof root !== 'string' || root.length === 0) throw invalidArgument('root', 'a non-empty string (a directory path)', root);
  if (typeof verifyChecksum !== 'boolean') throw invalidArgument('verifyChecksum', 'a boolean', verifyChecksum);
  const { arena, offset } = splitLocation(location!);
  const path = arenaPath(tableName, arena, root);
  // An arena is a regular file, judged on the open descriptor (the file that is read): O_NOFOLLOW
  // refuses a link planted under the name, O_NONBLOCK keeps a FIFO from blocking the open.
  let fd: number;
  try {
    fd = openSync(path, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW | fsConstants.O_NONBLOCK);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ELOOP') return mismatch('no-arena', `arena ${arena} (${path}) is a symbolic link, not a regular file`);
    return mismatch('no-arena', `arena ${arena} (${path}) cannot be opened: ${code ?? error}`);
  }
  try {
    const stat = fstatSync(fd, { bigint: true });
    if (!stat.isFile()) return notRegular(arena, path, stat);
    const size = stat.size;
    if (offset + BigInt(ARENA_RECORD_HEADER_BYTES) > size) return mismatch('out-of-bounds', `no ${ARENA_RECORD_HEADER_BYTES}-byte header at offset ${offset} of ${path} (${size} bytes)`);
    const head = Buffer.alloc(ARENA_RECORD_HEADER_BYTES);
    if (readFully(fd, head, offset) < head.length) return mismatch('out-of-bounds', `${path} ended inside the header at offset ${offset}`);
    const header = decodedHeader(head);
    if ('kind' in header) return header;
    const wrong = headerMismatch(header, digest, sizeBytes, checksum);
    if (wrong !== null) return wrong;
    // Both bounds before a byte is allocated: the file's size, and the most a reader copies.
    if (header.payloadLength > BigInt(MAX_ARENA_RECORD_PAYLOAD_BYTES)) {
      return mismatch('out-of-bounds', `the payload of ${header.payloadLength} bytes is over the ${MAX_ARENA_RECORD_PAYLOAD_BYTES} bytes a reader copies (MAX_ARENA_RECORD_PAYLOAD_BYTES); map the arena to read it`);
    }
    const start = offset + BigInt(ARENA_RECORD_HEADER_BYTES);
    if (start + header.payloadLength > size) return mismatch('out-of-bounds', `the payload of ${header.payloadLength} bytes runs past the end of ${path} (${size} bytes)`);
    const payload = Buffer.alloc(Number(header.payloadLength));
    const done = readFully(fd, payload, start);
    if (done < payload.length) return mismatch('out-of-bounds', `${path} ended after ${done} of ${payload.length} payload bytes`);
    if (verifyChecksum && recordChecksum(payload) !== header.checksum) return mismatch('corrupt-payload', `the payload's checksum is ${recordChecksum(payload)}, its header says ${header.checksum}`);
    return { kind: 'record', header, payload };
  } catch (error) {
    // A read the kernel refuses (EIO from a damaged device) is the file's doing, not the caller's.
    if (typeof (error as NodeJS.ErrnoException).syscall !== 'string') throw error;
    return mismatch('no-arena', `arena ${arena} (${path}) cannot be read: ${(error as NodeJS.ErrnoException).code ?? error}`);
  } finally {
    closeSync(fd);
  }
}

/** Reads `into.length` bytes at `position`, or fewer where the file ends first; returns how many. */
function readFully(fd: number, into: Buffer, position: bigint): number {
  let done = 0;
  while (done < into.length) {
    const got = readSync(fd, into, done, into.length - done, position + BigInt(done));
    if (got === 0) break;
    done += got;
  }
  return done;
}

function notRegular(arena: number, path: string, stat: BigIntStats): ArenaRecordMismatch {
  const kind = stat.isDirectory() ? 'a directory' : stat.isFIFO() ? 'a FIFO' : stat.isSocket() ? 'a socket' : 'a device';
  return mismatch('no-arena', `arena ${arena} (${path}) is ${kind}, not a regular file`);
}
