/**
 * Agent traces: a seeded generator of agent sessions (waits, wakes, cancels and
 * replacements over time), a JSONL loader and writer so a team can replay its own,
 * and a summary. The model and the sources behind its defaults: docs/agent-trace.md.
 *
 * A trace is data, not a driver: nothing here calls the coordinator or reads a clock.
 */
import { WaitprepError, describe, invalidArgument } from '../errors.js';
import { fnv1a } from '../internal/fnv1a.js';
import { nearestRank } from './stats.js';
import { isPlainObject, ownField, ownOptions, rejectUnknownOptions, unknownName } from '../internal/validate.js';
import { artifactKey, type ArtifactKey, type ArtifactKeyFields } from '../keys/key.js';

// ---------------------------------------------------------------------------------------------
// Shapes

/**
 * A run of tokens in a {@link KeySpec}: either explicit token ids, or `length`
 * pseudo-random token ids derived from the string `seed` alone. A seeded run is
 * prefix-consistent: the first n tokens of `{ seed, length: n + m }` are
 * `{ seed, length: n }`, so a context that grows keeps its earlier key's layout as
 * a prefix.
 */
export type TokenSegment = readonly number[] | { readonly seed: string; readonly length: number };

/**
 * The JSON-able part of an artifact key that a trace varies: `task` and
 * `namespace` map to `source.task` and `source.namespace`, `tokens` (segments,
 * concatenated in order) to `source.tokenLayout`. Every other field comes from a
 * {@link TraceKeyBase}. {@link keyFromSpec} builds the key.
 */
export interface KeySpec {
  readonly task: string;
  readonly namespace: string;
  readonly tokens: readonly TokenSegment[];
}

interface TraceEventBase {
  /** Seconds from the start of the trace (rounded to microseconds by the generator). */
  readonly t: number;
  /** The agent: one consumer's request id. */
  readonly agent: string;
  /** The request generation of the wait this event starts or ends. */
  readonly generation: number;
}

/** An agent starts waiting (a tool call began) and demands the artifact `key`. */
export interface TraceWait extends TraceEventBase {
  readonly event: 'wait';
  readonly key: KeySpec;
  /**
   * The tool class whose call this wait is (the generator writes its {@link ToolClass}
   * `name`; a replacement carries the class of the call it replaces). Optional: a trace
   * without tool classes loads as before.
   */
  readonly tool?: string;
}

/** The wait of (`agent`, `generation`) ends: the tool call returned (`wake`) or was abandoned (`cancel`). */
export interface TraceEnd extends TraceEventBase {
  readonly event: 'wake' | 'cancel';
  readonly key?: undefined;
  readonly tool?: undefined;
}

/** One trace event. A trace is an array of them with non-decreasing `t`. */
export type TraceEvent = TraceWait | TraceEnd;

/** A lognormal over `exp(mu + sigma * N(0, 1))`: mu and sigma of the natural log. */
export interface LogNormal {
  readonly mu: number;
  readonly sigma: number;
}

/**
 * One class of tool call in the mix. Its wait is lognormal; with `timeout`, a
 * `timeout.fraction` of the class's calls run into the timeout and take exactly
 * `timeout.seconds`, and no call of the class takes longer.
 */
export interface ToolClass extends LogNormal {
  readonly name: string;
  /** Relative weight in the mix; the weights need not sum to 1. */
  readonly weight: number;
  readonly timeout?: { readonly fraction: number; readonly seconds: number };
}

/** Options of {@link generateTrace}. `agents`, `seconds` and `seed` are required; unknown options are rejected. */
export interface GenerateTraceOptions {
  /** How many agent sessions (one per agent). */
  readonly agents: number;
  /** Trace length in seconds: no event after it; waits still open at the end wake at `seconds`. */
  readonly seconds: number;
  /** Any safe integer. The same seed and options give the same trace. */
  readonly seed: number;
  /**
   * Session arrivals per second (Poisson). Default: 1, raised to `2 * agents / seconds`
   * when needed so that all agents arrive within about the first half of the trace.
   */
  readonly arrivalRate?: number;
  /** Task groups; the agents of one task share their first key. Default `ceil(agents / 4)`; agent i has task i mod tasks. */
  readonly tasks?: number;
  /** LLM calls per session, rounded and clipped to [min, max]; a session makes `calls - 1` tool calls. Default LN(2.8, 0.8) in [2, 200]. */
  readonly callsPerSession?: LogNormal & { readonly min: number; readonly max: number };
  /** Seconds of model time before each tool call. Default LN(0.7, 0.6) (median 2 s). */
  readonly thinkSeconds?: LogNormal;
  /** The tool mix. Default {@link DEFAULT_TOOL_MIX}. */
  readonly toolMix?: readonly ToolClass[];
  /** Fraction of tool calls whose wait ends with `cancel` instead of `wake`. Default 0.02. */
  readonly cancelFraction?: number;
  /** Fraction of tool calls whose wait is replaced, before it ends, by a wait of a higher generation. Default 0.02. */
  readonly replaceFraction?: number;
  /** Tokens of the system prompt and tool schemas every agent shares. Default 14000. */
  readonly systemPrefixTokens?: number;
  /** Tokens of a task's text, uniform in [min, max]. Default [300, 2000]. */
  readonly taskTokens?: { readonly min: number; readonly max: number };
  /** Context growth per call in tokens, clipped to [1, 32768]. Default LN(6.1, 1.2) (median ~450). */
  readonly growthTokens?: LogNormal;
  /** Tokens a replacement appends (a new message), uniform in [min, max]. Default [16, 256]. */
  readonly steerTokens?: { readonly min: number; readonly max: number };
  /** `source.namespace` of every key. Default `'trace'`. */
  readonly namespace?: string;
}

/** Every field of a trace's keys except the source's task, namespace, token layout and extra; see {@link keyFromSpec}. */
export type TraceKeyBase = Readonly<
  Omit<ArtifactKeyFields['source'], 'task' | 'namespace' | 'tokenLayout' | 'extra'> & Omit<ArtifactKeyFields, 'source'>
>;

/** What {@link traceSummary} counts. */
export interface TraceSummary {
  /** Distinct agents with at least one event. */
  readonly agents: number;
  readonly events: number;
  readonly waits: number;
  readonly wakes: number;
  readonly cancels: number;
  /** Waits that arrived while the same agent's previous wait was still open (and made it stale). */
  readonly replacements: number;
  /** Waits never ended by a wake, a cancel or a replacement. 0 for a generated trace. */
  readonly open: number;
  /** Distinct key specs demanded (two different specs that expand to the same tokens count twice). */
  readonly distinctKeys: number;
  /** Key specs demanded by two or more agents. */
  readonly sharedKeys: number;
  /** Waits whose key spec is demanded by two or more agents. */
  readonly sharedKeyWaits: number;
  /**
   * Seconds from each wait to what ended it (its wake or cancel, or the replacing
   * wait), nearest-rank percentiles over the waits that ended; 0 when none did.
   */
  readonly waitSeconds: { readonly p50: number; readonly p90: number; readonly p99: number; readonly max: number };
  /** `t` of the last event; 0 for an empty trace. */
  readonly lastT: number;
}

// ---------------------------------------------------------------------------------------------
// Defaults (docs/agent-trace.md names the source of each)

/**
 * The default tool mix: file operations, short shell commands, tests/builds (3% of
 * which hit a 120 s timeout), web search/fetch and sub-agents.
 */
export const DEFAULT_TOOL_MIX: readonly ToolClass[] = Object.freeze([
  Object.freeze({ name: 'file', weight: 0.6, mu: -3.2, sigma: 1.0 }),
  Object.freeze({ name: 'shell', weight: 0.2, mu: -2.0, sigma: 1.6 }),
  Object.freeze({ name: 'build', weight: 0.17, mu: 1.0, sigma: 1.5, timeout: Object.freeze({ fraction: 0.03, seconds: 120 }) }),
  Object.freeze({ name: 'web', weight: 0.015, mu: 2.4, sigma: 0.4 }),
  Object.freeze({ name: 'subagent', weight: 0.015, mu: 4.5, sigma: 0.8 }),
]);

/** The source fields {@link keyFromSpec} uses unless told otherwise. */
export const TRACE_KEY_BASE: TraceKeyBase = Object.freeze({
  snapshotKind: 'kv-page',
  runtime: 'trace',
  model: 'trace-model',
  adapter: 'none',
  profile: 'bf16',
  positionPolicy: 'absolute',
  sourcePageGeneration: 0,
  codec: 'none',
  codecConfig: 'none',
  representationVersion: 1,
});

/** Seeded token ids are in [0, TRACE_VOCAB): a Llama-3-sized vocabulary. */
export const TRACE_VOCAB = 128_256;
/** The most tokens one key spec may expand to: a loaded line cannot ask for gigabytes. */
export const MAX_SPEC_TOKENS = 1 << 24;

const DEFAULTS = {
  callsPerSession: { mu: 2.8, sigma: 0.8, min: 2, max: 200 },
  thinkSeconds: { mu: 0.7, sigma: 0.6 },
  cancelFraction: 0.02,
  replaceFraction: 0.02,
  systemPrefixTokens: 14_000,
  taskTokens: { min: 300, max: 2000 },
  growthTokens: { mu: 6.1, sigma: 1.2 },
  steerTokens: { min: 16, max: 256 },
  namespace: 'trace',
} as const;
const MAX_GROWTH_TOKENS = 32_768;
const MAX_AGENTS = 1_000_000;
const OPTION_NAMES = new Set([
  'agents', 'seconds', 'seed', 'arrivalRate', 'tasks', 'callsPerSession', 'thinkSeconds', 'toolMix',
  'cancelFraction', 'replaceFraction', 'systemPrefixTokens', 'taskTokens', 'growthTokens', 'steerTokens', 'namespace',
]);

// ---------------------------------------------------------------------------------------------
// PRNG: xoshiro128** seeded through splitmix32. Integer ops only (Math.imul, shifts), so a
// stream is the same on every platform; the floats derived from it go through V8's fdlibm
// Math.log/exp/cos, which are also platform-independent.

function splitmix32(state: number): [next: number, out: number] {
  const next = (state + 0x9e3779b9) | 0;
  let z = next;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
  return [next, (z ^ (z >>> 16)) >>> 0];
}

class Rng {
  #s0: number;
  #s1: number;
  #s2: number;
  #s3: number;

  /**
   * A stream from three 32-bit words (seed low, seed high, stream id). All three are
   * folded into one splitmix32 state before any state word is drawn, so streams that
   * differ only in the id differ from their first output on.
   */
  constructor(a: number, b: number, c: number) {
    let state = splitmix32(a | 0)[1];
    state = splitmix32(state ^ (b | 0))[1];
    state = splitmix32(state ^ (c | 0))[1];
    const words: number[] = [];
    for (let i = 0; i < 4; i++) {
      const [next, out] = splitmix32(state);
      words.push(out);
      state = next;
    }
    [this.#s0, this.#s1, this.#s2, this.#s3] = words as [number, number, number, number];
    if ((this.#s0 | this.#s1 | this.#s2 | this.#s3) === 0) this.#s0 = 1; // the one state xoshiro cannot leave
  }

  u32(): number {
    const s1 = this.#s1;
    const result = Math.imul(rotl(Math.imul(s1, 5), 7), 9) >>> 0;
    const t = s1 << 9;
    this.#s2 ^= this.#s0;
    this.#s3 ^= this.#s1;
    this.#s1 ^= this.#s2;
    this.#s0 ^= this.#s3;
    this.#s2 ^= t;
    this.#s3 = rotl(this.#s3, 11);
    return result;
  }

  /** Uniform in (0, 1): never 0, so its log is finite. */
  float(): number {
    return (this.u32() + 0.5) / 4294967296;
  }

  /** Standard normal (Box–Muller; the second value is not kept, so the stream stays simple). */
  normal(): number {
    return Math.sqrt(-2 * Math.log(this.float())) * Math.cos(2 * Math.PI * this.float());
  }

  lognormal(d: LogNormal): number {
    return Math.exp(d.mu + d.sigma * this.normal());
  }

  exponential(rate: number): number {
    return -Math.log(this.float()) / rate;
  }

  /** Integer uniform in [min, max]. */
  intBetween(min: number, max: number): number {
    return min + Math.floor(this.float() * (max - min + 1));
  }
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}

function seedWords(seed: number): [number, number] {
  const big = BigInt.asUintN(64, BigInt(seed));
  return [Number(big & 0xffff_ffffn), Number(big >> 32n)];
}

/** `length` token ids derived from `seed` alone (prefix-consistent across lengths). */
function seededTokens(seed: string, length: number, out: Uint32Array, at: number): void {
  const rng = new Rng(fnv1a(seed, 0x811c9dc5), fnv1a(seed, 0x050c5d1f), 0x746f6b73);
  for (let i = 0; i < length; i++) out[at + i] = rng.u32() % TRACE_VOCAB;
}

// ---------------------------------------------------------------------------------------------
// Keys

/** The token layout a spec expands to. Throws `ERR_INVALID_ARGUMENT` for a malformed spec. */
export function specTokenLayout(spec: KeySpec): Uint32Array {
  const checked = checkKeySpec(spec, 'spec', '');
  return expand(checked);
}

function expand(spec: KeySpec): Uint32Array {
  let total = 0;
  for (const s of spec.tokens) total += s.length;
  const out = new Uint32Array(total);
  let at = 0;
  for (const s of spec.tokens) {
    if (isSeeded(s)) {
      seededTokens(s.seed, s.length, out, at);
      at += s.length;
    } else {
      out.set(s, at);
      at += s.length;
    }
  }
  return out;
}

function isSeeded(s: TokenSegment): s is { readonly seed: string; readonly length: number } {
  return !Array.isArray(s);
}

/**
 * Builds the {@link ArtifactKey} a spec names, deterministically: `base` (default
 * {@link TRACE_KEY_BASE}, fields given here override it) supplies every field but
 * task, namespace and token layout. Throws `ERR_INVALID_ARGUMENT` for a malformed
 * spec or base, `ERR_INVALID_KEY` when artifactKey() refuses a field.
 */
export function keyFromSpec(spec: KeySpec, base?: Partial<TraceKeyBase>): ArtifactKey {
  const checked = checkKeySpec(spec, 'spec', '');
  if (base !== undefined && !isPlainObject(base)) throw bad('base', 'an object of key fields', base, '');
  const b = { ...TRACE_KEY_BASE };
  if (base !== undefined) {
    for (const name of Object.keys(base)) {
      if (!Object.hasOwn(TRACE_KEY_BASE, name)) throw unknownName(`base.${name}`, 'field', Object.keys(TRACE_KEY_BASE), base[name as keyof TraceKeyBase]);
    }
    Object.assign(b, base);
  }
  const fields: ArtifactKeyFields = {
    source: {
      snapshotKind: b.snapshotKind,
      runtime: b.runtime,
      model: b.model,
      adapter: b.adapter,
      profile: b.profile,
      positionPolicy: b.positionPolicy,
      task: checked.task,
      namespace: checked.namespace,
      tokenLayout: expand(checked),
    },
    sourcePageGeneration: b.sourcePageGeneration,
    codec: b.codec,
    codecConfig: b.codecConfig,
    representationVersion: b.representationVersion,
  };
  return artifactKey(fields);
}

// ---------------------------------------------------------------------------------------------
// Generator

interface Resolved {
  agents: number;
  seconds: number;
  seed: number;
  arrivalRate: number;
  tasks: number;
  callsPerSession: LogNormal & { min: number; max: number };
  thinkSeconds: LogNormal;
  toolMix: readonly ToolClass[];
  cumulative: number[];
  cancelFraction: number;
  replaceFraction: number;
  systemPrefixTokens: number;
  taskTokens: { min: number; max: number };
  growthTokens: LogNormal;
  steerTokens: { min: number; max: number };
  namespace: string;
}

/**
 * Generates agent sessions: `agents` sessions arrive (Poisson); each makes LLM
 * calls with a tool call between consecutive ones; each tool call is a `wait`
 * demanding the key of the context the agent's previous call ran on, ended by a
 * `wake` when the tool returns or, for `cancelFraction` of calls, a `cancel`; for
 * `replaceFraction` of calls a second `wait` of a higher generation (the context
 * grew by a new message) replaces the first before it ends. Sorted by `t`; ties
 * keep each agent's causal order. Same options, same events.
 *
 * Throws `ERR_INVALID_ARGUMENT` for a missing, ill-typed or unknown option.
 */
export function generateTrace(options: GenerateTraceOptions): TraceEvent[] {
  const o = resolveOptions(options);
  const [lo, hi] = seedWords(o.seed);
  const arrivals = new Rng(lo, hi, 0);
  const events: TraceEvent[] = [];
  let arrival = 0;
  for (let i = 0; i < o.agents; i++) {
    arrival += arrivals.exponential(o.arrivalRate);
    if (arrival >= o.seconds) break;
    // One stream per agent: agent i's session does not depend on how many agents there are.
    session(o, i, arrival, new Rng(lo, hi, i + 1), events);
  }
  // Array.prototype.sort is stable, and each agent's events went in in causal order.
  events.sort((a, b) => a.t - b.t);
  return events;
}

function session(o: Resolved, index: number, start: number, rng: Rng, out: TraceEvent[]): void {
  const agent = `agent-${index}`;
  const task = `task-${index % o.tasks}`;
  const taskRng = new Rng(...seedWords(o.seed), 0x8000_0000 | (index % o.tasks));
  const taskTokens = taskRng.intBetween(o.taskTokens.min, o.taskTokens.max);
  const prefix: TokenSegment[] = [];
  if (o.systemPrefixTokens > 0) prefix.push(Object.freeze({ seed: `system/${o.namespace}`, length: o.systemPrefixTokens }));
  prefix.push(Object.freeze({ seed: `s${o.seed}/${task}`, length: taskTokens }));
  const keyAt = (context: number): KeySpec => Object.freeze({
    task,
    namespace: o.namespace,
    tokens: Object.freeze(context === 0 ? [...prefix] : [...prefix, Object.freeze({ seed: `s${o.seed}/${agent}`, length: context })]),
  });

  const { min, max } = o.callsPerSession;
  const calls = Math.min(max, Math.max(min, Math.round(rng.lognormal(o.callsPerSession))));
  let t = start;
  let generation = 0;
  let context = 0;
  for (let call = 0; call < calls - 1; call++) {
    t += rng.lognormal(o.thinkSeconds);
    if (t >= o.seconds) return;
    const call = toolCall(o, rng);
    const end = Math.min(t + call.seconds, o.seconds);
    out.push({ t: micros(t), agent, generation, event: 'wait', key: keyAt(context), tool: call.tool });
    let from = t;
    if (rng.float() < o.replaceFraction) {
      from = t + rng.float() * (end - t);
      context += rng.intBetween(o.steerTokens.min, o.steerTokens.max);
      generation++;
      out.push({ t: micros(from), agent, generation, event: 'wait', key: keyAt(context), tool: call.tool });
    }
    if (rng.float() < o.cancelFraction) {
      t = from + rng.float() * (end - from);
      out.push({ t: micros(t), agent, generation, event: 'cancel' });
    } else {
      t = end;
      out.push({ t: micros(t), agent, generation, event: 'wake' });
    }
    generation++;
    context += Math.min(MAX_GROWTH_TOKENS, Math.max(1, Math.round(rng.lognormal(o.growthTokens))));
  }
}

/** One tool call: its class and how long it runs. */
function toolCall(o: Resolved, rng: Rng): { tool: string; seconds: number } {
  const u = rng.float() * o.cumulative[o.cumulative.length - 1]!;
  let i = 0;
  while (i < o.cumulative.length - 1 && u >= o.cumulative[i]!) i++;
  const tool = o.toolMix[i]!;
  if (tool.timeout === undefined) return { tool: tool.name, seconds: rng.lognormal(tool) };
  if (rng.float() < tool.timeout.fraction) return { tool: tool.name, seconds: tool.timeout.seconds };
  return { tool: tool.name, seconds: Math.min(tool.timeout.seconds, rng.lognormal(tool)) };
}

/** Rounds to microseconds; monotone, so rounding keeps each agent's order. */
function micros(seconds: number): number {
  return Math.round(seconds * 1e6) / 1e6;
}

function resolveOptions(given: GenerateTraceOptions): Resolved {
  if (!isPlainObject(given)) throw bad('options', 'an object { agents, seconds, seed, ... }', given, '');
  rejectUnknownOptions(given, OPTION_NAMES, 'options');
  // Own properties only, here and in the nested options: an option inherited from a polluted
  // Object.prototype is not the caller's and must not change the trace.
  const options = ownOptions(given);
  const agents = integerIn('options.agents', options.agents, 1, MAX_AGENTS);
  const seconds = positiveNumber('options.seconds', options.seconds);
  if (typeof options.seed !== 'number' || !Number.isSafeInteger(options.seed)) throw bad('options.seed', 'a safe integer', options.seed, '');
  const arrivalRate = options.arrivalRate === undefined ? Math.max(1, (2 * agents) / seconds) : positiveNumber('options.arrivalRate', options.arrivalRate);
  const tasks = options.tasks === undefined ? Math.ceil(agents / 4) : integerIn('options.tasks', options.tasks, 1, MAX_AGENTS);
  const callsIn = options.callsPerSession ?? DEFAULTS.callsPerSession;
  const calls = { ...logNormal('options.callsPerSession', callsIn), ...range('options.callsPerSession', callsIn, 1, 100_000) };
  const { toolMix, cumulative } = checkToolMix(options.toolMix ?? DEFAULT_TOOL_MIX);
  return {
    agents,
    seconds,
    seed: options.seed,
    arrivalRate,
    tasks,
    callsPerSession: calls,
    thinkSeconds: logNormal('options.thinkSeconds', options.thinkSeconds ?? DEFAULTS.thinkSeconds),
    toolMix,
    cumulative,
    cancelFraction: fraction('options.cancelFraction', options.cancelFraction ?? DEFAULTS.cancelFraction),
    replaceFraction: fraction('options.replaceFraction', options.replaceFraction ?? DEFAULTS.replaceFraction),
    systemPrefixTokens: integerIn('options.systemPrefixTokens', options.systemPrefixTokens ?? DEFAULTS.systemPrefixTokens, 0, MAX_SPEC_TOKENS / 4),
    taskTokens: range('options.taskTokens', options.taskTokens ?? DEFAULTS.taskTokens, 1, MAX_SPEC_TOKENS / 4),
    growthTokens: logNormal('options.growthTokens', options.growthTokens ?? DEFAULTS.growthTokens),
    steerTokens: range('options.steerTokens', options.steerTokens ?? DEFAULTS.steerTokens, 1, MAX_GROWTH_TOKENS),
    namespace: nonEmptyString('options.namespace', options.namespace ?? DEFAULTS.namespace, ''),
  };
}

/** The tool classes checked and copied from their own properties, with their cumulative weights. */
function checkToolMix(mix: unknown): { toolMix: ToolClass[]; cumulative: number[] } {
  if (!Array.isArray(mix) || mix.length === 0) throw bad('options.toolMix', 'a non-empty array of tool classes', mix, '');
  const toolMix: ToolClass[] = [];
  const cumulative: number[] = [];
  let sum = 0;
  mix.forEach((given: unknown, i) => {
    const field = `options.toolMix[${i}]`;
    if (!isPlainObject(given)) throw bad(field, 'an object { name, weight, mu, sigma, timeout? }', given, '');
    const tool = ownOptions(given);
    const name = nonEmptyString(`${field}.name`, tool.name, '');
    const { weight } = tool;
    if (typeof weight !== 'number' || !Number.isFinite(weight) || weight < 0) throw bad(`${field}.weight`, 'a finite number >= 0', weight, '');
    // `timeout` is an own property of the copy even when absent, so the generator's read of it
    // never reaches Object.prototype.
    let timeout: ToolClass['timeout'] = undefined;
    if (tool.timeout !== undefined) {
      if (!isPlainObject(tool.timeout)) throw bad(`${field}.timeout`, 'an object { fraction, seconds }', tool.timeout, '');
      const given = ownOptions(tool.timeout);
      timeout = {
        fraction: fraction(`${field}.timeout.fraction`, given.fraction),
        seconds: positiveNumber(`${field}.timeout.seconds`, given.seconds),
      };
    }
    sum += weight;
    toolMix.push({ name, weight, ...logNormal(field, tool), timeout });
    cumulative.push(sum);
  });
  if (!(sum > 0)) throw bad('options.toolMix', 'tool classes with a positive total weight', mix, '');
  return { toolMix, cumulative };
}

// ---------------------------------------------------------------------------------------------
// JSONL

/**
 * Parses a JSONL trace: one event object per line, `{ t, agent, generation?, event, key?, tool? }`
 * (docs/agent-trace.md). Blank lines are skipped; `generation` defaults to 0. Each line is
 * checked, and so is the sequence: times non-decreasing, a wait's (agent, generation) new,
 * a wake or cancel naming a wait seen before. Throws `ERR_INVALID_ARGUMENT` naming the line
 * (in the message) and the field (`error.field`).
 */
export function loadTraceJsonl(text: string): TraceEvent[] {
  if (typeof text !== 'string') throw bad('text', 'a string of JSONL', text, '');
  const events: TraceEvent[] = [];
  const sequence = new SequenceCheck();
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (line === '') continue;
    const where = ` on line ${i + 1}`;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (error) {
      throw new WaitprepError('ERR_INVALID_ARGUMENT', `Expected line ${i + 1} to be one JSON object, got invalid JSON (${(error as Error).message})`, { field: 'line', cause: error });
    }
    const event = checkEvent(value, where, { name: `line ${i + 1}`, field: 'line' });
    sequence.add(event, where);
    events.push(event);
  }
  return events;
}

/**
 * Writes events as JSONL, one line each with fields in the order t, agent, generation,
 * event, key, tool (when the wait has one), ending in a newline. Checks them as {@link loadTraceJsonl} would (naming
 * `events[i]`), so what it writes loads back to equal events.
 */
export function traceToJsonl(events: readonly TraceEvent[]): string {
  if (!Array.isArray(events)) throw bad('events', 'an array of trace events', events, '');
  const sequence = new SequenceCheck();
  let out = '';
  for (let i = 0; i < events.length; i++) {
    const where = ` in events[${i}]`;
    const e = checkEvent(events[i], where, { name: `events[${i}]`, field: `events[${i}]` });
    sequence.add(e, where);
    const head = `{"t":${JSON.stringify(e.t)},"agent":${JSON.stringify(e.agent)},"generation":${e.generation},"event":"${e.event}"`;
    const tool = e.event === 'wait' && e.tool !== undefined ? `,"tool":${JSON.stringify(e.tool)}` : '';
    out += e.event === 'wait' ? `${head},"key":${JSON.stringify(e.key)}${tool}}\n` : `${head}}\n`;
  }
  return out;
}

const EVENT_FIELDS = new Set(['t', 'agent', 'generation', 'event', 'key', 'tool']);
const SPEC_FIELDS = new Set(['task', 'namespace', 'tokens']);
const SEGMENT_FIELDS = new Set(['seed', 'length']);

/** Checks one event and returns a fresh copy in the canonical shape. */
function checkEvent(value: unknown, where: string, self: { name: string; field: string }): TraceEvent {
  if (!isPlainObject(value)) {
    throw new WaitprepError('ERR_INVALID_ARGUMENT', `Expected ${self.name} to be an object { t, agent, generation?, event, key?, tool? }, got ${describe(value)}`, { field: self.field });
  }
  rejectUnknown(value, EVENT_FIELDS, '', where);
  const t = ownField(value, 't');
  const agent = ownField(value, 'agent');
  const event = ownField(value, 'event');
  const key = ownField(value, 'key');
  const tool = ownField(value, 'tool');
  if (typeof t !== 'number' || !Number.isFinite(t) || t < 0) throw bad('t', 'a finite number >= 0 (seconds)', t, where);
  const time = t + 0; // -0 reads back as 0: store it as 0
  nonEmptyString('agent', agent, where);
  const generation = ownField(value, 'generation') ?? 0;
  if (typeof generation !== 'number' || !Number.isSafeInteger(generation) || generation < 0) throw bad('generation', 'a non-negative safe integer', generation, where);
  if (event !== 'wait' && event !== 'wake' && event !== 'cancel') throw bad('event', '"wait", "wake" or "cancel"', event, where);
  if (event === 'wait') {
    if (key === undefined) throw bad('key', 'a key spec { task, namespace, tokens } on a wait', undefined, where);
    const spec = checkKeySpec(key, 'key', where);
    if (tool === undefined) return { t: time, agent: agent as string, generation, event, key: spec };
    return { t: time, agent: agent as string, generation, event, key: spec, tool: nonEmptyString('tool', tool, where) };
  }
  if (key !== undefined) throw bad('key', `absent on a ${event} (only a wait carries a key)`, key, where);
  if (tool !== undefined) throw bad('tool', `absent on a ${event} (only a wait carries a tool class)`, tool, where);
  return { t: time, agent: agent as string, generation, event };
}

/** Checks a key spec and returns a fresh, frozen copy (segments copied, not aliased). */
function checkKeySpec(value: unknown, field: string, where: string): KeySpec {
  if (!isPlainObject(value)) throw bad(field, 'a key spec { task, namespace, tokens }', value, where);
  rejectUnknown(value, SPEC_FIELDS, `${field}.`, where);
  const task = nonEmptyString(`${field}.task`, ownField(value, 'task'), where);
  const namespace = nonEmptyString(`${field}.namespace`, ownField(value, 'namespace'), where);
  const tokens = ownField(value, 'tokens');
  if (!Array.isArray(tokens) || tokens.length === 0) throw bad(`${field}.tokens`, 'a non-empty array of token segments', tokens, where);
  let total = 0;
  const segments: TokenSegment[] = tokens.map((s: unknown, i: number) => {
    const at = `${field}.tokens[${i}]`;
    let segment: TokenSegment;
    if (Array.isArray(s)) {
      if (s.length === 0) throw bad(at, 'a non-empty array of token ids', s, where);
      for (let j = 0; j < s.length; j++) {
        const token: unknown = s[j];
        if (typeof token !== 'number' || !Number.isInteger(token) || token < 0 || token > 0xffff_ffff) {
          throw bad(`${at}[${j}]`, 'an integer token id in [0, 2^32-1]', token, where);
        }
      }
      segment = Object.freeze([...(s as number[])]);
    } else if (isPlainObject(s)) {
      rejectUnknown(s, SEGMENT_FIELDS, `${at}.`, where);
      const seed = nonEmptyString(`${at}.seed`, ownField(s, 'seed'), where);
      const length = integerIn(`${at}.length`, ownField(s, 'length'), 1, MAX_SPEC_TOKENS, where);
      segment = Object.freeze({ seed, length });
    } else {
      throw bad(at, 'an array of token ids or { seed, length }', s, where);
    }
    total += segment.length;
    return segment;
  });
  if (total > MAX_SPEC_TOKENS) throw bad(`${field}.tokens`, `at most ${MAX_SPEC_TOKENS} tokens in all`, total, where);
  return Object.freeze({ task, namespace, tokens: Object.freeze(segments) });
}

/**
 * The checks across events: times never go back; each wait's (agent, generation) is new,
 * so that a wake or cancel names exactly one wait; a wake or cancel names a wait seen
 * before. A wake of a replaced or already ended wait is allowed: replaying a stale ticket
 * is a case worth replaying.
 */
class SequenceCheck {
  #lastT = 0;
  readonly #waited = new Map<string, Set<number>>();

  add(e: TraceEvent, where: string): void {
    if (e.t < this.#lastT) throw bad('t', `>= ${this.#lastT}, the previous event's time (times must be non-decreasing)`, e.t, where);
    this.#lastT = e.t;
    let generations = this.#waited.get(e.agent);
    if (e.event === 'wait') {
      if (generations === undefined) this.#waited.set(e.agent, (generations = new Set()));
      if (generations.has(e.generation)) throw bad('generation', `a generation agent ${JSON.stringify(e.agent)} has not waited with before`, e.generation, where);
      generations.add(e.generation);
    } else if (generations === undefined || !generations.has(e.generation)) {
      throw bad('generation', `the generation of an earlier wait of agent ${JSON.stringify(e.agent)} (a ${e.event} must end a wait)`, e.generation, where);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Summary

/** Counts and wait-duration percentiles of a trace, for a demo or a report to print. */
export function traceSummary(events: readonly TraceEvent[]): TraceSummary {
  if (!Array.isArray(events)) throw bad('events', 'an array of trace events', events, '');
  let waits = 0;
  let wakes = 0;
  let cancels = 0;
  let replacements = 0;
  const durations: number[] = [];
  /** Per agent: the open wait's generation and start. */
  const openWait = new Map<string, { generation: number; t: number }>();
  /** Per key spec: the agents demanding it and how many waits did. */
  const demand = new Map<string, { agents: Set<string>; waits: number }>();
  const agents = new Set<string>();
  for (const e of events) {
    agents.add(e.agent);
    const open = openWait.get(e.agent);
    if (e.event === 'wait') {
      waits++;
      if (open !== undefined) {
        replacements++;
        durations.push(micros(e.t - open.t));
      }
      openWait.set(e.agent, { generation: e.generation, t: e.t });
      const id = specId(e.key);
      let d = demand.get(id);
      if (d === undefined) demand.set(id, (d = { agents: new Set(), waits: 0 }));
      d.agents.add(e.agent);
      d.waits++;
    } else {
      if (e.event === 'wake') wakes++;
      else cancels++;
      if (open !== undefined && open.generation === e.generation) {
        durations.push(micros(e.t - open.t));
        openWait.delete(e.agent);
      }
    }
  }
  let sharedKeys = 0;
  let sharedKeyWaits = 0;
  for (const d of demand.values()) {
    if (d.agents.size > 1) {
      sharedKeys++;
      sharedKeyWaits += d.waits;
    }
  }
  durations.sort((a, b) => a - b);
  return {
    agents: agents.size,
    events: events.length,
    waits,
    wakes,
    cancels,
    replacements,
    open: openWait.size,
    distinctKeys: demand.size,
    sharedKeys,
    sharedKeyWaits,
    waitSeconds: { p50: nearestRank(durations, 0.5), p90: nearestRank(durations, 0.9), p99: nearestRank(durations, 0.99), max: nearestRank(durations, 1) },
    lastT: events.length === 0 ? 0 : events[events.length - 1]!.t,
  };
}

function specId(spec: KeySpec): string {
  return JSON.stringify([spec.task, spec.namespace, spec.tokens.map((s) => (isSeeded(s) ? [s.seed, s.length] : s))]);
}

// ---------------------------------------------------------------------------------------------
// Argument checks. `where` is '' or " on line N" / " in events[i]".

function bad(field: string, expected: string, got: unknown, where: string): WaitprepError {
  return invalidArgument(field, expected, got, 'ERR_INVALID_ARGUMENT', where);
}

function rejectUnknown(object: Record<string, unknown>, known: Set<string>, prefix: string, where: string): void {
  for (const name of Object.keys(object)) {
    if (!known.has(name)) throw unknownName(`${prefix}${name}`, 'field', known, object[name], 'ERR_INVALID_ARGUMENT', where);
  }
}

function nonEmptyString(field: string, value: unknown, where: string): string {
  if (typeof value !== 'string' || value.length === 0) throw bad(field, 'a non-empty string', value, where);
  if (!value.isWellFormed()) throw bad(field, 'well-formed Unicode', value, where);
  return value;
}

function integerIn(field: string, value: unknown, min: number, max: number, where = ''): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw bad(field, `an integer in [${min}, ${max}]`, value, where);
  }
  return value;
}

function positiveNumber(field: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) throw bad(field, 'a finite number > 0', value, '');
  return value;
}

function fraction(field: string, value: unknown): number {
  if (typeof value !== 'number' || !(value >= 0 && value <= 1)) throw bad(field, 'a number in [0, 1]', value, '');
  return value;
}

function logNormal(field: string, value: unknown): LogNormal {
  if (!isPlainObject(value)) throw bad(field, 'an object { mu, sigma }', value, '');
  const mu = ownField(value, 'mu');
  const sigma = ownField(value, 'sigma');
  if (typeof mu !== 'number' || !Number.isFinite(mu)) throw bad(`${field}.mu`, 'a finite number', mu, '');
  if (typeof sigma !== 'number' || !Number.isFinite(sigma) || sigma < 0) throw bad(`${field}.sigma`, 'a finite number >= 0', sigma, '');
  return { mu, sigma };
}

function range(field: string, value: unknown, lo: number, hi: number): { min: number; max: number } {
  if (!isPlainObject(value)) throw bad(field, 'an object { min, max }', value, '');
  const min = integerIn(`${field}.min`, ownField(value, 'min'), lo, hi);
  const max = integerIn(`${field}.max`, ownField(value, 'max'), min, hi);
  return { min, max };
}
