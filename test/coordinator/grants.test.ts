import { describe, expect, it } from 'vitest';
import { WaitprepError } from '../../lib/index.js';
import { GRANT, TARGET_A, consumer, makeKey, setup } from '../helpers.js';

function expectGrantRequired(fn: () => unknown) {
  let caught: unknown;
  try {
    fn();
  } catch (e) {
    caught = e;
  }
  expect(caught).toBeInstanceOf(WaitprepError);
  expect((caught as WaitprepError).code).toBe('ERR_GRANT_REQUIRED');
}

describe('WaitCoordinator: beginNext requires an explicit resource grant', () => {
  const malformed: Array<[string, unknown]> = [
    ['no argument', undefined],
    ['null', null],
    ['a string', 'grant'],
    ['a number', 1],
    ['true', true],
    ['an empty object', {}],
    ['no grant', { worker: 'w' }],
    ['no worker', { grant: 'g' }],
    ['an empty worker', { worker: '', grant: 'g' }],
    ['an empty grant', { worker: 'w', grant: '' }],
    ['a non-string worker', { worker: 7, grant: 'g' }],
    ['a non-string grant', { worker: 'w', grant: { gpu: 0 } }],
  ];

  for (const [name, grant] of malformed) {
    it(`throws ERR_GRANT_REQUIRED for ${name}, and issues nothing`, () => {
      const { coord } = setup();
      coord.onWait(consumer(1), makeKey(1));
      const before = coord.stats();
      expectGrantRequired(() => coord.beginNext(grant as never));
      expect(coord.stats()).toEqual(before);
      // The unit is still queued and issues against a proper grant.
      expect(coord.beginNext(GRANT)?.key.equals(makeKey(1))).toBe(true);
    });
  }

  it('throws even when there is nothing to issue', () => {
    const { coord } = setup();
    expectGrantRequired(() => coord.beginNext(undefined as never));
  });

  it('throws even while a unit is in flight', () => {
    const { coord } = setup();
    coord.onWait(consumer(1), makeKey(1));
    coord.onWait(consumer(2), makeKey(2));
    coord.beginNext(GRANT);
    expectGrantRequired(() => coord.beginNext({ worker: 'w' } as never));
  });

  it('the error says what was expected', () => {
    const { coord } = setup();
    expect(() => coord.beginNext({ worker: 'w' } as never)).toThrow(/grant/);
  });
});

describe('WaitCoordinator: the issued WorkUnit', () => {
  it('carries id, key, readiness, target, signal and the grant it was issued against', () => {
    const { coord } = setup();
    coord.onWait(consumer(1), makeKey(1));
    const grant = { worker: 'prep-worker-3', grant: 'lease-42' };
    const work = coord.beginNext(grant)!;
    expect(typeof work.id).toBe('string');
    expect(work.id.length).toBeGreaterThan(0);
    expect(work.key.equals(makeKey(1))).toBe(true);
    expect(work.readiness).toBe('host');
    expect(work.target).toBeNull();
    expect(work.signal).toBeInstanceOf(AbortSignal);
    expect(work.signal.aborted).toBe(false);
    expect(work.grant).toEqual(grant);
  });

  it('the grant on the ticket is the caller\'s, and later changes to the caller\'s object do not alter it', () => {
    const { coord } = setup();
    coord.onWait(consumer(1), makeKey(1));
    const grant = { worker: 'w1', grant: 'g1' };
    const work = coord.beginNext(grant)!;
    grant.worker = 'changed';
    expect(work.grant).toEqual({ worker: 'w1', grant: 'g1' });
  });

  it('a device unit carries its readiness and target', () => {
    const { coord } = setup();
    coord.onWait(consumer(1), makeKey(1), { readiness: 'device', target: TARGET_A });
    const work = coord.beginNext(GRANT)!;
    expect(work.readiness).toBe('device');
    expect(work.target).not.toBeNull();
    expect(work.target!.device.toLowerCase()).toBe(TARGET_A.device.toLowerCase());
    expect(BigInt(work.target!.arena)).toBe(BigInt(TARGET_A.arena));
    expect(BigInt(work.target!.arenaGeneration)).toBe(BigInt(TARGET_A.arenaGeneration));
  });

  it('two units issued against different grants each carry their own', () => {
    const { coord } = setup();
    coord.onWait(consumer(1), makeKey(1));
    coord.onWait(consumer(2), makeKey(2));
    const first = coord.beginNext({ worker: 'a', grant: 'ga' })!;
    coord.complete(first, { ok: true });
    const second = coord.beginNext({ worker: 'b', grant: 'gb' })!;
    expect(first.grant).toEqual({ worker: 'a', grant: 'ga' });
    expect(second.grant).toEqual({ worker: 'b', grant: 'gb' });
    expect(second.id).not.toBe(first.id);
  });
});
