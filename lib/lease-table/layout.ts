/**
 * The lease table's binary layout and status codes, mirrored from
 * native/include/waitprep.h. The JavaScript fallback uses these directly;
 * at load the addon's own constants (LAYOUT) and its whole status table
 * (STATUS) are compared with them (lib/lease-table/native.ts, before the addon is used)
 * so the two can never drift. Miss reasons are named after the MISS_
 * statuses (lib/coordinator/miss-reasons.ts).
 */
/** 2: wp_unpin returns a status, and ERR_PERMISSION is new. 3: C handles are thread-safe (wp_open_options grew). 4: two-choice placement in buckets of PROBE_WINDOW slots (docs/lease-table.md, "Placement"). A segment of another ABI is refused. */
export const WP_ABI_VERSION = 4;
/** "WAITPREP" read as a little-endian u64. */
export const WP_MAGIC = 0x5045525054494157n;

export const HEADER_SIZE = 256;
export const CLIENT_SIZE = 64;
export const SLOT_SIZE = 128;
export const MAX_CLIENTS = 64;
/** Slots per bucket: a key may live in either of two buckets (docs/lease-table.md, "Placement"). */
export const PROBE_WINDOW = 8;
export const MAX_CAPACITY = 1 << 24;
export const MAX_NAME = 200;

/** What a table name may be, as the C core checks it: 1-200 of A-Z a-z 0-9 . _ -, not starting with a dot. */
const TABLE_NAME = /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}$/;

/** Whether `name` is a valid table name (the one rule: the TypeScript side, the fallback and `waitprep clean`). */
export function isTableName(name: unknown): name is string {
  return typeof name === 'string' && TABLE_NAME.test(name);
}

export const HDR = {
  MAGIC: 0,
  ABI_VERSION: 8,
  HEADER_SIZE: 12,
  CAPACITY: 16,
  PROBE_WINDOW: 20,
  MAX_CLIENTS: 24,
  SLOT_SIZE: 28,
  CLIENT_SIZE: 32,
  SEGMENT_SIZE: 40,
  CLIENTS_OFFSET: 48,
  SLOTS_OFFSET: 56,
  PRODUCER: 64,
  REAPED: 72,
} as const;

/**
 * Byte offsets of the fields of a client entry (one of MAX_CLIENTS, CLIENT_SIZE bytes each, from
 * CLIENTS_OFFSET); the C header names them WP_CLI_*. THREAD (u32 at 32) is written only by the
 * JavaScript fallback: the worker_threads threadId of the client, for inspection (the native core
 * leaves it 0).
 */
export const CLIENT_FIELD = { WORD: 0, START_TIME: 8, PID_NS: 16, FLAGS: 24, THREAD: 32, TIME_NS: 40 } as const;
/**
 * Client-entry bytes only the JavaScript fallback writes, where the C layout has none (like
 * CLIENT_FIELD.THREAD): the OS thread id (u32) of the worker thread that opened the entry, and
 * that thread's start time (u64). Both are 0 for the main thread and for every native client, so
 * such an entry is judged by its process alone.
 */
export const FALLBACK_CLIENT_FIELD = { OS_THREAD: 36, OS_THREAD_START: 48 } as const;
/**
 * A client word: state (2 bits) | pid (22 bits) << 2 | serial (40 bits) << 24. In state REAPING
 * the pid bits name the reaper instead: REAPER_NAMED | low 15 serial bits << 6 | client index, or
 * 0 for an unregistered reaper (waitprep.h).
 */
export const CLIENT_WORD = { PID_SHIFT: 2, PID_MASK: (1 << 22) - 1, SERIAL_SHIFT: 24, REAPER_NAMED: 1 << 21 } as const;
export const CLIENT_STATE = { FREE: 0, CLAIMING: 1, ACTIVE: 2, REAPING: 3 } as const;
/** The name of each client state, indexed by its {@link CLIENT_STATE} number (the word's low 2 bits). */
export const CLIENT_STATES = ['free', 'claiming', 'active', 'reaping'] as const;
export const CLIENT_PRODUCER = 1;

export const SLOT = { STATE_GEN: 0, PIN_MASK: 8, DIGEST: 16, META: 48, DEVICE: 80 } as const;
export const SLOT_STATE = { FREE: 0, RESERVED: 1, READY: 2, EVICTING: 3 } as const;

export const STATUS = {
  OK: 0,
  MISS_ABSENT: 1,
  MISS_PREPARING: 2,
  MISS_EVICTING: 3,
  MISS_CONTENDED: 4,
  MISS_NO_DEVICE_RECORD: 5,
  MISS_DEVICE_MISMATCH: 6,
  MISS_ARENA_GENERATION_MISMATCH: 7,
  MISS_DEVICE_WRITE_INCOMPLETE: 8,
  /** wp_try_pin_exact: the slot no longer holds that generation of that digest (a stale or made-up handoff token). */
  MISS_STALE_HANDOFF: 9,
  EXISTS: 20,
  FULL: 21,
  PINNED: 22,
  ABSENT: 23,
  STALE: 24,
  ERR_INVALID_ARGUMENT: 40,
  ERR_BAD_SEGMENT: 41,
  ERR_WRITER_EXISTS: 42,
  ERR_NOT_PRODUCER: 43,
  ERR_NO_CLIENT_SLOT: 44,
  ERR_SYSTEM: 45,
  ERR_NOT_FOUND: 46,
  ERR_EXISTS: 47,
  ERR_NO_MEMORY: 48,
  ERR_NO_SPACE: 49,
  ERR_PERMISSION: 50,
  ERR_UNTRUSTED_SEGMENT: 51,
} as const;

/** wp_open_options.flags that widen which files an open trusts (waitprep.h, "Trust"). */
export const OPEN_TRUST = { UID: 2, GROUP_WRITE: 4, WORLD_WRITE: 8 } as const;

export function segmentSize(capacity: number): number {
  return HEADER_SIZE + MAX_CLIENTS * CLIENT_SIZE + capacity * SLOT_SIZE;
}
export const CLIENTS_OFFSET = HEADER_SIZE;
export const SLOTS_OFFSET = HEADER_SIZE + MAX_CLIENTS * CLIENT_SIZE;

/**
 * The addon's exchange buffer (native/src/addon.cc), in u64 words: a lease or
 * reservation comes out in words 0-7; the wake path's inputs go in after them.
 */
export const EXCHANGE = { WORDS: 19, DIGEST: 8, DEVICE: 12, UNPIN_SLOT: 17, UNPIN_TOKEN: 18 } as const;

/** Every layout constant by name, as the addon exports them for comparison. */
export const LAYOUT: Readonly<Record<string, number>> = Object.freeze({
  WP_ABI_VERSION,
  WP_HEADER_SIZE: HEADER_SIZE,
  WP_CLIENT_SIZE: CLIENT_SIZE,
  WP_SLOT_SIZE: SLOT_SIZE,
  WP_MAX_CLIENTS: MAX_CLIENTS,
  WP_PROBE_WINDOW: PROBE_WINDOW,
  WP_MAX_CAPACITY: MAX_CAPACITY,
  WP_HDR_CAPACITY: HDR.CAPACITY,
  WP_HDR_PRODUCER: HDR.PRODUCER,
  WP_HDR_SEGMENT_SIZE: HDR.SEGMENT_SIZE,
  WP_SLOT_STATE_GEN: SLOT.STATE_GEN,
  WP_SLOT_PIN_MASK: SLOT.PIN_MASK,
  WP_SLOT_DIGEST: SLOT.DIGEST,
  WP_SLOT_META: SLOT.META,
  WP_SLOT_DEVICE: SLOT.DEVICE,
  WP_CLI_WORD: CLIENT_FIELD.WORD,
  WP_CLI_START_TIME: CLIENT_FIELD.START_TIME,
  WP_CLI_PID_NS: CLIENT_FIELD.PID_NS,
  WP_CLI_TIME_NS: CLIENT_FIELD.TIME_NS,
  WP_SLOT_READY: SLOT_STATE.READY,
  WP_SLOT_EVICTING: SLOT_STATE.EVICTING,
  ADDON_EXCHANGE_WORDS: EXCHANGE.WORDS,
  ADDON_DIGEST_WORD: EXCHANGE.DIGEST,
  ADDON_DEVICE_WORD: EXCHANGE.DEVICE,
  ADDON_UNPIN_SLOT_WORD: EXCHANGE.UNPIN_SLOT,
  ADDON_UNPIN_TOKEN_WORD: EXCHANGE.UNPIN_TOKEN,
});

/**
 * What is wrong with a header's capacity and producer word, or null when nothing is: the capacity
 * must be the one fixed at open (`openCapacity`; without one, a valid capacity), and the producer
 * word 0 or a client index 0-63 plus one in its low byte. Anything else is a segment someone
 * overwrote after it was validated at open.
 */
export function headerCorruption(headerCapacity: number, producerWord: bigint, openCapacity?: number): string | null {
  if (openCapacity !== undefined && headerCapacity !== openCapacity) {
    return `the header's capacity is ${headerCapacity}, but the table was opened with capacity ${openCapacity}`;
  }
  if (headerCapacity < 1 || headerCapacity > MAX_CAPACITY) return `the header's capacity ${headerCapacity} is outside [1, ${MAX_CAPACITY}]`;
  const index = Number(producerWord & 0xffn);
  if (producerWord !== 0n && (index === 0 || index > MAX_CLIENTS)) {
    return `the header's producer word 0x${producerWord.toString(16)} names client index ${index - 1}, outside 0-${MAX_CLIENTS - 1}`;
  }
  return null;
}
