// The simulated storage tier, its worker and the backend the coordinator pins from.
//
// Units the coordinator issues move a context's KV from the source tier into the host arena
// (prepTarget 'host') or the unit's engine's device pool ('device'), after a fixed overhead, at
// most `perUnitBytesPerSec`, over links every transfer shares. The arena's budget counts the
// staging buffer of each unit in flight. A unit whose consumers all leave stops at once (its
// partial bytes are wasted work).
//
// Eviction, to fit a new unit: ready, unpinned artifacts only. By default least recently used
// first, and those no admitted wait still demands before those one does (the worker as it was
// built). A policy may instead give each artifact a value (`runtime.evictionValue`): then the
// lowest go first, and none whose value is not below the new unit's. Every eviction calls
// coordinator.forget(key), so completed history never outlives the bytes.
import { wasteOf } from './accounting.js';

const GRANT = Object.freeze({ worker: 'sim-storage', grant: 'sim-io' });
const MISS_ABSENT = Object.freeze({ kind: 'miss', reason: 'absent' });
const MISS_PREPARING = Object.freeze({ kind: 'miss', reason: 'preparing' });

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

const NO_CLOSE = () => {};

export class Storage {
  /** Per artifact id: when it was last evicted, failed or aborted (for the miss causes). */
  lastEvicted = new Map();
  lastFailed = new Map();
  lastAborted = new Map();
  /** Per artifact id, the admitted waits demanding it: a unit stops when this reaches 0. */
  holders = new Map();
  pinnedBytes = 0;

  constructor(sim) {
    this.sim = sim;
    const { preset } = sim;
    const pool = (budget) => ({ budget, used: 0, entries: new Map() });
    this.arena = { ...pool(preset.hostArenaBytes), staging: 0 };
    this.devicePools = Array.from({ length: preset.engines }, () => pool(preset.devicePoolBytesPerEngine));
    this.window = { start: 0, bytes: 0, timer: false, budget: sim.policy.window ? sim.policy.window.fractionOfSource * preset.sourceBytesPerSec * sim.policy.window.seconds : Infinity };
    this.coordinator = null;
    const storage = this;
    this.backend = {
      tryPinReady(key, consumer, want) {
        return storage.#pin(key, consumer, want);
      },
    };
  }

  poolOf(want) {
    return want.readiness === 'device' ? this.devicePools[Number(want.target.arena)] : this.arena;
  }

  idOf(key, want) {
    return want.readiness === 'device' ? `${key.hex}@${want.target.arena}` : key.hex;
  }

  /** Device-pool bytes over every engine (the memory samples). */
  devicePoolBytes() {
    let used = 0;
    for (const p of this.devicePools) used += p.used;
    return used;
  }

  /** The backend's nonblocking lookup and pin: KV retained on the engine first, then the store. */
  #pin(key, consumer, want) {
    const sim = this.sim;
    const e = sim.engineIndex.get(consumer.engine);
    if (sim.gpus.holds(e, key.hex)) return new SimLease(key, consumer, want.readiness, { tier: 'gpu' }, NO_CLOSE);
    const store = this.poolOf(want);
    const entry = store.entries.get(this.idOf(key, want));
    if (entry === undefined) return MISS_ABSENT;
    if (entry.state !== 'ready') return MISS_PREPARING;
    if (entry.pins++ === 0 && store === this.arena) this.pinnedBytes += entry.bytes;
    entry.unit.used = true;
    // Touch: most recently used last.
    store.entries.delete(entry.id);
    store.entries.set(entry.id, entry);
    return new SimLease(key, consumer, want.readiness, { tier: store === this.arena ? 'host' : 'device', bytes: entry.bytes }, () => {
      if (--entry.pins === 0 && store === this.arena) this.pinnedBytes -= entry.bytes;
    });
  }

  // ---- demand -------------------------------------------------------------------------------

  /** `w` was admitted with a ticket: it now demands its artifact. */
  hold(w) {
    w.holdId = this.idOf(w.key, w.want);
    this.holders.set(w.holdId, (this.holders.get(w.holdId) ?? 0) + 1);
  }

  /** `w` no longer demands its artifact; the last to leave stops a unit still preparing it. */
  leave(w) {
    if (w.holdId === undefined) return;
    const id = w.holdId;
    w.holdId = undefined;
    const left = this.holders.get(id) - 1;
    if (left > 0) {
      this.holders.set(id, left);
      return;
    }
    this.holders.delete(id);
    const entry = this.poolOf(w.want).entries.get(id);
    if (entry !== undefined && entry.state === 'preparing') this.sim.q.after(0, entry.stop);
  }

  // ---- units --------------------------------------------------------------------------------

  /** Issues units while the coordinator has them (and the budget window, if any, allows). */
  pump() {
    const { q, policy, preset } = this.sim;
    const window = this.window;
    for (;;) {
      if (policy.window) {
        if (q.now >= window.start + policy.window.seconds) {
          const windows = Math.floor((q.now - window.start) / policy.window.seconds);
          window.start += windows * policy.window.seconds;
          window.bytes = Math.max(0, window.bytes - windows * window.budget);
        }
        if (window.bytes >= window.budget) {
          if (!window.timer) {
            window.timer = true;
            q.at(window.start + policy.window.seconds, () => {
              window.timer = false;
              this.pump();
            });
          }
          return;
        }
      }
      const work = this.coordinator.beginNext(GRANT);
      if (work === null) return;
      this.#startUnit(work, preset);
    }
  }

  #startUnit(work, preset) {
    const sim = this.sim;
    const { q, counters, net } = sim;
    counters.units.issued++;
    const e = work.readiness === 'device' ? Number(work.target.arena) : null;
    const want = work.readiness === 'device' ? { readiness: 'device', target: work.target } : { readiness: 'host' };
    const store = this.poolOf(want);
    const id = this.idOf(work.key, want);
    const bytes = sim.bytesOfKey.get(work.key.hex);
    this.window.bytes += bytes;
    const unit = { moved: 0, ioSeconds: 0, used: false, wasted: false, done: false };
    const overhead = preset.unitOverheadSec;
    if (store.entries.has(id)) {
      // Already resident (its history was forgotten, or none is kept): the worker says so.
      q.after(overhead, () => {
        counters.units.alreadyReady++;
        this.coordinator.complete(work, { ok: true });
        this.pump();
      });
      return;
    }
    const staging = Math.min(bytes, preset.stagingBytesPerUnit);
    const value = sim.runtime.evictionValue === undefined ? null : sim.runtime.evictionValue(work.key.hex);
    const arena = this.arena;
    const fits = bytes <= store.budget && (store === arena
      ? this.#makeRoom(arena, bytes + staging, arena.staging, value)
      : this.#makeRoom(store, bytes, 0, value) && this.#makeRoom(arena, staging, arena.staging, value));
    if (!fits) {
      q.after(overhead, () => {
        counters.units.failed++;
        this.lastFailed.set(id, q.now);
        this.coordinator.complete(work, { ok: false, error: new Error('no room: every resident artifact is pinned or worth more') });
        this.pump();
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
        if (sim.checkAborts && work.signal.aborted) throw new Error(`unit ${id} aborted but the replay counted consumers`);
        entry.state = 'ready';
        counters.units.completed++;
        this.coordinator.complete(work, { ok: true });
      } else {
        store.entries.delete(id);
        store.used -= bytes;
        counters.units.aborted++;
        this.lastAborted.set(id, q.now);
        wasteOf(counters, unit, 'aborted');
        this.coordinator.complete(work, { ok: false, error: new Error('aborted: every consumer left') });
      }
      this.pump();
    };
    // Every consumer left: the worker stops at once (a chunked copy has a boundary per chunk).
    // The replay counts a unit's consumers itself (`holders`) rather than listen to work.signal:
    // an AbortSignal's abort costs a DOMException, a microsecond budget per unit at this scale.
    entry.stop = () => {
      if (unit.done) return;
      if (sim.checkAborts && !work.signal.aborted) throw new Error(`unit ${id} stopped without its abort signal`);
      finish(false);
    };
    if (!this.holders.has(id)) q.after(0, entry.stop);
    q.after(overhead, () => {
      if (unit.done) return;
      ioStart = q.now;
      transfer = net.transfer(bytes, e === null ? [sim.source] : [sim.source, sim.h2d[e]], preset.perUnitBytesPerSec, () => unit.done || finish(true));
    });
  }

  // ---- eviction -----------------------------------------------------------------------------

  /**
   * Evicts ready, unpinned artifacts until `need` fits `store` beside `extra` bytes; false if it
   * cannot. `value` null: least recently used first, those no admitted wait demands before those
   * one does. Otherwise by the policy's values, lowest first, only those worth less than `value`.
   */
  #makeRoom(store, need, extra, value) {
    const budget = store.budget;
    if (store.used + extra + need <= budget) return true;
    if (value === null) {
      for (const spare of [true, false]) {
        for (const entry of store.entries.values()) {
          if (store.used + extra + need <= budget) return true;
          if (entry.state !== 'ready' || entry.pins > 0 || this.holders.has(entry.id) === spare) continue;
          this.#evict(store, entry);
        }
      }
      return store.used + extra + need <= budget;
    }
    const valueOf = this.sim.runtime.evictionValue;
    const candidates = [];
    let room = budget - store.used - extra;
    let order = 0;
    for (const entry of store.entries.values()) {
      order++;
      if (entry.state !== 'ready' || entry.pins > 0) continue;
      const v = valueOf(entry.key.hex);
      if (v >= value) continue;
      candidates.push({ entry, v, order });
      room += entry.bytes;
    }
    // Nothing is evicted for a unit that would not fit even then.
    if (room < need) return false;
    candidates.sort((a, b) => a.v - b.v || a.order - b.order);
    for (const { entry } of candidates) {
      if (store.used + extra + need <= budget) break;
      this.#evict(store, entry);
    }
    return true;
  }

  #evict(store, entry) {
    const sim = this.sim;
    const counters = sim.counters;
    store.entries.delete(entry.id);
    store.used -= entry.bytes;
    counters.evictions.arena++;
    counters.evictions.arenaBytes += entry.bytes;
    this.lastEvicted.set(entry.id, sim.q.now);
    wasteOf(counters, entry.unit, 'evicted');
    // Completed history must not outlive the bytes.
    if (this.coordinator.forget(entry.key)) counters.evictions.forgetApplied++;
    else counters.evictions.forgetRefused++;
    if (sim.runtime.onEvicted !== undefined) sim.runtime.onEvicted(entry.key);
  }

  /** At the end: what is still resident and never used is wasted. */
  finish() {
    for (const store of [this.arena, ...this.devicePools]) for (const entry of store.entries.values()) wasteOf(this.sim.counters, entry.unit, 'unused');
  }
}
