import type { ArtifactKey } from './keys/key.js';

/** Who waits: one engine instance's request, at a request generation. */
export interface Consumer {
  /** The engine instance (non-empty). */
  readonly engine: string;
  /** The request id within that engine (non-empty). */
  readonly request: string;
  /** The request generation: a replacement with a lower one is rejected. */
  readonly generation: number;
}

/** Where a device-ready artifact must live: a GPU (by UUID), an arena and its generation. */
export interface DeviceTarget {
  /** GPU UUID as nvidia-smi prints it: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`. */
  readonly device: string;
  /** The request-owned arena the artifact is written into. */
  readonly arena: bigint | number;
  /** The arena's generation: a record of another generation does not count. */
  readonly arenaGeneration: bigint | number;
}

/** What a wake asks the backend for: host readiness, or a completed device write for a target. */
export type ReadinessRequest =
  | { readonly readiness: 'host' }
  | { readonly readiness: 'device'; readonly target: DeviceTarget };

/** Where a ready artifact lives. */
export type Readiness = 'host' | 'device';

/** A miss: the engine takes its original path. `reason` names why. */
export interface Miss {
  readonly kind: 'miss';
  /**
   * Why, e.g. `absent`, `preparing`, `stale-ticket`, `backend-error`: the type
   * `MissReason` (lib/coordinator/miss-reasons.ts) lists every reason waitprep gives; a
   * custom backend may give its own.
   */
  readonly reason: string;
}

/**
 * The metadata a lease table's lease carries (`lease.meta`): what its producer
 * published, read back from the slot. The three u64 fields are a number when
 * the value is at most `Number.MAX_SAFE_INTEGER` and a bigint above it, so no
 * value is rounded (`BigInt(x)` of either is exact); the two u32 fields are
 * always numbers. A type alias, not an interface, so that it is assignable to
 * {@link LeaseMeta}'s index signature.
 */
export type LeaseTableMeta = {
  /** The artifact's size in bytes. */
  readonly sizeBytes: number | bigint;
  /** Where the producer keeps the bytes, in its own terms (an arena offset, a slot…). */
  readonly location: number | bigint;
  /** The producer's checksum of the bytes it validated. */
  readonly checksum: number | bigint;
  /** The codec the bytes are in, as the producer numbers codecs. */
  readonly codecId: number;
  /** The representation version of the bytes. */
  readonly representationVersion: number;
};

/**
 * `Lease.meta` of any backend: the lease table's fields typed as
 * {@link LeaseTableMeta} types them, optional because a backend other than the
 * lease table (`InMemoryBackend`, a third-party one) publishes what it likes.
 */
export interface LeaseMeta extends Partial<LeaseTableMeta> {
  readonly [field: string]: unknown;
}

/** A pinned, ready artifact. Valid until `close()`, even after the coordinator shuts down. */
export interface Lease {
  readonly kind: 'lease';
  /** The artifact pinned. */
  readonly key: ArtifactKey;
  /** Who holds the pin. */
  readonly consumer: Consumer;
  /** The readiness the pin was checked for. */
  readonly readiness: Readiness;
  /** The backend's slot: with its slot generation it names this artifact and no later one. */
  readonly slot: number;
  /**
   * The slot generation under the contract's name: it advances each time the
   * slot is reused. Not the request generation, which is `consumer.generation`.
   * Every backend gives it; read this one in code meant for any backend.
   */
  readonly generation: bigint | number;
  /**
   * The same slot generation under a name that says whose it is. The
   * package's own leases (the lease table's, `InMemoryBackend`'s) carry it; a
   * third-party backend's lease may carry only `generation`.
   */
  readonly slotGeneration?: bigint | number;
  /**
   * Plain metadata the backend published (size, location, codec…); never the
   * bytes. A lease table's lease carries exactly the five fields of
   * {@link LeaseTableMeta}; another backend may carry other fields.
   */
  readonly meta: LeaseMeta;
  /** True once `close()` ran. */
  readonly closed: boolean;
  /** Releases the pin. Idempotent and non-blocking; releases nothing the second time. */
  close(): void;
}

/**
 * What the coordinator needs from storage. `tryPinReady` does a nonblocking
 * lookup and an atomic lifetime pin, nothing else: no reads of artifact bytes,
 * no I/O, no waiting, no checksums, no device sync. Anything that is not a
 * ready artifact of this identity is a `Miss` with a reason.
 */
export interface ArtifactBackend {
  /** Nonblocking lookup and atomic pin of a ready artifact for `consumer`, or a miss. */
  tryPinReady(key: ArtifactKey, consumer: Consumer, want: ReadinessRequest): Lease | Miss;
  /**
   * Optional: true when `lease`, which this backend's `tryPinReady` has just returned, has its
   * `slot`, `generation` and `meta` well formed by construction, so a wake need not read them
   * (a lease table's lease builds its `meta` on first read). The coordinator still checks the
   * lease's key, readiness, consumer and `closed`. Without it, or when it answers anything but
   * `true`, every hit's fields are checked; when it throws, the wake is a `backend-error` miss.
   */
  leaseIsWellFormed?(lease: Lease): boolean;
}

/** The caller's explicit resource-grant assertion. It is not a GPU reservation. */
export interface ResourceGrant {
  /** The worker that will prepare the unit (non-empty). */
  readonly worker: string;
  /** The caller's name for the resources it granted (non-empty). */
  readonly grant: string;
}

/**
 * One issued unit of preparation: one complete, independently publishable
 * artifact. Not to be confused with the wait's {@link WaitTicket}: a unit is
 * what a worker prepares and reports with `complete`, a ticket what an engine
 * wakes or cancels with.
 */
export interface WorkUnit {
  /** Unique per coordinator, never reused. */
  readonly id: string;
  /** The artifact to prepare. */
  readonly key: ArtifactKey;
  /** The readiness the consumers asked for. */
  readonly readiness: Readiness;
  /** The device target for `readiness: 'device'`, else `null`. */
  readonly target: DeviceTarget | null;
  /** The grant this unit was issued against. */
  readonly grant: ResourceGrant;
  /** Aborts when the unit's last consumer leaves, so the worker may stop at its own safe boundary. */
  readonly signal: AbortSignal;
}

/** The contract's name for {@link WorkUnit}, kept as an alias: the same type. */
export type WorkTicket = WorkUnit;

/** See docs/coordinator.md for what each status means. */
export type WaitStatus = 'queued' | 'joined' | 'in-flight' | 'completed' | 'failed' | 'overloaded' | 'rejected';

/**
 * The ticket `onWait` issues for an admitted wait. A coordinator issues
 * strings by default, safe-integer numbers with its `tickets: 'number'` option
 * (the contract allows any primitive, so it can be logged and cross a process
 * boundary); treat it as opaque and hand it back to `onWake` or `onCancel` of
 * the coordinator that issued it.
 */
export type WaitTicket = string;

/** What `onWait` decided. `ticket` is present for every admitted wait. */
export interface WaitAdmission<Ticket = WaitTicket> {
  readonly status: WaitStatus;
  /** Present for every admitted wait; pass it to `onWake` / `onCancel`. */
  readonly ticket?: Ticket;
  /** For `overloaded` and `rejected`: why. */
  readonly reason?: string;
}

/** A hit carries the lease to close after use; a miss sends the engine down its original path. */
export type WakeResult = { readonly kind: 'hit'; readonly lease: Lease } | Miss;

/** What a worker reports for its unit. */
export type Outcome = { readonly ok: true } | { readonly ok: false; readonly error: unknown };

/** Options of `onWait`. */
export interface WaitOptions {
  /** `'host'` (default) or `'device'` (needs `target`). `'persisted'` is always rejected. */
  readonly readiness?: string;
  /** Required with `readiness: 'device'`. */
  readonly target?: DeviceTarget;
}

/** Counters (since construction) and gauges (now) of a coordinator. */
export interface CoordinatorStats {
  waits: number;
  /**
   * `onWait` calls by the status they returned. Unlike `waits`, a call that
   * threw on bad input counts nowhere here; `overloaded` equals `overloads`
   * and `rejected` equals `rejected`.
   */
  waitsByStatus: Record<WaitStatus, number>;
  joins: number;
  queued: number;
  inFlight: number;
  issued: number;
  completed: number;
  failed: number;
  wasted: number;
  wakes: number;
  hits: number;
  misses: Record<string, number>;
  cancels: number;
  staleEvents: number;
  overloads: number;
  rejected: number;
  waiting: number;
  historySize: number;
}
