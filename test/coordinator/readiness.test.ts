import { describe, expect, it } from 'vitest';
import type { ArtifactBackend, ReadinessRequest, WaitOptions } from '../../lib/index.js';
import { GRANT, TARGET_A, TARGET_B, consumer, makeKey, setup, ticketOf, withBackend } from '../helpers.js';

/** Asserts a rejected admission that registered nothing. */
function expectRejected(opts: unknown, reason?: string) {
  const { coord } = setup();
  const before = coord.stats();
  const admission = coord.onWait(consumer(1), makeKey(1), opts as WaitOptions);
  expect(admission.status).toBe('rejected');
  expect(admission.ticket).toBeUndefined();
  expect(typeof admission.reason).toBe('string');
  if (reason !== undefined) expect(admission.reason).toBe(reason);
  expect(coord.stats()).toEqual({
    ...before,
    waits: before.waits + 1,
    rejected: before.rejected + 1,
    waitsByStatus: { ...before.waitsByStatus, rejected: before.waitsByStatus.rejected + 1 },
  });
  expect(coord.beginNext(GRANT)).toBeNull();
}

describe('WaitCoordinator: readiness', () => {
  it('host is the default readiness', () => {
    const { coord } = setup();
    expect(coord.onWait(consumer(1), makeKey(1)).status).toBe('queued');
    expect(coord.onWait(consumer(2), makeKey(1), { readiness: 'host' }).status).toBe('joined');
    expect(coord.onWait(consumer(3), makeKey(1), {}).status).toBe('joined');
    expect(coord.beginNext(GRANT)!.readiness).toBe('host');
  });

  it("'persisted' is always rejected: a file on disk is not a ready artifact", () => {
    expectRejected({ readiness: 'persisted' });
    expectRejected({ readiness: 'persisted', target: TARGET_A });
  });

  it('an unknown readiness is rejected', () => {
    expectRejected({ readiness: 'gpu' });
    expectRejected({ readiness: 'HOST' });
    expectRejected({ readiness: '' });
    expectRejected({ readiness: 7 });
  });

  it("'device' without a target is rejected missing-target", () => {
    expectRejected({ readiness: 'device' }, 'missing-target');
  });

  const badTargets: Array<[string, unknown]> = [
    ['a UUID without the GPU- prefix', { ...TARGET_A, device: TARGET_A.device.slice(4) }],
    ['a short UUID', { ...TARGET_A, device: 'GPU-5e1f0c2a-1b3d-4e5f-8a9b-0c1d2e3f4a5' }],
    ['a UUID with a non-hex digit', { ...TARGET_A, device: 'GPU-5e1f0c2a-1b3d-4e5f-8a9b-0c1d2e3f4a5g' }],
    ['a device index instead of a UUID', { ...TARGET_A, device: '0' }],
    ['an empty device', { ...TARGET_A, device: '' }],
    ['a missing device', { arena: 1, arenaGeneration: 1 }],
    ['a negative arena', { ...TARGET_A, arena: -1 }],
    ['a negative bigint arena', { ...TARGET_A, arena: -1n }],
    ['a NaN arena', { ...TARGET_A, arena: Number.NaN }],
    ['a fractional arena', { ...TARGET_A, arena: 1.5 }],
    ['an infinite arena', { ...TARGET_A, arena: Infinity }],
    ['a string arena', { ...TARGET_A, arena: '3' }],
    ['a missing arena', { device: TARGET_A.device, arenaGeneration: 1 }],
    ['a NaN arena generation', { ...TARGET_A, arenaGeneration: Number.NaN }],
    ['a negative arena generation', { ...TARGET_A, arenaGeneration: -2 }],
    ['an arena generation past u64', { ...TARGET_A, arenaGeneration: 1n << 64n }],
    ['a missing arena generation', { device: TARGET_A.device, arena: 1 }],
    ['a non-object target', 'GPU-5e1f0c2a-1b3d-4e5f-8a9b-0c1d2e3f4a5b'],
    ['a null target', null],
  ];
  for (const [name, target] of badTargets) {
    it(`'device' with ${name} is rejected invalid-target`, () => {
      expectRejected({ readiness: 'device', target }, 'invalid-target');
    });
  }

  it('a rejected readiness leaves a current wait of the same request untouched', () => {
    const { coord } = setup();
    const t = ticketOf(coord.onWait(consumer(1), makeKey(1)));
    expect(coord.onWait(consumer(1, 1), makeKey(2), { readiness: 'persisted' }).status).toBe('rejected');
    expect(coord.onWait(consumer(1, 1), makeKey(2), { readiness: 'device' }).status).toBe('rejected');
    expect(coord.onWait(consumer(1, 1), makeKey(2), { readiness: 'device', target: { ...TARGET_A, arena: -1 } }).status).toBe('rejected');
    expect(coord.stats()).toMatchObject({ waiting: 1, queued: 1, rejected: 3 });
    expect(coord.onCancel(t)).toBe(true);
  });

  it('a well-formed device wait is accepted and its target reaches the backend', () => {
    const seen: ReadinessRequest[] = [];
    const backend: ArtifactBackend = {
      tryPinReady: (_key, _consumer, want) => {
        seen.push(want);
        return { kind: 'miss', reason: 'no-device-record' };
      },
    };
    const coord = withBackend(backend);
    const admission = coord.onWait(consumer(1), makeKey(1), { readiness: 'device', target: TARGET_A });
    expect(admission.status).toBe('queued');
    expect(coord.onWake(ticketOf(admission))).toEqual({ kind: 'miss', reason: 'no-device-record' });
    expect(seen).toHaveLength(1);
    const want = seen[0]!;
    expect(want.readiness).toBe('device');
    if (want.readiness !== 'device') return;
    expect(want.target.device.toLowerCase()).toBe(TARGET_A.device.toLowerCase());
    expect(BigInt(want.target.arena)).toBe(BigInt(TARGET_A.arena));
    expect(BigInt(want.target.arenaGeneration)).toBe(BigInt(TARGET_A.arenaGeneration));
  });

  it('a device wake hits only when the backend holds a completed device write for that target', () => {
    const { coord, backend } = setup();
    const key = makeKey(1);
    const wait = (n: number, target = TARGET_A) => ticketOf(coord.onWait(consumer(n), key, { readiness: 'device', target }));

    expect(coord.onWake(wait(1))).toEqual({ kind: 'miss', reason: 'absent' });
    backend.publish(key);
    expect(coord.onWake(wait(2))).toEqual({ kind: 'miss', reason: 'no-device-record' });
    backend.recordDeviceWrite(key, TARGET_B);
    expect(coord.onWake(wait(3))).toEqual({ kind: 'miss', reason: 'arena-generation-mismatch' });
    backend.recordDeviceWrite(key, TARGET_A);
    expect(coord.onWake(wait(4, { ...TARGET_A, arena: 9 }))).toEqual({ kind: 'miss', reason: 'device-mismatch' });

    const woke = coord.onWake(wait(5));
    expect(woke.kind).toBe('hit');
    if (woke.kind !== 'hit') return;
    expect(woke.lease.readiness).toBe('device');
    expect(woke.lease.key.equals(key)).toBe(true);
    expect(backend.pins(key)).toBe(1);
    woke.lease.close();
    expect(backend.pins(key)).toBe(0);
  });

  it('a host wait on a key with a device record still pins as host', () => {
    const { coord, backend } = setup();
    const key = makeKey(1);
    backend.publish(key);
    backend.recordDeviceWrite(key, TARGET_A);
    const woke = coord.onWake(ticketOf(coord.onWait(consumer(1), key)));
    expect(woke.kind).toBe('hit');
    if (woke.kind === 'hit') {
      expect(woke.lease.readiness).toBe('host');
      woke.lease.close();
    }
  });

  it('a host wait carrying a target is rejected invalid-target, not silently treated as either', () => {
    expectRejected({ readiness: 'host', target: TARGET_A }, 'invalid-target');
    expectRejected({ target: TARGET_A }, 'invalid-target');
  });
});
