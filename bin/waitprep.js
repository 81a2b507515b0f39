#!/usr/bin/env node
// waitprep command line. `waitprep demo` (what `npm start` runs) is the end-to-end demo: an
// agent trace replayed through the coordinator, a preparation driver and a storage-worker
// process publishing into a lease table (demo/, in the source repository only); `demo --scripted`
// is the earlier scripted sequence. `experiment` replays a trace through every policy
// (experiment/). `inspect`, `reap` and `clean` are the operator's commands (bin/commands/).
//
// Each command's module is imported only once the command is known, and each command checks its
// arguments before it imports the package: on a machine without the addon, importing waitprep
// prints the fallback warning, which must not come before a usage error or a help text.
import { createRequire } from 'node:module';
import { CLEAN_USAGE } from './commands/clean-usage.js';

const EXIT_CODES = `exit codes of inspect, reap and clean (clean: the highest of its tables'):
  0  healthy (reap: done; clean: removed, or kept because in use)
  1  pins held by dead clients, or a dead producer: run \`waitprep reap <table>\`
  2  usage error
  3  no such table
  4  not a lease table of this ABI (ERR_BAD_SEGMENT: corrupt, truncated, foreign): refused
  5  any other error (the native addon not loaded, no free client entry, permissions, ...)`;

const TABLE_NAME = `<table> is the table's bare name (the file is /dev/shm/<table>): 1-200 of A-Z a-z 0-9 . _ -,
not starting with a dot. The native addon must be loaded: a JavaScript-fallback table lives in one
process only.`;

const USAGE = `usage: waitprep <command> [options]     (waitprep <command> --help for one command)

commands:
  demo [options]            replay an agent trace through the coordinator, a preparation
                            driver and a storage-worker process that publishes into a lease
                            table; ends with a summary (\`waitprep demo --help\` for options)
  demo --scripted [--json]  the earlier scripted run of waits, dedup, preparation, wakes, misses
  experiment [options]      every policy on the same trace and simulated resources, in virtual
                            time through the real coordinator (\`waitprep experiment --help\`)
  inspect <table> [--json]  a native lease table's slots, pin holders, clients (alive or dead)
                            and producer; this inspector's own client entry is left out
  reap <table> [--json]     release the pins and entries of dead clients (and a dead
                            producer's role), and say which
  clean [<table>...] [--dry-run] [--json] [--trust-uid UID] [--trust-group-writable]
                            remove the tables in /dev/shm (or those named) whose producer and
                            every client are dead, with the demo's arena and socket named after
                            them; a named table also when no client is left (as after a reap);
                            only files with the waitprep magic; says what it removed and kept
  doctor [--json]           which implementation loads here and why, where libwaitprep.so is,
                            what the install step did, and how to get the addon when it is missing
  help [<command>], --help, -h   this text, or one command's
  --version                 the package version

${EXIT_CODES}

details: docs/operations.md`;

/** `waitprep <command> --help` of the operator's commands (the demo prints its own). */
const COMMAND_USAGE = {
  inspect: `usage: waitprep inspect <table> [--json] [--trust-uid UID] [--trust-group-writable]

Lists a native lease table's slots (state, generation, pin holders), its registered clients with
whether each is alive, and its producer; this inspector's own client entry is left out. --json
prints one JSON object. Exit 1 when dead clients hold pins or the producer is dead.

Like every open, it accepts only a table file owned by this user that neither group nor others
may write; --trust-uid also accepts files owned by UID, --trust-group-writable group-writable ones.

${TABLE_NAME}

${EXIT_CODES}`,
  reap: `usage: waitprep reap <table> [--json] [--trust-uid UID] [--trust-group-writable]

Releases the pins and client entries of dead processes (and a dead producer's role) in a table
that stays in use, and says which. --json prints one JSON object. --trust-uid and
--trust-group-writable: as for inspect.

${TABLE_NAME}

${EXIT_CODES}`,
  clean: `usage: ${CLEAN_USAGE}

Removes the lease tables in /dev/shm (or only those named) whose producer and every client are
dead, with the demo's arena and socket named after them. A table with no client entry at all (its
producer closed, or a reap released every dead client) is removed only when named: a scan keeps
it, since its producer may reopen it, and names the command that removes it. A table a live
process holds is always kept. Only files with the waitprep magic and this ABI are judged; it says
what it removed and what it kept, and why. --dry-run removes nothing.
A table is opened only when it is owned by this user and writable by nobody else (as for
inspect); --trust-uid UID also accepts tables owned by UID, --trust-group-writable group-writable
ones.

${TABLE_NAME}

${EXIT_CODES}`,
};

/** Whether `args` asks for help before any `--` (after it, a table may be named "--help"). */
function asksForHelp(args) {
  const end = args.indexOf('--');
  return (end < 0 ? args : args.slice(0, end)).some((a) => a === '--help' || a === '-h');
}

/**
 * The demo lives in the source repository, not in the npm package: an installed copy says where
 * to get it rather than failing on a missing module.
 */
async function importDemo() {
  try {
    return await import('../demo/cli.js');
  } catch (error) {
    if (error?.code !== 'ERR_MODULE_NOT_FOUND' || !String(error.message).includes('demo/cli.js')) throw error;
    console.error('waitprep demo: the demo ships with the source repository, not the npm package; clone it and run `npm install && npm start`');
    process.exit(2);
  }
}

const [command = 'help', ...rest] = process.argv.slice(2);

/** An operator's command: its help, or the command itself, imported only then. */
const operator = (name, load) => async () => {
  if (asksForHelp(rest)) return console.log(COMMAND_USAGE[name]);
  // These commands open native tables only, and say so themselves when the addon is missing
  // (ERR_NATIVE_UNAVAILABLE, with the reason): the fallback warning would only repeat it.
  process.env.WAITPREP_NO_FALLBACK_WARNING ??= '1';
  return (await load())(rest);
};

/** The text `waitprep help <name>` prints: that command's usage, or the general one. */
async function helpFor(name) {
  if (name === undefined) return USAGE;
  if (Object.hasOwn(COMMAND_USAGE, name)) return COMMAND_USAGE[name];
  if (name === 'demo') return (await importDemo()).DEMO_USAGE;
  if (name === 'experiment') return (await import('../experiment/cli.js')).EXPERIMENT_USAGE;
  if (name === 'doctor') return (await import('./commands/doctor.js')).DOCTOR_USAGE;
  console.error(`waitprep help: unknown command ${JSON.stringify(name)}; try \`waitprep --help\``);
  process.exit(2);
}

const commands = {
  demo: async () => (await importDemo()).demo(rest),
  experiment: async () => (await import('../experiment/cli.js')).experiment(rest),
  inspect: operator('inspect', async () => (await import('./commands/inspect.js')).inspect),
  reap: operator('reap', async () => (await import('./commands/reap.js')).reap),
  clean: operator('clean', async () => (await import('./commands/clean.js')).clean),
  doctor: async () => (await import('./commands/doctor.js')).doctor(rest),
  help: async () => console.log(await helpFor(rest[0])),
  '--help': () => console.log(USAGE),
  '-h': () => console.log(USAGE),
  '--version': () => console.log(`waitprep ${createRequire(import.meta.url)('waitprep/package.json').version}`),
};

const run = Object.hasOwn(commands, command) ? commands[command] : undefined;
if (run === undefined) {
  console.error(`waitprep: unknown command ${JSON.stringify(command)}; try \`waitprep --help\``);
  process.exit(2);
}
try {
  await run();
} catch (error) {
  console.error(`waitprep ${command}: ${error instanceof Error ? error.stack : String(error)}`);
  process.exit(1);
}
