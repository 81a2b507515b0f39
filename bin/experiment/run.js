// The experiment's driver: every chosen policy on every (preset, agent count) with each seed,
// each replay on the same trace, aggregated into one JSON-able object. `onReplay` hears of each
// replay as it ends (the CLI's progress line); nothing here reads a wall clock, so the object is
// the same, byte for byte, for the same arguments.
import { readFileSync } from 'node:fs';
import { pickPolicies } from './policies.js';
import { PRESETS, SOURCES, resolvePreset } from './presets.js';
import { replay } from './replay.js';
import { generatorTrace, jsonlTrace, mooncakeTrace } from './traces.js';

/** Spread of one figure over the seeds. */
function spread(values) {
  const mean = values.reduce((a, b) => a + b, 0) / values.length;
  return { mean: round(mean), min: round(Math.min(...values)), max: round(Math.max(...values)) };
}

const round = (x) => Math.round(x * 1e6) / 1e6;

/** The trace for one (source, agent count, seed). The Mooncake trace is one: seeds move agents between engines. */
function traceFor(options, agents, seed, cache) {
  const { trace } = options;
  if (trace === 'generator') return generatorTrace({ agents, seconds: options.seconds, seed });
  const id = `${trace}/${agents}`;
  let built = cache.get(id);
  if (built === undefined) {
    built = trace === 'mooncake'
      ? mooncakeTrace(readFileSync(options.mooncakeFile, 'utf8'), { agents })
      : jsonlTrace(trace, readFileSync(trace, 'utf8'), { sharedTokens: options.sharedPrefixTokens });
    cache.set(id, built);
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
  let done = 0;
  const runs = [];
  for (const preset of presets) {
    for (const agents of options.agents) {
      const perPolicy = policies.map(() => []);
      let traceInfo = null;
      for (const seed of options.seeds) {
        const trace = traceFor(options, agents, seed, cache);
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
      const oracle = policies.findIndex((p) => p.oracle);
      runs.push({
        preset: preset.name,
        agents,
        trace: traceInfo,
        policies: policies.map((policy, i) => {
          const results = perPolicy[i];
          const ofOracle = oracle < 0 ? null : results.map((r, s) => (perPolicy[oracle][s].hits > 0 ? r.hits / perPolicy[oracle][s].hits : 0));
          return {
            name: policy.name,
            description: policy.description,
            summary: {
              hitRate: spread(results.map((r) => r.hitRate)),
              hitsOfOracle: ofOracle === null ? null : spread(ofOracle),
              latencyP50: spread(results.map((r) => r.latency.p50)),
              latencyP95: spread(results.map((r) => r.latency.p95)),
              latencyP99: spread(results.map((r) => r.latency.p99)),
              wastedBytes: spread(results.map((r) => r.wasted.bytes)),
              peakArenaBytes: spread(results.map((r) => r.memory.peak.arenaBytes + r.memory.peak.stagingBytes)),
              peakGpuBytes: spread(results.map((r) => r.memory.peak.gpuRetainedBytes + r.memory.peak.devicePoolBytes)),
            },
            // The memory series of the first seed only: the others' are in their peak and mean.
            seeds: results.map((r, s) => (s === 0 ? r : { ...r, memory: { ...r.memory, series: undefined } })),
          };
        }),
      });
    }
  }
  return {
    experiment: 'waitprep experiment: every policy on the same trace and resources, in virtual time (docs/experiment.md)',
    options: { ...options, mooncakeFile: options.trace === 'mooncake' ? 'shared/traces/mooncake-fast25-conversation.jsonl' : undefined },
    presets: Object.fromEntries(presets.map((p) => [p.name, p])),
    presetNames: Object.keys(PRESETS),
    sources: SOURCES,
    runs,
  };
}
