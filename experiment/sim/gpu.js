// The engines' GPU memory. Each engine has one KV capacity (presets.js kvCapacityPerEngine, less
// the device pool's reservation and the resident shared prefix) that three things share:
//
// - running turns: a turn holds its context's KV from its start to its end (the agent's next
//   wait, or the trace's median turn after its last wake);
// - KV retained across waits: a wait's KV stays where its turn left it, at a priority; when a
//   turn needs room, retained KV is dropped lowest priority first, oldest first among equals,
//   as engines' priority eviction does; new retained KV only takes room that is free or held
//   at a lower priority;
// - the device pool, a fixed reservation (taken out of the capacity in presets.js).
//
// A turn that finds no room even with every retained entry dropped waits, first come first
// served, until running turns end; that wait is part of its next-turn latency (a turn larger
// than the whole capacity runs once it is alone). A turn whose own KV was kept runs in place only
// while no turn waits; otherwise it waits its turn too, as an engine's scheduler queues a request
// whose prefix is cached, and its KV is taken to be there when it gets room (optimistic for that
// turn: an engine may reuse cached blocks meanwhile). Open loop: the trace's later events do not
// move.
import { MinHeap } from '../clock.js';

/** Retained entries by (priority, then age): the lowest, oldest first. Stale nodes are skipped. */
function lower(a, b) {
  return a.priority < b.priority || (a.priority === b.priority && a.seq < b.seq);
}

class EngineMemory {
  constructor(capacity) {
    this.capacity = capacity;
    this.running = 0;
    this.retainedBytes = 0;
    /** keyHex -> { hex, bytes, waits: Set, priority, seq, version, until, live } */
    this.retained = new Map();
    this.heap = new MinHeap(lower);
    /** Turns waiting for room, first come first served; `head` is the first not yet admitted. */
    this.queue = [];
    this.head = 0;
  }

  get queued() {
    return this.queue.length - this.head;
  }

  /** The lowest-priority live retained entry, or null. */
  lowest() {
    const heap = this.heap;
    while (heap.size > 0) {
      const node = heap.top();
      if (node.entry.live && node.entry.version === node.version) return node.entry;
      heap.pop();
    }
    return null;
  }

  free() {
    return this.capacity - this.running - this.retainedBytes;
  }
}

export class Gpus {
  /** `sim`: the replay's context (q, counters, preset); `sharedBytes`: the resident shared prefix per engine. */
  constructor(sim, sharedBytes) {
    this.sim = sim;
    const capacity = Math.max(0, sim.preset.gpuKvBytesPerEngine - sharedBytes);
    this.engines = Array.from({ length: sim.preset.engines }, () => new EngineMemory(capacity));
    this.seq = 0;
    /** Called with each wait whose retained KV an engine dropped for room (not on expiry). */
    this.onDropped = null;
  }

  /** Bytes retained and running, over every engine (the memory samples). */
  totals() {
    let retained = 0;
    let running = 0;
    for (const m of this.engines) {
      retained += m.retainedBytes;
      running += m.running;
    }
    return { retained, running };
  }

  /**
   * Keeps `w`'s KV on its engine at `priority` until `until` (Infinity: until its wake). True if
   * kept; false (and `w.retention` 'evicted') when the room is held by running turns, turns
   * waiting for room, or retained KV of a higher priority.
   */
  retain(w, priority, until = Infinity) {
    const m = this.engines[w.engine];
    const hex = w.keyHex;
    let entry = m.retained.get(hex);
    if (entry === undefined) {
      if (w.bytes > m.capacity || m.queued > 0 || !this.#makeRoom(m, w.bytes, priority)) {
        w.retention = 'evicted';
        return false;
      }
      entry = { hex, bytes: w.bytes, waits: new Set(), priority, seq: this.seq++, version: 0, until: 0, live: true, engine: w.engine };
      m.retained.set(hex, entry);
      m.retainedBytes += entry.bytes;
      m.heap.push({ entry, version: 0, priority, seq: entry.seq });
    } else if (priority > entry.priority) {
      this.#reprioritize(m, entry, priority);
    }
    entry.waits.add(w);
    w.retention = 'kept';
    if (until > entry.until) {
      entry.until = until;
      if (until !== Infinity) {
        const version = entry.version;
        this.sim.q.at(until, () => {
          if (!entry.live || entry.until !== until || entry.version !== version) return;
          this.#remove(m, entry);
          for (const held of entry.waits) held.retention = 'expired';
        });
      }
    }
    return true;
  }

  /** A retention hint changed: `w`'s retained KV now has `priority` (the entry takes its waits' highest). */
  setPriority(w, priority) {
    if (w.retention !== 'kept') return;
    const m = this.engines[w.engine];
    const entry = m.retained.get(w.keyHex);
    if (entry === undefined || !entry.waits.has(w)) return;
    let top = priority;
    if (entry.waits.size > 1) for (const other of entry.waits) if (other !== w && other.priority !== undefined) top = Math.max(top, other.priority);
    w.priority = priority;
    if (top !== entry.priority) this.#reprioritize(m, entry, top);
  }

  /** `w` ended without a wake (cancel, replaced): its hold on retained KV goes. */
  release(w) {
    if (w.retention !== 'kept') return;
    const m = this.engines[w.engine];
    const entry = m.retained.get(w.keyHex);
    // Gone already (dropped for room), or a later entry of the same key that this wait is not in.
    if (entry === undefined || !entry.waits.delete(w)) return;
    if (entry.waits.size === 0) {
      this.#remove(m, entry);
      this.#drain(m);
    }
  }

  /**
   * A wake's lookup on its engine: 'own' when `w`'s own retained KV is there (it becomes the
   * turn's, in place), 'shared' when another wait's KV of the same key is (a prefix-cache hit;
   * the turn still needs room of its own), null when none is.
   */
  take(w) {
    const m = this.engines[w.engine];
    const entry = m.retained.get(w.keyHex);
    if (entry === undefined) return null;
    if (w.retention !== 'kept' || !entry.waits.delete(w)) return 'shared';
    if (entry.waits.size === 0) this.#remove(m, entry);
    return 'own';
  }

  /** Whether engine `e` holds retained KV of `hex` (the backend's lookup). */
  holds(e, hex) {
    return this.engines[e].retained.has(hex);
  }

  /**
   * Starts a turn of `bytes` on engine `e`; `onAdmitted()` runs once it holds its room (now, or
   * when running turns end). `inPlace`: its KV is already there (it was retained), no room taken,
   * unless turns are waiting for room: then it waits behind them, first come first served.
   */
  beginTurn(e, bytes, inPlace, onAdmitted) {
    const m = this.engines[e];
    if (inPlace && m.queued > 0) {
      this.sim.counters.turns.inPlaceQueued++;
      inPlace = false;
    }
    const turn = { e, bytes, admitted: false, ended: false, since: this.sim.q.now, onAdmitted };
    this.sim.counters.turns.started++;
    if (inPlace || (m.queued === 0 && this.#makeRoom(m, bytes, Infinity))) {
      this.#admit(m, turn);
    } else {
      this.sim.counters.turns.queued++;
      m.queue.push(turn);
    }
    return turn;
  }

  /**
   * The turn ended: its room goes back. A turn still waiting for room when the trace moves on (the
   * agent's next wait starts) leaves the queue; its wait so far is taken as its admission, so
   * the next-turn latency it reports is a lower bound (`turns.cutShort` counts these).
   */
  endTurn(turn) {
    if (turn.ended) return;
    turn.ended = true;
    const m = this.engines[turn.e];
    if (turn.admitted) {
      m.running -= turn.bytes;
    } else {
      const counters = this.sim.counters.turns;
      counters.cutShort++;
      counters.queuedSeconds += this.sim.q.now - turn.since;
      if (turn.onAdmitted !== null) turn.onAdmitted();
    }
    this.#drain(m);
  }

  #admit(m, turn) {
    turn.admitted = true;
    m.running += turn.bytes;
    if (turn.onAdmitted !== null) turn.onAdmitted();
  }

  /** Admits waiting turns in order while they fit, dropping retained KV for them. */
  #drain(m) {
    while (m.head < m.queue.length) {
      const turn = m.queue[m.head];
      if (turn.ended) {
        m.head++;
        continue;
      }
      if (!this.#makeRoom(m, turn.bytes, Infinity)) break;
      m.head++;
      this.sim.counters.turns.queuedSeconds += this.sim.q.now - turn.since;
      this.#admit(m, turn);
    }
    if (m.head > 1024 && m.head * 2 > m.queue.length) {
      m.queue = m.queue.slice(m.head);
      m.head = 0;
    }
  }

  /**
   * Drops retained entries of priority at most `priority`, lowest first, until `bytes` fit; false
   * when they cannot. What cannot fit even with every retained entry gone drops nothing; a wait
   * stopped by higher-priority entries may have dropped lower ones first, as an engine's
   * allocator would have on its next allocation anyway.
   */
  #makeRoom(m, bytes, priority) {
    if (m.free() >= bytes) return true;
    if (m.capacity - m.running < bytes) {
      // A turn larger than the whole capacity still runs once it is alone, or it would never run.
      if (priority !== Infinity || m.running > 0) return false;
      while (m.retainedBytes > 0) this.#drop(m, m.lowest());
      return true;
    }
    while (m.free() < bytes) {
      const entry = m.lowest();
      if (entry === null || entry.priority > priority) return false;
      this.#drop(m, entry);
    }
    return true;
  }

  #drop(m, entry) {
    this.#remove(m, entry);
    const counters = this.sim.counters.evictions;
    counters.retention++;
    counters.retentionBytes += entry.bytes;
    for (const w of entry.waits) {
      w.retention = 'evicted';
      if (this.onDropped !== null) this.onDropped(w);
    }
  }

  #remove(m, entry) {
    entry.live = false;
    m.retained.delete(entry.hex);
    m.retainedBytes -= entry.bytes;
    if (m.heap.size > 64 && m.heap.size > 4 * m.retained.size) this.#rebuild(m);
  }

  #reprioritize(m, entry, priority) {
    entry.priority = priority;
    entry.version++;
    m.heap.push({ entry, version: entry.version, priority, seq: entry.seq });
    if (m.heap.size > 64 && m.heap.size > 4 * m.retained.size) this.#rebuild(m);
  }

  /** Drops the stale nodes a heap collects as priorities change. */
  #rebuild(m) {
    m.heap = new MinHeap(lower);
    for (const entry of m.retained.values()) m.heap.push({ entry, version: entry.version, priority: entry.priority, seq: entry.seq });
  }
}
