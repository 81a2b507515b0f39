import { WaitprepError } from '../errors.js';
import { CLIENT_STATE, CLIENT_STATES, CLIENT_WORD, CLIENT_FIELD, CLIENTS_OFFSET, FALLBACK_CLIENT_FIELD, CLIENT_SIZE, HDR, HEADER_SIZE, MAX_CLIENTS, SLOT, SLOT_SIZE, SLOTS_OFFSET, SLOT_STATE, headerCorruption, segmentSize } from './layout.js';
import { holdsReaper, judgeClient, judgeReaper, reaperNamed, selfIdentity, type LivenessJudgement, type ReaperName, type RecordedClient } from './liveness.js';

/** One registered client as the segment records it. */
export interface ClientInspection {
  index: number;
  state: 'claiming' | 'active' | 'reaping';
  /** The client's pid; 0 for `reaping` (the word names its reaper instead). */
  pid: number;
  serial: number;
  startTime: bigint;
  /** Inode of the client's pid namespace; 0: unknown (never reaped). */
  pidNamespace: bigint;
  /** Inode of its time namespace (start times compare only within one); 0 without time namespaces. */
  timeNamespace: bigint;
  /** JavaScript fallback: the worker_threads threadId that opened the handle (0: the main thread, or a native client). */
  thread: number;
  /**
   * JavaScript fallback: the OS thread id of the worker thread that opened the handle, by which
   * {@link judgeInspection} judges the entry as the reaper does (a terminated worker is dead
   * though its process lives); 0 for the main thread and for a native client.
   */
  osThread: number;
  /** That thread's start time, with `osThread` (0 without one). */
  osThreadStartTime: bigint;
  producer: boolean;
  /**
   * For `reaping`: the client whose process is reaping this entry (its index, and the low 15
   * bits of its serial: the reap is its while that entry holds that client), or `'unregistered'`
   * for a reaper that reaped to make room in a full registry. Otherwise null.
   */
  reaper: ReaperName | null;
}

/** One non-free slot. */
export interface SlotInspection {
  slot: number;
  state: 'reserved' | 'ready' | 'evicting';
  generation: bigint;
  /** Client indexes holding at least one pin. */
  pinHolders: number[];
  digestHex: string;
  meta: { sizeBytes: bigint; location: bigint; checksum: bigint; codecId: number; representationVersion: number };
  /**
   * The device record, when one is present and was not being written when the
   * snapshot was read. A snapshot is a plain copy, so a record rewritten during
   * the copy can appear torn here: inspection is for operators, never for
   * decisions (pins read records under the seqlock).
   */
  device: { deviceUuidHex: string; arena: bigint; arenaGeneration: bigint; writeSeq: bigint } | null;
}

/** What {@link LeaseTable.inspect} reports. */
export interface TableInspection {
  abiVersion: number;
  capacity: number;
  segmentSize: bigint;
  /** The producer's client index, or `null` when there is none. */
  producer: number | null;
  reapedClients: bigint;
  clients: ClientInspection[];
  slots: SlotInspection[];
}

/** What {@link LeaseTable.summary} reports: counts for monitoring, read in place. */
export interface TableSummary {
  capacity: number;
  slots: { free: number; reserved: number; ready: number; evicting: number };
  /** Slots holding at least one pin. */
  pinnedSlots: number;
  /** Registered client entries by state (the producer included). */
  clients: { claiming: number; active: number; reaping: number };
  /** The producer's client index, or `null` when there is none. */
  producer: number | null;
  reapedClients: bigint;
}

/** The same counts from a full inspection. */
export function summarizeInspection(view: TableInspection): TableSummary {
  const slots = { free: 0, reserved: 0, ready: 0, evicting: 0 };
  let pinnedSlots = 0;
  for (const slot of view.slots) {
    slots[slot.state]++;
    if (slot.pinHolders.length > 0) pinnedSlots++;
  }
  slots.free = view.capacity - slots.reserved - slots.ready - slots.evicting;
  const clients = { claiming: 0, active: 0, reaping: 0 };
  for (const client of view.clients) clients[client.state]++;
  return { capacity: view.capacity, slots, pinnedSlots, clients, producer: view.producer, reapedClients: view.reapedClients };
}

/** One client entry of an inspection, and how a reap from this process judges it. */
export interface JudgedClient {
  entry: ClientInspection;
  /** A `reaping` entry is judged by its reaper (`judgeReaper`), any other by its own process (`judgeClient`). */
  judgement: LivenessJudgement;
  /** For a `reaping` entry: its reaper's pid while the reaper still holds its own entry; otherwise null. */
  reaperPid: number | null;
}

/** What {@link judgeInspection} concludes: what a reap from this process would do to the table. */
export interface InspectionJudgement {
  /** Every client entry but the excluded one, in index order. */
  clients: JudgedClient[];
  /** Pins held by dead clients, one per (slot, client), in slot order: a reap releases them. */
  deadPins: { slot: number; client: number; pid: number }[];
  /** Pin bits of a client index with no judged entry (free, or the excluded one): left by nobody alive. */
  strayPins: { slot: number; client: number }[];
  /** The producer role is held by a dead client: a reap frees it and settles its slots. */
  deadProducer: boolean;
  /** A `reaping` entry's reaper is gone: the next reap takes that reap over, pins or not. */
  goneReaper: boolean;
  /** A reap from this process would release something: dead pins, a dead producer or a gone reaper. */
  needsReap: boolean;
}

/**
 * Judges every client entry of an inspection as a reap from this process would
 * (lib/lease-table/liveness.ts, the rule of table.c's reaper), and says what such a reap would
 * release. `exclude` leaves one entry out: the observer's own (`table.clientIndex`), which
 * holds no pin. Dead clients that hold no pin and are not the producer do not make `needsReap`:
 * freeing their entries changes nothing anyone waits for.
 */
export function judgeInspection(view: TableInspection, options: { exclude?: number } = {}): InspectionJudgement {
  const me = selfIdentity();
  const entries = new Map(view.clients.map((c) => [c.index, c]));
  const judged = new Map<number, JudgedClient>();
  let goneReaper = false;
  for (const entry of view.clients) {
    if (entry.index === options.exclude) continue;
    if (entry.state !== 'reaping') {
      judged.set(entry.index, { entry, judgement: judgeClient(entry as RecordedClient, me), reaperPid: null });
      continue;
    }
    const reaper = entry.reaper ?? 'unregistered';
    // The reaper's entry is looked up among all entries, the excluded one included.
    const held = reaper === 'unregistered' ? undefined : entries.get(reaper.client);
    const judgement = judgeReaper(reaper, held, me);
    if (judgement.liveness === 'dead') goneReaper = true;
    judged.set(entry.index, { entry, judgement, reaperPid: holdsReaper(reaper, held) ? held.pid : null });
  }
  const deadPins: InspectionJudgement['deadPins'] = [];
  const strayPins: InspectionJudgement['strayPins'] = [];
  for (const slot of view.slots) {
    for (const client of slot.pinHolders) {
      const holder = judged.get(client);
      if (holder === undefined) strayPins.push({ slot: slot.slot, client });
      else if (holder.judgement.liveness === 'dead') deadPins.push({ slot: slot.slot, client, pid: holder.entry.pid });
    }
  }
  const deadProducer = view.producer !== null && judged.get(view.producer)?.judgement.liveness === 'dead';
  return { clients: [...judged.values()], deadPins, strayPins, deadProducer, goneReaper, needsReap: deadPins.length > 0 || deadProducer || goneReaper };
}

function pidBits(word: bigint): number {
  return Number((word >> BigInt(CLIENT_WORD.PID_SHIFT)) & BigInt(CLIENT_WORD.PID_MASK));
}

const SLOT_STATES = ['free', 'reserved', 'ready', 'evicting'] as const;

/** The ERR_BAD_SEGMENT for a corrupt header (`header`: at least its first HEADER_SIZE bytes). */
export function corruptHeader(what: string, header: Uint8Array, openCapacity?: number): WaitprepError {
  const view = new DataView(header.buffer, header.byteOffset, header.byteLength);
  const reason = header.byteLength < HEADER_SIZE
    ? `the segment is ${header.byteLength} bytes, shorter than its ${HEADER_SIZE}-byte header`
    : headerCorruption(view.getUint32(HDR.CAPACITY, true), view.getBigUint64(HDR.PRODUCER, true), openCapacity) ?? 'the header changed while it was read';
  return new WaitprepError('ERR_BAD_SEGMENT', `${what}: the segment's header is corrupt: ${reason}`);
}

/**
 * Reads a snapshot of a segment (a copy, or a view racing with writers: each
 * field is read once, so a racing snapshot is merely stale, never unsafe).
 * `openCapacity`: the capacity fixed when the table was opened, which the
 * header must still say (a copy of a file read without opening it: the
 * header's own, checked against the copy's length). A corrupt header is
 * `ERR_BAD_SEGMENT`, never a RangeError or a silently short listing.
 */
export function inspectSegment(bytes: Uint8Array, openCapacity?: number): TableInspection {
  if (bytes.byteLength < HEADER_SIZE) throw corruptHeader('inspect', bytes, openCapacity);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const headerCapacity = view.getUint32(HDR.CAPACITY, true);
  const producerWord = view.getBigUint64(HDR.PRODUCER, true);
  if (headerCorruption(headerCapacity, producerWord, openCapacity) !== null) throw corruptHeader('inspect', bytes, openCapacity);
  const capacity = openCapacity ?? headerCapacity;
  if (bytes.byteLength < segmentSize(capacity)) {
    throw new WaitprepError('ERR_BAD_SEGMENT', `inspect: the segment is ${bytes.byteLength} bytes, but capacity ${capacity} needs ${segmentSize(capacity)}`);
  }
  const clients: ClientInspection[] = [];
  for (let i = 0; i < MAX_CLIENTS; i++) {
    const at = CLIENTS_OFFSET + i * CLIENT_SIZE;
    const word = view.getBigUint64(at + CLIENT_FIELD.WORD, true);
    const state = Number(word & 3n);
    if (state === CLIENT_STATE.FREE) continue;
    clients.push({
      index: i,
      state: CLIENT_STATES[state] as ClientInspection['state'],
      pid: state === CLIENT_STATE.REAPING ? 0 : pidBits(word),
      serial: Number(word >> BigInt(CLIENT_WORD.SERIAL_SHIFT)),
      startTime: view.getBigUint64(at + CLIENT_FIELD.START_TIME, true),
      pidNamespace: view.getBigUint64(at + CLIENT_FIELD.PID_NS, true),
      timeNamespace: view.getBigUint64(at + CLIENT_FIELD.TIME_NS, true),
      thread: view.getUint32(at + CLIENT_FIELD.THREAD, true),
      osThread: view.getUint32(at + FALLBACK_CLIENT_FIELD.OS_THREAD, true),
      osThreadStartTime: view.getBigUint64(at + FALLBACK_CLIENT_FIELD.OS_THREAD_START, true),
      reaper: state === CLIENT_STATE.REAPING ? reaperNamed(pidBits(word)) : null,
      producer: producerWord !== 0n && Number(producerWord & 0xffn) === i + 1,
    });
  }
  const slots: SlotInspection[] = [];
  for (let s = 0; s < capacity; s++) {
    const at = SLOTS_OFFSET + s * SLOT_SIZE;
    const stateGen = view.getBigUint64(at + SLOT.STATE_GEN, true);
    const state = Number(stateGen & 0xffn);
    if (state === SLOT_STATE.FREE || state > SLOT_STATE.EVICTING) continue;
    const mask = view.getBigUint64(at + SLOT.PIN_MASK, true);
    const pinHolders: number[] = [];
    for (let c = 0; c < MAX_CLIENTS; c++) if ((mask >> BigInt(c)) & 1n) pinHolders.push(c);
    const seq = view.getBigUint64(at + SLOT.DEVICE, true);
    const device = seq !== 0n && (seq & 1n) === 0n
      ? {
          deviceUuidHex: Buffer.from(bytes.subarray(at + SLOT.DEVICE + 8, at + SLOT.DEVICE + 24)).toString('hex'),
          arena: view.getBigUint64(at + SLOT.DEVICE + 24, true),
          arenaGeneration: view.getBigUint64(at + SLOT.DEVICE + 32, true),
          writeSeq: view.getBigUint64(at + SLOT.DEVICE + 40, true),
        }
      : null;
    slots.push({
      slot: s,
      state: SLOT_STATES[state] as SlotInspection['state'],
      generation: stateGen >> 8n,
      pinHolders,
      digestHex: Buffer.from(bytes.subarray(at + SLOT.DIGEST, at + SLOT.DIGEST + 32)).toString('hex'),
      meta: {
        sizeBytes: view.getBigUint64(at + SLOT.META, true),
        location: view.getBigUint64(at + SLOT.META + 8, true),
        checksum: view.getBigUint64(at + SLOT.META + 16, true),
        codecId: view.getUint32(at + SLOT.META + 24, true),
        representationVersion: view.getUint32(at + SLOT.META + 28, true),
      },
      device,
    });
  }
  return {
    abiVersion: view.getUint32(HDR.ABI_VERSION, true),
    capacity,
    segmentSize: view.getBigUint64(HDR.SEGMENT_SIZE, true),
    producer: producerWord === 0n ? null : Number(producerWord & 0xffn) - 1,
    reapedClients: view.getBigUint64(HDR.REAPED, true),
    clients,
    slots,
  };
}
