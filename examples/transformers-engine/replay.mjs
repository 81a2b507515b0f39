// The orchestrator: replays agent sessions from waitprep's trace generator against a real model
// runtime, the engine process (python -m tfengine.engine), with the storage tier (python -m
// tfengine.storage) as the lease table's producer.
//
// It is a closed-loop replay. Each agent's turns run on the one engine, in the order they are
// asked for; the trace gives each session's contexts (its keys' token layouts) and how long each
// tool call takes, and a turn's own compute time replaces the trace's think time: an agent's
// tool call starts when its turn has answered, because the turn is the LLM call. Per agent:
//
//   first turn: prefill the first wait's context from scratch, save its KV to the disk tier
//   for each tool call:
//     onWait(consumer, key of the context), driver.poke()      (the storage tier prepares it)
//     sleep for the call's duration (scaled, capped)
//     onWake: a hit hands the lease to the engine with its token; a miss does not
//     the next turn: prompt = the next wait's context (or this one plus a tool result), prefix =
//     this context; the engine uses its own LRU if the KV is still resident, else pins the
//     lease exactly and rebuilds the DynamicCache from the arena, else recomputes
//     the orchestrator closes its lease once the engine says it holds its own pin (or answered)
//
// With `planner`, a PausePlanner (waitprep's) decides instead of admitting every call: each call
// is a pause it begins (its tool class, its context's KV bytes), wakes or cancels; it admits
// through the same coordinator, replans every REPLAN_MS, and after each replan the storage tier
// gets its eviction values, so it evicts what no pause likely to wake soon wants first. Keeping KV
// on the "GPU" is the engine's own LRU here, which takes no hints: the planner's retention budget
// is 0 and every pause is a candidate for preparation. The storage tier does not report its
// evictions back: a pause whose artifact it evicted stays admitted in the planner's books until
// its wake, which the table answers with a miss.
//
// Traces come with replaceFraction 0: a replacing wait's context (the old one plus a steering
// message) is a context no turn computed, so the engine has no KV of it to save.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { PausePlanner, PreparationDriver, WaitCoordinator, leaseTableBackend, openLeaseTable, plannedUnitsInFlight, unlinkLeaseTable } from 'waitprep';
import { generateTrace, keyFromSpec, specTokenLayout } from 'waitprep/trace';
import { nearestRank } from '../../experiment/percentile.js';
import { EXAMPLE_DIR, pythonEnv, venvPython } from './venv.mjs';

/**
 * Run profiles: the geometry and a trace shaped to fit its context. `tiny` is the tests': its
 * prompts prefill in tens of milliseconds, within this host's timing noise, so it cannot show
 * what a hit saves. `medium` is the smallest that shows the real balance (a prompt's prefill
 * well above a restore: about 1 s against tens of ms) and replays in under 3 minutes on 2 cores;
 * CI runs it. `large` records the figures (contexts of about 2k to 4.5k tokens on an 8-layer,
 * hidden-1024 model; 6 to 10 minutes).
 */
export const PROFILES = Object.freeze({
  tiny: {
    geometry: 'tiny',
    agents: 3,
    trace: { systemPrefixTokens: 192, taskTokens: { min: 32, max: 96 }, growthTokens: { mu: Math.log(64), sigma: 0.4 }, callsPerSession: { mu: Math.log(4), sigma: 0.2, min: 3, max: 4 } },
    resultTokens: 16,
    contextLimit: 2048,
    cacheTokens: 400,
    arenaTokens: 4000,
    maxWaitS: 1.5,
    checkEvery: 1,
  },
  medium: {
    geometry: 'medium',
    agents: 3,
    trace: { systemPrefixTokens: 768, taskTokens: { min: 128, max: 384 }, growthTokens: { mu: Math.log(200), sigma: 0.4 }, callsPerSession: { mu: Math.log(3), sigma: 0.1, min: 3, max: 3 } },
    resultTokens: 32,
    contextLimit: 4096,
    cacheTokens: 2500,
    arenaTokens: 12000,
    maxWaitS: 4,
    checkEvery: 1,
  },
  large: {
    geometry: 'large',
    agents: 4,
    trace: { systemPrefixTokens: 1536, taskTokens: { min: 256, max: 768 }, growthTokens: { mu: Math.log(400), sigma: 0.5 }, callsPerSession: { mu: Math.log(4), sigma: 0.2, min: 3, max: 5 } },
    resultTokens: 64,
    contextLimit: 8192,
    cacheTokens: 5000,
    arenaTokens: 24000,
    maxWaitS: 8,
    checkEvery: 1,
  },
});

/** How often the planner replans and the storage tier gets its eviction values, with `planner`. */
export const REPLAN_MS = 250;

/**
 * The links the planner is told of, with `planner`: a STAND-IN for this host's disk tier and one
 * unit (a page-cache read and a copy into /dev/shm), not a measurement; they set its units in
 * flight (two) and each unit's estimated time.
 */
const PLANNER_LINKS = Object.freeze({ tierBytesPerSec: 2e9, unitBytesPerSec: 1e9 });

/** A Python child speaking one JSON object a line; requests are answered in order. */
class PythonChild {
  constructor(name, module, args, env = {}) {
    this.name = name;
    this.child = spawn(venvPython(), ['-m', module, ...args], { cwd: EXAMPLE_DIR, env: pythonEnv(env), stdio: ['pipe', 'pipe', 'inherit'] });
    this.pending = new Map();
    this.exited = new Promise((resolve) => this.child.on('exit', (code, signal) => resolve({ code, signal })));
    this.ready = new Promise((resolve, reject) => {
      this.onReady = resolve;
      this.exited.then(({ code, signal }) => reject(new Error(`${name} exited (${signal ?? code}) before it was ready`)));
    });
    this.exited.then(({ code, signal }) => {
      for (const { reject } of this.pending.values()) reject(new Error(`${name} exited (${signal ?? code}) with a request unanswered`));
      this.pending.clear();
    });
    createInterface({ input: this.child.stdout }).on('line', (line) => this.dispatch(JSON.parse(line)));
  }

  dispatch(message) {
    if (message.event === 'ready') return this.onReady(message);
    const waiting = this.pending.get(message.id);
    if (waiting === undefined) return;
    if (message.event === 'turn' || message.event === 'reply' || message.event === 'error') {
      this.pending.delete(message.id);
      if (message.event === 'error') waiting.reject(new Error(`${this.name}: ${message.error}`));
      else waiting.resolve(message);
    } else {
      waiting.onEvent?.(message);
    }
  }

  /** Sends `request` (given an id) and resolves with its final answer; `onEvent` sees the ones before it. */
  request(request, onEvent) {
    return new Promise((resolve, reject) => {
      this.pending.set(request.id, { resolve, reject, onEvent });
      this.child.stdin.write(JSON.stringify(request) + '\n');
    });
  }

  async close() {
    if (this.child.exitCode === null && this.child.signalCode === null) {
      this.child.stdin.end(JSON.stringify({ op: 'exit' }) + '\n');
      const timer = setTimeout(() => this.child.kill('SIGKILL'), 10_000);
      await this.exited;
      clearTimeout(timer);
    }
  }
}

/** The trace's sessions as each agent's tool calls in order, cut where a context would not fit. */
export function sessions(events, { contextLimit, resultTokens }) {
  const byAgent = new Map();
  const open = new Map();
  for (const e of events) {
    if (e.event === 'wait') {
      const list = byAgent.get(e.agent) ?? [];
      byAgent.set(e.agent, list);
      const call = { agent: e.agent, generation: e.generation, spec: e.key, tool: e.tool ?? 'tool', startT: e.t, seconds: 0, end: 'wake' };
      list.push(call);
      open.set(`${e.agent}/${e.generation}`, call);
    } else {
      const call = open.get(`${e.agent}/${e.generation}`);
      if (call === undefined) continue;
      call.seconds = e.t - call.startT;
      call.end = e.event;
    }
  }
  const out = [];
  for (const calls of byAgent.values()) {
    const fit = [];
    for (const call of calls) {
      if (specTokenLayout(call.spec).length + resultTokens > contextLimit) break;
      fit.push(call);
    }
    if (fit.length > 0) out.push(fit);
  }
  return out;
}

/** A spec plus a seeded run of `length` tokens: the tool's result that the last turn appends. */
function withResult(spec, agent, generation, length) {
  return { task: spec.task, namespace: spec.namespace, tokens: [...spec.tokens, { seed: `result/${agent}/${generation}`, length }] };
}

function tokensBase64(layout) {
  return Buffer.from(layout.buffer, layout.byteOffset, layout.byteLength).toString('base64');
}

function percentiles(values) {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return { n: sorted.length, p50: nearestRank(sorted, 0.5), p95: nearestRank(sorted, 0.95) };
}
const sum = (values) => values.reduce((a, b) => a + b, 0);
const mean = (values) => (values.length === 0 ? null : sum(values) / values.length);

/**
 * Runs one replay and resolves with its report. Options: `profile` (a PROFILES name), `seed`,
 * `agents`, `timeScale` (multiplies the trace's arrivals and tool-call durations), `maxWaitS`,
 * `threads` (torch threads in the engine), `lateLookup` (after a wake's miss the engine looks the
 * prefix up again by digest when it reaches the turn, as an engine's scheduler-time lookup
 * would; off by default: a miss recomputes), `cacheTokens` (the engine LRU's budget, overriding the
 * profile's; 0 keeps nothing resident), `settleBeforeWake` (tests: a wake also waits until its
 * key's preparation unit has settled, so whether a wake hits no longer depends on timing),
 * `planner` (a PausePlanner decides what to prepare and orders the storage tier's evictions),
 * `arenaTokens` (the storage tier's budget in tokens of KV, overriding the profile's),
 * `log` (a line printer).
 */
export async function runReplay(options = {}) {
  const profile = { ...PROFILES[options.profile ?? 'tiny'] };
  if (profile.geometry === undefined) throw new Error(`unknown profile ${options.profile}`);
  const seed = options.seed ?? 7;
  const agents = options.agents ?? profile.agents;
  const timeScale = options.timeScale ?? 1;
  const maxWaitS = options.maxWaitS ?? profile.maxWaitS;
  const log = options.log ?? (() => {});
  const id = `${process.pid}-${Date.now().toString(36)}`;
  const tableName = `tfengine-${id}`;
  const work = mkdtempSync(join(tmpdir(), 'tfengine-'));
  const diskDir = join(work, 'disk');
  const socketPath = join(work, 'storage.sock');

  const trace = generateTrace({ agents, seconds: 3600, seed, replaceFraction: 0, cancelFraction: 0.02, ...profile.trace });
  const plan = sessions(trace, profile);

  log(`engine: building the ${profile.geometry} model`);
  const cacheTokens = options.cacheTokens ?? profile.cacheTokens;
  const arenaTokens = options.arenaTokens ?? profile.arenaTokens;
  const engine = new PythonChild('engine', 'tfengine.engine', ['--geometry', profile.geometry, '--seed', String(seed), '--cache-tokens', String(cacheTokens), '--disk', diskDir, ...(options.threads ? ['--threads', String(options.threads)] : [])]);
  let storage = null;
  let table = null;
  let driver = null;
  const report = { profile: options.profile ?? 'tiny', seed, agents: plan.length, timeScale, maxWaitS, lateLookup: options.lateLookup === true, planner: options.planner === true };
  let replanTimer = null;
  try {
    const ready = await engine.ready;
    const kvPerToken = ready.kvBytesPerToken;
    storage = new PythonChild('storage', 'tfengine.storage', ['--table', tableName, '--disk', diskDir, '--socket', socketPath, '--budget', String(arenaTokens * kvPerToken)]);
    await storage.ready;
    table = openLeaseTable({ name: tableName, role: 'consumer', implementation: 'native' });
    const planner = options.planner !== true ? null : { units: plannedUnitsInFlight(PLANNER_LINKS, 64, 0.125) };
    const coordinator = new WaitCoordinator({ backend: leaseTableBackend(table), maxQueued: 1024, maxWaiting: 4096, historyLimit: 4096, ...(planner === null ? {} : { maxInFlight: planner.units }) });
    const preps = [];
    // Each key's next settlement, for settleBeforeWake: resolved when a unit of that key settles.
    const settlements = new Map();
    const settled = (hex) => {
      let entry = settlements.get(hex);
      if (entry === undefined) {
        let resolve;
        entry = { promise: new Promise((r) => (resolve = r)), resolve: () => resolve() };
        settlements.set(hex, entry);
      }
      return entry;
    };
    if (planner !== null) {
      planner.pauses = new PausePlanner({
        coordinator,
        budgets: { gpuRetainBytes: 0, arenaBytes: arenaTokens * kvPerToken },
        links: PLANNER_LINKS,
        tierShare: 0.125,
      });
      planner.values = 0;
      planner.busy = false;
      // Replan, then hand the storage tier the eviction values of the keys open pauses want. A
      // tick while the last one's values are unanswered is skipped; a failure stops the timer.
      const replan = async () => {
        planner.pauses.replan();
        driver.poke();
        const values = [...new Set([...planner.open].map((pause) => pause.key.hex))].map((hex) => [hex, planner.pauses.evictionValue(hex)]);
        const reply = await storage.request({ op: 'eviction-values', id: `values-${++planner.values}`, values });
        if (!reply.ok) throw new Error(`eviction values refused: ${reply.error}`);
      };
      planner.open = new Set();
      replanTimer = setInterval(() => {
        if (planner.busy) return;
        planner.busy = true;
        replan().then(
          () => (planner.busy = false),
          (error) => {
            clearInterval(replanTimer);
            log(`replan stopped: ${error.message}`);
          },
        );
      }, REPLAN_MS);
    }
    driver = new PreparationDriver({
      coordinator,
      ...(planner === null ? {} : { maxInFlight: planner.units }),
      grants: { acquire: () => ({ worker: 'storage-tier', grant: 'host-io' }), release: () => {} },
      worker: { filename: new URL('./prepare-worker.mjs', import.meta.url), minThreads: 1, maxThreads: 2, env: { ...process.env, TFENGINE_STORAGE_SOCKET: socketPath } },
      deadlineMs: 60_000,
      onSettled: (r) => {
        preps.push({ result: r.result, value: r.value, error: r.error?.message ?? null });
        settled(r.work.key.hex).resolve();
        settlements.delete(r.work.key.hex);
      },
    });
    const base = { snapshotKind: 'kv-cache', runtime: ready.identity.runtime, model: ready.identity.model, adapter: 'none', profile: ready.identity.profile, positionPolicy: 'absolute', sourcePageGeneration: 0, codec: 'none', codecConfig: 'none', representationVersion: 1 };
    const keyOf = (spec) => keyFromSpec(spec, base);
    const admissions = {};
    const turns = [];
    let turnId = 0;
    let hitsSeen = 0;

    const turn = async (agent, kind, spec, prefix, wake, call = null) => {
      const layout = specTokenLayout(spec);
      const key = keyOf(spec);
      const request = {
        op: 'turn', id: ++turnId, tokens: tokensBase64(layout), task: spec.task, namespace: spec.namespace, pageGeneration: 0,
        keyHex: key.hex, save: kind !== 'last', decode: 4, prefix: null, handoff: null, check: false,
      };
      let lease = null;
      if (prefix !== null) {
        request.prefix = { length: prefix.length, keyHex: prefix.keyHex };
        if (wake.kind === 'hit') {
          lease = wake.lease;
          request.handoff = lease.handoffToken();
          request.check = hitsSeen++ % profile.checkEvery === 0;
        } else {
          request.cause = wake.reason;
          if (options.lateLookup) {
            request.lookupTable = tableName;
            request.check = hitsSeen++ % profile.checkEvery === 0;
          }
        }
      }
      const sent = performance.now();
      // The rule: the orchestrator's lease stays until the engine holds its own pin, or answered.
      const reply = await engine.request(request, (event) => {
        if (event.event === 'pinned' || event.event === 'handoff-miss') lease?.close();
      }).finally(() => lease?.close());
      turns.push({
        agent, kind, wake: wake === null ? null : wake.kind === 'hit' ? 'hit' : `miss:${wake.reason}`, tool: call?.tool ?? null, toolS: call?.waitedS ?? null,
        waitedS: (performance.now() - sent) / 1000 - reply.ttftS - reply.decodeS, ...reply,
      });
      log(`turn ${reply.id} ${agent} ${kind}: ${reply.tokens} tokens, ${reply.path}${reply.cause ? ` (${reply.cause})` : ''}, ttft ${(reply.ttftS * 1000).toFixed(0)} ms`);
      return { key, layout };
    };

    const runAgent = async (calls) => {
      const agent = calls[0].agent;
      await sleep(calls[0].startT * timeScale * 1000);
      let { key, layout } = await turn(agent, 'first', calls[0].spec, null, null);
      for (let i = 0; i < calls.length; i++) {
        const call = calls[i];
        const consumer = { engine: 'engine-0', request: agent, generation: call.generation };
        const waitedS = Math.min(call.seconds * timeScale, maxWaitS);
        let wake;
        if (planner === null) {
          const admission = coordinator.onWait(consumer, key);
          admissions[admission.status] = (admissions[admission.status] ?? 0) + 1;
          const unit = ['queued', 'joined', 'in-flight'].includes(admission.status) ? settled(key.hex).promise : null;
          driver.poke();
          await sleep(waitedS * 1000);
          if (options.settleBeforeWake && unit !== null) await unit;
          if (admission.ticket === undefined) wake = { kind: 'miss', reason: admission.status };
          else if (call.end === 'cancel') {
            coordinator.onCancel(admission.ticket);
            wake = { kind: 'miss', reason: 'cancelled' };
          } else wake = coordinator.onWake(admission.ticket);
        } else {
          const begun = planner.pauses.begin({ consumer, key, toolClass: call.tool, bytes: layout.length * kvPerToken });
          admissions[begun.action] = (admissions[begun.action] ?? 0) + 1;
          const pause = begun.pause;
          if (pause !== null) planner.open.add(pause);
          const unit = begun.action === 'prepare' ? settled(key.hex).promise : null;
          driver.poke();
          await sleep(waitedS * 1000);
          // Until its unit settles, or the key is ready already (a unit of an earlier pause made
          // it), or the planner withdrew the pause (a queued unit of it never runs).
          if (options.settleBeforeWake && unit !== null) {
            let done = false;
            unit.then(() => (done = true));
            const until = performance.now() + 60_000;
            while (!done && pause.admitted && table.peek(key).kind !== 'ready' && performance.now() < until) await Promise.race([unit, sleep(20)]);
          }
          planner.open.delete(pause);
          if (pause === null) wake = { kind: 'miss', reason: 'overflow' };
          else if (call.end === 'cancel') {
            planner.pauses.cancel(pause);
            wake = { kind: 'miss', reason: 'cancelled' };
          } else wake = planner.pauses.wake(pause) ?? { kind: 'miss', reason: 'not-admitted' };
        }
        const last = i === calls.length - 1;
        const nextSpec = last ? withResult(call.spec, agent, call.generation, profile.resultTokens) : calls[i + 1].spec;
        ({ key, layout } = await turn(agent, last ? 'last' : 'next', nextSpec, { length: layout.length, keyHex: key.hex }, wake, { tool: call.tool, waitedS }));
      }
    };

    const started = performance.now();
    await Promise.all(plan.map(runAgent));
    report.wallS = (performance.now() - started) / 1000;
    clearInterval(replanTimer);
    await driver.close();
    report.storage = await storage.request({ op: 'stats', id: 'stats' });
    report.pinnedSlotsAtEnd = table.summary().pinnedSlots;
    report.admissions = admissions;
    report.coordinator = coordinator.stats();
    if (planner !== null) report.plannerStats = { ...planner.pauses.stats(), evictionValueUpdates: planner.values };
    Object.assign(report, summarize(turns, preps));
    report.engine = ready;
    return report;
  } finally {
    clearInterval(replanTimer);
    await driver?.close({ force: true }).catch(() => {});
    table?.close();
    await engine.close();
    await storage?.close();
    unlinkLeaseTable(tableName);
    rmSync(work, { recursive: true, force: true });
  }
}

/**
 * Below this, a full prefill is within the timing noise of a shared 2-core host (a turn's time
 * moves by tens of milliseconds with the load, the allocator and the other processes), so what
 * a hit saves cannot be told from noise.
 */
export const NOISE_S = 0.1;

/**
 * What the checked hits saved: each hit's prompt was also prefilled in full, and the saving is
 * that minus the hit's time to first token. `tooSmall` says why a profile cannot show a saving
 * (a hit saved nothing, or the prompts prefill within the noise), or is null when it shows one.
 */
function savingOf(checked, leased) {
  const saved = checked.map((t) => t.check.fullPrefillS - t.ttftS);
  const fullPrefillS = percentiles(checked.map((t) => t.check.fullPrefillS));
  const savedPerHitS = percentiles(saved);
  const restoreS = percentiles(leased.map((t) => t.restoreS));
  const meanSavedPerHitS = mean(saved);
  const ms = (s) => `${Math.round(s * 1000)} ms`;
  let tooSmall = null;
  if (fullPrefillS.p50 < NOISE_S) {
    tooSmall = `its prompts' full prefill takes ${ms(fullPrefillS.p50)} (p50), under the ${ms(NOISE_S)} this host's timing noise reaches, so what a hit saves cannot be told from noise`;
  } else if (savedPerHitS.p50 <= 0 || meanSavedPerHitS <= 0) {
    tooSmall = `a leased turn (restore p50 ${ms(restoreS.p50)} plus the new tokens' prefill) took as long as the full prefill (p50 ${ms(fullPrefillS.p50)}): ` +
      "this model's turn time is set by fixed per-turn costs and the host's load, not by the prompt's length, so skipping the prefix saves nothing measurable";
  }
  return {
    checkedHits: checked.length,
    fullPrefillS,
    savedPerHitS,
    meanSavedPerHitS,
    meanCachedTokens: mean(checked.map((t) => t.cachedTokens)),
    tooSmall,
  };
}

/** The report's figures from the turns and the preparation units. */
export function summarize(turns, preps) {
  const wakeTurns = turns.filter((t) => t.kind !== 'first');
  const by = (f) => wakeTurns.reduce((acc, t) => ((acc[f(t)] = (acc[f(t)] ?? 0) + 1), acc), {});
  const leased = wakeTurns.filter((t) => t.path === 'leased');
  const recompute = wakeTurns.filter((t) => t.path === 'recompute');
  const resident = wakeTurns.filter((t) => t.path === 'resident');
  const checked = leased.filter((t) => t.check !== undefined);
  const prepared = preps.filter((p) => p.result === 'succeeded' && p.value && !p.value.alreadyReady);
  return {
    // One row a turn, in the order the engine answered, for a reader who wants more than percentiles.
    turnLog: turns.map((t) => ({
      agent: t.agent, kind: t.kind, tool: t.tool, toolS: t.toolS, wake: t.wake, path: t.path, lookup: t.lookup ?? null, cause: t.cause ?? null, tokens: t.tokens, cachedTokens: t.cachedTokens,
      ttftS: t.ttftS, restoreS: t.restoreS, prefillS: t.prefillS, fullPrefillS: t.check?.fullPrefillS ?? null, queuedS: t.waitedS,
    })),
    turns: turns.length,
    wakes: wakeTurns.length,
    byWake: by((t) => t.wake),
    byPath: by((t) => (t.path === 'recompute' ? `recompute (${t.cause})` : t.lookup === 'late' ? 'leased (late lookup)' : t.path)),
    byWakeAndPath: by((t) => `${t.wake} -> ${t.path}`),
    ttftS: {
      leased: percentiles(leased.map((t) => t.ttftS)),
      recompute: percentiles(recompute.map((t) => t.ttftS)),
      resident: percentiles(resident.map((t) => t.ttftS)),
      firstTurns: percentiles(turns.filter((t) => t.kind === 'first').map((t) => t.ttftS)),
    },
    restoreS: percentiles(leased.map((t) => t.restoreS)),
    saving: checked.length === 0 ? null : savingOf(checked, leased),
    sameOutput: checked.length === 0 ? null : {
      checkedHits: checked.length,
      bitExact: checked.filter((t) => t.check.bitExact).length,
      sameTokens: checked.filter((t) => t.check.sameTokens).length,
      maxAbsDiff: Math.max(...checked.map((t) => t.check.maxAbsDiff)),
      maxLogitScale: Math.max(...checked.map((t) => t.check.logitScale)),
    },
    preparation: {
      units: preps.length,
      byResult: preps.reduce((acc, p) => ((acc[p.result] = (acc[p.result] ?? 0) + 1), acc), {}),
      errors: [...new Set(preps.filter((p) => p.error !== null).map((p) => p.error))].slice(0, 5),
      prepS: percentiles(prepared.map((p) => p.value.prepS)),
      meanPrepS: mean(prepared.map((p) => p.value.prepS)),
    },
    bytes: {
      diskWritten: sum(turns.map((t) => t.bytesWritten)),
      diskToArena: sum(prepared.map((p) => p.value.sizeBytes)),
      arenaToEngine: sum(leased.map((t) => t.bytesRead)),
    },
  };
}
