// The bench:pin parent: plans the (implementation, case) pairs from --impl and --case, says why
// the others are skipped, installs the peer stores' packages on first use (peers.js), starts what
// a store needs beside it (redis-server), runs each pair in a fresh process (`pin.js --run`,
// case.js), and prints the rows as a table or one JSON object.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { benchEnv } from '../common.js';
import { CASES, ENTRY } from './cases.js';
import { PEER_STORES, ensurePeers } from './peers.js';
import { IMPLEMENTATIONS, STORES } from './stores.js';

/** `flag(name)` and `option(name, fallback)` read the command line. */
export async function main(flag, option) {
  const quick = flag('quick');
  const json = flag('json');
  const pick = (name, all) => {
    const chosen = option(name, all.join(',')).split(',');
    const unknown = chosen.filter((c) => !all.includes(c));
    if (unknown.length > 0) throw new Error(`--${name} wants some of ${all.join(',')}, got ${unknown.join(',')}`);
    return all.filter((c) => chosen.includes(c));
  };
  const impls = pick('impl', IMPLEMENTATIONS);
  const cases = pick('case', CASES);

  if (impls.some((impl) => PEER_STORES.includes(impl))) ensurePeers();
  const versions = {};
  const unavailable = {};
  for (const impl of impls) {
    const { version, unavailable: why } = STORES[impl].describe();
    if (why === undefined) versions[impl] = version;
    else unavailable[impl] = why;
  }

  const plan = [];
  const skipped = [];
  for (const kase of cases) {
    for (const impl of impls) {
      const reason = unavailable[impl] ?? STORES[impl].notApplicable?.(kase) ?? null;
      if (reason) skipped.push({ implementation: impl, case: kase, reason });
      else plan.push({ impl, kase });
    }
  }

  const dir = mkdtempSync(join(tmpdir(), 'waitprep-bench-pin-'));
  const servers = {};
  const results = [];
  try {
    for (const impl of impls) {
      if (STORES[impl].startServer === undefined || !plan.some((p) => p.impl === impl)) continue;
      try {
        servers[impl] = await STORES[impl].startServer();
      } catch (error) {
        unavailable[impl] = error.message;
        for (const p of plan.filter((q) => q.impl === impl)) skipped.push({ implementation: impl, case: p.kase, reason: unavailable[impl] });
        plan.splice(0, plan.length, ...plan.filter((q) => q.impl !== impl));
        delete versions[impl];
      }
    }
    let n = 0;
    for (const { impl, kase } of plan) {
      const table = `waitprep-bench-pin-${process.pid}-${n++}`;
      process.stderr.write(`bench:pin ${impl} ${kase}\n`);
      try {
        const port = servers[impl]?.port ?? 0;
        const out = await runNode([ENTRY, '--run', '--impl', impl, '--case', kase, '--table', table, '--dir', dir, '--port', String(port), ...(quick ? ['--quick'] : [])]);
        results.push(JSON.parse(out));
      } finally {
        // The case process removes its store; this catches one that died first.
        STORES[impl].cleanUp?.(table);
      }
    }
  } finally {
    for (const server of Object.values(servers)) await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }

  for (const impl of impls) {
    if (versions[impl] === undefined && unavailable[impl] !== undefined) versions[impl] = `skipped: ${unavailable[impl]}`;
  }
  const env = benchEnv({
    implementationVersions: versions,
    quick,
    clock_ns: clockCost(),
    timing: 'per-op ns = (time of a batch of ops between two process.hrtime.bigint() reads) / batch; percentiles over batches; contended rows: the worst pinner at each percentile',
  });
  if (json) {
    process.stdout.write(JSON.stringify({ env, results, skipped }) + '\n');
    return;
  }
  console.log(`waitprep pin latency (tryPin + lease close) — ${env.date}, ${env.cpu} (${env.cores} cores), Node ${env.node}${quick ? ', --quick' : ''}`);
  console.table(results.map((r) => ({
    implementation: r.implementation,
    case: r.case,
    'p50 ns': ns(r.p50_ns),
    'p90 ns': ns(r.p90_ns),
    'p99 ns': ns(r.p99_ns),
    'p99.9 ns': ns(r.p999_ns),
    'max ns': ns(r.max_ns),
    ops: r.ops,
    batch: r.batch,
  })));
  for (const s of skipped) console.log(`skipped ${s.implementation} ${s.case}: ${s.reason}`);
  for (const [impl, version] of Object.entries(versions)) console.log(`${impl}: ${version}`);
  console.log(`timing: ${env.timing}; batch = ops per clock read; one clock read costs ~${env.clock_ns} ns here`);
}

function ns(v) {
  return v < 100 ? v.toFixed(1) : Math.round(v).toLocaleString('en-US');
}

/** ns of one process.hrtime.bigint() read, as timed here. */
function clockCost() {
  const n = 1_000_000;
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) process.hrtime.bigint();
  return Math.round(Number(process.hrtime.bigint() - t0) / n);
}

/** Runs node with `args`; resolves its stdout, rejects when it exits non-zero. */
function runNode(args) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (d) => (out += d));
    child.on('error', reject);
    child.on('close', (code, signal) => {
      if (code === 0) resolve(out);
      else reject(new Error(`bench:pin: node ${args.slice(1).join(' ')} exited with ${signal ?? code}`));
    });
  });
}
