// Tests that cannot run here (no addon, no compiler, no python3) are still registered, through
// describe.runIf / it.runIf, so the summary counts them as skipped instead of losing them. runsIf
// records why; when the run ends, test/skip-summary.ts prints each reason once, with the groups
// it skipped (without that global setup, each reason is printed once per file at collection).
import { appendFileSync } from 'node:fs';
import { inject } from 'vitest';
import { implementation, implementationReason } from '../lib/index.js';

/** A condition and the reason printed when it does not hold. */
export type Requirement = readonly [met: boolean, unmetReason: string];

/** The native implementation is in use (the addon loaded and was chosen). */
export const NATIVE: Requirement = [implementation === 'native', `the native implementation is not in use (${implementationReason})`];

const printed = new Set<string>();

/** Whether every requirement holds; when one does not, records the first unmet reason for `what`. */
export function runsIf(what: string, ...requirements: Requirement[]): boolean {
  const unmet = requirements.find(([met]) => !met);
  if (unmet === undefined) return true;
  const reason = unmet[1].replace(/\s+/g, ' ');
  const log = inject('skipLog');
  if (log !== undefined) {
    // One short line per group, appended whole (O_APPEND), so the files' workers do not interleave.
    appendFileSync(log, `${what.replace(/\s+/g, ' ')}\t${reason}\n`);
  } else if (!printed.has(reason)) {
    printed.add(reason);
    console.warn(`skipped: ${reason}`);
  }
  return false;
}
