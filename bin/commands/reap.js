// `waitprep reap <table> [--json]`: the one repair a table in use allows: release the pins and
// client entries of dead processes (and a dead producer's role), and say which.
import { EXIT, look, runCommand } from './operator.js';

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
    // reap never unlinks: a table left with no client may still be reopened by its producer.
    if (after.clients.length === 0) lines.push(`no client is left; if the table is unwanted, \`waitprep clean ${name}\` removes it`);
    return { report, human: lines.join('\n'), exit: EXIT.HEALTHY };
  });
}
