import { isObject } from '../internal/validate.js';
import { normalizeTarget, type NormalizedTarget } from '../device-target.js';

/** Encoded records of targets seen before, by object: the wake path's lookup. */
const records = new WeakMap<object, Uint8Array>();

/**
 * A wp_device_record (native/include/waitprep.h: uuid 16 bytes, then arena,
 * arena_generation and write_seq as little-endian u64) for a well-formed target.
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
