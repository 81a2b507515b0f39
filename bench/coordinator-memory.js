#!/usr/bin/env node
// What the coordinator's bytes per waiting consumer are made of. bench:coordinator measures the
// whole (heap and ArrayBuffer bytes with N waiting); this builds each of the coordinator's
// structures alone, N entries each, the way the coordinator fills them, and measures each after
// forced GCs, in one process, so the parts can be read against the whole measured beside them.
//
//   npm run bench:coordinator-memory                       1,000,000 waiting
//   npm run -s bench:coordinator-memory -- --json          one JSON object on stdout
//   ... -- --quick (100,000 waiting) or --waiting N
//
// The parts, per waiting consumer:
// - consumer copy: the frozen, branded copy `onWait` keeps (checkConsumer);
// - wait slots: the ticket-number table (WaitSlots: a Float64Array of number and demand per slot,
//   the array of consumer copies beside it, and the (engine, request) index with each slot's
//   request hash), at least twice as many slots as waits;
// - demand records: the DemandTable (Int32 fields, hashes and index, the array of keys; host
//   demands share one readiness request), one host demand per wait, as bench:coordinator has;
// - ticket: a numeric ticket as the caller holds it in an array (above 2^31, so a heap number).
// Not counted: the keys and the callers' consumer objects (made before each baseline), as in
// bench:coordinator.
import { WaitCoordinator } from 'waitprep';
import { checkConsumer } from '../dist/coordinator/consumer.js';
import { WaitSlots, firstTicketNumber } from '../dist/coordinator/wait-slots.js';
import { DemandTable } from '../dist/coordinator/demand-table.js';
import { HOST } from '../dist/internal/host.js';
import { benchEnv, benchKey, commandLine, stubBackend } from './common.js';

const { flag, option } = commandLine();
const waiting = Number(option('waiting', flag('quick') ? '100000' : '1000000'));
if (!Number.isInteger(waiting) || waiting < 1) throw new Error(`--waiting: a positive integer, not ${option('waiting')}`);
if (typeof globalThis.gc !== 'function') throw new Error('run with node --expose-gc');

const memory = () => {
  for (let i = 0; i < 4; i++) globalThis.gc();
  const { heapUsed, arrayBuffers } = process.memoryUsage();
  return { heapUsed, arrayBuffers };
};
/** Heap and ArrayBuffer bytes per entry that `build` keeps alive in what it returns. */
const measure = (build) => {
  const before = memory();
  const kept = build();
  const after = memory();
  // Rounded each, and the total is their sum, so the rows add up as printed.
  const heap = Math.round((after.heapUsed - before.heapUsed) / waiting);
  const buffers = Math.round((after.arrayBuffers - before.arrayBuffers) / waiting);
  return { kept, row: { heap, array_buffers: buffers, total: heap + buffers } };
};

const keys = Array.from({ length: waiting }, (_, i) => benchKey(i));
const callers = Array.from({ length: waiting }, (_, i) => ({ engine: 'engine-0', request: `req-${i}`, generation: 0 }));
const parts = {};

// The copies, into an array made (and sized) before the baseline, so only the copies count.
const holder = new Array(waiting).fill(null);
const copies = measure(() => {
  for (let i = 0; i < waiting; i++) holder[i] = checkConsumer(callers[i]);
  return holder;
});
parts['consumer copy'] = copies.row;

const random = new Uint8Array(30).fill(7);
const slots = measure(() => {
  const table = new WaitSlots(waiting + 1, random.subarray(8, 19), firstTicketNumber(random.subarray(24, 30)), 12345);
  for (let i = 0; i < waiting; i++) {
    const c = holder[i];
    table.add(c, i, table.requestHash(c.engine, c.request));
  }
  return table;
});
parts['wait slots'] = slots.row;

const demands = measure(() => {
  const table = new DemandTable(waiting + 1, 12345);
  for (let i = 0; i < waiting; i++) {
    const hash = table.hash(keys[i], HOST);
    table.addWaiting(table.add(hash, keys[i], HOST), 1);
  }
  return table;
});
parts['demand records'] = demands.row;

const first = firstTicketNumber(random.subarray(24, 30));
if (slots.kept.findNumber(first + waiting - 1) === -1) throw new Error('wait slots: the last number was not issued');
const ticketArray = new Array(waiting).fill(null);
const tickets = measure(() => {
  for (let i = 0; i < waiting; i++) ticketArray[i] = first + i;
  return ticketArray;
});
parts["ticket (the caller's)"] = tickets.row;

const sum = Object.values(parts).reduce((a, p) => ({ heap: a.heap + p.heap, array_buffers: a.array_buffers + p.array_buffers, total: a.total + p.total }), { heap: 0, array_buffers: 0, total: 0 });
const kept = [copies.kept, slots.kept, demands.kept, tickets.kept];

// The whole, as bench:coordinator measures it, in the same process.
const held = new Array(waiting).fill(null);
const whole = measure(() => {
  const coordinator = new WaitCoordinator({ backend: stubBackend(), maxQueued: waiting + 1, maxWaiting: waiting + 1, historyLimit: 1000, tickets: 'number' });
  for (let i = 0; i < waiting; i++) held[i] = coordinator.onWait(callers[i], keys[i]).ticket;
  return { coordinator, held };
});
if (kept.length !== 4 || whole.kept.coordinator.stats().waiting !== waiting) throw new Error('bench lost what it measured');

const out = { env: benchEnv(), waiting, parts, sum_of_parts: sum, coordinator: whole.row };
if (flag('json')) {
  process.stdout.write(JSON.stringify(out) + '\n');
} else {
  const env = out.env;
  console.log(`waitprep coordinator memory by structure — ${env.date}, ${env.cpu} (${env.cores} cores), Node ${env.node}; ${waiting} waiting, bytes per waiting consumer`);
  console.table({ ...parts, 'sum of the parts': sum, 'the coordinator (numeric tickets)': whole.row });
}
