// A lease handed from the orchestrator to an engine in another process: the
// orchestrator wakes with a hit, passes lease.handoffToken() to a child process, which pins the
// same artifact for itself with tryPinExact and reads its bytes where meta.location says; the
// orchestrator closes its lease once the child says it holds its own, and the producer's eviction
// is refused until the child closes. Native tables only: a fallback table cannot cross processes.
// (The same handoff into a Python engine is python/'s test.)
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { WaitCoordinator, leaseHandoffToken, leaseTableBackend, openLeaseTable, unlinkLeaseTable, type LeaseTable } from '../../lib/index.js';
import { GRANT, consumer, makeKey } from '../helpers.js';
import { NATIVE, runsIf } from '../skip-reasons.js';

/**
 * The engine: pins the token exactly, reads `size` bytes at meta.location from the arena file and
 * checks them against meta.checksum (the first 8 bytes of their SHA-256, little-endian), says what
 * it got as one JSON line, then closes its lease when told to ("close" on stdin) and exits.
 */
const ENGINE = `
import { openLeaseTable } from 'waitprep';
import { createHash } from 'node:crypto';
import { openSync, readSync } from 'node:fs';
const [table, token, arena] = process.argv.slice(1);
const say = (o) => process.stdout.write(JSON.stringify(o) + '\\n');
const engine = openLeaseTable({ name: table, role: 'consumer', implementation: 'native' });
let lease;
try {
  lease = engine.tryPinExact(token);
} catch (error) {
  say({ event: 'threw', code: error.code });
  process.exit(0);
}
if (lease.kind === 'miss') {
  say({ event: 'miss', reason: lease.reason });
  process.exit(0);
}
const bytes = Buffer.alloc(Number(lease.meta.sizeBytes));
readSync(openSync(arena, 'r'), bytes, 0, bytes.length, Number(lease.meta.location));
const sum = createHash('sha256').update(bytes).digest().readBigUInt64LE(0);
say({ event: 'pinned', slot: lease.slot, generation: lease.generation, digest: lease.digest, checksumOk: sum === BigInt(lease.meta.checksum), clientPins: engine.clientPins(lease.slot) });
process.stdin.setEncoding('utf8').on('data', (line) => {
  if (!line.includes('close')) return;
  lease.close();
  say({ event: 'closed', clientPins: engine.clientPins(lease.slot) });
  engine.close();
  process.exit(0);
});
`;

interface Engine {
  child: ChildProcess;
  /** The next JSON line the child prints. */
  next(): Promise<Record<string, unknown>>;
  exited: Promise<number | null>;
}

const children: ChildProcess[] = [];
const cleanups: Array<() => void> = [];

afterEach(() => {
  for (const child of children.splice(0)) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  for (const cleanup of cleanups.splice(0).reverse()) cleanup();
});

function startEngine(table: string, token: string, arena: string): Engine {
  const child = spawn(process.execPath, ['--input-type=module', '-e', ENGINE, table, token, arena], { stdio: ['pipe', 'pipe', 'pipe'] });
  children.push(child);
  let stdout = '';
  let stderr = '';
  const waiting: Array<(line: Record<string, unknown>) => void> = [];
  const lines: Array<Record<string, unknown>> = [];
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    stdout += chunk;
    for (let end = stdout.indexOf('\n'); end >= 0; end = stdout.indexOf('\n')) {
      const line = JSON.parse(stdout.slice(0, end)) as Record<string, unknown>;
      stdout = stdout.slice(end + 1);
      const resolve = waiting.shift();
      if (resolve) resolve(line);
      else lines.push(line);
    }
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return {
    child,
    exited,
    next: () =>
      lines.length > 0
        ? Promise.resolve(lines.shift()!)
        : new Promise((resolve, reject) => {
            waiting.push(resolve);
            void exited.then((code) => reject(new Error(`the engine exited (${code}) before saying more: ${stderr}`)));
          }),
  };
}

/**
 * A native table (this process its producer, and an orchestrator consumer), an arena file in
 * /dev/shm holding one artifact's bytes at offset 4096, and that artifact published with its
 * location, size and checksum.
 */
function publishedWithArena() {
  const name = `wp-handoff-${process.pid}-${randomBytes(4).toString('hex')}`;
  const arena = `/dev/shm/${name}-arena`;
  const producer = openLeaseTable({ name, role: 'producer', create: { capacity: 64 }, implementation: 'native' });
  const orchestrator = openLeaseTable({ name, role: 'consumer', implementation: 'native' });
  cleanups.push(() => {
    for (const table of [orchestrator, producer]) table.close();
    unlinkLeaseTable(name);
    fs.rmSync(arena, { force: true });
  });
  const bytes = randomBytes(3000);
  fs.writeFileSync(arena, Buffer.concat([Buffer.alloc(4096), bytes]));
  const key = makeKey(1);
  const checksum = createHash('sha256').update(bytes).digest().readBigUInt64LE(0);
  producer.publish(producer.reserve(key), { sizeBytes: bytes.length, location: 4096, checksum, codecId: 1, representationVersion: 1 });
  return { name, arena, producer, orchestrator, key };
}

/** The orchestrator's side: a coordinator over `table` whose agent waited for `key`, and its wake. */
function wake(table: LeaseTable, key: ReturnType<typeof makeKey>) {
  const coordinator = new WaitCoordinator({ backend: leaseTableBackend(table), maxQueued: 8, maxWaiting: 8, historyLimit: 8 });
  const admission = coordinator.onWait(consumer(1), key);
  const work = coordinator.beginNext(GRANT)!;
  coordinator.complete(work, { ok: true });
  return coordinator.onWake(admission.ticket!);
}

describe.runIf(runsIf('lease handoff between processes', NATIVE))('lease handoff: orchestrator to an engine process', () => {
  it('the engine pins the woken lease exactly and reads its bytes; eviction waits for the engine, not the orchestrator', async () => {
    const { name, arena, producer, orchestrator, key } = publishedWithArena();
    const woke = wake(orchestrator, key);
    expect(woke.kind).toBe('hit');
    if (woke.kind !== 'hit') return;
    const token = leaseHandoffToken(woke.lease);
    expect(token).toBe(`wp1:${name}:${woke.lease.slot}:${woke.lease.generation}:${key.hex}`);
    const engine = startEngine(name, token, arena);
    const pinned = await engine.next();
    expect(pinned).toEqual({ event: 'pinned', slot: woke.lease.slot, generation: woke.lease.generation, digest: key.hex, checksumOk: true, clientPins: 1 });
    // The engine confirmed: the orchestrator lets go, and the engine's pin alone holds the artifact.
    woke.lease.close();
    expect(orchestrator.clientPins(woke.lease.slot)).toBe(0);
    expect(producer.tryEvict(key)).toBe('pinned');
    expect(producer.inspect().slots.find((s) => s.slot === woke.lease.slot)!.pinHolders).toHaveLength(1);
    engine.child.stdin!.write('close\n');
    expect(await engine.next()).toEqual({ event: 'closed', clientPins: 0 });
    expect(await engine.exited).toBe(0);
    expect(producer.tryEvict(key)).toBe('evicted');
  });

  it('a stale token (evicted, then the slot filled again) misses in the engine; a forged one is refused there', async () => {
    const { name, arena, producer, orchestrator, key } = publishedWithArena();
    const lease = orchestrator.tryPin(key);
    if (lease.kind !== 'lease') throw new Error(`expected a lease, got ${lease.reason}`);
    const token = leaseHandoffToken(lease);
    lease.close();
    expect(producer.tryEvict(key)).toBe('evicted');
    const evicted = startEngine(name, token, arena);
    expect(await evicted.next()).toEqual({ event: 'miss', reason: 'stale-handoff' });
    producer.publish(producer.reserve(key), { sizeBytes: 1, location: 4096, checksum: 0, codecId: 1, representationVersion: 1 });
    const recycled = startEngine(name, token, arena);
    expect(await recycled.next()).toEqual({ event: 'miss', reason: 'stale-handoff' });
    const forged = startEngine(name, token.replace(`:${name}:`, ':another-table:'), arena);
    expect(await forged.next()).toEqual({ event: 'threw', code: 'ERR_INVALID_ARGUMENT' });
    for (const engine of [evicted, recycled, forged]) expect(await engine.exited).toBe(0);
    expect(producer.tryEvict(key)).toBe('evicted'); // none of them left a pin
  });

  it('an engine killed while holding its pin is reaped, and the artifact can then be evicted', async () => {
    const { name, arena, producer, orchestrator, key } = publishedWithArena();
    const lease = orchestrator.tryPin(key);
    if (lease.kind !== 'lease') throw new Error(`expected a lease, got ${lease.reason}`);
    const engine = startEngine(name, leaseHandoffToken(lease), arena);
    expect((await engine.next()).event).toBe('pinned');
    lease.close();
    engine.child.kill('SIGKILL');
    await engine.exited;
    expect(producer.tryEvict(key)).toBe('pinned');
    expect(producer.reapDeadClients()).toBe(1);
    expect(producer.tryEvict(key)).toBe('evicted');
  });
});
