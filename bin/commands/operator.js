// What the operator's commands (inspect, reap, clean) share: the exit codes, argument parsing,
// opening a table under the trust rules, and the report's shape and wording.
//
// Every command opens the table as a consumer, which registers the inspecting process as one more
// client for as long as it looks (it holds no pin, and its own entry is left out of every report),
// and closes it before exiting. Liveness is judgeInspection's (lib/lease-table/liveness.ts, the
// rule of the C core's reaper), shown as 'alive', 'dead', 'other-namespace' (a client this
// process cannot judge: another pid or time namespace, or our own namespace unknown; no reap from
// here touches it) or 'unknown' (a reap by an unregistered reaper, never taken over).
//
// Exit codes (also in `waitprep help` and docs/operations.md):
//   0 healthy (reap: done)   1 pins held by dead clients, or a dead producer: needs a reap
//   2 usage error            3 no such table
//   4 not a lease table of this ABI (ERR_BAD_SEGMENT)   5 any other error (addon not loaded, …)
import { closeSync, constants as fsConstants, fstatSync, openSync, readSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { implementationReason, judgeInspection, openLeaseTable, summarizeInspection } from 'waitprep';
import { HDR, WP_ABI_VERSION, WP_MAGIC, isTableName } from 'waitprep/layout';

/** How to get the addon: the install step's and the loader's own words (scripts/build-advice.cjs). */
const HOW_TO_BUILD = createRequire(import.meta.url)('../../scripts/build-advice.cjs');

/** Where POSIX shared memory lives on Linux: a table named N is the file /dev/shm/N. */
export const SHM = '/dev/shm';

export const EXIT = Object.freeze({ HEALTHY: 0, NEEDS_REAP: 1, USAGE: 2, NOT_FOUND: 3, BAD_SEGMENT: 4, ERROR: 5 });

/** Human output lists at most this many READY slots that nobody pins (`--json` lists all). */
const READY_SHOWN = 20;

/** A failure that ends the command with `exit`; `code` is the WaitprepError code or a CLI one. */
export class CommandError extends Error {
  constructor(exit, code, message) {
    super(message);
    this.exit = exit;
    this.code = code;
  }
}

export function usage(command, problem) {
  return new CommandError(EXIT.USAGE, 'ERR_USAGE', `${problem}\nusage: waitprep ${command} <table> [--json]`);
}

/**
 * A command's boolean flags and its table names, by node:util's parseArgs (`--` ends the
 * options, so a table name may start with '-'); a parse error is a usage error.
 */
export function commandArgs(args, flags, usageLine, valued = []) {
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
export function shmPathProblem(command, given) {
  const bare = given.startsWith(`${SHM}/`) ? given.slice(SHM.length + 1) : null;
  if (bare === null || !isTableName(bare)) return null;
  return new CommandError(EXIT.USAGE, 'ERR_USAGE', `${JSON.stringify(given)} is a path; name the table instead: waitprep ${command} ${bare}`);
}

/** `<table> [--json] [--trust-uid UID] [--trust-group-writable]`. */
export function inspectArgs(command, args) {
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
export function trustOf(command, values) {
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
/**
 * What a file's first bytes say, read without following a link and without writing: 'table'
 * (the waitprep magic and this ABI), 'other-abi' (the magic, another ABI version), 'not-table'
 * (no magic, too short, not a regular file) or 'missing', with the file's size when it was read.
 * Nothing but 'table' is ever opened as one.
 */
export function headerOf(path) {
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

export function describeForeignSegment(name) {
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
export function openForOperator(command, name, trust = {}) {
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
          (process.env.WAITPREP_IMPLEMENTATION === 'js' ? 'Unset WAITPREP_IMPLEMENTATION' : `To get it: ${HOW_TO_BUILD}`));
      default:
        throw new CommandError(EXIT.ERROR, code,
          `${error instanceof Error ? error.message : String(error)}` +
          ' (opening needs read and write access to the segment: the inspector registers as a client)');
    }
  }
}

/** The word the report shows for a verdict: an `unknown` one names why nobody here can judge it. */
export function livenessLabel({ liveness, reason }) {
  if (liveness !== 'unknown') return liveness;
  return reason === 'reaper-unregistered' ? 'unknown' : 'other-namespace';
}

/**
 * One inspection of `table`: its report, without the inspector's own client entry, and the
 * judgement it was built from (judgeInspection's, which says why a reap is needed).
 */
export function look(name, table) {
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
export function toJson(value) {
  return JSON.stringify(value, (_, v) => (typeof v === 'bigint' ? v.toString() : v), 2);
}

export function pad(cells, widths) {
  return cells.map((cell, i) => String(cell).padEnd(widths[i])).join('  ').trimEnd();
}

export function table(header, rows) {
  const widths = header.map((h, i) => rows.reduce((width, r) => Math.max(width, String(r[i]).length), h.length));
  return [pad(header, widths), ...rows.map((r) => pad(r, widths))].map((line) => `  ${line}`).join('\n');
}

export function holderText(h) {
  return `client ${h.client} (pid ${h.pid ?? '?'}, ${h.liveness})`;
}

export function humanReport(r, judged) {
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
export async function runCommand(command, args, body) {
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
