import { describe, expect, it } from 'vitest';
import { GRANT, consumer, makeKey, setup, ticketOf } from '../helpers.js';

describe('WaitCoordinator: shutdown', () => {
  it('rejects new waits with reason shutdown and registers nothing', () => {
    const { coord } = setup();
    coord.shutdown();
    const admission = coord.onWait(consumer(1), makeKey(1));
    expect(admission).toMatchObject({ status: 'rejected', reason: 'shutdown' });
    expect(admission.ticket).toBeUndefined();
    expect(coord.stats()).toMatchObject({ waiting: 0, queued: 0, rejected: 1, waits: 1 });
  });

  it('rejects a replacement after shutdown and leaves the old wait current', () => {
    const { coord } = setup();
    const old = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    coord.shutdown();
    expect(coord.onWait(consumer(1, 1), makeKey(2))).toMatchObject({ status: 'rejected', reason: 'shutdown' });
    expect(coord.onCancel(old)).toBe(true);
  });

  it('on an idle coordinator reports drained with nothing in flight', () => {
    const { coord } = setup();
    expect(coord.shutdown()).toEqual({ drained: true, inFlight: null });
    expect(coord.closed).toBe(true);
  });

  it('reports the unit in flight and not drained; repeated calls report the current state', () => {
    const { coord } = setup();
    coord.onWait(consumer(1), makeKey(1));
    const work = coord.beginNext(GRANT)!;
    const first = coord.shutdown();
    expect(first.drained).toBe(false);
    expect(first.inFlight?.id).toBe(work.id);
    const second = coord.shutdown();
    expect(second.drained).toBe(false);
    expect(second.inFlight?.id).toBe(work.id);
    expect(work.signal.aborted).toBe(false); // shutdown kills nothing

    expect(coord.complete(work, { ok: true })).toBe('applied');
    expect(coord.shutdown()).toEqual({ drained: true, inFlight: null });
    expect(coord.stats()).toMatchObject({ completed: 1, inFlight: 0 });
  });

  it('beginNext returns null after shutdown; queued units are never issued, even after the in-flight one drains', () => {
    const { coord } = setup();
    coord.onWait(consumer(1), makeKey(1));
    coord.onWait(consumer(2), makeKey(2));
    coord.onWait(consumer(3), makeKey(3));
    const work = coord.beginNext(GRANT)!;
    coord.shutdown();
    expect(coord.beginNext(GRANT)).toBeNull();
    coord.complete(work, { ok: true });
    expect(coord.beginNext(GRANT)).toBeNull();
    expect(coord.beginNext({ worker: 'other', grant: 'other' })).toBeNull();
    expect(coord.stats().issued).toBe(1);
  });

  it('wakes, cancels and completions still apply after shutdown', () => {
    const { coord, backend } = setup();
    backend.publish(makeKey(2));
    const t1 = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    const t1b = ticketOf(coord.onWait(consumer(11), makeKey(1)));
    const t2 = ticketOf(coord.onWait(consumer(2), makeKey(2)));
    const work = coord.beginNext(GRANT)!;
    coord.shutdown();

    expect(coord.onCancel(t1)).toBe(true);
    expect(work.signal.aborted).toBe(false);
    expect(coord.onWake(t1b)).toEqual({ kind: 'miss', reason: 'absent' });
    expect(work.signal.aborted).toBe(true); // last consumer left, even after shutdown
    const woke = coord.onWake(t2);
    expect(woke.kind).toBe('hit');
    if (woke.kind === 'hit') woke.lease.close();
    expect(coord.complete(work, { ok: true })).toBe('applied');
    expect(coord.stats()).toMatchObject({ cancels: 1, hits: 1, completed: 1, wasted: 1, waiting: 0 });
    expect(coord.onWake(t1)).toEqual({ kind: 'miss', reason: 'stale-ticket' });
  });

  it('a lease taken before or after shutdown stays valid until it is closed', () => {
    const { coord, backend } = setup();
    const key = makeKey(1);
    backend.publish(key);
    const before = ticketOf(coord.onWait(consumer(1), key));
    const after = ticketOf(coord.onWait(consumer(2), key));
    const early = coord.onWake(before);
    expect(early.kind).toBe('hit');
    coord.shutdown();
    const late = coord.onWake(after);
    expect(late.kind).toBe('hit');
    if (early.kind !== 'hit' || late.kind !== 'hit') return;

    expect(early.lease.closed).toBe(false);
    expect(late.lease.closed).toBe(false);
    expect(backend.pins(key)).toBe(2);
    coord.shutdown();
    expect(backend.evict(key)).toBe('pinned');
    early.lease.close();
    expect(backend.pins(key)).toBe(1);
    late.lease.close();
    expect(backend.pins(key)).toBe(0);
    expect(backend.evict(key)).toBe('evicted');
  });

  it('forget still works after shutdown, but a retry is rejected', () => {
    const { coord } = setup();
    const t = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    coord.complete(coord.beginNext(GRANT)!, { ok: false, error: 'x' });
    coord.shutdown();
    coord.onCancel(t);
    expect(coord.forget(makeKey(1))).toBe(true);
    expect(coord.onWait(consumer(1), makeKey(1))).toMatchObject({ status: 'rejected', reason: 'shutdown' });
  });
});
