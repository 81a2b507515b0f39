/** The stable codes of {@link WaitprepError}. */
export type WaitprepErrorCode =
  | 'ERR_INVALID_KEY'
  | 'ERR_INVALID_ARGUMENT'
  | 'ERR_GRANT_REQUIRED'
  | 'ERR_WRONG_THREAD'
  | 'ERR_REENTRANT'
  | 'ERR_BAD_SEGMENT'
  | 'ERR_WRITER_EXISTS'
  | 'ERR_NOT_PRODUCER'
  | 'ERR_TABLE_NOT_FOUND'
  | 'ERR_TABLE_EXISTS'
  | 'ERR_TABLE_FULL'
  | 'ERR_KEY_EXISTS'
  | 'ERR_STALE_RESERVATION'
  | 'ERR_NO_CLIENT_SLOT'
  | 'ERR_NATIVE_UNAVAILABLE'
  | 'ERR_INVALID_ENV'
  | 'ERR_CLOSED'
  | 'ERR_PREPARE_FAILED'
  | 'ERR_WORKER_CRASHED'
  | 'ERR_DEADLINE'
  | 'ERR_MISSING_PEER'
  | 'ERR_NO_SPACE'
  | 'ERR_PERMISSION_DENIED'
  | 'ERR_UNTRUSTED_SEGMENT'
  | 'ERR_UNTRUSTED_ARENA'
  | 'ERR_SYSTEM';

/**
 * Every error waitprep throws. `code` is a stable string (`ERR_…`); match on it,
 * never on the message. A miss is a value, never an error.
 */
export class WaitprepError extends Error {
  /** Stable machine-readable code. */
  readonly code: WaitprepErrorCode;
  /** For `ERR_INVALID_KEY` and `ERR_INVALID_ARGUMENT`: the offending field, dotted (`source.task`). */
  readonly field: string | undefined;

  constructor(code: WaitprepErrorCode, message: string, options?: { field?: string; cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'WaitprepError';
    this.code = code;
    this.field = options?.field;
  }
}

/** Describes a value for error messages: what came, with its type. */
export function describe(value: unknown): string {
  if (typeof value === 'string') return `${JSON.stringify(value.length > 60 ? value.slice(0, 60) + '…' : value)} (string)`;
  if (typeof value === 'bigint') return `${value}n (bigint)`;
  if (value === null) return 'null';
  if (Array.isArray(value)) return `an array of length ${value.length}`;
  if (typeof value === 'object') return `an object (${value.constructor?.name ?? 'null prototype'})`;
  return `${String(value)} (${typeof value})`;
}

export function invalidArgument(field: string, expected: string, got: unknown, code: WaitprepErrorCode = 'ERR_INVALID_ARGUMENT', where = ''): WaitprepError {
  return new WaitprepError(code, `Expected \`${field}\`${where} to be ${expected}, got ${describe(got)}`, { field });
}
