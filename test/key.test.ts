import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  artifactKey,
  encodeArtifactKey,
  isArtifactKey,
  ArtifactKey,
  KEY_ENCODING_MAGIC,
  KEY_FIELD_TAGS,
  WaitprepError,
  type ArtifactKeyFields,
} from '../lib/index.js';

type Fields = ArtifactKeyFields;

function fields(): Fields {
  return {
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
    codecConfig: '{"dtype":"bf16"}',
    representationVersion: 1,
  };
}

function withSource(patch: Record<string, unknown>): Fields {
  const f = fields();
  return { ...f, source: { ...f.source, ...patch } } as Fields;
}

function withTop(patch: Record<string, unknown>): Fields {
  return { ...fields(), ...patch } as Fields;
}

function without(path: 'source' | keyof Fields['source'] | keyof Fields): Fields {
  const f = fields() as unknown as Record<string, unknown> & { source: Record<string, unknown> };
  if (path in f) delete f[path];
  else delete f.source[path];
  return f as unknown as Fields;
}

/** Runs `build` and returns the ERR_INVALID_KEY error it throws. */
function rejection(build: () => unknown): WaitprepError {
  try {
    build();
  } catch (error) {
    expect(error).toBeInstanceOf(WaitprepError);
    expect((error as WaitprepError).code).toBe('ERR_INVALID_KEY');
    return error as WaitprepError;
  }
  throw new Error('expected ERR_INVALID_KEY, but the key was accepted');
}

function expectInvalid(f: unknown, field: string): void {
  const error = rejection(() => artifactKey(f as Fields));
  expect(error.field).toBe(field);
  expect(error.message).toContain(`\`${field}\``);
  // encodeArtifactKey validates exactly as artifactKey does.
  expect(rejection(() => encodeArtifactKey(f as Fields)).field).toBe(field);
}

const hexOf = (bytes: Uint8Array): string => Buffer.from(bytes).toString('hex');

describe('artifactKey validation', () => {
  const stringFields = ['snapshotKind', 'runtime', 'model', 'adapter', 'profile', 'positionPolicy', 'task', 'namespace'] as const;

  it.each(stringFields)('rejects a missing, empty or non-string source.%s', (name) => {
    expectInvalid(without(name), `source.${name}`);
    expectInvalid(withSource({ [name]: '' }), `source.${name}`);
    expectInvalid(withSource({ [name]: 7 }), `source.${name}`);
    expectInvalid(withSource({ [name]: null }), `source.${name}`);
    expectInvalid(withSource({ [name]: new String('boxed') }), `source.${name}`);
  });

  it.each(['codec', 'codecConfig'] as const)('rejects a missing, empty or non-string %s', (name) => {
    expectInvalid(without(name), name);
    expectInvalid(withTop({ [name]: '' }), name);
    expectInvalid(withTop({ [name]: Symbol('x') }), name);
  });

  it('asks for the adapter "none" rather than an absent or empty one', () => {
    expectInvalid(without('adapter'), 'source.adapter');
    expectInvalid(withSource({ adapter: '' }), 'source.adapter');
    expect(artifactKey(withSource({ adapter: 'none' })).source.adapter).toBe('none');
  });

  it('rejects fields and source that are not plain objects', () => {
    expectInvalid(null, 'fields');
    expectInvalid([fields()], 'fields');
    expectInvalid(new Map(), 'fields');
    expectInvalid(without('source'), 'source');
    expectInvalid(withTop({ source: 'kv-prefix' }), 'source');
    expectInvalid(withTop({ source: [] }), 'source');
  });

  it('rejects unknown fields instead of ignoring them', () => {
    expectInvalid(withTop({ tenant: 'tenant-42' }), 'tenant');
    expectInvalid(withTop({ digest: 'abc' }), 'digest');
    expectInvalid(withSource({ temperature: '0.7' }), 'source.temperature');
    expectInvalid(withSource({ Task: 'summarise-ticket' }), 'source.Task');
  });

  it('rejects lone surrogates in every string field', () => {
    for (const name of stringFields) {
      expectInvalid(withSource({ [name]: 'a\ud800b' }), `source.${name}`);
      expectInvalid(withSource({ [name]: '\udc00' }), `source.${name}`);
    }
    expectInvalid(withTop({ codec: 'raw\ud83d' }), 'codec');
    expectInvalid(withTop({ codecConfig: '\ude00{}' }), 'codecConfig');
    expectInvalid(withSource({ extra: { seed: '\udbff' } }), 'source.extra.seed');
    // A surrogate pair is one well-formed code point.
    expect(() => artifactKey(withSource({ task: 'emoji \ud83d\ude00' }))).not.toThrow();
  });

  it('rejects bad token layouts, naming the bad token', () => {
    expectInvalid(without('tokenLayout'), 'source.tokenLayout');
    expectInvalid(withSource({ tokenLayout: [] }), 'source.tokenLayout');
    expectInvalid(withSource({ tokenLayout: new Uint32Array(0) }), 'source.tokenLayout');
    expectInvalid(withSource({ tokenLayout: '1 2 3' }), 'source.tokenLayout');
    expectInvalid(withSource({ tokenLayout: new Int32Array([1, 2]) }), 'source.tokenLayout');
    expectInvalid(withSource({ tokenLayout: new Set([1]) }), 'source.tokenLayout');
    expectInvalid(withSource({ tokenLayout: [1, 2, 2 ** 32] }), 'source.tokenLayout[2]');
    expectInvalid(withSource({ tokenLayout: [-1] }), 'source.tokenLayout[0]');
    expectInvalid(withSource({ tokenLayout: [1, 0.5] }), 'source.tokenLayout[1]');
    expectInvalid(withSource({ tokenLayout: [1, Number.NaN] }), 'source.tokenLayout[1]');
    expectInvalid(withSource({ tokenLayout: [1, Infinity] }), 'source.tokenLayout[1]');
    expectInvalid(withSource({ tokenLayout: [1, '2'] }), 'source.tokenLayout[1]');
    expectInvalid(withSource({ tokenLayout: [1, 2n] }), 'source.tokenLayout[1]');
    expectInvalid(withSource({ tokenLayout: [1, , 3] }), 'source.tokenLayout[1]');
    expect(artifactKey(withSource({ tokenLayout: [0, 2 ** 32 - 1] })).tokenLayout()).toEqual(Uint32Array.of(0, 2 ** 32 - 1));
  });

  it.each(['sourcePageGeneration', 'representationVersion'] as const)('rejects a bad %s', (name) => {
    expectInvalid(without(name), name);
    expectInvalid(withTop({ [name]: -1 }), name);
    expectInvalid(withTop({ [name]: -1n }), name);
    expectInvalid(withTop({ [name]: 1.5 }), name);
    expectInvalid(withTop({ [name]: Number.NaN }), name);
    expectInvalid(withTop({ [name]: 2 ** 53 }), name); // not a safe integer: pass a bigint
    expectInvalid(withTop({ [name]: 2n ** 64n }), name);
    expectInvalid(withTop({ [name]: '7' }), name);
    expectInvalid(withTop({ [name]: null }), name);
    expect(() => artifactKey(withTop({ [name]: 2n ** 64n - 1n }))).not.toThrow();
    expect(() => artifactKey(withTop({ [name]: Number.MAX_SAFE_INTEGER }))).not.toThrow();
  });

  it('rejects a bad extra', () => {
    expectInvalid(withSource({ extra: null }), 'source.extra');
    expectInvalid(withSource({ extra: ['a'] }), 'source.extra');
    expectInvalid(withSource({ extra: new Map([['a', 'b']]) }), 'source.extra');
    expectInvalid(withSource({ extra: { temperature: 0.7 } }), 'source.extra.temperature');
    expectInvalid(withSource({ extra: { seed: undefined } }), 'source.extra.seed');
    const emptyName = rejection(() => artifactKey(withSource({ extra: { '': 'x' } })));
    expect(emptyName.field).toMatch(/^source\.extra/);
  });
});

describe('artifactKey identity', () => {
  it('gives equal digests and canonical bytes for equal fields', () => {
    const a = artifactKey(fields());
    const b = artifactKey(fields());
    expect(a).not.toBe(b);
    expect(a.equals(b)).toBe(true);
    expect(a.hex).toBe(b.hex);
    expect(a.digest).toEqual(b.digest);
    expect(encodeArtifactKey(fields())).toEqual(encodeArtifactKey(fields()));
  });

  it('starts the encoding with WPK1 and hashes the whole encoding with SHA-256', async () => {
    const bytes = encodeArtifactKey(fields());
    expect(hexOf(bytes.subarray(0, 4))).toBe(hexOf(KEY_ENCODING_MAGIC));
    expect(Buffer.from(bytes.subarray(0, 4)).toString('latin1')).toBe('WPK1');
    const { createHash } = await import('node:crypto');
    expect(artifactKey(fields()).hex).toBe(createHash('sha256').update(bytes).digest('hex'));
    expect(artifactKey(fields()).digest).toBeInstanceOf(Uint8Array);
    expect(artifactKey(fields()).digest.byteLength).toBe(32);
  });

  it('encodes each field as tag, u32 little-endian length, payload, in tag order', () => {
    const bytes = Buffer.from(encodeArtifactKey(fields()));
    const tags: number[] = [];
    let at = 4;
    while (at < bytes.length) {
      tags.push(bytes[at]!);
      at += 5 + bytes.readUInt32LE(at + 1);
    }
    expect(at).toBe(bytes.length);
    expect(tags).toEqual(Object.values(KEY_FIELD_TAGS));
    expect(tags).toEqual(Array.from({ length: 14 }, (_, i) => i + 1));
  });

  const changes: Array<[string, Fields]> = [
    ['snapshotKind', withSource({ snapshotKind: 'kv-full' })],
    ['runtime', withSource({ runtime: 'vllm/0.6.4' })],
    ['model', withSource({ model: 'meta-llama/Llama-3.1-70B-Instruct' })],
    ['adapter', withSource({ adapter: 'lora:sql' })],
    ['profile', withSource({ profile: 'bf16/h100/tp2' })],
    ['positionPolicy', withSource({ positionPolicy: 'relative' })],
    ['task', withSource({ task: 'summarise-tickets' })],
    ['namespace', withSource({ namespace: 'tenant-43' })],
    ['one token', withSource({ tokenLayout: [128000, 9906, 1917, 1] })],
    ['token order', withSource({ tokenLayout: [128000, 1917, 9906, 0] })],
    ['one more token', withSource({ tokenLayout: [128000, 9906, 1917, 0, 0] })],
    ['one token fewer', withSource({ tokenLayout: [128000, 9906, 1917] })],
    ['sourcePageGeneration', withTop({ sourcePageGeneration: 4 })],
    ['codec', withTop({ codec: 'q8' })],
    ['codecConfig', withTop({ codecConfig: '{"dtype":"fp16"}' })],
    ['representationVersion', withTop({ representationVersion: 2 })],
    ['extra added', withSource({ extra: { seed: '1' } })],
    ['extra value', withSource({ extra: { seed: '2' } })],
    ['extra name', withSource({ extra: { Seed: '1' } })],
    ['extra empty value', withSource({ extra: { seed: '' } })],
    ['namespace gains a combining mark', withSource({ namespace: 'tenant-42\u0301' })],
  ];

  it.each(changes)('gives a different key when %s changes', (_, changed) => {
    const before = artifactKey(fields());
    const after = artifactKey(changed);
    expect(after.equals(before)).toBe(false);
    expect(after.hex).not.toBe(before.hex);
    expect(encodeArtifactKey(changed)).not.toEqual(encodeArtifactKey(fields()));
  });

  it('gives every single-field change a different key from every other', () => {
    const hexes = [artifactKey(fields()).hex, ...changes.map(([, f]) => artifactKey(f).hex)];
    expect(new Set(hexes).size).toBe(hexes.length);
  });

  it('never shares identical text under different tasks or namespaces', () => {
    const text = Array.from({ length: 64 }, (_, i) => i * 7);
    const keys = [
      artifactKey(withSource({ task: 'a', namespace: 'n', tokenLayout: text })),
      artifactKey(withSource({ task: 'b', namespace: 'n', tokenLayout: text })),
      artifactKey(withSource({ task: 'a', namespace: 'm', tokenLayout: text })),
    ];
    expect(new Set(keys.map((k) => k.hex)).size).toBe(3);
  });

  it('cannot be confused by moving bytes between adjacent fields', () => {
    const a = artifactKey(withSource({ task: 'ab', namespace: 'c' }));
    const b = artifactKey(withSource({ task: 'a', namespace: 'bc' }));
    expect(a.equals(b)).toBe(false);
    const c = artifactKey(withSource({ extra: { ab: 'c' } }));
    const d = artifactKey(withSource({ extra: { a: 'bc' } }));
    expect(c.equals(d)).toBe(false);
  });

  it('treats 7 and 7n as the same generation and version', () => {
    const n = artifactKey(withTop({ sourcePageGeneration: 7, representationVersion: 7 }));
    const b = artifactKey(withTop({ sourcePageGeneration: 7n, representationVersion: 7n }));
    expect(n.equals(b)).toBe(true);
    expect(n.sourcePageGeneration).toBe(7n);
    expect(n.representationVersion).toBe(7n);
  });

  it('treats a Uint32Array and an array with the same values as the same layout', () => {
    const values = [128000, 9906, 1917, 0, 2 ** 32 - 1];
    const fromArray = artifactKey(withSource({ tokenLayout: values }));
    const fromTyped = artifactKey(withSource({ tokenLayout: Uint32Array.from(values) }));
    expect(fromArray.equals(fromTyped)).toBe(true);
    expect(encodeArtifactKey(withSource({ tokenLayout: values }))).toEqual(encodeArtifactKey(withSource({ tokenLayout: Uint32Array.from(values) })));
    // A view into a larger buffer is read at its own offset.
    const backing = new Uint32Array([99, ...values, 99]);
    expect(artifactKey(withSource({ tokenLayout: backing.subarray(1, 1 + values.length) })).equals(fromArray)).toBe(true);
  });

  it('treats an empty extra as no extra', () => {
    const none = artifactKey(fields());
    const empty = artifactKey(withSource({ extra: {} }));
    expect(empty.equals(none)).toBe(true);
    expect(empty.source.extra).toEqual({});
    expect(none.source.extra).toEqual({});
  });

  it('sorts extra by the UTF-8 bytes of the name, whatever the input order', () => {
    const sorted = artifactKey(withSource({ extra: { a: '1', b: '2', '～': '3', '😀': '4' } }));
    const shuffled = artifactKey(withSource({ extra: { '😀': '4', b: '2', '～': '3', a: '1' } }));
    expect(shuffled.equals(sorted)).toBe(true);
    // U+FF5E sorts before U+1F600 by UTF-8 bytes (UTF-16 code units would say the opposite).
    const bytes = Buffer.from(encodeArtifactKey(withSource({ extra: { '😀': 'x', '～': 'y' } })));
    expect(bytes.indexOf(Buffer.from('～'))).toBeLessThan(bytes.indexOf(Buffer.from('😀')));
  });

  it('encodes strings as given, without normalisation', () => {
    const nfc = artifactKey(withSource({ namespace: 'caf\u00e9' }));
    const nfd = artifactKey(withSource({ namespace: 'cafe\u0301' }));
    expect(nfc.equals(nfd)).toBe(false);
    expect(nfd.source.namespace).toBe('cafe\u0301');
  });
});

describe('ArtifactKey objects', () => {
  it('are frozen, with frozen source and extra', () => {
    const key = artifactKey(withSource({ extra: { seed: '1' } }));
    expect(Object.isFrozen(key)).toBe(true);
    expect(Object.isFrozen(key.source)).toBe(true);
    expect(Object.isFrozen(key.source.extra)).toBe(true);
    expect(() => {
      (key as { codec: string }).codec = 'q8';
    }).toThrow(TypeError);
    expect(() => {
      (key.source as { task: string }).task = 'other';
    }).toThrow(TypeError);
    expect(key.codec).toBe('raw');
    expect(key.source.task).toBe('summarise-ticket');
  });

  it('keep the digest immutable: each read is a copy, and writing to it changes nothing', () => {
    const key = artifactKey(fields());
    const first = key.digest;
    first.fill(0);
    expect(key.digest).not.toBe(first);
    expect(hexOf(key.digest)).toBe(key.hex);
    expect(key.equals(artifactKey(fields()))).toBe(true);
    expect(key.hex).toMatch(/^[0-9a-f]{64}$/);
  });

  it('copy the token layout in and out', () => {
    const input = Uint32Array.of(5, 6, 7);
    const key = artifactKey(withSource({ tokenLayout: input }));
    input[0] = 99;
    const out = key.tokenLayout();
    expect(out).toEqual(Uint32Array.of(5, 6, 7));
    expect(key.tokenLayout()).not.toBe(out);
    out[1] = 42;
    expect(key.tokenLayout()).toEqual(Uint32Array.of(5, 6, 7));
    expect(key.tokenCount).toBe(3);
    expect(key.equals(artifactKey(withSource({ tokenLayout: [5, 6, 7] })))).toBe(true);
  });

  it('copy extra in, so later changes to the input do not change the key', () => {
    const extra: Record<string, string> = { seed: '1' };
    const key = artifactKey(withSource({ extra }));
    extra.seed = '2';
    expect(key.source.extra).toEqual({ seed: '1' });
    expect(key.equals(artifactKey(withSource({ extra: { seed: '1' } })))).toBe(true);
  });

  it('cannot be built except by artifactKey', () => {
    const key = artifactKey(fields());
    expect(isArtifactKey(key)).toBe(true);
    expect(isArtifactKey({ ...key })).toBe(false);
    expect(key.equals({ hex: key.hex })).toBe(false);
    const Ctor = ArtifactKey as unknown as new (token: symbol, ...rest: unknown[]) => ArtifactKey;
    expect(rejection(() => new Ctor(Symbol('waitprep.artifactKey'))).code).toBe('ERR_INVALID_KEY');
  });
});

interface Vector {
  name: string;
  fields: Record<string, unknown>;
  canonicalHex?: string;
  digestHex: string;
}
interface InvalidCase {
  name: string;
  fields: unknown;
  field: string;
}
interface VectorFile {
  about: string;
  encoding: string;
  vectors: Vector[];
  invalid: InvalidCase[];
}

const vectorFile = JSON.parse(readFileSync(new URL('./vectors/keys.json', import.meta.url), 'utf8')) as VectorFile;

/** A decimal string generation or version in the vector file stands for a bigint. */
function fromJson(f: unknown): Fields {
  if (typeof f !== 'object' || f === null) return f as Fields;
  const out = { ...(f as Record<string, unknown>) };
  for (const name of ['sourcePageGeneration', 'representationVersion']) {
    if (typeof out[name] === 'string') out[name] = BigInt(out[name] as string);
  }
  return out as unknown as Fields;
}

describe('test/vectors/keys.json', () => {
  it('has the expected shape and coverage', () => {
    expect(vectorFile.encoding).toBe('WPK1');
    expect(vectorFile.about).toMatch(/string/);
    expect(vectorFile.vectors.length).toBeGreaterThanOrEqual(14);
    expect(vectorFile.invalid.length).toBeGreaterThanOrEqual(8);
    expect(new Set(vectorFile.vectors.map((v) => v.name)).size).toBe(vectorFile.vectors.length);
    const big = vectorFile.vectors.find((v) => (v.fields.source as { tokenLayout: number[] }).tokenLayout.length === 32768);
    expect(big?.canonicalHex).toBeUndefined();
  });

  it.each(vectorFile.vectors.map((v) => [v.name, v] as const))('reproduces vector %s', (_, vector) => {
    const bytes = encodeArtifactKey(fromJson(vector.fields));
    if (bytes.length < 2048) expect(hexOf(bytes)).toBe(vector.canonicalHex);
    else expect(vector.canonicalHex).toBeUndefined();
    expect(artifactKey(fromJson(vector.fields)).hex).toBe(vector.digestHex);
  });

  it.each(vectorFile.invalid.map((c) => [c.name, c] as const))('rejects invalid case %s', (_, c) => {
    expectInvalid(fromJson(c.fields), c.field);
  });

  it('keeps the empty-extra vector equal to the no-extra one', () => {
    const byName = new Map(vectorFile.vectors.map((v) => [v.name, v]));
    const empty = vectorFile.vectors.find((v) => v.name.startsWith('extra-empty'));
    expect(empty).toBeDefined();
    expect((empty!.fields.source as { extra: object }).extra).toEqual({});
    expect(empty!.digestHex).toBe(byName.get('adapter-none-no-extra')?.digestHex);
  });
});
