// The main-thread side of the preparation driver: PreparationDriver, which
// pulls units from the coordinator on its thread and hands them to a piscina
// pool. What runs in the pool's threads is worker.ts; what the two share (the
// task, the reply, the shared flag) is protocol.ts.
import { dirname, isAbsolute, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { Worker } from 'node:worker_threads';
import { Piscina } from 'piscina';
import { WaitprepError, describe, invalidArgument } from '../errors.js';
import type { IssuedWorkUnit, WaitCoordinator } from '../coordinator/coordinator.js';
import { sharedKeyBytes } from '../keys/key.js';
import type { ResourceGrant, WaitTicket } from '../types.js';
import { isObject, ownField, ownOptions, rejectUnknownOptions } from '../internal/validate.js';
import {
  CANCELLED,
  DEADLINE,
  FLAG_WORDS,
  RUNNING,
  STATE,
  THREAD,
  WORKER_EXPORT,
  reviveError,
  type Envelope,
  type PostedTask,
  type WorkerReply,
} from './protocol.js';

/**
 * Where resource grants come from. The driver asks for one only when the
 * coordinator has a queued unit and fewer than the driver's `maxInFlight`
 * units are in flight (one at a time, by default), and gives it back
 * once the worker that used it has stopped running (not when the unit was
 * reported: a unit failed by its deadline may still be running, and still
 * holds what it was granted).
 */
export interface GrantSource {
  /**
   * A grant for one unit, or `null` when none is available now (the driver
   * then waits for the next {@link PreparationDriver.poke}). A promise is
   * awaited; it may settle later, when a grant frees up.
   */
  acquire(): ResourceGrant | null | Promise<ResourceGrant | null>;
  /** Gives back a grant `acquire` handed out. Called once per grant. */
  release(grant: ResourceGrant): void;
}

/** The worker pool of a {@link PreparationDriver}: a piscina pool of worker_threads. */
export interface PreparationWorkerOptions {
  /**
   * The ESM module that prepares a unit, as an absolute path or a `file:` URL.
   * Its default export is `async function prepare(task, { signal, aborted })`:
   * see {@link PreparationTask} and {@link PrepareContext}.
   */
  filename: string | URL;
  /** Threads kept even when idle. Default 1. */
  minThreads?: number;
  /**
   * Most threads. Default max(maxInFlight + 1, minThreads): one per unit in flight, one for a
   * unit that ran past its deadline and is still draining. Make it at least the number
   * of grants the source can hand out at once, or a unit may wait in the
   * pool's queue (its deadline counts from when it was handed to the pool).
   */
  maxThreads?: number;
  /** Milliseconds an idle thread above `minThreads` lives. Default piscina's (0). */
  idleTimeout?: number;
  /** Passed to each worker as `workerData` (structured-cloned; SharedArrayBuffers are shared). */
  workerData?: unknown;
  /** Worker environment (piscina `env`). */
  env?: Record<string, string>;
  /** Worker `execArgv`. */
  execArgv?: string[];
  /** Worker heap limits (worker_threads `resourceLimits`). */
  resourceLimits?: { maxOldGenerationSizeMb?: number; maxYoungGenerationSizeMb?: number; codeRangeSizeMb?: number; stackSizeMb?: number };
}

/** Options of {@link PreparationDriver}. Unknown options are rejected. */
export interface PreparationDriverOptions {
  /** The coordinator whose units this driver prepares. Construct the driver on its thread. */
  coordinator: WaitCoordinator<WaitTicket | number>;
  /** Where resource grants come from. */
  grants: GrantSource;
  /** The worker pool that runs `prepare`. */
  worker: PreparationWorkerOptions;
  /**
   * Milliseconds a unit may run, counted from when it is handed to the pool.
   * Past it the unit is completed as failed (`ERR_DEADLINE`) at once, so the
   * coordinator can issue the next one, and the worker is told to stop at its
   * safe boundary; its eventual result is ignored. Default: no deadline.
   */
  deadlineMs?: number;
  /**
   * At the deadline, terminate the worker instead of letting it drain. Only
   * for preparation that is safe to cut off mid-write. Needs `deadlineMs`.
   * Default false.
   */
  killOnDeadline?: boolean;
  /** Called on the coordinator's thread after each unit is reported with `complete`. */
  onSettled?: (report: PreparationReport) => void;
  /**
   * Opt-in: most units it keeps in flight at once, each against its own grant (default 1, as
   * the coordinator's). Give the coordinator the same `maxInFlight`; a PausePlanner's
   * `unitsInFlight` (a share of the tier's bandwidth over one unit's) is the figure to use.
   */
  maxInFlight?: number;
}

/** How a unit ended, as the driver reported it to the coordinator. */
export type PreparationResult = 'succeeded' | 'failed' | 'crashed' | 'deadline' | 'closed';

/** One unit's report, passed to `onSettled` after `complete`. */
export interface PreparationReport {
  /** The unit. */
  readonly work: IssuedWorkUnit;
  /**
   * `succeeded`: `prepare` returned. `failed`: it threw (including a stop at a
   * safe boundary). `crashed`: the worker died or could not run it (the pool
   * replaces a dead worker). `deadline`: it ran past `deadlineMs`. `closed`:
   * `close({ force: true })` terminated it.
   */
  readonly result: PreparationResult;
  /** `null` when it succeeded; else `ERR_PREPARE_FAILED`, `ERR_WORKER_CRASHED`, `ERR_DEADLINE` or `ERR_CLOSED`, with `cause`. */
  readonly error: WaitprepError | null;
  /** What `prepare` resolved to (structured-cloned), when it succeeded. */
  readonly value: unknown;
  /** What `coordinator.complete` answered. */
  readonly completion: 'applied' | 'stale';
  /** The worker thread that took the unit, or `null` when none had yet. */
  readonly threadId: number | null;
}

/** Counters (since construction) and a gauge of a {@link PreparationDriver}. */
export interface PreparationDriverStats {
  /** Units handed to the pool. */
  started: number;
  /** Units whose `prepare` returned. */
  succeeded: number;
  /** Units whose `prepare` threw. */
  failed: number;
  /** Units whose worker died or could not run them. */
  crashed: number;
  /** Units failed by their deadline. */
  deadlines: number;
  /** Units terminated by `close({ force: true })`. */
  closed: number;
  /** Results that came after their unit was already reported (past its deadline), or that `complete` called stale; ignored. */
  stale: number;
  /** Worker errors the pool raised outside any unit (a worker that died while idle); the pool replaces the worker. */
  workerErrors: number;
  /** Workers running a unit now, including units already failed by their deadline. */
  running: number;
}

/** One unit from `beginNext` until its worker stops running. */
interface Unit {
  readonly work: IssuedWorkUnit;
  readonly grant: ResourceGrant;
  readonly flag: Int32Array;
  readonly kill: AbortController | null;
  readonly onAbort: () => void;
  timer: ReturnType<typeof setTimeout> | null;
  /** Set once the unit was reported with `complete` (by its result, its deadline or a forced close). */
  reported: boolean;
}

const OPTION_NAMES = new Set(['coordinator', 'grants', 'worker', 'deadlineMs', 'killOnDeadline', 'onSettled', 'maxInFlight']);
/** The most units a driver keeps in flight: the coordinator's own bound. */
const MAX_IN_FLIGHT_LIMIT = 1024;
const WORKER_OPTION_NAMES = new Set(['filename', 'minThreads', 'maxThreads', 'idleTimeout', 'workerData', 'env', 'execArgv', 'resourceLimits']);

/**
 * @internal The worker side's JavaScript file, `dist/driver/worker.js`, which
 * piscina loads by path in each thread. Loaded from the TypeScript sources (as
 * the tests do), this module still points at the compiled file: build first.
 */
export const WORKER_FILENAME = ((): string => {
  const here = fileURLToPath(import.meta.url);
  return here.endsWith('.ts') ? join(dirname(here), '..', '..', 'dist', 'driver', 'worker.js') : join(dirname(here), 'worker.js');
})();

/**
 * Drives a {@link WaitCoordinator}'s units through a pool of worker_threads
 * (piscina): when a unit is queued, fewer than `maxInFlight` (default 1) are in
 * flight and the grant source grants, it issues the unit with
 * `beginNext(grant)`, runs `prepare` in a worker, and reports `complete` back
 * on the coordinator's thread.
 *
 * Preparation never runs on the event loop, and nothing here calls the
 * coordinator from inside another coordinator call: `poke()` only schedules,
 * and every `beginNext` and `complete` runs from a microtask, a timer or a
 * promise callback. The only work done inside a coordinator call is the
 * abort listener on `work.signal` (an atomic store and notify), so `onWake`
 * and `onCancel` are never slowed by it.
 *
 * Cancellation drains: when the unit's last consumer leaves, `work.signal`
 * aborts and the worker sees it through shared memory (`aborted()`, or its own
 * `signal`), stops at its safe boundary and reports. Nothing is terminated
 * unless `killOnDeadline` or `close({ force: true })` says so.
 */
export class PreparationDriver {
  readonly #coordinator: WaitCoordinator<WaitTicket | number>;
  readonly #grants: GrantSource;
  readonly #pool: Piscina<Envelope, WorkerReply>;
  readonly #module: string;
  readonly #deadlineMs: number | null;
  readonly #killOnDeadline: boolean;
  readonly #onSettled: ((report: PreparationReport) => void) | null;
  readonly #maxInFlight: number;
  /** The units not yet reported: at most `maxInFlight`. */
  readonly #units = new Set<Unit>();
  #acquiring = false;
  #scheduled = false;
  /**
   * Set when `beginNext` gave nothing while units were queued (the coordinator is at its own
   * `maxInFlight`): the coordinator's completed + failed count then. Until a unit completes, a
   * poke (a grant source's release pokes) does not ask for a grant again, or the two would spin.
   */
  #stalledAt = -1;
  #closed = false;
  #forcing = false;
  #idleWaiters: Array<() => void> = [];
  readonly #stats: PreparationDriverStats = {
    started: 0, succeeded: 0, failed: 0, crashed: 0, deadlines: 0, closed: 0, stale: 0, workerErrors: 0, running: 0,
  };

  constructor(options: PreparationDriverOptions) {
    if (!isObject(options)) throw invalidArgument('options', 'an object { coordinator, grants, worker, … }', options);
    rejectUnknownOptions(options, OPTION_NAMES, '');
    // Own properties only: an option inherited from a polluted Object.prototype is not the caller's.
    const { coordinator, grants, worker, deadlineMs, killOnDeadline, onSettled, maxInFlight } = ownOptions(options);
    if (!isObject(coordinator) || typeof coordinator.beginNext !== 'function' || typeof coordinator.complete !== 'function') {
      throw invalidArgument('coordinator', 'a WaitCoordinator', coordinator);
    }
    if (!isObject(grants) || typeof grants.acquire !== 'function' || typeof grants.release !== 'function') {
      throw invalidArgument('grants', 'an object { acquire(), release(grant) }', grants);
    }
    if (deadlineMs !== undefined && (typeof deadlineMs !== 'number' || !(deadlineMs > 0) || !Number.isFinite(deadlineMs))) {
      throw invalidArgument('deadlineMs', 'a finite number > 0', deadlineMs);
    }
    if (killOnDeadline !== undefined && typeof killOnDeadline !== 'boolean') throw invalidArgument('killOnDeadline', 'a boolean', killOnDeadline);
    if (killOnDeadline === true && deadlineMs === undefined) throw invalidArgument('killOnDeadline', 'set only with deadlineMs', killOnDeadline);
    if (onSettled !== undefined && typeof onSettled !== 'function') throw invalidArgument('onSettled', 'a function', onSettled);
    if (maxInFlight !== undefined && (!Number.isSafeInteger(maxInFlight) || maxInFlight < 1 || maxInFlight > MAX_IN_FLIGHT_LIMIT)) {
      throw invalidArgument('maxInFlight', `an integer in [1, ${MAX_IN_FLIGHT_LIMIT}]`, maxInFlight);
    }
    this.#maxInFlight = maxInFlight ?? 1;
    this.#coordinator = coordinator;
    this.#grants = grants;
    this.#deadlineMs = deadlineMs ?? null;
    this.#killOnDeadline = killOnDeadline ?? false;
    this.#onSettled = onSettled ?? null;
    this.#module = moduleUrl(worker);
    const { filename: _, minThreads = 1, maxThreads = Math.max(this.#maxInFlight + 1, minThreads), ...rest } = ownOptions(worker);
    if (!Number.isSafeInteger(minThreads) || minThreads < 0) throw invalidArgument('worker.minThreads', 'a non-negative integer', minThreads);
    if (!Number.isSafeInteger(maxThreads) || maxThreads < Math.max(1, minThreads)) {
      throw invalidArgument('worker.maxThreads', `an integer >= max(1, minThreads = ${minThreads})`, maxThreads);
    }
    this.#pool = new Piscina<Envelope, WorkerReply>({ filename: WORKER_FILENAME, name: WORKER_EXPORT, minThreads, maxThreads, ...rest });
    // Without a listener an idle worker's death would be an uncaught 'error'.
    // The pool replaces the worker; no unit was running on it.
    this.#pool.on('error', () => {
      this.#stats.workerErrors++;
    });
  }

  /**
   * Asks the driver to look for work: call it after `onWait` queued a unit and
   * when the grant source has a grant again. Cheap and safe anywhere, even
   * inside a coordinator or backend call: it only schedules a microtask, and
   * several pokes before it runs are one.
   */
  poke(): void {
    if (this.#closed || this.#scheduled) return;
    this.#scheduled = true;
    queueMicrotask(this.#pump);
  }

  /**
   * Stops pulling work, then destroys the pool. By default it first waits
   * until no worker runs a unit: the unit in flight finishes (and is reported)
   * as usual, and a worker past its deadline reaches its safe boundary. With
   * `force`, workers are terminated now and the unit in flight is reported as
   * failed (`ERR_CLOSED`). The coordinator is not shut down.
   */
  async close(options: { force?: boolean } = {}): Promise<void> {
    if (!isObject(options)) throw invalidArgument('options', 'an object { force? }', options);
    this.#closed = true;
    if (ownField(options, 'force') === true) {
      this.#forcing = true;
      await this.#pool.destroy();
      await this.#idle();
    } else {
      await this.#idle();
      await this.#pool.destroy();
    }
  }

  /** Counters and the running gauge; a fresh object each call. */
  stats(): PreparationDriverStats {
    return { ...this.#stats };
  }

  /** The pool's worker threads now, for diagnostics (a fresh array). */
  get threads(): readonly Worker[] {
    return [...this.#pool.threads];
  }

  #idle(): Promise<void> {
    if (this.#stats.running === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  /**
   * Issues the next unit if one is queued, fewer than `maxInFlight` are in flight (the
   * coordinator's count: a unit failed by its deadline no longer counts) and a grant comes.
   * One grant is asked for at a time; each unit started pokes for the next.
   */
  readonly #pump = (): void => {
    this.#scheduled = false;
    if (this.#closed || this.#acquiring || this.#units.size >= this.#maxInFlight) return;
    const coordinator = this.#coordinator;
    if (coordinator.closed) return;
    const { queued, inFlight, completed, failed } = coordinator.stats();
    if (queued === 0 || inFlight >= this.#maxInFlight) return;
    if (this.#stalledAt === completed + failed) return;
    this.#stalledAt = -1;
    let granted: ResourceGrant | null | Promise<ResourceGrant | null>;
    try {
      granted = this.#grants.acquire();
    } catch (error) {
      throwLater(error);
      return;
    }
    if (isObject(granted) && typeof (granted as { then?: unknown }).then === 'function') {
      this.#acquiring = true;
      (granted as Promise<ResourceGrant | null>).then(
        (grant) => {
          this.#acquiring = false;
          this.#begin(grant);
        },
        (error: unknown) => {
          this.#acquiring = false;
          throwLater(error);
        },
      );
    } else {
      this.#begin(granted as ResourceGrant | null);
    }
  };

  #begin(grant: ResourceGrant | null): void {
    if (grant === null || grant === undefined) return;
    let work: IssuedWorkUnit | null;
    try {
      // The queue may have emptied, or the driver closed, while an asynchronous grant came.
      work = this.#closed || this.#units.size >= this.#maxInFlight ? null : this.#coordinator.beginNext(grant);
    } catch (error) {
      this.#release(grant);
      throwLater(error);
      return;
    }
    if (work === null) {
      const { queued, completed, failed } = this.#coordinator.stats();
      if (queued > 0) this.#stalledAt = completed + failed;
      this.#release(grant);
      return;
    }
    this.#start(work, grant);
    // Room for another: ask for its grant.
    this.poke();
  }

  #start(work: IssuedWorkUnit, grant: ResourceGrant): void {
    const flag = new Int32Array(new SharedArrayBuffer(FLAG_WORDS * Int32Array.BYTES_PER_ELEMENT));
    const unit: Unit = {
      work,
      grant,
      flag,
      kill: this.#killOnDeadline ? new AbortController() : null,
      onAbort: () => raise(flag, CANCELLED),
      timer: null,
      reported: false,
    };
    this.#units.add(unit);
    this.#stats.started++;
    this.#stats.running++;
    // The abort fires inside onWake/onCancel: the listener only stores and notifies.
    const signal = work.signal;
    if (signal.aborted) unit.onAbort();
    else signal.addEventListener('abort', unit.onAbort, { once: true });
    const { task, transferList } = postOf(work);
    const envelope: Envelope = { module: this.#module, flag, task };
    const run = this.#pool.run(envelope, { signal: unit.kill?.signal ?? null, transferList });
    if (this.#deadlineMs !== null) unit.timer = setTimeout(() => this.#onDeadline(unit), this.#deadlineMs);
    run.then(
      (reply) => this.#onRunEnded(unit, reply, null),
      (error: unknown) => this.#onRunEnded(unit, null, error),
    );
  }

  #onDeadline(unit: Unit): void {
    unit.timer = null;
    if (unit.reported) return;
    this.#stats.deadlines++;
    const error = new WaitprepError('ERR_DEADLINE', `Unit ${unit.work.id} ran past its ${this.#deadlineMs} ms deadline`);
    if (unit.kill !== null) unit.kill.abort(error);
    else raise(unit.flag, DEADLINE);
    this.#report(unit, 'deadline', error, undefined);
  }

  /** The worker stopped running the unit: report it unless that happened already, give back the grant. */
  #onRunEnded(unit: Unit, reply: WorkerReply | null, rejection: unknown): void {
    if (unit.timer !== null) clearTimeout(unit.timer);
    unit.timer = null;
    if (unit.reported) {
      // Past its deadline, or terminated by a forced close already reported.
      // A worker we killed ending is no news; anything else is a late result.
      if (!(unit.kill?.signal.aborted ?? false) && !this.#forcing) this.#stats.stale++;
    } else if (reply !== null && reply.ok) {
      this.#stats.succeeded++;
      this.#report(unit, 'succeeded', null, reply.value);
    } else if (reply !== null) {
      this.#stats.failed++;
      const cause = reviveError(reply.error);
      this.#report(unit, 'failed', new WaitprepError('ERR_PREPARE_FAILED', `prepare() failed for unit ${unit.work.id}: ${cause.message}`, { cause }), undefined);
    } else if (this.#forcing) {
      this.#stats.closed++;
      this.#report(unit, 'closed', new WaitprepError('ERR_CLOSED', `The driver was closed with force while unit ${unit.work.id} ran`, { cause: rejection }), undefined);
    } else {
      this.#stats.crashed++;
      const message = rejection instanceof Error ? rejection.message : describe(rejection);
      this.#report(unit, 'crashed', new WaitprepError('ERR_WORKER_CRASHED', `The worker running unit ${unit.work.id} failed before reporting: ${message}`, { cause: rejection }), undefined);
    }
    this.#stats.running--;
    this.#release(unit.grant);
    if (this.#stats.running === 0) {
      const waiters = this.#idleWaiters;
      this.#idleWaiters = [];
      for (const resolve of waiters) resolve();
    }
    this.poke();
  }

  /** Completes the unit on the coordinator, once, and tells `onSettled`. */
  #report(unit: Unit, result: PreparationResult, error: WaitprepError | null, value: unknown): void {
    unit.reported = true;
    unit.work.signal.removeEventListener('abort', unit.onAbort);
    this.#units.delete(unit);
    const completion = this.#coordinator.complete(unit.work, error === null ? { ok: true } : { ok: false, error });
    if (completion === 'stale') this.#stats.stale++;
    const thread = Atomics.load(unit.flag, THREAD);
    if (this.#onSettled !== null) {
      const report: PreparationReport = Object.freeze({ work: unit.work, result, error, value, completion, threadId: thread === 0 ? null : thread });
      try {
        this.#onSettled(report);
      } catch (e) {
        throwLater(e);
      }
    }
    this.poke();
  }

  #release(grant: ResourceGrant): void {
    try {
      this.#grants.release(grant);
    } catch (error) {
      throwLater(error);
    }
  }
}

/** Asks the worker to stop: the first reason sticks. */
function raise(flag: Int32Array, state: number): void {
  if (Atomics.compareExchange(flag, STATE, RUNNING, state) === RUNNING) Atomics.notify(flag, STATE);
}

/**
 * What the driver posts to a pool thread for a unit: plain data, no class
 * instances, and the post's transfer list. The key goes only as its canonical
 * bytes: cloning its plain form as well would copy every token twice more on
 * this thread (into the plain form, then into the message). A short key's
 * bytes are a fresh `key.toBytes()`, moved (the transfer list holds its
 * buffer); a long key's are its shared store itself, which costs no copy here
 * and which the worker side copies before `prepare` sees it (worker.ts). The
 * worker side then reads the plain form out of the bytes, without hashing or
 * validating (they are the key's own encoding), and `prepare` gets both forms.
 */
export function postOf(work: IssuedWorkUnit): { task: PostedTask; transferList: ArrayBuffer[] } {
  const { key, target } = work;
  const shared = sharedKeyBytes(key);
  const keyBytes = shared ?? key.toBytes();
  const task: PostedTask = {
    id: work.id,
    keyHex: key.hex,
    keyBytes,
    readiness: work.readiness,
    target: target === null ? null : { device: target.device, arena: BigInt(target.arena), arenaGeneration: BigInt(target.arenaGeneration) },
    grant: { worker: work.grant.worker, grant: work.grant.grant },
  };
  return { task, transferList: shared === null ? [keyBytes.buffer as ArrayBuffer] : [] };
}

function moduleUrl(worker: unknown): string {
  if (!isObject(worker)) throw invalidArgument('worker', 'an object { filename, … }', worker);
  rejectUnknownOptions(worker, WORKER_OPTION_NAMES, 'worker');
  const filename = ownField(worker, 'filename');
  if (filename instanceof URL) {
    if (filename.protocol !== 'file:') throw invalidArgument('worker.filename', 'an absolute path or a file: URL', filename.href);
    return filename.href;
  }
  if (typeof filename === 'string' && filename.startsWith('file:')) return new URL(filename).href;
  if (typeof filename !== 'string' || !isAbsolute(filename)) throw invalidArgument('worker.filename', 'an absolute path or a file: URL', filename);
  return pathToFileURL(filename).href;
}

/** Surfaces an error from a callback we cannot return it to: a grant source or `onSettled` that throws is a bug. */
function throwLater(error: unknown): void {
  queueMicrotask(() => {
    throw error;
  });
}
