import { brand } from '../internal/brand.js';
import { isObject, ownField, u64OrNull } from '../internal/validate.js';
import type { DeviceTarget } from '../types.js';

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

/** The mark of the targets {@link normalizeTarget} built (lib/internal/brand.ts). */
const canonical = brand();

/**
 * A device target in one canonical form (lowercase UUID, bigint arena and
 * generation), or `null` when it is malformed. Its fields are read from the
 * object's own properties, as they are now. A target this returned before is
 * returned as it is (one brand check), so the coordinator's normalized
 * targets cost nothing to check again at the wake. Frozen, so what was checked
 * is what it holds.
 */
export function normalizeTarget(value: unknown): NormalizedTarget | null {
  if (!isObject(value)) return null;
  if (canonical.has(value)) return value as unknown as NormalizedTarget;
  const device = ownField(value, 'device');
  if (typeof device !== 'string' || !GPU_UUID.test(device)) return null;
  const arena = u64OrNull(ownField(value, 'arena'));
  const arenaGeneration = u64OrNull(ownField(value, 'arenaGeneration'));
  if (arena === null || arenaGeneration === null) return null;
  // Built from `{}`, whose spare in-object room takes the mark (as a consumer copy is).
  const target = {} as { device: string; arena: bigint; arenaGeneration: bigint };
  target.device = 'GPU-' + device.slice(4).toLowerCase();
  target.arena = arena;
  target.arenaGeneration = arenaGeneration;
  canonical.mark(target);
  return Object.freeze(target);
}
