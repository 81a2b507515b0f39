// Options and fields are read from the caller's own properties only: a value
// inherited from a polluted Object.prototype must never stand in for one the caller left out.
// Each test sets the polluted property (enumerable, as a merge bug would), makes its calls, and
// deletes it again in a finally before it asserts anything.
import { join } from 'node:path';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import {
  PreparationDriver,
  WaitCoordinator,
  WaitprepError,
  artifactKey,
  openLeaseTable,
  registerMetrics,
  unlinkLeaseTable,
  type ArtifactKeyFields,
  type LeaseTable,
  type WaitprepErrorCode,
} from '../lib/index.js';
import { InMemoryBackend } from '../lib/coordinator/memory-backend.js';
import { generateTrace } from '../lib/trace/trace.js';
import { TARGET_A, consumer, makeKey, setup } from './helpers.js';
import { NATIVE, runsIf } from './skip-reasons.js';

const proto = Object.prototype as Record<string, unknown>;

/** Runs `fn` with `Object.prototype[name] = value`, always removed afterwards. */
function polluted<T>(pollution: Record<string, unknown>, fn: () => T): T {
  for (const name of Object.keys(pollution)) expect(Object.hasOwn(proto, name)).toBe(false);
  try {
    Object.assign(proto, pollution);
    return fn();
  } finally {
    for (const name of Object.keys(pollution)) delete proto[name];
  }
}

/** What `fn` did: its value, or the code of the WaitprepError it threw. */
function outcome<T>(fn: () => T): { value: T } | { code: WaitprepErrorCode | string } {
  try {
    return { value: fn() };
  } catch (error) {
    return { code: error instanceof WaitprepError ? error.code : `not a WaitprepError: ${String(error)}` };
  }
}

const FIELDS: ArtifactKeyFields = makeKey(1).toFields();

function fieldsWithout(name: keyof ArtifactKeyFields['source']): ArtifactKeyFields {
  const { source } = makeKey(1).toFields();
  const rest: Record<string, unknown> = { ...source, extra: undefined };
  delete rest[name];
  delete rest.extra;
  return { ...FIELDS, source: rest as unknown as ArtifactKeyFields['source'] };
}

const tables: LeaseTable[] = [];
afterEach(() => {
  for (const table of tables.splice(0)) {
    table.close();
    if (table.implementation === 'native' && table.role === 'producer') unlinkLeaseTable(table.name);
  }
});
let counter = 0;

const openEdges = (impl: 'native' | 'js') => () => {
  it('with Object.prototype.create set, a consumer open is still an open, not a create', () => {
    const name = `wp-pollution-${process.pid}-${++counter}`;
    const producer = openLeaseTable({ name, role: 'producer', implementation: impl, create: { capacity: 8 } });
    tables.push(producer);
    const result = polluted({ create: { capacity: 16 }, implementation: 'bogus' }, () =>
      outcome(() => openLeaseTable({ name, role: 'consumer', implementation: impl, ...(impl === 'js' ? { buffer: producer.sharedBuffer! } : {}) })),
    );
    expect(result).toHaveProperty('value');
    const reader = (result as { value: LeaseTable }).value;
    tables.push(reader);
    expect(reader.role).toBe('consumer');
    expect(reader.capacity).toBe(8);
  });

  it('tryPin reads want and its target from own properties only', () => {
    const name = `wp-pollution-${process.pid}-${++counter}`;
    const producer = openLeaseTable({ name, role: 'producer', implementation: impl, create: { capacity: 8 } });
    tables.push(producer);
    const key = makeKey(2);
    producer.publish(producer.reserve(key), { sizeBytes: 1, location: 1, checksum: 1, codecId: 1, representationVersion: 1 });
    producer.recordDeviceWrite(key, { ...TARGET_A, writeSeq: 1 });
    const [noReadiness, noTarget, host] = polluted({ readiness: 'device', target: TARGET_A }, () => [
      outcome(() => producer.tryPin(key, {} as never)),
      outcome(() => producer.tryPin(key, { readiness: 'device' } as never)),
      producer.tryPin(key, { readiness: 'host' }),
    ]);
    expect(noReadiness).toEqual({ code: 'ERR_INVALID_ARGUMENT' });
    expect(noTarget).toEqual({ value: { kind: 'miss', reason: 'invalid-target' } });
    expect(host).toMatchObject({ kind: 'lease', readiness: 'host' });
    (host as { close(): void }).close();
  });

  it('tryPin reads its consumer from own properties only', () => {
    const name = `wp-pollution-${process.pid}-${++counter}`;
    const producer = openLeaseTable({ name, role: 'producer', implementation: impl, create: { capacity: 8 } });
    tables.push(producer);
    const key = makeKey(3);
    producer.publish(producer.reserve(key), { sizeBytes: 1, location: 1, checksum: 1, codecId: 1, representationVersion: 1 });
    const [inherited, own] = polluted({ engine: 'e0', request: 'r0', generation: 0 }, () => [
      outcome(() => producer.tryPin(key, { readiness: 'host' }, {} as never)),
      producer.tryPin(key, { readiness: 'host' }, { engine: 'e1', request: 'r1', generation: 1 }),
    ]);
    expect(inherited).toEqual({ code: 'ERR_INVALID_ARGUMENT' });
    expect(own).toMatchObject({ kind: 'lease', consumer: { engine: 'e1' } });
    (own as { close(): void }).close();
  });
};

describe.runIf(runsIf('prototype pollution: native table', NATIVE))('prototype pollution: native table', openEdges('native'));
describe('prototype pollution: js table', openEdges('js'));

describe('prototype pollution: keys', () => {
  it('with Object.prototype.adapter set, a key without its own adapter is refused, and keys do not change', () => {
    const missing = polluted({ adapter: 'evil' }, () => outcome(() => artifactKey(fieldsWithout('adapter'))));
    expect(missing).toEqual({ code: 'ERR_INVALID_KEY' });
    const same = polluted({ adapter: 'evil' }, () => artifactKey(FIELDS));
    expect(same.hex).toBe(makeKey(1).hex);
    expect(same.source.adapter).toBe('none');
  });

  it('with Object.prototype.extra or a top field set, keys do not change', () => {
    const { source, ...top } = FIELDS;
    const { extra: _, ...plainSource } = source;
    const fields = { ...top, source: plainSource };
    const key = polluted({ extra: { injected: 'yes' } }, () => artifactKey(fields as ArtifactKeyFields));
    expect(key.hex).toBe(makeKey(1).hex);
    expect(Object.keys(key.source.extra)).toEqual([]);
    const { codec: __, ...noCodec } = fields;
    expect(polluted({ codec: 'identity' }, () => outcome(() => artifactKey(noCodec as ArtifactKeyFields)))).toEqual({ code: 'ERR_INVALID_KEY' });
  });
});

describe('prototype pollution: coordinator', () => {
  it('an inherited option is not an option', () => {
    const backend = new InMemoryBackend();
    const result = polluted({ maxQueued: 4 }, () => outcome(() => new WaitCoordinator({ backend, maxWaiting: 4, historyLimit: 4 } as never)));
    expect(result).toEqual({ code: 'ERR_INVALID_ARGUMENT' });
    let clock = 0;
    const coord = polluted({ now: () => (clock += 1000) }, () => new WaitCoordinator({ backend, maxQueued: 4, maxWaiting: 4, historyLimit: 4 }));
    coord.onWait(consumer(1), makeKey(1));
    expect(clock).toBe(0);
  });

  it("an inherited leaseIsWellFormed vouches for no backend's leases, and a polluted non-function breaks no constructor", () => {
    // A lease without slot or meta: refused unless its own backend vouches for it.
    const bare = () => ({ kind: 'lease', key: makeKey(1), consumer: consumer(1), readiness: 'host', generation: 1, closed: false, close() {} });
    const plain = { tryPinReady: bare };
    const wake = (backend: object) => {
      const coord = new WaitCoordinator({ backend: backend as never, maxQueued: 4, maxWaiting: 4, historyLimit: 4 });
      return coord.onWake(coord.onWait(consumer(1), makeKey(1)).ticket!);
    };
    expect(polluted({ leaseIsWellFormed: () => true }, () => wake(plain))).toEqual({ kind: 'miss', reason: 'backend-error' });
    expect(polluted({ leaseIsWellFormed: true }, () => outcome(() => wake(plain)))).toEqual({ value: { kind: 'miss', reason: 'backend-error' } });
    // A method on the backend's own class counts: it is the backend's.
    class Vouching {
      tryPinReady() {
        return bare();
      }
      leaseIsWellFormed() {
        return true;
      }
    }
    expect(wake(new Vouching()).kind).toBe('hit');
  });

  it('an inherited tryPinReady makes no object a backend', () => {
    const result = polluted({ tryPinReady: () => ({ kind: 'miss', reason: 'absent' }) }, () =>
      outcome(() => new WaitCoordinator({ backend: {} as never, maxQueued: 4, maxWaiting: 4, historyLimit: 4 })));
    expect(result).toEqual({ code: 'ERR_INVALID_ARGUMENT' });
  });

  it('onWait reads its opts and its consumer from own properties only', () => {
    const { coord } = setup();
    const persisted = polluted({ readiness: 'persisted' }, () => coord.onWait(consumer(1), makeKey(1), {}));
    expect(persisted.status).toBe('queued');
    const withTarget = polluted({ target: TARGET_A }, () => coord.onWait(consumer(2), makeKey(2), {}));
    expect(withTarget.status).toBe('queued');
    const noGeneration = polluted({ generation: 1 }, () => outcome(() => coord.onWait({ engine: 'e', request: 'r' } as never, makeKey(3))));
    expect(noGeneration).toEqual({ code: 'ERR_INVALID_ARGUMENT' });
  });
});

describe('prototype pollution: driver, metrics, trace', () => {
  it('PreparationDriver ignores an inherited killOnDeadline', async () => {
    const { coord } = setup();
    const grants = { acquire: () => null, release: () => {} };
    const worker = { filename: join(import.meta.dirname, 'fixtures', 'prepare-ok.mjs'), minThreads: 0 };
    const result = polluted({ killOnDeadline: true }, () => outcome(() => new PreparationDriver({ coordinator: coord, grants, worker })));
    expect(result).toHaveProperty('value');
    await (result as { value: PreparationDriver }).value.close();
  });

  it('registerMetrics ignores inherited labels', async () => {
    const { coord } = setup();
    const registry = new Registry();
    polluted({ labels: { polluted: 'yes' } }, () => registerMetrics(coord, { registry }));
    const metrics = await registry.getMetricsAsJSON();
    const labelled = metrics.flatMap((m) => m.values).filter((v) => 'polluted' in (v.labels ?? {}));
    expect(labelled).toEqual([]);
  });

  it('generateTrace gives the same trace with Object.prototype polluted', () => {
    const options = { agents: 3, seconds: 120, seed: 7 };
    const clean = generateTrace(options);
    const dirty = polluted({ namespace: 'polluted', timeout: { fraction: 1, seconds: 0.001 }, generation: 9 }, () => generateTrace(options));
    expect(dirty).toEqual(clean);
  });
});
