import { WaitprepError, invalidArgument } from '../errors.js';
import type { Consumer, DeviceTarget } from '../types.js';

/** The largest u64. */
const U64_MAX = (1n << 64n) - 1n;
const GPU_UUID = /^GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}

/** An object literal (or one without a prototype): what option and field objects must be. */
export function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
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

/** A frozen copy of a consumer, or `ERR_INVALID_ARGUMENT` naming the bad field. */
export function checkConsumer(value: unknown): Consumer {
  if (!isObject(value)) throw invalidArgument('consumer', 'an object { engine, request, generation }', value);
  return Object.freeze({
    engine: nonEmptyString('consumer.engine', value.engine),
    request: nonEmptyString('consumer.request', value.request),
    generation: nonNegativeInteger('consumer.generation', value.generation),
  });
}

/** A non-negative integer up to 2^64-1 (a safe-integer number or a bigint) as a bigint, else `null`. */
export function u64OrNull(value: unknown): bigint | null {
  if (typeof value === 'bigint') return value >= 0n && value <= U64_MAX ? value : null;
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return BigInt(value);
  return null;
}

export interface NormalizedTarget extends DeviceTarget {
  readonly device: string;
  readonly arena: bigint;
  readonly arenaGeneration: bigint;
}

/**
 * A device target in one canonical form (lowercase UUID, bigint arena and
 * generation), or `null` when it is malformed. A target this returned before
 * is returned as it is (one WeakSet lookup), so the coordinator's normalized
 * targets cost nothing to check again at the wake.
 */
export function normalizeTarget(value: unknown): NormalizedTarget | null {
  if (!isObject(value)) return null;
  if (normalized.has(value)) return value as unknown as NormalizedTarget;
  const { device } = value;
  if (typeof device !== 'string' || !GPU_UUID.test(device)) return null;
  const arena = u64OrNull(value.arena);
  const arenaGeneration = u64OrNull(value.arenaGeneration);
  if (arena === null || arenaGeneration === null) return null;
  const target: NormalizedTarget = Object.freeze({ device: 'GPU-' + device.slice(4).toLowerCase(), arena, arenaGeneration });
  normalized.add(target);
  return target;
}

/** The targets normalizeTarget built. */
const normalized = new WeakSet<object>();
/** Encoded records of targets seen before, by object: the wake path's lookup. */
const records = new WeakMap<object, Uint8Array>();

/**
 * A wp_device_record (uuid 16 bytes, arena, arena_generation, write_seq as
 * little-endian u64) for a well-formed target.
 */
export function deviceRecord(target: NormalizedTarget, writeSeq: bigint): Uint8Array {
  const out = new Uint8Array(40);
  const hex = target.device.slice(4).replaceAll('-', '');
  for (let i = 0; i < 16; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  const view = new DataView(out.buffer);
  view.setBigUint64(16, target.arena, true);
  view.setBigUint64(24, target.arenaGeneration, true);
  view.setBigUint64(32, writeSeq, true);
  return out;
}

/**
 * The encoded record of a device target (write_seq 0), or `null` when it is
 * malformed. Each target object is validated and encoded once, then found by
 * one WeakMap lookup (the wake path's cost for every later pin against it).
 */
export function encodedTarget(value: unknown): Uint8Array | null {
  if (!isObject(value)) return null;
  const known = records.get(value);
  if (known !== undefined) return known;
  const target = normalizeTarget(value);
  if (target === null) return null;
  const record = deviceRecord(target, 0n);
  records.set(value, record);
  return record;
}

export function grantRequired(got: unknown): WaitprepError {
  return new WaitprepError(
    'ERR_GRANT_REQUIRED',
    `beginNext needs the caller's resource-grant assertion { worker: non-empty string, grant: non-empty string }, got ${
      isObject(got) ? `{ worker: ${JSON.stringify(got.worker)}, grant: ${JSON.stringify(got.grant)} }` : String(got)
    }`,
  );
}
