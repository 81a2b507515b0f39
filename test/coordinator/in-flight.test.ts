/**
 * The opt-in `maxInFlight` option (docs/coordinator.md § Options), checked the way
 * test/coordinator/model.test.ts checks the rest: random command sequences run against the real
 * coordinator and a small reference model written with plain arrays, compared after every step.
 *
 * Model: `waits` (agent -> key), `queue` (keys, FIFO, dedup by key), `flight` (issued units in
 * issue order: key, work, aborted), `history` (key -> outcome; historyLimit exceeds the longest
 * sequence, so nothing is trimmed). Host readiness only: device identities are covered by the
 * model test and do not interact with how many units fly at once.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { artifactKey, InMemoryBackend, WaitCoordinator, type ArtifactKey, type WorkUnit } from '../../lib/index.js';

const GRANT = Object.freeze({ worker: 'w', grant: 'g' });
const KEYS: ArtifactKey[] = Array.from({ length: 5 }, (_, n) =>
  artifactKey({
    source: { snapshotKind: 'kv-page', runtime: 'in-flight-test', model: 'tiny', adapter: 'none', profile: 'default',
      positionPolicy: 'absolute', task: 't', namespace: 'ns', tokenLayout: [n] },
    sourcePageGeneration: 0, codec: 'identity', codecConfig: 'v0', representationVersion: 1,
  }),
);

type Cmd =
  | { op: 'wait'; agent: number; k: number }
  | { op: 'wake'; agent: number }
  | { op: 'cancel'; agent: number }
  | { op: 'begin' }
  | { op: 'complete'; pick: number; ok: boolean };

const cmdArb: fc.Arbitrary<Cmd> = fc.oneof(
  { arbitrary: fc.record({ op: fc.constant('wait' as const), agent: fc.nat(5), k: fc.nat(4) }), weight: 5 },
  { arbitrary: fc.record({ op: fc.constant('wake' as const), agent: fc.nat(5) }), weight: 2 },
  { arbitrary: fc.record({ op: fc.constant('cancel' as const), agent: fc.nat(5) }), weight: 1 },
  { arbitrary: fc.constant({ op: 'begin' as const }), weight: 4 },
  { arbitrary: fc.record({ op: fc.constant('complete' as const), pick: fc.nat(100), ok: fc.boolean() }), weight: 3 },
);

function runSequence(maxInFlight: number, cmds: Cmd[]): void {
  const backend = new InMemoryBackend();
  const coord = new WaitCoordinator({ backend, maxQueued: 100, maxWaiting: 100, historyLimit: 1000, maxInFlight });
  const waits = new Map<number, { k: number; ticket: string; generation: number }>();
  const queue: number[] = [];
  const flight: Array<{ k: number; work: WorkUnit; aborted: boolean }> = [];
  const history = new Map<number, 'completed' | 'failed'>();
  const generations = new Map<number, number>();
  const waitersOf = (k: number) => [...waits.values()].filter((w) => w.k === k).length;
  const leave = (agent: number) => {
    const k = waits.get(agent)!.k;
    waits.delete(agent);
    if (waitersOf(k) > 0) return;
    const at = queue.indexOf(k);
    if (at >= 0) queue.splice(at, 1);
    const unit = flight.find((f) => f.k === k);
    if (unit !== undefined) unit.aborted = true;
  };

  for (const cmd of cmds) {
    switch (cmd.op) {
      case 'wait': {
        const generation = (generations.get(cmd.agent) ?? 0) + 1;
        generations.set(cmd.agent, generation);
        const expected = queue.includes(cmd.k) ? 'joined' : flight.some((f) => f.k === cmd.k) ? 'in-flight' : history.get(cmd.k) ?? 'queued';
        const admission = coord.onWait({ engine: 'e', request: `r${cmd.agent}`, generation }, KEYS[cmd.k]!);
        expect(admission.status).toBe(expected);
        // Join the new identity before the old wait leaves, as the coordinator does.
        if (expected === 'queued') queue.push(cmd.k);
        const old = waits.get(cmd.agent);
        waits.set(cmd.agent, { k: cmd.k, ticket: admission.ticket!, generation });
        if (old !== undefined && old.k !== cmd.k && waitersOf(old.k) === 0) {
          const at = queue.indexOf(old.k);
          if (at >= 0) queue.splice(at, 1);
          const unit = flight.find((f) => f.k === old.k);
          if (unit !== undefined) unit.aborted = true;
        }
        break;
      }
      case 'wake':
      case 'cancel': {
        const current = waits.get(cmd.agent);
        if (current === undefined) break;
        leave(cmd.agent);
        if (cmd.op === 'wake') expect(coord.onWake(current.ticket).kind).toBe('miss');
        else expect(coord.onCancel(current.ticket)).toBe(true);
        break;
      }
      case 'begin': {
        const work = coord.beginNext(GRANT);
        if (flight.length >= maxInFlight || queue.length === 0) {
          expect(work).toBeNull();
          break;
        }
        // FIFO: the queue's head, whatever else is in flight.
        const k = queue.shift()!;
        expect(work?.key.equals(KEYS[k]!)).toBe(true);
        flight.push({ k, work: work!, aborted: false });
        break;
      }
      case 'complete': {
        if (flight.length === 0) break;
        // Any unit in flight may finish first, not only the oldest.
        const [unit] = flight.splice(cmd.pick % flight.length, 1);
        expect(coord.complete(unit!.work, cmd.ok ? { ok: true } : { ok: false, error: new Error('x') })).toBe('applied');
        expect(coord.complete(unit!.work, { ok: true })).toBe('stale');
        if (cmd.ok) history.set(unit!.k, 'completed');
        else if (!unit!.aborted) history.set(unit!.k, 'failed');
        else history.delete(unit!.k);
        break;
      }
    }
    const s = coord.stats();
    expect(s.inFlight).toBe(flight.length);
    expect(s.inFlight).toBeLessThanOrEqual(maxInFlight);
    expect(s.queued).toBe(queue.length);
    expect(s.waiting).toBe(waits.size);
    expect(coord.inFlight?.id ?? null).toBe(flight[0]?.work.id ?? null);
    for (const f of flight) expect(f.work.signal.aborted).toBe(f.aborted);
  }
  const closing = coord.shutdown();
  expect(closing.drained).toBe(flight.length === 0);
  expect(closing.inFlight?.id ?? null).toBe(flight[0]?.work.id ?? null);
}

describe('WaitCoordinator maxInFlight', () => {
  it.each([1, 2, 4, 8])('agrees with the model with maxInFlight %i', (k) => {
    fc.assert(fc.property(fc.array(cmdArb, { maxLength: 80 }), (cmds) => runSequence(k, cmds)), { numRuns: 150 });
  });

  it('defaults to one unit in flight', () => {
    const coord = new WaitCoordinator({ backend: new InMemoryBackend(), maxQueued: 4, maxWaiting: 4, historyLimit: 4 });
    coord.onWait({ engine: 'e', request: 'a', generation: 0 }, KEYS[0]!);
    coord.onWait({ engine: 'e', request: 'b', generation: 0 }, KEYS[1]!);
    expect(coord.beginNext(GRANT)).not.toBeNull();
    expect(coord.beginNext(GRANT)).toBeNull();
    expect(coord.stats().inFlight).toBe(1);
  });

  it('rejects a maxInFlight that is not an integer in [1, 1024]', () => {
    for (const bad of [0, -1, 1.5, 1025, '2', Number.NaN]) {
      expect(() => new WaitCoordinator({ backend: new InMemoryBackend(), maxQueued: 1, maxWaiting: 1, historyLimit: 1, maxInFlight: bad as number }))
        .toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT' }));
    }
  });
});
