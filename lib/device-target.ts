import { isObject, ownField, u64OrNull } from './internal/validate.js';
import type { DeviceTarget } from './types.js';

/**
 * A device target's one canonical form. The coordinator deduplicates device
 * waits by it, and both backends match records against it, so two spellings
 * of one target (an uppercase UUID, a number arena) are one target everywhere.
 */
export interface NormalizedTarget extends DeviceTarget {
  readonly device: string;
  readonly arena: bigint;
  readonly arenaGeneration: bigint;
}

const GPU_UUID = /^GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

/** The targets normalizeTarget built. */
const normalized = new WeakSet<object>();

/**
 * A device target in one canonical form (lowercase UUID, bigint arena and
 * generation), or `null` when it is malformed. Its fields are read from the
 * object's own properties, as they are now. A target this returned before is
 * returned as it is (one WeakSet lookup), so the coordinator's normalized
 * targets cost nothing to check again at the wake: only targets built here are
 * remembered, and they are frozen, so what was checked is what they hold.
 */
export function normalizeTarget(value: unknown): NormalizedTarget | null {
  if (!isObject(value)) return null;
  if (normalized.has(value)) return value as unknown as NormalizedTarget;
  const device = ownField(value, 'device');
  if (typeof device !== 'string' || !GPU_UUID.test(device)) return null;
  const arena = u64OrNull(ownField(value, 'arena'));
  const arenaGeneration = u64OrNull(ownField(value, 'arenaGeneration'));
  if (arena === null || arenaGeneration === null) return null;
  const target: NormalizedTarget = Object.freeze({ device: 'GPU-' + device.slice(4).toLowerCase(), arena, arenaGeneration });
  normalized.add(target);
  return target;
}
