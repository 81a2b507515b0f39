import { WaitprepError, invalidArgument } from '../errors.js';
import { assertArtifactKey, isArtifactKey, keyDigestBytes, keyDigestWordsInto, notAKey, type ArtifactKey } from '../keys/key.js';
import { isConsumer } from '../coordinator/consumer.js';
import { normalizeTarget } from './device-target.js';
import { isObject, ownField, ownOptions, rejectUnknownOptions, u64OrNull } from '../internal/validate.js';
import { HOST } from '../internal/host.js';
import { MISS, MISS_BY_STATUS } from '../coordinator/miss-reasons.js';
import { nativeAddon, nativeUnavailableError } from './native.js';
import type { ArtifactBackend, Consumer, DeviceTarget, Lease, LeaseTableMeta, Miss, Readiness, ReadinessRequest } from '../types.js';
import type { TableHandle } from './handle.js';
import { corruptHeader, inspectSegment, type TableInspection, type TableSummary } from './inspect.js';
import { openJsHandle } from './js-handle.js';
import { deviceRecord, encodedTarget } from './device-record.js';
import { digestBytesOfHex, formatHandoffToken, parseHandoffToken } from './handoff.js';
import { HEADER_SIZE, MAX_CAPACITY, OPEN_TRUST, STATUS, isTableName, segmentSize } from './layout.js';
import { errnoName, noSpaceError, openNativeHandle, otherAbiNote } from './native-handle.js';
import { MAX_PREFIX_CHUNKS, PREFIX_CHUNKS, PREFIX_TOO_LONG, packedDigestCount } from './prefix-input.js';

/** Options of {@link openLeaseTable}. */
export interface OpenLeaseTableOptions {
  /** The table's name: 1-200 of `A-Z a-z 0-9 . _ -`, not starting with a dot. Native: `/dev/shm/<name>`. */
  name: string;
  /** `'producer'`: the single writer (reserve, publish, evict). `'consumer'`: pins only. */
  role: 'consumer' | 'producer';
  /**
   * Create the table (it must not exist). `mode` defaults to 0o600 (owner only). A mode that lets
   * the group or others write (0o660, 0o666) needs the same `trust` its opens will need, and
   * `mode: 0` (a table nobody could open) is refused.
   */
  create?: { capacity: number; mode?: number };
  /**
   * Native: which table files this open trusts besides the default (a regular file owned by this
   * process's effective uid that neither group nor others may write; anything else is
   * `ERR_UNTRUSTED_SEGMENT`). Whoever may write the file can rewrite what consumers pin, or
   * truncate it and crash every client, so widen this only for a deployment that shares tables
   * across users on purpose: `uid`, a second owner to accept; `groupWritable`, `worldWritable`,
   * accept (and allow creating) files with those write bits.
   */
  trust?: TableTrust;
  /** `'auto'` (default): native when the addon loaded, else the JavaScript fallback. */
  implementation?: 'auto' | 'native' | 'js';
  /** JavaScript fallback only: open this shared buffer (from {@link LeaseTable.sharedBuffer} in another thread). */
  buffer?: SharedArrayBuffer;
}

/** {@link OpenLeaseTableOptions.trust}. */
export interface TableTrust {
  uid?: number;
  groupWritable?: boolean;
  worldWritable?: boolean;
}

const TRUST_OPTIONS: ReadonlySet<string> = new Set(['uid', 'groupWritable', 'worldWritable']);

/** `options.trust` as wp_open_options' flags and trusted uid. */
export function trustFlags(trust: unknown): { flags: number; uid: number } {
  if (trust === undefined) return { flags: 0, uid: 0 };
  if (typeof trust !== 'object' || trust === null) throw invalidArgument('options.trust', 'an object { uid?, groupWritable?, worldWritable? }', trust);
  rejectUnknownOptions(trust, TRUST_OPTIONS, 'options.trust');
  const uid = ownField(trust, 'uid');
  const flag = (field: 'groupWritable' | 'worldWritable', bit: number): number => {
    const value = ownField(trust, field);
    if (value !== undefined && typeof value !== 'boolean') throw invalidArgument(`options.trust.${field}`, 'a boolean', value);
    return value === true ? bit : 0;
  };
  let flags = flag('groupWritable', OPEN_TRUST.GROUP_WRITE) | flag('worldWritable', OPEN_TRUST.WORLD_WRITE);
  if (uid !== undefined) {
    flags |= OPEN_TRUST.UID;
    return { flags, uid: u32('options.trust.uid', uid) };
  }
  return { flags, uid: 0 };
}

/** The message for ERR_UNTRUSTED_SEGMENT: the owner and mode found, against what was trusted. */
function untrustedError(what: string, name: string, trust: { flags: number; uid: number }): WaitprepError {
  const [status, uid, mode] = nativeAddon!.segmentOwner(name);
  const found = status === STATUS.OK
    ? (mode & 0o170000) === 0o120000
      ? `/dev/shm/${name} is a symbolic link (owned by uid ${uid})`
      : `/dev/shm/${name} is owned by uid ${uid} with mode 0o${(mode & 0o7777).toString(8).padStart(3, '0')}${(mode & 0o170000) === 0o100000 ? '' : ', and is not a regular file'}`
    : `/dev/shm/${name} could not be examined`;
  const owners = [`uid ${process.geteuid?.() ?? '?'} (this process)`, ...((trust.flags & OPEN_TRUST.UID) !== 0 ? [`uid ${trust.uid} (options.trust.uid)`] : [])];
  const writers = ['the owner', ...((trust.flags & OPEN_TRUST.GROUP_WRITE) !== 0 ? ['the group'] : []), ...((trust.flags & OPEN_TRUST.WORLD_WRITE) !== 0 ? ['others'] : [])];
  return new WaitprepError(
    'ERR_UNTRUSTED_SEGMENT',
    `${what}: refusing an untrusted table file: ${found}; this open trusts a regular file (not a link) owned by ${owners.join(' or ')} ` +
      `that only ${writers.join(', ')} may write. Whoever may write it can rewrite what consumers pin or crash them; ` +
      'if this sharing is intended, pass options.trust (docs/lease-table.md#limits)',
  );
}

/** Plain metadata published with an artifact. The backend validated the bytes before publishing. */
export interface ArtifactMeta {
  sizeBytes: number | bigint;
  location: number | bigint;
  checksum: number | bigint;
  codecId: number;
  representationVersion: number;
}

/** A device write the producer completed for a published artifact. */
export interface DeviceWrite extends DeviceTarget {
  /** The producer's own sequence number for this write. */
  writeSeq: number | bigint;
}

/** A slot reserved by the producer for `key`, to publish or abandon. */
export interface Reservation {
  readonly key: ArtifactKey;
  readonly slot: number;
  readonly generation: bigint;
}

const U32_MAX = 0xffff_ffff;
/** The consumer a lease names when the table is used directly, without a coordinator. */
const DIRECT: Consumer = Object.freeze({ engine: 'direct', request: 'direct', generation: 0 });
/** The shared frozen misses, held in module-local constants as the wake path reads them. */
const MISSES: readonly Miss[] = MISS_BY_STATUS;
const MISS_CONTENDED = MISS.contended;
const MISS_CLOSED = MISS['table-closed'];
const MISS_INVALID_TARGET = MISS['invalid-target'];

/** Turns a status code into the error a caller sees; `errno` (0: unknown) for a refused or failed system call. */
function statusError(status: number, what: string, errno = 0): WaitprepError {
  switch (status) {
    case STATUS.ERR_PERMISSION:
      return new WaitprepError(
        'ERR_PERMISSION_DENIED',
        `${what}: permission denied (${errno === 0 ? 'EACCES or EPERM' : errnoName(errno)}): the table's owner or mode does not let this user do it`,
      );
    case STATUS.ERR_BAD_SEGMENT:
      return new WaitprepError('ERR_BAD_SEGMENT', `${what}: the segment is not a waitprep lease table of this ABI (wrong magic, version, size or geometry)`);
    case STATUS.ERR_WRITER_EXISTS:
      return new WaitprepError('ERR_WRITER_EXISTS', `${what}: another live producer holds this table`);
    case STATUS.ERR_NOT_PRODUCER:
      return new WaitprepError('ERR_NOT_PRODUCER', `${what}: only the table's producer may do this`);
    case STATUS.ERR_NOT_FOUND:
      return new WaitprepError('ERR_TABLE_NOT_FOUND', `${what}: no such table`);
    case STATUS.ERR_EXISTS:
      return new WaitprepError('ERR_TABLE_EXISTS', `${what}: a table of that name already exists`);
    case STATUS.ERR_NO_CLIENT_SLOT:
      return new WaitprepError('ERR_NO_CLIENT_SLOT', `${what}: all 64 client entries are taken by live clients`);
    case STATUS.FULL:
      return new WaitprepError('ERR_TABLE_FULL', `${what}: every slot of the key's two buckets is taken; evict first`);
    case STATUS.EXISTS:
      return new WaitprepError('ERR_KEY_EXISTS', `${what}: the key is already reserved or published`);
    case STATUS.STALE:
      return new WaitprepError('ERR_STALE_RESERVATION', `${what}: the reservation was already published or abandoned`);
    case STATUS.ERR_INVALID_ARGUMENT:
      return new WaitprepError('ERR_INVALID_ARGUMENT', `${what}: invalid argument`);
    default:
      return new WaitprepError('ERR_SYSTEM', `${what}: failed with status ${status}${errno === 0 ? '' : ` (${errnoName(errno)})`}`);
  }
}

function u64(field: string, value: unknown): bigint {
  return u64OrNull(value) ?? throwInvalid(field, 'a non-negative integer (a safe-integer number, or a bigint up to 2^64-1)', value);
}

function throwInvalid(field: string, expected: string, value: unknown): never {
  throw invalidArgument(field, expected, value);
}

function u32(field: string, value: unknown): number {
  if (typeof value === 'number' && Number.isInteger(value) && value >= 0 && value <= U32_MAX) return value;
  throw invalidArgument(field, 'an integer in [0, 2^32-1]', value);
}

/** Reads u64 word `i` of `words` as a number when exact, else as a bigint, without a BigInt on the way. */
function wordAt(halves: Uint32Array, i: number): number | bigint {
  const lo = halves[2 * i]!;
  const hi = halves[2 * i + 1]!;
  return hi < 0x20_0000 ? hi * 0x1_0000_0000 + lo : bigWord(hi, lo);
}

/** A u64 beyond 2^53, as a bigint (kept out of wordAt so that the lease constructor stays small enough to inline). */
function bigWord(hi: number, lo: number): bigint {
  return (BigInt(hi) << 32n) | BigInt(lo);
}

/**
 * Releases one pin of `table` (a lease's close). Module-local, set by LeaseTable's static block:
 * a pin is released only through the lease that holds its token, never by a caller naming a
 * slot and a token it guessed.
 */
let releasePin: (table: LeaseTable, slot: number, tokenIndex: number, tokenGeneration: number) => void;

/**
 * For {@link LeaseTable.unpinMany}, set by the lease classes' static blocks: `leaseTableOf` is the
 * table a lease of this module holds its pin in (null once closed, undefined for anything that is
 * not such a lease); `detachLease` closes the lease without releasing its pin and writes its
 * (slot, token index, token generation) at `tokens[at..at+3)`, so that the table releases the
 * pins of many leases in one call.
 */
let leaseTableOf: (lease: unknown) => LeaseTable | null | undefined;
let detachLease: (lease: TableLease | TableDigestLease, tokens: Uint32Array, at: number) => void;

/** Whether `lease` is a lease this module made for a key (its fields are known good); set by TableLease's static block. */
let isTableLease: (lease: object) => boolean;

const CLOSED_LEASE_TOKEN = 'handoffToken(): the lease is closed; a token is handed over only while its lease is held (docs/lease-table.md, "Handing a lease to another process")';

/**
 * A pin on a READY artifact. `close()` releases it exactly once; closing a
 * lease of a table that was closed (which released every pin) releases nothing.
 */
class TableLease implements Lease {
  readonly kind = 'lease' as const;
  readonly key: ArtifactKey;
  readonly consumer: Consumer;
  readonly readiness: Readiness;
  /** Private, read through the `slot` getter: close() releases the slot pinned, whatever a caller assigns. */
  readonly #slot: number;
  /** The slot generation (the contract's name; `slotGeneration` reads it). */
  readonly generation: number | bigint;
  readonly #sizeBytes: number | bigint;
  readonly #location: number | bigint;
  readonly #checksum: number | bigint;
  readonly #codec: number;
  readonly #codecVersion: number;
  readonly #tokenIndex: number;
  readonly #tokenGeneration: number;
  #table: LeaseTable | null;
  #meta: LeaseTableMeta | null = null;

  constructor(table: LeaseTable, key: ArtifactKey, consumer: Consumer, readiness: Readiness, halves: Uint32Array) {
    this.key = key;
    this.consumer = consumer;
    this.readiness = readiness;
    this.#slot = halves[0]!;
    this.generation = wordAt(halves, 1);
    this.#tokenIndex = halves[4]!;
    this.#tokenGeneration = halves[5]!;
    this.#sizeBytes = wordAt(halves, 3);
    this.#location = wordAt(halves, 4);
    this.#checksum = wordAt(halves, 5);
    this.#codec = halves[12]!; // codec_id (low half of word 6); representation_version is word 7
    this.#codecVersion = halves[14]!;
    this.#table = table;
  }

  /** `{ sizeBytes, location, checksum, codecId, representationVersion }`, built on first read. */
  get meta(): LeaseTableMeta {
    return (this.#meta ??= Object.freeze({
      sizeBytes: this.#sizeBytes,
      location: this.#location,
      checksum: this.#checksum,
      codecId: this.#codec,
      representationVersion: this.#codecVersion,
    }));
  }

  /** The table slot the artifact is in. */
  get slot(): number {
    return this.#slot;
  }

  /**
   * The slot generation, `generation` under the name that says whose it is.
   * A getter on the prototype, so the wake path stores no second field.
   */
  get slotGeneration(): number | bigint {
    return this.generation;
  }

  get closed(): boolean {
    return this.#table === null;
  }

  close(): void {
    const table = this.#table;
    if (table === null) return;
    this.#table = null;
    releasePin(table, this.#slot, this.#tokenIndex, this.#tokenGeneration);
  }

  /**
   * A short string naming this lease's artifact (table, slot, slot generation, digest) for another
   * process, which pins it for itself with `tryPinExact` (C `wp_try_pin_exact`). Keep this lease
   * until that process says it holds its own pin, then close it. `ERR_CLOSED` once closed.
   */
  handoffToken(): string {
    const table = this.#table;
    if (table === null) throw new WaitprepError('ERR_CLOSED', CLOSED_LEASE_TOKEN);
    return formatHandoffToken(table.name, this.#slot, this.generation, this.key.hex);
  }

  static {
    isTableLease = (lease) => #table in lease;
    leaseTableOf = (lease) =>
      typeof lease === 'object' && lease !== null && #table in lease ? (lease as TableLease).#table : TableDigestLease.tableOf(lease);
    detachLease = (lease, tokens, at) => {
      if (lease instanceof TableDigestLease) return TableDigestLease.detach(lease, tokens, at);
      tokens[at] = lease.#slot;
      tokens[at + 1] = lease.#tokenIndex;
      tokens[at + 2] = lease.#tokenGeneration;
      lease.#table = null;
    };
  }
}

/**
 * A lease whose artifact is named by its digest, not by an {@link ArtifactKey}: what
 * {@link LeaseTable.tryPinExact} (from a handoff token) and {@link LeaseTable.tryPinPrefix} of
 * packed digests return, since the pinning side holds no key. Everything a lease has but `key`
 * and `consumer`.
 */
export interface DigestLease {
  readonly kind: 'lease';
  /** The artifact's SHA-256 digest, 64 lowercase hex digits (the key's `hex`). */
  readonly digest: string;
  readonly readiness: Readiness;
  readonly slot: number;
  /** The slot generation. */
  readonly generation: number | bigint;
  readonly slotGeneration: number | bigint;
  readonly meta: LeaseTableMeta;
  readonly closed: boolean;
  /** Releases this pin exactly once; idempotent. */
  close(): void;
  /** This lease's handoff token, to pass on again (the format: {@link parseHandoffToken}). */
  handoffToken(): string;
}

/**
 * {@link DigestLease}. Its metadata is built on first read from a copy of the lease's words (a
 * frozen object per lease would cost a prefix of digest leases more than its pins).
 */
class TableDigestLease implements DigestLease {
  readonly kind = 'lease' as const;
  /** The digest as hex, or (from a packed prefix, until first read) its 8 little-endian u32 words. */
  #digest: string | Uint32Array;
  readonly readiness: Readiness;
  readonly slot: number;
  readonly generation: number | bigint;
  readonly slotGeneration: number | bigint;
  /** The lease's 16 u32 halves (layout of the exchange words 0-7) until `meta` is first read, then the metadata. */
  #meta: Uint32Array | LeaseTableMeta;
  readonly #tokenIndex: number;
  readonly #tokenGeneration: number;
  #table: LeaseTable | null;

  constructor(table: LeaseTable, digest: string | Uint32Array, readiness: Readiness, halves: Uint32Array) {
    this.#digest = digest;
    this.readiness = readiness;
    this.slot = halves[0]!;
    this.generation = this.slotGeneration = wordAt(halves, 1);
    this.#tokenIndex = halves[4]!;
    this.#tokenGeneration = halves[5]!;
    this.#meta = halves.slice(0, 16);
    this.#table = table;
  }

  get meta(): LeaseTableMeta {
    const words = this.#meta;
    if (!(words instanceof Uint32Array)) return words;
    return (this.#meta = Object.freeze({
      sizeBytes: wordAt(words, 3),
      location: wordAt(words, 4),
      checksum: wordAt(words, 5),
      codecId: words[12]!,
      representationVersion: words[14]!,
    }));
  }

  get digest(): string {
    const digest = this.#digest;
    return typeof digest === 'string' ? digest : (this.#digest = hexOfWords(digest));
  }

  get closed(): boolean {
    return this.#table === null;
  }

  close(): void {
    if (this.#table !== null) releasePin(this.#take(), this.slot, this.#tokenIndex, this.#tokenGeneration);
  }

  /** Closes the lease without releasing its pin, and returns the table the pin is in. */
  #take(): LeaseTable {
    const table = this.#table!;
    this.#table = null;
    return table;
  }

  handoffToken(): string {
    const table = this.#table;
    if (table === null) throw new WaitprepError('ERR_CLOSED', CLOSED_LEASE_TOKEN);
    return formatHandoffToken(table.name, this.slot, this.generation, this.digest);
  }

  /** The table this lease pins in, null once closed, undefined when `lease` is not one. */
  static tableOf(lease: unknown): LeaseTable | null | undefined {
    return typeof lease === 'object' && lease !== null && #table in lease ? (lease as TableDigestLease).#table : undefined;
  }

  static detach(lease: TableDigestLease, tokens: Uint32Array, at: number): void {
    lease.#take();
    tokens[at] = lease.slot;
    tokens[at + 1] = lease.#tokenIndex;
    tokens[at + 2] = lease.#tokenGeneration;
  }
}

/** What {@link LeaseTable.peek} answers for a READY artifact (a miss otherwise). */
export interface PeekReady {
  readonly kind: 'ready';
}
const PEEK_READY: PeekReady = Object.freeze({ kind: 'ready' as const });

/** The growable buffers of a many-lease call: digests in, leases out, tokens for unpinMany. */
interface Batch {
  digests: Uint8Array;
  /** `digests` as u32 words: a key's digest words go in with eight stores (TypedArray#set costs more per chunk). */
  digestWords: Uint32Array;
  leases: BigUint64Array;
  /** Lease i's 16 u32 halves, one view each, made with the batch so that no call allocates views or copies words. */
  views: Uint32Array[];
  tokens: Uint32Array;
}

/** A digest's 8 little-endian u32 words as its 64 lowercase hex digits. */
function hexOfWords(words: Uint32Array): string {
  return Buffer.from(words.buffer, words.byteOffset, 32).toString('hex');
}

function newBatch(n: number): Batch {
  const leases = new BigUint64Array(n * 8);
  const digestWords = new Uint32Array(n * 8);
  const views = Array.from({ length: n }, (_, i) => new Uint32Array(leases.buffer, i * 64, 16));
  return { digests: new Uint8Array(digestWords.buffer), digestWords, leases, views, tokens: new Uint32Array(n * 3) };
}

/** The buffers of no lease: a table's until its first many-lease call, and while unpinMany fills its own. */
const NO_BATCH = newBatch(0);

/**
 * One client's view of a shared-memory lease table (native) or of a
 * SharedArrayBuffer table (JavaScript fallback). Consumers pin; the single
 * producer reserves, publishes, evicts and records device writes. A table
 * object belongs to the thread (isolate) that opened it; other worker_threads
 * open their own (docs/lease-table.md, "Threads").
 */
export class LeaseTable {
  /** `'native'` (POSIX shared memory through the addon) or `'js'` (SharedArrayBuffer). */
  readonly implementation: 'native' | 'js';
  readonly name: string;
  readonly role: 'consumer' | 'producer';
  /** Number of slots. */
  readonly capacity: number;
  /** This client's index in the table's registry (0-63). */
  readonly clientIndex: number;
  /** JavaScript fallback: the buffer to hand to a worker_thread, which opens it with `buffer`. Native: `null`. */
  readonly sharedBuffer: SharedArrayBuffer | null;
  #handle: TableHandle | null;
  readonly #halves: Uint32Array;
  readonly #meta = new BigUint64Array(5);
  #batch: Batch = NO_BATCH;
  /** peekMany's status bytes, grown (never shrunk) to the largest batch. */
  #statuses = new Uint8Array(0);

  /** @internal Use {@link openLeaseTable}. */
  constructor(handle: TableHandle, implementation: 'native' | 'js', name: string, role: 'consumer' | 'producer', buffer: SharedArrayBuffer | null) {
    this.#handle = handle;
    this.implementation = implementation;
    this.name = name;
    this.role = role;
    this.capacity = handle.capacity;
    this.clientIndex = handle.clientIndex;
    this.sharedBuffer = buffer;
    this.#halves = new Uint32Array(handle.out.buffer, handle.out.byteOffset, 16);
  }

  static {
    releasePin = (table, slot, tokenIndex, tokenGeneration) => table.#handle?.unpin(slot, tokenIndex, tokenGeneration);
  }

  /**
   * Nonblocking lookup and atomic pin of a READY artifact: no I/O, no waiting,
   * no allocation beyond the lease. A miss names why (`absent`, `preparing`,
   * `evicting`, `contended`, and for device readiness `no-device-record`,
   * `device-mismatch`, `arena-generation-mismatch`, `device-write-incomplete`).
   * Throws `ERR_INVALID_KEY` for a `key` that is not an {@link ArtifactKey}, and
   * `ERR_INVALID_ARGUMENT` for a `want` that is not `{ readiness: 'host' }` or
   * `{ readiness: 'device', target }` (neither inherited from Object.prototype) or a malformed `consumer`
   * (the lease's holder: `{ engine, request, generation }`, non-empty strings and a
   * non-negative safe integer). A malformed target is the miss `invalid-target`.
   */
  tryPin(key: ArtifactKey, want: ReadinessRequest = HOST, consumer: Consumer = DIRECT): Lease | Miss {
    // The defaults are this module's frozen constants, known good: the common wake costs two
    // identity compares. The key's check is the read of its digest, a private field that only
    // a key built by this package has (a forged one, or a non-object, throws TypeError there).
    let digest: Uint8Array;
    try {
      digest = keyDigestBytes(key);
    } catch {
      throw notAKey();
    }
    const readiness = want === HOST ? 'host' : readinessOf(want);
    if (consumer !== DIRECT && !isConsumer(consumer)) throwBadConsumer(consumer);
    const handle = this.#handle;
    if (handle === null) return MISS_CLOSED;
    let device: Uint8Array | null = null;
    if (readiness === 'device') {
      device = targetOf(want);
      if (device === null) return MISS_INVALID_TARGET;
    }
    let status: number;
    if (device === null) {
      keyDigestWordsInto(key, handle.pinInput, 0);
      status = handle.tryPinInput();
    } else {
      status = handle.tryPin(digest, device);
    }
    if (status !== STATUS.OK) return MISSES[status] ?? MISS_CONTENDED;
    return new TableLease(this, key, consumer, readiness, this.#halves);
  }

  /**
   * Pins, for this client, the artifact another client's lease names in `token` (from
   * `lease.handoffToken()`, here or in another process or language): a hit only while that slot
   * still holds that generation of that digest in READY, and `want` as for {@link tryPin}. A token
   * of a lease since evicted or of a slot since reused is the miss `stale-handoff`; `evicting`,
   * `preparing`, `contended` and the device misses as for tryPin; `table-closed`. A token that is
   * malformed, names another table, or a slot beyond this table's capacity throws
   * `ERR_INVALID_ARGUMENT`. The handing client keeps its lease until this one has its own
   * (docs/lease-table.md, "Handing a lease to another process").
   */
  tryPinExact(token: string, want: ReadinessRequest = HOST): DigestLease | Miss {
    const parsed = parseHandoffToken(token);
    if (parsed.table !== this.name) throw invalidArgument('token', `a handoff token of table ${JSON.stringify(this.name)}`, token);
    if (parsed.slot >= this.capacity) throw invalidArgument('token', `a handoff token whose slot is below the table's capacity ${this.capacity}`, token);
    const readiness = want === HOST ? 'host' : readinessOf(want);
    const handle = this.#handle;
    if (handle === null) return MISS_CLOSED;
    const device = readiness === 'device' ? targetOf(want) : null;
    if (readiness === 'device' && device === null) return MISS_INVALID_TARGET;
    const status = handle.tryPinExact(parsed.slot, parsed.generation, digestBytesOfHex(parsed.digest), device);
    if (status !== STATUS.OK) return MISSES[status] ?? MISS_CONTENDED;
    return new TableDigestLease(this, parsed.digest, readiness, this.#halves);
  }

  /**
   * Pins the longest READY leading run of a chunked request's chunks, in one call into the table
   * (one addon crossing), and returns its leases in order: `chunks[0..run)` are pinned, the rest
   * not (`peek` says why the run stopped). `chunks`: the chunks' keys (leases as {@link tryPin}
   * gives, for `consumer`), or their digests packed back to back in one `Uint8Array`
   * ({@link DigestLease}s). At most {@link MAX_PREFIX_CHUNKS} (65,536) chunks a call: pin a
   * longer prefix in runs. Each element of `chunks` is read once (a getter or Proxy answering
   * differently later changes nothing): every lease names the artifact it pins. Release them
   * with {@link unpinMany} or each `close()`. Throws `ERR_INVALID_KEY` for an element that is
   * not a key (a hole of a sparse array included), `ERR_INVALID_ARGUMENT` for a malformed
   * `chunks` (one longer than the maximum included, refused before anything is sized from its
   * length), `want` (a malformed device target included: there is no miss to carry it) or
   * `consumer`, and `ERR_CLOSED` on a closed table.
   */
  tryPinPrefix(chunks: readonly ArtifactKey[], want?: ReadinessRequest, consumer?: Consumer): Lease[];
  tryPinPrefix(chunks: Uint8Array, want?: ReadinessRequest): DigestLease[];
  tryPinPrefix(chunks: readonly ArtifactKey[] | Uint8Array, want: ReadinessRequest = HOST, consumer: Consumer = DIRECT): Lease[] | DigestLease[] {
    const packed = chunks instanceof Uint8Array;
    if (!packed && !Array.isArray(chunks)) throw invalidArgument('chunks', PREFIX_CHUNKS, chunks);
    const readiness = want === HOST ? 'host' : readinessOf(want);
    if (consumer !== DIRECT && !isConsumer(consumer)) throwBadConsumer(consumer);
    const device = readiness === 'device' ? targetOf(want) : null;
    if (readiness === 'device' && device === null) {
      throw invalidArgument('want.target', 'a device target { device: "GPU-…", arena, arenaGeneration }', (want as { target?: unknown }).target);
    }
    this.#open('tryPinPrefix');
    const read = this.#readChunks(chunks);
    const keys = typeof read === 'number' ? null : read;
    const n = keys === null ? (read as number) : keys.length;
    const handle = this.#open('tryPinPrefix');
    const batch = this.#loadBatch(chunks as Uint8Array, keys, n);
    const run = handle.tryPinPrefix(batch.digests, n, device, batch.leases);
    if (run < 0) throw statusError(-run, 'tryPinPrefix');
    const views = batch.views;
    if (keys !== null) {
      // The run's leases replace their keys in place; the keys past the run are dropped.
      for (let i = 0; i < run; i++) keys[i] = new TableLease(this, keys[i] as ArtifactKey, consumer, readiness, views[i]!);
      if (run < n) keys.length = run;
      return keys as Lease[];
    }
    const leases: DigestLease[] = [];
    for (let i = 0; i < run; i++) leases.push(new TableDigestLease(this, batch.digestWords.slice(8 * i, 8 * i + 8), readiness, views[i]!));
    return leases;
  }

  /**
   * Closes many of this table's leases with one call into the table (one addon crossing for
   * each {@link MAX_PREFIX_CHUNKS} of them) and returns how many pins that released. Leases
   * already closed are skipped. Every element must be a lease of this package's lease tables:
   * one held in another table (or anything else) throws `ERR_INVALID_ARGUMENT` before any is
   * closed. On a closed table (which released every pin) the leases are only marked closed.
   */
  unpinMany(leases: ReadonlyArray<Lease | DigestLease>): number {
    if (!Array.isArray(leases)) throw invalidArgument('leases', "an array of this table's leases", leases);
    let open = 0;
    for (const lease of leases as unknown[]) {
      const table = leaseTableOf(lease);
      if (table === undefined || (table !== null && table !== this)) {
        throw invalidArgument('leases', `an array of leases of table ${JSON.stringify(this.name)}`, lease);
      }
      if (table === this) open++;
    }
    // The second pass reads the caller's array again, and a getter, Proxy or iterator may answer
    // otherwise, or throw: it detaches only what is a lease of this table as it reads it,
    // releasing the tokens whenever the buffer is full and before any error leaves, so no lease
    // is marked closed with its pin kept, and the buffer (at most MAX_PREFIX_CHUNKS) never grows
    // with the array. The buffer is taken out of the table while it fills, so that a call the
    // caller's code makes meanwhile (this method again, or tryPinPrefix) makes one of its own.
    const batch = this.#batchFor(Math.max(open, 1));
    const room = batch.tokens.length / 3;
    this.#batch = NO_BATCH;
    let released = 0;
    let n = 0;
    try {
      for (const lease of leases as unknown[]) {
        if (leaseTableOf(lease) !== this) continue;
        if (n === room) {
          released += this.#unpinTokens(batch.tokens, n);
          n = 0;
        }
        detachLease(lease as TableLease | TableDigestLease, batch.tokens, 3 * n++);
      }
      if (n > 0) released += this.#unpinTokens(batch.tokens, n);
    } catch (error) {
      // Tokens already released (when the release itself failed) release nothing a second time.
      this.#handle?.unpinMany(batch.tokens, n);
      this.#batch = batch;
      throw error;
    }
    this.#batch = batch;
    return released;
  }

  /** Releases the pins of `n` detached leases' tokens; none on a closed table (its close released every pin). */
  #unpinTokens(tokens: Uint32Array, n: number): number {
    const handle = this.#handle;
    if (handle === null) return 0;
    const released = handle.unpinMany(tokens, n);
    if (released < 0) throw statusError(-released, 'unpinMany');
    return released;
  }

  /**
   * What a host {@link tryPin} of `key` would answer now, without pinning: `{ kind: 'ready' }`
   * or the miss (`absent`, `preparing`, `evicting`; `table-closed`). A hint for engines whose
   * lookup must not pin: the artifact may be evicted the moment after. Throws `ERR_INVALID_KEY`
   * for a `key` that is not an {@link ArtifactKey}.
   */
  peek(key: ArtifactKey): PeekReady | Miss {
    let digest: Uint8Array;
    try {
      digest = keyDigestBytes(key);
    } catch {
      throw notAKey();
    }
    const handle = this.#handle;
    if (handle === null) return MISS_CLOSED;
    const status = handle.peek(digest);
    if (status === STATUS.OK) return PEEK_READY;
    return MISSES[status] ?? MISS_CONTENDED;
  }

  /**
   * {@link peek} for many chunks in one call into the table (one addon crossing): one answer per
   * chunk, in order (`{ kind: 'ready' }` or the miss `absent`, `preparing`, `evicting`; each
   * `table-closed` on a closed table). `chunks`: keys, or their digests packed back to back in
   * one `Uint8Array`. Each answer is a hint, and the batch is not one snapshot; nothing is pinned.
   * Throws `ERR_INVALID_KEY` for an element that is not a key, `ERR_INVALID_ARGUMENT` for a
   * malformed `chunks`.
   */
  peekMany(chunks: readonly ArtifactKey[] | Uint8Array): Array<PeekReady | Miss> {
    const n = this.#loadPeekBatch(chunks);
    const handle = this.#handle;
    if (handle === null) return new Array<Miss>(n).fill(MISS_CLOSED);
    if (this.#statuses.length < n) this.#statuses = new Uint8Array(Math.max(n, 2 * this.#statuses.length));
    const statuses = this.#statuses;
    const leading = handle.peekMany(this.#batch.digests, n, statuses);
    if (leading < 0) throw statusError(-leading, 'peekMany');
    const answers = new Array<PeekReady | Miss>(n);
    for (let i = 0; i < n; i++) answers[i] = statuses[i] === STATUS.OK ? PEEK_READY : (MISSES[statuses[i]!] ?? MISS_CONTENDED);
    return answers;
  }

  /**
   * How many leading chunks {@link peek} finds ready now, in one call that stops at the first that
   * is not (an engine's count of leading hits); 0 on a closed table. `chunks` and the errors as
   * for {@link peekMany}. A hint, as peek is; nothing is pinned.
   */
  peekPrefix(chunks: readonly ArtifactKey[] | Uint8Array): number {
    const n = this.#loadPeekBatch(chunks);
    const handle = this.#handle;
    if (handle === null) return 0;
    const leading = handle.peekMany(this.#batch.digests, n, null);
    if (leading < 0) throw statusError(-leading, 'peekPrefix');
    return leading;
  }

  /** Checks a batch of keys or packed digests and copies their digests into the batch buffer; returns how many. */
  #loadPeekBatch(chunks: readonly ArtifactKey[] | Uint8Array): number {
    const read = this.#readChunks(chunks);
    if (typeof read === 'number') {
      this.#loadBatch(chunks as Uint8Array, null, read);
      return read;
    }
    this.#loadBatch(chunks as Uint8Array, read, read.length);
    return read.length;
  }

  /**
   * Every read of a caller's `chunks` (for a prefix pin or a batched peek) is here, each element
   * read once, before the table's reusable buffers are touched: a getter or Proxy trap (and
   * whatever it calls, this table's own tryPinPrefix, unpinMany or close included) runs before
   * those buffers hold this call's digests, and each lease is named by the element whose digest
   * it pinned. The length is checked before anything is sized from it, and read once: the count
   * of packed digests is returned (a number), or the keys read (a fresh array the caller may reuse).
   */
  #readChunks(chunks: readonly ArtifactKey[] | Uint8Array): unknown[] | number {
    if (chunks instanceof Uint8Array) {
      const n = packedDigestCount(chunks);
      if (n < 0) throw invalidArgument('chunks', PREFIX_CHUNKS, chunks);
      if (n > MAX_PREFIX_CHUNKS) throw invalidArgument('chunks.length', PREFIX_TOO_LONG, 32 * n);
      return n;
    }
    if (!Array.isArray(chunks)) throw invalidArgument('chunks', PREFIX_CHUNKS, chunks);
    const n = chunks.length;
    if (n >>> 0 !== n || n > MAX_PREFIX_CHUNKS) throw invalidArgument('chunks.length', PREFIX_TOO_LONG, n);
    const keys = new Array<unknown>(n);
    for (let i = 0; i < n; i++) {
      const key = chunks[i];
      if (!isArtifactKey(key)) throw notAKey();
      keys[i] = key;
    }
    return keys;
  }

  /** The batch buffers holding the digests of `n` chunks: `packed` as given, or `keys`' digests. */
  #loadBatch(packed: Uint8Array, keys: unknown[] | null, n: number): Batch {
    const batch = this.#batchFor(n);
    if (keys === null) {
      // set() copies by the array's own internal length, never a getter's; the native call reads n.
      if (n > 0) batch.digests.set(packed); // n is 0 for a detached buffer, which set() would refuse
    } else {
      const into = batch.digestWords;
      for (let i = 0, at = 0; i < n; i++, at += 8) keyDigestWordsInto(keys[i] as ArtifactKey, into, at);
    }
    return batch;
  }


  /**
   * The many-lease buffers, grown (never shrunk) to hold `n` leases, and never beyond
   * MAX_PREFIX_CHUNKS: a caller of a larger `n` works through them in parts.
   */
  #batchFor(n: number): Batch {
    if (this.#batch.tokens.length < n * 3) this.#batch = newBatch(Math.min(MAX_PREFIX_CHUNKS, Math.max(n, 2 * this.#batch.tokens.length / 3)));
    return this.#batch;
  }

  /** Producer: reserves a slot for `key` before the artifact is prepared. */
  reserve(key: ArtifactKey): Reservation {
    assertArtifactKey(key);
    const handle = this.#open('reserve');
    const status = handle.reserve(keyDigestBytes(key));
    if (status !== STATUS.OK) throw statusError(status, `reserve(${key})`);
    return Object.freeze({ key, slot: Number(handle.out[0]), generation: handle.out[1]! });
  }

  /**
   * Producer: makes a reserved artifact READY with its metadata. Validate the
   * bytes and geometry first: a published artifact is taken as ready by
   * every consumer.
   */
  publish(reservation: Reservation, meta: ArtifactMeta): void {
    const handle = this.#open('publish');
    this.#checkReservation(reservation);
    if (typeof meta !== 'object' || meta === null) throw invalidArgument('meta', 'an object of artifact metadata', meta);
    this.#meta[0] = u64('meta.sizeBytes', ownField(meta, 'sizeBytes'));
    this.#meta[1] = u64('meta.location', ownField(meta, 'location'));
    this.#meta[2] = u64('meta.checksum', ownField(meta, 'checksum'));
    this.#meta[3] = BigInt(u32('meta.codecId', ownField(meta, 'codecId')));
    this.#meta[4] = BigInt(u32('meta.representationVersion', ownField(meta, 'representationVersion')));
    const status = handle.publish(reservation.slot, reservation.generation, this.#meta);
    if (status !== STATUS.OK) throw statusError(status, `publish(${reservation.key})`);
  }

  /** Producer: gives a reserved slot back (preparation failed or was stopped). */
  abandon(reservation: Reservation): void {
    const handle = this.#open('abandon');
    this.#checkReservation(reservation);
    const status = handle.abandon(reservation.slot, reservation.generation);
    if (status !== STATUS.OK) throw statusError(status, `abandon(${reservation.key})`);
  }

  /** Producer: evicts `key` unless it is pinned. `'pinned'` also covers a pin racing in: retry later. */
  tryEvict(key: ArtifactKey): 'evicted' | 'pinned' | 'absent' {
    assertArtifactKey(key);
    const status = this.#open('tryEvict').tryEvict(keyDigestBytes(key));
    if (status === STATUS.OK) return 'evicted';
    if (status === STATUS.PINNED) return 'pinned';
    if (status === STATUS.ABSENT) return 'absent';
    throw statusError(status, `tryEvict(${key})`);
  }

  /** Producer: records a completed device write for a READY artifact; a newer record replaces an older one. */
  recordDeviceWrite(key: ArtifactKey, write: DeviceWrite): 'recorded' | 'absent' {
    assertArtifactKey(key);
    const handle = this.#open('recordDeviceWrite');
    if (typeof write !== 'object' || write === null) throw invalidArgument('write', 'a device write { device, arena, arenaGeneration, writeSeq }', write);
    const writeSeq = u64('write.writeSeq', ownField(write, 'writeSeq'));
    const target = normalizeTarget(write);
    if (target === null) {
      throw invalidArgument('write', 'a device write with device "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" and non-negative arena and arenaGeneration', write);
    }
    if (/^GPU-[0-]+$/.test(target.device)) throw invalidArgument('write.device', 'a GPU UUID other than all zeros (reserved for "no record")', write.device);
    const record = deviceRecord(target, writeSeq);
    const status = handle.recordDeviceWrite(keyDigestBytes(key), record);
    if (status === STATUS.OK) return 'recorded';
    if (status === STATUS.ABSENT) return 'absent';
    throw statusError(status, `recordDeviceWrite(${key})`);
  }

  /**
   * Releases every pin held by clients whose process died (pid plus start
   * time: a reused pid is not life) and frees their entries; a dead
   * producer's role is freed too. Returns how many clients were reaped.
   */
  reapDeadClients(): number {
    const reaped = this.#open('reapDeadClients').reapDeadClients();
    if (reaped === -STATUS.ERR_BAD_SEGMENT && typeof this.#open('reapDeadClients').segment() === 'number') throw this.#truncated('reapDeadClients()');
    if (reaped < 0) throw statusError(-reaped, 'reapDeadClients()');
    return reaped;
  }

  /** Pins this client holds on `slot`. */
  clientPins(slot: number): number {
    return this.#open('clientPins').clientPins(u32('slot', slot));
  }

  /** Slots, states, pin holders and registered clients, for operators. */
  inspect(): TableInspection {
    const segment = this.#open('inspect').segment();
    if (typeof segment === 'number') throw this.#truncated('inspect');
    return inspectSegment(segment, this.capacity);
  }

  /** ERR_BAD_SEGMENT for a native segment whose file was truncated under this handle. */
  #truncated(what: string): WaitprepError {
    const size = this.#open(what).fileSize?.() ?? -1;
    return new WaitprepError(
      'ERR_BAD_SEGMENT',
      `${what}: the segment's file is now ${size < 0 ? 'of unknown size' : `${size} bytes`}, shorter than the ${segmentSize(this.capacity)} bytes ` +
        `of capacity ${this.capacity} mapped at open: someone truncated /dev/shm/${this.name}. Nothing past its end was read; ` +
        'every client still attached crashes (SIGBUS) on its next pin. Never truncate a live table (docs/lease-table.md#limits)',
    );
  }

  /**
   * Counts for monitoring (slots by state, pinned slots, clients by state, the
   * producer, reaped clients), read in place: one pass over each slot's first
   * cache line, no copy of the segment, unlike {@link inspect}. Not one
   * snapshot: each word is read atomically, the whole may mix moments.
   */
  summary(): TableSummary {
    const raw = this.#open('summary').summary();
    if (raw === STATUS.ERR_BAD_SEGMENT) {
      const segment = this.#open('summary').segment();
      if (typeof segment === 'number') throw this.#truncated('summary');
      throw corruptHeader('summary', segment.subarray(0, HEADER_SIZE), this.capacity);
    }
    if (typeof raw === 'number') throw new WaitprepError('ERR_CLOSED', 'summary: the table handle is closed');
    const [free, reserved, ready, evicting] = raw.slots as [number, number, number, number];
    return {
      capacity: this.capacity,
      slots: { free, reserved, ready, evicting },
      pinnedSlots: raw.pinnedSlots,
      clients: { claiming: raw.clients[1]!, active: raw.clients[2]!, reaping: raw.clients[3]! },
      producer: raw.producer < 0 ? null : raw.producer,
      reapedClients: raw.reapedClients,
    };
  }

  /** Releases every pin this client holds, gives up the producer role, unregisters. Idempotent. */
  close(): void {
    const handle = this.#handle;
    if (handle === null) return;
    this.#handle = null;
    handle.close();
  }

  /** True once `close()` ran. */
  get closed(): boolean {
    return this.#handle === null;
  }

  #open(what: string): TableHandle {
    if (this.#handle === null) throw new WaitprepError('ERR_CLOSED', `${what}: the table handle is closed`);
    return this.#handle;
  }

  /**
   * A reservation's slot must be a u32 integer and its generation a u64 bigint, exactly: the
   * addon converts them with wrap-around (`slot + 2^32` or `slot + 0.5` would name a live slot),
   * so a forged or corrupted token is refused here, the same way in both implementations.
   */
  #checkReservation(reservation: Reservation): void {
    if (
      typeof reservation !== 'object' || reservation === null ||
      !Number.isInteger(reservation.slot) || reservation.slot < 0 || reservation.slot > U32_MAX ||
      typeof reservation.generation !== 'bigint' || reservation.generation < 0n || reservation.generation >= GENERATION_END
    ) {
      throw invalidArgument('reservation', 'a Reservation from reserve() (slot a u32 integer, generation a bigint below 2^56)', reservation);
    }
  }
}

/**
 * A slot's generation has 56 bits (layout.ts: the state word is state | generation << 8), so a
 * reservation's generation at or past 2^56 would wrap onto a live slot's word: it is refused.
 */
const GENERATION_END = 1n << 56n;

/**
 * Object.prototype, read for the names tryPin takes from `want`. The wake path reads `want` with
 * plain property reads, because an own-property check (Object.hasOwn) on every pin puts more
 * work on the device pin. A value that differs from Object.prototype's is not inherited
 * from it, so Object.hasOwn runs only when the two are equal: when Object.prototype holds the same
 * value (polluted), or for a missing `target` (both undefined). V8 folds the read of an
 * Object.prototype that holds no such name to a constant.
 */
const OBJECT_PROTOTYPE = Object.prototype as Record<string, unknown>;

/** The readiness `want` asks for: `ERR_INVALID_ARGUMENT` for anything but `'host'` or `'device'`, or one `want` inherits from Object.prototype. */
function readinessOf(want: unknown): Readiness {
  if (isObject(want)) {
    const readiness = want.readiness;
    if ((readiness === 'host' || readiness === 'device') && (readiness !== OBJECT_PROTOTYPE.readiness || Object.hasOwn(want, 'readiness'))) return readiness;
  }
  throw invalidArgument('want', "a readiness request { readiness: 'host' } or { readiness: 'device', target }", want);
}

/** A device request's target as a wp_device_record, or null when malformed (`want` is a checked device request). */
function targetOf(want: ReadinessRequest): Uint8Array | null {
  const target = (want as { target: unknown }).target;
  return target !== OBJECT_PROTOTYPE.target || Object.hasOwn(want, 'target') ? encodedTarget(target) : null;
}

function throwBadConsumer(consumer: unknown): never {
  throw invalidArgument('consumer', 'a consumer { engine, request, generation } (non-empty strings, a non-negative safe integer)', consumer);
}

/**
 * Opens (or with `create`, creates) a lease table and registers this thread
 * as one of its clients. Errors: `ERR_INVALID_ARGUMENT` (name, role, capacity,
 * mode), `ERR_TABLE_NOT_FOUND`, `ERR_TABLE_EXISTS`, `ERR_BAD_SEGMENT`,
 * `ERR_WRITER_EXISTS`, `ERR_NO_CLIENT_SLOT`, `ERR_NATIVE_UNAVAILABLE`, and `ERR_NO_SPACE` when
 * `/dev/shm` cannot hold a native table being created (docs/operations.md: sizing /dev/shm).
 */
export function openLeaseTable(options: OpenLeaseTableOptions): LeaseTable {
  if (typeof options !== 'object' || options === null) throw invalidArgument('options', 'an object { name, role, create?, implementation? }', options);
  // Own properties only (here and in `create`): an inherited `create` must not turn an open into a create.
  options = ownOptions(options);
  const { name, role, create, buffer } = options;
  if (!isTableName(name)) {
    throw invalidArgument('options.name', '1-200 characters of A-Z a-z 0-9 . _ -, not starting with a dot', name);
  }
  if (role !== 'consumer' && role !== 'producer') throw invalidArgument('options.role', "'consumer' or 'producer'", role);
  let capacity = 0;
  let mode = 0o600;
  if (create !== undefined) {
    if (typeof create !== 'object' || create === null) throw invalidArgument('options.create', 'an object { capacity, mode? }', create);
    capacity = ownField(create, 'capacity') as number;
    if (typeof capacity !== 'number' || !Number.isInteger(capacity) || capacity < 1 || capacity > MAX_CAPACITY) {
      throw invalidArgument('options.create.capacity', `an integer in [1, ${MAX_CAPACITY}]`, capacity);
    }
    mode = (ownField(create, 'mode') as number | undefined) ?? 0o600;
    if (typeof mode !== 'number' || !Number.isInteger(mode) || mode < 1 || mode > 0o777) {
      throw invalidArgument('options.create.mode', 'a permission mode in [0o1, 0o777] (0 would make a table nobody can open; omit it for 0o600)', mode);
    }
  }
  const trust = trustFlags(options.trust);
  if (create !== undefined) {
    // A table is never created in a mode its own opens would refuse (waitprep.h, "Trust").
    if ((mode & 0o020) !== 0 && (trust.flags & OPEN_TRUST.GROUP_WRITE) === 0) {
      throw invalidArgument('options.create.mode', 'a mode the group may not write, unless options.trust.groupWritable is true', mode);
    }
    if ((mode & 0o002) !== 0 && (trust.flags & OPEN_TRUST.WORLD_WRITE) === 0) {
      throw invalidArgument('options.create.mode', 'a mode others may not write (anyone on the host), unless options.trust.worldWritable is true', mode);
    }
  }
  const choice = options.implementation ?? 'auto';
  if (choice !== 'auto' && choice !== 'native' && choice !== 'js') throw invalidArgument('options.implementation', "'auto', 'native' or 'js'", choice);
  if (buffer !== undefined && !(buffer instanceof SharedArrayBuffer)) throw invalidArgument('options.buffer', 'a SharedArrayBuffer', buffer);
  if (choice === 'native' && nativeAddon === null) {
    throw nativeUnavailableError(`openLeaseTable(${JSON.stringify(name)}) with implementation 'native'`);
  }
  const useNative = buffer === undefined && choice !== 'js' && nativeAddon !== null;
  const producer = role === 'producer';
  const what = `openLeaseTable(${JSON.stringify(name)})`;
  if (useNative) {
    const { status, handle, errno } = openNativeHandle(nativeAddon!, { name, producer, createCapacity: capacity, mode, trustFlags: trust.flags, trustedUid: trust.uid });
    if (handle === null) {
      if (status === STATUS.ERR_NO_SPACE) throw noSpaceError(what, capacity);
      if (status === STATUS.ERR_UNTRUSTED_SEGMENT) throw untrustedError(what, name, trust);
      if (status === STATUS.ERR_BAD_SEGMENT) throw statusError(status, what + otherAbiNote(name));
      throw statusError(status, what, errno);
    }
    return new LeaseTable(handle, 'native', name, role, null);
  }
  const opened = openJsHandle({ name, producer, createCapacity: capacity, ...(buffer ? { buffer } : {}) });
  if (opened.handle === null) throw statusError(opened.status, what);
  return new LeaseTable(opened.handle, 'js', name, role, opened.buffer);
}

/**
 * Removes a native table's name (`/dev/shm/<name>`); open handles keep working until closed.
 * True when removed, false when there is no such table (or no addon). A name this user may not
 * remove throws `ERR_PERMISSION_DENIED` (with the errno), any other failure `ERR_SYSTEM`.
 */
export function unlinkLeaseTable(name: string): boolean {
  if (!isTableName(name)) throw invalidArgument('name', 'a table name', name);
  if (nativeAddon === null) return false;
  const [status, errno] = nativeAddon.unlink(name);
  if (status === STATUS.OK) return true;
  if (status === STATUS.ERR_NOT_FOUND) return false;
  throw statusError(status, `unlinkLeaseTable(${JSON.stringify(name)})`, errno);
}

/**
 * The handoff token of a lease this package's lease table gave (`lease.handoffToken()`, for code
 * that holds it typed as a plain {@link Lease}, as `onWake` returns it). `ERR_INVALID_ARGUMENT`
 * for any other lease (an in-memory backend's has no table to name), `ERR_CLOSED` once closed.
 */
export function leaseHandoffToken(lease: Lease | DigestLease): string {
  if (leaseTableOf(lease) === undefined) throw invalidArgument('lease', 'a lease from a lease table (tryPin, tryPinExact, tryPinPrefix, or a wake on leaseTableBackend)', lease);
  return (lease as TableLease | TableDigestLease).handoffToken();
}

/** The coordinator's backend over a lease table: `new WaitCoordinator({ backend: leaseTableBackend(table), … })`. */
export function leaseTableBackend(table: LeaseTable): ArtifactBackend {
  if (!(table instanceof LeaseTable)) throw invalidArgument('table', 'a LeaseTable from openLeaseTable()', table);
  return {
    tryPinReady: (key, consumer, want) => table.tryPin(key, want, consumer),
    leaseIsWellFormed: (lease) => isTableLease(lease),
  };
}
