/**
 * The one check of a consumer `{ engine, request, generation }`, for the coordinator (at
 * `onWait`) and for the lease table (at each direct `tryPin`). Fields are read from the object's
 * own properties only, so a polluted `Object.prototype` cannot supply them.
 */
import { invalidArgument } from './errors.js';
import { isObject, nonEmptyString, nonNegativeInteger, ownField } from './internal/validate.js';
import type { Consumer } from './types.js';

/**
 * A consumer {@link checkConsumer} built: known good, so a pin handed one checks nothing again.
 * The brand is a private field the class declares, so it is part of every copy's first shape:
 * testing it is one lookup, and marking costs nothing beyond the copy (a WeakSet entry per
 * consumer cost a hash insertion and an ephemeron for the GC; a private field stamped on a plain
 * object afterwards cost a shape change and a throwaway receiver). No key or descriptor shows the
 * brand; the copy is frozen, and its three fields are its only own properties.
 */
class CheckedConsumer implements Consumer {
  readonly #checked = true;
  readonly engine: string;
  readonly request: string;
  readonly generation: number;

  constructor(engine: string, request: string, generation: number) {
    this.engine = engine;
    this.request = request;
    this.generation = generation;
    Object.freeze(this);
  }

  static has(value: object): boolean {
    return #checked in value;
  }
}

/** A frozen copy of a consumer, or `ERR_INVALID_ARGUMENT` naming the bad field. */
export function checkConsumer(value: unknown): Consumer {
  if (!isObject(value)) throw invalidArgument('consumer', 'an object { engine, request, generation }', value);
  // Each field read by name at its own site (not through `ownField(value, name)`), so each
  // load stays monomorphic: one shared keyed load over three names is megamorphic.
  const engine = Object.hasOwn(value, 'engine') ? value.engine : undefined;
  const request = Object.hasOwn(value, 'request') ? value.request : undefined;
  const generation = Object.hasOwn(value, 'generation') ? value.generation : undefined;
  return new CheckedConsumer(
    nonEmptyString('consumer.engine', engine),
    nonEmptyString('consumer.request', request),
    nonNegativeInteger('consumer.generation', generation),
  );
}

/**
 * Whether `value` is a well-formed consumer: one {@link checkConsumer} built (one property lookup:
 * every coordinator wake), or an object whose own fields pass the same rules (no copy made).
 */
export function isConsumer(value: unknown): value is Consumer {
  if (!isObject(value)) return false;
  if (CheckedConsumer.has(value)) return true;
  const engine = ownField(value, 'engine');
  const request = ownField(value, 'request');
  const generation = ownField(value, 'generation');
  return typeof engine === 'string' && engine !== '' && typeof request === 'string' && request !== '' &&
    Number.isSafeInteger(generation) && (generation as number) >= 0;
}
