// `waitprep demo` (what `npm start` runs): the demo's command line. It parses the options and
// hands them to one of three runs: the trace replay (run.js, printed by report.js), the policy
// comparison (`--compare`, compare.js) or the short scripted sequence (`--scripted`, scripted.js).
// Which processes and threads a run starts, and what crosses between them: docs/architecture.md.
// The trace replay also counts the baselines (baselines.js) on the same trace, and its summary
// ends with the share of next turns that found their context ready, against theirs.
//
// The modules that import the package are imported only after the options parse: without the
// addon, importing waitprep prints the fallback warning, which must not precede a usage error.
import { readFileSync } from 'node:fs';
import { generateTrace, loadTraceJsonl } from 'waitprep/trace';
import { runBaselines, wakeOutcomes } from './baselines.js';

/** The run's own policy, as its summary names it. */
/** The run's own policy: the coordinator's default, or the planner with --planner (the other is a baseline). */
const ownPolicy = (options) => (options.planner
  ? { name: 'planner', description: "the package's PausePlanner above the coordinator: keep, prepare or neither per pause" }
  : { name: 'fifo', description: "the coordinator's default: one FIFO queue, waits on one key share one unit, one unit in flight" });

export const DEMO_USAGE = `usage: waitprep demo [options]

  --agents N             agent sessions the trace generator starts (default 24); the summary counts
                         those with an event within --seconds
  --seconds S            generated trace length in seconds (default 8)
  --seed N               trace seed (default 42)
  --trace FILE           replay a JSONL trace instead (docs/agent-trace.md)
  --time-scale X         replay event t at t*X seconds (default 1)
  --budget-mb M          the storage worker's arena budget in MiB (default 8)
  --implementation I     auto (default) | native | js: which lease table
  --metrics-port P       serve Prometheus metrics on http://127.0.0.1:P/metrics while running
                         (0: an ephemeral port; the URL is printed to stderr)
  --json                 print one JSON summary object on stdout, nothing else: waitprep's own
                         run at the top level (wakes, hits, misses, readyShare, implementation),
                         the baselines under "baselines"
                         (through npm: npm start -s -- --json; -s keeps npm's banner off stdout)
  --scripted             the earlier scripted demo (in-process stand-in worker), with --json
  --storage-exit-after N testing: the storage worker exits (code 3) at request N+1
  --compare              replay the same trace under three policies (no-preparation, fifo-dedup,
                         fifo-no-dedup) and print a table, or one JSON object with --json
                         (demo/compare.js; not with --metrics-port or --storage-exit-after)
  --miss-cost-ms M       with --compare: the STAND-IN cost of a miss's original path (default 50)
  --planner              the orchestrator runs the package's PausePlanner (lib/planner): it
                         admits and withdraws, and the storage worker evicts by its order`;

/** The trace generator's bound on agents (generateTrace refuses more). */
const MAX_AGENTS = 1_000_000;

/** What `--scripted` takes besides itself: it is a fixed sequence, so nothing else applies. */
const SCRIPTED_OPTIONS = new Set(['--scripted', '--json']);

class UsageError extends Error {}

/** Prints a usage error and the demo's usage on stderr and exits 2. */
function usageExit(message) {
  console.error(`waitprep demo: ${message}\n\n${DEMO_USAGE}`);
  process.exit(2);
}

/**
 * The trace the options name, read before anything starts: a `--trace` file that is missing,
 * unreadable or malformed is one line on stderr and exit 2, not a stack trace.
 */
function traceOrExit(options) {
  try {
    if (options.trace !== null) return loadTraceJsonl(readFileSync(options.trace, 'utf8'));
    return generateTrace({ agents: options.agents, seconds: options.seconds, seed: options.seed });
  } catch (error) {
    if (options.trace === null) throw error;
    const why = error?.code === 'ENOENT' ? 'no such file'
      : error?.code === 'EISDIR' ? 'is a directory'
      : error?.code === 'EACCES' ? 'permission denied'
      : error instanceof Error ? error.message : String(error);
    console.error(`waitprep demo: --trace ${JSON.stringify(options.trace)}: ${why}`);
    process.exit(2);
  }
}

function parseArgs(args) {
  const options = {
    agents: 24, seconds: 8, seed: 42, trace: null, timeScale: 1, budgetMb: 8, implementation: 'auto',
    metricsPort: null, json: false, storageExitAfter: null, compare: false, missCostMs: 50, planner: false,
    // Set by compare.js, not by flags: `keyMode` 'shared' (the normal path) or 'per-wait'
    // (fifo-no-dedup: each wait's key spec gets a namespace unique to its agent and generation),
    // and `runLabel`, a suffix that keeps several runs' table, arena and socket names apart.
    keyMode: 'shared', runLabel: null,
    // Set by demo() once the options parse: the trace's events, read (or generated) once.
    events: null,
  };
  // [option field, valid, what a valid value is (for the error)]
  const numeric = {
    '--agents': ['agents', (v) => Number.isSafeInteger(v) && v >= 1 && v <= MAX_AGENTS, `an integer from 1 to ${MAX_AGENTS}`],
    '--seconds': ['seconds', (v) => Number.isFinite(v) && v > 0, 'a number > 0'],
    '--seed': ['seed', (v) => Number.isSafeInteger(v), 'a safe integer'],
    '--time-scale': ['timeScale', (v) => Number.isFinite(v) && v > 0, 'a number > 0'],
    '--budget-mb': ['budgetMb', (v) => Number.isFinite(v) && v > 0, 'a number > 0'],
    '--metrics-port': ['metricsPort', (v) => Number.isSafeInteger(v) && v >= 0 && v <= 65535, 'an integer from 0 to 65535'],
    '--storage-exit-after': ['storageExitAfter', (v) => Number.isSafeInteger(v) && v >= 0, 'an integer >= 0'],
    '--miss-cost-ms': ['missCostMs', (v) => Number.isFinite(v) && v >= 0, 'a number >= 0'],
  };
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (arg === '--json') options.json = true;
    else if (arg === '--compare') options.compare = true;
    else if (arg === '--planner') options.planner = true;
    else if (arg in numeric) {
      const [field, ok, valid] = numeric[arg];
      const given = args[++i];
      // Number('') and Number(' ') are 0: a blank value is no number.
      const value = given === undefined || given.trim() === '' ? NaN : Number(given);
      if (!ok(value)) throw new UsageError(`${arg} must be ${valid}, got ${given === undefined ? 'nothing' : JSON.stringify(given)}`);
      options[field] = value;
    } else if (arg === '--trace') {
      if (args[++i] === undefined) throw new UsageError('--trace needs a file');
      options.trace = args[i];
    } else if (arg === '--implementation') {
      const value = args[++i];
      if (!['auto', 'native', 'js'].includes(value)) throw new UsageError(`--implementation must be auto, native or js, got ${JSON.stringify(value)}`);
      options.implementation = value;
    } else throw new UsageError(`unknown option ${JSON.stringify(arg)}`);
  }
  if (options.compare && options.metricsPort !== null) throw new UsageError('--compare does not serve metrics (--metrics-port)');
  if (options.compare && options.storageExitAfter !== null) throw new UsageError('--compare does not take --storage-exit-after');
  if (options.compare && options.planner) throw new UsageError('--compare runs its own three policies, not --planner');
  return options;
}

/** `waitprep demo [options]`: exits 2 on a usage error, 1 when a run fails. */
export async function demo(args) {
  if (args.includes('--help') || args.includes('-h')) {
    console.log(DEMO_USAGE);
    return;
  }
  if (args.includes('--scripted')) {
    const other = args.find((a) => !SCRIPTED_OPTIONS.has(a));
    if (other !== undefined) usageExit(`--scripted takes only --json, got ${JSON.stringify(other)}`);
    const { scriptedDemo } = await import('./scripted.js');
    return scriptedDemo(args.filter((a) => a !== '--scripted'));
  }
  let options;
  try {
    options = parseArgs(args);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    usageExit(error.message);
  }
  options.events = traceOrExit(options);
  if (options.compare) return (await import('./compare.js')).compareDemo(options);
  const [{ DemoRun }, { printSummary }] = await Promise.all([import('./run.js'), import('./report.js')]);
  /** One replay through DemoRun with `overrides`; a failed replay ends the process (DemoRun.fail). */
  const replay = async (overrides, label) => {
    const run = new DemoRun({ ...options, ...overrides, runLabel: label });
    try {
      return await run.run();
    } catch (error) {
      return run.fail(`${label === null ? '' : `${label}: `}${error instanceof Error ? error.message : String(error)}`);
    }
  };
  const summary = await replay({}, null);
  // waitprep's own run at the top level (what it found at each wake first), then the rest of its
  // summary, then the baselines on the same trace.
  const output = {
    implementation: summary.implementation,
    implementationReason: summary.implementationReason,
    policy: ownPolicy(options),
    ...wakeOutcomes(summary),
    ...summary,
    baselines: await runBaselines(options.events, replay, ownPolicy(options).name),
  };
  if (options.json) process.stdout.write(JSON.stringify(output, null, 2) + '\n');
  else printSummary(output);
}
