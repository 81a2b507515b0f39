// The worker side of a PreparationDriver: the module piscina loads in each of
// the pool's worker threads (the driver points piscina's `filename` at this
// file's compiled dist/driver/worker.js). It runs on worker threads only, and
// imports only the protocol, errors and key-fields: nothing here touches the
// coordinator or hashes, and the key arrives as its bytes, from which the task's
// plain form is read here, off the coordinator's thread.
import { threadId } from 'node:worker_threads';
import { describe } from '../errors.js';
import { plainFieldsOf } from '../keys/key-fields.js';
import { RUNNING, DEADLINE, STATE, THREAD, toRemoteError, type Envelope, type PrepareContext, type PreparationTask, type WorkerReply } from './protocol.js';

/**
 * @internal Piscina's entry (`WORKER_EXPORT`): loads the user's module,
 * bridges the shared flag to an AbortSignal, runs `prepare`. A `prepare` that
 * throws is an answer (`ok: false`); a module that cannot be loaded, or does
 * not export a function, rejects: the unit counts as crashed.
 */
export async function runPreparation(envelope: Envelope): Promise<WorkerReply> {
  const { module, flag, task: posted } = envelope;
  Atomics.store(flag, THREAD, threadId);
  // The key's canonical encoding, moved here, or for a long key its store shared with the main
  // thread: copied first, so `prepare` gets bytes of its own and the key stays immutable.
  const keyBytes = posted.keyBytes.buffer instanceof SharedArrayBuffer ? new Uint8Array(posted.keyBytes) : posted.keyBytes;
  const key = plainFieldsOf(keyBytes);
  // The plain form's `extra` has no prototype (as toFields() gives it); a task that crossed as a
  // structured clone had an ordinary object there, and prepare modules may rely on that.
  key.source.extra = Object.fromEntries(Object.entries(key.source.extra));
  const task: PreparationTask = {
    id: posted.id,
    keyHex: posted.keyHex,
    key,
    keyBytes,
    readiness: posted.readiness,
    target: posted.target,
    grant: posted.grant,
  };
  const prepare = await loadPrepare(module);
  // Asked to stop before it started (it waited in the pool's queue): the first safe boundary is now.
  if (Atomics.load(flag, STATE) !== RUNNING) return { ok: false, error: toRemoteError(stopReason(Atomics.load(flag, STATE), task.id)) };
  const controller = new AbortController();
  /** Fires the signal once the flag is set; true when it is. */
  const fire = (): boolean => {
    const state = Atomics.load(flag, STATE);
    if (state === RUNNING) return false;
    if (!controller.signal.aborted) controller.abort(stopReason(state, task.id));
    return true;
  };
  // aborted() fires the signal itself, so `aborted() === true` implies `signal.aborted`
  // even before the waitAsync below has had an event-loop turn to notice.
  const aborted = fire;
  const waiting = (Atomics as unknown as AtomicsWaitAsync).waitAsync(flag, STATE, RUNNING);
  if (waiting.async) void waiting.value.then(fire);
  else fire();
  try {
    const value: unknown = await prepare(task, Object.freeze({ signal: controller.signal, aborted }));
    if (value !== undefined && value !== null && (typeof value === 'object' || typeof value === 'function')) {
      try {
        structuredClone(value);
      } catch (error) {
        return { ok: false, error: toRemoteError(new TypeError(`prepare() resolved to a value that cannot cross threads: ${(error as Error).message}`)) };
      }
    }
    return { ok: true, value };
  } catch (error) {
    return { ok: false, error: toRemoteError(error) };
  } finally {
    // Wake our own waitAsync so no waiter outlives the unit; it sees RUNNING (or a late stop) and is done.
    Atomics.notify(flag, STATE);
  }
}

interface AtomicsWaitAsync {
  waitAsync(array: Int32Array, index: number, value: number): { async: false; value: string } | { async: true; value: Promise<string> };
}

type PrepareFunction = (task: PreparationTask, context: PrepareContext) => unknown;
/** One import per module per thread: a thread runs many units. */
const loaded = new Map<string, Promise<PrepareFunction>>();

function loadPrepare(module: string): Promise<PrepareFunction> {
  let prepare = loaded.get(module);
  if (prepare === undefined) {
    prepare = import(module).then((namespace: { default?: unknown }) => {
      if (typeof namespace.default !== 'function') {
        throw new TypeError(`Expected ${module} to export a default function prepare(task, { signal, aborted }), got ${describe(namespace.default)}`);
      }
      return namespace.default as PrepareFunction;
    });
    loaded.set(module, prepare);
  }
  return prepare;
}

function stopReason(state: number, id: string): DOMException {
  return state === DEADLINE
    ? new DOMException(`Unit ${id} ran past its deadline; stop at a safe boundary`, 'TimeoutError')
    : new DOMException(`Every consumer of unit ${id} left; stop at a safe boundary`, 'AbortError');
}
