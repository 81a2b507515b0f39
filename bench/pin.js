#!/usr/bin/env node
// Latency of one pin: a lookup and pin of a ready artifact and the release of
// its lease (`table.tryPin(key)` + `lease.close()`), as a distribution. Every
// implementation runs every case, each (implementation, case) in a fresh
// process; the parent only plans, starts redis-server and aggregates.
//
//   npm run bench:pin                             table
//   npm run -s bench:pin -- --json                one JSON object on stdout, nothing else
//   npm run bench:pin -- --quick                  smaller run, under 45 s
//   ... -- --impl native,js --case hit,miss       choose implementations and cases
//
// Implementations (one store each, bench/pin/<name>.js):
//   native   the lease table through the Node-API addon (POSIX shared memory)
//   js       the JavaScript fallback (SharedArrayBuffer, same layout and protocol)
//   c-floor  the same lookup + pin + unpin in a C loop inside the native library
//            (wp_pin_loop): no JavaScript and no N-API crossing per pin
//   sqlite   better-sqlite3, WAL, one UPDATE per pin and one per unpin on a READY row
//   redis    Lua EVALSHA pin and unpin through ioredis, redis-server on 127.0.0.1
//   map      an in-process Map of refcounts (one process only)
// Cases (bench/pin/cases.js):
//   hit, miss (absent key), device-hit (a device record matches the target),
//   contended-2 / contended-4 (2 or 4 pinners on the same slot: processes, or
//   worker_threads for js; each reports its own distribution), table-full (the
//   key's two 8-slot buckets are full of other keys; the key itself is absent),
//   cold-slot-25 / cold-slot-50 (native and js only: a 2^20-slot table, 2^16 with --quick,
//   filled to 25% or 50% with READY keys, each op pinning the next of them, so every op meets a
//   slot no recent op touched; the C figure beside it is `core_bench cold` (bench/native/)).
//
// Timing (bench/pin/clock.js). One process.hrtime.bigint() read costs ~40 ns
// here, more than a pin, so ops are timed in batches and the batch time / batch
// is one sample of per-op latency; the distribution is over batches. batch is
// 32 for native, js and map, 256 for c-floor (one pinLoop call per batch, so its
// own N-API crossing adds < 0.2 ns per op), and 1 for sqlite and redis (an op
// costs microseconds, a clock read is noise). The clock pair is inside every
// sample. A contended row gives, at each percentile, the worst of its pinners;
// --json adds every pinner's own distribution and how much their runs overlapped.
//
// Rooms: harness.js (the parent), case.js (one case's process), contender.js
// (one contended pinner), clock.js (batches and percentiles), stores.js (the
// stores and what each provides). This file only picks the role of the process
// it starts in; each role's module is loaded only where it runs.
import { isMainThread } from 'node:worker_threads';

if (!isMainThread) {
  const { contenderThread } = await import('./pin/contender.js');
  await contenderThread();
} else {
  const args = process.argv.slice(2);
  const flag = (name) => args.includes(`--${name}`);
  const option = (name, fallback) => {
    const at = args.indexOf(`--${name}`);
    return at >= 0 && at + 1 < args.length ? args[at + 1] : fallback;
  };
  if (flag('run')) {
    const { runCase } = await import('./pin/case.js');
    const row = await runCase(option('impl'), option('case'), { quick: flag('quick'), table: option('table'), dir: option('dir'), port: Number(option('port', '0')) });
    process.stdout.write(JSON.stringify(row) + '\n');
  } else if (flag('contender')) {
    const { contenderProcess } = await import('./pin/contender.js');
    await contenderProcess(JSON.parse(option('ctx')));
  } else {
    const { main } = await import('./pin/harness.js');
    await main(flag, option);
  }
}
