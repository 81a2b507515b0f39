#!/usr/bin/env node
// What a metrics scrape of a lease table costs: `table.summary()` (counts read in place, what
// registerMetrics calls) against `table.inspect()` (a copy of the whole segment, decoded), on an
// empty table of each capacity, native and JavaScript fallback. Mean of 5 calls after one
// warm-up, each capacity in this process; run after `npm run build`.
//
//   npm run bench:table-summary                       table
//   npm run -s bench:table-summary -- --json          one JSON object on stdout, nothing else
//   ... -- --capacities 4096,65536                    choose the capacities (default 65536,1048576)
//
// An empty table is the cheapest to decode for inspect() (it lists only non-free slots); both
// calls read every slot, so their time grows with capacity, not with how full the table is.
import { implementation, openLeaseTable, unlinkLeaseTable } from 'waitprep';
import { benchEnv } from './common.js';

const args = process.argv.slice(2);
const at = args.indexOf('--capacities');
const capacities = (at >= 0 ? args[at + 1] : '65536,1048576').split(',').map(Number);
if (capacities.some((c) => !Number.isInteger(c) || c < 1)) throw new Error(`--capacities: positive integers, got ${args[at + 1]}`);
const impls = implementation === 'native' ? ['native', 'js'] : ['js'];

function meanMs(fn, calls = 5) {
  fn();
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < calls; i++) fn();
  return Number(process.hrtime.bigint() - t0) / calls / 1e6;
}

const results = [];
for (const capacity of capacities) {
  for (const impl of impls) {
    const name = `waitprep-bench-summary-${process.pid}-${capacity}-${impl}`;
    const table = openLeaseTable({ name, role: 'producer', create: { capacity }, implementation: impl });
    try {
      const summary = table.summary();
      if (summary.capacity !== capacity || summary.slots.free !== capacity) throw new Error(`summary miscounted: ${JSON.stringify(summary)}`);
      results.push({ implementation: impl, capacity, summary_ms: meanMs(() => table.summary()), inspect_ms: meanMs(() => table.inspect()) });
    } finally {
      table.close();
      if (impl === 'native') unlinkLeaseTable(name);
    }
  }
}

const env = benchEnv({ implementations: impls });
if (args.includes('--json')) {
  process.stdout.write(JSON.stringify({ env, results }) + '\n');
} else {
  console.log(`lease table scrape cost — ${env.date}, ${env.cpu} (${env.cores} cores), Node ${env.node}; mean of 5 calls, ms`);
  console.table(results.map((r) => ({ ...r, summary_ms: r.summary_ms.toFixed(2), inspect_ms: r.inspect_ms.toFixed(1) })));
}
