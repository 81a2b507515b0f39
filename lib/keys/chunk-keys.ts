/**
 * Chained chunk keys (docs/engine-keys.md): the key form of engines that address KV as
 * fixed-size chunks (LMCache chunks, vLLM blocks, SGLang pages) under chained hashes.
 *
 * Each chunk is an ordinary WPK1 artifact key (docs/key-encoding.md) whose `tokenLayout` holds
 * only that chunk's tokens and whose `source.extra` names its parent chunk's digest, so the
 * digest of chunk i identifies the whole prefix up to and including chunk i while the key holds
 * at most one chunk of tokens. A {@link ChunkChain} is one session's chain: it keeps the last
 * digest, the digests so far and the unfinished tail (fewer than `chunkTokens` tokens), so the
 * next turn hashes only its own tokens.
 */
import { WaitprepError, invalidArgument } from '../errors.js';
import { artifactKey, encodeArtifactKey, keyStore, sealKey, sha256Hex, type ArtifactKey, type ArtifactKeyFields } from './key.js';
import { LITTLE_ENDIAN } from './key-fields.js';
import { writeAscii } from './ascii.js';
import { isPlainObject, ownField, rejectUnknownOptions } from '../internal/validate.js';
import { callerExtra, extraEntry, extraName, IDENTITY_DEFAULT_OPTIONS, type KeyIdentityDefaults } from './key-parts.js';

/** The `source.extra` name that holds a chunk's parent digest (64 lowercase hex; `""` for the first chunk). */
export const CHUNK_PARENT_FIELD = 'waitprep.parent';
/** The `source.extra` name that marks a manifest key; its value is the decimal chunk count. */
export const MANIFEST_FIELD = 'waitprep.manifest';
/** `source.extra` names starting with this are the package's own; a caller's extra may not use them. */
export { RESERVED_EXTRA_PREFIX } from './key-parts.js';
/** The largest `chunkTokens` a chain takes (2^20). */
export const MAX_CHUNK_TOKENS = 1 << 20;

/** The parts of the KV profile: what makes two engines' bytes for the same tokens differ. */
export interface ChunkProfile {
  /** Element type of the KV tensors, e.g. `bf16`, `fp8_e4m3`. */
  dtype: string;
  /** The engine's layout of one chunk's KV, e.g. `NHD`, `HND`, `mla`. */
  layout: string;
  /** Tensor-parallel degree: 1 or more. */
  tpDegree: number;
  /** This worker's tensor-parallel rank: 0 .. tpDegree-1. */
  rank: number;
}

/** What one chain's keys share. Every field but the profile is a WPK1 source or key field as given. */
export interface ChunkChainOptions extends KeyIdentityDefaults {
  runtime: string;
  model: string;
  /** The string `"none"` when there is no adapter (the default). */
  adapter?: string;
  profile: ChunkProfile;
  task: string;
  namespace: string;
  /** Tokens per full chunk: an integer in [1, 2^20]. */
  chunkTokens: number;
}

const OPTIONS = new Set(['runtime', 'model', 'adapter', 'profile', 'task', 'namespace', 'chunkTokens', ...IDENTITY_DEFAULT_OPTIONS]);
const PROFILE_OPTIONS = new Set(['dtype', 'layout', 'tpDegree', 'rank']);
/** A profile word: no `,` or `=`, so the profile string has exactly one reading. */
const PROFILE_WORD = /^[A-Za-z0-9_.:+\-/]{1,64}$/;
const TP_MAX = 65536;
const U32_MAX = 0xffff_ffff;

/**
 * The canonical `source.profile` string of a chunk profile:
 * `dtype=<dtype>,layout=<layout>,tp=<tpDegree>,rank=<rank>`. Throws `ERR_INVALID_ARGUMENT`
 * naming `profile.<part>` for a part that does not fit.
 */
export function chunkProfile(profile: ChunkProfile): string {
  if (!isPlainObject(profile)) throw invalidArgument('profile', 'an object { dtype, layout, tpDegree, rank }', profile);
  rejectUnknownOptions(profile, PROFILE_OPTIONS, 'profile');
  const word = (name: 'dtype' | 'layout'): string => {
    const value = ownField(profile, name);
    if (typeof value !== 'string' || !PROFILE_WORD.test(value)) {
      throw invalidArgument(`profile.${name}`, '1-64 of A-Z a-z 0-9 _ . : + - /', value);
    }
    return value;
  };
  const dtype = word('dtype');
  const layout = word('layout');
  const tp = ownField(profile, 'tpDegree');
  if (typeof tp !== 'number' || !Number.isInteger(tp) || tp < 1 || tp > TP_MAX) {
    throw invalidArgument('profile.tpDegree', `an integer in [1, ${TP_MAX}]`, tp);
  }
  const rank = ownField(profile, 'rank');
  if (typeof rank !== 'number' || !Number.isInteger(rank) || rank < 0 || rank >= tp) {
    throw invalidArgument('profile.rank', `an integer in [0, ${tp - 1}] (below tpDegree)`, rank);
  }
  return `dtype=${dtype},layout=${layout},tp=${tp},rank=${rank}`;
}

/** The session-wide parts of every chunk encoding, and the string fields as validated. */
interface Template {
  /** Magic and the eight source string fields. */
  head: Buffer;
  /** The caller's `extra` entries that sort before the parent entry (and so before the manifest marker too). */
  extraBefore: Buffer;
  /** The parent entry's name length and name. */
  parentName: Buffer;
  /** `extra` entries that sort after the parent entry. */
  extraAfter: Buffer;
  /** sourcePageGeneration, codec, codecConfig, representationVersion fields. */
  tail: Buffer;
}

/**
 * Cuts a session's template out of the package's own encoding of a probe key (one token, root
 * parent), so the bytes a chain writes are the bytes encodeArtifactKey writes by construction;
 * the constructor then checks that the two agree on the probe.
 */
function templateOf(probe: ArtifactKeyFields, userExtra: Readonly<Record<string, string>>): Template {
  const whole = Buffer.from(encodeArtifactKey(probe));
  let at = 4;
  for (let tag = 1; tag <= 8; tag++) at += 5 + whole.readUInt32LE(at + 1);
  const head = whole.subarray(0, at);
  at += 5 + whole.readUInt32LE(at + 1); // tokenLayout
  const extraLength = whole.readUInt32LE(at + 1);
  const tail = whole.subarray(at + 5 + extraLength);
  const parentName = Buffer.from(CHUNK_PARENT_FIELD, 'utf8');
  const names = Object.keys(userExtra).sort((a, b) => Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8')));
  const before = names.filter((n) => Buffer.compare(Buffer.from(n, 'utf8'), parentName) < 0);
  const after = names.filter((n) => Buffer.compare(Buffer.from(n, 'utf8'), parentName) > 0);
  return {
    head: Buffer.from(head),
    extraBefore: Buffer.concat(before.map((n) => extraEntry(n, userExtra[n]!))),
    parentName: extraName(CHUNK_PARENT_FIELD),
    extraAfter: Buffer.concat(after.map((n) => extraEntry(n, userExtra[n]!))),
    tail: Buffer.from(tail),
  };
}

/** A manifest marker entry's name length and name (its value, the count, follows). */
const MANIFEST_NAME = extraName(MANIFEST_FIELD);

/** A chunk key's encoding and where its manifest marker would go, for {@link manifestKey}. */
let chunkEncoding: (chunk: ChunkKey) => { bytes: Buffer; extraAt: number; markerAt: number };

/**
 * One chunk's key: its digest, its place in the chain, and its canonical encoding. It holds the
 * chunk's own tokens (inside the encoding) and nothing of the prefix before it but the parent's
 * digest. {@link ChunkKey.toArtifactKey} gives the {@link ArtifactKey} that the lease table and
 * the coordinator take; building it is deferred because keying a prompt needs only digests.
 */
export class ChunkKey {
  /** The chunk's position in its chain: 0 for the first. */
  readonly index: number;
  /** Tokens in this chunk: `chunkTokens`, or fewer for a partial tail. */
  readonly tokenCount: number;
  /** The digest as 64 lowercase hex characters. */
  readonly hex: string;
  /** The parent chunk's digest in hex; `''` for the first chunk. */
  readonly parentHex: string;
  /** True for a tail of fewer than `chunkTokens` tokens, which a later turn may still extend. */
  readonly partial: boolean;
  /** The canonical encoding, in a key store (key.ts) that {@link toArtifactKey} shares. */
  readonly #bytes: Buffer;
  /** Offsets in `#bytes`: the `extra` field's header, and where a manifest marker entry goes in its payload. */
  readonly #extraAt: number;
  readonly #markerAt: number;
  #key: ArtifactKey | null = null;

  /** @internal Made by {@link ChunkChain}. */
  constructor(index: number, tokenCount: number, partial: boolean, parentHex: string, bytes: Buffer, hex: string, extraAt: number, markerAt: number) {
    this.index = index;
    this.tokenCount = tokenCount;
    this.partial = partial;
    this.parentHex = parentHex;
    this.#bytes = bytes;
    this.hex = hex;
    this.#extraAt = extraAt;
    this.#markerAt = markerAt;
  }

  static {
    chunkEncoding = (chunk) => ({ bytes: chunk.#bytes, extraAt: chunk.#extraAt, markerAt: chunk.#markerAt });
  }

  /** SHA-256 of the chunk's canonical encoding: a fresh 32-byte copy. */
  get digest(): Uint8Array {
    return new Uint8Array(Buffer.from(this.hex, 'hex'));
  }

  /** The chunk's canonical WPK1 encoding (its wire form): a fresh copy. */
  toBytes(): Uint8Array {
    return new Uint8Array(this.#bytes);
  }

  /** The chunk's {@link ArtifactKey} (same digest), built on first call and kept; it shares the chunk's bytes, never hashes again. */
  toArtifactKey(): ArtifactKey {
    if (this.#key === null) this.#key = sealKey(this.#bytes, this.hex);
    return this.#key;
  }

  toString(): string {
    return `ChunkKey(#${this.index} ${this.hex.slice(0, 16)}…)`;
  }
}

/**
 * One session's chain of chunk keys. {@link ChunkChain.extend} takes the session's tokens turn
 * by turn and returns the keys of the chunks they complete; the unfinished tail waits for the
 * next turn ({@link ChunkChain.partial} keys it as it stands). The chain keeps the last chunk's key,
 * the list of its chunks' digests in hex (for {@link ChunkChain.digests}: a 64-character string a
 * chunk, about 80 bytes of heap each, so about 20 KB per 64k tokens in 256-token chunks) and at
 * most `chunkTokens - 1` pending tokens: never the prefix's tokens.
 */
export class ChunkChain {
  /** Tokens per full chunk. */
  readonly chunkTokens: number;
  /** The `source.profile` string every chunk carries ({@link chunkProfile}). */
  readonly profile: string;
  readonly #template: Template;
  readonly #pending: Uint32Array;
  #pendingCount = 0;
  #parentHex = '';
  #last: ChunkKey | null = null;
  readonly #digests: string[] = [];
  #hashedTokens = 0;

  /**
   * Validates `options` once: `ERR_INVALID_ARGUMENT` for the chain's own options (`chunkTokens`,
   * `profile.*`, a reserved or ill-typed `extra` name) and `ERR_INVALID_KEY`, naming the key
   * field, for a source string or number the key encoding refuses.
   */
  constructor(options: ChunkChainOptions) {
    if (!isPlainObject(options)) throw invalidArgument('options', 'an object of chunk chain options', options);
    rejectUnknownOptions(options, OPTIONS, 'options');
    const get = (name: string, fallback: unknown): unknown => {
      const value = ownField(options, name);
      return value === undefined ? fallback : value;
    };
    const chunkTokens = ownField(options, 'chunkTokens');
    if (typeof chunkTokens !== 'number' || !Number.isInteger(chunkTokens) || chunkTokens < 1 || chunkTokens > MAX_CHUNK_TOKENS) {
      throw invalidArgument('options.chunkTokens', `an integer in [1, ${MAX_CHUNK_TOKENS}]`, chunkTokens);
    }
    this.chunkTokens = chunkTokens;
    this.profile = chunkProfile(ownField(options, 'profile') as ChunkProfile);
    const userExtra = callerExtra(ownField(options, 'extra'));
    const probe: ArtifactKeyFields = {
      source: {
        snapshotKind: get('snapshotKind', 'kv-chunk') as string,
        runtime: ownField(options, 'runtime') as string,
        model: ownField(options, 'model') as string,
        adapter: get('adapter', 'none') as string,
        profile: this.profile,
        positionPolicy: get('positionPolicy', 'absolute') as string,
        task: ownField(options, 'task') as string,
        namespace: ownField(options, 'namespace') as string,
        tokenLayout: [0],
        extra: { ...userExtra, [CHUNK_PARENT_FIELD]: '' },
      },
      sourcePageGeneration: get('sourcePageGeneration', 0) as number,
      codec: get('codec', 'none') as string,
      codecConfig: get('codecConfig', 'none') as string,
      representationVersion: get('representationVersion', 1) as number,
    };
    // The package's validator judges every key field (and names it) exactly as artifactKey would.
    const reference = artifactKey(probe);
    this.#template = templateOf(probe, userExtra);
    if (this.#chunk(Uint32Array.of(0), '', false).hex !== reference.hex) throw new Error('waitprep internal: chunk template disagrees with encodeArtifactKey');
    this.#pending = new Uint32Array(chunkTokens);
  }

  /** Full chunks keyed so far. */
  get chunks(): number {
    return this.#digests.length;
  }

  /** Tokens waiting for the next turn to complete a chunk: always below `chunkTokens`. */
  get pendingTokens(): number {
    return this.#pendingCount;
  }

  /** Tokens hashed so far, over every {@link extend} and {@link partial}: how the chain shows that a turn hashes only its new tokens. */
  get hashedTokens(): number {
    return this.#hashedTokens;
  }

  /** The last full chunk's digest in hex; `''` before the first. */
  get lastHex(): string {
    return this.#parentHex;
  }

  /** The last full chunk's key, or `null` before the first. */
  get last(): ChunkKey | null {
    return this.#last;
  }

  /** The full chunks' digests in hex, in chain order: a fresh array. */
  digests(): string[] {
    return this.#digests.slice();
  }

  /**
   * Appends a turn's tokens (a `Uint32Array` or an array of integers in [0, 2^32-1]) and returns
   * the keys of the chunks they complete, in order. Tokens past the last full chunk are kept
   * until the next call. Throws `ERR_INVALID_KEY` naming `tokens[i]` for a bad token; the chain
   * is unchanged then.
   */
  extend(tokens: Uint32Array | readonly number[]): ChunkKey[] {
    const input = tokensOf(tokens);
    const size = this.chunkTokens;
    const out: ChunkKey[] = [];
    let i = 0;
    if (this.#pendingCount > 0) {
      const take = Math.min(size - this.#pendingCount, input.length);
      this.#pending.set(input.subarray(0, take), this.#pendingCount);
      this.#pendingCount += take;
      i = take;
      if (this.#pendingCount === size) {
        out.push(this.#commit(this.#pending));
        this.#pendingCount = 0;
      }
    }
    for (; input.length - i >= size; i += size) out.push(this.#commit(input.subarray(i, i + size)));
    if (i < input.length) {
      this.#pending.set(input.subarray(i), this.#pendingCount);
      this.#pendingCount += input.length - i;
    }
    return out;
  }

  /**
   * The key of the pending tail as it stands (a partial chunk chained to the last full one), or
   * `null` when nothing is pending. It is not part of the chain: the next {@link extend} may
   * still grow that chunk, and its key will differ.
   */
  partial(): ChunkKey | null {
    if (this.#pendingCount === 0) return null;
    const tokens = this.#pending.subarray(0, this.#pendingCount);
    this.#hashedTokens += tokens.length;
    return this.#chunk(tokens, this.#parentHex, true);
  }

  /**
   * The manifest key of the chain's full chunks so far (docs/engine-keys.md#manifests): the last
   * chunk's key fields with `extra["waitprep.manifest"]` set to the chunk count. Throws
   * `ERR_INVALID_ARGUMENT` before the first full chunk.
   */
  manifestKey(): ArtifactKey {
    if (this.#last === null) throw new WaitprepError('ERR_INVALID_ARGUMENT', 'manifestKey(): the chain has no full chunk yet', { field: 'chain' });
    return manifestKey(this.#last);
  }

  #commit(tokens: Uint32Array): ChunkKey {
    const key = this.#chunk(tokens, this.#parentHex, false);
    this.#hashedTokens += tokens.length;
    this.#digests.push(key.hex);
    this.#parentHex = key.hex;
    this.#last = key;
    return key;
  }

  /**
   * The next chunk's key: its canonical encoding, the template around its tokens and parent
   * written into one key store, and one SHA-256 of it.
   */
  #chunk(tokens: Uint32Array, parentHex: string, partial: boolean): ChunkKey {
    const t = this.#template;
    const extraLength = t.extraBefore.length + t.parentName.length + 4 + parentHex.length + t.extraAfter.length;
    const total = t.head.length + 5 + tokens.length * 4 + 5 + extraLength + t.tail.length;
    const out = keyStore(total);
    let at = t.head.copy(out, 0);
    out[at] = 0x09;
    out.writeUInt32LE(tokens.length * 4, at + 1);
    at += 5;
    if (LITTLE_ENDIAN) {
      out.set(new Uint8Array(tokens.buffer, tokens.byteOffset, tokens.byteLength), at);
      at += tokens.byteLength;
    } else {
      for (let k = 0; k < tokens.length; k++, at += 4) out.writeUInt32LE(tokens[k]!, at);
    }
    const extraAt = at;
    out[at] = 0x0a;
    out.writeUInt32LE(extraLength, at + 1);
    at += 5;
    at += t.extraBefore.copy(out, at);
    const markerAt = at;
    at += t.parentName.copy(out, at);
    out.writeUInt32LE(parentHex.length, at);
    at += 4;
    at = writeAscii(out, at, parentHex); // 64 hex digits, or none
    at += t.extraAfter.copy(out, at);
    at += t.tail.copy(out, at);
    if (at !== total) throw new Error(`waitprep internal: chunk encoding wrote ${at} of ${total} bytes`);
    return new ChunkKey(this.#digests.length, tokens.length, partial, parentHex, out, sha256Hex(out), extraAt, markerAt);
  }
}

function tokensOf(value: Uint32Array | readonly number[]): Uint32Array {
  if (value instanceof Uint32Array) return value;
  if (!Array.isArray(value)) throw invalidArgument('tokens', 'a Uint32Array or an array of integers in [0, 2^32-1]', value, 'ERR_INVALID_KEY');
  const out = new Uint32Array(value.length);
  for (let i = 0; i < value.length; i++) {
    const t: unknown = value[i];
    if (typeof t !== 'number' || !Number.isInteger(t) || t < 0 || t > U32_MAX) throw invalidArgument(`tokens[${i}]`, 'an integer token in [0, 2^32-1]', t, 'ERR_INVALID_KEY');
    out[i] = t;
  }
  return out;
}

/**
 * The keys of one prompt, without a session: the full chunks, and the partial tail's key (or
 * `null` when the prompt fills its last chunk).
 */
export function chunkKeys(options: ChunkChainOptions, tokens: Uint32Array | readonly number[]): { chunks: ChunkKey[]; partial: ChunkKey | null } {
  const chain = new ChunkChain(options);
  const chunks = chain.extend(tokens);
  return { chunks, partial: chain.partial() };
}

/**
 * The manifest key of the prefix that ends with `last` (a full or partial chunk): `last`'s key
 * fields with `extra["waitprep.manifest"]` = the chunk count (`last.index + 1`). It holds only
 * `last`'s tokens; its digest identifies the whole prefix through `last`'s parent chain, and the
 * marker keeps it apart from every chunk key.
 */
export function manifestKey(last: ChunkKey): ArtifactKey {
  if (!(last instanceof ChunkKey)) throw invalidArgument('last', 'a ChunkKey', last);
  // The chunk's encoding with one more `extra` entry, written straight into the manifest key's
  // store and hashed once: no key is decoded or re-validated. The marker's entry goes just before
  // the parent entry: the two names share the reserved prefix and the marker's sorts first, and a
  // caller's name cannot start with that prefix, so none sorts between them.
  const { bytes, extraAt, markerAt } = chunkEncoding(last);
  const count = String(last.index + 1);
  const entry = MANIFEST_NAME.length + 4 + count.length;
  const out = keyStore(bytes.length + entry);
  bytes.copy(out, 0, 0, markerAt);
  let at = markerAt + MANIFEST_NAME.copy(out, markerAt);
  out.writeUInt32LE(count.length, at);
  at += 4;
  at = writeAscii(out, at, count);
  bytes.copy(out, at, markerAt);
  out.writeUInt32LE(bytes.readUInt32LE(extraAt + 1) + entry, extraAt + 1);
  return sealKey(out);
}

/** True when `key` is a manifest key (its `extra` carries the manifest marker). */
export function isManifestKey(key: ArtifactKey): boolean {
  return Object.hasOwn(key.source.extra, MANIFEST_FIELD);
}
