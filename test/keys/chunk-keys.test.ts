// Chained chunk keys (lib/keys/chunk-keys.ts, docs/engine-keys.md): the shared vectors, the refusals,
// a session's turns giving the same chain as one prompt, a turn hashing only its new tokens, a
// manifest key at every count of digits, and no key holding more than one chunk of tokens.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  CHUNK_PARENT_FIELD,
  ChunkChain,
  ChunkKey,
  MANIFEST_FIELD,
  WaitprepError,
  artifactKey,
  chunkKeys,
  chunkProfile,
  encodeManifest,
  isManifestKey,
  manifestKey,
  type ChunkChainOptions,
} from '../../lib/index.js';

interface Vector {
  name: string;
  options: Record<string, unknown>;
  turns: number[][];
  chunks: Array<{ index: number; tokenCount: number; parentHex: string; digestHex: string; canonicalHex?: string }>;
  partial: { tokenCount: number; parentHex: string; digestHex: string } | null;
  manifest: { chunkCount: number; digestHex: string; canonicalHex?: string; bytesHex: string } | null;
}
interface Invalid {
  name: string;
  options: Record<string, unknown>;
  turns: number[][];
  code: string;
  field: string;
}

const file = JSON.parse(readFileSync(join(import.meta.dirname, '..', 'vectors', 'chunk-keys.json'), 'utf8')) as { vectors: Vector[]; invalid: Invalid[] };

function fromJson(options: Record<string, unknown>): ChunkChainOptions {
  const out: Record<string, unknown> = { ...options };
  for (const name of ['sourcePageGeneration', 'representationVersion']) {
    if (typeof out[name] === 'string') out[name] = BigInt(out[name] as string);
  }
  return out as unknown as ChunkChainOptions;
}

const hex = (bytes: Uint8Array): string => Buffer.from(bytes).toString('hex');

const OPTIONS: ChunkChainOptions = {
  runtime: 'vllm/0.11.0',
  model: 'm',
  profile: { dtype: 'bf16', layout: 'NHD', tpDegree: 2, rank: 1 },
  task: 't',
  namespace: 'n',
  chunkTokens: 16,
};

describe('chunk-key vectors (test/vectors/chunk-keys.json)', () => {
  it('has vectors and invalid entries', () => {
    expect(file.vectors.length).toBeGreaterThanOrEqual(10);
    expect(file.invalid.length).toBeGreaterThanOrEqual(10);
  });

  it.each(file.vectors.map((v) => [v.name, v] as const))('%s', (_name, v) => {
    const chain = new ChunkChain(fromJson(v.options));
    const chunks = v.turns.flatMap((turn) => chain.extend(turn));
    expect(chunks.map((c) => ({ index: c.index, tokenCount: c.tokenCount, parentHex: c.parentHex, digestHex: c.hex }))).toEqual(
      v.chunks.map(({ canonicalHex: _, ...rest }) => rest),
    );
    v.chunks.forEach((want, i) => {
      const chunk = chunks[i]!;
      if (want.canonicalHex !== undefined) expect(hex(chunk.toBytes())).toBe(want.canonicalHex);
      // The ArtifactKey a table takes has the same digest and only the chunk's tokens.
      const key = chunk.toArtifactKey();
      expect(key.hex).toBe(want.digestHex);
      expect(key.tokenCount).toBe(want.tokenCount);
      expect(key.source.extra[CHUNK_PARENT_FIELD]).toBe(want.parentHex);
    });
    const partial = chain.partial();
    expect(partial === null ? null : { tokenCount: partial.tokenCount, parentHex: partial.parentHex, digestHex: partial.hex }).toEqual(v.partial);
    if (v.manifest === null) {
      expect(() => chain.manifestKey()).toThrow(WaitprepError);
    } else {
      const key = chain.manifestKey();
      expect(key.hex).toBe(v.manifest.digestHex);
      if (v.manifest.canonicalHex !== undefined) expect(hex(key.toBytes())).toBe(v.manifest.canonicalHex);
      expect(key.source.extra[MANIFEST_FIELD]).toBe(String(v.manifest.chunkCount));
      expect(isManifestKey(key)).toBe(true);
      expect(hex(encodeManifest(chunks.map((c) => c.digest), chunks.reduce((n, c) => n + c.tokenCount, 0)))).toBe(v.manifest.bytesHex);
      expect(isManifestKey(chunks.at(-1)!.toArtifactKey())).toBe(false);
    }
    expect(chain.digests()).toEqual(v.chunks.map((c) => c.digestHex));
  });

  it.each(file.invalid.map((v) => [v.name, v] as const))('refuses %s', (_name, v) => {
    let caught: unknown = null;
    try {
      const chain = new ChunkChain(fromJson(v.options));
      for (const turn of v.turns) chain.extend(turn);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(WaitprepError);
    expect(caught).toMatchObject({ code: v.code, field: v.field });
  });
});

describe('ChunkChain', () => {
  it('gives the same chain for any split of the same tokens into turns', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 0xffff_ffff }), { maxLength: 80 }), fc.array(fc.nat(80), { maxLength: 6 }), (tokens, cuts) => {
        const whole = chunkKeys(OPTIONS, tokens);
        const chain = new ChunkChain(OPTIONS);
        const points = [...new Set(cuts.map((c) => Math.min(c, tokens.length)))].sort((a, b) => a - b);
        const keys: ChunkKey[] = [];
        let from = 0;
        for (const to of [...points, tokens.length]) {
          keys.push(...chain.extend(tokens.slice(from, to)));
          from = to;
        }
        expect(keys.map((k) => k.hex)).toEqual(whole.chunks.map((k) => k.hex));
        expect(chain.partial()?.hex ?? null).toBe(whole.partial?.hex ?? null);
      }),
      { numRuns: 200 },
    );
  });

  it('hashes only a new turn\'s tokens (and the pending tail it completes)', () => {
    const chain = new ChunkChain({ ...OPTIONS, chunkTokens: 256 });
    const prompt = Uint32Array.from({ length: 32 * 1024 + 100 }, (_, i) => (i * 7919) % 128_000);
    chain.extend(prompt);
    expect(chain.hashedTokens).toBe(32 * 1024);
    expect(chain.pendingTokens).toBe(100);
    const before = chain.hashedTokens;
    const turn = Uint32Array.from({ length: 600 }, (_, i) => i);
    const added = chain.extend(turn);
    // 100 pending + 600 new = 700 tokens: two full chunks hashed (512 tokens), 188 left pending.
    expect(added).toHaveLength(2);
    expect(chain.hashedTokens - before).toBe(512);
    expect(chain.pendingTokens).toBe(188);
    expect(chain.chunks).toBe(130);
  });

  it('writes a manifest key equal to the one built from its last chunk\'s fields, at every count of digits', () => {
    // manifestKey writes the chunk's encoding with the count spliced in by hand; artifactKey
    // builds the same identity from the plain fields through the ordinary encoder.
    const chain = new ChunkChain({ ...OPTIONS, chunkTokens: 1 });
    for (const count of [1, 9, 10, 99, 100, 1000]) {
      chain.extend(Array.from({ length: count - chain.chunks }, (_, i) => i));
      expect(chain.chunks).toBe(count);
      const manifest = chain.manifestKey();
      const fields = chain.last!.toArtifactKey().toFields();
      fields.source.extra = { ...fields.source.extra, [MANIFEST_FIELD]: String(count) };
      expect(manifest.source.extra[MANIFEST_FIELD]).toBe(String(count));
      expect(manifest.hex).toBe(artifactKey(fields).hex);
    }
  });

  it('never keeps or hands out more than one chunk of tokens', () => {
    const chain = new ChunkChain({ ...OPTIONS, chunkTokens: 64 });
    const keys: ChunkKey[] = [];
    for (let turn = 0; turn < 20; turn++) {
      keys.push(...chain.extend(Array.from({ length: 97 }, (_, i) => turn * 1000 + i)));
      expect(chain.pendingTokens).toBeLessThan(64);
    }
    for (const key of keys) {
      expect(key.tokenCount).toBe(64);
      expect(key.toArtifactKey().tokenCount).toBe(64);
    }
    expect(chain.manifestKey().tokenCount).toBe(64);
    expect(chain.partial()!.toArtifactKey().tokenCount).toBe(chain.pendingTokens);
  });

  it('chains: changing one token changes that chunk and every later one, never an earlier one', () => {
    const tokens = Array.from({ length: 16 * 6 }, (_, i) => i);
    const a = chunkKeys(OPTIONS, tokens).chunks.map((k) => k.hex);
    const changed = tokens.slice();
    changed[16 * 3 + 5] = 999_999;
    const b = chunkKeys(OPTIONS, changed).chunks.map((k) => k.hex);
    expect(b.slice(0, 3)).toEqual(a.slice(0, 3));
    for (let i = 3; i < 6; i++) expect(b[i]).not.toBe(a[i]);
  });

  it('keys every chunk apart by each source field and profile part', () => {
    const tokens = Array.from({ length: 32 }, (_, i) => i);
    const variants: ChunkChainOptions[] = [
      OPTIONS,
      { ...OPTIONS, model: 'm2' },
      { ...OPTIONS, adapter: 'lora-a' },
      { ...OPTIONS, task: 't2' },
      { ...OPTIONS, namespace: 'n2' },
      { ...OPTIONS, runtime: 'sglang/0.5' },
      { ...OPTIONS, profile: { ...OPTIONS.profile, dtype: 'fp16' } },
      { ...OPTIONS, profile: { ...OPTIONS.profile, layout: 'HND' } },
      { ...OPTIONS, profile: { ...OPTIONS.profile, tpDegree: 4 } },
      { ...OPTIONS, profile: { ...OPTIONS.profile, rank: 0 } },
      { ...OPTIONS, extra: { mm_hash: 'x' } },
    ];
    const firsts = variants.map((o) => chunkKeys(o, tokens).chunks[0]!.hex);
    expect(new Set(firsts).size).toBe(variants.length);
  });

  it('puts the profile in source.profile and the parent digest in source.extra, exactly as artifactKey would', () => {
    expect(chunkProfile({ dtype: 'bf16', layout: 'NHD', tpDegree: 2, rank: 1 })).toBe('dtype=bf16,layout=NHD,tp=2,rank=1');
    const [first, second] = chunkKeys({ ...OPTIONS, extra: { lane: '7' } }, Array.from({ length: 32 }, (_, i) => i)).chunks;
    const fields = {
      source: {
        snapshotKind: 'kv-chunk', runtime: 'vllm/0.11.0', model: 'm', adapter: 'none', profile: 'dtype=bf16,layout=NHD,tp=2,rank=1',
        positionPolicy: 'absolute', task: 't', namespace: 'n', tokenLayout: Array.from({ length: 16 }, (_, i) => 16 + i),
        extra: { lane: '7', [CHUNK_PARENT_FIELD]: first!.hex },
      },
      sourcePageGeneration: 0, codec: 'none', codecConfig: 'none', representationVersion: 1,
    };
    expect(second!.hex).toBe(artifactKey(fields).hex);
    expect(first!.parentHex).toBe('');
    // The digest getter hands out a copy.
    const digest = second!.digest;
    digest[0] ^= 0xff;
    expect(hex(second!.digest)).toBe(second!.hex);
  });

  it('leaves the chain unchanged when a turn has a bad token', () => {
    const chain = new ChunkChain(OPTIONS);
    chain.extend([1, 2, 3]);
    expect(() => chain.extend([4, -5])).toThrow(expect.objectContaining({ code: 'ERR_INVALID_KEY', field: 'tokens[1]' }));
    expect(chain.pendingTokens).toBe(3);
    expect(() => chain.extend('1 2' as unknown as number[])).toThrow(expect.objectContaining({ code: 'ERR_INVALID_KEY', field: 'tokens' }));
    const again = new ChunkChain(OPTIONS);
    again.extend([1, 2, 3]);
    expect(chain.extend(Array.from({ length: 13 }, (_, i) => i))[0]!.hex).toBe(again.extend(Array.from({ length: 13 }, (_, i) => i))[0]!.hex);
  });

  it('refuses unknown options and a manifest of nothing', () => {
    expect(() => new ChunkChain({ ...OPTIONS, tenant: 'x' } as unknown as ChunkChainOptions)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', field: 'options.tenant' }));
    expect(() => new ChunkChain({ ...OPTIONS, profile: { ...OPTIONS.profile, gpu: 'h100' } } as unknown as ChunkChainOptions)).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', field: 'profile.gpu' }),
    );
    expect(() => new ChunkChain(OPTIONS).manifestKey()).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT' }));
    expect(() => manifestKey({} as ChunkKey)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', field: 'last' }));
  });
});
