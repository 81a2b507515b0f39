// What the chunk-key and engine-key vector generators share: reading a vector's JSON options, the
// key fields a ChunkChain or EngineKeys key stands for (built with the spec's defaults, without
// the keyers: the second path each vector is checked against), and writing the file or checking
// it is current (`--check`).
import { readFileSync, writeFileSync } from 'node:fs';
import { chunkProfile } from 'waitprep';

/** JSON options -> keyer options (a decimal-string u64 is a bigint). */
export function fromJson(options) {
  const out = { ...options };
  for (const name of ['sourcePageGeneration', 'representationVersion']) {
    if (typeof out[name] === 'string') out[name] = BigInt(out[name]);
  }
  return out;
}

/** The key fields of a keyer's `options`, with its `profile`, `tokenLayout` and `extra`, defaults as the spec gives them. */
export function identityFields(options, { profile, tokenLayout, extra }) {
  return {
    source: {
      snapshotKind: options.snapshotKind ?? 'kv-chunk',
      runtime: options.runtime,
      model: options.model,
      adapter: options.adapter ?? 'none',
      profile: chunkProfile(profile),
      positionPolicy: options.positionPolicy ?? 'absolute',
      task: options.task,
      namespace: options.namespace,
      tokenLayout,
      extra,
    },
    sourcePageGeneration: options.sourcePageGeneration ?? 0,
    codec: options.codec ?? 'none',
    codecConfig: options.codecConfig ?? 'none',
    representationVersion: options.representationVersion ?? 1,
  };
}

/**
 * Writes `text` to `path`, or with `--check` exits 1 when the file there differs (`regenerate`:
 * the command that rewrites it). `summary`: what the file holds, for the line printed.
 */
export function writeOrCheck(path, text, { regenerate, summary }) {
  if (!process.argv.includes('--check')) {
    writeFileSync(path, text);
    console.log(`wrote ${path}: ${summary}`);
    return;
  }
  let current = '';
  try {
    current = readFileSync(path, 'utf8');
  } catch {
    // missing counts as stale
  }
  if (current !== text) {
    console.error(`${path} is out of date: run ${regenerate}`);
    process.exit(1);
  }
  console.log(`${path} is up to date (${summary})`);
}
