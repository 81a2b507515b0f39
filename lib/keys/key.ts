import { isUtf8 } from 'node:buffer';
import * as crypto from 'node:crypto';
import { WaitprepError, invalidArgument } from '../errors.js';
import { writeAscii } from './ascii.js';
import { isPlainObject, ownField, u64OrNull, unknownName } from '../internal/validate.js';
import {
  SOURCE_STRING_FIELDS,
  plainFieldsOf,
  LITTLE_ENDIAN,
  readKeyParts,
  tokensAt,
  tokensOffset,
  u32At,
  type ArtifactKeyFields,
  type ArtifactKeyPlainFields,
  type ArtifactKeySource,
} from './key-fields.js';

export type { ArtifactKeyFields, ArtifactKeyPlainFields, ArtifactKeySource } from './key-fields.js';

/** First bytes of every canonical encoding: "WPK" and the encoding version 1. */
export const KEY_ENCODING_MAGIC = Uint8Array.of(0x57, 0x50, 0x4b, 0x31);

/** Field tags, in the fixed order they are encoded. */
export const KEY_FIELD_TAGS = Object.freeze({
  snapshotKind: 0x01,
  runtime: 0x02,
  model: 0x03,
  adapter: 0x04,
  profile: 0x05,
  positionPolicy: 0x06,
  task: 0x07,
  namespace: 0x08,
  tokenLayout: 0x09,
  extra: 0x0a,
  sourcePageGeneration: 0x0b,
  codec: 0x0c,
  codecConfig: 0x0d,
  representationVersion: 0x0e,
});

/** The `extra` of every key that has none (an empty `extra` is the same key). */
const NO_EXTRA: Readonly<Record<string, string>> = Object.freeze(Object.create(null) as Record<string, string>);

const SOURCE_FIELDS = new Set<string>([...SOURCE_STRING_FIELDS, 'tokenLayout', 'extra']);
const TOP_FIELDS = new Set<string>(['source', 'sourcePageGeneration', 'codec', 'codecConfig', 'representationVersion']);
const U32_MAX = 0xffff_ffff;

const constructing = Symbol('waitprep.artifactKey');

/** The key's own digest bytes, without a copy: for the lease table's pin path. Never hand it out. */
export let keyDigestBytes: (key: ArtifactKey) => Uint8Array;
/**
 * Writes the digest as 8 little-endian u32 words at `into[at..at+8)`: the words the lease table's
 * lookup compares. They are read from the key object itself, where they sit as small integers
 * beside the digest's reference, so a pin of a cold key reads no other object for them (a view
 * of the store would be two more reads: the view, then its memory). Throws `TypeError`
 * for a value that is no key.
 */
export let keyDigestWordsInto: (key: ArtifactKey, into: Uint32Array, at: number) => void;
/**
 * The digest's first two words folded into a small integer (31 bits, so V8 keeps it in the key
 * object itself, unboxed): for the coordinator's demand index, whose hash then reads no memory
 * beyond the key object that the key check has just read.
 */
export let keyHashWord: (key: ArtifactKey) => number;
/**
 * @internal A long key's canonical encoding in place, a view of its shared store, or `null` for
 * a key short enough to be copied (see {@link keyStore}): for the preparation driver, which posts
 * it to its own worker code, where it is copied before anything else sees it. Never hand it out.
 */
export let sharedKeyBytes: (key: ArtifactKey) => Uint8Array | null;
/**
 * True when `value` is an {@link ArtifactKey} built by this package (by {@link artifactKey} or
 * {@link decodeArtifactKey}): checked by a private brand, not `instanceof`, so an object that
 * merely has the prototype is not a key.
 */
export let isArtifactKey: (value: unknown) => value is ArtifactKey;

/**
 * @internal One-shot SHA-256 as 64 lowercase hex digits: `crypto.hash` where Node has it (20.12+), else a
 * Hash object. Hex rather than a Buffer: for a key of a few KB, making the result Buffer costs
 * Node more than the hash itself, and the key needs the hex anyway.
 */
export const sha256Hex: (data: Uint8Array) => string =
  typeof (crypto as { hash?: unknown }).hash === 'function'
    ? (data) => (crypto as unknown as { hash(alg: string, data: Uint8Array, enc: 'hex'): string }).hash('sha256', data, 'hex')
    : (data) => crypto.createHash('sha256').update(data).digest('hex');

/**
 * A key keeps its canonical encoding in one buffer, its *store*, from offset 0. A short key's
 * store is an ArrayBuffer that also holds the 32 digest bytes, at the next multiple of 4 after
 * the encoding (so the words view is aligned): one buffer rather than two, because every
 * ArrayBuffer carries V8's own bookkeeping besides its contents, and a key is held per waiting
 * consumer. A long key's store (from {@link SHARED_STORE_BYTES}) is a SharedArrayBuffer of
 * exactly the encoding, and its digest has a small buffer of its own: then a preparation worker
 * can be handed the encoding without a copy on the coordinator's thread (a copy of a 64k-token
 * key costs hundreds of µs of the coordinator's CPU; bench:wait-cost measures it), and the lease
 * table's pin path reads the digest from ordinary memory as for any key. Nothing outside the
 * package sees a store: every byte handed out is a copy.
 */
const digestOffset = (length: number): number => (length + 3) & ~3;
const DIGEST_BYTES = 32;
/** Encodings of at least this many bytes (about 4k tokens) live in shared memory. */
export const SHARED_STORE_BYTES = 16 * 1024;

/** @internal A Buffer of `length` bytes at offset 0 of a fresh key store: write a canonical encoding into it, then {@link sealKey}. */
export function keyStore(length: number): Buffer {
  const store = length >= SHARED_STORE_BYTES ? new SharedArrayBuffer(length) : new ArrayBuffer(digestOffset(length) + DIGEST_BYTES);
  return Buffer.from(store, 0, length);
}

/**
 * @internal The key whose canonical encoding fills `encoding`, a {@link keyStore}; hashed here
 * unless the caller already has the digest's `hex`. The bytes are trusted, not checked: only
 * the package's own writers (the encoder, the strict decoder, the chunk chain) call this.
 */
export function sealKey(encoding: Uint8Array, hex?: string): ArtifactKey {
  const store = encoding.buffer;
  const length = encoding.byteLength;
  const fits = length >= SHARED_STORE_BYTES
    ? store instanceof SharedArrayBuffer && store.byteLength === length
    : store instanceof ArrayBuffer && store.byteLength === digestOffset(length) + DIGEST_BYTES;
  if (!fits || encoding.byteOffset !== 0) throw new Error('waitprep internal: sealKey() takes a keyStore()');
  const tokensAt = tokensOffset(encoding);
  const layoutBytes = u32At(encoding, tokensAt - 4);
  return new ArtifactKey(constructing, store, length, hex ?? sha256Hex(encoding), tokensAt, layoutBytes / 4);
}

/** A hex digit's value (the digits are lowercase: they come from the hash or from a key). */
const nibble = (code: number): number => (code <= 0x39 ? code - 0x30 : code - 0x57);

/** The fields a key reads from its encoding on first use, frozen. */
interface Fields {
  source: ArtifactKeySource;
  sourcePageGeneration: bigint;
  codec: string;
  codecConfig: string;
  representationVersion: bigint;
}

/**
 * An immutable, validated artifact identity with its SHA-256 digest, computed
 * once. Build one with {@link artifactKey}. Two keys are equal exactly when their
 * canonical encodings are equal; compare with {@link ArtifactKey.equals}. Its
 * plain form is {@link ArtifactKey.toFields}, its wire form
 * {@link ArtifactKey.toBytes} ({@link decodeArtifactKey} reads it back).
 *
 * A key holds only what its identity needs: the canonical encoding and the digest (in one
 * buffer for a short key), and `hex`. Its fields (`source`, `codec`, …) are read out of the encoding on first
 * use and kept from then on, so a key that only waits and pins (the coordinator reads `hex`,
 * the lease table the digest) never builds them.
 */
export class ArtifactKey {
  /** Number of tokens in the layout. */
  readonly tokenCount: number;
  /** The digest as 64 lowercase hex characters: a string id for maps and logs. */
  readonly hex: string;
  /** The store (see {@link keyStore}): the canonical encoding from offset 0. */
  readonly #store: ArrayBuffer | SharedArrayBuffer;
  readonly #digest: Uint8Array;
  // The digest's 8 little-endian u32 words, each as an int32 (so that V8 keeps it in the object,
  // unboxed), declared next to #digest so that a pin's reads of the key share its first lines.
  readonly #w0: number;
  readonly #w1: number;
  readonly #w2: number;
  readonly #w3: number;
  readonly #w4: number;
  readonly #w5: number;
  readonly #w6: number;
  readonly #w7: number;
  readonly #hashWord: number;
  /** Bytes of the canonical encoding at the start of the store. */
  readonly #length: number;
  readonly #tokensAt: number;
  /** Private fields stay writable on a frozen object: the one thing set after construction. */
  #fields: Fields | null = null;

  /** @internal Use {@link artifactKey}. */
  constructor(token: symbol, store: ArrayBuffer | SharedArrayBuffer, length: number, hex: string, tokensAt: number, tokenCount: number) {
    if (token !== constructing) throw new WaitprepError('ERR_INVALID_KEY', 'Build keys with artifactKey(fields)');
    this.#store = store;
    const own = store instanceof ArrayBuffer;
    const at = own ? digestOffset(length) : 0;
    const digestStore = own ? store : new ArrayBuffer(DIGEST_BYTES);
    const digest = new Uint8Array(digestStore, at, DIGEST_BYTES);
    for (let k = 0; k < DIGEST_BYTES; k++) digest[k] = (nibble(hex.charCodeAt(2 * k)) << 4) | nibble(hex.charCodeAt(2 * k + 1));
    this.#digest = digest;
    this.#w0 = u32At(digest, 0) | 0;
    this.#w1 = u32At(digest, 4) | 0;
    this.#w2 = u32At(digest, 8) | 0;
    this.#w3 = u32At(digest, 12) | 0;
    this.#w4 = u32At(digest, 16) | 0;
    this.#w5 = u32At(digest, 20) | 0;
    this.#w6 = u32At(digest, 24) | 0;
    this.#w7 = u32At(digest, 28) | 0;
    this.#hashWord = (this.#w0 ^ Math.imul(this.#w1, 0x9e3779b1)) >> 1;
    this.#length = length;
    this.#tokensAt = tokensAt;
    this.tokenCount = tokenCount;
    this.hex = hex;
    Object.freeze(this);
  }

  /** SHA-256 of the canonical encoding: a fresh 32-byte copy on each read, so the key stays immutable. */
  get digest(): Uint8Array {
    return this.#digest.slice();
  }

  /** The runtime source's identity fields, without the token layout (frozen, `extra` too). */
  get source(): ArtifactKeySource {
    return this.#read().source;
  }

  /** The generation of the source pages the artifact was made from. */
  get sourcePageGeneration(): bigint {
    return this.#read().sourcePageGeneration;
  }

  /** The codec the artifact is stored in (`'none'` for raw KV). */
  get codec(): string {
    return this.#read().codec;
  }

  /** The codec's configuration, as the key was given it. */
  get codecConfig(): string {
    return this.#read().codecConfig;
  }

  /** The version of the artifact's representation. */
  get representationVersion(): bigint {
    return this.#read().representationVersion;
  }

  static {
    keyDigestBytes = (key) => key.#digest;
    keyDigestWordsInto = (key, into, at) => {
      into[at] = key.#w0;
      into[at + 1] = key.#w1;
      into[at + 2] = key.#w2;
      into[at + 3] = key.#w3;
      into[at + 4] = key.#w4;
      into[at + 5] = key.#w5;
      into[at + 6] = key.#w6;
      into[at + 7] = key.#w7;
    };
    keyHashWord = (key) => key.#hashWord;
    sharedKeyBytes = (key) => (key.#store instanceof SharedArrayBuffer ? key.#encoding() : null);
    // The private field is the brand: only this constructor adds it, so an object made with
    // Object.create(ArtifactKey.prototype), or given a forged prototype, has none.
    isArtifactKey = (value): value is ArtifactKey => typeof value === 'object' && value !== null && #digest in value;
    // The fields are getters on the prototype: frozen, so no code in this process can redefine
    // what every key reports (own frozen data properties could not be shadowed either).
    Object.freeze(ArtifactKey.prototype);
  }

  /** The canonical encoding, as a view of the store (never handed out). */
  #encoding(): Uint8Array {
    return new Uint8Array(this.#store, 0, this.#length);
  }

  #read(): Fields {
    if (this.#fields === null) {
      const p = readKeyParts(this.#encoding());
      this.#fields = {
        source: Object.freeze({ ...p.strings, extra: p.extra === null ? NO_EXTRA : Object.freeze(p.extra) }),
        sourcePageGeneration: p.sourcePageGeneration,
        codec: p.codec,
        codecConfig: p.codecConfig,
        representationVersion: p.representationVersion,
      };
    }
    return this.#fields;
  }

  /** A fresh copy of the ordered token layout. */
  tokenLayout(): Uint32Array {
    return tokensAt(this.#encoding(), this.#tokensAt, this.tokenCount);
  }

  /**
   * The key's plain form (see {@link ArtifactKeyPlainFields}): a fresh,
   * mutable copy of every identity field. `artifactKey(key.toFields())` builds
   * a key equal to this one.
   */
  toFields(): ArtifactKeyPlainFields {
    return plainFieldsOf(this.#encoding());
  }

  /**
   * The key's wire form: its canonical encoding (docs/key-encoding.md), the
   * bytes {@link ArtifactKey.digest} is the SHA-256 of. A fresh array over its
   * own `ArrayBuffer` of exactly that length, so it can be transferred or sent
   * as it is. {@link decodeArtifactKey} turns it back into an equal key.
   */
  toBytes(): Uint8Array {
    if (this.#store instanceof ArrayBuffer) return new Uint8Array(this.#store.slice(0, this.#length));
    const out = new Uint8Array(this.#length);
    out.set(this.#encoding());
    return out;
  }

  /** True when `other` is a key with the same canonical encoding. */
  equals(other: unknown): boolean {
    return other === this || (isArtifactKey(other) && other.hex === this.hex);
  }

  toString(): string {
    return `ArtifactKey(${this.hex.slice(0, 16)}…)`;
  }
}

interface Validated {
  source: ArtifactKeySource;
  tokens: Uint32Array;
  extraEntries: Array<[Buffer, Buffer]>;
  sourcePageGeneration: bigint;
  codec: string;
  codecConfig: string;
  representationVersion: bigint;
}

/**
 * Validates `fields` and builds an {@link ArtifactKey}. Throws `WaitprepError`
 * `ERR_INVALID_KEY` naming the first field that is missing, empty, ill-typed or
 * unknown.
 */
export function artifactKey(fields: ArtifactKeyFields): ArtifactKey {
  return sealKey(encodeValidated(validate(fields), true));
}

/** Throws `ERR_INVALID_KEY` unless `value` is an {@link ArtifactKey} built by this package. */
export function assertArtifactKey(value: unknown): asserts value is ArtifactKey {
  if (!isArtifactKey(value)) throw notAKey();
}

/** @internal The `ERR_INVALID_KEY` for a value that is not an {@link ArtifactKey}. */
export function notAKey(): WaitprepError {
  return new WaitprepError('ERR_INVALID_KEY', 'Expected `key` to be an ArtifactKey built by artifactKey()', { field: 'key' });
}


/**
 * The canonical byte encoding of a key's fields (docs/key-encoding.md): what
 * the digest is taken over. Validates exactly as {@link artifactKey}; the
 * same bytes as `artifactKey(fields).toBytes()`, without the hash.
 */
export function encodeArtifactKey(fields: ArtifactKeyFields): Uint8Array {
  const out = encodeValidated(validate(fields), false);
  return new Uint8Array(out.buffer, out.byteOffset, out.byteLength);
}

function keyError(field: string, expected: string, got: unknown): WaitprepError {
  return invalidArgument(field, expected, got, 'ERR_INVALID_KEY');
}

function identityString(field: string, value: unknown, allowEmpty = false): string {
  if (typeof value !== 'string' || (!allowEmpty && value.length === 0)) {
    return fail(field, allowEmpty ? 'a string' : 'a non-empty string', value);
  }
  if (!value.isWellFormed()) {
    throw new WaitprepError('ERR_INVALID_KEY', `Expected \`${field}\` to be well-formed Unicode, got a string with a lone surrogate`, { field });
  }
  return value;
}

function fail(field: string, expected: string, got: unknown): never {
  throw keyError(field, expected, got);
}

function u64(field: string, value: unknown): bigint {
  return u64OrNull(value) ?? fail(field, 'a non-negative integer (a safe-integer number, or a bigint up to 2^64-1)', value);
}

function tokenLayout(value: unknown): Uint32Array {
  const field = 'source.tokenLayout';
  let tokens: Uint32Array;
  if (value instanceof Uint32Array) {
    tokens = value.slice();
  } else if (Array.isArray(value)) {
    tokens = new Uint32Array(value.length);
    for (let i = 0; i < value.length; i++) {
      const t: unknown = value[i];
      if (typeof t !== 'number' || !Number.isInteger(t) || t < 0 || t > U32_MAX) {
        fail(`${field}[${i}]`, 'an integer token in [0, 2^32-1]', t);
      }
      tokens[i] = t as number;
    }
  } else {
    return fail(field, 'a Uint32Array or an array of non-negative integers', value);
  }
  if (tokens.length === 0) fail(field, 'a non-empty token layout', value);
  // The encoded length of the layout must fit the u32 length prefix.
  if (tokens.length * 4 > U32_MAX) fail(field, 'at most 2^30-1 tokens', value);
  return tokens;
}

/** Every own property counts, symbols and non-enumerable ones included: identity has no hidden parts. */
function rejectUnknown(object: Record<string, unknown>, known: Set<string>, prefix: string): void {
  for (const name of Reflect.ownKeys(object)) {
    if (typeof name !== 'string' || !known.has(name)) {
      throw unknownName(`${prefix}${String(name)}`, prefix === '' ? 'key field' : 'source field', known, (object as Record<PropertyKey, unknown>)[name], 'ERR_INVALID_KEY');
    }
  }
}

/**
 * Sorts `extra` entries in place by the UTF-8 bytes of the name (= Unicode code
 * point order, not JavaScript's UTF-16 order, nor an object's own property
 * order, which puts integer-like names first), so a runtime in any language
 * sorts the same way.
 */
function sortedByName(entries: Array<[Buffer, Buffer]>): Array<[Buffer, Buffer]> {
  return entries.sort((a, b) => Buffer.compare(a[0], b[0]));
}

function validate(fields: unknown): Validated {
  if (!isPlainObject(fields)) return fail('fields', 'an object of key fields', fields);
  rejectUnknown(fields, TOP_FIELDS, '');
  // Own properties only, here and below: an inherited `adapter` or `extra` (a polluted
  // Object.prototype) must neither fill a missing field nor change a key.
  const src = ownField(fields, 'source');
  if (!isPlainObject(src)) return fail('source', 'an object with the runtime source key', src);
  rejectUnknown(src, SOURCE_FIELDS, 'source.');
  // Field by field, in encoding order, so the first bad field is the one named.
  const strings = {} as Record<(typeof SOURCE_STRING_FIELDS)[number], string>;
  for (const name of SOURCE_STRING_FIELDS) strings[name] = identityString(`source.${name}`, ownField(src, name));
  const tokens = tokenLayout(ownField(src, 'tokenLayout'));

  let extra: Record<string, string> = NO_EXTRA;
  const extraEntries: Array<[Buffer, Buffer]> = [];
  const given = ownField(src, 'extra');
  if (given !== undefined && (!isPlainObject(given) || Object.keys(given).length > 0)) {
    if (!isPlainObject(given)) fail('source.extra', 'an object of string -> string', given);
    for (const [name, value] of Object.entries(given)) {
      identityString('source.extra (a name)', name);
      identityString(`source.extra.${name}`, value, true);
      extraEntries.push([Buffer.from(name, 'utf8'), Buffer.from(value as string, 'utf8')]);
    }
    sortedByName(extraEntries);
    extra = Object.create(null) as Record<string, string>;
    for (const [name, value] of extraEntries) extra[name.toString('utf8')] = value.toString('utf8');
    Object.freeze(extra);
  }

  return {
    source: Object.freeze({ ...strings, extra }),
    tokens,
    extraEntries,
    sourcePageGeneration: u64('sourcePageGeneration', ownField(fields, 'sourcePageGeneration')),
    codec: identityString('codec', ownField(fields, 'codec')),
    codecConfig: identityString('codecConfig', ownField(fields, 'codecConfig')),
    representationVersion: u64('representationVersion', ownField(fields, 'representationVersion')),
  };
}

/** Header of one field: tag (u8) and payload length (u32 little-endian). */
const FIELD_HEADER = 5;

/** UTF-8 length of a well-formed string; ASCII (the usual case) without a call into the runtime. */
function utf8Length(str: string): number {
  for (let i = 0; i < str.length; i++) {
    if (str.charCodeAt(i) >= 0x80) return Buffer.byteLength(str, 'utf8');
  }
  return str.length;
}

/**
 * Writes the canonical encoding in one pass into one buffer. Field order and
 * layout are docs/key-encoding.md; small helpers write bytes by hand because
 * most fields are short ASCII strings, where Buffer's methods cost more than
 * the bytes. The result is at offset 0 of its own ArrayBuffer: a
 * {@link keyStore} when `forKey`, else exactly its length (bytes handed out).
 */
function encodeValidated(v: Validated, forKey: boolean): Buffer {
  const s = v.source;
  const strings = SOURCE_STRING_FIELDS.map((name): [number, string] => [KEY_FIELD_TAGS[name], s[name]]);
  const lengths = strings.map(([, str]) => utf8Length(str));
  const codecLength = utf8Length(v.codec);
  const codecConfigLength = utf8Length(v.codecConfig);
  let extraLength = 0;
  for (const [name, value] of v.extraEntries) extraLength += 8 + name.length + value.length;
  if (extraLength > U32_MAX) fail('source.extra', 'at most 2^32-1 encoded bytes', v.source.extra);
  for (const length of [...lengths, codecLength, codecConfigLength]) {
    if (length > U32_MAX) fail('string field', 'at most 2^32-1 UTF-8 bytes', length);
  }

  let total = KEY_ENCODING_MAGIC.length + 14 * FIELD_HEADER + v.tokens.length * 4 + extraLength + 16 + codecLength + codecConfigLength;
  for (const length of lengths) total += length;
  const out = forKey ? keyStore(total) : Buffer.allocUnsafeSlow(total);
  out.set(KEY_ENCODING_MAGIC, 0);
  let at = KEY_ENCODING_MAGIC.length;

  const u32 = (value: number): void => {
    out[at] = value & 0xff;
    out[at + 1] = (value >>> 8) & 0xff;
    out[at + 2] = (value >>> 16) & 0xff;
    out[at + 3] = (value >>> 24) & 0xff;
    at += 4;
  };
  const header = (tag: number, length: number): void => {
    out[at++] = tag;
    u32(length);
  };
  const string = (tag: number, str: string, length: number): void => {
    header(tag, length);
    if (length === str.length) {
      at = writeAscii(out, at, str);
    } else {
      at += out.write(str, at, 'utf8');
    }
  };
  const u64 = (tag: number, value: bigint): void => {
    header(tag, 8);
    u32(Number(value & 0xffff_ffffn));
    u32(Number(value >> 32n));
  };

  for (let i = 0; i < strings.length; i++) string(strings[i]![0], strings[i]![1], lengths[i]!);
  header(KEY_FIELD_TAGS.tokenLayout, v.tokens.length * 4);
  if (LITTLE_ENDIAN && v.tokens.length > 64) {
    out.set(new Uint8Array(v.tokens.buffer, v.tokens.byteOffset, v.tokens.byteLength), at);
    at += v.tokens.byteLength;
  } else {
    for (let i = 0; i < v.tokens.length; i++) u32(v.tokens[i]!);
  }
  header(KEY_FIELD_TAGS.extra, extraLength);
  for (const [name, value] of v.extraEntries) {
    u32(name.length);
    out.set(name, at);
    at += name.length;
    u32(value.length);
    out.set(value, at);
    at += value.length;
  }
  u64(KEY_FIELD_TAGS.sourcePageGeneration, v.sourcePageGeneration);
  string(KEY_FIELD_TAGS.codec, v.codec, codecLength);
  string(KEY_FIELD_TAGS.codecConfig, v.codecConfig, codecConfigLength);
  u64(KEY_FIELD_TAGS.representationVersion, v.representationVersion);
  if (at !== total) throw new Error(`waitprep internal: key encoding wrote ${at} of ${total} bytes`);
  return out;
}

/** Field names in tag order, for the decoder's messages (`KEY_FIELD_TAGS` the other way round). */
const FIELD_NAMES: readonly string[] = (() => {
  const names: string[] = [];
  for (const [name, tag] of Object.entries(KEY_FIELD_TAGS)) names[tag] = TOP_FIELDS.has(name) ? name : `source.${name}`;
  return names;
})();

const hexBytes = (bytes: Uint8Array): string => Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join(' ');

/**
 * Turns a key's wire form (its canonical encoding, {@link ArtifactKey.toBytes}
 * or {@link encodeArtifactKey}) back into the {@link ArtifactKey}, and takes
 * its SHA-256 once, over those bytes.
 *
 * Strict: every byte is checked against docs/key-encoding.md, so the bytes it
 * accepts are exactly the bytes the key encodes to (`decodeArtifactKey(b).toBytes()`
 * equals `b`) and no two inputs decode to the same key. It throws
 * `WaitprepError` `ERR_INVALID_KEY`, with `field` naming the part that was
 * wrong (`magic`, a field's dotted name, or `bytes` for what comes after the
 * last field) and a message giving the offset, what was expected and what came:
 * a wrong magic, a missing, unexpected or out-of-order tag, a length that runs
 * past the end (truncation) or that a field's type does not allow, an empty
 * string where the fields validator wants a non-empty one, UTF-8 that is not
 * well-formed (overlong forms, encoded surrogates, code points past U+10FFFF),
 * `extra` names that are not strictly increasing, and bytes after the last field.
 *
 * The input is copied first, so the bytes checked are the bytes hashed even if
 * the caller's memory (a SharedArrayBuffer, say) changes meanwhile.
 */
export function decodeArtifactKey(bytes: Uint8Array): ArtifactKey {
  if (!(bytes instanceof Uint8Array)) return fail('bytes', 'a Uint8Array holding a canonical key encoding (WPK1)', bytes);
  const input = keyStore(bytes.length);
  input.set(bytes);
  const end = input.length;
  let at = 0;

  const wrong = (field: string, offset: number, expected: string, got: string): never => {
    throw new WaitprepError('ERR_INVALID_KEY', `Expected the key bytes at offset ${offset} (${field}) to be ${expected}, got ${got}`, { field });
  };
  const readU32 = (offset: number): number => input.readUInt32LE(offset);

  const magic = KEY_ENCODING_MAGIC.length;
  if (end < magic || !input.subarray(0, magic).equals(KEY_ENCODING_MAGIC)) {
    wrong('magic', 0, `the magic ${hexBytes(KEY_ENCODING_MAGIC)} (WPK1)`, end === 0 ? 'no bytes' : hexBytes(input.subarray(0, Math.min(end, magic))));
  }
  at = magic;

  /** Reads one field's header, checks its tag and that its payload fits; returns the payload's length. */
  const field = (tag: number): number => {
    const name = FIELD_NAMES[tag]!;
    if (end - at < FIELD_HEADER) {
      wrong(name, at, `tag 0x${tag.toString(16).padStart(2, '0')} and a u32le length (${FIELD_HEADER} bytes)`, end === at ? 'the end of the bytes' : `only ${end - at} bytes before the end`);
    }
    const got = input[at]!;
    if (got !== tag) {
      const what = FIELD_NAMES[got] === undefined ? 'no field' : FIELD_NAMES[got];
      wrong(name, at, `tag 0x${tag.toString(16).padStart(2, '0')}`, `tag 0x${got.toString(16).padStart(2, '0')} (${what})`);
    }
    const length = readU32(at + 1);
    at += FIELD_HEADER;
    if (length > end - at) wrong(name, at, `a payload of ${length} bytes`, `${end - at} bytes before the end (truncated)`);
    return length;
  };
  /** A UTF-8 run of `length` bytes at `at`, checked well-formed; moves past it. */
  const utf8 = (name: string, length: number, allowEmpty: boolean): void => {
    if (length === 0 && !allowEmpty) wrong(name, at, 'a non-empty string', 'length 0');
    if (!isUtf8(input.subarray(at, at + length))) wrong(name, at, 'well-formed UTF-8', `${length} bytes that are not`);
    at += length;
  };
  const u64Field = (tag: number): void => {
    const length = field(tag);
    if (length !== 8) wrong(FIELD_NAMES[tag]!, at - 4, 'the length 8 (a u64le)', `${length}`);
    at += 8;
  };

  for (const name of SOURCE_STRING_FIELDS) utf8(`source.${name}`, field(KEY_FIELD_TAGS[name]), false);

  const layoutLength = field(KEY_FIELD_TAGS.tokenLayout);
  if (layoutLength === 0 || layoutLength % 4 !== 0) {
    wrong('source.tokenLayout', at - 4, 'a non-zero multiple of 4 (u32le tokens)', `${layoutLength}`);
  }
  at += layoutLength;

  const extraLength = field(KEY_FIELD_TAGS.extra);
  const extraEnd = at + extraLength;
  /** One length-prefixed run inside the `extra` payload, checked; returns its bytes. */
  const extraRun = (name: string, allowEmpty: boolean): Buffer => {
    if (extraEnd - at < 4) wrong(name, at, 'a u32le length inside the extra payload', `${extraEnd - at} bytes left of it`);
    const length = readU32(at);
    at += 4;
    if (length > extraEnd - at) wrong(name, at, `${length} bytes inside the extra payload`, `${extraEnd - at} left of it`);
    const start = at;
    utf8(name, length, allowEmpty);
    return input.subarray(start, at);
  };
  let previous: Buffer | null = null;
  while (at < extraEnd) {
    const nameAt = at;
    const nameBytes = extraRun('source.extra (a name)', false);
    // Buffer's decoder keeps a leading U+FEFF, as the key's fields do.
    const name = nameBytes.toString('utf8');
    if (previous !== null && Buffer.compare(previous, nameBytes) >= 0) {
      wrong('source.extra (a name)', nameAt, `a name after ${JSON.stringify(previous.toString('utf8'))} in UTF-8 byte order (sorted, no repeats)`, JSON.stringify(name));
    }
    extraRun(`source.extra.${name}`, true);
    previous = nameBytes;
  }

  u64Field(KEY_FIELD_TAGS.sourcePageGeneration);
  utf8('codec', field(KEY_FIELD_TAGS.codec), false);
  utf8('codecConfig', field(KEY_FIELD_TAGS.codecConfig), false);
  u64Field(KEY_FIELD_TAGS.representationVersion);
  if (at !== end) wrong('bytes', at, `the end of the key (${at} bytes)`, `${end - at} more bytes`);

  // Every byte was checked to be the one the encoder writes for the fields it spells, so these
  // are the key's canonical bytes: the key keeps them as they are and hashes them once.
  return sealKey(input);
}
