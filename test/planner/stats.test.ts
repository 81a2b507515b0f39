// WaitLengthStats (lib/planner/stats.ts): wait lengths per class, learned online from waits
// that ended, with forgetting, a pooled prior for classes with little evidence, and answers
// conditional on a wait's age. Lengths are resolved to a bin (about 19%), so the checks allow it.
import { describe, expect, it } from 'vitest';
import { WaitLengthStats } from '../../lib/index.js';

/** Lengths spread evenly in log space over [lo, hi], deterministic. */
function logSpread(lo: number, hi: number, n: number): number[] {
  return Array.from({ length: n }, (_, i) => lo * (hi / lo) ** ((i + 0.5) / n));
}

describe('planner: online wait-length statistics', () => {
  it('knows nothing before a wait ends: survival 1, hazard 0, no median', () => {
    const stats = new WaitLengthStats();
    const cls = stats.classOf('build');
    expect(stats.survival(cls, 5)).toBe(1);
    expect(stats.hazard(cls, 0, 10)).toBe(0);
    expect(stats.remainingAtLeast(cls, 3, 1)).toBe(1);
    expect(stats.median(cls)).toBe(Infinity);
    expect(stats.observations).toBe(0);
  });

  it('learns a class\'s lengths: its survival and median follow what ended, to a bin', () => {
    const stats = new WaitLengthStats();
    const cls = stats.classOf('web');
    for (const x of logSpread(1, 100, 400)) stats.observe(cls, x);
    expect(stats.observations).toBe(400);
    // Evenly spread in log space from 1 to 100 s: the median is 10 s, a quarter outlast 31.6 s.
    expect(stats.median(cls)).toBeGreaterThan(10 / 1.2);
    expect(stats.median(cls)).toBeLessThan(10 * 1.2);
    expect(stats.survival(cls, 10)).toBeCloseTo(0.5, 1);
    expect(stats.survival(cls, 10 ** 1.5)).toBeCloseTo(0.25, 1);
    expect(stats.survival(cls, 0.5)).toBeCloseTo(1, 12);
    expect(stats.survival(cls, 200)).toBeCloseTo(0, 12);
  });

  it('answers conditional on age: a class of quick and slow waits is likely to end soon at first, unlikely once past the quick ones', () => {
    const stats = new WaitLengthStats();
    const cls = stats.classOf('shell');
    for (let i = 0; i < 200; i++) {
      stats.observe(cls, 0.05);
      stats.observe(cls, 100);
    }
    expect(stats.hazard(cls, 0, 10)).toBeCloseTo(0.5, 1);
    expect(stats.hazard(cls, 2, 10)).toBeLessThan(0.05);
    expect(stats.remainingAtLeast(cls, 2, 50)).toBeGreaterThan(0.95);
    // Its remaining length's quantiles rise with p and never undercut its age's survivors.
    const q50 = stats.remainingQuantile(cls, 2, 0.5);
    const q90 = stats.remainingQuantile(cls, 2, 0.9);
    expect(q50).toBeGreaterThan(80);
    expect(q90).toBeGreaterThanOrEqual(q50);
    // Older than every wait it has seen: nothing says it ends, so it is taken to go on.
    expect(stats.remainingAtLeast(cls, 500, 10)).toBe(1);
    expect(stats.remainingQuantile(cls, 500, 0.5)).toBe(Infinity);
  });

  it('forgets: after the workload changes, the old lengths fade with the half-life', () => {
    const stats = new WaitLengthStats({ halfLife: 50 });
    const cls = stats.classOf('build');
    for (let i = 0; i < 500; i++) stats.observe(cls, 1);
    expect(stats.median(cls)).toBeLessThan(1.2);
    for (let i = 0; i < 300; i++) stats.observe(cls, 60);
    // 300 new against 500 old weighted down by 2^-6: the median follows the new lengths.
    expect(stats.median(cls)).toBeGreaterThan(50);
    // Without forgetting (a half-life far beyond the sample) the old ones still hold the median.
    const keeps = new WaitLengthStats({ halfLife: 1e9 });
    const same = keeps.classOf('build');
    for (let i = 0; i < 500; i++) keeps.observe(same, 1);
    for (let i = 0; i < 300; i++) keeps.observe(same, 60);
    expect(keeps.median(same)).toBeLessThan(1.2);
  });

  it('a class with little evidence leans on the pooled lengths; with more, on its own', () => {
    const stats = new WaitLengthStats({ priorWeight: 8 });
    const file = stats.classOf('file');
    for (let i = 0; i < 500; i++) stats.observe(file, 0.04);
    const fresh = stats.classOf('new-tool');
    // Nothing seen of it: the pooled lengths (all file reads) answer.
    expect(stats.survival(fresh, 1)).toBe(0);
    stats.observe(fresh, 30);
    stats.observe(fresh, 30);
    // Two of its own against a prior of 8: 2/10 of its mass outlasts 1 s.
    expect(stats.survival(fresh, 1)).toBeCloseTo(0.2, 2);
    for (let i = 0; i < 200; i++) stats.observe(fresh, 30);
    expect(stats.survival(fresh, 1)).toBeGreaterThan(0.95);
  });

  it('is bounded: past maxClasses, new names share one overflow class; bad lengths are ignored', () => {
    const stats = new WaitLengthStats({ maxClasses: 2 });
    const a = stats.classOf('a');
    stats.classOf('b');
    const c = stats.classOf('c');
    const d = stats.classOf('d');
    expect(c).toBe(d);
    expect(c.name).toBe('*other*');
    expect(stats.classes).toBe(2);
    expect(stats.classOf('a')).toBe(a);
    stats.observe(a, Number.NaN);
    stats.observe(a, -1);
    stats.observe(a, Infinity);
    expect(a.observations).toBe(0);
    expect(() => new WaitLengthStats({ maxClasses: 0 })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', field: 'maxClasses' }));
    expect(() => new WaitLengthStats({ halfLife: 0 })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', field: 'halfLife' }));
  });

  it('expected holding time: E[min(remaining, horizon) | age], from what ended; the horizon when nothing says it ends', () => {
    const stats = new WaitLengthStats({ priorWeight: 0 });
    const cls = stats.classOf('x');
    // Half end at 2 s, half at 8 s.
    for (let i = 0; i < 400; i++) stats.observe(cls, i % 2 === 0 ? 2 : 8);
    // From the start: half of them held 2 s, half 8 s (a bin's width, 19%, of slack).
    expect(stats.expectedWithin(cls, 0, 20)).toBeGreaterThan(4);
    expect(stats.expectedWithin(cls, 0, 20)).toBeLessThan(6);
    // Capped by the horizon.
    expect(stats.expectedWithin(cls, 0, 1)).toBeCloseTo(1, 1);
    // Past the 2 s ones, only the 8 s ones are left: about 5 s more from age 3.
    expect(stats.expectedWithin(cls, 3, 20)).toBeGreaterThan(4);
    expect(stats.expectedWithin(cls, 3, 20)).toBeLessThan(6);
    // Older than anything seen: nothing says it ends.
    expect(stats.expectedWithin(cls, 100, 20)).toBe(20);
    // A new observation moves it once enough have been seen (the integral is rebuilt in steps).
    for (let i = 0; i < 2000; i++) stats.observe(cls, 0.5);
    expect(stats.expectedWithin(cls, 0, 20)).toBeLessThan(2);
    // A horizon inside the first bin, and an age in it.
    expect(stats.expectedWithin(cls, 0, 0.0005)).toBeCloseTo(0.0005, 6);
    expect(stats.expectedWithin(cls, 0.0002, 1)).toBeGreaterThan(0.4);
  });

  it('expected holding time follows a workload that changes, however long it has run', () => {
    const stats = new WaitLengthStats({ priorWeight: 0 });
    const cls = stats.classOf('x');
    for (let i = 0; i < 200_000; i++) stats.observe(cls, 1);
    expect(stats.expectedWithin(cls, 0, 20)).toBeLessThan(1.3);
    // The waits become 8 s long: after one and a half half-lives of them (the old ones weigh 35%)
    // the holding time has moved as the survival has, long before 1/64 more of all waits.
    for (let i = 0; i < 3000; i++) stats.observe(cls, 8);
    expect(stats.survival(cls, 1.5)).toBeGreaterThan(0.6);
    expect(stats.expectedWithin(cls, 0, 20)).toBeGreaterThan(4);
  });

  it('a class nothing has ended of leans on the pooled lengths; with nothing seen at all, the horizon', () => {
    const stats = new WaitLengthStats();
    const fresh = stats.classOf('fresh');
    expect(stats.expectedWithin(fresh, 0, 10)).toBe(10);
    const seen = stats.classOf('seen');
    for (let i = 0; i < 100; i++) stats.observe(seen, 2);
    // The pooled histogram is all 2 s waits: the fresh class is taken to be like them.
    expect(stats.expectedWithin(fresh, 0, 10)).toBeGreaterThan(1.6);
    expect(stats.expectedWithin(fresh, 0, 10)).toBeLessThan(2.4);
  });

  it('keeps its weights finite however long it runs (renormalising the forgetting)', () => {
    const stats = new WaitLengthStats({ halfLife: 1 });
    const cls = stats.classOf('x');
    for (let i = 0; i < 3000; i++) stats.observe(cls, i % 2 === 0 ? 0.1 : 10);
    const s = stats.survival(cls, 1);
    expect(Number.isFinite(s)).toBe(true);
    // With a half-life of one observation the last (10 s) dominates.
    expect(s).toBeGreaterThan(0.6);
  });
});
