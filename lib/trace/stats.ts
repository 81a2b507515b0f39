/**
 * The nearest-rank quantile `q` (0 < q <= 1) of an ascending array: the smallest value with at
 * least q of the values at or below it; 0 for an empty array. Used by the trace summary.
 */
export function nearestRank(sorted: ArrayLike<number>, q: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}
