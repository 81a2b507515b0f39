// The demo's storage-worker process: the lease table's single producer, on its own.
//
// Forked by the demo (`child_process.fork('bin/storage-worker.js', [...])`), it creates the
// native lease table (POSIX shared memory), serves the storage logic of worker/storage.js on a
// Unix socket (`--socket PATH`) until told to exit, and cleans up. Its arena is the directory the
// arena naming rule gives the table (`/dev/shm/<table>-arena`, docs/arena-records.md; `--arena`
// may name it, under another root, with the same `<table>-arena` name), holding one arena
// record per artifact; one that exists already is refused unless it is a directory, not a link,
// owned by this user and writable by nobody else (ensureArenaDirectory). Its IPC channel carries only the lifecycle: 'ready' once it serves;
// { type: 'exit' } is answered by { type: 'bye', stats }, then it closes the table, removes the
// table, the socket and the arena files, and exits 0. A parent that disconnects without 'exit'
// gets the same clean-up.
//
// WAITPREP_STORAGE_EXIT_AFTER=N (testing): the process exits with code 3, without replying,
// when request N+1 arrives, to show that the demo notices a dead storage worker.
import { rmSync } from 'node:fs';
import { arenaDirectory, openLeaseTable, unlinkLeaseTable } from 'waitprep';
import { serveSocket, startStorage } from '../worker/storage.js';

function option(args, name, fallback) {
  const at = args.indexOf(name);
  return at >= 0 && at + 1 < args.length ? args[at + 1] : fallback;
}

async function main() {
  const args = process.argv.slice(2);
  const tableName = option(args, '--table');
  const arenaDir = tableName ? option(args, '--arena', arenaDirectory(tableName)) : undefined;
  const socketPath = option(args, '--socket');
  const budgetBytes = Number(option(args, '--budget', String(64 << 20)));
  const capacity = Number(option(args, '--capacity', '4096'));
  if (!tableName || !arenaDir || !socketPath || !(budgetBytes > 0) || typeof process.send !== 'function') {
    process.stderr.write('usage (forked with IPC): storage-worker.js --table NAME --socket PATH [--arena ROOT/NAME-arena] [--budget BYTES] [--capacity N]\n');
    process.exit(2);
  }
  const exitAfter = process.env.WAITPREP_STORAGE_EXIT_AFTER ? Number(process.env.WAITPREP_STORAGE_EXIT_AFTER) : Infinity;
  const table = openLeaseTable({ name: tableName, role: 'producer', implementation: 'native', create: { capacity } });
  let storage;
  try {
    storage = startStorage({ table, arenaDir, budgetBytes, exitAfter });
  } catch (error) {
    table.close();
    unlinkLeaseTable(tableName);
    throw error;
  }
  const server = await serveSocket(storage, socketPath);
  let closed = false;
  const shutdown = (code) => {
    if (closed) return;
    closed = true;
    server.close();
    rmSync(socketPath, { force: true });
    storage.close();
    table.close();
    try {
      unlinkLeaseTable(tableName);
    } catch {
      // already gone
    }
    process.exit(code);
  };
  process.on('message', (message) => {
    if (message?.type === 'exit') {
      const stats = storage.stats();
      process.send({ type: 'bye', stats }, () => shutdown(0));
    }
  });
  // The parent died (IPC closed) without saying 'exit': clean up anyway.
  process.on('disconnect', () => shutdown(0));
  process.send({ type: 'ready', pid: process.pid, implementation: table.implementation, table: tableName, arena: arenaDir, socket: socketPath, budgetBytes });
}

main().catch((error) => {
  // A WaitprepError (no space in /dev/shm, a table that exists, ...) says what to do in its
  // message; anything else is a bug, shown with its stack.
  const known = error instanceof Error && typeof error.code === 'string' && error.code.startsWith('ERR_');
  process.stderr.write(`storage worker: ${known ? `${error.code}: ${error.message}` : error instanceof Error ? error.stack : String(error)}\n`);
  process.exit(1);
});
