// One percentile rule for the tools around the library (the experiment, the demo, the benchmarks
// and the examples), so that their figures are read the same way. The library's trace summary
// keeps its own copy of the rule (lib/trace/stats.ts); this one is not package API.

/**
 * The nearest-rank quantile `q` (0 < q <= 1) of an ascending array: the smallest value with at
 * least q of the values at or below it; 0 for an empty array.
 */
export function nearestRank(sorted, q) {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
}
