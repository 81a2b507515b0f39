// PreparationDriver: units prepared in a piscina worker pool, reported back on the coordinator's
// thread. Fixtures: test/fixtures/prepare-*.mjs (they import the built dist/, so build first).
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { threadId as mainThreadId } from 'node:worker_threads';
import { init as lexerReady, parse as parseImports } from 'es-module-lexer';
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  PreparationDriver,
  WaitprepError,
  artifactKey,
  decodeArtifactKey,
  type ArtifactKey,
  type ArtifactKeyPlainFields,
  type GrantSource,
  type PreparationDriverOptions,
  type PreparationReport,
  type ResourceGrant,
  type WaitCoordinator,
} from '../../lib/index.js';
import { WORKER_FILENAME } from '../../lib/driver/driver.js';
import { SHARED_STORE_BYTES } from '../../lib/keys/key.js';
import { preparationTaskOf } from '../../lib/testing.js';
import { consumer, makeKey, setup, ticketOf, withBackend } from '../helpers.js';

// Indexes of the marks prepare-hang.mjs keeps in workerData.marks.
import { RELEASE, SAW_ABORT, STARTED, STOPPED } from '../fixtures/prepare-hang.mjs';

const fixture = (name: string): string => join(import.meta.dirname, '..', 'fixtures', name);

/** A grant source with `free` grants; it counts what it hands out and gets back. */
class Grants implements GrantSource {
  free: number;
  held = 0;
  mostHeld = 0;
  acquired = 0;
  released = 0;
  refused = 0;
  #next = 0;
  readonly #out = new Set<string>();

  constructor(free: number) {
    this.free = free;
  }

  acquire(): ResourceGrant | null {
    if (this.free === 0) {
      this.refused++;
      return null;
    }
    this.free--;
    this.acquired++;
    this.mostHeld = Math.max(this.mostHeld, ++this.held);
    const grant = { worker: 'pool', grant: `g${this.#next++}` };
    this.#out.add(grant.grant);
    return grant;
  }

  release(grant: ResourceGrant): void {
    // Each grant comes back exactly once.
    expect(this.#out.delete(grant.grant)).toBe(true);
    this.free++;
    this.held--;
    this.released++;
  }
}

const open: PreparationDriver[] = [];

afterEach(async () => {
  await Promise.all(open.splice(0).map((driver) => driver.close({ force: true })));
});

/** A driver over `coord` whose reports land in `reports`; closed with force after the test. */
function drive(
  coord: WaitCoordinator,
  grants: GrantSource,
  worker: string,
  more: Partial<Omit<PreparationDriverOptions, 'coordinator' | 'grants' | 'onSettled'>> = {},
): { driver: PreparationDriver; reports: PreparationReport[] } {
  const reports: PreparationReport[] = [];
  const driver = new PreparationDriver({
    coordinator: coord,
    grants,
    onSettled: (report) => reports.push(report),
    ...more,
    worker: { filename: fixture(worker), ...more.worker },
  });
  open.push(driver);
  return { driver, reports };
}

/** What the driver would post for a unit of `key`, issued by a coordinator of its own. */
function preparationTaskOfKey(key: ArtifactKey): ReturnType<typeof preparationTaskOf> {
  const { coord } = setup();
  expect(coord.onWait(consumer(0), key).status).toBe('queued');
  const work = coord.beginNext({ worker: 'w', grant: 'g' })!;
  const posted = preparationTaskOf(work);
  coord.complete(work, { ok: true });
  return posted;
}

/** Waits until `check` passes (it is "it happened", never "within N ms"). */
function until(check: () => void): Promise<void> {
  return vi.waitFor(check, { timeout: 15_000, interval: 5 });
}

function marksBuffer(): Int32Array {
  return new Int32Array(new SharedArrayBuffer(4 * Int32Array.BYTES_PER_ELEMENT));
}

describe('PreparationDriver: success path', () => {
  it('hands prepare both key forms of any key, the plain form read on the worker thread from the bytes it was moved', async () => {
    const { coord } = setup();
    const key = artifactKey({
      source: {
        snapshotKind: 'kv-page', runtime: 'r\u00e9', model: '模型', adapter: 'none', profile: 'bf16', positionPolicy: 'absolute', task: 't', namespace: '\ufeffn',
        tokenLayout: Uint32Array.from({ length: 5000 }, (_, i) => (i * 2654435761) >>> 0),
        // fromEntries: in a literal, `__proto__: 'p'` would set no entry at all.
        extra: Object.fromEntries([['😀', ''], ['__proto__', 'p'], ['10', 'b'], ['9', 'a']]),
      },
      sourcePageGeneration: 2n ** 64n - 1n,
      codec: 'raw',
      codecConfig: '{"x":1}',
      representationVersion: 3,
    });
    expect(coord.onWait(consumer(0), key).status).toBe('queued');
    const { driver, reports } = drive(coord, new Grants(1), 'prepare-ok.mjs');
    driver.poke();
    await until(() => expect(reports).toHaveLength(1));
    const value = reports[0]!.value as { rebuiltHex: string; decodedHex: string; keyBytesOwnBuffer: boolean; key: ArtifactKeyPlainFields; keyBytes: Uint8Array };
    expect(value.rebuiltHex).toBe(key.hex);
    expect(value.decodedHex).toBe(key.hex);
    expect(value.key).toEqual(key.toFields());
    expect(Object.keys(value.key.source.extra)).toEqual(Object.keys(key.toFields().source.extra));
    expect(Object.hasOwn(value.key.source.extra, '__proto__')).toBe(true);
    expect(Buffer.from(value.keyBytes).equals(key.toBytes())).toBe(true);
    expect(value.keyBytesOwnBuffer).toBe(true);
    // As when the task crossed as a structured clone: `extra` is an ordinary object there.
    expect((value as { extraIsOrdinary?: boolean }).extraIsOrdinary).toBe(true);
    // prepare zeroed its keyBytes after answering: the key here is untouched.
    expect(createHash('sha256').update(key.toBytes()).digest('hex')).toBe(key.hex);
    // A key this long is posted as its shared store; prepare got a copy, not the shared memory.
    expect(preparationTaskOfKey(key).transferList).toEqual([]);
    expect(value.keyBytes.buffer).toBeInstanceOf(ArrayBuffer);
  });

  it('posts the key as its bytes only: a short key\'s moved, a long key\'s shared, never cloned (preparationTaskOf is what it posts)', () => {
    const long = artifactKey({ ...makeKey(7).toFields(), source: { ...makeKey(7).toFields().source, tokenLayout: new Uint32Array(SHARED_STORE_BYTES / 4) } });
    for (const key of [makeKey(7), long]) {
      const { task, transferList } = preparationTaskOfKey(key);
      expect(Object.keys(task).sort()).toEqual(['grant', 'id', 'keyBytes', 'keyHex', 'readiness', 'target']);
      expect(task.keyHex).toBe(key.hex);
      expect(Buffer.from(task.keyBytes).equals(key.toBytes())).toBe(true);
      expect(task.keyBytes.byteOffset === 0 && task.keyBytes.buffer.byteLength === task.keyBytes.byteLength).toBe(true);
      const posted = structuredClone(task, { transfer: transferList });
      expect(decodeArtifactKey(posted.keyBytes).equals(key)).toBe(true);
      if (key === long) {
        expect(transferList).toEqual([]);
        expect(task.keyBytes.buffer).toBeInstanceOf(SharedArrayBuffer);
      } else {
        expect(transferList).toEqual([task.keyBytes.buffer]);
        expect(task.keyBytes.byteLength).toBe(0);
      }
      // The key is whole after its bytes were moved or shared, and the next post is whole too.
      expect(Buffer.from(preparationTaskOfKey(key).task.keyBytes).equals(key.toBytes())).toBe(true);
    }
  });

  it('prepares queued units one at a time in FIFO order, each applied, one grant per unit', async () => {
    const { coord } = setup();
    const keys = [makeKey(0), makeKey(1), makeKey(2)];
    keys.forEach((key, n) => expect(coord.onWait(consumer(n), key).status).toBe('queued'));
    const grants = new Grants(3);
    const { driver, reports } = drive(coord, grants, 'prepare-ok.mjs');
    driver.poke();
    await until(() => expect(reports).toHaveLength(3));

    expect(reports.map((r) => r.result)).toEqual(['succeeded', 'succeeded', 'succeeded']);
    expect(reports.map((r) => r.completion)).toEqual(['applied', 'applied', 'applied']);
    expect(reports.map((r) => (r.value as { keyHex: string }).keyHex)).toEqual(keys.map((k) => k.hex));
    for (const report of reports) {
      const value = report.value as {
        id: string; keyHex: string; rebuiltHex: string; decodedHex: string; keyBytesOwnBuffer: boolean;
        key: ArtifactKeyPlainFields; keyBytes: Uint8Array; threadId: number;
      };
      // The worker rebuilt the same key from each of the task's forms: the plain fields and the wire bytes.
      expect(value.rebuiltHex).toBe(value.keyHex);
      expect(value.decodedHex).toBe(value.keyHex);
      expect(value.key).toEqual(report.work.key.toFields());
      expect(Buffer.from(value.keyBytes).equals(report.work.key.toBytes())).toBe(true);
      // The bytes crossed as their own buffer, not a view into a shared pool.
      expect(value.keyBytesOwnBuffer).toBe(true);
      expect(value.id).toBe(report.work.id);
      expect(value.threadId).not.toBe(mainThreadId);
      expect(report.threadId).toBe(value.threadId);
      expect(report.error).toBeNull();
    }
    // Grants: acquired and released once per unit, never two held at once.
    expect(grants.acquired).toBe(3);
    await until(() => expect(grants.released).toBe(3));
    expect(grants.mostHeld).toBe(1);
    expect(coord.stats()).toMatchObject({ issued: 3, completed: 3, failed: 0, queued: 0, inFlight: 0, staleEvents: 0 });
    expect(driver.stats()).toMatchObject({ started: 3, succeeded: 3, failed: 0, crashed: 0, deadlines: 0, stale: 0, running: 0 });
    expect(coord.onWait(consumer(9), keys[0]!).status).toBe('completed');
  });

  it('with maxInFlight, keeps up to that many units in flight, each on its own grant and worker; one ending starts the next', async () => {
    const { coord } = setup({ maxInFlight: 3 });
    const keys = [0, 1, 2, 3].map((n) => makeKey(n, { task: 'hang' }));
    const tickets = keys.map((key, n) => ticketOf(coord.onWait(consumer(n), key)));
    const grants = new Grants(8);
    const marks = marksBuffer();
    const { driver, reports } = drive(coord, grants, 'prepare-hang.mjs', { maxInFlight: 3, worker: { filename: fixture('prepare-hang.mjs'), workerData: { marks } } });
    driver.poke();
    await until(() => expect(driver.stats().running).toBe(3));
    expect(coord.stats()).toMatchObject({ inFlight: 3, queued: 1 });
    expect(grants.held).toBe(3);
    expect(new Set(driver.threads.map((w) => w.threadId)).size).toBeGreaterThanOrEqual(3);
    // The first unit loses its only consumer: its worker stops at its boundary, the fourth starts.
    coord.onCancel(tickets[0]!);
    await until(() => expect(reports).toHaveLength(1));
    expect(reports[0]!.work.key.hex).toBe(keys[0]!.hex);
    await until(() => expect(coord.stats()).toMatchObject({ inFlight: 3, queued: 0 }));
    expect(grants.mostHeld).toBe(3);
    for (const ticket of tickets.slice(1)) coord.onCancel(ticket);
    await until(() => expect(reports).toHaveLength(4));
    await until(() => expect(driver.stats().running).toBe(0));
    expect(grants.released).toBe(4);
    expect(driver.stats()).toMatchObject({ started: 4, stale: 0 });
  });

  it('with more in flight allowed than the coordinator issues, waits for a unit to complete instead of asking for grants again and again', async () => {
    const { coord } = setup({ maxInFlight: 1 });
    [0, 1, 2].forEach((n) => coord.onWait(consumer(n), makeKey(n)));
    const grants = new Grants(4);
    // A grant source that pokes on every release, as the demo's does: a spin if the driver retried at once.
    let driverRef: PreparationDriver | null = null;
    const poking: GrantSource = { acquire: () => grants.acquire(), release: (g) => { grants.release(g); driverRef?.poke(); } };
    const { driver, reports } = drive(coord, poking, 'prepare-ok.mjs', { maxInFlight: 3 });
    driverRef = driver;
    driver.poke();
    await until(() => expect(reports).toHaveLength(3));
    expect(reports.map((r) => r.result)).toEqual(['succeeded', 'succeeded', 'succeeded']);
    expect(grants.acquired).toBeLessThanOrEqual(6);
  });

  it('without maxInFlight, prepares one unit at a time even when the coordinator allows more', async () => {
    const { coord } = setup({ maxInFlight: 4 });
    [0, 1, 2].forEach((n) => coord.onWait(consumer(n), makeKey(n)));
    const grants = new Grants(4);
    const { driver, reports } = drive(coord, grants, 'prepare-ok.mjs');
    driver.poke();
    await until(() => expect(reports).toHaveLength(3));
    expect(grants.mostHeld).toBe(1);
    expect(() => new PreparationDriver({ coordinator: coord, grants, worker: { filename: fixture('prepare-ok.mjs') }, maxInFlight: 0 }))
      .toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', field: 'maxInFlight' }));
  });

  it('asks for no grant while nothing is queued', async () => {
    const { coord } = setup();
    const grants = new Grants(1);
    const { driver } = drive(coord, grants, 'prepare-ok.mjs');
    driver.poke();
    await sleep(20);
    expect(grants.acquired + grants.refused).toBe(0);
    expect(driver.stats().started).toBe(0);
  });
});

describe('PreparationDriver: resource grants', () => {
  it('starts nothing while the grant source withholds, then prepares once a grant is there', async () => {
    const { coord } = setup();
    coord.onWait(consumer(0), makeKey(0));
    coord.onWait(consumer(1), makeKey(1));
    const grants = new Grants(0);
    const { driver, reports } = drive(coord, grants, 'prepare-ok.mjs');
    driver.poke();
    await until(() => expect(grants.refused).toBeGreaterThan(0));
    await sleep(20);
    expect(driver.stats().started).toBe(0);
    expect(coord.inFlight).toBeNull();
    expect(coord.stats()).toMatchObject({ queued: 2, issued: 0 });
    expect(reports).toHaveLength(0);

    grants.free = 1;
    driver.poke();
    await until(() => expect(reports).toHaveLength(2));
    expect(reports.map((r) => r.work.key.hex)).toEqual([makeKey(0).hex, makeKey(1).hex]);
    expect(reports.every((r) => r.result === 'succeeded' && r.completion === 'applied')).toBe(true);
    expect(grants.acquired).toBe(2);
    await until(() => expect(grants.released).toBe(2));
  });

  it('awaits a grant given as a promise, and starts when it settles without another poke', async () => {
    const { coord } = setup();
    coord.onWait(consumer(0), makeKey(0));
    let grant!: (value: ResourceGrant | null) => void;
    const released: ResourceGrant[] = [];
    let asked = 0;
    const grants: GrantSource = {
      acquire: () => {
        asked++;
        return new Promise((resolve) => (grant = resolve));
      },
      release: (g) => void released.push(g),
    };
    const { driver, reports } = drive(coord, grants, 'prepare-ok.mjs');
    driver.poke();
    driver.poke();
    await until(() => expect(asked).toBe(1));
    await sleep(20);
    expect(asked).toBe(1);
    expect(driver.stats().started).toBe(0);
    grant({ worker: 'pool', grant: 'late' });
    await until(() => expect(reports).toHaveLength(1));
    expect(reports[0]!.work.grant).toEqual({ worker: 'pool', grant: 'late' });
    await until(() => expect(released).toEqual([{ worker: 'pool', grant: 'late' }]));
  });
});

describe('PreparationDriver: worker crash', () => {
  it('fails the unit of a worker that exits or throws uncaught; a fresh worker prepares the next', async () => {
    const { coord } = setup();
    const keys = [makeKey(0, { task: 'exit' }), makeKey(1), makeKey(2, { task: 'throw' }), makeKey(3)];
    keys.forEach((key, n) => coord.onWait(consumer(n), key));
    const grants = new Grants(1);
    const { driver, reports } = drive(coord, grants, 'prepare-crash.mjs');
    driver.poke();
    await until(() => expect(reports).toHaveLength(4));

    expect(reports.map((r) => r.result)).toEqual(['crashed', 'succeeded', 'crashed', 'succeeded']);
    expect(reports.map((r) => r.completion)).toEqual(['applied', 'applied', 'applied', 'applied']);
    expect(reports.map((r) => r.work.key.hex)).toEqual(keys.map((k) => k.hex));
    for (const crashed of [reports[0]!, reports[2]!]) {
      expect(crashed.error).toBeInstanceOf(WaitprepError);
      expect(crashed.error!.code).toBe('ERR_WORKER_CRASHED');
      expect(crashed.error!.cause).toBeInstanceOf(Error);
      expect(crashed.threadId).not.toBeNull();
    }
    expect((reports[0]!.error!.cause as Error).message).toMatch(/exited with code: 1/);
    expect((reports[2]!.error!.cause as Error).message).toMatch(/prepare-crash: uncaught/);
    // Each next unit ran on another (fresh) worker thread than the one that died.
    expect((reports[1]!.value as { threadId: number }).threadId).not.toBe(reports[0]!.threadId);
    expect((reports[3]!.value as { threadId: number }).threadId).not.toBe(reports[2]!.threadId);
    expect(coord.stats()).toMatchObject({ completed: 2, failed: 2, inFlight: 0 });
    // A crash is a genuine failure: the coordinator remembers it.
    expect(coord.onWait(consumer(9), keys[0]!).status).toBe('failed');
    expect(driver.stats()).toMatchObject({ started: 4, succeeded: 2, crashed: 2, failed: 0 });
    await until(() => expect(grants.released).toBe(4));
  });

  it('fails every unit as crashed when the worker module throws while it loads', async () => {
    const { coord } = setup();
    coord.onWait(consumer(0), makeKey(0));
    const { driver, reports } = drive(coord, new Grants(1), 'prepare-broken.mjs');
    driver.poke();
    await until(() => expect(reports).toHaveLength(1));
    expect(reports[0]!.result).toBe('crashed');
    expect(reports[0]!.completion).toBe('applied');
    expect(reports[0]!.error!.code).toBe('ERR_WORKER_CRASHED');
    expect(reports[0]!.error!.message).toMatch(/prepare-broken: cannot load/);
  });
});

describe('PreparationDriver: deadline', () => {
  it('fails a hung unit at its deadline, starts the next, and lets the hung worker drain to its boundary', async () => {
    const { coord } = setup();
    const hung = makeKey(0, { task: 'hang' });
    const next = makeKey(1);
    coord.onWait(consumer(0), hung);
    coord.onWait(consumer(1), next);
    const marks = marksBuffer();
    const grants = new Grants(2);
    const { driver, reports } = drive(coord, grants, 'prepare-hang.mjs', {
      deadlineMs: 300,
      worker: { filename: fixture('prepare-hang.mjs'), workerData: { marks, holdAfterAbort: true } },
    });
    driver.poke();
    await until(() => expect(reports).toHaveLength(2));

    expect(reports[0]!.work.key.hex).toBe(hung.hex);
    expect(reports[0]!.result).toBe('deadline');
    expect(reports[0]!.completion).toBe('applied');
    expect(reports[0]!.error!.code).toBe('ERR_DEADLINE');
    expect(reports[1]!.work.key.hex).toBe(next.hex);
    expect(reports[1]!.result).toBe('succeeded');
    expect(reports[1]!.completion).toBe('applied');

    // The hung worker was told to stop, not killed: it sees its flag and is still running, holding its grant.
    await until(() => expect(Atomics.load(marks, SAW_ABORT)).toBe(1));
    const hungThread = Atomics.load(marks, STARTED);
    expect(reports[0]!.threadId).toBe(hungThread);
    expect((reports[1]!.value as { threadId: number }).threadId).not.toBe(hungThread);
    expect(Atomics.load(marks, STOPPED)).toBe(0);
    expect(driver.threads.some((w) => w.threadId === hungThread)).toBe(true);
    expect(driver.stats()).toMatchObject({ running: 1, deadlines: 1, succeeded: 1, stale: 0 });
    expect(grants.held).toBe(1);

    // Let it reach its boundary: it stops by itself, and its late result is dropped, not reported.
    Atomics.store(marks, RELEASE, 1);
    await until(() => expect(driver.stats().running).toBe(0));
    expect(Atomics.load(marks, STOPPED)).toBe(1);
    expect(driver.stats()).toMatchObject({ stale: 1, deadlines: 1, succeeded: 1, failed: 0 });
    expect(reports).toHaveLength(2);
    expect(coord.stats()).toMatchObject({ completed: 1, failed: 1, staleEvents: 0 });
    expect(grants.released).toBe(2);
  });

  it('with killOnDeadline, terminates the hung worker; the next unit runs on another', async () => {
    const { coord } = setup();
    coord.onWait(consumer(0), makeKey(0, { task: 'hang' }));
    coord.onWait(consumer(1), makeKey(1));
    const marks = marksBuffer();
    const grants = new Grants(1);
    const { driver, reports } = drive(coord, grants, 'prepare-hang.mjs', {
      deadlineMs: 1000,
      killOnDeadline: true,
      worker: { filename: fixture('prepare-hang.mjs'), workerData: { marks, holdAfterAbort: false } },
    });
    driver.poke();
    await until(() => expect(Atomics.load(marks, STARTED)).not.toBe(0));
    const hungThread = Atomics.load(marks, STARTED);
    const worker = driver.threads.find((w) => w.threadId === hungThread);
    expect(worker).toBeDefined();
    const exited = once(worker!, 'exit');

    await until(() => expect(reports).toHaveLength(2));
    await exited;
    expect(reports[0]!.result).toBe('deadline');
    expect(reports[0]!.error!.code).toBe('ERR_DEADLINE');
    expect(reports[1]!.result).toBe('succeeded');
    expect((reports[1]!.value as { threadId: number }).threadId).not.toBe(hungThread);
    // Killed, not asked: it never saw its flag and never reached its boundary.
    expect(Atomics.load(marks, SAW_ABORT)).toBe(0);
    expect(Atomics.load(marks, STOPPED)).toBe(0);
    expect(driver.threads.some((w) => w.threadId === hungThread)).toBe(false);
    await until(() => expect(driver.stats().running).toBe(0));
    expect(driver.stats()).toMatchObject({ deadlines: 1, succeeded: 1, stale: 0 });
    expect(grants.released).toBe(2);
  });
});

describe('PreparationDriver: cancellation', () => {
  it('forwards work.signal: the worker sees its flag, stops at its boundary, and the stop leaves no failed history', async () => {
    const { coord } = setup();
    const key = makeKey(0, { task: 'hang' });
    const ticket = ticketOf(coord.onWait(consumer(0), key));
    const marks = marksBuffer();
    const { driver, reports } = drive(coord, new Grants(1), 'prepare-hang.mjs', {
      worker: { filename: fixture('prepare-hang.mjs'), workerData: { marks, holdAfterAbort: false } },
    });
    driver.poke();
    await until(() => expect(Atomics.load(marks, STARTED)).not.toBe(0));
    const work = coord.inFlight!;
    expect(work.signal.aborted).toBe(false);

    expect(coord.onCancel(ticket)).toBe(true);
    expect(work.signal.aborted).toBe(true);
    await until(() => expect(reports).toHaveLength(1));
    expect(Atomics.load(marks, SAW_ABORT)).toBe(1);
    expect(Atomics.load(marks, STOPPED)).toBe(1);
    expect(reports[0]!.result).toBe('failed');
    expect(reports[0]!.completion).toBe('applied');
    expect(reports[0]!.error!.code).toBe('ERR_PREPARE_FAILED');
    expect((reports[0]!.error!.cause as Error).name).toBe('AbortError');
    expect(driver.stats()).toMatchObject({ failed: 1, crashed: 0, deadlines: 0 });
    expect(coord.stats()).toMatchObject({ failed: 1, wasted: 0, inFlight: 0 });
    // A stop is not evidence against the key: a later wait queues it again.
    const again = coord.onWait(consumer(1), key);
    expect(again.status).toBe('queued');
    coord.onCancel(ticketOf(again));
  });
});

describe('PreparationDriver: the event loop', () => {
  it('keeps ticking while a worker does 300 ms of busy CPU work', async () => {
    const { coord } = setup();
    coord.onWait(consumer(0), makeKey(0));
    const { driver, reports } = drive(coord, new Grants(1), 'prepare-slow.mjs');
    let ticks = 0;
    const interval = setInterval(() => ticks++, 5);
    try {
      driver.poke();
      await until(() => expect(driver.stats().started).toBe(1));
      const before = ticks;
      await until(() => expect(reports).toHaveLength(1));
      expect(ticks - before).toBeGreaterThan(0);
    } finally {
      clearInterval(interval);
    }
    expect(reports[0]!.result).toBe('succeeded');
    expect((reports[0]!.value as { threadId: number }).threadId).not.toBe(mainThreadId);
  });

  it('takes a poke from inside a backend call: nothing runs re-entrantly, the wake is not held up', async () => {
    let driver!: PreparationDriver;
    const coord = withBackend({
      tryPinReady: () => {
        driver.poke();
        return { kind: 'miss', reason: 'absent' };
      },
    });
    const reports: PreparationReport[] = [];
    driver = new PreparationDriver({
      coordinator: coord,
      grants: new Grants(1),
      worker: { filename: fixture('prepare-ok.mjs') },
      onSettled: (r) => reports.push(r),
    });
    open.push(driver);
    coord.onWait(consumer(0), makeKey(0));
    const other = ticketOf(coord.onWait(consumer(1), makeKey(0)));
    // The only poke comes from inside tryPinReady, where a synchronous beginNext would throw ERR_REENTRANT.
    expect(coord.onWake(other)).toEqual({ kind: 'miss', reason: 'absent' });
    await until(() => expect(reports).toHaveLength(1));
    expect(reports[0]!.work.key.hex).toBe(makeKey(0).hex);
    expect(reports[0]!.completion).toBe('applied');
  });
});

describe('PreparationDriver: close', () => {
  it('stops pulling, lets the unit in flight finish and report, then ends', async () => {
    const { coord } = setup();
    coord.onWait(consumer(0), makeKey(0));
    coord.onWait(consumer(1), makeKey(1));
    const grants = new Grants(2);
    const { driver, reports } = drive(coord, grants, 'prepare-slow.mjs');
    driver.poke();
    await until(() => expect(driver.stats().started).toBe(1));
    await driver.close();
    expect(reports).toHaveLength(1);
    expect(reports[0]!.result).toBe('succeeded');
    expect(reports[0]!.completion).toBe('applied');
    expect(driver.stats()).toMatchObject({ started: 1, running: 0 });
    expect(coord.stats()).toMatchObject({ queued: 1, inFlight: 0 });
    expect(grants.released).toBe(1);
    expect(driver.threads).toHaveLength(0);
  });

  it('with force, terminates a running unit and reports it failed (ERR_CLOSED)', async () => {
    const { coord } = setup();
    coord.onWait(consumer(0), makeKey(0, { task: 'hang' }));
    const marks = marksBuffer();
    const grants = new Grants(1);
    const { driver, reports } = drive(coord, grants, 'prepare-hang.mjs', {
      worker: { filename: fixture('prepare-hang.mjs'), workerData: { marks, holdAfterAbort: false } },
    });
    driver.poke();
    await until(() => expect(Atomics.load(marks, STARTED)).not.toBe(0));
    await driver.close({ force: true });
    expect(reports).toHaveLength(1);
    expect(reports[0]!.result).toBe('closed');
    expect(reports[0]!.error!.code).toBe('ERR_CLOSED');
    expect(reports[0]!.completion).toBe('applied');
    expect(Atomics.load(marks, STOPPED)).toBe(0);
    expect(driver.stats()).toMatchObject({ closed: 1, running: 0 });
    expect(grants.released).toBe(1);
  });
});

describe('PreparationDriver: options', () => {
  const { coord } = setup();
  const base = { coordinator: coord, grants: new Grants(1), worker: { filename: fixture('prepare-ok.mjs') } };
  const bad: Array<[string, Record<string, unknown>, string]> = [
    ['an unknown option', { ...base, deadline: 5 }, 'deadline'],
    ['an unknown worker option', { ...base, worker: { filename: fixture('prepare-ok.mjs'), threads: 2 } }, 'worker.threads'],
    ['a relative filename', { ...base, worker: { filename: 'fixtures/prepare-ok.mjs' } }, 'worker.filename'],
    ['a non-positive deadline', { ...base, deadlineMs: 0 }, 'deadlineMs'],
    ['killOnDeadline without a deadline', { ...base, killOnDeadline: true }, 'killOnDeadline'],
    ['a grant source without release', { ...base, grants: { acquire: () => null } }, 'grants'],
    ['no coordinator', { ...base, coordinator: {} }, 'coordinator'],
    ['maxThreads below minThreads', { ...base, worker: { filename: fixture('prepare-ok.mjs'), minThreads: 3, maxThreads: 2 } }, 'worker.maxThreads'],
  ];
  for (const [name, options, field] of bad) {
    it(`rejects ${name} (ERR_INVALID_ARGUMENT, field ${field})`, () => {
      let caught: unknown;
      try {
        new PreparationDriver(options as unknown as PreparationDriverOptions);
      } catch (e) {
        caught = e;
      }
      expect(caught).toBeInstanceOf(WaitprepError);
      expect((caught as WaitprepError).code).toBe('ERR_INVALID_ARGUMENT');
      expect((caught as WaitprepError).field).toBe(field);
    });
  }
});

describe('PreparationDriver: one file per thread', () => {
  const dist = join(import.meta.dirname, '..', '..', 'dist');

  it('points piscina at the compiled worker module in dist/', () => {
    expect(WORKER_FILENAME).toBe(join(dist, 'driver', 'worker.js'));
    expect(existsSync(WORKER_FILENAME)).toBe(true);
  });

  it('loads only the protocol, errors and key-fields on a worker thread (run-time imports, followed through dist/)', async () => {
    await lexerReady;
    const seen = new Set<string>();
    const computed: string[] = [];
    const visit = (file: string): void => {
      if (seen.has(file)) return;
      seen.add(file);
      // Type-only imports are erased by tsc, so what remains in dist/ is what a thread loads:
      // every static import (side-effect ones included), `export ... from` and `import('...')`,
      // read by es-module-lexer as scripts/check-import-cycles.js reads them.
      const source = readFileSync(file, 'utf8');
      for (const imp of parseImports(source, file)[0]) {
        if (imp.d === -2) continue; // import.meta
        const specifier = imp.n;
        if (specifier === undefined) computed.push(`${relative(dist, file)}: import(${source.slice(imp.s, imp.e)})`);
        else if (specifier.startsWith('.')) visit(resolve(dirname(file), specifier));
        else expect(specifier, `${relative(dist, file)} imports ${specifier}`).toMatch(/^node:/);
      }
    };
    visit(WORKER_FILENAME);
    expect([...seen].map((file) => relative(dist, file)).sort()).toEqual(['driver/protocol.js', 'driver/worker.js', 'errors.js', 'keys/key-fields.js']);
    // The one import that cannot be followed is the user's preparation module (loadPrepare).
    expect(computed).toEqual(['driver/worker.js: import(module)']);
  });
});
