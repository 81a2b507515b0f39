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
import { ownOptions, rejectUnknownOptions } from '../internal/validate.js';
import type { ArtifactKey } from '../keys/key.js';
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
  /**
   * The horizon of a pause's hazard, P(it ends within this many seconds | its age), which keeping
   * ranks by, and of its hit density, which preparing ranks by. Default 10.
   */
  horizonSeconds?: number;
  /** Prepare a pause only when P(it lasts one unit longer | its age) is at least this. Default 0.45. */
  prepareThreshold?: number;
  /** Prepare a pause only once its score is at least this (a pause unlikely to hit soon waits). Default 0. */
  minScore?: number;
  /**
   * An admitted pause keeps its place until a newcomer's score beats its own this many times
   * (squared once its unit has had time to move its bytes; a replan alone never withdraws it
   * then). Default 4.
   */
  hysteresis?: number;
  /**
   * A pause's preparation score is its hit density times (mean pause bytes / its bytes) to this power,
   * at most 1: 0 ranks by hit density alone, 1 by hit density per byte. Smaller contexts first fit more
   * pauses in the same arena (more hits) at some cost to the bytes-weighted hit rate. Keeping KV
   * on the GPU ranks by hazard alone: weighting it too left the misses to the largest contexts
   * and raised the tail. Default 0.5.
   */
  bytesExponent?: number;
  /** Fixed seconds of a unit beyond its bytes (submit, checksum, publish). Default 0.002. */
  unitOverheadSeconds?: number;
  /** Most pauses open at once; past it a pause gets no plan (counted). Default 100,000. */
  maxPauses?: number;
  /** Most engines told apart. Default 1,024. */
  maxEngines?: number;
  /** The most units in flight it asks for. Default 64. */
  maxUnitsInFlight?: number;
  /**
   * The share of the tier's bandwidth its units in flight may fill, leaving the rest to misses'
   * foreground loads, which preparation traffic would slow (and with them the tail). Default 0.125.
   */
  tierShare?: number;
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
  /** P(it ends within the horizon | its age), as last computed: what keeping it is ranked by. */
  readonly hazard: number;
  /**
   * Its hit density, P(it ends within the horizon but after twice its unit's estimate) over
   * (1 + its expected holding time / 0.6 s), weighted by its size (`bytesExponent`), at most 1:
   * what preparing it and its artifact's eviction value are ranked by.
   */
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
  /** Admitted pauses withdrawn (onCancel) to make room in the arena or a pool for a likelier one. */
  readonly withdrawn: readonly PauseHandle[];
}

/** What `retentionDropped` did. */
export interface DropResult {
  /** What the pause gets now: 'prepare' if it was admitted at once, else 'none'. */
  readonly action: PauseAction;
  /** Admitted pauses withdrawn to make room for it. */
  readonly withdrawn: readonly PauseHandle[];
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
  'coordinator', 'budgets', 'links', 'horizonSeconds', 'prepareThreshold', 'minScore', 'hysteresis', 'bytesExponent', 'unitOverheadSeconds', 'maxPauses', 'maxEngines',
  'maxUnitsInFlight', 'tierShare', 'statistics', 'now',
]);
const NONE: readonly PauseHandle[] = Object.freeze([]);
const RELEASE: RetentionHint = Object.freeze({ keep: false, priority: 0, ttlSeconds: null });
/** The longest TTL a hint asks for: past it the next replan renews it anyway. */
const MAX_TTL_SECONDS = 3600;
/** Pauses over which the mean pause size (the bytes weighting's scale) is averaged. */
const MEAN_BYTES_WINDOW = 256;
/** How much one replan moves a pool's averaged marginal score: about the last 20 replans count. */
const CUTOFF_WEIGHT = 0.05;
/** Below this a score is a tie: sort keys keep 2^24 levels of it. */
const SCORE_LEVELS = 2 ** 24;
/**
 * A prepared pause hits only if its unit is done before it ends: the unit's estimate times this,
 * for the units queued ahead of it.
 */
const UNIT_SLACK = 2;
/**
 * The hit density's time scale: a pause's value for the arena is its chance to hit over (1 + its
 * expected holding time / this), so that among likely pauses the one that frees its room soonest
 * ranks first, and holding times well under it count alike.
 */
const HOLD_SCALE_SECONDS = 0.6;
/** Sort key of an admitted pause whose unit has moved its bytes: a replan keeps it. */
const KEPT_KEY = 4;
/** An admitted pause's artifact is worth this plus its score: above any pause not admitted (at most 1). */
const ADMITTED_VALUE = 2;

/**
 * The units in flight that fill `share` of the tier: that share of its bandwidth over one unit's,
 * at least two where the whole tier carries two units (one long unit then never holds up the
 * next), at least 1, at most `max`. A WaitCoordinator's `maxInFlight` and a PreparationDriver's take
 * it. The rest of the tier is left to the engines' own loads (a miss's foreground path), which
 * preparation would otherwise slow down.
 */
export function plannedUnitsInFlight(links: PlannerLinks, max = 64, share = 1): number {
  const fit = links.tierBytesPerSec / links.unitBytesPerSec;
  return Math.max(1, Math.min(max, Math.max(Math.floor(share * fit), Math.min(2, Math.floor(fit)))));
}

/** Where admitted pauses' artifacts go: the host arena, or one engine's device pool. */
const byScore = (p: Pause): number => p.score;
const byHazard = (p: Pause): number => p.hazard;

class AdmitPool {
  bytes = 0;
  /**
   * The pool's marginal score, averaged over recent replans: the lowest score a replan would
   * choose into it when candidates are left out for room, 0 when everything fits. A pause not
   * admitted yet is admitted only at or above it: under pressure a pause unlikely to end soon
   * waits for its score to rise rather than be prepared now and displaced later (wasted work).
   */
  cutoff = 0;
  /** Scratch of a replan: bytes chosen, lowest chosen score, whether a candidate was left out. */
  chosenBytes = 0;
  chosenLowest = Infinity;
  full = false;
  /** Admitted pauses, lowest score on top: the first to withdraw for a likelier newcomer. */
  readonly admitted = new IndexedMinHeap<Pause>(byScore);
}

/** One engine's pauses as the planner sees them. */
class EngineState {
  retainedBytes = 0;
  readonly retained = new IndexedMinHeap<Pause>(byHazard);
  readonly pool = new AdmitPool();
}

class Pause implements PauseHandle {
  /** Its planner, and its (engine, request) key in that planner's index. */
  owner: object | null = null;
  id = '';
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
  /** When it was last admitted (ms): after about one unit its bytes are moved, a sunk cost. */
  admittedAt = 0;
  wasAdmitted = false;
  open = true;
  hazard = 0;
  score = 0;
  eligible = false;
  /**
   * Position among open pauses, and in its engine's retained heap or its pool's admitted heap
   * (never both: a kept pause is not admitted).
   */
  index = -1;
  heapIndex = -1;
  seq: number;

  constructor(start: PauseStart, cls: WaitClass, unitSeconds: number, engine: EngineState, now: number, seq: number) {
    this.tag = Object.hasOwn(start, 'tag') ? start.tag : undefined;
    this.consumer = start.consumer;
    this.key = start.key;
    this.hex = start.key.hex;
    this.cls = cls;
    this.bytes = start.bytes;
    this.unitSeconds = unitSeconds;
    this.want = Object.hasOwn(start, 'readiness') ? start.readiness : undefined;
    this.device = this.want?.readiness === 'device';
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
 * long pauses last. A pause's hazard is P(it ends within `horizonSeconds` | its age); its score
 * is its hit density (P(it ends within the horizon, after twice its unit's estimate) over
 * (1 + E[min(remaining, horizon) | age] / 0.6 s)), weighted towards smaller contexts
 * (`bytesExponent`):
 *
 * - **keep** (GPU retention, no fixed TTL): every pause asks to keep its KV, at a priority that
 *   is its hazard; when an engine's retention budget is full, the kept pause least likely to end
 *   soon is given up (`released`), and the engine's own priority eviction (fed by the hints)
 *   drops more when turns need room (`retentionDropped` tells the planner);
 * - **prepare**: among open pauses not kept, those likely to outlast one unit
 *   (P(remaining > unit) >= `prepareThreshold`), ranked by score, the top ones that fit the arena
 *   (or the engine's device pool) are admitted (`onWait`); a pause not admitted yet must also
 *   reach its pool's recent marginal score, so that under pressure a pause unlikely to end soon
 *   waits for its score to rise instead of being prepared and displaced; an admitted pause is
 *   withdrawn (`onCancel`) by a replan only while its unit is still moving, and by a newcomer
 *   that needs its room only when it beats it by `hysteresis` (squared once its unit has moved
 *   its bytes); its bytes go only as the storage worker needs room (`evictionValue`);
 * - it asks for `unitsInFlight` units at once: `tierShare` of the tier's bandwidth over one
 *   unit's, at least two where the tier carries two.
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
  readonly #minScore: number;
  readonly #hysteresis: number;
  readonly #bytesExponent: number;
  /** Mean bytes of the pauses begun, the scale of the bytes weighting. */
  #meanBytes = 0;
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
  readonly #arena = new AdmitPool();
  /** Pauses withdrawn during the call under way, for its result. */
  #withdrawnNow: PauseHandle[] | null = null;
  /** Per class, the TTL of a pause at its start, and the observation count it was computed at. */
  readonly #ttlAtStart = new Map<WaitClass, { learned: number; ttl: number | null }>();
  /** Sort keys of a replan, reused. */
  #keys = new Float64Array(1024);
  readonly #counters = {
    begins: 0, replaced: 0, wakes: 0, cancels: 0, kept: 0, released: 0, dropped: 0, admissions: 0, readmissions: 0, withdrawals: 0, overflows: 0, replans: 0,
  };

  constructor(given: PausePlannerOptions<Ticket>) {
    if (given === null || typeof given !== 'object') throw invalidArgument('options', 'an object { coordinator, budgets, links, … }', given);
    rejectUnknownOptions(given, OPTION_NAMES, '');
    // Own properties only: an option inherited from a polluted Object.prototype is not the caller's.
    const options = ownOptions(given);
    const { coordinator } = options;
    if (coordinator === null || typeof coordinator !== 'object' || typeof coordinator.onWait !== 'function' || typeof coordinator.onWake !== 'function'
      || typeof coordinator.onCancel !== 'function' || typeof coordinator.forget !== 'function') {
      throw invalidArgument('coordinator', 'a WaitCoordinator (onWait, onWake, onCancel, forget)', coordinator);
    }
    if (options.budgets === null || typeof options.budgets !== 'object') throw invalidArgument('budgets', 'an object { gpuRetainBytes, arenaBytes, … }', options.budgets);
    if (options.links === null || typeof options.links !== 'object') throw invalidArgument('links', 'an object { tierBytesPerSec, unitBytesPerSec }', options.links);
    const budgets = ownOptions(options.budgets);
    const links = ownOptions(options.links);
    this.#coordinator = coordinator;
    this.#retainBudget = positive('budgets.gpuRetainBytes', budgets.gpuRetainBytes, true);
    const staging = positive('budgets.stagingBytesPerUnit', budgets.stagingBytesPerUnit ?? 0, true);
    this.#poolBudget = positive('budgets.devicePoolBytes', budgets.devicePoolBytes ?? 0, true);
    const tier = positive('links.tierBytesPerSec', links.tierBytesPerSec);
    this.#unitRate = Math.min(tier, positive('links.unitBytesPerSec', links.unitBytesPerSec));
    const maxUnits = options.maxUnitsInFlight ?? 64;
    if (!Number.isSafeInteger(maxUnits) || maxUnits < 1 || maxUnits > 1024) throw invalidArgument('maxUnitsInFlight', 'an integer in [1, 1024]', maxUnits);
    const share = options.tierShare ?? 0.125;
    if (typeof share !== 'number' || !(share > 0 && share <= 1)) throw invalidArgument('tierShare', 'a number in (0, 1]', share);
    this.#unitsInFlight = plannedUnitsInFlight(links, maxUnits, share);
    // Staging of the units in flight comes out of the arena first.
    this.#arenaBudget = Math.max(0, positive('budgets.arenaBytes', budgets.arenaBytes, true) - this.#unitsInFlight * staging);
    this.#horizon = positive('horizonSeconds', options.horizonSeconds ?? 10);
    const threshold = options.prepareThreshold ?? 0.45;
    if (typeof threshold !== 'number' || !(threshold >= 0 && threshold <= 1)) throw invalidArgument('prepareThreshold', 'a number in [0, 1]', threshold);
    this.#threshold = threshold;
    const minScore = options.minScore ?? 0;
    if (typeof minScore !== 'number' || !(minScore >= 0 && minScore <= 1)) throw invalidArgument('minScore', 'a number in [0, 1]', minScore);
    this.#minScore = minScore;
    const hysteresis = options.hysteresis ?? 4;
    if (typeof hysteresis !== 'number' || !(hysteresis >= 1) || !Number.isFinite(hysteresis)) throw invalidArgument('hysteresis', 'a finite number >= 1', hysteresis);
    this.#hysteresis = hysteresis;
    const bytesExponent = options.bytesExponent ?? 0.5;
    if (typeof bytesExponent !== 'number' || !(bytesExponent >= 0 && bytesExponent <= 2)) throw invalidArgument('bytesExponent', 'a number in [0, 2]', bytesExponent);
    this.#bytesExponent = bytesExponent;
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

  /** Units in flight to ask of the coordinator (`maxInFlight`) and the driver: `tierShare` of the tier over one unit. */
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
    // The optional fields, own properties only (a polluted Object.prototype is not the caller's).
    const given = Object.hasOwn(start, 'unitSeconds') ? start.unitSeconds : undefined;
    if (given !== undefined) positive('start.unitSeconds', given, true);
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
      return { pause: null, action: 'none', hint: null, released: NONE, withdrawn: NONE };
    }
    this.#withdrawnNow = null;
    const unitSeconds = given ?? this.#overhead + bytes / this.#unitRate;
    this.#meanBytes = this.#meanBytes === 0 ? Math.max(1, bytes) : this.#meanBytes + (bytes - this.#meanBytes) / MEAN_BYTES_WINDOW;
    const p = new Pause(start, this.#stats.classOf(toolClass), unitSeconds, this.#engineOf(consumer.engine), now, this.#seq++);
    p.owner = this;
    p.id = id;
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
      if (lowest === undefined || lowest.hazard >= p.hazard) break;
      this.#unretain(lowest);
      this.#counters.released++;
      (released ??= []).push(lowest);
      this.#score(lowest, (now - lowest.startedAt) / 1000);
      this.#tryAdmit(lowest);
    }
    if (engine.retainedBytes + p.bytes <= this.#retainBudget) {
      this.#retain(p);
      this.#counters.kept++;
      cancelOld();
      return { pause: p, action: 'keep', hint: this.#hint(p, 0), released: released ?? NONE, withdrawn: this.#takeWithdrawn() };
    }
    const admitted = this.#tryAdmit(p);
    if (!admitted) cancelOld();
    return { pause: p, action: admitted ? 'prepare' : 'none', hint: null, released: released ?? NONE, withdrawn: this.#takeWithdrawn() };
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
   * the pause is no longer kept, and is admitted for preparation at once if it qualifies and fits
   * (withdrawing admitted pauses it beats by the hysteresis, if that makes room).
   */
  retentionDropped(pause: PauseHandle): DropResult {
    const p = this.#own(pause);
    if (p === null || !p.retained) return { action: p !== null && p.ticket !== undefined ? 'prepare' : 'none', withdrawn: NONE };
    this.#counters.dropped++;
    this.#unretain(p);
    this.#score(p, (this.#now() - p.startedAt) / 1000);
    this.#withdrawnNow = null;
    const action = this.#tryAdmit(p) ? 'prepare' : 'none';
    return { action, withdrawn: this.#takeWithdrawn() };
  }

  /**
   * The storage worker evicted the artifact of `key`: pauses admitted on it would miss at their
   * wake, so their registrations are cancelled and the key's history forgotten; a later replan
   * may admit them again (counted as re-preparations). Returns the pauses withdrawn.
   */
  evicted(key: ArtifactKey): readonly PauseHandle[] {
    const at = this.#byKey.get(key.hex);
    if (at === undefined) return NONE;
    const withdrawn: PauseHandle[] = [];
    for (const p of Array.isArray(at) ? [...at] : [at]) {
      if (p.ticket === undefined) continue;
      this.#withdraw(p);
      withdrawn.push(p);
    }
    if (withdrawn.length > 0) this.#coordinator.forget(key);
    return withdrawn;
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
      // A kept pause needs its hazard only (its priority); its score is taken when it is let go.
      if (p.retained) this.#hazardOf(p, age);
      else this.#score(p, age);
      if (p.retained) {
        const priority = 1 + Math.round(99 * p.hazard);
        if (priority !== p.level) {
          p.level = priority;
          hints.push({ pause: p, hint: { keep: true, priority, ttlSeconds: this.#ttl(p.cls, age) } });
        }
        continue;
      }
      if (p.ticket === undefined && (!p.eligible || p.score < this.#minScore)) continue;
      // Descending by score (hysteresis for the admitted), ties by age: key = level, then index.
      // An admitted pause whose bytes have moved is not withdrawn by a replan: only a newcomer
      // that needs its room and beats it (begin, retentionDropped) displaces it.
      const score = p.ticket === undefined ? p.score : this.#sunk(p, now) ? KEPT_KEY : p.score * this.#hysteresis;
      keys[candidates++] = Math.floor(Math.min(score, 4) * SCORE_LEVELS) * 2 ** 25 + (2 ** 25 - 1 - i);
    }
    for (const engine of this.#engines.values()) {
      engine.retained.heapify();
      engine.pool.admitted.heapify();
    }
    this.#overflowEngine.retained.heapify();
    this.#overflowEngine.pool.admitted.heapify();
    this.#arena.admitted.heapify();
    const sorted = keys.subarray(0, candidates).sort();
    // Walk from the best down, filling the arena and the device pools.
    const chosen = new Uint8Array(n);
    const pools = this.#allPools();
    // First the pools' marginal scores, from everything that qualifies; then the choice, which
    // admits a pause not admitted yet only at or above its pool's (averaged) marginal score.
    for (let pass = 0; pass < 2; pass++) {
      for (const pool of pools) {
        pool.chosenBytes = 0;
        pool.chosenLowest = Infinity;
        pool.full = false;
      }
      for (let k = candidates - 1; k >= 0; k--) {
        const i = 2 ** 25 - 1 - (sorted[k]! % 2 ** 25);
        const p = open[i]!;
        const pool = this.#poolOf(p);
        if (pass === 1 && p.ticket === undefined && p.score < pool.cutoff) continue;
        if (pool.chosenBytes + p.bytes > this.#budgetOf(p)) {
          pool.full = true;
          continue;
        }
        pool.chosenBytes += p.bytes;
        // A pause kept for its moved bytes says nothing of what the pool's room is worth now.
        if (p.ticket === undefined || !this.#sunk(p, now)) pool.chosenLowest = Math.min(pool.chosenLowest, p.score);
        if (pass === 1) chosen[i] = 1;
      }
      if (pass === 0) {
        for (const pool of pools) {
          const marginal = pool.full && pool.chosenLowest !== Infinity ? pool.chosenLowest : 0;
          pool.cutoff += CUTOFF_WEIGHT * (marginal - pool.cutoff);
        }
      }
    }
    this.#withdrawnNow = null;
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
   * admitted (the best one's score); 2 or more: an admitted pause wants it (2 + its score). A
   * worker evicts in ascending value and never one worth as much as the unit it makes room for.
   */
  evictionValue(keyHex: string): number {
    const at = this.#byKey.get(keyHex);
    if (at === undefined) return -1;
    if (!Array.isArray(at)) return at.ticket !== undefined ? ADMITTED_VALUE + at.score : at.score;
    let best = -1;
    for (const p of at) best = Math.max(best, p.ticket !== undefined ? ADMITTED_VALUE + p.score : p.score);
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
    for (const e of [...this.#engines.values(), this.#overflowEngine]) {
      retainedBytes += e.retainedBytes;
      pools += e.pool.bytes;
    }
    return { ...this.#counters, open: this.#open.length, retainedBytes, admittedBytes: this.#arena.bytes + pools };
  }

  // ---- internals --------------------------------------------------------------------------

  #own(pause: PauseHandle): Pause | null {
    // Open pauses of this planner are exactly those its index holds: a replaced one is closed.
    return pause instanceof Pause && pause.open && pause.owner === this ? pause : null;
  }

  #engineOf(name: string): EngineState {
    let e = this.#engines.get(name);
    if (e !== undefined) return e;
    if (this.#engines.size >= this.#maxEngines) return this.#overflowEngine;
    e = new EngineState();
    this.#engines.set(name, e);
    return e;
  }

  /** Only `p.hazard`, at `age` (what a kept pause's priority needs); returns P(it lasts to its age). */
  #hazardOf(p: Pause, given: number): number {
    // A clock that went back (or a bad one) counts as age 0.
    const age = given > 0 ? given : 0;
    const alive = this.#stats.survival(p.cls, age);
    p.hazard = alive > 1e-12 ? 1 - Math.min(1, this.#stats.survival(p.cls, age + this.#horizon) / alive) : 0;
    return alive;
  }

  /** `p.hazard`, and what preparing it is ranked by: `p.eligible` and `p.score`. */
  #score(p: Pause, given: number): void {
    const age = given > 0 ? given : 0;
    const stats = this.#stats;
    // P(it lasts to its age), shared by every conditional below.
    const alive = this.#hazardOf(p, age);
    const known = alive > 1e-12;
    const horizon = this.#horizon;
    const ending = 1 - p.hazard;
    const outlasts = known ? Math.min(1, stats.survival(p.cls, age + p.unitSeconds) / alive) : 1;
    p.eligible = outlasts >= this.#threshold;
    // Its hit density: P(it ends within the horizon, but not before its unit could be done) over
    // how long it would hold its room meanwhile (plus HOLD_SCALE_SECONDS).
    const done = known ? Math.min(1, stats.survival(p.cls, age + UNIT_SLACK * p.unitSeconds) / alive) : 1;
    const hits = Math.max(0, done - ending);
    const value = known ? hits / (1 + stats.expectedWithin(p.cls, age, horizon, alive) / HOLD_SCALE_SECONDS) : 0;
    p.score = this.#bytesExponent === 0 ? value : Math.min(1, value * (this.#meanBytes / Math.max(1, p.bytes)) ** this.#bytesExponent);
  }

  /** The hint for a kept pause: its hazard as a priority 1-100, and how long keeping it stays likely worth it. */
  #hint(p: Pause, age: number): RetentionHint {
    return { keep: true, priority: 1 + Math.round(99 * p.hazard), ttlSeconds: this.#ttl(p.cls, age) };
  }

  /**
   * How long keeping a pause of `cls` aged `age` stays likely worth it: the 90th percentile of its
   * remaining length, whole seconds in [1, MAX_TTL_SECONDS], or null when nothing says it ends.
   * At age 0 (every begin) it is cached per class, and recomputed once the statistics have seen
   * 1/64 more waits (at least 16): a TTL is advice to an engine, renewed by every replan anyway.
   */
  #ttl(cls: WaitClass, age: number): number | null {
    const learned = this.#stats.observations;
    if (age === 0) {
      const cached = this.#ttlAtStart.get(cls);
      if (cached !== undefined && learned - cached.learned < Math.max(16, cached.learned / 64)) return cached.ttl;
    }
    const q90 = this.#stats.remainingQuantile(cls, age, 0.9);
    const ttl = Number.isFinite(q90) ? Math.min(MAX_TTL_SECONDS, Math.max(1, Math.ceil(q90))) : null;
    if (age === 0) this.#ttlAtStart.set(cls, { learned, ttl });
    return ttl;
  }

  #retain(p: Pause): void {
    p.retained = true;
    p.level = 1 + Math.round(99 * p.hazard);
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

  /**
   * How much an admitted pause's score is raised against a newcomer: the hysteresis, squared once
   * its unit has had time to move its bytes (withdrawing it then throws that work away).
   */
  #protection(p: Pause, now: number): number {
    return this.#sunk(p, now) ? this.#hysteresis * this.#hysteresis : this.#hysteresis;
  }

  /**
   * Whether an admitted pause's unit has had time to move its bytes (withdrawing it would waste
   * them): its estimate times UNIT_SLACK since it was admitted, as its unit may have queued first.
   */
  #sunk(p: Pause, now: number): boolean {
    return now - p.admittedAt >= 1000 * UNIT_SLACK * p.unitSeconds;
  }

  #allPools(): AdmitPool[] {
    const pools = [this.#arena, this.#overflowEngine.pool];
    for (const e of this.#engines.values()) pools.push(e.pool);
    return pools;
  }

  #poolOf(p: Pause): AdmitPool {
    return p.device ? p.engine.pool : this.#arena;
  }

  #budgetOf(p: Pause): number {
    return p.device ? this.#poolBudget : this.#arenaBudget;
  }

  /**
   * Admits `p` now if it qualifies and fits, withdrawing admitted pauses of its pool that it
   * beats by the hysteresis (lowest first) when that makes the room.
   */
  #tryAdmit(p: Pause): boolean {
    if (!p.eligible || p.retained || p.score < this.#minScore) return false;
    const pool = this.#poolOf(p);
    const budget = this.#budgetOf(p);
    if (p.bytes > budget || p.score < pool.cutoff) return false;
    if (pool.bytes + p.bytes > budget) {
      // Whether the pauses it beats free enough, before withdrawing any of them.
      let freeable = 0;
      const beaten: Pause[] = [];
      const heap = pool.admitted;
      const now = this.#now();
      while (pool.bytes - freeable + p.bytes > budget) {
        const lowest = heap.peek();
        if (lowest === undefined || lowest.score * this.#protection(lowest, now) >= p.score) break;
        heap.remove(lowest);
        beaten.push(lowest);
        freeable += lowest.bytes;
      }
      for (const b of beaten) heap.push(b);
      if (pool.bytes - freeable + p.bytes > budget) return false;
      for (const b of beaten) {
        this.#withdraw(b);
        (this.#withdrawnNow ??= []).push(b);
      }
    }
    return this.#admit(p);
  }

  #admit(p: Pause): boolean {
    const admission = this.#coordinator.onWait(p.consumer, p.key, p.want);
    this.#counters.admissions++;
    if (p.wasAdmitted) this.#counters.readmissions++;
    if (admission.ticket === undefined) return false;
    p.ticket = admission.ticket;
    p.admittedAt = this.#now();
    p.wasAdmitted = true;
    const pool = this.#poolOf(p);
    pool.bytes += p.bytes;
    pool.admitted.push(p);
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
    const pool = this.#poolOf(p);
    pool.bytes -= p.bytes;
    pool.admitted.remove(p);
  }

  #takeWithdrawn(): readonly PauseHandle[] {
    const taken = this.#withdrawnNow;
    this.#withdrawnNow = null;
    return taken ?? NONE;
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
    if (this.#byConsumer.get(p.id) === p) this.#byConsumer.delete(p.id);
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
