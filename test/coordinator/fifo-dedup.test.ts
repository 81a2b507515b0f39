import { describe, expect, it } from 'vitest';
import { GRANT, TARGET_A, TARGET_B, consumer, makeKey, setup, ticketOf } from '../helpers.js';

describe('WaitCoordinator: FIFO order of issue', () => {
  it('issues units in the order their first consumer arrived', () => {
    const { coord } = setup();
    const keys = [makeKey(3), makeKey(1), makeKey(2), makeKey(0)];
    keys.forEach((key, i) => expect(coord.onWait(consumer(i), key).status).toBe('queued'));
    expect(coord.stats().queued).toBe(4);

    const issued = [];
    for (;;) {
      const work = coord.beginNext(GRANT);
      if (work === null) break;
      issued.push(work.key.hex);
      expect(coord.complete(work, { ok: true })).toBe('applied');
    }
    expect(issued).toEqual(keys.map((k) => k.hex));
    expect(coord.stats().queued).toBe(0);
  });

  it('a join does not move a unit forward', () => {
    const { coord } = setup();
    const [a, b] = [makeKey(1), makeKey(2)];
    coord.onWait(consumer(1), a);
    coord.onWait(consumer(2), b);
    expect(coord.onWait(consumer(3), b).status).toBe('joined');
    expect(coord.beginNext(GRANT)?.key.equals(a)).toBe(true);
  });
});

describe('WaitCoordinator: deduplication', () => {
  it('a second consumer of the same key joins the queued unit; one unit is issued for both', () => {
    const { coord } = setup();
    const first = coord.onWait(consumer(1), makeKey(7));
    const second = coord.onWait(consumer(2), makeKey(7)); // equal key, built again
    expect(first.status).toBe('queued');
    expect(second.status).toBe('joined');
    expect(second.ticket).not.toBe(first.ticket);
    expect(coord.stats()).toMatchObject({ queued: 1, waiting: 2, joins: 1 });

    const work = coord.beginNext(GRANT);
    expect(work?.key.equals(makeKey(7))).toBe(true);
    expect(coord.stats().queued).toBe(0);
    coord.complete(work!, { ok: true });
    expect(coord.beginNext(GRANT)).toBeNull();
    expect(coord.stats().issued).toBe(1);
  });

  it('a consumer of an in-flight key joins it as in-flight; nothing new is queued', () => {
    const { coord } = setup();
    coord.onWait(consumer(1), makeKey(1));
    const work = coord.beginNext(GRANT);
    expect(work).not.toBeNull();
    const late = coord.onWait(consumer(2), makeKey(1));
    expect(late.status).toBe('in-flight');
    expect(coord.stats()).toMatchObject({ queued: 0, inFlight: 1, joins: 1, waiting: 2 });
    coord.complete(work!, { ok: true });
    expect(coord.beginNext(GRANT)).toBeNull();
  });

  it('keys that differ only in task, namespace or source generation never share a unit', () => {
    const { coord } = setup();
    const keys = [
      makeKey(1),
      makeKey(1, { task: 'task-b' }),
      makeKey(1, { namespace: 'ns-1' }),
      makeKey(1, { generation: 1 }),
    ];
    keys.forEach((key, i) => expect(coord.onWait(consumer(i), key).status).toBe('queued'));
    expect(coord.stats()).toMatchObject({ queued: 4, joins: 0 });
  });

  it('dedup identity includes readiness: a host wait and a device wait on one key are two units', () => {
    const { coord } = setup();
    const key = makeKey(1);
    expect(coord.onWait(consumer(1), key).status).toBe('queued');
    expect(coord.onWait(consumer(2), key, { readiness: 'device', target: TARGET_A }).status).toBe('queued');
    expect(coord.stats().queued).toBe(2);

    const first = coord.beginNext(GRANT)!;
    expect(first.readiness).toBe('host');
    expect(first.target).toBeNull();
    coord.complete(first, { ok: true });
    const second = coord.beginNext(GRANT)!;
    expect(second.readiness).toBe('device');
    expect(second.key.equals(key)).toBe(true);
  });

  it('dedup identity includes the device target: different targets do not share, identical ones do', () => {
    const { coord } = setup();
    const key = makeKey(1);
    expect(coord.onWait(consumer(1), key, { readiness: 'device', target: TARGET_A }).status).toBe('queued');
    expect(coord.onWait(consumer(2), key, { readiness: 'device', target: TARGET_B }).status).toBe('queued');
    expect(coord.onWait(consumer(3), key, { readiness: 'device', target: { ...TARGET_A, arena: 4 } }).status).toBe('queued');
    expect(
      coord.onWait(consumer(4), key, { readiness: 'device', target: { ...TARGET_A, device: 'GPU-00000000-0000-0000-0000-000000000001' } })
        .status,
    ).toBe('queued');
    // The same target, spelled with a bigint arena and an upper-case UUID, is the same target.
    const same = { device: TARGET_A.device.toUpperCase(), arena: 3n, arenaGeneration: 7n };
    expect(coord.onWait(consumer(5), key, { readiness: 'device', target: same }).status).toBe('joined');
    expect(coord.stats()).toMatchObject({ queued: 4, joins: 1, waiting: 5 });
  });
});

describe('WaitCoordinator: one unit in flight', () => {
  it('beginNext returns null while a unit is in flight, and the next one after it completes', () => {
    const { coord } = setup();
    coord.onWait(consumer(1), makeKey(1));
    coord.onWait(consumer(2), makeKey(2));
    const first = coord.beginNext(GRANT);
    expect(first?.key.equals(makeKey(1))).toBe(true);
    expect(coord.beginNext(GRANT)).toBeNull();
    expect(coord.beginNext({ worker: 'other-worker', grant: 'other-grant' })).toBeNull();
    expect(coord.stats()).toMatchObject({ inFlight: 1, queued: 1, issued: 1 });

    coord.complete(first!, { ok: false, error: new Error('boom') });
    const second = coord.beginNext(GRANT);
    expect(second?.key.equals(makeKey(2))).toBe(true);
    expect(coord.stats()).toMatchObject({ inFlight: 1, queued: 0, issued: 2 });
  });

  it('an in-flight unit whose consumers all left still blocks the next one until it completes', () => {
    const { coord } = setup();
    const t1 = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    coord.onWait(consumer(2), makeKey(2));
    const first = coord.beginNext(GRANT)!;
    expect(coord.onCancel(t1)).toBe(true);
    expect(first.signal.aborted).toBe(true);
    expect(coord.beginNext(GRANT)).toBeNull();
    coord.complete(first, { ok: true });
    expect(coord.beginNext(GRANT)?.key.equals(makeKey(2))).toBe(true);
  });

  it('beginNext on an empty queue returns null', () => {
    const { coord } = setup();
    expect(coord.beginNext(GRANT)).toBeNull();
    expect(coord.stats().issued).toBe(0);
  });
});

describe('WaitCoordinator: abandoned queued units', () => {
  it('a queued unit whose only consumer cancelled is dropped and never issued', () => {
    const { coord } = setup();
    const t1 = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    coord.onWait(consumer(2), makeKey(2));
    expect(coord.onCancel(t1)).toBe(true);
    expect(coord.stats().queued).toBe(1);
    const work = coord.beginNext(GRANT);
    expect(work?.key.equals(makeKey(2))).toBe(true);
    coord.complete(work!, { ok: true });
    expect(coord.beginNext(GRANT)).toBeNull();
    expect(coord.stats().issued).toBe(1);
  });

  it('a queued unit whose consumers all woke (before it was issued) is dropped', () => {
    const { coord } = setup();
    const t1 = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    const t2 = ticketOf(coord.onWait(consumer(2), makeKey(1)));
    coord.onWait(consumer(3), makeKey(2));
    expect(coord.onWake(t1)).toMatchObject({ kind: 'miss' });
    expect(coord.stats().queued).toBe(2); // one consumer of key 1 remains
    expect(coord.onWake(t2)).toMatchObject({ kind: 'miss' });
    expect(coord.stats().queued).toBe(1);
    expect(coord.beginNext(GRANT)?.key.equals(makeKey(2))).toBe(true);
  });

  it('a queued unit whose only consumer moved to another key (replacement) is dropped', () => {
    const { coord } = setup();
    coord.onWait(consumer(1), makeKey(1));
    coord.onWait(consumer(1), makeKey(2));
    expect(coord.stats()).toMatchObject({ queued: 1, waiting: 1 });
    expect(coord.beginNext(GRANT)?.key.equals(makeKey(2))).toBe(true);
  });

  it('a dropped key can be queued again by a later wait, at the back of the queue', () => {
    const { coord } = setup();
    const t1 = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    coord.onWait(consumer(2), makeKey(2));
    coord.onCancel(t1);
    expect(coord.onWait(consumer(3), makeKey(1)).status).toBe('queued');
    const order = [];
    for (let w = coord.beginNext(GRANT); w !== null; w = coord.beginNext(GRANT)) {
      order.push(w.key.hex);
      coord.complete(w, { ok: true });
    }
    expect(order).toEqual([makeKey(2).hex, makeKey(1).hex]);
  });
});

describe('WaitCoordinator: replacement keeps the queue place', () => {
  it('replacing a wait with the same identity keeps the unit where it was', () => {
    const { coord } = setup();
    const old = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    coord.onWait(consumer(2), makeKey(2));
    const again = coord.onWait(consumer(1, 1), makeKey(1));
    expect(again.status).not.toBe('queued');
    expect(again.ticket).not.toBe(old);
    expect(coord.stats()).toMatchObject({ queued: 2, waiting: 2 });
    const first = coord.beginNext(GRANT)!;
    expect(first.key.equals(makeKey(1))).toBe(true);
    expect(first.signal.aborted).toBe(false);
  });

  it('replacing a wait on a shared queued unit with the same identity keeps it and its place', () => {
    const { coord } = setup();
    coord.onWait(consumer(1), makeKey(1));
    coord.onWait(consumer(2), makeKey(2));
    coord.onWait(consumer(3), makeKey(1));
    expect(coord.onWait(consumer(1), makeKey(1)).status).toBe('joined');
    expect(coord.stats()).toMatchObject({ queued: 2, waiting: 3 });
    expect(coord.beginNext(GRANT)?.key.equals(makeKey(1))).toBe(true);
  });
});
