/**
 * Model-based property test of WaitCoordinator + InMemoryBackend (the coordinator's contract: docs/coordinator.md).
 *
 * Random command sequences run against the real coordinator and against a small reference model
 * written here with plain arrays and maps (no linked lists, no counters derived from the
 * implementation). After every command the test checks that results, stats, bounds, abort
 * signals, tickets and backend pins agree with the model.
 *
 * Model design:
 * - `waits`: Map ticket -> { slot, generation, key, want, id }; a unit's consumers are found by scanning it.
 * - `queue`: array of dedup ids (key + readiness + target), FIFO; `inFlight`: the one issued unit or null.
 * - `history`: array of { id, outcome }, oldest first, trimmed to historyLimit.
 * - backend: per key { ready, deviceRecord } plus the list of open leases; pins = open leases on that key.
 * - every rule is the coordinator's documented contract (bounds after the swap, all-or-nothing replacement, …).
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import {
  artifactKey,
  InMemoryBackend,
  WaitCoordinator,
  type ArtifactKey,
  type CoordinatorStats,
  type DeviceTarget,
  type Lease,
  type WaitStatus,
  type WorkUnit,
} from '../../lib/index.js';

// ---------------------------------------------------------------------------------------------
// Fixtures

const GRANT = Object.freeze({ worker: 'model-worker', grant: 'model-grant' });
const GPU_A = 'GPU-5e1f0c2a-1b3d-4e5f-8a9b-0c1d2e3f4a5b';
const GPU_B = 'GPU-00000000-1111-4222-8333-444444444444';
/** Device targets the waits use: 0 and 1 differ only in arena generation. */
const D0: DeviceTarget = Object.freeze({ device: GPU_A, arena: 3, arenaGeneration: 7 });
/** The same target as D0, spelled differently (upper-case UUID, bigint fields): same dedup identity. */
const D0_ALT: DeviceTarget = Object.freeze({ device: 'GPU-' + GPU_A.slice(4).toUpperCase(), arena: 3n, arenaGeneration: 7n });
const D1: DeviceTarget = Object.freeze({ device: GPU_A, arena: 3, arenaGeneration: 8 });
/** Only ever written as a device record: another GPU. */
const D2: DeviceTarget = Object.freeze({ device: GPU_B, arena: 3, arenaGeneration: 7 });
/** Record targets by index, and which model target each one is (2 = another device). */
const RECORD_TARGETS: ReadonlyArray<[DeviceTarget, 0 | 1 | 2]> = [[D0, 0], [D1, 1], [D2, 2], [D0_ALT, 0]];

const KEYS: ArtifactKey[] = Array.from({ length: 6 }, (_, n) =>
  artifactKey({
    source: {
      snapshotKind: 'kv-page',
      runtime: 'model-test',
      model: 'tiny',
      adapter: 'none',
      profile: 'default',
      positionPolicy: 'absolute',
      // Two tasks over the same text: identical tokens under different tasks are different keys.
      task: n % 2 === 0 ? 'task-a' : 'task-b',
      namespace: 'ns',
      tokenLayout: [7, 7, Math.floor(n / 2)],
    },
    sourcePageGeneration: 0,
    codec: 'identity',
    codecConfig: 'v0',
    representationVersion: 1,
  }),
);

// ---------------------------------------------------------------------------------------------
// Commands (plain data, so fast-check prints and shrinks them readably)

type Readiness = 'host' | 'host-default' | 'd0' | 'd0alt' | 'd1' | 'persisted' | 'device-no-target' | 'device-bad-target' | 'bogus';
type Cmd =
  | { op: 'wait'; e: number; r: number; gd: number; k: number; rd: Readiness }
  | { op: 'beginNext'; lazy: boolean }
  | { op: 'peek' }
  | { op: 'complete'; how: 'ok' | 'fail' | 'stale' | 'forged' | 'foreign'; pick: number }
  | { op: 'wake'; how: 'current' | 'stale' | 'foreign' | 'bogus' | 'bigint'; pick: number }
  | { op: 'cancel'; how: 'current' | 'stale' | 'foreign'; pick: number }
  | { op: 'forget'; k: number }
  | { op: 'publish'; k: number }
  | { op: 'markPreparing'; k: number }
  | { op: 'recordDevice'; k: number; t: number }
  | { op: 'evict'; k: number }
  | { op: 'close'; pick: number; again: boolean }
  | { op: 'shutdown' };

const w = <T>(arbitrary: fc.Arbitrary<T>, weight: number) => ({ arbitrary, weight });
const pick = fc.nat(1000);
const cmdArb: fc.Arbitrary<Cmd> = fc.oneof(
  w(
    fc.record({
      op: fc.constant('wait' as const),
      e: fc.nat(3),
      r: fc.nat(3),
      // Generation relative to the last one this (engine, request) used: mostly same or up, sometimes down.
      gd: fc.oneof(w(fc.constant(0), 4), w(fc.constant(1), 3), w(fc.constant(-1), 2), w(fc.constant(-2), 1)),
      k: fc.nat(5),
      rd: fc.oneof(
        w(fc.constant<Readiness>('host'), 16),
        w(fc.constant<Readiness>('host-default'), 6),
        w(fc.constant<Readiness>('d0'), 3),
        w(fc.constant<Readiness>('d0alt'), 1),
        w(fc.constant<Readiness>('d1'), 3),
        w(fc.constant<Readiness>('persisted'), 1),
        w(fc.constant<Readiness>('device-no-target'), 1),
        w(fc.constant<Readiness>('device-bad-target'), 1),
        w(fc.constant<Readiness>('bogus'), 1),
      ),
    }),
    150,
  ),
  // lazy: the worker does not read `signal` at once (it must still report an abort that came before).
  w(fc.record({ op: fc.constant('beginNext' as const), lazy: fc.oneof(w(fc.constant(false), 2), w(fc.constant(true), 1)) }), 50),
  w(fc.constant({ op: 'peek' as const }), 10),
  w(
    fc.record({
      op: fc.constant('complete' as const),
      how: fc.oneof(
        w(fc.constant('ok' as const), 5),
        w(fc.constant('fail' as const), 2),
        w(fc.constant('stale' as const), 2),
        w(fc.constant('forged' as const), 1),
        w(fc.constant('foreign' as const), 1),
      ),
      pick,
    }),
    50,
  ),
  w(
    fc.record({
      op: fc.constant('wake' as const),
      how: fc.oneof(
        w(fc.constant('current' as const), 12),
        w(fc.constant('stale' as const), 4),
        w(fc.constant('foreign' as const), 1),
        w(fc.constant('bogus' as const), 1),
        w(fc.constant('bigint' as const), 1),
      ),
      pick,
    }),
    80,
  ),
  w(
    fc.record({
      op: fc.constant('cancel' as const),
      how: fc.oneof(w(fc.constant('current' as const), 4), w(fc.constant('stale' as const), 2), w(fc.constant('foreign' as const), 1)),
      pick,
    }),
    30,
  ),
  w(fc.record({ op: fc.constant('forget' as const), k: fc.nat(5) }), 20),
  w(fc.record({ op: fc.constant('publish' as const), k: fc.nat(5) }), 40),
  w(fc.record({ op: fc.constant('markPreparing' as const), k: fc.nat(5) }), 10),
  w(fc.record({ op: fc.constant('recordDevice' as const), k: fc.nat(5), t: fc.nat(3) }), 15),
  w(fc.record({ op: fc.constant('evict' as const), k: fc.nat(5) }), 20),
  w(fc.record({ op: fc.constant('close' as const), pick, again: fc.oneof(w(fc.constant(false), 5), w(fc.constant(true), 1)) }), 30),
  w(fc.constant({ op: 'shutdown' as const }), 1),
);

const configArb = fc.record({
  maxQueued: fc.integer({ min: 2, max: 4 }),
  maxWaiting: fc.integer({ min: 4, max: 8 }),
  historyLimit: fc.integer({ min: 0, max: 3 }),
  engines: fc.integer({ min: 3, max: 4 }),
  requests: fc.integer({ min: 3, max: 4 }),
  keys: fc.integer({ min: 4, max: 6 }),
});
type Config = { maxQueued: number; maxWaiting: number; historyLimit: number; engines: number; requests: number; keys: number };

// ---------------------------------------------------------------------------------------------
// The reference model

type Want = { readiness: 'host' } | { readiness: 'device'; t: 0 | 1 };
interface MWait {
  ticket: string;
  slot: string;
  engine: string;
  request: string;
  generation: number;
  k: number;
  want: Want;
  id: string;
}
interface MInFlight {
  id: string;
  k: number;
  want: Want;
  work: WorkUnit;
  aborted: boolean;
  /** The test has read `work.signal` and listens for its abort. */
  observed: boolean;
}
interface MEntry {
  ready: boolean;
  record: 0 | 1 | 2 | null;
}

function idOf(k: number, want: Want): string {
  return want.readiness === 'host' ? `k${k}` : `k${k}/d${want.t}`;
}

class Model {
  closed = false;
  readonly waits = new Map<string, MWait>();
  readonly bySlot = new Map<string, string>();
  queue: Array<{ id: string; k: number; want: Want }> = [];
  inFlight: MInFlight | null = null;
  history: Array<{ id: string; outcome: 'completed' | 'failed' }> = [];
  readonly entries = new Map<number, MEntry>();
  openLeases: Array<{ lease: Lease; k: number }> = [];
  abortsFired = 0;
  readonly c = {
    waits: 0, joins: 0, issued: 0, completed: 0, failed: 0, wasted: 0, wakes: 0, hits: 0,
    cancels: 0, staleEvents: 0, overloads: 0, rejected: 0,
  };
  readonly waitsByStatus: Record<WaitStatus, number> = {
    queued: 0, joined: 0, 'in-flight': 0, completed: 0, failed: 0, overloaded: 0, rejected: 0,
  };
  readonly misses = new Map<string, number>();

  constructor(readonly cfg: Config) {}

  waitersOf(id: string): number {
    let n = 0;
    for (const wt of this.waits.values()) if (wt.id === id) n++;
    return n;
  }

  miss(reason: string): void {
    this.misses.set(reason, (this.misses.get(reason) ?? 0) + 1);
  }

  /** A consumer leaves (wake, cancel, replacement). Its unit loses it; the last one out drops or aborts it. */
  leave(wt: MWait): void {
    this.waits.delete(wt.ticket);
    if (this.bySlot.get(wt.slot) === wt.ticket) this.bySlot.delete(wt.slot);
    if (this.waitersOf(wt.id) > 0) return;
    this.queue = this.queue.filter((q) => q.id !== wt.id);
    if (this.inFlight !== null && this.inFlight.id === wt.id && !this.inFlight.aborted) {
      this.inFlight.aborted = true;
      if (this.inFlight.observed) this.abortsFired++;
    }
  }

  /** What onWait must answer (before any state change). */
  admit(slot: string, generation: number, k: number, rd: Readiness): { status: string; reason?: string; want?: Want } {
    if (this.closed) return { status: 'rejected' };
    let want: Want;
    switch (rd) {
      case 'host':
      case 'host-default':
        want = { readiness: 'host' };
        break;
      case 'd0':
      case 'd0alt':
        want = { readiness: 'device', t: 0 };
        break;
      case 'd1':
        want = { readiness: 'device', t: 1 };
        break;
      default:
        return { status: 'rejected' };
    }
    const oldTicket = this.bySlot.get(slot);
    const old = oldTicket === undefined ? undefined : this.waits.get(oldTicket)!;
    if (old !== undefined && generation < old.generation) return { status: 'rejected', reason: 'stale-generation' };
    const id = idOf(k, want);
    let status: string;
    if (this.queue.some((q) => q.id === id)) status = 'joined';
    else if (this.inFlight?.id === id) status = 'in-flight';
    else status = this.history.find((h) => h.id === id)?.outcome ?? 'queued';
    // Bounds as they would stand after the swap (inclusive).
    const waitingAfter = this.waits.size + (old === undefined ? 1 : 0);
    if (waitingAfter > this.cfg.maxWaiting) return { status: 'overloaded' };
    if (status === 'queued') {
      const freesOne = old !== undefined && this.queue.some((q) => q.id === old.id) && this.waitersOf(old.id) === 1;
      if (this.queue.length + 1 - (freesOne ? 1 : 0) > this.cfg.maxQueued) return { status: 'overloaded' };
    }
    return { status, want };
  }

  /** Applies an admitted wait under the ticket the coordinator issued. */
  applyAdmit(slot: string, engine: string, request: string, generation: number, k: number, want: Want, status: string, ticket: string): void {
    const id = idOf(k, want);
    if (status === 'queued') this.queue.push({ id, k, want });
    if (status === 'joined' || status === 'in-flight') this.c.joins++;
    const oldTicket = this.bySlot.get(slot);
    const wt: MWait = { ticket, slot, engine, request, generation, k, want, id };
    this.waits.set(ticket, wt);
    this.bySlot.set(slot, ticket);
    if (oldTicket !== undefined) this.leave(this.waits.get(oldTicket)!);
  }

  remember(id: string, outcome: 'completed' | 'failed'): void {
    if (this.cfg.historyLimit === 0) return;
    this.history = this.history.filter((h) => h.id !== id);
    this.history.push({ id, outcome });
    while (this.history.length > this.cfg.historyLimit) this.history.shift();
  }

  /** The backend's answer to a pin (InMemoryBackend's documented miss reasons). */
  pinResult(k: number, want: Want): { hit: true } | { hit: false; reason: string } {
    const e = this.entries.get(k);
    if (e === undefined) return { hit: false, reason: 'absent' };
    if (!e.ready) return { hit: false, reason: 'preparing' };
    if (want.readiness === 'device') {
      if (e.record === null) return { hit: false, reason: 'no-device-record' };
      if (e.record === 2) return { hit: false, reason: 'device-mismatch' };
      if (e.record !== want.t) return { hit: false, reason: 'arena-generation-mismatch' };
    }
    return { hit: true };
  }

  pins(k: number): number {
    return this.openLeases.filter((l) => l.k === k).length;
  }

  stats(): CoordinatorStats {
    return {
      ...this.c,
      queued: this.queue.length,
      inFlight: this.inFlight === null ? 0 : 1,
      misses: Object.fromEntries(this.misses),
      waitsByStatus: { ...this.waitsByStatus },
      waiting: this.waits.size,
      historySize: this.history.length,
    };
  }
}

// ---------------------------------------------------------------------------------------------
// The harness: one run = one coordinator, one backend, one model

const seenTickets = new Set<string | bigint>();
const seenWorkIds = new Set<string>();

const NON_STALE_FIELDS = ['waits', 'joins', 'queued', 'inFlight', 'issued', 'completed', 'failed', 'wasted', 'hits', 'cancels', 'overloads', 'rejected', 'waiting', 'historySize'] as const;

class Run {
  readonly backend = new InMemoryBackend();
  readonly coord: WaitCoordinator;
  readonly model: Model;
  readonly lastGen = new Map<string, number>();
  readonly allTickets: string[] = [];
  readonly works: Array<{ work: WorkUnit; abortEvents: number; finalAborted: boolean | null }> = [];
  readonly closedLeases: Lease[] = [];
  readonly abortLog: Array<Pick<CoordinatorStats, 'waiting' | 'queued' | 'inFlight' | 'historySize'>> = [];
  readonly foreignTicket: string;
  readonly foreignWork: WorkUnit;

  constructor(readonly cfg: Config) {
    this.coord = new WaitCoordinator({ backend: this.backend, maxQueued: cfg.maxQueued, maxWaiting: cfg.maxWaiting, historyLimit: cfg.historyLimit });
    this.model = new Model(cfg);
    // Another coordinator over the same backend: its tickets and work are foreign here.
    const other = new WaitCoordinator({ backend: this.backend, maxQueued: 4, maxWaiting: 4, historyLimit: 1 });
    const adm = other.onWait({ engine: 'e0', request: 'r0', generation: 0 }, KEYS[0]!);
    expect(adm.status).toBe('queued');
    this.foreignTicket = adm.ticket as string;
    this.foreignWork = other.beginNext(GRANT)!;
    expect(this.foreignWork).not.toBeNull();
    other.shutdown();
  }

  key(k: number): ArtifactKey {
    return KEYS[k]!;
  }

  step(cmd: Cmd): void {
    const { model, coord, backend, cfg } = this;
    const abortsBefore = this.abortLog.length;
    switch (cmd.op) {
      case 'wait': {
        const engine = `e${cmd.e % cfg.engines}`;
        const request = `r${cmd.r % cfg.requests}`;
        const slot = `${engine}|${request}`;
        const generation = Math.max(0, (this.lastGen.get(slot) ?? 0) + cmd.gd);
        this.lastGen.set(slot, generation);
        const k = cmd.k % cfg.keys;
        const opts = {
          host: { readiness: 'host' },
          'host-default': undefined,
          d0: { readiness: 'device', target: D0 },
          d0alt: { readiness: 'device', target: D0_ALT },
          d1: { readiness: 'device', target: D1 },
          persisted: { readiness: 'persisted' },
          'device-no-target': { readiness: 'device' },
          'device-bad-target': { readiness: 'device', target: { device: 'not-a-gpu', arena: 1, arenaGeneration: 1 } },
          bogus: { readiness: 'warm-ish' },
        }[cmd.rd] as Parameters<WaitCoordinator['onWait']>[2];
        const expected = model.admit(slot, generation, k, cmd.rd);
        model.c.waits++;
        const adm = coord.onWait({ engine, request, generation }, this.key(k), opts);
        expect(adm.status).toBe(expected.status);
        model.waitsByStatus[expected.status as WaitStatus]++;
        if (expected.status === 'rejected' || expected.status === 'overloaded') {
          expect(adm.ticket).toBeUndefined();
          expect(typeof adm.reason === 'string' && adm.reason.length > 0).toBe(true);
          if (expected.reason !== undefined) expect(adm.reason).toBe(expected.reason);
          if (expected.status === 'rejected') model.c.rejected++;
          else model.c.overloads++;
          break;
        }
        const ticket = adm.ticket;
        expect(typeof ticket === 'string' || typeof ticket === 'bigint').toBe(true);
        expect(seenTickets.has(ticket!)).toBe(false);
        seenTickets.add(ticket!);
        this.allTickets.push(ticket!);
        model.applyAdmit(slot, engine, request, generation, k, expected.want!, expected.status, ticket!);
        break;
      }
      case 'beginNext': {
        const busy = model.inFlight !== null;
        const work = coord.beginNext(GRANT);
        if (model.closed || busy || model.queue.length === 0) {
          expect(work).toBeNull();
          break;
        }
        expect(work).not.toBeNull();
        const head = model.queue.shift()!;
        model.c.issued++;
        expect(work!.key.equals(this.key(head.k))).toBe(true);
        expect(work!.readiness).toBe(head.want.readiness);
        if (head.want.readiness === 'host') {
          expect(work!.target).toBeNull();
        } else {
          const t = head.want.t === 0 ? D0 : D1;
          expect(work!.target!.device.toLowerCase()).toBe(t.device.toLowerCase());
          expect(BigInt(work!.target!.arena)).toBe(BigInt(t.arena));
          expect(BigInt(work!.target!.arenaGeneration)).toBe(BigInt(t.arenaGeneration));
        }
        expect(seenWorkIds.has(work!.id)).toBe(false);
        seenWorkIds.add(work!.id);
        this.works.push({ work: work!, abortEvents: 0, finalAborted: null });
        model.inFlight = { id: head.id, k: head.k, want: head.want, work: work!, aborted: false, observed: false };
        if (!cmd.lazy) this.observe();
        // At most one unit in flight: a second beginNext is null and changes nothing.
        const before = coord.stats();
        expect(coord.beginNext(GRANT)).toBeNull();
        expect(coord.stats()).toEqual(before);
        break;
      }
      case 'peek': {
        if (model.inFlight !== null && !model.inFlight.observed) this.observe();
        break;
      }
      case 'complete': {
        const current = model.inFlight;
        if ((cmd.how === 'ok' || cmd.how === 'fail') && current !== null) {
          const outcome = cmd.how === 'ok' ? { ok: true as const } : { ok: false as const, error: new Error('prep failed') };
          expect(coord.complete(current.work, outcome)).toBe('applied');
          model.inFlight = null;
          const rec = this.works.find((r) => r.work === current.work)!;
          rec.finalAborted = current.aborted;
          if (cmd.how === 'ok') {
            model.c.completed++;
            if (model.waitersOf(current.id) === 0) model.c.wasted++;
          } else {
            model.c.failed++;
          }
          // A unit whose consumers all left (aborted) and then fails stopped at
          // its safe boundary: no 'failed' history (docs/coordinator.md).
          if (cmd.how === 'ok' || !current.aborted) model.remember(current.id, cmd.how === 'ok' ? 'completed' : 'failed');
          break;
        }
        let work: WorkUnit;
        const old = this.works.filter((r) => r.work !== current?.work);
        if (cmd.how === 'foreign') work = this.foreignWork;
        else if (cmd.how === 'forged' || old.length === 0) {
          work = { id: `forged-${cmd.pick}`, key: this.key(0), readiness: 'host', target: null, grant: GRANT, signal: new AbortController().signal };
        } else work = old[cmd.pick % old.length]!.work;
        this.stale(() => expect(coord.complete(work, cmd.pick % 2 === 0 ? { ok: true } : { ok: false, error: 'x' })).toBe('stale'), false);
        break;
      }
      case 'wake': {
        const current = [...model.waits.values()];
        if (cmd.how === 'current' && current.length > 0) {
          const wt = current[cmd.pick % current.length]!;
          const callsBefore = backend.calls;
          model.c.wakes++;
          model.leave(wt);
          const expected = model.pinResult(wt.k, wt.want);
          const res = coord.onWake(wt.ticket);
          expect(backend.calls).toBe(callsBefore + 1);
          if (expected.hit) {
            expect(res.kind).toBe('hit');
            const lease = (res as { kind: 'hit'; lease: Lease }).lease;
            expect(lease.key.equals(this.key(wt.k))).toBe(true);
            expect(lease.readiness).toBe(wt.want.readiness);
            expect(lease.consumer).toMatchObject({ engine: wt.engine, request: wt.request, generation: wt.generation });
            expect(lease.closed).toBe(false);
            model.c.hits++;
            model.openLeases.push({ lease, k: wt.k });
          } else {
            expect(res).toEqual({ kind: 'miss', reason: expected.reason });
            model.miss(expected.reason);
          }
          break;
        }
        const ticket = this.staleTicket(cmd.how, cmd.pick);
        this.stale(() => expect(coord.onWake(ticket as string)).toEqual({ kind: 'miss', reason: 'stale-ticket' }), true);
        break;
      }
      case 'cancel': {
        const current = [...model.waits.values()];
        if (cmd.how === 'current' && current.length > 0) {
          const wt = current[cmd.pick % current.length]!;
          model.leave(wt);
          model.c.cancels++;
          expect(coord.onCancel(wt.ticket)).toBe(true);
          break;
        }
        const ticket = this.staleTicket(cmd.how, cmd.pick);
        this.stale(() => expect(coord.onCancel(ticket as string)).toBe(false), false);
        break;
      }
      case 'forget': {
        const k = cmd.k % cfg.keys;
        const ids = [idOf(k, { readiness: 'host' }), idOf(k, { readiness: 'device', t: 0 }), idOf(k, { readiness: 'device', t: 1 })];
        const busy = ids.some((id) => model.waitersOf(id) > 0 || model.queue.some((q) => q.id === id) || model.inFlight?.id === id);
        let expected = false;
        if (!busy) {
          const n = model.history.length;
          model.history = model.history.filter((h) => !ids.includes(h.id));
          expected = model.history.length < n;
        }
        expect(coord.forget(this.key(k))).toBe(expected);
        break;
      }
      case 'publish':
      case 'markPreparing': {
        const k = cmd.k % cfg.keys;
        const fn = () => (cmd.op === 'publish' ? backend.publish(this.key(k), { size: k }) : backend.markPreparing(this.key(k)));
        if (model.pins(k) > 0) {
          expect(fn).toThrow();
        } else {
          fn();
          model.entries.set(k, { ready: cmd.op === 'publish', record: null });
        }
        break;
      }
      case 'recordDevice': {
        const k = cmd.k % cfg.keys;
        const [target, t] = RECORD_TARGETS[cmd.t % RECORD_TARGETS.length]!;
        const e = model.entries.get(k);
        if (e === undefined) {
          expect(() => backend.recordDeviceWrite(this.key(k), target)).toThrow();
        } else {
          backend.recordDeviceWrite(this.key(k), target);
          e.record = t;
        }
        break;
      }
      case 'evict': {
        const k = cmd.k % cfg.keys;
        const pinned = model.pins(k) > 0;
        const expected = pinned ? 'pinned' : model.entries.has(k) ? 'evicted' : 'absent';
        expect(backend.pins(this.key(k)) > 0).toBe(pinned);
        const got = backend.evict(this.key(k));
        expect(got).toBe(expected);
        if (pinned) expect(got).not.toBe('evicted');
        if (got === 'evicted') model.entries.delete(k);
        break;
      }
      case 'close': {
        if (cmd.again && this.closedLeases.length > 0) {
          const lease = this.closedLeases[cmd.pick % this.closedLeases.length]!;
          lease.close(); // idempotent: releases nothing the second time
          expect(lease.closed).toBe(true);
          break;
        }
        if (model.openLeases.length === 0) break;
        const [{ lease }] = model.openLeases.splice(cmd.pick % model.openLeases.length, 1);
        lease!.close();
        expect(lease!.closed).toBe(true);
        this.closedLeases.push(lease!);
        break;
      }
      case 'shutdown': {
        model.closed = true;
        const r = coord.shutdown();
        expect(r.drained).toBe(model.inFlight === null);
        expect(r.inFlight?.id ?? null).toBe(model.inFlight?.work.id ?? null);
        break;
      }
    }
    this.check(abortsBefore);
  }

  /** First read of the in-flight unit's signal: it says what the model says, then we listen. */
  observe(): void {
    const mf = this.model.inFlight!;
    const rec = this.works.find((r) => r.work === mf.work)!;
    expect(mf.work.signal.aborted).toBe(mf.aborted);
    mf.observed = true;
    mf.work.signal.addEventListener('abort', () => {
      rec.abortEvents++;
      const s = this.coord.stats();
      this.abortLog.push({ waiting: s.waiting, queued: s.queued, inFlight: s.inFlight, historySize: s.historySize });
    });
  }

  staleTicket(how: string, p: number): string | bigint {
    if (how === 'foreign') return this.foreignTicket;
    if (how === 'bigint') return BigInt(p);
    const old = this.allTickets.filter((t) => !this.model.waits.has(t));
    if (how === 'bogus' || old.length === 0) return `bogus-${p}`;
    return old[p % old.length]!;
  }

  /** A stale event: only staleEvents (and for wakes: wakes, misses['stale-ticket']) change. */
  stale(call: () => void, isWake: boolean): void {
    const before = this.coord.stats();
    const callsBefore = this.backend.calls;
    const leasesBefore = this.backend.leasesOpen;
    call();
    const after = this.coord.stats();
    for (const f of NON_STALE_FIELDS) expect(after[f], f).toBe(before[f]);
    expect(after.staleEvents).toBe(before.staleEvents + 1);
    const missesBefore = { ...before.misses };
    if (isWake) {
      expect(after.wakes).toBe(before.wakes + 1);
      missesBefore['stale-ticket'] = (missesBefore['stale-ticket'] ?? 0) + 1;
    } else {
      expect(after.wakes).toBe(before.wakes);
    }
    expect(after.misses).toEqual(missesBefore);
    expect(this.backend.calls).toBe(callsBefore);
    expect(this.backend.leasesOpen).toBe(leasesBefore);
    this.model.c.staleEvents++;
    if (isWake) {
      this.model.c.wakes++;
      this.model.miss('stale-ticket');
    }
  }

  check(abortsBefore: number): void {
    const { model, coord, backend, cfg } = this;
    const s = coord.stats();
    expect(s).toEqual(model.stats());
    expect(s.queued).toBeLessThanOrEqual(cfg.maxQueued);
    expect(s.waiting).toBeLessThanOrEqual(cfg.maxWaiting);
    expect(s.historySize).toBeLessThanOrEqual(cfg.historyLimit);
    expect(s.inFlight).toBeLessThanOrEqual(1);
    // Abort signals: fired exactly when the model says, once, synchronously within the call,
    // with the coordinator already consistent (the listener saw the final gauges).
    expect(this.abortLog.length).toBe(model.abortsFired);
    for (const snap of this.abortLog.slice(abortsBefore)) {
      expect(snap).toEqual({ waiting: s.waiting, queued: s.queued, inFlight: s.inFlight, historySize: s.historySize });
    }
    for (const rec of this.works) {
      expect(rec.abortEvents).toBeLessThanOrEqual(1);
      if (rec.finalAborted !== null) expect(rec.work.signal.aborted).toBe(rec.finalAborted);
    }
    if (model.inFlight?.observed) expect(model.inFlight.work.signal.aborted).toBe(model.inFlight.aborted);
    // Pins balanced with the leases the model knows to be open.
    expect(backend.leasesOpen).toBe(model.openLeases.length);
    for (let k = 0; k < cfg.keys; k++) expect(backend.pins(this.key(k)), `pins(k${k})`).toBe(model.pins(k));
  }

  /** End of run: issue what is left in FIFO order, wake everyone, close every lease. */
  finish(): void {
    const { model } = this;
    while (!model.closed && (model.inFlight !== null || model.queue.length > 0)) {
      this.step(model.inFlight !== null ? { op: 'complete', how: 'ok', pick: 0 } : { op: 'beginNext', lazy: false });
    }
    while (model.waits.size > 0) this.step({ op: 'wake', how: 'current', pick: 0 });
    if (model.inFlight !== null) this.step({ op: 'complete', how: 'ok', pick: 0 });
    while (model.openLeases.length > 0) this.step({ op: 'close', pick: 0, again: false });
    const s = this.coord.stats();
    expect(s.waiting).toBe(0);
    expect(s.queued).toBe(0);
    expect(s.inFlight).toBe(0);
    expect(this.backend.leasesOpen).toBe(0);
    for (const key of KEYS) {
      expect(this.backend.pins(key)).toBe(0);
      expect(this.backend.evict(key)).not.toBe('pinned');
    }
  }
}

// ---------------------------------------------------------------------------------------------

describe('WaitCoordinator against a reference model', () => {
  it('agrees with the model after every command of random sequences', () => {
    const NUM_RUNS = 200;
    let total = 0;
    let hits = 0;
    let aborts = 0;
    let overloads = 0;
    let shutdowns = 0;
    fc.assert(
      fc.property(configArb, // Lengths spread over 0..250 (mean ~125); no minimum, so a failure shrinks to a short sequence.
      fc.array(cmdArb, { maxLength: 250, size: 'max' }), (cfg, cmds) => {
        const run = new Run(cfg);
        for (const cmd of cmds) run.step(cmd);
        run.finish();
        total += cmds.length;
        const s = run.coord.stats();
        hits += s.hits;
        overloads += s.overloads;
        aborts += run.model.abortsFired;
        if (run.model.closed) shutdowns++;
      }),
      { numRuns: NUM_RUNS },
    );
    expect(total).toBeGreaterThanOrEqual(10_000);
    // The sequences reach the interesting states, not just the easy ones.
    expect(hits).toBeGreaterThan(0);
    expect(aborts).toBeGreaterThan(0);
    expect(overloads).toBeGreaterThan(0);
    expect(shutdowns).toBeGreaterThan(0);
  });
});
