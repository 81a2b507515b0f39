/**
 * Process liveness as the lease table judges it, in JavaScript: the mirror of
 * table.c's read_proc_stat, self_identity and client_is_dead, shared by the
 * JavaScript fallback's reaper and by `waitprep inspect`, so both judge a
 * client exactly as the C core does.
 */
import { readFileSync, readlinkSync, statSync } from 'node:fs';

/** State and start time (field 22) of /proc/PID/stat, or null when absent or unreadable. */
export function readProcStat(pid: number | 'self'): { state: string; startTime: bigint } | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'latin1');
  } catch {
    return null;
  }
  // The command name may hold spaces and parentheses: the last ')' ends it.
  const close = text.lastIndexOf(')');
  if (close < 0 || text[close + 1] !== ' ') return null;
  const fields = text.slice(close + 2).split(' ');
  // fields[0] is field 3 (state); the start time is field 22.
  if (fields.length < 20 || !/^\d+$/.test(fields[19]!)) return null;
  return { state: fields[0]!, startTime: BigInt(fields[19]!) };
}

function nsInode(path: string): bigint {
  try {
    return statSync(path, { bigint: true }).ino;
  } catch {
    return 0n;
  }
}

export interface Identity {
  pid: number;
  startTime: bigint;
  /** 0: unknown (/proc does not show us under our pid): never reaped, reaps nobody (table.c self_identity). */
  pidNs: bigint;
  timeNs: bigint;
}
let self: Identity | null = null;
/** Our pid, start time and pid and time namespaces (table.c self_identity): read once per process. */
export function selfIdentity(): Identity {
  if (self === null || self.pid !== process.pid) {
    let visible = false;
    try {
      visible = readlinkSync('/proc/self') === String(process.pid);
    } catch {
      visible = false;
    }
    self = visible
      ? { pid: process.pid, startTime: readProcStat('self')?.startTime ?? 0n, pidNs: nsInode('/proc/self/ns/pid'), timeNs: nsInode('/proc/self/ns/time') }
      : { pid: process.pid, startTime: 0n, pidNs: 0n, timeNs: 0n };
  }
  return self;
}

/** True when the process that registered (pid, startTime) is certainly gone. */
export function clientIsDead(pid: number, startTime: bigint): boolean {
  if (pid === process.pid) return false; // ourselves: alive (the C check concludes the same)
  const now = readProcStat(pid);
  if (now !== null) {
    if (now.startTime !== startTime && startTime !== 0n) return true; // pid reused
    return now.state === 'Z' || now.state === 'X'; // killed, not yet waited for
  }
  // No /proc entry: confirm, since hidepid can hide live processes.
  try {
    process.kill(pid, 0);
    return false;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'ESRCH';
  }
}
