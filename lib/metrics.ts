import { createRequire } from 'node:module';
import type * as PromClient from 'prom-client';
import { WaitprepError, describe, invalidArgument } from './errors.js';
import { isObject, ownOptions, rejectUnknownOptions } from './internal/validate.js';
import { summarizeInspection, type TableInspection, type TableSummary } from './lease-table/inspect.js';
import type { WaitCoordinator } from './coordinator/coordinator.js';
import type { CoordinatorStats } from './types.js';

/**
 * What {@link registerMetrics} needs of a prom-client `Registry`. Written out
 * here so that waitprep's types do not depend on prom-client being installed.
 */
export interface MetricsRegistry {
  registerMetric(metric: never): void;
  getSingleMetric(name: string): unknown;
  removeSingleMetric(name: string): void;
}

/** Options of {@link registerMetrics}. */
export interface RegisterMetricsOptions {
  /** The prom-client `Registry` to register into (no implicit global registry). */
  registry: MetricsRegistry;
  /**
   * A lease table whose slots and clients to report too: read at scrape with its `summary()`
   * (counts read in place), or, for an object that has only `inspect()`, from a full inspection.
   */
  table?: MetricsTable;
  /**
   * Constant labels on every series of this registration, e.g. `{ engine: 'e0' }`.
   * Required to put several coordinators on one registry: every registration
   * on a registry must use the same label names and distinct values.
   */
  labels?: Record<string, string>;
}

/** What {@link registerMetrics} returns. */
export interface MetricsRegistration {
  /** Removes this registration's series; the metrics leave the registry with its last registration. Idempotent. */
  unregister(): void;
}

/** The one thing a coordinator must offer to be observed: its `stats()`. */
type StatsSource = Pick<WaitCoordinator, 'stats'>;

type Prom = typeof PromClient;
type Labels = Record<string, string>;
/** prom-client's metrics carry their `name` at run time; its typings leave it out. */
type Metric = (PromClient.Counter | PromClient.Gauge) & { readonly name: string };
/** A metric's series for one reading: extra labels (beyond the registration's) and a value. */
type Reading = Array<[Labels, number]>;

const OPTION_NAMES: ReadonlySet<keyof RegisterMetricsOptions> = new Set(['registry', 'table', 'labels']);
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const NO_LABELS: Labels = Object.freeze({});

/** What one metric reports and where it reads it from. */
interface MetricSpec<T> {
  name: string;
  help: string;
  kind: 'counter' | 'gauge';
  labelNames: readonly string[];
  read(from: T): Reading;
}

const COORDINATOR_METRICS: ReadonlyArray<MetricSpec<CoordinatorStats>> = [
  {
    name: 'waitprep_waits_total',
    help: 'onWait calls by the status they returned (calls that threw on bad input are not counted).',
    kind: 'counter',
    labelNames: ['status'],
    read: (s) => Object.entries(s.waitsByStatus).map(([status, n]): [Labels, number] => [{ status }, n]),
  },
  {
    name: 'waitprep_wakes_total',
    help: 'onWake calls by result (hit or miss) and miss reason (empty for a hit).',
    kind: 'counter',
    labelNames: ['result', 'reason'],
    read: (s) => [[{ result: 'hit', reason: '' }, s.hits], ...Object.entries(s.misses).map(([reason, n]): [Labels, number] => [{ result: 'miss', reason }, n])],
  },
  {
    name: 'waitprep_preparations_total',
    help: 'Issued units whose outcome was applied, by outcome.',
    kind: 'counter',
    labelNames: ['outcome'],
    read: (s) => [[{ outcome: 'completed' }, s.completed], [{ outcome: 'failed' }, s.failed]],
  },
  {
    name: 'waitprep_wasted_preparations_total',
    help: 'Successful preparations that completed with no consumer left waiting.',
    kind: 'counter',
    labelNames: [],
    read: (s) => [[NO_LABELS, s.wasted]],
  },
  {
    name: 'waitprep_cancels_total',
    help: 'onCancel calls that removed a consumer.',
    kind: 'counter',
    labelNames: [],
    read: (s) => [[NO_LABELS, s.cancels]],
  },
  {
    name: 'waitprep_stale_events_total',
    help: 'Wakes, cancels and completions that named no current wait or unit.',
    kind: 'counter',
    labelNames: [],
    read: (s) => [[NO_LABELS, s.staleEvents]],
  },
  {
    name: 'waitprep_overloads_total',
    help: 'Waits refused because a bound (maxQueued or maxWaiting) was reached.',
    kind: 'counter',
    labelNames: [],
    read: (s) => [[NO_LABELS, s.overloads]],
  },
  {
    name: 'waitprep_queue_depth',
    help: 'Units waiting in the FIFO.',
    kind: 'gauge',
    labelNames: [],
    read: (s) => [[NO_LABELS, s.queued]],
  },
  {
    name: 'waitprep_preparations_in_flight',
    help: 'Units issued and not yet completed (0 or 1).',
    kind: 'gauge',
    labelNames: [],
    read: (s) => [[NO_LABELS, s.inFlight]],
  },
  {
    name: 'waitprep_waiting_consumers',
    help: 'Consumers waiting now.',
    kind: 'gauge',
    labelNames: [],
    read: (s) => [[NO_LABELS, s.waiting]],
  },
];

/** What registerMetrics reads a table through: a LeaseTable, or anything with `summary()` or `inspect()`. */
export type MetricsTable = { summary(): TableSummary } | { inspect(): TableInspection };

function tableSummary(table: MetricsTable): TableSummary {
  return 'summary' in table && typeof table.summary === 'function' ? table.summary() : summarizeInspection((table as { inspect(): TableInspection }).inspect());
}

const TABLE_METRICS: ReadonlyArray<MetricSpec<TableSummary>> = [
  {
    name: 'waitprep_table_slots',
    help: 'Lease table slots by state.',
    kind: 'gauge',
    labelNames: ['state'],
    read: (t) => [
      [{ state: 'free' }, t.slots.free],
      [{ state: 'reserved' }, t.slots.reserved],
      [{ state: 'ready' }, t.slots.ready],
      [{ state: 'evicting' }, t.slots.evicting],
    ],
  },
  {
    name: 'waitprep_table_pinned_slots',
    help: 'Lease table slots holding at least one pin.',
    kind: 'gauge',
    labelNames: [],
    read: (t) => [[NO_LABELS, t.pinnedSlots]],
  },
  {
    name: 'waitprep_table_clients',
    help: 'Clients registered in the lease table (the producer included).',
    kind: 'gauge',
    labelNames: [],
    read: (t) => [[NO_LABELS, t.clients.claiming + t.clients.active + t.clients.reaping]],
  },
  {
    name: 'waitprep_table_reaped_clients_total',
    help: 'Dead clients whose pins were reaped, since the table was created.',
    kind: 'counter',
    labelNames: [],
    read: (t) => [[NO_LABELS, Number(t.reapedClients)]],
  },
];

/** One registerMetrics call: where it reads, its labels, and what it last reported. */
interface Source {
  readonly coordinator: StatsSource;
  readonly table: MetricsTable | null;
  readonly labels: Labels;
  /** Per metric, per series key: the labels and the value last reported (a counter's baseline). */
  readonly series: Map<Metric, Map<string, { labels: Labels; value: number }>>;
}

/** The metrics on one registry and every registration that feeds them. */
interface Group {
  readonly registry: MetricsRegistry;
  readonly labelNames: readonly string[];
  readonly sources: Map<string, Source>;
  readonly coordinatorMetrics: Metric[];
  /** Made with the first registration that brings a table, so a registry without one shows no table series. */
  tableMetrics: Metric[] | null;
}

const groups = new WeakMap<MetricsRegistry, Group>();
let cachedPromClient: Prom | null = null;

/**
 * @internal Loads an optional peer dependency synchronously, or throws
 * `ERR_MISSING_PEER`. prom-client is CommonJS, so `require` works from ESM
 * and keeps `registerMetrics` synchronous; waitprep never imports it otherwise.
 */
export function requirePeer(name: string, wanted: string): unknown {
  try {
    return createRequire(import.meta.url)(name);
  } catch (cause) {
    throw new WaitprepError(
      'ERR_MISSING_PEER',
      `registerMetrics needs the optional peer dependency ${name} (${wanted}); install it with \`npm install ${name}\`. Loading it failed: ${cause instanceof Error ? cause.message.split('\n')[0] : describe(cause)}`,
      { cause },
    );
  }
}

function promClient(): Prom {
  cachedPromClient ??= requirePeer('prom-client', '^15.1.3') as Prom;
  return cachedPromClient;
}

/**
 * Registers Prometheus metrics of a coordinator (and optionally of a lease
 * table) into a prom-client registry. Nothing is counted per event: every
 * value is read at scrape, from `coordinator.stats()` and `table.summary()`,
 * through prom-client's `collect()` callbacks. Counters follow the
 * coordinator's own counters (each scrape adds what they grew by since the
 * last); gauges are set to the current value.
 *
 * Coordinator metrics: `waitprep_waits_total{status}`,
 * `waitprep_wakes_total{result,reason}` (`reason` empty for hits),
 * `waitprep_preparations_total{outcome}` (`completed` | `failed`),
 * `waitprep_wasted_preparations_total`, `waitprep_cancels_total`,
 * `waitprep_stale_events_total`, `waitprep_overloads_total`,
 * `waitprep_queue_depth`, `waitprep_preparations_in_flight`,
 * `waitprep_waiting_consumers`. With `table`: `waitprep_table_slots{state}`
 * (`free` | `reserved` | `ready` | `evicting`), `waitprep_table_pinned_slots`,
 * `waitprep_table_clients`, `waitprep_table_reaped_clients_total`. A table
 * that cannot be read (closed) drops its series from the scrape.
 *
 * Several coordinators share a registry by giving each distinct `labels` with
 * the same label names (`{ engine: 'e0' }`, `{ engine: 'e1' }`); without
 * `labels`, a registry takes one registration.
 *
 * prom-client is an optional peer dependency, loaded on the first call:
 * without it this throws `ERR_MISSING_PEER`. Also throws
 * `ERR_INVALID_ARGUMENT` for a bad or unknown option, labels that clash with another
 * registration, or a registry that already holds another `waitprep_*` metric.
 */
export function registerMetrics(coordinator: StatsSource, options: RegisterMetricsOptions): MetricsRegistration {
  if (!isObject(coordinator) || typeof coordinator.stats !== 'function') {
    throw invalidArgument('coordinator', 'a WaitCoordinator (an object with stats())', coordinator);
  }
  if (!isObject(options)) throw invalidArgument('options', 'an object { registry, table?, labels? }', options);
  rejectUnknownOptions(options, OPTION_NAMES, 'options');
  // Own properties only: an option inherited from a polluted Object.prototype is not the caller's.
  const { registry, table, labels: given } = ownOptions(options);
  if (!isObject(registry) || typeof registry.registerMetric !== 'function' ||
      typeof registry.getSingleMetric !== 'function' || typeof registry.removeSingleMetric !== 'function') {
    throw invalidArgument('options.registry', 'a prom-client Registry', registry);
  }
  if (table !== undefined && (!isObject(table) || (typeof (table as { summary?: unknown }).summary !== 'function' && typeof (table as { inspect?: unknown }).inspect !== 'function'))) {
    throw invalidArgument('options.table', 'a LeaseTable (an object with summary() or inspect())', table);
  }
  const labels = checkLabels(given);
  const prom = promClient();

  let group = groups.get(registry);
  // A registry cleared behind our back (registry.clear()) no longer holds the group's metrics.
  if (group !== undefined && registry.getSingleMetric(COORDINATOR_METRICS[0]!.name) !== group.coordinatorMetrics[0]) {
    groups.delete(registry);
    group = undefined;
  }
  const labelNames = Object.keys(labels).sort();
  const id = JSON.stringify(labelNames.map((name) => labels[name]));
  if (group !== undefined) {
    if (group.labelNames.join(',') !== labelNames.join(',')) {
      throw invalidArgument('options.labels', `labels named ${group.labelNames.join(', ') || '(none)'} like the other registrations on this registry`, given);
    }
    if (group.sources.has(id)) {
      throw invalidArgument('options.labels', 'labels no other registration on this registry uses (give each coordinator distinct labels)', given);
    }
  } else {
    const created: Group = { registry, labelNames, sources: new Map(), coordinatorMetrics: [], tableMetrics: null };
    created.coordinatorMetrics.push(...makeMetrics(prom, created, COORDINATOR_METRICS, (source) => source.coordinator.stats()));
    if (table !== undefined) {
      try {
        created.tableMetrics = makeTableMetrics(prom, created);
      } catch (error) {
        for (const metric of created.coordinatorMetrics) registry.removeSingleMetric(metric.name);
        throw error;
      }
    }
    group = created;
    groups.set(registry, group);
  }
  if (table !== undefined && group.tableMetrics === null) group.tableMetrics = makeTableMetrics(prom, group);
  const source: Source = { coordinator, table: table ?? null, labels, series: new Map() };
  group.sources.set(id, source);
  const owner = group;
  return {
    unregister() {
      if (owner.sources.get(id) !== source) return;
      owner.sources.delete(id);
      for (const [metric, series] of source.series) for (const { labels: full } of series.values()) metric.remove(full);
      if (owner.sources.size === 0) {
        for (const metric of [...owner.coordinatorMetrics, ...(owner.tableMetrics ?? [])]) {
          if (registry.getSingleMetric(metric.name) === metric) registry.removeSingleMetric(metric.name);
        }
        if (groups.get(registry) === owner) groups.delete(registry);
      }
    },
  };
}

function makeTableMetrics(prom: Prom, group: Group): Metric[] {
  return makeMetrics(prom, group, TABLE_METRICS, (source) => (source.table === null ? null : tableSummary(source.table)));
}

function checkLabels(given: unknown): Labels {
  if (given === undefined) return NO_LABELS;
  if (!isObject(given) || Array.isArray(given)) throw invalidArgument('options.labels', 'an object of label names to string values', given);
  const reserved = new Set([...COORDINATOR_METRICS, ...TABLE_METRICS].flatMap((spec) => spec.labelNames));
  const labels: Labels = {};
  for (const [name, value] of Object.entries(given)) {
    if (!LABEL_NAME.test(name) || name.startsWith('__') || reserved.has(name)) {
      throw invalidArgument(`options.labels.${name}`, `a Prometheus label name (${LABEL_NAME.source}, not starting with __, none of ${[...reserved].join(', ')})`, name);
    }
    if (typeof value !== 'string') throw invalidArgument(`options.labels.${name}`, 'a string', value);
    labels[name] = value;
  }
  return Object.freeze(labels);
}

/**
 * Makes and registers the metrics of `specs`; each one's collect reads every
 * registration of the group through `read` (null: nothing to report, and its
 * earlier series are removed).
 */
function makeMetrics<T>(prom: Prom, group: Group, specs: ReadonlyArray<MetricSpec<T>>, read: (source: Source) => T | null): Metric[] {
  const made: Metric[] = [];
  for (const spec of specs) {
    const config = {
      name: spec.name,
      help: spec.help,
      labelNames: [...group.labelNames, ...spec.labelNames],
      registers: [] as PromClient.Registry[],
    };
    const metric = (spec.kind === 'counter'
      ? new prom.Counter({ ...config, collect() { collect(metric, group, spec, read); } })
      : new prom.Gauge({ ...config, collect() { collect(metric, group, spec, read); } })) as Metric;
    if (group.registry.getSingleMetric(spec.name) !== undefined) {
      // Undo what this call registered, so a failed call leaves the registry as it was.
      for (const done of made) group.registry.removeSingleMetric(done.name);
      throw invalidArgument('options.registry', `a registry without a metric named ${spec.name} (one registry takes several coordinators only through registerMetrics with distinct labels)`, group.registry);
    }
    group.registry.registerMetric(metric as never);
    made.push(metric);
  }
  return made;
}

/**
 * One metric's collect: for each registration, report what `spec.read` says.
 * A gauge is set; a counter is increased by what the source grew since the
 * last scrape (a source that went down, e.g. a re-created table, restarts
 * the series, which Prometheus reads as a counter reset).
 */
function collect<T>(metric: Metric, group: Group, spec: MetricSpec<T>, read: (source: Source) => T | null): void {
  for (const source of group.sources.values()) {
    let series = source.series.get(metric);
    if (series === undefined) source.series.set(metric, (series = new Map()));
    let from: T | null;
    try {
      from = read(source);
    } catch {
      from = null;
    }
    if (from === null) {
      for (const { labels } of series.values()) metric.remove(labels);
      series.clear();
      continue;
    }
    for (const [extra, value] of spec.read(from)) {
      const full = extra === NO_LABELS ? source.labels : { ...source.labels, ...extra };
      const key = JSON.stringify(spec.labelNames.map((name) => extra[name]));
      const last = series.get(key);
      if (spec.kind === 'gauge') {
        (metric as PromClient.Gauge).set(full, value);
      } else if (last === undefined || value < last.value) {
        if (last !== undefined) metric.remove(full);
        (metric as PromClient.Counter).inc(full, value);
      } else if (value > last.value) {
        (metric as PromClient.Counter).inc(full, value - last.value);
      }
      if (last === undefined) series.set(key, { labels: full, value });
      else last.value = value;
    }
  }
}
