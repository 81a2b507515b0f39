/**
 * Process liveness as the lease table judges it: the one TypeScript statement
 * of the rule native/src/table.c applies in its reaper (read_proc_stat,
 * self_identity, same_namespaces, client_is_dead, reaper_is_gone), shared by
 * the JavaScript fallback's reaper and by `waitprep inspect` (through
 * judgeInspection), so an operator's report says what a reap would do.
 *
 * A verdict is `dead` only when the process is certainly gone: a reap from
 * the observer would take that entry. `unknown` is never reaped: a pid and a
 * start time mean something only within the pid and time namespace they were
 * read in, and an observer that cannot place itself in /proc judges nobody.
 *
 * The fallback's clients are threads of this one process, so an entry may
 * also name the OS thread that opened it (judgeThread): the process is alive,
 * but that thread can be gone (a worker stopped with worker.terminate()).
 */
import { readFileSync, readlinkSync, statSync } from 'node:fs';
import { CLIENT_WORD, MAX_CLIENTS } from './layout.js';

/** State and start time (field 22) of /proc/PID/stat, or null when absent or unreadable. */
export function readProcStat(pid: number | 'self'): { state: string; startTime: bigint } | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'latin1');
  } catch {
    return null;
  }
  return parseStat(text);
}

/** State and start time of a /proc stat line (the same format for a process and a task), or null. */
function parseStat(text: string): { state: string; startTime: bigint } | null {
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

/** A process as the lease table records it in a client entry, and as an observer places itself. */
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

/** An OS thread of this process as a fallback client entry records it. */
export interface ThreadIdentity {
  /** The kernel's thread id (the main thread's is the pid). */
  tid: number;
  /** Its start time, clock ticks since boot (/proc/self/task/TID/stat field 22). */
  startTime: bigint;
}
let thread: ThreadIdentity | null | undefined;
/**
 * The calling thread's OS thread id and start time, or null when /proc does not show this thread
 * under our pid. /proc/thread-self names the task of whichever thread resolves it, and Node runs
 * *Sync file calls on the calling thread. Module state is per isolate, so this is read once per
 * thread.
 */
export function selfThread(): ThreadIdentity | null {
  if (thread === undefined) {
    thread = null;
    try {
      const match = /^(\d+)\/task\/(\d+)$/.exec(readlinkSync('/proc/thread-self'));
      if (match !== null && Number(match[1]) === process.pid) {
        const tid = Number(match[2]);
        const stat = parseStat(readFileSync(`/proc/self/task/${tid}/stat`, 'latin1'));
        if (stat !== null) thread = { tid, startTime: stat.startTime };
      }
    } catch {
      thread = null;
    }
  }
  return thread;
}

/** A verdict: `dead` means a reap from the observer takes the entry; `unknown` is never reaped. */
export type Liveness = 'alive' | 'dead' | 'unknown';

/** Each reason a verdict can have, and that verdict: the one list of both. */
const LIVENESS_OF = {
  self: 'alive',
  running: 'alive',
  hidden: 'alive',
  'pid-reused': 'dead',
  zombie: 'dead',
  gone: 'dead',
  'reaper-left': 'dead',
  'thread-running': 'alive',
  'thread-gone': 'dead',
  'thread-reused': 'dead',
  'thread-unreadable': 'unknown',
  'observer-namespace-unknown': 'unknown',
  'client-namespace-unknown': 'unknown',
  'other-pid-namespace': 'unknown',
  'other-time-namespace': 'unknown',
  'reaper-unregistered': 'unknown',
} as const satisfies Record<string, Liveness>;

/**
 * Why a verdict is what it is, by verdict.
 *
 * - alive: `self` (this process, with its own start time), `running` (/proc shows the pid with the
 *   recorded start time, not a zombie), `hidden` (no /proc entry, but `kill(pid, 0)` does not say
 *   ESRCH: hidepid, or another user's process).
 * - dead: `pid-reused` (/proc shows another start time), `zombie` (state Z or X: killed, not yet
 *   waited for), `gone` (no /proc entry and `kill(pid, 0)` says ESRCH), `reaper-left` (a REAPING
 *   entry's reaper no longer holds its own entry: it finished or died, and the next reap takes
 *   the work over).
 * - for an entry that names an OS thread of this process (the JavaScript fallback's worker
 *   threads, {@link judgeThread}): alive `thread-running` (/proc/self/task shows the tid with the
 *   recorded start time); dead `thread-gone` (no such task, or a zombie one), `thread-reused`
 *   (another start time); unknown `thread-unreadable` (/proc would not say).
 * - unknown: `observer-namespace-unknown` (the observer's own pid namespace is unknown),
 *   `client-namespace-unknown` (the entry recorded pid namespace 0), `other-pid-namespace`,
 *   `other-time-namespace`, `reaper-unregistered` (a reap by a reaper that was not registered,
 *   which nobody ever takes over).
 */
export type LivenessReason = keyof typeof LIVENESS_OF;

/** A verdict and its reason. The judge functions return shared frozen values: compare fields, not objects. */
export interface LivenessJudgement {
  readonly liveness: Liveness;
  readonly reason: LivenessReason;
}

// One frozen judgement per reason: judging allocates nothing but what /proc reads do.
const J = Object.freeze(
  Object.fromEntries(Object.entries(LIVENESS_OF).map(([reason, liveness]) => [reason, Object.freeze({ liveness, reason })])),
) as Readonly<Record<LivenessReason, LivenessJudgement>>;

/**
 * table.c client_is_dead, with its reason: the process that registered (pid, startTime) as read
 * in the observer's namespaces. A start time of 0 matches any (an entry still CLAIMING).
 */
function judgeProcess(pid: number, startTime: bigint): LivenessJudgement {
  // Ourselves, under our own start time: what the /proc read below would conclude, without it.
  // Another start time under our pid is a dead predecessor's entry, judged below as C does.
  if (pid === process.pid) {
    const me = selfIdentity();
    if (startTime === 0n || startTime === me.startTime) return J.self;
  }
  const now = readProcStat(pid);
  if (now !== null) {
    if (now.startTime !== startTime && startTime !== 0n) return J['pid-reused'];
    return now.state === 'Z' || now.state === 'X' ? J.zombie : J.running;
  }
  // No /proc entry: confirm, since hidepid can hide live processes.
  try {
    process.kill(pid, 0);
    return J.hidden;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'ESRCH' ? J.gone : J.hidden;
  }
}

/**
 * True when the process that registered (pid, startTime) is certainly gone (table.c
 * client_is_dead). The caller has checked the namespaces; {@link judgeClient} does both.
 */
export function clientIsDead(pid: number, startTime: bigint): boolean {
  return judgeProcess(pid, startTime).liveness === 'dead';
}

/** What a client entry records of the process that registered it (an inspection's client entries have these fields). */
export interface RecordedClient {
  /** `claiming`: only the pid is written yet, so "the observer's namespaces, any start time". */
  state: 'claiming' | 'active';
  pid: number;
  startTime: bigint;
  pidNamespace: bigint;
  timeNamespace: bigint;
  /**
   * JavaScript fallback: the OS thread id ({@link selfThread}) of the worker thread that opened
   * the entry; absent or 0 when none is recorded (the main thread, a native client).
   */
  osThread?: number;
  /** That thread's start time, with `osThread`. */
  osThreadStartTime?: bigint;
}

/**
 * How an entry naming OS thread `tid` of this process, started at `startTime`, is judged: by
 * /proc/self/task/TID. Nothing here asks the thread to do anything, so a live thread that runs
 * no JavaScript for as long as it likes (a long synchronous loop, Atomics.wait) is alive, and a
 * task that is gone, or shows another start time, never comes back as the thread that
 * registered. Only "no such task" is gone: an unreadable /proc (EMFILE, say) judges nobody.
 */
export function judgeThread(tid: number, startTime: bigint): LivenessJudgement {
  // /proc/self must be this process, as selfIdentity checks; a tid must be one.
  if (selfIdentity().pidNs === 0n) return J['observer-namespace-unknown'];
  if (!Number.isSafeInteger(tid) || tid <= 0) return J['thread-unreadable'];
  let text: string;
  try {
    text = readFileSync(`/proc/self/task/${tid}/stat`, 'latin1');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    return code === 'ENOENT' || code === 'ESRCH' ? J['thread-gone'] : J['thread-unreadable'];
  }
  const now = parseStat(text);
  if (now === null) return J['thread-unreadable'];
  if (now.startTime !== startTime) return J['thread-reused'];
  return now.state === 'Z' || now.state === 'X' ? J['thread-gone'] : J['thread-running'];
}

function judgeRecorded(active: boolean, entry: Omit<RecordedClient, 'state'>, me: Identity): LivenessJudgement {
  if (me.pidNs === 0n) return J['observer-namespace-unknown'];
  if (active) {
    // same_namespaces: its pid and start time mean nothing outside the namespaces they were read in.
    if (entry.pidNamespace !== me.pidNs) return entry.pidNamespace === 0n ? J['client-namespace-unknown'] : J['other-pid-namespace'];
    if (entry.timeNamespace !== me.timeNs) return J['other-time-namespace'];
  }
  const verdict = judgeProcess(entry.pid, active ? entry.startTime : 0n);
  // This very process: the entry's own thread decides, where it names one (a fallback worker's).
  const tid = entry.osThread ?? 0;
  if (verdict === J.self && active && tid !== 0) return judgeThread(tid, entry.osThreadStartTime ?? 0n);
  return verdict;
}

/**
 * How a reap by `me` (this process by default) judges a CLAIMING or ACTIVE client entry, as
 * wp_reap_dead_clients does: nobody, when the observer's own pid namespace is unknown; an ACTIVE
 * entry only within the observer's pid and time namespaces; a CLAIMING one, which has not written
 * its start time and namespaces yet, as "these namespaces, any start time". An ACTIVE entry of
 * this process that names an OS thread is judged by that thread ({@link judgeThread}).
 */
export function judgeClient(entry: RecordedClient, me: Identity = selfIdentity()): LivenessJudgement {
  return judgeRecorded(entry.state === 'active', entry, me);
}

/**
 * The reaper a REAPING entry names: a registered client (its index, and the low 15 bits of its
 * serial: the reap is its while that entry holds that client), or `'unregistered'`: a reaper
 * that reaped to make room in a full registry.
 */
export type ReaperName = { client: number; serialLow15: number } | 'unregistered';

/** The reaper a REAPING word's pid bits name (table.c reaper_bits, waitprep.h). */
export function reaperNamed(pidBits: number): ReaperName {
  if ((pidBits & CLIENT_WORD.REAPER_NAMED) === 0) return 'unregistered';
  return { client: pidBits & (MAX_CLIENTS - 1), serialLow15: (pidBits >>> 6) & 0x7fff };
}

/** A client entry as it stands now, for judging a reaper that it may hold. */
export interface RegistryEntry extends Omit<RecordedClient, 'state'> {
  state: 'free' | 'claiming' | 'active' | 'reaping';
  serial: number;
}

/**
 * True while `entry` (the one at `reaper.client`; undefined when free) still holds the client
 * that `reaper` names: ACTIVE, with the same low 15 serial bits.
 */
export function holdsReaper(reaper: ReaperName, entry: RegistryEntry | undefined): entry is RegistryEntry {
  return reaper !== 'unregistered' && entry !== undefined && entry.state === 'active' && (entry.serial & 0x7fff) === reaper.serialLow15;
}

/**
 * How a reap by `me` judges a REAPING entry: by its reaper (table.c reaper_is_gone). `dead` once
 * the reaper's entry (`entry`, the one at `reaper.client`; undefined when free) no longer
 * {@link holdsReaper | holds} that client, or holds it and its process is dead: a registered reaper then takes the work
 * over. An unregistered reaper is never taken over, and a reaper of other namespaces is judged
 * like any client there: `unknown`.
 */
export function judgeReaper(reaper: ReaperName, entry: RegistryEntry | undefined, me: Identity = selfIdentity()): LivenessJudgement {
  if (reaper === 'unregistered') return J['reaper-unregistered'];
  if (me.pidNs === 0n) return J['observer-namespace-unknown']; // wp_reap_dead_clients takes nothing over then
  if (!holdsReaper(reaper, entry)) return J['reaper-left'];
  // The same client still (ourselves included: alive), or, after 32,768 registrations of that
  // entry, one that looks the same: judged as itself, the safe side.
  return judgeRecorded(true, entry, me);
}
