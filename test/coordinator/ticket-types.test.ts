/**
 * The ticket forms' types (test/fixtures/ticket-types.ts), checked by the TypeScript compiler the
 * build uses: a `WaitCoordinator<number>` must be given `tickets: 'number'` and the default issues
 * strings, so the declared type of a ticket is the form it has at run time. The fixture's
 * `@ts-expect-error` lines fail the check when the error they expect does not come.
 */
import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const tsc = fileURLToPath(new URL('../../node_modules/typescript/bin/tsc', import.meta.url));
const project = fileURLToPath(new URL('../fixtures/ticket-types.tsconfig.json', import.meta.url));

describe('ticket form types', () => {
  it('type-check: the fixture compiles with exactly its expected errors', () => {
    const run = spawnSync(process.execPath, [tsc, '-p', project], { encoding: 'utf8' });
    expect(run.stdout + run.stderr).toBe('');
    expect(run.status).toBe(0);
  }, 120_000);
});
