import { nativeAddon } from './native.js';

/** A CUDA device as the driver describes it. */
export interface CudaDevice {
  /** The driver's device ordinal. */
  readonly ordinal: number;
  /** The GPU UUID as nvidia-smi prints it, `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`: a device target's `device`. */
  readonly uuid: string;
}

/** What {@link cudaDevices} found: the devices, or `null` and why. */
export type CudaDevices = { readonly devices: readonly CudaDevice[]; readonly reason: null } | { readonly devices: null; readonly reason: string };

let cached: CudaDevices | null = null;

function uuidString(bytes: Uint8Array): string {
  const hex = Buffer.from(bytes).toString('hex');
  return `GPU-${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/**
 * The CUDA devices on this host, for validating device targets. The driver
 * (`libcuda.so.1`) is opened with dlopen on the first call only: never when
 * waitprep loads and never on a pin; the addon does not link against CUDA.
 * Without the driver (or without the addon) the result is `devices: null`
 * with the reason, and everything else works unchanged. The answer is cached
 * for the life of the process.
 */
export function cudaDevices(): CudaDevices {
  if (cached !== null) return cached;
  if (nativeAddon === null) {
    cached = Object.freeze({ devices: null, reason: 'the native addon is not loaded, so the CUDA driver cannot be asked' });
    return cached;
  }
  const found = nativeAddon.cudaDevices();
  cached =
    found.devices === null
      ? Object.freeze({ devices: null, reason: found.reason ?? 'unknown' })
      : Object.freeze({
          devices: Object.freeze(found.devices.map((d) => Object.freeze({ ordinal: d.ordinal, uuid: uuidString(d.uuid) }))),
          reason: null,
        });
  return cached;
}
