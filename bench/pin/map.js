// bench:pin store `map`: an in-process Map of refcounted entries with a lease object per pin,
// the least a pin can cost in JavaScript. A Map lives in one thread, so it has no contended cases,
// and the consumer gets the Map itself from the store (`local`) instead of opening it.
import { benchKey } from '../common.js';
import { META, TARGET, coldNotApplicable } from './cases.js';

const READY = 2;

export function describe() {
  return { version: `Node ${process.version} Map` };
}

export function notApplicable(kase) {
  if (kase.startsWith('contended-')) return 'a Map lives in one thread: no other process or thread can pin through it';
  return coldNotApplicable(kase);
}

class MapLease {
  constructor(entry) {
    this.entry = entry;
  }

  close() {
    const entry = this.entry;
    if (entry === null) return;
    this.entry = null;
    entry.pins--;
  }
}

export function create(ctx, published) {
  const map = new Map();
  for (const key of published) {
    map.set(key.hex, {
      state: READY,
      pins: 0,
      meta: META,
      device: ctx.device ? TARGET.device : null,
      arena: ctx.device ? TARGET.arena : 0,
      arenaGeneration: ctx.device ? TARGET.arenaGeneration : 0,
    });
  }
  return {
    local: map,
    verify() {
      for (const [hex, entry] of map) if (entry.pins !== 0) throw new Error(`bench miscounted: ${entry.pins} pins left on ${hex}`);
    },
    dispose() {},
  };
}

export function openConsumer(ctx, local) {
  const key = benchKey(ctx.pinIndex);
  const B = ctx.sizes.batch;
  const expectLease = ctx.expect === 'lease';
  const map = local;
  const hex = key.hex;
  let one;
  if (!expectLease) {
    one = () => {
      const entry = map.get(hex);
      return entry === undefined ? 1 : 0;
    };
  } else if (ctx.device) {
    one = () => {
      const entry = map.get(hex);
      if (entry === undefined || entry.state !== READY) return 0;
      if (entry.device !== TARGET.device || entry.arena !== TARGET.arena || entry.arenaGeneration !== TARGET.arenaGeneration) return 0;
      entry.pins++;
      new MapLease(entry).close();
      return 1;
    };
  } else {
    one = () => {
      const entry = map.get(hex);
      if (entry === undefined || entry.state !== READY) return 0;
      entry.pins++;
      new MapLease(entry).close();
      return 1;
    };
  }
  return {
    expect: ctx.expect,
    batch() {
      let e = 0;
      for (let i = 0; i < B; i++) e += one();
      return e;
    },
    check() {},
    close() {},
  };
}
