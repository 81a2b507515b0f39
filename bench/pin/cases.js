// What bench:pin measures: its cases, how many ops each store runs per clock read and per
// process, and the keys and table a case is built from (the stores themselves: stores.js). The
// harness (harness.js), the case process (case.js) and every store read these; nothing here
// runs a measurement.
import { fileURLToPath } from 'node:url';
import { PROBE_WINDOW } from 'waitprep/layout';
import { keyBucketsFor } from 'waitprep/testing';
import { benchKey } from '../common.js';

/** The entry every fresh process runs: a case process, a contender process, a worker thread. */
export const ENTRY = fileURLToPath(new URL('../pin.js', import.meta.url));

export const CASES = ['hit', 'miss', 'device-hit', 'contended-2', 'contended-4', 'table-full', 'cold-slot-25', 'cold-slot-50'];

/** The cold-slot cases' table: 2^20 slots (2^16 with --quick, which fits in a cache and so is not cold). */
const COLD_CAPACITY = { full: 1 << 20, quick: 1 << 16 };

/**
 * Why a store skips a cold-slot case (null for other cases): those measure the lease table's
 * slots through its API, the `native` and `js` stores; the peers would measure their own index.
 */
export function coldNotApplicable(kase, why = 'cold-slot measures the lease table through its API (native, js) against core_bench cold') {
  return kase.startsWith('cold-slot-') ? why : null;
}

export const CAPACITY = 1024;
const HIT_INDEX = 0;
const ABSENT_INDEX = 1;
const WINDOW_SEARCH_FROM = 16;
export const META = Object.freeze({ sizeBytes: 1 << 20, location: 4096, checksum: 0xc0ffee, codecId: 1, representationVersion: 1 });
export const TARGET = Object.freeze({ device: 'GPU-8f3c2a10-5b7e-4d21-9a6c-0e1f2a3b4c5d', arena: 7, arenaGeneration: 3 });
export const DEVICE_UUID_HEX = TARGET.device.slice(4).replaceAll('-', '');

/** Ops per clock read, per implementation. */
const BATCH = { native: 32, js: 32, map: 32, 'c-floor': 256, sqlite: 1, redis: 1 };
/** Most ops one process measures, per implementation; each measurement also stops after `seconds`. */
const OPS = {
  full: { native: 6_400_000, js: 6_400_000, map: 6_400_000, 'c-floor': 51_200_000, sqlite: 100_000, redis: 50_000, seconds: 10 },
  quick: { native: 320_000, js: 320_000, map: 320_000, 'c-floor': 2_560_000, sqlite: 4_000, redis: 2_000, seconds: 1 },
};

/** How long one process of `impl` measures: at most `ops` ops in batches of `batch`, at most `seconds`. */
export function sizesOf(impl, quick) {
  const mode = quick ? 'quick' : 'full';
  return { ops: OPS[mode][impl], batch: BATCH[impl], seconds: OPS[mode].seconds };
}

/** The slots of a key's two buckets, first choice first (the fallback's keyBucketsFor, the same placement as table.c). */
export function keyBuckets(key, capacity) {
  return keyBucketsFor(Buffer.from(key.hex, 'hex'), capacity);
}

/** Indexes of 2 * PROBE_WINDOW + 1 keys with the same two buckets: the first 16 fill both, the last is looked up. */
function windowKeyIndexes() {
  const byBuckets = new Map();
  for (let i = WINDOW_SEARCH_FROM; ; i++) {
    const buckets = keyBuckets(benchKey(i), CAPACITY).map((b) => b[0]).join();
    const list = byBuckets.get(buckets) ?? [];
    byBuckets.set(buckets, list);
    list.push(i);
    if (list.length === 2 * PROBE_WINDOW + 1) return list;
  }
}

/**
 * What a case pins and what it must see. `published` are the key indexes the
 * store holds READY; `pinIndex` is the key every op looks up; `expect` is the
 * outcome every op must have ('lease', or a miss because the key is absent).
 * A cold-slot case publishes nothing here: `cold` says how large a table to
 * fill to which load, and every op pins the next of the published keys
 * (lease-table.js).
 */
export function fixture(kase, quick) {
  if (kase.startsWith('cold-slot-')) {
    const cold = { capacity: COLD_CAPACITY[quick ? 'quick' : 'full'], load: Number(kase.slice('cold-slot-'.length)) / 100 };
    return { published: [], pinIndex: -1, expect: 'lease', device: false, cold };
  }
  if (kase === 'miss') return { published: [HIT_INDEX], pinIndex: ABSENT_INDEX, expect: 'absent', device: false };
  if (kase === 'table-full') {
    const indexes = windowKeyIndexes();
    return { published: indexes.slice(0, 2 * PROBE_WINDOW), pinIndex: indexes[2 * PROBE_WINDOW], expect: 'absent', device: false };
  }
  return { published: [HIT_INDEX], pinIndex: HIT_INDEX, expect: 'lease', device: kase === 'device-hit' };
}
