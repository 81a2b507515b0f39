import { CLIENT_STATE, CLIENT_WORD, CLI, CLIENTS_OFFSET, CLIENT_SIZE, HDR, MAX_CLIENTS, SLOT, SLOT_SIZE, SLOTS_OFFSET, SLOT_STATE } from './layout.js';

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
  producer: boolean;
  /**
   * For `reaping`: the client whose process is reaping this entry (its index, and the low 15
   * bits of its serial: the reap is its while that entry holds that client), or `'unregistered'`
   * for a reaper that reaped to make room in a full registry. Otherwise null.
   */
  reaper: { client: number; serialLow15: number } | 'unregistered' | null;
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

function pidBits(word: bigint): number {
  return Number((word >> BigInt(CLIENT_WORD.PID_SHIFT)) & BigInt(CLIENT_WORD.PID_MASK));
}

/** The reaper a REAPING word names in its pid bits (table.c reaper_bits). */
function reaperOf(state: number, word: bigint): ClientInspection['reaper'] {
  if (state !== CLIENT_STATE.REAPING) return null;
  const named = pidBits(word);
  if ((named & CLIENT_WORD.REAPER_NAMED) === 0) return 'unregistered';
  return { client: named & (MAX_CLIENTS - 1), serialLow15: (named >>> 6) & 0x7fff };
}

const CLIENT_STATES = ['free', 'claiming', 'active', 'reaping'] as const;
const SLOT_STATES = ['free', 'reserved', 'ready', 'evicting'] as const;

/**
 * Reads a snapshot of a segment (a copy, or a view racing with writers: each
 * field is read once, so a racing snapshot is merely stale, never unsafe).
 * The segment was validated when the table was opened.
 */
export function inspectSegment(bytes: Uint8Array): TableInspection {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const capacity = view.getUint32(HDR.CAPACITY, true);
  const producerWord = view.getBigUint64(HDR.PRODUCER, true);
  const clients: ClientInspection[] = [];
  for (let i = 0; i < MAX_CLIENTS; i++) {
    const at = CLIENTS_OFFSET + i * CLIENT_SIZE;
    const word = view.getBigUint64(at + CLI.WORD, true);
    const state = Number(word & 3n);
    if (state === CLIENT_STATE.FREE) continue;
    clients.push({
      index: i,
      state: CLIENT_STATES[state] as ClientInspection['state'],
      pid: state === CLIENT_STATE.REAPING ? 0 : pidBits(word),
      serial: Number(word >> BigInt(CLIENT_WORD.SERIAL_SHIFT)),
      startTime: view.getBigUint64(at + CLI.START_TIME, true),
      pidNamespace: view.getBigUint64(at + CLI.PID_NS, true),
      timeNamespace: view.getBigUint64(at + CLI.TIME_NS, true),
      thread: view.getUint32(at + CLI.THREAD, true),
      reaper: reaperOf(state, word),
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
