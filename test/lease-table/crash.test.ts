// Native lease table, real processes, real SIGKILL: the pins of a killed consumer are
// reclaimed by reapDeadClients() (a live client never is, a zombie already counts as dead),
// a killed producer's reservation is abandoned by the next producer, and while a producer
// lives a second one gets ERR_WRITER_EXISTS. Fixtures: test/fixtures/lease-holder.mjs
// (imports ../../dist/index.js: run `npm run build` first).
import { readFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { artifactKey, openLeaseTable, type LeaseTable } from '../../lib/index.js';
import { keyFields, publicationMeta } from '../fixtures/lease-stress-common.mjs';
import { leaseHolders } from '../children.js';
import { NATIVE, runsIf } from '../skip-reasons.js';

const KEY_A = artifactKey(keyFields(0));
const KEY_B = artifactKey(keyFields(1));
const { tableName, open, startHolder, pinnedByHolder, cleanup } = leaseHolders('wp-crash');

/** State letter of /proc/<pid>/stat ('R', 'S', 'Z', …), or null when there is no such process. */
function procState(pid: number): string | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'latin1');
  } catch {
    return null;
  }
  return text.slice(text.lastIndexOf(')') + 2)[0] ?? null;
}

const sleeper = new Int32Array(new SharedArrayBuffer(4));
/**
 * Calls `probe` until it returns something other than `undefined`, sleeping 1 ms in between,
 * synchronously: the event loop does not turn, so Node cannot wait for (reap) a killed child,
 * which therefore stays a zombie. The bound only keeps a broken build from hanging.
 */
function pollSync<T>(probe: () => T | undefined, boundMs = 5_000): T | undefined {
  for (let waited = 0; waited < boundMs; waited++) {
    const value = probe();
    if (value !== undefined) return value;
    Atomics.wait(sleeper, 0, 0, 1);
  }
  return probe();
}

afterEach(cleanup);

describe.runIf(runsIf('lease table: a SIGKILLed client (native)', NATIVE))('lease table: a SIGKILLed client (native, real processes)', () => {
  it.each(['zombie', 'waited'] as const)('reclaims the pins of a killed consumer (%s)', async (path) => {
    const { name, producer, holder, index, slot } = await pinnedByHolder();

    let view = producer.inspect();
    expect(view.clients.find((c) => c.index === index)).toMatchObject({ pid: holder.pid, state: 'active', producer: false });
    expect(view.slots.find((s) => s.slot === slot)?.pinHolders).toEqual([index]);
    const reapedBefore = view.reapedClients;

    // A live client is never reaped, and its pins hold.
    expect(producer.tryEvict(KEY_A)).toBe('pinned');
    expect(producer.reapDeadClients()).toBe(0);
    expect(producer.tryEvict(KEY_A)).toBe('pinned');
    expect(procState(holder.pid)).not.toBe('Z');

    holder.child.kill('SIGKILL');
    let reaped: number | undefined;
    if (path === 'zombie') {
      // No await until the reap: Node cannot wait for the child meanwhile, so it dies into a
      // zombie with its pid and start time unchanged, which must count as dead.
      reaped = pollSync(() => producer.reapDeadClients() || undefined);
      expect(procState(holder.pid)).toBe('Z');
    } else {
      expect(await holder.exited).toEqual({ code: null, signal: 'SIGKILL' });
      expect(procState(holder.pid)).toBeNull();
      reaped = producer.reapDeadClients();
    }
    expect(reaped).toBe(1);
    expect(producer.reapDeadClients()).toBe(0); // nothing left to reap, and no double reap

    view = producer.inspect();
    expect(view.clients.map((c) => c.pid)).not.toContain(holder.pid);
    expect(view.clients.map((c) => c.index)).toEqual([producer.clientIndex]);
    expect(view.slots.every((s) => s.pinHolders.length === 0)).toBe(true);
    expect(view.slots.map((s) => s.state)).toEqual(['ready', 'ready']);
    expect(view.reapedClients).toBe(reapedBefore + 1n);

    expect(producer.tryEvict(KEY_A)).toBe('evicted');
    expect(producer.tryPin(KEY_A)).toEqual({ kind: 'miss', reason: 'absent' });
    expect(producer.tryEvict(KEY_B)).toBe('evicted'); // the other artifact was never pinned

    if (path === 'zombie') expect(await holder.exited).toEqual({ code: null, signal: 'SIGKILL' });
  });

  it.each(['zombie', 'waited'] as const)(
    "abandons a killed producer's reservation when the next producer opens (%s)",
    async (path) => {
      const name = tableName();
      const first = open({ name, role: 'producer', create: { capacity: 64 } });
      first.publish(first.reserve(KEY_B), publicationMeta(1, 1));
      first.close();
      const consumer = open({ name, role: 'consumer' });
      const pinnedB = consumer.tryPin(KEY_B);
      expect(pinnedB.kind).toBe('lease');

      const holder = startHolder(name, 'producer', 0);
      const said = await holder.message;
      expect(said).toMatchObject({ event: 'reserved', pid: holder.pid });
      const index = said.clientIndex as number;

      let view = consumer.inspect();
      expect(view.producer).toBe(index);
      expect(view.slots.find((s) => s.slot === said.slot)).toMatchObject({ state: 'reserved', generation: BigInt(said.generation as string) });
      expect(consumer.tryPin(KEY_A)).toEqual({ kind: 'miss', reason: 'preparing' });
      expect(() => openLeaseTable({ name, role: 'producer', implementation: 'native' })).toThrow(
        expect.objectContaining({ code: 'ERR_WRITER_EXISTS' }),
      );

      holder.child.kill('SIGKILL');
      if (path === 'zombie') {
        // Synchronously (no event-loop turn, so the child stays unwaited) until it is a zombie.
        expect(pollSync(() => (procState(holder.pid) === 'Z' ? true : undefined))).toBe(true);
      } else {
        expect(await holder.exited).toEqual({ code: null, signal: 'SIGKILL' });
        expect(procState(holder.pid)).toBeNull();
      }
      const next = open({ name, role: 'producer' });
      if (path === 'zombie') expect(procState(holder.pid)).toBe('Z');

      view = next.inspect();
      expect(view.producer).toBe(next.clientIndex);
      expect(view.clients.map((c) => c.pid)).not.toContain(holder.pid);
      expect(view.clients.map((c) => c.index).sort((a, b) => a - b)).toEqual([consumer.clientIndex, next.clientIndex].sort((a, b) => a - b));
      expect(view.slots.map((s) => s.state)).toEqual(['ready']); // the reservation is gone; B stays
      expect(consumer.tryPin(KEY_A)).toEqual({ kind: 'miss', reason: 'absent' });
      expect(next.tryEvict(KEY_A)).toBe('absent');

      // The abandoned slot's generation moved on; the key can be reserved and published again.
      const again = next.reserve(KEY_A);
      if (again.slot === said.slot) expect(again.generation).toBe(BigInt(said.generation as string) + 1n);
      next.publish(again, publicationMeta(0, 2));
      const lease = consumer.tryPin(KEY_A);
      expect(lease).toMatchObject({ kind: 'lease', slot: again.slot, generation: Number(again.generation) });
      expect(lease.kind === 'lease' && lease.meta).toMatchObject({ location: publicationMeta(0, 2).location, checksum: publicationMeta(0, 2).checksum });
      if (lease.kind === 'lease') lease.close();

      // B's pin, taken before all this, still holds.
      expect(next.tryEvict(KEY_B)).toBe('pinned');
      if (pinnedB.kind === 'lease') pinnedB.close();
      expect(next.tryEvict(KEY_B)).toBe('evicted');
      if (path === 'zombie') expect(await holder.exited).toEqual({ code: null, signal: 'SIGKILL' });
    },
  );

  it('gives a second producer ERR_WRITER_EXISTS while the first lives', async () => {
    const name = tableName();
    const first = open({ name, role: 'producer', create: { capacity: 64 } });
    const clientsBefore = first.inspect().clients.length;

    // Same process.
    expect(() => openLeaseTable({ name, role: 'producer', implementation: 'native' })).toThrow(
      expect.objectContaining({ code: 'ERR_WRITER_EXISTS' }),
    );
    expect(first.inspect().clients).toHaveLength(clientsBefore); // the failed open left no entry

    // Another process, while the first producer lives.
    const rival = startHolder(name, 'producer', 0);
    expect(await rival.message).toMatchObject({ event: 'error', code: 'ERR_WRITER_EXISTS' });
    expect(await rival.exited).toEqual({ code: 0, signal: null });
    expect(first.reapDeadClients()).toBe(0);
    expect(first.inspect().clients).toHaveLength(clientsBefore);
    expect(first.inspect().producer).toBe(first.clientIndex);

    // The other way round: a live producer in a child process keeps this process out …
    first.close();
    const holder = startHolder(name, 'producer', 0);
    const said = await holder.message;
    expect(said).toMatchObject({ event: 'reserved' });
    expect(() => openLeaseTable({ name, role: 'producer', implementation: 'native' })).toThrow(
      expect.objectContaining({ code: 'ERR_WRITER_EXISTS' }),
    );
    // … until it closes the table (graceful exit), which also abandons its reservation.
    holder.child.stdin!.end();
    expect(await holder.exited).toEqual({ code: 0, signal: null });
    const next = open({ name, role: 'producer' });
    const view = next.inspect();
    expect(view.producer).toBe(next.clientIndex);
    expect(view.clients.map((c) => c.index)).toEqual([next.clientIndex]);
    expect(view.slots).toEqual([]);
    expect(next.reapDeadClients()).toBe(0); // it left cleanly: nothing to reap
    expect(next.tryPin(KEY_A)).toEqual({ kind: 'miss', reason: 'absent' });
  });
});
