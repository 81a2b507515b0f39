// The demo's storage worker (bin/storage-worker.js, its logic in worker/storage.js): the lease table's single producer in its own
// process. Budget eviction skips pinned artifacts (LRU among the rest), and the metadata it
// publishes names an arena record (docs/arena-records.md) that belongs to the key, found from the
// table's name and the lease alone. Needs the built dist/ (the worker imports it).
import { fork, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ARENA_RECORD_HEADER_BYTES, arenaDirectory, artifactKey, openLeaseTable, readArenaRecord, splitLocation, unlinkLeaseTable, type ArtifactKey, type LeaseTable } from '../lib/index.js';
// @ts-ignore -- plain JavaScript module without type declarations
import { arenaFile, checksumOf, startStorage, syntheticSource, validateSafetensors } from '../worker/storage.js';
// @ts-ignore -- plain JavaScript module without type declarations
import { admitWait, demoCoordinator } from '../demo/run.js';
// The demo's modules import the package by name (dist/): their coordinator accepts only that
// module's tables and keys, so the eviction tests build theirs from it too.
import * as pkg from 'waitprep';
import { NATIVE, runsIf } from './skip-reasons.js';

const WORKER = join(import.meta.dirname, '..', 'bin', 'storage-worker.js');
const TOKENS = 4_000;

/** A key, and its wire form as the worker's protocol carries it (the canonical bytes in base64). */
function keyOf(i: number): { key: ArtifactKey; keyBytes: string } {
  return keyMadeBy(artifactKey, i);
}

/** keyOf's key, made by `make` (this file's artifactKey or the package's). */
function keyMadeBy(make: (spec: any) => ArtifactKey, i: number): { key: ArtifactKey; keyBytes: string } {
  const tokenLayout = Array.from({ length: TOKENS }, (_, t) => (t * 31 + i * 7) % 128_000);
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

  /** Starts the worker as the demo does, and a `send` that makes one socket request and reads its reply. */
  async function start(budgetBytes: number): Promise<{ arena: string; send: (message: object) => Promise<any> }> {
    name = `wp-storage-test-${process.pid}-${Date.now()}`;
    const arena = `/dev/shm/${name}-arena`;
    const socketPath = join(tmpdir(), `${name}.sock`);
    const proc = fork(WORKER, ['--table', name, '--arena', arena, '--socket', socketPath, '--budget', String(budgetBytes), '--capacity', '256'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    child = proc;
    const [ready] = await once(proc, 'message');
    expect(ready).toMatchObject({ type: 'ready', implementation: 'native', socket: socketPath });
    let next = 0;
    const send = async (message: object): Promise<any> => {
      const socket = connect(socketPath);
      socket.setEncoding('utf8');
      await once(socket, 'connect');
      socket.write(JSON.stringify({ ...message, id: `r${next++}` }) + '\n');
      let buffered = '';
      for await (const chunk of socket) {
        buffered += chunk;
        if (buffered.includes('\n')) break;
      }
      socket.destroy();
      return JSON.parse(buffered.slice(0, buffered.indexOf('\n')));
    };
    return { arena, send };
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
