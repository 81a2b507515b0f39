import { closeSync, constants as fsConstants, openSync, readSync, statfsSync } from 'node:fs';
import { constants as osConstants } from 'node:os';
import { WaitprepError } from '../errors.js';
import type { RawSummary, TableHandle } from './handle.js';
import { EXCHANGE, HDR, STATUS, WP_ABI_VERSION, WP_MAGIC, segmentSize } from './layout.js';

const STATUS_INVALID = STATUS.ERR_INVALID_ARGUMENT;

/** The addon's flat lease-table functions (native/src/addon.cc). */
export interface NativeTableAddon {
  readonly abiVersion: number;
  readonly layout: Readonly<Record<string, number>>;
  /** Every status code of waitprep.h by name (`WP_OK`, `WP_MISS_ABSENT`, …). */
  readonly statuses: Readonly<Record<string, number>>;
  /**
   * `exchange`: at least EXCHANGE.WORDS words, kept by the caller. On success also the handle's
   * bound wake-path functions, which read their inputs from `exchange` (layout.ts EXCHANGE).
   */
  open(
    name: string,
    producer: boolean,
    capacity: number,
    mode: number,
    exchange: BigUint64Array,
    trustFlags: number,
    trustedUid: number,
  ): [number, unknown, ...([] | [errno: number] | [pinHost: () => number, pinDevice: () => number, unpin: () => void])];
  close(h: unknown): void;
  reserve(h: unknown, digest: Uint8Array): number;
  publish(h: unknown, slot: number, generation: bigint, meta: BigUint64Array): number;
  abandon(h: unknown, slot: number, generation: bigint): number;
  tryEvict(h: unknown, digest: Uint8Array): number;
  /** A status; on WP_OK the lease is in exchange words 0-7. */
  tryPinExact(h: unknown, slot: number, generation: bigint, digest: Uint8Array, device: Uint8Array | null): number;
  /** The pinned run's length or minus a status; lease i in words 8i..8i+7 of `leases`. */
  tryPinPrefix(h: unknown, digests: Uint8Array, n: number, device: Uint8Array | null, leases: BigUint64Array): number;
  /** How many of the `n` (slot, token index, token generation) triples were released, or minus a status. */
  unpinMany(h: unknown, tokens: Uint32Array, n: number): number;
  peek(h: unknown, digest: Uint8Array): number;
  /** How many leading digests are READY, or minus a status; each digest's status in `statuses` when given. */
  peekMany(h: unknown, digests: Uint8Array, n: number, statuses: Uint8Array | null): number;
  recordDeviceWrite(h: unknown, digest: Uint8Array, record: Uint8Array): number;
  reapDeadClients(h: unknown): number;
  clientPins(h: unknown, slot: number): number;
  describe(h: unknown): { capacity: number; clientIndex: number; producer: boolean };
  /** A status number when the file was truncated since open (or the handle is closed). */
  segment(h: unknown): Uint8Array | number;
  /** The segment file's size now, -1 when fstat fails. */
  fileSize(h: unknown): number;
  /** [status, owner uid, mode bits] of a table's file, not following a link. */
  segmentOwner(name: string): [number, number, number];
  /** A status number when the handle is closed. */
  summary(h: unknown): RawSummary | number;
  pinLoop(h: unknown, digest: Uint8Array, iterations: bigint): bigint;
  /** [status, errno]: errno for ERR_SYSTEM and ERR_PERMISSION. */
  unlink(name: string): [number, number];
  cudaDevices(): { devices: Array<{ ordinal: number; uuid: Uint8Array }> | null; reason?: string };
}

/** A {@link TableHandle} over the addon: one client of a POSIX shared-memory table. */
export function openNativeHandle(
  addon: NativeTableAddon,
  options: { name: string; producer: boolean; createCapacity: number; mode: number; trustFlags: number; trustedUid: number },
): { status: number; handle: TableHandle | null; errno: number } {
  const exchange = new BigUint64Array(EXCHANGE.WORDS);
  const opened = addon.open(options.name, options.producer, options.createCapacity, options.mode, exchange, options.trustFlags, options.trustedUid);
  const [status, h] = opened;
  if (status !== 0) return { status, handle: null, errno: typeof opened[2] === 'number' ? opened[2] : 0 };
  const [, , pinHost, pinDevice, unpinBound] = opened;
  if (typeof pinHost !== 'function' || pinDevice === undefined || unpinBound === undefined) {
    addon.close(h);
    return { status: STATUS.ERR_SYSTEM, handle: null, errno: 0 };
  }
  const info = addon.describe(h);
  // The inputs of the wake path, written here and read by the bound C callbacks.
  const in32 = new Uint32Array(exchange.buffer);
  const in8 = new Uint8Array(exchange.buffer);
  const DIGEST32 = EXCHANGE.DIGEST * 2;
  const DEVICE8 = EXCHANGE.DEVICE * 8;
  const SLOT32 = EXCHANGE.UNPIN_SLOT * 2;
  const TOKEN32 = EXCHANGE.UNPIN_TOKEN * 2;
  // `exchange` stays private to this handle and is never detached: the addon keeps a pointer to it.
  const handle: TableHandle = {
    out: exchange,
    capacity: info.capacity,
    clientIndex: info.clientIndex,
    producer: info.producer,
    // The exchange's digest words, which the bound host pin reads: the wake path writes them here.
    pinInput: new Uint32Array(exchange.buffer, DIGEST32 * 4, 8),
    tryPinInput: pinHost,
    // A pin from digest bytes (a host pin from words is pinInput + tryPinInput), or against a device target.
    tryPin(digest, device) {
      if (digest.length !== 32) return STATUS_INVALID;
      in8.set(digest, DIGEST32 * 4);
      if (device === null) return pinHost();
      if (device.length !== 40) return STATUS_INVALID;
      in8.set(device, DEVICE8);
      return pinDevice();
    },
    unpin(slot, index, generation) {
      in32[SLOT32] = slot;
      in32[TOKEN32] = index;
      in32[TOKEN32 + 1] = generation;
      unpinBound();
    },
    tryPinExact: (slot, generation, digest, device) => addon.tryPinExact(h, slot, generation, digest, device),
    tryPinPrefix: (digests, n, device, leases) => addon.tryPinPrefix(h, digests, n, device, leases),
    unpinMany: (tokens, n) => addon.unpinMany(h, tokens, n),
    peek: (digest) => addon.peek(h, digest),
    peekMany: (digests, n, statuses) => addon.peekMany(h, digests, n, statuses),
    reserve: (digest) => addon.reserve(h, digest),
    publish: (slot, generation, meta) => addon.publish(h, slot, generation, meta),
    abandon: (slot, generation) => addon.abandon(h, slot, generation),
    tryEvict: (digest) => addon.tryEvict(h, digest),
    recordDeviceWrite: (digest, record) => addon.recordDeviceWrite(h, digest, record),
    reapDeadClients: () => addon.reapDeadClients(h),
    clientPins: (slot) => addon.clientPins(h, slot),
    segment: () => addon.segment(h),
    fileSize: () => addon.fileSize(h),
    summary: () => addon.summary(h),
    close: () => addon.close(h),
  };
  return { status, handle, errno: 0 };
}

/**
 * For a native open refused with ERR_BAD_SEGMENT: what the file's header says when it is a
 * waitprep table of another ABI version (the sentence to add to the error), else ''.
 */
export function otherAbiNote(name: string): string {
  const header = Buffer.alloc(HDR.ABI_VERSION + 4);
  let fd = -1;
  try {
    // Not following a link, and not waiting on a FIFO planted under the name.
    fd = openSync(`${SHM_DIR}/${name}`, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW | fsConstants.O_NONBLOCK);
    if (readSync(fd, header, 0, header.length, 0) !== header.length) return '';
  } catch {
    return '';
  } finally {
    if (fd >= 0) closeSync(fd);
  }
  if (header.readBigUInt64LE(HDR.MAGIC) !== WP_MAGIC) return '';
  const abi = header.readUInt32LE(HDR.ABI_VERSION);
  if (abi === WP_ABI_VERSION) return '';
  return `; it was made by ABI version ${abi} and this waitprep is ABI version ${WP_ABI_VERSION}: ` +
    'never share a segment across ABI versions (docs/operations.md, "Upgrading across ABI versions")';
}

/** An errno number by its name (`EACCES`), or `errno <n>` for one Node does not name. */
export function errnoName(errno: number): string {
  for (const [name, value] of Object.entries(osConstants.errno)) if (value === errno) return name;
  return `errno ${errno}`;
}

/** Where the native tables live (POSIX shm_open on Linux). */
const SHM_DIR = '/dev/shm';

/**
 * The error for a creation the addon refused with ERR_NO_SPACE: the segment's size against what
 * the filesystem under /dev/shm has free now (statvfs), so an operator can size it.
 */
export function noSpaceError(what: string, capacity: number): WaitprepError {
  let free = 'an unknown number of';
  try {
    const fs = statfsSync(SHM_DIR, { bigint: true });
    free = String(fs.bavail * fs.bsize);
  } catch {
    // The message still names the size needed.
  }
  return new WaitprepError(
    'ERR_NO_SPACE',
    `${what}: a table of capacity ${capacity} needs ${segmentSize(capacity)} bytes, but ${SHM_DIR} has ${free} bytes free; ` +
      'enlarge /dev/shm (docs/operations.md) or create a smaller table',
  );
}
