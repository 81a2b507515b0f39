// The experiment's GPU model (experiment/sim/gpu.js, presets.js): an engine's KV capacity is
// GPU memory less weights and a reserve; running turns, retained KV and the device pool's
// reservation share it; a turn that needs room drops retained KV lowest priority first, and waits
// when even that is not enough; a prefill's cost counts attention's quadratic term.
import { describe, expect, it } from 'vitest';
import { EventQueue } from '../../experiment/clock.js';
import { MODELS, kvCapacityPerEngine, prefillFlops, resolvePreset } from '../../experiment/presets.js';
import { replay } from '../../experiment/replay.js';
import { POLICIES } from '../../experiment/policies.js';
import { newCounters } from '../../experiment/sim/accounting.js';
import { Gpus } from '../../experiment/sim/gpu.js';
import { generatorTrace } from '../../experiment/traces.js';

const GiB = 2 ** 30;

/** A wait as gpu.js reads one. */
function wait(keyHex: string, bytes: number): Record<string, unknown> {
  return { keyHex, bytes, engine: 0, retention: null, priority: undefined };
}

function gpus(capacity: number): { q: EventQueue; g: Gpus; dropped: Array<Record<string, unknown>>; counters: ReturnType<typeof newCounters> } {
  const q = new EventQueue();
  const counters = newCounters();
  const g = new Gpus({ q, counters, preset: { engines: 1, gpuKvBytesPerEngine: capacity } }, 0);
  const dropped: Array<Record<string, unknown>> = [];
  g.onDropped = (w: Record<string, unknown>) => dropped.push(w);
  return { q, g, dropped, counters };
}

describe('experiment: the GPU model', () => {
  it('prefill counts attention: +20% at 12k tokens and about +100% at 60k for Llama 3.1 8B; a cached prefix is not recomputed', () => {
    const m = MODELS['llama-3.1-8b'];
    const linear = (n: number) => 2 * m.params * n;
    expect(prefillFlops(m, 12_000) / linear(12_000)).toBeCloseTo(1 + (32 * 32 * 256 * 12_000) / (2 * 8e9), 9);
    expect(prefillFlops(m, 12_000) / linear(12_000)).toBeGreaterThan(1.19);
    expect(prefillFlops(m, 60_000) / linear(60_000)).toBeGreaterThan(1.95);
    // With 10k of 12k cached: 2k new tokens, each attending to everything before it.
    expect(prefillFlops(m, 12_000, 10_000)).toBeCloseTo(2 * m.params * 2_000 + 32 * 32 * 256 * (12_000 ** 2 - 10_000 ** 2), 0);
  });

  it("an engine's KV capacity is its GPUs' usable memory less the weights and the reserve", () => {
    const p = resolvePreset('70b-pcie5-host');
    const perGpu = 80 * GiB * 0.9 - (70.6e9 * 2) / 4 - 4 * GiB;
    expect(p.kvCapacityBytesPerEngine).toBe(Math.floor(perGpu) * 4);
    expect(p.gpuKvBytesPerEngine).toBe(p.kvCapacityBytesPerEngine - 32 * GiB);
    expect(kvCapacityPerEngine({ ...p, gpuMemoryBytes: 40 * GiB }, MODELS['llama-3.1-70b'])).toBe(0);
    expect(() => resolvePreset('70b-pcie5-host', { gpuMemoryBytes: 40 * GiB })).toThrow(/device pool does not fit/);
  });

  it('a turn that needs room drops retained KV lowest priority first, oldest first among equals', () => {
    const { g, dropped, counters } = gpus(100);
    const a = wait('a', 30);
    const b = wait('b', 30);
    const c = wait('c', 30);
    expect(g.retain(a, 5)).toBe(true);
    expect(g.retain(b, 1)).toBe(true);
    expect(g.retain(c, 1)).toBe(true);
    let admitted = 0;
    g.beginTurn(0, 50, false, () => admitted++);
    expect(admitted).toBe(1);
    // 90 retained + 50 needs 40 dropped: b (priority 1, older), then c (priority 1).
    expect(dropped).toEqual([b, c]);
    expect(b.retention).toBe('evicted');
    expect(a.retention).toBe('kept');
    expect(counters.evictions.retention).toBe(2);
    expect(g.totals()).toEqual({ retained: 30, running: 50 });
  });

  it('new retained KV takes only free room or room held at a lower priority', () => {
    const { g, dropped } = gpus(100);
    const high = wait('high', 60);
    expect(g.retain(high, 9)).toBe(true);
    const low = wait('low', 60);
    expect(g.retain(low, 2)).toBe(false);
    expect(low.retention).toBe('evicted');
    expect(dropped).toEqual([]);
    const higher = wait('higher', 60);
    expect(g.retain(higher, 10)).toBe(true);
    expect(dropped).toEqual([high]);
    // A raised priority protects: x, retained at 1, is raised to 20, so a newcomer at 15 takes
    // the room of `higher` (10), not x's.
    const x = wait('x', 40);
    expect(g.retain(x, 1)).toBe(true);
    g.setPriority(x, 20);
    expect(g.retain(wait('y', 40), 15)).toBe(true);
    expect(dropped).toEqual([high, higher]);
    expect(x.retention).toBe('kept');
  });

  it('a turn that finds no room even with all retained KV dropped waits for running turns to end, first come first served', () => {
    const { q, g, counters } = gpus(100);
    const order: string[] = [];
    const first = g.beginTurn(0, 70, false, () => order.push('first'));
    g.beginTurn(0, 50, false, () => order.push('second'));
    g.beginTurn(0, 20, false, () => order.push('third'));
    expect(order).toEqual(['first']);
    // Nothing is retained while turns wait for room.
    expect(g.retain(wait('r', 1), 100)).toBe(false);
    q.at(3, () => g.endTurn(first));
    q.run();
    expect(order).toEqual(['first', 'second', 'third']);
    expect(counters.turns.queued).toBe(2);
    expect(counters.turns.queuedSeconds).toBeCloseTo(6, 9);
  });

  it('a turn larger than the whole capacity runs once it is alone', () => {
    const { q, g } = gpus(100);
    const order: string[] = [];
    const small = g.beginTurn(0, 10, false, () => order.push('small'));
    g.beginTurn(0, 150, false, () => order.push('huge'));
    expect(order).toEqual(['small']);
    q.at(1, () => g.endTurn(small));
    q.run();
    expect(order).toEqual(['small', 'huge']);
  });

  it('a retained wait woken takes its KV in place: no room is needed', () => {
    const { g } = gpus(100);
    const a = wait('a', 60);
    g.retain(a, 0);
    g.beginTurn(0, 40, false, null);
    expect(g.take(a)).toBe('own');
    let admitted = false;
    g.beginTurn(0, 60, true, () => (admitted = true));
    expect(admitted).toBe(true);
    expect(g.totals()).toEqual({ retained: 0, running: 100 });
    expect(g.take(wait('a', 60))).toBe(null);
  });

  it('a retained wait woken while turns wait for room waits behind them, first come first served', () => {
    const { q, g, counters } = gpus(100);
    const order: string[] = [];
    const a = wait('a', 30);
    expect(g.retain(a, 0)).toBe(true);
    const running = g.beginTurn(0, 70, false, () => order.push('running'));
    // Needs 60: dropping `a` (30) is not enough; it waits.
    g.beginTurn(0, 60, false, () => order.push('waiting'));
    expect(order).toEqual(['running']);
    // `a` was dropped for the waiting turn only if that made room; it did not, so it is still kept.
    expect(g.take(a)).toBe('own');
    g.beginTurn(0, 30, true, () => order.push('woken'));
    // Not in place: it queues behind the turn that waited first.
    expect(order).toEqual(['running']);
    expect(counters.turns.inPlaceQueued).toBe(1);
    q.at(2, () => g.endTurn(running));
    q.run();
    expect(order).toEqual(['running', 'waiting', 'woken']);
    expect(g.totals()).toEqual({ retained: 0, running: 90 });
  });

  it('with too little GPU memory for the load, turns queue and the queueing is in the next-turn latency', () => {
    const trace = generatorTrace({ agents: 80, seconds: 600, seed: 3 });
    const none = POLICIES.find((p) => p.name === 'none')!;
    const roomy = replay(trace, resolvePreset('8b-pcie5-nvme'), none, { seed: 1, checkWaits: true });
    const tight = replay(trace, resolvePreset('8b-pcie5-nvme', { gpuMemoryBytes: 24 * GiB }), none, { seed: 1, checkWaits: true });
    expect(roomy.turns.queued).toBe(0);
    expect(tight.turns.queued).toBeGreaterThan(0);
    expect(tight.latency.mean).toBeGreaterThan(roomy.latency.mean);
  });
});
