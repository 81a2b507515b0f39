// What the benchmarks share: the key of bench item `i`, their command line, and the machine
// description every figure is recorded with.
import { spawnSync } from 'node:child_process';
import { cpus } from 'node:os';
import { artifactKey } from 'waitprep';

/** The artifact key of bench item `i`: distinct for every i below 2^32, small token layout. */
export function benchKey(i) {
  return artifactKey({
    source: {
      snapshotKind: 'kv-page',
      runtime: 'bench',
      model: 'bench-model',
      adapter: 'none',
      profile: 'default',
      positionPolicy: 'absolute',
      task: 'bench',
      namespace: 'bench',
      tokenLayout: [i & 0xffff, i >>> 16, 7],
    },
    sourcePageGeneration: 0,
    codec: 'none',
    codecConfig: 'none',
    representationVersion: 1,
  });
}

/**
 * A backend that hands out a fresh lease object per wake and pins nothing: the coordinator's own
 * cost, without the lease table (bench:coordinator, bench:sporadic's stub and noop rows).
 */
export function stubBackend() {
  const meta = Object.freeze({});
  class StubLease {
    kind = 'lease';
    slot = 0;
    generation = 0;
    meta = meta;
    closed = false;
    constructor(key, owner, readiness) {
      this.key = key;
      this.consumer = owner;
      this.readiness = readiness;
    }
    close() {
      this.closed = true;
    }
  }
  return { tryPinReady: (key, owner, want) => new StubLease(key, owner, want.readiness) };
}

/**
 * The last non-empty line of a child bench's stdout, its JSON result: a V8 trace flag passed on to
 * the child (`--trace-gc`, `--trace-deopt`) prints to the same stdout before it.
 */
export function lastLine(out) {
  return out.trimEnd().split('\n').at(-1);
}

/** `flag(name)`: whether `--name` was given; `option(name, fallback)`: the word after `--name`. */
export function commandLine(args = process.argv.slice(2)) {
  const flag = (name) => args.includes(`--${name}`);
  const option = (name, fallback) => {
    const at = args.indexOf(`--${name}`);
    return at >= 0 && at + 1 < args.length ? args[at + 1] : fallback;
  };
  /** `--name N`, a positive integer, or `fallback`. */
  const count = (name, fallback) => {
    const value = Number(option(name, fallback));
    if (!Number.isInteger(value) || value < 1) throw new Error(`--${name}: a positive integer, got ${option(name, fallback)}`);
    return value;
  };
  return { flag, option, count };
}

/**
 * Runs `script` once per implementation, each in a fresh process (`--child IMPL` then
 * `childArgs`), the implementations from `--impl` (default: every one this install can load);
 * returns [impl, the child's result (the JSON on its last stdout line)] for each.
 */
export function eachImplementation(script, childArgs, impl, available) {
  const impls = impl === null ? available : impl.split(',');
  for (const name of impls) if (!available.includes(name)) throw new Error(`--impl: one of ${available.join(', ')}, got ${name}`);
  return impls.map((name) => {
    const run = spawnSync(process.execPath, [script, '--child', name, ...childArgs], { encoding: 'utf8' });
    if (run.status !== 0) throw new Error(`the ${name} run failed (${run.status ?? run.signal}): ${run.stderr}`);
    return [name, JSON.parse(lastLine(run.stdout))];
  });
}

/** Date, CPU, cores and Node version, plus whatever the benchmark adds. */
export function benchEnv(extra) {
  return {
    date: new Date().toISOString(),
    cpu: cpus()[0]?.model ?? 'unknown',
    cores: cpus().length,
    node: process.version,
    ...extra,
  };
}
