import type { ArtifactKey } from './key.js';

/** Who waits: one engine instance's request, at a request generation. */
export interface Consumer {
  readonly engine: string;
  readonly request: string;
  readonly generation: number;
}

/** Where a device-ready artifact must live: a GPU (by UUID), an arena and its generation. */
export interface DeviceTarget {
  /** GPU UUID as nvidia-smi prints it: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`. */
  readonly device: string;
  readonly arena: bigint | number;
  readonly arenaGeneration: bigint | number;
}

export type ReadinessRequest =
  | { readonly readiness: 'host' }
  | { readonly readiness: 'device'; readonly target: DeviceTarget };

export type Readiness = 'host' | 'device';

/** A miss: the engine takes its original path. `reason` names why. */
export interface Miss {
  readonly kind: 'miss';
  readonly reason: string;
}

/** A pinned, ready artifact. Valid until `close()`, even after the coordinator shuts down. */
export interface Lease {
  readonly kind: 'lease';
  readonly key: ArtifactKey;
  readonly consumer: Consumer;
  readonly readiness: Readiness;
  readonly slot: number;
  readonly generation: bigint | number;
  readonly meta: Readonly<Record<string, unknown>>;
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
  tryPinReady(key: ArtifactKey, consumer: Consumer, want: ReadinessRequest): Lease | Miss;
}

/** The caller's explicit resource-grant assertion. It is not a GPU reservation. */
export interface ResourceGrant {
  readonly worker: string;
  readonly grant: string;
}

/** One issued unit of preparation: one complete, independently publishable artifact. */
export interface WorkTicket {
  /** Unique per coordinator, never reused. */
  readonly id: string;
  readonly key: ArtifactKey;
  readonly readiness: Readiness;
  /** The device target for `readiness: 'device'`, else `null`. */
  readonly target: DeviceTarget | null;
  /** The grant this unit was issued against. */
  readonly grant: ResourceGrant;
  /** Aborts when the unit's last consumer leaves, so the worker may stop at its own safe boundary. */
  readonly signal: AbortSignal;
}

export type WaitStatus = 'queued' | 'joined' | 'in-flight' | 'completed' | 'failed' | 'overloaded' | 'rejected';

/** What `onWait` decided. `ticket` is present for every admitted wait. */
export interface WaitAdmission {
  readonly status: WaitStatus;
  readonly ticket?: string;
  readonly reason?: string;
}

export type WakeResult = { readonly kind: 'hit'; readonly lease: Lease } | Miss;

export type Outcome = { readonly ok: true } | { readonly ok: false; readonly error: unknown };

export interface WaitOptions {
  /** `'host'` (default) or `'device'` (needs `target`). `'persisted'` is always rejected. */
  readonly readiness?: string;
  readonly target?: DeviceTarget;
}

export interface CoordinatorStats {
  waits: number;
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
