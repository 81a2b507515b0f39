import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  artifactKey,
  decodeArtifactKey,
  encodeArtifactKey,
  isArtifactKey,
  ArtifactKey,
  KEY_ENCODING_MAGIC,
  KEY_FIELD_TAGS,
  WaitprepError,
  type ArtifactKeyFields,
  type ArtifactKeyPlainFields,
} from '../../lib/index.js';

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
    // The one wording for an unknown name (options and fields alike), naming the known ones.
    expect(() => artifactKey(withTop({ tenant: 'tenant-42' }))).toThrow(
      'Expected `tenant` to be absent (unknown key field; known key fields: source, sourcePageGeneration, codec, codecConfig, representationVersion), got "tenant-42" (string)',
    );
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
    // The fields are prototype getters: the prototype is frozen, so no code can redefine them.
    expect(Object.isFrozen(ArtifactKey.prototype)).toBe(true);
    expect(() => Object.defineProperty(ArtifactKey.prototype, 'codec', { get: () => 'forged' })).toThrow(TypeError);
    expect(key.codec).toBe('raw');
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

describe('the plain form: key.toFields()', () => {
  it('is what artifactKey() accepts back, giving an equal key', () => {
    for (const f of [fields(), withSource({ extra: Object.fromEntries([['seed', '1'], ['10', 'b'], ['9', 'a'], ['__proto__', 'p']]) }), withSource({ tokenLayout: Uint32Array.of(7) })]) {
      const key = artifactKey(f);
      const again = artifactKey(key.toFields());
      expect(again.equals(key)).toBe(true);
      expect(again.toFields()).toEqual(key.toFields());
    }
  });

  it('makes each choice one way: bigints, a Uint32Array, an extra always present and without a prototype', () => {
    const plain: ArtifactKeyPlainFields = artifactKey(fields()).toFields();
    expect(plain).toEqual({
      source: { ...fields().source, tokenLayout: Uint32Array.of(128000, 9906, 1917, 0), extra: {} },
      sourcePageGeneration: 3n,
      codec: 'raw',
      codecConfig: '{"dtype":"bf16"}',
      representationVersion: 1n,
    });
    expect(plain.source.tokenLayout).toBeInstanceOf(Uint32Array);
    expect(Object.getPrototypeOf(plain.source.extra)).toBeNull();
    // Equal keys have one plain form, whatever the input looked like.
    const other = artifactKey({ ...fields(), sourcePageGeneration: 3n, source: { ...fields().source, tokenLayout: Uint32Array.of(128000, 9906, 1917, 0), extra: {} } });
    expect(other.toFields()).toEqual(plain);
  });

  it('keeps a name such as __proto__ an ordinary extra entry', () => {
    const extra = Object.fromEntries([['__proto__', 'x']]) as Record<string, string>;
    const key = artifactKey(withSource({ extra }));
    const plain = key.toFields();
    expect(Object.keys(plain.source.extra)).toEqual(['__proto__']);
    expect(artifactKey(plain).equals(key)).toBe(true);
    expect(key.equals(artifactKey(fields()))).toBe(false);
  });

  it('is a fresh, mutable copy: changing it changes neither the key nor the next copy', () => {
    const key = artifactKey(withSource({ extra: { seed: '1' } }));
    const plain = key.toFields();
    expect(plain).not.toBe(key.toFields());
    plain.source.tokenLayout[0] = 5;
    plain.source.extra.seed = '2';
    plain.codec = 'q8';
    expect(key.toFields().source.tokenLayout[0]).toBe(128000);
    expect(key.toFields().source.extra.seed).toBe('1');
    expect(key.codec).toBe('raw');
  });

  it('crosses threads as it is (structured clone) and still builds the same key', () => {
    const key = artifactKey(withSource({ extra: { seed: '1' } }));
    expect(artifactKey(structuredClone(key.toFields())).hex).toBe(key.hex);
  });
});

/** Bytes of the docs' worked example (vector docs-worked-example). */
const workedExample = (): Uint8Array =>
  encodeArtifactKey({
    source: { snapshotKind: 'kv', runtime: 'rt', model: 'm', adapter: 'none', profile: 'p', positionPolicy: 'abs', task: 'qa', namespace: '\u00e9', tokenLayout: [1, 258], extra: { z: '9', a: '' } },
    sourcePageGeneration: 7,
    codec: 'raw',
    codecConfig: '{}',
    representationVersion: 1,
  });

/** Runs decodeArtifactKey and returns the ERR_INVALID_KEY error it throws. */
const decodeRejection = (bytes: unknown): WaitprepError => rejection(() => decodeArtifactKey(bytes as Uint8Array));

/** `bytes` with `patch(copy)` applied to a copy. */
function patched(bytes: Uint8Array, patch: (b: Buffer) => void): Buffer {
  const copy = Buffer.from(bytes);
  patch(copy);
  return copy;
}

describe('the wire form: key.toBytes() and decodeArtifactKey()', () => {
  it('toBytes() is the canonical encoding the digest is taken over, in its own buffer', async () => {
    const key = artifactKey(fields());
    const bytes = key.toBytes();
    expect(hexOf(bytes)).toBe(hexOf(encodeArtifactKey(fields())));
    expect(createHash('sha256').update(bytes).digest('hex')).toBe(key.hex);
    expect(bytes).toBeInstanceOf(Uint8Array);
    expect(bytes.byteOffset).toBe(0);
    expect(bytes.buffer.byteLength).toBe(bytes.byteLength);
    expect(key.toBytes()).not.toBe(bytes);
  });

  it('encodes extra in name-byte order even where object property order differs (integer-like names)', () => {
    const key = artifactKey(withSource({ extra: { '9': 'a', '10': 'b', x: 'c' } }));
    expect(Object.keys(key.source.extra)).toEqual(['9', '10', 'x']);
    expect(hexOf(key.toBytes())).toBe(hexOf(encodeArtifactKey(withSource({ extra: { x: 'c', '10': 'b', '9': 'a' } }))));
    expect(decodeArtifactKey(key.toBytes()).hex).toBe(key.hex);
  });

  it('decodes back to an equal key with the same plain form, hashing the bytes once', () => {
    for (const f of [fields(), withSource({ extra: { seed: '1', '\u00e9': '' } }), withTop({ sourcePageGeneration: 2n ** 64n - 1n })]) {
      const key = artifactKey(f);
      const decoded = decodeArtifactKey(key.toBytes());
      expect(decoded).toBeInstanceOf(ArtifactKey);
      expect(decoded.equals(key)).toBe(true);
      expect(decoded.hex).toBe(key.hex);
      expect(hexOf(decoded.digest)).toBe(hexOf(key.digest));
      expect(decoded.toFields()).toEqual(key.toFields());
      expect(decoded.tokenCount).toBe(key.tokenCount);
      expect(Object.isFrozen(decoded) && Object.isFrozen(decoded.source) && Object.isFrozen(decoded.source.extra)).toBe(true);
    }
  });

  it('accepts any Uint8Array view (a Buffer, an offset view, shared memory) and copies it first', () => {
    const bytes = artifactKey(fields()).toBytes();
    const shared = new Uint8Array(new SharedArrayBuffer(bytes.length + 3), 3);
    shared.set(bytes);
    const key = decodeArtifactKey(shared);
    shared.fill(0);
    expect(key.equals(artifactKey(fields()))).toBe(true);
    expect(decodeArtifactKey(Buffer.from(bytes)).hex).toBe(key.hex);
  });

  it('keeps a leading U+FEFF in a string (it is content, not a byte-order mark)', () => {
    const key = artifactKey(withSource({ namespace: '\ufeffns' }));
    expect(decodeArtifactKey(key.toBytes()).source.namespace).toBe('\ufeffns');
    expect(decodeArtifactKey(key.toBytes()).hex).toBe(key.hex);
  });

  it('rejects what is not a Uint8Array', () => {
    for (const value of [null, 'WPK1', [0x57, 0x50, 0x4b, 0x31], new Uint16Array(8), new ArrayBuffer(8)]) {
      expect(decodeRejection(value).field).toBe('bytes');
    }
  });

  it('rejects a wrong or missing magic', () => {
    const bytes = workedExample();
    expect(decodeRejection(new Uint8Array(0)).message).toMatch(/offset 0 \(magic\).*57 50 4b 31.*got no bytes/);
    expect(decodeRejection(patched(bytes, (b) => (b[3] = 0x32))).field).toBe('magic');
    expect(decodeRejection(bytes.subarray(0, 3)).field).toBe('magic');
  });

  it('rejects every truncation, naming the field it ran out in', () => {
    const bytes = workedExample();
    for (let length = 0; length < bytes.length; length++) {
      const error = decodeRejection(bytes.subarray(0, length));
      expect(error.field).toBeTypeOf('string');
      expect(error.message).toMatch(/^Expected the key bytes at offset \d+ \(/);
    }
    // Offsets of the worked example (docs/key-encoding.md): the namespace field starts at 54.
    expect(decodeRejection(bytes.subarray(0, 56)).field).toBe('source.namespace');
    expect(decodeRejection(bytes.subarray(0, 60)).message).toMatch(/payload of 2 bytes, got 1 bytes before the end \(truncated\)/);
    expect(decodeRejection(bytes.subarray(0, 138)).field).toBe('representationVersion');
  });

  it('rejects bytes after the last field', () => {
    const bytes = workedExample();
    const error = decodeRejection(Buffer.concat([bytes, Uint8Array.of(0)]));
    expect(error.field).toBe('bytes');
    expect(error.message).toContain('offset 139');
    expect(error.message).toContain('got 1 more bytes');
  });

  it('rejects a wrong tag and fields out of order', () => {
    const bytes = workedExample();
    const error = decodeRejection(patched(bytes, (b) => (b[18] = 0x04)));
    expect(error.field).toBe('source.model');
    expect(error.message).toContain('to be tag 0x03, got tag 0x04 (source.adapter)');
    // runtime (11..17) and model (18..23) swapped: both well-formed, in the wrong order.
    const swapped = Buffer.concat([bytes.subarray(0, 11), bytes.subarray(18, 24), bytes.subarray(11, 18), bytes.subarray(24)]);
    expect(decodeRejection(swapped).field).toBe('source.runtime');
    expect(decodeRejection(patched(bytes, (b) => (b[4] = 0xff))).message).toContain('got tag 0xff (no field)');
  });

  it('rejects an empty string where a key needs a non-empty one, and accepts an empty extra value', () => {
    // model "m" (offset 18) shortened to "": drop its payload byte and set its length to 0.
    const bytes = workedExample();
    const empty = Buffer.concat([bytes.subarray(0, 19), Uint8Array.of(0, 0, 0, 0), bytes.subarray(24)]);
    const error = decodeRejection(empty);
    expect(error.field).toBe('source.model');
    expect(error.message).toContain('a non-empty string, got length 0');
    expect(decodeArtifactKey(bytes).source.extra).toEqual({ a: '', z: '9' });
  });

  it('rejects UTF-8 that is not well-formed: a bad byte, an overlong form, an encoded surrogate', () => {
    const bytes = workedExample();
    // The namespace's two bytes c3 a9 (offsets 59, 60).
    for (const [b0, b1] of [[0xc3, 0x28], [0xc0, 0xaf], [0xff, 0xfe]] as const) {
      const error = decodeRejection(patched(bytes, (b) => ((b[59] = b0), (b[60] = b1))));
      expect(error.field).toBe('source.namespace');
      expect(error.message).toContain('well-formed UTF-8');
    }
    // U+D800 encoded as ed a0 80 (CESU-8 style) in place of a three-byte string.
    const surrogate = artifactKey(withSource({ namespace: '\u4e2d' })).toBytes();
    const at = Buffer.from(surrogate).indexOf(Buffer.from('\u4e2d', 'utf8'));
    expect(at).toBeGreaterThan(0);
    expect(decodeRejection(patched(surrogate, (b) => b.set([0xed, 0xa0, 0x80], at))).field).toBe('source.namespace');
  });

  it('rejects a token layout that is empty or not whole u32 tokens, and u64 fields not 8 bytes long', () => {
    const bytes = workedExample();
    // tokenLayout at offset 61: tag, length 8, two tokens; lengths 0 and 6 (the payload shortened to match).
    const layout = (length: number): Buffer => Buffer.concat([bytes.subarray(0, 62), Uint8Array.of(length, 0, 0, 0), bytes.subarray(66, 66 + length), bytes.subarray(74)]);
    expect(decodeRejection(layout(0)).field).toBe('source.tokenLayout');
    expect(decodeRejection(layout(6)).message).toContain('a non-zero multiple of 4');
    // sourcePageGeneration at offset 98 with length 7.
    const generation = Buffer.concat([bytes.subarray(0, 99), Uint8Array.of(7, 0, 0, 0), bytes.subarray(103, 110), bytes.subarray(111)]);
    const error = decodeRejection(generation);
    expect(error.field).toBe('sourcePageGeneration');
    expect(error.message).toContain('the length 8 (a u64le), got 7');
  });

  it('rejects extra entries out of order, repeated, with an empty name, or running past the payload', () => {
    const encode = (entries: Array<[string, string]>): Buffer => {
      const body = Buffer.concat(entries.flatMap(([n, v]) => [u32le(Buffer.byteLength(n)), Buffer.from(n), u32le(Buffer.byteLength(v)), Buffer.from(v)]));
      const bytes = workedExample();
      return Buffer.concat([bytes.subarray(0, 75), u32le(body.length), body, bytes.subarray(98)]);
    };
    const u32le = (n: number): Buffer => {
      const b = Buffer.alloc(4);
      b.writeUInt32LE(n);
      return b;
    };
    expect(hexOf(encode([['a', ''], ['z', '9']]))).toBe(hexOf(workedExample()));
    const unsorted = decodeRejection(encode([['z', '9'], ['a', '']]));
    expect(unsorted.field).toBe('source.extra (a name)');
    expect(unsorted.message).toContain('a name after "z" in UTF-8 byte order');
    expect(decodeRejection(encode([['a', '1'], ['a', '2']])).field).toBe('source.extra (a name)');
    expect(decodeRejection(encode([['', '1']])).field).toBe('source.extra (a name)');
    // UTF-16 order would put U+1F600 first; UTF-8 byte order puts U+FF5E first.
    expect(decodeArtifactKey(encode([['\uff5e', '1'], ['\u{1f600}', '2']])).source.extra).toEqual({ '\uff5e': '1', '\u{1f600}': '2' });
    expect(decodeRejection(encode([['\u{1f600}', '2'], ['\uff5e', '1']])).field).toBe('source.extra (a name)');
    // An entry's value length that runs past the extra payload, though not past the whole input.
    const overrun = patched(encode([['a', 'b']]), (b) => b.writeUInt32LE(200, 75 + 4 + 4 + 1));
    const error = decodeRejection(overrun);
    expect(error.field).toBe('source.extra.a');
    expect(error.message).toContain('inside the extra payload');
  });

  const u8 = fc.integer({ min: 0, max: 255 });
  const text = (minLength: number): fc.Arbitrary<string> => fc.oneof(fc.string({ minLength, maxLength: 6 }), fc.string({ minLength, maxLength: 4, unit: 'binary' }));
  const fieldsArb: fc.Arbitrary<Fields> = fc
    .record({
      strings: fc.array(text(1), { minLength: 10, maxLength: 10 }),
      tokens: fc.array(fc.nat({ max: 0xffff_ffff }), { minLength: 1, maxLength: 5 }),
      extra: fc.uniqueArray(fc.tuple(text(1), text(0)), { maxLength: 3, selector: ([name]) => name }),
      generation: fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }),
      version: fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }),
    })
    .map(({ strings, tokens, extra, generation, version }) => ({
      source: {
        snapshotKind: strings[0]!, runtime: strings[1]!, model: strings[2]!, adapter: strings[3]!, profile: strings[4]!,
        positionPolicy: strings[5]!, task: strings[6]!, namespace: strings[7]!, tokenLayout: tokens, extra: Object.fromEntries(extra),
      },
      sourcePageGeneration: generation,
      codec: strings[8]!,
      codecConfig: strings[9]!,
      representationVersion: version,
    }));

  /** Decodes `bytes`: an ERR_INVALID_KEY, or a key whose canonical bytes are exactly `bytes` (and whose digest is theirs). */
  function strictlyDecodes(bytes: Uint8Array): void {
    let key: ArtifactKey;
    try {
      key = decodeArtifactKey(bytes);
    } catch (error) {
      expect(error).toBeInstanceOf(WaitprepError);
      expect((error as WaitprepError).code).toBe('ERR_INVALID_KEY');
      return;
    }
    expect(hexOf(key.toBytes())).toBe(hexOf(bytes));
    expect(key.hex).toBe(createHash('sha256').update(bytes).digest('hex'));
  }

  it('round-trips any valid key (property)', () => {
    fc.assert(
      fc.property(fieldsArb, (f) => {
        const key = artifactKey(f);
        const decoded = decodeArtifactKey(key.toBytes());
        expect(decoded.hex).toBe(key.hex);
        expect(decoded.toFields()).toEqual(key.toFields());
      }),
    );
  });

  it('after any one-byte change, truncation or extension, throws ERR_INVALID_KEY or gives a key whose bytes are the input (property)', () => {
    fc.assert(
      fc.property(fieldsArb, fc.nat(), u8, fc.nat(), fc.uint8Array({ minLength: 1, maxLength: 4 }), (f, where, value, cut, tail) => {
        const bytes = artifactKey(f).toBytes();
        strictlyDecodes(patched(bytes, (b) => (b[where % b.length] = value)));
        strictlyDecodes(bytes.subarray(0, cut % bytes.length));
        strictlyDecodes(Buffer.concat([bytes, tail]));
      }),
      { numRuns: 300 },
    );
  });

  it('after any one-byte change of the worked example, throws or decodes to exactly those bytes (every byte, every value)', () => {
    const bytes = workedExample();
    let accepted = 0;
    for (let at = 0; at < bytes.length; at++) {
      for (let value = 0; value < 256; value++) {
        if (value === bytes[at]) continue;
        const changed = patched(bytes, (b) => (b[at] = value));
        try {
          const key = decodeArtifactKey(changed);
          expect(hexOf(key.toBytes())).toBe(hexOf(changed));
          accepted++;
        } catch (error) {
          expect((error as WaitprepError).code).toBe('ERR_INVALID_KEY');
        }
      }
    }
    // Some changes are other valid keys (another character, another token): those decode.
    expect(accepted).toBeGreaterThan(0);
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

const vectorFile = JSON.parse(readFileSync(new URL('../vectors/keys.json', import.meta.url), 'utf8')) as VectorFile;

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

  it.each(vectorFile.vectors.map((v) => [v.name, v] as const))('decodes vector %s back to the same key and plain form', (_, vector) => {
    const key = artifactKey(fromJson(vector.fields));
    const bytes = vector.canonicalHex === undefined ? encodeArtifactKey(fromJson(vector.fields)) : Buffer.from(vector.canonicalHex, 'hex');
    expect(hexOf(key.toBytes())).toBe(hexOf(bytes));
    const decoded = decodeArtifactKey(bytes);
    expect(decoded.hex).toBe(vector.digestHex);
    expect(decoded.toFields()).toEqual(key.toFields());
    expect(hexOf(decoded.toBytes())).toBe(hexOf(bytes));
    expect(artifactKey(decoded.toFields()).hex).toBe(vector.digestHex);
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
