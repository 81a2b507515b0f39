// The lease table as bench:pin builds it for the native, js and c-floor stores: the case process
// opens the producer and publishes the case's keys into a table of CAPACITY slots (POSIX shared
// memory for native and c-floor, a SharedArrayBuffer for js); each pinner opens it as a consumer.
import { createRequire } from 'node:module';
import { openLeaseTable, unlinkLeaseTable } from 'waitprep';
import { benchKey } from '../common.js';
import { CAPACITY, META, TARGET, keyBuckets } from './cases.js';

/** The package version the figures are recorded against. */
export const packageVersion = createRequire(import.meta.url)('waitprep/package.json').version;

/**
 * Opens the producer (`implementation` 'native' or 'js') on `ctx.table` and publishes `given`;
 * fills in what a consumer needs to open it (`ctx.tableImpl`, the js `ctx.buffer`, and `ctx.slot`,
 * the slot a hit pins, or -1). A cold-slot case (`ctx.cold`) fills its own large table instead
 * (fillCold), and its keys are the store's `local`, for the consumer in the same process.
 */
export function createTable(ctx, given, implementation) {
  const producer = openLeaseTable({ name: ctx.table, role: 'producer', create: { capacity: ctx.cold?.capacity ?? CAPACITY }, implementation });
  let published = given;
  try {
    if (ctx.cold) published = fillCold(producer, ctx);
    const slots = [];
    for (const key of given) {
      const reservation = producer.reserve(key);
      producer.publish(reservation, META);
      slots.push(reservation.slot);
      if (ctx.device && producer.recordDeviceWrite(key, { ...TARGET, writeSeq: 1 }) !== 'recorded') throw new Error('recordDeviceWrite did not record');
    }
    if (ctx.kase === 'table-full') checkFullWindow(producer, slots, benchKey(ctx.pinIndex));
    ctx.slot = ctx.expect === 'lease' && slots.length > 0 ? slots[0] : -1;
    ctx.tableImpl = implementation;
    if (implementation === 'js') ctx.buffer = producer.sharedBuffer;
  } catch (error) {
    producer.close();
    if (implementation === 'native') unlinkLeaseTable(ctx.table);
    throw error;
  }
  return {
    local: ctx.cold ? published : null,
    verify() {
      // Every pin was matched by an unpin: no client holds a pin bit, and each key evicts.
      const pinned = producer.inspect().slots.filter((s) => s.pinHolders.length > 0);
      if (pinned.length > 0) throw new Error(`bench miscounted: pins left on slots ${pinned.map((s) => `${s.slot} (clients ${s.pinHolders})`).join(', ')}`);
      for (const key of published) if (producer.tryEvict(key) !== 'evicted') throw new Error('bench miscounted: a key did not evict after the run');
    },
    dispose() {
      producer.close();
      if (implementation === 'native') unlinkLeaseTable(ctx.table);
    },
  };
}

/**
 * Publishes distinct bench keys until `ctx.cold.load` of the table is READY. A key whose 8-slot
 * window is full already is skipped and counted (`ctx.fill.windowFull`): a fill from empty, not
 * the steady churn of a serving table. Returns the published keys. Also bench/pin-parts.js --cold.
 */
export function fillCold(producer, ctx) {
  const target = Math.round(ctx.cold.capacity * ctx.cold.load);
  const keys = [];
  let attempts = 0;
  for (let i = 0; keys.length < target; i++) {
    const key = benchKey(i);
    attempts++;
    let reservation;
    try {
      reservation = producer.reserve(key);
    } catch (error) {
      if (error.code === 'ERR_TABLE_FULL') continue;
      throw error;
    }
    producer.publish(reservation, META);
    keys.push(key);
  }
  ctx.fill = { capacity: ctx.cold.capacity, ready: keys.length, attempts, windowFull: attempts - keys.length };
  return keys;
}

/** The table-full case must really be the worst case: every slot of both of the looked-up key's buckets taken. */
function checkFullWindow(producer, slots, absentKey) {
  const want = keyBuckets(absentKey, CAPACITY).flat().sort((a, b) => a - b);
  const took = [...slots].sort((a, b) => a - b);
  if (took.join() !== want.join()) throw new Error(`table-full: the keys took slots ${took}, not ${want}`);
  try {
    producer.abandon(producer.reserve(absentKey));
  } catch (error) {
    if (error.code === 'ERR_TABLE_FULL') return;
    throw error;
  }
  throw new Error('table-full: the probe window still had room');
}

/**
 * A pinner through the LeaseTable API (`table.tryPin` + `lease.close()`): the native and js stores.
 * `local`: a cold-slot case's published keys, pinned one after another.
 */
export function openTableConsumer(ctx, local) {
  const key = ctx.cold ? null : benchKey(ctx.pinIndex);
  const B = ctx.sizes.batch;
  const expectLease = ctx.expect === 'lease';
  const table = openLeaseTable({ name: ctx.table, role: 'consumer', implementation: ctx.tableImpl, ...(ctx.buffer ? { buffer: ctx.buffer } : {}) });
  const want = { readiness: 'device', target: TARGET };
  let one;
  if (ctx.cold) {
    // In the order the keys were built: their objects lie in that order in the heap, as the C
    // bench's digests lie in one array, so the keys stream and the slots (placed by digest) are
    // the random, cold part.
    const keys = local;
    let at = 0;
    one = () => {
      const r = table.tryPin(keys[at]);
      at = at + 1 === keys.length ? 0 : at + 1;
      if (r.kind !== 'lease') return 0;
      r.close();
      return 1;
    };
  } else if (!expectLease) {
    one = () => {
      const r = table.tryPin(key);
      return r.kind === 'miss' && r.reason === 'absent' ? 1 : 0;
    };
  } else if (ctx.device) {
    one = () => {
      const r = table.tryPin(key, want);
      if (r.kind !== 'lease') return 0;
      r.close();
      return 1;
    };
  } else {
    one = () => {
      const r = table.tryPin(key);
      if (r.kind !== 'lease') return 0;
      r.close();
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
    check() {
      if (ctx.slot >= 0 && table.clientPins(ctx.slot) !== 0) throw new Error(`bench miscounted: this client still holds ${table.clientPins(ctx.slot)} pins`);
    },
    close: () => table.close(),
  };
}

/** A table left by a case process that died before it unlinked its own. */
export function removeLeftTable(table) {
  unlinkLeaseTable(table);
}
