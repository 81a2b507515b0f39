// The pause planner: an opt-in layer above a WaitCoordinator that decides, for every pause (an
// agent's tool call or any other wait between turns), whether its KV should stay on the GPU,
// be prepared by the storage worker, or neither, and revises that as the pause ages. It learns
// how long pauses of each class last from the pauses that ended (stats.ts), never from the
// future. It advises: the engine keeps or drops KV (it gets a retention hint), the coordinator
// admits and the storage worker prepares and evicts (it gets an eviction order). The planner
// calls the coordinator's own calls only (onWait, onWake, onCancel, forget) and changes nothing
// of its semantics; every re-preparation is an explicit onWait it issues and counts.
import { performance } from 'node:perf_hooks';
import { invalidArgument } from '../errors.js';
import type { ArtifactKey } from '../key.js';
import type { Consumer, WaitAdmission, WaitOptions, WakeResult } from '../types.js';
import { IndexedMinHeap } from './heap.js';
import { WaitLengthStats, type WaitClass } from './stats.js';

/** The coordinator calls the planner makes: a {@link WaitCoordinator} has them all. */
export interface PlannerCoordinator<Ticket> {
  onWait(consumer: Consumer, key: ArtifactKey, opts?: WaitOptions): WaitAdmission<Ticket>;
  onWake(ticket: Ticket): WakeResult;
  onCancel(ticket: Ticket): boolean;
  forget(key: ArtifactKey): boolean;
}

/** What the planner may use. Bytes; `gpuRetainBytes` and `devicePoolBytes` are per engine. */
export interface PlannerBudgets {
  /** KV an engine may keep across pauses: its KV capacity less what running turns need, at most. */
  gpuRetainBytes: number;
  /** The host arena prepared artifacts (and the staging of units in flight) live in. */
  arenaBytes: number;
  /** Per engine, the device pool for `readiness: 'device'` pauses. Default 0. */
  devicePoolBytes?: number;
  /** Arena bytes one unit in flight holds for staging. Default 0. */
  stagingBytesPerUnit?: number;
}

/** The links a unit crosses, in bytes per second. */
export interface PlannerLinks {
  /** The storage tier's aggregate bandwidth (every unit shares it). */
  tierBytesPerSec: number;
  /** What one unit moves per second (one read stream). */
  unitBytesPerSec: number;
}

/** Options of {@link PausePlanner}. Unknown options are rejected. */
export interface PausePlannerOptions<Ticket> {
  /** The coordinator it admits, wakes, cancels and forgets through. */
  coordinator: PlannerCoordinator<Ticket>;
  budgets: PlannerBudgets;
  links: PlannerLinks;
  /** The horizon of a pause's hazard, P(it ends within this many seconds | its age). Default 10. */
  horizonSeconds?: number;
  /** Prepare a pause only when P(it lasts one unit longer | its age) is at least this. Default 0.5. */
  prepareThreshold?: number;
  /** A prepared pause keeps its place until a newcomer's hazard beats its own this many times. Default 1.25. */
  hysteresis?: number;
  /** Fixed seconds of a unit beyond its bytes (submit, checksum, publish). Default 0.002. */
  unitOverheadSeconds?: number;
  /** Most pauses open at once; past it a pause gets no plan (counted). Default 100,000. */
  maxPauses?: number;
  /** Most engines told apart. Default 1,024. */
  maxEngines?: number;
  /** The most units in flight it asks for. Default 64. */
  maxUnitsInFlight?: number;
  /** The statistics it learns into (share one across planners, or keep it across restarts). Default a new one. */
  statistics?: WaitLengthStats;
  /** Clock in milliseconds. Default performance.now. */
  now?: () => number;
}

/** A pause as the orchestrator starts it. */
export interface PauseStart {
  /** Who pauses: the coordinator's consumer. One open pause per (engine, request); a second replaces the first. */
  consumer: Consumer;
  /** The key of the context the pause holds (its KV is what is kept or prepared). */
  key: ArtifactKey;
  /** The class its length is learned under: the tool's name, `'conversation'` for a person… */
  toolClass: string;
  /** The context's KV bytes (what keeping it holds, what a unit moves). */
  bytes: number;
  /** The unit's estimated seconds; default the overhead plus bytes at the unit's rate. */
  unitSeconds?: number;
  /** `onWait` options for its unit (readiness, device target). Default host. */
  readiness?: WaitOptions;
  /** The caller's own reference, handed back in replan results. */
  tag?: unknown;
}

/**
 * An engine-neutral retention hint for a pause's KV: `priority` 0-100, higher kept longer
 * (0: nothing to keep; let it go first); `ttlSeconds`: after it, the hint has lapsed unless
 * renewed (engines that want a duration), or null. hints.ts maps it onto engines' APIs.
 */
export interface RetentionHint {
  readonly keep: boolean;
  readonly priority: number;
  readonly ttlSeconds: number | null;
}

/** What the planner decided for a pause. */
export type PauseAction = 'keep' | 'prepare' | 'none';

/** A pause the planner holds; read-only outside it. Pass it back to `wake`, `cancel`, `retentionDropped`. */
export interface PauseHandle {
  readonly tag: unknown;
  readonly consumer: Consumer;
  readonly key: ArtifactKey;
  readonly toolClass: string;
  readonly bytes: number;
  /** Its KV is kept on the GPU (as far as the planner knows). */
  readonly retained: boolean;
  /** It holds a coordinator ticket: its unit is queued, in flight or done. */
  readonly admitted: boolean;
  /** Still open (not woken, cancelled or replaced). */
  readonly open: boolean;
  /** P(it ends within the horizon | its age), as last computed. */
  readonly score: number;
}

/** What `begin` returns. */
export interface PausePlan {
  /** The pause, or null when `maxPauses` were open already (nothing was planned). */
  readonly pause: PauseHandle | null;
  readonly action: PauseAction;
  /** For 'keep': the hint to give the engine. */
  readonly hint: RetentionHint | null;
  /** Retained pauses given up to make room for this one: tell the engine their KV may go. */
  readonly released: readonly PauseHandle[];
}

/** What `replan` did. */
export interface ReplanResult {
  /** Pauses handed to the coordinator (onWait) this replan. */
  readonly admitted: readonly PauseHandle[];
  /** Pauses whose unit it withdrew (onCancel): fallen out of the chosen set. */
  readonly withdrawn: readonly PauseHandle[];
  /** Retained pauses whose hint changed: give the engine the new one. */
  readonly hints: ReadonlyArray<{ readonly pause: PauseHandle; readonly hint: RetentionHint }>;
}

/** Counters (since construction) and gauges (now) of a {@link PausePlanner}. */
export interface PausePlannerStats {
  begins: number;
  replaced: number;
  wakes: number;
  cancels: number;
  /** Pauses kept on the GPU at their start. */
  kept: number;
  /** Kept pauses given up by the planner for a pause more likely to wake soon. */
  released: number;
  /** Kept pauses whose KV the engine reported dropped. */
  dropped: number;
  /** onWait calls. */
  admissions: number;
  /** onWait calls for a pause that had been admitted before (a re-preparation). */
  readmissions: number;
  /** onCancel calls that withdrew a unit from a pause fallen out of the chosen set. */
  withdrawals: number;
  /** Pauses refused a plan because `maxPauses` were open. */
  overflows: number;
  replans: number;
  /** Gauges: open pauses, bytes kept, bytes admitted (host arena plus device pools). */
  open: number;
  retainedBytes: number;
  admittedBytes: number;
}

const OPTION_NAMES = new Set([
  'coordinator', 'budgets', 'links', 'horizonSeconds', 'prepareThreshold', 'hysteresis', 'unitOverheadSeconds', 'maxPauses', 'maxEngines',
  'maxUnitsInFlight', 'statistics', 'now',
]);
const NONE: readonly PauseHandle[] = Object.freeze([]);
const RELEASE: RetentionHint = Object.freeze({ keep: false, priority: 0, ttlSeconds: null });
/** The longest TTL a hint asks for: past it the next replan renews it anyway. */
const MAX_TTL_SECONDS = 3600;
/** Below this a score is a tie: sort keys keep 2^24 levels of it. */
const SCORE_LEVELS = 2 ** 24;

/**
 * The units in flight that fill the tier: its bandwidth over one unit's, at least 1, at most
 * `max`. A WaitCoordinator's `maxInFlight` and a PreparationDriver's take it.
 */
export function plannedUnitsInFlight(links: PlannerLinks, max = 64): number {
  return Math.max(1, Math.min(max, Math.ceil(links.tierBytesPerSec / links.unitBytesPerSec)));
}

/** One engine's pauses as the planner sees them. */
class EngineState {
  retainedBytes = 0;
  poolBytes = 0;
  readonly retained = new IndexedMinHeap<Pause>();
}

class Pause implements PauseHandle {
  tag: unknown;
  consumer: Consumer;
  key: ArtifactKey;
  hex: string;
  cls: WaitClass;
  bytes: number;
  unitSeconds: number;
  want: WaitOptions | undefined;
  device: boolean;
  engine: EngineState;
  startedAt: number;
  retained = false;
  level = 0;
  ticket: unknown = undefined;
  wasAdmitted = false;
  open = true;
  score = 0;
  eligible = false;
  /** Position among open pauses, and in its engine's retained heap. */
  index = -1;
  heapIndex = -1;
  seq: number;

  constructor(start: PauseStart, cls: WaitClass, unitSeconds: number, engine: EngineState, now: number, seq: number) {
    this.tag = start.tag;
    this.consumer = start.consumer;
    this.key = start.key;
    this.hex = start.key.hex;
    this.cls = cls;
    this.bytes = start.bytes;
    this.unitSeconds = unitSeconds;
    this.want = start.readiness;
    this.device = start.readiness?.readiness === 'device';
    this.engine = engine;
    this.startedAt = now;
    this.seq = seq;
  }

  get toolClass(): string {
    return this.cls.name;
  }

  get admitted(): boolean {
    return this.ticket !== undefined;
  }
}

function positive(field: string, value: unknown, allowZero = false): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || (!allowZero && value === 0)) {
    throw invalidArgument(field, allowZero ? 'a finite number >= 0' : 'a finite number > 0', value);
  }
  return value;
}

/**
 * Decides keep, prepare or neither for every pause, from online per-class statistics of how
 * long pauses last:
 *
 * - **keep** (GPU retention, no fixed TTL): every pause asks to keep its KV, at a priority that
 *   is its hazard, P(it ends within `horizonSeconds` | its age); when an engine's retention
 *   budget is full, the retained pause least likely to end soon is given up (`released`), and
 *   the engine's own priority eviction (fed by the hints) drops more when turns need room;
 * - **prepare**: among open pauses not kept, those likely to outlast one unit
 *   (P(remaining > unit) >= `prepareThreshold`), ranked by hazard, the top ones that fit the
 *   arena (or the engine's device pool) are admitted (`onWait`); one that falls out of that set is
 *   withdrawn (`onCancel`) only when a newcomer beats it by `hysteresis`, and its bytes go only
 *   as the storage worker needs room (`evictionValue`);
 * - it asks for `unitsInFlight` units at once: the tier's bandwidth over one unit's.
 *
 * Call `begin` at each pause's start, `wake` or `cancel` at its end, `retentionDropped` when the
 * engine reports it dropped a kept pause's KV, `evicted` when the storage worker evicts an
 * artifact, and `replan` on a timer (every second or so). Every call is synchronous and never
 * blocks; per-pause calls cost O(log n), a replan O(n log n) in open pauses; all state is
 * bounded by `maxPauses`, `maxEngines` and the statistics' class bound.
 */
export class PausePlanner<Ticket = unknown> {
  readonly #coordinator: PlannerCoordinator<Ticket>;
  readonly #stats: WaitLengthStats;
  readonly #now: () => number;
  readonly #horizon: number;
  readonly #threshold: number;
  readonly #hysteresis: number;
  readonly #overhead: number;
  readonly #unitRate: number;
  readonly #retainBudget: number;
  readonly #arenaBudget: number;
  readonly #poolBudget: number;
  readonly #maxPauses: number;
  readonly #maxEngines: number;
  readonly #unitsInFlight: number;
  readonly #engines = new Map<string, EngineState>();
  readonly #overflowEngine = new EngineState();
  readonly #byConsumer = new Map<string, Pause>();
  readonly #byKey = new Map<string, Pause | Pause[]>();
  /** Open pauses, dense (a removal swaps the last one in). */
  #open: Pause[] = [];
  #seq = 0;
  #arenaBytes = 0;
  /** Sort keys of a replan, reused. */
  #keys = new Float64Array(1024);
  readonly #counters = {
    begins: 0, replaced: 0, wakes: 0, cancels: 0, kept: 0, released: 0, dropped: 0, admissions: 0, readmissions: 0, withdrawals: 0, overflows: 0, replans: 0,
  };

  constructor(options: PausePlannerOptions<Ticket>) {
    if (options === null || typeof options !== 'object') throw invalidArgument('options', 'an object { coordinator, budgets, links, … }', options);
    for (const name of Object.keys(options)) if (!OPTION_NAMES.has(name)) throw invalidArgument(name, `one of ${[...OPTION_NAMES].join(', ')}`, name);
    const { coordinator, budgets, links } = options;
    if (coordinator === null || typeof coordinator !== 'object' || typeof coordinator.onWait !== 'function' || typeof coordinator.onWake !== 'function'
      || typeof coordinator.onCancel !== 'function' || typeof coordinator.forget !== 'function') {
      throw invalidArgument('coordinator', 'a WaitCoordinator (onWait, onWake, onCancel, forget)', coordinator);
    }
    if (budgets === null || typeof budgets !== 'object') throw invalidArgument('budgets', 'an object { gpuRetainBytes, arenaBytes, … }', budgets);
    if (links === null || typeof links !== 'object') throw invalidArgument('links', 'an object { tierBytesPerSec, unitBytesPerSec }', links);
    this.#coordinator = coordinator;
    this.#retainBudget = positive('budgets.gpuRetainBytes', budgets.gpuRetainBytes, true);
    const staging = positive('budgets.stagingBytesPerUnit', budgets.stagingBytesPerUnit ?? 0, true);
    this.#poolBudget = positive('budgets.devicePoolBytes', budgets.devicePoolBytes ?? 0, true);
    const tier = positive('links.tierBytesPerSec', links.tierBytesPerSec);
    this.#unitRate = Math.min(tier, positive('links.unitBytesPerSec', links.unitBytesPerSec));
    const maxUnits = options.maxUnitsInFlight ?? 64;
    if (!Number.isSafeInteger(maxUnits) || maxUnits < 1 || maxUnits > 1024) throw invalidArgument('maxUnitsInFlight', 'an integer in [1, 1024]', maxUnits);
    this.#unitsInFlight = plannedUnitsInFlight(links, maxUnits);
    // Staging of the units in flight comes out of the arena first.
    this.#arenaBudget = Math.max(0, positive('budgets.arenaBytes', budgets.arenaBytes, true) - this.#unitsInFlight * staging);
    this.#horizon = positive('horizonSeconds', options.horizonSeconds ?? 10);
    const threshold = options.prepareThreshold ?? 0.5;
    if (typeof threshold !== 'number' || !(threshold >= 0 && threshold <= 1)) throw invalidArgument('prepareThreshold', 'a number in [0, 1]', threshold);
    this.#threshold = threshold;
    const hysteresis = options.hysteresis ?? 1.25;
    if (typeof hysteresis !== 'number' || !(hysteresis >= 1) || !Number.isFinite(hysteresis)) throw invalidArgument('hysteresis', 'a finite number >= 1', hysteresis);
    this.#hysteresis = hysteresis;
    this.#overhead = positive('unitOverheadSeconds', options.unitOverheadSeconds ?? 0.002, true);
    const maxPauses = options.maxPauses ?? 100_000;
    if (!Number.isSafeInteger(maxPauses) || maxPauses < 1 || maxPauses > 2 ** 24) throw invalidArgument('maxPauses', 'an integer in [1, 2^24]', maxPauses);
    this.#maxPauses = maxPauses;
    const maxEngines = options.maxEngines ?? 1024;
    if (!Number.isSafeInteger(maxEngines) || maxEngines < 1) throw invalidArgument('maxEngines', 'an integer >= 1', maxEngines);
    this.#maxEngines = maxEngines;
    if (options.statistics !== undefined && !(options.statistics instanceof WaitLengthStats)) throw invalidArgument('statistics', 'a WaitLengthStats', options.statistics);
    this.#stats = options.statistics ?? new WaitLengthStats();
    if (options.now !== undefined && typeof options.now !== 'function') throw invalidArgument('now', 'a function returning milliseconds', options.now);
    this.#now = options.now ?? (() => performance.now());
  }

  /** Units in flight to ask of the coordinator (`maxInFlight`) and the driver: the tier over one unit. */
  get unitsInFlight(): number {
    return this.#unitsInFlight;
  }

  /** The statistics it learns into. */
  get statistics(): WaitLengthStats {
    return this.#stats;
  }

  /**
   * A pause starts. Keeps its KV if it ranks high enough on its engine, else admits it for
   * preparation if it is likely to outlast its unit and fits, else neither. A pause of the same
   * (engine, request) still open is replaced.
   */
  begin(start: PauseStart): PausePlan {
    if (start === null || typeof start !== 'object') throw invalidArgument('start', 'an object { consumer, key, toolClass, bytes, … }', start);
    const { consumer, key, toolClass, bytes } = start;
    if (consumer === null || typeof consumer !== 'object' || typeof consumer.engine !== 'string' || typeof consumer.request !== 'string') {
      throw invalidArgument('start.consumer', 'a consumer { engine, request, generation }', consumer);
    }
    if (key === null || typeof key !== 'object' || typeof key.hex !== 'string') throw invalidArgument('start.key', 'an ArtifactKey', key);
    if (typeof toolClass !== 'string') throw invalidArgument('start.toolClass', 'a string', toolClass);
    positive('start.bytes', bytes, true);
    if (start.unitSeconds !== undefined) positive('start.unitSeconds', start.unitSeconds, true);
    this.#counters.begins++;
    const now = this.#now();
    const id = `${consumer.engine}\u0000${consumer.request}`;
    const old = this.#byConsumer.get(id);
    // The replaced pause's registration: taken over by this pause's onWait if it is admitted at
    // once (which keeps the unit's queue place for the same key), cancelled otherwise.
    const oldTicket = old?.ticket;
    if (old !== undefined) {
      this.#counters.replaced++;
      this.#close(old);
    }
    const cancelOld = (): void => {
      if (oldTicket !== undefined) this.#coordinator.onCancel(oldTicket as Ticket);
    };
    if (this.#open.length >= this.#maxPauses) {
      this.#counters.overflows++;
      cancelOld();
      return { pause: null, action: 'none', hint: null, released: NONE };
    }
    const unitSeconds = start.unitSeconds ?? this.#overhead + bytes / this.#unitRate;
    const p = new Pause(start, this.#stats.classOf(toolClass), unitSeconds, this.#engineOf(consumer.engine), now, this.#seq++);
    this.#score(p, 0);
    p.index = this.#open.length;
    this.#open.push(p);
    this.#byConsumer.set(id, p);
    this.#indexKey(p);

    // Keep, when it outranks what the engine's retention budget would have to give up.
    let released: PauseHandle[] | null = null;
    const engine = p.engine;
    while (engine.retainedBytes + p.bytes > this.#retainBudget) {
      const lowest = engine.retained.peek();
      if (lowest === undefined || lowest.score >= p.score) break;
      this.#unretain(lowest);
      this.#counters.released++;
      (released ??= []).push(lowest);
      this.#tryAdmit(lowest);
    }
    if (engine.retainedBytes + p.bytes <= this.#retainBudget) {
      this.#retain(p);
      this.#counters.kept++;
      cancelOld();
      return { pause: p, action: 'keep', hint: this.#hint(p, 0), released: released ?? NONE };
    }
    const admitted = this.#tryAdmit(p);
    if (!admitted) cancelOld();
    return { pause: p, action: admitted ? 'prepare' : 'none', hint: null, released: released ?? NONE };
  }

  /**
   * The pause woke: its length is learned, and if it was admitted the coordinator's `onWake`
   * answers (a lease or a miss). Null when it holds no ticket: the engine looks up its own KV
   * (kept, or an artifact another pause prepared) and otherwise takes its original path. A
   * handle already ended gives null and changes nothing.
   */
  wake(pause: PauseHandle): WakeResult | null {
    const p = this.#own(pause);
    if (p === null) return null;
    this.#counters.wakes++;
    this.#stats.observe(p.cls, (this.#now() - p.startedAt) / 1000);
    const ticket = p.ticket;
    this.#close(p);
    return ticket === undefined ? null : this.#coordinator.onWake(ticket as Ticket);
  }

  /**
   * The pause was cancelled (the tool call abandoned): its unit, if any, loses this consumer.
   * Its length is not learned: it says only that pauses last at least so long.
   */
  cancel(pause: PauseHandle): boolean {
    const p = this.#own(pause);
    if (p === null) return false;
    this.#counters.cancels++;
    const ticket = p.ticket;
    this.#close(p);
    if (ticket !== undefined) this.#coordinator.onCancel(ticket as Ticket);
    return true;
  }

  /**
   * The engine dropped a kept pause's KV (its own priority eviction, reported by its KV events):
   * the pause is no longer kept, and is admitted for preparation at once if it qualifies and fits.
   * Returns what the pause now gets.
   */
  retentionDropped(pause: PauseHandle): PauseAction {
    const p = this.#own(pause);
    if (p === null || !p.retained) return p === null ? 'none' : p.ticket !== undefined ? 'prepare' : 'none';
    this.#counters.dropped++;
    this.#unretain(p);
    this.#score(p, (this.#now() - p.startedAt) / 1000);
    return this.#tryAdmit(p) ? 'prepare' : 'none';
  }

  /**
   * The storage worker evicted the artifact of `key`: pauses admitted on it would miss at their
   * wake, so their registrations are cancelled and the key's history forgotten; a later replan
   * may admit them again (counted as re-preparations).
   */
  evicted(key: ArtifactKey): void {
    const at = this.#byKey.get(key.hex);
    if (at === undefined) return;
    let any = false;
    for (const p of Array.isArray(at) ? [...at] : [at]) {
      if (p.ticket === undefined) continue;
      any = true;
      this.#withdraw(p);
    }
    if (any) this.#coordinator.forget(key);
  }

  /**
   * Re-scores every open pause at its age and revises: kept pauses' hints (when their priority
   * level moved) and the prepared set (admissions and withdrawals through the coordinator).
   * O(n log n) in open pauses.
   */
  replan(): ReplanResult {
    this.#counters.replans++;
    const now = this.#now();
    const open = this.#open;
    const n = open.length;
    const hints: Array<{ pause: PauseHandle; hint: RetentionHint }> = [];
    if (this.#keys.length < n) this.#keys = new Float64Array(Math.max(n, 2 * this.#keys.length));
    const keys = this.#keys;
    let candidates = 0;
    for (let i = 0; i < n; i++) {
      const p = open[i]!;
      const age = (now - p.startedAt) / 1000;
      this.#score(p, age);
      if (p.retained) {
        const hint = this.#hint(p, age);
        if (hint.priority !== p.level) {
          p.level = hint.priority;
          hints.push({ pause: p, hint });
        }
        continue;
      }
      if (!p.eligible && p.ticket === undefined) continue;
      // Descending by score (hysteresis for the admitted), ties by age: key = level, then index.
      const score = p.ticket !== undefined ? p.score * this.#hysteresis : p.score;
      keys[candidates++] = Math.floor(Math.min(score, 2) * SCORE_LEVELS) * 2 ** 25 + (2 ** 25 - 1 - i);
    }
    for (const engine of this.#engines.values()) engine.retained.heapify();
    this.#overflowEngine.retained.heapify();
    const sorted = keys.subarray(0, candidates).sort();
    // Walk from the best down, filling the arena and the device pools.
    const chosen = new Uint8Array(n);
    let arena = 0;
    const pools = new Map<EngineState, number>();
    for (let k = candidates - 1; k >= 0; k--) {
      const i = 2 ** 25 - 1 - (sorted[k]! % 2 ** 25);
      const p = open[i]!;
      if (p.device) {
        const used = pools.get(p.engine) ?? 0;
        if (used + p.bytes > this.#poolBudget) continue;
        pools.set(p.engine, used + p.bytes);
      } else {
        if (arena + p.bytes > this.#arenaBudget) continue;
        arena += p.bytes;
      }
      chosen[i] = 1;
    }
    const withdrawn: PauseHandle[] = [];
    const admitted: PauseHandle[] = [];
    // Withdrawals first, so the units they free make room for the admissions.
    for (let i = 0; i < n; i++) {
      const p = open[i]!;
      if (chosen[i] === 0 && p.ticket !== undefined) {
        this.#withdraw(p);
        withdrawn.push(p);
      }
    }
    for (let i = 0; i < n; i++) {
      const p = open[i]!;
      if (chosen[i] === 1 && p.ticket === undefined && this.#admit(p)) admitted.push(p);
    }
    return { admitted, withdrawn, hints };
  }

  /**
   * What the storage worker should evict first: the value of the artifact of `keyHex`, lower
   * evicted sooner. -1: no open pause wants it; in [0, 1]: open pauses want it but none is
   * admitted (the best one's hazard); above 1: an admitted pause wants it (1 + its hazard). A
   * worker evicts in ascending value and never one worth as much as the unit it makes room for.
   */
  evictionValue(keyHex: string): number {
    const at = this.#byKey.get(keyHex);
    if (at === undefined) return -1;
    if (!Array.isArray(at)) return at.ticket !== undefined ? 1 + at.score : at.score;
    let best = -1;
    for (const p of at) best = Math.max(best, p.ticket !== undefined ? 1 + p.score : p.score);
    return best;
  }

  /** `keyHexes` in the order to evict them (ascending value; ties keep the given order, say least recently used first). */
  evictionOrder(keyHexes: Iterable<string>): string[] {
    const ranked = [...keyHexes].map((hex, i) => ({ hex, i, v: this.evictionValue(hex) }));
    ranked.sort((a, b) => a.v - b.v || a.i - b.i);
    return ranked.map((r) => r.hex);
  }

  /** Counters and gauges; a fresh object each call. */
  stats(): PausePlannerStats {
    let retainedBytes = 0;
    let pools = 0;
    for (const e of this.#engines.values()) {
      retainedBytes += e.retainedBytes;
      pools += e.poolBytes;
    }
    retainedBytes += this.#overflowEngine.retainedBytes;
    pools += this.#overflowEngine.poolBytes;
    return { ...this.#counters, open: this.#open.length, retainedBytes, admittedBytes: this.#arenaBytes + pools };
  }

  // ---- internals --------------------------------------------------------------------------

  #own(pause: PauseHandle): Pause | null {
    if (!(pause instanceof Pause) || !pause.open) return null;
    return this.#byConsumer.get(`${pause.consumer.engine}\u0000${pause.consumer.request}`) === pause ? pause : null;
  }

  #engineOf(name: string): EngineState {
    let e = this.#engines.get(name);
    if (e !== undefined) return e;
    if (this.#engines.size >= this.#maxEngines) return this.#overflowEngine;
    e = new EngineState();
    this.#engines.set(name, e);
    return e;
  }

  #score(p: Pause, age: number): void {
    const stats = this.#stats;
    p.score = stats.hazard(p.cls, age, this.#horizon);
    p.eligible = stats.remainingAtLeast(p.cls, age, p.unitSeconds) >= this.#threshold;
  }

  /** The hint for a kept pause: its hazard as a priority 1-100, and how long keeping it stays likely worth it. */
  #hint(p: Pause, age: number): RetentionHint {
    const priority = 1 + Math.round(99 * p.score);
    const q90 = this.#stats.remainingQuantile(p.cls, age, 0.9);
    const ttlSeconds = Number.isFinite(q90) ? Math.min(MAX_TTL_SECONDS, Math.max(1, Math.ceil(q90))) : null;
    return { keep: true, priority, ttlSeconds };
  }

  #retain(p: Pause): void {
    p.retained = true;
    p.level = 1 + Math.round(99 * p.score);
    p.engine.retainedBytes += p.bytes;
    p.engine.retained.push(p);
  }

  #unretain(p: Pause): void {
    if (!p.retained) return;
    p.retained = false;
    p.level = RELEASE.priority;
    p.engine.retainedBytes -= p.bytes;
    p.engine.retained.remove(p);
  }

  /** Admits `p` now if it qualifies and fits. */
  #tryAdmit(p: Pause): boolean {
    if (!p.eligible || p.retained) return false;
    if (p.device ? p.engine.poolBytes + p.bytes > this.#poolBudget : this.#arenaBytes + p.bytes > this.#arenaBudget) return false;
    return this.#admit(p);
  }

  #admit(p: Pause): boolean {
    const admission = this.#coordinator.onWait(p.consumer, p.key, p.want);
    this.#counters.admissions++;
    if (p.wasAdmitted) this.#counters.readmissions++;
    if (admission.ticket === undefined) return false;
    p.ticket = admission.ticket;
    p.wasAdmitted = true;
    if (p.device) p.engine.poolBytes += p.bytes;
    else this.#arenaBytes += p.bytes;
    return true;
  }

  #withdraw(p: Pause): void {
    const ticket = p.ticket;
    if (ticket === undefined) return;
    this.#release(p);
    this.#counters.withdrawals++;
    this.#coordinator.onCancel(ticket as Ticket);
  }

  /** Forgets `p`'s ticket and gives back what it admitted. */
  #release(p: Pause): void {
    if (p.ticket === undefined) return;
    p.ticket = undefined;
    if (p.device) p.engine.poolBytes -= p.bytes;
    else this.#arenaBytes -= p.bytes;
  }

  /** Ends `p` as a plan: out of every index. Its ticket is the caller's to wake or cancel. */
  #close(p: Pause): void {
    p.open = false;
    this.#unretain(p);
    this.#release(p);
    const open = this.#open;
    const last = open.pop()!;
    if (last !== p) {
      open[p.index] = last;
      last.index = p.index;
    }
    p.index = -1;
    const id = `${p.consumer.engine}\u0000${p.consumer.request}`;
    if (this.#byConsumer.get(id) === p) this.#byConsumer.delete(id);
    const at = this.#byKey.get(p.hex);
    if (at === p) this.#byKey.delete(p.hex);
    else if (Array.isArray(at)) {
      const i = at.indexOf(p);
      if (i >= 0) at.splice(i, 1);
      if (at.length === 1) this.#byKey.set(p.hex, at[0]!);
    }
  }

  #indexKey(p: Pause): void {
    const at = this.#byKey.get(p.hex);
    if (at === undefined) this.#byKey.set(p.hex, p);
    else if (Array.isArray(at)) at.push(p);
    else this.#byKey.set(p.hex, [at, p]);
  }
}
