/**
 * Every miss reason waitprep itself gives, from one list per source:
 *
 * - The lease table's: one per `WP_MISS_*` status of native/include/waitprep.h
 *   (mirrored in lease-table/layout.ts `STATUS`), named after it: the status
 *   name without `MISS_`, lowercase, `_` as `-` (`WP_MISS_NO_DEVICE_RECORD` is
 *   `'no-device-record'`). A status added to the header and to `STATUS` is a
 *   reason with nothing else to edit; the Python package (python/waitprep/_abi.py) derives
 *   its `MISS_REASON` by the same rule.
 * - A backend's own, decided before or without the table: a malformed device
 *   target, a closed table.
 * - The coordinator's own: a stale ticket, and a backend answer it refuses.
 *
 * A custom backend may give other strings; the coordinator passes them on.
 */
import { STATUS } from '../lease-table/layout.js';
import type { Miss } from '../types.js';

type StatusName = keyof typeof STATUS;
/** `NO_DEVICE_RECORD` -> `no-device-record`, the type-level twin of {@link tableReason}. */
type Kebab<S extends string> = S extends `${infer Word}_${infer Rest}` ? `${Lowercase<Word>}-${Kebab<Rest>}` : Lowercase<S>;

/** A miss the lease table reports, named after its status. */
export type TableMissReason = { [N in StatusName]: N extends `MISS_${infer Rest}` ? Kebab<Rest> : never }[StatusName];

/** Misses a backend decides without a table status. */
export const BACKEND_MISS_REASONS = ['invalid-target', 'table-closed'] as const;
/** Misses the coordinator decides, whatever the backend said. */
export const COORDINATOR_MISS_REASONS = ['stale-ticket', 'backend-error', 'identity-mismatch', 'readiness-mismatch'] as const;

/** Every miss reason waitprep gives (a custom backend may add its own strings). */
export type MissReason = TableMissReason | (typeof BACKEND_MISS_REASONS)[number] | (typeof COORDINATOR_MISS_REASONS)[number];

function tableReason(statusName: string): TableMissReason {
  return statusName.slice('MISS_'.length).toLowerCase().replaceAll('_', '-') as TableMissReason;
}

/** The lease table's miss reasons by status code: the `MISS_*` statuses only. */
export const TABLE_MISS_REASON: Readonly<Record<number, TableMissReason>> = Object.freeze(
  Object.fromEntries(
    Object.entries(STATUS)
      .filter(([name]) => name.startsWith('MISS_'))
      .map(([name, status]) => [status, tableReason(name)]),
  ),
);

/** Every reason, the table's in status order first. */
export const MISS_REASONS: readonly MissReason[] = Object.freeze([
  ...Object.values(TABLE_MISS_REASON),
  ...BACKEND_MISS_REASONS,
  ...COORDINATOR_MISS_REASONS,
]);

/** One frozen miss per reason, shared, so that no wake allocates a miss for a reason waitprep gives. */
export const MISS: Readonly<Record<MissReason, Miss>> = Object.freeze(
  Object.fromEntries(MISS_REASONS.map((reason) => [reason, Object.freeze({ kind: 'miss' as const, reason })])) as Record<MissReason, Miss>,
);

/**
 * The miss of each status, indexed by status up to the last miss status: the
 * table's wake path reads it by index, never by name. `OK`, the one status
 * below that which is not a miss (and which the caller handles first), reads
 * `contended`, as any status beyond the array does where it is read.
 */
export const MISS_BY_STATUS: readonly Miss[] = Object.freeze(missByStatus());

function missByStatus(): Miss[] {
  const last = Math.max(...Object.keys(TABLE_MISS_REASON).map(Number));
  // Filled in order by push: PACKED_ELEMENTS by construction (frozen: PACKED_FROZEN_ELEMENTS, %DebugPrint).
  const misses: Miss[] = [];
  for (let status = 0; status <= last; status++) {
    const reason = TABLE_MISS_REASON[status];
    misses.push(reason === undefined ? MISS.contended : MISS[reason]);
  }
  return misses;
}
