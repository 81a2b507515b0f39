import { WaitCoordinator, leaseTableBackend, openLeaseTable, unlinkLeaseTable } from 'waitprep';
import { benchKey } from './common.js';
const impl = process.argv[2] ?? 'native';
const RING = 4096, CAP = 1 << 16;
const keys = Array.from({ length: RING }, (_, i) => benchKey(i));
const META = { sizeBytes: 1 << 20, location: 4096, checksum: 0xc0ffee, codecId: 1, representationVersion: 1 };
const name = `wp-hot-${process.pid}`;
const producer = openLeaseTable({ name, role: 'producer', create: { capacity: CAP }, implementation: impl });
const consumer = openLeaseTable({ name, role: 'consumer', implementation: impl, ...(impl === 'js' ? { buffer: producer.sharedBuffer } : {}) });
const coordinator = new WaitCoordinator({ backend: leaseTableBackend(consumer), maxQueued: 4, maxWaiting: 4, historyLimit: 16, tickets: 'number' });
const grant = { worker: 'w', grant: 'g' }; const ok = { ok: true };
for (let i = 0; i < RING; i++) producer.publish(producer.reserve(keys[i]), META);
let n = 0;
const prep = () => { const key = keys[n % RING]; const a = coordinator.onWait({ engine: 'e', request: `r-${n}`, generation: 0 }, key); n++; coordinator.complete(coordinator.beginNext(grant), ok); return a.ticket; };
for (let i = 0; i < 2e6; i++) {
  const a = prep(), b = prep();
  coordinator.onWake(a).lease.close(); coordinator.onWake(b).lease.close();
}
consumer.close(); producer.close(); if (impl === 'native') unlinkLeaseTable(name);
