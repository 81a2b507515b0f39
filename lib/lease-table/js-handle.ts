/**
 * The lease table's JavaScript fallback: the same byte layout and the same
 * protocol as native/src/table.c, over a SharedArrayBuffer instead of POSIX
 * shared memory. Read table.c first; every function here mirrors the C
 * function of the same name, and the comments only add what differs in JS.
 *
 * Memory orders. JS Atomics are sequentially consistent, at least as strong as
 * every order table.c uses. 64-bit shared words (state_gen, pin_mask,
 * producer, client words, the device sequence) go through BigUint64Array
 * Atomics. Digests and metadata are read with plain 32-bit reads (JS has no
 * undefined behaviour for races; aligned 32-bit accesses never tear, and the
 * state re-read decides whether what was read can be trusted, exactly as in C).
 * The device-record fields are read and written with 32-bit Atomics, so the
 * seqlock's second sequence load can never be satisfied before the field loads
 * (C needs an acquire fence for that; seq_cst loads give it here).
 *
 * Allocation. The pin path (tryPin/unpin) allocates nothing but the BigInt
 * values that BigUint64Array Atomics return and the few small BigInts derived
 * from them; the results go into `out` through a Uint32Array view on it.
 *
 * Clients and liveness. A SharedArrayBuffer cannot cross processes, so in the
 * fallback every client of a table lives in this one process (one client per
 * handle, one handle per thread that uses the table: worker_threads open the
 * table from the buffer the creator hands them). Every entry carries our own
 * pid, which is alive, so the pid rule alone never reaps here. A thread that is
 * done with a table should close() its handle: that releases all its pins,
 * gives up the producer role and frees its registry entry. A worker thread's
 * handles still open when the thread ends normally (its event loop drains, or
 * process.exit()) are closed by a process 'exit' hook.
 *
 * A worker stopped with worker.terminate() runs no hook at all, so a worker's
 * entry also names its OS thread (tid and start time, liveness.ts selfThread),
 * and the reaper judges it by /proc/self/task/TID (judgeThread): gone, or
 * another start time, is dead. Why this and not something the thread keeps
 * doing: a terminated worker runs no JavaScript, no 'exit' listener and no
 * FinalizationRegistry callback (its isolate is torn down, not collected); a
 * heartbeat or lease word it refreshes cannot tell it from a live thread busy
 * in a synchronous loop or blocked in Atomics.wait, so any timeout would reap
 * live threads; a MessagePort's 'close' reaches only an event loop (the table
 * code has no port to its peers and the reap is synchronous); Web Locks are
 * async and newer than Node 20. The OS thread is released by the kernel when
 * the thread ends, whatever ended it, and exists for as long as the thread
 * can run JavaScript again: the same test native/src/table.c makes of a
 * process, one level down. The main thread records no thread: it lives as
 * long as the process does, and its entry stays byte-for-byte the C core's.
 */
import { isMainThread, threadId } from 'node:worker_threads';
import type { RawSummary, TableHandle } from './handle.js';
import { judgeClient, judgeReaper, reaperNamed, selfIdentity, selfThread, type Identity, type RecordedClient, type RegistryEntry } from './liveness.js';
import {
  CLIENT_FIELD,
  FALLBACK_CLIENT_FIELD,
  CLIENT_PRODUCER,
  CLIENT_SIZE,
  CLIENT_STATE,
  CLIENT_STATES,
  CLIENT_WORD,
  CLIENTS_OFFSET,
  HDR,
  HEADER_SIZE,
  MAX_CAPACITY,
  MAX_CLIENTS,
  isTableName,
  PROBE_WINDOW,
  SLOT,
  SLOT_SIZE,
  SLOT_STATE,
  SLOTS_OFFSET,
  STATUS,
  WP_ABI_VERSION,
  WP_MAGIC,
  headerCorruption,
  segmentSize,
} from './layout.js';

// The layout is little-endian and so are the 32-bit views used to read it.
if (new Uint8Array(new Uint32Array([1]).buffer)[0] !== 1) {
  throw new Error('waitprep: the JavaScript lease table needs a little-endian host');
}

const U64 = 0xffff_ffff_ffff_ffffn;
const STATE_SHIFT = 8n;
const STATE_MASK = 0xffn;
const CLIENT_STATE_MASK = 0x3n;
const PID_MASK = CLIENT_WORD.PID_MASK;
const PID_MASK_N = BigInt(PID_MASK);
const SERIAL_SHIFT = BigInt(CLIENT_WORD.SERIAL_SHIFT);
/** A client word with state and pid cleared (serial kept): how FREE is written. */
const KEEP_SERIAL = U64 & ~CLIENT_STATE_MASK & ~(PID_MASK_N << 2n);
const NO_RECORD = 0xffff_ffff;
/** tryPinInput's digest bytes, never read: its words are given. */
const NO_DIGEST = new Uint8Array(32);
const { OS_THREAD, OS_THREAD_START } = FALLBACK_CLIENT_FIELD;
const MAX_LEASE_RECORDS = 1 << 30;
/** table.c EXACT_EVICTING_RETRIES: how often an exact pin looks again at a slot EVICTING at its generation. */
const EXACT_EVICTING_RETRIES = 64;

const SG_FREE = BigInt(SLOT_STATE.FREE);
const SG_RESERVED = BigInt(SLOT_STATE.RESERVED);
const SG_READY = BigInt(SLOT_STATE.READY);
const SG_EVICTING = BigInt(SLOT_STATE.EVICTING);

// The pin path's offsets in u32 elements of the segment.
const SLOTS_U32 = SLOTS_OFFSET >> 2;
const SLOT_U32 = SLOT_SIZE >> 2;
const DIGEST_U32 = SLOT.DIGEST >> 2;
const MASK_U32 = SLOT.PIN_MASK >> 2;

/**
 * digest_equals for the slot whose first u32 is `base`, with plain 32-bit reads: the caller decides
 * whether they can be trusted. XOR and OR keep every value an int32 (V8 compares Uint32Array
 * elements as doubles otherwise).
 */
function digestMatches(u32: Uint32Array, base: number, want: Uint32Array): boolean {
  const d = base + DIGEST_U32;
  return (
    ((u32[d]! ^ want[0]!) |
      (u32[d + 1]! ^ want[1]!) |
      (u32[d + 2]! ^ want[2]!) |
      (u32[d + 3]! ^ want[3]!) |
      (u32[d + 4]! ^ want[4]!) |
      (u32[d + 5]! ^ want[5]!) |
      (u32[d + 6]! ^ want[6]!) |
      (u32[d + 7]! ^ want[7]!)) ===
    0
  );
}

/** A REAPING word's pid bits naming a registered reaper (table.c reaper_bits); 0: unregistered. */
const REAPER_NAMED = CLIENT_WORD.REAPER_NAMED;
function reaperBits(index: number, clientWord: bigint): bigint {
  if (index < 0) return 0n;
  return (BigInt(REAPER_NAMED) | (((clientWord >> SERIAL_SHIFT) & 0x7fffn) << 6n) | BigInt(index)) << 2n;
}

/** The producer header word of the client registered at `index` with `clientWord` (table.c producer_word_of). */
function producerWordOf(index: number, clientWord: bigint): bigint {
  return BigInt(index + 1) | ((clientWord >> SERIAL_SHIFT) << 8n);
}

function makeSg(state: bigint, gen: bigint): bigint {
  return BigInt.asUintN(64, (gen << STATE_SHIFT) | state);
}

/**
 * table.c bucket_of's multiply-shift: (h * buckets) >> 32 for a digest word `h`, exactly as the C
 * core computes it in 64-bit integers. buckets <= 2^21 (capacity <= 2^24 in buckets of 8, halved
 * and rounded up), so h * buckets stays below 2^53 and the double arithmetic is exact.
 */
export function bucketOf(h: number, buckets: number): number {
  // `| 0` (the result is below 2^21) makes it an int32 for V8: an index kept as a double costs a
  // float-to-int check on every probe.
  return ((h * buckets) / 0x1_0000_0000) | 0;
}

/** How a table of `capacity` slots splits into buckets (table.c wp_open): a key's first choice is one of `left`, its second one of the `right` after them. */
function bucketSplit(capacity: number): { left: number; right: number } {
  const buckets = Math.ceil(capacity / PROBE_WINDOW);
  const left = Math.ceil(buckets / 2);
  return { left, right: buckets - left };
}

/**
 * The slots a key with this 32-byte digest may occupy in a table of `capacity` slots: one array
 * per choice of bucket (two, or one when the table has a single bucket), in the order a lookup
 * probes them (docs/lease-table.md, "Placement").
 */
export function keyBucketsFor(digest: Uint8Array, capacity: number): number[][] {
  const view = new DataView(digest.buffer, digest.byteOffset, digest.byteLength);
  const { left, right } = bucketSplit(capacity);
  const buckets = [bucketOf(view.getUint32(0, true), left)];
  if (right > 0) buckets.push(left + bucketOf(view.getUint32(4, true), right));
  return buckets.map((b) => {
    const slots: number[] = [];
    for (let slot = b * PROBE_WINDOW; slot < Math.min((b + 1) * PROBE_WINDOW, capacity); slot++) slots.push(slot);
    return slots;
  });
}

// ---- name registry (per thread, like a per-thread /dev/shm) ----------------------------

const registry = new Map<string, SharedArrayBuffer>();

/** Removes a table's name from this thread's registry; open handles keep working. */
export function unlinkJsTable(name: string): number {
  if (!isTableName(name)) return STATUS.ERR_INVALID_ARGUMENT;
  return registry.delete(name) ? STATUS.OK : STATUS.ERR_NOT_FOUND;
}

// ---- the worker-exit safety net ---------------------------------------------------------

const openInWorker = new Set<JsTableHandle>();
let exitHook = false;
function trackOpen(handle: JsTableHandle): void {
  if (isMainThread) return; // the main thread's end is the process's end: nothing to release to
  openInWorker.add(handle);
  if (!exitHook) {
    exitHook = true;
    process.once('exit', () => {
      for (const h of [...openInWorker]) h.close();
    });
  }
}

// ---- segment checks --------------------------------------------------------------------

/** check_segment: the capacity of a well-formed segment, or -1. Never reads out of bounds. */
function checkSegment(buffer: SharedArrayBuffer): number {
  const size = buffer.byteLength;
  if (size < HEADER_SIZE) return -1;
  const view = new DataView(buffer, 0, HEADER_SIZE);
  // Acquire (here seq_cst) on the magic pairs with initHeader's store of it.
  const magic = Atomics.load(new BigUint64Array(buffer, 0, 1), 0);
  const abi = view.getUint32(HDR.ABI_VERSION, true);
  const headerSize = view.getUint32(HDR.HEADER_SIZE, true);
  const capacity = view.getUint32(HDR.CAPACITY, true);
  const window = view.getUint32(HDR.PROBE_WINDOW, true);
  const maxClients = view.getUint32(HDR.MAX_CLIENTS, true);
  const slotSize = view.getUint32(HDR.SLOT_SIZE, true);
  const clientSize = view.getUint32(HDR.CLIENT_SIZE, true);
  const segSize = view.getBigUint64(HDR.SEGMENT_SIZE, true);
  const clientsOffset = view.getBigUint64(HDR.CLIENTS_OFFSET, true);
  const slotsOffset = view.getBigUint64(HDR.SLOTS_OFFSET, true);
  if (magic !== WP_MAGIC || abi !== WP_ABI_VERSION || headerSize !== HEADER_SIZE) return -1;
  if (capacity === 0 || capacity > MAX_CAPACITY || window !== PROBE_WINDOW) return -1;
  if (maxClients !== MAX_CLIENTS || slotSize !== SLOT_SIZE || clientSize !== CLIENT_SIZE) return -1;
  if (clientsOffset !== BigInt(CLIENTS_OFFSET) || slotsOffset !== BigInt(SLOTS_OFFSET)) return -1;
  if (segSize !== BigInt(segmentSize(capacity)) || size < segmentSize(capacity)) return -1;
  return capacity;
}

function initHeader(buffer: SharedArrayBuffer, capacity: number): void {
  const view = new DataView(buffer, 0, HEADER_SIZE);
  view.setUint32(HDR.ABI_VERSION, WP_ABI_VERSION, true);
  view.setUint32(HDR.HEADER_SIZE, HEADER_SIZE, true);
  view.setUint32(HDR.CAPACITY, capacity, true);
  view.setUint32(HDR.PROBE_WINDOW, PROBE_WINDOW, true);
  view.setUint32(HDR.MAX_CLIENTS, MAX_CLIENTS, true);
  view.setUint32(HDR.SLOT_SIZE, SLOT_SIZE, true);
  view.setUint32(HDR.CLIENT_SIZE, CLIENT_SIZE, true);
  view.setBigUint64(HDR.SEGMENT_SIZE, BigInt(segmentSize(capacity)), true);
  view.setBigUint64(HDR.CLIENTS_OFFSET, BigInt(CLIENTS_OFFSET), true);
  view.setBigUint64(HDR.SLOTS_OFFSET, BigInt(SLOTS_OFFSET), true);
  // Release (here seq_cst): an opener that sees the magic sees every field above.
  Atomics.store(new BigUint64Array(buffer, 0, 1), 0, WP_MAGIC);
}

// ---- open ------------------------------------------------------------------------------

export interface JsOpenOptions {
  name: string;
  producer: boolean;
  /** 0: open an existing table (from `buffer` when given, else by name); > 0: create (`buffer` is then ignored). */
  createCapacity: number;
  buffer?: SharedArrayBuffer;
}

export interface JsOpenResult {
  status: number;
  handle: TableHandle | null;
  buffer: SharedArrayBuffer | null;
}

/**
 * Opens or creates a table (wp_open_ex). A worker thread opens the creator's table by passing the
 * creator's buffer (see {@link jsTableBuffer}); the name is then also entered in the worker's own
 * registry if it is not there yet.
 */
export function openJsHandle(options: JsOpenOptions): JsOpenResult {
  const { name, producer, createCapacity, buffer: given } = options;
  if (!isTableName(name)) return fail(STATUS.ERR_INVALID_ARGUMENT);
  if (!Number.isInteger(createCapacity) || createCapacity < 0 || createCapacity > MAX_CAPACITY) {
    return fail(STATUS.ERR_INVALID_ARGUMENT);
  }
  let buffer: SharedArrayBuffer;
  let capacity: number;
  if (createCapacity > 0) {
    if (registry.has(name)) return fail(STATUS.ERR_EXISTS);
    try {
      buffer = new SharedArrayBuffer(segmentSize(createCapacity));
    } catch {
      return fail(STATUS.ERR_NO_MEMORY);
    }
    initHeader(buffer, createCapacity); // the rest is zero: FREE slots, FREE clients
    registry.set(name, buffer);
    capacity = createCapacity;
  } else {
    const found = given ?? registry.get(name);
    if (found === undefined) return fail(STATUS.ERR_NOT_FOUND);
    if (!(found instanceof SharedArrayBuffer)) return fail(STATUS.ERR_BAD_SEGMENT);
    capacity = checkSegment(found);
    if (capacity < 0) return fail(STATUS.ERR_BAD_SEGMENT);
    buffer = found;
    if (!registry.has(name)) registry.set(name, buffer);
  }
  const table = new JsTableHandle(buffer, capacity);
  const status = table.open(producer);
  if (status !== STATUS.OK) return fail(status);
  trackOpen(table);
  return { status: STATUS.OK, handle: table, buffer };
}

function fail(status: number): JsOpenResult {
  return { status, handle: null, buffer: null };
}

/** The SharedArrayBuffer behind a fallback handle (to hand to a worker), or null for any other handle. */
export function jsTableBuffer(handle: TableHandle): SharedArrayBuffer | null {
  return handle instanceof JsTableHandle ? handle.buffer : null;
}

// ---- the handle ------------------------------------------------------------------------

export class JsTableHandle implements TableHandle {
  readonly out = new BigUint64Array(8);
  readonly buffer: SharedArrayBuffer;
  readonly capacity: number;
  /** Buckets of a key's first choice, then of its second (0 in a one-bucket table): bucketSplit, cached privately at open. */
  private readonly left: number;
  private readonly right: number;
  private readonly u64: BigUint64Array;
  private readonly u32: Uint32Array;
  /** `out` as 32-bit words, so results are written without creating BigInts. */
  private readonly out32: Uint32Array;
  /** The digest of the current call as 8 little-endian u32 words. */
  private readonly want = new Uint32Array(8);
  /** Where the wake path writes its digest words for {@link tryPinInput}. */
  readonly pinInput = new Uint32Array(8);
  /** The device target of the current call: uuid 4 words, arena 2, arena_generation 2, write_seq 2. */
  private readonly target = new Uint32Array(10);
  /**
   * Per slot, this handle's leases on it beyond the first (table.c `pins`). Whether it holds a
   * first one is its own bit in the slot's mask, which only this handle sets and clears while it
   * lives (together with these counts; other clients' atomic updates of the word leave it as it
   * is), and its reaper once it is dead: so a pin and an unpin of a slot held once touch only the
   * slot's lines and the lease record, not this array of `capacity` entries.
   */
  private readonly pins: Uint32Array;
  /** Slots whose count in `pins` is above zero (table.c `multi`); while 0, no unpin reads `pins`. */
  private multi = 0;
  // The lease records (table.c lease_record), one entry per array.
  private leaseSlot = new Uint32Array(0);
  private leaseGen = new Uint32Array(0);
  private leaseNext = new Uint32Array(0);
  private leaseLive = new Uint8Array(0);
  private leaseCap = 0;
  /**
   * table.c record_seed: every lease record's first generation, this handle's own, so that
   * another handle's token almost never names a live record of this one (and releases its pin).
   */
  private readonly recordSeed = Math.floor(Math.random() * 0x1_0000_0000);
  private leaseFree = NO_RECORD;

  private client = -1;
  private clientWord = 0n;
  /**
   * This client's pin bit, as a 32-bit word: the fallback reads and writes the
   * 64-bit pin mask as its two little-endian 32-bit halves (same bytes), so a
   * pin's or/and create no BigInt. Sound because a client only ever touches
   * the half holding its own bit, and the evictor loads both halves after its
   * claim (every access seq_cst, see tryEvict). A SharedArrayBuffer table is
   * never shared with the C core, so the sizes of atomic accesses never mix.
   */
  private bit32 = 0;
  private notBit32 = 0;
  /** 0 or 1: which 32-bit half of a pin mask holds this client's bit. */
  private bitHalf = 0;
  private isProducer = false;
  private closed = false;

  constructor(buffer: SharedArrayBuffer, capacity: number) {
    const size = segmentSize(capacity);
    this.buffer = buffer;
    this.capacity = capacity;
    const split = bucketSplit(capacity);
    this.left = split.left;
    this.right = split.right;
    this.u64 = new BigUint64Array(buffer, 0, size / 8);
    this.u32 = new Uint32Array(buffer, 0, size / 4);
    this.out32 = new Uint32Array(this.out.buffer);
    this.pins = new Uint32Array(capacity);
  }

  get clientIndex(): number {
    return this.client;
  }
  get producer(): boolean {
    return this.isProducer;
  }

  // -- offsets (u64 / u32 element indexes) --

  private slotByte(slot: number): number {
    return SLOTS_OFFSET + slot * SLOT_SIZE;
  }
  private sgIndex(slot: number): number {
    return (SLOTS_OFFSET + slot * SLOT_SIZE + SLOT.STATE_GEN) >> 3;
  }
  /** The u32 index of the pin-mask half that holds `client`'s bit. */
  private maskHalf(slot: number, client: number): number {
    return ((SLOTS_OFFSET + slot * SLOT_SIZE + SLOT.PIN_MASK) >> 2) + (client >> 5);
  }
  private clientWordIndex(client: number): number {
    return (CLIENTS_OFFSET + client * CLIENT_SIZE + CLIENT_FIELD.WORD) >> 3;
  }

  /** Loads the digest into `want`; false when it is not 32 bytes. */
  private loadDigest(digest: Uint8Array): boolean {
    if (digest.length !== 32) return false;
    const want = this.want;
    for (let k = 0, b = 0; k < 8; k++, b += 4) {
      want[k] = digest[b]! | (digest[b + 1]! << 8) | (digest[b + 2]! << 16) | (digest[b + 3]! << 24);
    }
    return true;
  }

  /** table.c bucket_of for the loaded digest: choice 0 or 1. */
  private bucket(choice: number, words: Uint32Array = this.want): number {
    return choice === 0 || this.right === 0 ? bucketOf(words[0]!, this.left) : this.left + bucketOf(words[1]!, this.right);
  }

  /** How many buckets a key may use: 2, or 1 in a one-bucket table (table.c choices_of). */
  private get choices(): number {
    return this.right === 0 ? 1 : 2;
  }

  /** One past the last slot of `bucket` (the table's last bucket may be short). */
  private bucketEnd(bucket: number): number {
    const end = (bucket + 1) * PROBE_WINDOW;
    return end < this.capacity ? end : this.capacity;
  }

  /** digest_equals for the producer's lookups (the digest loaded into `want`). */
  private digestEquals(slot: number): boolean {
    return digestMatches(this.u32, SLOTS_U32 + slot * SLOT_U32, this.want);
  }

  // ---- client registry ----

  /** register_client, then claim_producer when asked: wp_open_ex after the mapping. */
  open(producer: boolean): number {
    let rc = this.registerClient(producer ? CLIENT_PRODUCER : 0);
    if (rc === STATUS.ERR_NO_CLIENT_SLOT && this.reapDeadClients() > 0) {
      rc = this.registerClient(producer ? CLIENT_PRODUCER : 0);
    }
    if (rc === STATUS.OK && producer) {
      rc = this.claimProducer();
      if (rc !== STATUS.OK) this.unregister();
    }
    if (rc !== STATUS.OK) this.closed = true;
    return rc;
  }

  private registerClient(flags: number): number {
    const { pid, startTime, pidNs, timeNs } = selfIdentity();
    if (pid > PID_MASK) return STATUS.ERR_SYSTEM;
    const thread = isMainThread ? null : selfThread();
    // A worker's CLAIMING word holds its tid where the pid goes: a worker terminated before its
    // entry is ACTIVE is then judged by the thread (the pid rule finds the tid gone, or ESRCH),
    // where our pid would be alive for good. Tids are pids, so the tid fits the pid bits.
    const claimant = thread !== null && thread.tid <= PID_MASK ? thread.tid : pid;
    const u64 = this.u64;
    for (let i = 0; i < MAX_CLIENTS; i++) {
      const wordIndex = this.clientWordIndex(i);
      const w = Atomics.load(u64, wordIndex);
      if ((w & CLIENT_STATE_MASK) !== BigInt(CLIENT_STATE.FREE)) continue;
      const serial = (w >> SERIAL_SHIFT) + 1n;
      const claiming = BigInt.asUintN(64, (serial << SERIAL_SHIFT) | (BigInt(claimant) << 2n) | BigInt(CLIENT_STATE.CLAIMING));
      if (Atomics.compareExchange(u64, wordIndex, w, claiming) !== w) continue;
      const entry = CLIENTS_OFFSET + i * CLIENT_SIZE;
      Atomics.store(u64, (entry + CLIENT_FIELD.START_TIME) >> 3, startTime);
      Atomics.store(u64, (entry + CLIENT_FIELD.PID_NS) >> 3, pidNs);
      Atomics.store(u64, (entry + CLIENT_FIELD.TIME_NS) >> 3, timeNs);
      Atomics.store(this.u32, (entry + CLIENT_FIELD.FLAGS) >> 2, flags);
      Atomics.store(this.u32, (entry + CLIENT_FIELD.THREAD) >> 2, threadId);
      // Before ACTIVE (seq_cst), so a reaper that sees ACTIVE judges this thread, not a
      // previous holder's.
      Atomics.store(this.u32, (entry + OS_THREAD) >> 2, thread === null ? 0 : thread.tid);
      Atomics.store(u64, (entry + OS_THREAD_START) >> 3, thread === null ? 0n : thread.startTime);
      const active = (claiming & KEEP_SERIAL) | (BigInt(pid) << 2n) | BigInt(CLIENT_STATE.ACTIVE);
      // ACTIVE by CAS from our CLAIMING word, as in table.c: if a reaper took the entry meanwhile
      // (it cannot tell a live registrant of another pid namespace from a dead one) we must not
      // overwrite whoever holds it now: we held no pins yet, so look for another entry.
      if (Atomics.compareExchange(u64, wordIndex, claiming, active) !== claiming) continue;
      this.client = i;
      this.clientWord = active;
      this.bit32 = 1 << (i & 31); // int32s, Smis for most bits: Atomics.or/and convert a heap number slower
      this.notBit32 = ~this.bit32;
      this.bitHalf = i >> 5;
      return STATUS.OK;
    }
    return STATUS.ERR_NO_CLIENT_SLOT;
  }

  private releaseClientPins(client: number): void {
    const bit = (1 << (client & 31)) >>> 0;
    const keep = ~bit >>> 0;
    for (let s = 0; s < this.capacity; s++) {
      const half = this.maskHalf(s, client);
      // Only slots holding the bit are written (see release_client_pins in table.c).
      if ((Atomics.load(this.u32, half) & bit) !== 0) Atomics.and(this.u32, half, keep);
    }
  }

  /**
   * settle_producer_slots: a device record left half-written (odd) becomes absent, EVICTING goes
   * back to READY, RESERVED is abandoned. Run by the new or closing producer, or by the reaper of
   * a dead one while the role still names it, so nobody else writes these states meanwhile.
   */
  private settleProducerSlots(): void {
    for (let s = 0; s < this.capacity; s++) {
      const index = this.sgIndex(s);
      const v = Atomics.load(this.u64, index);
      const seqIndex = (this.slotByte(s) + SLOT.DEVICE) >> 3;
      const seq = Atomics.load(this.u64, seqIndex);
      if ((seq & 1n) !== 0n) {
        // Half-written: finish it as an absent record (all-zero UUID) under the next even
        // sequence. Readers may hold pins here, so the sequence only ever grows: a reader
        // that saw an older even value cannot see it again.
        const f = ((this.slotByte(s) + SLOT.DEVICE) >> 2) + 2;
        for (let k = 0; k < 10; k++) Atomics.store(this.u32, f + k, 0);
        Atomics.store(this.u64, seqIndex, seq + 1n);
      }
      const state = v & STATE_MASK;
      // CAS from the word just read, as in table.c.
      if (state === SG_EVICTING) {
        Atomics.compareExchange(this.u64, index, v, makeSg(SG_READY, v >> STATE_SHIFT));
      } else if (state === SG_RESERVED) {
        Atomics.compareExchange(this.u64, index, v, makeSg(SG_FREE, (v >> STATE_SHIFT) + 1n));
      }
    }
  }

  reapDeadClients(): number {
    if (this.closed) return -STATUS.ERR_INVALID_ARGUMENT;
    const identity = selfIdentity();
    if (identity.pidNs === 0n) return 0; // we cannot judge anyone's liveness
    const me = reaperBits(this.client, this.clientWord);
    const u64 = this.u64;
    let reaped = 0;
    for (let i = 0; i < MAX_CLIENTS; i++) {
      if (i === this.client) continue;
      const entry = CLIENTS_OFFSET + i * CLIENT_SIZE;
      const wordIndex = (entry + CLIENT_FIELD.WORD) >> 3;
      const w = Atomics.load(u64, wordIndex);
      const state = Number(w & CLIENT_STATE_MASK);
      if (state === CLIENT_STATE.FREE) continue;
      if (state === CLIENT_STATE.REAPING) {
        // A reap in progress: take it over only from a reaper that is gone, and only as a
        // registered reaper (table.c).
        if (this.client < 0 || !this.reaperIsGone(Number((w >> 2n) & PID_MASK_N), identity)) continue;
      } else {
        // liveness.ts: CLAIMING by its pid alone, ACTIVE within our namespaces only (the entry's
        // state is one of the two here: FREE and REAPING are handled above).
        if (judgeClient(this.registryEntry(i, w) as RecordedClient, identity).liveness !== 'dead') continue;
      }
      // Claim from the exact word found dead, naming ourselves as its reaper.
      const reaping = (w & KEEP_SERIAL) | me | BigInt(CLIENT_STATE.REAPING);
      if (Atomics.compareExchange(u64, wordIndex, w, reaping) !== w) continue;
      this.releaseClientPins(i);
      const producerWord = producerWordOf(i, w);
      if (Atomics.load(u64, HDR.PRODUCER >> 3) === producerWord) {
        // A dead producer: settle its slots before the role is freed (only the reaper holding
        // the REAPING claim gets here), then free the role.
        this.settleProducerSlots();
        Atomics.compareExchange(u64, HDR.PRODUCER >> 3, producerWord, 0n);
      }
      // FREE (serial kept) by CAS from our own REAPING word, as in table.c.
      if (Atomics.compareExchange(u64, wordIndex, reaping, w & KEEP_SERIAL) !== reaping) continue;
      Atomics.add(u64, HDR.REAPED >> 3, 1n);
      reaped++;
    }
    return reaped;
  }

  /** reaper_is_gone: the reaper a REAPING word names has left its entry, or its process is dead (liveness.ts judgeReaper). */
  private reaperIsGone(named: number, me: Identity): boolean {
    const reaper = reaperNamed(named);
    const held = reaper === 'unregistered' ? undefined : this.registryEntry(reaper.client, Atomics.load(this.u64, this.clientWordIndex(reaper.client)));
    return judgeReaper(reaper, held, me).liveness === 'dead';
  }

  /** Client entry `index` as it stands with word `w`: the fields liveness.ts judges. */
  private registryEntry(index: number, w: bigint): RegistryEntry {
    const entry = CLIENTS_OFFSET + index * CLIENT_SIZE;
    return {
      state: CLIENT_STATES[Number(w & CLIENT_STATE_MASK)]!,
      serial: Number(w >> SERIAL_SHIFT),
      pid: Number((w >> 2n) & PID_MASK_N),
      startTime: Atomics.load(this.u64, (entry + CLIENT_FIELD.START_TIME) >> 3),
      pidNamespace: Atomics.load(this.u64, (entry + CLIENT_FIELD.PID_NS) >> 3),
      timeNamespace: Atomics.load(this.u64, (entry + CLIENT_FIELD.TIME_NS) >> 3),
      osThread: Atomics.load(this.u32, (entry + OS_THREAD) >> 2),
      osThreadStartTime: Atomics.load(this.u64, (entry + OS_THREAD_START) >> 3),
    };
  }

  private producerWord(): bigint {
    return producerWordOf(this.client, this.clientWord);
  }

  /** unregister_client: frees our entry by CAS from our own ACTIVE word (a reaper that wrongly took it has moved on). */
  private unregister(): void {
    const w = this.clientWord;
    Atomics.compareExchange(this.u64, this.clientWordIndex(this.client), w, w & KEEP_SERIAL);
  }

  private claimProducer(): number {
    const mine = this.producerWord();
    for (let attempt = 0; attempt < 2; attempt++) {
      if (Atomics.compareExchange(this.u64, HDR.PRODUCER >> 3, 0n, mine) === 0n) {
        this.isProducer = true;
        this.settleProducerSlots(); // a previous producer may have died mid-operation
        return STATUS.OK;
      }
      if (attempt === 0) this.reapDeadClients(); // the holder may be dead
    }
    return STATUS.ERR_WRITER_EXISTS;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    openInWorker.delete(this);
    this.releaseClientPins(this.client);
    this.pins.fill(0);
    this.multi = 0;
    if (this.isProducer && Atomics.load(this.u64, HDR.PRODUCER >> 3) === this.producerWord()) {
      // Still the producer (not reaped in between): abandon our reservations, then let go.
      this.settleProducerSlots();
      Atomics.compareExchange(this.u64, HDR.PRODUCER >> 3, this.producerWord(), 0n);
    }
    this.isProducer = false;
    this.unregister();
  }

  // ---- consumer side ----

  /** lease_acquire: a record index for a new pin on `slot`, or NO_RECORD when none can be had. */
  private leaseAcquire(slot: number): number {
    if (this.leaseFree === NO_RECORD && !this.growLeases()) return NO_RECORD;
    const index = this.leaseFree;
    this.leaseFree = this.leaseNext[index]!;
    this.leaseSlot[index] = slot;
    this.leaseLive[index] = 1;
    return index;
  }

  private growLeases(): boolean {
    const old = this.leaseCap;
    const cap = old ? old * 2 : 256;
    if (cap > MAX_LEASE_RECORDS) return false;
    let slot: Uint32Array<ArrayBuffer>, gen: Uint32Array<ArrayBuffer>, next: Uint32Array<ArrayBuffer>, live: Uint8Array<ArrayBuffer>;
    try {
      slot = new Uint32Array(cap);
      gen = new Uint32Array(cap);
      next = new Uint32Array(cap);
      live = new Uint8Array(cap);
    } catch {
      return false; // out of memory: the pin becomes a 'contended' miss and its bit is undone, as in C
    }
    slot.set(this.leaseSlot);
    gen.set(this.leaseGen);
    next.set(this.leaseNext);
    live.set(this.leaseLive);
    for (let i = old; i < cap; i++) {
      gen[i] = this.recordSeed;
      next[i] = i + 1 < cap ? i + 1 : NO_RECORD;
    }
    this.leaseSlot = slot;
    this.leaseGen = gen;
    this.leaseNext = next;
    this.leaseLive = live;
    this.leaseFree = old;
    this.leaseCap = cap;
    return true;
  }

  /**
   * check_device_record: the slot's device record under its seqlock, against `target`. Called
   * while this client holds a pin on the slot, so only a newer record can race with the read.
   */
  private checkDeviceRecord(slot: number): number {
    const byte = this.slotByte(slot) + SLOT.DEVICE;
    const seqIndex = byte >> 3;
    const f = (byte >> 2) + 2; // first field word, after the 8-byte sequence
    const u64 = this.u64;
    const u32 = this.u32;
    const t = this.target;
    for (let attempt = 0; attempt < 8; attempt++) {
      const s1 = Atomics.load(u64, seqIndex);
      if (s1 === 0n) return STATUS.MISS_NO_DEVICE_RECORD;
      if ((s1 & 1n) !== 0n) continue; // a write in progress
      const uuid0 = Atomics.load(u32, f);
      const uuid1 = Atomics.load(u32, f + 1);
      const uuid2 = Atomics.load(u32, f + 2);
      const uuid3 = Atomics.load(u32, f + 3);
      const arena0 = Atomics.load(u32, f + 4);
      const arena1 = Atomics.load(u32, f + 5);
      const arenaGen0 = Atomics.load(u32, f + 6);
      const arenaGen1 = Atomics.load(u32, f + 7);
      if (Atomics.load(u64, seqIndex) !== s1) continue;
      if ((uuid0 | uuid1 | uuid2 | uuid3) === 0) return STATUS.MISS_NO_DEVICE_RECORD; // settled after a dead producer
      if (uuid0 !== t[0] || uuid1 !== t[1] || uuid2 !== t[2] || uuid3 !== t[3] || arena0 !== t[4] || arena1 !== t[5]) {
        return STATUS.MISS_DEVICE_MISMATCH;
      }
      if (arenaGen0 !== t[6] || arenaGen1 !== t[7]) return STATUS.MISS_ARENA_GENERATION_MISMATCH;
      return STATUS.OK;
    }
    return STATUS.MISS_DEVICE_WRITE_INCOMPLETE;
  }

  /** Loads a 40-byte wp_device_record into `target`; false when it is not 40 bytes. */
  private loadTarget(record: Uint8Array): boolean {
    if (record.length !== 40) return false;
    const t = this.target;
    for (let k = 0, b = 0; k < 10; k++, b += 4) {
      t[k] = record[b]! | (record[b + 1]! << 8) | (record[b + 2]! << 16) | (record[b + 3]! << 24);
    }
    return true;
  }

  /** tryPin of the digest words in {@link pinInput}, host readiness: the wake path. */
  tryPinInput(): number {
    return this.tryPin(NO_DIGEST, null, this.pinInput);
  }

  /**
   * try_pin, with the pinner's half of the Dekker handshake in the other order
   * of its two reads: table.c loads the state (acquire), publishes the pin bit,
   * then re-reads the state and wants the same word; here the bit is published
   * first and the state read once, after it. The argument is the same one
   * (docs/lease-table.md): both the `or` and the load are seq_cst, so either
   * the evictor's mask load comes after our `or` and sees the bit (it rolls
   * back), or its claim came before our load, which then sees EVICTING or a
   * later state and we back out. A READY state seen with the bit held stays
   * READY with that generation until we unpin, so the digest and metadata read
   * after the load are stable. The difference is cost, not soundness: in
   * JavaScript a 64-bit Atomics.load is a builtin call that allocates a
   * BigInt, and this order needs one per hit instead of two. The price is a
   * brief stray bit on a slot that turns out not to be READY (`preparing` and
   * `evicting` misses), which an evictor reads as "pinned, retry" (table.c
   * leaves one only when a pinner loses a race), and no `contended` from a
   * lost race: the one read's state is reported instead. `words`, when given, is the digest as
   * 8 little-endian u32 words (tryPinInput, tryPinPrefix), and `digest` is then not read.
   */
  tryPin(digest: Uint8Array, device: Uint8Array | null, words?: Uint32Array): number {
    if (this.closed) return STATUS.ERR_INVALID_ARGUMENT;
    let want = words;
    if (want === undefined || want.length !== 8) {
      if (!this.loadDigest(digest)) return STATUS.ERR_INVALID_ARGUMENT;
      want = this.want;
    }
    if (device !== null && !this.loadTarget(device)) return STATUS.ERR_INVALID_ARGUMENT;
    const u32 = this.u32;
    const want0 = want[0]!;
    const head = want0 | 0; // an int32, so the probe compares integers (see digestMatches)
    const choices = this.choices;
    let seen: number = STATUS.MISS_ABSENT;
    for (let choice = 0; choice < choices; choice++) {
      const bucket = this.bucket(choice, want);
      const end = this.bucketEnd(bucket);
      for (let slot = bucket * PROBE_WINDOW; slot < end; slot++) {
        const base = SLOTS_U32 + slot * SLOT_U32; // the slot's first u32
        // A cheap rejection with a plain read: a slot whose first digest word differs does not
        // hold our key now, so skipping it is the same as digest_equals failing a moment later.
        // A match decides nothing.
        if ((u32[base + DIGEST_U32]! | 0) !== head) continue;
        if (this.holds(base)) {
          // We already hold this slot: it cannot be evicted or reused until we unpin, so its
          // digest is stable and decides alone (it may show EVICTING for a moment; count++).
          if (!digestMatches(u32, base, want)) continue;
          return this.finishPin(slot, base, device, true);
        }
        const maskHalf = base + MASK_U32 + this.bitHalf;
        Atomics.or(u32, maskHalf, this.bit32);
        const sg = Atomics.load(this.u64, base >> 1);
        const state = sg & STATE_MASK;
        if (state === SG_READY && digestMatches(u32, base, want)) return this.finishPin(slot, base, device, false);
        Atomics.and(u32, maskHalf, this.notBit32);
        // Not ours to pin: say why when it is our key (the digest read is a hint from here on, as
        // in table.c, whose preparing/evicting reasons are read without a pin too).
        if (state === SG_FREE || state === SG_READY || !digestMatches(u32, base, want)) continue;
        seen = state === SG_RESERVED ? STATUS.MISS_PREPARING : STATUS.MISS_EVICTING;
      }
    }
    return seen;
  }

  /** The rest of a pin once this client's bit is on the slot (`held`: it was already). */
  private finishPin(slot: number, base: number, device: Uint8Array | null, held: boolean): number {
    let rc: number = device === null ? STATUS.OK : this.checkDeviceRecord(slot);
    let record = NO_RECORD;
    if (rc === STATUS.OK) {
      record = this.leaseAcquire(slot);
      if (record === NO_RECORD) rc = STATUS.MISS_CONTENDED;
    }
    if (rc !== STATUS.OK) {
      if (!held) Atomics.and(this.u32, base + MASK_U32 + this.bitHalf, this.notBit32);
      return rc;
    }
    if (held) {
      // A further lease on a slot this handle holds: count it.
      const more = this.pins[slot]!;
      if (more === 0) this.multi++;
      this.pins[slot] = more + 1;
    }
    this.writeLease(slot, base, record);
    return STATUS.OK;
  }

  /** Fills `out` for a lease: slot, generation, token, then the metadata (read after the re-read). */
  private writeLease(slot: number, base: number, record: number): void {
    const out32 = this.out32;
    const u32 = this.u32;
    out32[0] = slot;
    out32[1] = 0;
    // The generation (sg >> 8), from the two halves of the state word: while we hold the pin the
    // generation bits cannot change (only the state byte can, EVICTING and back), so plain 32-bit
    // reads give the generation of `sg` without creating a BigInt.
    const lo = u32[base]!; // the state word is the slot's first
    const hi = u32[base + 1]!;
    out32[2] = ((lo >>> 8) | (hi << 24)) >>> 0;
    out32[3] = hi >>> 8;
    out32[4] = record; // token: gen << 32 | index
    out32[5] = this.leaseGen[record]!;
    const m = base + (SLOT.META >> 2);
    out32[6] = u32[m]!; // size_bytes
    out32[7] = u32[m + 1]!;
    out32[8] = u32[m + 2]!; // location
    out32[9] = u32[m + 3]!;
    out32[10] = u32[m + 4]!; // checksum
    out32[11] = u32[m + 5]!;
    out32[12] = u32[m + 6]!; // codec_id
    out32[13] = 0;
    out32[14] = u32[m + 7]!; // representation_version
    out32[15] = 0;
  }

  /** True when it released a lease; false for one closed before, or not this handle's (wp_unpin's WP_STALE). */
  unpin(slot: number, index: number, gen: number): boolean {
    if (this.closed) return false;
    if (!(index < this.leaseCap)) return false;
    if (!this.leaseLive[index] || this.leaseGen[index] !== gen || this.leaseSlot[index] !== slot) return false; // closed before, or not ours
    this.leaseLive[index] = 0;
    this.leaseGen[index] = (gen + 1) >>> 0;
    this.leaseNext[index] = this.leaseFree;
    this.leaseFree = index;
    const more = this.multi === 0 ? 0 : this.pins[slot]!;
    if (more > 0) {
      // Another lease of this handle still holds the slot: keep the bit.
      this.pins[slot] = more - 1;
      if (more === 1) this.multi--;
    } else {
      Atomics.and(this.u32, SLOTS_U32 + slot * SLOT_U32 + MASK_U32 + this.bitHalf, this.notBit32);
    }
    return true;
  }

  /**
   * wp_try_pin_exact, in the fallback's order (the bit first, then one read of the state, as in
   * tryPin): a hit only when that read shows READY at `generation` and the slot holds `digest`.
   * EVICTING at that generation (a claim that rolls back while the handing client holds its pin)
   * is looked at again a bounded few times, as in table.c.
   */
  tryPinExact(slot: number, generation: bigint, digest: Uint8Array, device: Uint8Array | null): number {
    if (this.closed || !Number.isInteger(slot) || slot < 0 || slot >= this.capacity) return STATUS.ERR_INVALID_ARGUMENT;
    if (typeof generation !== 'bigint' || generation < 0n || generation >> (64n - STATE_SHIFT) !== 0n) return STATUS.ERR_INVALID_ARGUMENT;
    if (!this.loadDigest(digest) || (device !== null && !this.loadTarget(device))) return STATUS.ERR_INVALID_ARGUMENT;
    const base = SLOTS_U32 + slot * SLOT_U32;
    const sgIndex = base >> 1;
    const maskHalf = base + MASK_U32 + this.bitHalf;
    for (let attempt = 0; ; attempt++) {
      if (this.holds(base)) {
        // We hold the slot already: it cannot be freed or reused until we unpin, so one read decides.
        const sg = Atomics.load(this.u64, sgIndex);
        if (sg >> STATE_SHIFT !== generation || !digestMatches(this.u32, base, this.want)) return STATUS.MISS_STALE_HANDOFF;
        return this.finishPin(slot, base, device, true);
      }
      Atomics.or(this.u32, maskHalf, this.bit32);
      const sg = Atomics.load(this.u64, sgIndex);
      const state = sg & STATE_MASK;
      const ours = sg >> STATE_SHIFT === generation && state !== SG_FREE && digestMatches(this.u32, base, this.want);
      if (ours && state === SG_READY) return this.finishPin(slot, base, device, false);
      Atomics.and(this.u32, maskHalf, this.notBit32);
      if (!ours) return STATUS.MISS_STALE_HANDOFF;
      if (state === SG_RESERVED) return STATUS.MISS_PREPARING;
      if (attempt === EXACT_EVICTING_RETRIES) return STATUS.MISS_EVICTING;
    }
  }

  /** wp_try_pin_prefix: tryPin of each packed digest in turn, stopping at the first miss. */
  tryPinPrefix(digests: Uint8Array, n: number, device: Uint8Array | null, leases: BigUint64Array): number {
    if (this.closed || !Number.isInteger(n) || n < 0 || digests.length < n * 32 || leases.length < n * 8) return -STATUS.ERR_INVALID_ARGUMENT;
    const want = this.want;
    const out32 = this.out32;
    const into = new Uint32Array(leases.buffer, leases.byteOffset, n * 16);
    // LeaseTable's digests are 4-byte aligned: read them as words, not byte by byte.
    const words = (digests.byteOffset & 3) === 0 ? new Uint32Array(digests.buffer, digests.byteOffset, n * 8) : null;
    let run = 0;
    for (; run < n; run++) {
      if (words !== null) {
        for (let k = 0, w = run * 8; k < 8; k++) want[k] = words[w + k]!;
      } else {
        for (let k = 0, b = run * 32; k < 8; k++, b += 4) {
          want[k] = digests[b]! | (digests[b + 1]! << 8) | (digests[b + 2]! << 16) | (digests[b + 3]! << 24);
        }
      }
      if (this.tryPin(digests, device, want) !== STATUS.OK) break;
      into.set(out32, run * 16);
    }
    return run;
  }

  /** wp_unpin_many: unpin of each (slot, token index, token generation) triple, counting those it released. */
  unpinMany(tokens: Uint32Array, n: number): number {
    if (this.closed || !Number.isInteger(n) || n < 0 || tokens.length < n * 3) return -STATUS.ERR_INVALID_ARGUMENT;
    let released = 0;
    for (let w = 0; w < n * 3; w += 3) if (this.unpin(tokens[w]!, tokens[w + 1]!, tokens[w + 2]!)) released++;
    return released;
  }

  /** wp_peek: the probe of tryPin with plain reads of the digest and no pin bit. */
  peek(digest: Uint8Array): number {
    if (this.closed || !this.loadDigest(digest)) return STATUS.ERR_INVALID_ARGUMENT;
    return this.peekLoaded();
  }

  /** wp_peek_many: peek of each packed digest; the leading READY count, every status when asked. */
  peekMany(digests: Uint8Array, n: number, statuses: Uint8Array | null): number {
    if (this.closed || !Number.isInteger(n) || n < 0 || digests.length < n * 32 || (statuses !== null && statuses.length < n)) {
      return -STATUS.ERR_INVALID_ARGUMENT;
    }
    const want = this.want;
    let run = 0;
    let leading = true;
    for (let i = 0; i < n; i++) {
      for (let k = 0, b = i * 32; k < 8; k++, b += 4) {
        want[k] = digests[b]! | (digests[b + 1]! << 8) | (digests[b + 2]! << 16) | (digests[b + 3]! << 24);
      }
      const status = this.peekLoaded();
      if (status === STATUS.OK && leading) run++;
      else leading = false;
      if (statuses === null) {
        if (!leading) break; // only the leading run is asked for
      } else {
        statuses[i] = status;
      }
    }
    return run;
  }

  /**
   * The probe of peek for the digest in `want`. As in tryPin, a plain read of a slot's first
   * digest word rejects most slots cheaply (one whose word differs does not hold the key now:
   * the same as digest_equals failing a moment later); a candidate's state is then read with a
   * 32-bit atomic load of the state word's low half, which holds the state byte (a 64-bit load
   * allocates a BigInt), before its digest is compared, in table.c's order.
   */
  private peekLoaded(): number {
    const u32 = this.u32;
    const want = this.want;
    const head = want[0]! | 0;
    let seen: number = STATUS.MISS_ABSENT;
    for (let choice = 0; choice < this.choices; choice++) {
      const bucket = this.bucket(choice);
      for (let slot = bucket * PROBE_WINDOW, end = this.bucketEnd(bucket); slot < end; slot++) {
        const base = SLOTS_U32 + slot * SLOT_U32;
        if ((u32[base + DIGEST_U32]! | 0) !== head) continue;
        const state = Atomics.load(u32, base + (SLOT.STATE_GEN >> 2)) & 0xff;
        if (state === SLOT_STATE.FREE || !digestMatches(u32, base, want)) continue;
        if (state === SLOT_STATE.READY) return STATUS.OK;
        seen = state === SLOT_STATE.RESERVED ? STATUS.MISS_PREPARING : STATUS.MISS_EVICTING;
      }
    }
    return seen;
  }

  clientPins(slot: number): number {
    if (this.closed || !Number.isInteger(slot) || slot < 0 || slot >= this.capacity) return 0;
    // As wp_client_pins: 0 while our bit is clear, else 1 plus the further leases.
    return this.holds(SLOTS_U32 + slot * SLOT_U32) ? 1 + this.pins[slot]! : 0;
  }

  /**
   * Whether this handle holds a lease on the slot whose first u32 is at `base`: its own bit in the
   * slot's mask (table.c holds_slot). A plain read: only this handle sets or clears that bit while
   * it lives (see `pins`).
   */
  private holds(base: number): boolean {
    return (this.u32[base + MASK_U32 + this.bitHalf]! & this.bit32) !== 0;
  }

  segment(): Uint8Array {
    return new Uint8Array(this.buffer, 0, segmentSize(this.capacity));
  }

  /** wp_summarize: counts read in place, each word with a plain 32-bit read (monitoring only). */
  summary(): RawSummary | number {
    if (this.closed) return STATUS.ERR_INVALID_ARGUMENT;
    const u32 = this.u32;
    const producer = Atomics.load(this.u64, HDR.PRODUCER >> 3);
    if (headerCorruption(u32[HDR.CAPACITY >> 2]!, producer, this.capacity) !== null) return STATUS.ERR_BAD_SEGMENT;
    const slots = [0, 0, 0, 0];
    let pinnedSlots = 0;
    for (let s = 0, base = SLOTS_U32; s < this.capacity; s++, base += SLOT_U32) {
      slots[u32[base]! & 3]!++; // the state byte is the low byte of the state word's low half
      if ((u32[base + MASK_U32]! | u32[base + MASK_U32 + 1]!) !== 0) pinnedSlots++;
    }
    const clients = [0, 0, 0, 0];
    for (let i = 0; i < MAX_CLIENTS; i++) clients[u32[(CLIENTS_OFFSET + i * CLIENT_SIZE + CLIENT_FIELD.WORD) >> 2]! & 3]!++;
    return {
      slots,
      pinnedSlots,
      clients,
      producer: producer === 0n ? -1 : Number(producer & 0xffn) - 1,
      reapedClients: Atomics.load(this.u64, HDR.REAPED >> 3),
    };
  }

  // ---- producer side ----

  private producerCheck(): number {
    if (this.closed) return STATUS.ERR_INVALID_ARGUMENT;
    return this.isProducer ? STATUS.OK : STATUS.ERR_NOT_PRODUCER;
  }

  /** find_slot: the slot holding the loaded digest in any non-FREE state, or -1; its word in `found`. */
  private found = 0n;
  private findSlot(): number {
    for (let choice = 0; choice < this.choices; choice++) {
      const bucket = this.bucket(choice);
      for (let slot = bucket * PROBE_WINDOW, end = this.bucketEnd(bucket); slot < end; slot++) {
        const sg = Atomics.load(this.u64, this.sgIndex(slot));
        if ((sg & STATE_MASK) !== SG_FREE && this.digestEquals(slot)) {
          this.found = sg;
          return slot;
        }
      }
    }
    return -1;
  }

  /** table.c first_free: the first FREE slot of `bucket`, or -1; how many are FREE in `freeCount`. */
  private freeCount = 0;
  private firstFree(bucket: number): number {
    let first = -1;
    let n = 0;
    for (let slot = bucket * PROBE_WINDOW, end = this.bucketEnd(bucket); slot < end; slot++) {
      if ((Atomics.load(this.u64, this.sgIndex(slot)) & STATE_MASK) !== SG_FREE) continue;
      if (n++ === 0) first = slot;
    }
    this.freeCount = n;
    return first;
  }

  reserve(digest: Uint8Array): number {
    const check = this.producerCheck();
    if (check !== STATUS.OK) return check;
    if (!this.loadDigest(digest)) return STATUS.ERR_INVALID_ARGUMENT;
    if (this.findSlot() >= 0) return STATUS.EXISTS;
    // Two-choice placement, ties to the first: the key goes to the bucket with more FREE slots.
    let slot = this.firstFree(this.bucket(0));
    if (this.choices === 2) {
      const free0 = this.freeCount;
      const other = this.firstFree(this.bucket(1));
      if (this.freeCount > free0) slot = other;
    }
    if (slot < 0) return STATUS.FULL;
    const u64 = this.u64;
    const sgIndex = this.sgIndex(slot);
    const sg = Atomics.load(u64, sgIndex);
    const d = (this.slotByte(slot) + SLOT.DIGEST) >> 2;
    for (let k = 0; k < 8; k++) Atomics.store(this.u32, d + k, this.want[k]!); // published below
    Atomics.store(u64, (this.slotByte(slot) + SLOT.DEVICE) >> 3, 0n); // no device record
    Atomics.store(u64, sgIndex, makeSg(SG_RESERVED, sg >> STATE_SHIFT));
    this.out[0] = BigInt(slot);
    this.out[1] = sg >> STATE_SHIFT;
    return STATUS.OK;
  }

  private reservedSlot(slot: number, generation: bigint): number {
    const check = this.producerCheck();
    if (check !== STATUS.OK) return check;
    // 56 generation bits: a larger one would wrap onto another slot word (wp_publish refuses it too).
    if (!Number.isInteger(slot) || slot < 0 || slot >= this.capacity || typeof generation !== 'bigint' || generation < 0n || generation >> 56n !== 0n) {
      return STATUS.ERR_INVALID_ARGUMENT;
    }
    const sg = Atomics.load(this.u64, this.sgIndex(slot));
    return sg === makeSg(SG_RESERVED, generation) ? STATUS.OK : STATUS.STALE;
  }

  publish(slot: number, generation: bigint, meta: BigUint64Array): number {
    const rc = this.reservedSlot(slot, generation);
    if (rc !== STATUS.OK) return rc;
    if (!(meta instanceof BigUint64Array) || meta.length < 5) return STATUS.ERR_INVALID_ARGUMENT;
    const m = (this.slotByte(slot) + SLOT.META) >> 3;
    const u64 = this.u64;
    Atomics.store(u64, m, meta[0]!); // published by the READY store below
    Atomics.store(u64, m + 1, meta[1]!);
    Atomics.store(u64, m + 2, meta[2]!);
    Atomics.store(u64, m + 3, BigInt.asUintN(32, meta[3]!) | (BigInt.asUintN(32, meta[4]!) << 32n));
    Atomics.store(u64, this.sgIndex(slot), makeSg(SG_READY, generation));
    return STATUS.OK;
  }

  abandon(slot: number, generation: bigint): number {
    const rc = this.reservedSlot(slot, generation);
    if (rc !== STATUS.OK) return rc;
    Atomics.store(this.u64, this.sgIndex(slot), makeSg(SG_FREE, generation + 1n));
    return STATUS.OK;
  }

  tryEvict(digest: Uint8Array): number {
    const check = this.producerCheck();
    if (check !== STATUS.OK) return check;
    if (!this.loadDigest(digest)) return STATUS.ERR_INVALID_ARGUMENT;
    const slot = this.findSlot();
    if (slot < 0) return STATUS.ABSENT;
    const sg = this.found;
    const state = sg & STATE_MASK;
    if (state === SG_RESERVED) return STATUS.ABSENT;
    if (state !== SG_READY) return STATUS.PINNED; // EVICTING left by a dead producer: settled at claim
    const u64 = this.u64;
    const sgIndex = this.sgIndex(slot);
    const gen = sg >> STATE_SHIFT;
    // The evictor's half of the Dekker handshake: claim, then read the pins.
    if (Atomics.compareExchange(u64, sgIndex, sg, makeSg(SG_EVICTING, gen)) !== sg) return STATUS.PINNED;
    // Both halves of the pin mask, each seq_cst, after the claim: if a pinner's or on its half
    // came first in the single order, this load sees it; if not, our claim came before its
    // re-read of the state, which then sees EVICTING and backs out.
    const half = (sgIndex + 1) << 1;
    if ((Atomics.load(this.u32, half) | Atomics.load(this.u32, half + 1)) !== 0) {
      Atomics.store(u64, sgIndex, sg); // pinned (or a pinner racing in): roll back, data untouched
      return STATUS.PINNED;
    }
    // As table.c: clear the device record's sequence, then FREE with the next generation. No
    // pinner is inside the record in between (the mask was empty after the claim; a later one
    // sees EVICTING or FREE on its re-read and backs out before reading it).
    Atomics.store(u64, (this.slotByte(slot) + SLOT.DEVICE) >> 3, 0n);
    Atomics.store(u64, sgIndex, makeSg(SG_FREE, gen + 1n));
    return STATUS.OK;
  }

  recordDeviceWrite(digest: Uint8Array, record: Uint8Array): number {
    const check = this.producerCheck();
    if (check !== STATUS.OK) return check;
    if (!this.loadDigest(digest) || !this.loadTarget(record)) return STATUS.ERR_INVALID_ARGUMENT;
    if ((this.target[0]! | this.target[1]! | this.target[2]! | this.target[3]!) === 0) return STATUS.ERR_INVALID_ARGUMENT; // all-zero UUID means "no record"
    const slot = this.findSlot();
    if (slot < 0 || (this.found & STATE_MASK) !== SG_READY) return STATUS.ABSENT;
    const byte = this.slotByte(slot) + SLOT.DEVICE;
    const seqIndex = byte >> 3;
    const f = (byte >> 2) + 2;
    // Seqlock writer (the producer is the only one): odd while writing, then the next even.
    // The next odd value above seq, even if a dead producer left it odd.
    const seq = Atomics.load(this.u64, seqIndex);
    const odd = seq + 1n + (seq & 1n);
    Atomics.store(this.u64, seqIndex, odd);
    for (let k = 0; k < 10; k++) Atomics.store(this.u32, f + k, this.target[k]!);
    Atomics.store(this.u64, seqIndex, odd + 1n);
    return STATUS.OK;
  }
}
