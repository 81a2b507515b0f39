// Engine keys (lib/keys/engine-keys.ts, docs/engine-keys.md): the shared vectors Python passes too, the
// refusals, and on random storage keys the same bytes and digest as artifactKey() over the fields
// the spec gives, so a keyer can never drift from the generic encoder.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  ENGINE_HASH_FIELD,
  EngineKeys,
  KV_GROUP_FIELD,
  WaitprepError,
  artifactKey,
  splitOffloadKey,
  vllmOffloadKey,
  type EngineKeyOptions,
  type EngineName,
} from '../../lib/index.js';

type EngineKeyJson = { offloadKeyHex: string } | { pageKey: string } | { chunkHash: string };
interface Vector {
  name: string;
  engine: EngineName;
  options: Record<string, unknown>;
  engineKey: EngineKeyJson;
  digestHex: string;
  canonicalHex: string;
}
interface Invalid {
  name: string;
  engine: string;
  options: Record<string, unknown>;
  engineKey: EngineKeyJson;
  code: string;
  field: string;
}

const file = JSON.parse(readFileSync(join(import.meta.dirname, '..', 'vectors', 'engine-keys.json'), 'utf8')) as { vectors: Vector[]; invalid: Invalid[] };

function fromJson(options: Record<string, unknown>): EngineKeyOptions {
  const out: Record<string, unknown> = { ...options };
  for (const name of ['sourcePageGeneration', 'representationVersion']) {
    if (typeof out[name] === 'string') out[name] = BigInt(out[name] as string);
  }
  return out as unknown as EngineKeyOptions;
}

function engineKeyOf(json: EngineKeyJson): Uint8Array | string {
  if ('offloadKeyHex' in json) return new Uint8Array(Buffer.from(json.offloadKeyHex, 'hex'));
  if ('pageKey' in json) return json.pageKey;
  return json.chunkHash;
}

const hex = (bytes: Uint8Array): string => Buffer.from(bytes).toString('hex');

const OPTIONS: EngineKeyOptions = {
  runtime: 'vllm/0.23',
  model: 'm',
  profile: { dtype: 'bf16', layout: 'NHD', tpDegree: 2, rank: 1 },
  task: 't',
  namespace: 'n',
};

describe('engine-key vectors (test/vectors/engine-keys.json)', () => {
  it('has vectors for every engine', () => {
    expect(new Set(file.vectors.map((v) => v.engine))).toEqual(new Set(['vllm', 'sglang', 'lmcache']));
  });

  for (const v of file.vectors) {
    it(`${v.name}: digest and canonical encoding`, () => {
      const keys = new EngineKeys(v.engine, fromJson(v.options));
      const key = keys.key(engineKeyOf(v.engineKey));
      expect(key.hex).toBe(v.digestHex);
      expect(hex(key.toBytes())).toBe(v.canonicalHex);
      // fields() is the same key through the generic encoder.
      expect(artifactKey(keys.fields(engineKeyOf(v.engineKey))).hex).toBe(v.digestHex);
    });
  }

  for (const bad of file.invalid) {
    it(`${bad.name}: refused with ${bad.code} naming ${bad.field}`, () => {
      let caught: unknown;
      try {
        new EngineKeys(bad.engine as EngineName, fromJson(bad.options)).key(engineKeyOf(bad.engineKey));
      } catch (error) {
        caught = error;
      }
      expect(caught).toBeInstanceOf(WaitprepError);
      expect((caught as WaitprepError).code).toBe(bad.code);
      expect((caught as WaitprepError).field).toBe(bad.field);
    });
  }
});

describe('EngineKeys', () => {
  it('a vLLM key is the same key whether the OffloadKey is built here or taken apart', () => {
    const blockHash = new Uint8Array(32).fill(7);
    const offloadKey = vllmOffloadKey(blockHash, 3);
    expect(hex(offloadKey)).toBe(`${hex(blockHash)}00000003`);
    expect(splitOffloadKey(offloadKey)).toEqual({ blockHashHex: hex(blockHash), group: 3 });
    const key = new EngineKeys('vllm', OPTIONS).key(offloadKey);
    expect(key.source.extra[ENGINE_HASH_FIELD]).toBe(hex(blockHash));
    expect(key.source.extra[KV_GROUP_FIELD]).toBe('3');
    expect(Array.from(key.tokenLayout())).toEqual([0]);
  });

  it('an LMCache chunk hash given as a number, a bigint or its decimal string is one key', () => {
    const keys = new EngineKeys('lmcache', OPTIONS);
    expect(keys.key(-42).hex).toBe(keys.key(-42n).hex);
    expect(keys.key('-42').hex).toBe(keys.key(-42n).hex);
    expect(keys.key(2n ** 70n).hex).toBe(keys.key('1180591620717411303424').hex);
    expect(() => keys.key(1.5)).toThrow(WaitprepError);
  });

  it('MLA: every rank of a shared deployment keys as an unsharded engine does', () => {
    const shared = (rank: number): string => new EngineKeys('sglang', { ...OPTIONS, profile: { dtype: 'bf16', layout: 'mla', tpDegree: 8, rank }, sharedAcrossRanks: true }).key('p').hex;
    const unsharded = new EngineKeys('sglang', { ...OPTIONS, profile: { dtype: 'bf16', layout: 'mla', tpDegree: 1, rank: 0 } }).key('p').hex;
    expect(new Set([0, 3, 7].map(shared))).toEqual(new Set([unsharded]));
    const own = new EngineKeys('sglang', { ...OPTIONS, profile: { dtype: 'bf16', layout: 'mla', tpDegree: 8, rank: 3 } }).key('p').hex;
    expect(own).not.toBe(unsharded);
  });

  it('the engine is part of the key: one hash text under two engines gives two keys', () => {
    expect(new EngineKeys('sglang', OPTIONS).key('12').hex).not.toBe(new EngineKeys('lmcache', OPTIONS).key('12').hex);
  });

  it('on random storage keys and extra entries, the bytes are artifactKey()\'s over the spec fields', () => {
    const name = fc.string({ minLength: 1, maxLength: 12 }).filter((n) => !n.startsWith('waitprep.') && n.isWellFormed());
    const value = fc.string({ maxLength: 8 }).filter((s) => s.isWellFormed());
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 5, maxLength: 40 }),
        fc.string({ minLength: 1, maxLength: 80 }).filter((s) => s.isWellFormed()),
        fc.bigInt({ min: -(2n ** 80n), max: 2n ** 80n }),
        fc.dictionary(name, value, { maxKeys: 4 }),
        (offloadKey, pageKey, chunkHash, extra) => {
          const options = { ...OPTIONS, extra };
          for (const [engine, engineKey] of [['vllm', offloadKey], ['sglang', pageKey], ['lmcache', chunkHash]] as const) {
            const keys = new EngineKeys(engine, options);
            const key = keys.key(engineKey);
            const want = artifactKey(keys.fields(engineKey));
            expect(hex(key.toBytes())).toBe(hex(want.toBytes()));
            expect(key.hex).toBe(want.hex);
          }
        },
      ),
      { numRuns: 200 },
    );
  });
});
