import { afterEach, describe, expect, it, vi } from 'vitest';

// Stand in for "another thread": currentThreadId answers whatever `thread.id` holds.
const thread = vi.hoisted(() => ({ id: null as number | null }));
vi.mock('../../lib/coordinator/thread.js', async (importOriginal) => {
  const real = await importOriginal<typeof import('../../lib/coordinator/thread.js')>();
  return { currentThreadId: () => thread.id ?? real.currentThreadId() };
});

import { InMemoryBackend, WaitCoordinator, WaitprepError, type ArtifactBackend, type Lease, type Miss } from '../../lib/index.js';
import { GRANT, consumer, makeKey, setup, ticketOf, withBackend } from '../helpers.js';

function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(WaitprepError);
    return (e as WaitprepError).code;
  }
  return undefined;
}

afterEach(() => {
  thread.id = null;
});

describe('WaitCoordinator: ERR_REENTRANT from inside backend calls', () => {
  /**
   * A backend that, on its first call, runs `attempt` against the coordinator
   * and records what it threw, then answers with a real pin.
   */
  function reentrant(attempt: (coord: WaitCoordinator, ctx: { work: ReturnType<WaitCoordinator['beginNext']>; other: string }) => unknown) {
    const inner = new InMemoryBackend();
    inner.publish(makeKey(1));
    const box: { coord?: WaitCoordinator; code?: string | undefined; returned?: unknown; ctx?: { work: ReturnType<WaitCoordinator['beginNext']>; other: string } } = {};
    const backend: ArtifactBackend = {
      tryPinReady(key, who, want): Lease | Miss {
        if (!('code' in box)) {
          box.code = codeOf(() => {
            box.returned = attempt(box.coord!, box.ctx!);
          });
        }
        return inner.tryPinReady(key, who, want);
      },
    };
    const coord = withBackend(backend);
    box.coord = coord;
    const target = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    const other = ticketOf(coord.onWait(consumer(2), makeKey(2)));
    const work = coord.beginNext(GRANT);
    box.ctx = { work, other };
    return { coord, inner, box, target, other, work };
  }

  const mutating: Array<[string, (coord: WaitCoordinator, ctx: { work: ReturnType<WaitCoordinator['beginNext']>; other: string }) => unknown]> = [
    ['onWait', (c) => c.onWait(consumer(3), makeKey(3))],
    ['onWake', (c, ctx) => c.onWake(ctx.other)],
    ['onCancel', (c, ctx) => c.onCancel(ctx.other)],
    ['beginNext', (c) => c.beginNext(GRANT)],
    ['complete', (c, ctx) => c.complete(ctx.work!, { ok: true })],
    ['forget', (c) => c.forget(makeKey(1))],
    ['shutdown', (c) => c.shutdown()],
  ];

  for (const [name, attempt] of mutating) {
    it(`${name} throws ERR_REENTRANT and changes nothing; the outer wake still completes`, () => {
      const { coord, inner, box, target, other, work } = reentrant(attempt);
      const woke = coord.onWake(target);
      expect(box.code).toBe('ERR_REENTRANT');
      expect(woke.kind).toBe('hit');
      if (woke.kind === 'hit') woke.lease.close();
      expect(inner.leasesOpen).toBe(0);
      // Nothing the re-entrant call would have done happened.
      expect(coord.closed).toBe(false);
      expect(coord.stats()).toMatchObject({ waits: 2, waiting: 1, queued: 1, inFlight: 1, issued: 1, completed: 0, cancels: 0, wakes: 1, hits: 1 });
      expect(work!.signal.aborted).toBe(true);
      // The coordinator is usable again once the backend call is over.
      expect(coord.onCancel(other)).toBe(true);
    });
  }

  it('a mutating call from inside the backend\'s lease.close() (a refused lease) throws ERR_REENTRANT', () => {
    let coord!: WaitCoordinator;
    let code: string | undefined = 'not called';
    const foreign: Lease = {
      kind: 'lease',
      key: makeKey(99),
      consumer: consumer(1),
      readiness: 'host',
      slot: 0,
      generation: 0,
      meta: {},
      closed: false,
      close() {
        code = codeOf(() => coord.onWait(consumer(7), makeKey(7)));
      },
    };
    coord = withBackend({ tryPinReady: () => foreign });
    const t = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    expect(coord.onWake(t)).toEqual({ kind: 'miss', reason: 'identity-mismatch' });
    expect(code).toBe('ERR_REENTRANT');
    expect(coord.stats()).toMatchObject({ waits: 1, waiting: 0, queued: 0 });
  });

  it('stats() is allowed inside tryPinReady and already shows the consumer gone', () => {
    const { coord, box, target } = reentrant((c) => c.stats());
    coord.onWake(target);
    expect(box.code).toBeUndefined();
    expect(box.returned).toMatchObject({ waiting: 1, wakes: 1 });
  });

  it('lease.close() of another lease is allowed inside tryPinReady', () => {
    const inner = new InMemoryBackend();
    inner.publish(makeKey(1));
    const held = inner.tryPinReady(makeKey(1), consumer(9), { readiness: 'host' }) as Lease;
    let error: unknown = null;
    const backend: ArtifactBackend = {
      tryPinReady(key, who, want) {
        try {
          held.close();
        } catch (e) {
          error = e;
        }
        return inner.tryPinReady(key, who, want);
      },
    };
    const coord = withBackend(backend);
    const woke = coord.onWake(ticketOf(coord.onWait(consumer(1), makeKey(1))));
    expect(error).toBeNull();
    expect(held.closed).toBe(true);
    expect(woke.kind).toBe('hit');
    expect(inner.pins(makeKey(1))).toBe(1);
  });

  it('a backend that throws the ERR_REENTRANT it got still leaves the coordinator usable', () => {
    let coord!: WaitCoordinator;
    coord = withBackend({
      tryPinReady() {
        coord.onWait(consumer(5), makeKey(5));
        return { kind: 'miss', reason: 'absent' };
      },
    });
    const t = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    expect(coord.onWake(t)).toEqual({ kind: 'miss', reason: 'backend-error' });
    expect(coord.onWait(consumer(5), makeKey(5)).status).toBe('queued');
    expect(coord.stats()).toMatchObject({ waiting: 1, queued: 1 });
  });
});

describe('WaitCoordinator: ERR_WRONG_THREAD', () => {
  it('every mutating method throws when called from another thread, and nothing changes', () => {
    const { coord } = setup();
    const t = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    coord.onWait(consumer(2), makeKey(2));
    const work = coord.beginNext(GRANT)!;
    const before = coord.stats();

    thread.id = 4242;
    const calls: Array<[string, () => unknown]> = [
      ['onWait', () => coord.onWait(consumer(3), makeKey(3))],
      ['onWake', () => coord.onWake(t)],
      ['onCancel', () => coord.onCancel(t)],
      ['beginNext', () => coord.beginNext(GRANT)],
      ['complete', () => coord.complete(work, { ok: true })],
      ['forget', () => coord.forget(makeKey(1))],
      ['shutdown', () => coord.shutdown()],
    ];
    for (const [name, call] of calls) expect([name, codeOf(call)]).toEqual([name, 'ERR_WRONG_THREAD']);
    thread.id = null;

    expect(coord.stats()).toEqual(before);
    expect(coord.closed).toBe(false);
    expect(work.signal.aborted).toBe(false);
    expect(coord.complete(work, { ok: true })).toBe('applied');
    expect(coord.onCancel(t)).toBe(true);
  });

  it('a coordinator created on the other thread rejects this one', () => {
    thread.id = 7;
    const { coord } = setup();
    thread.id = null;
    expect(codeOf(() => coord.onWait(consumer(1), makeKey(1)))).toBe('ERR_WRONG_THREAD');
    thread.id = 7;
    expect(coord.onWait(consumer(1), makeKey(1)).status).toBe('queued');
  });

  it('the thread check comes before argument checks', () => {
    const { coord } = setup();
    thread.id = 99;
    expect(codeOf(() => coord.onWait(null as never, null as never))).toBe('ERR_WRONG_THREAD');
    expect(codeOf(() => coord.beginNext(undefined as never))).toBe('ERR_WRONG_THREAD');
  });
});

describe('WaitCoordinator: bad input is an error, never silently accepted', () => {
  describe('constructor', () => {
    const backend = new InMemoryBackend();
    const bad: Array<[string, unknown]> = [
      ['no options', undefined],
      ['null options', null],
      ['a missing backend', { maxQueued: 1, maxWaiting: 1, historyLimit: 1 }],
      ['a backend without tryPinReady', { backend: {}, maxQueued: 1, maxWaiting: 1, historyLimit: 1 }],
      ['a backend whose tryPinReady is not a function', { backend: { tryPinReady: 1 }, maxQueued: 1, maxWaiting: 1, historyLimit: 1 }],
      ['a negative maxQueued', { backend, maxQueued: -1, maxWaiting: 1, historyLimit: 1 }],
      ['a NaN maxQueued', { backend, maxQueued: Number.NaN, maxWaiting: 1, historyLimit: 1 }],
      ['a fractional maxQueued', { backend, maxQueued: 1.5, maxWaiting: 1, historyLimit: 1 }],
      ['an infinite maxQueued', { backend, maxQueued: Infinity, maxWaiting: 1, historyLimit: 1 }],
      ['a string maxQueued', { backend, maxQueued: '4', maxWaiting: 1, historyLimit: 1 }],
      ['a negative maxWaiting', { backend, maxQueued: 1, maxWaiting: -1, historyLimit: 1 }],
      ['a NaN maxWaiting', { backend, maxQueued: 1, maxWaiting: Number.NaN, historyLimit: 1 }],
      ['a fractional maxWaiting', { backend, maxQueued: 1, maxWaiting: 0.5, historyLimit: 1 }],
      ['a negative historyLimit', { backend, maxQueued: 1, maxWaiting: 1, historyLimit: -3 }],
      ['a NaN historyLimit', { backend, maxQueued: 1, maxWaiting: 1, historyLimit: Number.NaN }],
      ['a fractional historyLimit', { backend, maxQueued: 1, maxWaiting: 1, historyLimit: 2.25 }],
      ['a non-function clock', { backend, maxQueued: 1, maxWaiting: 1, historyLimit: 1, now: 5 }],
    ];
    for (const [name, options] of bad) {
      it(`rejects ${name} with ERR_INVALID_ARGUMENT`, () => {
        expect(codeOf(() => new WaitCoordinator(options as never))).toBe('ERR_INVALID_ARGUMENT');
      });
    }

    it('accepts zero bounds', () => {
      const coord = new WaitCoordinator({ backend, maxQueued: 0, maxWaiting: 0, historyLimit: 0 });
      expect(coord.stats()).toMatchObject({ waiting: 0, queued: 0, historySize: 0 });
    });

    it('rejects an unknown option, naming it, the known ones and what came', () => {
      expect(() => new WaitCoordinator({ backend, maxQueued: 1, maxWaiting: 1, historyLimit: 1, maxWorkers: 2 } as never)).toThrow(
        expect.objectContaining({
          code: 'ERR_INVALID_ARGUMENT',
          field: 'options.maxWorkers',
          message: 'Expected `options.maxWorkers` to be absent (unknown option; known options: backend, maxQueued, maxWaiting, historyLimit, now, maxInFlight, tickets), got 2 (number)',
        }),
      );
    });

    it('rejects maxWaiting or historyLimit above 10^9, where records are Int32-numbered, and takes 10^9', () => {
      for (const field of ['maxWaiting', 'historyLimit'] as const) {
        expect(() => new WaitCoordinator({ backend, maxQueued: 1, maxWaiting: 1, historyLimit: 1, [field]: 1_000_000_001 })).toThrow(
          expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', field: `options.${field}` }),
        );
        expect(() => new WaitCoordinator({ backend, maxQueued: 1, maxWaiting: 1, historyLimit: 1, [field]: 1_000_000_000 })).not.toThrow();
      }
    });

    it('names the offending field', () => {
      try {
        new WaitCoordinator({ backend, maxQueued: -1, maxWaiting: 1, historyLimit: 1 });
        expect.unreachable();
      } catch (e) {
        expect((e as WaitprepError).field).toBe('options.maxQueued');
      }
    });
  });

  describe('onWait', () => {
    const badConsumers: Array<[string, unknown]> = [
      ['undefined', undefined],
      ['null', null],
      ['a string', 'e0/r1'],
      ['no engine', { request: 'r', generation: 0 }],
      ['an empty engine', { engine: '', request: 'r', generation: 0 }],
      ['a non-string engine', { engine: 1, request: 'r', generation: 0 }],
      ['no request', { engine: 'e', generation: 0 }],
      ['an empty request', { engine: 'e', request: '', generation: 0 }],
      ['no generation', { engine: 'e', request: 'r' }],
      ['a NaN generation', { engine: 'e', request: 'r', generation: Number.NaN }],
      ['a negative generation', { engine: 'e', request: 'r', generation: -1 }],
      ['a fractional generation', { engine: 'e', request: 'r', generation: 1.5 }],
      ['an infinite generation', { engine: 'e', request: 'r', generation: Infinity }],
      ['a string generation', { engine: 'e', request: 'r', generation: '1' }],
    ];
    for (const [name, who] of badConsumers) {
      it(`a consumer with ${name} throws ERR_INVALID_ARGUMENT and registers nothing`, () => {
        const { coord } = setup();
        const before = coord.stats();
        expect(codeOf(() => coord.onWait(who as never, makeKey(1)))).toBe('ERR_INVALID_ARGUMENT');
        // Every onWait call counts in `waits`; nothing else moves.
        expect(coord.stats()).toEqual({ ...before, waits: before.waits + 1 });
      });
    }

    const badKeys: Array<[string, unknown]> = [
      ['undefined', undefined],
      ['null', null],
      ['a hex string', makeKey(1).hex],
      ['a digest', makeKey(1).digest],
      ['a plain copy of a key', { ...makeKey(1) }],
      ['the key fields', { source: {}, codec: 'identity' }],
    ];
    for (const [name, key] of badKeys) {
      it(`a key that is ${name} throws ERR_INVALID_KEY and registers nothing`, () => {
        const { coord } = setup();
        const before = coord.stats();
        expect(codeOf(() => coord.onWait(consumer(1), key as never))).toBe('ERR_INVALID_KEY');
        expect(coord.stats()).toEqual({ ...before, waits: before.waits + 1 });
      });
    }

    it('non-object options throw ERR_INVALID_ARGUMENT', () => {
      const { coord } = setup();
      expect(codeOf(() => coord.onWait(consumer(1), makeKey(1), 'device' as never))).toBe('ERR_INVALID_ARGUMENT');
      expect(codeOf(() => coord.onWait(consumer(1), makeKey(1), null as never))).toBe('ERR_INVALID_ARGUMENT');
      expect(coord.stats().waiting).toBe(0);
    });

    it('a bad consumer does not disturb the current wait of the same request', () => {
      const { coord } = setup();
      const t = ticketOf(coord.onWait(consumer(1), makeKey(1)));
      expect(codeOf(() => coord.onWait({ engine: 'e0', request: 'r1', generation: -1 }, makeKey(2)))).toBe('ERR_INVALID_ARGUMENT');
      expect(coord.onCancel(t)).toBe(true);
    });
  });

  describe('complete', () => {
    const badOutcomes: Array<[string, unknown]> = [
      ['undefined', undefined],
      ['null', null],
      ['true', true],
      ['an empty object', {}],
      ['ok: "yes"', { ok: 'yes' }],
      ['ok: 1', { ok: 1 }],
      ['ok: false without error', { ok: false }],
    ];
    for (const [name, outcome] of badOutcomes) {
      it(`a malformed outcome (${name}) throws ERR_INVALID_ARGUMENT and the unit stays in flight`, () => {
        const { coord } = setup();
        coord.onWait(consumer(1), makeKey(1));
        const work = coord.beginNext(GRANT)!;
        const before = coord.stats();
        expect(codeOf(() => coord.complete(work, outcome as never))).toBe('ERR_INVALID_ARGUMENT');
        expect(coord.stats()).toEqual(before);
        expect(coord.complete(work, { ok: true })).toBe('applied');
      });
    }

    for (const [name, work] of [['undefined', undefined], ['null', null], ['a string id', 'wp.u0'], ['a number', 0]] as Array<[string, unknown]>) {
      it(`a non-object work (${name}) throws ERR_INVALID_ARGUMENT and changes nothing`, () => {
        const { coord } = setup();
        coord.onWait(consumer(1), makeKey(1));
        const real = coord.beginNext(GRANT)!;
        const before = coord.stats();
        expect(codeOf(() => coord.complete(work as never, { ok: true }))).toBe('ERR_INVALID_ARGUMENT');
        expect(coord.stats()).toEqual(before);
        expect(coord.complete(real, { ok: true })).toBe('applied');
      });
    }

    it('a failure with an undefined error is well-formed', () => {
      const { coord } = setup();
      coord.onWait(consumer(1), makeKey(1));
      expect(coord.complete(coord.beginNext(GRANT)!, { ok: false, error: undefined })).toBe('applied');
      expect(coord.stats().failed).toBe(1);
    });
  });

  describe('tickets and keys elsewhere', () => {
    // A bigint or safe-integer number is a stale ticket (coordinator-stale); these are no ticket at all.
    const notTickets: Array<[string, unknown]> = [
      ['undefined', undefined], ['null', null], ['a fractional number', 1.5], ['NaN', NaN], ['a number past 2^53', 2 ** 53],
      ['a boolean', true], ['a symbol', Symbol('ticket')], ['an object', {}],
    ];
    for (const [name, ticket] of notTickets) {
      it(`onWake and onCancel with ${name} throw ERR_INVALID_ARGUMENT and count nothing`, () => {
        const { coord } = setup();
        ticketOf(coord.onWait(consumer(1), makeKey(1)));
        const before = coord.stats();
        expect(codeOf(() => coord.onWake(ticket as never))).toBe('ERR_INVALID_ARGUMENT');
        expect(codeOf(() => coord.onCancel(ticket as never))).toBe('ERR_INVALID_ARGUMENT');
        expect(coord.stats()).toEqual(before);
      });
    }

    it('forget with something that is not an ArtifactKey throws ERR_INVALID_KEY', () => {
      const { coord } = setup();
      expect(codeOf(() => coord.forget(makeKey(1).hex as never))).toBe('ERR_INVALID_KEY');
      expect(codeOf(() => coord.forget(undefined as never))).toBe('ERR_INVALID_KEY');
    });
  });
});

describe('WaitCoordinator: every bound is explicit', () => {
  const backend = new InMemoryBackend();
  const code = (make: () => unknown): string | undefined => {
    try {
      make();
    } catch (error) {
      return (error as WaitprepError).code;
    }
    return undefined;
  };

  it('a missing bound is an error, not a silent default', () => {
    expect(code(() => new WaitCoordinator({ backend, maxWaiting: 1, historyLimit: 1 } as never))).toBe('ERR_INVALID_ARGUMENT');
    expect(code(() => new WaitCoordinator({ backend, maxQueued: 1, historyLimit: 1 } as never))).toBe('ERR_INVALID_ARGUMENT');
    expect(code(() => new WaitCoordinator({ backend, maxQueued: 1, maxWaiting: 1 } as never))).toBe('ERR_INVALID_ARGUMENT');
  });

  it('a misspelled option is rejected, naming it', () => {
    let error: WaitprepError | undefined;
    try {
      new WaitCoordinator({ backend, maxQueued: 1, maxWaiting: 1, historyLimit: 1, maxQueue: 1 } as never);
    } catch (caught) {
      error = caught as WaitprepError;
    }
    expect(error?.code).toBe('ERR_INVALID_ARGUMENT');
    expect(error?.field).toBe('options.maxQueue');
  });
});
