// One replay: a trace, a preset's resources and one policy, in virtual time, through the real
// WaitCoordinator (its `now` option reads the event queue's clock). Nothing sleeps.
//
// The parts, each in its own file under sim/, each readable alone:
// - events.js: the trace's events (a wait starts, wakes, is cancelled; the turns between);
// - runtimes.js, planner-runtime.js: what each policy does at those events;
// - gpu.js: the engines' KV capacity, shared by running turns, KV retained across waits (dropped
//   lowest priority first when a turn needs room) and the device pool's reservation;
// - storage.js: the storage tier, its worker (units, eviction) and the backend wakes pin from;
// - original-path.js: a miss's load or recompute;
// - accounting.js: counters, causes, latency and the summary.
// This file builds the replay's context (`sim`), wires the parts and runs the queue.
//
// The replay is open-loop: a wake's latency does not move the trace's later events.
import { artifactKey, WaitCoordinator, WaitLengthStats } from 'waitprep';
import { fnv1a } from 'waitprep/testing';
import { EventQueue, Network } from './clock.js';
import { checkWait, micro, newCounters, summarize } from './sim/accounting.js';
import { onCancel, onFirstTurn, onWait, onWake } from './sim/events.js';
import { Gpus } from './sim/gpu.js';
import { OriginalPath } from './sim/original-path.js';
import { oracleJitRuntime, ruleRuntime } from './sim/runtimes.js';
import { plannerRuntime } from './sim/planner-runtime.js';
import { Storage } from './sim/storage.js';

export { BUCKETS, CAUSES } from './sim/accounting.js';

/** Per trace, what every replay of it derives the same way: turn length, shared prefix, endings. */
const shapes = new WeakMap();

/**
 * The trace's median turn (from a wake or cancel to the same agent's next wait), its longest
 * shared prefix, how each wait ends ('wake', 'cancel', 'replaced') and which is an agent's last.
 */
function shapeOf(trace) {
  let shape = shapes.get(trace);
  if (shape !== undefined) return shape;
  const endKind = new Array(trace.waits.length).fill('replaced');
  for (const event of trace.events) if (event.kind !== 'wait') endKind[event.wait] = event.kind;
  const lastOf = new Map();
  const firstOf = new Map();
  const gaps = [];
  trace.waits.forEach((w, i) => {
    const before = lastOf.get(w.agent);
    if (before === undefined) firstOf.set(w.agent, i);
    else if (endKind[before] !== 'replaced') gaps.push(w.start - trace.waits[before].end);
    lastOf.set(w.agent, i);
  });
  const sorted = Float64Array.from(gaps).sort();
  const turnSeconds = sorted.length > 0 ? sorted[Math.floor((sorted.length - 1) / 2)] : 1;
  const last = new Set(lastOf.values());
  let maxShared = 0;
  for (const w of trace.waits) maxShared = Math.max(maxShared, w.sharedTokens);
  shape = { endKind, last, first: [...firstOf.values()], turnSeconds, maxShared };
  shapes.set(trace, shape);
  return shape;
}

/**
 * Replays `trace` (traces.js) on `preset` (presets.js resolvePreset) under `policy`
 * (policies.js). `seed` spreads agents over engines. Returns the per-replay result the report
 * aggregates; the same inputs give the same result, to the bit. `checkAborts` (tests) checks
 * each unit's abort signal against the replay's own count of its consumers; `checkWaits` (tests)
 * checks each wait, not only the totals: it ends once (wake, cancel or replaced), and a wake is
 * either a hit or a miss with a known cause, with its latency taken once (throws otherwise).
 */
export function replay(trace, preset, policy, { seed, sampleSeconds = 10, onProgress = null, checkAborts = false, checkWaits = false }) {
  const q = new EventQueue();
  const net = new Network(q);
  const engines = preset.engines;
  const shape = shapeOf(trace);
  const engineNames = Array.from({ length: engines }, (_, e) => `engine-${e}`);
  const device = preset.prepTarget === 'device';
  const sharedResident = preset.sharedPrefixResident ? shape.maxShared : 0;
  const sim = {
    q, net, preset, policy, trace, seed, checkAborts, checkWaits, device,
    source: net.link('source', preset.sourceBytesPerSec),
    h2d: Array.from({ length: engines }, (_, e) => net.link(`h2d-${e}`, preset.h2dBytesPerSecPerEngine)),
    engineNames,
    engineIndex: new Map(engineNames.map((name, e) => [name, e])),
    deviceWants: engineNames.map((_, e) => Object.freeze({
      readiness: 'device',
      target: Object.freeze({ device: `GPU-00000000-0000-4000-8000-${String(e).padStart(12, '0')}`, arena: e, arenaGeneration: 0 }),
    })),
    counters: newCounters(),
    latencies: [],
    samples: [],
    /** agent -> its open wait; agent -> its running (or queued) turn. */
    open: new Map(),
    turnOf: new Map(),
    turnSeconds: shape.turnSeconds,
    lastT: trace.events.length > 0 ? trace.events[trace.events.length - 1].t : 0,
    bytesOfKey: new Map(),
    waits: null,
    gpus: null,
    storage: null,
    original: null,
    coordinator: null,
    runtime: null,
  };
  const engineOf = new Map();
  sim.agentEngine = (agent) => {
    let e = engineOf.get(agent);
    if (e === undefined) engineOf.set(agent, (e = fnv1a(`${seed}/${agent}`) % engines));
    return e;
  };
  /** The KV a wait's context has beyond the resident shared prefix: what moves, is kept or recomputed. */
  const moveBytes = (w) => Math.max(0, w.tokens - (preset.sharedPrefixResident ? w.sharedTokens : 0)) * preset.kvBytesPerToken;
  const unitRate = Math.min(preset.perUnitBytesPerSec, preset.sourceBytesPerSec, device ? preset.h2dBytesPerSecPerEngine : Infinity);
  sim.unitSeconds = (w) => preset.unitOverheadSec + w.bytes / unitRate;
  // Class-aware policies read each class's median from waits that have ended, learned as they end.
  const learned = new WaitLengthStats();
  sim.policyContext = {
    classMedian: (tool) => learned.median(learned.classOf(tool)),
    unitSeconds: sim.unitSeconds,
    observe: (w, outcome) => {
      if (outcome === 'wake') learned.observe(learned.classOf(w.tool), w.end - w.start);
    },
  };

  // ---- keys ---------------------------------------------------------------------------------
  const perWait = policy.keys === 'per-wait';
  const keyCache = perWait ? new Map() : trace.keys;
  const keyOf = (w) => {
    const id = perWait ? `${w.keyId}\u0000${w.agent}#${w.generation}` : w.keyId;
    let key = keyCache.get(id);
    if (key === undefined) {
      const base = trace.keyFor(w.keyId);
      key = perWait
        ? artifactKey({ ...base.fields, source: { ...base.fields.source, namespace: `${base.fields.source.namespace}/no-dedup/${w.agent}#${w.generation}` } })
        : base.key;
      keyCache.set(id, key);
    }
    return key;
  };

  // ---- the parts ----------------------------------------------------------------------------
  sim.gpus = new Gpus(sim, sharedResident * preset.kvBytesPerToken);
  sim.storage = new Storage(sim);
  sim.original = new OriginalPath(sim);
  sim.runtime = policy.runtime === 'oracle-jit' ? oracleJitRuntime(sim)
    : policy.runtime === 'planner' ? plannerRuntime(sim, { prepares: policy.prepares, options: policy.plannerOptions })
    : ruleRuntime(sim);
  sim.coordinator = new WaitCoordinator({
    backend: sim.storage.backend,
    maxQueued: policy.maxQueued ?? 256,
    maxWaiting: 1_000_000,
    historyLimit: policy.historyLimit ?? 4096,
    maxInFlight: sim.runtime.maxInFlight,
    now: () => q.now * 1000,
  });
  sim.storage.coordinator = sim.coordinator;
  if (sim.runtime.start !== undefined) sim.runtime.start();

  // ---- run ----------------------------------------------------------------------------------
  // Every field a replay sets, present from the start: one object shape for every wait.
  sim.waits = trace.waits.map((w, i) => {
    const key = keyOf(w);
    const bytes = moveBytes(w);
    if (!sim.bytesOfKey.has(key.hex)) sim.bytesOfKey.set(key.hex, bytes);
    return {
      ...w, key, keyHex: key.hex, bytes, endKind: shape.endKind[i], last: shape.last.has(i),
      engine: 0, consumer: null, want: null, admission: null, ticket: undefined, holdId: undefined, retention: null, priority: undefined,
      withdrawn: false, plan: null, outcome: undefined, hit: undefined, cause: undefined, path: undefined, latency: 0, finished: 0, woke: 0, pending: 0,
    };
  });
  const { waits } = sim;
  const handlers = { wait: (w) => onWait(sim, w), wake: (w) => onWake(sim, w), cancel: (w) => onCancel(sim, w) };
  for (const i of shape.first) q.at(Math.max(0, waits[i].start - sim.turnSeconds), (w) => onFirstTurn(sim, w), waits[i]);
  for (const event of trace.events) q.at(event.t, handlers[event.kind], waits[event.wait]);
  const { lastT } = sim;
  const sample = () => {
    const { retained, running } = sim.gpus.totals();
    const storage = sim.storage;
    sim.samples.push([micro(q.now), storage.arena.used, storage.pinnedBytes, storage.arena.staging, retained, storage.devicePoolBytes(), running]);
    if (q.now + sampleSeconds <= lastT) q.after(sampleSeconds, sample);
  };
  q.at(0, sample);
  let popped = 0;
  q.run(onProgress === null ? undefined : (now) => {
    if ((++popped & 0xffff) === 0) onProgress(lastT > 0 ? now / lastT : 1);
  });
  sim.storage.finish();
  if (checkWaits) for (const w of waits) checkWait(w);
  return summarize(sim);
}
