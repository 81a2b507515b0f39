/**
 * Handoff tokens: how one client of a lease table names a lease it holds to another process, which
 * pins the same artifact for itself (`LeaseTable.tryPinExact`, C `wp_try_pin_exact`). The format
 * is specified in docs/lease-table.md ("Handing a lease to another process"), so that the Python
 * package (python/) reads and writes the same strings:
 *
 *   wp1:<table name>:<slot>:<slot generation>:<digest>
 *
 * slot and generation in decimal without leading zeros, the digest as 64 lowercase hex digits.
 * A token is a name, not a capability: it grants nothing that the table's own access rules do
 * not (whoever may open the table may pin any READY digest in it).
 */
import { invalidArgument } from '../errors.js';
import { isTableName } from './layout.js';

/** The fields of a handoff token. */
export interface HandoffToken {
  /** The lease table's name. */
  readonly table: string;
  readonly slot: number;
  /** The slot generation: below 2^56. */
  readonly generation: bigint;
  /** The artifact's SHA-256 digest, 64 lowercase hex digits. */
  readonly digest: string;
}

const PREFIX = 'wp1';
/** Whole-token shape; the table name's own rule and the number ranges are checked after it. */
const TOKEN = /^wp1:([A-Za-z0-9._-]{1,200}):(0|[1-9][0-9]{0,9}):(0|[1-9][0-9]{0,16}):([0-9a-f]{64})$/;
const U32_MAX = 0xffff_ffff;
const GENERATION_LIMIT = 1n << 56n;
const EXPECTED = "a handoff token 'wp1:<table>:<slot>:<generation>:<64 lowercase hex digest>' from lease.handoffToken()";

/** The token for (table, slot, generation, digest). The arguments come from a live lease, so they are not checked again. */
export function formatHandoffToken(table: string, slot: number, generation: bigint | number, digestHex: string): string {
  return `${PREFIX}:${table}:${slot}:${generation}:${digestHex}`;
}

/**
 * Parses a handoff token strictly: exactly the format above, a valid table name, a slot that is a
 * u32, a generation below 2^56. Anything else throws `ERR_INVALID_ARGUMENT` (field `token`).
 * Whether the token is current is for the table to say: a stale one parses.
 */
export function parseHandoffToken(token: unknown): HandoffToken {
  if (typeof token !== 'string') throw invalidArgument('token', EXPECTED, token);
  const m = TOKEN.exec(token);
  if (m === null || !isTableName(m[1])) throw invalidArgument('token', EXPECTED, token);
  const slot = Number(m[2]);
  const generation = BigInt(m[3]!);
  if (slot > U32_MAX || generation >= GENERATION_LIMIT) {
    throw invalidArgument('token', `${EXPECTED}, slot at most 2^32-1 and generation below 2^56`, token);
  }
  return Object.freeze({ table: m[1]!, slot, generation, digest: m[4]! });
}

/** The 32 bytes of a digest given as 64 hex digits (already checked by {@link parseHandoffToken}). */
export function digestBytesOfHex(hex: string): Uint8Array {
  return Uint8Array.from(Buffer.from(hex, 'hex'));
}
