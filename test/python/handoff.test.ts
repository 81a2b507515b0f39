// A lease handed from the Node orchestrator to a Python engine: the
// coordinator wakes with a hit and passes leaseHandoffToken(lease) to examples/python/engine_pin.py,
// which pins it exactly (waitprep's Table.try_pin_exact) and reads the artifact's record from the
// /dev/shm arena the table's name and meta.location give (waitprep.arena), checking its header and
// checksum. The orchestrator closes its lease once the engine says it holds its own; the producer's
// eviction is refused until the engine closes, and succeeds after. Then a stale token, a recycled
// slot and a forged token. (test/lease-table/handoff.test.ts is the same with a Node engine.)
import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import { dirname } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import {
  WaitCoordinator,
  arenaLocation,
  arenaPath,
  encodeArenaRecord,
  leaseHandoffToken,
  leaseTableBackend,
  nativeLibraryPath,
  openLeaseTable,
  unlinkLeaseTable,
} from '../../lib/index.js';
import { GRANT, consumer, makeKey } from '../helpers.js';
import { NATIVE, runsIf } from '../skip-reasons.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const hasPython = spawnSync('python3', ['--version'], { encoding: 'utf8' }).status === 0;
const libPath = nativeLibraryPath();
/** The engine's environment: the package from this checkout, over the built library. */
const ENGINE_ENV = { ...process.env, WAITPREP_LIBRARY: libPath ?? '', PYTHONPATH: `${root}python`, PYTHONDONTWRITEBYTECODE: '1' };

const cleanups: Array<() => void> = [];
afterEach(() => {
  for (const cleanup of cleanups.splice(0).reverse()) cleanup();
});

/** engine_pin.py as a child, its stdout read a line at a time. */
function engine(...args: string[]) {
  const child: ChildProcessWithoutNullStreams = spawn('python3', ['examples/python/engine_pin.py', ...args], {
    cwd: root,
    env: ENGINE_ENV,
  });
  cleanups.push(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return {
    child,
    exited,
    next: async (): Promise<string> => {
      const { value, done } = await lines.next();
      if (done === true) throw new Error(`engine_pin.py ended its output; stderr:\n${stderr}`);
      return String(value);
    },
  };
}

/**
 * A native table (this process its producer, and an orchestrator consumer) and one artifact
 * published with its bytes as a record at offset 4096 of the table's arena 0.
 */
function publishedWithArena() {
  const name = `wp-pyhandoff-${process.pid}-${randomBytes(4).toString('hex')}`;
  const producer = openLeaseTable({ name, role: 'producer', create: { capacity: 64 }, implementation: 'native' });
  const orchestrator = openLeaseTable({ name, role: 'consumer', implementation: 'native' });
  const file = arenaPath(name, 0);
  cleanups.push(() => {
    for (const table of [orchestrator, producer]) table.close();
    unlinkLeaseTable(name);
    fs.rmSync(dirname(file), { recursive: true, force: true });
  });
  const key = makeKey(1);
  const { bytes, header } = encodeArenaRecord(key, randomBytes(3000), { tokenCount: 256, format: 'bf16-paged' });
  fs.mkdirSync(dirname(file), { recursive: true });
  fs.writeFileSync(file, Buffer.concat([Buffer.alloc(4096), bytes]));
  const meta = { sizeBytes: header.payloadLength, location: arenaLocation(0, 4096), checksum: header.checksum, codecId: 1, representationVersion: 1 };
  producer.publish(producer.reserve(key), meta);
  return { name, producer, orchestrator, key, file };
}

describe.runIf(runsIf('lease handoff into Python', NATIVE, [hasPython, 'python3 is not installed'], [libPath !== null, 'libwaitprep.so is not built']))(
  'lease handoff: the Node orchestrator to a Python engine',
  () => {
    it('the engine pins the woken lease exactly and checks its arena record; eviction waits for the engine, not the orchestrator', async () => {
      const { producer, orchestrator, key } = publishedWithArena();
      const coordinator = new WaitCoordinator({ backend: leaseTableBackend(orchestrator), maxQueued: 8, maxWaiting: 8, historyLimit: 8 });
      const admission = coordinator.onWait(consumer(1), key);
      coordinator.complete(coordinator.beginNext(GRANT)!, { ok: true });
      const woke = coordinator.onWake(admission.ticket!);
      if (woke.kind !== 'hit') throw new Error(`expected a hit, got ${woke.reason}`);
      const token = leaseHandoffToken(woke.lease);

      const python = engine('--token', token, '--read', '--hold');
      // Python formats the token of its own lease exactly as Node did.
      expect(await python.next()).toBe(`hit: slot ${woke.lease.slot} generation ${woke.lease.generation}, 3000 bytes at 0x${arenaLocation(0, 4096).toString(16)}, token ${token}`);
      expect(await python.next()).toBe('record: 3000 bytes, 256 tokens, format bf16-paged, checksum ok');
      expect(producer.inspect().slots.find((s) => s.slot === woke.lease.slot)!.pinHolders).toHaveLength(2);
      // The engine confirmed: the orchestrator lets go, and the engine's pin alone holds the artifact.
      woke.lease.close();
      expect(orchestrator.clientPins(woke.lease.slot)).toBe(0);
      expect(producer.tryEvict(key)).toBe('pinned');
      python.child.stdin.write('done\n');
      expect(await python.next()).toBe('released');
      expect(await python.exited).toBe(0);
      expect(producer.tryEvict(key)).toBe('evicted');
    });

    it('a stale token, a recycled slot and a forged token: the engine misses or refuses, and holds nothing', async () => {
      const { name, producer, orchestrator, key } = publishedWithArena();
      const lease = orchestrator.tryPin(key);
      if (lease.kind !== 'lease') throw new Error(`expected a lease, got ${lease.reason}`);
      const token = leaseHandoffToken(lease);
      lease.close();
      expect(producer.tryEvict(key)).toBe('evicted');
      const stale = engine('--token', token);
      expect(await stale.next()).toBe('miss: stale-handoff');
      expect(await stale.exited).toBe(1);

      // The same slot filled again (the same key, a new generation): the old token still misses.
      const again = producer.reserve(key);
      producer.publish(again, { sizeBytes: 1, location: 0, checksum: 0, codecId: 1, representationVersion: 1 });
      expect(again.slot).toBe(lease.slot);
      const recycled = engine('--token', token);
      expect(await recycled.next()).toBe('miss: stale-handoff');
      expect(await recycled.exited).toBe(1);

      // A made-up digest at a live slot generation: a miss, never a pin of what the slot holds.
      const forgedDigest = engine('--token', `wp1:${name}:${again.slot}:${again.generation}:${'0'.repeat(64)}`);
      expect(await forgedDigest.next()).toBe('miss: stale-handoff');
      expect(await forgedDigest.exited).toBe(1);
      // A token past the table's capacity is refused as an argument error.
      const forgedSlot = spawnSync('python3', ['examples/python/engine_pin.py', '--token', `wp1:${name}:64:0:${key.hex}`], {
        cwd: root,
        env: ENGINE_ENV,
        encoding: 'utf8',
      });
      expect(forgedSlot.status).toBe(1);
      expect(forgedSlot.stderr).toMatch(/WaitprepError: Expected `token` to be a handoff token whose slot is below the table's capacity 64/);

      expect(producer.inspect().slots.find((s) => s.slot === again.slot)!.pinHolders).toEqual([]);
      expect(producer.tryEvict(key)).toBe('evicted');
    });
  },
);
