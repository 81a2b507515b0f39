// `waitprep clean [<table>...] [--dry-run] [--json] [--trust-uid UID] [--trust-group-writable]`
// removes what crashes leave behind: tables whose every client, the producer included, is judged
// dead by the reaper's rule, with the arena and demo socket named after them. It is a command of
// its own, not an option of reap, because reap repairs one table that stays in use, while clean
// scans /dev/shm and deletes files.
import { lstatSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isArenaFileName, unlinkLeaseTable } from 'waitprep';
import { isTableName } from 'waitprep/layout';
import { CLEAN_USAGE } from './clean-usage.js';
import { CommandError, EXIT, SHM, headerOf, commandArgs, look, openForOperator, shmPathProblem, toJson, trustOf } from './operator.js';

/** The demo's socket is named after its table (demo/run.js): `<tmpdir>/<table>.sock`, for these tables only. */
const DEMO_TABLE = /^waitprep-demo-/;


/** The path's own status (a link is not followed), or null when there is nothing there. */
function lstatOrNull(path) {
  try {
    return lstatSync(path);
  } catch {
    return null;
  }
}

/**
 * The demo's arena named after a removed table, `/dev/shm/<table>-arena`: removed only when it is
 * a real directory (not a link) holding nothing but arena files (regular `<index>.wpa` files,
 * docs/arena-records.md, or the older `*.safetensors`), so a directory that merely shares the name
 * keeps whatever it holds.
 */
function removeArena(name) {
  const path = `${SHM}/${name}-arena`;
  const stat = lstatOrNull(path);
  if (stat === null) return null;
  if (!stat.isDirectory()) return { path, removed: false, reason: 'not a directory' };
  const entries = readdirSync(path, { withFileTypes: true });
  const foreign = entries.find((e) => !e.isFile() || !(isArenaFileName(e.name) || e.name.endsWith('.safetensors')));
  if (foreign !== undefined) return { path, removed: false, reason: `holds ${JSON.stringify(foreign.name)}, which is not a demo artifact file` };
  rmSync(path, { recursive: true, force: true });
  return { path, removed: true, files: entries.length };
}

/** The demo's socket named after a removed demo table, `<tmpdir>/<table>.sock`: removed only when it is a socket. */
function removeDemoSocket(name) {
  if (!DEMO_TABLE.test(name)) return null;
  const path = join(tmpdir(), `${name}.sock`);
  const stat = lstatOrNull(path);
  if (stat === null) return null;
  if (!stat.isSocket()) return { path, removed: false, reason: 'not a socket' };
  rmSync(path, { force: true });
  return { path, removed: true };
}

/**
 * Judges one waitprep table for `clean`: open it as a consumer (which validates the segment as
 * inspect does), and remove it only when every client entry but ours is judged dead, the producer
 * included. An entry of another or unknown namespace, or mid-reap by an unregistered reaper, is
 * not dead, so its table is kept. A table with no entry at all (a producer that closed, or one
 * that `reap` emptied) is removed only when `named`: a scan cannot tell it from a table whose
 * producer closed on purpose and will reopen it, while naming it says it is unwanted. The name is
 * unlinked while our entry is still registered, which keeps the window in which a new client
 * could attach to a name about to go as short as it can be.
 */
function cleanOne(name, dryRun, trust, named) {
  const path = `${SHM}/${name}`;
  let table;
  try {
    table = openForOperator('clean', name, trust);
  } catch (error) {
    return { table: name, path, removed: false, reason: error.message, code: error.code, exit: error.exit };
  }
  let outcome;
  try {
    const { report, judged } = look(name, table);
    const others = report.clients;
    const notDead = others.filter((c) => c.liveness !== 'dead');
    const pids = others.map((c) => c.pid);
    if (others.length === 0 && !named) {
      outcome = {
        table: name, path, removed: false,
        reason: `no client entries (a producer that closed, or a reap, left it empty; the producer may reopen it): name it to remove it, \`waitprep clean ${name}\``,
        exit: EXIT.HEALTHY,
      };
    } else if (others.length === 0) {
      outcome = { table: name, path, removed: !dryRun, wouldRemove: dryRun || undefined, reason: 'named, and no client entries: no process has it open', deadClients: [], exit: EXIT.HEALTHY };
    } else if (notDead.length > 0) {
      const c = notDead[0];
      const more = notDead.length > 1 ? ` and ${notDead.length - 1} more not dead` : '';
      outcome = {
        table: name, path, removed: false,
        reason: `client ${c.index} (pid ${c.pid}${c.producer ? ', the producer' : ''}) is ${c.liveness}${more}` +
          (judged.needsReap ? `; dead clients hold pins or the producer role: run \`waitprep reap ${name}\`` : ''),
        liveClients: notDead.map((n) => ({ index: n.index, pid: n.pid, liveness: n.liveness, producer: n.producer })),
        exit: judged.needsReap ? EXIT.NEEDS_REAP : EXIT.HEALTHY,
      };
    } else {
      outcome = {
        table: name, path, removed: !dryRun, wouldRemove: dryRun || undefined,
        reason: `every client is dead (pids ${pids.join(', ')})${report.producer === null ? ', no producer' : `, the producer pid ${report.producer.pid} among them`}`,
        deadClients: others.map((c) => ({ index: c.index, pid: c.pid, producer: c.producer })),
        exit: EXIT.HEALTHY,
      };
    }
    if (outcome.removed) {
      let unlinked = false;
      let why = 'shm_unlink failed';
      try {
        unlinked = unlinkLeaseTable(name);
      } catch (error) {
        why = error instanceof Error ? error.message : String(error);
      }
      if (!unlinked) outcome = { ...outcome, removed: false, reason: `${outcome.reason}, but it could not be removed: ${why}`, code: 'ERR_SYSTEM', exit: EXIT.ERROR };
    }
  } finally {
    table.close();
  }
  if (outcome.removed) {
    outcome.arena = removeArena(name);
    outcome.socket = removeDemoSocket(name);
  }
  return outcome;
}


function parseCleanArgs(args) {
  const { values, names } = commandArgs(args, ['json', 'dry-run', 'trust-group-writable'], CLEAN_USAGE, ['trust-uid']);
  const json = values.json === true;
  const dryRun = values['dry-run'] === true;
  const bad = names.find((n) => !isTableName(n));
  if (bad !== undefined) {
    const problem = shmPathProblem('clean', bad);
    if (problem !== null) throw problem;
    throw new CommandError(EXIT.USAGE, 'ERR_USAGE', `${JSON.stringify(bad)} is not a table name (1-200 of A-Z a-z 0-9 . _ -, not starting with a dot)`);
  }
  return { names, json, dryRun, trust: trustOf('clean', values) };
}

function cleanHuman(r) {
  const lines = [`waitprep clean: ${r.scanned ? `${SHM} scanned` : `${r.results.length} table(s) named`}${r.dryRun ? ' (dry run: nothing removed)' : ''}`];
  for (const t of r.results) {
    if (t.removed || t.wouldRemove) {
      lines.push(`${t.removed ? 'removed' : 'would remove'} ${t.table} (${t.path}): ${t.reason}`);
      for (const extra of [t.arena, t.socket]) {
        if (extra == null) continue;
        lines.push(extra.removed ? `  removed ${extra.path}${extra.files !== undefined ? ` (${extra.files} file(s))` : ''}` : `  kept ${extra.path}: ${extra.reason}`);
      }
    } else {
      lines.push(`kept ${t.table} (${t.path}): ${t.reason}`);
    }
  }
  if (r.results.length === 0) lines.push('no waitprep lease tables found');
  if (r.scanned && r.notTables.length > 0) lines.push(`${r.notTables.length} other file(s) in ${SHM} carry no waitprep magic: left alone`);
  const removed = r.results.filter((t) => t.removed).length;
  lines.push(`${r.dryRun ? 'would remove' : 'removed'} ${r.dryRun ? r.results.filter((t) => t.wouldRemove).length : removed} table(s), kept ${r.results.filter((t) => !t.removed && !t.wouldRemove).length}`);
  return lines.join('\n');
}

/**
 * `waitprep clean [<table>...] [--dry-run] [--json] [--trust-uid UID] [--trust-group-writable]`: removes the lease tables that crashes left
 * behind (every client dead, the producer included), and named tables with no client left (as a
 * reap leaves them), the demo's arenas and sockets named after them, and says what it removed and
 * what it kept and why. Without names it scans /dev/shm and
 * considers only files with the waitprep magic; a named file without it is refused (exit 4).
 * Exit: the highest of each table's: 0 removed or kept in use, 1 kept with dead pins or a dead
 * producer (needs a reap), 3 a named table missing, 4 not a table of this ABI, 5 any other error.
 */
export function clean(args) {
  let json = args.includes('--json');
  try {
    const parsed = parseCleanArgs(args);
    json = parsed.json;
    const scanned = parsed.names.length === 0;
    const notTables = [];
    const results = [];
    const candidates = scanned
      ? readdirSync(SHM).filter((n) => isTableName(n)).sort()
      : parsed.names;
    for (const name of candidates) {
      const path = `${SHM}/${name}`;
      const header = headerOf(path);
      if (header.kind === 'table') {
        results.push(cleanOne(name, parsed.dryRun, parsed.trust, !scanned));
      } else if (scanned) {
        if (header.kind === 'other-abi') results.push({ table: name, path, removed: false, reason: `${header.why}: never judged or removed by this waitprep`, code: 'ERR_BAD_SEGMENT', exit: EXIT.BAD_SEGMENT });
        else if (header.kind === 'not-table') notTables.push(name);
      } else if (header.kind === 'missing') {
        results.push({ table: name, path, removed: false, reason: `no lease table named ${JSON.stringify(name)} (${path} does not exist)`, code: 'ERR_TABLE_NOT_FOUND', exit: EXIT.NOT_FOUND });
      } else {
        results.push({ table: name, path, removed: false, reason: `not a lease table of this ABI: ${header.why}; left alone`, code: 'ERR_BAD_SEGMENT', exit: EXIT.BAD_SEGMENT });
      }
    }
    const exitCode = results.reduce((worst, t) => Math.max(worst, t.exit), EXIT.HEALTHY);
    const report = { directory: SHM, scanned, dryRun: parsed.dryRun, results, notTables, exitCode };
    process.stdout.write((json ? toJson(report) : cleanHuman(report)) + '\n');
    process.exitCode = exitCode;
  } catch (error) {
    const failure = error instanceof CommandError
      ? error
      : new CommandError(EXIT.ERROR, error?.code ?? 'ERR_SYSTEM', error instanceof Error ? error.stack ?? error.message : String(error));
    console.error(`waitprep clean: ${failure.message}`);
    if (json) process.stdout.write(toJson({ error: { code: failure.code, message: failure.message }, exitCode: failure.exit }) + '\n');
    process.exitCode = failure.exit;
  }
}
