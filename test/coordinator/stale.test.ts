import { describe, expect, it } from 'vitest';
import type { WaitCoordinator, WaitTicket, WorkUnit } from '../../lib/index.js';
import { GRANT, consumer, makeKey, setup, statsWithout, ticketOf } from '../helpers.js';

/**
 * A coordinator with some state: key 1 in flight with two consumers, key 2
 * queued with one, key 3 completed in history with one waiting, and a current
 * ticket for each. Backend has key 3 published.
 */
function busy() {
  const { coord, backend } = setup();
  backend.publish(makeKey(3));
  const t3 = ticketOf(coord.onWait(consumer(3), makeKey(3)));
  const w3 = coord.beginNext(GRANT)!;
  coord.complete(w3, { ok: true });
  const t1a = ticketOf(coord.onWait(consumer(10), makeKey(1)));
  const t1b = ticketOf(coord.onWait(consumer(11), makeKey(1)));
  const work = coord.beginNext(GRANT)!;
  const t2 = ticketOf(coord.onWait(consumer(2), makeKey(2)));
  const current: Record<string, string> = { t1a, t1b, t2, t3 };
  return { coord, backend, work, oldWork: w3, current };
}

/** Checks that every current ticket still does what a current ticket does, then leaves. */
function expectCurrentStillWork(coord: WaitCoordinator, current: Record<string, string>, work: WorkUnit) {
  expect(work.signal.aborted).toBe(false);
  for (const t of Object.values(current)) expect(coord.onCancel(t)).toBe(true);
  expect(work.signal.aborted).toBe(true);
}

describe('WaitCoordinator: stale wake', () => {
  // Each case returns the stale ticket, then any tickets it left current.
  const cases: Array<[string, (coord: WaitCoordinator) => WaitTicket | number | bigint | [WaitTicket, ...WaitTicket[]]]> = [
    ['an unknown ticket', () => 'no-such-ticket'],
    ['an empty string', () => ''],
    // Tickets are strings: a bigint or a safe-integer number, primitive forms the contract lets a
    // caller hold, names no wait here (0 would spell the first slab index).
    ['a bigint', () => 12345n],
    ['a safe-integer number', () => 12345],
    ['the number 0', () => 0],
    ['a ticket from another coordinator', () => {
      const other = setup().coord;
      return ticketOf(other.onWait(consumer(10), makeKey(1)));
    }],
    ['a ticket already woken', (coord) => {
      const t = ticketOf(coord.onWait(consumer(50), makeKey(2)));
      coord.onWake(t);
      return t;
    }],
    ['a ticket already cancelled', (coord) => {
      const t = ticketOf(coord.onWait(consumer(51), makeKey(2)));
      coord.onCancel(t);
      return t;
    }],
    ['a ticket replaced by a later wait of the same request', (coord) => {
      const t = ticketOf(coord.onWait(consumer(52), makeKey(2)));
      coord.onWait(consumer(52, 1), makeKey(5));
      return t;
    }],
    ['a ticket replaced by a wait on the same key', (coord) => {
      const t = ticketOf(coord.onWait(consumer(53), makeKey(1)));
      const replacement = ticketOf(coord.onWait(consumer(53, 1), makeKey(1)));
      return [t, replacement];
    }],
  ];

  for (const [name, make] of cases) {
    it(`${name}: miss stale-ticket, no backend call, nothing else changes`, () => {
      const { coord, backend, work, current } = busy();
      const made = make(coord);
      const [stale, ...extra] = Array.isArray(made) ? made : [made];
      extra.forEach((t, i) => (current[`extra${i}`] = t));
      const before = coord.stats();
      const calls = backend.calls;
      expect(coord.onWake(stale as WaitTicket)).toEqual({ kind: 'miss', reason: 'stale-ticket' });
      const after = coord.stats();
      expect(backend.calls).toBe(calls);
      expect(after.staleEvents).toBe(before.staleEvents + 1);
      expect(after.wakes).toBe(before.wakes + 1);
      expect(after.misses['stale-ticket']).toBe((before.misses['stale-ticket'] ?? 0) + 1);
      expect({ ...after.misses, 'stale-ticket': 0 }).toEqual({ ...before.misses, 'stale-ticket': 0 });
      expect(statsWithout(after, 'staleEvents', 'wakes', 'misses')).toEqual(statsWithout(before, 'staleEvents', 'wakes', 'misses'));
      expect(backend.leasesOpen).toBe(0);
      expectCurrentStillWork(coord, current, work);
    });
  }

  it('a stale wake does not touch the replacement wait of the same request', () => {
    const { coord, backend } = setup();
    backend.publish(makeKey(2));
    const old = ticketOf(coord.onWait(consumer(1, 0), makeKey(1)));
    const next = ticketOf(coord.onWait(consumer(1, 1), makeKey(2)));
    expect(coord.onWake(old)).toEqual({ kind: 'miss', reason: 'stale-ticket' });
    expect(coord.stats()).toMatchObject({ waiting: 1, queued: 1 });
    const woke = coord.onWake(next);
    expect(woke.kind).toBe('hit');
    if (woke.kind === 'hit') woke.lease.close();
  });
});

describe('WaitCoordinator: stale cancel', () => {
  it('returns false and only counts a stale event', () => {
    const { coord, work, current } = busy();
    const gone = ticketOf(coord.onWait(consumer(60), makeKey(2)));
    coord.onCancel(gone);
    const other = setup().coord;
    const foreign = ticketOf(other.onWait(consumer(60), makeKey(2)));
    for (const stale of [gone, foreign, 'unknown', 12345n, 12345, 0]) {
      const before = coord.stats();
      expect(coord.onCancel(stale as WaitTicket)).toBe(false);
      const after = coord.stats();
      expect(after.staleEvents).toBe(before.staleEvents + 1);
      expect(statsWithout(after, 'staleEvents')).toEqual(statsWithout(before, 'staleEvents'));
    }
    expectCurrentStillWork(coord, current, work);
  });
});

describe('WaitCoordinator: stale complete', () => {
  it('completing twice: the second is stale and changes nothing', () => {
    const { coord } = setup();
    coord.onWait(consumer(1), makeKey(1));
    const work = coord.beginNext(GRANT)!;
    expect(coord.complete(work, { ok: true })).toBe('applied');
    const before = coord.stats();
    expect(coord.complete(work, { ok: true })).toBe('stale');
    expect(coord.complete(work, { ok: false, error: 'late' })).toBe('stale');
    const after = coord.stats();
    expect(after.staleEvents).toBe(before.staleEvents + 2);
    expect(statsWithout(after, 'staleEvents')).toEqual(statsWithout(before, 'staleEvents'));
  });

  it('an old ticket does not complete the unit now in flight', () => {
    const { coord, work, oldWork, current } = busy();
    const before = coord.stats();
    expect(coord.complete(oldWork, { ok: false, error: 'old' })).toBe('stale');
    expect(statsWithout(coord.stats(), 'staleEvents')).toEqual(statsWithout(before, 'staleEvents'));
    expectCurrentStillWork(coord, current, work);
    expect(coord.complete(work, { ok: true })).toBe('applied');
    expect(coord.stats()).toMatchObject({ completed: before.completed + 1, failed: 0, wasted: 1 });
  });

  it('an unknown id, a copy with a changed id, and a ticket of another coordinator are stale', () => {
    const { coord, work } = busy();
    const other = setup().coord;
    other.onWait(consumer(1), makeKey(1));
    const foreign = other.beginNext(GRANT)!;
    const before = coord.stats();
    expect(coord.complete({ ...work, signal: work.signal, id: 'not-an-id' }, { ok: true })).toBe('stale');
    expect(coord.complete({ ...work, signal: work.signal, id: `${work.id}x` }, { ok: true })).toBe('stale');
    expect(coord.complete(foreign, { ok: true })).toBe('stale');
    expect(coord.stats().staleEvents).toBe(before.staleEvents + 3);
    expect(statsWithout(coord.stats(), 'staleEvents')).toEqual(statsWithout(before, 'staleEvents'));
    expect(work.signal.aborted).toBe(false);
    expect(coord.complete(work, { ok: true })).toBe('applied');
  });

  it('with nothing in flight, any complete is stale', () => {
    const { coord } = setup();
    const other = setup().coord;
    other.onWait(consumer(1), makeKey(1));
    const foreign = other.beginNext(GRANT)!;
    expect(coord.complete(foreign, { ok: true })).toBe('stale');
    expect(coord.stats()).toMatchObject({ staleEvents: 1, completed: 0, historySize: 0 });
  });

  it('a ticket issued before a forget does not complete the retry', () => {
    const { coord } = setup();
    const t1 = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    const first = coord.beginNext(GRANT)!;
    expect(coord.complete(first, { ok: false, error: 'broke' })).toBe('applied');
    coord.onCancel(t1);
    expect(coord.forget(makeKey(1))).toBe(true);
    expect(coord.onWait(consumer(1), makeKey(1)).status).toBe('queued');
    const retry = coord.beginNext(GRANT)!;
    expect(retry.id).not.toBe(first.id);
    const before = coord.stats();
    expect(coord.complete(first, { ok: true })).toBe('stale');
    expect(statsWithout(coord.stats(), 'staleEvents')).toEqual(statsWithout(before, 'staleEvents'));
    expect(coord.complete(retry, { ok: true })).toBe('applied');
    expect(coord.stats()).toMatchObject({ completed: 1, failed: 1 });
  });
});

describe('WaitCoordinator: old events and a new source generation', () => {
  it('completing the old generation\'s unit does not complete the replacement wait on the new generation', () => {
    const { coord, backend } = setup();
    const gen0 = makeKey(1, { generation: 0 });
    const gen1 = makeKey(1, { generation: 1 });
    const old = ticketOf(coord.onWait(consumer(1, 0), gen0));
    const work = coord.beginNext(GRANT)!;
    const next = ticketOf(coord.onWait(consumer(1, 1), gen1));
    expect(work.signal.aborted).toBe(true);
    backend.publish(gen0);
    expect(coord.complete(work, { ok: true })).toBe('applied');
    expect(coord.stats()).toMatchObject({ wasted: 1, queued: 1, waiting: 1 });
    // The old ticket cannot wake or cancel the new wait, and the new key is still to be prepared.
    expect(coord.onWake(old)).toEqual({ kind: 'miss', reason: 'stale-ticket' });
    expect(coord.onCancel(old)).toBe(false);
    expect(coord.onWait(consumer(2), gen1).status).toBe('joined');
    expect(coord.beginNext(GRANT)?.key.equals(gen1)).toBe(true);
    // gen0 being resident does not make the gen1 wait a hit.
    expect(coord.onWake(next)).toEqual({ kind: 'miss', reason: 'absent' });
  });
});

describe('WaitCoordinator: tickets', () => {
  it('are primitives, unique across many waits, and never reused', () => {
    const { coord } = setup({ maxWaiting: 5000, maxQueued: 5000 });
    const seen = new Set<string>();
    for (let i = 0; i < 2000; i++) {
      const admission = coord.onWait(consumer(i % 300, i), makeKey(i % 7));
      const ticket = ticketOf(admission);
      expect(['string', 'bigint']).toContain(typeof ticket);
      expect(seen.has(ticket)).toBe(false);
      seen.add(ticket);
      if (i % 3 === 0) coord.onWake(ticket);
      else if (i % 3 === 1) coord.onCancel(ticket);
    }
    expect(seen.size).toBe(2000);
  });

  it('two coordinators never issue the same ticket', () => {
    const a = setup().coord;
    const b = setup().coord;
    const fromA = new Set<string>();
    for (let i = 0; i < 100; i++) fromA.add(ticketOf(a.onWait(consumer(i), makeKey(i % 5))));
    for (let i = 0; i < 100; i++) expect(fromA.has(ticketOf(b.onWait(consumer(i), makeKey(i % 5))))).toBe(false);
  });

  it('work unit ids are unique and not reused after completion', () => {
    const { coord } = setup();
    const ids = new Set<string>();
    for (let i = 0; i < 50; i++) {
      coord.onWait(consumer(i), makeKey(i));
      const work = coord.beginNext(GRANT)!;
      expect(ids.has(work.id)).toBe(false);
      ids.add(work.id);
      coord.complete(work, { ok: true });
    }
  });
});
