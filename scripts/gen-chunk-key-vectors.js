#!/usr/bin/env node
// Writes test/vectors/chunk-keys.json: chained chunk-key test vectors (docs/engine-keys.md). Each
// vector is a chain's options and the turns of tokens it is given, with every full chunk's digest
// (and canonical encoding when it is short), the partial tail's digest and the manifest key's
// digest; each invalid entry is a set of options or tokens that must be refused, with the error
// code and the field each implementation names. Run after `npx tsc -p .`:
//
//   node scripts/gen-chunk-key-vectors.js            # rewrite test/vectors/chunk-keys.json
//   node scripts/gen-chunk-key-vectors.js --check    # exit 1 if the file is stale
//
// The expected values come from ChunkChain (lib/keys/chunk-keys.ts). Before writing, each is checked
// against a second path through the generic encoder: artifactKey() over the fields the spec gives
// for that chunk (its tokens only, the parent's hex in extra), and every multi-turn vector against
// the same tokens in one turn, so a regenerated file cannot drift from the spec.
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { fromJson, identityFields, writeOrCheck } from './key-vector-parts.js';
import { ChunkChain, CHUNK_PARENT_FIELD, MANIFEST_FIELD, WaitprepError, artifactKey, encodeManifest } from 'waitprep';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const outPath = join(root, 'test', 'vectors', 'chunk-keys.json');
const INLINE_HEX_LIMIT = 2048;

const ABOUT = [
  'Test vectors for chained chunk keys (docs/engine-keys.md). Each entry of "vectors" gives a chain\'s "options"',
  '(the Node option names; a Python implementation maps them to its keyword names) and the "turns" of tokens it is',
  'extended with, in order. "chunks" lists every full chunk the turns complete: its index, token count, parent digest',
  '(hex, "" for the first), digest, and canonical WPK1 encoding when shorter than 2048 bytes. "partial" is the key of',
  'the unfinished tail after the last turn (null when there is none), and "manifest" the manifest key of the full chunks',
  '(null before the first) with its bytes ("bytesHex": WPM1, the chunk count, the total tokens, the digests). sourcePageGeneration and representationVersion are JSON numbers up to 2^53-1, else decimal',
  'strings to convert to an unsigned integer. Each entry of "invalid" must be refused with "code", naming "field" (Node)',
  'or "pythonField" (Python). Regenerate with: npx tsc -p . && node scripts/gen-chunk-key-vectors.js',
].join(' ');

const base = {
  runtime: 'vllm/0.11.0',
  model: 'meta-llama/Llama-3.1-8B-Instruct',
  profile: { dtype: 'bf16', layout: 'NHD', tpDegree: 1, rank: 0 },
  task: 'coding-agent',
  namespace: 'tenant-42',
  chunkTokens: 4,
};
const range = (n, from = 0) => Array.from({ length: n }, (_, i) => from + i);
const tokens1000 = Array.from({ length: 1000 }, (_, i) => Number((BigInt(i) * 2654435761n) % 151936n));

/** [name, options, turns] */
const valid = [
  ['one-full-chunk', base, [[128000, 9906, 1917, 0]]],
  ['three-chunks-and-a-partial-tail', base, [range(14)]],
  ['same-tokens-in-two-turns-split-mid-chunk', base, [range(6), range(8, 6)]],
  ['same-tokens-in-three-turns-one-token-each-then-the-rest', base, [[0], [1], [2], range(11, 3)]],
  ['only-a-partial-tail', { ...base, chunkTokens: 8 }, [[5, 6, 7]]],
  ['chunk-of-one-token', { ...base, chunkTokens: 1 }, [[42, 42, 4294967295]]],
  ['named-adapter-tp4-rank3', { ...base, adapter: 'lora:sql-expert@3', profile: { dtype: 'fp8_e4m3', layout: 'HND', tpDegree: 4, rank: 3 } }, [range(8)]],
  [
    'extra-entries-on-both-sides-of-the-parent',
    { ...base, extra: { mm_hash: 'img:9f2c', zeta: '', 'ü-name': 'v', a: '1' } },
    [range(9)],
  ],
  [
    'every-default-overridden-and-u64-generations',
    {
      ...base,
      snapshotKind: 'kv-block',
      positionPolicy: 'rope-relative',
      sourcePageGeneration: '18446744073709551615',
      codec: 'zstd',
      codecConfig: '{"level":3}',
      representationVersion: '9007199254740993',
    },
    [range(5)],
  ],
  // An entry named __proto__ is an entry like any other (built with fromEntries: a literal would set the prototype).
  ['extra-named-__proto__', { ...base, extra: Object.fromEntries([['__proto__', 'x'], ['a', '1']]) }, [range(6)]],
  ['unicode-source-fields', { ...base, model: '模型-😀', task: 'caf\u00e9', namespace: 'cafe\u0301' }, [range(4)]],
  ['lmcache-256-token-chunks', { ...base, runtime: 'lmcache/0.3', chunkTokens: 256 }, [tokens1000]],
  ['lmcache-256-token-chunks-in-two-turns', { ...base, runtime: 'lmcache/0.3', chunkTokens: 256 }, [tokens1000.slice(0, 300), tokens1000.slice(300)]],
];

/** [name, options, turns, code, field, pythonField] */
const invalid = [
  ['chunk-tokens-zero', { ...base, chunkTokens: 0 }, [], 'ERR_INVALID_ARGUMENT', 'options.chunkTokens', 'chunk_tokens'],
  ['chunk-tokens-fraction', { ...base, chunkTokens: 2.5 }, [], 'ERR_INVALID_ARGUMENT', 'options.chunkTokens', 'chunk_tokens'],
  ['chunk-tokens-above-2-20', { ...base, chunkTokens: 2 ** 20 + 1 }, [], 'ERR_INVALID_ARGUMENT', 'options.chunkTokens', 'chunk_tokens'],
  ['profile-dtype-with-comma', { ...base, profile: { ...base.profile, dtype: 'bf16,tp=2' } }, [], 'ERR_INVALID_ARGUMENT', 'profile.dtype', 'profile.dtype'],
  ['profile-layout-empty', { ...base, profile: { ...base.profile, layout: '' } }, [], 'ERR_INVALID_ARGUMENT', 'profile.layout', 'profile.layout'],
  ['profile-tp-zero', { ...base, profile: { ...base.profile, tpDegree: 0 } }, [], 'ERR_INVALID_ARGUMENT', 'profile.tpDegree', 'profile.tp_degree'],
  ['profile-rank-not-below-tp', { ...base, profile: { ...base.profile, tpDegree: 2, rank: 2 } }, [], 'ERR_INVALID_ARGUMENT', 'profile.rank', 'profile.rank'],
  ['extra-reserved-parent-name', { ...base, extra: { [CHUNK_PARENT_FIELD]: '' } }, [], 'ERR_INVALID_ARGUMENT', `options.extra.${CHUNK_PARENT_FIELD}`, `extra.${CHUNK_PARENT_FIELD}`],
  ['extra-reserved-manifest-name', { ...base, extra: { [MANIFEST_FIELD]: '1' } }, [], 'ERR_INVALID_ARGUMENT', `options.extra.${MANIFEST_FIELD}`, `extra.${MANIFEST_FIELD}`],
  ['model-empty', { ...base, model: '' }, [], 'ERR_INVALID_KEY', 'source.model', 'source.model'],
  ['adapter-null-is-not-none', { ...base, adapter: null }, [], 'ERR_INVALID_KEY', 'source.adapter', 'source.adapter'],
  ['task-not-a-string', { ...base, task: 7 }, [], 'ERR_INVALID_KEY', 'source.task', 'source.task'],
  ['namespace-lone-surrogate', { ...base, namespace: 'a\ud800' }, [], 'ERR_INVALID_KEY', 'source.namespace', 'source.namespace'],
  ['extra-value-not-a-string', { ...base, extra: { lane: 3 } }, [], 'ERR_INVALID_KEY', 'source.extra.lane', 'source.extra.lane'],
  ['source-page-generation-negative', { ...base, sourcePageGeneration: -1 }, [], 'ERR_INVALID_KEY', 'sourcePageGeneration', 'sourcePageGeneration'],
  ['token-negative', base, [[1, 2, -1]], 'ERR_INVALID_KEY', 'tokens[2]', 'tokens[2]'],
  ['token-above-uint32', base, [[4294967296]], 'ERR_INVALID_KEY', 'tokens[0]', 'tokens[0]'],
];


/** The spec's fields of one chunk, built without ChunkChain: the second path the vectors are checked against. */
function specFields(options, tokens, parentHex, manifestCount) {
  const extra = { ...(options.extra ?? {}), [CHUNK_PARENT_FIELD]: parentHex };
  if (manifestCount !== undefined) extra[MANIFEST_FIELD] = String(manifestCount);
  return identityFields(options, { profile: options.profile, tokenLayout: tokens, extra });
}

function fail(message) {
  throw new Error(`gen-chunk-key-vectors: ${message}`);
}

function vectorOf(name, jsonOptions, turns) {
  const options = fromJson(jsonOptions);
  const chain = new ChunkChain(options);
  const chunks = turns.flatMap((turn) => chain.extend(turn));
  const partial = chain.partial();
  const all = turns.flat();
  // Second path: every chunk from the spec's fields alone.
  let parent = '';
  chunks.forEach((chunk, i) => {
    const tokens = all.slice(i * options.chunkTokens, (i + 1) * options.chunkTokens);
    const want = artifactKey(specFields(options, tokens, parent));
    if (want.hex !== chunk.hex) fail(`${name}: chunk ${i} is ${chunk.hex}, the spec's fields give ${want.hex}`);
    parent = chunk.hex;
  });
  if (partial !== null) {
    const want = artifactKey(specFields(options, all.slice(chunks.length * options.chunkTokens), parent));
    if (want.hex !== partial.hex) fail(`${name}: the partial tail is ${partial.hex}, the spec's fields give ${want.hex}`);
  }
  let manifest = null;
  if (chunks.length > 0) {
    const key = chain.manifestKey();
    const last = chunks.at(-1);
    const want = artifactKey(specFields(options, all.slice(last.index * options.chunkTokens, (last.index + 1) * options.chunkTokens), last.parentHex, chunks.length));
    if (want.hex !== key.hex) fail(`${name}: the manifest key is ${key.hex}, the spec's fields give ${want.hex}`);
    const bytes = key.toBytes();
    manifest = {
      chunkCount: chunks.length,
      digestHex: key.hex,
      ...(bytes.length < INLINE_HEX_LIMIT ? { canonicalHex: Buffer.from(bytes).toString('hex') } : {}),
      bytesHex: Buffer.from(encodeManifest(chunks.map((c) => c.digest), chunks.length * options.chunkTokens)).toString('hex'),
    };
  }
  const chunkJson = (chunk) => {
    const bytes = chunk.toBytes();
    return {
      index: chunk.index,
      tokenCount: chunk.tokenCount,
      parentHex: chunk.parentHex,
      digestHex: chunk.hex,
      ...(bytes.length < INLINE_HEX_LIMIT ? { canonicalHex: Buffer.from(bytes).toString('hex') } : {}),
    };
  };
  return {
    name,
    options: jsonOptions,
    turns,
    chunks: chunks.map(chunkJson),
    partial: partial === null ? null : { tokenCount: partial.tokenCount, parentHex: partial.parentHex, digestHex: partial.hex },
    manifest,
  };
}

function invalidOf([name, jsonOptions, turns, code, field, pythonField]) {
  try {
    const chain = new ChunkChain(fromJson(jsonOptions));
    for (const turn of turns) chain.extend(turn);
  } catch (error) {
    if (!(error instanceof WaitprepError) || error.code !== code || error.field !== field) {
      fail(`${name}: expected ${code} naming ${field}, got ${error?.code} naming ${error?.field}: ${error?.message}`);
    }
    return { name, options: jsonOptions, turns, code, field, pythonField };
  }
  return fail(`${name}: was accepted`);
}

const vectors = valid.map(([name, options, turns]) => vectorOf(name, options, turns));
// The same tokens in other turns are the same chain: a session's split never changes a key.
const byName = new Map(vectors.map((v) => [v.name, v]));
for (const [split, whole] of [
  ['same-tokens-in-two-turns-split-mid-chunk', 'three-chunks-and-a-partial-tail'],
  ['same-tokens-in-three-turns-one-token-each-then-the-rest', 'three-chunks-and-a-partial-tail'],
  ['lmcache-256-token-chunks-in-two-turns', 'lmcache-256-token-chunks'],
]) {
  const a = byName.get(split);
  const b = byName.get(whole);
  if (JSON.stringify([a.chunks, a.partial, a.manifest]) !== JSON.stringify([b.chunks, b.partial, b.manifest])) fail(`${split} differs from ${whole}`);
}

const text = JSON.stringify({ about: ABOUT, encoding: 'WPK1', vectors, invalid: invalid.map(invalidOf) }, null, 1) + '\n';
writeOrCheck(outPath, text, { regenerate: '`npx tsc -p . && node scripts/gen-chunk-key-vectors.js`', summary: `${vectors.length} vectors, ${invalid.length} invalid` });
