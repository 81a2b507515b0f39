// The fast ways keys are built (lib/keys/chunk-keys.ts writes chunk and manifest encodings straight
// into a key's store; lib/keys/key.ts reads a key's fields out of its encoding on first use) against
// the slow construction they replace: artifactKey() over the fields docs/engine-keys.md gives
// each chunk and manifest. Same fields, same bytes, same digest, on random chains.
import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  CHUNK_PARENT_FIELD,
  ChunkChain,
  MANIFEST_FIELD,
  artifactKey,
  decodeArtifactKey,
  encodeArtifactKey,
  isManifestKey,
  manifestKey,
  type ArtifactKey,
  type ArtifactKeyFields,
  type ChunkChainOptions,
  type ChunkKey,
} from '../../lib/index.js';
import { plainFieldsOf } from '../../lib/keys/key-fields.js';
import { SHARED_STORE_BYTES, keyDigestBytes } from '../../lib/keys/key.js';

const hex = (bytes: Uint8Array): string => Buffer.from(bytes).toString('hex');

/** Names that sort on both sides of the reserved ones, and next to them, by UTF-8 bytes. */
const extraName = fc.oneof(
  fc.constantFrom('waitprep', 'waitprep-', 'waitprep/', 'waitpreo.z', 'waitprer', 'a', 'mm_hash', 'z', '\u00e9', '😀', '9', '10', '__proto__'),
  fc.string({ minLength: 1, maxLength: 6, unit: 'grapheme' }),
);
const word = fc.string({ minLength: 1, maxLength: 12, unit: 'grapheme' });
const u64 = fc.oneof(fc.constant(0n), fc.constant(2n ** 64n - 1n), fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }));

const optionsArb: fc.Arbitrary<ChunkChainOptions> = fc
  .record(
    {
      runtime: word,
      model: word,
      adapter: word,
      task: word,
      namespace: word,
      snapshotKind: word,
      positionPolicy: word,
      codec: word,
      codecConfig: word,
      sourcePageGeneration: u64,
      representationVersion: u64,
      extra: fc.dictionary(extraName, fc.string({ maxLength: 8, unit: 'grapheme' }), { maxKeys: 4 }),
      chunkTokens: fc.integer({ min: 1, max: 40 }),
      tpDegree: fc.integer({ min: 1, max: 8 }),
    },
    { requiredKeys: ['runtime', 'model', 'task', 'namespace', 'chunkTokens', 'tpDegree'] },
  )
  .filter((o) => o.extra === undefined || Object.keys(o.extra).every((name) => !name.startsWith('waitprep.')))
  .map(({ tpDegree, ...rest }) => ({ ...rest, profile: { dtype: 'bf16', layout: 'NHD', tpDegree, rank: tpDegree - 1 } }) as ChunkChainOptions);

const turnsArb = fc.array(fc.array(fc.integer({ min: 0, max: 0xffff_ffff }), { maxLength: 90 }), { minLength: 1, maxLength: 5 });

/** The fields docs/engine-keys.md gives chunk `tokens` of a chain with `options` under `parentHex`, plus `more` extra entries. */
function chunkFields(options: ChunkChainOptions, tokens: readonly number[], parentHex: string, more: Record<string, string> = {}): ArtifactKeyFields {
  const { dtype, layout, tpDegree, rank } = options.profile;
  return {
    source: {
      snapshotKind: options.snapshotKind ?? 'kv-chunk',
      runtime: options.runtime,
      model: options.model,
      adapter: options.adapter ?? 'none',
      profile: `dtype=${dtype},layout=${layout},tp=${tpDegree},rank=${rank}`,
      positionPolicy: options.positionPolicy ?? 'absolute',
      task: options.task,
      namespace: options.namespace,
      tokenLayout: tokens,
      extra: { ...options.extra, [CHUNK_PARENT_FIELD]: parentHex, ...more },
    },
    sourcePageGeneration: options.sourcePageGeneration ?? 0,
    codec: options.codec ?? 'none',
    codecConfig: options.codecConfig ?? 'none',
    representationVersion: options.representationVersion ?? 1,
  };
}

/** `fast` and `slow` are the same key in every public respect. */
function expectSameKey(fast: ArtifactKey, slow: ArtifactKey): void {
  expect(fast.hex).toBe(slow.hex);
  expect(hex(fast.digest)).toBe(hex(slow.digest));
  expect(hex(fast.toBytes())).toBe(hex(slow.toBytes()));
  expect(fast.toFields()).toEqual(slow.toFields());
  expect(fast.source).toEqual(slow.source);
  expect(Object.keys(fast.source.extra)).toEqual(Object.keys(slow.source.extra));
  for (const name of ['sourcePageGeneration', 'codec', 'codecConfig', 'representationVersion', 'tokenCount'] as const) expect(fast[name]).toBe(slow[name]);
  expect(fast.tokenLayout()).toEqual(slow.tokenLayout());
  expect(fast.equals(slow) && slow.equals(fast)).toBe(true);
}

describe('chunk and manifest keys written straight into a key store', () => {
  it('equal artifactKey() over the documented fields: every chunk, the partial tail and each turn\'s manifest (property)', () => {
    fc.assert(
      fc.property(optionsArb, turnsArb, (options, turns) => {
        const chain = new ChunkChain(options);
        const all: number[] = [];
        for (const turn of turns) {
          const fresh: ChunkKey[] = chain.extend(turn);
          all.push(...turn);
          for (const chunk of fresh) {
            const start = chunk.index * options.chunkTokens;
            const slow = artifactKey(chunkFields(options, all.slice(start, start + chunk.tokenCount), chunk.parentHex));
            expect(chunk.hex).toBe(slow.hex);
            expect(hex(chunk.digest)).toBe(slow.hex);
            expect(hex(chunk.toBytes())).toBe(hex(slow.toBytes()));
            expectSameKey(chunk.toArtifactKey(), slow);
          }
          const last = chain.last;
          if (last !== null) {
            const start = last.index * options.chunkTokens;
            const slow = artifactKey(chunkFields(options, all.slice(start, start + last.tokenCount), last.parentHex, { [MANIFEST_FIELD]: String(last.index + 1) }));
            const fast = chain.manifestKey();
            expectSameKey(fast, slow);
            expectSameKey(manifestKey(last), slow);
            expect(isManifestKey(fast)).toBe(true);
            expectSameKey(decodeArtifactKey(fast.toBytes()), slow);
          }
          const tail = chain.partial();
          if (tail !== null) {
            const start = chain.chunks * options.chunkTokens;
            expectSameKey(tail.toArtifactKey(), artifactKey(chunkFields(options, all.slice(start), chain.lastHex)));
            expectSameKey(manifestKey(tail), artifactKey(chunkFields(options, all.slice(start), chain.lastHex, { [MANIFEST_FIELD]: String(tail.index + 1) })));
          }
        }
      }),
      { numRuns: 150 },
    );
  });
});

describe('a chain\'s own extra', () => {
  it('keeps a name such as __proto__ an ordinary entry, as artifactKey() does', () => {
    const options: ChunkChainOptions = { runtime: 'r', model: 'm', profile: { dtype: 'bf16', layout: 'NHD', tpDegree: 1, rank: 0 }, task: 't', namespace: 'n', chunkTokens: 2 };
    const extra = Object.fromEntries([['__proto__', 'x']]) as Record<string, string>;
    const [chunk] = new ChunkChain({ ...options, extra }).extend([1, 2]);
    expect(Object.keys(chunk!.toArtifactKey().source.extra)).toEqual(['__proto__', CHUNK_PARENT_FIELD]);
    expect(chunk!.hex).toBe(artifactKey(chunkFields({ ...options, extra }, [1, 2], '')).hex);
    expect(chunk!.hex).not.toBe(new ChunkChain(options).extend([1, 2])[0]!.hex);
  });
});

const keyFieldsArb: fc.Arbitrary<ArtifactKeyFields> = fc.record({
  source: fc.record({
    snapshotKind: word,
    runtime: word,
    model: word,
    adapter: word,
    profile: word,
    positionPolicy: word,
    task: word,
    namespace: word,
    tokenLayout: fc.array(fc.integer({ min: 0, max: 0xffff_ffff }), { minLength: 1, maxLength: 200 }),
    extra: fc.dictionary(extraName, fc.string({ maxLength: 8, unit: 'grapheme' }), { maxKeys: 5 }),
  }),
  sourcePageGeneration: u64,
  codec: word,
  codecConfig: word,
  representationVersion: u64,
});

describe('a key reads its fields out of its encoding on first use', () => {
  it('gives back the fields it was built from, the same frozen objects on every read, whichever way it was built (property)', () => {
    fc.assert(
      fc.property(keyFieldsArb, (fields) => {
        const built = artifactKey(fields);
        const decoded = decodeArtifactKey(encodeArtifactKey(fields));
        for (const key of [built, decoded]) {
          const { tokenLayout, extra, ...strings } = fields.source;
          expect({ ...key.source }).toEqual({ ...strings, extra: key.source.extra });
          expect({ ...key.source.extra }).toEqual({ ...extra });
          expect(key.source).toBe(key.source);
          expect(Object.isFrozen(key.source) && Object.isFrozen(key.source.extra) && Object.isFrozen(key)).toBe(true);
          expect(key.sourcePageGeneration).toBe(BigInt(fields.sourcePageGeneration));
          expect(key.representationVersion).toBe(BigInt(fields.representationVersion));
          expect(key.codec).toBe(fields.codec);
          expect(key.codecConfig).toBe(fields.codecConfig);
          expect(Array.from(key.tokenLayout())).toEqual(tokenLayout);
          expect(key.tokenCount).toBe(tokenLayout.length);
          // The plain form a worker thread reads out of the wire form is the key's own.
          expect(plainFieldsOf(key.toBytes())).toEqual(key.toFields());
          expect(artifactKey(key.toFields()).hex).toBe(key.hex);
        }
        expectSameKey(decoded, built);
      }),
      { numRuns: 200 },
    );
  });

  it('behaves the same for a key long enough to keep its encoding in shared memory', () => {
    const fields: ArtifactKeyFields = {
      source: { snapshotKind: 'kv', runtime: 'r', model: 'm', adapter: 'none', profile: 'p', positionPolicy: 'a', task: 't', namespace: 'n',
        tokenLayout: Uint32Array.from({ length: SHARED_STORE_BYTES / 4 }, (_, i) => i * 7), extra: { z: '\u00e9' } },
      sourcePageGeneration: 5n,
      codec: 'none',
      codecConfig: 'none',
      representationVersion: 1,
    };
    const key = artifactKey(fields);
    const bytes = key.toBytes();
    expect(bytes.buffer).toBeInstanceOf(ArrayBuffer);
    expect(bytes.byteOffset === 0 && bytes.buffer.byteLength === bytes.byteLength).toBe(true);
    expect(hex(bytes)).toBe(hex(encodeArtifactKey(fields)));
    expect(key.hex).toBe(createHash('sha256').update(bytes).digest('hex'));
    expect(keyDigestBytes(key).buffer).toBeInstanceOf(ArrayBuffer);
    expect(hex(keyDigestBytes(key))).toBe(key.hex);
    bytes.fill(0);
    expect(hex(key.toBytes())).toBe(hex(encodeArtifactKey(fields)));
    expectSameKey(decodeArtifactKey(encodeArtifactKey(fields)), key);
    expect(key.tokenCount).toBe(SHARED_STORE_BYTES / 4);
    expect(key.tokenLayout()[100]).toBe(700);
  });

  it('keeps no field as an own property: a key is its hex, its token count and private state', () => {
    const key = artifactKey({
      source: { snapshotKind: 'kv', runtime: 'r', model: 'm', adapter: 'none', profile: 'p', positionPolicy: 'a', task: 't', namespace: 'n', tokenLayout: [1, 2, 3] },
      sourcePageGeneration: 0,
      codec: 'none',
      codecConfig: 'none',
      representationVersion: 1,
    });
    expect(Object.keys(key).sort()).toEqual(['hex', 'tokenCount']);
    expect(() => {
      (key as { source: unknown }).source = {};
    }).toThrow(TypeError);
    expect(key.source.task).toBe('t');
  });
});
