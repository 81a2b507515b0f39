/**
 * Engine keys (docs/engine-keys.md#engine-keys-keys-without-tokens): the waitprep digest of an
 * artifact computed from nothing but what an engine's storage interface is handed. No engine
 * hands its storage layer tokens: vLLM's offloading manager gets an `OffloadKey` (a block hash
 * and a KV-group index), SGLang's HiCache storage a page key (a hex string), LMCache's storage
 * plugins a `CacheEngineKey` (model, world size, worker, an integer chunk hash, dtype). Each of
 * those hashes is chained over the prompt's tokens by the engine itself, so it stands for the
 * ordered token layout: an engine key is an ordinary WPK1 key (docs/key-encoding.md) whose
 * `tokenLayout` is the single token 0 and whose `source.extra` carries the engine's name and its
 * hash. Every other field of the identity (runtime, model, adapter, profile with TP degree and
 * rank, position policy, task, namespace, page generation, codec and its config, representation
 * version) is as a chunk chain writes it, from the keyer's options.
 */
import { WaitprepError, invalidArgument } from '../errors.js';
import { writeAscii } from './ascii.js';
import { isPlainObject, ownField, rejectUnknownOptions } from '../internal/validate.js';
import { chunkProfile, type ChunkProfile } from './chunk-keys.js';
import { callerExtra, extraEntry, extraName, IDENTITY_DEFAULT_OPTIONS, type KeyIdentityDefaults } from './key-parts.js';
import { artifactKey, encodeArtifactKey, keyStore, sealKey, type ArtifactKey, type ArtifactKeyFields } from './key.js';

/** The engines whose storage keys an {@link EngineKeys} turns into digests. */
export type EngineName = 'vllm' | 'sglang' | 'lmcache';

/** `source.extra` name holding the engine's name (`vllm`, `sglang`, `lmcache`). */
export const ENGINE_FIELD = 'waitprep.engine';
/** `source.extra` name holding the engine's hash as text: the hash that stands for the token layout. */
export const ENGINE_HASH_FIELD = 'waitprep.engine-hash';
/** `source.extra` name holding a vLLM key's KV-group index, in decimal. */
export const KV_GROUP_FIELD = 'waitprep.kv-group';
/** The token layout every engine key carries: the engine's hash stands for the real one. */
export const ENGINE_KEY_TOKENS: readonly number[] = Object.freeze([0]);

const ENGINES = new Set<string>(['vllm', 'sglang', 'lmcache']);

/** What one keyer's keys share: a chunk chain's options without `chunkTokens`, and the rank rule. */
export interface EngineKeyOptions extends KeyIdentityDefaults {
  runtime: string;
  model: string;
  /** The string `"none"` when there is no adapter (the default). */
  adapter?: string;
  profile: ChunkProfile;
  task: string;
  namespace: string;
  /**
   * True when every tensor-parallel rank holds the same bytes (MLA's latent KV): the profile is
   * then written with TP degree 1 and rank 0, the bytes an unsharded engine holds, so every rank
   * computes the same digest and finds the one copy. Default false.
   */
  sharedAcrossRanks?: boolean;
}

const OPTIONS = new Set(['runtime', 'model', 'adapter', 'profile', 'task', 'namespace', 'sharedAcrossRanks', ...IDENTITY_DEFAULT_OPTIONS]);
const DECIMAL = /^-?(0|[1-9][0-9]*)$/;
const U32_MAX = 0xffff_ffff;

const HASH_NAME = extraName(ENGINE_HASH_FIELD);
const GROUP_NAME = extraName(KV_GROUP_FIELD);

/**
 * The lowercase hex of a vLLM `OffloadKey`'s block hash and its KV-group index: the key is the
 * block hash followed by the group as 4 big-endian bytes (vLLM's `make_offload_key`).
 */
export function splitOffloadKey(offloadKey: Uint8Array): { blockHashHex: string; group: number } {
  if (!(offloadKey instanceof Uint8Array) || offloadKey.length < 5) {
    throw invalidArgument('engineKey', "a vLLM OffloadKey: a block hash of at least 1 byte, then the KV-group index as 4 big-endian bytes", offloadKey, 'ERR_INVALID_KEY');
  }
  const n = offloadKey.length;
  const group = ((offloadKey[n - 4]! << 24) >>> 0) + (offloadKey[n - 3]! << 16) + (offloadKey[n - 2]! << 8) + offloadKey[n - 1]!;
  return { blockHashHex: Buffer.from(offloadKey.buffer, offloadKey.byteOffset, n - 4).toString('hex'), group };
}

/** vLLM's `make_offload_key(block_hash, group_idx)`: the block hash, then the group as a 4-byte big-endian integer. */
export function vllmOffloadKey(blockHash: Uint8Array, group: number): Uint8Array {
  if (!(blockHash instanceof Uint8Array) || blockHash.length === 0) throw invalidArgument('blockHash', 'a non-empty Uint8Array', blockHash);
  if (typeof group !== 'number' || !Number.isInteger(group) || group < 0 || group > U32_MAX) {
    throw invalidArgument('group', 'an integer in [0, 2^32-1]', group);
  }
  const out = new Uint8Array(blockHash.length + 4);
  out.set(blockHash, 0);
  new DataView(out.buffer).setUint32(blockHash.length, group, false);
  return out;
}

/**
 * One engine deployment's keyer: turns each storage key its engine hands it into the
 * {@link ArtifactKey} a producer publishes under and a consumer pins. The options are checked once,
 * as a chunk chain checks its own (`ERR_INVALID_ARGUMENT` for `profile.*`, `sharedAcrossRanks`
 * and reserved `extra` names; `ERR_INVALID_KEY` naming the key field otherwise).
 */
export class EngineKeys {
  /** The engine whose keys this keyer takes. */
  readonly engine: EngineName;
  /** The `source.profile` every key carries. */
  readonly profile: string;
  /** Magic, the eight source strings and the token layout `[0]`. */
  readonly #head: Buffer;
  /** The caller's `extra` entries that sort before the reserved ones, then the engine entry and the hash entry's name. */
  readonly #before: Buffer;
  /** The caller's `extra` entries that sort after the reserved ones. */
  readonly #after: Buffer;
  /** sourcePageGeneration, codec, codecConfig, representationVersion fields. */
  readonly #tail: Buffer;
  readonly #probe: ArtifactKeyFields;

  constructor(engine: EngineName, options: EngineKeyOptions) {
    if (typeof engine !== 'string' || !ENGINES.has(engine)) throw invalidArgument('engine', "'vllm', 'sglang' or 'lmcache'", engine);
    if (!isPlainObject(options)) throw invalidArgument('options', 'an object of engine key options', options);
    rejectUnknownOptions(options, OPTIONS, 'options');
    this.engine = engine;
    const get = (name: string, fallback: unknown): unknown => {
      const value = ownField(options, name);
      return value === undefined ? fallback : value;
    };
    const shared = get('sharedAcrossRanks', false);
    if (typeof shared !== 'boolean') throw invalidArgument('options.sharedAcrossRanks', 'a boolean', shared);
    const profile = ownField(options, 'profile') as ChunkProfile;
    this.profile = chunkProfile(profile);
    if (shared) this.profile = chunkProfile({ ...profile, tpDegree: 1, rank: 0 });
    const userExtra = callerExtra(ownField(options, 'extra'));
    const reserved: Record<string, string> = { [ENGINE_FIELD]: engine, [ENGINE_HASH_FIELD]: '0' };
    if (engine === 'vllm') reserved[KV_GROUP_FIELD] = '0';
    this.#probe = {
      source: {
        snapshotKind: get('snapshotKind', 'kv-chunk') as string,
        runtime: ownField(options, 'runtime') as string,
        model: ownField(options, 'model') as string,
        adapter: get('adapter', 'none') as string,
        profile: this.profile,
        positionPolicy: get('positionPolicy', 'absolute') as string,
        task: ownField(options, 'task') as string,
        namespace: ownField(options, 'namespace') as string,
        tokenLayout: [...ENGINE_KEY_TOKENS],
        extra: { ...userExtra, ...reserved },
      },
      sourcePageGeneration: get('sourcePageGeneration', 0) as number,
      codec: get('codec', 'none') as string,
      codecConfig: get('codecConfig', 'none') as string,
      representationVersion: get('representationVersion', 1) as number,
    };
    // The package's validator judges every key field (and names it) exactly as artifactKey would.
    const reference = artifactKey(this.#probe);
    // Cut the session-wide bytes out of the package's own encoding of the probe, so the bytes a
    // keyer writes are the ones encodeArtifactKey writes by construction; checked on the probe below.
    const whole = Buffer.from(encodeArtifactKey(this.#probe));
    let at = 4;
    for (let tag = 1; tag <= 9; tag++) at += 5 + whole.readUInt32LE(at + 1);
    this.#head = Buffer.from(whole.subarray(0, at));
    this.#tail = Buffer.from(whole.subarray(at + 5 + whole.readUInt32LE(at + 1)));
    // Every reserved name starts with the reserved prefix and no caller name does, so the
    // caller's names sort wholly before or wholly after the reserved block (by UTF-8 bytes).
    const bytesOf = (name: string): Buffer => Buffer.from(name, 'utf8');
    const names = Object.keys(userExtra).sort((a, b) => Buffer.compare(bytesOf(a), bytesOf(b)));
    const first = bytesOf(ENGINE_FIELD);
    this.#before = Buffer.concat([
      ...names.filter((n) => Buffer.compare(bytesOf(n), first) < 0).map((n) => extraEntry(n, userExtra[n]!)),
      extraEntry(ENGINE_FIELD, engine),
      HASH_NAME,
    ]);
    this.#after = Buffer.concat(names.filter((n) => Buffer.compare(bytesOf(n), first) > 0).map((n) => extraEntry(n, userExtra[n]!)));
    const probeKey = engine === 'vllm' ? this.#seal('0', '0') : this.#seal('0', null);
    if (probeKey.hex !== reference.hex) throw new Error('waitprep internal: engine key template disagrees with encodeArtifactKey');
  }

  /**
   * The key of one storage key of this keyer's engine: for vLLM an `OffloadKey` (a `Uint8Array`:
   * the block hash, then the KV-group index as 4 big-endian bytes); for SGLang a page key (a
   * non-empty string, taken as given); for LMCache a `CacheEngineKey`'s `chunk_hash` (an integer:
   * a bigint, a safe-integer number, or its decimal string; negative hashes are allowed). Throws
   * `ERR_INVALID_KEY` naming `engineKey` for anything else.
   */
  key(engineKey: Uint8Array | string | bigint | number): ArtifactKey {
    const [hashText, group] = this.#hashText(engineKey);
    return this.#seal(hashText, group);
  }

  /** The WPK1 fields of {@link key}'s key: what `artifactKey()` builds the same key from. */
  fields(engineKey: Uint8Array | string | bigint | number): ArtifactKeyFields {
    const [hashText, group] = this.#hashText(engineKey);
    const source = this.#probe.source;
    const extra: Record<string, string> = { ...source.extra, [ENGINE_HASH_FIELD]: hashText };
    if (group !== null) extra[KV_GROUP_FIELD] = group;
    return { ...this.#probe, source: { ...source, tokenLayout: [...ENGINE_KEY_TOKENS], extra } };
  }

  #hashText(engineKey: unknown): [string, string | null] {
    switch (this.engine) {
      case 'vllm': {
        const { blockHashHex, group } = splitOffloadKey(engineKey as Uint8Array);
        return [blockHashHex, String(group)];
      }
      case 'sglang':
        if (typeof engineKey !== 'string' || engineKey.length === 0 || !engineKey.isWellFormed()) {
          throw invalidArgument('engineKey', 'an SGLang page key: a non-empty, well-formed string', engineKey, 'ERR_INVALID_KEY');
        }
        return [engineKey, null];
      default: {
        if (typeof engineKey === 'bigint') return [engineKey.toString(), null];
        if (typeof engineKey === 'number' && Number.isSafeInteger(engineKey)) return [String(engineKey), null];
        if (typeof engineKey === 'string' && DECIMAL.test(engineKey) && engineKey !== '-0') return [engineKey, null];
        throw invalidArgument('engineKey', "an LMCache chunk hash: an integer (a bigint, a safe-integer number, or its decimal string)", engineKey, 'ERR_INVALID_KEY');
      }
    }
  }

  /** The key around `hashText` (and a vLLM group): the template's bytes and one SHA-256. */
  #seal(hashText: string, group: string | null): ArtifactKey {
    const hash = Buffer.from(hashText, 'utf8');
    let extraLength = this.#before.length + 4 + hash.length + this.#after.length;
    if (group !== null) extraLength += GROUP_NAME.length + 4 + group.length;
    if (extraLength > U32_MAX) throw new WaitprepError('ERR_INVALID_KEY', 'Expected `engineKey` to fit a key, got one too long', { field: 'engineKey' });
    const total = this.#head.length + 5 + extraLength + this.#tail.length;
    const out = keyStore(total);
    let at = this.#head.copy(out, 0);
    out[at] = 0x0a;
    out.writeUInt32LE(extraLength, at + 1);
    at += 5;
    at += this.#before.copy(out, at);
    out.writeUInt32LE(hash.length, at);
    at += 4;
    at += hash.copy(out, at);
    if (group !== null) {
      at += GROUP_NAME.copy(out, at);
      out.writeUInt32LE(group.length, at);
      at = writeAscii(out, at + 4, group);
    }
    at += this.#after.copy(out, at);
    at += this.#tail.copy(out, at);
    if (at !== total) throw new Error(`waitprep internal: engine key encoding wrote ${at} of ${total} bytes`);
    return sealKey(out);
  }
}
