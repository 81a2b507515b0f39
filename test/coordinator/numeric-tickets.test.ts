/**
 * The `tickets: 'number'` option: a coordinator that issues safe-integer tickets behaves exactly
 * as one that issues strings, event for event, and refuses every ticket it did not issue.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { InMemoryBackend, WaitCoordinator, type WaitAdmission, type WorkUnit } from '../../lib/index.js';
import { GRANT, TARGET_A, consumer, makeKey } from '../helpers.js';

const KEYS = Array.from({ length: 6 }, (_, n) => makeKey(n));
const options = { maxQueued: 3, maxWaiting: 5, historyLimit: 2 };

type Op =
  | { op: 'wait'; r: number; gen: number; k: number; device: boolean }
  | { op: 'begin' }
  | { op: 'complete'; at: number; ok: boolean }
  | { op: 'wake' | 'cancel'; at: number }
  | { op: 'forget' | 'publish'; k: number }
  | { op: 'shutdown' };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  { arbitrary: fc.record({ op: fc.constant('wait' as const), r: fc.nat(6), gen: fc.nat(2), k: fc.nat(5), device: fc.boolean() }), weight: 8 },
  { arbitrary: fc.record({ op: fc.constant('begin' as const) }), weight: 3 },
  { arbitrary: fc.record({ op: fc.constant('complete' as const), at: fc.nat(3), ok: fc.boolean() }), weight: 3 },
  { arbitrary: fc.record({ op: fc.constantFrom('wake' as const, 'cancel' as const), at: fc.nat(20) }), weight: 6 },
  { arbitrary: fc.record({ op: fc.constantFrom('forget' as const, 'publish' as const), k: fc.nat(5) }), weight: 3 },
  { arbitrary: fc.record({ op: fc.constant('shutdown' as const) }), weight: 1 },
);

/** One coordinator and what a run has handed it: its tickets (oldest first) and issued units. */
class Side<T extends string | number> {
  readonly backend = new InMemoryBackend();
  readonly coord: WaitCoordinator<T>;
  readonly tickets: T[] = [];
  readonly works: WorkUnit[] = [];
  constructor(make: (backend: InMemoryBackend) => WaitCoordinator<T>) {
    this.coord = make(this.backend);
  }

  /** What the step returned, with tickets, work ids and leases left out: the same on both sides. */
  step(op: Op): unknown {
    const { coord } = this;
    switch (op.op) {
      case 'wait': {
        const opts = op.device ? { readiness: 'device' as const, target: TARGET_A } : undefined;
        const admission: WaitAdmission<T> = coord.onWait(consumer(op.r, op.gen), KEYS[op.k]!, opts);
        if (admission.ticket !== undefined) this.tickets.push(admission.ticket);
        return { status: admission.status, reason: admission.reason, ticketed: admission.ticket !== undefined };
      }
      case 'begin': {
        const work = coord.beginNext(GRANT);
        if (work !== null) this.works.push(work);
        return work === null ? null : { key: work.key.hex, readiness: work.readiness };
      }
      case 'complete': {
        const work = this.works[op.at % Math.max(1, this.works.length)];
        return work === undefined ? 'none' : coord.complete(work, op.ok ? { ok: true } : { ok: false, error: 'x' });
      }
      case 'wake': {
        const ticket = this.tickets[op.at % Math.max(1, this.tickets.length)];
        if (ticket === undefined) return 'none';
        const result = coord.onWake(ticket);
        if (result.kind === 'hit') result.lease.close();
        return result.kind === 'hit' ? 'hit' : result.reason;
      }
      case 'cancel': {
        const ticket = this.tickets[op.at % Math.max(1, this.tickets.length)];
        return ticket === undefined ? 'none' : coord.onCancel(ticket);
      }
      case 'forget':
        return coord.forget(KEYS[op.k]!);
      case 'publish':
        this.backend.publish(KEYS[op.k]!);
        this.backend.recordDeviceWrite(KEYS[op.k]!, TARGET_A);
        return null;
      case 'shutdown':
        return coord.shutdown().drained;
    }
  }
}

describe("WaitCoordinator with tickets: 'number'", () => {
  it('answers every call as a string-ticket coordinator does, with safe-integer tickets never issued twice', () => {
    fc.assert(
      fc.property(fc.array(opArb, { maxLength: 120 }), (ops) => {
        const strings = new Side((backend) => new WaitCoordinator({ ...options, backend }));
        const numbers = new Side((backend) => new WaitCoordinator<number>({ ...options, backend, tickets: 'number' }));
        for (const op of ops) {
          expect(numbers.step(op)).toEqual(strings.step(op));
          expect(numbers.coord.stats()).toEqual(strings.coord.stats());
        }
        expect(numbers.tickets.every((t) => Number.isSafeInteger(t))).toBe(true);
        expect(new Set(numbers.tickets).size).toBe(numbers.tickets.length);
        expect(strings.tickets.every((t) => typeof t === 'string')).toBe(true);
      }),
      { numRuns: 300 },
    );
  });
});

describe("WaitCoordinator tickets option and foreign tickets", () => {
  const backend = new InMemoryBackend();
  const make = () => new WaitCoordinator<number>({ ...options, backend, tickets: 'number' });

  it("rejects a tickets option other than 'string' or 'number'", () => {
    for (const tickets of ['numbers', 'bigint', 1, null]) {
      expect(() => new WaitCoordinator({ ...options, backend, tickets } as never)).toThrow(
        expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', field: 'options.tickets' }),
      );
    }
  });

  it('takes no ticket of another coordinator or the other form as its own, and throws for no ticket form', () => {
    const mine = make();
    const theirs = make();
    const strings = new WaitCoordinator({ ...options, backend });
    const ticket = mine.onWait(consumer(0), KEYS[0]!).ticket!;
    const foreign = theirs.onWait(consumer(0), KEYS[0]!).ticket!;
    const text = strings.onWait(consumer(0), KEYS[0]!).ticket!;
    expect(ticket).not.toBe(foreign);
    for (const stale of [foreign, text as unknown as number, String(ticket) as unknown as number, BigInt(ticket) as unknown as number, ticket + 1, 0, -ticket]) {
      expect(mine.onWake(stale)).toEqual({ kind: 'miss', reason: 'stale-ticket' });
      expect(mine.onCancel(stale)).toBe(false);
    }
    expect(strings.onWake(ticket as unknown as string)).toEqual({ kind: 'miss', reason: 'stale-ticket' });
    for (const bad of [1.5, Number.NaN, 2 ** 53, {}, null]) {
      expect(() => mine.onWake(bad as number)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', field: 'ticket' }));
    }
    expect(mine.stats()).toMatchObject({ waiting: 1, cancels: 0 });
    expect(mine.onCancel(ticket)).toBe(true);
    expect(mine.onWake(ticket)).toEqual({ kind: 'miss', reason: 'stale-ticket' });
  });

  it('publishes the numeric ticket on the wait, wake and cancel channels', () => {
    const seen: unknown[] = [];
    const listen = (message: unknown) => seen.push((message as { ticket: unknown }).ticket);
    for (const name of ['waitprep:wait', 'waitprep:wake', 'waitprep:cancel']) subscribe(name, listen);
    try {
      const coord = make();
      const a = coord.onWait(consumer(1), KEYS[1]!).ticket!;
      const b = coord.onWait(consumer(2), KEYS[2]!).ticket!;
      coord.onWake(a);
      coord.onCancel(b);
      expect(seen).toEqual([a, b, a, b]);
    } finally {
      for (const name of ['waitprep:wait', 'waitprep:wake', 'waitprep:cancel']) unsubscribe(name, listen);
    }
  });
});

describe('waits moved by the growth of the wait table', () => {
  for (const form of ['string', 'number'] as const) {
    it(`are found, replaced, cancelled and woken under their (engine, request) (${form} tickets)`, () => {
      const pinned = new Map<string, { request: string; generation: number }>();
      const coord = new WaitCoordinator<string | number>({
        backend: {
          tryPinReady: (key, consumer) => {
            pinned.set(key.hex, { request: consumer.request, generation: consumer.generation });
            return { kind: 'miss', reason: 'absent' };
          },
        },
        maxQueued: 1000,
        maxWaiting: 1000,
        historyLimit: 10,
        tickets: form,
      } as never);
      const keys = Array.from({ length: 1000 }, (_, n) => makeKey(100 + n));
      // 500 waits: the table doubles from 16 to 1,024 slots and moves waits each time.
      const first = Array.from({ length: 500 }, (_, n) => coord.onWait(consumer(n), keys[n]!).ticket!);
      // Replace every one in a scrambled order, on a new key: the map must name each moved slot.
      const order = Array.from({ length: 500 }, (_, n) => (n * 263) % 500);
      const second: (string | number)[] = [];
      for (const n of order) {
        const admission = coord.onWait(consumer(n, 1), keys[500 + n]!);
        expect(admission.status).toBe('queued');
        second[n] = admission.ticket!;
      }
      expect(coord.stats()).toMatchObject({ waiting: 500, queued: 500 });
      for (const n of order) expect(coord.onWake(first[n]!)).toEqual({ kind: 'miss', reason: 'stale-ticket' });
      for (let n = 0; n < 500; n += 5) expect(coord.onCancel(second[n]!)).toBe(true);
      for (let n = 0; n < 500; n++) {
        const woke = coord.onWake(second[n]!);
        expect(woke).toEqual({ kind: 'miss', reason: n % 5 === 0 ? 'stale-ticket' : 'absent' });
        if (n % 5 !== 0) expect(pinned.get(keys[500 + n]!.hex)).toEqual({ request: `r${n}`, generation: 1 });
      }
      expect(coord.stats()).toMatchObject({ waiting: 0, queued: 0, cancels: 100 });
    });
  }
});
