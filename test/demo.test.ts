// `npm start` runs `waitprep demo`; its JSON summary must be internally consistent.
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const bin = join(import.meta.dirname, '..', 'bin', 'waitprep.js');

describe('waitprep demo', () => {
  it('ends with a consistent summary', () => {
    const summary = JSON.parse(execFileSync(process.execPath, [bin, 'demo', '--json'], { encoding: 'utf8' }));
    const { stats } = summary;
    const misses = Object.values(stats.misses as Record<string, number>).reduce((a, b) => a + b, 0);
    expect(stats.hits + misses).toBe(stats.wakes);
    expect(stats.completed + stats.failed).toBe(stats.issued);
    expect(stats.hits).toBeGreaterThan(0);
    expect(stats.joins).toBeGreaterThan(0);
    expect(stats.overloads).toBeGreaterThan(0);
    expect(stats.misses['stale-ticket']).toBeGreaterThan(0);
    expect(summary.drained).toBe(true);
    expect(['native', 'js']).toContain(summary.implementation);
  });

  it('rejects an unknown command with exit code 2', () => {
    let status = 0;
    try {
      execFileSync(process.execPath, [bin, 'no-such-command'], { stdio: 'pipe' });
    } catch (error) {
      status = (error as { status: number }).status;
    }
    expect(status).toBe(2);
  });
});
