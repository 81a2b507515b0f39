export { WaitprepError, type WaitprepErrorCode } from './errors.js';
export {
  artifactKey,
  encodeArtifactKey,
  decodeArtifactKey,
  isArtifactKey,
  ArtifactKey,
  KEY_ENCODING_MAGIC,
  KEY_FIELD_TAGS,
  type ArtifactKeyFields,
  type ArtifactKeyPlainFields,
  type ArtifactKeySource,
} from './keys/key.js';
export {
  ChunkChain,
  ChunkKey,
  chunkKeys,
  chunkProfile,
  manifestKey,
  isManifestKey,
  CHUNK_PARENT_FIELD,
  MANIFEST_FIELD,
  RESERVED_EXTRA_PREFIX,
  MAX_CHUNK_TOKENS,
  type ChunkChainOptions,
  type ChunkProfile,
} from './keys/chunk-keys.js';
export { encodeManifest, decodeManifest, MANIFEST_MAGIC, MANIFEST_HEADER_BYTES, type DecodedManifest } from './keys/manifest.js';
export {
  EngineKeys,
  vllmOffloadKey,
  splitOffloadKey,
  ENGINE_FIELD,
  ENGINE_HASH_FIELD,
  KV_GROUP_FIELD,
  ENGINE_KEY_TOKENS,
  type EngineKeyOptions,
  type EngineName,
} from './keys/engine-keys.js';
export {
  ManifestProducer,
  type ManifestChunk,
  type ManifestIncomplete,
  type ManifestReservation,
} from './lease-table/manifest-producer.js';
export {
  arenaLocation,
  splitLocation,
  arenaDirectory,
  arenaPath,
  isArenaFileName,
  recordChecksum,
  encodeRecordHeader,
  encodeArenaRecord,
  decodeRecordHeader,
  checkRecordHeader,
  readArenaRecord,
  ARENA_RECORD_MAGIC,
  ARENA_RECORD_VERSION,
  ARENA_RECORD_HEADER_BYTES,
  ARENA_RECORD_FORMAT_BYTES,
  ARENA_INDEX_BITS,
  ARENA_OFFSET_BITS,
  MAX_ARENA_INDEX,
  MAX_ARENA_OFFSET,
  DEFAULT_ARENA_ROOT,
  MAX_ARENA_RECORD_PAYLOAD_BYTES,
  type ArenaRecord,
  type ArenaRecordHeader,
  type ArenaRecordMeta,
  type ArenaRecordMismatch,
  type ArenaRecordMismatchReason,
} from './lease-table/arena-record.js';
export { checkArenaDirectory, ensureArenaDirectory, type ArenaDirectoryOptions, type EnsureArenaDirectoryOptions } from './lease-table/arena-directory.js';
export { WaitCoordinator, type WaitCoordinatorOptions, type TicketForm, type IssuedWorkUnit } from './coordinator/coordinator.js';
export { InMemoryBackend } from './coordinator/memory-backend.js';
export * from './planner/index.js';
export type { MissReason } from './coordinator/miss-reasons.js';
export {
  PreparationDriver,
  type GrantSource,
  type PreparationDriverOptions,
  type PreparationDriverStats,
  type PreparationReport,
  type PreparationResult,
  type PreparationWorkerOptions,
} from './driver/driver.js';
export type { PreparationTask, PrepareContext } from './driver/protocol.js';
export { registerMetrics, type MetricsRegistration, type MetricsRegistry, type RegisterMetricsOptions } from './metrics.js';
export {
  CHANNELS,
  type BeginMessage,
  type CancelMessage,
  type CompleteMessage,
  type OverloadMessage,
  type ShutdownMessage,
  type StaleMessage,
  type WaitMessage,
  type WakeMessage,
} from './coordinator/diagnostics.js';
export {
  openLeaseTable,
  unlinkLeaseTable,
  leaseTableBackend,
  leaseHandoffToken,
  LeaseTable,
  type DigestLease,
  type PeekReady,
  type OpenLeaseTableOptions,
  type ArtifactMeta,
  type DeviceWrite,
  type Reservation,
} from './lease-table/table.js';
export { parseHandoffToken, type HandoffToken } from './lease-table/handoff.js';
export { MAX_PREFIX_CHUNKS } from './lease-table/prefix-input.js';
export {
  judgeInspection,
  summarizeInspection,
  type TableInspection,
  type SlotInspection,
  type ClientInspection,
  type TableSummary,
  type InspectionJudgement,
  type JudgedClient,
} from './lease-table/inspect.js';
export type { Liveness, LivenessJudgement, LivenessReason, ReaperName } from './lease-table/liveness.js';
export { cudaDevices, type CudaDevice, type CudaDevices } from './lease-table/cuda.js';
export { implementation, implementationReason, nativeLoadError, nativeLibraryPath, type Implementation } from './lease-table/native.js';
export type {
  ArtifactBackend,
  Consumer,
  CoordinatorStats,
  DeviceTarget,
  Lease,
  LeaseMeta,
  LeaseTableMeta,
  Miss,
  Outcome,
  Readiness,
  ReadinessRequest,
  ResourceGrant,
  WaitAdmission,
  WaitOptions,
  WaitStatus,
  WaitTicket,
  WakeResult,
  WorkUnit,
} from './types.js';
