// A worker_thread's clients never die by pid: when a worker is terminated while
// it holds native pins, the addon's environment cleanup hook closes its table
// handle, releasing the pins and the client entry (docs/lease-table.md).
import { join } from 'node:path';
import { once } from 'node:events';
import { Worker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import { artifactKey, openLeaseTable, unlinkLeaseTable } from '../../lib/index.js';
import { keyFields, publicationMeta } from '../fixtures/lease-stress-common.mjs';
import { NATIVE, runsIf } from '../skip-reasons.js';

describe.runIf(runsIf('native lease table: a terminated worker_thread', NATIVE))('native lease table: a terminated worker_thread', () => {
  it('releases its pins and its client entry through the cleanup hook', async () => {
    const name = `wp-worker-exit-${process.pid}`;
    const producer = openLeaseTable({ name, role: 'producer', create: { capacity: 64 }, implementation: 'native' });
    try {
      const key = artifactKey(keyFields(0));
      producer.publish(producer.reserve(key), publicationMeta(0, 1));
      const worker = new Worker(join(import.meta.dirname, '..', 'fixtures', 'worker-pin-and-hang.mjs'), { workerData: { name } });
      const [message] = (await once(worker, 'message')) as [{ pinned: boolean; client: number }];
      expect(message.pinned).toBe(true);
      expect(producer.tryEvict(key)).toBe('pinned');
      const slot = producer.inspect().slots.find((s) => s.digestHex === key.hex)!;
      expect(slot.pinHolders).toEqual([message.client]);
      await worker.terminate();
      const after = producer.inspect();
      expect(after.clients.map((c) => c.index)).toEqual([producer.clientIndex]);
      expect(after.slots.find((s) => s.digestHex === key.hex)!.pinHolders).toEqual([]);
      expect(producer.tryEvict(key)).toBe('evicted');
    } finally {
      producer.close();
      unlinkLeaseTable(name);
    }
  });
});
