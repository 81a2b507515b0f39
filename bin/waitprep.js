#!/usr/bin/env node
// waitprep command line. `waitprep demo` (what `npm start` runs) is, for now, a
// small scripted demo of the coordinator over the in-memory backend; the
// end-to-end demo with the lease table and a storage-worker process replaces
// it in a later issue.
import { demo } from './demo.js';

const [command = 'help', ...rest] = process.argv.slice(2);

const commands = {
  demo: () => demo(rest),
  help: () => {
    console.log(`usage: waitprep <command>

commands:
  demo [--json]   a scripted run of waits, dedup, preparation, wakes and misses
  help            this text`);
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
