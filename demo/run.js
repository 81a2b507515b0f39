// One replay of an agent trace through the whole system (`waitprep demo`, and each replayed
// policy of `--compare`): the coordinator and a preparation driver in this process, the storage
// worker (bin/storage-worker.js) as a child process that owns the lease table as its producer, and
// wakes that pin from the table. The processes, threads and what crosses each boundary:
// docs/architecture.md.
//
// - The trace is generateTrace({ agents, seconds, seed }) or `--trace FILE` (JSONL,
//   loadTraceJsonl), replayed with each event at t * timeScale seconds. Agents are consumers of
//   one engine ('engine-0'); a wake is timed around onWake with process.hrtime.bigint().
// - The coordinator's units go to a PreparationDriver with a fixed pool of one grant. Its
//   worker threads cannot use this process's IPC channel to the child, so the worker module
//   (demo/prepare-worker.js) forwards each unit over a Unix socket the storage worker listens on,
//   and resolves once the storage worker has published (one connection, one JSON line each way).
// - The storage worker is its own process (fork; its IPC channel carries only 'ready', and 'exit' answered by 'bye' with its counts) and the table's single
//   producer: it builds a synthetic safetensors-like source from the key, validates its geometry,
//   copies it to a host arena under /dev/shm, checksums it (SHA-256, first 64 bits), evicts LRU
//   unpinned artifacts under a byte budget, publishes; it never compresses. See its header.
// - On the JavaScript fallback (no addon, or --implementation js) a table cannot cross processes:
//   the storage logic runs in this process, on the same socket protocol, and the summary says so.
// - If the storage worker process exits before it is told to, the run reports it and exits 1.
import { fork } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  PreparationDriver,
  WaitCoordinator,
  implementation,
  implementationReason,
  leaseTableBackend,
  openLeaseTable,
  registerMetrics,
  unlinkLeaseTable,
} from 'waitprep';
import { generateTrace, keyFromSpec, loadTraceJsonl, traceSummary } from 'waitprep/trace';
import { nearestRank } from '../experiment/percentile.js';
import { unitOutcomes } from './report.js';
import { serveSocket, startStorage } from '../worker/storage.js';
import { DEMO_PLANNER_UNITS, DemoPlanner } from './planner.js';

const STORAGE_WORKER = join(import.meta.dirname, '..', 'bin', 'storage-worker.js');
const PREPARE_WORKER = join(import.meta.dirname, 'prepare-worker.js');

/** fifo-no-dedup: the wait's key spec with `/no-dedup/<agent>#<generation>` appended to its namespace. */
function perWaitSpec(event) {
  return { ...event.key, namespace: `${event.key.namespace}/no-dedup/${event.agent}#${event.generation}` };
}

/** The demo's coordinator: wakes pin from `table` (the consumer side of the storage worker's table). */
export function demoCoordinator(table, maxInFlight = 1) {
  return new WaitCoordinator({ backend: leaseTableBackend(table), maxQueued: 64, maxWaiting: 4096, historyLimit: 1024, maxInFlight });
}

/**
 * Admits one wait with the eviction fix: completed history is no proof the bytes are still there.
 * The storage worker evicts in its own process and tells no one, so before admitting a wait the
 * orchestrator peeks at the key in the table (no pin, so the storage worker's eviction never sees
 * it held); absent means never published or evicted, and
 * forget(key) (refused while anyone waits on the key or its unit is queued or in flight) lets
 * this wait queue it again instead of being told `completed` and missing at its wake. Returns
 * the coordinator's admission, and whether history was forgotten for it.
 */
export function admitWait(coordinator, table, consumer, key) {
  const present = table.peek(key);
  const forgot = present.kind === 'miss' && present.reason === 'absent' && coordinator.forget(key);
  return { admission: coordinator.onWait(consumer, key), forgot };
}

/** The trace the options name: the events cli.js read already, `--trace FILE`, or the generated one. */
export function loadEvents(options) {
  if (options.events) return options.events;
  if (options.trace !== null) return loadTraceJsonl(readFileSync(options.trace, 'utf8'));
  return generateTrace({ agents: options.agents, seconds: options.seconds, seed: options.seed });
}

/**
 * One replay: `run()` resolves the run's summary (the object `--json` prints), or throws; on a
 * failure the caller hands the message to `fail()`, which cleans up and exits the process 1.
 */
export class DemoRun {
  constructor(options) {
    this.options = options;
    const id = options.runLabel ? `${process.pid}-${options.runLabel}` : `${process.pid}`;
    this.tableName = `waitprep-demo-${id}`;
    this.arenaDir = `/dev/shm/waitprep-demo-${id}-arena`;
    this.socketPath = join(tmpdir(), `waitprep-demo-${id}.sock`);
    /** The onWake time (hrtime ns, bigint) of each wake that was a hit; read by compare.js. */
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
    const events = loadEvents(options);
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

    // With --planner, as many units in flight as the planner asks for (DemoPlanner.unitsInFlight).
    const coordinator = demoCoordinator(this.consumer, options.planner ? DEMO_PLANNER_UNITS : 1);
    this.coordinator = coordinator;
    if (options.metricsPort !== null) await this.startMetrics(coordinator);

    // With --planner, the planner's pauses and its units in flight (one grant each).
    const planned = options.planner ? new DemoPlanner({
      coordinator, table: this.consumer, socketPath: this.socketPath, budgetBytes,
      // The synthetic source's size (worker/storage.js): 512 bytes per 16 tokens.
      bytesOf: (key) => Math.ceil(key.tokenCount / 16) * 512,
      onError: (message) => void this.fail(message),
    }) : null;
    const unitsInFlight = planned?.unitsInFlight ?? 1;
    let grantsFree = unitsInFlight;
    let nextGrant = 0;
    /** The first few preparation errors, for the report (the driver counts outcomes in its stats). */
    const errors = [];
    /**
     * Units that reported failure after their abort fired (every consumer had left): the
     * coordinator keeps no failed history for them, and the summary counts them as drained.
     */
    let drained = 0;
    const driver = new PreparationDriver({
      coordinator,
      grants: {
        acquire: () => (grantsFree > 0 ? (grantsFree--, Object.freeze({ worker: 'prep-0', grant: `demo-grant-${nextGrant++}` })) : null),
        release: () => {
          grantsFree++;
          this.driver?.poke();
        },
      },
      maxInFlight: unitsInFlight,
      worker: { filename: PREPARE_WORKER, minThreads: 1, maxThreads: unitsInFlight + 1, env: { ...process.env, WAITPREP_DEMO_SOCKET: this.socketPath } },
      deadlineMs: 10_000,
      onSettled: (report) => {
        if (report.result === 'succeeded' || report.completion !== 'applied') return;
        if (report.work.signal.aborted) drained++;
        else if (report.error && errors.length < 5) errors.push(report.error.message);
      },
    });
    this.driver = driver;

    // Replay.
    const tickets = new Map();
    const latencies = [];
    let wakesWithoutTicket = 0;
    /** Keys whose completed history was forgotten because the table no longer held them. */
    let forgotten = 0;
    let cancelsWithoutTicket = 0;
    const scale = options.timeScale;
    const started = performance.now();
    const elapsed = () => (performance.now() - started) / 1000;
    if (!options.json) {
      this.progress = setInterval(() => {
        const s = coordinator.stats();
        const missCount = Object.values(s.misses).reduce((a, b) => a + b, 0);
        const w = s.waitsByStatus;
        this.log(`[${elapsed().toFixed(1).padStart(5)} s] waits ${s.waits} (new units ${w.queued}, joined ${w.joined + w['in-flight']}, already completed ${w.completed}), waiting now ${s.waiting}, units completed ${s.completed}, wakes ${s.wakes}: hits ${s.hits}, misses ${missCount}`);
      }, 1000);
    }
    this.log(`replaying ${events.length} events (${summaryOfTrace.waits} waits, ${summaryOfTrace.agents} agents) over ${(summaryOfTrace.lastT * scale).toFixed(1)} s`);
    for (const event of events) {
      const due = event.t * scale;
      const wait = due - elapsed();
      if (wait > 0.001) await sleep(wait * 1000);
      if (this.failed) return new Promise(() => {}); // fail() exits the process
      const id = `${event.agent}#${event.generation}`;
      if (planned !== null) {
        const t0 = process.hrtime.bigint();
        const result = planned.handle(event, event.event === 'wait' ? keyOf(specOf(event)) : null);
        if (result !== null) {
          const took = process.hrtime.bigint() - t0;
          latencies.push(took);
          if (result.kind === 'hit') {
            this.hitLatenciesNs.push(took);
            result.lease.close();
          }
        }
        driver.poke();
        continue;
      }
      if (event.event === 'wait') {
        const key = keyOf(specOf(event));
        const { admission, forgot } = admitWait(coordinator, this.consumer, { engine: 'engine-0', request: event.agent, generation: event.generation }, key);
        if (forgot) forgotten++;
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
    planned?.stop();
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
      units: unitOutcomes(stats, drained),
      drained: closing.drained,
      wakesWithoutTicket,
      cancelsWithoutTicket,
      forgottenAfterEviction: forgotten,
      ...(planned === null ? {} : { planner: planned.summary() }),
      wakeLatencyNs: {
        what: 'onWake (coordinator checks and the table pin) timed with hrtime: sporadic, cold calls on an idle event loop; the steady-state pin + close is `npm run bench:pin` (docs/benchmarks.md)',
        count: latencies.length,
        p50: Number(nearestRank(latencies, 0.5)),
        p99: Number(nearestRank(latencies, 0.99)),
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
