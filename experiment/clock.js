// Virtual time for the experiment: an event queue and links that share their bandwidth.
// Nothing here sleeps or reads a wall clock; `now` only moves when the queue pops an event.

/**
 * A binary min-heap under `before(a, b)`, which must be a strict total order (ties broken by a
 * sequence number), so that what pops first never depends on the heap's shape. The experiment's
 * events, its transfers by target, and the scripted demo's timeline all use it.
 */
export class MinHeap {
  #items = [];
  #before;

  constructor(before) {
    this.#before = before;
  }

  get size() {
    return this.#items.length;
  }

  top() {
    return this.#items[0];
  }

  push(item) {
    const items = this.#items;
    const before = this.#before;
    items.push(item);
    let i = items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!before(item, items[parent])) break;
      items[i] = items[parent];
      i = parent;
    }
    items[i] = item;
  }

  pop() {
    const items = this.#items;
    const before = this.#before;
    const top = items[0];
    const last = items.pop();
    if (items.length > 0) {
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= items.length) break;
        const r = l + 1;
        const c = r < items.length && before(items[r], items[l]) ? r : l;
        if (!before(items[c], last)) break;
        items[i] = items[c];
        i = c;
      }
      items[i] = last;
    }
    return top;
  }
}

/**
 * Events ordered by (time, sequence): events at the same time run in the order they were
 * scheduled, so a replay is a deterministic function of its inputs.
 */
export class EventQueue {
  now = 0;
  #heap = new MinHeap(before);
  #seq = 0;

  /** Runs `fn(arg)` at virtual time `t` (never before now). */
  at(t, fn, arg) {
    this.#heap.push({ t: Math.max(t, this.now), seq: this.#seq++, fn, arg });
  }

  /** Runs `fn(arg)` after `dt` seconds of virtual time. */
  after(dt, fn, arg) {
    this.at(this.now + dt, fn, arg);
  }

  get size() {
    return this.#heap.size;
  }

  /** Pops and runs events until none are left; `onEach(now)` runs before each one. */
  run(onEach) {
    const heap = this.#heap;
    while (heap.size > 0) {
      const top = heap.pop();
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
 * transfers on it. This is how preparation and the misses' foreground loads interfere.
 *
 * Transfers over the same links with the same cap always move at the same rate, so they form a
 * group that keeps one counter, `served`: the bytes each of its transfers has moved since the
 * group began. A transfer ends when `served` reaches the value it had at its start plus its size,
 * so a group keeps its transfers in a heap by that target. A start or an end re-rates the groups
 * (a handful: one per path) and sets one timer for the earliest target; thousands of concurrent
 * transfers, as an overloaded tier has, cost a heap operation each, not a pass over all of them.
 */
export class Network {
  #queue;
  #groups = new Map();
  #last = 0;
  #version = 0;
  #seq = 0;
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
    const id = `${links.map((l) => l.name).join('+')}|${cap}`;
    let group = this.#groups.get(id);
    if (group === undefined) this.#groups.set(id, (group = { links, cap, rate: 0, served: 0, size: 0, heap: new MinHeap(earlier) }));
    const t = { bytes, target: group.served + bytes, seq: this.#seq++, done, active: true, group };
    group.heap.push(t);
    group.size++;
    for (const link of links) link.count++;
    this.#reschedule();
    return {
      cancel: () => {
        if (!t.active) return t.bytes;
        this.#advance();
        this.#remove(t);
        this.#reschedule();
        return t.bytes - (t.target - group.served);
      },
    };
  }

  #advance() {
    const now = this.#queue.now;
    const dt = now - this.#last;
    this.#last = now;
    if (dt <= 0) return;
    for (const group of this.#groups.values()) {
      if (group.size === 0) continue;
      const moved = group.rate * dt;
      group.served += moved;
      for (const link of group.links) link.bytes += moved * group.size;
    }
  }

  /** Takes `t` off its links; its heap entry stays, marked inactive, until it reaches the top. */
  #remove(t) {
    t.active = false;
    t.group.size--;
    for (const link of t.group.links) link.count--;
  }

  #reschedule() {
    let soonest = Infinity;
    for (const group of this.#groups.values()) {
      if (group.size === 0) continue;
      let rate = group.cap;
      for (const link of group.links) rate = Math.min(rate, link.bytesPerSec / link.count);
      group.rate = rate;
      while (!group.heap.top().active) group.heap.pop();
      soonest = Math.min(soonest, Math.max(0, group.heap.top().target - group.served) / rate);
    }
    const version = ++this.#version;
    if (soonest !== Infinity) this.#queue.at(this.#queue.now + soonest, this.#onTimer, version);
  }

  #timer(version) {
    if (version !== this.#version) return;
    this.#advance();
    // Within a byte of the end is the end: what rounding leaves of a transfer is not a transfer.
    // So is a remainder due within a few steps of the clock (a double's ulp grows with `now`:
    // 2^-32 s at t = 2^20 s, more than a byte's time on a fast link): the timer for it would
    // fire at this same `now`, move nothing and be set again, forever.
    const resolution = this.#queue.now * 2 ** -50;
    const finished = [];
    for (const group of this.#groups.values()) {
      while (group.size > 0) {
        const top = group.heap.top();
        if (!top.active) {
          group.heap.pop();
          continue;
        }
        const left = top.target - group.served;
        if (left >= 1 && left / group.rate > resolution) break;
        group.heap.pop();
        this.#remove(top);
        finished.push(top);
      }
    }
    this.#reschedule();
    for (const t of finished) t.done();
  }
}

/** Transfers by (target, seq): the order of a group's heap. */
function earlier(a, b) {
  return a.target < b.target || (a.target === b.target && a.seq < b.seq);
}
