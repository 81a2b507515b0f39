// A native table that this user may not open or remove is ERR_PERMISSION_DENIED with the errno
// named, never ERR_SYSTEM with a bare status; unlinkLeaseTable tells "no such table" (false) from
// "not permitted" (that error). The refused caller is a child running as `nobody` against a
// root-owned mode-0600 table, so the test needs root, setpriv and the built dist/.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { openLeaseTable, unlinkLeaseTable, type LeaseTable } from '../lib/index.js';
import { NATIVE, runsIf, type Requirement } from './skip-reasons.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dist = join(root, 'dist', 'index.js');
const isRoot = typeof process.geteuid === 'function' && process.geteuid() === 0;
const setpriv = spawnSync('setpriv', ['--version'], { encoding: 'utf8' }).status === 0;
const ROOT: Requirement = [isRoot, 'not running as root, so no second uid to refuse'];
const SETPRIV: Requirement = [setpriv, 'setpriv (util-linux) is not installed'];
const DIST: Requirement = [existsSync(dist), 'dist/ is not built (npx tsc -p .)'];
/**
 * The child imports this checkout as nobody, so nobody must be able to read it: a clone under a
 * mode-0700 directory (mktemp -d) cannot be, and the test is skipped there with that reason.
 */
const readable = isRoot && setpriv && existsSync(dist) &&
  spawnSync('setpriv', ['--reuid=nobody', '--regid=nogroup', '--clear-groups', process.execPath, '--input-type=module', '-e', `await import(${JSON.stringify(dist)})`], { timeout: 30_000 }).status === 0;
const READABLE: Requirement = [readable, `nobody cannot import the package at ${root} (a directory above it is not readable by others)`];

/** Runs `body` (an async function body over `m`, the package) as nobody; its printed JSON comes back. */
function asNobody(body: string): { status: number | null; out: unknown; stderr: string } {
  const script = `const m = await import(${JSON.stringify(dist)});\n${body}`;
  const run = spawnSync(
    'setpriv',
    ['--reuid=nobody', '--regid=nogroup', '--clear-groups', process.execPath, '--input-type=module', '-e', script],
    { encoding: 'utf8', timeout: 30_000 },
  );
  let out: unknown = null;
  try {
    out = JSON.parse(run.stdout.trim().split('\n').pop() ?? '');
  } catch {
    out = run.stdout;
  }
  return { status: run.status, out, stderr: run.stderr };
}

/** The code and message of what `call` throws in the child, as JSON on stdout. */
const caught = (call: string) =>
  `try { const value = ${call}; console.log(JSON.stringify({ value })); } ` +
  `catch (e) { console.log(JSON.stringify({ code: e.code, message: e.message })); }`;

let tables: LeaseTable[] = [];
const names: string[] = [];
afterEach(() => {
  for (const table of tables) table.close();
  tables = [];
  for (const name of names.splice(0)) unlinkLeaseTable(name);
});
let serial = 0;
const tableName = () => `waitprep-syserr-${process.pid}-${serial++}`;

describe.runIf(runsIf('system errors as another uid', NATIVE, ROOT, SETPRIV, DIST, READABLE))('native: permission refusals', () => {
  it('opening a table this user may not open is ERR_PERMISSION_DENIED naming EACCES', () => {
    const name = tableName();
    names.push(name);
    tables.push(openLeaseTable({ name, role: 'producer', create: { capacity: 8, mode: 0o600 }, implementation: 'native' }));
    const run = asNobody(caught(`m.openLeaseTable({ name: ${JSON.stringify(name)}, role: 'consumer', implementation: 'native' }).implementation`));
    expect(run.status, run.stderr).toBe(0);
    expect(run.out).toMatchObject({ code: 'ERR_PERMISSION_DENIED' });
    expect((run.out as { message: string }).message).toContain('EACCES');
    expect((run.out as { message: string }).message).not.toContain('status 45');
  });

  it('unlinkLeaseTable: not permitted throws ERR_PERMISSION_DENIED naming EPERM, no such table is false', () => {
    const name = tableName();
    names.push(name);
    tables.push(openLeaseTable({ name, role: 'producer', create: { capacity: 8, mode: 0o600 }, implementation: 'native' }));
    const refused = asNobody(caught(`m.unlinkLeaseTable(${JSON.stringify(name)})`));
    expect(refused.status, refused.stderr).toBe(0);
    expect(refused.out).toMatchObject({ code: 'ERR_PERMISSION_DENIED' });
    expect((refused.out as { message: string }).message).toMatch(/EPERM|EACCES/);
    expect(existsSync(`/dev/shm/${name}`)).toBe(true);
    const missing = asNobody(caught(`m.unlinkLeaseTable(${JSON.stringify(tableName())})`));
    expect(missing.out).toEqual({ value: false });
  });
});

describe.runIf(runsIf('unlinkLeaseTable results', NATIVE))('native: unlinkLeaseTable', () => {
  it('is true when it removed the table and false when there was none', () => {
    const name = tableName();
    openLeaseTable({ name, role: 'producer', create: { capacity: 8 }, implementation: 'native' }).close();
    expect(unlinkLeaseTable(name)).toBe(true);
    expect(unlinkLeaseTable(name)).toBe(false);
  });
});
