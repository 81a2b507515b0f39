/**
 * The open-addressing index the coordinator's tables share (the demand index, the (engine,
 * request) index of the wait slots): an `Int32Array` of entries, two Int32 each, an entry's
 * 32-bit hash and its value, a record or slot number ({@link EMPTY}: no entry), with linear
 * probing over a power-of-two number of entries (`mask` is that number minus one). Its owner
 * keeps it at most half full and probes it itself, comparing hashes here and reading its own
 * records only where they agree:
 *
 *   for (let at = hash & mask; entries[2 * at + 1] !== EMPTY; at = (at + 1) & mask)
 *     if (entries[2 * at] === hash && <record entries[2 * at + 1] is the one sought>) ...
 *
 * Removal shifts the later entries of the probe run back, so there are no tombstones.
 */

/** The value of an empty entry (its hash field is unused; it holds the same); values are non-negative Int32. */
export const EMPTY = -1;

/** A new index of `size` entries (a power of two), all empty. */
export function newIndex(size: number): Int32Array {
  return new Int32Array(2 * size).fill(EMPTY);
}

/** Puts `value` under `hash`; the owner has checked it is not there. */
export function indexInsert(entries: Int32Array, mask: number, hash: number, value: number): void {
  let at = hash & mask;
  while (entries[2 * at + 1] !== EMPTY) at = (at + 1) & mask;
  entries[2 * at] = hash;
  entries[2 * at + 1] = value;
}

/** Takes out the entry of `value`, which is in the index under `hash` (else it throws: the owner's records and index disagree). */
export function indexRemove(entries: Int32Array, mask: number, hash: number, value: number): void {
  let hole = hash & mask;
  for (let entry = entries[2 * hole + 1]; entry !== value; entry = entries[2 * hole + 1]) {
    if (entry === EMPTY) throw new Error(`waitprep internal: index entry ${value} missing`);
    hole = (hole + 1) & mask;
  }
  // Backward shift: walk the rest of the run; an entry whose home slot does not lie
  // (cyclically) after the hole and up to its own position moves into the hole.
  for (let at = (hole + 1) & mask; entries[2 * at + 1] !== EMPTY; at = (at + 1) & mask) {
    const home = entries[2 * at]! & mask;
    const stays = hole <= at ? hole < home && home <= at : hole < home || home <= at;
    if (stays) continue;
    entries[2 * hole] = entries[2 * at]!;
    entries[2 * hole + 1] = entries[2 * at + 1]!;
    hole = at;
  }
  entries[2 * hole] = EMPTY;
  entries[2 * hole + 1] = EMPTY;
}
