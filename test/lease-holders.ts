// Shared by the tests that run lease-holder child processes against native tables
// (test/lease-table-crash.test.ts, test/cli-inspect.test.ts): start a holder, track the
// tables and children a test makes, and clean them all up after it.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { openLeaseTable, unlinkLeaseTable, type LeaseTable } from '../lib/index.js';

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

  return {
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
}
