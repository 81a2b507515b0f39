// `waitprep experiment` (also `npm run experiment`): the command line of the virtual-time replay
// (docs/experiment.md). Parses the options, runs the experiment (run.js), prints a table or one
// JSON object, and writes the HTML report when asked. Progress goes to stderr.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { POLICIES } from './policies.js';
import { PRESETS } from './presets.js';
import { formatHtml, formatMarkdown, formatTables } from './report.js';
import { DEFAULT_MOONCAKE, mergeOutputs, runExperiment } from './run.js';
import { formatTargets } from './targets.js';

export const EXPERIMENT_USAGE = `usage: waitprep experiment [options]

Replays one trace under every policy, on the same simulated storage tier, links and GPUs, in
virtual time through the real WaitCoordinator; prints a table per (preset, agent count).

  --preset P[,P...]      ${Object.keys(PRESETS).join(' | ')} | all (default 8b-pcie5-nvme)
  --agents N[,N...]      agent counts (default 1000); Mooncake: the first N sessions with a wait,
                         tiled when the trace holds fewer
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
  --json                 print one JSON object on stdout instead of the table
  --markdown             print Markdown tables instead (the form docs/experiment.md quotes)
  --from FILE[,FILE...]  report saved --json outputs instead of running (with --json, --markdown,
                         --html); several are merged into one, as if one run had asked for all
                         their presets, agent counts and policies (same trace, seeds, sampling)
  --html FILE            also write a self-contained HTML report (inline SVG, no server)
  --quiet                no progress on stderr`;


function usageExit(message) {
  console.error(`waitprep experiment: ${message}\n\n${EXPERIMENT_USAGE}`);
  process.exit(2);
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
    agents: values.agents === undefined ? [1000] : list(values.agents, 'agents', positiveInteger),
    seconds: values.seconds === undefined ? 3600 : positiveNumber(values.seconds, 'seconds'),
    seeds: values.seeds === undefined ? [1, 2, 3] : list(values.seeds, 'seeds', integer),
    trace: values.trace ?? 'generator',
    mooncakeFile: values['mooncake-file'] ?? DEFAULT_MOONCAKE,
    sharedPrefixTokens: values['shared-prefix-tokens'] === undefined ? 0 : integer(values['shared-prefix-tokens'], 'shared-prefix-tokens'),
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
function fromFiles(files) {
  try {
    return mergeOutputs(files.map((file) => JSON.parse(readFileSync(file, 'utf8'))));
  } catch (error) {
    return usageExit(`--from: ${error.message}`);
  }
}

/** `waitprep experiment [options]`. */
export function experiment(args) {
  const { json, markdown, from, html, quiet, ...options } = experimentOptions(args);
  const started = performance.now();
  const log = quiet ? () => {} : (line) => process.stderr.write(line);
  const output = from !== null ? fromFiles(from) : runExperiment(options, {
    onReplay: ({ preset, agents, seed, policy, result, done, total }) => {
      const wall = ((performance.now() - started) / 1000).toFixed(1);
      log(`\r[${done}/${total} ${wall} s] ${preset} ${agents} agents seed ${seed} ${policy}: hit ${(100 * result.hitRate).toFixed(1)}%`.padEnd(100) + (done === total ? '\n' : ''));
    },
  });
  if (json) process.stdout.write(JSON.stringify(output) + '\n');
  else if (markdown) process.stdout.write(formatMarkdown(output) + '\n');
  else process.stdout.write(formatTables(output) + formatTargets(output) + '\n');
  if (html !== null) {
    writeFileSync(html, formatHtml(output));
    log(`report: ${html}\n`);
  }
}
