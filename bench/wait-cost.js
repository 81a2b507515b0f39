#!/usr/bin/env node
// What one wait on a long context costs the orchestrator, at 1k, 16k, 64k and 142k tokens
// (1,024 / 16,384 / 65,536 / 145,408), in two forms of key:
//
//   whole    one artifactKey over the whole token layout (what a caller builds without chains)
//   chained  the session's ChunkChain, the previous turn's chunks already keyed: the new turn's
//            TURN tokens are extended and the wait is on chain.manifestKey() (docs/engine-keys.md)
//
// and for each:
//   admit_us           event-loop time of one admission: building the key + coordinator.onWait,
//                      median of the runs (the chained form's turn extends one live session),
//                      after untimed runs so that the timed ones run optimized code: 10 of
//                      the whole form, whose time is the hash's, and CHAINED_WARM of the
//                      chained form, on a session of their own;
//   admit_cpu_us       the same in the process's CPU time (process.cpuUsage, microsecond ticks,
//                      GC helper threads included): on a shared machine the wall time also
//                      holds other processes' turns
//   key_us             the key's part of that
//   retained_bytes     heap + ArrayBuffer bytes per waiting consumer, its key included, over W
//                      queued waits, after forced GCs (node --expose-gc); the caller's token
//                      array is dropped after each wait, as a caller would drop it
//   chain_bytes        chained only: what each session's chain itself holds (digests, pending
//                      tail), kept by the caller, not by the coordinator; not in retained_bytes
//   handoff_us         the per-unit hand-off on the coordinator's thread: what PreparationDriver
//                      posts for the issued unit (preparationTaskOf: the task and its transfer
//                      list, driver.ts's postOf) and the structured clone of the task with that
//                      transfer list, which is what piscina's postMessage does to it; median of
//                      the runs; handoff_cpu_us in CPU time, as above. The worker thread's copy
//                      of a shared key and its read of the plain form are not counted
//   handoff_bytes      the key bytes the task carries (moved or shared, never cloned)
//
//   npm run bench:wait-cost                   table
//   npm run -s bench:wait-cost -- --json      one JSON object on stdout, nothing else
//   npm run bench:wait-cost -- --quick        smaller run (fewer runs and waiters), a few seconds
//   ... -- --sizes 1024,16384                 choose the token counts
import { ChunkChain, WaitCoordinator, artifactKey } from 'waitprep';
import { nearestRank } from '../experiment/percentile.js';
import { preparationTaskOf } from 'waitprep/testing';
import { benchEnv, commandLine } from './common.js';

const { flag, option } = commandLine();

if (typeof globalThis.gc !== 'function') throw new Error('bench:wait-cost needs node --expose-gc (npm run bench:wait-cost passes it)');
const quick = flag('quick');
const sizes = option('sizes', '1024,16384,65536,145408').split(',').map(Number);
if (sizes.some((n) => !Number.isSafeInteger(n) || n < 1024)) throw new Error(`--sizes wants token counts of at least 1024, got ${option('sizes')}`);
const RUNS = quick ? 7 : 41;
/** Untimed runs first, so the timed ones run optimized code. */
const WARM = 10;
/** The chained form's admission is a few µs of JavaScript: V8 optimizes it only after many more runs. */
const CHAINED_WARM = quick ? 200 : 2000;
/** The waiters of a retained-bytes figure hold about this many bytes of token copies in the whole form. */
const WAITER_BUDGET = (quick ? 16 : 128) * 1024 * 1024;
const TURN = 600;
const CHUNK = 256;
const SOURCE = { snapshotKind: 'kv-page', runtime: 'lmcache/0.3', model: 'meta-llama/Llama-3.1-8B-Instruct', adapter: 'none', profile: 'bf16', positionPolicy: 'absolute', task: 'coding-agent', namespace: 'tenant-42' };
const CHAIN = { runtime: SOURCE.runtime, model: SOURCE.model, profile: { dtype: 'bf16', layout: 'NHD', tpDegree: 1, rank: 0 }, task: SOURCE.task, namespace: SOURCE.namespace, chunkTokens: CHUNK };
const GRANT = { worker: 'bench-worker', grant: 'bench-grant' };
const backend = { tryPinReady: () => ({ kind: 'miss', reason: 'absent' }) };

const tokensOf = (n, seed) => Uint32Array.from({ length: n }, (_, i) => ((i + seed) * 2654435761) % 151936);
const wholeKey = (tokens) => artifactKey({ source: { ...SOURCE, tokenLayout: tokens }, sourcePageGeneration: 0, codec: 'none', codecConfig: 'none', representationVersion: 1 });
const coordinator = (n) => new WaitCoordinator({ backend, maxQueued: n + 1, maxWaiting: n + 1, historyLimit: 0 });

/** Heap plus ArrayBuffer bytes after full GCs; the pause lets V8 free dead backing stores, which it does off the main thread. */
async function heap() {
  for (let i = 0; i < 2; i++) {
    globalThis.gc();
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  globalThis.gc();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
}

function median(samples) {
  return nearestRank(Float64Array.from(samples).sort(), 0.5);
}

const us = (ns) => Math.round(ns / 100) / 10;

/** Median ns of the hand-off of `key`'s unit after `warm` untimed ones, and the bytes of its key. */
function handoff(key, warm) {
  const c = coordinator(RUNS + warm);
  const samples = [];
  const cpuSamples = [];
  let bytes = 0;
  for (let r = -warm; r < RUNS; r++) {
    if (c.onWait({ engine: 'engine-0', request: `h-${r}`, generation: 0 }, key).status !== 'queued') throw new Error('wait-cost: the hand-off wait did not queue');
    const work = c.beginNext(GRANT);
    if (work === null) throw new Error('wait-cost: beginNext issued nothing');
    const cpu = process.cpuUsage();
    const t0 = process.hrtime.bigint();
    const { task, transferList } = preparationTaskOf(work);
    const clone = structuredClone(task, { transfer: transferList });
    const t1 = process.hrtime.bigint();
    const spent = process.cpuUsage(cpu);
    const moved = transferList.length === 1 && task.keyBytes.byteLength === 0;
    const shared = transferList.length === 0 && clone.keyBytes.buffer instanceof SharedArrayBuffer;
    if (clone.keyHex !== key.hex || !(moved || shared)) throw new Error('wait-cost: the task names another key, or its bytes were cloned');
    bytes = clone.keyBytes.byteLength;
    if (r >= 0) {
      samples.push(Number(t1 - t0));
      cpuSamples.push((spent.user + spent.system) * 1000);
    }
    c.complete(work, { ok: true });
  }
  return { handoff_us: us(median(samples)), handoff_cpu_us: us(median(cpuSamples)), handoff_bytes: bytes };
}

/**
 * Median event-loop time of building a key and admitting a wait on it: `input(r)` (untimed) makes
 * run r's input, `build(input, r)` the key; runs below 0 (`warm` of them) are not timed. Also
 * returns the last key, for the hand-off.
 */
function admissions(input, build, warm) {
  const c = coordinator(RUNS + warm);
  const keySamples = [];
  const admitSamples = [];
  const cpuSamples = [];
  let last = null;
  for (let r = -warm; r < RUNS; r++) {
    const given = input(r);
    const cpu = process.cpuUsage();
    const t0 = process.hrtime.bigint();
    const key = build(given, r);
    const t1 = process.hrtime.bigint();
    const admission = c.onWait({ engine: 'engine-0', request: `t-${r}`, generation: 0 }, key);
    const t2 = process.hrtime.bigint();
    const spent = process.cpuUsage(cpu);
    if (admission.status !== 'queued') throw new Error(`wait-cost: expected queued, got ${admission.status}`);
    if (r >= 0) {
      keySamples.push(Number(t1 - t0));
      admitSamples.push(Number(t2 - t0));
      cpuSamples.push((spent.user + spent.system) * 1000);
    }
    last = key;
  }
  return { admit_us: us(median(admitSamples)), admit_cpu_us: us(median(cpuSamples)), key_us: us(median(keySamples)), last };
}

async function whole(n) {
  const waiters = Math.max(16, Math.min(1000, Math.floor(WAITER_BUDGET / (n * 4))));
  // Admission time: a fresh caller token array each run, as each wait brings its own context.
  const { last, ...times } = admissions((r) => tokensOf(n, r + 8), wholeKey, WARM);
  // Retained: `waiters` queued waits, each on its own key; the caller's arrays are dropped.
  const held = coordinator(waiters);
  const before = await heap();
  for (let i = 0; i < waiters; i++) held.onWait({ engine: 'engine-0', request: `w-${i}`, generation: 0 }, wholeKey(tokensOf(n, i)));
  const after = await heap();
  if (held.stats().waiting !== waiters) throw new Error('wait-cost: not every wait was admitted');
  return { form: 'whole', tokens: n, ...times, retained_bytes: Math.round((after - before) / waiters), chain_bytes: null, waiters, ...handoff(last, WARM) };
}

async function chained(n) {
  // Its keys are small: as many waiters as the whole form's smallest size, for a steadier figure.
  const waiters = quick ? 200 : 1000;
  const prefix = n - TURN;
  const turn = tokensOf(TURN, 7);
  // Admission time: one live session, each run its next turn; the untimed runs grow a session of
  // their own, so the timed session is at n tokens.
  const warmup = new ChunkChain(CHAIN);
  const session = new ChunkChain(CHAIN);
  warmup.extend(tokensOf(prefix, 1));
  session.extend(tokensOf(prefix, 0));
  const { last, ...times } = admissions(
    () => turn,
    (tokens, r) => {
      const chain = r < 0 ? warmup : session;
      chain.extend(tokens);
      return chain.manifestKey();
    },
    CHAINED_WARM,
  );
  // Retained: `waiters` sessions, each with its previous turns keyed (the chains are the caller's
  // and measured apart), then each session's turn and its queued wait.
  const base = await heap();
  const sessions = [];
  for (let i = 0; i < waiters; i++) {
    const chain = new ChunkChain(CHAIN);
    chain.extend(tokensOf(prefix, i));
    sessions.push(chain);
  }
  const held = coordinator(waiters);
  const before = await heap();
  for (let i = 0; i < waiters; i++) {
    sessions[i].extend(tokensOf(TURN, i + 1));
    held.onWait({ engine: 'engine-0', request: `w-${i}`, generation: 0 }, sessions[i].manifestKey());
  }
  const after = await heap();
  if (held.stats().waiting !== waiters) throw new Error('wait-cost: not every wait was admitted');
  return { form: 'chained', tokens: n, ...times, retained_bytes: Math.round((after - before) / waiters), chain_bytes: Math.round((before - base) / waiters), waiters, ...handoff(last, CHAINED_WARM) };
}

const results = [];
for (const n of sizes) {
  results.push(await whole(n));
  results.push(await chained(n));
}
const env = benchEnv({ quick, runs: RUNS, warm: WARM, chainedWarm: CHAINED_WARM, turnTokens: TURN, chunkTokens: CHUNK, timing: 'one admission or hand-off between two process.hrtime.bigint() reads; median of the runs' });
if (flag('json')) {
  process.stdout.write(JSON.stringify({ env, results }) + '\n');
} else {
  console.log(`waitprep per-wait key and hand-off cost — ${env.date}, ${env.cpu} (${env.cores} cores), Node ${env.node}${quick ? ', --quick' : ''}; median of ${RUNS} runs`);
  console.table(results.map((r) => ({
    form: r.form,
    tokens: r.tokens,
    'admit µs': r.admit_us,
    'admit CPU µs': r.admit_cpu_us,
    'key µs': r.key_us,
    'retained B/wait': r.retained_bytes,
    'chain B/session': r.chain_bytes ?? '',
    'hand-off µs': r.handoff_us,
    'hand-off CPU µs': r.handoff_cpu_us,
    'hand-off key B': r.handoff_bytes,
    waiters: r.waiters,
  })));
}
