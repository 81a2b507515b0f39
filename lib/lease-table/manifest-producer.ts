/**
 * ManifestProducer: the producer's side of manifests (docs/engine-keys.md#manifests) over a
 * {@link LeaseTable}. It publishes a manifest only while it holds a pin on every chunk the
 * manifest lists (so each is READY, and stays so until the manifest is), and it evicts a chunk
 * only after every manifest listing it is evicted, which a pinned manifest refuses.
 */
import { WaitprepError, invalidArgument } from '../errors.js';
import { CHUNK_PARENT_FIELD, ChunkKey, MANIFEST_FIELD, isManifestKey } from '../keys/chunk-keys.js';
import { artifactKey, assertArtifactKey, type ArtifactKey } from '../keys/key.js';
import { encodeManifest } from '../keys/manifest.js';
import type { ArtifactMeta, LeaseTable, Reservation } from './table.js';
import type { Lease, Miss } from '../types.js';

/** A chunk the manifest cannot list yet: its index in the list and the table's miss reason. */
export interface ManifestIncomplete {
  kind: 'incomplete';
  /** Index of the first chunk that was not READY. */
  chunk: number;
  /** Why: the miss reason its pin got (`absent`, `preparing`, `evicting`, `contended`, …). */
  reason: string;
}

/** A manifest reserved by {@link ManifestProducer.reserve}, to publish or abandon. */
export interface ManifestReservation {
  readonly kind: 'reservation';
  readonly key: ArtifactKey;
  /** The table's reservation of the manifest's slot. */
  readonly reservation: Reservation;
  /** The manifest's bytes ({@link encodeManifest}): store them, then publish their location. */
  readonly bytes: Uint8Array;
  /** The listed chunks' digests in hex, in order. */
  readonly chunks: readonly string[];
}

interface Held {
  chunks: ArtifactKey[];
  pins: Lease[];
}

/** A chunk as the helper takes it: a {@link ChunkKey} or the chunk's {@link ArtifactKey}. */
export type ManifestChunk = ChunkKey | ArtifactKey;

/**
 * The producer's manifest rules over its {@link LeaseTable} (the table's single producer):
 *
 * 1. {@link reserve} pins every listed chunk through the producer's own handle, so a chunk that
 *    is not READY is {@link ManifestIncomplete} and nothing is reserved; {@link publish} makes the
 *    manifest READY while those pins still hold, then releases them.
 * 2. {@link tryEvict} of a chunk first evicts every published manifest that lists it. A pinned
 *    manifest refuses (`'pinned'`), and then the chunk stays: while a manifest is pinned, none of
 *    its chunks is evicted. A reader that pinned the manifest may read every chunk's bytes
 *    without pinning them.
 *
 * The rule holds for evictions made through this helper: route every eviction of a chunk here
 * (the table's own `tryEvict` knows nothing of manifests). What the helper knows lives in this
 * process; a producer that reopens a table holding manifests from an earlier run must evict them
 * before it evicts chunks.
 */
export class ManifestProducer {
  /** The producer table the helper works on. */
  readonly table: LeaseTable;
  /** Published manifests by hex: their key and the chunk keys they list. */
  readonly #manifests = new Map<string, { key: ArtifactKey; chunks: ArtifactKey[] }>();
  /** Chunk hex -> the hexes of published manifests that list it. */
  readonly #listedBy = new Map<string, Set<string>>();
  /** Reservations not yet published or abandoned, and the chunk pins each holds. */
  readonly #held = new WeakMap<ManifestReservation, Held>();

  constructor(table: LeaseTable) {
    if (typeof table !== 'object' || table === null || typeof (table as LeaseTable).tryPin !== 'function') {
      throw invalidArgument('table', 'a LeaseTable opened as the producer', table);
    }
    this.table = table;
  }

  /**
   * Reserves `manifest`'s slot once every chunk in `chunks` (in chain order) is READY, and
   * returns its reservation with the manifest's bytes; or, when one is not, the first such chunk
   * and why, with nothing reserved or pinned. `ERR_INVALID_ARGUMENT` unless the chunks are one
   * chain from its first chunk (each names the one before as its parent) and `manifest` is the
   * manifest key of the prefix they end ({@link manifestKey} of the last, which counts them). The
   * table's `reserve` errors pass through (`ERR_KEY_EXISTS` when the manifest is already reserved
   * or published).
   */
  reserve(manifest: ArtifactKey, chunks: readonly ManifestChunk[]): ManifestReservation | ManifestIncomplete {
    assertArtifactKey(manifest);
    if (!isManifestKey(manifest)) throw invalidArgument('manifest', `a manifest key (source.extra["${MANIFEST_FIELD}"] set; see manifestKey())`, manifest.toString());
    if (!Array.isArray(chunks) || chunks.length === 0) throw invalidArgument('chunks', 'a non-empty array of the chunk keys the manifest lists', chunks);
    if (manifest.source.extra[MANIFEST_FIELD] !== String(chunks.length)) {
      throw invalidArgument('chunks', `the ${manifest.source.extra[MANIFEST_FIELD]} chunks the manifest key counts`, chunks);
    }
    const keys = chunks.map((chunk, i) => {
      if (chunk instanceof ChunkKey) return chunk.toArtifactKey();
      try {
        assertArtifactKey(chunk);
      } catch {
        throw invalidArgument(`chunks[${i}]`, 'a ChunkKey or an ArtifactKey', chunk);
      }
      return chunk;
    });
    // The listed digests must be exactly the chain the manifest key names, or a pin of the
    // manifest would promise chunks of some other prefix.
    keys.forEach((key, i) => {
      const parent = i === 0 ? '' : keys[i - 1]!.hex;
      if (key.source.extra[CHUNK_PARENT_FIELD] !== parent) {
        throw invalidArgument(`chunks[${i}]`, `the chain's chunk ${i}, whose ${CHUNK_PARENT_FIELD} is ${parent === '' ? '"" (the first chunk)' : `chunk ${i - 1}'s digest`}`, key.toString());
      }
    });
    const fields = keys[keys.length - 1]!.toFields();
    fields.source.extra[MANIFEST_FIELD] = String(keys.length);
    if (artifactKey(fields).hex !== manifest.hex) throw invalidArgument('manifest', 'the manifest key of the prefix the chunks end (manifestKey(last chunk))', manifest.toString());
    const pins: Lease[] = [];
    const release = (): void => {
      for (const pin of pins) pin.close();
    };
    for (let i = 0; i < keys.length; i++) {
      const got: Lease | Miss = this.table.tryPin(keys[i]!);
      if (got.kind === 'miss') {
        release();
        return { kind: 'incomplete', chunk: i, reason: got.reason };
      }
      pins.push(got);
    }
    let reservation: Reservation;
    try {
      reservation = this.table.reserve(manifest);
    } catch (error) {
      release();
      throw error;
    }
    const digests = keys.map((key) => key.digest);
    let tokens = 0;
    for (const key of keys) tokens += key.tokenCount;
    const reserved: ManifestReservation = Object.freeze({
      kind: 'reservation' as const,
      key: manifest,
      reservation,
      bytes: encodeManifest(digests, tokens),
      chunks: Object.freeze(keys.map((key) => key.hex)),
    });
    this.#held.set(reserved, { chunks: keys, pins });
    return reserved;
  }

  /**
   * Publishes a reserved manifest with the metadata of its stored bytes, while the chunk pins
   * still hold; then records which chunks it lists and releases those pins. If the table refuses
   * the publish, its error passes through and the pins stay until {@link abandon}.
   */
  publish(reserved: ManifestReservation, meta: ArtifactMeta): void {
    const held = this.#heldOf(reserved, 'publish');
    this.table.publish(reserved.reservation, meta);
    this.#held.delete(reserved);
    const hex = reserved.key.hex;
    this.#manifests.set(hex, { key: reserved.key, chunks: held.chunks });
    for (const chunk of held.chunks) {
      let set = this.#listedBy.get(chunk.hex);
      if (set === undefined) this.#listedBy.set(chunk.hex, (set = new Set()));
      set.add(hex);
    }
    for (const pin of held.pins) pin.close();
  }

  /** Gives the manifest's slot back and releases its chunk pins. */
  abandon(reserved: ManifestReservation): void {
    const held = this.#heldOf(reserved, 'abandon');
    this.#held.delete(reserved);
    try {
      this.table.abandon(reserved.reservation);
    } finally {
      for (const pin of held.pins) pin.close();
    }
  }

  /**
   * Evicts `key` unless it is pinned, or, for a chunk, unless a manifest listing it is pinned:
   * each published manifest that lists the chunk is evicted first, and the first that refuses
   * (`'pinned'`) keeps the chunk (manifests evicted before it stay evicted). `'evicted'`,
   * `'pinned'` or `'absent'`, as the table's `tryEvict`.
   */
  tryEvict(key: ManifestChunk): 'evicted' | 'pinned' | 'absent' {
    const artifact = key instanceof ChunkKey ? key.toArtifactKey() : key;
    assertArtifactKey(artifact);
    const hex = artifact.hex;
    if (this.#manifests.has(hex)) return this.#evictManifest(hex);
    const listing = this.#listedBy.get(hex);
    if (listing !== undefined) {
      for (const manifest of [...listing]) {
        if (this.#evictManifest(manifest) === 'pinned') return 'pinned';
      }
    }
    return this.table.tryEvict(artifact);
  }

  /** The hexes of the published manifests that list `chunk`: a fresh array, for operators and tests. */
  manifestsListing(chunk: ManifestChunk): string[] {
    return [...(this.#listedBy.get(chunk.hex) ?? [])];
  }

  /** Published manifests this helper knows. */
  get manifests(): number {
    return this.#manifests.size;
  }

  #evictManifest(hex: string): 'evicted' | 'pinned' | 'absent' {
    const entry = this.#manifests.get(hex)!;
    const result = this.table.tryEvict(entry.key);
    if (result === 'pinned') return result;
    this.#manifests.delete(hex);
    for (const chunk of entry.chunks) {
      const set = this.#listedBy.get(chunk.hex);
      set?.delete(hex);
      if (set?.size === 0) this.#listedBy.delete(chunk.hex);
    }
    return result;
  }

  #heldOf(reserved: ManifestReservation, what: string): Held {
    const held = this.#held.get(reserved);
    if (held === undefined) {
      throw new WaitprepError('ERR_STALE_RESERVATION', `${what}: not a pending manifest reservation of this helper (published or abandoned already, or another helper's)`);
    }
    return held;
  }
}
