#!/usr/bin/env node
// Writes test/vectors/keys.json: artifact-key test vectors (valid field sets with
// their canonical encoding and SHA-256 digest, and invalid field sets with the
// dotted field that must be reported). Run after `npx tsc -p .`:
//
//   node scripts/gen-key-vectors.js            # rewrite test/vectors/keys.json
//   node scripts/gen-key-vectors.js --check    # exit 1 if the file is stale
//
// The vectors are computed by this package's own encoder (dist/), then checked
// here for the properties they exist to show (the pairs differ, the empty extra
// equals none, each invalid set is rejected naming its field), so a regenerated
// file cannot silently lose them. docs/key-encoding.md explains the format.
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { artifactKey, encodeArtifactKey, WaitprepError } from 'waitprep';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const outPath = join(root, 'test', 'vectors', 'keys.json');

/** Encodings at least this long carry only their digest. */
const INLINE_HEX_LIMIT = 2048;
const U64_MAX = (1n << 64n) - 1n;

const ABOUT = [
  'Test vectors for the waitprep artifact-key encoding "WPK1" (docs/key-encoding.md).',
  'Each entry of "vectors" gives the key fields, the canonical encoding as lowercase hex ("canonicalHex",',
  'present only when the encoding is shorter than 2048 bytes) and the SHA-256 of the encoding ("digestHex").',
  'In "fields", sourcePageGeneration and representationVersion are JSON numbers when they are at most',
  '2^53-1; a decimal string in either of those two places means an unsigned integer too large for a JSON',
  'number (a bigint in JavaScript, an int in Python) and must be converted before encoding. No other field',
  'is converted. Each entry of "invalid" is a field set that must be rejected, and "field" is the dotted',
  'name of the field the error must report. Regenerate with: npx tsc -p . && node scripts/gen-key-vectors.js',
].join(' ');

/** JSON fields -> the values artifactKey() takes (a string generation is a bigint). */
function fromJson(fields) {
  const out = { ...fields };
  for (const name of ['sourcePageGeneration', 'representationVersion']) {
    if (typeof out[name] === 'string') out[name] = BigInt(out[name]);
  }
  return out;
}

/** A u64 as it is written in JSON: a number when it is safe, else a decimal string. */
function u64Json(value) {
  return value <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(value) : value.toString();
}

function withSource(fields, patch) {
  return { ...fields, source: { ...fields.source, ...patch } };
}

const base = {
  source: {
    snapshotKind: 'kv-prefix',
    runtime: 'vllm/0.6.3',
    model: 'meta-llama/Llama-3.1-8B-Instruct',
    adapter: 'none',
    profile: 'bf16/h100/tp1',
    positionPolicy: 'absolute',
    task: 'summarise-ticket',
    namespace: 'tenant-42',
    tokenLayout: [128000, 9906, 1917, 0],
  },
  sourcePageGeneration: 3,
  codec: 'raw',
  codecConfig: '{"dtype":"bf16","pageTokens":16}',
  representationVersion: 1,
};

const tokens32k = Array.from({ length: 32768 }, (_, i) => Number((BigInt(i) * 2654435761n) % 151936n));

/** [name, fields] for every valid vector, in file order. */
const valid = [
  [
    'minimal',
    {
      source: {
        snapshotKind: 'k',
        runtime: 'r',
        model: 'm',
        adapter: 'none',
        profile: 'p',
        positionPolicy: 'a',
        task: 't',
        namespace: 'n',
        tokenLayout: [0],
      },
      sourcePageGeneration: 0,
      codec: 'c',
      codecConfig: '{}',
      representationVersion: 0,
    },
  ],
  [
    // Annotated byte by byte in docs/key-encoding.md.
    'docs-worked-example',
    {
      source: {
        snapshotKind: 'kv',
        runtime: 'rt',
        model: 'm',
        adapter: 'none',
        profile: 'p',
        positionPolicy: 'abs',
        task: 'qa',
        namespace: 'é',
        tokenLayout: [1, 258],
        extra: { z: '9', a: '' },
      },
      sourcePageGeneration: 7,
      codec: 'raw',
      codecConfig: '{}',
      representationVersion: 1,
    },
  ],
  ['adapter-none-no-extra', base],
  ['adapter-named', withSource(base, { adapter: 'lora:sql-expert@r16' })],
  [
    'unicode-cjk-astral-combining',
    {
      ...withSource(base, {
        model: 'qwen2.5-7b-指令',
        adapter: 'lora:日本語-🦙',
        task: '要約する 🧾',
        namespace: 'équipe-cafe\u0301-𝄞',
        extra: { 'région': 'Zürich', '🔑': '値' },
      }),
      codecConfig: '{"note":"e\u0301 is e + U+0301, not U+00E9"}',
    },
  ],
  ['unicode-precomposed-e-acute', withSource(base, { namespace: 'caf\u00e9' })],
  ['unicode-decomposed-e-acute-differs', withSource(base, { namespace: 'cafe\u0301' })],
  ['tokens-32k', withSource(base, { tokenLayout: tokens32k })],
  ['tokens-max-uint32', withSource(base, { tokenLayout: [4294967295, 0, 2147483648] })],
  [
    'extra-several-unsorted',
    withSource(base, {
      // Out of order on purpose. "～" (U+FF5E) sorts before "😀" (U+1F600) by UTF-8
      // bytes although UTF-16 code units would put the emoji first.
      extra: { zeta: 'z', '😀': 'grin', Beta: 'upper', '～': 'fullwidth', alpha: 'a', a: '' },
    }),
  ],
  ['extra-empty-same-digest-as-adapter-none-no-extra', withSource(base, { extra: {} })],
  ['generation-0', { ...base, sourcePageGeneration: 0 }],
  ['generation-2^53+1', { ...base, sourcePageGeneration: u64Json(2n ** 53n + 1n) }],
  ['generation-2^64-1', { ...base, sourcePageGeneration: u64Json(U64_MAX) }],
  ['representation-version-2^53-1', { ...base, representationVersion: Number.MAX_SAFE_INTEGER }],
  ['representation-version-2^63+5', { ...base, representationVersion: u64Json(2n ** 63n + 5n) }],
  ['task-pair-a', withSource(base, { task: 'answer-question' })],
  ['task-pair-b', withSource(base, { task: 'answer-questions' })],
  ['token-pair-a', withSource(base, { tokenLayout: [128000, 9906, 1917, 13] })],
  ['token-pair-b', withSource(base, { tokenLayout: [128000, 9906, 1917, 14] })],
  ['token-order-swapped', withSource(base, { tokenLayout: [128000, 1917, 9906, 0] })],
  ['codec-config-pair-a', { ...base, codecConfig: '{"bits":4,"group":64}' }],
  ['codec-config-pair-b', { ...base, codecConfig: '{"bits":4,"group":128}' }],
];

/** [name, fields, the dotted field that must be reported] for every invalid set. */
const invalid = [
  ['empty-task', withSource(base, { task: '' }), 'source.task'],
  ['missing-codec', (({ codec, ...rest }) => rest)(base), 'codec'],
  ['task-not-a-string', withSource(base, { task: 7 }), 'source.task'],
  ['adapter-empty-instead-of-none', withSource(base, { adapter: '' }), 'source.adapter'],
  ['adapter-null-instead-of-none', withSource(base, { adapter: null }), 'source.adapter'],
  ['unknown-top-field', { ...base, tenant: 'tenant-42' }, 'tenant'],
  ['unknown-source-field', withSource(base, { temperature: '0.7' }), 'source.temperature'],
  ['source-missing', (({ source, ...rest }) => rest)(base), 'source'],
  ['lone-high-surrogate-in-namespace', withSource(base, { namespace: 'tenant-\ud83d' }), 'source.namespace'],
  ['lone-low-surrogate-in-codec-config', { ...base, codecConfig: '\ude00{}' }, 'codecConfig'],
  ['negative-generation', { ...base, sourcePageGeneration: -1 }, 'sourcePageGeneration'],
  ['fractional-generation', { ...base, sourcePageGeneration: 1.5 }, 'sourcePageGeneration'],
  ['generation-2^64', { ...base, sourcePageGeneration: (U64_MAX + 1n).toString() }, 'sourcePageGeneration'],
  ['negative-representation-version', { ...base, representationVersion: -3 }, 'representationVersion'],
  ['token-above-uint32', withSource(base, { tokenLayout: [1, 2, 4294967296] }), 'source.tokenLayout[2]'],
  ['negative-token', withSource(base, { tokenLayout: [-1] }), 'source.tokenLayout[0]'],
  ['fractional-token', withSource(base, { tokenLayout: [5, 0.5] }), 'source.tokenLayout[1]'],
  ['string-token', withSource(base, { tokenLayout: [5, '6'] }), 'source.tokenLayout[1]'],
  ['empty-token-layout', withSource(base, { tokenLayout: [] }), 'source.tokenLayout'],
  ['token-layout-not-an-array', withSource(base, { tokenLayout: '128000 9906' }), 'source.tokenLayout'],
  ['extra-not-an-object', withSource(base, { extra: ['a', 'b'] }), 'source.extra'],
  ['extra-value-not-a-string', withSource(base, { extra: { temperature: 0.7 } }), 'source.extra.temperature'],
  ['extra-value-lone-surrogate', withSource(base, { extra: { seed: '\udbff' } }), 'source.extra.seed'],
];

function hex(bytes) {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('hex');
}

function check(condition, message) {
  if (!condition) throw new Error(`gen-key-vectors: ${message}`);
}

const vectors = valid.map(([name, fields]) => {
  const bytes = encodeArtifactKey(fromJson(fields));
  const key = artifactKey(fromJson(fields));
  const vector = { name, fields };
  if (bytes.length < INLINE_HEX_LIMIT) vector.canonicalHex = hex(bytes);
  vector.digestHex = key.hex;
  return vector;
});

const byName = new Map(vectors.map((v) => [v.name, v]));
check(new Set(vectors.map((v) => v.digestHex)).size === vectors.length - 1, 'exactly one pair of vectors may share a digest');
check(
  byName.get('extra-empty-same-digest-as-adapter-none-no-extra').digestHex === byName.get('adapter-none-no-extra').digestHex,
  'an empty extra must equal no extra',
);
check(!('canonicalHex' in byName.get('tokens-32k')), 'the 32k-token vector must carry only its digest');

const invalidCases = invalid.map(([name, fields, field]) => {
  let error;
  try {
    artifactKey(fromJson(fields));
  } catch (caught) {
    error = caught;
  }
  check(error instanceof WaitprepError && error.code === 'ERR_INVALID_KEY', `invalid case ${name} was not rejected with ERR_INVALID_KEY`);
  check(error.field === field, `invalid case ${name} reported ${error.field}, expected ${field}`);
  return { name, fields, field };
});

/** JSON with two-space indents, but every array of numbers on one line. */
function format(value) {
  return (
    // Only a raw newline after "[" starts an array: strings never contain one.
    JSON.stringify(value, null, 2).replace(/\[\n\s*(-?[\d.e+]+(?:,\n\s*-?[\d.e+]+)*)\n\s*\]/g, (_, body) => `[${body.split(/,\n\s*/).join(', ')}]`) +
    '\n'
  );
}

const text = format({ about: ABOUT, encoding: 'WPK1', vectors, invalid: invalidCases });
if (process.argv.includes('--check')) {
  const current = readFileSync(outPath, 'utf8');
  if (current !== text) {
    process.stderr.write('test/vectors/keys.json is stale: run node scripts/gen-key-vectors.js\n');
    process.exit(1);
  }
  process.stdout.write(`test/vectors/keys.json is up to date (${vectors.length} vectors, ${invalidCases.length} invalid)\n`);
} else {
  writeFileSync(outPath, text);
  process.stdout.write(`wrote test/vectors/keys.json: ${vectors.length} vectors, ${invalidCases.length} invalid\n`);
}
