// The experiment's driver: every chosen policy on every (preset, agent count) with each seed,
// each replay on the same trace, aggregated into one JSON-able object. `onReplay` hears of each
// replay as it ends (the CLI's progress line); nothing here reads a wall clock, so the object is
// the same, byte for byte, for the same arguments.
import { join } from 'node:path';
import { POLICIES, pickPolicies } from './policies.js';
import { PRESETS, SOURCES, resolvePreset } from './presets.js';
import { replay } from './replay.js';
import { checkReplayable, generatorTrace, inputError, jsonlTrace, mooncakeTrace, readTraceText } from './traces.js';

/** Spread of one figure over the seeds. */
function spread(values) {
  const mean = values.reduce((a, b) => a + b, 0) / values.length;
  return { mean: round(mean), min: round(Math.min(...values)), max: round(Math.max(...values)) };
}

const round = (x) => Math.round(x * 1e6) / 1e6;

/** Each seed's hits as a fraction of the bound's (oracle-jit) on the same seed, spread over the seeds. */
function hitsOfOracle(results, oracleResults) {
  return spread(results.map((r, s) => (oracleResults[s].hits > 0 ? r.hits / oracleResults[s].hits : 0)));
}

/** The policy every table measures hits against. */
export const BOUND = 'oracle-jit';

/** One policy's summary over its seeds. */
function summaryOf(results, bound) {
  return {
    hitRate: spread(results.map((r) => r.hitRate)),
    bytesHitRate: spread(results.map((r) => r.bytesHitRate)),
    hitsOfOracle: bound === null ? null : hitsOfOracle(results, bound),
    latencyMean: spread(results.map((r) => r.latency.mean)),
    latencyP50: spread(results.map((r) => r.latency.p50)),
    latencyP95: spread(results.map((r) => r.latency.p95)),
    latencyP99: spread(results.map((r) => r.latency.p99)),
    wastedBytes: spread(results.map((r) => r.wasted.bytes)),
    wastedShare: spread(results.map((r) => (r.units.bytes > 0 ? r.wasted.bytes / r.units.bytes : 0))),
    peakArenaBytes: spread(results.map((r) => r.memory.peak.arenaBytes + r.memory.peak.stagingBytes)),
    peakGpuBytes: spread(results.map((r) => r.memory.peak.gpuRetainedBytes + r.memory.peak.devicePoolBytes)),
  };
}

/** The trace for one (source, agent count, seed). The Mooncake trace is one: seeds move agents between engines. */
/** The Mooncake trace shipped with the experiment (Brotli-compressed; experiment/traces/README.md). */
export const DEFAULT_MOONCAKE = join(import.meta.dirname, 'traces', 'mooncake-fast25-conversation.jsonl.br');

/** The trace path as reported: relative to the package for the shipped trace, as given otherwise. */
function displayedTracePath(path) {
  return path === DEFAULT_MOONCAKE ? 'experiment/traces/mooncake-fast25-conversation.jsonl.br' : path;
}

/**
 * The trace for one (agent count, seed), checked against `bounds` (checkReplayable) before its
 * first replay. A file that cannot be read or parsed, or a trace that cannot be replayed, is an
 * ERR_INVALID_ARGUMENT whose `field` is the option that named it.
 */
function traceFor(options, agents, seed, cache, bounds) {
  const { trace } = options;
  const generated = trace === 'generator';
  const id = `${trace}/${agents}`;
  let built = generated ? undefined : cache.get(id);
  if (built === undefined) {
    const option = generated ? '--seconds' : trace === 'mooncake' ? '--mooncake-file' : '--trace';
    const path = trace === 'mooncake' ? options.mooncakeFile : trace;
    try {
      built = generated
        ? generatorTrace({ agents, seconds: options.seconds, seed })
        : trace === 'mooncake'
          ? mooncakeTrace(readTraceText(path, option), { agents })
          : jsonlTrace(trace, readTraceText(path, option), { sharedTokens: options.sharedPrefixTokens });
      checkReplayable(built, bounds);
    } catch (error) {
      if (error?.code !== 'ERR_INVALID_ARGUMENT' || error.field === option) throw error;
      throw inputError(option, `${generated ? `the generated trace of ${agents} agents, seed ${seed}` : JSON.stringify(path)}: ${error.message}`, error);
    }
    if (!generated) cache.set(id, built);
  }
  return built;
}

/**
 * Runs the experiment. `options`: { presets, agents (list), seconds, seeds (list), trace
 * ('generator' | 'mooncake' | a JSONL path), mooncakeFile, sharedPrefixTokens, policies (names
 * or null), sampleSeconds }.
 */
export function runExperiment(options, { onReplay = () => {}, onProgress = null } = {}) {
  const policies = pickPolicies(options.policies);
  const presets = options.presets.map((name) => resolvePreset(name));
  const cache = new Map();
  const total = presets.length * options.agents.length * options.seeds.length * policies.length;
  // A run holds every policy's series for the seeds of one (preset, agent count), and keeps the first seed's of each.
  const bounds = { sampleSeconds: options.sampleSeconds, seriesKept: policies.length * (options.seeds.length + presets.length * options.agents.length) };
  let done = 0;
  const runs = [];
  for (const preset of presets) {
    for (const agents of options.agents) {
      const perPolicy = policies.map(() => []);
      let traceInfo = null;
      for (const seed of options.seeds) {
        const trace = traceFor(options, agents, seed, cache, bounds);
        traceInfo ??= trace.info;
        policies.forEach((policy, i) => {
          const result = replay(trace, preset, policy, {
            seed,
            sampleSeconds: options.sampleSeconds,
            onProgress: onProgress === null ? null : (fraction) => onProgress({ preset: preset.name, agents, seed, policy: policy.name, fraction, done, total }),
          });
          perPolicy[i].push(result);
          onReplay({ preset: preset.name, agents, seed, policy: policy.name, result, done: ++done, total });
        });
      }
      const bound = policies.findIndex((p) => p.name === BOUND);
      runs.push({
        preset: preset.name,
        agents,
        trace: traceInfo,
        policies: policies.map((policy, i) => {
          const results = perPolicy[i];
          return {
            name: policy.name,
            description: policy.description,
            summary: summaryOf(results, bound < 0 ? null : perPolicy[bound]),
            // The memory series of the first seed only: the others' are in their peak and mean.
            seeds: results.map((r, s) => (s === 0 ? r : { ...r, memory: { ...r.memory, series: undefined } })),
          };
        }),
      });
    }
  }
  return {
    experiment: 'waitprep experiment: every policy on the same trace and resources, in virtual time (docs/experiment.md)',
    options: { ...options, mooncakeFile: options.trace === 'mooncake' ? displayedTracePath(options.mooncakeFile) : undefined },
    presets: Object.fromEntries(presets.map((p) => [p.name, p])),
    presetNames: Object.keys(PRESETS),
    sources: SOURCES,
    runs,
  };
}

/** The options two saved outputs must share to be reported as one: the same trace, seeds and sampling. */
const MERGE_MUST_MATCH = ['seconds', 'seeds', 'trace', 'mooncakeFile', 'sharedPrefixTokens', 'sampleSeconds'];

/**
 * Several saved `runExperiment` outputs as one, as if one run had asked for all of their presets,
 * agent counts and policies: the runs of one (preset, agent count) are joined, their policies in
 * report order, and each policy's hits of the bound are recomputed against the bound, wherever
 * it came from. Replays are independent of each other (each policy on each seed's trace), so the
 * result is the object the single run would print (tested). Throws when the outputs are not of
 * one experiment (another trace, seed list or sampling; a (preset, agent count) whose trace
 * differs) or when a policy of one (preset, agent count) comes twice.
 */
export function mergeOutputs(outputs) {
  if (outputs.length === 1) return outputs[0];
  const [first] = outputs;
  for (const output of outputs.slice(1)) {
    for (const field of MERGE_MUST_MATCH) {
      if (JSON.stringify(output.options[field]) !== JSON.stringify(first.options[field])) {
        throw new Error(`cannot merge: the outputs differ in ${field} (${JSON.stringify(first.options[field])} against ${JSON.stringify(output.options[field])})`);
      }
    }
    if (JSON.stringify(output.sources) !== JSON.stringify(first.sources)) throw new Error('cannot merge: the outputs were made with different source tiers');
  }
  const union = (lists) => [...new Set(lists.flat())];
  const presets = union(outputs.map((o) => o.options.presets));
  const agents = union(outputs.map((o) => o.options.agents)).sort((x, y) => x - y);
  const order = new Map(POLICIES.map((p, i) => [p.name, i]));
  const byRun = new Map();
  for (const output of outputs) {
    for (const run of output.runs) {
      const id = `${run.preset}/${run.agents}`;
      const into = byRun.get(id);
      if (into === undefined) {
        byRun.set(id, { ...run, policies: [...run.policies] });
        continue;
      }
      if (JSON.stringify(into.trace) !== JSON.stringify(run.trace)) throw new Error(`cannot merge: ${id} replayed different traces`);
      for (const policy of run.policies) {
        if (into.policies.some((p) => p.name === policy.name)) throw new Error(`cannot merge: ${id} has policy ${policy.name} twice`);
        into.policies.push(policy);
      }
    }
  }
  const runs = [];
  for (const preset of presets) {
    for (const count of agents) {
      const run = byRun.get(`${preset}/${count}`);
      if (run === undefined) continue;
      run.policies.sort((a, b) => order.get(a.name) - order.get(b.name));
      const oracle = run.policies.find((p) => p.name === BOUND);
      run.policies = run.policies.map((p) => ({ ...p, summary: { ...p.summary, hitsOfOracle: oracle === undefined ? null : hitsOfOracle(p.seeds, oracle.seeds) } }));
      runs.push(run);
    }
  }
  const names = union(runs.map((r) => r.policies.map((p) => p.name))).sort((a, b) => order.get(a) - order.get(b));
  const policies = names.length === POLICIES.length ? null : names;
  const presetObjects = Object.assign({}, ...outputs.map((o) => o.presets));
  return {
    ...first,
    options: { ...first.options, presets, agents, policies },
    presets: Object.fromEntries(presets.map((name) => [name, presetObjects[name]])),
    runs,
  };
}
