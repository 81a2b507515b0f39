// The batching clock and the percentiles of bench:pin, for the case process and every contender.
//
// One process.hrtime.bigint() read costs ~40 ns here, more than a pin, so ops are timed in
// batches: one clock read before and one after `batch` consecutive ops, and the batch time /
// batch is one sample of per-op latency. The distribution is over batches: a single slow op
// inside a batch (a GC scavenge, a preemption) shows diluted by the batch size.
//
// The loops below are the timed ones. Each process runs one store's consumer only, so the call
// of `consumer.batch` stays monomorphic; keep it that way (the recorded figures were taken so).
import { nearestRank } from '../../experiment/percentile.js';

export async function warmUp(consumer, sizes) {
  await measure(consumer, { ...sizes, ops: Math.max(sizes.batch, Math.floor(sizes.ops / 10)), seconds: sizes.seconds / 4 });
}

/** Runs batches until `sizes.ops` ops or `sizes.seconds`; throws when any op had another outcome than expected. */
export async function measure(consumer, sizes) {
  const maxBatches = Math.max(1, Math.floor(sizes.ops / sizes.batch));
  const samples = new Float64Array(maxBatches);
  const start = Number(process.hrtime.bigint());
  const deadline = BigInt(start) + BigInt(Math.round(sizes.seconds * 1e9));
  const run = consumer.batch;
  let expected = 0;
  let n = 0;
  if (consumer.async) {
    while (n < maxBatches) {
      const t0 = process.hrtime.bigint();
      expected += await run();
      const t1 = process.hrtime.bigint();
      samples[n++] = Number(t1 - t0);
      if (t1 > deadline) break;
    }
  } else {
    while (n < maxBatches) {
      const t0 = process.hrtime.bigint();
      expected += run();
      const t1 = process.hrtime.bigint();
      samples[n++] = Number(t1 - t0);
      if (t1 > deadline) break;
    }
  }
  const ops = n * sizes.batch;
  const end = Number(process.hrtime.bigint());
  if (expected !== ops) throw new Error(`bench miscounted: ${ops} ops, ${expected} with the expected outcome (${consumer.expect})`);
  return { samples: samples.subarray(0, n), ops, start, end };
}

/** One measurement, then the pinner's own check that it released every pin, then its close. */
export async function measureAndClose(consumer, sizes) {
  try {
    const m = await measure(consumer, sizes);
    consumer.check();
    return m;
  } finally {
    consumer.close();
  }
}

/** Per-op ns at p50, p90, p99, p99.9 and max of a measurement's batch samples. */
export function summarize(samples, batch) {
  const sorted = Float64Array.from(samples).sort();
  const at = (q) => Math.round((nearestRank(sorted, q) / batch) * 10) / 10;
  return { p50_ns: at(0.5), p90_ns: at(0.9), p99_ns: at(0.99), p999_ns: at(0.999), max_ns: at(1) };
}

/**
 * One pinner's distribution, and its measuring window on the monotonic clock
 * (process.hrtime is CLOCK_MONOTONIC, one clock for every process).
 */
export function pinnerResult(m, batch) {
  return { ...summarize(m.samples, batch), ops: m.ops, start: m.start, end: m.end };
}
