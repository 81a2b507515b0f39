#!/usr/bin/env node
// The floor under bench:coordinator's growth: the two hash maps every cycle
// must touch (consumer by (engine, request), unit by key digest), with the
// same ring access pattern and nothing else. If this grows from 1k to 1M
// entries, the coordinator's cycle grows at least as much on this machine.
//
//   node bench/map-floor.js [--sizes 1000,100000,1000000] [--cycles 500000]
import { createHash } from 'node:crypto';

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const at = args.indexOf(`--${name}`);
  return at >= 0 && at + 1 < args.length ? args[at + 1] : fallback;
};
const sizes = option('sizes', '1000,100000,1000000').split(',').map(Number);
const cycles = Number(option('cycles', '500000'));

for (const waiting of sizes) {
  const ring = waiting + 1024;
  const digests = Array.from({ length: ring }, (_, i) => createHash('sha256').update(String(i)).digest('hex'));
  const byRequest = new Map();
  const byDigest = new Map();
  const admit = (i) => {
    const request = `req-${i}`;
    const unit = { digest: digests[i], waiting: 1 };
    byDigest.set(digests[i], unit);
    byRequest.set(request, { request, unit });
  };
  const retire = (i) => {
    const record = byRequest.get(`req-${i}`);
    byRequest.delete(record.request);
    byDigest.delete(record.unit.digest);
  };
  for (let i = 0; i < waiting; i++) admit(i);
  let next = waiting;
  let head = 0;
  const start = process.hrtime.bigint();
  for (let c = 0; c < cycles; c++) {
    if (byDigest.has(digests[next]) || byRequest.has(`req-${next}`)) throw new Error('ring overlap');
    admit(next);
    retire(head);
    next = next + 1 === ring ? 0 : next + 1;
    head = head + 1 === ring ? 0 : head + 1;
  }
  const ns = Number(process.hrtime.bigint() - start) / cycles;
  if (byRequest.size !== waiting || byDigest.size !== waiting) throw new Error('map floor miscounted');
  console.log(`${String(waiting).padStart(8)} entries: ${ns.toFixed(0).padStart(5)} ns per cycle (2 lookups, 2 inserts, 1 get, 2 deletes)`);
}
