/**
 * The manifest format (docs/engine-keys.md#manifests): the complete publishable unit of a chunked
 * request. A manifest's key identifies the whole prefix (the last chunk's key plus the manifest
 * marker, {@link manifestKey}); its bytes list the chunks' digests in order. The producer's rules
 * for publishing and evicting manifests are ManifestProducer's (lib/lease-table/manifest-producer.ts).
 */
import { WaitprepError, invalidArgument } from '../errors.js';

/** First bytes of a manifest's bytes: "WPM" and the format version 1. */
export const MANIFEST_MAGIC = Uint8Array.of(0x57, 0x50, 0x4d, 0x31);
/** Bytes before the digests: magic, u32le chunk count, u64le total tokens. */
export const MANIFEST_HEADER_BYTES = 16;
const DIGEST_BYTES = 32;
const U32_MAX = 0xffff_ffff;

/** A manifest's bytes, read back. */
export interface DecodedManifest {
  /** The chunks' digests, in chain order: fresh 32-byte arrays. */
  digests: Uint8Array[];
  /** The same digests as 64-character lowercase hex. */
  hexes: string[];
  /** Tokens over every chunk the manifest lists. */
  totalTokens: bigint;
}

/**
 * A manifest's bytes: `WPM1`, the chunk count (u32le), the total token count (u64le), then each
 * chunk's 32-byte digest in chain order. Throws `ERR_INVALID_ARGUMENT` for no digests or a digest
 * that is not 32 bytes.
 */
export function encodeManifest(digests: readonly Uint8Array[], totalTokens: number | bigint): Uint8Array {
  if (!Array.isArray(digests) || digests.length === 0 || digests.length > U32_MAX) {
    throw invalidArgument('digests', 'a non-empty array of 32-byte digests', digests);
  }
  const tokens = BigInt(totalTokens);
  if (tokens < 0n || tokens >= 1n << 64n) throw invalidArgument('totalTokens', 'a u64', totalTokens);
  const out = new Uint8Array(MANIFEST_HEADER_BYTES + DIGEST_BYTES * digests.length);
  const view = new DataView(out.buffer);
  out.set(MANIFEST_MAGIC, 0);
  view.setUint32(4, digests.length, true);
  view.setBigUint64(8, tokens, true);
  digests.forEach((digest, i) => {
    if (!(digest instanceof Uint8Array) || digest.length !== DIGEST_BYTES) throw invalidArgument(`digests[${i}]`, 'a 32-byte Uint8Array', digest);
    out.set(digest, MANIFEST_HEADER_BYTES + DIGEST_BYTES * i);
  });
  return out;
}

/**
 * Reads a manifest's bytes strictly: the magic, a non-zero count, and exactly that many digests
 * with nothing after them. Throws `ERR_INVALID_ARGUMENT` (field `manifest`) saying what differs.
 */
export function decodeManifest(bytes: Uint8Array): DecodedManifest {
  const bad = (expected: string, got: string): never => {
    throw new WaitprepError('ERR_INVALID_ARGUMENT', `Expected the manifest bytes to be ${expected}, got ${got}`, { field: 'manifest' });
  };
  if (!(bytes instanceof Uint8Array)) return bad('a Uint8Array', typeof bytes);
  if (bytes.length < MANIFEST_HEADER_BYTES) bad(`at least ${MANIFEST_HEADER_BYTES} bytes`, `${bytes.length}`);
  for (let i = 0; i < MANIFEST_MAGIC.length; i++) if (bytes[i] !== MANIFEST_MAGIC[i]) bad('headed by the magic WPM1', Buffer.from(bytes.subarray(0, 4)).toString('hex'));
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const count = view.getUint32(4, true);
  if (count === 0) bad('a non-zero chunk count', '0');
  const want = MANIFEST_HEADER_BYTES + DIGEST_BYTES * count;
  if (bytes.length !== want) bad(`${want} bytes long for ${count} chunks`, `${bytes.length}`);
  const digests: Uint8Array[] = [];
  const hexes: string[] = [];
  for (let i = 0; i < count; i++) {
    const digest = bytes.slice(MANIFEST_HEADER_BYTES + DIGEST_BYTES * i, MANIFEST_HEADER_BYTES + DIGEST_BYTES * (i + 1));
    digests.push(digest);
    hexes.push(Buffer.from(digest).toString('hex'));
  }
  return { digests, hexes, totalTokens: view.getBigUint64(8, true) };
}
