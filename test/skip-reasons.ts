// Tests that cannot run here (no addon, no compiler, no python3) are still registered, through
// describe.runIf / it.runIf, so the summary counts them as skipped instead of losing them; runsIf
// prints why, once, at collection.
import { implementation, implementationReason } from '../lib/index.js';

/** A condition and the reason printed when it does not hold. */
export type Requirement = readonly [met: boolean, unmetReason: string];

/** The native implementation is in use (the addon loaded and was chosen). */
export const NATIVE: Requirement = [implementation === 'native', `the native implementation is not in use (${implementationReason})`];

/** Whether every requirement holds; when one does not, prints the first unmet reason for `what`. */
export function runsIf(what: string, ...requirements: Requirement[]): boolean {
  const unmet = requirements.find(([met]) => !met);
  if (unmet === undefined) return true;
  console.warn(`${what}: skipped: ${unmet[1]}`);
  return false;
}
