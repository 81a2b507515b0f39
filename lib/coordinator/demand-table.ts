/**
 * The coordinator's demands (one per dedup identity: key, readiness, device target) as numbered
 * records in typed arrays, and the open-addressing index that finds a demand by its identity.
 * docs/coordinator.md § Layout draws both.
 *
 * A demand is a record number. Its integer fields live in one `Int32Array`, four to a record
 * (16 bytes: with the array's memory aligned, as V8 aligns it today, a record never straddles a cache line); its key in one plain array
 * and its identity hash in another `Int32Array`, each under the same number. Its readiness request
 * is the package's one {@link HOST} unless the record's device flag is set; device requests are
 * kept in a further array under the same number, made when the first device demand arrives (a
 * coordinator with host demands only spends nothing on them). Free records form a list through
 * their `next` field.
 * Nothing here knows the coordinator's rules: it stores, finds and links.
 */
import { keyHashWord, type ArtifactKey } from '../keys/key.js';
import type { NormalizedTarget } from '../lease-table/device-target.js';
import { fnv1a, fnv1aWord } from '../internal/fnv1a.js';
import { EMPTY, indexInsert, indexRemove, newIndex } from './hash-index.js';
import { HOST } from '../internal/host.js';
import { packedArray } from './packed-array.js';
import type { ReadinessRequest } from '../types.js';

/** No record: an empty link or a lookup that found nothing. */
export const NONE = -1;

/** A demand's state: in no list, in the FIFO, or issued to a worker. */
export const IDLE = 0;
export const QUEUED = 1;
export const IN_FLIGHT = 2;
export type DemandState = typeof IDLE | typeof QUEUED | typeof IN_FLIGHT;

/** What terminal history remembers of a demand: nothing, a success or a failure. */
export const NO_OUTCOME = 0;
export const COMPLETED = 1;
export const FAILED = 2;
export type DemandOutcome = typeof NO_OUTCOME | typeof COMPLETED | typeof FAILED;

// The four Int32 fields of a record.
const WAITING = 0;
const PREV = 1;
const NEXT = 2;
/** state | outcome << 2 | DEVICE_FLAG */
const FLAGS = 3;
const STRIDE = 4;
const STATE_MASK = 3;
const OUTCOME_SHIFT = 2;
const OUTCOME_MASK = 3 << OUTCOME_SHIFT;
const DEVICE_FLAG = 1 << 4;

const MIN_RECORDS = 16;
/** Index slots at first; the index doubles before it would pass half full. */
const MIN_SLOTS = 32;

/**
 * Demand records and their identity index. Capacity doubles as demands arrive, up to `limit`
 * (the most demands that can exist at once), and is kept at its high-water mark for reuse.
 */
export class DemandTable {
  /** Records, {@link STRIDE} Int32 fields each; replaced (copied) when it grows. */
  #fields: Int32Array;
  /** Each record's identity hash, so a removal finds its index slot without reading the key. */
  #hashes: Int32Array;
  /** Each record's key; as long as the records (grown with them, so it holds no spare room). */
  #keys: (ArtifactKey | undefined)[];
  /** Each device demand's readiness request (flagged in its record), `null` until the first one; host demands have {@link HOST}. */
  #deviceWants: (ReadinessRequest | undefined)[] | null = null;
  readonly #limit: number;
  /** Records ever handed out; below it, a record is live or on the free list. */
  #used = 0;
  #free = NONE;
  #count = 0;

  /**
   * Open addressing with linear probing: two Int32 per slot, the identity's 32-bit hash and the
   * record number ({@link EMPTY}: an empty slot). A probe compares hashes in the index and reads a
   * record only when they agree, then compares the whole identity (every digest byte, by `hex`),
   * so two keys that share a hash are never taken for one another (lib/coordinator/hash-index.ts).
   */
  #slots: Int32Array;
  #mask: number;
  /** Random per table: where an identity lands cannot be chosen from outside. */
  readonly #seed: number;

  constructor(limit: number, seed: number) {
    this.#limit = limit;
    this.#seed = seed | 0;
    this.#fields = new Int32Array(STRIDE * Math.min(MIN_RECORDS, Math.max(limit, 1)));
    this.#hashes = new Int32Array(this.#fields.length / STRIDE);
    this.#keys = packedArray<ArtifactKey>(this.#hashes.length);
    this.#slots = newIndex(MIN_SLOTS);
    this.#mask = MIN_SLOTS - 1;
  }

  /** Live demands. */
  get count(): number {
    return this.#count;
  }

  /**
   * The identity's 32-bit hash, for {@link find} and {@link add}: two digest words (folded into
   * the key's `keyHashWord`) mixed with the table's seed, and for a device request its target's
   * hash. The digest is SHA-256, so its words are already uniform; the seed only keeps crafted
   * keys from piling onto chosen slots.
   * A device request's target is the normalized one (`normalizeTarget`).
   */
  hash(key: ArtifactKey, want: ReadinessRequest): number {
    let h = Math.imul(keyHashWord(key) ^ this.#seed, 0x9e3779b1);
    if (want.readiness === 'device') h = Math.imul(h ^ targetHash(want.target as NormalizedTarget), 0x85ebca6b);
    h ^= h >>> 15;
    h = Math.imul(h, 0x2c1b3c6d);
    return h ^ (h >>> 12);
  }

  /** The demand of this identity (whose {@link hash} is `hash`), or {@link NONE}. */
  find(hash: number, key: ArtifactKey, want: ReadinessRequest): number {
    const slots = this.#slots;
    const mask = this.#mask;
    for (let at = hash & mask; ; at = (at + 1) & mask) {
      const demand = slots[2 * at + 1]!;
      if (demand === EMPTY) return NONE;
      if (slots[2 * at] === hash && this.#is(demand, key, want)) return demand;
    }
  }

  /** A new idle demand with no waiters for an identity that has none (the caller has asked {@link find}). */
  add(hash: number, key: ArtifactKey, want: ReadinessRequest): number {
    let demand = this.#free;
    if (demand !== NONE) {
      this.#free = this.#fields[STRIDE * demand + NEXT]!;
    } else {
      if (this.#used === this.#fields.length / STRIDE) this.#growRecords();
      demand = this.#used++;
    }
    const base = STRIDE * demand;
    const fields = this.#fields;
    fields[base + WAITING] = 0;
    fields[base + PREV] = NONE;
    fields[base + NEXT] = NONE;
    fields[base + FLAGS] = want.readiness === 'device' ? DEVICE_FLAG : 0;
    this.#keys[demand] = key;
    if (want.readiness === 'device') (this.#deviceWants ??= packedArray<ReadinessRequest>(this.#keys.length))[demand] = want;
    this.#hashes[demand] = hash;
    if (2 * (this.#count + 1) > this.#mask + 1) this.#growIndex();
    indexInsert(this.#slots, this.#mask, hash, demand);
    this.#count++;
    return demand;
  }

  /** Drops a demand: out of the index, its record back on the free list. */
  remove(demand: number): void {
    indexRemove(this.#slots, this.#mask, this.#hashes[demand]!, demand);
    this.#keys[demand] = undefined;
    if (this.isDevice(demand)) this.#deviceWants![demand] = undefined;
    this.#fields[STRIDE * demand + NEXT] = this.#free;
    this.#free = demand;
    this.#count--;
  }

  key(demand: number): ArtifactKey {
    return this.#keys[demand]!;
  }

  want(demand: number): ReadinessRequest {
    return this.isDevice(demand) ? this.#deviceWants![demand]! : HOST;
  }

  isDevice(demand: number): boolean {
    return (this.#fields[STRIDE * demand + FLAGS]! & DEVICE_FLAG) !== 0;
  }

  /** Consumers waiting on it. */
  waiting(demand: number): number {
    return this.#fields[STRIDE * demand + WAITING]!;
  }

  /** Adds `delta` to its waiting count; returns the new count. */
  addWaiting(demand: number, delta: number): number {
    return (this.#fields[STRIDE * demand + WAITING] += delta);
  }

  state(demand: number): DemandState {
    return (this.#fields[STRIDE * demand + FLAGS]! & STATE_MASK) as DemandState;
  }

  setState(demand: number, state: DemandState): void {
    const at = STRIDE * demand + FLAGS;
    this.#fields[at] = (this.#fields[at]! & ~STATE_MASK) | state;
  }

  outcome(demand: number): DemandOutcome {
    return ((this.#fields[STRIDE * demand + FLAGS]! & OUTCOME_MASK) >> OUTCOME_SHIFT) as DemandOutcome;
  }

  setOutcome(demand: number, outcome: DemandOutcome): void {
    const at = STRIDE * demand + FLAGS;
    this.#fields[at] = (this.#fields[at]! & ~OUTCOME_MASK) | (outcome << OUTCOME_SHIFT);
  }

  /** Its neighbours in the one list it is in (the FIFO or terminal history), or {@link NONE}. */
  prev(demand: number): number {
    return this.#fields[STRIDE * demand + PREV]!;
  }

  next(demand: number): number {
    return this.#fields[STRIDE * demand + NEXT]!;
  }

  setPrev(demand: number, other: number): void {
    this.#fields[STRIDE * demand + PREV] = other;
  }

  setNext(demand: number, other: number): void {
    this.#fields[STRIDE * demand + NEXT] = other;
  }

  /** Whether `demand` is this identity: the same digest, readiness and (for a device) target. */
  #is(demand: number, key: ArtifactKey, want: ReadinessRequest): boolean {
    const stored = this.key(demand);
    if (stored !== key && stored.hex !== key.hex) return false;
    const other = this.want(demand);
    if (want.readiness !== 'device') return other.readiness !== 'device';
    if (other.readiness !== 'device') return false;
    const a = want.target as NormalizedTarget;
    const b = other.target as NormalizedTarget;
    return a.device === b.device && a.arena === b.arena && a.arenaGeneration === b.arenaGeneration;
  }

  #growRecords(): void {
    const records = Math.min(this.#limit, 2 * (this.#fields.length / STRIDE));
    if (records <= this.#used) throw new RangeError(`DemandTable: more than ${this.#limit} demands`);
    const fields = new Int32Array(STRIDE * records);
    fields.set(this.#fields);
    this.#fields = fields;
    const hashes = new Int32Array(records);
    hashes.set(this.#hashes);
    this.#hashes = hashes;
    const keys = packedArray<ArtifactKey>(records);
    for (let demand = 0; demand < this.#used; demand++) keys[demand] = this.#keys[demand];
    this.#keys = keys;
    const old = this.#deviceWants;
    if (old !== null) {
      const wants = packedArray<ReadinessRequest>(records);
      for (let demand = 0; demand < this.#used; demand++) wants[demand] = old[demand];
      this.#deviceWants = wants;
    }
  }

  #growIndex(): void {
    const old = this.#slots;
    this.#slots = newIndex(old.length);
    this.#mask = old.length - 1;
    for (let at = 0; at < old.length; at += 2) {
      if (old[at + 1] !== EMPTY) indexInsert(this.#slots, this.#mask, old[at]!, old[at + 1]!);
    }
  }
}

/** A device target's hash: its UUID's characters and the low words of its arena and generation. */
function targetHash(target: NormalizedTarget): number {
  const h = fnv1aWord(fnv1a(target.device), Number(BigInt.asUintN(32, target.arena)));
  return fnv1aWord(h, Number(BigInt.asUintN(32, target.arenaGeneration)));
}
