/**
 * The fields of an artifact key: their types, and reading them back out of a canonical encoding
 * (docs/key-encoding.md) that was already checked.
 *
 * An {@link ArtifactKey} keeps only its encoding and digest and reads its fields from the
 * encoding when they are first asked for; a preparation worker thread rebuilds a task's plain
 * form from the key bytes it was handed. Both read bytes this package wrote or
 * `decodeArtifactKey` accepted, so nothing here checks them again, and nothing here imports the
 * key code, the hash or the errors: a worker thread loads this module alone.
 */

/**
 * The fields of an artifact's identity, as the runtime knows them. See
 * docs/key-encoding.md for how they become bytes and a digest.
 */
export interface ArtifactKeyFields {
  source: {
    snapshotKind: string;
    runtime: string;
    model: string;
    /** The string `"none"` when there is no adapter. */
    adapter: string;
    profile: string;
    positionPolicy: string;
    task: string;
    namespace: string;
    /** The ordered token layout; order matters. Tokens are uint32. */
    tokenLayout: Uint32Array | readonly number[];
    /** Extra runtime identity fields; part of identity. Empty equals absent. */
    extra?: Readonly<Record<string, string>>;
  };
  sourcePageGeneration: number | bigint;
  codec: string;
  codecConfig: string;
  representationVersion: number | bigint;
}

/**
 * The plain form of a key: what {@link ArtifactKey.toFields} returns, and what
 * {@link artifactKey} accepts back (`artifactKey(k.toFields())` equals `k`).
 * It is an {@link ArtifactKeyFields} with each choice made one way, so that
 * every key has exactly one plain form:
 *
 * - `sourcePageGeneration` and `representationVersion` are bigints (never numbers);
 * - `source.tokenLayout` is a fresh `Uint32Array` of the tokens, in layout order;
 * - `source.extra` is always present: a fresh object without a prototype (so a
 *   name such as `__proto__` is an ordinary entry), empty when the key has none.
 *
 * Every part is structured-cloneable, so it crosses to a worker thread as it is
 * (where `extra` arrives as an ordinary object). It is not JSON: bigints and the
 * `Uint32Array` do not survive `JSON.stringify`; across a process boundary send
 * the wire form, {@link ArtifactKey.toBytes}.
 */
export interface ArtifactKeyPlainFields extends ArtifactKeyFields {
  source: ArtifactKeyFields['source'] & { tokenLayout: Uint32Array; extra: Record<string, string> };
  sourcePageGeneration: bigint;
  representationVersion: bigint;
}

/** The identity fields of a key's source, without the token layout (see {@link ArtifactKey.tokenLayout}). */
export interface ArtifactKeySource {
  readonly snapshotKind: string;
  readonly runtime: string;
  readonly model: string;
  readonly adapter: string;
  readonly profile: string;
  readonly positionPolicy: string;
  readonly task: string;
  readonly namespace: string;
  readonly extra: Readonly<Record<string, string>>;
}

/** The source's string fields, in encoding order (tags 0x01-0x08). */
export const SOURCE_STRING_FIELDS = [
  'snapshotKind',
  'runtime',
  'model',
  'adapter',
  'profile',
  'positionPolicy',
  'task',
  'namespace',
] as const;

/** Magic (4 bytes) and one field header (tag u8, length u32le) before the first field's payload. */
const MAGIC = 4;
const HEADER = 5;
/** Whether this machine stores a u32 little-endian, as the encoding does. */
export const LITTLE_ENDIAN = new Uint8Array(Uint32Array.of(1).buffer)[0] === 1;
// ignoreBOM keeps a leading U+FEFF, as Buffer's decoder (and the key's writer) does.
const utf8 = new TextDecoder('utf-8', { ignoreBOM: true });

/** The little-endian u32 at `bytes[at..at+4)`. */
export function u32At(bytes: Uint8Array, at: number): number {
  return (bytes[at]! | (bytes[at + 1]! << 8) | (bytes[at + 2]! << 16) | (bytes[at + 3]! << 24)) >>> 0;
}

/** Where the token layout's payload starts in a canonical encoding, past the eight source strings. */
export function tokensOffset(bytes: Uint8Array): number {
  let at = MAGIC;
  for (let i = 0; i < SOURCE_STRING_FIELDS.length; i++) at += HEADER + u32At(bytes, at + 1);
  return at + HEADER;
}

/** A fresh `Uint32Array` of the `count` tokens whose payload starts at `at`. */
export function tokensAt(bytes: Uint8Array, at: number, count: number): Uint32Array {
  const tokens = new Uint32Array(count);
  if (LITTLE_ENDIAN) new Uint8Array(tokens.buffer).set(bytes.subarray(at, at + count * 4));
  else for (let i = 0; i < count; i++) tokens[i] = u32At(bytes, at + 4 * i);
  return tokens;
}

/** A key's fields as read from its encoding, every part fresh; the layout as its offset and count. */
export interface KeyParts {
  strings: Record<(typeof SOURCE_STRING_FIELDS)[number], string>;
  /** The `extra` entries in encoding order (by name bytes), on an object without a prototype; `null` when there are none. */
  extra: Record<string, string> | null;
  tokensAt: number;
  tokenCount: number;
  sourcePageGeneration: bigint;
  codec: string;
  codecConfig: string;
  representationVersion: bigint;
}

/** Reads every field of a canonical encoding that was already checked (see the module comment). */
export function readKeyParts(bytes: Uint8Array): KeyParts {
  let at = MAGIC;
  const payload = (): number => {
    const length = u32At(bytes, at + 1);
    at += HEADER;
    return length;
  };
  const text = (length: number): string => {
    const value = utf8.decode(bytes.subarray(at, at + length));
    at += length;
    return value;
  };
  /** One length-prefixed run inside the `extra` payload. */
  const run = (): string => {
    const length = u32At(bytes, at);
    at += 4;
    return text(length);
  };
  const u64 = (): bigint => {
    payload();
    const value = BigInt(u32At(bytes, at)) | (BigInt(u32At(bytes, at + 4)) << 32n);
    at += 8;
    return value;
  };
  const strings = {} as KeyParts['strings'];
  for (const name of SOURCE_STRING_FIELDS) strings[name] = text(payload());
  const layoutBytes = payload();
  const tokensAt = at;
  at += layoutBytes;
  const extraEnd = payload() + at;
  let extra: Record<string, string> | null = null;
  while (at < extraEnd) {
    extra ??= Object.create(null) as Record<string, string>;
    const name = run();
    extra[name] = run();
  }
  const sourcePageGeneration = u64();
  const codec = text(payload());
  const codecConfig = text(payload());
  const representationVersion = u64();
  return { strings, extra, tokensAt, tokenCount: layoutBytes / 4, sourcePageGeneration, codec, codecConfig, representationVersion };
}

/** The plain form ({@link ArtifactKeyPlainFields}) of a canonical encoding that was already checked: every part fresh and mutable. */
export function plainFieldsOf(bytes: Uint8Array): ArtifactKeyPlainFields {
  const p = readKeyParts(bytes);
  return {
    source: { ...p.strings, tokenLayout: tokensAt(bytes, p.tokensAt, p.tokenCount), extra: p.extra ?? (Object.create(null) as Record<string, string>) },
    sourcePageGeneration: p.sourcePageGeneration,
    codec: p.codec,
    codecConfig: p.codecConfig,
    representationVersion: p.representationVersion,
  };
}
