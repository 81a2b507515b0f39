// Online wait-length statistics: how long waits of a class (a tool class, a conversation) last,
// learned from waits that have ended and nothing else. One log-spaced histogram per class, with
// exponential forgetting so the figures follow a workload that changes; a class with few
// observations leans on the pooled histogram of every class. Bounded: a fixed number of bins per
// class, at most `maxClasses` classes (later names share one overflow class).
import { invalidArgument } from '../errors.js';

/** Bins per doubling of the wait length: about 19% apart. */
const BINS_PER_DOUBLING = 4;
/** The shortest length told apart (1 ms); shorter waits fall in the first bin. */
const MIN_SECONDS = 1e-3;
/** 1 ms to about 37 hours; longer waits fall in the last bin. */
const BINS = 27 * BINS_PER_DOUBLING;
/** Renormalise the weights before they overflow (the newest weighs the most). */
const RESCALE_ABOVE = 1e150;

/** The bin of a length, and where in it (0..1, in log space). */
function position(seconds: number): number {
  if (!(seconds > MIN_SECONDS)) return 0;
  const at = Math.log2(seconds / MIN_SECONDS) * BINS_PER_DOUBLING;
  return at >= BINS ? BINS - 1e-9 : at;
}

/** The lower edge of each bin (and the top of the last), in seconds. */
const EDGES = Float64Array.from({ length: BINS + 1 }, (_, i) => MIN_SECONDS * 2 ** (i / BINS_PER_DOUBLING));

/** The lower edge of bin `i`, in seconds. */
function edge(i: number): number {
  return EDGES[i]!;
}

/**
 * The integral of a survival function from 0 to `seconds`, from its values at the bin edges
 * (`integral`, as WaitLengthStats builds it): linear between edges, flat past the last.
 */
function integralAt(integral: Float64Array, seconds: number): number {
  if (!(seconds > MIN_SECONDS)) return integral[0]! * Math.max(0, seconds) / MIN_SECONDS;
  const at = Math.log2(seconds / MIN_SECONDS) * BINS_PER_DOUBLING;
  if (at >= BINS) return integral[BINS]!;
  const i = Math.floor(at);
  const lo = EDGES[i]!;
  return integral[i]! + ((integral[i + 1]! - integral[i]!) * (seconds - lo)) / (EDGES[i + 1]! - lo);
}

/** Observations after which a cached integral built at `n` is rebuilt: 1/64 more, at least 8, at most 64. */
function rebuildStep(n: number): number {
  return Math.min(64, Math.max(8, n / 64));
}

/** Options of {@link WaitLengthStats}. */
export interface WaitLengthStatsOptions {
  /** Most classes kept apart; later names share one overflow class. Default 256. */
  maxClasses?: number;
  /** Observations after which an old one weighs half a new one, per class. Default 2000. */
  halfLife?: number;
  /** How many observations' worth of the pooled histogram a class leans on. Default 8. */
  priorWeight?: number;
}

/** One class's histogram. Read it through {@link WaitLengthStats}. */
export class WaitClass {
  /** The class's name (the overflow class's is `'*other*'`). */
  readonly name: string;
  /** @internal Weighted counts per bin. */
  readonly counts = new Float64Array(BINS);
  /** @internal Counts at or above each bin; rebuilt when `dirty`. */
  readonly tail = new Float64Array(BINS + 1);
  /** @internal */
  dirty = false;
  /** @internal Sum of the counts. */
  weight = 0;
  /** @internal The weight the next observation adds (it grows, so older ones weigh less). */
  increment = 1;
  /** Observations so far (unweighted). */
  observations = 0;

  /** @internal */
  constructor(name: string) {
    this.name = name;
  }

  /** @internal */
  add(seconds: number, growth: number): void {
    this.counts[Math.floor(position(seconds))]! += this.increment;
    this.weight += this.increment;
    this.observations++;
    this.increment *= growth;
    this.dirty = true;
    if (this.increment > RESCALE_ABOVE) {
      const scale = this.increment;
      for (let i = 0; i < BINS; i++) this.counts[i] = (this.counts[i] as number) / scale;
      this.weight /= scale;
      this.increment = 1;
    }
  }

  /** @internal Observations' worth of evidence, the forgetting counted (about min(n, 1.44 halfLife)). */
  evidence(): number {
    return this.weight / this.increment;
  }

  /** @internal P(length > seconds) from this histogram alone; 1 when it holds nothing. */
  rawSurvival(seconds: number): number {
    return this.rawSurvivalAt(position(seconds));
  }

  /** @internal The same at a length's `position` (computed once for several histograms). */
  rawSurvivalAt(at: number): number {
    if (this.weight <= 0) return 1;
    if (this.dirty) this.#rebuild();
    const i = Math.floor(at);
    return (this.tail[i + 1]! + this.counts[i]! * (1 - (at - i))) / this.weight;
  }

  #rebuild(): void {
    let sum = 0;
    this.tail[BINS] = 0;
    for (let i = BINS - 1; i >= 0; i--) {
      sum += this.counts[i]!;
      this.tail[i] = sum;
    }
    this.dirty = false;
  }
}

/**
 * Wait lengths per class, learned online from waits that ended (a wake); a wait cancelled or
 * replaced says only that it lasted at least so long, and is not counted. Everything it answers
 * is conditional on a wait's age, so a decision can be revised as the wait ages.
 */
export class WaitLengthStats {
  readonly #classes = new Map<string, WaitClass>();
  readonly #all = new WaitClass('*all*');
  readonly #maxClasses: number;
  readonly #growth: number;
  readonly #prior: number;
  #other: WaitClass | null = null;

  constructor(options: WaitLengthStatsOptions = {}) {
    const { maxClasses = 256, halfLife = 2000, priorWeight = 8 } = options;
    if (!Number.isSafeInteger(maxClasses) || maxClasses < 1) throw invalidArgument('maxClasses', 'an integer >= 1', maxClasses);
    if (typeof halfLife !== 'number' || !(halfLife >= 1)) throw invalidArgument('halfLife', 'a number >= 1', halfLife);
    if (typeof priorWeight !== 'number' || !(priorWeight >= 0) || !Number.isFinite(priorWeight)) throw invalidArgument('priorWeight', 'a finite number >= 0', priorWeight);
    this.#maxClasses = maxClasses;
    this.#growth = 2 ** (1 / halfLife);
    this.#prior = priorWeight;
  }

  /** The class named `name`, made on first use (past `maxClasses`, the shared overflow class). */
  classOf(name: string): WaitClass {
    let cls = this.#classes.get(name);
    if (cls !== undefined) return cls;
    if (this.#classes.size < this.#maxClasses) {
      cls = new WaitClass(name);
      this.#classes.set(name, cls);
      return cls;
    }
    return (this.#other ??= new WaitClass('*other*'));
  }

  /** Records a wait of `cls` that ended after `seconds`. */
  observe(cls: WaitClass, seconds: number): void {
    if (!(seconds >= 0) || !Number.isFinite(seconds)) return;
    cls.add(seconds, this.#growth);
    this.#all.add(seconds, this.#growth);
  }

  /**
   * P(a wait of `cls` lasts longer than `seconds`): its own histogram, leaning on the pooled one
   * in proportion to how little it has seen. 1 when nothing has been seen at all.
   */
  survival(cls: WaitClass, seconds: number): number {
    const own = cls.evidence();
    const prior = this.#prior;
    const at = position(seconds);
    if (prior === 0 || this.#all.weight <= 0) return cls.rawSurvivalAt(at);
    if (own <= 0) return this.#all.rawSurvivalAt(at);
    return (own * cls.rawSurvivalAt(at) + prior * this.#all.rawSurvivalAt(at)) / (own + prior);
  }

  /**
   * P(a wait of `cls` that has lasted `age` seconds lasts `more` seconds longer still). A wait
   * older than anything seen is taken to go on (1): there is no evidence it will end.
   */
  remainingAtLeast(cls: WaitClass, age: number, more: number): number {
    const alive = this.survival(cls, age);
    if (alive <= 1e-12) return 1;
    return Math.min(1, this.survival(cls, age + more) / alive);
  }

  /** Its hazard over `horizon`: P(a wait of `cls` aged `age` ends within `horizon` seconds). */
  hazard(cls: WaitClass, age: number, horizon: number): number {
    return 1 - this.remainingAtLeast(cls, age, horizon);
  }

  /**
   * The `p` quantile of how much longer a wait of `cls` aged `age` lasts (`p` in (0, 1)): the
   * smallest t, to a bin's width, with P(it ends within t) >= p. Infinity when nothing says it
   * ends.
   */
  remainingQuantile(cls: WaitClass, age: number, p: number): number {
    const alive = this.survival(cls, age);
    if (alive <= 1e-12) return Infinity;
    const target = alive * (1 - p);
    // Survival never rises with length: a binary search over the bin edges past `age`.
    let lo = Math.ceil(position(age) + 1e-9);
    let hi = BINS;
    if (this.survival(cls, edge(hi)) > target) return Infinity;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.survival(cls, edge(mid)) <= target) hi = mid;
      else lo = mid + 1;
    }
    return Math.max(0, edge(lo) - age);
  }

  /**
   * E[min(remaining, horizon)] for a wait of `cls` aged `age`: how long, on average, something
   * held for it until it ends (or for at most `horizon` seconds) is held. A wait older than
   * anything seen is taken to go on (`horizon`). From the integral of the class's survival over
   * the bin edges, kept per class and rebuilt once the class, or all classes together (its
   * prior), have seen 1/64 more waits (at least 8, at most 64); between edges it is
   * interpolated. `alive`: P(it lasts to `age`), when the caller has it already.
   */
  expectedWithin(cls: WaitClass, age: number, horizon: number, alive = this.survival(cls, age)): number {
    if (alive <= 1e-12) return horizon;
    const integral = this.#integralOf(cls);
    const held = (integralAt(integral, age + horizon) - integralAt(integral, age)) / alive;
    return Math.min(horizon, Math.max(0, held));
  }

  /** Per class, the integral of its survival from 0 to each bin edge, and the counts it was built at. */
  readonly #integrals = new Map<WaitClass, { own: number; all: number; values: Float64Array }>();

  #integralOf(cls: WaitClass): Float64Array {
    const own = cls.observations;
    const all = this.#all.observations;
    const cached = this.#integrals.get(cls);
    if (cached !== undefined && own - cached.own < rebuildStep(cached.own) && all - cached.all < rebuildStep(cached.all)) return cached.values;
    // values[0] = the integral over [0, 1 ms), values[i + 1] = the integral up to edge(i + 1).
    const values = cached?.values ?? new Float64Array(BINS + 1);
    let previous = this.survival(cls, 0);
    values[0] = MIN_SECONDS * ((previous + this.survival(cls, MIN_SECONDS)) / 2);
    previous = this.survival(cls, MIN_SECONDS);
    for (let i = 0; i < BINS; i++) {
      const next = this.survival(cls, edge(i + 1));
      values[i + 1] = values[i]! + (edge(i + 1) - edge(i)) * ((previous + next) / 2);
      previous = next;
    }
    this.#integrals.set(cls, { own, all, values });
    return values;
  }

  /** The median length of a class's waits, to a bin's width (Infinity before any is seen). */
  median(cls: WaitClass): number {
    return this.remainingQuantile(cls, 0, 0.5);
  }

  /** Observations of every class together. */
  get observations(): number {
    return this.#all.observations;
  }

  /** The classes kept apart (not the overflow class). */
  get classes(): number {
    return this.#classes.size;
  }
}
