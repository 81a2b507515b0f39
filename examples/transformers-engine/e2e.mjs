#!/usr/bin/env node
// npm run e2e:transformers [-- --profile tiny|large --seed N --agents N --time-scale X --max-wait S --threads N --late-lookup --planner --json]
//
// Creates the example's venv when it is missing (torch and transformers from whatever index this
// machine's pip reaches), then replays agent sessions against the engine and prints the report:
// a CPU run of a randomly initialised model of the stated geometry. It measures the mechanism and
// its costs on this host, not a GPU serving speedup. Exit 3 when torch cannot be had here.
import { parseArgs } from 'node:util';
import { nativeLibraryPath } from 'waitprep';
import { formatReport } from './report.mjs';
import { PROFILES, runReplay } from './replay.mjs';
import { ensureVenv } from './venv.mjs';

const { values } = parseArgs({
  options: {
    profile: { type: 'string', default: 'large' },
    seed: { type: 'string', default: '7' },
    agents: { type: 'string' },
    'time-scale': { type: 'string', default: '1' },
    'max-wait': { type: 'string' },
    threads: { type: 'string' },
    'late-lookup': { type: 'boolean', default: false },
    planner: { type: 'boolean', default: false },
    json: { type: 'boolean', default: false },
    help: { type: 'boolean', short: 'h', default: false },
  },
});
if (values.help) {
  console.log(`usage: npm run e2e:transformers -- [--profile ${Object.keys(PROFILES).join('|')}] [--seed N] [--agents N] [--time-scale X] [--max-wait S] [--threads N] [--late-lookup] [--planner] [--json]`);
  process.exit(0);
}
if (!(values.profile in PROFILES)) {
  console.error(`--profile: expected one of ${Object.keys(PROFILES).join(', ')}, got ${values.profile}`);
  process.exit(2);
}
if (nativeLibraryPath() === null) {
  console.error('libwaitprep.so is not built: the storage tier and the engine are Python processes and need the native table (npm install with a C compiler)');
  process.exit(3);
}
const venv = ensureVenv();
if (!venv.ok) {
  console.error(`cannot run: ${venv.reason}`);
  process.exit(3);
}
const number = (v) => (v === undefined ? undefined : Number(v));
const report = await runReplay({
  profile: values.profile,
  seed: number(values.seed),
  agents: number(values.agents),
  timeScale: number(values['time-scale']),
  maxWaitS: number(values['max-wait']),
  threads: number(values.threads),
  lateLookup: values['late-lookup'],
  planner: values.planner,
  log: (line) => console.error(line),
});
report.versions = venv.versions;
console.log(values.json ? JSON.stringify(report, null, 2) : formatReport(report));
