#!/usr/bin/env node
// waitprep command line. `waitprep demo` (what `npm start` runs) is the end-to-end demo: an
// agent trace replayed through the coordinator, a preparation driver and a storage-worker
// process publishing into a lease table (bin/demo/); `demo --scripted` is the earlier
// scripted sequence.
import { demo } from './demo/cli.js';
import { clean, inspect, reap } from './inspect.js';

const [command = 'help', ...rest] = process.argv.slice(2);

const commands = {
  demo: () => demo(rest),
  inspect: () => inspect(rest),
  reap: () => reap(rest),
  clean: () => clean(rest),
  help: () => {
    console.log(`usage: waitprep <command>

commands:
  demo [options]            replay an agent trace through the coordinator, a preparation
                            driver and a storage-worker process that publishes into a lease
                            table; ends with a summary (\`waitprep demo --help\` for options)
  demo --scripted [--json]  the earlier scripted run of waits, dedup, preparation, wakes, misses
  inspect <table> [--json]  a native lease table's slots, pin holders, clients (alive or dead)
                            and producer; this inspector's own client entry is left out
  reap <table> [--json]     release the pins and entries of dead clients (and a dead
                            producer's role), and say which
  clean [<table>...] [--dry-run] [--json]
                            remove the tables in /dev/shm (or those named) whose producer and
                            every client are dead, with the demo's arena and socket named after
                            them; only files with the waitprep magic; says what it removed and kept
  help                      this text

exit codes of inspect, reap and clean (clean: the highest of its tables'):
  0  healthy (reap: done; clean: removed, or kept because in use)
  1  pins held by dead clients, or a dead producer: run \`waitprep reap <table>\`
  2  usage error
  3  no such table
  4  not a lease table of this ABI (ERR_BAD_SEGMENT: corrupt, truncated, foreign): refused
  5  any other error (the native addon not loaded, no free client entry, permissions, ...)

details: docs/operations.md`);
  },
};

const run = commands[command];
if (run === undefined) {
  console.error(`waitprep: unknown command ${JSON.stringify(command)}; try \`waitprep help\``);
  process.exit(2);
}
try {
  await run();
} catch (error) {
  console.error(`waitprep ${command}: ${error instanceof Error ? error.stack : String(error)}`);
  process.exit(1);
}
