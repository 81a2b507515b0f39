/**
 * The coordinator's admitted waits as numbered slots in typed arrays, and the tickets that name
 * them (docs/coordinator.md § Layout). A slot holds the number of the ticket issued for it, the
 * demand it waits on and its consumer. A ticket spells its slot and its number, so a wake finds
 * its slot without a lookup and tells a current ticket from a stale one by the number alone.
 */
import type { Consumer } from '../types.js';
import { NONE } from './demand-table.js';

/** The ticket number of a free slot: issued numbers start at 1. */
const FREE = 0;
const MIN_SLOTS = 16;

/**
 * A ticket: `wp`, 11 characters random per coordinator, 5 spelling the slot and 9 the ticket
 * number, each a base-64 digit from {@link DIGITS}, most significant first. Fixed widths give
 * every ticket one spelling; 5 digits hold any slot below 2^30 (the most waits is 10^9), 9 any
 * number below 2^53.
 */
const TICKET_LENGTH = 27;
const RANDOM_AT = 2;
const SLOT_AT = 13;
const NUMBER_AT = 18;
/** The number's last 5 digits are its low 30 bits. */
const NUMBER_LOW_AT = 22;
const LOW = 2 ** 30;
const DIGITS = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_';
const DIGIT_CODES = Uint8Array.from(DIGITS, (c) => c.charCodeAt(0));
/** A character code's digit value, or -1. */
const DIGIT_VALUES = new Int8Array(128).fill(-1);
for (let i = 0; i < DIGITS.length; i++) DIGIT_VALUES[DIGITS.charCodeAt(i)] = i;

export class WaitSlots {
  /**
   * Per slot, side by side (one cache line for a wake): at `2 * slot` its ticket number (a
   * Float64 holds every number up to 2^53 exactly), at `2 * slot + 1` the demand it waits on,
   * or in a free slot the next free slot ({@link NONE} ends the list).
   */
  #numbers: Float64Array;
  readonly #consumers: (Consumer | undefined)[] = [];
  readonly #limit: number;
  #used = 0;
  #free = NONE;
  /** The next ticket number; numbers only grow, so no ticket is issued twice. */
  #next = 1;
  /** The characters of the next ticket, its first 13 (the coordinator's) written once. */
  readonly #chars = new Uint8Array(TICKET_LENGTH);

  /**
   * `limit`: the most live slots. `random`: at least 11 random bytes, this coordinator's part of
   * every ticket. `firstNumber`: the first ticket number (tests start near 2^53).
   */
  constructor(limit: number, random: Uint8Array, firstNumber = 1) {
    this.#limit = Math.max(limit, 1);
    this.#next = firstNumber;
    this.#numbers = new Float64Array(2 * Math.min(MIN_SLOTS, this.#limit));
    this.#chars[0] = 0x77; // w
    this.#chars[1] = 0x70; // p
    for (let i = RANDOM_AT; i < SLOT_AT; i++) this.#chars[i] = DIGIT_CODES[random[i - RANDOM_AT]! & 63]!;
  }

  /** Takes a free slot for `consumer` on `demand` under a fresh ticket number; returns the slot. */
  add(consumer: Consumer, demand: number): number {
    let slot = this.#free;
    if (slot !== NONE) {
      this.#free = this.#numbers[2 * slot + 1]!;
    } else {
      if (2 * this.#used === this.#numbers.length) this.#grow();
      slot = this.#used++;
    }
    this.#numbers[2 * slot] = this.#next++;
    this.#numbers[2 * slot + 1] = demand;
    this.#consumers[slot] = consumer;
    return slot;
  }

  /** Frees a slot: its ticket number is gone, so its ticket is stale from now on. */
  remove(slot: number): void {
    this.#numbers[2 * slot] = FREE;
    this.#numbers[2 * slot + 1] = this.#free;
    this.#consumers[slot] = undefined;
    this.#free = slot;
  }

  demand(slot: number): number {
    return this.#numbers[2 * slot + 1]!;
  }

  consumer(slot: number): Consumer {
    return this.#consumers[slot]!;
  }

  /**
   * The ticket of a live slot. Built by one `String.fromCharCode` call, so it is a flat string:
   * a concatenation would make a rope (three parts and their strings, about twice the memory)
   * that the wake's first character read must flatten, a runtime call costlier than the lookup.
   */
  ticket(slot: number): string {
    const c = this.#chars;
    const number = this.#numbers[2 * slot]!;
    let low = number % LOW;
    let high = (number - low) / LOW;
    for (let i = TICKET_LENGTH - 1; i >= NUMBER_LOW_AT; i--, low >>>= 6) c[i] = DIGIT_CODES[low & 63]!;
    for (let i = NUMBER_LOW_AT - 1; i >= NUMBER_AT; i--, high >>>= 6) c[i] = DIGIT_CODES[high & 63]!;
    for (let i = NUMBER_AT - 1, s = slot; i >= SLOT_AT; i--, s >>>= 6) c[i] = DIGIT_CODES[s & 63]!;
    return String.fromCharCode(
      c[0]!, c[1]!, c[2]!, c[3]!, c[4]!, c[5]!, c[6]!, c[7]!, c[8]!, c[9]!, c[10]!, c[11]!, c[12]!, c[13]!,
      c[14]!, c[15]!, c[16]!, c[17]!, c[18]!, c[19]!, c[20]!, c[21]!, c[22]!, c[23]!, c[24]!, c[25]!, c[26]!,
    );
  }

  /** The live slot `ticket` names, or {@link NONE} for a stale, foreign or malformed one. */
  find(ticket: string): number {
    if (ticket.length !== TICKET_LENGTH) return NONE;
    const c = this.#chars;
    for (let i = 0; i < SLOT_AT; i++) if (ticket.charCodeAt(i) !== c[i]) return NONE;
    const slot = digitsAt(ticket, SLOT_AT, NUMBER_AT);
    const high = digitsAt(ticket, NUMBER_AT, NUMBER_LOW_AT);
    const low = digitsAt(ticket, NUMBER_LOW_AT, TICKET_LENGTH);
    if (slot < 0 || high < 0 || low < 0 || slot >= this.#used) return NONE;
    // Past 2^53 the sum rounds, but to no number below 2^53, so it matches no issued one.
    const number = high * LOW + low;
    return number !== FREE && this.#numbers[2 * slot] === number ? slot : NONE;
  }

  #grow(): void {
    const slots = Math.min(this.#limit, this.#numbers.length);
    if (slots <= this.#used) throw new RangeError(`WaitSlots: more than ${this.#limit} waits`);
    const numbers = new Float64Array(2 * slots);
    numbers.set(this.#numbers);
    this.#numbers = numbers;
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
