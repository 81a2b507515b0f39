/**
 * The coordinator's admitted waits, each under a ticket number, in a typed-array table whose slot
 * for a number is the number's low bits (docs/coordinator.md § Layout). A slot holds its wait's
 * number, the demand it waits on and its consumer. A ticket is the number itself or a string
 * spelling it, so a wake finds its slot with a mask and tells a current ticket from a stale one
 * by comparing one number. An open-addressing index beside the slots finds a wait by its
 * consumer's (engine, request), for the one-wait-per-request rule.
 */
import type { Consumer } from '../types.js';
import { NONE } from './demand-table.js';
import { fnv1a, fnv1aWord } from '../internal/fnv1a.js';
import { EMPTY, indexInsert, indexRemove, newIndex } from './hash-index.js';
import { packedArray } from './packed-array.js';

/** The number of a free slot: issued numbers are never 0. */
const FREE = 0;
const MIN_SLOTS = 16;
/** The largest table: 2^31 slots, the first power of two at least twice the most waits (10^9). */
const MAX_SLOTS = 2 ** 31;

/**
 * A string ticket: `wp`, 11 characters random per coordinator, then 9 spelling the ticket number,
 * each a base-64 digit from {@link DIGITS}, most significant first. A fixed width gives every
 * ticket one spelling; 9 digits hold any number below 2^54.
 */
const TICKET_LENGTH = 22;
const RANDOM_AT = 2;
const NUMBER_AT = 13;
/** The number's last 5 digits are its low 30 bits. */
const NUMBER_LOW_AT = 17;
const LOW = 2 ** 30;
const DIGITS = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_';
const DIGIT_CODES = Uint8Array.from(DIGITS, (c) => c.charCodeAt(0));
/** A character code's digit value, or -1. */
const DIGIT_VALUES = new Int8Array(128).fill(-1);
for (let i = 0; i < DIGITS.length; i++) DIGIT_VALUES[DIGITS.charCodeAt(i)] = i;

/** Where a coordinator's numbers start: 2^31 plus 48 random bits, so 2^52 numbers remain below 2^53. */
export function firstTicketNumber(random: Uint8Array): number {
  let high = 0;
  for (let i = 0; i < 6; i++) high = high * 256 + random[i]!;
  return 2 ** 31 + high;
}

export class WaitSlots {
  /**
   * Per slot, side by side (one cache line for a wake): at `2 * slot` its wait's ticket number
   * (a Float64 holds every number up to 2^53 exactly; {@link FREE} when free), at `2 * slot + 1`
   * the demand it waits on.
   */
  #numbers: Float64Array;
  #consumers: (Consumer | undefined)[] = packedArray<Consumer>(MIN_SLOTS);
  /** Per slot, the {@link requestHash} of its wait's consumer, so a removal finds its index entry without reading the consumer. */
  #requestHashes: Int32Array;
  /**
   * The (engine, request) index (lib/coordinator/hash-index.ts): as many entries as slots, so at
   * most half full; an entry's value is a slot. Rebuilt whole when the slots double, since the
   * slots move.
   */
  #requests: Int32Array;
  /** Slots minus one: a power of two, at least twice the live waits. */
  #mask: number;
  /** Random per table, for {@link requestHash}: where a request lands is not known from outside (FNV-1a is no keyed hash, so collisions can still be sought). */
  readonly #seed: number;
  readonly #limit: number;
  #live = 0;
  /** The next ticket number; numbers only grow, so none is issued twice. */
  #next: number;
  /** The characters of the next string ticket, its first 13 (the coordinator's) written once. */
  readonly #chars = new Uint8Array(TICKET_LENGTH);

  /**
   * `limit`: the most live waits. `random`: at least 11 random bytes, this coordinator's part of
   * every string ticket. `firstNumber`: the first ticket number (see {@link firstTicketNumber}).
   * `seed`: a random Int32 for {@link requestHash}.
   */
  constructor(limit: number, random: Uint8Array, firstNumber: number, seed: number) {
    this.#limit = Math.max(limit, 1);
    this.#next = firstNumber;
    this.#seed = seed | 0;
    this.#numbers = new Float64Array(2 * MIN_SLOTS);
    this.#requestHashes = new Int32Array(MIN_SLOTS);
    this.#requests = newIndex(MIN_SLOTS);
    this.#mask = MIN_SLOTS - 1;
    this.#chars[0] = 0x77; // w
    this.#chars[1] = 0x70; // p
    for (let i = RANDOM_AT; i < NUMBER_AT; i++) this.#chars[i] = DIGIT_CODES[random[i - RANDOM_AT]! & 63]!;
  }

  /**
   * The 32-bit hash of an (engine, request), for {@link findRequest} and {@link add}: FNV-1a over
   * the engine's characters, its length (so no two splits of one string meet) and the request's,
   * from the table's seed, then mixed so that its low bits, which pick the entry, depend on every
   * character. A `Map` would hash a string once and keep the hash in it, but each wait brings a
   * fresh request string, so a map pays for the hash as this does, and a lookup in it then walks
   * a chain of entries where this reads one run of the index.
   */
  requestHash(engine: string, request: string): number {
    let h = fnv1a(request, fnv1aWord(fnv1a(engine, this.#seed), engine.length));
    h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
    h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
    return h ^ (h >>> 16);
  }

  /** The live slot of the wait of (engine, request), whose {@link requestHash} is `hash`, or {@link NONE}. */
  findRequest(hash: number, engine: string, request: string): number {
    const entries = this.#requests;
    const mask = this.#mask;
    for (let at = hash & mask; ; at = (at + 1) & mask) {
      const slot = entries[2 * at + 1]!;
      if (slot === EMPTY) return NONE;
      if (entries[2 * at] === hash) {
        const c = this.#consumers[slot]!;
        if (c.request === request && c.engine === engine) return slot;
      }
    }
  }

  /**
   * Takes the slot of the next ticket number whose slot is free, for `consumer` on `demand`;
   * returns the slot. `hash` is the consumer's {@link requestHash}; no live wait has its
   * (engine, request). Numbers whose slot is taken are skipped, never issued. The table is at
   * most half full, so a skip is rare, and each is paid for by a number that was issued.
   */
  add(consumer: Consumer, demand: number, hash: number): number {
    if (this.#live === this.#limit) throw new RangeError(`WaitSlots: more than ${this.#limit} waits`);
    if (2 * (this.#live + 1) > this.#mask + 1) this.#grow();
    const numbers = this.#numbers;
    const mask = this.#mask;
    let number = this.#next;
    // `&` reads the low 32 bits of a safe integer exactly. The bound is in the loop's test: at
    // 2^53, `number++` would round back and never move on.
    while (number <= Number.MAX_SAFE_INTEGER && numbers[2 * (number & mask)] !== FREE) number++;
    if (number > Number.MAX_SAFE_INTEGER) throw new RangeError('WaitSlots: ticket numbers exhausted');
    this.#next = number + 1;
    const slot = number & mask;
    numbers[2 * slot] = number;
    numbers[2 * slot + 1] = demand;
    this.#consumers[slot] = consumer;
    this.#requestHashes[slot] = hash;
    indexInsert(this.#requests, mask, hash, slot);
    this.#live++;
    return slot;
  }

  /**
   * Whether an {@link add} could run out of ticket numbers: it takes at most one turn of the
   * table, doubled first, past the next number. 2^52 numbers after the first, so the coordinator
   * asks before it changes anything, and a wait is then refused rather than half admitted.
   */
  exhausted(): boolean {
    return this.#next + 4 * (this.#mask + 1) > Number.MAX_SAFE_INTEGER;
  }

  /** Frees a slot: its number is gone, so its ticket is stale from now on, and its (engine, request) names no wait. */
  remove(slot: number): void {
    indexRemove(this.#requests, this.#mask, this.#requestHashes[slot]!, slot);
    this.#numbers[2 * slot] = FREE;
    this.#numbers[2 * slot + 1] = NONE;
    this.#consumers[slot] = undefined;
    this.#live--;
  }

  demand(slot: number): number {
    return this.#numbers[2 * slot + 1]!;
  }

  consumer(slot: number): Consumer {
    return this.#consumers[slot]!;
  }

  /** The ticket number of a live slot: the numeric ticket. */
  number(slot: number): number {
    return this.#numbers[2 * slot]!;
  }

  /**
   * The string ticket of a live slot. Built by one `String.fromCharCode` call, so it is a flat
   * string: a concatenation would make a rope that the wake's first character read must flatten.
   */
  ticket(slot: number): string {
    const c = this.#chars;
    const number = this.#numbers[2 * slot]!;
    let low = number % LOW;
    let high = (number - low) / LOW;
    for (let i = TICKET_LENGTH - 1; i >= NUMBER_LOW_AT; i--, low >>>= 6) c[i] = DIGIT_CODES[low & 63]!;
    for (let i = NUMBER_LOW_AT - 1; i >= NUMBER_AT; i--, high >>>= 6) c[i] = DIGIT_CODES[high & 63]!;
    return String.fromCharCode(
      c[0]!, c[1]!, c[2]!, c[3]!, c[4]!, c[5]!, c[6]!, c[7]!, c[8]!, c[9]!, c[10]!,
      c[11]!, c[12]!, c[13]!, c[14]!, c[15]!, c[16]!, c[17]!, c[18]!, c[19]!, c[20]!, c[21]!,
    );
  }

  /**
   * The live slot a numeric ticket names, or {@link NONE}. Any number may be asked: `&` takes a
   * safe integer's low 32 bits exactly, and a fraction, NaN or a number past 2^53 equals no
   * issued number.
   */
  findNumber(number: number): number {
    const slot = number & this.#mask;
    return number !== FREE && this.#numbers[2 * slot] === number ? slot : NONE;
  }

  /** The live slot a string ticket names, or {@link NONE} for a stale, foreign or malformed one. */
  find(ticket: string): number {
    if (ticket.length !== TICKET_LENGTH) return NONE;
    const c = this.#chars;
    for (let i = 0; i < NUMBER_AT; i++) if (ticket.charCodeAt(i) !== c[i]) return NONE;
    const high = digitsAt(ticket, NUMBER_AT, NUMBER_LOW_AT);
    const low = digitsAt(ticket, NUMBER_LOW_AT, TICKET_LENGTH);
    if (high < 0 || low < 0) return NONE;
    // Past 2^53 the sum rounds, but to no number below 2^53, so it matches no issued one.
    return this.findNumber(high * LOW + low);
  }

  /**
   * Doubles the table. A live number keeps its low bits, so it lands either in its old slot or
   * in that slot plus the old size, and two live numbers never meet. The (engine, request)
   * index is built anew, at the new size, over the moved slots.
   */
  #grow(): void {
    const old = this.#numbers;
    const oldHashes = this.#requestHashes;
    const slots = this.#mask + 1;
    if (2 * slots > MAX_SLOTS) throw new RangeError(`WaitSlots: more than ${MAX_SLOTS} slots`);
    const numbers = new Float64Array(4 * slots);
    const consumers = packedArray<Consumer>(2 * slots);
    const hashes = new Int32Array(2 * slots);
    const requests = newIndex(2 * slots);
    const mask = 2 * slots - 1;
    for (let slot = 0; slot < slots; slot++) {
      const number = old[2 * slot]!;
      if (number === FREE) continue;
      const to = number & mask;
      numbers[2 * to] = number;
      numbers[2 * to + 1] = old[2 * slot + 1]!;
      consumers[to] = this.#consumers[slot];
      hashes[to] = oldHashes[slot]!;
      indexInsert(requests, mask, oldHashes[slot]!, to);
    }
    this.#numbers = numbers;
    this.#consumers = consumers;
    this.#requestHashes = hashes;
    this.#requests = requests;
    this.#mask = mask;
  }
}

/** The base-64 number `ticket[from, to)` spells (at most 5 digits), or -1 for a character that is no digit. */
function digitsAt(ticket: string, from: number, to: number): number {
  let value = 0;
  for (let i = from; i < to; i++) {
    const code = ticket.charCodeAt(i);
    const digit = code < 128 ? DIGIT_VALUES[code]! : -1;
    if (digit < 0) return -1;
    value = value * 64 + digit;
  }
  return value;
}
