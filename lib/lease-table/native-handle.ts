import type { TableHandle } from './handle.js';

/** The addon's flat lease-table functions (native/src/addon.cc). */
export interface NativeTableAddon {
  readonly abiVersion: number;
  readonly layout: Readonly<Record<string, number>>;
  open(name: string, producer: boolean, capacity: number, mode: number, out: BigUint64Array): [number, unknown];
  close(h: unknown): void;
  tryPin(h: unknown, digest: Uint8Array, device: Uint8Array | null): number;
  unpin(h: unknown, slot: number, tokenIndex: number, tokenGeneration: number): void;
  reserve(h: unknown, digest: Uint8Array): number;
  publish(h: unknown, slot: number, generation: bigint, meta: BigUint64Array): number;
  abandon(h: unknown, slot: number, generation: bigint): number;
  tryEvict(h: unknown, digest: Uint8Array): number;
  recordDeviceWrite(h: unknown, digest: Uint8Array, record: Uint8Array): number;
  reapDeadClients(h: unknown): number;
  clientPins(h: unknown, slot: number): number;
  describe(h: unknown): { capacity: number; clientIndex: number; producer: boolean };
  segment(h: unknown): Uint8Array;
  pinLoop(h: unknown, digest: Uint8Array, iterations: bigint): bigint;
  unlink(name: string): number;
  cudaDevices(): { devices: Array<{ ordinal: number; uuid: Uint8Array }> | null; reason?: string };
}

/** A {@link TableHandle} over the addon: one client of a POSIX shared-memory table. */
export function openNativeHandle(
  addon: NativeTableAddon,
  options: { name: string; producer: boolean; createCapacity: number; mode: number },
): { status: number; handle: TableHandle | null } {
  const out = new BigUint64Array(8);
  const [status, h] = addon.open(options.name, options.producer, options.createCapacity, options.mode, out);
  if (status !== 0) return { status, handle: null };
  const info = addon.describe(h);
  const handle: TableHandle = {
    out,
    capacity: info.capacity,
    clientIndex: info.clientIndex,
    producer: info.producer,
    tryPin: (digest, device) => addon.tryPin(h, digest, device),
    unpin: (slot, index, generation) => addon.unpin(h, slot, index, generation),
    reserve: (digest) => addon.reserve(h, digest),
    publish: (slot, generation, meta) => addon.publish(h, slot, generation, meta),
    abandon: (slot, generation) => addon.abandon(h, slot, generation),
    tryEvict: (digest) => addon.tryEvict(h, digest),
    recordDeviceWrite: (digest, record) => addon.recordDeviceWrite(h, digest, record),
    reapDeadClients: () => addon.reapDeadClients(h),
    clientPins: (slot) => addon.clientPins(h, slot),
    segment: () => addon.segment(h),
    close: () => addon.close(h),
  };
  return { status, handle };
}
