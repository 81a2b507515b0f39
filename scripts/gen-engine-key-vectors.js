#!/usr/bin/env node
// Writes test/vectors/engine-keys.json: engine-key test vectors (docs/engine-keys.md#engine-keys-keys-without-tokens).
// Each vector is an engine, a keyer's options and one storage key of that engine (a vLLM
// OffloadKey in hex, an SGLang page key, an LMCache chunk hash in decimal), with the key's digest
// and canonical encoding; each invalid entry is a keyer or a storage key that must be refused,
// with the error code and the field each implementation names. Run after `npx tsc -p .`:
//
//   node scripts/gen-engine-key-vectors.js            # rewrite test/vectors/engine-keys.json
//   node scripts/gen-engine-key-vectors.js --check    # exit 1 if the file is stale
//
// The expected values come from EngineKeys (lib/keys/engine-keys.ts). Before writing, each is checked
// against a second path, artifactKey() over the fields the spec gives that key, and the pairs the
// vectors exist to show are asserted: a field that differs gives another digest, and every rank
// of a deployment whose ranks share their bytes gives the same one.
import { createHash } from 'node:crypto';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { fromJson, identityFields, writeOrCheck } from './key-vector-parts.js';
import { ENGINE_FIELD, ENGINE_HASH_FIELD, EngineKeys, KV_GROUP_FIELD, WaitprepError, artifactKey } from 'waitprep';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const outPath = join(root, 'test', 'vectors', 'engine-keys.json');

const ABOUT = [
  'Test vectors for engine keys (docs/engine-keys.md, "Engine keys: keys without tokens"). Each entry of "vectors" gives',
  'an "engine" (vllm, sglang or lmcache), a keyer\'s "options" (the Node option names; a Python implementation maps',
  'them to its keyword names) and one storage key of that engine in "engineKey": "offloadKeyHex" (a vLLM OffloadKey:',
  'the block hash, then the KV-group index as 4 big-endian bytes), "pageKey" (an SGLang page key) or "chunkHash" (an',
  'LMCache chunk hash, a decimal string: it may be negative or beyond 64 bits). "digestHex" is the key\'s digest and',
  '"canonicalHex" its WPK1 encoding. sourcePageGeneration and representationVersion are JSON numbers up to 2^53-1, else',
  'decimal strings to convert to an unsigned integer. Each entry of "invalid" must be refused with "code", naming',
  '"field" (Node) or "pythonField" (Python). Regenerate with: npx tsc -p . && node scripts/gen-engine-key-vectors.js',
].join(' ');

const sha = (text) => createHash('sha256').update(text).digest();
const hex = (bytes) => Buffer.from(bytes).toString('hex');
const offloadKeyHex = (blockHash, group) => {
  const g = Buffer.alloc(4);
  g.writeUInt32BE(group, 0);
  return hex(Buffer.concat([blockHash, g]));
};

const base = {
  runtime: 'vllm/0.23',
  model: 'meta-llama/Llama-3.1-8B-Instruct',
  profile: { dtype: 'bf16', layout: 'NHD', tpDegree: 1, rank: 0 },
  task: 'coding-agent',
  namespace: 'tenant-42',
};
const sglangBase = { ...base, runtime: 'sglang/0.5', profile: { dtype: 'bf16', layout: 'page_first', tpDegree: 2, rank: 1 } };
const mla = { ...sglangBase, model: 'deepseek-ai/DeepSeek-V3', profile: { dtype: 'bf16', layout: 'mla', tpDegree: 8, rank: 5 }, sharedAcrossRanks: true };
const lmcacheBase = { ...base, runtime: 'lmcache/0.4', profile: { dtype: 'bfloat16', layout: 'KV_2LTD', tpDegree: 2, rank: 1 } };
const block0 = sha('block-0');
const pageKey = hex(sha('page-0'));

/** [name, engine, options, engineKey] */
const valid = [
  ['vllm-sha256-block-group-0', 'vllm', base, { offloadKeyHex: offloadKeyHex(block0, 0) }],
  ['vllm-same-block-group-1', 'vllm', base, { offloadKeyHex: offloadKeyHex(block0, 1) }],
  ['vllm-same-block-other-task', 'vllm', { ...base, task: 'review-agent' }, { offloadKeyHex: offloadKeyHex(block0, 0) }],
  ['vllm-same-block-other-namespace', 'vllm', { ...base, namespace: 'tenant-43' }, { offloadKeyHex: offloadKeyHex(block0, 0) }],
  ['vllm-8-byte-block-hash-group-4294967295', 'vllm', base, { offloadKeyHex: offloadKeyHex(Buffer.from('0123456789abcdef', 'hex'), 4294967295) }],
  ['vllm-one-byte-block-hash', 'vllm', base, { offloadKeyHex: offloadKeyHex(Buffer.from([0]), 7) }],
  ['vllm-named-adapter-tp4-rank3', 'vllm', { ...base, adapter: 'lora:sql-expert@3', profile: { dtype: 'fp8_e4m3', layout: 'HND', tpDegree: 4, rank: 3 } }, { offloadKeyHex: offloadKeyHex(block0, 0) }],
  ['sglang-page-key-tp2-rank1', 'sglang', sglangBase, { pageKey }],
  ['sglang-same-page-rank0', 'sglang', { ...sglangBase, profile: { ...sglangBase.profile, rank: 0 } }, { pageKey }],
  ['sglang-mla-shared-rank5-of-8', 'sglang', mla, { pageKey }],
  ['sglang-mla-shared-rank0-of-8', 'sglang', { ...mla, profile: { ...mla.profile, rank: 0 } }, { pageKey }],
  ['sglang-pipeline-and-context-parallel-ranks-in-extra', 'sglang', { ...sglangBase, extra: { 'sglang.pp': '1/4', 'sglang.cp': '0/2' } }, { pageKey }],
  ['sglang-page-key-not-hex', 'sglang', sglangBase, { pageKey: 'prefix:页-😀' }],
  ['lmcache-positive-chunk-hash', 'lmcache', lmcacheBase, { chunkHash: '8472104857362947182' }],
  ['lmcache-negative-chunk-hash', 'lmcache', lmcacheBase, { chunkHash: '-3' }],
  ['lmcache-chunk-hash-beyond-64-bits', 'lmcache', lmcacheBase, { chunkHash: '340282366920938463463374607431768211455' }],
  ['lmcache-chunk-hash-zero', 'lmcache', lmcacheBase, { chunkHash: '0' }],
  [
    'extra-entries-on-both-sides-of-the-reserved-names',
    'vllm',
    { ...base, extra: { mm_hash: 'img:9f2c', waitprep: 'before', 'waitprep-x': 'before', zeta: '', waitprepz: 'after', 'ü-name': 'v' } },
    { offloadKeyHex: offloadKeyHex(block0, 0) },
  ],
  [
    'every-default-overridden-and-u64-generations',
    'sglang',
    {
      ...sglangBase,
      snapshotKind: 'kv-page',
      positionPolicy: 'rope-relative',
      sourcePageGeneration: '18446744073709551615',
      codec: 'zstd',
      codecConfig: '{"level":3}',
      representationVersion: '9007199254740993',
    },
    { pageKey },
  ],
  ['unicode-source-fields', 'lmcache', { ...lmcacheBase, model: '模型-😀', task: 'caf\u00e9', namespace: 'cafe\u0301' }, { chunkHash: '1' }],
];

/** Pairs whose digests must differ, and pairs that must be equal. */
const differ = [
  ['vllm-sha256-block-group-0', 'vllm-same-block-group-1'],
  ['vllm-sha256-block-group-0', 'vllm-same-block-other-task'],
  ['vllm-sha256-block-group-0', 'vllm-same-block-other-namespace'],
  ['vllm-sha256-block-group-0', 'vllm-named-adapter-tp4-rank3'],
  ['sglang-page-key-tp2-rank1', 'sglang-same-page-rank0'],
  ['sglang-page-key-tp2-rank1', 'sglang-pipeline-and-context-parallel-ranks-in-extra'],
  ['lmcache-positive-chunk-hash', 'lmcache-negative-chunk-hash'],
];
const equal = [['sglang-mla-shared-rank5-of-8', 'sglang-mla-shared-rank0-of-8']];

/** [name, engine, options, engineKey, code, field, pythonField] */
const invalid = [
  ['engine-unknown', 'trtllm', base, { pageKey }, 'ERR_INVALID_ARGUMENT', 'engine', 'engine'],
  ['vllm-offload-key-of-4-bytes', 'vllm', base, { offloadKeyHex: '00000000' }, 'ERR_INVALID_KEY', 'engineKey', 'engine_key'],
  ['vllm-offload-key-empty', 'vllm', base, { offloadKeyHex: '' }, 'ERR_INVALID_KEY', 'engineKey', 'engine_key'],
  ['sglang-page-key-empty', 'sglang', sglangBase, { pageKey: '' }, 'ERR_INVALID_KEY', 'engineKey', 'engine_key'],
  ['lmcache-chunk-hash-fraction', 'lmcache', lmcacheBase, { chunkHash: '1.5' }, 'ERR_INVALID_KEY', 'engineKey', 'engine_key'],
  ['lmcache-chunk-hash-leading-zero', 'lmcache', lmcacheBase, { chunkHash: '007' }, 'ERR_INVALID_KEY', 'engineKey', 'engine_key'],
  ['lmcache-chunk-hash-minus-zero', 'lmcache', lmcacheBase, { chunkHash: '-0' }, 'ERR_INVALID_KEY', 'engineKey', 'engine_key'],
  ['extra-reserved-engine-name', 'vllm', { ...base, extra: { [ENGINE_FIELD]: 'sglang' } }, { offloadKeyHex: offloadKeyHex(block0, 0) }, 'ERR_INVALID_ARGUMENT', `options.extra.${ENGINE_FIELD}`, `extra.${ENGINE_FIELD}`],
  ['shared-across-ranks-not-a-boolean', 'sglang', { ...sglangBase, sharedAcrossRanks: 'yes' }, { pageKey }, 'ERR_INVALID_ARGUMENT', 'options.sharedAcrossRanks', 'shared_across_ranks'],
  ['profile-rank-not-below-tp', 'sglang', { ...sglangBase, profile: { ...sglangBase.profile, rank: 2 } }, { pageKey }, 'ERR_INVALID_ARGUMENT', 'profile.rank', 'profile.rank'],
  ['task-empty', 'vllm', { ...base, task: '' }, { offloadKeyHex: offloadKeyHex(block0, 0) }, 'ERR_INVALID_KEY', 'source.task', 'source.task'],
];


/** The storage key a vector names, as EngineKeys.key() takes it. */
function engineKeyOf(engineKey) {
  if ('offloadKeyHex' in engineKey) return new Uint8Array(Buffer.from(engineKey.offloadKeyHex, 'hex'));
  if ('pageKey' in engineKey) return engineKey.pageKey;
  return engineKey.chunkHash;
}

/** The spec's fields of one key, built without EngineKeys: the second path the vectors are checked against. */
function specFields(engine, options, engineKey) {
  const extra = { ...(options.extra ?? {}), [ENGINE_FIELD]: engine };
  if (engine === 'vllm') {
    const bytes = Buffer.from(engineKey.offloadKeyHex, 'hex');
    extra[ENGINE_HASH_FIELD] = bytes.subarray(0, bytes.length - 4).toString('hex');
    extra[KV_GROUP_FIELD] = String(bytes.readUInt32BE(bytes.length - 4));
  } else {
    extra[ENGINE_HASH_FIELD] = engine === 'sglang' ? engineKey.pageKey : engineKey.chunkHash;
  }
  const profile = options.sharedAcrossRanks ? { ...options.profile, tpDegree: 1, rank: 0 } : options.profile;
  return identityFields(options, { profile, tokenLayout: [0], extra });
}

function fail(message) {
  throw new Error(`gen-engine-key-vectors: ${message}`);
}

function vectorOf([name, engine, jsonOptions, engineKey]) {
  const options = fromJson(jsonOptions);
  const key = new EngineKeys(engine, options).key(engineKeyOf(engineKey));
  const want = artifactKey(specFields(engine, options, engineKey));
  if (want.hex !== key.hex) fail(`${name}: the keyer gives ${key.hex}, the spec's fields give ${want.hex}`);
  return { name, engine, options: jsonOptions, engineKey, digestHex: key.hex, canonicalHex: hex(key.toBytes()) };
}

function invalidOf([name, engine, jsonOptions, engineKey, code, field, pythonField]) {
  try {
    new EngineKeys(engine, fromJson(jsonOptions)).key(engineKeyOf(engineKey));
  } catch (error) {
    if (!(error instanceof WaitprepError) || error.code !== code || error.field !== field) {
      fail(`${name}: expected ${code} naming ${field}, got ${error?.code} naming ${error?.field}: ${error?.message}`);
    }
    return { name, engine, options: jsonOptions, engineKey, code, field, pythonField };
  }
  return fail(`${name}: was accepted`);
}

const vectors = valid.map(vectorOf);
const byName = new Map(vectors.map((v) => [v.name, v.digestHex]));
for (const [a, b] of differ) if (byName.get(a) === byName.get(b)) fail(`${a} and ${b} have the same digest`);
for (const [a, b] of equal) if (byName.get(a) !== byName.get(b)) fail(`${a} and ${b} differ`);
const text = `${JSON.stringify({ about: ABOUT, encoding: 'WPK1', vectors, invalid: invalid.map(invalidOf) }, null, 2)}\n`;

writeOrCheck(outPath, text, { regenerate: '`npx tsc -p . && node scripts/gen-engine-key-vectors.js`', summary: `${vectors.length} vectors, ${invalid.length} invalid` });
