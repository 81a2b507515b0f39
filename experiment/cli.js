// `waitprep experiment` (also `npm run experiment`): the command line of the virtual-time replay
// (docs/experiment.md). Parses the options, runs the experiment (run.js), prints a table or one
// JSON object, and writes the HTML report when asked. Progress goes to stderr. The table ends
// with the run's findings (findings.js), computed from the output; --json carries them as data
// under "findings", and stdout stays that one object.
//
// The modules that import the package (run.js, report.js) are imported only after the options
// parse: without the addon, importing waitprep prints the fallback warning, which must not
// precede a usage error.
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { parseArgs } from 'node:util';
import { findings } from './findings.js';
import { POLICIES } from './policies.js';
import { PRESETS } from './presets.js';
import { formatTargets } from './targets.js';

/** The most agents a run replays: the generator's own limit, applied to every trace. */
const MAX_AGENTS = 1_000_000;

export const EXPERIMENT_USAGE = `usage: waitprep experiment [options]

Replays one trace under every policy, on the same simulated storage tier, links and GPUs, in
virtual time through the real WaitCoordinator; prints a table per (preset, agent count).

  --preset P[,P...]      ${Object.keys(PRESETS).join(' | ')} | all (default 8b-pcie5-nvme)
  --agents N[,N...]      agent counts (default 1000, at most 1000000); Mooncake: the first N
                         sessions with a wait, tiled when the trace holds fewer
  --seconds S            generated trace length (default 3600)
  --seeds N[,N...]       seeds (default 1,2,3): the generator's trace; for Mooncake and a JSONL
                         file, which engine each agent lands on
  --trace T              generator (default) | mooncake | FILE.jsonl (waitprep/trace's format)
  --mooncake-file PATH   a Mooncake-format JSONL (.br/.gz read compressed; default: the FAST'25
                         conversation trace shipped in experiment/traces/)
  --shared-prefix-tokens N   with a JSONL file: leading tokens every agent shares (default 0)
  --policies A[,B...]    a subset, in report order (default all):
                         ${POLICIES.map((p) => p.name).join(', ')}
  --sample-seconds S     memory sampling interval (default 10)
  --json                 print one JSON object on stdout instead of the table (the findings
                         under "findings")
  --markdown             print Markdown tables instead (the form docs/experiment.md quotes)
  --from FILE[,FILE...]  report saved --json outputs instead of running (with --json, --markdown,
                         --html); several are merged into one, as if one run had asked for all
                         their presets, agent counts and policies (same trace, seeds, sampling)
  --html FILE            also write a self-contained HTML report (inline SVG, no server)
  --quiet                no progress on stderr`;


/**
 * Exits 2 with one line naming the option or input at fault: line breaks that the input put
 * into the message are printed as spaces.
 */
function inputExit(message, suffix = '') {
  console.error(`waitprep experiment: ${String(message).replace(/[\r\n\u2028\u2029]+/g, ' ')}${suffix}`);
  process.exit(2);
}

function usageExit(message) {
  inputExit(message, ' (`waitprep experiment --help` lists the options)');
}

function list(text, name, parse) {
  const items = text.split(',').map((s) => s.trim()).filter((s) => s.length > 0);
  if (items.length === 0) usageExit(`--${name} needs at least one value`);
  return items.map((s) => parse(s, name));
}

function positiveInteger(text, name) {
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n < 1) usageExit(`--${name}: expected a positive integer, got ${JSON.stringify(text)}`);
  return n;
}

function agentCount(text, name) {
  const n = positiveInteger(text, name);
  if (n > MAX_AGENTS) usageExit(`--${name}: expected at most ${MAX_AGENTS} agents, got ${JSON.stringify(text)}`);
  return n;
}

function nonNegativeInteger(text, name) {
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n < 0) usageExit(`--${name}: expected an integer >= 0, got ${JSON.stringify(text)}`);
  return n;
}

function integer(text, name) {
  const n = Number(text);
  if (!Number.isSafeInteger(n)) usageExit(`--${name}: expected an integer, got ${JSON.stringify(text)}`);
  return n;
}

function positiveNumber(text, name) {
  const n = Number(text);
  if (!Number.isFinite(n) || n <= 0) usageExit(`--${name}: expected a number > 0, got ${JSON.stringify(text)}`);
  return n;
}

/** The parsed options, or exit 2 with usage. */
export function experimentOptions(args) {
  let values;
  try {
    ({ values } = parseArgs({
      args,
      strict: true,
      options: {
        preset: { type: 'string' }, agents: { type: 'string' }, seconds: { type: 'string' }, seeds: { type: 'string' },
        trace: { type: 'string' }, 'mooncake-file': { type: 'string' }, 'shared-prefix-tokens': { type: 'string' },
        policies: { type: 'string' }, 'sample-seconds': { type: 'string' }, json: { type: 'boolean' }, html: { type: 'string' },
        markdown: { type: 'boolean' }, from: { type: 'string' },
        quiet: { type: 'boolean' }, help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (error) {
    usageExit(error.message);
  }
  if (values.help) {
    console.log(EXPERIMENT_USAGE);
    process.exit(0);
  }
  if (values.from !== undefined) {
    // A saved output is reported as it was run: an option that would shape a new run is a mistake.
    const REPORT_ONLY = new Set(['from', 'json', 'markdown', 'html', 'quiet']);
    const shaping = Object.keys(values).filter((name) => !REPORT_ONLY.has(name));
    if (shaping.length > 0) usageExit(`--from reports saved outputs as they were run; it takes no --${shaping.join(', --')}`);
  }
  const presets = values.preset === undefined ? ['8b-pcie5-nvme'] : values.preset === 'all' ? Object.keys(PRESETS) : list(values.preset, 'preset', (s) => {
    if (!Object.hasOwn(PRESETS, s)) usageExit(`--preset: unknown preset ${JSON.stringify(s)}`);
    return s;
  });
  const known = new Set(POLICIES.map((p) => p.name));
  return {
    presets,
    agents: values.agents === undefined ? [1000] : list(values.agents, 'agents', agentCount),
    seconds: values.seconds === undefined ? 3600 : positiveNumber(values.seconds, 'seconds'),
    seeds: values.seeds === undefined ? [1, 2, 3] : list(values.seeds, 'seeds', integer),
    trace: values.trace ?? 'generator',
    // null: the trace shipped in experiment/traces/ (run.js DEFAULT_MOONCAKE).
    mooncakeFile: values['mooncake-file'] ?? null,
    sharedPrefixTokens: values['shared-prefix-tokens'] === undefined ? 0 : nonNegativeInteger(values['shared-prefix-tokens'], 'shared-prefix-tokens'),
    policies: values.policies === undefined ? null : list(values.policies, 'policies', (s) => {
      if (!known.has(s)) usageExit(`--policies: unknown policy ${JSON.stringify(s)}`);
      return s;
    }),
    sampleSeconds: values['sample-seconds'] === undefined ? 10 : positiveNumber(values['sample-seconds'], 'sample-seconds'),
    json: values.json === true,
    markdown: values.markdown === true,
    from: values.from === undefined ? null : list(values.from, 'from', (s) => s),
    html: values.html ?? null,
    quiet: values.quiet === true,
  };
}

/** The saved outputs `--from` names, merged; an unreadable or unmergeable file is a usage error. */
function fromFiles(files, mergeOutputs, readTraceText) {
  try {
    return mergeOutputs(files.map((file) => {
      const text = readTraceText(file, '--from');
      try {
        return JSON.parse(text);
      } catch (error) {
        throw new Error(`${JSON.stringify(file)} is not one JSON object (${error.message})`);
      }
    }));
  } catch (error) {
    return inputExit(error.field === '--from' ? error.message : `--from: ${error.message}`);
  }
}

/**
 * Runs the experiment; an input it refuses (a trace that cannot be read, parsed or replayed: an
 * ERR_INVALID_ARGUMENT whose `field` names the option) exits 2 with one line, as a bad option
 * does. Anything else is a bug, and keeps its stack.
 */
function runOrExit(runExperiment, options, hooks) {
  try {
    return runExperiment(options, hooks);
  } catch (error) {
    if (error?.code === 'ERR_INVALID_ARGUMENT' && typeof error.field === 'string' && error.field.startsWith('--')) return inputExit(error.message);
    throw error;
  }
}

/** `waitprep experiment [options]`. */
export async function experiment(args) {
  const { json, markdown, from, html, quiet, ...options } = experimentOptions(args);
  const [{ DEFAULT_MOONCAKE, mergeOutputs, runExperiment }, { formatHtml, formatMarkdown, formatTables }, { readTraceText }] = await Promise.all([import('./run.js'), import('./report.js'), import('./traces.js')]);
  options.mooncakeFile ??= DEFAULT_MOONCAKE;
  const started = performance.now();
  const log = quiet ? () => {} : (line) => process.stderr.write(line);
  const output = from !== null ? fromFiles(from, mergeOutputs, readTraceText) : runOrExit(runExperiment, options, {
    onReplay: ({ preset, agents, seed, policy, result, done, total }) => {
      const wall = ((performance.now() - started) / 1000).toFixed(1);
      log(`\r[${done}/${total} ${wall} s] ${preset} ${agents} agents seed ${seed} ${policy}: hit ${(100 * result.hitRate).toFixed(1)}%`.padEnd(100) + (done === total ? '\n' : ''));
    },
  });
  // Recomputed from the runs, also for saved outputs: a saved "findings" may predate a merge.
  const result = { ...output, findings: findings(output) };
  if (json) process.stdout.write(JSON.stringify(result) + '\n');
  else if (markdown) process.stdout.write(formatMarkdown(result) + '\n');
  else process.stdout.write(formatTables(result) + formatTargets(result) + '\n');
  if (html !== null) {
    try {
      mkdirSync(dirname(html), { recursive: true });
      writeFileSync(html, formatHtml(result));
    } catch (error) {
      inputExit(`--html: cannot write ${JSON.stringify(html)}: ${error.message}`);
    }
    log(`report: ${html}\n`);
  }
}
