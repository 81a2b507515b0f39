// A native table that this user may not open or remove is ERR_PERMISSION_DENIED with the errno
// named, never ERR_SYSTEM with a bare status; unlinkLeaseTable tells "no such table" (false) from
// "not permitted" (that error). The refused caller is a child running as `nobody` against a
// root-owned mode-0600 table, so the test needs root, setpriv and the built dist/.
import { existsSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { openLeaseTable, unlinkLeaseTable, type LeaseTable } from '../../lib/index.js';
import { DIST, READABLE, ROOT, SETPRIV, asNobody, caught } from '../as-nobody.js';
import { NATIVE, runsIf } from '../skip-reasons.js';

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
