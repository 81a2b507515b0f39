// What the two sides of a PreparationDriver share: the main thread (driver.ts)
// and the piscina worker threads (worker.ts) import this module and nothing of
// each other. Three things cross between them, and all three are defined here:
//
//   main ──Envelope──▶ worker      posted by piscina once per unit: cloned, but for the key's
//                                   bytes, which are transferred
//   main ◀─WorkerReply── worker    a plain answer; a rejection means the worker could not run the unit
//   main ◀─Int32Array flag─▶ worker  shared memory, the only thing either side writes after the start
//
// Only errors.ts is imported at run time (the other imports are types), so a
// worker thread loads no coordinator, key or lease-table code; worker.ts adds
// key-fields.ts, which reads a key's plain form out of its bytes (no hashing).
import { describe } from '../errors.js';
import type { ArtifactKeyPlainFields } from '../keys/key.js';
import type { ResourceGrant } from '../types.js';

/**
 * What `prepare` receives: plain data of the issued unit. The key comes in both
 * of its forms (docs/key-encoding.md): `key`, the plain form, to read fields
 * without decoding anything, and `keyBytes`, the wire form, to forward across a
 * process boundary as it is or to turn back into an `ArtifactKey` with
 * `decodeArtifactKey(task.keyBytes)` (whose `hex` equals `keyHex`).
 *
 * The main thread posts it without `key` (a {@link PostedTask}) and moves or
 * shares `keyBytes` rather than cloning it; the worker side reads `key` out of
 * those bytes before it calls `prepare`. So the key's tokens are never cloned,
 * and copied on the coordinator's thread only for a short key (into `keyBytes`).
 */
export interface PreparationTask {
  /** The issued unit's id. */
  readonly id: string;
  /** The key's digest as 64 lowercase hex characters. */
  readonly keyHex: string;
  /** The key's plain form, `key.toFields()`: `artifactKey(task.key)` rebuilds the same key. */
  readonly key: ArtifactKeyPlainFields;
  /** The key's wire form, `key.toBytes()`: the canonical encoding its digest is the SHA-256 of. */
  readonly keyBytes: Uint8Array;
  /** `'host'` or `'device'`. */
  readonly readiness: 'host' | 'device';
  /** For `'device'`: the target, arena and generation as bigints. Else `null`. */
  readonly target: { readonly device: string; readonly arena: bigint; readonly arenaGeneration: bigint } | null;
  /** The grant the unit was issued against. */
  readonly grant: ResourceGrant;
}

/**
 * The second argument of `prepare`, in the worker. Stop early by throwing at a
 * safe boundary (`signal.throwIfAborted()`): a `prepare` that returns has
 * published its artifact, even if it was asked to stop.
 */
export interface PrepareContext {
  /**
   * Aborts when every consumer of the unit left (reason: an `AbortError`) or
   * the unit ran past its deadline (a `TimeoutError`). It fires from the
   * worker's event loop, so a synchronous CPU loop should poll `aborted()`.
   */
  readonly signal: AbortSignal;
  /** The same flag, read synchronously from shared memory: cheap enough for every chunk. */
  readonly aborted: () => boolean;
}

// The per-unit shared flag: FLAG_WORDS int32 words.
//
//   word 0  STATE   RUNNING (0) until the main thread asks the worker to stop:
//                   CANCELLED (1) when every consumer left, DEADLINE (2) past the deadline.
//   word 1  THREAD  the threadId of the worker that took the unit (0 until then).
//
// Only the main thread writes STATE (one compare-exchange from RUNNING, then a
// notify), and only the worker writes THREAD. The worker reads STATE with
// Atomics.load (aborted()) and waits on it with Atomics.waitAsync (signal).
// Seq-cst Atomics throughout: one store per unit, nothing to gain from weaker.
export const FLAG_WORDS = 2;
export const STATE = 0;
export const THREAD = 1;
export const RUNNING = 0;
export const CANCELLED = 1;
export const DEADLINE = 2;

/** The worker module's export piscina calls (its `name` option). */
export const WORKER_EXPORT = 'runPreparation';

/**
 * A {@link PreparationTask} as the main thread posts it: without `key`, and with `keyBytes`
 * either over its own `ArrayBuffer`, which goes in the post's transfer list, or (a long key) a
 * view of the key's shared store, which the worker side copies before anything else reads it.
 */
export type PostedTask = Omit<PreparationTask, 'key'>;

/** What the worker side receives from piscina. */
export interface Envelope {
  /** The user's `prepare` module, as a `file:` URL. */
  module: string;
  flag: Int32Array;
  task: PostedTask;
}

/** A `prepare` error as plain data: Error objects lose their `code` and custom names crossing threads. */
export interface RemoteError {
  name: string;
  message: string;
  stack?: string;
  code?: string;
}

/** What the worker side answers. A rejection instead means the worker could not run the unit. */
export type WorkerReply = { ok: true; value: unknown } | { ok: false; error: RemoteError };

/** In the worker: whatever `prepare` threw, as a {@link RemoteError}. Never throws itself. */
export function toRemoteError(error: unknown): RemoteError {
  try {
    if (typeof error === 'object' && error !== null && typeof (error as { message?: unknown }).message === 'string') {
      const { name, message, stack, code } = error as { name?: unknown; message: string; stack?: unknown; code?: unknown };
      const out: RemoteError = { name: typeof name === 'string' ? name : 'Error', message };
      if (typeof stack === 'string') out.stack = stack;
      if (typeof code === 'string') out.code = code;
      return out;
    }
    return { name: 'Error', message: `prepare() threw a non-error: ${describe(error)}` };
  } catch {
    return { name: 'Error', message: 'prepare() threw something that could not be described' };
  }
}

/** On the main thread: a {@link RemoteError} as an Error again, with its name, stack and code. */
export function reviveError(remote: RemoteError): Error & { code?: string } {
  const error: Error & { code?: string } = new Error(remote.message);
  error.name = remote.name;
  if (remote.stack !== undefined) error.stack = remote.stack;
  if (remote.code !== undefined) error.code = remote.code;
  return error;
}
