// `waitprep inspect <table> [--json]`: an operator's view of a native lease table (POSIX shared
// memory, /dev/shm/<table>): its slots, pin holders, clients (alive or dead) and producer.
import { humanReport, look, runCommand } from './operator.js';

/** `waitprep inspect <table> [--json]`. */
export function inspect(args) {
  return runCommand('inspect', args, (name, table) => {
    const { report, judged } = look(name, table);
    return { report, human: humanReport(report, judged), exit: report.exitCode };
  });
}
