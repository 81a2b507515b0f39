import { describe, expect, it } from 'vitest';
import { GRANT, consumer, makeKey, setup, statsWithout, ticketOf } from '../helpers.js';

describe('WaitCoordinator: maxQueued', () => {
  it('is inclusive: exactly maxQueued units queue, the next is overloaded', () => {
    const { coord } = setup({ maxQueued: 3 });
    for (let i = 0; i < 3; i++) expect(coord.onWait(consumer(i), makeKey(i)).status).toBe('queued');
    const over = coord.onWait(consumer(3), makeKey(3));
    expect(over.status).toBe('overloaded');
    expect(over.ticket).toBeUndefined();
    expect(typeof over.reason).toBe('string');
    expect(coord.stats()).toMatchObject({ queued: 3, waiting: 3, overloads: 1 });
  });

  it('a full queue still admits joins, and in-flight work does not count as queued', () => {
    const { coord } = setup({ maxQueued: 1 });
    coord.onWait(consumer(1), makeKey(1));
    expect(coord.onWait(consumer(2), makeKey(1)).status).toBe('joined');
    coord.beginNext(GRANT);
    expect(coord.onWait(consumer(3), makeKey(2)).status).toBe('queued');
    expect(coord.onWait(consumer(4), makeKey(1)).status).toBe('in-flight');
    expect(coord.onWait(consumer(5), makeKey(3)).status).toBe('overloaded');
    expect(coord.stats()).toMatchObject({ queued: 1, inFlight: 1, waiting: 4, overloads: 1 });
  });

  it('room frees when a queued unit is issued or dropped', () => {
    const { coord } = setup({ maxQueued: 1 });
    const t = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    expect(coord.onWait(consumer(2), makeKey(2)).status).toBe('overloaded');
    coord.onCancel(t);
    expect(coord.onWait(consumer(2), makeKey(2)).status).toBe('queued');
  });

  it('maxQueued 0 queues nothing: a new key is overloaded', () => {
    const { coord } = setup({ maxQueued: 0 });
    expect(coord.onWait(consumer(1), makeKey(1)).status).toBe('overloaded');
    expect(coord.stats()).toMatchObject({ queued: 0, waiting: 0 });
  });
});

describe('WaitCoordinator: maxWaiting', () => {
  it('is inclusive: exactly maxWaiting consumers wait, the next is overloaded', () => {
    const { coord } = setup({ maxWaiting: 3 });
    for (let i = 0; i < 3; i++) expect(coord.onWait(consumer(i), makeKey(1)).status).not.toBe('overloaded');
    expect(coord.onWait(consumer(3), makeKey(1))).toMatchObject({ status: 'overloaded' });
    expect(coord.stats()).toMatchObject({ waiting: 3, overloads: 1, joins: 2 });
  });

  it('a replacement at the bound is admitted (the count does not grow)', () => {
    const { coord } = setup({ maxWaiting: 2 });
    coord.onWait(consumer(1), makeKey(1));
    const old = ticketOf(coord.onWait(consumer(2), makeKey(2)));
    const next = coord.onWait(consumer(2, 1), makeKey(3));
    expect(next.status).toBe('queued');
    expect(coord.onCancel(old)).toBe(false);
    expect(coord.stats()).toMatchObject({ waiting: 2, overloads: 0 });
  });

  it('maxWaiting 0 admits nothing', () => {
    const { coord } = setup({ maxWaiting: 0 });
    expect(coord.onWait(consumer(1), makeKey(1)).status).toBe('overloaded');
    expect(coord.stats()).toMatchObject({ waiting: 0, queued: 0, overloads: 1 });
  });
});

describe('WaitCoordinator: overload registers nothing', () => {
  it('queue overload leaves every gauge and the next issue unchanged', () => {
    const { coord } = setup({ maxQueued: 1 });
    coord.onWait(consumer(1), makeKey(1));
    const before = coord.stats();
    expect(coord.onWait(consumer(2), makeKey(2)).status).toBe('overloaded');
    const after = coord.stats();
    expect(after.overloads).toBe(before.overloads + 1);
    expect(after.waits).toBe(before.waits + 1);
    expect(after.waitsByStatus).toEqual({ ...before.waitsByStatus, overloaded: before.waitsByStatus.overloaded + 1 });
    expect(statsWithout(after, 'overloads', 'waits', 'waitsByStatus')).toEqual(statsWithout(before, 'overloads', 'waits', 'waitsByStatus'));
    const work = coord.beginNext(GRANT)!;
    expect(work.key.equals(makeKey(1))).toBe(true);
    coord.complete(work, { ok: true });
    expect(coord.beginNext(GRANT)).toBeNull();
  });

  it('an overloaded consumer has no demand: it can wait later with any generation', () => {
    const { coord } = setup({ maxQueued: 1 });
    coord.onWait(consumer(1), makeKey(1));
    expect(coord.onWait(consumer(2, 5), makeKey(2)).status).toBe('overloaded');
    expect(coord.onWait(consumer(2, 0), makeKey(1)).status).toBe('joined');
  });
});

describe('WaitCoordinator: replacement is all-or-nothing, checked as after the swap', () => {
  it('full queue, replacing your own sole queued unit with a new key succeeds', () => {
    const { coord } = setup({ maxQueued: 1 });
    const old = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    const next = coord.onWait(consumer(1, 1), makeKey(2));
    expect(next.status).toBe('queued');
    expect(coord.onCancel(old)).toBe(false);
    expect(coord.stats()).toMatchObject({ queued: 1, waiting: 1, overloads: 0 });
    expect(coord.beginNext(GRANT)?.key.equals(makeKey(2))).toBe(true);
  });

  it('full queue, replacing a wait on a shared queued unit with a new key is overloaded and the old wait is untouched', () => {
    const { coord } = setup({ maxQueued: 1 });
    const old = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    coord.onWait(consumer(2), makeKey(1));
    const before = coord.stats();
    expect(coord.onWait(consumer(1, 1), makeKey(2)).status).toBe('overloaded');
    expect(statsWithout(coord.stats(), 'overloads', 'waits', 'waitsByStatus')).toEqual(statsWithout(before, 'overloads', 'waits', 'waitsByStatus'));
    // The old wait is still current and still on key 1.
    expect(coord.onCancel(old)).toBe(true);
    expect(coord.stats()).toMatchObject({ queued: 1, waiting: 1 });
  });

  it('full queue, replacing a wait on an in-flight unit with a new key is overloaded and nothing is aborted', () => {
    const { coord } = setup({ maxQueued: 1 });
    const old = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    const work = coord.beginNext(GRANT)!;
    coord.onWait(consumer(2), makeKey(2));
    expect(coord.onWait(consumer(1, 1), makeKey(3)).status).toBe('overloaded');
    expect(work.signal.aborted).toBe(false);
    expect(coord.stats()).toMatchObject({ inFlight: 1, queued: 1, waiting: 2 });
    expect(coord.onCancel(old)).toBe(true);
    expect(work.signal.aborted).toBe(true);
  });

  it('a rejected replacement leaves the old wait untouched', () => {
    const { coord } = setup();
    const old = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    expect(coord.onWait(consumer(1, 1), makeKey(2), { readiness: 'persisted' }).status).toBe('rejected');
    expect(coord.onWait(consumer(1, 1), makeKey(2), { readiness: 'device' }).status).toBe('rejected');
    expect(coord.stats()).toMatchObject({ queued: 1, waiting: 1 });
    expect(coord.onCancel(old)).toBe(true);
  });

  it('full queue, replacing with the same identity keeps the unit (joined, not overloaded)', () => {
    const { coord } = setup({ maxQueued: 1, maxWaiting: 1 });
    const old = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    const next = coord.onWait(consumer(1, 1), makeKey(1));
    expect(next.status).not.toBe('overloaded');
    expect(next.ticket).toBeDefined();
    expect(coord.onCancel(old)).toBe(false);
    expect(coord.stats()).toMatchObject({ queued: 1, waiting: 1 });
  });
});

describe('WaitCoordinator: historyLimit', () => {
  function completeKeys(coord: ReturnType<typeof setup>['coord'], ns: number[]) {
    for (const n of ns) {
      const t = ticketOf(coord.onWait(consumer(n), makeKey(n)));
      coord.complete(coord.beginNext(GRANT)!, { ok: true });
      coord.onCancel(t);
    }
  }

  it('is inclusive and evicts the oldest entry first', () => {
    const { coord } = setup({ historyLimit: 2 });
    completeKeys(coord, [1, 2]);
    expect(coord.stats().historySize).toBe(2);
    completeKeys(coord, [3]);
    expect(coord.stats().historySize).toBe(2);
    // Key 1 (oldest) was forgotten by the bound; keys 2 and 3 are remembered.
    expect(coord.onWait(consumer(20), makeKey(3)).status).toBe('completed');
    expect(coord.onWait(consumer(21), makeKey(2)).status).toBe('completed');
    expect(coord.onWait(consumer(22), makeKey(1)).status).toBe('queued');
  });

  it('failures count against the same bound', () => {
    const { coord } = setup({ historyLimit: 1 });
    const t = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    coord.complete(coord.beginNext(GRANT)!, { ok: false, error: 'x' });
    coord.onCancel(t);
    completeKeys(coord, [2]);
    expect(coord.stats().historySize).toBe(1);
    expect(coord.onWait(consumer(5), makeKey(1)).status).toBe('queued');
  });

  it('historyLimit 0 keeps none', () => {
    const { coord } = setup({ historyLimit: 0 });
    completeKeys(coord, [1]);
    expect(coord.stats()).toMatchObject({ historySize: 0, completed: 1 });
    expect(coord.onWait(consumer(2), makeKey(1)).status).toBe('queued');
    expect(coord.forget(makeKey(1))).toBe(false);
  });

  it('historyLimit 0 with a consumer still waiting: a later wait queues again, the waiter stays', () => {
    const { coord } = setup({ historyLimit: 0 });
    const t1 = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    coord.complete(coord.beginNext(GRANT)!, { ok: true });
    expect(coord.stats()).toMatchObject({ historySize: 0, waiting: 1 });
    expect(coord.onWait(consumer(2), makeKey(1)).status).toBe('queued');
    expect(coord.onCancel(t1)).toBe(true);
    expect(coord.stats()).toMatchObject({ queued: 1, waiting: 1 });
  });

  it('history never grows past the bound over many completions', () => {
    const { coord } = setup({ historyLimit: 5 });
    completeKeys(coord, Array.from({ length: 40 }, (_, i) => i));
    expect(coord.stats()).toMatchObject({ historySize: 5, completed: 40 });
  });
});
