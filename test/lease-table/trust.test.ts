// A native table's file is trusted only when it is a regular file (not
// a link) owned by this uid and writable by nobody else, unless options.trust says otherwise; a
// creation mode its own opens would refuse is an error; and a file truncated under attached
// clients is reported by inspect() and summary() as ERR_BAD_SEGMENT without a byte past its end
// being read, and closed without a crash. The planted table is made by a child running as nobody.
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, symlinkSync, unlinkSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { WaitprepError, nativeLibraryPath, openLeaseTable, unlinkLeaseTable, type LeaseTable } from '../../lib/index.js';
import { DIST, READABLE, ROOT, SETPRIV, asNobody, caught } from '../as-nobody.js';
import { NATIVE, runsIf } from '../skip-reasons.js';

const dist = fileURLToPath(new URL('../../dist/index.js', import.meta.url));
const fixture = fileURLToPath(new URL('../fixtures/lease-stress-common.mjs', import.meta.url));
let tables: LeaseTable[] = [];
const names: string[] = [];
afterEach(() => {
  for (const table of tables) table.close();
  tables = [];
  for (const name of names.splice(0)) {
    try {
      unlinkSync(`/dev/shm/${name}`);
    } catch {
      // already gone
    }
  }
});
let serial = 0;
const tableName = () => {
  const name = `waitprep-trust-${process.pid}-${serial++}`;
  names.push(name);
  return name;
};
const refusal = (call: () => unknown): WaitprepError => {
  try {
    call();
  } catch (e) {
    if (e instanceof WaitprepError) return e;
    throw e;
  }
  throw new Error('expected a WaitprepError');
};

describe.runIf(runsIf('native table trust', NATIVE))('native: which table files an open trusts', () => {
  it('create refuses mode 0 and modes others or the group may write, unless trusted', () => {
    const name = tableName();
    for (const mode of [0, 0o666, 0o622, 0o660, 0o620]) {
      const e = refusal(() => openLeaseTable({ name, role: 'producer', create: { capacity: 8, mode }, implementation: 'native' }));
      expect(e.code, `mode 0o${mode.toString(8)}`).toBe('ERR_INVALID_ARGUMENT');
      expect(e.field).toBe('options.create.mode');
    }
    expect(existsSync(`/dev/shm/${name}`)).toBe(false);
    const group = openLeaseTable({ name, role: 'producer', create: { capacity: 8, mode: 0o660 }, trust: { groupWritable: true }, implementation: 'native' });
    tables.push(group);
    expect(refusal(() => openLeaseTable({ name, role: 'consumer', implementation: 'native' })).code).toBe('ERR_UNTRUSTED_SEGMENT');
    tables.push(openLeaseTable({ name, role: 'consumer', trust: { groupWritable: true }, implementation: 'native' }));
  });

  it('rejects malformed trust options', () => {
    const name = tableName();
    expect(refusal(() => openLeaseTable({ name, role: 'consumer', trust: { uid: -1 }, implementation: 'native' })).field).toBe('options.trust.uid');
    expect(refusal(() => openLeaseTable({ name, role: 'consumer', trust: { groupWritable: 'yes' } as never, implementation: 'native' })).field).toBe('options.trust.groupWritable');
    expect(refusal(() => openLeaseTable({ name, role: 'consumer', trust: { owner: 0 } as never, implementation: 'native' })).field).toBe('options.trust.owner');
  });

  it('an open refuses a file made writable by others, naming its owner and mode', () => {
    const name = tableName();
    tables.push(openLeaseTable({ name, role: 'producer', create: { capacity: 8 }, implementation: 'native' }));
    chmodSync(`/dev/shm/${name}`, 0o666);
    const e = refusal(() => openLeaseTable({ name, role: 'consumer', implementation: 'native' }));
    expect(e.code).toBe('ERR_UNTRUSTED_SEGMENT');
    expect(e.message).toContain(`owned by uid ${process.geteuid!()} with mode 0o666`);
    expect(refusal(() => openLeaseTable({ name, role: 'consumer', trust: { groupWritable: true }, implementation: 'native' })).code).toBe('ERR_UNTRUSTED_SEGMENT');
    tables.push(openLeaseTable({ name, role: 'consumer', trust: { groupWritable: true, worldWritable: true }, implementation: 'native' }));
  });

  it('an open never follows a symbolic link planted under the name', () => {
    const target = tableName();
    const link = tableName();
    tables.push(openLeaseTable({ name: target, role: 'producer', create: { capacity: 8 }, implementation: 'native' }));
    symlinkSync(`/dev/shm/${target}`, `/dev/shm/${link}`);
    const e = refusal(() => openLeaseTable({ name: link, role: 'consumer', implementation: 'native' }));
    expect(e.code).toBe('ERR_UNTRUSTED_SEGMENT');
    expect(e.message).toContain('is a symbolic link');
  });
});

describe.runIf(runsIf('a table planted by another uid', NATIVE, ROOT, SETPRIV, DIST, READABLE))('native: a table planted by nobody', () => {
  it('a root producer refuses it unless trust names that uid and its mode', () => {
    const name = tableName();
    // The planter: another local user creates a world-writable table under the expected name.
    const planted = asNobody(caught(
      `(m.openLeaseTable({ name: ${JSON.stringify(name)}, role: 'producer', create: { capacity: 8, mode: 0o666 }, trust: { groupWritable: true, worldWritable: true }, implementation: 'native' }).close(), 'planted')`,
    ));
    expect(planted.status, planted.stderr).toBe(0);
    expect(planted.out).toEqual({ value: 'planted' });
    const e = refusal(() => openLeaseTable({ name, role: 'producer', implementation: 'native' }));
    expect(e.code).toBe('ERR_UNTRUSTED_SEGMENT');
    expect(e.message).toContain('owned by uid 65534 with mode 0o666');
    expect(e.message).toContain('uid 0 (this process)');
    // Trusting the owner alone is not enough while others may write it.
    expect(refusal(() => openLeaseTable({ name, role: 'producer', trust: { uid: 65534 }, implementation: 'native' })).code).toBe('ERR_UNTRUSTED_SEGMENT');
    chmodSync(`/dev/shm/${name}`, 0o600);
    expect(refusal(() => openLeaseTable({ name, role: 'producer', implementation: 'native' })).code).toBe('ERR_UNTRUSTED_SEGMENT');
    tables.push(openLeaseTable({ name, role: 'producer', trust: { uid: 65534 }, implementation: 'native' }));
    expect(unlinkLeaseTable(name)).toBe(true);
  });
});

/** Child: a table truncated under a pinned consumer; what inspect, summary, reap and close do. */
const TRUNCATE = `
import { truncateSync } from 'node:fs';
const m = await import(process.argv[1]);
const name = process.argv[2];
const code = (call) => { try { call(); return 'no error'; } catch (e) { return e.code + ': ' + e.message; } };
const producer = m.openLeaseTable({ name, role: 'producer', create: { capacity: 1024 }, implementation: 'native' });
const consumer = m.openLeaseTable({ name, role: 'consumer', implementation: 'native' });
const { keyFields, publicationMeta } = await import(process.argv[3]);
const key = m.artifactKey(keyFields(0));
producer.publish(producer.reserve(key), publicationMeta(0, 1));
const pinned = consumer.tryPin(key).kind;
truncateSync('/dev/shm/' + name, 4096);
const out = { pinned, inspect: code(() => consumer.inspect()), summary: code(() => producer.summary()), reap: code(() => producer.reapDeadClients()),
  reopen: code(() => m.openLeaseTable({ name, role: 'consumer', implementation: 'native' })) };
consumer.close();
producer.close();
m.unlinkLeaseTable(name);
out.closed = true;
console.log(JSON.stringify(out));
`;

describe.runIf(runsIf('a truncated table', NATIVE, DIST))('native: a table file truncated under its clients', () => {
  it('inspect and summary say ERR_BAD_SEGMENT without reading past the end, and close does not crash', () => {
    const name = tableName();
    const run = spawnSync(process.execPath, ['--input-type=module', '-e', TRUNCATE, dist, name, fixture], { encoding: 'utf8', timeout: 30_000 });
    expect(run.signal, run.stderr).toBeNull(); // no SIGBUS
    expect(run.status, run.stderr).toBe(0);
    const out = JSON.parse(run.stdout.trim());
    expect(out.pinned).toBe('lease');
    expect(out.inspect).toMatch(/^ERR_BAD_SEGMENT: inspect: the segment's file is now 4096 bytes, shorter than the \d+ bytes of capacity 1024/);
    expect(out.summary).toMatch(/^ERR_BAD_SEGMENT: summary: the segment's file is now 4096 bytes/);
    expect(out.reap).toMatch(/^ERR_BAD_SEGMENT: reapDeadClients\(\): the segment's file is now 4096 bytes/);
    expect(out.reopen).toMatch(/^ERR_BAD_SEGMENT/);
    expect(out.closed).toBe(true);
  });
});

const hasPython = spawnSync('python3', ['--version'], { encoding: 'utf8' }).status === 0;
const libPath = nativeLibraryPath();
const PYTHON_TRUST = `
import json, os, sys
sys.path.insert(0, os.path.join(sys.argv[1], "python"))
import waitprep
name = sys.argv[2]
out = {}
try:
    waitprep.open_table(name)
except waitprep.WaitprepError as e:
    out["default"] = [e.code, e.status_name]
t = waitprep.open_table(name, trust_group_writable=True, trust_world_writable=True)
out["trusted"] = t.client_index >= 0
t.close()
print(json.dumps(out))
`;

describe.runIf(runsIf('python table trust', NATIVE, [hasPython, 'python3 is not installed'], [libPath !== null, 'libwaitprep.so is not built']))('python: which table files an open trusts', () => {
  it('refuses a world-writable file as WP_ERR_UNTRUSTED_SEGMENT, and opens it when trusted', () => {
    const name = tableName();
    tables.push(openLeaseTable({ name, role: 'producer', create: { capacity: 8 }, implementation: 'native' }));
    chmodSync(`/dev/shm/${name}`, 0o666);
    const root = fileURLToPath(new URL('../..', import.meta.url));
    const run = spawnSync('python3', ['-c', PYTHON_TRUST, root, name], { encoding: 'utf8', env: { ...process.env, WAITPREP_LIBRARY: libPath! }, timeout: 30_000 });
    expect(run.status, run.stderr).toBe(0);
    expect(JSON.parse(run.stdout.trim())).toEqual({ default: ['ERR_UNTRUSTED_SEGMENT', 'WP_ERR_UNTRUSTED_SEGMENT'], trusted: true });
  });
});
