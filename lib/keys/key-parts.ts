/**
 * Byte pieces of the canonical key encoding (docs/key-encoding.md) that the keyers which write
 * encodings straight into a key's store (ChunkChain, EngineKeys) build their templates from, and
 * the check of a caller's `extra` they share: one definition, so the two cannot drift apart.
 */
import { invalidArgument } from '../errors.js';
import { isPlainObject } from '../internal/validate.js';

/** The identity fields with defaults that ChunkChain's and EngineKeys' options share. */
export interface KeyIdentityDefaults {
  /** Default `'kv-chunk'`. */
  snapshotKind?: string;
  /** Default `'absolute'`. */
  positionPolicy?: string;
  /** The caller's own identity fields; names may not start with `waitprep.`. */
  extra?: Readonly<Record<string, string>>;
  /** Default 0. */
  sourcePageGeneration?: number | bigint;
  /** Default `'none'`. */
  codec?: string;
  /** Default `'none'`. */
  codecConfig?: string;
  /** Default 1. */
  representationVersion?: number | bigint;
}

/** Their option names, for the keyers' unknown-option checks. */
export const IDENTITY_DEFAULT_OPTIONS = ['snapshotKind', 'positionPolicy', 'extra', 'sourcePageGeneration', 'codec', 'codecConfig', 'representationVersion'] as const;

/** The package's own `extra` names start with this; a caller's may not. */
export const RESERVED_EXTRA_PREFIX = 'waitprep.';

/** `value` as 4 little-endian bytes. */
export function u32le(value: number): Buffer {
  const out = Buffer.allocUnsafe(4);
  out.writeUInt32LE(value, 0);
  return out;
}

/** An `extra` entry's name header: its UTF-8 length, then its bytes (the value follows). */
export function extraName(name: string): Buffer {
  const n = Buffer.from(name, 'utf8');
  return Buffer.concat([u32le(n.length), n]);
}

/** A whole `extra` entry: the name header, then the value's UTF-8 length and bytes. */
export function extraEntry(name: string, value: string): Buffer {
  const v = Buffer.from(value, 'utf8');
  return Buffer.concat([extraName(name), u32le(v.length), v]);
}

/**
 * The caller's `options.extra` as a prototype-less record (so a name such as `__proto__` is an
 * entry like any other, as in artifactKey()), refusing names the package reserves. The values are
 * checked later, with the rest of the key, by the package's own encoder.
 */
export function callerExtra(given: unknown): Record<string, string> {
  const extra = Object.create(null) as Record<string, string>;
  if (given === undefined) return extra;
  if (!isPlainObject(given)) throw invalidArgument('options.extra', 'an object of string -> string', given);
  for (const [name, value] of Object.entries(given)) {
    if (name.startsWith(RESERVED_EXTRA_PREFIX)) throw invalidArgument(`options.extra.${name}`, `absent (names starting with "${RESERVED_EXTRA_PREFIX}" are the package's own)`, value);
    extra[name] = value as string;
  }
  return extra;
}
