// An indexed binary min-heap: items carry their own position (`heapIndex`, -1 when out), so any
// one can be removed or re-keyed in O(log n) without a search. The planner keeps each engine's
// retained pauses in one, lowest score on top: the pause to give up first when room runs out.

/** What the heap holds: a tie-breaking sequence and its position; the key is the heap's to read. */
export interface HeapItem {
  seq: number;
  heapIndex: number;
}

export class IndexedMinHeap<T extends HeapItem> {
  readonly #items: T[] = [];
  readonly #key: (item: T) => number;

  /** `key`: lower comes first; ties go to the lower `seq`. */
  constructor(key: (item: T) => number) {
    this.#key = key;
  }

  get size(): number {
    return this.#items.length;
  }

  peek(): T | undefined {
    return this.#items[0];
  }

  push(item: T): void {
    item.heapIndex = this.#items.length;
    this.#items.push(item);
    this.#up(item.heapIndex);
  }

  /** Takes `item` out; nothing when it is not in. */
  remove(item: T): void {
    const i = item.heapIndex;
    const items = this.#items;
    if (i < 0 || items[i] !== item) return;
    const last = items.pop()!;
    item.heapIndex = -1;
    if (i === items.length) return;
    items[i] = last;
    last.heapIndex = i;
    this.#down(i);
    this.#up(last.heapIndex);
  }

  /** Restores the order after the scores changed (a replan re-scores every item): O(n). */
  heapify(): void {
    for (let i = (this.#items.length >> 1) - 1; i >= 0; i--) this.#down(i);
  }

  #before(a: T, b: T): boolean {
    const ka = this.#key(a);
    const kb = this.#key(b);
    return ka < kb || (ka === kb && a.seq < b.seq);
  }

  #up(i: number): void {
    const items = this.#items;
    const item = items[i]!;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const p = items[parent]!;
      if (!this.#before(item, p)) break;
      items[i] = p;
      p.heapIndex = i;
      i = parent;
    }
    items[i] = item;
    item.heapIndex = i;
  }

  #down(i: number): void {
    const items = this.#items;
    const n = items.length;
    const item = items[i]!;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      const c = r < n && this.#before(items[r]!, items[l]!) ? r : l;
      const child = items[c]!;
      if (!this.#before(child, item)) break;
      items[i] = child;
      child.heapIndex = i;
      i = c;
    }
    items[i] = item;
    item.heapIndex = i;
  }
}
