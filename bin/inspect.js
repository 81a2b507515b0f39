// `waitprep inspect <table> [--json]` and `waitprep reap <table> [--json]`: an operator's view of
// a native lease table (POSIX shared memory, /dev/shm/<table>) and the one repair it allows.
// This file is the command line only: arguments, the report's shape and wording, exit codes.
//
// Both open the table as a consumer, which registers the inspecting process as one more client
// for as long as it looks (it holds no pin, and its own entry is left out of every report), and
// close it before exiting. Liveness is judgeInspection's (lib/lease-table/liveness.ts, the
// rule of the C core's reaper), shown as 'alive', 'dead', 'other-namespace' (a client this
// process cannot judge: another pid or time namespace, or our own namespace unknown; no reap
// from here touches it) or 'unknown' (a reap by an unregistered reaper, never taken over).
//
// `waitprep clean [<table>...] [--dry-run] [--json] [--trust-uid UID] [--trust-group-writable]` removes what crashes leave behind: tables
// whose every client, the producer included, is judged dead by the same rule, and the demo's
// arena and socket named after them. It is a command of its own, not an option of reap, because
// reap repairs one table that stays in use, while clean scans /dev/shm and deletes files.
//
// Exit codes (also in `waitprep help` and docs/operations.md):
//   0 healthy (reap: done)   1 pins held by dead clients, or a dead producer: needs a reap
//   2 usage error            3 no such table
//   4 not a lease table of this ABI (ERR_BAD_SEGMENT)   5 any other error (addon not loaded, …)
import { closeSync, constants as fsConstants, fstatSync, lstatSync, openSync, readdirSync, readSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { implementationReason, isArenaFileName, judgeInspection, openLeaseTable, summarizeInspection, unlinkLeaseTable } from 'waitprep';
import { HDR, WP_ABI_VERSION, WP_MAGIC, isTableName } from 'waitprep/layout';

export const EXIT = Object.freeze({ HEALTHY: 0, NEEDS_REAP: 1, USAGE: 2, NOT_FOUND: 3, BAD_SEGMENT: 4, ERROR: 5 });

/** Human output lists at most this many READY slots that nobody pins (`--json` lists all). */
const READY_SHOWN = 20;

/** A failure that ends the command with `exit`; `code` is the WaitprepError code or a CLI one. */
class CommandError extends Error {
  constructor(exit, code, message) {
    super(message);
    this.exit = exit;
    this.code = code;
  }
}

function usage(command, problem) {
  return new CommandError(EXIT.USAGE, 'ERR_USAGE', `${problem}\nusage: waitprep ${command} <table> [--json]`);
}

/**
 * A command's boolean flags and its table names, by node:util's parseArgs (`--` ends the
 * options, so a table name may start with '-'); a parse error is a usage error.
 */
function commandArgs(args, flags, usageLine, valued = []) {
  try {
    const options = Object.fromEntries([...flags.map((flag) => [flag, { type: 'boolean' }]), ...valued.map((option) => [option, { type: 'string' }])]);
    const { values, positionals } = parseArgs({ args, options, allowPositionals: true, strict: true });
    return { values, names: positionals };
  } catch (error) {
    throw new CommandError(EXIT.USAGE, 'ERR_USAGE', `${error.message}\nusage: ${usageLine}`);
  }
}

/**
 * A usage error for a table given as its /dev/shm path, naming the bare name to give instead;
 * `null` for anything else.
 */
function shmPathProblem(command, given) {
  const bare = given.startsWith(`${SHM}/`) ? given.slice(SHM.length + 1) : null;
  if (bare === null || !isTableName(bare)) return null;
  return new CommandError(EXIT.USAGE, 'ERR_USAGE', `${JSON.stringify(given)} is a path; name the table instead: waitprep ${command} ${bare}`);
}

/** `<table> [--json] [--trust-uid UID] [--trust-group-writable]`. */
function inspectArgs(command, args) {
  const usageLine = `waitprep ${command} <table> [--json] [--trust-uid UID] [--trust-group-writable]`;
  const { values, names } = commandArgs(args, ['json', 'trust-group-writable'], usageLine, ['trust-uid']);
  if (names.length !== 1) {
    throw usage(command, names.length === 0 ? 'the table name is missing' : `expected one table name, got ${names.length}`);
  }
  const problem = shmPathProblem(command, names[0]);
  if (problem !== null) throw problem;
  return { name: names[0], json: values.json === true, trust: trustOf(command, values) };
}

/** The `options.trust` that `--trust-uid UID` and `--trust-group-writable` ask for (inspect, reap, clean). */
function trustOf(command, values) {
  const trust = {};
  if (values['trust-uid'] !== undefined) {
    if (!/^\d{1,10}$/.test(values['trust-uid']) || Number(values['trust-uid']) > 0xffff_ffff) {
      throw usage(command, `--trust-uid must be a uid from 0 to 4294967295, got ${JSON.stringify(values['trust-uid'])}`);
    }
    trust.uid = Number(values['trust-uid']);
  }
  if (values['trust-group-writable'] === true) trust.groupWritable = true;
  return trust;
}

/** What the segment's first bytes say, for a refusal message: another ABI version, or no table at all. */
function describeForeignSegment(name) {
  const header = headerOf(`/dev/shm/${name}`);
  if (header.kind === 'other-abi') {
    return `it is a waitprep lease table of ABI version ${header.abi}; this waitprep reads ABI version ${WP_ABI_VERSION} only. ` +
      'Never share one segment across ABI versions: drain, stop its producer, unlink it and let the new producer recreate it';
  }
  if (header.kind === 'table') {
    return `it has the waitprep magic and ABI version ${WP_ABI_VERSION}, but its geometry or size (${header.size} bytes) is corrupt or truncated`;
  }
  if (header.size !== undefined) return `it does not start with the waitprep magic (${header.size} bytes): a foreign or corrupt segment`;
  return 'it could not be read to say more';
}

/** Opens the table as a consumer of the native implementation, or throws a CommandError. */
function openForOperator(command, name, trust = {}) {
  try {
    return openLeaseTable({ name, role: 'consumer', implementation: 'native', trust });
  } catch (error) {
    const code = error?.code ?? 'ERR_SYSTEM';
    switch (code) {
      case 'ERR_INVALID_ARGUMENT':
        throw usage(command, `${JSON.stringify(name)} is not a table name (1-200 of A-Z a-z 0-9 . _ -, not starting with a dot)`);
      case 'ERR_TABLE_NOT_FOUND':
        throw new CommandError(EXIT.NOT_FOUND, code, `no lease table named ${JSON.stringify(name)} (/dev/shm/${name} does not exist)`);
      case 'ERR_BAD_SEGMENT':
        throw new CommandError(EXIT.BAD_SEGMENT, code,
          `refusing /dev/shm/${name}: ERR_BAD_SEGMENT, not a lease table of this ABI (corrupt, truncated or foreign); ${describeForeignSegment(name)}`);
      case 'ERR_UNTRUSTED_SEGMENT':
        throw new CommandError(EXIT.ERROR, code,
          `${error.message}. For a table shared across users on purpose: waitprep ${command} ${name} --trust-uid <owner uid> [--trust-group-writable]`);
      case 'ERR_NO_CLIENT_SLOT':
        throw new CommandError(EXIT.ERROR, code, `${JSON.stringify(name)}: all 64 client entries are held by live clients, so this command cannot register to look`);
      case 'ERR_NATIVE_UNAVAILABLE':
        throw new CommandError(EXIT.ERROR, code,
          `the native addon is not loaded, so no shared-memory table can be opened: ${implementationReason}. ` +
          (process.env.WAITPREP_IMPLEMENTATION === 'js' ? 'Unset WAITPREP_IMPLEMENTATION' : 'Build it (npm run build:native)'));
      default:
        throw new CommandError(EXIT.ERROR, code,
          `${error instanceof Error ? error.message : String(error)}` +
          ' (opening needs read and write access to the segment: the inspector registers as a client)');
    }
  }
}

/** The word the report shows for a verdict: an `unknown` one names why nobody here can judge it. */
function livenessLabel({ liveness, reason }) {
  if (liveness !== 'unknown') return liveness;
  return reason === 'reaper-unregistered' ? 'unknown' : 'other-namespace';
}

/**
 * One inspection of `table`: its report, without the inspector's own client entry, and the
 * judgement it was built from (judgeInspection's, which says why a reap is needed).
 */
function look(name, table) {
  const view = table.inspect();
  const self = table.clientIndex;
  const judged = judgeInspection(view, { exclude: self });
  // A REAPING entry shows its reaper's pid and is judged by its reaper, as the core does.
  const clients = judged.clients.map(({ entry, judgement, reaperPid }) =>
    entry.state === 'reaping' ? { ...entry, reaperPid, liveness: livenessLabel(judgement) } : { ...entry, liveness: livenessLabel(judgement) });
  const byIndex = new Map(clients.map((c) => [c.index, c]));
  const holder = (index) => {
    const c = byIndex.get(index);
    return { client: index, pid: c?.pid ?? null, liveness: c?.liveness ?? 'unregistered' };
  };
  const counts = summarizeInspection(view).slots;
  const slots = view.slots.map((s) => {
    return {
      slot: s.slot,
      state: s.state,
      generation: s.generation,
      digest: s.digestHex,
      digestShort: s.digestHex.slice(0, 16),
      // The inspector pins nothing: a bit at its own index is a stray left by nobody alive.
      pinHolders: s.pinHolders.map(holder),
      meta: s.meta,
      device: s.device,
    };
  });
  const producer = view.producer === null ? null : holder(view.producer);
  const report = {
    table: name,
    path: `/dev/shm/${name}`,
    abiVersion: view.abiVersion,
    capacity: view.capacity,
    segmentSize: view.segmentSize,
    reapedClientsTotal: view.reapedClients,
    inspector: { clientIndex: self, pid: process.pid, excluded: true },
    producer,
    clients,
    slotCounts: counts,
    slots,
    deadPins: judged.deadPins,
    strayPins: judged.strayPins,
    needsReap: judged.needsReap,
    exitCode: judged.needsReap ? EXIT.NEEDS_REAP : EXIT.HEALTHY,
  };
  return { report, judged };
}

/** JSON with bigints as decimal strings. */
function toJson(value) {
  return JSON.stringify(value, (_, v) => (typeof v === 'bigint' ? v.toString() : v), 2);
}

function pad(cells, widths) {
  return cells.map((cell, i) => String(cell).padEnd(widths[i])).join('  ').trimEnd();
}

function table(header, rows) {
  const widths = header.map((h, i) => rows.reduce((width, r) => Math.max(width, String(r[i]).length), h.length));
  return [pad(header, widths), ...rows.map((r) => pad(r, widths))].map((line) => `  ${line}`).join('\n');
}

function holderText(h) {
  return `client ${h.client} (pid ${h.pid ?? '?'}, ${h.liveness})`;
}

function humanReport(r, judged) {
  const lines = [];
  lines.push(`lease table ${r.table} (${r.path}): ABI version ${r.abiVersion}, capacity ${r.capacity} slots, segment ${r.segmentSize} bytes`);
  lines.push(r.producer === null
    ? 'producer: none'
    : `producer: client ${r.producer.client}, pid ${r.producer.pid ?? '?'}, ${r.producer.liveness}`);
  lines.push('');
  lines.push(`clients: ${r.clients.length} (not counting this inspector, client ${r.inspector.clientIndex}, pid ${r.inspector.pid}); reaped since creation: ${r.reapedClientsTotal}`);
  if (r.clients.length > 0) {
    lines.push(table(
      ['index', 'pid', 'serial', 'start time (ticks after boot)', 'state', 'liveness', 'role'],
      r.clients.map((c) => [c.index, c.pid, c.serial, c.state === 'claiming' ? '-' : c.startTime, c.state, c.liveness, c.producer ? 'producer' : 'consumer']),
    ));
  }
  lines.push('');
  const { free, reserved, ready, evicting } = r.slotCounts;
  lines.push(`slots: ${ready} ready, ${reserved} reserved, ${evicting} evicting, ${free} free`);
  for (const state of ['reserved', 'ready', 'evicting']) {
    const ofState = r.slots.filter((s) => s.state === state);
    if (ofState.length === 0) continue;
    // Every pinned slot is listed; unpinned READY slots only up to READY_SHOWN.
    const shown = state === 'ready'
      ? [...ofState.filter((s) => s.pinHolders.length > 0), ...ofState.filter((s) => s.pinHolders.length === 0).slice(0, READY_SHOWN)]
      : ofState;
    shown.sort((a, b) => a.slot - b.slot);
    lines.push(`  ${state}:`);
    lines.push(table(
      ['slot', 'generation', 'digest', 'pinned by'],
      shown.map((s) => [s.slot, s.generation, `${s.digestShort}…`, s.pinHolders.map(holderText).join(', ') || '-']),
    ).replace(/^/gm, '  '));
    if (shown.length < ofState.length) lines.push(`      … and ${ofState.length - shown.length} more unpinned ready slots (--json lists every slot)`);
  }
  lines.push('');
  if (r.deadPins.length === 0) {
    lines.push('pins held by dead clients: none');
  } else {
    lines.push(`pins held by dead clients: ${r.deadPins.length}`);
    const reaping = new Set(r.clients.filter((c) => c.state === 'reaping').map((c) => c.index));
    for (const p of r.deadPins) {
      lines.push(reaping.has(p.client)
        ? `  slot ${p.slot}: client ${p.client}, whose reaper is gone mid-reap`
        : `  slot ${p.slot}: client ${p.client} (pid ${p.pid}) is dead`);
    }
  }
  if (r.strayPins.length > 0) {
    lines.push(`pin bits of unregistered client entries: ${r.strayPins.map((p) => `slot ${p.slot} client ${p.client}`).join(', ')}` +
      ' (a client may have registered and pinned while the snapshot was taken: inspect again; reaping does not clear these)');
  }
  const stuck = r.clients.filter((c) => c.state === 'reaping');
  if (stuck.length > 0) {
    lines.push(`clients being reaped: ${stuck.map((c) => (c.reaper === 'unregistered' ? `client ${c.index} by an unregistered reaper` : `client ${c.index} by client ${c.reaper.client}` +
      (c.reaperPid === null ? ', which has left the table' : ` (pid ${c.reaperPid})`)) + ` (${c.liveness === 'dead' ? 'reaper gone' : c.liveness})`).join(', ')}` +
      ' (a reap whose reaper is gone is taken over by the next reap; one by an unregistered reaper never is: if it persists, drain and recreate the table)');
  }
  lines.push('');
  if (judged.needsReap) {
    const why = [
      judged.deadPins.length > 0 ? `${judged.deadPins.length} pin(s) held by dead clients` : null,
      judged.deadProducer ? `the producer (pid ${r.producer.pid}) is dead` : null,
      judged.goneReaper ? 'a reap whose reaper is gone' : null,
    ].filter(Boolean).join(' and ');
    lines.push(`status: needs a reap: ${why}; run \`waitprep reap ${r.table}\``);
  } else {
    const idle = r.clients.filter((c) => c.liveness === 'dead').length;
    lines.push(`status: healthy${idle > 0 ? ` (${idle} dead client(s) hold no pin; \`waitprep reap ${r.table}\` frees their entries)` : ''}`);
  }
  return lines.join('\n');
}

/** Runs `body` with the table open; turns every failure into an exit code and a message. */
async function runCommand(command, args, body) {
  let json = args.includes('--json');
  let name = null;
  try {
    const parsed = inspectArgs(command, args);
    json = parsed.json;
    name = parsed.name;
    const table = openForOperator(command, name, parsed.trust);
    let outcome;
    try {
      outcome = body(name, table);
    } finally {
      table.close();
    }
    process.stdout.write((json ? toJson(outcome.report) : outcome.human) + '\n');
    process.exitCode = outcome.exit;
  } catch (error) {
    const failure = error instanceof CommandError
      ? error
      : new CommandError(EXIT.ERROR, error?.code ?? 'ERR_SYSTEM', error instanceof Error ? error.stack ?? error.message : String(error));
    console.error(`waitprep ${command}: ${failure.message}`);
    if (json) process.stdout.write(toJson({ table: name, error: { code: failure.code, message: failure.message }, exitCode: failure.exit }) + '\n');
    process.exitCode = failure.exit;
  }
}

/** `waitprep inspect <table> [--json]`. */
export function inspect(args) {
  return runCommand('inspect', args, (name, table) => {
    const { report, judged } = look(name, table);
    return { report, human: humanReport(report, judged), exit: report.exitCode };
  });
}

/** `waitprep reap <table> [--json]`: releases the pins and entries of dead clients, and a dead producer's role. */
export function reap(args) {
  return runCommand('reap', args, (name, table) => {
    const before = look(name, table).report;
    const reaped = table.reapDeadClients();
    const after = look(name, table).report;
    // An entry reaped is one present before (same index and serial) and gone after; a client
    // that closed normally in between would look the same, so only those judged dead count.
    const remaining = new Set(after.clients.map((c) => `${c.index}:${c.serial}`));
    const released = before.clients.filter((c) => c.liveness === 'dead' && !remaining.has(`${c.index}:${c.serial}`));
    const releasedIndexes = new Set(released.map((c) => c.index));
    const pinBits = (report) => report.slots.reduce((n, s) => n + s.pinHolders.filter((h) => releasedIndexes.has(h.client)).length, 0);
    const producerReleased = before.producer !== null && releasedIndexes.has(before.producer.client) && after.producer?.client !== before.producer.client;
    const report = {
      table: name,
      reaped,
      clients: released.map((c) => ({ index: c.index, pid: c.pid, serial: c.serial, producer: c.producer })),
      // Shared memory keeps one pin bit per (slot, client), however many leases the client held on the slot.
      pinsReleased: Math.max(0, pinBits(before) - pinBits(after)),
      producerReleased,
      deadPinsBefore: before.deadPins.length,
      deadPinsAfter: after.deadPins.length,
      // A dead producer's slots are settled on the way: RESERVED abandoned, EVICTING back to READY.
      slotCountsBefore: before.slotCounts,
      slotCountsAfter: after.slotCounts,
      reapedClientsTotal: after.reapedClientsTotal,
      inspector: before.inspector,
      exitCode: EXIT.HEALTHY,
    };
    const lines = [`lease table ${name} (/dev/shm/${name}): reaped ${reaped} dead client(s)`];
    for (const c of report.clients) lines.push(`  client ${c.index} (pid ${c.pid}${c.producer ? ', the producer' : ''}): released`);
    lines.push(`pins released: ${report.pinsReleased} (one per slot a dead client held, however many leases it had there)`);
    if (producerReleased) {
      lines.push(`producer role freed; its slots settled: reserved ${before.slotCounts.reserved} -> ${after.slotCounts.reserved}, evicting ${before.slotCounts.evicting} -> ${after.slotCounts.evicting}`);
    }
    if (after.deadPins.length > 0) {
      lines.push(`still held by dead clients: ${after.deadPins.length} pin(s) (entries a live reaper is working on)`);
    }
    lines.push(`dead clients (of this pid namespace) left: ${after.clients.filter((c) => c.liveness === 'dead').length}`);
    return { report, human: lines.join('\n'), exit: EXIT.HEALTHY };
  });
}

/** Where POSIX shared memory lives on Linux: a table named N is the file /dev/shm/N. */
const SHM = '/dev/shm';
/** The demo's socket is named after its table (bin/demo/run.js): `<tmpdir>/<table>.sock`, for these tables only. */
const DEMO_TABLE = /^waitprep-demo-/;

/**
 * What a file's first bytes say, read without following a link and without writing: 'table'
 * (the waitprep magic and this ABI), 'other-abi' (the magic, another ABI version), 'not-table'
 * (no magic, too short, not a regular file) or 'missing', with the file's size when it was read.
 * Nothing but 'table' is ever opened as one.
 */
function headerOf(path) {
  let fd;
  try {
    fd = openSync(path, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW | fsConstants.O_NONBLOCK);
  } catch (error) {
    return { kind: error?.code === 'ENOENT' ? 'missing' : 'not-table', why: error?.code === 'ELOOP' ? 'a symbolic link' : `unreadable (${error?.code ?? error})` };
  }
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile()) return { kind: 'not-table', why: 'not a regular file' };
    const { size } = stat;
    const header = Buffer.alloc(16);
    const n = readSync(fd, header, 0, 16, 0);
    if (n < 16 || header.readBigUInt64LE(HDR.MAGIC) !== WP_MAGIC) return { kind: 'not-table', why: 'no waitprep magic', size };
    const abi = header.readUInt32LE(HDR.ABI_VERSION);
    return abi === WP_ABI_VERSION ? { kind: 'table', size } : { kind: 'other-abi', why: `a waitprep lease table of ABI version ${abi} (this waitprep reads ${WP_ABI_VERSION})`, abi, size };
  } finally {
    closeSync(fd);
  }
}

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
 * not dead, so its table is kept; so is a table with no entry at all, which no crash left (a
 * producer that closed may reopen it). The name is unlinked while our entry is still registered,
 * which keeps the window in which a new client could attach to a name about to go as short as it can be.
 */
function cleanOne(name, dryRun, trust) {
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
    if (others.length === 0) {
      outcome = { table: name, path, removed: false, reason: 'no client entries: no crash left it (a producer that closed may reopen it); unlink it by hand if it is unwanted', exit: EXIT.HEALTHY };
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
      if (!dryRun) {
        let unlinked = false;
        let why = 'shm_unlink failed';
        try {
          unlinked = unlinkLeaseTable(name);
        } catch (error) {
          why = error instanceof Error ? error.message : String(error);
        }
        if (!unlinked) outcome = { ...outcome, removed: false, reason: `${outcome.reason}, but it could not be removed: ${why}`, code: 'ERR_SYSTEM', exit: EXIT.ERROR };
      }
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

export const CLEAN_USAGE = 'waitprep clean [<table>...] [--dry-run] [--json] [--trust-uid UID] [--trust-group-writable]';

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
 * behind (every client dead, the producer included), the demo's arenas and sockets named after
 * them, and says what it removed and what it kept and why. Without names it scans /dev/shm and
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
        results.push(cleanOne(name, parsed.dryRun, parsed.trust));
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
