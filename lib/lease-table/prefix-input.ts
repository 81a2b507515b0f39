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

/**
 * The number of 32-byte digests packed back to back in `chunks`, or -1 when `chunks` is not a
 * typed array (a Proxy of one is not: `TypedArray#set` would read its length and every byte
 * through the Proxy's traps a second time) or its length is not a multiple of 32.
 */
export function packedDigestCount(chunks: Uint8Array): number {
  if (!ArrayBuffer.isView(chunks)) return -1;
  const bytes = chunks.length;
  return bytes % 32 === 0 ? bytes / 32 : -1;
}

/** What `chunks` must be, for its errors. */
export const PREFIX_CHUNKS = 'an array of ArtifactKeys, or a Uint8Array of 32-byte digests back to back';
/** What a `chunks` too long must be, for its error (`chunks.length`: keys, or bytes when packed). */
export const PREFIX_TOO_LONG = `at most ${MAX_PREFIX_CHUNKS} chunks (MAX_PREFIX_CHUNKS): that many keys, or ${32 * MAX_PREFIX_CHUNKS} bytes of packed digests; pin a longer prefix in runs`;
