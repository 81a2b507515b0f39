// vitest's global setup for test/skip-reasons.ts: every file runs in its own worker process, so a
// reason printed at collection would be printed once per file (37 times for a missing addon).
// Instead each skipped group is recorded here, and when the run ends each reason is printed once,
// with how many groups it skipped and which.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The file test/skip-reasons.ts appends `<what>\t<reason>` lines to. */
    skipLog: string;
  }
}

export default function setup(project: TestProject): () => void {
  const dir = mkdtempSync(join(tmpdir(), 'waitprep-skips-'));
  const log = join(dir, 'skips.log');
  project.provide('skipLog', log);
  return () => {
    let lines: string[] = [];
    try {
      lines = readFileSync(log, 'utf8').split('\n').filter((line) => line.length > 0);
    } catch {
      // Nothing was skipped: the file was never written.
    }
    rmSync(dir, { recursive: true, force: true });
    const byReason = new Map<string, string[]>();
    for (const line of lines) {
      const [what, reason] = line.split('\t') as [string, string];
      byReason.set(reason, [...(byReason.get(reason) ?? []), what]);
    }
    for (const [reason, whats] of byReason) {
      console.log(`skipped (${whats.length} ${whats.length === 1 ? 'group' : 'groups'}: ${whats.join(', ')}): ${reason}`);
    }
  };
}
