/**
 * The coordinator's record stores (docs/coordinator.md § Layout): the demand table and its
 * open-addressing identity index, and the wait slots with the tickets that name them. Checked
 * against plain Maps over random sequences, with every identity forced onto one hash so that
 * every lookup walks a collision run, and through growth, reuse and the bounds.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { normalizeTarget } from '../../lib/lease-table/device-target.js';
import { DemandTable, NONE } from '../../lib/coordinator/demand-table.js';
import { HOST } from '../../lib/internal/host.js';
import { WaitSlots, firstTicketNumber } from '../../lib/coordinator/wait-slots.js';
import type { ArtifactKey, Consumer, ReadinessRequest } from '../../lib/index.js';
import { GRANT, TARGET_A, TARGET_B, consumer as consumerOf, makeKey, setup, ticketOf } from '../helpers.js';

const device = (target: unknown): ReadinessRequest => Object.freeze({ readiness: 'device', target: normalizeTarget(target)! });
const RANDOM = new Uint8Array(11).fill(5);

/** Every identity gets the same hash: each lookup must tell them apart by the whole identity. */
class OneHash extends DemandTable {
  override hash(): number {
    return 0x12345678;
  }
}

/** Identities: 8 keys, each as host and under two device targets. */
const KEYS: ArtifactKey[] = Array.from({ length: 8 }, (_, n) => makeKey(n));
const WANTS: ReadinessRequest[] = [HOST, device(TARGET_A), device(TARGET_B)];
const identity = (k: number, w: number): [ArtifactKey, ReadinessRequest] => [KEYS[k]!, WANTS[w]!];

function checkAgainst(table: DemandTable, model: Map<string, number>): void {
  expect(table.count).toBe(model.size);
  for (let k = 0; k < KEYS.length; k++) {
    for (let w = 0; w < WANTS.length; w++) {
      const [key, want] = identity(k, w);
      const found = table.find(table.hash(key, want), key, want);
      const expected = model.get(`${k}/${w}`) ?? NONE;
      expect(found).toBe(expected);
      if (found !== NONE) {
        expect(table.key(found)).toBe(key);
        expect(table.want(found)).toBe(want);
        expect(table.isDevice(found)).toBe(w !== 0);
      }
    }
  }
}

describe('DemandTable', () => {
  for (const [name, make] of [
    ['one hash for every identity', () => new OneHash(1000, 0)],
    ['its own hash', () => new DemandTable(1000, 0x2468ace)],
  ] as const) {
    it(`finds each identity as itself, through adds and removes in any order (${name})`, () => {
      fc.assert(
        fc.property(fc.array(fc.tuple(fc.nat(KEYS.length - 1), fc.nat(WANTS.length - 1)), { maxLength: 120, size: 'max' }), (ops) => {
          const table: DemandTable = make();
          const model = new Map<string, number>();
          for (const [k, w] of ops) {
            const id = `${k}/${w}`;
            const [key, want] = identity(k, w);
            const had = model.get(id);
            if (had === undefined) model.set(id, table.add(table.hash(key, want), key, want));
            else {
              table.remove(had);
              model.delete(id);
            }
            checkAgainst(table, model);
          }
        }),
        { numRuns: 150 },
      );
    });
  }

  it('keys of equal digest and readiness are one identity; another target or readiness is another', () => {
    const table = new DemandTable(100, 1);
    const a = makeKey(1);
    const same = makeKey(1);
    const d = table.add(table.hash(a, HOST), a, HOST);
    expect(table.find(table.hash(same, HOST), same, HOST)).toBe(d);
    const spelled = device({ ...TARGET_A, device: TARGET_A.device.toUpperCase(), arena: 3n });
    const dA = table.add(table.hash(a, device(TARGET_A)), a, device(TARGET_A));
    expect(dA).not.toBe(d);
    expect(table.find(table.hash(a, spelled), a, spelled)).toBe(dA);
    expect(table.find(table.hash(a, device(TARGET_B)), a, device(TARGET_B))).toBe(NONE);
  });

  it('grows its records and index as demands arrive, reuses freed records, and keeps every link and field', () => {
    const keys = Array.from({ length: 3000 }, (_, n) => makeKey(n, { namespace: 'growth' }));
    const table = new DemandTable(10_000, 7);
    const ids = keys.map((key, n) => {
      const demand = table.add(table.hash(key, HOST), key, HOST);
      table.addWaiting(demand, n);
      table.setPrev(demand, n - 1);
      table.setNext(demand, n + 1);
      table.setState(demand, (n % 3) as 0 | 1 | 2);
      table.setOutcome(demand, (n % 3) as 0 | 1 | 2);
      return demand;
    });
    expect(new Set(ids).size).toBe(keys.length);
    keys.forEach((key, n) => {
      const demand = table.find(table.hash(key, HOST), key, HOST);
      expect(demand).toBe(ids[n]);
      expect([table.waiting(demand), table.prev(demand), table.next(demand), table.state(demand), table.outcome(demand)])
        .toEqual([n, n - 1, n + 1, n % 3, n % 3]);
    });
    for (let n = 0; n < keys.length; n += 2) table.remove(ids[n]!);
    expect(table.count).toBe(keys.length / 2);
    keys.forEach((key, n) => expect(table.find(table.hash(key, HOST), key, HOST)).toBe(n % 2 === 0 ? NONE : ids[n]));
    // Freed records are taken again before any new one, and come back clean.
    const again = keys.filter((_, n) => n % 2 === 0).map((key) => table.add(table.hash(key, HOST), key, HOST));
    expect(new Set(again)).toEqual(new Set(ids.filter((_, n) => n % 2 === 0)));
    for (const demand of again) {
      expect([table.waiting(demand), table.prev(demand), table.next(demand), table.state(demand), table.outcome(demand)]).toEqual([0, NONE, NONE, 0, 0]);
    }
  });

  it('holds at most its limit of demands', () => {
    const table = new DemandTable(20, 3);
    for (let n = 0; n < 20; n++) table.add(table.hash(makeKey(n), HOST), makeKey(n), HOST);
    expect(() => table.add(table.hash(makeKey(99), HOST), makeKey(99), HOST)).toThrow(RangeError);
  });
});

describe('WaitSlots and tickets', () => {
  /** A table; `add` admits a consumer as the coordinator does, and `slotOf` finds its wait by (engine, request). */
  const tracked = (limit: number, first = 1) => {
    const slots = new WaitSlots(limit, RANDOM, first, 99);
    const add = (c: Consumer, demand: number) => slots.add(c, demand, slots.requestHash(c.engine, c.request));
    const slotOf = (c: Consumer) => slots.findRequest(slots.requestHash(c.engine, c.request), c.engine, c.request);
    return { slots, add, slotOf };
  };
  const waiter = (n: number, engine = 'e'): Consumer => Object.freeze({ engine, request: `r${n}`, generation: 0 });

  it('issues a fresh number and flat ticket per wait, found until freed, through growth and skips', () => {
    // A start in the middle of a turn of the table, so that each doubling moves many waits.
    const first = firstTicketNumber(Uint8Array.of(0, 0, 0, 0, 0x01, 0x37));
    const { slots, add, slotOf } = tracked(300, first);
    const numbers: number[] = [];
    const live = new Map<Consumer, { ticket: string; number: number; at: number }>();
    const admit = (n: number) => {
      // Two engines with the same request names: each (engine, request) is its own wait.
      const c = waiter(n >> 1, n % 2 === 0 ? 'e' : 'f');
      expect(slotOf(c)).toBe(NONE);
      const slot = add(c, n);
      expect(slotOf(c)).toBe(slot);
      const ticket = slots.ticket(slot);
      const number = slots.number(slot);
      expect(ticket).toMatch(/^wp[0-9A-Za-z_-]{20}$/);
      expect(Number.isSafeInteger(number) && number > 2 ** 31).toBe(true);
      expect(slots.demand(slot)).toBe(n);
      numbers.push(number);
      live.set(c, { ticket, number, at: slot });
      return c;
    };
    const release = (c: Consumer) => {
      const { ticket, number } = live.get(c)!;
      slots.remove(slotOf(c));
      live.delete(c);
      expect(slots.find(ticket)).toBe(-1);
      expect(slots.findNumber(number)).toBe(-1);
      expect(slotOf(c)).toBe(NONE);
    };
    const checkLive = () => {
      for (const [c, { ticket, number }] of live) {
        const slot = slotOf(c);
        expect(slot).not.toBe(NONE);
        expect(slots.find(ticket)).toBe(slot);
        expect(slots.findNumber(number)).toBe(slot);
        expect(slots.consumer(slot)).toBe(c);
      }
    };
    // Grow to 300 live waits (the table doubles from 16 to 1,024 slots, moving waits), then churn with a
    // few long-lived ones kept, so numbers wrap the table and skip their slots.
    for (let n = 0; n < 300; n++) admit(n);
    checkLive();
    expect([...live].filter(([c, { at }]) => slotOf(c) !== at).length).toBeGreaterThan(100);
    let n = 300;
    for (const c of [...live.keys()]) if (slotOf(c) % 4 !== 0) release(c);
    const kept = new Set(live.keys());
    checkLive();
    const churn: Consumer[] = [];
    for (let round = 0; round < 3000; round++) {
      churn.push(admit(n++));
      if (churn.length > 40) release(churn.shift()!);
      if (round % 250 === 0) checkLive();
    }
    expect([...kept].every((c) => live.has(c))).toBe(true);
    checkLive();
    // Numbers only grow, none twice, and some were skipped for a taken slot.
    expect(numbers.every((number, at) => at === 0 || number > numbers[at - 1]!)).toBe(true);
    expect(numbers[numbers.length - 1]! - numbers[0]! + 1).toBeGreaterThan(numbers.length);
  });

  /** Every (engine, request) gets the same hash: each lookup must tell them apart by the strings. */
  class OneRequestHash extends WaitSlots {
    override requestHash(): number {
      return -0x1234567;
    }
  }
  // Engines and requests whose joins agree ('ab' + 'c', 'a' + 'bc'), so only the pair tells them apart.
  const PAIRS: [string, string][] = [['a', 'bc'], ['ab', 'c'], ['a', 'b'], ['b', 'a'], ['e0', 'r1'], ['e1', 'r1'], ['e0', 'r\u00e9'], ['e0', 'r\u00e9\u0301']];
  for (const [name, make] of [
    ['one hash for every request', () => new OneRequestHash(1000, RANDOM, 1, 0)],
    ['its own hash', () => new WaitSlots(1000, RANDOM, 1, 0x2468ace)],
  ] as const) {
    it(`finds each (engine, request) as itself, through adds, removes and growth in any order (${name})`, () => {
      let most = 0;
      fc.assert(
        // size 'max': fast-check would otherwise draw at most about 10 operations, too few to grow the table.
        fc.property(fc.array(fc.tuple(fc.nat(PAIRS.length - 1), fc.nat(40)), { maxLength: 400, size: 'max' }), (ops) => {
          const slots: WaitSlots = make();
          const model = new Map<string, Consumer>();
          const slotOf = ([engine, request]: [string, string]) => slots.findRequest(slots.requestHash(engine, request), engine, request);
          for (const [p, n] of ops) {
            // 8 pairs times 41 request suffixes: up to 328 live waits; the runs reach past 128 (checked
            // below), so the table doubles from 16 to at least 512 slots, its index rebuilt each time.
            const pair: [string, string] = [PAIRS[p]![0], `${PAIRS[p]![1]}#${n}`];
            const id = JSON.stringify(pair);
            const had = model.get(id);
            if (had === undefined) {
              const c = Object.freeze({ engine: pair[0], request: pair[1], generation: 0 });
              const slot = slots.add(c, n, slots.requestHash(c.engine, c.request));
              model.set(id, c);
              most = Math.max(most, model.size);
              expect(slotOf(pair)).toBe(slot);
            } else {
              slots.remove(slotOf(pair));
              model.delete(id);
              expect(slotOf(pair)).toBe(NONE);
            }
          }
          for (let p = 0; p < PAIRS.length; p++) {
            for (let n = 0; n <= 40; n++) {
              const pair: [string, string] = [PAIRS[p]![0], `${PAIRS[p]![1]}#${n}`];
              const c = model.get(JSON.stringify(pair));
              const slot = slotOf(pair);
              if (c === undefined) expect(slot).toBe(NONE);
              else expect(slots.consumer(slot)).toBe(c);
            }
          }
        }),
        { numRuns: 100 },
      );
      expect(most).toBeGreaterThan(128);
    });
  }

  it('hashes the engine and the request apart, with the seed', () => {
    const slots = new WaitSlots(16, RANDOM, 1, 7);
    expect(slots.requestHash('ab', 'c')).not.toBe(slots.requestHash('a', 'bc'));
    expect(slots.requestHash('e', 'r')).toBe(slots.requestHash('e', 'r'));
    expect(new WaitSlots(16, RANDOM, 1, 8).requestHash('e', 'r')).not.toBe(slots.requestHash('e', 'r'));
  });

  it('reads ticket numbers up to 2^53 exactly, refuses every other spelling, and stops at 2^53', () => {
    const { slots, add } = tracked(1 << 20, 2 ** 53 - 3);
    const taken = [0, 1, 2].map((n) => add(waiter(n), 0));
    const tickets = taken.map((slot) => slots.ticket(slot));
    expect(taken.map((slot) => slots.number(slot))).toEqual([2 ** 53 - 3, 2 ** 53 - 2, 2 ** 53 - 1]);
    tickets.forEach((ticket, at) => expect(slots.find(ticket)).toBe(taken[at]));
    expect(() => add(waiter(3), 0)).toThrow(/exhausted/);
    // One live wait left, so no changed spelling can be another live wait's ticket.
    slots.remove(taken[0]!);
    slots.remove(taken[1]!);
    const ticket = tickets[2]!;
    const change = (at: number, to: string) => ticket.slice(0, at) + to + ticket.slice(at + 1);
    for (let at = 0; at < ticket.length; at++) {
      for (const to of ['0', 'z', '.', '\u00e9', '\u2603']) {
        if (to !== ticket[at]) expect(slots.find(change(at, to))).toBe(-1);
      }
    }
    for (const bad of ['', ticket.slice(1), `${ticket}0`, ticket.toUpperCase(), ticket.toLowerCase()]) {
      if (bad !== ticket) expect(slots.find(bad)).toBe(-1);
    }
    for (const bad of [0, -1, 2 ** 53 - 4, 2 ** 53 - 3, 2 ** 53 - 1 - 16]) expect(slots.findNumber(bad)).toBe(-1);
    expect(slots.findNumber(2 ** 53 - 1)).toBe(taken[2]);
    // Another coordinator's random part: the same number is not this one's string ticket.
    const other = new WaitSlots(1 << 20, new Uint8Array(11).fill(6), 2 ** 53 - 3, 99);
    expect(slots.find(other.ticket(other.add(waiter(0), 0, 0)))).toBe(-1);
  });

  it('stops at 2^53 even when the slots of the last numbers are taken, and says so before', () => {
    const { slots, add, slotOf } = tracked(64, 2 ** 53 - 16);
    const kept = waiter(0);
    add(kept, 0);
    expect(slots.number(slotOf(kept))).toBe(2 ** 53 - 16);
    // 15 more numbers, each freed again: 2^53 - 1 is the last, and the next turn meets the kept wait.
    for (let n = 1; n < 16; n++) slots.remove(add(waiter(n), n));
    expect(slots.exhausted()).toBe(true);
    expect(() => add(waiter(16), 16)).toThrow(/exhausted/);
    expect(slots.consumer(slotOf(kept))).toBe(kept);
    expect(new WaitSlots(64, RANDOM, firstTicketNumber(new Uint8Array(6).fill(0xff)), 99).exhausted()).toBe(false);
  });

  it('starts each coordinator at 2^31 plus 48 random bits', () => {
    expect(firstTicketNumber(new Uint8Array(6))).toBe(2 ** 31);
    expect(firstTicketNumber(new Uint8Array(6).fill(0xff))).toBe(2 ** 31 + 2 ** 48 - 1);
    expect(firstTicketNumber(Uint8Array.of(1, 0, 0, 0, 0, 2))).toBe(2 ** 31 + 2 ** 40 + 2);
  });

  it('holds its limit of waits and no more, and takes a wait again once one is freed', () => {
    const { slots, add, slotOf } = tracked(40);
    const waiters = Array.from({ length: 40 }, (_, n) => waiter(n));
    for (const c of waiters) add(c, 0);
    expect(new Set(waiters.map(slotOf)).size).toBe(40);
    expect(() => add(waiter(40), 0)).toThrow(RangeError);
    slots.remove(slotOf(waiters[7]!));
    const again = add(waiter(41), 0);
    expect(slots.consumer(again)).toEqual(waiter(41));
    expect(slotOf(waiters[7]!)).toBe(NONE);
    for (const c of waiters) if (c !== waiters[7]) expect(slots.consumer(slotOf(c))).toBe(c);
  });
});

describe('WaitCoordinator over grown stores', () => {
  it('holds its worst case of demands: maxWaiting + maxInFlight + historyLimit + 1', () => {
    const { coord, backend } = setup({ maxQueued: 2, maxWaiting: 2, historyLimit: 1, maxInFlight: 2 });
    // One history entry.
    const first = ticketOf(coord.onWait(consumerOf(0), makeKey(0)));
    const done = coord.beginNext(GRANT)!;
    backend.publish(done.key);
    coord.complete(done, { ok: true });
    const woke = coord.onWake(first);
    if (woke.kind === 'hit') woke.lease.close();
    // Two units in flight whose consumers all left (they drain, still demands).
    const leaving = [1, 2].map((n) => ticketOf(coord.onWait(consumerOf(n), makeKey(n))));
    expect([coord.beginNext(GRANT), coord.beginNext(GRANT)].every((w) => w !== null)).toBe(true);
    for (const ticket of leaving) expect(coord.onCancel(ticket)).toBe(true);
    // Two queued units, then a replacement that makes its new unit before its old wait leaves.
    expect([3, 4].map((n) => coord.onWait(consumerOf(n), makeKey(n)).status)).toEqual(['queued', 'queued']);
    expect(coord.onWait(consumerOf(3, 1), makeKey(5)).status).toBe('queued');
    expect(coord.stats()).toMatchObject({ waiting: 2, queued: 2, inFlight: 2, historySize: 1 });
  });

  it('keeps thousands of waits, units and history entries apart through growth and reuse', () => {
    const keys = Array.from({ length: 1500 }, (_, n) => makeKey(n, { namespace: 'many' }));
    const { coord, backend } = setup({ maxQueued: 2000, maxWaiting: 4000, historyLimit: 300 });
    // Two consumers per key: one unit each, joined once.
    const waits = keys.flatMap((key, n) => [0, 1].map((j) => ({ key, ticket: ticketOf(coord.onWait(consumerOf(`${n}-${j}`), key)) })));
    expect(coord.stats()).toMatchObject({ waiting: 3000, queued: 1500, joins: 1500 });
    // The first 500 units are prepared in FIFO order and published; 300 stay in history.
    for (let n = 0; n < 500; n++) {
      const work = coord.beginNext(GRANT)!;
      expect(work.key).toBe(keys[n]);
      backend.publish(work.key);
      expect(coord.complete(work, { ok: true })).toBe('applied');
    }
    expect(coord.stats()).toMatchObject({ queued: 1000, completed: 500, historySize: 300 });
    // Wake every consumer in a scrambled order: prepared keys hit, the rest miss, each once.
    const order = waits.map((_, i) => (i * 7919) % waits.length);
    expect(new Set(order).size).toBe(waits.length);
    for (const i of order) {
      const { key, ticket } = waits[i]!;
      const wake = coord.onWake(ticket);
      const prepared = keys.indexOf(key) < 500;
      expect(wake.kind).toBe(prepared ? 'hit' : 'miss');
      if (wake.kind === 'hit') {
        expect(wake.lease.key.equals(key)).toBe(true);
        wake.lease.close();
      }
      expect(coord.onWake(ticket)).toEqual({ kind: 'miss', reason: 'stale-ticket' });
    }
    expect(coord.stats()).toMatchObject({ waiting: 0, queued: 0, hits: 1000, historySize: 300 });
    // Freed slots and records are reused: a new round of waits behaves as the first did.
    const again = keys.slice(0, 400).map((key, n) => ({ key, admission: coord.onWait(consumerOf(`again-${n}`), key) }));
    again.forEach(({ admission }, n) => expect(admission.status).toBe(n >= 200 ? 'completed' : 'queued'));
    expect(coord.stats()).toMatchObject({ waiting: 400, queued: 200 });
  });
});
