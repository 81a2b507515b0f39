/**
 * A table's arena directory under the lease table's trust rules (docs/arena-records.md, "Trusting
 * the arena directory"). Readers load whatever bytes an arena file holds at a published location,
 * so whoever may write the directory or its files can make them load bytes of their own choosing,
 * as whoever may write a table file can rewrite what consumers pin. A producer therefore writes
 * into an arena directory only when the table's rule for its file holds for the directory and for
 * every file in it: a directory (not a link) owned by this process's effective uid (or the trusted
 * one) that neither group nor others may write unless trusted, in a root no one else can rename it
 * out of.
 */
import { lstatSync, mkdirSync, readdirSync, statSync, type Stats } from 'node:fs';
import { join } from 'node:path';
import { DEFAULT_ARENA_ROOT, arenaDirectory } from './arena-record.js';
import { WaitprepError, invalidArgument } from '../errors.js';
import { OPEN_TRUST } from './layout.js';
import { trustFlags, type TableTrust } from './table.js';

/** Options of {@link checkArenaDirectory} and {@link ensureArenaDirectory}. */
export interface ArenaDirectoryOptions {
  /** The directory holding `<table>-arena` (default `/dev/shm`). */
  root?: string;
  /** What the directory and its files may be besides the default, as the table's `trust` option says for its file. */
  trust?: TableTrust;
}

/** Options of {@link ensureArenaDirectory}. */
export interface EnsureArenaDirectoryOptions extends ArenaDirectoryOptions {
  /** The new directory's mode (default 0o755: readers of other uids may read; only the owner writes). */
  mode?: number;
}

const S_IFMT = 0o170000;
const S_IFLNK = 0o120000;
const S_ISVTX = 0o1000;

interface Trust {
  flags: number;
  uid: number;
}

function rootOption(options: ArenaDirectoryOptions): string {
  const root = options.root ?? DEFAULT_ARENA_ROOT;
  if (typeof root !== 'string' || root.length === 0) throw invalidArgument('options.root', 'a non-empty string (a directory path)', root);
  return root;
}

function optionsObject<T extends ArenaDirectoryOptions>(options: unknown): T {
  if (options === undefined) return {} as T;
  if (typeof options !== 'object' || options === null) throw invalidArgument('options', 'an object { root?, trust? }', options);
  return options as T;
}

/** The write bits of `mode` that `trust` does not accept (waitprep.h, "Trust": the table's rule). */
function untrustedWriteBits(mode: number, trust: Trust): number {
  let bits = mode & 0o022;
  if ((trust.flags & OPEN_TRUST.GROUP_WRITE) !== 0) bits &= ~0o020;
  if ((trust.flags & OPEN_TRUST.WORLD_WRITE) !== 0) bits &= ~0o002;
  return bits;
}

function ownerTrusted(uid: number, trust: Trust): boolean {
  return uid === process.geteuid!() || ((trust.flags & OPEN_TRUST.UID) !== 0 && uid === trust.uid);
}

function untrusted(path: string, found: string, trust: Trust): WaitprepError {
  const owners = [`uid ${process.geteuid!()} (this process)`, ...((trust.flags & OPEN_TRUST.UID) !== 0 ? [`uid ${trust.uid} (options.trust.uid)`] : [])];
  const writers = ['the owner', ...((trust.flags & OPEN_TRUST.GROUP_WRITE) !== 0 ? ['the group'] : []), ...((trust.flags & OPEN_TRUST.WORLD_WRITE) !== 0 ? ['others'] : [])];
  return new WaitprepError(
    'ERR_UNTRUSTED_ARENA',
    `refusing an untrusted arena: ${path} ${found}; an arena directory and its files are trusted when they are a directory and ` +
      `regular files (no links) owned by ${owners.join(' or ')} that only ${writers.join(', ')} may write, in a root owned by ` +
      'uid 0 or the owner that others may write only with the sticky bit. Whoever may write an arena can change the bytes ' +
      'readers load; remove it, or pass options.trust if this sharing is intended (docs/arena-records.md)',
  );
}

const describeMode = (stat: Stats): string => `owned by uid ${stat.uid} with mode 0o${(stat.mode & 0o7777).toString(8).padStart(3, '0')}`;

/** Throws unless `stat` (of `path`, not followed) is trusted and of the kind wanted. */
function judge(path: string, stat: Stats, kind: 'directory' | 'file', trust: Trust): void {
  if ((stat.mode & S_IFMT) === S_IFLNK) throw untrusted(path, `is a symbolic link (owned by uid ${stat.uid})`, trust);
  if (kind === 'directory' ? !stat.isDirectory() : !stat.isFile()) throw untrusted(path, `is not a ${kind === 'directory' ? 'directory' : 'regular file'} (${describeMode(stat)})`, trust);
  if (!ownerTrusted(stat.uid, trust) || untrustedWriteBits(stat.mode, trust) !== 0) throw untrusted(path, `is ${describeMode(stat)}`, trust);
}

/**
 * The root must keep others from renaming the arena directory away and putting their own in its
 * place between this check and the producer's writes: owned by uid 0 or a trusted owner, and
 * writable by others only with the sticky bit (as /dev/shm and /tmp are).
 */
function judgeRoot(root: string, trust: Trust): void {
  const stat = statSync(root);
  if (!stat.isDirectory()) throw untrusted(root, `(the arena root) is not a directory (${describeMode(stat)})`, trust);
  const owner = stat.uid === 0 || ownerTrusted(stat.uid, trust);
  if (!owner || (untrustedWriteBits(stat.mode, trust) !== 0 && (stat.mode & S_ISVTX) === 0)) {
    throw untrusted(root, `(the arena root) is ${describeMode(stat)}: someone else could replace the arena directory in it`, trust);
  }
}

function check(dir: string, root: string, trust: Trust): boolean {
  let stat: Stats;
  try {
    judgeRoot(root, trust);
    stat = lstatSync(dir);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw error;
  }
  judge(dir, stat, 'directory', trust);
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    let entry: Stats;
    try {
      entry = lstatSync(path);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') continue; // removed meanwhile
      throw error;
    }
    judge(path, entry, 'file', trust);
  }
  return true;
}

/**
 * Whether table `tableName`'s arena directory (`<root>/<tableName>-arena`) exists: `false` when it
 * does not, `true` when it does and it, every entry in it and its root pass the table's trust rules
 * (see the module's text). Throws `ERR_UNTRUSTED_ARENA` naming what it found otherwise (a link, a
 * directory of another uid, one the group or others may write, an entry that is not such a regular
 * file), and `ERR_INVALID_ARGUMENT` for a malformed argument. For a producer about to write arenas,
 * and for tools that will read or remove them.
 */
export function checkArenaDirectory(tableName: string, options?: ArenaDirectoryOptions): boolean {
  const opts = optionsObject<ArenaDirectoryOptions>(options);
  const root = rootOption(opts);
  const trust = trustFlags(opts.trust);
  const dir = arenaDirectory(tableName, root);
  return systemErrors(dir, () => check(dir, root, trust));
}

/** A system call's failure as the package's error (`ERR_PERMISSION_DENIED`, else `ERR_SYSTEM`), the errno error as its cause. */
function systemErrors<T>(dir: string, body: () => T): T {
  try {
    return body();
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (error instanceof WaitprepError || typeof (error as NodeJS.ErrnoException).syscall !== 'string') throw error;
    const denied = code === 'EACCES' || code === 'EPERM';
    throw new WaitprepError(denied ? 'ERR_PERMISSION_DENIED' : 'ERR_SYSTEM', `arena directory ${dir}: ${(error as Error).message}`, { cause: error });
  }
}

/**
 * Table `tableName`'s arena directory, created (with `options.mode`, default 0o755, and the root
 * if it is missing) when absent, and checked as {@link checkArenaDirectory} checks it either way:
 * what a producer calls before it writes its first arena. Returns the directory's path. Throws
 * `ERR_UNTRUSTED_ARENA` for an existing directory the table's rules do not trust, never taking it
 * over, and `ERR_INVALID_ARGUMENT` for a malformed argument or a mode others could write.
 */
export function ensureArenaDirectory(tableName: string, options?: EnsureArenaDirectoryOptions): string {
  const opts = optionsObject<EnsureArenaDirectoryOptions>(options);
  const root = rootOption(opts);
  const trust = trustFlags(opts.trust);
  const mode = opts.mode ?? 0o755;
  if (typeof mode !== 'number' || !Number.isInteger(mode) || mode < 0o700 || mode > 0o777) {
    throw invalidArgument('options.mode', 'a permission mode in [0o700, 0o777] (the owner needs rwx)', mode);
  }
  if (untrustedWriteBits(mode, trust) !== 0) {
    throw invalidArgument('options.mode', 'a mode that lets only the owner write, unless options.trust accepts those write bits', mode);
  }
  const dir = arenaDirectory(tableName, root);
  return systemErrors(dir, () => {
    mkdirSync(root, { recursive: true });
    judgeRoot(root, trust); // before anything is created in it
    try {
      // Not recursive: an existing directory is judged below, never adopted silently.
      mkdirSync(dir, { mode });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    if (!check(dir, root, trust)) throw new WaitprepError('ERR_UNTRUSTED_ARENA', `refusing an untrusted arena: ${dir} disappeared as it was created`);
    return dir;
  });
}
