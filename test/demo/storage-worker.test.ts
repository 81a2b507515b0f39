// The demo's storage worker (bin/storage-worker.js, its logic in worker/storage.js): the lease table's single producer in its own
// process. Budget eviction skips pinned artifacts (LRU among the rest), and the metadata it
// publishes names an arena record (docs/arena-records.md) that belongs to the key, found from the
// table's name and the lease alone. Needs the built dist/ (the worker imports it).
import { fork, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { chmodSync, chownSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, symlinkSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ARENA_RECORD_HEADER_BYTES, arenaDirectory, artifactKey, openLeaseTable, readArenaRecord, splitLocation, unlinkLeaseTable, type ArtifactKey, type LeaseTable } from '../../lib/index.js';
// @ts-ignore -- plain JavaScript module without type declarations
import { SOCKET_LIMITS, arenaFile, checksumOf, startStorage, syntheticSource, validateSafetensors } from '../../worker/storage.js';
// @ts-ignore -- plain JavaScript module without type declarations
import { admitWait, demoCoordinator } from '../../demo/run.js';
// @ts-ignore -- plain JavaScript module without type declarations
import { requestLines } from '../../demo/prepare-worker.js';
// The demo's modules import the package by name (dist/): their coordinator accepts only that
// module's tables and keys, so the eviction tests build theirs from it too.
import * as pkg from 'waitprep';
import { NATIVE, runsIf } from '../skip-reasons.js';

const WORKER = join(import.meta.dirname, '..', '..', 'bin', 'storage-worker.js');
const TOKENS = 4_000;
/** The refusal of a line over SOCKET_LIMITS.MAX_LINE_BYTES. */
const TOO_LONG = `request line longer than ${SOCKET_LIMITS.MAX_LINE_BYTES} bytes (a longer keyBytes is sent in parts, lines with more: true); connection closed`;

/** A key, and its wire form as the worker's protocol carries it (the canonical bytes in base64). */
function keyOf(i: number): { key: ArtifactKey; keyBytes: string } {
  return keyMadeBy(artifactKey, i);
}

/** keyOf's key, made by `make` (this file's artifactKey or the package's). */
function keyMadeBy(make: (spec: any) => ArtifactKey, i: number, tokens = TOKENS): { key: ArtifactKey; keyBytes: string } {
  const tokenLayout = Array.from({ length: tokens }, (_, t) => (t * 31 + i * 7) % 128_000);
  const source = { snapshotKind: 'kv-page', runtime: 'test', model: 'test-model', adapter: 'none', profile: 'bf16', positionPolicy: 'absolute', task: `t${i}`, namespace: 'storage-worker-test', tokenLayout, extra: {} };
  const key = make({ source, sourcePageGeneration: 0, codec: 'none', codecConfig: 'none', representationVersion: 1 });
  return { key, keyBytes: Buffer.from(key.toBytes()).toString('base64') };
}

describe('synthetic safetensors source', () => {
  it('validates its own geometry and rejects a tensor whose shape disagrees with its offsets', () => {
    const source: Buffer = syntheticSource('ab'.repeat(32), TOKENS);
    expect(validateSafetensors(source).tensors).toBe(4);
    const headerLength = Number(source.readBigUInt64LE(0));
    const header = JSON.parse(source.subarray(8, 8 + headerLength).toString('utf8'));
    header['layers.0.k'].shape = [1, 64];
    const json = Buffer.from(JSON.stringify(header));
    const bad = Buffer.alloc(8 + json.length + source.length - 8 - headerLength);
    bad.writeBigUInt64LE(BigInt(json.length), 0);
    json.copy(bad, 8);
    source.copy(bad, 8 + json.length, 8 + headerLength);
    expect(() => validateSafetensors(bad)).toThrow(/shape needs/);
    expect(() => validateSafetensors(source.subarray(0, 4))).toThrow(/header length/);
  });
});

/** A storage request (the socket protocol's { keyHex, keyBytes }) answered by the demo's storage logic. */
type Handle = (message: { keyHex: string; keyBytes: string }) => Promise<any>;

/**
 * The demo's orchestration, one turn at a time, against its real storage logic under a budget
 * that holds two artifacts: each turn admits its waits through the demo's own admitWait, has the
 * storage logic prepare every unit the coordinator issues, then wakes each wait. Four keys are
 * visited twice, in order, so every visit of the second round finds its artifact evicted (LRU),
 * the first key by two agents at once; then one more wait for a key still resident.
 */
async function evictionRounds(table: pkg.LeaseTable, handle: Handle) {
  const coordinator = demoCoordinator(table);
  const grant = { worker: 'prep-0', grant: 'test-grant' };
  const keys = [20, 21, 22, 23].map((i) => keyMadeBy(pkg.artifactKey as any, i));
  const wire = new Map(keys.map((k) => [k.key.hex, k.keyBytes]));
  let agent = 0;
  const turn = async (key: ArtifactKey, agents = 1) => {
    const admitted = Array.from({ length: agents }, () => admitWait(coordinator, table, { engine: 'engine-0', request: `agent-${agent++}`, generation: 0 }, key));
    for (let unit = coordinator.beginNext(grant); unit !== null; unit = coordinator.beginNext(grant)) {
      const reply = await handle({ keyHex: unit.key.hex, keyBytes: wire.get(unit.key.hex)! });
      expect(reply).toMatchObject({ ok: true });
      coordinator.complete(unit, { ok: true });
    }
    return admitted.map(({ admission, forgot }: { admission: { status: string; ticket: string }; forgot: boolean }) => {
      const woke = coordinator.onWake(admission.ticket);
      if (woke.kind === 'hit') woke.lease.close();
      return { status: admission.status, forgot, woke: woke.kind === 'hit' ? 'hit' : woke.reason };
    });
  };
  const first = [];
  for (const k of keys) first.push(...(await turn(k.key)));
  const second = [...(await turn(keys[0]!.key, 2))];
  for (const k of keys.slice(1)) second.push(...(await turn(k.key)));
  const resident = await turn(keys[3]!.key);
  return { first, second, resident, stats: coordinator.stats() };
}

/** What evictionRounds must give: after an eviction a wait for the key queues again (never 'completed') and hits. */
function expectRequeuedAfterEviction({ first, second, resident, stats }: Awaited<ReturnType<typeof evictionRounds>>, storage: { evicted: number; alreadyReady: number }): void {
  expect(first).toEqual(Array(4).fill({ status: 'queued', forgot: false, woke: 'hit' }));
  // Round two: every key was evicted. Its history is forgotten once (the second agent on the
  // first key joins the unit the first one queued: forget is refused while a unit is queued).
  expect(second).toEqual([
    { status: 'queued', forgot: true, woke: 'hit' },
    { status: 'joined', forgot: false, woke: 'hit' },
    ...Array(3).fill({ status: 'queued', forgot: true, woke: 'hit' }),
  ]);
  expect(second.filter((w) => w.status === 'completed')).toHaveLength(0);
  // A key still resident keeps its history: told 'completed', and it hits.
  expect(resident).toEqual([{ status: 'completed', forgot: false, woke: 'hit' }]);
  expect(stats.waitsByStatus).toMatchObject({ queued: 8, joined: 1, completed: 1 });
  expect(stats.hits).toBe(10);
  expect(stats.issued).toBe(8);
  // Two evictions in round one, four in round two; nothing was prepared twice while resident.
  expect(storage.evicted).toBe(6);
  expect(storage.alreadyReady).toBe(0);
}

describe("the demo's eviction fix (demo/run.js admitWait)", () => {
  it("in process (the JavaScript fallback's storage): a wait for an evicted key queues again instead of being told completed", async () => {
    const name = `wp-evict-test-${process.pid}-${Date.now()}`;
    const arenaDir = `/dev/shm/${name}-arena`;
    const producer = pkg.openLeaseTable({ name, role: 'producer', implementation: 'js', create: { capacity: 256 } });
    const consumer = pkg.openLeaseTable({ name, role: 'consumer', implementation: 'js', buffer: producer.sharedBuffer });
    const size = syntheticSource('00'.repeat(32), TOKENS).length;
    const storage = startStorage({ table: producer, arenaDir, budgetBytes: Math.floor(2.5 * size) });
    try {
      const rounds = await evictionRounds(consumer, async (message) => storage.handle(message));
      expectRequeuedAfterEviction(rounds, storage.stats());
    } finally {
      storage.close();
      consumer.close();
      producer.close();
      rmSync(arenaDir, { recursive: true, force: true });
    }
  });
});

/** A field of /proc/<pid>/status in KiB (VmRSS: resident now; VmHWM: the most it has been resident). */
function procStatusKiB(pid: number, field: 'VmRSS' | 'VmHWM'): number {
  const match = new RegExp(`^${field}:\\s+(\\d+) kB$`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (match === null) throw new Error(`no ${field} in /proc/${pid}/status`);
  return Number(match[1]);
}

/**
 * A raw client of the worker's socket: the reply lines it received (or only their count, when
 * `keep` is false), its first line, and when it closed. Write errors are expected: the worker
 * closes a connection it refuses while this side may still be writing.
 */
function rawClient(socketPath: string, { keep = true } = {}) {
  const socket = connect(socketPath);
  const lines: string[] = [];
  const waiters: Array<{ n: number; resolve: () => void }> = [];
  let partial = '';
  const client = {
    socket, lines, count: 0,
    connected: once(socket, 'connect'),
    closed: new Promise<void>((resolve) => socket.once('close', () => resolve())),
    firstLine: null as unknown as Promise<string>,
    lineCount: (n: number) => new Promise<void>((resolve, reject) => {
      if (client.count >= n) return resolve();
      waiters.push({ n, resolve });
      socket.once('close', () => reject(new Error(`closed after ${client.count} of ${n} lines`)));
    }),
  };
  client.firstLine = client.lineCount(1).then(() => lines[0]!);
  client.firstLine.catch(() => {});
  socket.on('error', () => {});
  socket.setEncoding('utf8').on('data', (chunk: string) => {
    const parts = (partial + chunk).split('\n');
    partial = parts.pop()!;
    client.count += parts.length;
    if (keep) lines.push(...parts);
    else if (lines.length === 0 && parts.length > 0) lines.push(parts[0]!);
    for (const w of waiters.splice(0)) (client.count >= w.n ? w.resolve() : waiters.push(w));
  });
  return client;
}

describe("the storage worker's eviction order (a planner's eviction values)", () => {
  it('evicts lowest value first, least recently used among equals, never one worth as much as the new artifact; without values, plain LRU', async () => {
    const name = `wp-order-test-${process.pid}-${Date.now()}`;
    const arenaDir = `/dev/shm/${name}-arena`;
    const producer = pkg.openLeaseTable({ name, role: 'producer', implementation: 'js', create: { capacity: 256 } });
    const size = syntheticSource('00'.repeat(32), TOKENS).length;
    const storage = startStorage({ table: producer, arenaDir, budgetBytes: Math.floor(3.5 * size) });
    const keys = [0, 1, 2, 3, 4, 5].map((i) => keyMadeBy(pkg.artifactKey, 100 + i));
    const prepare = (i: number) => storage.handle({ id: `p${i}`, keyHex: keys[i]!.key.hex, keyBytes: keys[i]!.keyBytes });
    const resident = (i: number) => producer.peek(keys[i]!.key).kind !== 'miss';
    try {
      for (const i of [0, 1, 2]) expect(prepare(i).ok).toBe(true);
      // 0 is wanted by an admitted pause (1.5), 1 by no open pause (none sent: -1), 2 by an unadmitted one (0.4).
      const hex = (i: number) => keys[i]!.key.hex;
      expect(storage.handle({ op: 'eviction-values', values: [[hex(0), 1.5], [hex(2), 0.4], [hex(3), 1.2], [hex(4), 0.2], ['bad', Number.NaN]] })).toEqual({ ok: true, values: 4 });
      // LRU would evict 0; the order evicts 1.
      expect(prepare(3).ok).toBe(true);
      expect([0, 1, 2, 3].map(resident)).toEqual([true, false, true, true]);
      // 4 (0.2) is worth less than every resident artifact: refused, nothing evicted.
      const refused = prepare(4);
      expect(refused.ok).toBe(false);
      expect(refused.error).toMatch(/worth as much/);
      expect([0, 2, 3].map(resident)).toEqual([true, true, true]);
      // Values cleared: least recently used first again (0 is the oldest).
      expect(storage.handle({ op: 'eviction-values', values: [] })).toEqual({ ok: true, values: 0 });
      expect(prepare(5).ok).toBe(true);
      expect([0, 2, 3, 5].map(resident)).toEqual([false, true, true, true]);
      expect(storage.stats()).toMatchObject({ valueUpdates: 2, prepared: 5, failed: 1 });
      expect(storage.handle({ op: 'eviction-values', values: 'x' }).ok).toBe(false);
    } finally {
      storage.close();
      producer.close();
      rmSync(arenaDir, { recursive: true, force: true });
    }
  });
});

describe.runIf(runsIf('storage worker process (native)', NATIVE))('storage worker process (native lease table)', () => {
  let child: ChildProcess | null = null;
  let table: LeaseTable | null = null;
  let name = '';

  afterEach(async () => {
    table?.close();
    table = null;
    if (child !== null && child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      await once(child, 'exit');
    }
    child = null;
    try {
      unlinkLeaseTable(name);
    } catch {
      // gone already
    }
    if (name !== '') {
      rmSync(`/dev/shm/${name}-arena`, { recursive: true, force: true });
      rmSync(join(tmpdir(), `${name}.sock`), { force: true });
    }
  });

  /**
   * Starts the worker as the demo does, and a `send` that makes one socket request of one line and
   * reads its reply (`sendLines`: of the lines given).
   */
  async function start(budgetBytes: number, tableName = `wp-storage-test-${process.pid}-${Date.now()}`): Promise<{ arena: string; send: (message: object) => Promise<any>; sendLines: (text: string) => Promise<any> }> {
    name = tableName;
    const arena = `/dev/shm/${name}-arena`;
    const socketPath = join(tmpdir(), `${name}.sock`);
    const proc = fork(WORKER, ['--table', name, '--arena', arena, '--socket', socketPath, '--budget', String(budgetBytes), '--capacity', '256'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    child = proc;
    const [ready] = await once(proc, 'message');
    expect(ready).toMatchObject({ type: 'ready', implementation: 'native', socket: socketPath });
    let next = 0;
    const send = (message: object): Promise<any> => sendLines(JSON.stringify({ ...message, id: `r${next++}` }) + '\n');
    const sendLines = async (text: string): Promise<any> => {
      const socket = connect(socketPath);
      socket.setEncoding('utf8');
      await once(socket, 'connect');
      socket.write(text);
      let buffered = '';
      for await (const chunk of socket) {
        buffered += chunk;
        if (buffered.includes('\n')) break;
      }
      socket.destroy();
      return JSON.parse(buffered.slice(0, buffered.indexOf('\n')));
    };
    return { arena, send, sendLines };
  }

  /** Asks the worker to exit as the demo does: its 'bye' carries the stats, then it exits 0. */
  async function stop(): Promise<{ code: number | null; stats: any }> {
    const proc = child!;
    const bye = once(proc, 'message');
    const exited = once(proc, 'exit');
    proc.send({ type: 'exit' });
    const [[message], [code]] = await Promise.all([bye, exited]);
    expect(message).toMatchObject({ type: 'bye' });
    return { code, stats: message.stats };
  }

  const prepare = (send: (m: object) => Promise<any>, k: { key: ArtifactKey; keyBytes: string }): Promise<any> =>
    send({ keyHex: k.key.hex, keyBytes: k.keyBytes });

  it('evicts LRU unpinned artifacts under its budget, never a pinned one, and refuses when only pinned ones are left', async () => {
    const size = syntheticSource('00'.repeat(32), TOKENS).length;
    const { arena, send } = await start(Math.floor(3.5 * size));
    table = openLeaseTable({ name, role: 'consumer', implementation: 'native' });
    const keys = [0, 1, 2, 3, 4, 5].map(keyOf);
    for (const k of keys.slice(0, 3)) expect(await prepare(send, k)).toMatchObject({ ok: true, sizeBytes: size });

    // Pin the oldest from this process, then push the worker over budget twice.
    const pinned = table.tryPin(keys[0]!.key);
    expect(pinned.kind).toBe('lease');
    // Note where k1 lives, and release that pin at once so k1 stays evictable.
    const k1 = table.tryPin(keys[1]!.key);
    if (k1.kind !== 'lease') throw new Error(`expected a hit on k1, got ${k1.reason}`);
    const k1Meta = k1.meta;
    k1.close();
    expect(await prepare(send, keys[3]!)).toMatchObject({ ok: true });
    expect(await prepare(send, keys[4]!)).toMatchObject({ ok: true });

    // k0 is still READY and pinned by us; k1 and k2 (the least recently used unpinned) are gone.
    const slots = table.inspect().slots;
    const slot0 = slots.find((slot) => slot.digestHex === keys[0]!.key.hex);
    expect(slot0?.state).toBe('ready');
    expect(slot0?.pinHolders).toContain(table.clientIndex);
    expect(table.tryPin(keys[1]!.key)).toMatchObject({ kind: 'miss', reason: 'absent' });
    expect(table.tryPin(keys[2]!.key)).toMatchObject({ kind: 'miss', reason: 'absent' });
    // k1's arena index went back to the free list and k3 took it: k1's old location now holds a
    // record for another key, and a reader holding that stale location is told so, never handed it.
    expect(existsSync(arenaFile(arena, k1Meta.location))).toBe(true);
    expect(readArenaRecord({ tableName: name, key: keys[1]!.key, meta: k1Meta })).toMatchObject({ kind: 'mismatch', reason: 'wrong-key' });
    const k3 = table.tryPin(keys[3]!.key);
    if (k3.kind !== 'lease') throw new Error(`expected a hit on k3, got ${k3.reason}`);
    expect(k3.meta.location).toBe(k1Meta.location);
    k3.close();
    // What is resident fits the budget: k0, k3 and k4, one file each.
    const resident = readdirSync(arena).map((file) => statSync(join(arena, file)).size);
    expect(resident).toHaveLength(3);
    expect(resident.reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(Math.floor(3.5 * size));

    // Pin everything resident: the next artifact cannot fit, so it is refused and left absent.
    const more = [keys[3]!, keys[4]!].map((k) => table!.tryPin(k.key));
    expect(more.every((lease) => lease.kind === 'lease')).toBe(true);
    const refused = await prepare(send, keys[5]!);
    expect(refused.ok).toBe(false);
    expect(refused.error).toMatch(/over budget/);
    expect(table.tryPin(keys[5]!.key)).toMatchObject({ kind: 'miss', reason: 'absent' });
    expect(table.inspect().slots.find((slot) => slot.digestHex === keys[0]!.key.hex)?.state).toBe('ready');

    for (const lease of [pinned, ...more]) if (lease.kind === 'lease') lease.close();
    // Unpinned now: the next one fits again by evicting one (k0, the least recently used).
    expect(await prepare(send, keys[5]!)).toMatchObject({ ok: true });
    expect(table.tryPin(keys[0]!.key)).toMatchObject({ kind: 'miss', reason: 'absent' });
    // k1 and k2, then k0: three evictions; k0 was skipped while pinned, on each of the pushes.
    const { code, stats } = await stop();
    expect(code).toBe(0);
    expect(stats.evicted).toBe(3);
    expect(stats.pinnedSkips).toBeGreaterThanOrEqual(2);
    expect(stats.usedBytes).toBeLessThanOrEqual(Math.floor(3.5 * size));
  });

  it("with the demo's admission, a wait for a key the worker process evicted queues again instead of being told completed", async () => {
    const size = syntheticSource('00'.repeat(32), TOKENS).length;
    const { send } = await start(Math.floor(2.5 * size));
    table = pkg.openLeaseTable({ name, role: 'consumer', implementation: 'native' }) as any;
    const rounds = await evictionRounds(table, send);
    const { code, stats } = await stop();
    expect(code).toBe(0);
    expectRequeuedAfterEviction(rounds, stats);
  });

  it('publishes metadata naming an arena record that belongs to the key: size, checksum, codec none', async () => {
    const { arena, send } = await start(64 << 20);
    expect(arena).toBe(arenaDirectory(name));
    table = openLeaseTable({ name, role: 'consumer', implementation: 'native' });
    const arenas = new Set<number>();
    for (const i of [10, 11, 12]) {
      const k = keyOf(i);
      const reply = await prepare(send, k);
      expect(reply.ok).toBe(true);
      const lease = table.tryPin(k.key);
      if (lease.kind !== 'lease') throw new Error(`expected a hit, got ${lease.reason}`);
      const meta = lease.meta;
      // Found from the table's name and the lease alone, by the arena naming rule.
      const record = readArenaRecord({ tableName: name, key: k.key, meta });
      if (record.kind !== 'record') throw new Error(`expected the record, got ${record.reason}: ${record.message}`);
      const { arena: index, offset } = splitLocation(meta.location);
      arenas.add(index);
      expect(offset).toBe(0n);
      expect(record.header).toMatchObject({ digestHex: k.key.hex, tokenCount: BigInt(TOKENS), format: 'safetensors' });
      expect(BigInt(meta.checksum)).toBe(checksumOf(record.payload));
      expect(Number(meta.sizeBytes)).toBe(record.payload.length);
      expect(readFileSync(arenaFile(arena, meta.location)).length).toBe(ARENA_RECORD_HEADER_BYTES + record.payload.length);
      expect(meta.codecId).toBe(0);
      expect(meta.representationVersion).toBe(1);
      // The payload is the deterministic source, validated: nothing was compressed.
      expect(record.payload.equals(syntheticSource(k.key.hex, TOKENS))).toBe(true);
      expect(validateSafetensors(record.payload).tensors).toBe(4);
      lease.close();
    }
    expect(arenas.size).toBe(3);
    // A key whose bytes do not hash to the hex it names is refused, and so are bytes that are not a key.
    const k = keyOf(13);
    expect(await send({ keyHex: '0'.repeat(64), keyBytes: k.keyBytes })).toMatchObject({ ok: false, error: expect.stringMatching(/hash to/) });
    const cut = Buffer.from(k.keyBytes, 'base64').subarray(0, 100).toString('base64');
    expect(await send({ keyHex: k.key.hex, keyBytes: cut })).toMatchObject({ ok: false, error: expect.stringMatching(/^ERR_INVALID_KEY: .*truncated/) });
    expect(await send({ keyHex: k.key.hex })).toMatchObject({ ok: false, error: expect.stringMatching(/no keyBytes/) });
    expect(table.tryPin(k.key)).toMatchObject({ kind: 'miss', reason: 'absent' });

    // 'exit' removes the arena and the table, exit code 0.
    const { code } = await stop();
    expect(code).toBe(0);
    expect(existsSync(arena)).toBe(false);
    expect(existsSync(`/dev/shm/${name}`)).toBe(false);
  });

  it('bounds its socket: a 48 MiB line, parts held open, 200 connections, one-byte writes, garbage and unread replies leave it serving, under 256 MiB more RSS', async () => {
    const { send, sendLines } = await start(64 << 20);
    const socketPath = join(tmpdir(), `${name}.sock`);
    const pid = child!.pid!;
    table = openLeaseTable({ name, role: 'consumer', implementation: 'native' });
    const published = [30, 31, 32].map(keyOf);
    for (const k of published) expect(await prepare(send, k)).toMatchObject({ ok: true });
    const base = procStatusKiB(pid, 'VmRSS');

    // A request the size the demo sends (a 200,000-token context: about 1 MiB of keyBytes), in
    // the demo's parts, is served.
    const long = keyMadeBy(artifactKey, 36, 200_000);
    expect(long.keyBytes.length).toBeGreaterThan(1 << 20);
    expect(await sendLines(requestLines('long', long.key.hex, long.keyBytes))).toMatchObject({ id: 'long', ok: true });

    // One 48 MiB line without a newline: one refusal naming the limit, then the connection closes.
    const big = rawClient(socketPath);
    await big.connected;
    big.socket.write(Buffer.alloc(48 << 20, 0x61));
    await big.closed;
    expect(big.lines).toHaveLength(1);
    expect(JSON.parse(big.lines[0]!)).toEqual({ ok: false, error: TOO_LONG });

    // Twelve connections each holding 6 MiB of a request's parts, none its last: past what the
    // worker holds unanswered over all connections, the one that would go over is refused.
    const unansweredRefusal = { ok: false, error: `the storage worker holds ${SOCKET_LIMITS.MAX_UNANSWERED_BYTES} bytes of unanswered requests, its most; connection closed` };
    const partsOf = (id: string, bytes: number): string => requestLines(id, '0'.repeat(64), 'A'.repeat(bytes)).split('\n').slice(0, -2).join('\n') + '\n';
    const holders = Array.from({ length: 12 }, () => rawClient(socketPath));
    await Promise.all(holders.map((c) => c.connected));
    // Each holds all but the last 48 KiB part of 6 MiB of keyBytes.
    expect(12 * ((6 << 20) - (48 << 10))).toBeGreaterThan(SOCKET_LIMITS.MAX_UNANSWERED_BYTES);
    holders.forEach((c, i) => c.socket.write(partsOf(`held-${i}`, 6 << 20)));
    await Promise.any(holders.map((c) => c.firstLine));
    const overflowed = holders.filter((c) => c.lines.length > 0);
    for (const c of overflowed) expect(c.lines.map((line) => JSON.parse(line))).toEqual([unansweredRefusal]);
    for (const c of holders) c.socket.destroy();
    await Promise.all(holders.map((c) => c.closed));

    // Their parts were let go when they closed: ten connections can then hold 6 MiB of parts each
    // at once (60 MiB, room left only if nothing is still held). Once their parts are written
    // (and read, but for what the socket buffers), each sends a part that is not base64: each is
    // refused for that, none for the bytes held.
    const again = Array.from({ length: 10 }, () => rawClient(socketPath));
    await Promise.all(again.map((c) => c.connected));
    await Promise.all(again.map((c, i) => new Promise((resolve) => c.socket.write(partsOf(`again-${i}`, 6 << 20), resolve))));
    again.forEach((c, i) => c.socket.write(JSON.stringify({ id: `again-${i}`, keyHex: '0'.repeat(64), keyBytes: '!', more: true }) + '\n'));
    const answers = await Promise.all(again.map((c) => c.firstLine.then((line) => JSON.parse(line))));
    expect(answers).toEqual(again.map((_, i) => ({ id: `again-${i}`, ok: false, error: 'a part of a request has no keyBytes (a string of base64); connection closed' })));
    for (const c of again) c.socket.destroy();
    await Promise.all(again.map((c) => c.closed));

    // 200 connections at once: 64 are served; every other one is closed, told why while there
    // is room for refusals (as many as are served), unanswered past that.
    const many = Array.from({ length: 200 }, () => rawClient(socketPath));
    await new Promise<void>((resolve) => {
      let closed = 0;
      for (const c of many) void c.closed.then(() => ++closed === 200 - 64 && resolve());
    });
    const closed = many.filter((c) => c.socket.destroyed);
    const told = closed.filter((c) => c.lines.length > 0);
    expect(closed).toHaveLength(200 - 64);
    expect(told.length).toBeGreaterThanOrEqual(64);
    for (const c of told) expect(c.lines.map((line) => JSON.parse(line))).toMatchObject([{ ok: false, error: expect.stringMatching(/^too many connections/) }]);
    const open = many.filter((c) => !c.socket.destroyed);
    for (const c of open) expect(c.lines).toEqual([]);
    // While 64 are open, the next connection is refused too; once they close, requests are served.
    const ask = async (request: object): Promise<any> => {
      const c = rawClient(socketPath);
      await c.connected;
      c.socket.write(JSON.stringify(request) + '\n');
      const reply = JSON.parse(await c.firstLine);
      c.socket.destroy();
      return reply;
    };
    expect(await ask({})).toMatchObject({ ok: false, error: expect.stringMatching(/^too many connections/) });
    for (const c of open) c.socket.destroy();
    await Promise.all(open.map((c) => c.closed));
    let reply = await ask({});
    for (let tries = 0; tries < 100 && /^too many connections/.test(reply.error); tries++) {
      await new Promise((resolve) => setTimeout(resolve, 20)); // the worker sees the closes on its next turns
      reply = await ask({});
    }
    expect(reply).toMatchObject({ ok: false, error: expect.stringMatching(/no keyBytes/) });

    // A request written one byte at a time is served.
    const k33 = keyOf(33);
    const slow = rawClient(socketPath);
    await slow.connected;
    for (const byte of Buffer.from(JSON.stringify({ id: 'slow', keyHex: k33.key.hex, keyBytes: k33.keyBytes }) + '\n')) {
      slow.socket.write(Buffer.of(byte));
      await new Promise(setImmediate);
    }
    expect(JSON.parse(await slow.firstLine)).toMatchObject({ id: 'slow', ok: true });
    slow.socket.destroy();

    // 400 garbage lines, each answered { ok: false }, then a request on the same connection is served.
    const garbage = rawClient(socketPath);
    await garbage.connected;
    const junk = ['{', 'null', '42', '[]', '"text"', '{"keyHex":1}', '{"keyBytes":"!!!"}', '{"__proto__":{"ok":true}}', '\u0000\u00ff', ''];
    for (let i = 0; i < 400; i++) garbage.socket.write(i % 10 === 9 ? Buffer.concat([randomBytes(64).map((b) => (b === 10 ? 11 : b)), Buffer.of(10)]) : junk[i % 10] + '\n');
    const k34 = keyOf(34);
    garbage.socket.write(JSON.stringify({ id: 'after', keyHex: k34.key.hex, keyBytes: k34.keyBytes }) + '\n');
    await garbage.lineCount(401);
    expect(garbage.lines.slice(0, 400).map((line) => JSON.parse(line).ok)).toEqual(Array(400).fill(false));
    expect(JSON.parse(garbage.lines[400]!)).toMatchObject({ id: 'after', ok: true });
    garbage.socket.destroy();

    // 256 MiB of requests whose replies echo 64,000-byte ids, from a client that reads nothing
    // until another connection has been served: the worker stops reading while its replies wait.
    const id = 'i'.repeat(64_000);
    const line = Buffer.from(JSON.stringify({ id }) + '\n');
    const lines = Math.floor((256 << 20) / line.length);
    const flood = rawClient(socketPath, { keep: false });
    await flood.connected;
    flood.socket.pause();
    flood.socket.write(Buffer.concat(Array(lines).fill(line)));
    expect(await prepare(send, keyOf(35))).toMatchObject({ ok: true });
    flood.socket.resume();
    await flood.lineCount(lines);
    expect(flood.count).toBe(lines);
    flood.socket.destroy();

    // Still serving, and every artifact it published before is still there, record and all.
    expect(child!.exitCode).toBeNull();
    for (const k of [...published, long, k33, k34]) {
      const lease = table.tryPin(k.key);
      if (lease.kind !== 'lease') throw new Error(`expected a hit, got ${lease.reason}`);
      expect(readArenaRecord({ tableName: name, key: k.key, meta: lease.meta }).kind).toBe('record');
      lease.close();
    }
    const grown = procStatusKiB(pid, 'VmHWM') - base;
    expect(grown).toBeLessThan(256 * 1024);
    const { code, stats } = await stop();
    expect(code).toBe(0);
    expect(stats.prepared).toBe(7);
  });

  it("takes a key's bytes in parts: a 1 MiB key is served; a 65 KiB line, parts past MAX_REQUEST_BYTES, a line of another request before the last part, a part without base64 are refused, the connection closed", async () => {
    const { sendLines } = await start(64 << 20);
    const socketPath = join(tmpdir(), `${name}.sock`);
    table = openLeaseTable({ name, role: 'consumer', implementation: 'native' });
    const { MAX_LINE_BYTES, MAX_REQUEST_BYTES } = SOCKET_LIMITS;
    expect(MAX_LINE_BYTES).toBe(64 << 10);
    /** What the worker answers `text` with: one line, then it closes the connection. */
    const refusal = async (text: string): Promise<any> => {
      const c = rawClient(socketPath);
      await c.connected;
      c.socket.write(text);
      await c.closed;
      expect(c.lines).toHaveLength(1);
      return JSON.parse(c.lines[0]!);
    };

    // A key of 1 MiB (262,144 tokens), in the demo's parts, each line within the limit.
    const mib = keyMadeBy(artifactKey, 50, 262_144);
    expect(mib.key.toBytes().length).toBeGreaterThanOrEqual(1 << 20);
    const lines: string = requestLines('mib', mib.key.hex, mib.keyBytes);
    expect(lines.split('\n').length).toBeGreaterThan(20);
    for (const line of lines.split('\n')) expect(Buffer.byteLength(line)).toBeLessThanOrEqual(MAX_LINE_BYTES);
    expect(await sendLines(lines)).toMatchObject({ id: 'mib', ok: true });
    const lease = table.tryPin(mib.key);
    if (lease.kind !== 'lease') throw new Error(`expected a hit, got ${lease.reason}`);
    expect(readArenaRecord({ tableName: name, key: mib.key, meta: lease.meta }).kind).toBe('record');
    lease.close();
    // Parts cut anywhere, not only at a multiple of 4 base64 characters, make the same bytes.
    const k = keyOf(51);
    const cut = (id: string, at: number) => [
      { id, keyHex: k.key.hex, keyBytes: k.keyBytes.slice(0, at), more: true },
      { id, keyHex: k.key.hex, keyBytes: k.keyBytes.slice(at) },
    ].map((line) => JSON.stringify(line) + '\n').join('');
    expect(await sendLines(cut('cut', 4_099))).toMatchObject({ id: 'cut', ok: true });

    // The same 1 MiB key in one line; a 65 KiB line; one byte over the limit. A line of the limit is read.
    expect(await refusal(JSON.stringify({ id: 'one-line', keyHex: mib.key.hex, keyBytes: mib.keyBytes }) + '\n')).toEqual({ ok: false, error: TOO_LONG });
    const lineOf = (bytes: number) => `{"id":"${'i'.repeat(bytes - 9)}"}\n`;
    expect(await refusal(lineOf(65 << 10))).toEqual({ ok: false, error: TOO_LONG });
    expect(await refusal(lineOf(MAX_LINE_BYTES + 1))).toEqual({ ok: false, error: TOO_LONG });
    expect(await sendLines(lineOf(MAX_LINE_BYTES))).toMatchObject({ id: 'i'.repeat(MAX_LINE_BYTES - 9), ok: false, error: expect.stringMatching(/no keyBytes/) });

    // Parts of MAX_REQUEST_BYTES in all are taken (these are no key); one byte more is refused.
    expect(await sendLines(requestLines('most', k.key.hex, 'A'.repeat(MAX_REQUEST_BYTES)))).toMatchObject({ id: 'most', ok: false, error: expect.stringMatching(/^ERR_INVALID_KEY: /) });
    expect(await refusal(requestLines('over', k.key.hex, 'A'.repeat(MAX_REQUEST_BYTES + 1)))).toEqual({ id: 'over', ok: false, error: `request keyBytes longer than ${MAX_REQUEST_BYTES} bytes; connection closed` });

    // A line of another id or keyHex before the last part abandons the request; so does a part
    // that is not base64.
    const part = (fields: object) => JSON.stringify({ id: 'a', keyHex: k.key.hex, keyBytes: k.keyBytes.slice(0, 100), more: true, ...fields }) + '\n';
    expect(await refusal(part({}) + JSON.stringify({ id: 'b', keyHex: k.key.hex, keyBytes: k.keyBytes.slice(100) }) + '\n')).toEqual({ id: 'a', ok: false, error: `request "a" abandoned: a line for id "b", keyHex "${k.key.hex}" came before its last part; connection closed` });
    expect(await refusal(part({}) + part({ keyHex: '0'.repeat(64) }))).toMatchObject({ id: 'a', ok: false, error: expect.stringMatching(/^request "a" abandoned: a line for id "a", keyHex "0{64}"/) });
    expect(await refusal(part({}) + '{}\n')).toMatchObject({ id: 'a', ok: false, error: expect.stringMatching(/^request "a" abandoned: a line for id undefined/) });
    expect(await refusal(part({ keyBytes: undefined }))).toEqual({ id: 'a', ok: false, error: 'a part of a request has no keyBytes (a string of base64); connection closed' });
    expect(await refusal(part({}) + part({ keyBytes: 'not base64!' }))).toMatchObject({ id: 'a', ok: false, error: expect.stringMatching(/no keyBytes/) });
    // The key those refusals named is still the one published before them.
    const still = table.tryPin(k.key);
    if (still.kind !== 'lease') throw new Error(`expected a hit, got ${still.reason}`);
    expect(readArenaRecord({ tableName: name, key: k.key, meta: still.meta }).kind).toBe('record');
    still.close();

    const { code, stats } = await stop();
    expect(code).toBe(0);
    expect(stats.prepared).toBe(2);
  });

  it('refuses an existing arena directory that others may write, a symbolic link, or one of another owner, and leaves it and no table behind', async () => {
    const refusal = async (prepareArena: (arena: string) => void, reason: RegExp) => {
      name = `wp-storage-test-${process.pid}-${Date.now()}`;
      const arena = `/dev/shm/${name}-arena`;
      prepareArena(arena);
      const proc = fork(WORKER, ['--table', name, '--arena', arena, '--socket', join(tmpdir(), `${name}.sock`), '--capacity', '16'], { stdio: ['ignore', 'ignore', 'pipe', 'ipc'] });
      child = proc;
      let stderr = '';
      proc.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
      const ended = await Promise.race([once(proc, 'exit').then(([code]) => ({ code })), once(proc, 'message').then(([message]) => ({ message }))]);
      expect(ended).toEqual({ code: 1 });
      expect(stderr).toMatch(/^storage worker: ERR_UNTRUSTED_ARENA: /);
      expect(stderr).toMatch(reason);
      expect(existsSync(`/dev/shm/${name}`)).toBe(false);
      expect(lstatSync(arena, { throwIfNoEntry: false })).toBeDefined();
      rmSync(arena, { recursive: true, force: true });
    };
    await refusal((arena) => {
      mkdirSync(arena);
      chmodSync(arena, 0o777);
    }, /with mode 0o777/);
    await refusal((arena) => {
      mkdirSync(arena);
      chmodSync(arena, 0o702);
    }, /with mode 0o702/);
    const target = mkdtempSync(join(tmpdir(), 'wp-arena-target-'));
    try {
      await refusal((arena) => symlinkSync(target, arena), /is a symbolic link/);
    } finally {
      rmSync(target, { recursive: true, force: true });
    }
    if (process.geteuid?.() === 0) {
      await refusal((arena) => {
        mkdirSync(arena, { mode: 0o755 });
        chownSync(arena, 65534, 65534);
      }, /is owned by uid 65534/);
    }
    // A directory this user made and only it may write is used as before.
    name = `wp-storage-test-${process.pid}-${Date.now()}`;
    mkdirSync(`/dev/shm/${name}-arena`, { mode: 0o700 });
    const { send } = await start(64 << 20, name);
    expect(await prepare(send, keyOf(40))).toMatchObject({ ok: true });
    expect((await stop()).code).toBe(0);
  });

  it('refuses an arena directory the naming rule would not find, and leaves no table behind', async () => {
    name = `wp-storage-test-${process.pid}-${Date.now()}`;
    const proc = fork(WORKER, ['--table', name, '--arena', `/dev/shm/${name}-elsewhere`, '--socket', join(tmpdir(), `${name}.sock`), '--capacity', '16'], { stdio: ['ignore', 'ignore', 'pipe', 'ipc'] });
    child = proc;
    let stderr = '';
    proc.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    const [code] = await once(proc, 'exit');
    expect(code).toBe(1);
    expect(stderr).toContain(`${name}-arena`);
    expect(existsSync(`/dev/shm/${name}`)).toBe(false);
    expect(existsSync(`/dev/shm/${name}-elsewhere`)).toBe(false);
  });
});
