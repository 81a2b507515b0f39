// `waitprep demo --scripted`: the earlier scripted demo, kept for a quick look at the
// coordinator's rules without processes or a trace. A fixed sequence of waits, dedup joins, a
// timer standing in for the worker, wakes that pin or miss, a failure and a retry, against a lease
// table whose producer and consumer sides both live in this process. It runs in virtual time: the
// script's steps and the stand-in worker's completions are events on one timeline, run in order
// of time (then of scheduling) without sleeping, so every run takes the same path and prints the
// same counts (on wall-clock timers a loaded machine reordered a completion and a wake).
import { WaitCoordinator, artifactKey, implementation, implementationReason, leaseTableBackend, openLeaseTable, unlinkLeaseTable } from 'waitprep';
import { printScriptedSummary, unitOutcomes } from './report.js';

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

export async function scriptedDemo(args) {
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
  /** The timeline, in virtual ms: events at the same time run in the order they were scheduled. */
  const timeline = new Timeline();
  const schedule = (t, run) => timeline.at(t, run);
  const coordinator = new WaitCoordinator({ backend: leaseTableBackend(table), maxQueued: 4, maxWaiting: 16, historyLimit: 8, now: () => timeline.now });
  const grant = { worker: 'demo-worker', grant: 'demo-grant-1' };
  const tickets = new Map();
  const at = () => `${String(timeline.now).padStart(4)} ms`;

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

  /** Units that stopped because every consumer left (reported as failed after their abort). */
  let drained = 0;

  // The stand-in worker: pulls a unit whenever none is in flight, "prepares"
  // it for PREPARE_MS of virtual time, publishes, and reports completion.
  function pump() {
    const work = coordinator.beginNext(grant);
    if (work === null) return;
    log(`${at()}  worker takes ${names.get(work.key.hex)}`);
    const reservation = producer.reserve(work.key);
    schedule(timeline.now + PREPARE_MS, () => {
      const ok = work.key !== keys.flaky;
      if (ok) producer.publish(reservation, { sizeBytes: 4096 * work.key.tokenCount, location: reservation.slot, checksum: 0, codecId: 0, representationVersion: 1 });
      else producer.abandon(reservation);
      const applied = coordinator.complete(work, ok ? { ok: true } : { ok: false, error: new Error('stand-in failure') });
      // A failure after every consumer left is no evidence against the key: the coordinator
      // keeps no failed history for it, and the summary counts it as drained.
      const left = work.signal.aborted;
      if (!ok && left) drained++;
      const how = ok ? 'published' : left ? 'drained (failed after every consumer left)' : 'failed';
      log(`${at()}  worker ${how} ${names.get(work.key.hex)} (${applied})`);
      pump();
    });
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
  for (const [ms, step] of script) schedule(ms, step);
  // Every completion is on the timeline, so when it is empty nothing is in flight.
  timeline.run();
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
    units: unitOutcomes(stats, drained),
  };
  if (json) {
    process.stdout.write(JSON.stringify(summary, null, 2) + '\n');
    return;
  }
  printScriptedSummary(summary, PREPARE_MS);
}

/**
 * The scripted run's virtual clock, in ms: `at(t, fn)` runs `fn` at time `t` (never before now),
 * events at the same time in the order they were scheduled; `run()` runs them all. The script
 * schedules a few dozen events, so a sorted insert is all it needs.
 */
class Timeline {
  now = 0;
  #events = [];

  at(t, fn) {
    const when = Math.max(t, this.now);
    let i = this.#events.length;
    while (i > 0 && this.#events[i - 1].t > when) i--;
    this.#events.splice(i, 0, { t: when, fn });
  }

  run() {
    while (this.#events.length > 0) {
      const { t, fn } = this.#events.shift();
      this.now = t;
      fn();
    }
  }
}
