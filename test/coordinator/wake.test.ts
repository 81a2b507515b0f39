import { describe, expect, it } from 'vitest';
import { InMemoryBackend, type ArtifactBackend, type Lease, type WaitCoordinator } from '../../lib/index.js';
import { GRANT, TARGET_A, consumer, makeKey, setup, statsWithout, ticketOf, withBackend } from '../helpers.js';

/** A lease object like a backend would hand out, recording its closes. */
function fakeLease(fields: Partial<Lease> = {}): Lease & { closes: number } {
  const lease = {
    kind: 'lease' as const,
    key: makeKey(1),
    consumer: consumer(1),
    readiness: 'host' as const,
    slot: 0,
    generation: 1,
    meta: {},
    closes: 0,
    get closed(): boolean {
      return this.closes > 0;
    },
    close() {
      this.closes++;
    },
    ...fields,
  };
  return lease;
}

describe('WaitCoordinator: ready-pin lifetime', () => {
  it('a hit returns the backend lease, pinned until lease.close()', () => {
    const { coord, backend } = setup();
    const key = makeKey(1);
    backend.publish(key, { bytes: 4096 });
    const t = ticketOf(coord.onWait(consumer(1), key));
    const woke = coord.onWake(t);
    expect(woke.kind).toBe('hit');
    if (woke.kind !== 'hit') return;
    const { lease } = woke;
    expect(lease.kind).toBe('lease');
    expect(lease.key.equals(key)).toBe(true);
    expect(lease.readiness).toBe('host');
    expect(lease.consumer).toMatchObject(consumer(1));
    expect(lease.meta).toEqual({ bytes: 4096 });
    expect(lease.slotGeneration).toBe(lease.generation);
    expect(lease.closed).toBe(false);
    expect(backend.pins(key)).toBe(1);
    expect(backend.leasesOpen).toBe(1);
    expect(backend.evict(key)).toBe('pinned');
    // Later coordinator activity does not release it.
    coord.onWait(consumer(2), makeKey(2));
    coord.complete(coord.beginNext(GRANT)!, { ok: true });
    expect(backend.pins(key)).toBe(1);

    lease.close();
    expect(lease.closed).toBe(true);
    expect(backend.pins(key)).toBe(0);
    expect(backend.leasesOpen).toBe(0);
    expect(backend.evict(key)).toBe('evicted');
  });

  it('close is idempotent: a second close releases nothing', () => {
    const { coord, backend } = setup();
    const key = makeKey(1);
    backend.publish(key);
    const a = coord.onWake(ticketOf(coord.onWait(consumer(1), key)));
    const b = coord.onWake(ticketOf(coord.onWait(consumer(2), key)));
    if (a.kind !== 'hit' || b.kind !== 'hit') throw new Error('expected two hits');
    expect(backend.pins(key)).toBe(2);
    a.lease.close();
    a.lease.close();
    a.lease.close();
    expect(backend.pins(key)).toBe(1);
    expect(b.lease.closed).toBe(false);
    b.lease.close();
    expect(backend.pins(key)).toBe(0);
  });

  it('a hit removes the consumer: its ticket is stale afterwards', () => {
    const { coord, backend } = setup();
    backend.publish(makeKey(1));
    const t = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    const woke = coord.onWake(t);
    if (woke.kind === 'hit') woke.lease.close();
    expect(coord.stats()).toMatchObject({ waiting: 0, queued: 0, hits: 1 });
    expect(coord.onWake(t)).toEqual({ kind: 'miss', reason: 'stale-ticket' });
    expect(backend.calls).toBe(1);
  });
});

describe('WaitCoordinator: wake never runs preparation', () => {
  it('only wakes of current tickets call the backend', () => {
    const { coord, backend } = setup();
    const t1 = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    coord.onWait(consumer(2), makeKey(1));
    const t3 = ticketOf(coord.onWait(consumer(3), makeKey(3)));
    const work = coord.beginNext(GRANT)!;
    coord.complete(work, { ok: true });
    coord.onCancel(t3);
    coord.forget(makeKey(3));
    coord.shutdown();
    expect(backend.calls).toBe(0);
    coord.onWake(t1);
    expect(backend.calls).toBe(1);
    coord.onWake(t1); // stale
    expect(backend.calls).toBe(1);
  });

  it('a wake on a queued key misses and nothing is issued or prepared by it', () => {
    const { coord, backend } = setup();
    const t = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    expect(coord.onWake(t)).toEqual({ kind: 'miss', reason: 'absent' });
    expect(coord.stats()).toMatchObject({ issued: 0, queued: 0, inFlight: 0, completed: 0 });
    expect(backend.calls).toBe(1);
  });

  it('a wake while the unit is being prepared misses (preparing) instead of waiting', () => {
    const { coord, backend } = setup();
    const key = makeKey(1);
    const t = ticketOf(coord.onWait(consumer(1), key));
    const work = coord.beginNext(GRANT)!;
    backend.markPreparing(key);
    expect(coord.onWake(t)).toEqual({ kind: 'miss', reason: 'preparing' });
    expect(work.signal.aborted).toBe(true);
    expect(coord.stats()).toMatchObject({ inFlight: 1, completed: 0 });
  });
});

describe('WaitCoordinator: misses', () => {
  it('a miss removes the consumer', () => {
    const { coord } = setup();
    const t1 = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    coord.onWait(consumer(2), makeKey(1));
    expect(coord.onWake(t1)).toEqual({ kind: 'miss', reason: 'absent' });
    expect(coord.stats()).toMatchObject({ waiting: 1, queued: 1 });
    expect(coord.onCancel(t1)).toBe(false);
  });

  it('the backend\'s miss reason is passed through', () => {
    const coord = withBackend({ tryPinReady: () => ({ kind: 'miss', reason: 'contended' }) });
    const t = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    expect(coord.onWake(t)).toEqual({ kind: 'miss', reason: 'contended' });
    expect(coord.stats().misses).toMatchObject({ contended: 1 });
  });

  it('the backend is asked with the key, the consumer and the readiness of the wait', () => {
    const seen: unknown[][] = [];
    const coord = withBackend({
      tryPinReady: (...args) => {
        seen.push(args);
        return { kind: 'miss', reason: 'absent' };
      },
    });
    const t = ticketOf(coord.onWait(consumer(1, 4), makeKey(1)));
    coord.onWake(t);
    expect(seen).toHaveLength(1);
    const [key, who, want] = seen[0]!;
    expect(makeKey(1).equals(key)).toBe(true);
    expect(who).toMatchObject({ engine: 'e0', request: 'r1', generation: 4 });
    expect(want).toEqual({ readiness: 'host' });
  });
});

describe('WaitCoordinator: backend faults', () => {
  function faultCase(backend: ArtifactBackend) {
    const coord = withBackend(backend);
    const t1 = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    const t2 = ticketOf(coord.onWait(consumer(2), makeKey(1)));
    const t3 = ticketOf(coord.onWait(consumer(3), makeKey(3)));
    const work = coord.beginNext(GRANT)!;
    return { coord, t1, t2, t3, work };
  }

  it('a backend that throws gives miss backend-error; the consumer leaves and the rest is intact', () => {
    const { coord, t1, t2, t3, work } = faultCase({
      tryPinReady: () => {
        throw new Error('segment unmapped');
      },
    });
    const before = coord.stats();
    expect(coord.onWake(t1)).toEqual({ kind: 'miss', reason: 'backend-error' });
    const after = coord.stats();
    expect(after.misses['backend-error']).toBe(1);
    expect(after.waiting).toBe(before.waiting - 1);
    expect(statsWithout(after, 'waiting', 'wakes', 'misses')).toEqual(statsWithout(before, 'waiting', 'wakes', 'misses'));
    expect(work.signal.aborted).toBe(false);
    expect(coord.onCancel(t1)).toBe(false);
    expect(coord.onCancel(t3)).toBe(true);
    expect(coord.onWake(t2)).toEqual({ kind: 'miss', reason: 'backend-error' });
    expect(work.signal.aborted).toBe(true);
    expect(coord.complete(work, { ok: true })).toBe('applied');
    expect(coord.stats()).toMatchObject({ waiting: 0, queued: 0, inFlight: 0, wasted: 1 });
  });

  it('a backend that throws a non-Error value also gives backend-error', () => {
    const { coord, t1 } = faultCase({
      tryPinReady: () => {
        throw 'string thrown';
      },
    });
    expect(coord.onWake(t1)).toEqual({ kind: 'miss', reason: 'backend-error' });
  });

  const malformed: Array<[string, unknown]> = [
    ['undefined', undefined],
    ['null', null],
    ['a number', 42],
    ['a string', 'hit'],
    ['an empty object', {}],
    ['an unknown kind', { kind: 'maybe' }],
    ['a miss without a reason', { kind: 'miss' }],
    ['a miss with a non-string reason', { kind: 'miss', reason: 7 }],
    ['a lease without close()', { kind: 'lease', key: makeKey(1), readiness: 'host' }],
    ['a promise', Promise.resolve({ kind: 'miss', reason: 'absent' })],
  ];
  for (const [name, value] of malformed) {
    it(`a backend returning ${name} gives miss backend-error and state stays consistent`, () => {
      const { coord, t1, t2, work } = faultCase({ tryPinReady: () => value as never });
      expect(coord.onWake(t1)).toEqual({ kind: 'miss', reason: 'backend-error' });
      expect(coord.stats()).toMatchObject({ waiting: 2, inFlight: 1, hits: 0 });
      expect(coord.onCancel(t2)).toBe(true);
      expect(work.signal.aborted).toBe(true);
    });
  }

  it('a backend result whose fields throw when read gives miss backend-error, not an exception', () => {
    const hostile = {
      get kind(): string {
        throw new Error('getter exploded');
      },
    };
    const { coord, t1, t2, work } = faultCase({ tryPinReady: () => hostile as never });
    let result: unknown;
    expect(() => {
      result = coord.onWake(t1);
    }).not.toThrow();
    expect(result).toEqual({ kind: 'miss', reason: 'backend-error' });
    expect(coord.stats()).toMatchObject({ waiting: 2, inFlight: 1 });
    expect(coord.onCancel(t2)).toBe(true);
    expect(work.signal.aborted).toBe(true);
  });

  it('a hostile backend result on the last consumer\'s wake still aborts the in-flight unit before onWake returns', () => {
    const hostile = {
      kind: 'lease',
      close() {},
      get key(): never {
        throw new Error('getter exploded');
      },
    };
    const coord = withBackend({ tryPinReady: () => hostile as never });
    const t1 = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    const work = coord.beginNext(GRANT)!;
    let result: unknown;
    try {
      result = coord.onWake(t1);
    } catch {
      result = 'threw';
    }
    expect(result).toEqual({ kind: 'miss', reason: 'backend-error' });
    expect(work.signal.aborted).toBe(true);
    expect(coord.stats()).toMatchObject({ waiting: 0, inFlight: 1 });
  });

  it('a lease for another key is closed and becomes a miss identity-mismatch', () => {
    const wrong = fakeLease({ key: makeKey(99) });
    const coord = withBackend({ tryPinReady: () => wrong });
    const t = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    expect(coord.onWake(t)).toEqual({ kind: 'miss', reason: 'identity-mismatch' });
    expect(wrong.closes).toBe(1);
    expect(coord.stats()).toMatchObject({ hits: 0, waiting: 0, misses: { 'identity-mismatch': 1 } });
  });

  it('a lease whose key is not an ArtifactKey at all is closed and becomes identity-mismatch', () => {
    const wrong = fakeLease({ key: { hex: makeKey(1).hex } as never });
    const coord = withBackend({ tryPinReady: () => wrong });
    const t = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    expect(coord.onWake(t)).toEqual({ kind: 'miss', reason: 'identity-mismatch' });
    expect(wrong.closes).toBe(1);
  });

  it('a lease of the wrong readiness is closed and becomes a miss readiness-mismatch', () => {
    const wrong = fakeLease({ key: makeKey(1), readiness: 'device' });
    const coord = withBackend({ tryPinReady: () => wrong });
    const t = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    expect(coord.onWake(t)).toEqual({ kind: 'miss', reason: 'readiness-mismatch' });
    expect(wrong.closes).toBe(1);
    expect(coord.stats()).toMatchObject({ hits: 0, waiting: 0, misses: { 'readiness-mismatch': 1 } });
  });

  it('a host lease for a device wait is closed and becomes readiness-mismatch', () => {
    const wrong = fakeLease({ key: makeKey(1), readiness: 'host' });
    const coord = withBackend({ tryPinReady: () => wrong });
    const t = ticketOf(coord.onWait(consumer(1), makeKey(1), { readiness: 'device', target: TARGET_A }));
    expect(coord.onWake(t)).toEqual({ kind: 'miss', reason: 'readiness-mismatch' });
    expect(wrong.closes).toBe(1);
  });

  it('a mismatched lease whose close() throws is still a miss', () => {
    const wrong = fakeLease({ key: makeKey(2) });
    wrong.close = () => {
      throw new Error('close failed');
    };
    const coord = withBackend({ tryPinReady: () => wrong });
    const t = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    expect(coord.onWake(t)).toEqual({ kind: 'miss', reason: 'identity-mismatch' });
    expect(coord.stats().waiting).toBe(0);
  });

  it('a matching lease from a hand-written backend is returned as is', () => {
    const good = fakeLease({ key: makeKey(1) });
    // A third-party lease names its slot generation `generation` only (contract §4).
    expect('slotGeneration' in good).toBe(false);
    const coord = withBackend({ tryPinReady: () => good });
    const t = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    const woke = coord.onWake(t);
    expect(woke).toEqual({ kind: 'hit', lease: good });
    expect(good.closes).toBe(0);
  });
});

describe('WaitCoordinator: wasted preparation', () => {
  it('counts a success that arrives after every consumer left', () => {
    const { coord, backend } = setup();
    const key = makeKey(1);
    const t1 = ticketOf(coord.onWait(consumer(1), key));
    const t2 = ticketOf(coord.onWait(consumer(2), key));
    const work = coord.beginNext(GRANT)!;
    coord.onWake(t1);
    coord.onCancel(t2);
    backend.publish(key);
    expect(coord.complete(work, { ok: true })).toBe('applied');
    expect(coord.stats()).toMatchObject({ completed: 1, wasted: 1 });
  });

  it('does not count a success while a consumer still waits', () => {
    const { coord } = setup();
    const t1 = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    coord.onWait(consumer(2), makeKey(1));
    const work = coord.beginNext(GRANT)!;
    coord.onWake(t1);
    coord.complete(work, { ok: true });
    expect(coord.stats()).toMatchObject({ completed: 1, wasted: 0 });
  });

  it('does not count a failure after every consumer left', () => {
    const { coord } = setup();
    const t1 = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    const work = coord.beginNext(GRANT)!;
    coord.onCancel(t1);
    coord.complete(work, { ok: false, error: 'x' });
    expect(coord.stats()).toMatchObject({ failed: 1, wasted: 0 });
  });

  it('does not count a success when a consumer joined the in-flight unit after the first ones left', () => {
    const { coord, backend } = setup();
    const key = makeKey(1);
    const t1 = ticketOf(coord.onWait(consumer(1), key));
    const work = coord.beginNext(GRANT)!;
    coord.onCancel(t1);
    const t2 = ticketOf(coord.onWait(consumer(2), key));
    backend.publish(key);
    coord.complete(work, { ok: true });
    expect(coord.stats()).toMatchObject({ completed: 1, wasted: 0 });
    const woke = coord.onWake(t2);
    expect(woke.kind).toBe('hit');
    if (woke.kind === 'hit') woke.lease.close();
  });

  it('works with the in-memory backend used directly (sanity of the fixture)', () => {
    const backend = new InMemoryBackend();
    backend.publish(makeKey(1));
    const lease = backend.tryPinReady(makeKey(1), consumer(1), { readiness: 'host' });
    expect(lease.kind).toBe('lease');
    if (lease.kind === 'lease') lease.close();
    expect(backend.pins(makeKey(1))).toBe(0);
  });
});

describe('WaitCoordinator: what a wake accepts from the backend', () => {
  const wakeWith = (answer: unknown) => {
    const coord = withBackend({ tryPinReady: () => answer as Lease });
    return coord.onWake(ticketOf(coord.onWait(consumer(1), makeKey(1))));
  };

  it('a miss with an empty or missing reason is a backend-error miss, never a hit', () => {
    expect(wakeWith({ kind: 'miss', reason: '' })).toEqual({ kind: 'miss', reason: 'backend-error' });
    expect(wakeWith({ kind: 'miss' })).toEqual({ kind: 'miss', reason: 'backend-error' });
  });

  const malformed: Array<[string, Partial<Lease>]> = [
    ['already closed', { closes: 1 } as unknown as Partial<Lease>],
    ['bound to another consumer', { consumer: consumer(2) }],
    ['without meta', { meta: undefined as never }],
    ['without a slot', { slot: undefined as never }],
    ['with a string generation', { generation: '1' as never }],
    ['with a slotGeneration but no generation', { generation: undefined as never, slotGeneration: 1 }],
  ];
  for (const [name, fields] of malformed) {
    it(`a lease ${name} is refused as backend-error and released`, () => {
      const lease = fakeLease(fields);
      const closesBefore = lease.closes;
      expect(wakeWith(lease)).toEqual({ kind: 'miss', reason: 'backend-error' });
      expect(lease.closes).toBe(closesBefore + 1);
    });
  }

  it("a backend's leaseIsWellFormed vouches for a lease's slot, generation and meta, and for nothing else", () => {
    const wakeVouched = (lease: ReturnType<typeof fakeLease>, answer: () => unknown) => {
      let asked: unknown = null;
      const coord = withBackend({
        tryPinReady: () => lease,
        leaseIsWellFormed: (l: Lease) => {
          asked = l;
          return answer() as boolean;
        },
      });
      const result = coord.onWake(ticketOf(coord.onWait(consumer(1), makeKey(1))));
      expect(asked).toBe(lease);
      return result;
    };
    // Vouched for: the missing slot and meta are not read.
    const bare = fakeLease({ slot: undefined as never, meta: undefined as never });
    const hit = wakeVouched(bare, () => true);
    expect(hit.kind).toBe('hit');
    expect(bare.closes).toBe(0);
    // Anything but true is no vouching; a throw is the backend's error.
    for (const answer of [() => false, () => 1, () => 'yes', () => { throw new Error('boom'); }]) {
      const lease = fakeLease({ slot: undefined as never });
      expect(wakeVouched(lease, answer)).toEqual({ kind: 'miss', reason: 'backend-error' });
      expect(lease.closes).toBe(1);
    }
    // What it does not vouch for is still checked: the consumer, the key, closed.
    const unvouched: Array<[Partial<Lease>, string]> = [
      [{ consumer: consumer(2) }, 'backend-error'],
      [{ key: makeKey(2) }, 'identity-mismatch'],
      [{ readiness: 'device' }, 'readiness-mismatch'],
      [{ closes: 1 } as unknown as Partial<Lease>, 'backend-error'],
    ];
    for (const [fields, reason] of unvouched) {
      const lease = fakeLease(fields);
      const closesBefore = lease.closes;
      expect(wakeVouched(lease, () => true)).toEqual({ kind: 'miss', reason });
      expect(lease.closes).toBe(closesBefore + 1);
    }
  });

  it('leaseIsWellFormed runs as backend code: a mutating call from it is refused, and the wake is a backend-error miss', () => {
    let refused: unknown = null;
    const lease = fakeLease();
    const coord: WaitCoordinator = withBackend({
      tryPinReady: () => lease,
      leaseIsWellFormed: () => {
        try {
          coord.onWait(consumer(7), makeKey(7));
        } catch (error) {
          refused = error;
          throw error;
        }
        return true;
      },
    });
    expect(coord.onWake(ticketOf(coord.onWait(consumer(1), makeKey(1))))).toEqual({ kind: 'miss', reason: 'backend-error' });
    expect(refused).toMatchObject({ code: 'ERR_REENTRANT' });
    expect(lease.closes).toBe(1);
    expect(coord.stats()).toMatchObject({ waiting: 0, queued: 0 });
  });

  it('a leaseIsWellFormed that is not a method is refused when the coordinator is made', () => {
    for (const bad of [true, 1, 'yes', {}]) {
      expect(() => withBackend({ tryPinReady: () => ({ kind: 'miss', reason: 'absent' }), leaseIsWellFormed: bad as never })).toThrow(
        expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', message: expect.stringContaining('leaseIsWellFormed') }),
      );
    }
  });

  it('past 64 distinct reasons the stats count "other", but the wake still returns the real reason', () => {
    let n = 0;
    const coord = withBackend({ tryPinReady: () => ({ kind: 'miss', reason: n < 64 ? `reason-${n++}` : 'absent' }) });
    for (let i = 0; i < 64; i++) coord.onWake(ticketOf(coord.onWait(consumer(i), makeKey(i))));
    const wake = coord.onWake(ticketOf(coord.onWait(consumer(99), makeKey(99))));
    expect(wake).toEqual({ kind: 'miss', reason: 'absent' });
    const misses = coord.stats().misses;
    expect(Object.keys(misses)).toHaveLength(65);
    expect(misses.other).toBe(1);
    expect(misses.absent).toBeUndefined();
  });
});
