// registerMetrics: Prometheus metrics read at scrape from stats() and the lease table's inspect().
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import {
  leaseTableBackend,
  openLeaseTable,
  registerMetrics,
  WaitprepError,
  type LeaseTable,
  type TableInspection,
} from '../lib/index.js';
import { requirePeer } from '../lib/metrics.js';
import { GRANT, consumer, makeKey, setup, ticketOf } from './helpers.js';

type Sample = { labels: Record<string, string | number>; value: number };

/** Every metric's type and samples after one scrape, by name. */
async function scrape(registry: Registry): Promise<Map<string, { type: string; values: Sample[] }>> {
  const metrics = await registry.getMetricsAsJSON();
  return new Map(metrics.map((m) => [m.name, { type: String(m.type), values: m.values as Sample[] }]));
}

/** The samples of one metric as `{ 'label=value,…': value }` (labels in name order; '' without labels). */
function series(scraped: Awaited<ReturnType<typeof scrape>>, name: string): Record<string, number> {
  const metric = scraped.get(name);
  if (metric === undefined) throw new Error(`no metric ${name} in the scrape`);
  return Object.fromEntries(
    metric.values.map((v) => [Object.keys(v.labels).sort().map((k) => `${k}=${v.labels[k]}`).join(','), v.value]),
  );
}

const tables: LeaseTable[] = [];
afterEach(() => {
  for (const table of tables.splice(0)) table.close();
});
let tableNames = 0;
function jsTables(): { producer: LeaseTable; consumer: LeaseTable } {
  const name = `metrics-${process.pid}-${++tableNames}`;
  const producer = openLeaseTable({ name, role: 'producer', create: { capacity: 16 }, implementation: 'js' });
  const reader = openLeaseTable({ name, role: 'consumer', implementation: 'js', buffer: producer.sharedBuffer! });
  tables.push(reader, producer);
  return { producer, consumer: reader };
}
const META = { sizeBytes: 100, location: 1, checksum: 2, codecId: 3, representationVersion: 1 };

describe('registerMetrics: coordinator metrics', () => {
  it('reports exact counts after a scripted sequence, and counters only grow by what happened since the last scrape', async () => {
    const { coord, backend } = setup({ maxQueued: 2, maxWaiting: 16, historyLimit: 8 });
    const registry = new Registry();
    registerMetrics(coord, { registry });
    const [k1, k2, k3, k4] = [1, 2, 3, 4].map((n) => makeKey(n));

    const t1 = ticketOf(coord.onWait(consumer(1), k1)); // queued
    const t2 = ticketOf(coord.onWait(consumer(2), k1)); // joined
    const t3 = ticketOf(coord.onWait(consumer(3), k2)); // queued
    expect(coord.onWait(consumer(4), k3).status).toBe('overloaded'); // queue full (2)
    expect(coord.onWait(consumer(4), k3, { readiness: 'persisted' }).status).toBe('rejected');
    const w1 = coord.beginNext(GRANT)!; // k1
    const t4 = ticketOf(coord.onWait(consumer(4), k1)); // in-flight
    backend.publish(k1);
    expect(coord.complete(w1, { ok: true })).toBe('applied'); // completed, three consumers wait: not wasted
    const t5 = coord.onWait(consumer(5), k1);
    expect(t5.status).toBe('completed');
    for (const t of [t1, t2, t4]) {
      const hit = coord.onWake(t);
      expect(hit.kind).toBe('hit');
      if (hit.kind === 'hit') hit.lease.close();
    }
    expect(coord.onWake(t1)).toEqual({ kind: 'miss', reason: 'stale-ticket' }); // stale wake
    expect(coord.complete(w1, { ok: true })).toBe('stale'); // stale completion
    const w2 = coord.beginNext(GRANT)!; // k2, its consumer still waits
    expect(coord.complete(w2, { ok: false, error: 'codec' })).toBe('applied'); // a genuine failure
    expect(coord.onWait(consumer(6), k2).status).toBe('failed');
    expect(coord.onWake(t3)).toEqual({ kind: 'miss', reason: 'absent' });
    const t7 = ticketOf(coord.onWait(consumer(7), k3)); // queued
    const w3 = coord.beginNext(GRANT)!; // k3
    expect(coord.onCancel(t7)).toBe(true);
    expect(coord.complete(w3, { ok: true })).toBe('applied'); // nobody left: wasted
    const t8 = ticketOf(coord.onWait(consumer(8), k4)); // queued
    backend.markPreparing(k4);
    expect(coord.onWake(t8)).toEqual({ kind: 'miss', reason: 'preparing' });

    let scraped = await scrape(registry);
    expect(series(scraped, 'waitprep_waits_total')).toEqual({
      'status=queued': 4, 'status=joined': 1, 'status=in-flight': 1, 'status=completed': 1,
      'status=failed': 1, 'status=overloaded': 1, 'status=rejected': 1,
    });
    expect(series(scraped, 'waitprep_wakes_total')).toEqual({
      'reason=,result=hit': 3, 'reason=stale-ticket,result=miss': 1, 'reason=absent,result=miss': 1, 'reason=preparing,result=miss': 1,
    });
    expect(series(scraped, 'waitprep_preparations_total')).toEqual({ 'outcome=completed': 2, 'outcome=failed': 1 });
    expect(series(scraped, 'waitprep_wasted_preparations_total')).toEqual({ '': 1 });
    expect(series(scraped, 'waitprep_cancels_total')).toEqual({ '': 1 });
    expect(series(scraped, 'waitprep_stale_events_total')).toEqual({ '': 2 });
    expect(series(scraped, 'waitprep_overloads_total')).toEqual({ '': 1 });
    // Still waiting: consumers 5 (k1, completed) and 6 (k2, failed); nothing queued or in flight.
    expect(series(scraped, 'waitprep_waiting_consumers')).toEqual({ '': 2 });
    expect(series(scraped, 'waitprep_queue_depth')).toEqual({ '': 0 });
    expect(series(scraped, 'waitprep_preparations_in_flight')).toEqual({ '': 0 });
    // The figures are the coordinator's own.
    const stats = coord.stats();
    expect(stats).toMatchObject({ hits: 3, staleEvents: 2, overloads: 1, wasted: 1, completed: 2, failed: 1, cancels: 1, waiting: 2 });
    expect(stats.misses).toEqual({ 'stale-ticket': 1, absent: 1, preparing: 1 });

    // Prometheus types: counters end in _total, the rest are gauges.
    for (const [name, { type }] of scraped) expect([name, type]).toEqual([name, name.endsWith('_total') ? 'counter' : 'gauge']);
    expect(scraped.has('waitprep_table_slots')).toBe(false);

    // A second scrape with nothing new reports the same; then a few more events add exactly their count.
    expect(await scrape(registry)).toEqual(scraped);
    coord.onWait(consumer(9), k2, { readiness: 'persisted' });
    coord.onWait(consumer(10), makeKey(5));
    coord.onWake('not-a-ticket');
    scraped = await scrape(registry);
    expect(series(scraped, 'waitprep_waits_total')).toMatchObject({ 'status=queued': 5, 'status=rejected': 2 });
    expect(series(scraped, 'waitprep_wakes_total')).toMatchObject({ 'reason=stale-ticket,result=miss': 2 });
    expect(series(scraped, 'waitprep_stale_events_total')).toEqual({ '': 3 });
    expect(series(scraped, 'waitprep_queue_depth')).toEqual({ '': 1 });
    expect(series(scraped, 'waitprep_waiting_consumers')).toEqual({ '': 3 });
    // The exposition text carries the same figures.
    const text = await registry.metrics();
    expect(text).toContain('# TYPE waitprep_waits_total counter');
    expect(text).toContain('waitprep_waits_total{status="queued"} 5');
    expect(text).toContain('waitprep_wakes_total{result="hit",reason=""} 3');
  });

  it('several coordinators share a registry under distinct labels; unregister removes one, then the metrics', async () => {
    const registry = new Registry();
    const a = setup().coord;
    const b = setup().coord;
    const ra = registerMetrics(a, { registry, labels: { engine: 'e0' } });
    const rb = registerMetrics(b, { registry, labels: { engine: 'e1' } });
    a.onWait(consumer(1), makeKey(1));
    a.onWait(consumer(2), makeKey(1));
    b.onWait(consumer(1), makeKey(2));
    let scraped = await scrape(registry);
    expect(series(scraped, 'waitprep_waiting_consumers')).toEqual({ 'engine=e0': 2, 'engine=e1': 1 });
    expect(series(scraped, 'waitprep_waits_total')).toMatchObject({ 'engine=e0,status=queued': 1, 'engine=e0,status=joined': 1, 'engine=e1,status=queued': 1, 'engine=e1,status=joined': 0 });

    // Same labels again, other label names, or none: refused.
    for (const labels of [{ engine: 'e0' }, { pool: 'p' }, undefined] as Array<Record<string, string> | undefined>) {
      expect(() => registerMetrics(setup().coord, { registry, labels })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', field: 'options.labels' }));
    }
    rb.unregister();
    rb.unregister(); // idempotent
    scraped = await scrape(registry);
    expect(series(scraped, 'waitprep_waiting_consumers')).toEqual({ 'engine=e0': 2 });
    expect(series(scraped, 'waitprep_wakes_total')).toEqual({ 'engine=e0,reason=,result=hit': 0 });
    ra.unregister();
    expect(await registry.getMetricsAsJSON()).toEqual([]);
    // The registry can take a registration again.
    registerMetrics(b, { registry });
    expect(series(await scrape(registry), 'waitprep_waiting_consumers')).toEqual({ '': 1 });
  });

  it('refuses bad arguments and a registry that already holds a waitprep metric', () => {
    const { coord } = setup();
    const registry = new Registry();
    const code = (fn: () => unknown) => {
      try {
        fn();
      } catch (error) {
        return [(error as WaitprepError).code, (error as WaitprepError).field];
      }
      return 'no error';
    };
    expect(code(() => registerMetrics({} as never, { registry }))).toEqual(['ERR_INVALID_ARGUMENT', 'coordinator']);
    expect(code(() => registerMetrics(coord, undefined as never))).toEqual(['ERR_INVALID_ARGUMENT', 'options']);
    expect(code(() => registerMetrics(coord, { registry: {} as never }))).toEqual(['ERR_INVALID_ARGUMENT', 'options.registry']);
    expect(code(() => registerMetrics(coord, { registry, table: {} as never }))).toEqual(['ERR_INVALID_ARGUMENT', 'options.table']);
    expect(code(() => registerMetrics(coord, { registry, prefix: 'x' } as never))).toEqual(['ERR_INVALID_ARGUMENT', 'options.prefix']);
    expect(() => registerMetrics(coord, { registry, prefix: 'x' } as never)).toThrow(
      'Expected `options.prefix` to be absent (unknown option; known options: registry, table, labels), got "x" (string)',
    );
    expect(code(() => registerMetrics(coord, { registry, labels: { status: 'x' } }))).toEqual(['ERR_INVALID_ARGUMENT', 'options.labels.status']);
    expect(code(() => registerMetrics(coord, { registry, labels: { 'bad-name': 'x' } }))).toEqual(['ERR_INVALID_ARGUMENT', 'options.labels.bad-name']);
    expect(code(() => registerMetrics(coord, { registry, labels: { engine: 1 as never } }))).toEqual(['ERR_INVALID_ARGUMENT', 'options.labels.engine']);
    expect(registry.getMetricsAsArray()).toEqual([]);

    // A second registry holding one of the names: nothing of this call stays registered.
    const taken = new Registry();
    taken.registerMetric(new (class { name = 'waitprep_queue_depth'; get = async () => ({}) })() as never);
    expect(code(() => registerMetrics(coord, { registry: taken }))).toEqual(['ERR_INVALID_ARGUMENT', 'options.registry']);
    expect(taken.getMetricsAsArray().map((m) => m.name)).toEqual(['waitprep_queue_depth']);
  });
});

describe('registerMetrics: lease table metrics', () => {
  it('reports slot states, pinned slots and clients of a real (js) table, read at each scrape', async () => {
    const { producer, consumer: table } = jsTables();
    const { coord } = setup({ backend: leaseTableBackend(table) as never });
    const registry = new Registry();
    registerMetrics(coord, { registry, table });
    const [k1, k2, k3] = [1, 2, 3].map((n) => makeKey(n));
    producer.reserve(k1); // stays reserved
    producer.publish(producer.reserve(k2), META);
    producer.publish(producer.reserve(k3), META);
    const lease = table.tryPin(k2);
    expect(lease.kind).toBe('lease');

    let scraped = await scrape(registry);
    expect(series(scraped, 'waitprep_table_slots')).toEqual({ 'state=free': 13, 'state=reserved': 1, 'state=ready': 2, 'state=evicting': 0 });
    expect(series(scraped, 'waitprep_table_pinned_slots')).toEqual({ '': 1 });
    expect(series(scraped, 'waitprep_table_clients')).toEqual({ '': 2 });
    expect(series(scraped, 'waitprep_table_reaped_clients_total')).toEqual({ '': 0 });
    expect(scraped.get('waitprep_table_reaped_clients_total')!.type).toBe('counter');
    expect(scraped.get('waitprep_table_slots')!.type).toBe('gauge');

    // A wake through the coordinator pins too; closing leases and evicting show at the next scrape.
    const hit = coord.onWake(ticketOf(coord.onWait(consumer(1), k3)));
    expect(hit.kind).toBe('hit');
    expect(series(await scrape(registry), 'waitprep_table_pinned_slots')).toEqual({ '': 2 });
    if (lease.kind === 'lease') lease.close();
    if (hit.kind === 'hit') hit.lease.close();
    expect(producer.tryEvict(k3)).toBe('evicted');
    scraped = await scrape(registry);
    expect(series(scraped, 'waitprep_table_slots')).toEqual({ 'state=free': 14, 'state=reserved': 1, 'state=ready': 1, 'state=evicting': 0 });
    expect(series(scraped, 'waitprep_table_pinned_slots')).toEqual({ '': 0 });
    expect(series(scraped, 'waitprep_wakes_total')).toEqual({ 'reason=,result=hit': 1 });

    // A closed table cannot be inspected: its series leave the scrape; the coordinator's stay.
    table.close();
    scraped = await scrape(registry);
    expect(series(scraped, 'waitprep_table_slots')).toEqual({});
    expect(series(scraped, 'waitprep_table_clients')).toEqual({});
    expect(series(scraped, 'waitprep_waits_total')).toMatchObject({ 'status=queued': 1 });
  });

  it('counts evicting slots and follows reaped clients as a counter (a hand-made inspection)', async () => {
    const inspection: TableInspection = {
      abiVersion: 1, capacity: 8, segmentSize: 0n, producer: 0, reapedClients: 2n, clients: [], slots: [],
    };
    const slot = (n: number, state: 'reserved' | 'ready' | 'evicting', pinHolders: number[] = []) => ({
      slot: n, state, generation: 1n, pinHolders, digestHex: '', device: null,
      meta: { sizeBytes: 0n, location: 0n, checksum: 0n, codecId: 0, representationVersion: 1 },
    });
    inspection.slots = [slot(0, 'evicting'), slot(1, 'ready', [1, 2]), slot(2, 'ready')];
    const registry = new Registry();
    registerMetrics(setup().coord, { registry, table: { inspect: () => inspection } });
    let scraped = await scrape(registry);
    expect(series(scraped, 'waitprep_table_slots')).toEqual({ 'state=free': 5, 'state=reserved': 0, 'state=ready': 2, 'state=evicting': 1 });
    expect(series(scraped, 'waitprep_table_pinned_slots')).toEqual({ '': 1 });
    expect(series(scraped, 'waitprep_table_reaped_clients_total')).toEqual({ '': 2 });
    inspection.reapedClients = 5n;
    expect(series(await scrape(registry), 'waitprep_table_reaped_clients_total')).toEqual({ '': 5 });
    // A re-created table starts again from 0: the series restarts (a counter reset to Prometheus).
    inspection.reapedClients = 1n;
    expect(series(await scrape(registry), 'waitprep_table_reaped_clients_total')).toEqual({ '': 1 });
  });
});

describe('registerMetrics without prom-client', () => {
  it('the loader turns a missing peer into ERR_MISSING_PEER with the cause attached', () => {
    let caught: unknown;
    try {
      requirePeer('prom-client-that-is-not-installed', '^15.1.3');
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(WaitprepError);
    expect((caught as WaitprepError).code).toBe('ERR_MISSING_PEER');
    expect((caught as WaitprepError).message).toMatch(/optional peer dependency prom-client-that-is-not-installed .*npm install prom-client-that-is-not-installed/);
    expect(((caught as WaitprepError).cause as { code?: string }).code).toBe('MODULE_NOT_FOUND');
  });

  it('waitprep loads and runs without it; registerMetrics alone throws ERR_MISSING_PEER (child process, prom-client unresolvable)', () => {
    const index = pathToFileURL(join(import.meta.dirname, '..', 'dist', 'index.js')).href;
    // The child makes 'prom-client' unresolvable before loading waitprep (built dist/), then checks
    // that importing and using waitprep never touched it and that registerMetrics reports it missing.
    const script = `
      import Module, { createRequire } from 'node:module';
      const resolve = Module._resolveFilename;
      Module._resolveFilename = function (request, ...rest) {
        if (request === 'prom-client' || request.startsWith('prom-client/')) {
          throw Object.assign(new Error("Cannot find module 'prom-client'"), { code: 'MODULE_NOT_FOUND' });
        }
        return resolve.call(this, request, ...rest);
      };
      const { WaitCoordinator, InMemoryBackend, registerMetrics } = await import(${JSON.stringify(index)});
      const coord = new WaitCoordinator({ backend: new InMemoryBackend(), maxQueued: 1, maxWaiting: 1, historyLimit: 1 });
      let code = 'no error';
      try { registerMetrics(coord, { registry: { registerMetric() {}, getSingleMetric() {}, removeSingleMetric() {} } }); }
      catch (error) { code = error.code + ': ' + error.message; }
      const loaded = Object.keys(createRequire(import.meta.url).cache).some((path) => path.includes('prom-client'));
      process.stdout.write(JSON.stringify({ code, loaded, closed: coord.closed }));
    `;
    const out = JSON.parse(execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' }));
    expect(out.loaded).toBe(false);
    expect(out.closed).toBe(false);
    expect(out.code).toMatch(/^ERR_MISSING_PEER: registerMetrics needs the optional peer dependency prom-client \(\^15\.1\.3\)/);
  });
});
