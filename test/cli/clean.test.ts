// `waitprep clean` (bin/commands/) against real leftovers: the demo's storage-worker process
// (bin/storage-worker.js: the producer, its arena and its socket) and a consumer child that pins
// what it published are both SIGKILLed, and clean removes the table, the arena and the socket; a
// table with a live client or one of another pid namespace is kept, and so is a file in /dev/shm that has a table's kind of name
// but not the waitprep magic. A table that a reap left with no client entry is removed when named,
// and kept by a scan, which names the command that removes it. Names are always passed, except in the one --dry-run scan, so that
// this file never removes what other test files running beside it left for a moment.
// The CLI imports the package by name (dist/): run `npm run build` first.
import { fork, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, closeSync, existsSync, mkdirSync, openSync, rmSync, statSync, writeFileSync, writeSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { artifactKey, encodeArtifactKey } from '../../lib/index.js';
import { CLIENT_FIELD, CLIENT_SIZE, CLIENT_STATE, CLIENT_WORD, CLIENTS_OFFSET } from '../../lib/lease-table/layout.js';
import { keyFields, publicationMeta } from '../fixtures/lease-stress-common.mjs';
import { leaseHolders, type Holder } from '../children.js';
import { NATIVE, runsIf } from '../skip-reasons.js';

const BIN = join(import.meta.dirname, '..', '..', 'bin', 'waitprep.js');
const STORAGE_WORKER = join(import.meta.dirname, '..', '..', 'bin', 'storage-worker.js');
// The demo's names start with waitprep-demo-: clean removes the socket of such a table only.
const { tableName, open, startHolder, cleanup } = leaseHolders('waitprep-demo-cleantest');
const workers: ChildProcess[] = [];
const paths: string[] = [];

function cliJson(args: string[]): { status: number | null; report: any; stdout: string; stderr: string } {
  const result = spawnSync(process.execPath, [BIN, 'clean', ...args, '--json'], { encoding: 'utf8', timeout: 30_000 });
  let report: unknown;
  try {
    report = JSON.parse(result.stdout);
  } catch {
    throw new Error(`not one JSON object (exit ${result.status}): ${result.stdout}\n${result.stderr}`);
  }
  return { status: result.status, report, stdout: result.stdout, stderr: result.stderr };
}

async function kill(child: ChildProcess, exited: Promise<unknown>): Promise<void> {
  child.kill('SIGKILL');
  await exited;
  expect(existsSync(`/proc/${child.pid}`)).toBe(false);
}

/** The demo's storage worker for `name`, with the demo's arena and socket names; resolves once it serves. */
async function startStorageWorker(name: string) {
  const arena = `/dev/shm/${name}-arena`;
  const socket = join(tmpdir(), `${name}.sock`);
  paths.push(arena, socket);
  const child = fork(STORAGE_WORKER, ['--table', name, '--arena', arena, '--socket', socket, '--capacity', '64'], { stdio: ['ignore', 'ignore', 'pipe', 'ipc'] });
  workers.push(child);
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const exited = new Promise((resolve) => child.once('exit', resolve));
  await new Promise<void>((resolve, reject) => {
    child.on('message', (m: any) => m?.type === 'ready' && resolve());
    child.once('exit', (code, signal) => reject(new Error(`storage worker exited (${code ?? signal}): ${stderr}`)));
  });
  return { child, exited, arena, socket };
}

/** Asks the storage worker over its socket to prepare and publish key `index`, as the demo's prepare workers do. */
function publish(socket: string, index: number): Promise<any> {
  const fields = keyFields(index);
  const request = { id: 1, keyHex: artifactKey(fields).hex, keyBytes: Buffer.from(encodeArtifactKey(fields)).toString('base64') };
  return new Promise((resolve, reject) => {
    const conn = connect(socket, () => conn.write(JSON.stringify(request) + '\n'));
    let data = '';
    conn.setEncoding('utf8').on('data', (chunk: string) => {
      data += chunk;
      if (data.includes('\n')) {
        conn.end();
        resolve(JSON.parse(data.slice(0, data.indexOf('\n'))));
      }
    });
    conn.on('error', reject);
  });
}

async function pinningConsumer(name: string): Promise<Holder> {
  const holder = startHolder(name, 'consumer', 0);
  const said = await holder.message;
  expect(said, holder.stderr()).toMatchObject({ event: 'pinned', pins: 2 });
  return holder;
}

/** A table whose producer published key 0 and closed, and whose consumer child pinned it twice and was SIGKILLed. */
async function leftByDeadConsumer(): Promise<{ name: string; consumer: Holder }> {
  const name = tableName();
  const producer = open({ name, role: 'producer', create: { capacity: 64 } });
  producer.publish(producer.reserve(artifactKey(keyFields(0))), publicationMeta(0, 1));
  producer.close();
  const consumer = await pinningConsumer(name);
  await kill(consumer.child, consumer.exited);
  return { name, consumer };
}

afterEach(async () => {
  for (const w of workers.splice(0)) if (w.exitCode === null && w.signalCode === null) w.kill('SIGKILL');
  await cleanup();
  for (const path of paths.splice(0)) rmSync(path, { recursive: true, force: true });
});

describe.runIf(runsIf('waitprep clean (native: the JavaScript fallback leaves no files)', NATIVE))('waitprep clean (native, real processes)', () => {
  it('removes the table, arena and socket that a SIGKILLed storage worker and consumer left', async () => {
    const name = tableName();
    const worker = await startStorageWorker(name);
    expect(await publish(worker.socket, 0)).toMatchObject({ ok: true });
    const consumer = await pinningConsumer(name);
    expect(existsSync(worker.arena)).toBe(true);

    // While both live, the table is in use: kept, exit 0.
    let run = cliJson([name]);
    expect(run.status, run.stderr).toBe(0);
    expect(run.report.results).toMatchObject([{ table: name, removed: false }]);
    expect(run.report.results[0].reason).toMatch(/alive/);

    await kill(worker.child, worker.exited);
    await kill(consumer.child, consumer.exited);
    expect(existsSync(`/dev/shm/${name}`)).toBe(true);
    expect(existsSync(worker.arena)).toBe(true);
    expect(existsSync(worker.socket)).toBe(true);

    // A dry-run scan of /dev/shm names it and removes nothing.
    run = cliJson(['--dry-run']);
    expect(run.report.scanned).toBe(true);
    expect(run.report.results.find((t: any) => t.table === name)).toMatchObject({ removed: false, wouldRemove: true });
    expect(existsSync(`/dev/shm/${name}`)).toBe(true);

    run = cliJson([name]);
    expect(run.status, run.stderr).toBe(0);
    const [result] = run.report.results;
    expect(result).toMatchObject({ table: name, removed: true, arena: { path: worker.arena, removed: true }, socket: { path: worker.socket, removed: true } });
    expect(result.deadClients.map((c: any) => c.pid).sort()).toEqual([worker.child.pid, consumer.pid].sort());
    expect(result.deadClients.find((c: any) => c.pid === worker.child.pid).producer).toBe(true);
    expect(existsSync(`/dev/shm/${name}`)).toBe(false);
    expect(existsSync(worker.arena)).toBe(false);
    expect(existsSync(worker.socket)).toBe(false);

    // Named again, it is gone: exit 3, as inspect.
    expect(cliJson([name]).status).toBe(3);
  });

  it('keeps a table whose producer is dead while a client lives (exit 1: it needs a reap)', async () => {
    const name = tableName();
    const producer = open({ name, role: 'producer', create: { capacity: 64 } });
    producer.publish(producer.reserve(artifactKey(keyFields(0))), publicationMeta(0, 1));
    producer.close();
    const reserving = startHolder(name, 'producer', 1);
    expect(await reserving.message, reserving.stderr()).toMatchObject({ event: 'reserved' });
    const consumer = await pinningConsumer(name);
    await kill(reserving.child, reserving.exited);

    const run = cliJson([name]);
    expect(run.status, run.stderr).toBe(1);
    expect(run.report.results[0]).toMatchObject({ table: name, removed: false, liveClients: [{ pid: consumer.pid, liveness: 'alive' }] });
    expect(run.report.results[0].reason).toContain(`waitprep reap ${name}`);
    expect(existsSync(`/dev/shm/${name}`)).toBe(true);
  });

  it('keeps a table with an entry of another pid namespace: not dead, so not gone', async () => {
    const { name, consumer } = await leftByDeadConsumer();
    // Entry 63 ACTIVE for pid 1 of a pid namespace that is not ours: nobody here can judge it.
    const entry = Buffer.alloc(CLIENT_SIZE);
    entry.writeBigUInt64LE((7n << BigInt(CLIENT_WORD.SERIAL_SHIFT)) | (1n << BigInt(CLIENT_WORD.PID_SHIFT)) | BigInt(CLIENT_STATE.ACTIVE), CLIENT_FIELD.WORD);
    entry.writeBigUInt64LE(1n, CLIENT_FIELD.START_TIME);
    entry.writeBigUInt64LE(statSync('/proc/self/ns/pid', { bigint: true }).ino + 1n, CLIENT_FIELD.PID_NS);
    entry.writeBigUInt64LE(statSync('/proc/self/ns/time', { bigint: true }).ino, CLIENT_FIELD.TIME_NS);
    const fd = openSync(`/dev/shm/${name}`, 'r+');
    try {
      expect(writeSync(fd, entry, 0, CLIENT_SIZE, CLIENTS_OFFSET + 63 * CLIENT_SIZE)).toBe(CLIENT_SIZE);
    } finally {
      closeSync(fd);
    }

    const run = cliJson([name]);
    expect(run.report.results[0]).toMatchObject({ table: name, removed: false, liveClients: [{ index: 63, pid: 1, liveness: 'other-namespace' }] });
    // The dead consumer still holds its pin: a reap is what this table needs.
    expect(run.status, run.stderr).toBe(1);
    expect(existsSync(`/dev/shm/${name}`)).toBe(true);
  });

  it('leaves a file without the waitprep magic alone, named (exit 4) or found by a scan', () => {
    const name = tableName();
    const path = `/dev/shm/${name}`;
    const arena = `${path}-arena`;
    writeFileSync(path, Buffer.alloc(4096, 0x5a));
    mkdirSync(arena, { recursive: true });
    paths.push(path, arena);

    let run = cliJson([name]);
    expect(run.status, run.stderr).toBe(4);
    expect(run.report.results[0]).toMatchObject({ table: name, removed: false, code: 'ERR_BAD_SEGMENT' });
    run = cliJson(['--dry-run']);
    expect(run.report.notTables).toContain(name);
    expect(run.report.results.map((t: any) => t.table)).not.toContain(name);
    expect(existsSync(path)).toBe(true);
    expect(existsSync(arena)).toBe(true);
  });

  it('opens only a table it trusts, and --trust-group-writable widens that as for inspect', async () => {
    const { name, consumer } = await leftByDeadConsumer();
    chmodSync(`/dev/shm/${name}`, 0o660);

    let run = cliJson([name]);
    expect(run.status, run.stderr).toBe(5);
    expect(run.report.results[0]).toMatchObject({ table: name, removed: false, code: 'ERR_UNTRUSTED_SEGMENT' });
    expect(run.report.results[0].reason).toContain('--trust-group-writable');
    expect(existsSync(`/dev/shm/${name}`)).toBe(true);

    run = cliJson([name, '--trust-group-writable']);
    expect(run.status, run.stderr).toBe(0);
    expect(run.report.results[0]).toMatchObject({ table: name, removed: true, deadClients: [{ pid: consumer.pid }] });
    expect(existsSync(`/dev/shm/${name}`)).toBe(false);
  });

  it('after a reap, a named clean removes the emptied table and its arena; a scan keeps it and says how; a live holder keeps it', async () => {
    const { name } = await leftByDeadConsumer();
    const arena = `/dev/shm/${name}-arena`;
    paths.push(arena);
    mkdirSync(arena);
    writeFileSync(join(arena, '0.wpa'), Buffer.alloc(96));
    const reaped = spawnSync(process.execPath, [BIN, 'reap', name], { encoding: 'utf8', timeout: 30_000 });
    expect(reaped.status, reaped.stderr).toBe(0);
    expect(reaped.stdout).toContain('reaped 1 dead client(s)');
    expect(reaped.stdout).toContain(`\`waitprep clean ${name}\` removes it`);

    // Nothing but dead clients was ever in it, and the reap released those: no entry is left.
    // A scan cannot tell it from a table whose producer closed and will reopen it: kept, with the command that removes it.
    let run = cliJson(['--dry-run']);
    const scanned = run.report.results.find((t: any) => t.table === name);
    expect(scanned).toMatchObject({ removed: false });
    expect(scanned.wouldRemove).toBeUndefined();
    expect(scanned.reason).toContain(`waitprep clean ${name}`);
    // Named, a dry run says it would go; then it goes, with its arena.
    run = cliJson([name, '--dry-run']);
    expect(run.report.results[0]).toMatchObject({ table: name, removed: false, wouldRemove: true });
    expect(existsSync(`/dev/shm/${name}`)).toBe(true);
    run = cliJson([name]);
    expect(run.status, run.stderr).toBe(0);
    expect(run.report.results[0]).toMatchObject({ table: name, removed: true, arena: { path: arena, removed: true, files: 1 } });
    expect(existsSync(`/dev/shm/${name}`)).toBe(false);
    expect(existsSync(arena)).toBe(false);

    // A table this (live) process holds open as its producer, with no other client, is refused by name.
    const held = tableName();
    open({ name: held, role: 'producer', create: { capacity: 16 } });
    run = cliJson([held]);
    expect(run.status, run.stderr).toBe(0);
    expect(run.report.results[0]).toMatchObject({ table: held, removed: false, liveClients: [{ pid: process.pid, liveness: 'alive', producer: true }] });
    expect(existsSync(`/dev/shm/${held}`)).toBe(true);
  });

  it('refuses bad usage with exit 2', () => {
    expect(cliJson(['--trust-uid', 'root']).status).toBe(2);
    expect(cliJson(['--bogus']).status).toBe(2);
    expect(cliJson(['.hidden']).status).toBe(2);
  });
});
