// diagnostics_channel events of WaitCoordinator: what each call publishes, in order, and that
// nothing is published (or built) while nobody subscribes.
import diagnostics_channel from 'node:diagnostics_channel';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { CHANNELS, type WaitCoordinator } from '../../lib/index.js';
import { GRANT, TARGET_A, consumer, makeKey, setup, ticketOf } from '../helpers.js';

type Event = { channel: string; message: Record<string, unknown>; waiting: number };

const unsubscribes: Array<() => void> = [];
afterEach(() => {
  for (const off of unsubscribes.splice(0)) off();
});

/** Subscribes to every channel; events land in the returned list with `waiting` as stats() said when published. */
function record(coord: WaitCoordinator): Event[] {
  const events: Event[] = [];
  for (const name of Object.values(CHANNELS)) {
    const listener = (message: unknown) => events.push({ channel: name, message: message as Record<string, unknown>, waiting: coord.stats().waiting });
    diagnostics_channel.subscribe(name, listener);
    unsubscribes.push(() => diagnostics_channel.unsubscribe(name, listener));
  }
  return events;
}

/** A sequence touching every channel; returns what each call returned, with random ids masked. */
function script(coord: WaitCoordinator, backend: ReturnType<typeof setup>['backend']) {
  const [k1, k2, k3] = [1, 2, 3].map((n) => makeKey(n));
  const a = ticketOf(coord.onWait(consumer(1), k1));
  const over = coord.onWait(consumer(2), k2);
  const rejected = coord.onWait(consumer(2), k2, { readiness: 'persisted' });
  const w1 = coord.beginNext(GRANT)!;
  const b = ticketOf(coord.onWait(consumer(3), k1));
  backend.publish(k1);
  const applied = coord.complete(w1, { ok: true });
  const stale = coord.complete(w1, { ok: true });
  const hit = coord.onWake(a);
  if (hit.kind === 'hit') hit.lease.close();
  const staleWake = coord.onWake(a);
  const cancelled = coord.onCancel(b);
  const staleCancel = coord.onCancel(b);
  const c = ticketOf(coord.onWait(consumer(4), k2, { readiness: 'device', target: TARGET_A }));
  const w2 = coord.beginNext(GRANT)!;
  coord.onCancel(c);
  const failed = coord.complete(w2, { ok: false, error: 'stopped' });
  const d = ticketOf(coord.onWait(consumer(5), k3));
  const missed = coord.onWake(d);
  const down = coord.shutdown();
  return {
    ids: { a, b, c, d, w1: w1.id, w2: w2.id, w1IssuedAt: w1.issuedAt, w2IssuedAt: w2.issuedAt },
    results: [over, rejected, applied, stale, hit.kind, staleWake, cancelled, staleCancel, failed, missed, down],
    stats: coord.stats(),
  };
}

describe('diagnostics_channel events', () => {
  it('CHANNELS names every channel under waitprep:', () => {
    expect(CHANNELS).toEqual({
      wait: 'waitprep:wait', wake: 'waitprep:wake', cancel: 'waitprep:cancel', begin: 'waitprep:begin',
      complete: 'waitprep:complete', stale: 'waitprep:stale', overload: 'waitprep:overload', shutdown: 'waitprep:shutdown',
    });
    expect(Object.isFrozen(CHANNELS)).toBe(true);
  });

  it('a scripted sequence publishes one message per event, in order, after the state changed', () => {
    const { coord, backend } = setup({ maxQueued: 1 });
    const events = record(coord);
    const { ids } = script(coord, backend);
    const [k1, k2, k3] = [1, 2, 3].map((n) => makeKey(n).hex);
    const c = (n: number) => consumer(n);
    expect(events).toEqual([
      { channel: 'waitprep:wait', waiting: 1, message: { ticket: ids.a, status: 'queued', reason: null, consumer: c(1), key: k1, readiness: 'host' } },
      { channel: 'waitprep:wait', waiting: 1, message: { ticket: null, status: 'overloaded', reason: 'queue-full', consumer: c(2), key: k2, readiness: 'host' } },
      { channel: 'waitprep:overload', waiting: 1, message: { reason: 'queue-full', consumer: c(2), key: k2, queued: 1, waiting: 1 } },
      { channel: 'waitprep:wait', waiting: 1, message: { ticket: null, status: 'rejected', reason: 'persisted-not-ready', consumer: c(2), key: k2, readiness: 'persisted' } },
      { channel: 'waitprep:begin', waiting: 1, message: { work: ids.w1, key: k1, readiness: 'host', target: null, worker: GRANT.worker, grant: GRANT.grant, issuedAt: ids.w1IssuedAt } },
      { channel: 'waitprep:wait', waiting: 2, message: { ticket: ids.b, status: 'in-flight', reason: null, consumer: c(3), key: k1, readiness: 'host' } },
      { channel: 'waitprep:complete', waiting: 2, message: { work: ids.w1, key: k1, outcome: 'completed', wasted: false, aborted: false, error: undefined } },
      { channel: 'waitprep:stale', waiting: 2, message: { call: 'complete', id: ids.w1 } },
      { channel: 'waitprep:wake', waiting: 1, message: { ticket: ids.a, result: 'hit', reason: null, key: k1, consumer: c(1), readiness: 'host' } },
      { channel: 'waitprep:wake', waiting: 1, message: { ticket: ids.a, result: 'miss', reason: 'stale-ticket', key: null, consumer: null, readiness: null } },
      { channel: 'waitprep:stale', waiting: 1, message: { call: 'onWake', id: ids.a } },
      { channel: 'waitprep:cancel', waiting: 0, message: { ticket: ids.b, key: k1, consumer: c(3) } },
      { channel: 'waitprep:stale', waiting: 0, message: { call: 'onCancel', id: ids.b } },
      { channel: 'waitprep:wait', waiting: 1, message: { ticket: ids.c, status: 'queued', reason: null, consumer: c(4), key: k2, readiness: 'device' } },
      {
        channel: 'waitprep:begin',
        waiting: 1,
        message: {
          work: ids.w2, key: k2, readiness: 'device', target: { device: 'GPU-' + TARGET_A.device.slice(4).toLowerCase(), arena: 3n, arenaGeneration: 7n },
          worker: GRANT.worker, grant: GRANT.grant, issuedAt: ids.w2IssuedAt,
        },
      },
      { channel: 'waitprep:cancel', waiting: 0, message: { ticket: ids.c, key: k2, consumer: c(4) } },
      // Its consumers all left, so the unit's signal had aborted: a failure taken as the worker's stop.
      { channel: 'waitprep:complete', waiting: 0, message: { work: ids.w2, key: k2, outcome: 'failed', wasted: false, aborted: true, error: 'stopped' } },
      { channel: 'waitprep:wait', waiting: 1, message: { ticket: ids.d, status: 'queued', reason: null, consumer: c(5), key: k3, readiness: 'host' } },
      { channel: 'waitprep:wake', waiting: 0, message: { ticket: ids.d, result: 'miss', reason: 'absent', key: k3, consumer: c(5), readiness: 'host' } },
      { channel: 'waitprep:shutdown', waiting: 0, message: { drained: true, inFlight: null, queued: 0, waiting: 0 } },
    ]);
    // One message per counter step: the channel counts agree with stats().
    const count = (name: string) => events.filter((e) => e.channel === name).length;
    const stats = coord.stats();
    expect(count(CHANNELS.wait)).toBe(Object.values(stats.waitsByStatus).reduce((x, y) => x + y, 0));
    expect(count(CHANNELS.wake)).toBe(stats.wakes);
    expect(count(CHANNELS.cancel)).toBe(stats.cancels);
    expect(count(CHANNELS.begin)).toBe(stats.issued);
    expect(count(CHANNELS.complete)).toBe(stats.completed + stats.failed);
    expect(count(CHANNELS.stale)).toBe(stats.staleEvents);
    expect(count(CHANNELS.overload)).toBe(stats.overloads);
  });

  it('a wasted success, the abort before the cancel message, shutdown with a unit in flight, and a wake after a backend error', () => {
    const { coord } = setup({ backend: { tryPinReady: () => { throw new Error('boom'); } } as never });
    const events = record(coord);
    const key = makeKey(1);
    const t = ticketOf(coord.onWait(consumer(1), key));
    const w = coord.beginNext(GRANT)!;
    let abortedAtCancel: boolean | null = null;
    diagnostics_channel.subscribe(CHANNELS.cancel, function seen() {
      abortedAtCancel = w.signal.aborted;
      diagnostics_channel.unsubscribe(CHANNELS.cancel, seen);
    });
    coord.onCancel(t);
    expect(abortedAtCancel).toBe(true);
    coord.complete(w, { ok: true });
    const u = ticketOf(coord.onWait(consumer(2), makeKey(2)));
    const w2 = coord.beginNext(GRANT)!;
    coord.shutdown();
    coord.shutdown();
    expect(coord.onWait(consumer(3), makeKey(3)).status).toBe('rejected');
    expect(coord.onWake(u)).toEqual({ kind: 'miss', reason: 'backend-error' });
    expect(events.map((e) => [e.channel, e.message])).toEqual([
      ['waitprep:wait', expect.objectContaining({ ticket: t, status: 'queued' })],
      ['waitprep:begin', expect.objectContaining({ work: w.id })],
      ['waitprep:cancel', { ticket: t, key: key.hex, consumer: consumer(1) }],
      ['waitprep:complete', { work: w.id, key: key.hex, outcome: 'completed', wasted: true, aborted: true, error: undefined }],
      ['waitprep:wait', expect.objectContaining({ ticket: u, status: 'queued' })],
      ['waitprep:begin', expect.objectContaining({ work: w2.id })],
      ['waitprep:shutdown', { drained: false, inFlight: w2.id, queued: 0, waiting: 1 }],
      ['waitprep:shutdown', { drained: false, inFlight: w2.id, queued: 0, waiting: 1 }],
      ['waitprep:wait', { ticket: null, status: 'rejected', reason: 'shutdown', consumer: consumer(3), key: makeKey(3).hex, readiness: 'host' }],
      ['waitprep:wake', { ticket: u, result: 'miss', reason: 'backend-error', key: makeKey(2).hex, consumer: consumer(2), readiness: 'host' }],
    ]);
  });

  it('a number or bigint ticket is stale and published as passed', () => {
    const { coord } = setup();
    const events = record(coord);
    coord.onWake(7n as never);
    coord.onCancel(7 as never);
    expect(events.map((e) => [e.channel, e.message])).toEqual([
      ['waitprep:wake', { ticket: 7n, result: 'miss', reason: 'stale-ticket', key: null, consumer: null, readiness: null }],
      ['waitprep:stale', { call: 'onWake', id: 7n }],
      ['waitprep:stale', { call: 'onCancel', id: 7 }],
    ]);
  });

  it('a subscriber may call back into the coordinator: messages come after the call left its state consistent', () => {
    const { coord } = setup();
    const requeued: string[] = [];
    const onWake = (message: unknown) => {
      const { consumer: who } = message as { consumer: { request: string } | null };
      if (who !== null) requeued.push(coord.onWait({ engine: 'e1', request: who.request, generation: 0 }, makeKey(9)).status);
    };
    diagnostics_channel.subscribe(CHANNELS.wake, onWake);
    unsubscribes.push(() => diagnostics_channel.unsubscribe(CHANNELS.wake, onWake));
    coord.onWake(ticketOf(coord.onWait(consumer(1), makeKey(1))));
    coord.onWake(ticketOf(coord.onWait(consumer(2), makeKey(1))));
    expect(requeued).toEqual(['queued', 'joined']);
    expect(coord.stats()).toMatchObject({ waiting: 2, queued: 1, wakes: 2 });
  });
});

describe('diagnostics_channel without subscribers', () => {
  it('publishes nothing and behaves the same as with subscribers', () => {
    for (const name of Object.values(CHANNELS)) expect(diagnostics_channel.hasSubscribers(name)).toBe(false);
    const publish = vi.spyOn(diagnostics_channel.Channel.prototype, 'publish');
    try {
      const quiet = setup({ maxQueued: 1 });
      const without = script(quiet.coord, quiet.backend);
      expect(publish).not.toHaveBeenCalled();
      // The spy does see a publish on a channel nobody listens to, so the silence above is the guard's.
      diagnostics_channel.channel(CHANNELS.wait).publish({ probe: true });
      expect(publish).toHaveBeenCalledTimes(1);
      publish.mockClear();

      const loud = setup({ maxQueued: 1 });
      const events = record(loud.coord);
      const withSubscribers = script(loud.coord, loud.backend);
      expect(events.length).toBe(20);
      // Same results and stats either way (tickets and work ids are random per coordinator).
      const mask = (run: typeof without) => JSON.stringify(run.results, (_, v) => (typeof v === 'string' && v.startsWith('wp') ? 'id' : typeof v === 'bigint' ? String(v) : v));
      expect(mask(withSubscribers)).toBe(mask(without));
      expect(withSubscribers.stats).toEqual(without.stats);
    } finally {
      publish.mockRestore();
    }
  });
});
