// Child processes and worker threads for the multi-process tests: lease-holder children against
// native tables (test/lease-table/crash.test.ts, test/cli/inspect.test.ts), and pinners that
// report one JSON result when they end (test/lease-table/multiprocess.test.ts,
// test/lease-table/device-records-multiprocess.test.ts).
import { spawn, type ChildProcess } from 'node:child_process';
import { Worker } from 'node:worker_threads';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { artifactKey, openLeaseTable, unlinkLeaseTable, type LeaseTable } from '../lib/index.js';
import { keyFields, publicationMeta } from './fixtures/lease-stress-common.mjs';

const HOLDER = join(import.meta.dirname, 'fixtures', 'lease-holder.mjs');

/** A test/fixtures/lease-holder.mjs child: as a consumer it pins a key twice, as a producer it reserves it. */
export interface Holder {
  child: ChildProcess;
  pid: number;
  /** The first JSON line the child printed. */
  message: Promise<Record<string, unknown>>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stderr: () => string;
}

/** Native tables and holder children of one test file, all released by `cleanup()`. */
export function leaseHolders(prefix: string) {
  const children: Holder[] = [];
  const tables: LeaseTable[] = [];
  const names: string[] = [];

  const api = {
    /** A fresh table name, unlinked at cleanup. */
    tableName(): string {
      const name = `${prefix}-${process.pid}-${randomBytes(4).toString('hex')}`;
      names.push(name);
      return name;
    },

    /** openLeaseTable on the native implementation, closed at cleanup. */
    open(options: Parameters<typeof openLeaseTable>[0]): LeaseTable {
      const table = openLeaseTable({ implementation: 'native', ...options });
      tables.push(table);
      return table;
    },

    /**
     * A fresh native table whose producer (this process) published keys 0 and 1, and a consumer
     * holder child that pinned key 0 twice: the start of every crash and inspect test.
     */
    async pinnedByHolder(): Promise<{ name: string; producer: LeaseTable; holder: Holder; index: number; slot: number }> {
      const name = api.tableName();
      const producer = api.open({ name, role: 'producer', create: { capacity: 64 } });
      producer.publish(producer.reserve(artifactKey(keyFields(0))), publicationMeta(0, 1));
      producer.publish(producer.reserve(artifactKey(keyFields(1))), publicationMeta(1, 2));
      const holder = api.startHolder(name, 'consumer', 0);
      const said = await holder.message;
      if (said.event !== 'pinned' || said.pins !== 2 || said.pid !== holder.pid) throw new Error(`holder said ${JSON.stringify(said)}`);
      return { name, producer, holder, index: said.clientIndex as number, slot: said.slot as number };
    },

    startHolder(name: string, role: 'consumer' | 'producer', keyIndex: number): Holder {
      const child = spawn(process.execPath, [HOLDER, name, role, String(keyIndex)], { stdio: ['pipe', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
      const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
        child.on('exit', (code, signal) => resolve({ code, signal }));
      });
      const message = new Promise<Record<string, unknown>>((resolve, reject) => {
        child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
          stdout += chunk;
          const end = stdout.indexOf('\n');
          if (end >= 0) resolve(JSON.parse(stdout.slice(0, end)) as Record<string, unknown>);
        });
        void exited.then(({ code, signal }) => reject(new Error(`holder exited (${code ?? signal}) before saying anything: ${stderr}`)));
      });
      message.catch(() => {}); // awaited by the tests; a rejection after the resolve is moot
      const holder: Holder = { child, pid: child.pid!, message, exited, stderr: () => stderr };
      children.push(holder);
      return holder;
    },

    /** Kills children still running, closes tables, unlinks names. Call from afterEach. */
    async cleanup(): Promise<void> {
      for (const h of children.splice(0)) {
        if (h.child.exitCode === null && h.child.signalCode === null) h.child.kill('SIGKILL');
        await h.exited;
      }
      for (const t of tables.splice(0)) t.close();
      for (const name of names.splice(0)) unlinkLeaseTable(name);
    },
  };
  return api;
}

/** How a pinner ended: its one JSON result (or null), exit code, signal and output for messages. */
export interface Ended<R> {
  result: R | null;
  code: number | null;
  signal: string | null;
  log: string;
}

/** A running pinner: `done` settles when it ends; `kill` stops it at once. */
export interface Running<R> {
  done: Promise<Ended<R>>;
  kill: () => void;
}

/** Runs `node script ...args`; its result is the JSON it printed on stdout. */
export function childWithResult<R>(script: string, args: string[]): Running<R> {
  const child = spawn(process.execPath, [script, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const done = new Promise<Ended<R>>((resolve) => {
    child.on('close', (code, signal) => {
      let result: R | null = null;
      try {
        result = JSON.parse(stdout.trim()) as R;
      } catch {
        // reported through `log`
      }
      resolve({ result, code, signal, log: `stdout: ${stdout}\nstderr: ${stderr}` });
    });
  });
  return {
    done,
    kill: () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    },
  };
}

/** Runs `script` as a worker_thread; its result is the last message it posted. */
export function workerWithResult<R>(script: string, workerData: unknown): Running<R> {
  const worker = new Worker(script, { workerData });
  let result: R | null = null;
  let error = '';
  worker.on('message', (message: R) => (result = message));
  worker.on('error', (e) => (error += String((e as Error)?.stack ?? e)));
  const done = new Promise<Ended<R>>((resolve) => {
    worker.on('exit', (code) => resolve({ result, code, signal: null, log: `error: ${error}` }));
  });
  return { done, kill: () => void worker.terminate() };
}

/**
 * Runs `step` over and over (yielding to the event loop every 256 steps, so the children's
 * results come in) until every one of `running` has ended; returns how they ended.
 */
export async function stepUntilEnded<R>(running: Array<Running<R>>, step: () => void): Promise<Array<Ended<R>>> {
  let left = running.length;
  for (const r of running) void r.done.then(() => left--);
  while (left > 0) {
    for (let i = 0; i < 256; i++) step();
    await new Promise((resolve) => setImmediate(resolve));
  }
  return Promise.all(running.map((r) => r.done));
}
