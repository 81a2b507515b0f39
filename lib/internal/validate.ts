/**
 * Generic argument checks for every module that takes input from a caller.
 * Nothing here knows a domain type: consumers, grants and device targets are
 * checked where they are defined.
 */
import { invalidArgument, type WaitprepError, type WaitprepErrorCode } from '../errors.js';

/** The largest u64. */
const U64_MAX = (1n << 64n) - 1n;

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}

/** An object literal (or one without a prototype): what option and field objects must be. */
export function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/**
 * `object[name]` when it is the object's own property, else `undefined`: options and fields are
 * read this way, so a property inherited from a polluted `Object.prototype` is never taken for one
 * the caller passed.
 */
export function ownField(object: object, name: string): unknown {
  return Object.hasOwn(object, name) ? (object as Record<string, unknown>)[name] : undefined;
}

/**
 * `object[name]` found on the object or its prototypes short of `Object.prototype`, else
 * `undefined`: how a method of a caller's object (a class instance's sits on its prototype) is
 * read, so that one inherited from a polluted `Object.prototype` is never taken for it. A getter
 * is called on `object`.
 */
export function ownMethod(object: object, name: string): unknown {
  for (let at: object | null = object; at !== null && at !== Object.prototype; at = Object.getPrototypeOf(at)) {
    const found = Object.getOwnPropertyDescriptor(at, name);
    if (found !== undefined) return 'value' in found ? found.value : found.get?.call(object);
  }
  return undefined;
}

/**
 * A copy of `options` holding only its own enumerable properties, without a prototype, so that
 * every later read of it (destructuring, `options.x ?? default`) sees only what the caller
 * passed, whatever `Object.prototype` holds. For option objects read at construction, not on a
 * hot path.
 */
export function ownOptions<T extends object>(options: T): T {
  return Object.assign(Object.create(null) as T, options);
}

export function nonEmptyString(field: string, value: unknown): string {
  if (typeof value !== 'string' || value.length === 0) throw invalidArgument(field, 'a non-empty string', value);
  return value;
}

export function nonNegativeInteger(field: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw invalidArgument(field, 'a non-negative safe integer', value);
  }
  return value;
}

/** A non-negative integer up to 2^64-1 (a safe-integer number or a bigint) as a bigint, else `null`. */
export function u64OrNull(value: unknown): bigint | null {
  if (typeof value === 'bigint') return value >= 0n && value <= U64_MAX ? value : null;
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return BigInt(value);
  return null;
}

/**
 * The one error for a name that is not among the known ones, options and fields alike, so every
 * refusal reads the same way:
 * ``Expected `options.prefix` to be absent (unknown option; known options: registry, table, labels), got "x" (string)``.
 * `noun` says what the name is (`option`, `field`, `key field`, ...).
 */
export function unknownName(field: string, noun: string, known: Iterable<string>, got: unknown, code: WaitprepErrorCode = 'ERR_INVALID_ARGUMENT', where = ''): WaitprepError {
  return invalidArgument(field, `absent (unknown ${noun}; known ${noun}s: ${[...known].join(', ')})`, got, code, where);
}

/**
 * Throws `ERR_INVALID_ARGUMENT` ({@link unknownName}) for the first own key of `options` that is
 * not in `known`. Its field is `${path}.${name}` (`name` alone when `path` is empty).
 */
export function rejectUnknownOptions(options: object, known: ReadonlySet<string>, path: string): void {
  for (const name of Object.keys(options)) {
    if (known.has(name)) continue;
    throw unknownName(path === '' ? name : `${path}.${name}`, 'option', known, (options as Record<string, unknown>)[name]);
  }
}
