/**
 * `count` empty entries in a packed array of exactly that length, for the record stores' plain
 * arrays (docs/coordinator.md § Layout). An array grown by appends keeps up to half again as much
 * spare room, and a `new Array(count)` is holey (and, large, a dictionary).
 */
export function packedArray<T>(count: number): (T | undefined)[] {
  return Array.from<T | undefined>({ length: count });
}
