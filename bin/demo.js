// `waitprep demo` (what `npm start` runs): an end-to-end run of waitprep on this host.
//
//   agent trace ──(scaled real time)──> WaitCoordinator ──beginNext(grant)──> PreparationDriver
//        wake: onWake → leaseTableBackend(consumer table) → pin or miss        │ piscina worker thread
//                                                                             │ (bin/prepare-worker.js)
//                         lease table (POSIX shm) <── publish ── storage worker process
//                                                   (bin/storage-worker.js)  <── Unix socket ──┘
//
// - The trace is generateTrace({ agents, seconds, seed }) or `--trace FILE` (JSONL,
//   loadTraceJsonl), replayed with each event at t * timeScale seconds. Agents are consumers of
//   one engine ('engine-0'); a wake is timed around onWake with process.hrtime.bigint().
// - The coordinator's units go to a PreparationDriver with a fixed pool of one grant. Its
//   worker threads cannot use this process's IPC channel to the child, so the worker module
//   forwards each unit over a Unix socket the storage worker listens on, and resolves once the
//   storage worker has published (the simplest honest hop: one connection, one JSON line each way).
// - The storage worker is its own process (fork, IPC for ready/stats/exit) and the table's single
//   producer: it builds a synthetic safetensors-like source from the key, validates its geometry,
//   copies it to a host arena under /dev/shm, checksums it (SHA-256, first 64 bits), evicts LRU
//   unpinned artifacts under a byte budget, publishes; it never compresses. See its header.
// - On the JavaScript fallback (no addon, or --implementation js) a table cannot cross processes:
//   the storage logic runs in this process, on the same socket protocol, and the summary says so.
// - If the storage worker process exits before it is told to, the demo reports it and exits 1.
// `--scripted` keeps the earlier scripted sequence (in-memory stand-in worker, no processes).
import { fork } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  PreparationDriver,
  WaitCoordinator,
  artifactKey,
  generateTrace,
  implementation,
  implementationReason,
  keyFromSpec,
  leaseTableBackend,
  loadTraceJsonl,
  openLeaseTable,
  registerMetrics,
  traceSummary,
  unlinkLeaseTable,
} from '../dist/index.js';
import { nearestRank } from '../dist/internal/stats.js';
import { serveSocket, startStorage } from './storage-worker.js';

const here = import.meta.dirname;
const STORAGE_WORKER = join(here, 'storage-worker.js');
const PREPARE_WORKER = join(here, 'prepare-worker.js');

export const DEMO_USAGE = `usage: waitprep demo [options]

  --agents N             agent sessions in the generated trace (default 24)
  --seconds S            generated trace length in seconds (default 8)
  --seed N               trace seed (default 42)
  --trace FILE           replay a JSONL trace instead (docs/agent-trace.md)
  --time-scale X         replay event t at t*X seconds (default 1)
  --budget-mb M          the storage worker's arena budget in MiB (default 8)
  --implementation I     auto (default) | native | js: which lease table
  --metrics-port P       serve Prometheus metrics on http://127.0.0.1:P/metrics while running
                         (0: an ephemeral port; the URL is printed to stderr)
  --json                 print one JSON summary object on stdout, nothing else
  --scripted             the earlier scripted demo (in-process stand-in worker), with --json
  --storage-exit-after N testing: the storage worker exits (code 3) at request N+1
  --compare              replay the same trace under three policies (no-preparation, fifo-dedup,
                         fifo-no-dedup) and print a table, or one JSON object with --json
                         (bin/compare.js; not with --metrics-port or --storage-exit-after)
  --miss-cost-ms M       with --compare: the STAND-IN cost of a miss's original path (default 50)`;

export class UsageError extends Error {}

function parseArgs(args) {
  const options = {
    agents: 24, seconds: 8, seed: 42, trace: null, timeScale: 1, budgetMb: 8, implementation: 'auto',
    metricsPort: null, json: false, storageExitAfter: null, compare: false, missCostMs: 50,
    // Set by bin/compare.js, not by flags: `keyMode` 'shared' (the normal path) or 'per-wait'
    // (fifo-no-dedup: each wait's key spec gets a namespace unique to its agent and generation),
    // and `runLabel`, a suffix that keeps several runs' table, arena and socket names apart.
    keyMode: 'shared', runLabel: null,
  };
  const numeric = {
    '--agents': ['agents', (v) => Number.isSafeInteger(v) && v >= 1],
    '--seconds': ['seconds', (v) => Number.isFinite(v) && v > 0],
    '--seed': ['seed', (v) => Number.isSafeInteger(v)],
    '--time-scale': ['timeScale', (v) => Number.isFinite(v) && v > 0],
    '--budget-mb': ['budgetMb', (v) => Number.isFinite(v) && v > 0],
    '--metrics-port': ['metricsPort', (v) => Number.isSafeInteger(v) && v >= 0 && v <= 65535],
    '--storage-exit-after': ['storageExitAfter', (v) => Number.isSafeInteger(v) && v >= 0],
    '--miss-cost-ms': ['missCostMs', (v) => Number.isFinite(v) && v >= 0],
  };
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (arg === '--json') options.json = true;
    else if (arg === '--compare') options.compare = true;
    else if (arg in numeric) {
      const [field, ok] = numeric[arg];
      const value = Number(args[++i]);
      if (args[i] === undefined || !ok(value)) throw new UsageError(`${arg} needs a valid number, got ${JSON.stringify(args[i])}`);
      options[field] = value;
    } else if (arg === '--trace') {
      if (args[++i] === undefined) throw new UsageError('--trace needs a file');
      options.trace = args[i];
    } else if (arg === '--implementation') {
      const value = args[++i];
      if (!['auto', 'native', 'js'].includes(value)) throw new UsageError(`--implementation must be auto, native or js, got ${JSON.stringify(value)}`);
      options.implementation = value;
    } else throw new UsageError(`unknown option ${JSON.stringify(arg)}`);
  }
  if (options.compare && options.metricsPort !== null) throw new UsageError('--compare does not serve metrics (--metrics-port)');
  if (options.compare && options.storageExitAfter !== null) throw new UsageError('--compare does not take --storage-exit-after');
  return options;
}

/** fifo-no-dedup: the wait's key spec with `/no-dedup/<agent>#<generation>` appended to its namespace. */
export function perWaitSpec(event) {
  return { ...event.key, namespace: `${event.key.namespace}/no-dedup/${event.agent}#${event.generation}` };
}

/** The nearest-rank `p`th percentile (0 < p <= 100) of an ascending array; 0 when empty. */
export function percentile(sorted, p) {
  return Number(nearestRank(sorted, p / 100));
}

export async function demo(args) {
  if (args.includes('--help') || args.includes('-h')) {
    console.log(DEMO_USAGE);
    return;
  }
  if (args.includes('--scripted')) return scriptedDemo(args.filter((a) => a !== '--scripted'));
  let options;
  try {
    options = parseArgs(args);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    console.error(`waitprep demo: ${error.message}\n\n${DEMO_USAGE}`);
    process.exit(2);
  }
  if (options.compare) {
    const { compareDemo } = await import('./compare.js');
    return compareDemo(options);
  }
  const run = new DemoRun(options);
  try {
    const summary = await run.run();
    if (options.json) process.stdout.write(JSON.stringify(summary, null, 2) + '\n');
    else printSummary(summary);
  } catch (error) {
    await run.fail(error instanceof Error ? error.message : String(error));
  }
}

export class DemoRun {
  constructor(options) {
    this.options = options;
    const id = options.runLabel ? `${process.pid}-${options.runLabel}` : `${process.pid}`;
    this.tableName = `waitprep-demo-${id}`;
    this.arenaDir = `/dev/shm/waitprep-demo-${id}-arena`;
    this.socketPath = join(tmpdir(), `waitprep-demo-${id}.sock`);
    /** The onWake time (hrtime ns, bigint) of each wake that was a hit; read by bin/compare.js. */
    this.hitLatenciesNs = [];
    this.child = null;
    this.childExpectedExit = false;
    this.inProcess = null; // { producer, storage, server } on the JavaScript fallback
    this.consumer = null;
    this.driver = null;
    this.metricsServer = null;
    this.progress = null;
    this.failed = false;
    this.log = options.json ? () => {} : (line) => process.stderr.write(line + '\n');
  }

  async run() {
    const { options } = this;
    const chosen = options.implementation === 'auto' ? implementation : options.implementation;
    if (chosen === 'native' && implementation !== 'native') {
      throw new Error(`--implementation native was asked for, but the addon is not loaded (${implementationReason})`);
    }
    const events = this.loadEvents();
    const summaryOfTrace = traceSummary(events);
    // Keys are built once, before the clock starts (a spec expands to ~15k+ tokens and one SHA-256).
    const keyCache = new Map();
    const keyOf = (spec) => {
      const id = JSON.stringify(spec);
      let key = keyCache.get(id);
      if (key === undefined) keyCache.set(id, (key = keyFromSpec(spec)));
      return key;
    };
    const specOf = options.keyMode === 'per-wait' ? perWaitSpec : (event) => event.key;
    for (const event of events) if (event.event === 'wait') keyOf(specOf(event));

    const budgetBytes = Math.floor(options.budgetMb * 1024 * 1024);
    rmSync(this.socketPath, { force: true });
    if (chosen === 'native') await this.startChild(budgetBytes);
    else await this.startInProcess(budgetBytes);

    const coordinator = new WaitCoordinator({ backend: leaseTableBackend(this.consumer), maxQueued: 64, maxWaiting: 4096, historyLimit: 1024 });
    this.coordinator = coordinator;
    if (options.metricsPort !== null) await this.startMetrics(coordinator);

    let grantFree = true;
    const grant = Object.freeze({ worker: 'prep-0', grant: 'demo-grant-0' });
    /** The first few preparation errors, for the report (the driver counts outcomes in its stats). */
    const errors = [];
    const driver = new PreparationDriver({
      coordinator,
      grants: {
        acquire: () => (grantFree ? ((grantFree = false), grant) : null),
        release: () => {
          grantFree = true;
          this.driver?.poke();
        },
      },
      worker: { filename: PREPARE_WORKER, minThreads: 1, maxThreads: 2, env: { ...process.env, WAITPREP_DEMO_SOCKET: this.socketPath } },
      deadlineMs: 10_000,
      onSettled: (report) => {
        if (report.result !== 'succeeded' && report.error && errors.length < 5) errors.push(report.error.message);
      },
    });
    this.driver = driver;

    // Replay.
    const tickets = new Map();
    const latencies = [];
    let wakesWithoutTicket = 0;
    let cancelsWithoutTicket = 0;
    const scale = options.timeScale;
    const started = performance.now();
    const elapsed = () => (performance.now() - started) / 1000;
    if (!options.json) {
      this.progress = setInterval(() => {
        const s = coordinator.stats();
        const missCount = Object.values(s.misses).reduce((a, b) => a + b, 0);
        this.log(`[${elapsed().toFixed(1).padStart(5)} s] waits ${s.waits}, joins ${s.joins}, queued ${s.queued}, in flight ${s.inFlight}, prepared ${s.completed} (failed ${s.failed}), wakes ${s.wakes}: hits ${s.hits}, misses ${missCount}`);
      }, 1000);
    }
    this.log(`replaying ${events.length} events (${summaryOfTrace.waits} waits, ${summaryOfTrace.agents} agents) over ${(summaryOfTrace.lastT * scale).toFixed(1)} s`);
    for (const event of events) {
      const due = event.t * scale;
      const wait = due - elapsed();
      if (wait > 0.001) await sleep(wait * 1000);
      if (this.failed) return new Promise(() => {}); // fail() exits the process
      const id = `${event.agent}#${event.generation}`;
      if (event.event === 'wait') {
        const admission = coordinator.onWait({ engine: 'engine-0', request: event.agent, generation: event.generation }, keyOf(specOf(event)));
        if (admission.ticket !== undefined) tickets.set(id, admission.ticket);
        driver.poke();
      } else if (event.event === 'wake') {
        const ticket = tickets.get(id);
        tickets.delete(id);
        if (ticket === undefined) {
          wakesWithoutTicket++;
          continue;
        }
        const t0 = process.hrtime.bigint();
        const result = coordinator.onWake(ticket);
        const took = process.hrtime.bigint() - t0;
        latencies.push(took);
        if (result.kind === 'hit') {
          this.hitLatenciesNs.push(took);
          result.lease.close();
        }
      } else {
        const ticket = tickets.get(id);
        tickets.delete(id);
        if (ticket === undefined) cancelsWithoutTicket++;
        else coordinator.onCancel(ticket);
      }
    }
    const replayed = elapsed();
    // Let the unit in flight finish (its consumers all ended, so it drains), then shut down.
    for (let i = 0; i < 1500 && coordinator.stats().inFlight > 0; i++) await sleep(10);
    const closing = coordinator.shutdown();
    await driver.close();
    if (this.progress) clearInterval(this.progress);
    const pinned = this.consumer.inspect().slots.filter((slot) => slot.pinHolders.length > 0).length;
    const storageStats = await this.stopStorage();
    await this.stopMetrics();
    this.consumer.close();
    if (pinned !== 0) throw new Error(`demo left ${pinned} slots pinned`);
    const wall = elapsed();

    latencies.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    const stats = coordinator.stats();
    const busySeconds = storageStats.busyMs / 1000;
    return {
      implementation: chosen,
      implementationReason: chosen === implementation ? implementationReason : 'asked for with --implementation js',
      storage: chosen === 'native'
        ? { mode: 'child-process', pid: this.child.pid, table: `/dev/shm/${this.tableName}`, arena: this.arenaDir }
        : { mode: 'in-process', table: `${this.tableName} (SharedArrayBuffer)`, arena: this.arenaDir,
            note: 'the JavaScript fallback cannot share a table across processes, so the storage worker logic ran in this process' },
      trace: { source: options.trace ?? 'generated', requestedAgents: options.agents, seconds: options.seconds, seed: options.seed, timeScale: scale, summary: summaryOfTrace },
      stats,
      drained: closing.drained,
      wakesWithoutTicket,
      cancelsWithoutTicket,
      wakeLatencyNs: {
        count: latencies.length,
        p50: percentile(latencies, 50),
        p99: percentile(latencies, 99),
        max: latencies.length ? Number(latencies[latencies.length - 1]) : 0,
      },
      preparation: {
        driver: driver.stats(),
        errors,
        storage: storageStats,
        artifactsPerSecond: busySeconds > 0 ? storageStats.prepared / busySeconds : 0,
        bytesPerSecond: busySeconds > 0 ? storageStats.preparedBytes / busySeconds : 0,
        wallArtifactsPerSecond: storageStats.prepared / replayed,
      },
      replaySeconds: replayed,
      wallSeconds: wall,
    };
  }

  loadEvents() {
    const { options } = this;
    if (options.trace !== null) return loadTraceJsonl(readFileSync(options.trace, 'utf8'));
    return generateTrace({ agents: options.agents, seconds: options.seconds, seed: options.seed });
  }

  async startChild(budgetBytes) {
    const env = { ...process.env };
    if (this.options.storageExitAfter !== null) env.WAITPREP_STORAGE_EXIT_AFTER = String(this.options.storageExitAfter);
    const child = fork(STORAGE_WORKER, ['--table', this.tableName, '--arena', this.arenaDir, '--socket', this.socketPath, '--budget', String(budgetBytes)], {
      stdio: ['ignore', 2, 2, 'ipc'],
      env,
    });
    this.child = child;
    this.childExit = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
    child.once('exit', (code, signal) => {
      if (!this.childExpectedExit) {
        void this.fail(`the storage worker process (pid ${child.pid}) exited unexpectedly (${signal ? `signal ${signal}` : `code ${code}`}); stopping`);
      }
    });
    const ready = await new Promise((resolve) => {
      const onMessage = (message) => {
        if (message?.type === 'ready') {
          child.off('message', onMessage);
          resolve(message);
        }
      };
      child.on('message', onMessage);
      child.once('exit', () => resolve(null));
    });
    if (ready === null) return new Promise(() => {}); // fail() is exiting
    this.consumer = openLeaseTable({ name: this.tableName, role: 'consumer', implementation: 'native' });
    this.log(`storage worker: process ${child.pid}, lease table /dev/shm/${this.tableName} (native), arena ${this.arenaDir}, budget ${budgetBytes} bytes`);
  }

  async startInProcess(budgetBytes) {
    const producer = openLeaseTable({ name: this.tableName, role: 'producer', implementation: 'js', create: { capacity: 4096 } });
    const exitAfter = this.options.storageExitAfter ?? Infinity;
    const onExitAfter = () => void this.fail(`the in-process storage worker stopped (--storage-exit-after ${exitAfter} reached); stopping`);
    const storage = startStorage({ table: producer, arenaDir: this.arenaDir, budgetBytes, exitAfter, onExitAfter });
    const server = await serveSocket(storage, this.socketPath);
    this.inProcess = { producer, storage, server };
    this.consumer = openLeaseTable({ name: this.tableName, role: 'consumer', implementation: 'js', buffer: producer.sharedBuffer });
    this.log(`storage worker: IN THIS PROCESS (JavaScript fallback: a SharedArrayBuffer table cannot cross processes), arena ${this.arenaDir}, budget ${budgetBytes} bytes`);
  }

  async stopStorage() {
    if (this.inProcess !== null) {
      const { producer, storage, server } = this.inProcess;
      const stats = storage.stats();
      await new Promise((resolve) => server.close(resolve));
      rmSync(this.socketPath, { force: true });
      storage.close();
      producer.close();
      this.inProcess = null;
      return stats;
    }
    const child = this.child;
    this.childExpectedExit = true;
    const bye = new Promise((resolve) => {
      child.on('message', (message) => {
        if (message?.type === 'bye') resolve(message.stats);
      });
    });
    child.send({ type: 'exit' });
    const stats = await Promise.race([bye, this.childExit.then(() => null)]);
    const { code, signal } = await Promise.race([this.childExit, sleep(5000, undefined, { ref: false }).then(() => ({ code: null, signal: 'timeout' }))]);
    if (code !== 0) throw new Error(`the storage worker did not exit cleanly (${signal ? `signal ${signal}` : `code ${code}`})`);
    if (stats === null) throw new Error('the storage worker exited without reporting its stats');
    return stats;
  }

  async startMetrics(coordinator) {
    const { Registry } = await import('prom-client');
    const registry = new Registry();
    this.metricsRegistration = registerMetrics(coordinator, { registry, table: this.consumer });
    const server = createServer((request, response) => {
      if (request.url !== '/metrics') {
        response.writeHead(404).end('not found; try /metrics\n');
        return;
      }
      registry.metrics().then(
        (text) => response.writeHead(200, { 'content-type': registry.contentType }).end(text),
        (error) => response.writeHead(500).end(String(error)),
      );
    });
    await new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.options.metricsPort, '127.0.0.1', resolve);
    });
    this.metricsServer = server;
    process.stderr.write(`metrics: http://127.0.0.1:${server.address().port}/metrics\n`);
  }

  async stopMetrics() {
    const server = this.metricsServer;
    this.metricsServer = null;
    if (server === null) return;
    server.closeAllConnections?.();
    await new Promise((resolve) => server.close(resolve));
    this.metricsRegistration?.unregister();
  }

  /** Reports, cleans up what it can without waiting long, exits 1. */
  async fail(message) {
    if (this.failed) return;
    this.failed = true;
    setTimeout(() => process.exit(1), 3000).unref();
    console.error(`waitprep demo: ${message}`);
    if (this.progress) clearInterval(this.progress);
    try {
      this.coordinator?.shutdown();
    } catch {}
    try {
      await Promise.race([this.driver?.close({ force: true }), sleep(1000)]);
    } catch {}
    try {
      this.metricsServer?.closeAllConnections?.();
      this.metricsServer?.close();
    } catch {}
    try {
      this.consumer?.close();
    } catch {}
    if (this.child !== null && this.child.exitCode === null && this.child.signalCode === null) {
      this.childExpectedExit = true;
      this.child.kill('SIGKILL');
    }
    if (this.inProcess !== null) {
      try {
        this.inProcess.storage.close();
        this.inProcess.producer.close();
      } catch {}
    }
    try {
      if (this.child !== null) unlinkLeaseTable(this.tableName);
    } catch {}
    rmSync(this.arenaDir, { recursive: true, force: true });
    rmSync(this.socketPath, { force: true });
    process.exit(1);
  }
}

function printSummary(s) {
  const st = s.stats;
  const missText = Object.entries(st.misses).map(([reason, n]) => `${reason} ${n}`).join(', ') || 'none';
  const prep = s.preparation;
  const mib = (n) => (n / (1024 * 1024)).toFixed(1);
  console.log(`
summary: ${s.trace.source === 'generated' ? `generated trace (${s.trace.requestedAgents} agents, ${s.trace.seconds} s, seed ${s.trace.seed}: ${s.trace.summary.waits} waits, ${s.trace.summary.distinctKeys} distinct keys)` : `trace ${s.trace.source}`}, time scale ${s.trace.timeScale}, replayed in ${s.replaySeconds.toFixed(1)} s
  waits ${st.waits}: dedup joins ${st.joins}, overloaded ${st.overloads}, rejected ${st.rejected}; cancels ${st.cancels}
  wakes ${st.wakes}: hits ${st.hits}; misses: ${missText}${s.wakesWithoutTicket ? ` (+${s.wakesWithoutTicket} wakes of waits never admitted)` : ''}
  wake pin latency (onWake, hrtime): p50 ${s.wakeLatencyNs.p50} ns, p99 ${s.wakeLatencyNs.p99} ns, max ${s.wakeLatencyNs.max} ns over ${s.wakeLatencyNs.count} wakes
  units issued ${st.issued}: completed ${st.completed}, failed ${st.failed}, wasted ${st.wasted}; shutdown drained: ${s.drained}
  storage worker: prepared ${prep.storage.prepared} artifacts (${mib(prep.storage.preparedBytes)} MiB), evicted ${prep.storage.evicted} (pinned skipped ${prep.storage.pinnedSkips}), refused ${prep.storage.failed}, reaped clients ${prep.storage.reaped}
  preparation throughput: ${prep.artifactsPerSecond.toFixed(0)} artifacts/s, ${mib(prep.bytesPerSecond)} MiB/s of storage-worker busy time (synthetic source, copy and checksum; no compression); ${prep.wallArtifactsPerSecond.toFixed(1)} artifacts/s over the replay
  storage: ${s.storage.mode === 'child-process' ? `child process ${s.storage.pid}, ${s.storage.table}` : `${s.storage.note}`}
  lease table: ${s.implementation} (${s.implementationReason})
  (figures from a synthetic trace and a stand-in preparation on this machine; not a serving-host measurement)`);
}

// ---------------------------------------------------------------------------------------------
// The earlier scripted demo (`waitprep demo --scripted`): a fixed sequence of waits, dedup
// joins, a timer standing in for the worker, wakes that pin or miss, a failure and a retry.

const PREPARE_MS = 25;
const SYSTEM_PROMPT_TOKENS = Array.from({ length: 14_000 }, (_, i) => (i * 7919) % 151_936);

function key(task, extraTokens) {
  return artifactKey({
    source: {
      snapshotKind: 'kv-page',
      runtime: 'demo-runtime',
      model: 'demo-model-8b',
      adapter: 'none',
      profile: 'bf16',
      positionPolicy: 'absolute',
      task,
      namespace: 'demo',
      tokenLayout: [...SYSTEM_PROMPT_TOKENS, ...extraTokens],
    },
    sourcePageGeneration: 0,
    codec: 'none',
    codecConfig: 'none',
    representationVersion: 1,
  });
}

async function scriptedDemo(args) {
  const json = args.includes('--json');
  const log = json ? () => {} : (line) => console.log(line);
  const keys = {
    sharedPrefix: key('coding', [1]),
    sameTextOtherTask: key('review', [1]),
    taskB: key('coding', [2, 3]),
    a6Turn1: key('coding', [6]),
    a6Turn2: key('coding', [6, 60]),
    flaky: key('coding', [9]),
    late: key('coding', [10]),
  };
  const names = new Map(Object.entries(keys).map(([name, k]) => [k.hex, name]));
  // The storage worker's side (producer) and the orchestrator's side (consumer) of one table.
  const tableName = `waitprep-demo-${process.pid}`;
  const producer = openLeaseTable({ name: tableName, role: 'producer', create: { capacity: 256 } });
  const table = openLeaseTable({
    name: tableName,
    role: 'consumer',
    implementation: producer.implementation,
    ...(producer.sharedBuffer ? { buffer: producer.sharedBuffer } : {}),
  });
  const coordinator = new WaitCoordinator({ backend: leaseTableBackend(table), maxQueued: 4, maxWaiting: 16, historyLimit: 8 });
  const grant = { worker: 'demo-worker', grant: 'demo-grant-1' };
  const tickets = new Map();
  const started = performance.now();
  const at = () => `${String(Math.round(performance.now() - started)).padStart(4)} ms`;

  const wait = (agent, generation, k) => {
    const admission = coordinator.onWait({ engine: 'engine-0', request: agent, generation }, k);
    if (admission.ticket !== undefined) tickets.set(`${agent}#${generation}`, admission.ticket);
    log(`${at()}  ${agent} waits for ${names.get(k.hex)}: ${admission.status}${admission.reason ? ` (${admission.reason})` : ''}`);
    pump();
  };
  const wake = (agent, generation) => {
    const result = coordinator.onWake(tickets.get(`${agent}#${generation}`));
    if (result.kind === 'hit') {
      log(`${at()}  ${agent} wakes: hit, pinned slot ${result.lease.slot} generation ${result.lease.generation} (${result.lease.meta.sizeBytes} bytes), lease closed after use`);
      result.lease.close();
    } else {
      log(`${at()}  ${agent} wakes: miss (${result.reason}), engine takes its original path`);
    }
  };
  const cancel = (agent, generation) => {
    const removed = coordinator.onCancel(tickets.get(`${agent}#${generation}`));
    log(`${at()}  ${agent} cancels: ${removed ? 'removed' : 'stale'}`);
  };

  // The stand-in worker: pulls a unit whenever none is in flight, "prepares"
  // it off the event loop (a timer), publishes, and reports completion back
  // on this thread.
  function pump() {
    const work = coordinator.beginNext(grant);
    if (work === null) return;
    log(`${at()}  worker takes ${names.get(work.key.hex)}`);
    const reservation = producer.reserve(work.key);
    setTimeout(() => {
      const ok = work.key !== keys.flaky;
      if (ok) producer.publish(reservation, { sizeBytes: 4096 * work.key.tokenCount, location: reservation.slot, checksum: 0, codecId: 0, representationVersion: 1 });
      else producer.abandon(reservation);
      const applied = coordinator.complete(work, ok ? { ok: true } : { ok: false, error: new Error('stand-in failure') });
      log(`${at()}  worker ${ok ? 'published' : 'failed'} ${names.get(work.key.hex)} (${applied})`);
      pump();
    }, PREPARE_MS);
  }

  const script = [
    [0, () => wait('a1', 0, keys.sharedPrefix)],
    [0, () => wait('a2', 0, keys.sharedPrefix)],
    [0, () => wait('a3', 0, keys.sharedPrefix)],
    [0, () => wait('a4', 0, keys.taskB)],
    [0, () => wait('a5', 0, keys.taskB)],
    [0, () => wait('a6', 0, keys.a6Turn1)],
    [0, () => wait('a7', 0, keys.sameTextOtherTask)],
    [0, () => wait('a8', 0, keys.flaky)],
    [0, () => wait('a9', 0, keys.late)],
    [10, () => cancel('a3', 0)],
    [35, () => wait('a6', 1, keys.a6Turn2)],
    [40, () => wake('a6', 0)],
    [45, () => wake('a1', 0)],
    [50, () => wake('a2', 0)],
    [60, () => wake('a7', 0)],
    [160, () => wake('a4', 0)],
    [165, () => wake('a5', 0)],
    [170, () => wake('a6', 1)],
    [175, () => wake('a8', 0)],
    [180, () => wait('a10', 0, keys.flaky)],
    [185, () => wake('a10', 0)],
    [190, () => log(`${at()}  forget(flaky): ${coordinator.forget(keys.flaky)}`)],
    [195, () => wait('a11', 0, keys.flaky)],
    [200, () => cancel('a11', 0)],
    [205, () => wait('a9', 0, keys.late)],
    [205, () => wait('a9', 1, keys.late)],
  ];
  const t0 = performance.now();
  for (const [ms, step] of script) {
    const delay = ms - (performance.now() - t0);
    if (delay > 0) await new Promise((resolve) => setTimeout(resolve, delay));
    step();
  }
  while (coordinator.stats().inFlight > 0) await new Promise((resolve) => setTimeout(resolve, 5));
  const closing = coordinator.shutdown();
  const stats = coordinator.stats();
  const pinned = table.inspect().slots.filter((slot) => slot.pinHolders.length > 0).length;
  table.close();
  producer.close();
  if (producer.implementation === 'native') unlinkLeaseTable(tableName);
  if (pinned !== 0) throw new Error(`demo left ${pinned} slots pinned`);
  const summary = {
    implementation,
    implementationReason,
    backend: `lease table "${tableName}" (${producer.implementation === 'native' ? 'POSIX shared memory' : 'SharedArrayBuffer fallback'})`,
    drained: closing.drained,
    stats,
  };
  if (json) {
    process.stdout.write(JSON.stringify(summary, null, 2) + '\n');
    return;
  }
  const missText = Object.entries(stats.misses).map(([reason, n]) => `${reason} ${n}`).join(', ') || 'none';
  console.log(`
summary (stand-in preparation: a ${PREPARE_MS} ms timer; nothing here is a performance figure)
  waits ${stats.waits}, of them dedup joins ${stats.joins}, overloaded ${stats.overloads}, rejected ${stats.rejected}
  units issued ${stats.issued}: completed ${stats.completed}, failed ${stats.failed}, wasted ${stats.wasted}
  wakes ${stats.wakes}: hits ${stats.hits}; misses: ${missText}
  cancels ${stats.cancels}, stale events ${stats.staleEvents}, still waiting ${stats.waiting}, history ${stats.historySize}
  shutdown drained: ${closing.drained}
  backend: ${summary.backend}
  native parts: ${implementation} (${implementationReason})`);
}
