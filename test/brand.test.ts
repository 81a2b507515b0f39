/**
 * The checked copies the coordinator hands on (consumers, normalized device targets) carry a
 * private brand (lib/internal/brand.ts) and are still plain frozen objects: what a backend, a
 * lease or a diagnostics subscriber sees compares strictly equal to a literal.
 */
import { describe, expect, it } from 'vitest';
import { isDeepStrictEqual } from 'node:util';
import { checkConsumer, isConsumer } from '../lib/coordinator/consumer.js';
import { normalizeTarget } from '../lib/lease-table/device-target.js';
import { brand } from '../lib/internal/brand.js';
import { InMemoryBackend, WaitCoordinator, type Consumer } from '../lib/index.js';
import { GRANT, TARGET_A, makeKey } from './helpers.js';

describe('branded copies', () => {
  it('a consumer copy is a plain frozen object, strictly equal to its fields, and known again by its brand', () => {
    const given = { engine: 'e', request: 'r', generation: 3 };
    const copy = checkConsumer(given);
    expect(copy).not.toBe(given);
    expect(copy).toStrictEqual({ engine: 'e', request: 'r', generation: 3 });
    expect(isDeepStrictEqual(copy, { engine: 'e', request: 'r', generation: 3 })).toBe(true);
    expect(Object.getPrototypeOf(copy)).toBe(Object.prototype);
    expect(Object.isFrozen(copy)).toBe(true);
    expect(Reflect.ownKeys(copy)).toEqual(['engine', 'request', 'generation']);
    expect(isConsumer(copy)).toBe(true);
    // A lookalike carries no brand: it is judged by its fields.
    expect(isConsumer({ ...copy })).toBe(true);
    expect(isConsumer({ ...copy, engine: '' })).toBe(false);
  });

  it('a normalized target is a plain frozen object, returned as it is when given again, and a copy of it is normalized anew', () => {
    const target = normalizeTarget({ ...TARGET_A, device: TARGET_A.device.toUpperCase() })!;
    expect(Object.getPrototypeOf(target)).toBe(Object.prototype);
    expect(Object.isFrozen(target)).toBe(true);
    expect(normalizeTarget(target)).toBe(target);
    const again = normalizeTarget({ ...target });
    expect(again).not.toBe(target);
    expect(again).toStrictEqual(target);
  });

  it('what the backend and the work unit get is the plain copy', () => {
    const seen: Consumer[] = [];
    const backend = new InMemoryBackend();
    const coord = new WaitCoordinator({
      backend: { tryPinReady: (key, consumer, want) => (seen.push(consumer), backend.tryPinReady(key, consumer, want)) },
      maxQueued: 4,
      maxWaiting: 4,
      historyLimit: 4,
    });
    const ticket = coord.onWait({ engine: 'e', request: 'r', generation: 0 }, makeKey(1), { readiness: 'device', target: TARGET_A }).ticket!;
    const work = coord.beginNext(GRANT)!;
    expect(work.target).toStrictEqual(normalizeTarget(TARGET_A));
    coord.onWake(ticket);
    expect(seen).toStrictEqual([{ engine: 'e', request: 'r', generation: 0 }]);
  });

  it('two brands are distinct: an object marked by one is not marked by the other', () => {
    const a = brand();
    const b = brand();
    const value = {};
    a.mark(value);
    expect(a.has(value)).toBe(true);
    expect(b.has(value)).toBe(false);
    expect(a.has({})).toBe(false);
    expect(Reflect.ownKeys(value)).toEqual([]);
  });
});
