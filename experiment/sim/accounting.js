// The replay's accounting: the counters every part of a replay adds to, how a wait ends and why
// a wake missed, its next-turn latency, the per-wait check the tests ask for, and the per-replay
// summary the report aggregates. Nothing here moves time or bytes.
import { nearestRank } from '../percentile.js';

/** Wait-length buckets of the report, upper bounds in seconds. */
export const BUCKETS = Object.freeze([
  { name: '<0.1 s', below: 0.1 },
  { name: '0.1-1 s', below: 1 },
  { name: '1-10 s', below: 10 },
  { name: '10-60 s', below: 60 },
  { name: '>60 s', below: Infinity },
]);

/** Miss causes, in report order; docs/experiment.md § What it reports defines each. */
export const CAUSES = Object.freeze([
  'not-prepared', 'retention-expired', 'retention-evicted', 'withdrawn', 'overloaded', 'queued', 'in-flight', 'evicted', 'cancelled', 'failed',
]);

/** Next-turn latency quantiles kept for the CDF plot. */
const CDF_POINTS = 50;

/** The memory series' fields, in sample order (after the time). */
export const MEMORY_FIELDS = Object.freeze(['arenaBytes', 'pinnedBytes', 'stagingBytes', 'gpuRetainedBytes', 'devicePoolBytes', 'gpuRunningBytes']);

export const micro = (x) => Math.round(x * 1e6) / 1e6;

/** A replay's counters, all zero. */
export function newCounters() {
  return {
    units: { issued: 0, completed: 0, alreadyReady: 0, aborted: 0, failed: 0, bytes: 0, ioSeconds: 0 },
    wasted: { units: 0, bytes: 0, ioSeconds: 0, bytesBy: { aborted: 0, evicted: 0, unused: 0 } },
    evictions: { arena: 0, arenaBytes: 0, forgetApplied: 0, forgetRefused: 0, retention: 0, retentionBytes: 0 },
    lookups: { coordinator: 0, direct: 0 },
    turns: { started: 0, queued: 0, inPlaceQueued: 0, queuedSeconds: 0, cutShort: 0 },
  };
}

/**
 * Counts `unit` as wasted once, unless a hit used it. `why`: 'aborted' (stopped part-way, every
 * consumer gone), 'evicted' (ready, evicted before any hit), 'unused' (still resident at the end).
 */
export function wasteOf(counters, unit, why) {
  if (unit.used || unit.wasted) return;
  unit.wasted = true;
  counters.wasted.units++;
  counters.wasted.bytes += unit.moved;
  counters.wasted.bytesBy[why] += unit.moved;
  counters.wasted.ioSeconds += unit.ioSeconds;
}

/** Records how a wait ended: 'wake', 'cancel' or 'replaced' (checkWaits: exactly once). */
export function endWait(sim, w, outcome) {
  if (sim.checkWaits && w.outcome !== undefined) throw new Error(`wait ${w.agent}#${w.generation} ended twice: ${w.outcome}, then ${outcome}`);
  w.outcome = outcome;
}

/**
 * A wake's next turn is ready once both its context's KV is on the GPU and its engine has
 * admitted the turn: each calls this once; the second takes the latency.
 */
export function arrive(sim, w) {
  if (--w.pending > 0) return;
  w.finished++;
  w.latency = sim.q.now - w.woke;
  sim.latencies.push(w.latency);
}

/**
 * Why a wake missed. `reason` is the coordinator's (or the direct lookup's) miss reason, `id` the
 * artifact's id in its store; the stores' last eviction, failure and abort times tell the rest.
 */
export function causeOf(sim, w, reason, id) {
  if (w.ticket === undefined) {
    if (w.admission === 'overloaded' || w.admission === 'rejected') return 'overloaded';
    if (w.withdrawn) return 'withdrawn';
    if (w.retention === 'expired') return 'retention-expired';
    if (w.retention === 'evicted') return 'retention-evicted';
    return 'not-prepared';
  }
  if (reason === 'preparing') return 'in-flight';
  const { lastEvicted, lastFailed, lastAborted } = sim.storage;
  if ((lastEvicted.get(id) ?? -1) >= w.start) return 'evicted';
  if ((lastFailed.get(id) ?? -1) >= w.start) return 'failed';
  if ((lastAborted.get(id) ?? -1) >= w.start) return 'cancelled';
  return 'queued';
}

/** What checkWaits asks of one wait once the replay has run. */
export function checkWait(w) {
  const id = `wait ${w.agent}#${w.generation}`;
  if (!['wake', 'cancel', 'replaced'].includes(w.outcome)) throw new Error(`${id} never ended`);
  if (w.outcome !== 'wake') {
    if (w.finished !== 0 || w.hit !== undefined || w.cause !== undefined) throw new Error(`${id} ended by ${w.outcome} but was counted as a wake`);
    return;
  }
  if ((w.hit === undefined) === (w.cause === undefined)) throw new Error(`${id} woke as ${w.hit === undefined ? 'neither a hit nor a miss' : 'both a hit and a miss'}`);
  if (w.cause !== undefined && !CAUSES.includes(w.cause)) throw new Error(`${id} missed with unknown cause ${w.cause}`);
  if (w.finished !== 1) throw new Error(`${id} woke and had its latency taken ${w.finished} times`);
}

/** The per-replay result: counts, rates, latency, memory, links and the coordinator's own counters. */
export function summarize(sim) {
  const { policy, seed, waits, latencies, samples, counters, coordinator, source, h2d } = sim;
  const endings = { wake: 0, cancel: 0, replaced: 0, open: 0 };
  const misses = Object.fromEntries(CAUSES.map((c) => [c, 0]));
  const hitsByTier = { gpu: 0, device: 0, host: 0 };
  const buckets = BUCKETS.map((b) => ({ name: b.name, wakes: 0, hits: 0 }));
  const tools = new Map();
  const paths = { load: 0, recompute: 0, none: 0 };
  let hits = 0;
  let wakes = 0;
  let wakeBytes = 0;
  let hitBytes = 0;
  for (const w of waits) {
    endings[w.outcome ?? 'open']++;
    if (w.outcome !== 'wake') continue;
    wakes++;
    wakeBytes += w.bytes;
    const length = w.end - w.start;
    const bucket = buckets[BUCKETS.findIndex((b) => length < b.below)];
    bucket.wakes++;
    let tool = tools.get(w.tool);
    if (tool === undefined) tools.set(w.tool, (tool = { wakes: 0, hits: 0 }));
    tool.wakes++;
    if (w.hit !== undefined) {
      hits++;
      hitBytes += w.bytes;
      hitsByTier[w.hit]++;
      bucket.hits++;
      tool.hits++;
    } else {
      misses[w.cause]++;
      paths[w.path ?? 'none']++;
    }
  }
  const sorted = Float64Array.from(latencies).sort();
  const q = (p) => micro(nearestRank(sorted, p));
  const cdf = Array.from({ length: CDF_POINTS + 1 }, (_, i) => q(i / CDF_POINTS));
  const n = MEMORY_FIELDS.length;
  const peak = new Array(n).fill(0);
  const mean = new Array(n).fill(0);
  for (const s of samples) {
    for (let i = 0; i < n; i++) {
      peak[i] = Math.max(peak[i], s[i + 1]);
      mean[i] += s[i + 1] / samples.length;
    }
  }
  const stats = coordinator.stats();
  return {
    policy: policy.name,
    seed,
    waits: waits.length,
    endings,
    wakes,
    hits,
    hitRate: wakes > 0 ? hits / wakes : 0,
    // The tail follows bytes: a miss of a long context costs more than one of a short one.
    wakeBytes,
    hitBytes,
    bytesHitRate: wakeBytes > 0 ? hitBytes / wakeBytes : 0,
    hitsByTier,
    misses,
    missPath: paths,
    buckets,
    tools: Object.fromEntries([...tools].sort((a, b) => (a[0] < b[0] ? -1 : 1))),
    latency: { count: sorted.length, mean: micro(sorted.reduce((a, b) => a + b, 0) / Math.max(1, sorted.length)), p50: q(0.5), p95: q(0.95), p99: q(0.99), max: q(1), cdf },
    units: { ...counters.units, ioSeconds: micro(counters.units.ioSeconds) },
    wasted: { ...counters.wasted, bytesBy: { ...counters.wasted.bytesBy }, ioSeconds: micro(counters.wasted.ioSeconds) },
    evictions: counters.evictions,
    lookups: counters.lookups,
    turns: { ...counters.turns, queuedSeconds: micro(counters.turns.queuedSeconds) },
    memory: {
      fields: MEMORY_FIELDS,
      peak: Object.fromEntries(MEMORY_FIELDS.map((f, i) => [f, peak[i]])),
      mean: Object.fromEntries(MEMORY_FIELDS.map((f, i) => [f, Math.round(mean[i])])),
      series: samples,
    },
    links: { sourceBytes: Math.round(source.bytes), h2dBytes: Math.round(h2d.reduce((a, l) => a + l.bytes, 0)) },
    coordinator: {
      waits: stats.waits, waitsByStatus: stats.waitsByStatus, joins: stats.joins, issued: stats.issued, completed: stats.completed,
      failed: stats.failed, wasted: stats.wasted, wakes: stats.wakes, hits: stats.hits, misses: stats.misses, cancels: stats.cancels,
      overloads: stats.overloads, waiting: stats.waiting, queued: stats.queued, inFlight: stats.inFlight,
    },
    ...(sim.runtime.summary === undefined ? {} : { planner: sim.runtime.summary() }),
  };
}
