#!/usr/bin/env node
// What keying one prompt as chained chunks costs (docs/engine-keys.md): one 32k-token prompt in
// 256-token chunks (128 chained keys) through ChunkChain.extend, with and without building each
// chunk's ArtifactKey, a session's next turn on that chain, and the form chained keys replace (each
// chunk keyed over its whole prefix with artifactKey). Target: under 2 ms for the 32k prompt.
// Median, p90 and min over the runs after warm-up, in this process; run after `npm run build`.
//
//   node bench/chunk-keys.js                      table
//   node bench/chunk-keys.js --json               one JSON object on stdout, nothing else
//   node bench/chunk-keys.js --runs 20            fewer runs (CI runs it small; default 200)
//
// The prompt's tokens are a Uint32Array, as an engine's token ids are; an array of numbers costs
// one more pass to check and copy them.
import { ChunkChain, artifactKey } from 'waitprep';
import { benchEnv } from './common.js';

const args = process.argv.slice(2);
const at = args.indexOf('--runs');
const runs = at >= 0 ? Number(args[at + 1]) : 200;
if (!Number.isInteger(runs) || runs < 1) throw new Error(`--runs: a positive integer, got ${args[at + 1]}`);

const PROMPT = 32 * 1024;
const CHUNK = 256;
const TURN = 600;
const options = {
  runtime: 'lmcache/0.3',
  model: 'meta-llama/Llama-3.1-8B-Instruct',
  profile: { dtype: 'bf16', layout: 'NHD', tpDegree: 1, rank: 0 },
  task: 'coding-agent',
  namespace: 'tenant-42',
  chunkTokens: CHUNK,
};
const prompt = Uint32Array.from({ length: PROMPT }, (_, i) => Number((BigInt(i) * 2654435761n) % 151936n));
const turn = Uint32Array.from({ length: TURN }, (_, i) => (i * 31) % 151936);

function stats(samples) {
  const sorted = samples.slice().sort((a, b) => a - b);
  const q = (p) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
  return { median_ms: q(0.5), p90_ms: q(0.9), min_ms: sorted[0] };
}

/** Times `fn` `n` times after `warm` calls; `check` throws unless the result is right. */
function measure(fn, check, n, warm = Math.max(5, Math.floor(n / 4))) {
  for (let i = 0; i < warm; i++) check(fn());
  const samples = [];
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    const result = fn();
    samples.push(Number(process.hrtime.bigint() - t0) / 1e6);
    check(result);
  }
  return stats(samples);
}

const reference = new ChunkChain(options).extend(prompt).map((k) => k.hex);
const sameChain = (keys) => {
  if (keys.length !== PROMPT / CHUNK || keys.at(-1).hex !== reference.at(-1)) throw new Error('chunk-keys bench: wrong chain');
};

const results = [];
results.push({ case: '32k prompt: digests (ChunkChain.extend)', chunks: PROMPT / CHUNK, ...measure(() => new ChunkChain(options).extend(prompt), sameChain, runs) });
results.push({
  case: '32k prompt: + an ArtifactKey per chunk',
  chunks: PROMPT / CHUNK,
  ...measure(
    () => {
      const keys = new ChunkChain(options).extend(prompt);
      for (const k of keys) k.toArtifactKey();
      return keys;
    },
    sameChain,
    runs,
  ),
});
const session = new ChunkChain(options);
session.extend(prompt);
// A live session: each run extends the same long-lived chain by the same turn.
results.push({
  case: `next turn of ${TURN} tokens on the 32k session`,
  chunks: "2-3",
  ...measure(
    () => session.extend(turn),
    (keys) => {
      if (keys.length < 2 || keys.length > 3) throw new Error('chunk-keys bench: a turn completed the wrong number of chunks');
    },
    runs,
  ),
});
const prefixRuns = Math.max(1, Math.min(10, runs));
results.push({
  case: 'baseline: each chunk keyed over its whole prefix (artifactKey)',
  chunks: PROMPT / CHUNK,
  ...measure(
    () => {
      const keys = [];
      for (let end = CHUNK; end <= PROMPT; end += CHUNK) {
        keys.push(artifactKey({ source: { snapshotKind: 'kv-chunk', runtime: options.runtime, model: options.model, adapter: 'none', profile: 'bf16', positionPolicy: 'absolute', task: options.task, namespace: options.namespace, tokenLayout: prompt.subarray(0, end) }, sourcePageGeneration: 0, codec: 'none', codecConfig: 'none', representationVersion: 1 }));
      }
      return keys;
    },
    (keys) => {
      if (keys.length !== PROMPT / CHUNK) throw new Error('chunk-keys bench: wrong baseline count');
    },
    prefixRuns,
    1,
  ),
});

const env = benchEnv({ promptTokens: PROMPT, chunkTokens: CHUNK, runs, baselineRuns: prefixRuns, targetMs: 2 });
if (args.includes('--json')) {
  process.stdout.write(JSON.stringify({ env, results }) + '\n');
} else {
  console.log(`chained chunk keys — ${env.date}, ${env.cpu} (${env.cores} cores), Node ${env.node}; ${runs} runs (baseline ${prefixRuns}), ms; target < 2 ms for the 32k prompt`);
  console.table(results.map((r) => ({ ...r, median_ms: r.median_ms.toFixed(3), p90_ms: r.p90_ms.toFixed(3), min_ms: r.min_ms.toFixed(3) })));
}
