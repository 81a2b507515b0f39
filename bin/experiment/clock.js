// Virtual time for the experiment: an event queue and links that share their bandwidth.
// Nothing here sleeps or reads a wall clock; `now` only moves when the queue pops an event.

/**
 * A binary min-heap of events ordered by (time, sequence): events at the same time run in the
 * order they were scheduled, so a replay is a deterministic function of its inputs.
 */
export class EventQueue {
  now = 0;
  #heap = [];
  #seq = 0;

  /** Runs `fn(arg)` at virtual time `t` (never before now). */
  at(t, fn, arg) {
    const event = { t: Math.max(t, this.now), seq: this.#seq++, fn, arg };
    const heap = this.#heap;
    heap.push(event);
    let i = heap.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!before(event, heap[parent])) break;
      heap[i] = heap[parent];
      i = parent;
    }
    heap[i] = event;
  }

  /** Runs `fn(arg)` after `dt` seconds of virtual time. */
  after(dt, fn, arg) {
    this.at(this.now + dt, fn, arg);
  }

  get size() {
    return this.#heap.length;
  }

  /** Pops and runs events until none are left; `onEach(now)` runs before each one. */
  run(onEach) {
    const heap = this.#heap;
    while (heap.length > 0) {
      const top = heap[0];
      const last = heap.pop();
      if (heap.length > 0) {
        let i = 0;
        for (;;) {
          const l = 2 * i + 1;
          if (l >= heap.length) break;
          const r = l + 1;
          const c = r < heap.length && before(heap[r], heap[l]) ? r : l;
          if (!before(heap[c], last)) break;
          heap[i] = heap[c];
          i = c;
        }
        heap[i] = last;
      }
      this.now = top.t;
      if (onEach !== undefined) onEach(top.t);
      top.fn(top.arg);
    }
  }
}

function before(a, b) {
  return a.t < b.t || (a.t === b.t && a.seq < b.seq);
}

/**
 * Links with bandwidth that every transfer crossing them shares equally: a transfer's rate is
 * the least of its own cap and, on each of its links, the link's bandwidth divided by the
 * transfers on it. This is how preparation and the misses' foreground loads interfere. Rates
 * change only when a transfer starts or ends; then every transfer is advanced to now, re-rated,
 * and one timer is set for the earliest end (a handful of transfers are active at a time, so
 * this is cheaper than a timer per transfer re-set on every change).
 */
export class Network {
  #queue;
  #active = [];
  #last = 0;
  #version = 0;
  #onTimer = (version) => this.#timer(version);

  constructor(queue) {
    this.#queue = queue;
  }

  /** A link of `bytesPerSec`; `bytes` accumulates what crossed it. */
  link(name, bytesPerSec) {
    return { name, bytesPerSec, count: 0, bytes: 0 };
  }

  /**
   * Moves `bytes` over `links`, at most `cap` bytes per second; `done()` runs when the last byte
   * arrives. Returns a handle whose `cancel()` stops it and returns the bytes it moved.
   */
  transfer(bytes, links, cap, done) {
    this.#advance();
    const t = { bytes, remaining: bytes, links, cap, rate: 0, done, active: true };
    this.#active.push(t);
    for (const link of links) link.count++;
    this.#reschedule();
    return {
      cancel: () => {
        if (!t.active) return t.bytes;
        this.#advance();
        this.#remove(t);
        this.#reschedule();
        return t.bytes - t.remaining;
      },
    };
  }

  #advance() {
    const now = this.#queue.now;
    const dt = now - this.#last;
    this.#last = now;
    if (dt <= 0) return;
    for (const t of this.#active) {
      const moved = Math.min(t.remaining, t.rate * dt);
      t.remaining -= moved;
      for (const link of t.links) link.bytes += moved;
    }
  }

  #remove(t) {
    t.active = false;
    for (const link of t.links) link.count--;
    const at = this.#active.indexOf(t);
    this.#active.splice(at, 1);
  }

  #reschedule() {
    let soonest = Infinity;
    for (const t of this.#active) {
      let rate = t.cap;
      for (const link of t.links) rate = Math.min(rate, link.bytesPerSec / link.count);
      t.rate = rate;
      soonest = Math.min(soonest, t.remaining / rate);
    }
    const version = ++this.#version;
    if (soonest !== Infinity) this.#queue.at(this.#queue.now + soonest, this.#onTimer, version);
  }

  #timer(version) {
    if (version !== this.#version) return;
    this.#advance();
    // Within a byte of the end is the end: what rounding leaves of a transfer is not a transfer.
    const finished = this.#active.filter((t) => t.remaining < 1);
    for (const t of finished) {
      t.remaining = 0;
      this.#remove(t);
    }
    this.#reschedule();
    for (const t of finished) t.done();
  }
}
