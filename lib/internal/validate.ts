import { WaitprepError, invalidArgument } from '../errors.js';
import type { Consumer, DeviceTarget } from '../types.js';

const U64_MAX = (1n << 64n) - 1n;
const GPU_UUID = /^GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}

export function nonEmptyString(field: string, value: unknown): string {
  if (typeof value !== 'string' || value.length === 0) throw invalidArgument(field, 'a non-empty string', value);
  return value;
}

export function nonNegativeInteger(field: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw invalidArgument(field, 'a non-negative safe integer', value);
  }
  return value;
}

/** A frozen copy of a consumer, or `ERR_INVALID_ARGUMENT` naming the bad field. */
export function checkConsumer(value: unknown): Consumer {
  if (!isObject(value)) throw invalidArgument('consumer', 'an object { engine, request, generation }', value);
  return Object.freeze({
    engine: nonEmptyString('consumer.engine', value.engine),
    request: nonEmptyString('consumer.request', value.request),
    generation: nonNegativeInteger('consumer.generation', value.generation),
  });
}

function u64OrNull(value: unknown): bigint | null {
  if (typeof value === 'bigint') return value >= 0n && value <= U64_MAX ? value : null;
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return BigInt(value);
  return null;
}

export interface NormalizedTarget extends DeviceTarget {
  readonly device: string;
  readonly arena: bigint;
  readonly arenaGeneration: bigint;
}

/**
 * A device target in one canonical form (lowercase UUID, bigint arena and
 * generation), or `null` when it is malformed.
 */
export function normalizeTarget(value: unknown): NormalizedTarget | null {
  if (!isObject(value)) return null;
  const { device } = value;
  if (typeof device !== 'string' || !GPU_UUID.test(device)) return null;
  const arena = u64OrNull(value.arena);
  const arenaGeneration = u64OrNull(value.arenaGeneration);
  if (arena === null || arenaGeneration === null) return null;
  return Object.freeze({ device: 'GPU-' + device.slice(4).toLowerCase(), arena, arenaGeneration });
}

export function grantRequired(got: unknown): WaitprepError {
  return new WaitprepError(
    'ERR_GRANT_REQUIRED',
    `beginNext needs the caller's resource-grant assertion { worker: non-empty string, grant: non-empty string }, got ${
      isObject(got) ? `{ worker: ${JSON.stringify(got.worker)}, grant: ${JSON.stringify(got.grant)} }` : String(got)
    }`,
  );
}
