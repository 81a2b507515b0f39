// `waitprep inspect` and `waitprep reap` (bin/commands/) against live native tables: a consumer
// that pins and is SIGKILLed (test/fixtures/lease-holder.mjs) shows as a dead client holding pins
// (exit 1), reap releases it (exit 0), and inspect is healthy again; a dead producer likewise;
// a missing table is exit 3, a corrupt or other-ABI segment exit 4, bad usage exit 2, no addon
// exit 5. The CLI imports the package by name ('waitprep', 'waitprep/layout': dist/): run `npm run build` first.
import { spawnSync } from 'node:child_process';
import { chmodSync, closeSync, existsSync, openSync, readFileSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { artifactKey } from '../../lib/index.js';
import { CLIENT_FIELD, CLIENT_SIZE, CLIENT_STATE, CLIENTS_OFFSET, WP_ABI_VERSION } from '../../lib/lease-table/layout.js';
import { keyFields } from '../fixtures/lease-stress-common.mjs';
import { leaseHolders, type Holder } from '../children.js';
import { NATIVE, runsIf } from '../skip-reasons.js';

const BIN = join(import.meta.dirname, '..', '..', 'bin', 'waitprep.js');
const KEY_A = artifactKey(keyFields(0));
const KEY_B = artifactKey(keyFields(1));
const { tableName, open, startHolder, pinnedByHolder, cleanup } = leaseHolders('wp-cli');
/** Files written by hand into /dev/shm, removed after each test. */
const files: string[] = [];

/** SIGKILLs the holder and waits for it, so its /proc entry is gone. */
async function kill(holder: Holder): Promise<void> {
  holder.child.kill('SIGKILL');
  expect(await holder.exited).toEqual({ code: null, signal: 'SIGKILL' });
  expect(existsSync(`/proc/${holder.pid}`)).toBe(false);
}

/** Runs `node bin/waitprep.js …args` and returns its exit status and output. */
function cli(args: string[], env: NodeJS.ProcessEnv = process.env): { status: number | null; stdout: string; stderr: string } {
  const result = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', env, timeout: 30_000 });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

/** `cli` with `--json`; the parsed object. */
function cliJson(args: string[]): { status: number | null; report: any; stderr: string } {
  const { status, stdout, stderr } = cli([...args, '--json']);
  let report: unknown;
  try {
    report = JSON.parse(stdout);
  } catch {
    throw new Error(`not one JSON object (exit ${status}): ${stdout}\n${stderr}`);
  }
  return { status, report, stderr };
}

/**
 * Writes, through the /dev/shm file, the word a reaper's claim leaves in client entry `index`:
 * the entry's serial kept, REAPING, and `named` in the pid bits (waitprep.h: 1 << 21 | low 15
 * serial bits << 6 | client index, or 0 for an unregistered reaper).
 */
function stageReaping(name: string, index: number, serial: bigint, named: bigint): void {
  const word = Buffer.alloc(8);
  word.writeBigUInt64LE((serial << 24n) | (named << 2n) | BigInt(CLIENT_STATE.REAPING));
  const fd = openSync(`/dev/shm/${name}`, 'r+');
  try {
    expect(writeSync(fd, word, 0, 8, CLIENTS_OFFSET + index * CLIENT_SIZE + CLIENT_FIELD.WORD)).toBe(8);
  } finally {
    closeSync(fd);
  }
}

afterEach(async () => {
  await cleanup();
  for (const file of files.splice(0)) rmSync(file, { force: true });
});

describe.runIf(runsIf('waitprep inspect and reap (native)', NATIVE))('waitprep inspect and reap (native, real processes)', () => {
  it('shows a SIGKILLed consumer as dead with its pins, reaps it, and is healthy after', async () => {
    const { name, producer, holder, index, slot } = await pinnedByHolder();

    // While the holder lives, its pins are a live client's: healthy.
    let run = cliJson(['inspect', name]);
    expect(run.status).toBe(0);
    expect(run.report.clients.find((c: any) => c.index === index)).toMatchObject({ pid: holder.pid, liveness: 'alive' });
    expect(run.report.deadPins).toEqual([]);

    await kill(holder);

    run = cliJson(['inspect', name]);
    expect(run.status, run.stderr).toBe(1);
    const report = run.report;
    expect(report).toMatchObject({
      table: name,
      abiVersion: WP_ABI_VERSION,
      capacity: 64,
      segmentSize: String(256 + 64 * 64 + 64 * 128),
      needsReap: true,
      exitCode: 1,
      slotCounts: { ready: 2, reserved: 0, evicting: 0, free: 62 },
      producer: { client: producer.clientIndex, pid: process.pid, liveness: 'alive' },
    });
    // The inspector's own entry is left out of the report.
    expect(report.inspector.excluded).toBe(true);
    expect(report.clients.map((c: any) => c.index)).not.toContain(report.inspector.clientIndex);
    expect(report.clients.map((c: any) => c.index).sort()).toEqual([index, producer.clientIndex].sort());
    const dead = report.clients.find((c: any) => c.index === index);
    expect(dead).toMatchObject({ pid: holder.pid, state: 'active', liveness: 'dead', producer: false });
    expect(typeof dead.startTime).toBe('string'); // a bigint, as a decimal string
    expect(dead.startTime).toMatch(/^[1-9][0-9]*$/);
    expect(report.deadPins).toEqual([{ slot, client: index, pid: holder.pid }]);
    const pinned = report.slots.find((s: any) => s.slot === slot);
    expect(pinned).toMatchObject({ state: 'ready', generation: '0', digest: KEY_A.hex, digestShort: KEY_A.hex.slice(0, 16) });
    expect(pinned.pinHolders).toEqual([{ client: index, pid: holder.pid, liveness: 'dead' }]);
    expect(report.slots.find((s: any) => s.digest === KEY_B.hex).pinHolders).toEqual([]);

    const human = cli(['inspect', name]);
    expect(human.status).toBe(1);
    expect(human.stdout).toContain(name);
    expect(human.stdout).toContain('dead');
    expect(human.stdout).toContain(`slot ${slot}: client ${index} (pid ${holder.pid}) is dead`);
    expect(human.stdout).toContain(`waitprep reap ${name}`);

    // Inspecting released nothing: the dead client's pin still holds the slot.
    expect(producer.tryEvict(KEY_A)).toBe('pinned');

    run = cliJson(['reap', name]);
    expect(run.status, run.stderr).toBe(0);
    expect(run.report).toMatchObject({ table: name, reaped: 1, clients: [{ index, pid: holder.pid }], pinsReleased: 1, producerReleased: false, deadPinsAfter: 0 });

    run = cliJson(['inspect', name]);
    expect(run.status).toBe(0);
    expect(run.report.needsReap).toBe(false);
    expect(run.report.deadPins).toEqual([]);
    expect(run.report.clients.map((c: any) => c.index)).toEqual([producer.clientIndex]);
    expect(run.report.slots.every((s: any) => s.pinHolders.length === 0)).toBe(true);
    expect(run.report.reapedClientsTotal).toBe('1');
    const healthy = cli(['inspect', name]);
    expect(healthy.status).toBe(0);
    expect(healthy.stdout).toContain('status: healthy');

    // Nothing left to reap, and the slot evicts now.
    expect(cliJson(['reap', name]).report).toMatchObject({ reaped: 0, clients: [], pinsReleased: 0 });
    expect(producer.tryEvict(KEY_A)).toBe('evicted');
    // The CLI processes left no client entry behind.
    expect(producer.inspect().clients.map((c) => c.index)).toEqual([producer.clientIndex]);
  });

  it('shows an entry whose reaper died mid-reap (exit 1); reap takes it over', async () => {
    const { name, producer, holder, index } = await pinnedByHolder();
    await kill(holder);
    // Stage what a reaper leaves when it is killed right after claiming the entry and its own
    // entry is reaped since: the word REAPING, naming a reaper (client 63, serial 1) that no
    // longer holds its entry, and the dead client's pin bits still set.
    const serial = BigInt(producer.inspect().clients.find((c) => c.index === index)!.serial);
    stageReaping(name, index, serial, (1n << 21n) | (1n << 6n) | 63n);

    let run = cliJson(['inspect', name]);
    expect(run.status, run.stderr).toBe(1);
    expect(run.report.clients.find((c: any) => c.index === index)).toMatchObject({ state: 'reaping', reaper: { client: 63, serialLow15: 1 }, reaperPid: null, liveness: 'dead' });
    expect(run.report.deadPins.map((p: any) => p.client)).toEqual([index]);
    const human = cli(['inspect', name]).stdout;
    expect(human).toContain(`client ${index} by client 63, which has left the table (reaper gone)`);
    expect(human).toContain(`client ${index}, whose reaper is gone mid-reap`);
    expect(producer.tryEvict(KEY_A)).toBe('pinned');

    run = cliJson(['reap', name]);
    expect(run.status, run.stderr).toBe(0);
    expect(run.report).toMatchObject({ reaped: 1, pinsReleased: 1, deadPinsAfter: 0 });
    run = cliJson(['inspect', name]);
    expect(run.status).toBe(0);
    expect(run.report.clients.map((c: any) => c.index)).toEqual([producer.clientIndex]);
    expect(producer.tryEvict(KEY_A)).toBe('evicted');
  });

  it('flags a reap whose reaper is gone even without pins (exit 1); an unregistered reaper\'s is unknown', () => {
    const name = tableName();
    const producer = open({ name, role: 'producer', create: { capacity: 8 } });
    const idle = open({ name, role: 'consumer' }); // holds no pin
    const serial = BigInt(producer.inspect().clients.find((c) => c.index === idle.clientIndex)!.serial);
    const stage = (named: bigint) => stageReaping(name, idle.clientIndex, serial, named);
    stage(0n); // an unregistered reaper: never taken over, nothing a reap can do
    let run = cliJson(['inspect', name]);
    expect(run.status).toBe(0);
    expect(run.report.clients.find((c: any) => c.index === idle.clientIndex)).toMatchObject({ state: 'reaping', reaper: 'unregistered', liveness: 'unknown' });
    expect(cli(['inspect', name]).stdout).toContain('by an unregistered reaper (unknown)');
    stage((1n << 21n) | (1n << 6n) | 63n); // named by client 63, which is not there: gone
    run = cliJson(['inspect', name]);
    expect(run.status).toBe(1);
    expect(run.report).toMatchObject({ needsReap: true, deadPins: [] });
    expect(cli(['inspect', name]).stdout).toContain('a reap whose reaper is gone');
    expect(cliJson(['reap', name]).report).toMatchObject({ reaped: 1 });
    expect(cliJson(['inspect', name]).status).toBe(0);
  });

  it('shows a SIGKILLed producer as dead (exit 1); reap frees the role and abandons its reservation', async () => {
    const name = tableName();
    const creator = open({ name, role: 'producer', create: { capacity: 16 } });
    creator.close();
    const consumer = open({ name, role: 'consumer' });

    const holder = startHolder(name, 'producer', 0);
    const said = await holder.message;
    expect(said).toMatchObject({ event: 'reserved', pid: holder.pid });
    await kill(holder);

    let run = cliJson(['inspect', name]);
    expect(run.status).toBe(1);
    expect(run.report.producer).toEqual({ client: said.clientIndex, pid: holder.pid, liveness: 'dead' });
    expect(run.report.deadPins).toEqual([]);
    expect(run.report.slotCounts).toMatchObject({ reserved: 1 });
    expect(cli(['inspect', name]).stdout).toContain(`the producer (pid ${holder.pid}) is dead`);

    run = cliJson(['reap', name]);
    expect(run.status).toBe(0);
    expect(run.report).toMatchObject({
      reaped: 1,
      clients: [{ index: said.clientIndex, pid: holder.pid, producer: true }],
      producerReleased: true,
      slotCountsBefore: { reserved: 1 },
      slotCountsAfter: { reserved: 0 },
    });

    run = cliJson(['inspect', name]);
    expect(run.status).toBe(0);
    expect(run.report.producer).toBeNull();
    expect(run.report.clients.map((c: any) => c.index)).toEqual([consumer.clientIndex]);
    expect(cli(['inspect', name]).stdout).toContain('producer: none');
  });

  it('exits 3 for a missing table', () => {
    const name = tableName(); // never created
    for (const command of ['inspect', 'reap']) {
      const run = cliJson([command, name]);
      expect(run.status).toBe(3);
      expect(run.report).toMatchObject({ table: name, error: { code: 'ERR_TABLE_NOT_FOUND' }, exitCode: 3 });
      const human = cli([command, name]);
      expect(human.status).toBe(3);
      expect(human.stderr).toContain(name);
    }
  });

  it('refuses a table file others may write (exit 5, naming owner and mode) unless told to trust it', () => {
    const name = tableName();
    open({ name, role: 'producer', create: { capacity: 8 } });
    chmodSync(`/dev/shm/${name}`, 0o660);
    for (const command of ['inspect', 'reap']) {
      const refused = cliJson([command, name]);
      expect(refused.status).toBe(5);
      expect(refused.report.error.code).toBe('ERR_UNTRUSTED_SEGMENT');
      expect(refused.report.error.message).toContain('with mode 0o660');
      expect(refused.report.error.message).toContain(`waitprep ${command} ${name} --trust-uid <owner uid> [--trust-group-writable]`);
      expect(cliJson([command, name, '--trust-group-writable']).status).toBe(0);
      expect(cliJson([command, name, '--trust-group-writable', '--trust-uid', String(process.geteuid!())]).status).toBe(0);
      const bad = cli([command, name, '--trust-uid', 'root']);
      expect(bad.status).toBe(2);
      expect(bad.stderr).toContain('--trust-uid must be a uid from 0 to 4294967295, got "root"');
    }
  });

  it('refuses a corrupt segment with exit 4 and leaves it untouched', () => {
    const name = tableName();
    const path = `/dev/shm/${name}`;
    files.push(path);
    const garbage = Buffer.alloc(64 * 1024, 'not a lease table ');
    writeFileSync(path, garbage, { mode: 0o600 });
    for (const command of ['inspect', 'reap']) {
      const run = cli([command, name]);
      expect(run.status).toBe(4);
      expect(run.stderr).toContain('ERR_BAD_SEGMENT');
      expect(run.stderr).toMatch(/corrupt/);
      expect(run.stdout).toBe('');
      expect(cliJson([command, name]).report).toMatchObject({ error: { code: 'ERR_BAD_SEGMENT' }, exitCode: 4 });
    }
    expect(readFileSync(path).equals(garbage)).toBe(true);
  });

  it('refuses a table of another ABI version with exit 4 and says which version', () => {
    const source = tableName();
    open({ name: source, role: 'producer', create: { capacity: 8 } }).close();
    const bytes = readFileSync(`/dev/shm/${source}`);
    bytes.writeUInt32LE(1, 8); // the header's ABI version: 1, the one before this
    const name = tableName();
    const path = `/dev/shm/${name}`;
    files.push(path);
    writeFileSync(path, bytes, { mode: 0o600 });
    const run = cli(['inspect', name]);
    expect(run.status).toBe(4);
    expect(run.stderr).toContain('ERR_BAD_SEGMENT');
    expect(run.stderr).toContain('ABI version 1;');
  });
});

describe('waitprep inspect and reap: usage and a missing addon', () => {
  it('exits 2 on bad usage', () => {
    for (const command of ['inspect', 'reap']) {
      for (const args of [[], ['--json'], ['a', 'b'], ['a', '--all'], ['.hidden'], ['no/slash']]) {
        const run = cli([command, ...args]);
        expect(run.status, `${command} ${args.join(' ')}: ${run.stderr}`).toBe(2);
        expect(run.stderr).toContain(`usage: waitprep ${command} <table> [--json]`);
      }
    }
    expect(cliJson(['inspect']).report).toMatchObject({ error: { code: 'ERR_USAGE' }, exitCode: 2 });
  });

  it('exits 5 with a clear message when the native addon is not loaded', () => {
    const run = cli(['inspect', 'any-table'], { ...process.env, WAITPREP_IMPLEMENTATION: 'js' });
    expect(run.status).toBe(5);
    expect(run.stderr).toContain('native addon is not loaded');
  });

  it('documents the exit codes in `waitprep help`', () => {
    const { status, stdout } = cli(['help']);
    expect(status).toBe(0);
    for (const line of [/^ {2}inspect <table> \[--json\]/m, /^ {2}reap <table> \[--json\]/m, /^ {2}0 {2}healthy/m, /^ {2}1 {2}pins held by dead clients/m, /^ {2}2 {2}usage/m, /^ {2}3 {2}no such table/m, /^ {2}4 {2}.*ERR_BAD_SEGMENT/m, /^ {2}5 {2}/m]) {
      expect(stdout).toMatch(line);
    }
  });
});
