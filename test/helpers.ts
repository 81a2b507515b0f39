import {
  artifactKey,
  InMemoryBackend,
  WaitCoordinator,
  type ArtifactBackend,
  type ArtifactKey,
  type Consumer,
  type CoordinatorStats,
  type DeviceTarget,
  type ResourceGrant,
  type WaitCoordinatorOptions,
} from '../lib/index.js';

/** The explicit resource-grant assertion every `beginNext` in these tests makes. */
export const GRANT: ResourceGrant = Object.freeze({ worker: 'worker-0', grant: 'grant-0' });

/** A device target that `normalizeTarget` accepts. */
export const TARGET_A: DeviceTarget = Object.freeze({
  device: 'GPU-5e1f0c2a-1b3d-4e5f-8a9b-0c1d2e3f4a5b',
  arena: 3,
  arenaGeneration: 7,
});
/** Same device and arena as TARGET_A, another arena generation. */
export const TARGET_B: DeviceTarget = Object.freeze({ ...TARGET_A, arenaGeneration: 8 });

/**
 * A valid ArtifactKey. Different `n` give different keys (the token layout
 * differs); the same `n` (and overrides) give equal keys.
 */
export function makeKey(n = 0, overrides: { task?: string; namespace?: string; generation?: number } = {}): ArtifactKey {
  return artifactKey({
    source: {
      snapshotKind: 'kv-page',
      runtime: 'vllm-test',
      model: 'tiny-model',
      adapter: 'none',
      profile: 'default',
      positionPolicy: 'absolute',
      task: overrides.task ?? 'task-a',
      namespace: overrides.namespace ?? 'ns-0',
      tokenLayout: [1, 2, 3, n],
    },
    sourcePageGeneration: overrides.generation ?? 0,
    codec: 'identity',
    codecConfig: 'v0',
    representationVersion: 1,
  });
}

/** A consumer: engine `e0` unless given, request `r<n>`, generation 0 unless given. */
export function consumer(n: number | string, generation = 0, engine = 'e0'): Consumer {
  return { engine, request: `r${n}`, generation };
}

/** A coordinator over an InMemoryBackend, roomy bounds unless overridden. */
export function setup(options: Partial<WaitCoordinatorOptions> = {}): {
  coord: WaitCoordinator;
  backend: InMemoryBackend;
} {
  const backend = (options.backend as InMemoryBackend | undefined) ?? new InMemoryBackend();
  const coord = new WaitCoordinator({
    maxQueued: 64,
    maxWaiting: 256,
    historyLimit: 64,
    ...options,
    backend,
  });
  return { coord, backend };
}

/** A coordinator over a hand-written backend. */
export function withBackend(
  backend: ArtifactBackend,
  options: Partial<Omit<WaitCoordinatorOptions, 'backend'>> = {},
): WaitCoordinator {
  return new WaitCoordinator({ maxQueued: 64, maxWaiting: 256, historyLimit: 64, ...options, backend });
}

/** The ticket of an admitted wait; fails the test when there is none. */
export function ticketOf(admission: { status: string; ticket?: string }): string {
  if (admission.ticket === undefined) {
    throw new Error(`expected an admitted wait with a ticket, got status ${admission.status}`);
  }
  return admission.ticket;
}

/** Stats without the counters named in `moving`, for "nothing else changed" comparisons. */
export function statsWithout(stats: CoordinatorStats, ...moving: Array<keyof CoordinatorStats>): Partial<CoordinatorStats> {
  const copy: Partial<CoordinatorStats> = { ...stats, misses: { ...stats.misses } };
  for (const name of moving) delete copy[name];
  return copy;
}
