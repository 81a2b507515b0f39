import { describe, expect, it } from 'vitest';
import { GRANT, TARGET_A, consumer, makeKey, setup, ticketOf } from '../helpers.js';

describe('WaitCoordinator: failed preparation', () => {
  it('a failed outcome enters history as failed; a later wait is told failed and nothing is queued', () => {
    const { coord, backend } = setup();
    const t1 = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    const work = coord.beginNext(GRANT)!;
    expect(coord.complete(work, { ok: false, error: new Error('codec crashed') })).toBe('applied');
    expect(coord.stats()).toMatchObject({ failed: 1, completed: 0, historySize: 1, inFlight: 0, queued: 0 });

    const later = coord.onWait(consumer(2), makeKey(1));
    expect(later.status).toBe('failed');
    expect(later.ticket).toBeDefined();
    expect(coord.stats()).toMatchObject({ queued: 0, waiting: 2 });
    expect(coord.beginNext(GRANT)).toBeNull();

    // The wake still asks the backend (which has nothing) and misses.
    expect(coord.onWake(ticketOf(later))).toEqual({ kind: 'miss', reason: 'absent' });
    expect(coord.onWake(t1)).toEqual({ kind: 'miss', reason: 'absent' });
    expect(backend.calls).toBe(2);
  });

  it('there is no automatic retry: the failed key is never issued again on its own', () => {
    const { coord } = setup();
    coord.onWait(consumer(1), makeKey(1));
    coord.complete(coord.beginNext(GRANT)!, { ok: false, error: 'x' });
    for (let i = 2; i < 6; i++) expect(coord.onWait(consumer(i), makeKey(1)).status).toBe('failed');
    expect(coord.beginNext(GRANT)).toBeNull();
    expect(coord.stats()).toMatchObject({ issued: 1, queued: 0, failed: 1 });
  });

  it('a failure with consumers still waiting keeps them waiting until they wake or cancel', () => {
    const { coord } = setup();
    const t1 = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    coord.complete(coord.beginNext(GRANT)!, { ok: false, error: 'x' });
    expect(coord.stats().waiting).toBe(1);
    expect(coord.onCancel(t1)).toBe(true);
    expect(coord.stats().waiting).toBe(0);
  });
});

describe('WaitCoordinator: forget', () => {
  it('is refused while a consumer waits on the key, and history stays', () => {
    const { coord } = setup();
    const t1 = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    coord.complete(coord.beginNext(GRANT)!, { ok: false, error: 'x' });
    expect(coord.forget(makeKey(1))).toBe(false);
    expect(coord.stats().historySize).toBe(1);
    expect(coord.onWait(consumer(2), makeKey(1)).status).toBe('failed');
    coord.onCancel(t1);
    expect(coord.forget(makeKey(1))).toBe(false); // consumer 2 still waits
    expect(coord.stats().historySize).toBe(1);
  });

  it('is refused while the key is queued or in flight', () => {
    const { coord } = setup();
    const t1 = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    expect(coord.forget(makeKey(1))).toBe(false);
    expect(coord.stats().queued).toBe(1);
    const work = coord.beginNext(GRANT)!;
    coord.onCancel(t1); // no consumer remains, but the unit is in flight
    expect(coord.forget(makeKey(1))).toBe(false);
    expect(coord.stats().inFlight).toBe(1);
    // The unit's consumers all left (its signal aborted), so its failure is
    // taken as a stop at a safe boundary: no 'failed' history, nothing to forget.
    expect(work.signal.aborted).toBe(true);
    expect(coord.complete(work, { ok: false, error: 'stopped' })).toBe('applied');
    expect(coord.stats().historySize).toBe(0);
    expect(coord.forget(makeKey(1))).toBe(false);
    expect(coord.onWait(consumer(3), makeKey(1)).status).toBe('queued');
  });

  it('a genuine failure (a consumer still waiting) is remembered and can be forgotten once the consumer leaves', () => {
    const { coord } = setup();
    const t1 = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    const work = coord.beginNext(GRANT)!;
    expect(coord.forget(makeKey(1))).toBe(false);
    expect(coord.complete(work, { ok: false, error: 'x' })).toBe('applied');
    expect(coord.forget(makeKey(1))).toBe(false); // consumer 1 still waits
    coord.onCancel(t1);
    expect(coord.forget(makeKey(1))).toBe(true);
  });

  it('is false for a key with no history, and for a second forget', () => {
    const { coord } = setup();
    expect(coord.forget(makeKey(1))).toBe(false);
    const t1 = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    coord.complete(coord.beginNext(GRANT)!, { ok: true });
    coord.onWake(t1);
    expect(coord.forget(makeKey(1))).toBe(true);
    expect(coord.forget(makeKey(1))).toBe(false);
    expect(coord.stats().historySize).toBe(0);
  });

  it('discards that key only; other history stays', () => {
    const { coord } = setup();
    for (const n of [1, 2]) {
      const t = ticketOf(coord.onWait(consumer(n), makeKey(n)));
      coord.complete(coord.beginNext(GRANT)!, { ok: false, error: 'x' });
      coord.onCancel(t);
    }
    expect(coord.stats().historySize).toBe(2);
    expect(coord.forget(makeKey(1))).toBe(true);
    expect(coord.stats().historySize).toBe(1);
    expect(coord.onWait(consumer(3), makeKey(2)).status).toBe('failed');
    expect(coord.onWait(consumer(4), makeKey(1)).status).toBe('queued');
  });

  it('after forget, an explicit onWait queues the key again and it can succeed (retry is explicit)', () => {
    const { coord, backend } = setup();
    const key = makeKey(1);
    const t1 = ticketOf(coord.onWait(consumer(1), key));
    coord.complete(coord.beginNext(GRANT)!, { ok: false, error: 'x' });
    coord.onWake(t1);
    expect(coord.forget(key)).toBe(true);

    const retry = coord.onWait(consumer(1, 1), key);
    expect(retry.status).toBe('queued');
    const work = coord.beginNext(GRANT)!;
    expect(work.key.equals(key)).toBe(true);
    backend.publish(key); // the external worker publishes, then reports
    expect(coord.complete(work, { ok: true })).toBe('applied');
    const woke = coord.onWake(ticketOf(retry));
    expect(woke.kind).toBe('hit');
    if (woke.kind === 'hit') woke.lease.close();
    expect(coord.stats()).toMatchObject({ issued: 2, failed: 1, completed: 1, historySize: 1 });
  });

  it('covers device history of the key as well', () => {
    const { coord } = setup();
    const key = makeKey(1);
    const t = ticketOf(coord.onWait(consumer(1), key, { readiness: 'device', target: TARGET_A }));
    coord.complete(coord.beginNext(GRANT)!, { ok: false, error: 'x' });
    coord.onCancel(t);
    expect(coord.onWait(consumer(2), key, { readiness: 'device', target: TARGET_A }).status).toBe('failed');
    coord.onCancel(ticketOf(coord.onWait(consumer(2), key, { readiness: 'device', target: TARGET_A })));
    expect(coord.forget(key)).toBe(true);
    expect(coord.onWait(consumer(3), key, { readiness: 'device', target: TARGET_A }).status).toBe('queued');
  });
});

describe('WaitCoordinator: history is not proof of residence', () => {
  it('after backend eviction a completed key still reports completed, but the wake misses absent', () => {
    const { coord, backend } = setup();
    const key = makeKey(1);
    coord.onWait(consumer(1), key);
    const work = coord.beginNext(GRANT)!;
    backend.publish(key);
    coord.complete(work, { ok: true });
    expect(backend.evict(key)).toBe('evicted');

    const t = ticketOf(coord.onWait(consumer(1, 1), key));
    expect(coord.stats().historySize).toBe(1);
    expect(coord.onWake(t)).toEqual({ kind: 'miss', reason: 'absent' });
    expect(coord.stats()).toMatchObject({ completed: 1, historySize: 1, queued: 0, hits: 0 });
    // History still says completed; nothing is re-queued by itself.
    const again = coord.onWait(consumer(2), key);
    expect(again.status).toBe('completed');
    expect(coord.beginNext(GRANT)).toBeNull();

    // The explicit way back: the consumer leaves, forget, wait again.
    coord.onCancel(ticketOf(again));
    expect(coord.forget(key)).toBe(true);
    expect(coord.onWait(consumer(3), key).status).toBe('queued');
  });

  it('terminal history holds no pin: the backend may evict a completed key at once', () => {
    const { coord, backend } = setup();
    const key = makeKey(1);
    coord.onWait(consumer(1), key);
    const work = coord.beginNext(GRANT)!;
    backend.publish(key);
    coord.complete(work, { ok: true });
    expect(backend.pins(key)).toBe(0);
    expect(backend.evict(key)).toBe('evicted');
  });
});
