#!/usr/bin/env node
// Latency of one pin: a lookup and pin of a ready artifact and the release of
// its lease (`table.tryPin(key)` + `lease.close()`), as a distribution. Every
// implementation runs every case, each (implementation, case) in a fresh
// process; this parent only plans, starts redis-server and aggregates.
//
//   npm run bench:pin                             table
//   npm run -s bench:pin -- --json                one JSON object on stdout, nothing else
//   npm run bench:pin -- --quick                  smaller run, under 45 s
//   ... -- --impl native,js --case hit,miss       choose implementations and cases
//
// Implementations:
//   native   the lease table through the Node-API addon (POSIX shared memory)
//   js       the JavaScript fallback (SharedArrayBuffer, same layout and protocol)
//   c-floor  the same lookup + pin + unpin in a C loop inside the native library
//            (wp_pin_loop): no JavaScript and no N-API crossing per pin
//   sqlite   better-sqlite3, WAL, one UPDATE per pin and one per unpin on a READY row
//   redis    Lua EVALSHA pin and unpin through ioredis, redis-server on 127.0.0.1
//   map      an in-process Map of refcounts (one process only)
// Cases:
//   hit, miss (absent key), device-hit (a device record matches the target),
//   contended-2 / contended-4 (2 or 4 pinners on the same slot: processes, or
//   worker_threads for js; each reports its own distribution), table-full (the
//   key's 8-slot probe window is full of other keys; the key itself is absent).
//
// Timing. One process.hrtime.bigint() read costs ~40 ns here, more than a pin,
// so ops are timed in batches: one clock read before and one after `batch`
// consecutive ops, and the batch time / batch is one sample of per-op latency.
// The distribution is over batches: a single slow op inside a batch (a GC
// scavenge, a preemption) shows diluted by the batch size. batch is 32 for
// native, js and map, 256 for c-floor (one pinLoop call per batch, so its own
// N-API crossing adds < 0.2 ns per op), and 1 for sqlite and redis (an op costs
// microseconds, a clock read is noise). The clock pair is inside every sample.
// A contended row gives, at each percentile, the worst of its pinners; --json
// adds every pinner's own distribution and how much their runs overlapped.
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { benchEnv, benchKey } from './common.js';
import { nearestRank } from '../dist/internal/stats.js';
import { homeSlotFor } from '../dist/lease-table/js-handle.js';
import { PROBE_WINDOW } from '../dist/lease-table/layout.js';

const require = createRequire(import.meta.url);
const SCRIPT = fileURLToPath(import.meta.url);

const IMPLEMENTATIONS = ['native', 'js', 'c-floor', 'sqlite', 'redis', 'map'];
const CASES = ['hit', 'miss', 'device-hit', 'contended-2', 'contended-4', 'table-full'];

const CAPACITY = 1024;
const HIT_INDEX = 0;
const ABSENT_INDEX = 1;
const WINDOW_SEARCH_FROM = 16;
const META = Object.freeze({ sizeBytes: 1 << 20, location: 4096, checksum: 0xc0ffee, codecId: 1, representationVersion: 1 });
const TARGET = Object.freeze({ device: 'GPU-8f3c2a10-5b7e-4d21-9a6c-0e1f2a3b4c5d', arena: 7, arenaGeneration: 3 });
const DEVICE_UUID_HEX = TARGET.device.slice(4).replaceAll('-', '');

/** Ops per clock read, per implementation. */
const BATCH = { native: 32, js: 32, map: 32, 'c-floor': 256, sqlite: 1, redis: 1 };
/** Most ops one process measures, per implementation; each measurement also stops after `seconds`. */
const OPS = {
  full: { native: 6_400_000, js: 6_400_000, map: 6_400_000, 'c-floor': 51_200_000, sqlite: 100_000, redis: 50_000, seconds: 10 },
  quick: { native: 320_000, js: 320_000, map: 320_000, 'c-floor': 2_560_000, sqlite: 4_000, redis: 2_000, seconds: 1 },
};

// ---- the parent: plan, run each (implementation, case) in a fresh process, report -------

async function main(flag, option) {
  const quick = flag('quick');
  const json = flag('json');
  const pick = (name, all) => {
    const chosen = option(name, all.join(',')).split(',');
    const unknown = chosen.filter((c) => !all.includes(c));
    if (unknown.length > 0) throw new Error(`--${name} wants some of ${all.join(',')}, got ${unknown.join(',')}`);
    return all.filter((c) => chosen.includes(c));
  };
  const impls = pick('impl', IMPLEMENTATIONS);
  const cases = pick('case', CASES);
  const { implementation, implementationReason } = await import('../dist/index.js');
  const { nativeAddon } = await import('../dist/native.js');
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));

  const versions = {};
  const unavailable = {};
  if (impls.includes('native') || impls.includes('c-floor')) {
    if (implementation === 'native') {
      versions.native = `waitprep ${pkg.version}, Node-API addon ABI ${nativeAddon.abiVersion}`;
      versions['c-floor'] = `wp_pin_loop in the waitprep ${pkg.version} addon`;
    } else {
      unavailable.native = unavailable['c-floor'] = `the native addon is not loaded: ${implementationReason}`;
    }
  }
  if (impls.includes('js')) versions.js = `waitprep ${pkg.version}, JavaScript fallback over SharedArrayBuffer`;
  if (impls.includes('map')) versions.map = `Node ${process.version} Map`;
  if (impls.includes('sqlite')) {
    try {
      const Database = require('better-sqlite3');
      const db = new Database(':memory:');
      versions.sqlite = `better-sqlite3 ${require('better-sqlite3/package.json').version}, SQLite ${db.prepare('SELECT sqlite_version() AS v').get().v}`;
      db.close();
    } catch (error) {
      unavailable.sqlite = `better-sqlite3 did not load (${String(error.message).split('\n')[0]})`;
    }
  }
  if (impls.includes('redis')) {
    const redisServer = redisServerVersion();
    let ioredis = null;
    try {
      ioredis = require('ioredis/package.json').version;
    } catch {
      unavailable.redis = 'ioredis is not installed';
    }
    if (redisServer === null) unavailable.redis ??= 'redis-server is not installed (not on PATH)';
    else if (ioredis !== null) versions.redis = `redis-server ${redisServer} via ioredis ${ioredis}`;
  }

  const plan = [];
  const skipped = [];
  for (const kase of cases) {
    for (const impl of impls) {
      const reason = unavailable[impl] ?? notApplicable(impl, kase);
      if (reason) skipped.push({ implementation: impl, case: kase, reason });
      else plan.push({ impl, kase });
    }
  }

  const dir = mkdtempSync(join(tmpdir(), 'waitprep-bench-pin-'));
  const { unlinkLeaseTable } = await import('../dist/index.js');
  let redis = null;
  const results = [];
  try {
    if (plan.some((p) => p.impl === 'redis')) {
      try {
        redis = await startRedis();
      } catch (error) {
        unavailable.redis = `redis-server did not start: ${error.message}`;
        for (const p of plan.filter((q) => q.impl === 'redis')) skipped.push({ implementation: 'redis', case: p.kase, reason: unavailable.redis });
        plan.splice(0, plan.length, ...plan.filter((q) => q.impl !== 'redis'));
        delete versions.redis;
      }
    }
    let n = 0;
    for (const { impl, kase } of plan) {
      const table = `waitprep-bench-pin-${process.pid}-${n++}`;
      process.stderr.write(`bench:pin ${impl} ${kase}\n`);
      try {
        const out = await runNode([SCRIPT, '--run', '--impl', impl, '--case', kase, '--table', table, '--dir', dir, '--port', String(redis?.port ?? 0), ...(quick ? ['--quick'] : [])]);
        results.push(JSON.parse(out));
      } finally {
        // The case process unlinks its table; this catches one that died first.
        if (impl === 'native' || impl === 'c-floor') unlinkLeaseTable(table);
      }
    }
  } finally {
    if (redis !== null) await redis.stop();
    rmSync(dir, { recursive: true, force: true });
  }

  for (const impl of IMPLEMENTATIONS) {
    if (!impls.includes(impl)) delete versions[impl];
    else if (versions[impl] === undefined && unavailable[impl] !== undefined) versions[impl] = `skipped: ${unavailable[impl]}`;
  }
  const env = benchEnv({
    implementationVersions: versions,
    quick,
    clock_ns: clockCost(),
    timing: 'per-op ns = (time of a batch of ops between two process.hrtime.bigint() reads) / batch; percentiles over batches; contended rows: the worst pinner at each percentile',
  });
  if (json) {
    process.stdout.write(JSON.stringify({ env, results, skipped }) + '\n');
    return;
  }
  console.log(`waitprep pin latency (tryPin + lease close) — ${env.date}, ${env.cpu} (${env.cores} cores), Node ${env.node}${quick ? ', --quick' : ''}`);
  console.table(results.map((r) => ({
    implementation: r.implementation,
    case: r.case,
    'p50 ns': ns(r.p50_ns),
    'p90 ns': ns(r.p90_ns),
    'p99 ns': ns(r.p99_ns),
    'p99.9 ns': ns(r.p999_ns),
    'max ns': ns(r.max_ns),
    ops: r.ops,
    batch: r.batch,
  })));
  for (const s of skipped) console.log(`skipped ${s.implementation} ${s.case}: ${s.reason}`);
  for (const [impl, version] of Object.entries(versions)) console.log(`${impl}: ${version}`);
  console.log(`timing: ${env.timing}; batch = ops per clock read; one clock read costs ~${env.clock_ns} ns here`);
}

/** Why `impl` cannot run `kase` at all, or null. */
function notApplicable(impl, kase) {
  if (impl === 'map' && kase.startsWith('contended-')) return 'a Map lives in one thread: no other process or thread can pin through it';
  if (impl === 'c-floor' && kase === 'device-hit') return 'wp_pin_loop pins for host readiness only (it takes no device target)';
  return null;
}

function ns(v) {
  return v < 100 ? v.toFixed(1) : Math.round(v).toLocaleString('en-US');
}

/** ns of one process.hrtime.bigint() read, as timed here. */
function clockCost() {
  const n = 1_000_000;
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) process.hrtime.bigint();
  return Math.round(Number(process.hrtime.bigint() - t0) / n);
}

/** Runs node with `args`; resolves its stdout, rejects when it exits non-zero. */
function runNode(args) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (d) => (out += d));
    child.on('error', reject);
    child.on('close', (code, signal) => {
      if (code === 0) resolve(out);
      else reject(new Error(`bench:pin: node ${args.slice(1).join(' ')} exited with ${signal ?? code}`));
    });
  });
}

function redisServerVersion() {
  const r = spawnSync('redis-server', ['--version'], { encoding: 'utf8' });
  if (r.error || r.status !== 0) return null;
  return /v=(\S+)/.exec(r.stdout)?.[1] ?? r.stdout.trim();
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

function ping(port) {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    let reply = '';
    socket.setTimeout(500, () => {
      socket.destroy();
      resolve(false);
    });
    socket.on('connect', () => socket.write('PING\r\n'));
    socket.on('data', (d) => {
      reply += d;
      if (reply.includes('\r\n')) {
        socket.destroy();
        resolve(reply.startsWith('+PONG'));
      }
    });
    socket.on('error', () => resolve(false));
  });
}

/** Starts a throwaway redis-server on 127.0.0.1 (no persistence); `stop()` ends it. */
async function startRedis() {
  const port = await freePort();
  const server = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--loglevel', 'warning'], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  server.stderr.setEncoding('utf8').on('data', (d) => (stderr += d));
  let exited = false;
  const exit = once(server, 'exit').then(() => (exited = true));
  server.on('error', () => {});
  const stop = async () => {
    if (exited) return;
    server.kill('SIGTERM');
    const timer = setTimeout(() => server.kill('SIGKILL'), 5000);
    await exit;
    clearTimeout(timer);
  };
  const deadline = Date.now() + 10_000;
  while (!(await ping(port))) {
    if (exited || Date.now() > deadline) {
      await stop();
      throw new Error(stderr.trim().split('\n').pop() || 'no PONG within 10 s');
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  return { port, stop };
}

// ---- keys ------------------------------------------------------------------------------

let waitprepModule = null;
async function waitprep() {
  waitprepModule ??= await import('../dist/index.js');
  return waitprepModule;
}

/** The table's home slot of a key (the fallback's homeSlotFor, the same formula as table.c). */
function homeSlot(key, capacity) {
  return homeSlotFor(Buffer.from(key.hex, 'hex').readUInt32LE(0), capacity);
}

/** Indexes of PROBE_WINDOW + 1 keys with one home slot: the first 8 fill its window, the last is looked up. */
function windowKeyIndexes(artifactKey) {
  const byHome = new Map();
  for (let i = WINDOW_SEARCH_FROM; ; i++) {
    const home = homeSlot(benchKey(artifactKey, i), CAPACITY);
    const list = byHome.get(home) ?? [];
    byHome.set(home, list);
    list.push(i);
    if (list.length === PROBE_WINDOW + 1) return list;
  }
}

// ---- one (implementation, case), in its own process -------------------------------------

/**
 * What a case pins and what it must see. `published` are the key indexes the
 * store holds READY; `pinIndex` is the key every op looks up; `expect` is the
 * outcome every op must have ('lease', or a miss because the key is absent).
 */
async function fixture(kase) {
  const { artifactKey } = await waitprep();
  if (kase === 'miss') return { published: [HIT_INDEX], pinIndex: ABSENT_INDEX, expect: 'absent', device: false };
  if (kase === 'table-full') {
    const indexes = windowKeyIndexes(artifactKey);
    return { published: indexes.slice(0, PROBE_WINDOW), pinIndex: indexes[PROBE_WINDOW], expect: 'absent', device: false };
  }
  return { published: [HIT_INDEX], pinIndex: HIT_INDEX, expect: 'lease', device: kase === 'device-hit' };
}

async function runCase(impl, kase, o) {
  if (!IMPLEMENTATIONS.includes(impl) || !CASES.includes(kase)) throw new Error(`--run wants an implementation and a case, got ${impl} ${kase}`);
  const contenders = kase.startsWith('contended-') ? Number(kase.slice('contended-'.length)) : 0;
  const mode = o.quick ? 'quick' : 'full';
  const sizes = { ops: OPS[mode][impl], batch: BATCH[impl], seconds: OPS[mode].seconds };
  const store = await createStore(impl, kase, o, await fixture(kase), sizes);
  let row;
  try {
    if (contenders === 0) {
      const consumer = await openConsumer(store.ctx, store.local);
      let m;
      try {
        await warmUp(consumer, sizes);
        m = await measure(consumer, sizes);
        consumer.check();
      } finally {
        consumer.close();
      }
      row = { implementation: impl, case: kase, ...summarize(m.samples, sizes.batch), ops: m.ops, batch: sizes.batch };
    } else {
      const each = impl === 'js' ? await contendThreads(store.ctx, contenders) : await contendProcesses(store.ctx, contenders);
      const worst = {};
      for (const q of ['p50_ns', 'p90_ns', 'p99_ns', 'p999_ns', 'max_ns']) worst[q] = Math.max(...each.map((e) => e[q]));
      // overlap: the share of the whole run during which every pinner was measuring.
      // wall_ns_per_op: a pinner's window / its ops; well above its p50 when the
      // pinners took turns on fewer cores than there are pinners.
      const first = Math.min(...each.map((e) => e.start));
      const last = Math.max(...each.map((e) => e.end));
      const together = Math.min(...each.map((e) => e.end)) - Math.max(...each.map((e) => e.start));
      row = {
        implementation: impl,
        case: kase,
        ...worst,
        ops: each.reduce((sum, e) => sum + e.ops, 0),
        batch: sizes.batch,
        pinners: `${contenders} ${impl === 'js' ? 'worker_threads' : 'processes'}`,
        overlap: Math.round((Math.max(0, together) / (last - first)) * 100) / 100,
        each: each.map(({ p50_ns, p90_ns, p99_ns, p999_ns, max_ns, ops, start, end }) => ({
          p50_ns,
          p90_ns,
          p99_ns,
          p999_ns,
          max_ns,
          ops,
          wall_ns_per_op: Math.round(((end - start) / ops) * 10) / 10,
        })),
      };
    }
    await store.verify();
  } finally {
    await store.dispose();
  }
  return row;
}

async function warmUp(consumer, sizes) {
  await measure(consumer, { ...sizes, ops: Math.max(sizes.batch, Math.floor(sizes.ops / 10)), seconds: sizes.seconds / 4 });
}

/** Runs batches until `sizes.ops` ops or `sizes.seconds`; throws when any op had another outcome than expected. */
async function measure(consumer, sizes) {
  const maxBatches = Math.max(1, Math.floor(sizes.ops / sizes.batch));
  const samples = new Float64Array(maxBatches);
  const start = Number(process.hrtime.bigint());
  const deadline = BigInt(start) + BigInt(Math.round(sizes.seconds * 1e9));
  const run = consumer.batch;
  let expected = 0;
  let n = 0;
  if (consumer.async) {
    while (n < maxBatches) {
      const t0 = process.hrtime.bigint();
      expected += await run();
      const t1 = process.hrtime.bigint();
      samples[n++] = Number(t1 - t0);
      if (t1 > deadline) break;
    }
  } else {
    while (n < maxBatches) {
      const t0 = process.hrtime.bigint();
      expected += run();
      const t1 = process.hrtime.bigint();
      samples[n++] = Number(t1 - t0);
      if (t1 > deadline) break;
    }
  }
  const ops = n * sizes.batch;
  const end = Number(process.hrtime.bigint());
  if (expected !== ops) throw new Error(`bench miscounted: ${ops} ops, ${expected} with the expected outcome (${consumer.expect})`);
  return { samples: samples.subarray(0, n), ops, start, end };
}

function summarize(samples, batch) {
  const sorted = Float64Array.from(samples).sort();
  const at = (q) => Math.round((nearestRank(sorted, q) / batch) * 10) / 10;
  return { p50_ns: at(0.5), p90_ns: at(0.9), p99_ns: at(0.99), p999_ns: at(0.999), max_ns: at(1) };
}

// ---- stores: built by the case process ------------------------------------------------

/**
 * Creates and fills the store a case pins against. `ctx` is what a consumer
 * (here, in a contender process or in a worker) needs to open it; `local`
 * holds what cannot cross a process (the Map). `verify` checks that no pin is
 * left; `dispose` removes what was created.
 */
async function createStore(impl, kase, o, fx, sizes) {
  const { artifactKey } = await waitprep();
  const ctx = { impl, kase, ...fx, sizes, table: o.table, dir: o.dir, port: o.port };
  const published = fx.published.map((i) => benchKey(artifactKey, i));

  if (impl === 'native' || impl === 'js' || impl === 'c-floor') {
    const { openLeaseTable, unlinkLeaseTable } = await import('../dist/index.js');
    const implementation = impl === 'js' ? 'js' : 'native';
    const producer = openLeaseTable({ name: o.table, role: 'producer', create: { capacity: CAPACITY }, implementation });
    try {
      const slots = [];
      for (const key of published) {
        const reservation = producer.reserve(key);
        producer.publish(reservation, META);
        slots.push(reservation.slot);
        if (fx.device && producer.recordDeviceWrite(key, { ...TARGET, writeSeq: 1 }) !== 'recorded') throw new Error('recordDeviceWrite did not record');
      }
      if (kase === 'table-full') checkFullWindow(producer, slots, benchKey(artifactKey, fx.pinIndex));
      ctx.slot = fx.expect === 'lease' ? slots[0] : -1;
      ctx.tableImpl = implementation;
      if (impl === 'js') ctx.buffer = producer.sharedBuffer;
    } catch (error) {
      producer.close();
      if (implementation === 'native') unlinkLeaseTable(o.table);
      throw error;
    }
    return {
      ctx,
      local: null,
      verify() {
        // Every pin was matched by an unpin: no client holds a pin bit, and each key evicts.
        const pinned = producer.inspect().slots.filter((s) => s.pinHolders.length > 0);
        if (pinned.length > 0) throw new Error(`bench miscounted: pins left on slots ${pinned.map((s) => `${s.slot} (clients ${s.pinHolders})`).join(', ')}`);
        for (const key of published) if (producer.tryEvict(key) !== 'evicted') throw new Error('bench miscounted: a key did not evict after the run');
      },
      dispose() {
        producer.close();
        if (implementation === 'native') unlinkLeaseTable(o.table);
      },
    };
  }

  if (impl === 'sqlite') {
    const Database = require('better-sqlite3');
    ctx.db = join(o.dir, `${o.table}.sqlite`);
    const db = new Database(ctx.db);
    db.pragma('journal_mode = WAL');
    db.exec(`CREATE TABLE artifacts (
      digest BLOB PRIMARY KEY, state INTEGER NOT NULL, pins INTEGER NOT NULL DEFAULT 0,
      size_bytes INTEGER, location INTEGER, checksum INTEGER, codec_id INTEGER, representation_version INTEGER,
      device BLOB, arena INTEGER, arena_generation INTEGER, write_seq INTEGER
    ) WITHOUT ROWID`);
    const insert = db.prepare(`INSERT INTO artifacts VALUES (?, 2, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?)`);
    for (const key of published) {
      const device = fx.device ? [Buffer.from(DEVICE_UUID_HEX, 'hex'), TARGET.arena, TARGET.arenaGeneration, 1] : [null, null, null, null];
      insert.run(Buffer.from(key.hex, 'hex'), META.sizeBytes, META.location, META.checksum, META.codecId, META.representationVersion, ...device);
    }
    return {
      ctx,
      local: null,
      verify() {
        const { pins, rows } = db.prepare('SELECT SUM(pins) AS pins, COUNT(*) AS rows FROM artifacts').get();
        if (pins !== 0 || rows !== published.length) throw new Error(`bench miscounted: ${pins} pins left over ${rows} rows`);
      },
      dispose() {
        db.close();
        for (const suffix of ['', '-wal', '-shm']) rmSync(ctx.db + suffix, { force: true });
      },
    };
  }

  if (impl === 'redis') {
    const Redis = require('ioredis');
    ctx.prefix = `wp:${o.table}:`;
    const client = new Redis({ host: '127.0.0.1', port: o.port, lazyConnect: true, maxRetriesPerRequest: 1 });
    await client.connect();
    for (const key of published) {
      const fields = {
        state: 'ready',
        pins: 0,
        size_bytes: META.sizeBytes,
        location: META.location,
        checksum: META.checksum,
        codec_id: META.codecId,
        representation_version: META.representationVersion,
      };
      if (fx.device) Object.assign(fields, { device: DEVICE_UUID_HEX, arena: TARGET.arena, arena_generation: TARGET.arenaGeneration, write_seq: 1 });
      await client.hset(ctx.prefix + key.hex, fields);
    }
    return {
      ctx,
      local: null,
      async verify() {
        for (const key of published) {
          const pins = await client.hget(ctx.prefix + key.hex, 'pins');
          if (pins !== '0') throw new Error(`bench miscounted: ${pins} pins left on ${key.hex}`);
        }
      },
      async dispose() {
        await client.del(...published.map((key) => ctx.prefix + key.hex));
        await client.quit();
      },
    };
  }

  // map: one process, so the consumer gets the Map itself.
  const map = new Map();
  for (const key of published) {
    map.set(key.hex, {
      state: READY,
      pins: 0,
      meta: META,
      device: fx.device ? TARGET.device : null,
      arena: fx.device ? TARGET.arena : 0,
      arenaGeneration: fx.device ? TARGET.arenaGeneration : 0,
    });
  }
  return {
    ctx,
    local: map,
    verify() {
      for (const [hex, entry] of map) if (entry.pins !== 0) throw new Error(`bench miscounted: ${entry.pins} pins left on ${hex}`);
    },
    dispose() {},
  };
}

/** The table-full case must really be the worst case: 8 slots of one window taken, the looked-up key's home is its start. */
function checkFullWindow(producer, slots, absentKey) {
  const home = homeSlot(absentKey, CAPACITY);
  const want = Array.from({ length: PROBE_WINDOW }, (_, i) => (home + i) % CAPACITY);
  if (slots.join() !== want.join()) throw new Error(`table-full: the window keys took slots ${slots}, not ${want}`);
  try {
    producer.abandon(producer.reserve(absentKey));
  } catch (error) {
    if (error.code === 'ERR_TABLE_FULL') return;
    throw error;
  }
  throw new Error('table-full: the probe window still had room');
}

const READY = 2;

class MapLease {
  constructor(entry) {
    this.entry = entry;
  }

  close() {
    const entry = this.entry;
    if (entry === null) return;
    this.entry = null;
    entry.pins--;
  }
}

const PIN_LUA = `
local h = KEYS[1]
if redis.call('HGET', h, 'state') ~= 'ready' then return false end
if #ARGV > 0 then
  local d = redis.call('HMGET', h, 'device', 'arena', 'arena_generation')
  if d[1] ~= ARGV[1] or d[2] ~= ARGV[2] or d[3] ~= ARGV[3] then return false end
end
redis.call('HINCRBY', h, 'pins', 1)
return redis.call('HMGET', h, 'size_bytes', 'location', 'checksum', 'codec_id', 'representation_version')`;
const UNPIN_LUA = `
local n = redis.call('HINCRBY', KEYS[1], 'pins', -1)
if n < 0 then
  redis.call('HINCRBY', KEYS[1], 'pins', 1)
  return -1
end
return n`;

/**
 * Opens one pinner on a store: `batch()` runs `ctx.sizes.batch` ops (each a
 * lookup and pin of the key, and the release of the pin when it hit) and
 * returns how many had the expected outcome; `check()` throws if this pinner
 * still holds a pin.
 */
async function openConsumer(ctx, local) {
  const { artifactKey } = await waitprep();
  const key = benchKey(artifactKey, ctx.pinIndex);
  const B = ctx.sizes.batch;
  const expectLease = ctx.expect === 'lease';

  if (ctx.impl === 'native' || ctx.impl === 'js') {
    const { openLeaseTable } = await import('../dist/index.js');
    const table = openLeaseTable({ name: ctx.table, role: 'consumer', implementation: ctx.tableImpl, ...(ctx.buffer ? { buffer: ctx.buffer } : {}) });
    const want = { readiness: 'device', target: TARGET };
    let one;
    if (!expectLease) {
      one = () => {
        const r = table.tryPin(key);
        return r.kind === 'miss' && r.reason === 'absent' ? 1 : 0;
      };
    } else if (ctx.device) {
      one = () => {
        const r = table.tryPin(key, want);
        if (r.kind !== 'lease') return 0;
        r.close();
        return 1;
      };
    } else {
      one = () => {
        const r = table.tryPin(key);
        if (r.kind !== 'lease') return 0;
        r.close();
        return 1;
      };
    }
    return {
      expect: ctx.expect,
      batch() {
        let e = 0;
        for (let i = 0; i < B; i++) e += one();
        return e;
      },
      check() {
        if (ctx.slot >= 0 && table.clientPins(ctx.slot) !== 0) throw new Error(`bench miscounted: this client still holds ${table.clientPins(ctx.slot)} pins`);
      },
      close: () => table.close(),
    };
  }

  if (ctx.impl === 'c-floor') {
    const { nativeAddon } = await import('../dist/native.js');
    const { EXCHANGE } = await import('../dist/lease-table/layout.js');
    const [status, h] = nativeAddon.open(ctx.table, false, 0, 0o600, new BigUint64Array(EXCHANGE.WORDS));
    if (status !== 0) throw new Error(`c-floor: opening ${ctx.table} failed with status ${status}`);
    const digest = new Uint8Array(Buffer.from(key.hex, 'hex'));
    const iterations = BigInt(B);
    return {
      expect: ctx.expect,
      batch() {
        const hits = Number(nativeAddon.pinLoop(h, digest, iterations));
        return expectLease ? hits : B - hits;
      },
      check() {
        if (ctx.slot >= 0 && nativeAddon.clientPins(h, ctx.slot) !== 0) throw new Error('bench miscounted: the C loop left pins');
      },
      close: () => nativeAddon.close(h),
    };
  }

  if (ctx.impl === 'sqlite') {
    const Database = require('better-sqlite3');
    const db = new Database(ctx.db);
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    db.pragma('busy_timeout = 10000');
    const digest = Buffer.from(key.hex, 'hex');
    const returning = 'RETURNING size_bytes, location, checksum, codec_id, representation_version';
    const pin = ctx.device
      ? db.prepare(`UPDATE artifacts SET pins = pins + 1 WHERE digest = ? AND state = 2 AND device = ? AND arena = ? AND arena_generation = ? ${returning}`)
      : db.prepare(`UPDATE artifacts SET pins = pins + 1 WHERE digest = ? AND state = 2 ${returning}`);
    const unpin = db.prepare('UPDATE artifacts SET pins = pins - 1 WHERE digest = ? AND pins > 0');
    const args = ctx.device ? [digest, Buffer.from(DEVICE_UUID_HEX, 'hex'), TARGET.arena, TARGET.arenaGeneration] : [digest];
    let held = 0;
    return {
      expect: ctx.expect,
      batch() {
        let e = 0;
        for (let i = 0; i < B; i++) {
          const row = pin.get(...args);
          if (row === undefined) {
            e += expectLease ? 0 : 1;
            continue;
          }
          held++;
          held -= unpin.run(digest).changes;
          e += expectLease ? 1 : 0;
        }
        return e;
      },
      check() {
        if (held !== 0) throw new Error(`bench miscounted: ${held} pins not released`);
      },
      close: () => db.close(),
    };
  }

  if (ctx.impl === 'redis') {
    const Redis = require('ioredis');
    const client = new Redis({ host: '127.0.0.1', port: ctx.port, lazyConnect: true, maxRetriesPerRequest: 1 });
    await client.connect();
    const pinSha = await client.script('LOAD', PIN_LUA);
    const unpinSha = await client.script('LOAD', UNPIN_LUA);
    const name = ctx.prefix + key.hex;
    const device = ctx.device ? [DEVICE_UUID_HEX, String(TARGET.arena), String(TARGET.arenaGeneration)] : [];
    let held = 0;
    return {
      expect: ctx.expect,
      async: true,
      async batch() {
        let e = 0;
        for (let i = 0; i < B; i++) {
          const meta = await client.evalsha(pinSha, 1, name, ...device);
          if (meta === null) {
            e += expectLease ? 0 : 1;
            continue;
          }
          held++;
          if ((await client.evalsha(unpinSha, 1, name)) >= 0) held--;
          e += expectLease ? 1 : 0;
        }
        return e;
      },
      check() {
        if (held !== 0) throw new Error(`bench miscounted: ${held} pins not released`);
      },
      close: () => client.disconnect(),
    };
  }

  // map
  const map = local;
  const hex = key.hex;
  let one;
  if (!expectLease) {
    one = () => {
      const entry = map.get(hex);
      return entry === undefined ? 1 : 0;
    };
  } else if (ctx.device) {
    one = () => {
      const entry = map.get(hex);
      if (entry === undefined || entry.state !== READY) return 0;
      if (entry.device !== TARGET.device || entry.arena !== TARGET.arena || entry.arenaGeneration !== TARGET.arenaGeneration) return 0;
      entry.pins++;
      new MapLease(entry).close();
      return 1;
    };
  } else {
    one = () => {
      const entry = map.get(hex);
      if (entry === undefined || entry.state !== READY) return 0;
      entry.pins++;
      new MapLease(entry).close();
      return 1;
    };
  }
  return {
    expect: ctx.expect,
    batch() {
      let e = 0;
      for (let i = 0; i < B; i++) e += one();
      return e;
    },
    check() {},
    close() {},
  };
}

// ---- contended: N pinners on one slot ---------------------------------------------------

/** Pinners as child processes: each opens the store, warms up, says `ready`, waits for `go`, measures, reports. */
async function contendProcesses(ctx, n) {
  const children = [];
  try {
    for (let i = 0; i < n; i++) {
      children.push(spawn(process.execPath, [SCRIPT, '--contender', '--ctx', JSON.stringify(ctx)], { stdio: ['pipe', 'pipe', 'inherit'] }));
    }
    const exits = children.map((child) => once(child, 'close'));
    const lines = children.map((child) => createInterface({ input: child.stdout })[Symbol.asyncIterator]());
    for (const line of lines) {
      const { value } = await line.next();
      if (value !== 'ready') throw new Error(`contender: expected "ready", got ${value}`);
    }
    for (const child of children) child.stdin.end('go\n');
    const results = await Promise.all(lines.map(async (line) => (await line.next()).value));
    const codes = await Promise.all(exits);
    if (codes.some(([code]) => code !== 0)) throw new Error(`contender exited with ${codes.map(([code, signal]) => signal ?? code)}`);
    return results.map((line) => JSON.parse(line));
  } finally {
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
}

/**
 * One pinner's distribution, and its measuring window on the monotonic clock
 * (process.hrtime is CLOCK_MONOTONIC, one clock for every process).
 */
function pinnerResult(m, batch) {
  return { ...summarize(m.samples, batch), ops: m.ops, start: m.start, end: m.end };
}

async function contenderProcess(ctx) {
  const consumer = await openConsumer(ctx, null);
  await warmUp(consumer, ctx.sizes);
  process.stdout.write('ready\n');
  await once(createInterface({ input: process.stdin }), 'line');
  let m;
  try {
    m = await measure(consumer, ctx.sizes);
    consumer.check();
  } finally {
    consumer.close();
  }
  process.stdout.write(JSON.stringify(pinnerResult(m, ctx.sizes.batch)) + '\n');
}

/** The messages of a worker, one `next()` at a time; rejects once it failed or exited early. */
function inbox(worker) {
  const queue = [];
  const waiting = [];
  let failed = null;
  worker.on('message', (m) => (waiting.length > 0 ? waiting.shift().resolve(m) : queue.push(m)));
  const fail = (error) => {
    failed ??= error;
    for (const w of waiting.splice(0)) w.reject(failed);
  };
  worker.on('error', fail);
  worker.on('exit', (code) => fail(new Error(`worker exited with ${code} before reporting`)));
  return () => {
    if (queue.length > 0) return Promise.resolve(queue.shift());
    if (failed !== null) return Promise.reject(failed);
    return new Promise((resolve, reject) => waiting.push({ resolve, reject }));
  };
}

/** Pinners as worker_threads sharing the JavaScript table's buffer; a shared word is the start gate. */
async function contendThreads(ctx, n) {
  const gate = new Int32Array(new SharedArrayBuffer(4));
  const workers = [];
  try {
    const inboxes = [];
    for (let i = 0; i < n; i++) {
      const worker = new Worker(SCRIPT, { workerData: { ctx, gate } });
      workers.push(worker);
      inboxes.push(inbox(worker));
    }
    for (const next of inboxes) if ((await next()) !== 'ready') throw new Error('worker: expected "ready"');
    Atomics.store(gate, 0, 1);
    Atomics.notify(gate, 0);
    return await Promise.all(inboxes.map((next) => next()));
  } finally {
    await Promise.all(workers.map((w) => w.terminate()));
  }
}

async function contenderThread() {
  const { ctx, gate } = workerData;
  const consumer = await openConsumer(ctx, null);
  await warmUp(consumer, ctx.sizes);
  parentPort.postMessage('ready');
  Atomics.wait(gate, 0, 0);
  let m;
  try {
    m = await measure(consumer, ctx.sizes);
    consumer.check();
  } finally {
    consumer.close();
  }
  parentPort.postMessage(pinnerResult(m, ctx.sizes.batch));
}

// Dispatch last: the constants above are initialised by now.
if (!isMainThread) {
  await contenderThread();
} else {
  const args = process.argv.slice(2);
  const flag = (name) => args.includes(`--${name}`);
  const option = (name, fallback) => {
    const at = args.indexOf(`--${name}`);
    return at >= 0 && at + 1 < args.length ? args[at + 1] : fallback;
  };
  if (flag('run')) {
    const row = await runCase(option('impl'), option('case'), { quick: flag('quick'), table: option('table'), dir: option('dir'), port: Number(option('port', '0')) });
    process.stdout.write(JSON.stringify(row) + '\n');
  } else if (flag('contender')) {
    await contenderProcess(JSON.parse(option('ctx')));
  } else {
    await main(flag, option);
  }
}
