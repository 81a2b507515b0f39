import { describe, expect, it } from 'vitest';
import type { WaitAdmission } from '../../lib/index.js';
import { GRANT, consumer, makeKey, setup, ticketOf } from '../helpers.js';

describe('WaitCoordinator: independent consumers', () => {
  it('cancel removes that consumer only; the shared queued unit stays for the others', () => {
    const { coord } = setup();
    const t1 = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    const t2 = ticketOf(coord.onWait(consumer(2), makeKey(1)));
    expect(coord.onCancel(t1)).toBe(true);
    expect(coord.stats()).toMatchObject({ waiting: 1, queued: 1, cancels: 1 });
    // The other consumer is still current: its wake reaches the backend, the cancelled one does not.
    const work = coord.beginNext(GRANT);
    expect(work?.key.equals(makeKey(1))).toBe(true);
    expect(work!.signal.aborted).toBe(false);
    expect(coord.onWake(t1)).toEqual({ kind: 'miss', reason: 'stale-ticket' });
    expect(coord.onWake(t2)).toEqual({ kind: 'miss', reason: 'absent' });
  });

  it('cancel of one consumer of an in-flight unit does not abort it', () => {
    const { coord } = setup();
    const t1 = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    coord.onWait(consumer(2), makeKey(1));
    const work = coord.beginNext(GRANT)!;
    expect(coord.onCancel(t1)).toBe(true);
    expect(work.signal.aborted).toBe(false);
    expect(coord.stats()).toMatchObject({ inFlight: 1, waiting: 1 });
  });

  it('a cancelled ticket cannot be cancelled again', () => {
    const { coord } = setup();
    const t1 = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    coord.onWait(consumer(2), makeKey(1));
    expect(coord.onCancel(t1)).toBe(true);
    expect(coord.onCancel(t1)).toBe(false);
    expect(coord.stats()).toMatchObject({ waiting: 1, queued: 1, cancels: 1 });
  });

  it('the same request id on two engines is two independent consumers', () => {
    const { coord } = setup();
    const a = coord.onWait(consumer(1, 0, 'engine-a'), makeKey(1));
    const b = coord.onWait(consumer(1, 0, 'engine-b'), makeKey(2));
    expect(a.status).toBe('queued');
    expect(b.status).toBe('queued');
    expect(coord.stats()).toMatchObject({ waiting: 2, queued: 2 });
  });
});

describe('WaitCoordinator: consumer identity is (engine, request), exactly', () => {
  it('engines and requests that only differ in where a NUL splits them are different consumers (or rejected), never merged', () => {
    const { coord } = setup();
    const admit = (engine: string, request: string, n: number): string | null => {
      try {
        return ticketOf(coord.onWait({ engine, request, generation: 0 }, makeKey(n)));
      } catch (e) {
        // Refusing a NUL in an id is acceptable; silently merging two consumers is not.
        expect((e as { code?: string }).code).toBe('ERR_INVALID_ARGUMENT');
        return null;
      }
    };
    const a = admit('a\u0000b', 'c', 1);
    const b = admit('a', 'b\u0000c', 2);
    for (const t of [a, b]) if (t !== null) expect(coord.onCancel(t)).toBe(true);
  });
});

describe('WaitCoordinator: abort signal of an issued unit', () => {
  it('aborts synchronously when the last consumer cancels, not before', () => {
    const { coord } = setup();
    const t1 = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    const t2 = ticketOf(coord.onWait(consumer(2), makeKey(1)));
    const work = coord.beginNext(GRANT)!;
    let fired = 0;
    work.signal.addEventListener('abort', () => fired++);
    coord.onCancel(t1);
    expect(fired).toBe(0);
    expect(work.signal.aborted).toBe(false);
    coord.onCancel(t2);
    expect(fired).toBe(1);
    expect(work.signal.aborted).toBe(true);
  });

  it('aborts synchronously when the last consumer wakes', () => {
    const { coord } = setup();
    const t1 = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    const work = coord.beginNext(GRANT)!;
    let fired = 0;
    work.signal.addEventListener('abort', () => fired++);
    expect(coord.onWake(t1)).toEqual({ kind: 'miss', reason: 'absent' });
    expect(fired).toBe(1);
  });

  it('aborts synchronously when the last consumer is replaced by a wait on another key', () => {
    const { coord } = setup();
    coord.onWait(consumer(1), makeKey(1));
    const work = coord.beginNext(GRANT)!;
    let fired = 0;
    work.signal.addEventListener('abort', () => fired++);
    expect(coord.onWait(consumer(1, 1), makeKey(2)).status).toBe('queued');
    expect(fired).toBe(1);
    expect(coord.stats()).toMatchObject({ inFlight: 1, queued: 1, waiting: 1 });
  });

  it('does not abort when the last consumer is replaced by a wait with the same identity', () => {
    const { coord } = setup();
    coord.onWait(consumer(1), makeKey(1));
    const work = coord.beginNext(GRANT)!;
    expect(coord.onWait(consumer(1, 1), makeKey(1)).status).toBe('in-flight');
    expect(work.signal.aborted).toBe(false);
    expect(coord.stats()).toMatchObject({ inFlight: 1, waiting: 1 });
  });

  it('fires only once the state is consistent, and its listener may call back in', () => {
    const { coord, backend } = setup();
    backend.publish(makeKey(9));
    const t1 = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    const t9 = ticketOf(coord.onWait(consumer(9), makeKey(9)));
    const work = coord.beginNext(GRANT)!;
    const seen: Array<Record<string, unknown>> = [];
    work.signal.addEventListener('abort', () => {
      const s = coord.stats();
      seen.push({ waiting: s.waiting, cancels: s.cancels, inFlight: s.inFlight });
      // Calls back in: a new wait, a wake that pins, a cancel of the stale ticket.
      seen.push({ admission: coord.onWait(consumer(2), makeKey(2)).status });
      const woke = coord.onWake(t9);
      seen.push({ wake: woke.kind });
      if (woke.kind === 'hit') woke.lease.close();
      seen.push({ cancelAgain: coord.onCancel(t1) });
    });
    expect(coord.onCancel(t1)).toBe(true);
    expect(seen).toEqual([
      { waiting: 1, cancels: 1, inFlight: 1 },
      { admission: 'queued' },
      { wake: 'hit' },
      { cancelAgain: false },
    ]);
    expect(coord.stats()).toMatchObject({ waiting: 1, queued: 1, inFlight: 1, hits: 1 });
    expect(backend.leasesOpen).toBe(0);
  });

  it('a listener that calls back in during a wake sees the woken consumer gone', () => {
    const { coord } = setup();
    const t1 = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    const work = coord.beginNext(GRANT)!;
    let inside: { waiting: number; status: string } | null = null;
    work.signal.addEventListener('abort', () => {
      inside = { waiting: coord.stats().waiting, status: coord.onWait(consumer(1), makeKey(1)).status };
    });
    coord.onWake(t1);
    // The unit is still in flight (it drains); a new wait on its key joins it.
    expect(inside).toEqual({ waiting: 0, status: 'in-flight' });
    expect(coord.stats()).toMatchObject({ waiting: 1, inFlight: 1 });
  });
});

describe('WaitCoordinator: one demand per (engine, request)', () => {
  it('a second onWait replaces the first: the old ticket goes stale and its consumer leaves its unit', () => {
    const { coord } = setup();
    const old = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    coord.onWait(consumer(2), makeKey(1));
    const next = coord.onWait(consumer(1), makeKey(2));
    expect(next.status).toBe('queued');
    expect(next.ticket).not.toBe(old);
    expect(coord.stats()).toMatchObject({ waiting: 2, queued: 2 });
    expect(coord.onCancel(old)).toBe(false);
    expect(coord.onWake(old)).toEqual({ kind: 'miss', reason: 'stale-ticket' });
    expect(coord.onWake(ticketOf(next))).toMatchObject({ kind: 'miss', reason: 'absent' });
    expect(coord.stats()).toMatchObject({ waiting: 1, queued: 1 });
  });

  it('a lower generation is rejected stale-generation and the current wait is untouched', () => {
    const { coord, backend } = setup();
    backend.publish(makeKey(1));
    const current = ticketOf(coord.onWait(consumer(1, 5), makeKey(1)));
    const before = coord.stats();
    const lower = coord.onWait(consumer(1, 4), makeKey(2));
    expect(lower).toEqual({ status: 'rejected', reason: 'stale-generation' });
    expect(lower.ticket).toBeUndefined();
    const after = coord.stats();
    expect(after).toEqual({
      ...before,
      waits: before.waits + 1,
      rejected: before.rejected + 1,
      waitsByStatus: { ...before.waitsByStatus, rejected: before.waitsByStatus.rejected + 1 },
    });
    // The current wait still wakes on its own key.
    const woke = coord.onWake(current);
    expect(woke.kind).toBe('hit');
    if (woke.kind === 'hit') {
      expect(woke.lease.key.equals(makeKey(1))).toBe(true);
      woke.lease.close();
    }
  });

  it('an equal generation replaces the current wait', () => {
    const { coord } = setup();
    const old = ticketOf(coord.onWait(consumer(1, 3), makeKey(1)));
    const next = coord.onWait(consumer(1, 3), makeKey(2));
    expect(next.status).toBe('queued');
    expect(coord.onCancel(old)).toBe(false);
    expect(coord.stats()).toMatchObject({ waiting: 1, queued: 1 });
  });

  it('a higher generation replaces the current wait', () => {
    const { coord } = setup();
    const old = ticketOf(coord.onWait(consumer(1, 3), makeKey(1)));
    const next = coord.onWait(consumer(1, 4), makeKey(2));
    expect(next.status).toBe('queued');
    expect(coord.onCancel(old)).toBe(false);
    expect(coord.onCancel(ticketOf(next))).toBe(true);
    expect(coord.stats()).toMatchObject({ waiting: 0, queued: 0 });
  });

  it('generations are compared with the current demand only: nothing is remembered once it leaves', () => {
    const { coord } = setup();
    const t = ticketOf(coord.onWait(consumer(1, 9), makeKey(1)));
    coord.onWake(t);
    const again: WaitAdmission = coord.onWait(consumer(1, 0), makeKey(1));
    expect(again.status).toBe('queued');
    expect(again.ticket).toBeDefined();
  });

  it('a replacement whose old and new keys are the same and whose generation is lower is rejected', () => {
    const { coord } = setup();
    const current = ticketOf(coord.onWait(consumer(1, 2), makeKey(1)));
    expect(coord.onWait(consumer(1, 1), makeKey(1))).toMatchObject({ status: 'rejected', reason: 'stale-generation' });
    expect(coord.onCancel(current)).toBe(true);
  });
});
