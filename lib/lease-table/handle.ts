/**
 * One client's handle on a lease table: the flat surface that both the
 * Node-API addon and the JavaScript fallback implement. Arguments arrive
 * checked (lib/lease-table/table.ts validates); results come back as status
 * codes (layout.ts STATUS) with values written into `out`, a per-handle
 * scratch array, so the pin path allocates nothing.
 *
 * `out` after a successful tryPin: [0] slot, [1] generation, [2] token,
 * [3] size_bytes, [4] location, [5] checksum, [6] codec_id, [7] representation_version.
 * After a successful reserve: [0] slot, [1] generation.
 */
export interface TableHandle {
  readonly out: BigUint64Array;
  readonly capacity: number;
  readonly clientIndex: number;
  readonly producer: boolean;
  /** `device` is null for host readiness, else a 40-byte wp_device_record (uuid, arena, arena_generation, write_seq). */
  tryPin(digest: Uint8Array, device: Uint8Array | null): number;
  /**
   * The wake path's host pin, in two steps that copy the digest once: the caller writes the
   * digest's 8 little-endian u32 words into `pinInput`, then calls `tryPinInput()`, which is
   * tryPin of that digest with host readiness.
   */
  readonly pinInput: Uint32Array;
  tryPinInput(): number;
  /**
   * Releases the pin that the token (out word 2: index in the low half, record
   * generation in the high half) names; a second call with the same token
   * releases nothing.
   */
  unpin(slot: number, tokenIndex: number, tokenGeneration: number): void;
  /**
   * wp_try_pin_exact: pins `slot` only while it holds `generation` of `digest` in READY (a lease
   * another client handed over); the lease goes into `out` as for tryPin. `generation` arrives
   * checked (below 2^56), `slot` a u32.
   */
  tryPinExact(slot: number, generation: bigint, digest: Uint8Array, device: Uint8Array | null): number;
  /**
   * wp_try_pin_prefix: pins the longest READY leading run of the `n` digests packed in `digests`
   * (32 bytes each) and returns its length (or minus a status); lease i goes into words
   * 8i..8i+7 of `leases` in the layout of `out`.
   */
  tryPinPrefix(digests: Uint8Array, n: number, device: Uint8Array | null, leases: BigUint64Array): number;
  /** wp_unpin_many: releases `n` leases given as (slot, token index, token generation) triples; returns how many were released. */
  unpinMany(tokens: Uint32Array, n: number): number;
  /** wp_peek: OK when the digest is READY, else the miss status a pin would give; pins nothing. */
  peek(digest: Uint8Array): number;
  /**
   * wp_peek_many: peeks the `n` digests packed in `digests` (32 bytes each) and returns how many
   * leading ones are READY (or minus a status). With `statuses` (n bytes), status i is what peek
   * answers for digest i; with null, it stops at the first digest that is not READY.
   */
  peekMany(digests: Uint8Array, n: number, statuses: Uint8Array | null): number;
  reserve(digest: Uint8Array): number;
  /** meta: [size_bytes, location, checksum, codec_id, representation_version]. */
  publish(slot: number, generation: bigint, meta: BigUint64Array): number;
  abandon(slot: number, generation: bigint): number;
  tryEvict(digest: Uint8Array): number;
  recordDeviceWrite(digest: Uint8Array, record: Uint8Array): number;
  /** >= 0: clients reaped; < 0: minus a status code. */
  reapDeadClients(): number;
  /** Pins this client holds on a slot. */
  clientPins(slot: number): number;
  /**
   * A copy of the whole segment, for inspection, or ERR_BAD_SEGMENT when the segment's file was
   * truncated since open (native only: then nothing past the file's end is read).
   */
  segment(): Uint8Array | number;
  /** Native only (the fallback's buffer never shrinks): the size in bytes of the segment's file now, -1 if unknown. */
  fileSize?(): number;
  /**
   * Monitoring counts read in place (wp_summarize), or a status: ERR_INVALID_ARGUMENT when the
   * handle is closed, ERR_BAD_SEGMENT when the header's capacity or producer word is corrupt.
   */
  summary(): RawSummary | number;
  close(): void;
}

/** wp_summary: counts by slot state and by client state (indexed by their codes), pinned slots, the producer's client index (-1: none), reaped clients. */
export interface RawSummary {
  slots: number[];
  pinnedSlots: number;
  clients: number[];
  producer: number;
  reapedClients: bigint;
}
