import { WaitprepError, invalidArgument } from '../errors.js';
import { assertArtifactKey, type ArtifactKey } from '../keys/key.js';
import { normalizeTarget, type NormalizedTarget } from '../lease-table/device-target.js';
import { MISS } from './miss-reasons.js';
import type { ArtifactBackend, Consumer, DeviceTarget, Lease, Miss, Readiness, ReadinessRequest } from '../types.js';

interface Entry {
  readonly key: ArtifactKey;
  readonly slot: number;
  readonly generation: number;
  ready: boolean;
  pins: number;
  meta: Readonly<Record<string, unknown>>;
  device: NormalizedTarget | null;
}

const MISS_ABSENT = MISS.absent;
const MISS_PREPARING = MISS.preparing;
const MISS_NO_DEVICE_RECORD = MISS['no-device-record'];
const MISS_DEVICE = MISS['device-mismatch'];
const MISS_ARENA_GENERATION = MISS['arena-generation-mismatch'];
const MISS_INVALID_TARGET = MISS['invalid-target'];
const NO_META: Readonly<Record<string, unknown>> = Object.freeze({});

class MemoryLease implements Lease {
  readonly kind = 'lease' as const;
  readonly key: ArtifactKey;
  readonly consumer: Consumer;
  readonly readiness: Readiness;
  readonly slot: number;
  readonly generation: number;
  readonly meta: Readonly<Record<string, unknown>>;
  #entry: Entry | null;
  #backend: InMemoryBackend;

  constructor(backend: InMemoryBackend, entry: Entry, consumer: Consumer, readiness: Readiness) {
    this.key = entry.key;
    this.consumer = consumer;
    this.readiness = readiness;
    this.slot = entry.slot;
    this.generation = entry.generation;
    this.meta = entry.meta;
    this.#entry = entry;
    this.#backend = backend;
  }

  /** The slot generation, `generation` under the name that says whose it is (a getter: no second field). */
  get slotGeneration(): number {
    return this.generation;
  }

  get closed(): boolean {
    return this.#entry === null;
  }

  close(): void {
    const entry = this.#entry;
    if (entry === null) return;
    this.#entry = null;
    entry.pins--;
    this.#backend.leasesOpen--;
  }
}

/**
 * An in-process `ArtifactBackend` for tests (yours and ours): publish, mark
 * preparing, record device writes and evict by hand, and read pin counts back.
 * Same miss reasons as the lease table. Not shared across processes.
 */
export class InMemoryBackend implements ArtifactBackend {
  readonly #entries = new Map<string, Entry>();
  #nextSlot = 0;
  #nextGeneration = 1;
  /** Leases handed out and not yet closed. */
  leasesOpen = 0;
  /** Every `tryPinReady` call, for tests that count backend traffic. */
  calls = 0;

  /** Marks `key` as being prepared: wakes miss with `preparing` until it is published. */
  markPreparing(key: ArtifactKey): void {
    assertArtifactKey(key);
    const current = this.#entries.get(key.hex);
    if (current !== undefined && current.pins > 0) {
      throw new WaitprepError('ERR_INVALID_ARGUMENT', `${key} is pinned; evict it before preparing it again`);
    }
    this.#entries.set(key.hex, this.#newEntry(key, false, NO_META));
  }

  /** Publishes `key` as ready (host readiness), with plain metadata. Replaces an unpinned entry. */
  publish(key: ArtifactKey, meta: Readonly<Record<string, unknown>> = NO_META): void {
    assertArtifactKey(key);
    const current = this.#entries.get(key.hex);
    if (current !== undefined && current.pins > 0) {
      throw new WaitprepError('ERR_INVALID_ARGUMENT', `${key} is pinned; a pinned artifact is never replaced`);
    }
    this.#entries.set(key.hex, this.#newEntry(key, true, Object.freeze({ ...meta })));
  }

  /** Records a completed device write for a published key; a newer record replaces an older one. */
  recordDeviceWrite(key: ArtifactKey, target: DeviceTarget): void {
    assertArtifactKey(key);
    const entry = this.#entries.get(key.hex);
    if (entry === undefined) throw new WaitprepError('ERR_INVALID_ARGUMENT', `${key} is not published`);
    const normalized = normalizeTarget(target);
    if (normalized === null) throw invalidArgument('target', 'a device target { device: "GPU-…", arena, arenaGeneration }', target);
    entry.device = normalized;
  }

  /** Evicts `key` unless it is pinned. */
  evict(key: ArtifactKey): 'evicted' | 'pinned' | 'absent' {
    assertArtifactKey(key);
    const entry = this.#entries.get(key.hex);
    if (entry === undefined) return 'absent';
    if (entry.pins > 0) return 'pinned';
    this.#entries.delete(key.hex);
    return 'evicted';
  }

  /** Pins currently held on `key`. */
  pins(key: ArtifactKey): number {
    return this.#entries.get(key.hex)?.pins ?? 0;
  }

  tryPinReady(key: ArtifactKey, consumer: Consumer, want: ReadinessRequest): Lease | Miss {
    this.calls++;
    const entry = this.#entries.get(key.hex);
    if (entry === undefined) return MISS_ABSENT;
    if (!entry.ready) return MISS_PREPARING;
    if (want.readiness === 'device') {
      const record = entry.device;
      if (record === null) return MISS_NO_DEVICE_RECORD;
      const target = normalizeTarget(want.target);
      if (target === null) return MISS_INVALID_TARGET;
      if (record.device !== target.device || record.arena !== target.arena) return MISS_DEVICE;
      if (record.arenaGeneration !== target.arenaGeneration) return MISS_ARENA_GENERATION;
    }
    entry.pins++;
    this.leasesOpen++;
    return new MemoryLease(this, entry, consumer, want.readiness);
  }

  #newEntry(key: ArtifactKey, ready: boolean, meta: Readonly<Record<string, unknown>>): Entry {
    return { key, slot: this.#nextSlot++, generation: this.#nextGeneration++, ready, pins: 0, meta, device: null };
  }
}
