// One replay: a trace, a preset's resources and one policy, in virtual time, through the real
// WaitCoordinator (its `now` option reads the event queue's clock). Nothing sleeps.
//
// The pieces, all in this file:
// - the engines: agents spread over `preset.engines`; a wake needs the context's KV on its
//   engine's GPU before the next turn, and the time until it is there is the next-turn latency;
// - GPU retention per engine (keep-on-GPU policies): KV kept across a wait, under a byte budget,
//   oldest dropped first;
// - a simulated storage tier and its worker: units the coordinator issues move KV from the source
//   tier into the host arena (prepTarget 'host') or a per-engine device pool ('device'), over
//   links whose bandwidth every transfer on them shares (so preparation slows the misses'
//   foreground loads and hits' H2D copies, and they slow it); the arena's budget counts staging
//   buffers; eviction is least recently used, unpinned only, and calls coordinator.forget(key);
// - the backend the coordinator pins from (tryPinReady), over those stores;
// - the original path of a miss: load from the source tier or recompute (prefill) on the
//   engine's GPU queue, whichever the engine would pick from the uncontended estimates.
//
// The replay is open-loop: a wake's latency does not move the trace's later events.
import { artifactKey, WaitCoordinator } from 'waitprep';
import { nearestRank } from './percentile.js';
import { EventQueue, Network } from './clock.js';

const GRANT = Object.freeze({ worker: 'sim-storage', grant: 'sim-io' });
const MISS_ABSENT = Object.freeze({ kind: 'miss', reason: 'absent' });
const MISS_PREPARING = Object.freeze({ kind: 'miss', reason: 'preparing' });

/** Wait-length buckets of the report, upper bounds in seconds. */
export const BUCKETS = Object.freeze([
  { name: '<0.1 s', below: 0.1 },
  { name: '0.1-1 s', below: 1 },
  { name: '1-10 s', below: 10 },
  { name: '10-60 s', below: 60 },
  { name: '>60 s', below: Infinity },
]);

/** Miss causes, in report order; docs/experiment.md § Reports defines each. */
export const CAUSES = Object.freeze([
  'not-prepared', 'retention-expired', 'retention-evicted', 'overloaded', 'queued', 'in-flight', 'evicted', 'cancelled', 'failed',
]);

/** Next-turn latency quantiles kept for the CDF plot. */
const CDF_POINTS = 50;

class SimLease {
  kind = 'lease';
  slot = 0;
  generation = 0;
  #closed = false;
  #onClose;

  constructor(key, consumer, readiness, meta, onClose) {
    this.key = key;
    this.consumer = consumer;
    this.readiness = readiness;
    this.meta = meta;
    this.#onClose = onClose;
  }

  get closed() {
    return this.#closed;
  }

  close() {
    if (this.#closed) return;
    this.#closed = true;
    this.#onClose();
  }
}

/** FNV-1a 32 of a string, for the seeded engine assignment. */
function fnv(text) {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

const micro = (x) => Math.round(x * 1e6) / 1e6;

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
  const source = net.link('source', preset.sourceBytesPerSec);
  const h2d = Array.from({ length: engines }, (_, e) => net.link(`h2d-${e}`, preset.h2dBytesPerSecPerEngine));
  const engineNames = Array.from({ length: engines }, (_, e) => `engine-${e}`);
  const engineIndex = new Map(engineNames.map((name, e) => [name, e]));
  const deviceTarget = (e) => Object.freeze({ device: `GPU-00000000-0000-4000-8000-${String(e).padStart(12, '0')}`, arena: e, arenaGeneration: 0 });
  const targets = engineNames.map((_, e) => deviceTarget(e));
  const device = preset.prepTarget === 'device';
  const perUnit = preset.perUnitBytesPerSec;
  const overhead = preset.unitOverheadSec;

  const engineOf = new Map();
  const agentEngine = (agent) => {
    let e = engineOf.get(agent);
    if (e === undefined) engineOf.set(agent, (e = fnv(`${seed}/${agent}`) % engines));
    return e;
  };

  // ---- stores -----------------------------------------------------------------------------
  const pool = (budget) => ({ budget, used: 0, entries: new Map() });
  const arena = { ...pool(preset.hostArenaBytes), staging: 0 };
  const devicePools = Array.from({ length: engines }, () => pool(preset.devicePoolBytesPerEngine));
  const retained = Array.from({ length: engines }, () => ({ used: 0, entries: new Map() }));
  let pinnedBytes = 0;
  /** Per artifact id: when it was last evicted, failed or aborted (for the miss causes). */
  const lastEvicted = new Map();
  const lastFailed = new Map();
  const lastAborted = new Map();

  const counters = {
    units: { issued: 0, completed: 0, alreadyReady: 0, aborted: 0, failed: 0, bytes: 0, ioSeconds: 0 },
    wasted: { units: 0, bytes: 0, ioSeconds: 0 },
    evictions: { arena: 0, arenaBytes: 0, forgetApplied: 0, forgetRefused: 0, retention: 0 },
    lookups: { coordinator: 0, direct: 0 },
  };

  const moveBytes = (w) => Math.max(0, w.tokens - (preset.sharedPrefixResident ? w.sharedTokens : 0)) * preset.kvBytesPerToken;
  const recomputeTokens = (w) => Math.max(0, w.tokens - (preset.sharedPrefixResident ? w.sharedTokens : 0));
  const unitSeconds = (w) => overhead + moveBytes(w) / Math.min(perUnit, preset.sourceBytesPerSec, device ? preset.h2dBytesPerSecPerEngine : Infinity);

  // ---- keys -------------------------------------------------------------------------------
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
  const bytesOfKey = new Map();

  // ---- the backend ------------------------------------------------------------------------
  const poolOf = (want) => (want.readiness === 'device' ? devicePools[Number(want.target.arena)] : arena);
  const idOf = (key, want) => (want.readiness === 'device' ? `${key.hex}@${want.target.arena}` : key.hex);
  const backend = {
    tryPinReady(key, consumer, want) {
      const e = engineIndex.get(consumer.engine);
      const kept = retained[e].entries.get(key.hex);
      if (kept !== undefined) return new SimLease(key, consumer, want.readiness, { tier: 'gpu', bytes: kept.bytes }, () => {});
      const store = poolOf(want);
      const entry = store.entries.get(idOf(key, want));
      if (entry === undefined) return MISS_ABSENT;
      if (entry.state !== 'ready') return MISS_PREPARING;
      if (entry.pins++ === 0 && store === arena) pinnedBytes += entry.bytes;
      entry.unit.used = true;
      // Touch: most recently used last.
      store.entries.delete(entry.id);
      store.entries.set(entry.id, entry);
      return new SimLease(key, consumer, want.readiness, { tier: store === arena ? 'host' : 'device', bytes: entry.bytes }, () => {
        if (--entry.pins === 0 && store === arena) pinnedBytes -= entry.bytes;
      });
    },
  };

  const coordinator = new WaitCoordinator({
    backend,
    maxQueued: policy.maxQueued ?? 256,
    maxWaiting: 1_000_000,
    historyLimit: policy.historyLimit ?? 4096,
    maxInFlight: policy.oracle ? Math.max(1, Math.ceil(preset.sourceBytesPerSec / perUnit)) : policy.maxInFlight ?? 1,
    now: () => q.now * 1000,
  });

  // ---- eviction ---------------------------------------------------------------------------
  function wasteOf(unit) {
    if (unit.used || unit.wasted) return;
    unit.wasted = true;
    counters.wasted.units++;
    counters.wasted.bytes += unit.moved;
    counters.wasted.ioSeconds += unit.ioSeconds;
  }

  /**
   * Evicts unpinned ready artifacts until `need` fits `store`, least recently used first, and
   * those no admitted wait still demands before those one does (the replay's own count; a real
   * worker would ask the orchestrator); false if it cannot.
   */
  function makeRoom(store, need, budget = store.budget, extra = 0) {
    if (store.used + extra + need <= budget) return true;
    for (const spare of [true, false]) {
      for (const entry of store.entries.values()) {
        if (store.used + extra + need <= budget) return true;
        if (entry.state !== 'ready' || entry.pins > 0 || holders.has(entry.id) === spare) continue;
        evict(store, entry);
      }
    }
    return store.used + extra + need <= budget;
  }

  function evict(store, entry) {
    store.entries.delete(entry.id);
    store.used -= entry.bytes;
    counters.evictions.arena++;
    counters.evictions.arenaBytes += entry.bytes;
    lastEvicted.set(entry.id, q.now);
    wasteOf(entry.unit);
    // The eviction fix: completed history must not outlive the bytes.
    if (coordinator.forget(entry.key)) counters.evictions.forgetApplied++;
    else counters.evictions.forgetRefused++;
  }

  // ---- units ------------------------------------------------------------------------------
  let windowStart = 0;
  let windowBytes = 0;
  let windowTimer = false;
  const windowBudget = policy.window ? policy.window.fractionOfSource * preset.sourceBytesPerSec * policy.window.seconds : Infinity;

  function pump() {
    for (;;) {
      if (policy.window) {
        if (q.now >= windowStart + policy.window.seconds) {
          const windows = Math.floor((q.now - windowStart) / policy.window.seconds);
          windowStart += windows * policy.window.seconds;
          windowBytes = Math.max(0, windowBytes - windows * windowBudget);
        }
        if (windowBytes >= windowBudget) {
          if (!windowTimer) {
            windowTimer = true;
            q.at(windowStart + policy.window.seconds, () => {
              windowTimer = false;
              pump();
            });
          }
          return;
        }
      }
      const work = coordinator.beginNext(GRANT);
      if (work === null) return;
      startUnit(work);
    }
  }

  function startUnit(work) {
    counters.units.issued++;
    const e = work.readiness === 'device' ? Number(work.target.arena) : null;
    const want = work.readiness === 'device' ? { readiness: 'device', target: work.target } : { readiness: 'host' };
    const store = poolOf(want);
    const id = idOf(work.key, want);
    const bytes = bytesOfKey.get(work.key.hex);
    windowBytes += bytes;
    const unit = { moved: 0, ioSeconds: 0, used: false, wasted: false, done: false };
    const existing = store.entries.get(id);
    if (existing !== undefined) {
      // Already resident (its history was forgotten, or none is kept): the worker says so.
      q.after(overhead, () => {
        counters.units.alreadyReady++;
        coordinator.complete(work, { ok: true });
        pump();
      });
      return;
    }
    const staging = Math.min(bytes, preset.stagingBytesPerUnit);
    const fits = store === arena ? makeRoom(arena, bytes + staging, arena.budget, arena.staging) : makeRoom(store, bytes) && makeRoom(arena, staging, arena.budget, arena.staging);
    if (!fits || bytes > store.budget) {
      q.after(overhead, () => {
        counters.units.failed++;
        lastFailed.set(id, q.now);
        coordinator.complete(work, { ok: false, error: new Error('no room: every resident artifact is pinned') });
        pump();
      });
      return;
    }
    const entry = { id, key: work.key, bytes, state: 'preparing', pins: 0, unit, stop: null };
    store.entries.set(id, entry);
    store.used += bytes;
    arena.staging += staging;
    let transfer = null;
    let ioStart = 0;
    const finish = (ok) => {
      unit.done = true;
      arena.staging -= staging;
      if (transfer !== null) {
        unit.moved = ok ? bytes : transfer.cancel();
        unit.ioSeconds = q.now - ioStart;
        counters.units.bytes += unit.moved;
        counters.units.ioSeconds += unit.ioSeconds;
      }
      if (ok) {
        if (checkAborts && work.signal.aborted) throw new Error(`unit ${id} aborted but the replay counted consumers`);
        entry.state = 'ready';
        counters.units.completed++;
        coordinator.complete(work, { ok: true });
      } else {
        store.entries.delete(id);
        store.used -= bytes;
        counters.units.aborted++;
        lastAborted.set(id, q.now);
        wasteOf(unit);
        coordinator.complete(work, { ok: false, error: new Error('aborted: every consumer left') });
      }
      pump();
    };
    // Every consumer left: the worker stops at once (a chunked copy has a boundary per chunk).
    // The replay counts a unit's consumers itself (`leave`) rather than listen to work.signal:
    // an AbortSignal's abort costs a DOMException, a microsecond budget per unit at this scale.
    entry.stop = () => {
      if (unit.done) return;
      if (checkAborts && !work.signal.aborted) throw new Error(`unit ${id} stopped without its abort signal`);
      finish(false);
    };
    if (!holders.has(id)) q.after(0, entry.stop);
    q.after(overhead, () => {
      if (unit.done) return;
      ioStart = q.now;
      transfer = net.transfer(bytes, e === null ? [source] : [source, h2d[e]], perUnit, () => unit.done || finish(true));
    });
  }

  // ---- retention --------------------------------------------------------------------------
  function retain(w, e, until) {
    const store = retained[e];
    const bytes = moveBytes(w);
    const budget = preset.gpuRetainBytesPerEngine;
    if (bytes > budget) {
      w.retention = 'evicted';
      return;
    }
    const hex = keyOf(w).hex;
    let entry = store.entries.get(hex);
    if (entry === undefined) {
      for (const old of store.entries.values()) {
        if (store.used + bytes <= budget) break;
        store.entries.delete(old.hex);
        store.used -= old.bytes;
        counters.evictions.retention++;
        for (const held of old.waits) held.retention = 'evicted';
      }
      entry = { hex, bytes, waits: new Set(), until: 0, version: 0 };
      store.entries.set(hex, entry);
      store.used += bytes;
    }
    entry.waits.add(w);
    w.retention = 'kept';
    if (until > entry.until) {
      entry.until = until;
      const version = ++entry.version;
      if (until !== Infinity) {
        q.at(until, () => {
          if (entry.version !== version || store.entries.get(hex) !== entry) return;
          store.entries.delete(hex);
          store.used -= entry.bytes;
          for (const held of entry.waits) held.retention = 'expired';
        });
      }
    }
  }

  function release(w) {
    if (w.retention !== 'kept') return;
    const store = retained[w.engine];
    const entry = store.entries.get(keyOf(w).hex);
    // Gone already (dropped for room), or a later entry of the same key that this wait is not in.
    if (entry === undefined || !entry.waits.delete(w)) return;
    if (entry.waits.size > 0) return;
    store.entries.delete(entry.hex);
    store.used -= entry.bytes;
  }

  // ---- the oracle's view of the tier ------------------------------------------------------
  let oracleBusyUntil = 0;
  function oracleCanPrepare(w) {
    const bytes = moveBytes(w);
    const ownEnd = q.now + unitSeconds(w);
    const sharedEnd = Math.max(q.now, oracleBusyUntil) + bytes / preset.sourceBytesPerSec + overhead;
    if (Math.max(ownEnd, sharedEnd) > w.end) return false;
    oracleBusyUntil = Math.max(q.now, oracleBusyUntil) + bytes / preset.sourceBytesPerSec;
    return true;
  }

  // ---- the engine's original path ---------------------------------------------------------
  const gpuBusyUntil = new Array(engines).fill(0);
  const latencies = [];
  function originalPath(w, e, woke) {
    const bytes = moveBytes(w);
    if (bytes === 0) return done(w, woke);
    // The engine's estimates as things stand: a load gets its share of the links as they are
    // now busy, a recompute waits behind the recomputes already queued on its engine.
    const loadRate = Math.min(perUnit, source.bytesPerSec / (source.count + 1), h2d[e].bytesPerSec / (h2d[e].count + 1));
    const loadEstimate = overhead + bytes / loadRate;
    const recomputeSeconds = recomputeTokens(w) / preset.recomputeTokensPerSecPerEngine;
    if (loadEstimate <= Math.max(0, gpuBusyUntil[e] - q.now) + recomputeSeconds) {
      w.path = 'load';
      q.after(overhead, () => net.transfer(bytes, [source, h2d[e]], perUnit, () => done(w, woke)));
    } else {
      w.path = 'recompute';
      gpuBusyUntil[e] = Math.max(q.now, gpuBusyUntil[e]) + recomputeSeconds;
      q.at(gpuBusyUntil[e], () => done(w, woke));
    }
  }
  function done(w, woke) {
    w.finished++;
    w.latency = q.now - woke;
    latencies.push(w.latency);
  }

  // ---- trace events -----------------------------------------------------------------------
  const open = new Map();
  /** Per demand id, the admitted waits on it: the coordinator aborts a unit when this reaches 0. */
  const holders = new Map();
  function hold(w) {
    w.holdId = idOf(keyOf(w), w.want);
    holders.set(w.holdId, (holders.get(w.holdId) ?? 0) + 1);
  }
  function leave(w) {
    if (w.holdId === undefined) return;
    const left = holders.get(w.holdId) - 1;
    const id = w.holdId;
    w.holdId = undefined;
    if (left > 0) {
      holders.set(id, left);
      return;
    }
    holders.delete(id);
    const store = w.want.readiness === 'device' ? devicePools[Number(w.want.target.arena)] : arena;
    const entry = store.entries.get(id);
    if (entry !== undefined && entry.state === 'preparing') q.after(0, entry.stop);
  }
  const ctx = { classMedian: (tool) => trace.classMedians.get(tool) ?? 0, unitSeconds };

  function onWait(w) {
    const e = agentEngine(w.agent);
    w.engine = e;
    const key = keyOf(w);
    if (!bytesOfKey.has(key.hex)) bytesOfKey.set(key.hex, moveBytes(w));
    const previous = open.get(w.agent);
    if (previous !== undefined) {
      end(previous, 'replaced');
      release(previous);
    }
    open.set(w.agent, w);
    w.consumer = Object.freeze({ engine: engineNames[e], request: w.agent, generation: w.generation });
    w.want = device ? Object.freeze({ readiness: 'device', target: targets[e] }) : Object.freeze({ readiness: 'host' });

    let prepares;
    if (policy.oracle) {
      prepares = oracleCanPrepare(w);
      if (!prepares) retain(w, e, Infinity);
    } else {
      if (policy.retain(w, ctx)) retain(w, e, q.now + policy.retainSeconds);
      prepares = policy.prepare(w, ctx);
    }
    if (prepares) {
      const admission = coordinator.onWait(w.consumer, key, w.want);
      w.admission = admission.status;
      w.ticket = admission.ticket;
      if (w.ticket !== undefined) hold(w);
      // A refused replacement leaves the old wait registered: end it, as the engine would.
      else if (previous?.ticket !== undefined && previous.holdId !== undefined) coordinator.onCancel(previous.ticket);
    } else {
      w.admission = 'not-prepared';
      if (previous?.ticket !== undefined && previous.holdId !== undefined) coordinator.onCancel(previous.ticket);
    }
    if (previous !== undefined) leave(previous);
    pump();
  }

  function onWake(w) {
    open.delete(w.agent);
    const woke = q.now;
    const e = w.engine;
    const key = keyOf(w);
    // A wait the policy never handed to the coordinator: the engine's own lookup, a lease or a miss.
    const looked = w.ticket !== undefined ? null : backend.tryPinReady(key, w.consumer, w.want);
    const result = looked === null ? coordinator.onWake(w.ticket) : looked.kind === 'lease' ? { kind: 'hit', lease: looked } : looked;
    leave(w);
    counters.lookups[looked === null ? 'coordinator' : 'direct']++;
    end(w, 'wake');
    if (result.kind === 'hit') {
      const lease = result.lease;
      w.hit = lease.meta.tier;
      release(w);
      if (lease.meta.tier === 'host') {
        net.transfer(lease.meta.bytes, [h2d[e]], preset.h2dBytesPerSecPerEngine, () => {
          lease.close();
          done(w, woke);
        });
      } else {
        lease.close();
        done(w, woke);
      }
    } else {
      w.cause = causeOf(w, result.reason, idOf(key, w.want));
      release(w);
      originalPath(w, e, woke);
    }
    pump();
  }

  function causeOf(w, reason, id) {
    if (w.ticket === undefined) {
      if (w.admission !== 'not-prepared') return 'overloaded';
      if (w.retention === 'expired') return 'retention-expired';
      if (w.retention === 'evicted') return 'retention-evicted';
      return 'not-prepared';
    }
    if (reason === 'preparing') return 'in-flight';
    if ((lastEvicted.get(id) ?? -1) >= w.start) return 'evicted';
    if ((lastFailed.get(id) ?? -1) >= w.start) return 'failed';
    if ((lastAborted.get(id) ?? -1) >= w.start) return 'cancelled';
    return 'queued';
  }

  function end(w, outcome) {
    if (checkWaits && w.outcome !== undefined) throw new Error(`wait ${w.agent}#${w.generation} ended twice: ${w.outcome}, then ${outcome}`);
    w.outcome = outcome;
  }

  function onCancel(w) {
    open.delete(w.agent);
    end(w, 'cancel');
    if (w.ticket !== undefined) coordinator.onCancel(w.ticket);
    leave(w);
    release(w);
    pump();
  }

  // ---- run --------------------------------------------------------------------------------
  // Every field a replay sets, present from the start: one object shape for every wait.
  const waits = trace.waits.map((w) => ({
    ...w, engine: 0, consumer: null, want: null, admission: null, ticket: undefined, holdId: undefined,
    retention: null, outcome: undefined, hit: undefined, cause: undefined, path: undefined, latency: 0, finished: 0,
  }));
  for (const event of trace.events) q.at(event.t, event.kind === 'wait' ? onWait : event.kind === 'wake' ? onWake : onCancel, waits[event.wait]);
  const samples = [];
  const lastT = trace.events.length > 0 ? trace.events[trace.events.length - 1].t : 0;
  const sample = () => {
    let gpu = 0;
    let devicePool = 0;
    for (let e = 0; e < engines; e++) {
      gpu += retained[e].used;
      devicePool += devicePools[e].used;
    }
    samples.push([micro(q.now), arena.used, pinnedBytes, arena.staging, gpu, devicePool]);
    if (q.now + sampleSeconds <= lastT) q.after(sampleSeconds, sample);
  };
  q.at(0, sample);
  let popped = 0;
  q.run(onProgress === null ? undefined : (now) => {
    if ((++popped & 0xffff) === 0) onProgress(lastT > 0 ? now / lastT : 1);
  });
  for (const store of [arena, ...devicePools]) for (const entry of store.entries.values()) wasteOf(entry.unit);
  if (checkWaits) for (const w of waits) checkWait(w);

  return summarize({ policy, seed, waits, latencies, samples, counters, coordinator, source, h2d });
}

/** What checkWaits asks of one wait once the replay has run. */
function checkWait(w) {
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

function summarize({ policy, seed, waits, latencies, samples, counters, coordinator, source, h2d }) {
  const endings = { wake: 0, cancel: 0, replaced: 0, open: 0 };
  const misses = Object.fromEntries(CAUSES.map((c) => [c, 0]));
  const hitsByTier = { gpu: 0, device: 0, host: 0 };
  const buckets = BUCKETS.map((b) => ({ name: b.name, wakes: 0, hits: 0 }));
  const tools = new Map();
  const paths = { load: 0, recompute: 0, none: 0 };
  let hits = 0;
  let wakes = 0;
  for (const w of waits) {
    endings[w.outcome ?? 'open']++;
    if (w.outcome !== 'wake') continue;
    wakes++;
    const length = w.end - w.start;
    const bucket = buckets[BUCKETS.findIndex((b) => length < b.below)];
    bucket.wakes++;
    let tool = tools.get(w.tool);
    if (tool === undefined) tools.set(w.tool, (tool = { wakes: 0, hits: 0 }));
    tool.wakes++;
    if (w.hit !== undefined) {
      hits++;
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
  const peak = [0, 0, 0, 0, 0];
  const mean = [0, 0, 0, 0, 0];
  for (const s of samples) {
    for (let i = 0; i < 5; i++) {
      peak[i] = Math.max(peak[i], s[i + 1]);
      mean[i] += s[i + 1] / samples.length;
    }
  }
  const memoryFields = ['arenaBytes', 'pinnedBytes', 'stagingBytes', 'gpuRetainedBytes', 'devicePoolBytes'];
  const stats = coordinator.stats();
  return {
    policy: policy.name,
    seed,
    waits: waits.length,
    endings,
    wakes,
    hits,
    hitRate: wakes > 0 ? hits / wakes : 0,
    hitsByTier,
    misses,
    missPath: paths,
    buckets,
    tools: Object.fromEntries([...tools].sort((a, b) => (a[0] < b[0] ? -1 : 1))),
    latency: { count: sorted.length, mean: micro(sorted.reduce((a, b) => a + b, 0) / Math.max(1, sorted.length)), p50: q(0.5), p95: q(0.95), p99: q(0.99), max: q(1), cdf },
    units: { ...counters.units, ioSeconds: micro(counters.units.ioSeconds) },
    wasted: { ...counters.wasted, ioSeconds: micro(counters.wasted.ioSeconds) },
    evictions: counters.evictions,
    lookups: counters.lookups,
    memory: {
      fields: memoryFields,
      peak: Object.fromEntries(memoryFields.map((f, i) => [f, peak[i]])),
      mean: Object.fromEntries(memoryFields.map((f, i) => [f, Math.round(mean[i])])),
      series: samples,
    },
    links: { sourceBytes: Math.round(source.bytes), h2dBytes: Math.round(h2d.reduce((a, l) => a + l.bytes, 0)) },
    coordinator: {
      waits: stats.waits, waitsByStatus: stats.waitsByStatus, joins: stats.joins, issued: stats.issued, completed: stats.completed,
      failed: stats.failed, wasted: stats.wasted, wakes: stats.wakes, hits: stats.hits, misses: stats.misses, cancels: stats.cancels,
      overloads: stats.overloads, waiting: stats.waiting, queued: stats.queued, inFlight: stats.inFlight,
    },
  };
}
