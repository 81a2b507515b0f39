// One (implementation, case) of bench:pin, in its own process (`pin.js --run`): builds the store,
// measures one pinner here, or starts the contended case's pinners (contender.js) and takes the
// worst of them at each percentile, then checks that every pin was released. Prints one JSON row.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { Worker } from 'node:worker_threads';
import { benchKey } from '../common.js';
import { CASES, ENTRY, fixture, sizesOf } from './cases.js';
import { measure, summarize, warmUp } from './clock.js';
import { IMPLEMENTATIONS, STORES } from './stores.js';

/** `o`: { quick, table, dir, port } from the harness. Resolves the case's row. */
export async function runCase(impl, kase, o) {
  if (!IMPLEMENTATIONS.includes(impl) || !CASES.includes(kase)) throw new Error(`--run wants an implementation and a case, got ${impl} ${kase}`);
  const contenders = kase.startsWith('contended-') ? Number(kase.slice('contended-'.length)) : 0;
  const sizes = sizesOf(impl, o.quick);
  const store = STORES[impl];
  const fx = fixture(kase, o.quick);
  const ctx = { impl, kase, ...fx, sizes, table: o.table, dir: o.dir, port: o.port };
  const built = await store.create(ctx, fx.published.map((i) => benchKey(i)));
  let row;
  try {
    if (contenders === 0) {
      const consumer = await store.openConsumer(ctx, built.local);
      let m;
      try {
        await warmUp(consumer, sizes);
        m = await measure(consumer, sizes);
        consumer.check();
      } finally {
        consumer.close();
      }
      row = { implementation: impl, case: kase, ...summarize(m.samples, sizes.batch), ops: m.ops, batch: sizes.batch, ...(ctx.fill ? { fill: ctx.fill } : {}) };
    } else {
      const threads = store.pinners === 'worker_threads';
      const each = threads ? await contendThreads(ctx, contenders) : await contendProcesses(ctx, contenders);
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
        pinners: `${contenders} ${threads ? 'worker_threads' : 'processes'}`,
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
    await built.verify();
  } finally {
    await built.dispose();
  }
  return row;
}

/** Pinners as child processes: each opens the store, warms up, says `ready`, waits for `go`, measures, reports. */
async function contendProcesses(ctx, n) {
  const children = [];
  try {
    for (let i = 0; i < n; i++) {
      children.push(spawn(process.execPath, [ENTRY, '--contender', '--ctx', JSON.stringify(ctx)], { stdio: ['pipe', 'pipe', 'inherit'] }));
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
      const worker = new Worker(ENTRY, { workerData: { ctx, gate } });
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
