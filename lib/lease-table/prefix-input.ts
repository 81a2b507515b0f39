/**
 * The most chunks one `LeaseTable.tryPinPrefix` call takes: 65,536, a 1M-token context in
 * 16-token blocks (vLLM's default block size). A longer `chunks` is `ERR_INVALID_ARGUMENT`;
 * pin a longer prefix in runs of at most this many. The table keeps reusable buffers sized for
 * its longest call (about 200 bytes a chunk: the digests in, the leases out, a view of each
 * lease), so without this bound a sparse array's `length` alone would choose how much memory
 * the table allocates and keeps. At this bound a table keeps about 13 MiB; `unpinMany`
 * releases any number of leases through buffers of the same bound.
 */
export const MAX_PREFIX_CHUNKS = 65_536;

// %TypedArray%.prototype's own getters. A subclass can redefine `length`, and a Proxy of a
// Uint8Array passes `instanceof Uint8Array` while answering `length` and every index from its
// traps; these getters read the typed array's own internal slots instead (the tag getter answers
// undefined, without throwing, for anything that is not a typed array, a Proxy included).
const typedArrayPrototype = Object.getPrototypeOf(Uint8Array.prototype) as object;
const typedArrayTag = Object.getOwnPropertyDescriptor(typedArrayPrototype, Symbol.toStringTag)!.get! as (this: unknown) => string | undefined;
const typedArrayLength = Object.getOwnPropertyDescriptor(typedArrayPrototype, 'length')!.get! as (this: Uint8Array) => number;

/**
 * The number of 32-byte digests packed back to back in `chunks`, read from the typed array's own
 * length (what `TypedArray#set` copies), or -1 when `chunks` is not a Uint8Array, or its length is
 * not a multiple of 32. Runs no code of the caller's.
 */
export function packedDigestCount(chunks: Uint8Array): number {
  if (typedArrayTag.call(chunks) !== 'Uint8Array') return -1;
  const bytes = typedArrayLength.call(chunks);
  return bytes % 32 === 0 ? bytes / 32 : -1;
}

/** What `chunks` must be, for its errors. */
export const PREFIX_CHUNKS = 'an array of ArtifactKeys, or a Uint8Array of 32-byte digests back to back';
/** What a `chunks` too long must be, for its error (`chunks.length`: keys, or bytes when packed). */
export const PREFIX_TOO_LONG = `at most ${MAX_PREFIX_CHUNKS} chunks (MAX_PREFIX_CHUNKS): that many keys, or ${32 * MAX_PREFIX_CHUNKS} bytes of packed digests; pin a longer prefix in runs`;
