// Manifests (lib/keys/manifest.ts, docs/engine-keys.md#manifests) over both lease-table
// implementations: published only once every listed chunk is READY, and while a manifest is
// pinned the producer's helper never evicts a chunk it lists. Plus the manifest bytes.
import { afterEach, describe, expect, it } from 'vitest';
import {
  ChunkChain,
  ManifestProducer,
  WaitprepError,
  decodeManifest,
  encodeManifest,
  openLeaseTable,
  unlinkLeaseTable,
  type ChunkKey,
  type LeaseTable,
  type ManifestReservation,
} from '../../lib/index.js';
import { makeKey } from '../helpers.js';
import { NATIVE, runsIf } from '../skip-reasons.js';

type Impl = 'native' | 'js';
// Both rows are always registered, so that a run without the addon counts the native ones as skipped.
const IMPLS: Impl[] = ['native', 'js'];

const META = { sizeBytes: 4096, location: 0, checksum: 0, codecId: 0, representationVersion: 1 };
let serial = 0;
const opened: Array<{ table: LeaseTable; name: string; impl: Impl }> = [];

afterEach(() => {
  for (const { table, name, impl } of opened.splice(0).reverse()) {
    table.close();
    if (impl === 'native') {
      try {
        unlinkLeaseTable(name);
      } catch {
        // the producer's entry unlinked it
      }
    }
  }
});

function tables(impl: Impl): { producer: LeaseTable; consumer: LeaseTable } {
  const name = `wp-manifest-test-${process.pid}-${serial++}`;
  const producer = openLeaseTable({ name, role: 'producer', create: { capacity: 64 }, implementation: impl });
  opened.push({ table: producer, name, impl });
  const consumer = openLeaseTable({ name, role: 'consumer', implementation: impl, ...(producer.sharedBuffer !== null ? { buffer: producer.sharedBuffer } : {}) });
  opened.push({ table: consumer, name, impl });
  return { producer, consumer };
}

function chain(tokens = 4 * 16): { chain: ChunkChain; chunks: ChunkKey[] } {
  const c = new ChunkChain({ runtime: 'test', model: 'm', profile: { dtype: 'bf16', layout: 'NHD', tpDegree: 1, rank: 0 }, task: 't', namespace: 'manifest-test', chunkTokens: 16 });
  return { chain: c, chunks: c.extend(Array.from({ length: tokens }, (_, i) => i)) };
}

function publishChunks(producer: LeaseTable, chunks: readonly ChunkKey[]): void {
  for (const chunk of chunks) producer.publish(producer.reserve(chunk.toArtifactKey()), META);
}

function reserved(value: ReturnType<ManifestProducer['reserve']>): ManifestReservation {
  if (value.kind !== 'reservation') throw new Error(`expected a reservation, got chunk ${value.chunk} ${value.reason}`);
  return value;
}

for (const impl of IMPLS) {
describe.runIf(impl === 'js' || runsIf('manifests over the native lease table', NATIVE))(`manifests over the ${impl} lease table`, () => {
  it('is published only once every chunk it lists is READY; an incomplete one reserves and pins nothing', () => {
    const { producer, consumer } = tables(impl);
    const { chain: c, chunks } = chain();
    const helper = new ManifestProducer(producer);
    const manifest = c.manifestKey();
    publishChunks(producer, chunks.slice(0, 2));
    const preparing = producer.reserve(chunks[2]!.toArtifactKey());

    expect(helper.reserve(manifest, chunks)).toEqual({ kind: 'incomplete', chunk: 2, reason: 'preparing' });
    producer.publish(preparing, META);
    expect(helper.reserve(manifest, chunks)).toEqual({ kind: 'incomplete', chunk: 3, reason: 'absent' });
    // Nothing reserved, and the pins taken on the READY chunks were released: they evict.
    expect(consumer.tryPin(manifest)).toMatchObject({ kind: 'miss', reason: 'absent' });
    for (let slot = 0; slot < producer.capacity; slot++) expect(producer.clientPins(slot)).toBe(0);

    publishChunks(producer, chunks.slice(3));
    const r = reserved(helper.reserve(manifest, chunks));
    expect(consumer.tryPin(manifest)).toMatchObject({ kind: 'miss', reason: 'preparing' });
    // Between reserve and publish the producer holds every chunk: nothing evicts them.
    for (const chunk of chunks) expect(helper.tryEvict(chunk)).toBe('pinned');
    expect(decodeManifest(r.bytes)).toMatchObject({ hexes: chunks.map((k) => k.hex), totalTokens: 64n });
    expect(r.chunks).toEqual(c.digests());
    helper.publish(r, { ...META, sizeBytes: r.bytes.length });
    for (let slot = 0; slot < producer.capacity; slot++) expect(producer.clientPins(slot)).toBe(0);
    const lease = consumer.tryPin(manifest);
    expect(lease.kind).toBe('lease');
    if (lease.kind === 'lease') lease.close();
    expect(helper.manifests).toBe(1);
  });

  it('never evicts a chunk a pinned manifest lists; after the pin closes, evicting a chunk takes the manifest first', () => {
    const { producer, consumer } = tables(impl);
    const { chain: c, chunks } = chain();
    const helper = new ManifestProducer(producer);
    publishChunks(producer, chunks);
    const manifest = c.manifestKey();
    helper.publish(reserved(helper.reserve(manifest, chunks)), META);

    const lease = consumer.tryPin(manifest);
    if (lease.kind !== 'lease') throw new Error(`expected a hit, got ${lease.reason}`);
    for (const chunk of chunks) expect(helper.tryEvict(chunk)).toBe('pinned');
    expect(helper.tryEvict(manifest)).toBe('pinned');
    // Every chunk is still READY: a reader holding only the manifest can load them all.
    for (const chunk of chunks) {
      const pin = consumer.tryPin(chunk.toArtifactKey());
      expect(pin.kind).toBe('lease');
      if (pin.kind === 'lease') pin.close();
    }
    lease.close();

    expect(helper.manifestsListing(chunks[1]!)).toEqual([manifest.hex]);
    expect(helper.tryEvict(chunks[1]!)).toBe('evicted');
    expect(consumer.tryPin(manifest)).toMatchObject({ kind: 'miss', reason: 'absent' });
    expect(consumer.tryPin(chunks[1]!.toArtifactKey())).toMatchObject({ kind: 'miss', reason: 'absent' });
    expect(helper.manifests).toBe(0);
    expect(helper.manifestsListing(chunks[0]!)).toEqual([]);
    // The others are plain chunks again.
    expect(helper.tryEvict(chunks[0]!)).toBe('evicted');
    expect(helper.tryEvict(chunks[0]!)).toBe('absent');
  });

  it('keeps a chunk shared by two manifests while either is pinned', () => {
    const { producer, consumer } = tables(impl);
    const c = chain(2 * 16);
    const shortManifest = c.chain.manifestKey();
    const longer = c.chunks.concat(c.chain.extend(Array.from({ length: 16 }, (_, i) => 100 + i)));
    const longManifest = c.chain.manifestKey();
    const helper = new ManifestProducer(producer);
    publishChunks(producer, longer);
    helper.publish(reserved(helper.reserve(shortManifest, longer.slice(0, 2))), META);
    helper.publish(reserved(helper.reserve(longManifest, longer)), META);
    expect(helper.manifestsListing(longer[0]!).sort()).toEqual([shortManifest.hex, longManifest.hex].sort());

    const pin = consumer.tryPin(shortManifest);
    if (pin.kind !== 'lease') throw new Error(`expected a hit, got ${pin.reason}`);
    // Chunk 2 is listed only by the long manifest, which is not pinned: both go.
    expect(helper.tryEvict(longer[2]!)).toBe('evicted');
    expect(consumer.tryPin(longManifest)).toMatchObject({ kind: 'miss', reason: 'absent' });
    // Chunk 0 is also in the pinned short manifest: kept.
    expect(helper.tryEvict(longer[0]!)).toBe('pinned');
    const chunk0 = consumer.tryPin(longer[0]!.toArtifactKey());
    expect(chunk0.kind).toBe('lease');
    if (chunk0.kind === 'lease') chunk0.close();
    pin.close();
    expect(helper.tryEvict(longer[0]!)).toBe('evicted');
  });

  it('abandons: the slot is free again and the chunk pins are released; a spent reservation is refused', () => {
    const { producer } = tables(impl);
    const { chain: c, chunks } = chain();
    const helper = new ManifestProducer(producer);
    publishChunks(producer, chunks);
    const r = reserved(helper.reserve(c.manifestKey(), chunks));
    helper.abandon(r);
    for (let slot = 0; slot < producer.capacity; slot++) expect(producer.clientPins(slot)).toBe(0);
    expect(() => helper.publish(r, META)).toThrow(expect.objectContaining({ code: 'ERR_STALE_RESERVATION' }));
    expect(() => helper.abandon(r)).toThrow(expect.objectContaining({ code: 'ERR_STALE_RESERVATION' }));
    const again = reserved(helper.reserve(c.manifestKey(), chunks));
    expect(() => helper.reserve(c.manifestKey(), chunks)).toThrow(expect.objectContaining({ code: 'ERR_KEY_EXISTS' }));
    // The failed second reserve released its pins; only the first's four remain.
    let pins = 0;
    for (let slot = 0; slot < producer.capacity; slot++) pins += producer.clientPins(slot);
    expect(pins).toBe(4);
    helper.publish(again, META);
    expect(helper.tryEvict(chunks[0]!)).toBe('evicted');
  });

  it('refuses a key that is not a manifest, or a chunk list its marker does not count', () => {
    const { producer } = tables(impl);
    const { chain: c, chunks } = chain();
    const helper = new ManifestProducer(producer);
    expect(() => helper.reserve(chunks[3]!.toArtifactKey(), chunks)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', field: 'manifest' }));
    expect(() => helper.reserve(c.manifestKey(), chunks.slice(1))).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', field: 'chunks' }));
    expect(() => helper.reserve(c.manifestKey(), [...chunks.slice(0, 3), 'x' as never])).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', field: 'chunks[3]' }));
    expect(() => new ManifestProducer({} as LeaseTable)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', field: 'table' }));
    // The chunks must be the manifest's own chain, in order, from its first chunk.
    const swapped = [chunks[0]!, chunks[2]!, chunks[1]!, chunks[3]!];
    expect(() => helper.reserve(c.manifestKey(), swapped)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', field: 'chunks[1]' }));
    const fiveLong = chain(5 * 16);
    expect(() => helper.reserve(fiveLong.chain.manifestKey(), fiveLong.chunks.slice(0, 4).concat([chunks[3]!]))).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', field: 'chunks[4]' }));
    const sameLength = new ChunkChain({ runtime: 'test', model: 'other-model', profile: { dtype: 'bf16', layout: 'NHD', tpDegree: 1, rank: 0 }, task: 't', namespace: 'manifest-test', chunkTokens: 16 });
    sameLength.extend(Array.from({ length: 64 }, (_, i) => i));
    expect(() => helper.reserve(sameLength.manifestKey(), chunks)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', field: 'manifest' }));
    // Plain artifacts, not listed by any manifest, evict as the table evicts them.
    const plain = makeKey(7);
    producer.publish(producer.reserve(plain), META);
    expect(helper.tryEvict(plain)).toBe('evicted');
  });
});
}

describe('manifest bytes', () => {
  it('round-trips digests in order with the token count, and reads strictly', () => {
    const { chunks } = chain();
    const bytes = encodeManifest(chunks.map((k) => k.digest), 64);
    expect(bytes.length).toBe(16 + 32 * 4);
    expect(Buffer.from(bytes.subarray(0, 4)).toString('latin1')).toBe('WPM1');
    const back = decodeManifest(bytes);
    expect(back.hexes).toEqual(chunks.map((k) => k.hex));
    expect(back.totalTokens).toBe(64n);
    const wrong = (b: Uint8Array): unknown => {
      try {
        decodeManifest(b);
      } catch (error) {
        return error;
      }
      return null;
    };
    for (const b of [bytes.subarray(0, 15), bytes.subarray(0, bytes.length - 1), Uint8Array.from([...bytes, 0]), Uint8Array.from(bytes).fill(0x58, 0, 1)]) {
      expect(wrong(b)).toBeInstanceOf(WaitprepError);
      expect(wrong(b)).toMatchObject({ code: 'ERR_INVALID_ARGUMENT', field: 'manifest' });
    }
    const zero = Uint8Array.from(bytes.subarray(0, 16));
    zero.fill(0, 4, 8);
    expect(wrong(zero)).toMatchObject({ field: 'manifest' });
    expect(() => encodeManifest([], 0)).toThrow(expect.objectContaining({ field: 'digests' }));
    expect(() => encodeManifest([new Uint8Array(31)], 0)).toThrow(expect.objectContaining({ field: 'digests[0]' }));
  });
});
