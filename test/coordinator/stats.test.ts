import { describe, expect, it } from 'vitest';
import type { WaitStatus } from '../../lib/index.js';
import { GRANT, TARGET_A, consumer, makeKey, setup, ticketOf } from '../helpers.js';

const ZERO = {
  waits: 0,
  waitsByStatus: { queued: 0, joined: 0, 'in-flight': 0, completed: 0, failed: 0, overloaded: 0, rejected: 0 },
  joins: 0,
  queued: 0,
  inFlight: 0,
  issued: 0,
  completed: 0,
  failed: 0,
  wasted: 0,
  wakes: 0,
  hits: 0,
  misses: {},
  cancels: 0,
  staleEvents: 0,
  overloads: 0,
  rejected: 0,
  waiting: 0,
  historySize: 0,
};

describe('WaitCoordinator: stats', () => {
  it('starts at zero and returns a fresh object each call', () => {
    const { coord } = setup();
    const a = coord.stats();
    expect(a).toEqual(ZERO);
    a.waits = 99;
    a.misses['x'] = 1;
    expect(coord.stats()).toEqual(ZERO);
  });

  it('every counter and gauge after a scripted sequence', () => {
    const { coord, backend } = setup({ maxQueued: 3, maxWaiting: 6, historyLimit: 2 });
    const [k1, k2, k3, k4, k5] = [1, 2, 3, 4, 5].map((n) => makeKey(n));
    let expected = { ...ZERO, misses: {} as Record<string, number> };
    /** Applies `change`, adds `statuses` to waitsByStatus, and compares every field. */
    const step = (change: Partial<typeof expected>, statuses: Partial<Record<WaitStatus, number>> = {}) => {
      const waitsByStatus = { ...expected.waitsByStatus };
      for (const [status, n] of Object.entries(statuses) as Array<[WaitStatus, number]>) waitsByStatus[status] += n;
      expected = { ...expected, ...change, waitsByStatus };
      expect(coord.stats()).toEqual(expected);
    };

    // 1. A new key queues.
    const a = ticketOf(coord.onWait(consumer('a'), k1));
    step({ waits: 1, queued: 1, waiting: 1 }, { queued: 1 });
    // 2. A second consumer of k1 joins the queued unit.
    const b = ticketOf(coord.onWait(consumer('b'), k1));
    step({ waits: 2, joins: 1, waiting: 2 }, { joined: 1 });
    // 3. k2 and a device wait on k1 queue (a different identity).
    const c = ticketOf(coord.onWait(consumer('c'), k2));
    const d = ticketOf(coord.onWait(consumer('d'), k1, { readiness: 'device', target: TARGET_A }));
    step({ waits: 4, queued: 3, waiting: 4 }, { queued: 2 });
    // 4. Queue full: k3 is overloaded.
    expect(coord.onWait(consumer('e'), k3).status).toBe('overloaded');
    step({ waits: 5, overloads: 1 }, { overloaded: 1 });
    // 5. Rejections: persisted readiness, device without a target.
    expect(coord.onWait(consumer('e'), k3, { readiness: 'persisted' }).status).toBe('rejected');
    expect(coord.onWait(consumer('e'), k3, { readiness: 'device' }).status).toBe('rejected');
    step({ waits: 7, rejected: 2 }, { rejected: 2 });
    // 6. Issue k1; a third consumer joins it in flight.
    const w1 = coord.beginNext(GRANT)!;
    step({ issued: 1, queued: 2, inFlight: 1 });
    const f = ticketOf(coord.onWait(consumer('f'), k1));
    expect(coord.onWait(consumer('f', 0), k2).status).toBe('joined'); // f replaces its k1 wait with k2
    step({ waits: 9, joins: 3, waiting: 5 }, { 'in-flight': 1, joined: 1 });
    expect(coord.onWait(consumer('f', 0), k1).status).toBe('in-flight'); // equal generation replaces again
    step({ waits: 10, joins: 4, waiting: 5 }, { 'in-flight': 1 });
    // 7. A lower generation is rejected.
    const g = ticketOf(coord.onWait(consumer('g', 3), k4));
    step({ waits: 11, queued: 3, waiting: 6 }, { queued: 1 });
    expect(coord.onWait(consumer('g', 2), k5).status).toBe('rejected');
    step({ waits: 12, rejected: 3 }, { rejected: 1 });
    // 8. maxWaiting (6) reached: a new consumer is overloaded.
    expect(coord.onWait(consumer('h'), k2).status).toBe('overloaded');
    step({ waits: 13, overloads: 2 }, { overloaded: 1 });
    // 9. Wakes: a misses (absent), a stale wake of f's first ticket.
    expect(coord.onWake(a)).toEqual({ kind: 'miss', reason: 'absent' });
    step({ wakes: 1, misses: { absent: 1 }, waiting: 5 });
    expect(coord.onWake(f)).toEqual({ kind: 'miss', reason: 'stale-ticket' });
    step({ wakes: 2, misses: { absent: 1, 'stale-ticket': 1 }, staleEvents: 1 });
    // 10. Cancels: b leaves; a stale cancel of a.
    expect(coord.onCancel(b)).toBe(true);
    step({ cancels: 1, waiting: 4 });
    expect(coord.onCancel(a)).toBe(false);
    step({ staleEvents: 2 });
    // 11. k1 completes while consumer f (rejoined) still waits: not wasted.
    backend.publish(k1);
    expect(coord.complete(w1, { ok: true })).toBe('applied');
    step({ completed: 1, inFlight: 0, historySize: 1 });
    expect(coord.complete(w1, { ok: true })).toBe('stale');
    step({ staleEvents: 3 });
    // 12. k2 is issued and fails; its consumer c then wakes to a miss (nothing was published).
    const w2 = coord.beginNext(GRANT)!;
    expect(w2.key.equals(k2)).toBe(true);
    step({ issued: 2, queued: 2, inFlight: 1 });
    expect(coord.complete(w2, { ok: false, error: 'codec' })).toBe('applied');
    step({ failed: 1, inFlight: 0, historySize: 2 });
    expect(coord.onWake(c)).toEqual({ kind: 'miss', reason: 'absent' });
    step({ wakes: 3, misses: { absent: 2, 'stale-ticket': 1 }, waiting: 3 });
    // 13. The device unit is issued; its only consumer cancels; the success is wasted.
    const w3 = coord.beginNext(GRANT)!;
    expect(w3.readiness).toBe('device');
    step({ issued: 3, queued: 1, inFlight: 1 });
    expect(coord.onCancel(d)).toBe(true);
    expect(w3.signal.aborted).toBe(true);
    step({ cancels: 2, waiting: 2 });
    expect(coord.complete(w3, { ok: true })).toBe('applied');
    // History limit 2: the k1 entry (oldest) is evicted.
    step({ completed: 2, wasted: 1, inFlight: 0, historySize: 2 });
    // 14. f wakes on k1 (published): a hit.
    const fNow = coord.onWait(consumer('f', 1), k1);
    expect(fNow.status).toBe('queued'); // k1's history entry was evicted, so it queues again
    step({ waits: 14, queued: 2 }, { queued: 1 });
    const hit = coord.onWake(ticketOf(fNow));
    expect(hit.kind).toBe('hit');
    if (hit.kind === 'hit') hit.lease.close();
    step({ wakes: 4, hits: 1, queued: 1, waiting: 1 });
    // 15. A wake on k2's history (failed) misses; forget; the survivor g remains.
    const again = coord.onWait(consumer('i'), k2);
    expect(again.status).toBe('failed');
    step({ waits: 15, waiting: 2 }, { failed: 1 });
    expect(coord.onWake(ticketOf(again))).toEqual({ kind: 'miss', reason: 'absent' });
    step({ wakes: 5, misses: { absent: 3, 'stale-ticket': 1 }, waiting: 1 });
    expect(coord.forget(k2)).toBe(true);
    step({ historySize: 1 });
    // 16. Shutdown: a rejected wait; g is still there.
    expect(coord.shutdown()).toEqual({ drained: true, inFlight: null });
    expect(coord.onWait(consumer('j'), k5).status).toBe('rejected');
    step({ waits: 16, rejected: 4 }, { rejected: 1 });
    expect(coord.beginNext(GRANT)).toBeNull();
    expect(coord.onCancel(g)).toBe(true);
    step({ cancels: 3, waiting: 0, queued: 0 });
  });

  it('waits counts every onWait that returned, whatever its status; joins count queued and in-flight joins', () => {
    const { coord } = setup({ maxQueued: 1 });
    coord.onWait(consumer(1), makeKey(1)); // queued
    coord.onWait(consumer(2), makeKey(1)); // joined
    coord.onWait(consumer(3), makeKey(2)); // overloaded
    coord.onWait(consumer(4), makeKey(2), { readiness: 'persisted' }); // rejected
    const w = coord.beginNext(GRANT)!;
    coord.onWait(consumer(5), makeKey(1)); // in-flight
    coord.complete(w, { ok: true });
    coord.onWait(consumer(6), makeKey(1)); // completed
    coord.shutdown();
    coord.onWait(consumer(7), makeKey(1)); // rejected (shutdown)
    expect(coord.stats()).toMatchObject({ waits: 7, joins: 2, overloads: 1, rejected: 2, waiting: 4 });
    expect(coord.stats().waitsByStatus).toEqual({ queued: 1, joined: 1, 'in-flight': 1, completed: 1, failed: 0, overloaded: 1, rejected: 2 });
  });

  it('misses are keyed by reason, including stale-ticket and backend reasons', () => {
    const { coord, backend } = setup();
    const key = makeKey(1);
    const t1 = ticketOf(coord.onWait(consumer(1), key));
    const t2 = ticketOf(coord.onWait(consumer(2), key));
    const t3 = ticketOf(coord.onWait(consumer(3), key, { readiness: 'device', target: TARGET_A }));
    coord.onWake(t1); // absent
    backend.markPreparing(key);
    coord.onWake(t2); // preparing
    backend.publish(key);
    coord.onWake(t3); // no-device-record
    coord.onWake(t3); // stale-ticket
    coord.onWake('nope'); // stale-ticket
    expect(coord.stats().misses).toEqual({ absent: 1, preparing: 1, 'no-device-record': 1, 'stale-ticket': 2 });
    expect(coord.stats()).toMatchObject({ wakes: 5, hits: 0, staleEvents: 2 });
  });

  it('staleEvents counts stale wakes, cancels and completes', () => {
    const { coord } = setup();
    const t = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    const w = coord.beginNext(GRANT)!;
    coord.complete(w, { ok: true });
    coord.onCancel(t);
    coord.onWake(t);
    coord.onCancel(t);
    coord.complete(w, { ok: true });
    expect(coord.stats()).toMatchObject({ staleEvents: 3, cancels: 1, wakes: 1, completed: 1 });
  });
});
