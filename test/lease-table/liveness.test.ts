// The liveness rule (lib/lease-table/liveness.ts) that the JavaScript fallback's reaper and
// `waitprep inspect` share with table.c's reaper, branch by branch. Live, killed-but-not-waited
// (zombie) and waited-for processes are real children; a pid reused under another start time is
// a live child's pid with a start time it never had. Namespaces are judged against a stated
// observer, and, where `unshare` works here, from a real child in another pid or time namespace.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, readFileSync, readlinkSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { transformWithOxc } from 'vite';
import { Worker } from 'node:worker_threads';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import type { ClientInspection, TableInspection } from '../../lib/index.js';
import { taskStartTime, threadReleased } from '../fixtures/os-thread.mjs';
import { judgeInspection } from '../../lib/lease-table/inspect.js';
import {
  clientIsDead,
  holdsReaper,
  judgeClient,
  judgeReaper,
  judgeThread,
  readProcStat,
  reaperNamed,
  selfIdentity,
  selfThread,
  type Identity,
  type RecordedClient,
  type RegistryEntry,
} from '../../lib/lease-table/liveness.js';

const root = join(import.meta.dirname, '..', '..');
const me = selfIdentity();
const children: ChildProcess[] = [];

/** A child that sleeps until killed; resolved once it has exec'd, so /proc shows it. */
async function sleeper(command = process.execPath): Promise<ChildProcess> {
  const child = spawn(command, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
  children.push(child);
  await once(child, 'spawn');
  return child;
}

/** SIGKILLs a child and waits for it, so its /proc entry is gone. */
async function killAndWait(child: ChildProcess): Promise<number> {
  const exited = once(child, 'exit');
  child.kill('SIGKILL');
  await exited;
  expect(existsSync(`/proc/${child.pid}`)).toBe(false);
  return child.pid!;
}

const sleep = new Int32Array(new SharedArrayBuffer(4));
/**
 * SIGKILLs a child and polls /proc synchronously until it is a zombie: the event loop does not
 * turn meanwhile, so Node cannot wait for it. The bound only keeps a broken kernel from hanging.
 */
function killToZombie(child: ChildProcess): void {
  child.kill('SIGKILL');
  for (let waited = 0; waited < 5_000 && readProcStat(child.pid!)?.state !== 'Z'; waited++) Atomics.wait(sleep, 0, 0, 1);
  expect(readProcStat(child.pid!)?.state).toBe('Z');
}

/**
 * A temporary folder holding liveness.ts (and layout.ts) built to plain JavaScript, for children
 * and workers, which run plain Node, and `script` under the name `file`.
 */
async function builtLiveness(file: string, script: string): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'waitprep-liveness-'));
  for (const source of ['layout.ts', 'liveness.ts']) {
    const { code } = await transformWithOxc(readFileSync(join(root, 'lib', 'lease-table', source), 'utf8'), source, {});
    writeFileSync(join(dir, source.replace(/\.ts$/, '.js')), code);
  }
  writeFileSync(join(dir, 'package.json'), '{"type":"module"}');
  writeFileSync(join(dir, file), script);
  return dir;
}

/** An ACTIVE entry recorded in our namespaces for `pid` (with its real start time unless given). */
function recorded(pid: number, overrides: Partial<RecordedClient> = {}): RecordedClient {
  return { state: 'active', pid, startTime: readProcStat(pid)?.startTime ?? 1n, pidNamespace: me.pidNs, timeNamespace: me.timeNs, ...overrides };
}

/** A registry entry holding `pid` as an ACTIVE client of serial `serial`. */
function registry(pid: number, serial: number, overrides: Partial<RegistryEntry> = {}): RegistryEntry {
  return { ...recorded(pid), serial, ...overrides };
}

afterEach(() => {
  for (const child of children.splice(0)) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  vi.restoreAllMocks();
});

describe('readProcStat and selfIdentity', () => {
  it('read this process as table.c self_identity does', () => {
    expect(me.pid).toBe(process.pid);
    expect(me.startTime).toBe(readProcStat('self')!.startTime);
    expect(readProcStat(process.pid)).toEqual(readProcStat('self'));
    expect(me.pidNs).toBe(statSync('/proc/self/ns/pid', { bigint: true }).ino);
    expect(me.pidNs).not.toBe(0n);
    expect(selfIdentity()).toBe(me); // read once per process
  });

  it('take the start time after the last parenthesis of the command name', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'waitprep-liveness-'));
    try {
      const odd = join(dir, 'a) b (c');
      symlinkSync(process.execPath, odd);
      const child = await sleeper(odd);
      expect(readFileSync(`/proc/${child.pid}/comm`, 'latin1')).toBe('a) b (c\n');
      const fields = readFileSync(`/proc/${child.pid}/stat`, 'latin1').split(' ');
      // Split naively, the name's spaces shift every field: field 22 is no longer the 22nd word.
      expect(readProcStat(child.pid!)).toEqual({ state: expect.stringMatching(/^[RS]$/), startTime: BigInt(fields[21 + 2]!) });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('return null for a pid that has no /proc entry', async () => {
    const pid = await killAndWait(await sleeper());
    expect(readProcStat(pid)).toBeNull();
  });
});

describe('judgeClient: an entry of our own pid and time namespaces', () => {
  it('a live process with its start time is alive', async () => {
    const child = await sleeper();
    expect(judgeClient(recorded(child.pid!))).toEqual({ liveness: 'alive', reason: 'running' });
    expect(clientIsDead(child.pid!, readProcStat(child.pid!)!.startTime)).toBe(false);
  });

  it('a live pid under another start time is a reused pid: dead', async () => {
    const child = await sleeper();
    const entry = recorded(child.pid!, { startTime: readProcStat(child.pid!)!.startTime + 1n });
    expect(judgeClient(entry)).toEqual({ liveness: 'dead', reason: 'pid-reused' });
    expect(clientIsDead(entry.pid, entry.startTime)).toBe(true);
  });

  it('a killed process not yet waited for (a zombie) is dead', async () => {
    const child = await sleeper();
    const entry = recorded(child.pid!);
    killToZombie(child);
    expect(judgeClient(entry)).toEqual({ liveness: 'dead', reason: 'zombie' });
    expect(clientIsDead(entry.pid, entry.startTime)).toBe(true);
  });

  it('a killed process waited for (no /proc entry, kill(pid, 0) says ESRCH) is dead', async () => {
    const child = await sleeper();
    const entry = recorded(child.pid!);
    await killAndWait(child);
    expect(judgeClient(entry)).toEqual({ liveness: 'dead', reason: 'gone' });
    expect(clientIsDead(entry.pid, entry.startTime)).toBe(true);
  });

  it('a pid /proc does not show but kill(pid, 0) finds (hidepid) is alive', async () => {
    const pid = await killAndWait(await sleeper());
    const kill = vi.spyOn(process, 'kill').mockImplementation(() => true);
    expect(judgeClient(recorded(pid))).toEqual({ liveness: 'alive', reason: 'hidden' });
    kill.mockImplementation(() => {
      throw Object.assign(new Error('kill EPERM'), { code: 'EPERM' });
    });
    expect(judgeClient(recorded(pid))).toEqual({ liveness: 'alive', reason: 'hidden' });
    expect(kill).toHaveBeenCalledWith(pid, 0);
  });

  it('this process under its own start time is alive; under another, a dead predecessor', () => {
    expect(judgeClient(recorded(process.pid))).toEqual({ liveness: 'alive', reason: 'self' });
    expect(judgeClient(recorded(process.pid, { startTime: me.startTime + 1n }))).toEqual({ liveness: 'dead', reason: 'pid-reused' });
  });

  it('a CLAIMING entry, which has not written its identity yet, is judged by its pid alone', async () => {
    const live = await sleeper();
    const dead = await sleeper();
    // What the entry holds besides the pid is a previous registration's: ignored.
    const stale = { state: 'claiming', startTime: 12345n, pidNamespace: me.pidNs + 1n, timeNamespace: me.timeNs + 1n } as const;
    expect(judgeClient(recorded(live.pid!, stale))).toEqual({ liveness: 'alive', reason: 'running' });
    await killAndWait(dead);
    expect(judgeClient(recorded(dead.pid!, stale))).toEqual({ liveness: 'dead', reason: 'gone' });
  });
});

describe('judgeClient: namespaces', () => {
  it('an entry of another pid namespace is unknown, however its pid looks here', async () => {
    const child = await sleeper();
    const entry = recorded(child.pid!, { pidNamespace: me.pidNs + 1n });
    expect(judgeClient(entry)).toEqual({ liveness: 'unknown', reason: 'other-pid-namespace' });
    await killAndWait(child);
    expect(judgeClient(entry)).toEqual({ liveness: 'unknown', reason: 'other-pid-namespace' });
  });

  it('an entry that recorded an unknown pid namespace (0) is never judged', async () => {
    const pid = await killAndWait(await sleeper());
    expect(judgeClient(recorded(pid, { pidNamespace: 0n }))).toEqual({ liveness: 'unknown', reason: 'client-namespace-unknown' });
  });

  it('an entry of another time namespace is unknown (its start time was read on another clock)', async () => {
    const child = await sleeper();
    const entry = recorded(child.pid!, { startTime: 1n, timeNamespace: me.timeNs + 1n });
    expect(judgeClient(entry)).toEqual({ liveness: 'unknown', reason: 'other-time-namespace' });
  });

  it('an observer whose own pid namespace is unknown judges nobody', async () => {
    const blind: Identity = { ...me, pidNs: 0n };
    const live = await sleeper();
    const killed = await sleeper();
    const dead = recorded(killed.pid!);
    await killAndWait(killed);
    for (const entry of [recorded(live.pid!), dead, { ...dead, state: 'claiming' as const }, recorded(process.pid)]) {
      expect(judgeClient(entry, blind)).toEqual({ liveness: 'unknown', reason: 'observer-namespace-unknown' });
    }
    // Entries it recorded (pid namespace 0) are unknown to everyone else in turn.
    expect(judgeClient(recorded(live.pid!, { pidNamespace: 0n }))).toMatchObject({ liveness: 'unknown' });
  });
});

describe('reaperNamed and judgeReaper: a REAPING entry is judged by its reaper', () => {
  it('decodes the reaper a REAPING word names', () => {
    expect(reaperNamed(0)).toBe('unregistered');
    expect(reaperNamed((1 << 21) | (1 << 6) | 63)).toEqual({ client: 63, serialLow15: 1 });
    expect(reaperNamed((1 << 21) | (0x7fff << 6) | 0)).toEqual({ client: 0, serialLow15: 0x7fff });
  });

  it('an unregistered reaper is never taken over, by any observer', () => {
    expect(judgeReaper('unregistered', undefined)).toEqual({ liveness: 'unknown', reason: 'reaper-unregistered' });
    expect(judgeReaper('unregistered', undefined, { ...me, pidNs: 0n })).toEqual({ liveness: 'unknown', reason: 'reaper-unregistered' });
  });

  it('a reaper whose entry no longer holds it (free, another serial, not ACTIVE) is gone', async () => {
    const child = await sleeper();
    const reaper = { client: 7, serialLow15: 3 };
    const left = { liveness: 'dead', reason: 'reaper-left' };
    expect(judgeReaper(reaper, undefined)).toEqual(left);
    expect(judgeReaper(reaper, registry(child.pid!, 4))).toEqual(left); // another client took the entry
    expect(judgeReaper(reaper, registry(child.pid!, 3, { state: 'claiming' }))).toEqual(left);
    expect(judgeReaper(reaper, registry(child.pid!, 3, { state: 'reaping' }))).toEqual(left);
    expect(holdsReaper(reaper, registry(child.pid!, 3))).toBe(true);
  });

  it('a reaper that still holds its entry is judged as that client', async () => {
    const child = await sleeper();
    // Only the low 15 bits of the serial are in the REAPING word.
    const reaper = { client: 7, serialLow15: 5 };
    const entry = registry(child.pid!, 0x8000 + 5);
    expect(judgeReaper(reaper, entry)).toEqual({ liveness: 'alive', reason: 'running' });
    expect(judgeReaper(reaper, { ...entry, pidNamespace: me.pidNs + 1n })).toEqual({ liveness: 'unknown', reason: 'other-pid-namespace' });
    expect(judgeReaper(reaper, { ...entry, timeNamespace: me.timeNs + 1n })).toEqual({ liveness: 'unknown', reason: 'other-time-namespace' });
    expect(judgeReaper(reaper, entry, { ...me, pidNs: 0n })).toEqual({ liveness: 'unknown', reason: 'observer-namespace-unknown' });
    expect(judgeReaper(reaper, { ...entry, startTime: entry.startTime + 1n })).toEqual({ liveness: 'dead', reason: 'pid-reused' });
    killToZombie(child);
    expect(judgeReaper(reaper, entry)).toEqual({ liveness: 'dead', reason: 'zombie' });
    await killAndWait(child);
    expect(judgeReaper(reaper, entry)).toEqual({ liveness: 'dead', reason: 'gone' });
  });

  it('a reaper that is this process is alive', () => {
    expect(judgeReaper({ client: 2, serialLow15: 9 }, registry(process.pid, 9))).toEqual({ liveness: 'alive', reason: 'self' });
  });
});

// A fallback client entry of a worker thread names the worker's OS thread: a worker stopped with
// worker.terminate() leaves a process that lives on, so the thread decides.
const THREAD_OF_WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const tid = Number(require('node:fs').readlinkSync('/proc/thread-self').split('/')[2]);
parentPort.postMessage(tid);
if (workerData.hold === 'wait') for (;;) Atomics.wait(workerData.control, 0, 0);
for (;;);
`;
/** A worker that reports its OS thread id, then blocks in Atomics.wait (`'wait'`) or spins (`'spin'`) until terminated. */
async function threadOfWorker(hold: 'wait' | 'spin'): Promise<{ worker: Worker; tid: number; startTime: bigint }> {
  const worker = new Worker(THREAD_OF_WORKER, { eval: true, workerData: { hold, control: new Int32Array(new SharedArrayBuffer(4)) } });
  workers.push(worker);
  const [tid] = (await once(worker, 'message')) as [number];
  return { worker, tid, startTime: taskStartTime(tid) };
}
const workers: Worker[] = [];
afterAll(async () => {
  await Promise.all(workers.map((w) => w.terminate()));
});

describe('selfThread and judgeThread: an entry that names an OS thread of this process', () => {
  it('selfThread reads the calling thread: the main thread is the pid, a worker its own task', async () => {
    const main = selfThread()!;
    expect(main).toEqual({ tid: process.pid, startTime: taskStartTime(process.pid) });
    expect(selfThread()).toBe(main); // read once per thread
    // The worker runs the module built from the same source, so its selfThread is its own.
    const dir = await builtLiveness('self.js', `import { parentPort } from 'node:worker_threads';
import { readlinkSync } from 'node:fs';
import { selfThread } from './liveness.js';
const t = selfThread();
// Stay until terminated: a worker that ran out of work would end its thread, and its /proc entry
// with it, before the test has read the entry.
parentPort.on('message', () => {});
parentPort.postMessage({ tid: t.tid, startTime: String(t.startTime), link: readlinkSync('/proc/thread-self') });
`);
    try {
      const worker = new Worker(join(dir, 'self.js'));
      const [seen] = (await once(worker, 'message')) as [{ tid: number; startTime: string; link: string }];
      expect(seen.link).toBe(`${process.pid}/task/${seen.tid}`);
      expect(seen.tid).not.toBe(process.pid);
      expect(BigInt(seen.startTime)).toBe(taskStartTime(seen.tid));
      await worker.terminate();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a live thread is running however long it runs no JavaScript; a terminated one is gone', async () => {
    const waiting = await threadOfWorker('wait');
    const spinning = await threadOfWorker('spin');
    expect(judgeThread(waiting.tid, waiting.startTime)).toEqual({ liveness: 'alive', reason: 'thread-running' });
    expect(judgeThread(spinning.tid, spinning.startTime)).toEqual({ liveness: 'alive', reason: 'thread-running' });
    expect(judgeThread(process.pid, selfThread()!.startTime)).toEqual({ liveness: 'alive', reason: 'thread-running' });
    // Another start time under a live tid: a thread that reused a gone one's tid.
    expect(judgeThread(waiting.tid, waiting.startTime + 1n)).toEqual({ liveness: 'dead', reason: 'thread-reused' });
    await waiting.worker.terminate();
    await spinning.worker.terminate();
    expect([await threadReleased(waiting.tid), await threadReleased(spinning.tid)]).toEqual([true, true]);
    expect(judgeThread(waiting.tid, waiting.startTime)).toEqual({ liveness: 'dead', reason: 'thread-gone' });
    expect(judgeThread(spinning.tid, spinning.startTime)).toEqual({ liveness: 'dead', reason: 'thread-gone' });
  });

  it('something that is no tid judges nothing', () => {
    for (const tid of [0, -1, 1.5, Number.NaN, 2 ** 60]) expect(judgeThread(tid, 1n)).toEqual({ liveness: 'unknown', reason: 'thread-unreadable' });
  });

  it('judgeClient: an ACTIVE entry of this process that names a thread is judged by the thread, any other as before', async () => {
    const waiting = await threadOfWorker('wait');
    const ofThread = recorded(process.pid, { osThread: waiting.tid, osThreadStartTime: waiting.startTime });
    expect(judgeClient(ofThread)).toEqual({ liveness: 'alive', reason: 'thread-running' });
    expect(judgeClient({ ...ofThread, osThread: 0 })).toEqual({ liveness: 'alive', reason: 'self' });
    // A dead predecessor of our pid is dead by its start time, whatever thread it names.
    expect(judgeClient({ ...ofThread, startTime: me.startTime + 1n })).toEqual({ liveness: 'dead', reason: 'pid-reused' });
    // Another process: a thread id means nothing outside its own process.
    const child = await sleeper();
    expect(judgeClient(recorded(child.pid!, { osThread: waiting.tid, osThreadStartTime: 1n }))).toEqual({ liveness: 'alive', reason: 'running' });
    // A REAPING entry's reaper, when that reaper names a thread: judged by it too.
    const reaper = registry(process.pid, 3, { osThread: waiting.tid, osThreadStartTime: waiting.startTime });
    expect(judgeReaper({ client: 1, serialLow15: 3 }, reaper)).toEqual({ liveness: 'alive', reason: 'thread-running' });
    expect(judgeClient(ofThread, { ...me, pidNs: 0n })).toEqual({ liveness: 'unknown', reason: 'observer-namespace-unknown' });
    await waiting.worker.terminate();
    expect(await threadReleased(waiting.tid)).toBe(true);
    expect(judgeClient(ofThread)).toEqual({ liveness: 'dead', reason: 'thread-gone' });
    expect(judgeReaper({ client: 1, serialLow15: 3 }, reaper)).toEqual({ liveness: 'dead', reason: 'thread-gone' });
  });

  it('a /proc that will not answer (out of file descriptors) is not a gone thread', async () => {
    // In a child whose descriptors are used up: reading its own main thread's task fails with EMFILE.
    const dir = await builtLiveness('emfile.js', `import { openSync } from 'node:fs';
import { judgeThread, selfIdentity, selfThread } from './liveness.js';
selfIdentity();
const me = selfThread();
let error = '';
try { for (;;) openSync('/dev/null', 'r'); } catch (e) { error = e.code; }
const judged = judgeThread(me.tid, me.startTime);
process.stdout.write(JSON.stringify({ error, judged }));
`);
    try {
      const run = spawnSync('sh', ['-c', `ulimit -n 64 && exec "${process.execPath}" emfile.js`], { cwd: dir, encoding: 'utf8', timeout: 30_000 });
      expect(run.status, run.stderr).toBe(0);
      expect(JSON.parse(run.stdout)).toEqual({ error: 'EMFILE', judged: { liveness: 'unknown', reason: 'thread-unreadable' } });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('judgeInspection: what a reap from here would release', () => {
  function client(index: number, fields: Partial<ClientInspection>): ClientInspection {
    return { index, state: 'active', pid: 0, serial: 1, startTime: 0n, pidNamespace: me.pidNs, timeNamespace: me.timeNs, thread: 0, producer: false, reaper: null, ...fields };
  }
  function view(clients: ClientInspection[], pins: number[][], producer: number | null): TableInspection {
    const meta = { sizeBytes: 0n, location: 0n, checksum: 0n, codecId: 0, representationVersion: 0 };
    const slots = pins.map((pinHolders, slot) => ({ slot, state: 'ready' as const, generation: 0n, pinHolders, digestHex: '00'.repeat(32), meta, device: null }));
    return { abiVersion: 1, capacity: 8, segmentSize: 0n, producer, reapedClients: 0n, clients, slots };
  }

  it('judges each entry, lists dead and stray pins, and says whether a reap is needed', async () => {
    const live = await sleeper();
    const dead = await sleeper();
    const deadStart = readProcStat(dead.pid!)!.startTime;
    await killAndWait(dead);
    const clients = [
      client(0, { pid: process.pid, startTime: me.startTime, serial: 0x8000 + 2 }),
      client(1, { pid: dead.pid!, startTime: deadStart, producer: true }),
      client(2, { state: 'reaping', reaper: { client: 40, serialLow15: 1 } }), // its reaper left
      client(3, { state: 'reaping', reaper: 'unregistered' }),
      client(4, { state: 'reaping', reaper: { client: 0, serialLow15: 2 } }), // we reap it
      client(5, { pid: live.pid!, startTime: readProcStat(live.pid!)!.startTime }), // the inspector
      client(6, { pid: dead.pid!, startTime: deadStart, pidNamespace: me.pidNs + 1n }),
    ];
    const judged = judgeInspection(view(clients, [[1, 5, 9], [0, 2, 6], []], 1), { exclude: 5 });
    expect(judged.clients.map((c) => [c.entry.index, c.judgement.liveness, c.judgement.reason, c.reaperPid])).toEqual([
      [0, 'alive', 'self', null],
      [1, 'dead', 'gone', null],
      [2, 'dead', 'reaper-left', null],
      [3, 'unknown', 'reaper-unregistered', null],
      [4, 'alive', 'self', process.pid],
      [6, 'unknown', 'other-pid-namespace', null],
    ]);
    expect(judged.deadPins).toEqual([{ slot: 0, client: 1, pid: dead.pid }, { slot: 1, client: 2, pid: 0 }]);
    expect(judged.strayPins).toEqual([{ slot: 0, client: 5 }, { slot: 0, client: 9 }]);
    expect(judged).toMatchObject({ deadProducer: true, goneReaper: true, needsReap: true });
  });

  it('needs no reap for dead clients that hold nothing, nor for what it cannot judge', async () => {
    const dead = await sleeper();
    const deadStart = readProcStat(dead.pid!)!.startTime;
    await killAndWait(dead);
    const clients = [
      client(0, { pid: process.pid, startTime: me.startTime, producer: true }),
      client(1, { pid: dead.pid!, startTime: deadStart }),
      client(2, { pid: dead.pid!, startTime: deadStart, timeNamespace: me.timeNs + 1n }),
      client(3, { state: 'reaping', reaper: 'unregistered' }),
    ];
    const judged = judgeInspection(view(clients, [[0, 2]], 0));
    expect(judged.clients.map((c) => c.judgement.liveness)).toEqual(['alive', 'dead', 'unknown', 'unknown']);
    expect(judged).toMatchObject({ deadPins: [], strayPins: [], deadProducer: false, goneReaper: false, needsReap: false });
  });
});

// Real namespaces: a child in a fresh pid namespace (with its own /proc, or keeping ours) or a
// fresh time namespace judges an entry this process recorded. Needs `unshare` and the right to
// create namespaces (root, or unprivileged user namespaces); skipped otherwise.
const canUnshare = spawnSync('unshare', ['-p', '-f', '-m', '--mount-proc', '-T', 'true']).status === 0;
describe.runIf(canUnshare)('the rule across real namespaces (unshare)', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await builtLiveness(
      'judge.js',
      `import { judgeClient, selfIdentity } from './liveness.js';
const entry = JSON.parse(process.argv[2], (k, v) => (k === 'startTime' || k.endsWith('Namespace') ? BigInt(v) : v));
const me = selfIdentity();
process.stdout.write(JSON.stringify({ pidNs: String(me.pidNs), judgement: judgeClient(entry) }));
`,
    );
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  /** Runs judge.js under `unshare …flags` on an entry recorded for `pid` in our namespaces. */
  function judgeFrom(flags: string[], pid: number): { pidNs: string; judgement: unknown } {
    const entry = JSON.stringify(recorded(pid), (_, v) => (typeof v === 'bigint' ? v.toString() : v));
    const run = spawnSync('unshare', [...flags, process.execPath, join(dir, 'judge.js'), entry], { encoding: 'utf8', timeout: 30_000 });
    expect(run.status, run.stderr).toBe(0);
    return JSON.parse(run.stdout);
  }

  it('a pid namespace with its own /proc: our entries are of another pid namespace', async () => {
    const child = await sleeper();
    const seen = judgeFrom(['-p', '-f', '-m', '--mount-proc'], child.pid!);
    expect(seen.pidNs).not.toBe('0');
    expect(seen.pidNs).not.toBe(String(me.pidNs));
    expect(seen.judgement).toEqual({ liveness: 'unknown', reason: 'other-pid-namespace' });
  });

  it('a pid namespace that kept our /proc: its own namespace is unknown, and it judges nobody', async () => {
    expect(readlinkSync('/proc/self')).toBe(String(process.pid));
    const pid = await killAndWait(await sleeper());
    const seen = judgeFrom(['-p', '-f'], pid);
    expect(seen.pidNs).toBe('0');
    expect(seen.judgement).toEqual({ liveness: 'unknown', reason: 'observer-namespace-unknown' });
  });

  it('a time namespace of its own: our start times are on another clock', async () => {
    const child = await sleeper();
    const seen = judgeFrom(['-T', '--boottime', '100'], child.pid!);
    expect(seen.pidNs).toBe(String(me.pidNs));
    expect(seen.judgement).toEqual({ liveness: 'unknown', reason: 'other-time-namespace' });
  });
});
