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

/**
 * A target {@link normalizeTarget} built. The brand is a private field the class declares, as
 * the coordinator's consumer copies carry theirs (lib/consumer.ts): no key or descriptor shows it,
 * and testing it is one lookup, where a WeakSet entry per target cost a hash insertion and an
 * ephemeron for the GC. Frozen, so what was checked is what it holds.
 */
class CanonicalTarget implements NormalizedTarget {
  readonly #canonical = true;
  readonly device: string;
  readonly arena: bigint;
  readonly arenaGeneration: bigint;

  constructor(device: string, arena: bigint, arenaGeneration: bigint) {
    this.device = device;
    this.arena = arena;
    this.arenaGeneration = arenaGeneration;
    Object.freeze(this);
  }

  static has(value: object): boolean {
    return #canonical in value;
  }
}

/**
 * A device target in one canonical form (lowercase UUID, bigint arena and
 * generation), or `null` when it is malformed. Its fields are read from the
 * object's own properties, as they are now. A target this returned before is
 * returned as it is (one brand check), so the coordinator's normalized
 * targets cost nothing to check again at the wake.
 */
export function normalizeTarget(value: unknown): NormalizedTarget | null {
  if (!isObject(value)) return null;
  if (CanonicalTarget.has(value)) return value as unknown as NormalizedTarget;
  const device = ownField(value, 'device');
  if (typeof device !== 'string' || !GPU_UUID.test(device)) return null;
  const arena = u64OrNull(ownField(value, 'arena'));
  const arenaGeneration = u64OrNull(ownField(value, 'arenaGeneration'));
  if (arena === null || arenaGeneration === null) return null;
  return new CanonicalTarget('GPU-' + device.slice(4).toLowerCase(), arena, arenaGeneration);
}
