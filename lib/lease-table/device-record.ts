import { isObject, ownField } from '../internal/validate.js';
import { normalizeTarget, type NormalizedTarget } from './device-target.js';

/**
 * Encoded records of stable targets (frozen, with `device`, `arena` and `arenaGeneration` own
 * data properties, so their fields can never change), by object: the wake path's one lookup. The
 * coordinator's normalized targets are such, and so is any target a caller froze.
 */
const records = new WeakMap<object, Uint8Array>();

/** A mutable target's record, and the own field values it was encoded from. */
interface EncodedFrom {
  readonly record: Uint8Array;
  readonly device: unknown;
  readonly arena: unknown;
  readonly arenaGeneration: unknown;
}

/** Records of mutable targets, used again only while the target's fields are the ones encoded. */
const mutable = new WeakMap<object, EncodedFrom>();

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
 * malformed. The record follows the target's current values. A stable target
 * (see `records`) is validated and encoded once, then found by one WeakMap
 * lookup. A mutable one (a caller may set `arenaGeneration` on the object it
 * pinned with before) has its three fields read again on each pin and
 * compared with those its record was encoded from; it is encoded again when
 * one differs.
 */
export function encodedTarget(value: unknown): Uint8Array | null {
  if (!isObject(value)) return null;
  return records.get(value) ?? encodeCurrent(value);
}

/** The record of a target that is not (yet) in `records`: kept out of encodedTarget so that the pin inlines it. */
function encodeCurrent(value: object): Uint8Array | null {
  // One read of each field: what is compared later is exactly what was encoded, even for getters.
  const device = ownField(value, 'device');
  const arena = ownField(value, 'arena');
  const arenaGeneration = ownField(value, 'arenaGeneration');
  const known = mutable.get(value);
  if (known !== undefined && known.device === device && known.arena === arena && known.arenaGeneration === arenaGeneration) return known.record;
  const stable = isStable(value);
  const target = normalizeTarget(stable ? value : { device, arena, arenaGeneration });
  if (target === null) return null;
  const record = deviceRecord(target, 0n);
  if (stable) records.set(value, record);
  else mutable.set(value, { record, device, arena, arenaGeneration });
  return record;
}

const TARGET_FIELDS = ['device', 'arena', 'arenaGeneration'] as const;

/** Frozen, and each field an own data property (a getter could answer differently each time). */
function isStable(value: object): boolean {
  if (!Object.isFrozen(value)) return false;
  for (const name of TARGET_FIELDS) {
    const property = Object.getOwnPropertyDescriptor(value, name);
    if (property === undefined || !('value' in property)) return false;
  }
  return true;
}
