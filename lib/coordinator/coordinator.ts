import { randomBytes } from 'node:crypto';
// Imported, not read as the global: the global `performance` is an accessor, a slow global load per unit.
import { performance } from 'node:perf_hooks';
import { WaitprepError, describe, invalidArgument } from '../errors.js';
import { assertArtifactKey, type ArtifactKey } from '../keys/key.js';
import { currentThreadId } from './thread.js';
import {
  beginChannel,
  cancelChannel,
  completeChannel,
  overloadChannel,
  shutdownChannel,
  staleChannel,
  waitChannel,
  wakeChannel,
  type BeginMessage,
  type CancelMessage,
  type CompleteMessage,
  type OverloadMessage,
  type ShutdownMessage,
  type StaleMessage,
  type WaitMessage,
  type WakeMessage,
} from './diagnostics.js';
import { checkConsumer } from './consumer.js';
import { normalizeTarget } from '../lease-table/device-target.js';
import { isObject, nonNegativeInteger, ownField, ownMethod, ownOptions, rejectUnknownOptions } from '../internal/validate.js';
import { MISS } from './miss-reasons.js';
import { COMPLETED, FAILED, IDLE, IN_FLIGHT, NONE, NO_OUTCOME, QUEUED, DemandTable } from './demand-table.js';
import { HOST } from '../internal/host.js';
import { WaitSlots, firstTicketNumber } from './wait-slots.js';
import type {
  ArtifactBackend,
  Consumer,
  CoordinatorStats,
  DeviceTarget,
  Lease,
  Miss,
  Outcome,
  Readiness,
  ReadinessRequest,
  ResourceGrant,
  WaitAdmission,
  WaitOptions,
  WaitStatus,
  WaitTicket,
  WakeResult,
  WorkUnit,
} from '../types.js';

/** Options of {@link WaitCoordinator}. Every bound is explicit; unknown options are rejected. */
export interface WaitCoordinatorOptions<Ticket extends WaitTicket | number = WaitTicket> {
  /** Where wakes pin ready artifacts. */
  backend: ArtifactBackend;
  /** Most units waiting in the FIFO (inclusive). */
  maxQueued: number;
  /** Most consumers waiting at once (inclusive), at most 1,000,000,000. */
  maxWaiting: number;
  /** Most terminal (completed/failed) entries remembered, at most 1,000,000,000; oldest go first; 0 keeps none. */
  historyLimit: number;
  /** Clock in milliseconds for `IssuedWorkUnit.issuedAt`. Default `performance.now`. */
  now?: () => number;
  /**
   * Opt-in: most units in flight at once, issued in FIFO order (default 1: one
   * unit at a time keeps preparation from competing with itself for the tier's bandwidth). Each unit still needs its own `beginNext` grant.
   */
  maxInFlight?: number;
  /**
   * Opt-in: the form of the tickets `onWait` issues (default `'string'`). `'number'` issues
   * safe-integer tickets, which make the wait-to-wake cycle cheaper (bench:coordinator, docs/benchmarks.md);
   * declare the coordinator `WaitCoordinator<number>` to have them typed so.
   */
  tickets?: TicketForm<Ticket>;
}

/** The `tickets` option that issues tickets of type `Ticket`. */
export type TicketForm<Ticket extends WaitTicket | number> = Ticket extends number ? 'number' : 'string';

/** A coordinator typed to issue numbers must be given `tickets: 'number'`, so the type cannot lie. */
type TicketsGiven<Ticket extends WaitTicket | number> = [Ticket] extends [number] ? { tickets: 'number' } : unknown;

/** Fires a unit's abort (module-private: only the coordinator aborts units). */
let abortIssuedWork: (work: IssuedWorkUnit) => void;
/** Whether a unit's abort has fired. */
let wasAborted: (work: IssuedWorkUnit) => boolean;

/**
 * A unit as the coordinator issued it. Its `signal` is made on first read:
 * most of what a cycle allocates is the AbortSignal, and a worker that never
 * looks at it should not pay for it. An abort before the first read yields an
 * already-aborted signal, so nothing is lost either way.
 */
export class IssuedWorkUnit implements WorkUnit {
  /** Unique per coordinator, never reused; `complete` matches on it. */
  readonly id: string;
  /** The artifact to prepare: one complete, independently publishable unit. */
  readonly key: ArtifactKey;
  /** The readiness the consumers asked for. */
  readonly readiness: Readiness;
  /** The device target for `readiness: 'device'`, else `null`. */
  readonly target: DeviceTarget | null;
  /** The grant this unit was issued against (a frozen copy). */
  readonly grant: ResourceGrant;
  /** `now()` when `beginNext` issued it. */
  readonly issuedAt: number;
  #controller: AbortController | null = null;
  #aborted = false;

  /** @internal Issued by {@link WaitCoordinator.beginNext}. */
  constructor(id: string, key: ArtifactKey, want: ReadinessRequest, grant: ResourceGrant, issuedAt: number) {
    this.id = id;
    this.key = key;
    this.readiness = want.readiness;
    this.target = want.readiness === 'device' ? want.target : null;
    this.grant = grant;
    this.issuedAt = issuedAt;
    Object.freeze(this);
  }

  /** Aborts when the unit's last consumer leaves; the worker may stop at its own safe boundary. */
  get signal(): AbortSignal {
    if (this.#controller === null) {
      this.#controller = new AbortController();
      if (this.#aborted) this.#controller.abort();
    }
    return this.#controller.signal;
  }

  static {
    wasAborted = (work) => work.#aborted;
    abortIssuedWork = (work) => {
      if (work.#aborted) return;
      work.#aborted = true;
      work.#controller?.abort();
    };
  }
}

/** The contract's name for {@link IssuedWorkUnit}, kept as an alias: the same class type. */
export type IssuedWorkTicket = IssuedWorkUnit;

const OPTION_NAMES: ReadonlySet<keyof WaitCoordinatorOptions> = new Set(['backend', 'maxQueued', 'maxWaiting', 'historyLimit', 'now', 'maxInFlight', 'tickets']);
/** The most units `maxInFlight` may allow: `complete` walks the units in flight. */
const MAX_IN_FLIGHT_LIMIT = 1024;

/** The most consumers a coordinator can hold; wait slots and demand records are Int32-numbered. */
const MAX_WAITING_LIMIT = 1_000_000_000;

function rejected(reason: string): WaitAdmission<never> {
  return Object.freeze({ status: 'rejected', reason });
}
function overloaded(reason: string): WaitAdmission<never> {
  return Object.freeze({ status: 'overloaded', reason });
}
const REJECT_SHUTDOWN = rejected('shutdown');
const REJECT_STALE_GENERATION = rejected('stale-generation');
const REJECT_PERSISTED = rejected('persisted-not-ready');
const REJECT_READINESS = rejected('unsupported-readiness');
const REJECT_MISSING_TARGET = rejected('missing-target');
const REJECT_INVALID_TARGET = rejected('invalid-target');
/** After 2^52 ticket numbers: none is ever issued twice, so no more waits. */
const REJECT_EXHAUSTED = rejected('tickets-exhausted');
const OVERLOAD_QUEUE = overloaded('queue-full');
const OVERLOAD_WAITING = overloaded('too-many-waiting');
const MISS_STALE = MISS['stale-ticket'];
const MISS_BACKEND_ERROR = MISS['backend-error'];
const MISS_IDENTITY = MISS['identity-mismatch'];
const MISS_READINESS = MISS['readiness-mismatch'];
/** The shared frozen misses by reason, so a wake allocates none for a reason waitprep gives. */
const MISSES = new Map<string, Miss>(Object.entries(MISS));
/** Distinct miss reasons counted by name; a bound, since a backend chooses the strings. */
const MAX_MISS_REASONS = 64;
/**
 * The admitted statuses, numbered: `#admitted` counts by this number, so a wait's count is an
 * indexed store, where a store keyed by the status string cost a megamorphic keyed lookup.
 */
const ADMITTED = ['queued', 'joined', 'in-flight', 'completed', 'failed'] as const;
type Admitted = (typeof ADMITTED)[number];
const A_QUEUED = 0;
const A_JOINED = 1;
const A_IN_FLIGHT = 2;
const A_COMPLETED = 3;
const A_FAILED = 4;

/**
 * The wait-queue coordinator: admits demand when an agent starts waiting,
 * deduplicates compatible demand in one bounded FIFO with at most one unit in
 * flight (or `maxInFlight`), issues that unit only against an explicit resource grant, and at
 * wakeup pins a ready artifact through the backend or returns a miss.
 *
 * One event loop owns it: calls from another thread throw `ERR_WRONG_THREAD`,
 * mutating calls made from inside a backend call throw `ERR_REENTRANT`. Every
 * operation is O(1) in the number of waiting consumers (amortized: a store's
 * growth, and a ticket number skipped for a taken slot, are paid over many).
 */
export class WaitCoordinator<Ticket extends WaitTicket | number = WaitTicket> {
  readonly #backend: ArtifactBackend;
  /**
   * The backend's `leaseIsWellFormed`, read once at construction from the backend and its
   * prototypes short of `Object.prototype` (so a polluted `Object.prototype` vouches for no
   * backend's leases), or `null`.
   */
  readonly #vouch: ((lease: Lease) => unknown) | null;
  readonly #maxQueued: number;
  readonly #maxWaiting: number;
  readonly #historyLimit: number;
  readonly #maxInFlight: number;
  readonly #now: () => number;
  readonly #thread: number;
  /** `wp<16 hex, random per instance>.u`: work ids are this and a counter. */
  readonly #workPrefix: string;
  #nextWork = 0;

  /** Admitted waits as slot numbers; a ticket's number names its slot (its low bits). */
  readonly #slots: WaitSlots;
  /** Whether tickets are numbers (the `tickets: 'number'` option) rather than strings. */
  readonly #numericTickets: boolean;
  #waiting = 0;
  /**
   * Demands (everything waiting on one dedup identity) as record numbers,
   * found by identity through the table's index (docs/coordinator.md § Layout).
   * A demand exists while a consumer waits on it, while it is queued or in
   * flight, or while terminal history remembers it, and is dropped as soon as
   * none holds. Queued demands form a doubly linked FIFO and remembered ones
   * the history list (oldest first), both through the records' one pair of
   * links: only a demand without an outcome is queued, so none is in both, and
   * unlinking from either is O(1).
   */
  readonly #demands: DemandTable;
  /**
   * Per key hex, its device demands and how many of them are busy (a consumer
   * waits, or it is queued or in flight), so `forget(key)` decides in O(1) and
   * then touches only idle demands, which exist only while history holds them.
   */
  readonly #deviceKeys = new Map<string, { ids: Set<number>; busy: number }>();
  /** Terminal entries: a list from oldest to newest. */
  #oldest = NONE;
  #newest = NONE;
  #historySize = 0;
  #head = NONE;
  #tail = NONE;
  #queued = 0;
  /**
   * Units in flight in issue order (the demand and its work unit at the same
   * index). With the default `maxInFlight` of 1 they hold at most one; `complete`
   * and a drained unit's abort search them, at most `maxInFlight` steps.
   */
  readonly #flightDemands: number[] = [];
  readonly #flightWorks: IssuedWorkUnit[] = [];
  #closed = false;
  #inBackend = false;
  /** An abort to fire once the current call has left the state consistent. */
  #pendingAbort: IssuedWorkUnit | null = null;
  /** The caller's last grant and its frozen copy, so a reused grant object is not copied per unit. */
  #grantIn: ResourceGrant | null = null;
  #grantCopy: ResourceGrant | null = null;

  #waits = 0;
  /** Admitted waits by status; `overloaded` and `rejected` are `#overloads` and `#rejected`. */
  readonly #admitted = new Float64Array(ADMITTED.length);
  #issued = 0;
  #completed = 0;
  #failed = 0;
  #wasted = 0;
  #wakes = 0;
  #hits = 0;
  readonly #misses = new Map<string, number>();
  #cancels = 0;
  #staleEvents = 0;
  #overloads = 0;
  #rejected = 0;

  /** Throws `ERR_INVALID_ARGUMENT` for a missing backend or bound, a bad value, or an unknown option. */
  constructor(options: WaitCoordinatorOptions<Ticket> & TicketsGiven<Ticket>) {
    if (!isObject(options)) throw invalidArgument('options', 'an object { backend, maxQueued, maxWaiting, historyLimit }', options);
    // Own properties only: an option inherited from a polluted Object.prototype is not the caller's.
    options = ownOptions(options);
    const { backend } = options;
    // Methods are looked up short of Object.prototype: a polluted one is no backend's method.
    if (!isObject(backend) || typeof ownMethod(backend, 'tryPinReady') !== 'function') {
      throw invalidArgument('options.backend', 'an ArtifactBackend with a tryPinReady(key, consumer, want) method', backend);
    }
    this.#backend = backend;
    const vouch = ownMethod(backend, 'leaseIsWellFormed');
    if (vouch !== undefined && typeof vouch !== 'function') {
      throw invalidArgument('options.backend.leaseIsWellFormed', 'a method (lease) => boolean, or none', vouch);
    }
    this.#vouch = vouch === undefined ? null : (vouch as (lease: Lease) => unknown);
    rejectUnknownOptions(options, OPTION_NAMES, 'options');
    this.#maxQueued = nonNegativeInteger('options.maxQueued', options.maxQueued);
    this.#maxWaiting = nonNegativeInteger('options.maxWaiting', options.maxWaiting);
    if (this.#maxWaiting > MAX_WAITING_LIMIT) {
      throw invalidArgument('options.maxWaiting', `at most ${MAX_WAITING_LIMIT}`, options.maxWaiting);
    }
    this.#historyLimit = nonNegativeInteger('options.historyLimit', options.historyLimit);
    // Terminal entries are demand records, Int32-numbered like the waits.
    if (this.#historyLimit > MAX_WAITING_LIMIT) {
      throw invalidArgument('options.historyLimit', `at most ${MAX_WAITING_LIMIT}`, options.historyLimit);
    }
    const maxInFlight = options.maxInFlight ?? 1;
    if (!Number.isInteger(maxInFlight) || maxInFlight < 1 || maxInFlight > MAX_IN_FLIGHT_LIMIT) {
      throw invalidArgument('options.maxInFlight', `an integer in [1, ${MAX_IN_FLIGHT_LIMIT}]`, options.maxInFlight);
    }
    this.#maxInFlight = maxInFlight;
    if (options.now !== undefined && typeof options.now !== 'function') {
      throw invalidArgument('options.now', 'a function returning milliseconds', options.now);
    }
    this.#now = options.now ?? (() => performance.now());
    this.#thread = currentThreadId();
    const tickets = options.tickets === undefined ? 'string' : options.tickets;
    if (tickets !== 'string' && tickets !== 'number') throw invalidArgument('options.tickets', "'string' or 'number'", options.tickets);
    this.#numericTickets = tickets === 'number';
    const random = randomBytes(34);
    this.#workPrefix = `wp${random.toString('hex', 0, 8)}.u`;
    this.#slots = new WaitSlots(this.#maxWaiting, random.subarray(8, 19), firstTicketNumber(random.subarray(24, 30)), random.readInt32LE(30));
    // Demands that can exist at once: one per waiting consumer (queued ones have
    // consumers), the units in flight, the history, and the one a replacement
    // makes before its old wait leaves.
    const demandLimit = this.#maxWaiting + maxInFlight + this.#historyLimit + 1;
    this.#demands = new DemandTable(demandLimit, random.readInt32LE(20));
  }

  /**
   * An agent started waiting: admit its demand for `key`. One demand per
   * (engine, request): a second call replaces the first, whose ticket goes
   * stale. Returns the admission; `ticket` is set for every admitted wait.
   */
  onWait(consumer: Consumer, key: ArtifactKey, opts?: WaitOptions): WaitAdmission<Ticket> {
    this.#enter();
    this.#waits++;
    const c = checkConsumer(consumer);
    assertArtifactKey(key);
    if (opts !== undefined && !isObject(opts)) throw invalidArgument('opts', 'an object { readiness?, target? }', opts);
    // Own properties only, read once: an inherited `readiness` or `target` is not the caller's.
    const given = opts === undefined ? undefined : ownField(opts, 'readiness');
    const target = opts === undefined ? undefined : ownField(opts, 'target');
    const admission = this.#admit(c, key, given, target);
    if (waitChannel.hasSubscribers) {
      waitChannel.publish({
        ticket: admission.ticket ?? null,
        status: admission.status,
        reason: admission.reason ?? null,
        consumer: c,
        key: key.hex,
        readiness: given === undefined ? 'host' : typeof given === 'string' ? given : describe(given),
      } satisfies WaitMessage);
    }
    if (admission.status === 'overloaded' && overloadChannel.hasSubscribers) {
      overloadChannel.publish({
        reason: admission.reason as OverloadMessage['reason'],
        consumer: c,
        key: key.hex,
        queued: this.#queued,
        waiting: this.#waiting,
      } satisfies OverloadMessage);
    }
    return admission;
  }

  /** `onWait` once its arguments are checked: decides, and changes state only for an admitted wait. */
  #admit(c: Consumer, key: ArtifactKey, given: unknown, givenTarget: unknown): WaitAdmission<Ticket> {
    if (this.#closed) return this.#reject(REJECT_SHUTDOWN);
    if (this.#slots.exhausted()) return this.#reject(REJECT_EXHAUSTED);

    let want: ReadinessRequest = HOST;
    const readiness = given ?? 'host';
    if (readiness === 'device') {
      if (givenTarget === undefined) return this.#reject(REJECT_MISSING_TARGET);
      const target = normalizeTarget(givenTarget);
      if (target === null) return this.#reject(REJECT_INVALID_TARGET);
      want = Object.freeze({ readiness: 'device', target });
    } else if (readiness === 'persisted') {
      return this.#reject(REJECT_PERSISTED);
    } else if (readiness !== 'host') {
      return this.#reject(REJECT_READINESS);
    } else if (givenTarget !== undefined) {
      return this.#reject(REJECT_INVALID_TARGET);
    }

    const slots = this.#slots;
    const demands = this.#demands;
    const requestHash = slots.requestHash(c.engine, c.request);
    const old = slots.findRequest(requestHash, c.engine, c.request);
    if (old !== NONE && c.generation < slots.consumer(old).generation) return this.#reject(REJECT_STALE_GENERATION);

    // Decide first, against the bounds as they would stand after the swap;
    // change nothing unless the wait is admitted.
    const hash = demands.hash(key, want);
    const existing = demands.find(hash, key, want);
    let status = A_QUEUED;
    if (existing !== NONE) {
      const state = demands.state(existing);
      const outcome = demands.outcome(existing);
      if (state === QUEUED) status = A_JOINED;
      else if (state === IN_FLIGHT) status = A_IN_FLIGHT;
      else if (outcome !== NO_OUTCOME) status = outcome === COMPLETED ? A_COMPLETED : A_FAILED;
    }

    if (old === NONE && this.#waiting + 1 > this.#maxWaiting) return this.#overload(OVERLOAD_WAITING);
    if (status === A_QUEUED) {
      const oldDemand = old === NONE ? NONE : slots.demand(old);
      const freed = oldDemand !== NONE && demands.state(oldDemand) === QUEUED && demands.waiting(oldDemand) === 1 ? 1 : 0;
      if (this.#queued + 1 - freed > this.#maxQueued) return this.#overload(OVERLOAD_QUEUE);
    }

    const demand = existing !== NONE ? existing : this.#createDemand(hash, key, want);
    const wasBusy = this.#isBusy(demand);
    if (status === A_QUEUED) this.#enqueue(demand);
    // Join before the old wait leaves, so replacing a wait with the same
    // identity keeps its unit (and its place in the queue).
    demands.addWaiting(demand, 1);
    this.#noteBusy(demand, wasBusy);
    if (old !== NONE) this.#release(old);
    const slot = slots.add(c, demand, requestHash);
    const ticket = (this.#numericTickets ? slots.number(slot) : slots.ticket(slot)) as Ticket;
    this.#waiting++;
    this.#admitted[status]++;
    const admission: WaitAdmission<Ticket> = { status: ADMITTED[status]!, ticket };
    this.#flushAbort();
    return admission;
  }

  /**
   * Issues the next queued unit to an external worker against the caller's
   * explicit resource grant (`ERR_GRANT_REQUIRED` without one). Returns `null`
   * while `maxInFlight` units (default 1) are in flight, when the queue is
   * empty, or after shutdown.
   */
  beginNext(grant: ResourceGrant): IssuedWorkUnit | null {
    this.#enter();
    if (!isObject(grant) || typeof grant.worker !== 'string' || grant.worker.length === 0 ||
        typeof grant.grant !== 'string' || grant.grant.length === 0) {
      throw grantRequired(grant);
    }
    const demand = this.#head;
    if (this.#closed || this.#flightWorks.length >= this.#maxInFlight || demand === NONE) return null;
    this.#unlink(demand);
    const demands = this.#demands;
    demands.setState(demand, IN_FLIGHT);
    const work = new IssuedWorkUnit(`${this.#workPrefix}${this.#nextWork++}`, demands.key(demand), demands.want(demand), this.#copyGrant(grant), this.#now());
    this.#flightDemands.push(demand);
    this.#flightWorks.push(work);
    this.#issued++;
    if (beginChannel.hasSubscribers) {
      beginChannel.publish({
        work: work.id,
        key: work.key.hex,
        readiness: work.readiness,
        target: work.target,
        worker: work.grant.worker,
        grant: work.grant.grant,
        issuedAt: work.issuedAt,
      } satisfies BeginMessage);
    }
    return work;
  }

  /**
   * Reports the outcome of an issued unit. Only a unit in flight (matched by
   * `id`) applies; anything else is `'stale'` and changes nothing.
   */
  complete(work: WorkUnit, outcome: Outcome): 'applied' | 'stale' {
    this.#enter();
    if (!isObject(outcome) || (outcome.ok !== true && (outcome.ok !== false || !('error' in outcome)))) {
      throw invalidArgument('outcome', '{ ok: true } or { ok: false, error }', outcome);
    }
    if (!isObject(work)) throw invalidArgument('work', 'a WorkUnit from beginNext()', work);
    const works = this.#flightWorks;
    let at = 0;
    while (at < works.length && works[at]!.id !== work.id) at++;
    if (at === works.length) {
      this.#staleEvents++;
      if (staleChannel.hasSubscribers) staleChannel.publish({ call: 'complete', id: work.id } satisfies StaleMessage);
      return 'stale';
    }
    const work0 = works[at]!;
    const demand = this.#flightDemands[at]!;
    removeAt(works, at);
    removeAt(this.#flightDemands, at);
    const demands = this.#demands;
    const wasBusy = this.#isBusy(demand);
    demands.setState(demand, IDLE);
    this.#noteBusy(demand, wasBusy);
    const unwaited = demands.waiting(demand) === 0;
    if (outcome.ok) {
      this.#completed++;
      if (unwaited) this.#wasted++;
      this.#remember(demand, COMPLETED);
    } else {
      this.#failed++;
      // A unit whose signal was aborted (its consumers all left) and that then
      // reports failure most likely stopped at its safe boundary: that is not
      // evidence against the key, so it leaves no 'failed' history, and a later
      // wait queues it again. A genuine failure is remembered as 'failed'.
      if (wasAborted(work0)) this.#dropIfUnused(demand);
      else this.#remember(demand, FAILED);
    }
    if (completeChannel.hasSubscribers) {
      completeChannel.publish({
        work: work0.id,
        key: work0.key.hex,
        outcome: outcome.ok ? 'completed' : 'failed',
        wasted: outcome.ok && unwaited,
        aborted: wasAborted(work0),
        error: outcome.ok ? undefined : outcome.error,
      } satisfies CompleteMessage);
    }
    return 'applied';
  }

  /**
   * The agent woke: remove its consumer and, for a current ticket, try to pin
   * a ready artifact. Never waits for preparation and never runs it. A stale
   * or unknown ticket (one of the other form, or a bigint, among them) is a
   * `stale-ticket` miss; a value that is no primitive ticket throws
   * `ERR_INVALID_ARGUMENT`.
   */
  onWake(ticket: Ticket): WakeResult {
    this.#enter();
    const slot = this.#slotOf(ticket);
    this.#wakes++;
    if (slot === NONE) return this.#staleWake(ticket);
    const demand = this.#slots.demand(slot);
    const key = this.#demands.key(demand);
    const want = this.#demands.want(demand);
    const consumer = this.#slots.consumer(slot);
    this.#release(slot);
    let result: WakeResult;
    try {
      result = this.#pin(key, want, consumer);
    } finally {
      this.#flushAbort();
    }
    if (wakeChannel.hasSubscribers) {
      wakeChannel.publish({
        ticket,
        result: result.kind,
        reason: result.kind === 'miss' ? result.reason : null,
        key: key.hex,
        consumer,
        readiness: want.readiness,
      } satisfies WakeMessage);
    }
    return result;
  }

  /**
   * Removes that consumer only; shared work stays for the others. False for a
   * stale or unknown ticket (one of the other form, or a bigint, among them); a
   * value that is no primitive ticket throws `ERR_INVALID_ARGUMENT`.
   */
  onCancel(ticket: Ticket): boolean {
    this.#enter();
    const slot = this.#slotOf(ticket);
    if (slot === NONE) {
      this.#staleEvents++;
      if (staleChannel.hasSubscribers) staleChannel.publish({ call: 'onCancel', id: ticket } satisfies StaleMessage);
      return false;
    }
    // Read before the release frees the slot.
    const message: CancelMessage | null = cancelChannel.hasSubscribers
      ? { ticket, key: this.#demands.key(this.#slots.demand(slot)).hex, consumer: this.#slots.consumer(slot) }
      : null;
    this.#release(slot);
    this.#cancels++;
    this.#flushAbort();
    if (message !== null) cancelChannel.publish(message);
    return true;
  }

  /**
   * Discards terminal history for `key` (every readiness and target), only
   * when no consumer waits on it and it is neither queued nor in flight.
   * True when history was discarded. A later explicit `onWait` may retry.
   */
  forget(key: ArtifactKey): boolean {
    this.#enter();
    assertArtifactKey(key);
    const demands = this.#demands;
    const host = demands.find(demands.hash(key, HOST), key, HOST);
    const device = this.#deviceKeys.get(key.hex);
    if ((host !== NONE && this.#isBusy(host)) || (device !== undefined && device.busy > 0)) return false;
    let discarded = false;
    for (const demand of [host, ...(device?.ids ?? [])]) {
      if (demand === NONE || demands.outcome(demand) === NO_OUTCOME) continue;
      this.#unremember(demand);
      this.#dropIfUnused(demand);
      discarded = true;
    }
    return discarded;
  }

  /**
   * Stops new submissions: `onWait` is then `rejected` and `beginNext` returns
   * `null`; wakes, cancels and completions still apply. Neither waits for nor
   * kills workers. Calling it again reports the current state.
   */
  shutdown(): { drained: boolean; inFlight: IssuedWorkUnit | null } {
    this.#enter();
    this.#closed = true;
    const result = { drained: this.#flightWorks.length === 0, inFlight: this.inFlight };
    if (shutdownChannel.hasSubscribers) {
      shutdownChannel.publish({
        drained: result.drained,
        inFlight: result.inFlight?.id ?? null,
        queued: this.#queued,
        waiting: this.#waiting,
      } satisfies ShutdownMessage);
    }
    return result;
  }

  /** Counters and gauges; a fresh object each call. */
  stats(): CoordinatorStats {
    return {
      waits: this.#waits,
      waitsByStatus: {
        ...(Object.fromEntries(ADMITTED.map((name, at) => [name, this.#admitted[at]!])) as Record<Admitted, number>),
        overloaded: this.#overloads,
        rejected: this.#rejected,
      } satisfies Record<WaitStatus, number>,
      joins: this.#admitted[A_JOINED]! + this.#admitted[A_IN_FLIGHT]!,
      queued: this.#queued,
      inFlight: this.#flightWorks.length,
      issued: this.#issued,
      completed: this.#completed,
      failed: this.#failed,
      wasted: this.#wasted,
      wakes: this.#wakes,
      hits: this.#hits,
      misses: Object.fromEntries(this.#misses),
      cancels: this.#cancels,
      staleEvents: this.#staleEvents,
      overloads: this.#overloads,
      rejected: this.#rejected,
      waiting: this.#waiting,
      historySize: this.#historySize,
    };
  }

  /**
   * The unit in flight (with `maxInFlight` above 1, the oldest), or `null`: for
   * a driver that lost its unit (a worker crashed) and must still report it
   * with `complete`.
   */
  get inFlight(): IssuedWorkUnit | null {
    return this.#flightWorks.length > 0 ? this.#flightWorks[0]! : null;
  }

  /** True once `shutdown()` has been called. */
  get closed(): boolean {
    return this.#closed;
  }

  #enter(): void {
    if (currentThreadId() !== this.#thread) {
      throw new WaitprepError('ERR_WRONG_THREAD', `This WaitCoordinator belongs to thread ${this.#thread}; called from thread ${currentThreadId()}`);
    }
    if (this.#inBackend) {
      throw new WaitprepError('ERR_REENTRANT', 'WaitCoordinator was called from inside its own backend call; only stats() and lease.close() are allowed there');
    }
  }

  /**
   * The live wait slot `ticket` names, or {@link NONE} for a stale or unknown ticket: one of
   * the other primitive form (a number for a string coordinator, a string for a numeric one) or
   * a bigint, which no coordinator issues. A value that is no primitive ticket form throws.
   */
  #slotOf(ticket: unknown): number {
    if (typeof ticket === 'string') return this.#numericTickets ? NONE : this.#slots.find(ticket);
    if (typeof ticket === 'number') {
      // A live wait's number is a safe integer: the check that throws is paid on a miss only.
      const slot = this.#numericTickets ? this.#slots.findNumber(ticket) : NONE;
      if (slot !== NONE || Number.isSafeInteger(ticket)) return slot;
    } else if (typeof ticket === 'bigint') {
      return NONE;
    }
    throw invalidArgument('ticket', 'a ticket from onWait()', ticket);
  }

  #reject(admission: WaitAdmission<never>): WaitAdmission<never> {
    this.#rejected++;
    return admission;
  }

  #overload(admission: WaitAdmission<never>): WaitAdmission<never> {
    this.#overloads++;
    return admission;
  }

  /**
   * Counts a miss by reason and returns it. `stats().misses` names at most 64
   * distinct reasons (a backend chooses the strings); later new ones are
   * counted under `other`. The returned miss always carries the real reason.
   */
  #miss(reason: string): Miss {
    const counted = this.#misses.has(reason) || this.#misses.size < MAX_MISS_REASONS ? reason : 'other';
    this.#misses.set(counted, (this.#misses.get(counted) ?? 0) + 1);
    return MISSES.get(reason) ?? Object.freeze({ kind: 'miss', reason });
  }

  /** A consumer waits on it, or it is queued or in flight. */
  #isBusy(demand: number): boolean {
    return this.#demands.waiting(demand) > 0 || this.#demands.state(demand) !== IDLE;
  }

  #createDemand(hash: number, key: ArtifactKey, want: ReadinessRequest): number {
    const demand = this.#demands.add(hash, key, want);
    if (want.readiness === 'device') {
      let index = this.#deviceKeys.get(key.hex);
      if (index === undefined) this.#deviceKeys.set(key.hex, (index = { ids: new Set(), busy: 0 }));
      index.ids.add(demand);
    }
    return demand;
  }

  /** Keeps a device key's busy count right after `demand` changed; `wasBusy` is how it stood before. */
  #noteBusy(demand: number, wasBusy: boolean): void {
    if (!this.#demands.isDevice(demand)) return;
    const busy = this.#isBusy(demand);
    if (busy !== wasBusy) this.#deviceKeys.get(this.#demands.key(demand).hex)!.busy += busy ? 1 : -1;
  }

  #dropIfUnused(demand: number): void {
    const demands = this.#demands;
    if (demands.waiting(demand) > 0 || demands.state(demand) !== IDLE || demands.outcome(demand) !== NO_OUTCOME) return;
    if (demands.isDevice(demand)) {
      const hex = demands.key(demand).hex;
      const index = this.#deviceKeys.get(hex)!;
      index.ids.delete(demand);
      if (index.ids.size === 0) this.#deviceKeys.delete(hex);
    }
    demands.remove(demand);
  }

  #enqueue(demand: number): void {
    const demands = this.#demands;
    demands.setState(demand, QUEUED);
    demands.setPrev(demand, this.#tail);
    demands.setNext(demand, NONE);
    if (this.#tail === NONE) this.#head = demand;
    else demands.setNext(this.#tail, demand);
    this.#tail = demand;
    this.#queued++;
  }

  /** Takes a queued demand out of the FIFO. */
  #unlink(demand: number): void {
    const demands = this.#demands;
    const prev = demands.prev(demand);
    const next = demands.next(demand);
    if (prev === NONE) this.#head = next;
    else demands.setNext(prev, next);
    if (next === NONE) this.#tail = prev;
    else demands.setPrev(next, prev);
    demands.setPrev(demand, NONE);
    demands.setNext(demand, NONE);
    demands.setState(demand, IDLE);
    this.#queued--;
  }

  /** A wake whose ticket names no current wait: a `stale-ticket` miss, and nothing else changes. */
  #staleWake(ticket: WaitTicket | number | bigint): Miss {
    this.#staleEvents++;
    const stale = this.#miss(MISS_STALE.reason);
    if (wakeChannel.hasSubscribers) {
      wakeChannel.publish({ ticket, result: 'miss', reason: stale.reason, key: null, consumer: null, readiness: null } satisfies WakeMessage);
    }
    if (staleChannel.hasSubscribers) staleChannel.publish({ call: 'onWake', id: ticket } satisfies StaleMessage);
    return stale;
  }

  /** The consumer leaves: its ticket goes stale, its slot is freed, and it stops counting toward its unit. */
  #release(slot: number): void {
    const slots = this.#slots;
    const demand = slots.demand(slot);
    slots.remove(slot);
    this.#waiting--;
    const demands = this.#demands;
    if (demands.addWaiting(demand, -1) > 0) return;
    const state = demands.state(demand);
    if (state === QUEUED) this.#unlink(demand);
    else if (state === IN_FLIGHT) this.#pendingAbort = this.#flightWorks[this.#flightDemands.indexOf(demand)]!;
    this.#noteBusy(demand, true);
    this.#dropIfUnused(demand);
  }

  #flushAbort(): void {
    const work = this.#pendingAbort;
    if (work === null) return;
    this.#pendingAbort = null;
    abortIssuedWork(work);
  }

  #copyGrant(grant: ResourceGrant): ResourceGrant {
    const copy = this.#grantCopy;
    if (grant !== this.#grantIn || copy === null || copy.worker !== grant.worker || copy.grant !== grant.grant) {
      this.#grantIn = grant;
      this.#grantCopy = Object.freeze({ worker: grant.worker, grant: grant.grant });
    }
    return this.#grantCopy!;
  }

  /** Appends `demand` (in no list) to terminal history, evicting the oldest entry past `historyLimit`. */
  #remember(demand: number, outcome: typeof COMPLETED | typeof FAILED): void {
    const demands = this.#demands;
    if (this.#historyLimit === 0) {
      this.#dropIfUnused(demand);
      return;
    }
    demands.setOutcome(demand, outcome);
    demands.setPrev(demand, this.#newest);
    demands.setNext(demand, NONE);
    if (this.#newest === NONE) this.#oldest = demand;
    else demands.setNext(this.#newest, demand);
    this.#newest = demand;
    if (++this.#historySize > this.#historyLimit) {
      const oldest = this.#oldest;
      this.#unremember(oldest);
      this.#dropIfUnused(oldest);
    }
  }

  /** Takes `demand` out of terminal history (the caller drops it if unused). */
  #unremember(demand: number): void {
    const demands = this.#demands;
    const older = demands.prev(demand);
    const newer = demands.next(demand);
    if (older === NONE) this.#oldest = newer;
    else demands.setNext(older, newer);
    if (newer === NONE) this.#newest = older;
    else demands.setPrev(newer, older);
    demands.setPrev(demand, NONE);
    demands.setNext(demand, NONE);
    demands.setOutcome(demand, NO_OUTCOME);
    this.#historySize--;
  }

  /**
   * Calls the backend and checks what came back, all with re-entry blocked:
   * reading the result (a getter, a lease's close) may run backend code too.
   * Never throws; whatever goes wrong is a miss `backend-error`.
   */
  #pin(key: ArtifactKey, want: ReadinessRequest, consumer: Consumer): WakeResult {
    let lease: Lease | null = null;
    let reason: string | null = MISS_BACKEND_ERROR.reason;
    this.#inBackend = true;
    try {
      const result: unknown = this.#backend.tryPinReady(key, consumer, want);
      if (isObject(result)) {
        const kind = result.kind;
        if (kind === 'miss') {
          const said = result.reason;
          if (typeof said === 'string' && said.length > 0) reason = said;
        } else if (kind === 'lease' && typeof result.close === 'function') {
          lease = result as unknown as Lease;
          const vouched = this.#vouch !== null && this.#vouch.call(this.#backend, lease) === true;
          reason = leaseProblem(lease, key, want, consumer, vouched);
          if (reason !== null) closeQuietly(lease);
        }
      }
    } catch {
      reason = MISS_BACKEND_ERROR.reason;
      if (lease !== null) closeQuietly(lease);
    } finally {
      this.#inBackend = false;
    }
    if (reason === null) {
      this.#hits++;
      return { kind: 'hit', lease: lease! };
    }
    return this.#miss(reason);
  }
}

/**
 * Why a lease the backend returned cannot be handed to the engine, or `null`
 * when it can: it must be open, name this key, readiness and consumer, and
 * carry a slot, a slot generation and metadata. The slot generation is read as
 * `generation`, the contract's name, which every backend gives; the package's
 * own `slotGeneration` is not required, so a third-party lease needs none.
 * `vouched`: the backend's `leaseIsWellFormed` said the slot, generation and
 * metadata are well formed by construction, so they are not read. A lease
 * table's lease is such a lease: its `meta` is built on first read, and
 * building it here would put that on every wake (docs/benchmarks.md).
 */
function leaseProblem(lease: Lease, key: ArtifactKey, want: ReadinessRequest, consumer: Consumer, vouched: boolean): string | null {
  if (!key.equals(lease.key)) return MISS_IDENTITY.reason;
  if (lease.readiness !== want.readiness) return MISS_READINESS.reason;
  const owner = lease.consumer;
  const wellFormed =
    lease.closed === false &&
    (vouched ||
      (typeof lease.slot === 'number' &&
        (typeof lease.generation === 'number' || typeof lease.generation === 'bigint') &&
        isObject(lease.meta))) &&
    isObject(owner) &&
    owner.engine === consumer.engine &&
    owner.request === consumer.request &&
    owner.generation === consumer.generation;
  return wellFormed ? null : MISS_BACKEND_ERROR.reason;
}

/** Removes `list[at]`, keeping the order: `splice` would allocate the array of what it removed. */
function removeAt<T>(list: T[], at: number): void {
  for (let i = at + 1; i < list.length; i++) list[i - 1] = list[i]!;
  list.pop();
}

/** `beginNext` without a well-formed grant: the error names what came. */
function grantRequired(got: unknown): WaitprepError {
  return new WaitprepError(
    'ERR_GRANT_REQUIRED',
    `beginNext needs the caller's resource-grant assertion { worker: non-empty string, grant: non-empty string }, got ${
      isObject(got) ? `{ worker: ${JSON.stringify(got.worker)}, grant: ${JSON.stringify(got.grant)} }` : String(got)
    }`,
  );
}

/** Releases a lease the coordinator refuses; its close failing changes nothing here. */
function closeQuietly(lease: Lease): void {
  try {
    lease.close();
  } catch {
    // The lease was refused either way.
  }
}
