/**
 * The one check of a consumer `{ engine, request, generation }`, for the coordinator (at
 * `onWait`) and for the lease table (at each direct `tryPin`). Fields are read from the object's
 * own properties only, so a polluted `Object.prototype` cannot supply them.
 */
import { invalidArgument } from '../errors.js';
import { brand } from '../internal/brand.js';
import { isObject, nonEmptyString, nonNegativeInteger } from '../internal/validate.js';
import type { Consumer } from '../types.js';

/**
 * The mark of the consumers {@link checkConsumer} built: known good, so a pin handed one checks
 * nothing again (lib/internal/brand.ts).
 */
const checked = brand();

/** A frozen copy of a consumer, or `ERR_INVALID_ARGUMENT` naming the bad field. */
export function checkConsumer(value: unknown): Consumer {
  if (!isObject(value)) throw invalidArgument('consumer', 'an object { engine, request, generation }', value);
  // Built from `{}`, whose spare in-object room takes the mark; a three-field literal has none,
  // and the mark would cost it a separate property array.
  // Named loads, each behind its own-property test: `ownField`'s load by a variable name is a
  // megamorphic keyed load when it is not inlined.
  const consumer = {} as { engine: string; request: string; generation: number };
  consumer.engine = nonEmptyString('consumer.engine', Object.hasOwn(value, 'engine') ? value.engine : undefined);
  consumer.request = nonEmptyString('consumer.request', Object.hasOwn(value, 'request') ? value.request : undefined);
  consumer.generation = nonNegativeInteger('consumer.generation', Object.hasOwn(value, 'generation') ? value.generation : undefined);
  checked.mark(consumer);
  return Object.freeze(consumer);
}

/**
 * Whether `value` is a well-formed consumer: one {@link checkConsumer} built (one property lookup:
 * every coordinator wake), or an object whose own fields pass the same rules (no copy made).
 */
export function isConsumer(value: unknown): value is Consumer {
  if (!isObject(value)) return false;
  if (checked.has(value)) return true;
  const engine = Object.hasOwn(value, 'engine') ? value.engine : undefined;
  const request = Object.hasOwn(value, 'request') ? value.request : undefined;
  const generation = Object.hasOwn(value, 'generation') ? value.generation : undefined;
  return typeof engine === 'string' && engine !== '' && typeof request === 'string' && request !== '' &&
    Number.isSafeInteger(generation) && (generation as number) >= 0;
}
