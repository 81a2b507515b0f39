// PausePlanner (lib/planner/planner.ts): its decisions (keep, prepare, neither) from online
// statistics, their revision as pauses age, what it does through the coordinator (onWait,
// onWake, onCancel, forget: nothing else), its eviction order, its units in flight and its
// bounds. A real WaitCoordinator over an InMemoryBackend; a hand-moved clock.
import { describe, expect, it } from 'vitest';
import {
  PausePlanner,
  WaitLengthStats,
  plannedUnitsInFlight,
  sglangRetention,
  trtllmRetention,
  vllmKvHint,
  type PausePlannerOptions,
  type PauseHandle,
} from '../../lib/index.js';
import { GRANT, consumer, makeKey, setup } from '../helpers.js';

const GB = 1e9;

/** A planner over a real coordinator; `clock.ms` moves its time. */
function planner(options: Partial<PausePlannerOptions<string>> = {}, stats = new WaitLengthStats()) {
  const { coord, backend } = setup({ maxInFlight: 4 });
  const clock = { ms: 0 };
  const p = new PausePlanner<string>({
    coordinator: coord,
    budgets: { gpuRetainBytes: 10 * GB, arenaBytes: 10 * GB },
    links: { tierBytesPerSec: 96 * GB, unitBytesPerSec: 6 * GB },
    statistics: stats,
    now: () => clock.ms,
    ...options,
  });
  return { p, coord, backend, clock, stats };
}

/** Statistics that have seen `file` waits of 40 ms, `build` waits of 30 s and `subagent` ones of 300 s. */
function trained(): WaitLengthStats {
  const stats = new WaitLengthStats();
  for (let i = 0; i < 200; i++) {
    stats.observe(stats.classOf('file'), 0.04);
    stats.observe(stats.classOf('build'), 30);
    stats.observe(stats.classOf('subagent'), 300);
  }
  return stats;
}

const start = (n: number, toolClass: string, bytes: number, engine = 'e0') => ({ consumer: consumer(n, 0, engine), key: makeKey(n), toolClass, bytes, tag: n });

describe('planner: decisions', () => {
  it('keeps a pause on the GPU while its engine has retention room, with a hint; cold, every hint is the lowest priority', () => {
    const { p } = planner();
    const plan = p.begin(start(1, 'build', 4 * GB));
    expect(plan.action).toBe('keep');
    expect(plan.hint).toEqual({ keep: true, priority: 1, ttlSeconds: null });
    expect(plan.pause!.retained).toBe(true);
    expect(p.stats()).toMatchObject({ begins: 1, kept: 1, open: 1, retainedBytes: 4 * GB, admittedBytes: 0 });
  });

  it('past the retention budget, a pause likely to end soon takes the room of one that is not; the one given up is prepared', () => {
    const { p, coord } = planner({ budgets: { gpuRetainBytes: 5 * GB, arenaBytes: 10 * GB } }, trained());
    const build = p.begin(start(1, 'build', 4 * GB));
    expect(build.action).toBe('keep');
    const file = p.begin(start(2, 'file', 4 * GB));
    // A 40 ms read ends within the horizon for sure; a 30 s build does not.
    expect(file.action).toBe('keep');
    expect(file.hint!.priority).toBeGreaterThan(90);
    expect(file.released).toEqual([build.pause]);
    expect(build.pause!.retained).toBe(false);
    // The build outlasts its unit (4 GB at 6 GB/s): given up on the GPU, it is prepared instead.
    expect(build.pause!.admitted).toBe(true);
    expect(coord.stats().queued).toBe(1);
    expect(p.stats()).toMatchObject({ kept: 2, released: 1, admissions: 1 });
  });

  it('a pause that would not outlast its unit and has no retention room gets neither', () => {
    const { p, coord } = planner({ budgets: { gpuRetainBytes: 0, arenaBytes: 10 * GB } }, trained());
    const plan = p.begin(start(1, 'file', 4 * GB));
    expect(plan.action).toBe('none');
    expect(plan.hint).toBeNull();
    expect(coord.stats().waits).toBe(0);
    // A long one, in the same position, is prepared.
    expect(p.begin(start(2, 'subagent', 4 * GB)).action).toBe('prepare');
  });

  it('prepares only what fits the arena, less the staging of the units in flight', () => {
    // An eighth of 96 GB/s over 6 GB/s: 2 units in flight of 1 GB staging, 2 GB of a 10 GB arena.
    const { p } = planner({ budgets: { gpuRetainBytes: 0, arenaBytes: 10 * GB, stagingBytesPerUnit: 1 * GB } }, trained());
    expect(p.unitsInFlight).toBe(2);
    expect(p.begin(start(1, 'build', 4 * GB)).action).toBe('prepare');
    expect(p.begin(start(2, 'build', 4 * GB)).action).toBe('prepare');
    expect(p.begin(start(3, 'build', 2 * GB)).action).toBe('none');
    expect(p.stats().admittedBytes).toBe(8 * GB);
    const whole = planner({ tierShare: 1 }).p;
    expect(whole.unitsInFlight).toBe(16);
  });

  it('device readiness fills the engine\'s device pool, not the host arena', () => {
    const { p } = planner({ budgets: { gpuRetainBytes: 0, arenaBytes: 0, devicePoolBytes: 5 * GB } }, trained());
    const target = { device: 'GPU-5e1f0c2a-1b3d-4e5f-8a9b-0c1d2e3f4a5b', arena: 0, arenaGeneration: 0 };
    const device = (n: number, engine: string) => ({ ...start(n, 'build', 4 * GB, engine), readiness: { readiness: 'device', target } });
    expect(p.begin(device(1, 'e0')).action).toBe('prepare');
    expect(p.begin(device(2, 'e0')).action).toBe('none');
    expect(p.begin(device(3, 'e1')).action).toBe('prepare');
    expect(p.begin(start(4, 'build', 1 * GB)).action).toBe('none');
  });

  it('revises as pauses age: a kept pause of a quick-or-slow class loses priority once past the quick ones', () => {
    const stats = new WaitLengthStats();
    for (let i = 0; i < 200; i++) {
      stats.observe(stats.classOf('shell'), 0.05);
      stats.observe(stats.classOf('shell'), 100);
    }
    const { p, clock } = planner({}, stats);
    const plan = p.begin(start(1, 'shell', 1 * GB));
    expect(plan.hint!.priority).toBeGreaterThan(40);
    clock.ms = 3000;
    const { hints } = p.replan();
    expect(hints).toHaveLength(1);
    expect(hints[0]!.pause).toBe(plan.pause);
    expect(hints[0]!.hint.priority).toBeLessThan(10);
    expect(hints[0]!.hint.ttlSeconds).toBeGreaterThan(60);
    // Unchanged since: no hint again.
    expect(p.replan().hints).toHaveLength(0);
  });

  it('replan fills the arena by hit density; it withdraws an admitted pause only while its unit is still moving', () => {
    const stats = new WaitLengthStats();
    for (let i = 0; i < 400; i++) {
      stats.observe(stats.classOf('slow'), 200 + (i % 100));
      stats.observe(stats.classOf('soon'), 12 + (i % 4));
      stats.observe(stats.classOf('soonish'), 20 + (i % 20));
    }
    const { p, coord, clock } = planner({ budgets: { gpuRetainBytes: 0, arenaBytes: 4 * GB } }, stats);
    // A unit estimated at 100 s: its bytes are still moving through the whole test.
    const slow = p.begin({ ...start(1, 'slow', 4 * GB), unitSeconds: 100 });
    expect(slow.action).toBe('prepare');
    const soon = p.begin(start(2, 'soon', 4 * GB));
    expect(soon.action).toBe('none');
    clock.ms = 5000;
    // At 5 s the `soon` pause ends within 10 s for sure; `slow` does not: it is withdrawn.
    const result = p.replan();
    expect(soon.pause!.score).toBeGreaterThan(0);
    expect(slow.pause!.score).toBe(0);
    expect(result.withdrawn).toEqual([slow.pause]);
    expect(result.admitted).toEqual([soon.pause]);
    expect(coord.stats().cancels).toBe(1);
    expect(p.stats()).toMatchObject({ withdrawals: 1, admissions: 2 });
    // `soon` moved its 4 GB by 6 s: no replan withdraws it now, whatever waits; only a newcomer
    // that needs its room and beats it by the hysteresis squared would.
    const soonish = p.begin(start(3, 'soonish', 4 * GB));
    expect(soonish.action).toBe('none');
    clock.ms = 6000;
    expect(p.replan().withdrawn).toEqual([]);
    clock.ms = 14_000;
    expect(p.replan().withdrawn).toEqual([]);
    expect(soon.pause!.admitted).toBe(true);
  });

  it('the hit density: a pause likely to end within the horizon, but after its unit, and soon, ranks first', () => {
    const stats = new WaitLengthStats({ priorWeight: 0 });
    for (let i = 0; i < 400; i++) {
      stats.observe(stats.classOf('instant'), 0.01);
      stats.observe(stats.classOf('quick'), 1);
      stats.observe(stats.classOf('later'), 8);
      stats.observe(stats.classOf('long'), 60);
    }
    const { p } = planner({ budgets: { gpuRetainBytes: 0, arenaBytes: 0 } }, stats);
    const score = (n: number, cls: string) => p.begin(start(n, cls, 1 * GB)).pause!.score;
    const [instant, quick, later, long] = [score(1, 'instant'), score(2, 'quick'), score(3, 'later'), score(4, 'long')];
    // Ends before its unit (1 GB at 6 GB/s) could be done: no hit to be had.
    expect(instant).toBe(0);
    // Ends past the horizon: nothing within it.
    expect(long).toBe(0);
    // Both end within it for sure; the sooner frees its room sooner: 1 / (1 + 1 / 0.6) against
    // 1 / (1 + 8 / 0.6), 0.375 against 0.070, to a bin's width (19%) of the lengths.
    expect(quick).toBeGreaterThan(0.3);
    expect(quick).toBeLessThan(0.45);
    expect(later).toBeGreaterThan(0.055);
    expect(later).toBeLessThan(0.085);
    expect(quick / later).toBeGreaterThan(4);
  });

  it('wake: the coordinator answers for an admitted pause, null otherwise; only wakes teach lengths', () => {
    const { p, coord, backend, clock, stats } = planner({ budgets: { gpuRetainBytes: 0, arenaBytes: 10 * GB } });
    const admitted = p.begin(start(1, 'build', 1 * GB));
    expect(admitted.action).toBe('prepare');
    const work = coord.beginNext(GRANT)!;
    backend.publish(work.key);
    coord.complete(work, { ok: true });
    clock.ms = 2500;
    const result = p.wake(admitted.pause!);
    expect(result?.kind).toBe('hit');
    if (result?.kind === 'hit') result.lease.close();
    expect(stats.classOf('build').observations).toBe(1);
    expect(stats.median(stats.classOf('build'))).toBeCloseTo(2.5, 0);
    // Woken already: stale, nothing changes.
    expect(p.wake(admitted.pause!)).toBeNull();
    const { p: p2, stats: s2 } = planner();
    const kept = p2.begin(start(2, 'web', 1 * GB));
    expect(p2.wake(kept.pause!)).toBeNull();
    const cancelled = p2.begin(start(3, 'web', 1 * GB));
    expect(p2.cancel(cancelled.pause!)).toBe(true);
    expect(p2.cancel(cancelled.pause!)).toBe(false);
    expect(s2.classOf('web').observations).toBe(1);
    expect(p2.stats()).toMatchObject({ wakes: 1, cancels: 1, open: 0 });
  });

  it('a second pause of the same request replaces the first: its registration is taken over when admitted, cancelled when not', () => {
    const { p, coord } = planner({ budgets: { gpuRetainBytes: 0, arenaBytes: 10 * GB } }, trained());
    const first = p.begin({ ...start(1, 'build', 1 * GB), key: makeKey(10) });
    expect(first.action).toBe('prepare');
    const second = p.begin({ ...start(1, 'build', 1 * GB), key: makeKey(11) });
    expect(second.action).toBe('prepare');
    expect(first.pause!.open).toBe(false);
    expect(coord.stats()).toMatchObject({ waiting: 1, cancels: 0 });
    const third = p.begin({ ...start(1, 'file', 1 * GB), key: makeKey(12) });
    expect(third.action).toBe('none');
    expect(coord.stats()).toMatchObject({ waiting: 0, cancels: 1 });
    expect(p.stats()).toMatchObject({ replaced: 2, open: 1 });
  });

  it('the engine dropping kept KV makes the pause a candidate for preparation at once', () => {
    const { p, coord } = planner({}, trained());
    const plan = p.begin(start(1, 'subagent', 2 * GB));
    expect(plan.action).toBe('keep');
    expect(p.retentionDropped(plan.pause!)).toEqual({ action: 'prepare', withdrawn: [] });
    expect(plan.pause!.retained).toBe(false);
    expect(coord.stats().queued).toBe(1);
    expect(p.stats()).toMatchObject({ dropped: 1, retainedBytes: 0, admittedBytes: 2 * GB });
  });

  it('an evicted artifact: its admitted pauses are withdrawn and its history forgotten, so a replan prepares it again (a counted re-preparation)', () => {
    const { p, coord, backend } = planner({ budgets: { gpuRetainBytes: 0, arenaBytes: 10 * GB } }, trained());
    const plan = p.begin(start(1, 'subagent', 2 * GB));
    const work = coord.beginNext(GRANT)!;
    backend.publish(work.key);
    coord.complete(work, { ok: true });
    backend.evict(work.key);
    expect(p.evicted(work.key)).toEqual([plan.pause]);
    expect(p.evicted(makeKey(77))).toEqual([]);
    expect(plan.pause!.admitted).toBe(false);
    expect(coord.stats().historySize).toBe(0);
    const { admitted } = p.replan();
    expect(admitted).toEqual([plan.pause]);
    expect(coord.stats().queued).toBe(1);
    expect(p.stats()).toMatchObject({ admissions: 2, readmissions: 1, withdrawals: 1 });
  });
});

describe('planner: what protects work already done', () => {
  /** `a` waits end within 10 s a fifth of the time, `b` ones three fifths (hazard 0.2 and 0.6 until 5 s). */
  function mixed(): WaitLengthStats {
    const stats = new WaitLengthStats({ priorWeight: 0 });
    for (let i = 0; i < 500; i++) {
      stats.observe(stats.classOf('a'), i % 5 === 0 ? 5 : 100);
      stats.observe(stats.classOf('b'), i % 5 < 3 ? 5 : 100);
    }
    return stats;
  }

  it('a newcomer about four times better displaces an admitted pause whose unit is still moving (hysteresis 2), not one whose bytes have moved (2 squared)', () => {
    for (const [at, displaced] of [[100, true], [1500, false]] as const) {
      const { p, clock } = planner({ hysteresis: 2, budgets: { gpuRetainBytes: 0, arenaBytes: 4 * GB } }, mixed());
      const first = p.begin(start(1, 'a', 4 * GB));
      expect(first.action).toBe('prepare');
      // 4 GB at 6 GB/s: its unit takes about 0.67 s; by twice that its bytes count as moved.
      clock.ms = at;
      const second = p.begin(start(2, 'b', 4 * GB));
      // Hit densities 0.6 / (1 + 7 / 0.6) against 0.2 / (1 + 9 / 0.6): 3.8 times.
      const ratio = second.pause!.score / first.pause!.score;
      expect(ratio).toBeGreaterThan(2);
      expect(ratio).toBeLessThan(4);
      expect(second.action).toBe(displaced ? 'prepare' : 'none');
      expect(second.withdrawn).toEqual(displaced ? [first.pause] : []);
      expect(first.pause!.admitted).toBe(!displaced);
    }
  });

  it('under pressure, a pause below its pool\'s recent marginal score waits, even with room free', () => {
    const { p } = planner({ budgets: { gpuRetainBytes: 0, arenaBytes: 8 * GB } }, mixed());
    const held = [1, 2].map((n) => p.begin(start(n, 'b', 4 * GB)));
    expect(held.map((x) => x.action)).toEqual(['prepare', 'prepare']);
    // Two more `b` pauses wait for room: every replan finds the pool full at a marginal score of 0.6.
    p.begin(start(3, 'b', 4 * GB));
    p.begin(start(4, 'b', 4 * GB));
    // (The clock stands still: every `b` pause scores alike.)
    for (let t = 1; t <= 100; t++) p.replan();
    // Room frees; until the next replan, an `a` pause (a quarter of the score) is not prepared, a `b` one is.
    expect(p.wake(held[0]!.pause!)).not.toBeNull();
    expect(p.begin(start(5, 'a', 4 * GB)).action).toBe('none');
    expect(p.begin(start(6, 'b', 4 * GB)).action).toBe('prepare');
  });

  it('weights smaller contexts up when preparing (bytesExponent), not when keeping', () => {
    for (const [exponent, smallFirst] of [[0.5, true], [0, false]] as const) {
      const { p } = planner({ bytesExponent: exponent, hysteresis: 2, budgets: { gpuRetainBytes: 0, arenaBytes: 4 * GB } }, mixed());
      const big = p.begin(start(1, 'a', 4 * GB));
      const small = p.begin(start(2, 'a', 0.5 * GB));
      // Equally likely to end soon; at the half power the small one scores sqrt(8) times higher.
      expect(small.pause!.hazard).toBeCloseTo(big.pause!.hazard, 12);
      expect(small.action).toBe(smallFirst ? 'prepare' : 'none');
      expect(small.withdrawn).toEqual(smallFirst ? [big.pause] : []);
    }
    // Keeping ranks by hazard alone: a small newcomer does not take a kept big one's room.
    const { p } = planner({ budgets: { gpuRetainBytes: 4 * GB, arenaBytes: 0 } }, mixed());
    expect(p.begin(start(1, 'b', 4 * GB)).action).toBe('keep');
    expect(p.begin(start(2, 'b', 0.5 * GB)).action).toBe('none');
  });
});

describe('planner: eviction order', () => {
  it('no open pause wants it < open but unadmitted (by score) < admitted (by score): never an admitted pause\'s while a lower one can go', () => {
    const { p } = planner({ budgets: { gpuRetainBytes: 0, arenaBytes: 100 * GB } }, trained());
    const build = p.begin(start(1, 'build', 1 * GB));
    const sub = p.begin(start(2, 'subagent', 1 * GB));
    const file = p.begin(start(3, 'file', 1 * GB));
    expect([build.action, sub.action, file.action]).toEqual(['prepare', 'prepare', 'none']);
    const gone = makeKey(99).hex;
    const [b, s, f] = [build, sub, file].map((x) => x.pause!.key.hex);
    expect(p.evictionValue(gone)).toBe(-1);
    expect(p.evictionValue(f!)).toBeCloseTo(file.pause!.score, 12);
    expect(p.evictionValue(f!)).toBeLessThanOrEqual(1);
    expect(p.evictionValue(b!)).toBeCloseTo(2 + build.pause!.score, 12);
    expect(p.evictionValue(s!)).toBeGreaterThanOrEqual(2);
    const order = p.evictionOrder([b!, s!, f!, gone]);
    expect(order.slice(0, 2)).toEqual([gone, f]);
    expect(new Set(order.slice(2))).toEqual(new Set([b, s]));
    // Equal values keep the order given (say, least recently used first).
    expect(p.evictionOrder([makeKey(98).hex, gone])).toEqual([makeKey(98).hex, gone]);
    // Two pauses on one key: the artifact is worth the best of them.
    const twin = p.begin({ ...start(4, 'file', 1 * GB), key: build.pause!.key });
    expect(twin.action).toBe('none');
    expect(p.evictionValue(b!)).toBeCloseTo(2 + build.pause!.score, 12);
    p.cancel(build.pause!);
    expect(p.evictionValue(b!)).toBeCloseTo(twin.pause!.score, 12);
  });
});

describe('planner: units in flight, bounds, options', () => {
  it('asks for the tier\'s bandwidth over one unit\'s, at least 1, at most its bound', () => {
    expect(plannedUnitsInFlight({ tierBytesPerSec: 96 * GB, unitBytesPerSec: 6 * GB })).toBe(16);
    expect(plannedUnitsInFlight({ tierBytesPerSec: 300 * GB, unitBytesPerSec: 100 * GB })).toBe(3);
    expect(plannedUnitsInFlight({ tierBytesPerSec: 1 * GB, unitBytesPerSec: 6 * GB })).toBe(1);
    expect(plannedUnitsInFlight({ tierBytesPerSec: 1000 * GB, unitBytesPerSec: 1 * GB }, 64)).toBe(64);
    // A share of the tier: a quarter of 96 over 6 is 4; never below one ...
    expect(plannedUnitsInFlight({ tierBytesPerSec: 96 * GB, unitBytesPerSec: 6 * GB }, 64, 0.25)).toBe(4);
    // ... and never below two where the tier carries two units: one long unit does not hold up the next.
    expect(plannedUnitsInFlight({ tierBytesPerSec: 300 * GB, unitBytesPerSec: 100 * GB }, 64, 0.25)).toBe(2);
    expect(plannedUnitsInFlight({ tierBytesPerSec: 150 * GB, unitBytesPerSec: 100 * GB }, 64, 0.25)).toBe(1);
  });

  it('holds at most maxPauses open: past it a pause gets no plan, and is counted', () => {
    const { p, coord } = planner({ maxPauses: 2 });
    p.begin(start(1, 'x', 1));
    p.begin(start(2, 'x', 1));
    const third = p.begin(start(3, 'x', 1));
    expect(third).toEqual({ pause: null, action: 'none', hint: null, released: [], withdrawn: [] });
    expect(p.stats()).toMatchObject({ overflows: 1, open: 2 });
    // A replacement frees its own place first.
    expect(p.begin(start(2, 'x', 1)).pause).not.toBeNull();
    expect(coord.stats().waits).toBe(0);
  });

  it('bounds the engines it tells apart: past maxEngines they share one budget', () => {
    const { p } = planner({ maxEngines: 1, budgets: { gpuRetainBytes: 3, arenaBytes: 0 } });
    expect(p.begin(start(1, 'x', 2, 'e0')).action).toBe('keep');
    expect(p.begin(start(2, 'x', 2, 'e1')).action).toBe('keep');
    expect(p.begin(start(3, 'x', 2, 'e2')).action).toBe('none');
  });

  it('rejects unknown options and ill-typed ones with ERR_INVALID_ARGUMENT naming the field', () => {
    const { coord } = setup();
    const base = { coordinator: coord, budgets: { gpuRetainBytes: 1, arenaBytes: 1 }, links: { tierBytesPerSec: 1, unitBytesPerSec: 1 } };
    expect(() => new PausePlanner({ ...base, bogus: 1 } as never)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', field: 'bogus' }));
    expect(() => new PausePlanner({ ...base, coordinator: {} } as never)).toThrow(expect.objectContaining({ field: 'coordinator' }));
    expect(() => new PausePlanner({ ...base, links: { tierBytesPerSec: 0, unitBytesPerSec: 1 } })).toThrow(expect.objectContaining({ field: 'links.tierBytesPerSec' }));
    expect(() => new PausePlanner({ ...base, prepareThreshold: 2 })).toThrow(expect.objectContaining({ field: 'prepareThreshold' }));
    expect(() => new PausePlanner({ ...base, hysteresis: 0.5 })).toThrow(expect.objectContaining({ field: 'hysteresis' }));
    const p = new PausePlanner(base);
    expect(() => p.begin({ ...start(1, 'x', 1), bytes: -1 })).toThrow(expect.objectContaining({ field: 'start.bytes' }));
    expect(() => p.begin({ ...start(1, 'x', 1), key: 'k' as never })).toThrow(expect.objectContaining({ field: 'start.key' }));
    // A handle from another planner is nobody's here.
    const other = new PausePlanner(base).begin(start(1, 'x', 1)).pause as PauseHandle;
    expect(p.wake(other)).toBeNull();
    expect(p.cancel(other)).toBe(false);
  });
});

describe('planner: a polluted Object.prototype', () => {
  it('reads only its own options and pause fields', () => {
    const proto = Object.prototype as Record<string, unknown>;
    proto.hysteresis = 0.1;
    proto.unitSeconds = -1;
    proto.readiness = { readiness: 'device', target: { device: 'GPU-5e1f0c2a-1b3d-4e5f-8a9b-0c1d2e3f4a5b', arena: 0, arenaGeneration: 0 } };
    try {
      // Read, the inherited hysteresis and unitSeconds would throw, and readiness would make it a device pause.
      const { p, coord } = planner({ budgets: { gpuRetainBytes: 0, arenaBytes: 10 * GB } }, trained());
      const plan = p.begin(start(1, 'build', 1 * GB));
      expect(plan.action).toBe('prepare');
      expect(coord.beginNext(GRANT)!.readiness).toBe('host');
    } finally {
      delete proto.hysteresis;
      delete proto.unitSeconds;
      delete proto.readiness;
    }
  });
});

describe('planner: engine hints', () => {
  const keep = { keep: true, priority: 87, ttlSeconds: 42 };
  const release = { keep: false, priority: 0, ttlSeconds: null };

  it('vLLM kv_hints SET_PRIORITY: value and ttl_seconds', () => {
    expect(vllmKvHint(keep)).toEqual({ type: 'SET_PRIORITY', value: 87, ttl_seconds: 42 });
    expect(vllmKvHint(release)).toEqual({ type: 'SET_PRIORITY', value: 0 });
  });

  it('SGLang: priority 0-99; retention_seconds only when asked (an open proposal)', () => {
    expect(sglangRetention({ ...keep, priority: 100 })).toEqual({ priority: 99 });
    expect(sglangRetention(keep, { withRetentionSeconds: true })).toEqual({ priority: 87, retention_seconds: 42 });
    expect(sglangRetention(release, { withRetentionSeconds: true })).toEqual({ priority: 0 });
  });

  it('TensorRT-LLM TokenRangeRetentionConfig: priority 1-100, duration in ms, over a token range', () => {
    expect(trtllmRetention(keep, 0, 12_000)).toEqual({ tokenStart: 0, tokenEnd: 12_000, priority: 87, durationMs: 42_000 });
    expect(trtllmRetention(release)).toEqual({ tokenStart: 0, tokenEnd: null, priority: 1, durationMs: null });
  });
});
