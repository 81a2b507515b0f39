// The JavaScript fallback against worker_threads stopped with worker.terminate():
// such a worker runs no close and no exit hook, so its client entry and its pins are
// reclaimed by the reaper, which judges a worker's entry by its OS thread (/proc/self/task/TID,
// lib/lease-table/liveness.ts judgeThread). A live worker is never reaped, however long it goes
// without running JavaScript: one spins in a synchronous loop and one blocks in Atomics.wait for
// the whole test, through every reap. Workers run dist/ (the fixture imports the package as an
// outside caller would), so `npm test` builds TypeScript first.
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { afterEach, describe, expect, it } from 'vitest';
import { artifactKey, openLeaseTable, type ArtifactKey, type LeaseTable } from '../../lib/index.js';
import { judgeInspection } from '../../lib/lease-table/inspect.js';
import { selfThread } from '../../lib/lease-table/liveness.js';
import { KEY_COUNT, keyFields, publicationMeta } from '../fixtures/lease-stress-common.mjs';
import { threadReleased } from '../fixtures/os-thread.mjs';
import { runsIf } from '../skip-reasons.js';

const FIXTURE = join(import.meta.dirname, '..', 'fixtures', 'fallback-worker-pin.mjs');
const TERMINATED = 140;
/** Workers started and terminated at once: enough for opens and reaps of several threads to overlap. */
const AT_ONCE = 4;

type Hold = 'spin' | 'wait' | 'busy-until' | 'wait-until';
interface Pinned {
  client: number;
  thread: number;
  /** Its OS thread id. */
  tid: number;
  pinned: number;
}

const started: Worker[] = [];
afterEach(async () => {
  await Promise.all(started.splice(0).map((w) => w.terminate()));
});

/** Starts a worker that pins key `k` twice and holds the pins as `hold` says; resolves with its report. */
function pinner(table: LeaseTable, k: number, hold: Hold, control: Int32Array): { worker: Worker; pinned: Promise<Pinned> } {
  const worker = new Worker(FIXTURE, { workerData: { name: table.name, buffer: table.sharedBuffer, key: k, hold, control } });
  started.push(worker);
  const pinned = new Promise<Pinned>((resolve, reject) => {
    worker.once('message', (message: Pinned | { error: string }) => {
      if ('error' in message) reject(new Error(`worker ${k} (${hold}): openLeaseTable threw ${message.error}`));
      else resolve(message);
    });
    worker.once('error', reject);
    worker.once('exit', (code) => reject(new Error(`worker ${k} (${hold}) exited with ${code} before pinning`)));
  });
  return { worker, pinned };
}

/** Who holds a pin on each key's slot, by key. */
function holders(table: LeaseTable, keys: ArtifactKey[]): number[][] {
  const slots = table.inspect().slots;
  return keys.map((key) => slots.find((s) => s.digestHex === key.hex)!.pinHolders);
}

const PROC_THREAD: readonly [boolean, string] = [selfThread() !== null, '/proc/thread-self does not show this thread under our pid, so a worker thread cannot be judged'];

describe.runIf(runsIf('JS lease table: terminated worker_threads', PROC_THREAD))('JS lease table: terminated worker_threads', () => {
  it(`${TERMINATED} workers terminated while pinning leave no entry and no pin; live busy workers are never reaped`, async () => {
    const producer = openLeaseTable({ name: `wp-fallback-exit-${process.pid}`, role: 'producer', create: { capacity: 64 }, implementation: 'js' });
    try {
      const keys = Array.from({ length: KEY_COUNT }, (_, k) => artifactKey(keyFields(k)));
      keys.forEach((key, k) => producer.publish(producer.reserve(key), publicationMeta(k, k + 1)));
      // control: [0] the spinning live worker stops, [1] the waiting one wakes, [2] never changes.
      const control = new Int32Array(new SharedArrayBuffer(12));

      const busy = pinner(producer, 0, 'busy-until', control);
      const waiting = pinner(producer, 1, 'wait-until', control);
      const live = await Promise.all([busy.pinned, waiting.pinned]);
      expect(live.map((w) => w.pinned)).toEqual([2, 2]);
      const liveClients = live.map((w) => w.client);
      expect(producer.reapDeadClients()).toBe(0);

      for (let next = 0; next < TERMINATED; next += AT_ONCE) {
        const batch = Array.from({ length: Math.min(AT_ONCE, TERMINATED - next) }, (_, j) => {
          const i = next + j;
          // Most hold their pins blocked, which costs no CPU: a few spinning are enough, beside the
          // live spinner, on a small machine.
          return pinner(producer, i % KEY_COUNT, i % 4 === 0 ? 'spin' : 'wait', control);
        });
        const reports = await Promise.all(batch.map((w) => w.pinned));
        for (const report of reports) expect(report.pinned).toBe(2);
        // While they hold their pins, their keys cannot be evicted.
        for (let j = 0; j < batch.length; j++) expect(producer.tryEvict(keys[(next + j) % KEY_COUNT]!)).toBe('pinned');
        await Promise.all(batch.map(({ worker }) => worker.terminate()));
        started.splice(started.length - batch.length);
        expect(await Promise.all(reports.map((r) => threadReleased(r.tid)))).toEqual(reports.map(() => true));
      }

      // Terminated workers' entries were reaped by the opens that found the registry full, and
      // now by this reap; each exactly once.
      producer.reapDeadClients();
      const after = producer.inspect();
      expect(after.reapedClients).toBe(BigInt(TERMINATED));
      expect(after.clients.map((c) => c.index).sort((a, b) => a - b)).toEqual([producer.clientIndex, ...liveClients].sort((a, b) => a - b));
      expect(holders(producer, keys)).toEqual(keys.map((_, k) => (k < 2 ? [liveClients[k]] : [])));
      for (let k = 2; k < KEY_COUNT; k++) expect(producer.tryEvict(keys[k]!)).toBe('evicted');
      expect(producer.tryEvict(keys[0]!)).toBe('pinned');
      expect(producer.tryEvict(keys[1]!)).toBe('pinned');

      // The live workers close their own handles once let go.
      const closed = [busy.worker, waiting.worker].map((w) => new Promise((resolve) => w.on('message', resolve)));
      Atomics.store(control, 0, 1);
      Atomics.store(control, 1, 1);
      Atomics.notify(control, 1);
      expect(await Promise.all(closed)).toEqual([{ closed: true }, { closed: true }]);
      expect(producer.inspect().clients.map((c) => c.index)).toEqual([producer.clientIndex]);
      expect(producer.tryEvict(keys[0]!)).toBe('evicted');
      expect(producer.tryEvict(keys[1]!)).toBe('evicted');
      expect(producer.summary().reapedClients).toBe(BigInt(TERMINATED));
    } finally {
      producer.close();
    }
  }, 600_000);

  it('inspect() judges a terminated worker\'s entry dead by its OS thread, as the reaper does, before any reap', async () => {
    const producer = openLeaseTable({ name: `wp-fallback-inspect-${process.pid}`, role: 'producer', create: { capacity: 64 }, implementation: 'js' });
    try {
      const keys = [0, 1].map((k) => artifactKey(keyFields(k)));
      keys.forEach((key, k) => producer.publish(producer.reserve(key), publicationMeta(k, k + 1)));
      const control = new Int32Array(new SharedArrayBuffer(12));
      const live = pinner(producer, 0, 'wait-until', control);
      const doomed = pinner(producer, 1, 'wait', control);
      const [alive, gone] = await Promise.all([live.pinned, doomed.pinned]);
      await doomed.worker.terminate();
      started.splice(started.indexOf(doomed.worker), 1);
      expect(await threadReleased(gone.tid)).toBe(true);

      const view = producer.inspect();
      const entry = (client: number) => view.clients.find((c) => c.index === client)!;
      expect([entry(alive.client).osThread, entry(gone.client).osThread]).toEqual([alive.tid, gone.tid]);
      expect(entry(producer.clientIndex).osThread).toBe(0);
      const judged = judgeInspection(view, { exclude: producer.clientIndex });
      const liveness = (client: number) => judged.clients.find((c) => c.entry.index === client)!.judgement;
      expect(liveness(alive.client)).toEqual({ liveness: 'alive', reason: 'thread-running' });
      expect(liveness(gone.client)).toEqual({ liveness: 'dead', reason: 'thread-gone' });
      expect(judged.deadPins).toEqual([{ slot: view.slots.find((s) => s.digestHex === keys[1]!.hex)!.slot, client: gone.client, pid: process.pid }]);
      expect(judged.needsReap).toBe(true);

      // The reap releases exactly what the inspection called dead.
      expect(producer.reapDeadClients()).toBe(1);
      expect(judgeInspection(producer.inspect(), { exclude: producer.clientIndex }).needsReap).toBe(false);
      const closed = new Promise((resolve) => live.worker.on('message', resolve));
      Atomics.store(control, 1, 1);
      Atomics.notify(control, 1);
      expect(await closed).toEqual({ closed: true });
    } finally {
      producer.close();
    }
  }, 120_000);
});
