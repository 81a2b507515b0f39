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
} from './key.js';
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
} from './chunk-keys.js';
export {
  ManifestProducer,
  encodeManifest,
  decodeManifest,
  MANIFEST_MAGIC,
  MANIFEST_HEADER_BYTES,
  type DecodedManifest,
  type ManifestChunk,
  type ManifestIncomplete,
  type ManifestReservation,
} from './manifest.js';
export { WaitCoordinator, type WaitCoordinatorOptions, type IssuedWorkUnit, type IssuedWorkTicket } from './coordinator.js';
export { InMemoryBackend } from './memory-backend.js';
export type { MissReason } from './miss-reasons.js';
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
} from './diagnostics.js';
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
export { cudaDevices, type CudaDevice, type CudaDevices } from './cuda.js';
export { implementation, implementationReason, nativeLoadError, nativeLibraryPath, type Implementation } from './native.js';
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
  WorkTicket,
  WorkUnit,
} from './types.js';
export {
  generateTrace,
  loadTraceJsonl,
  traceToJsonl,
  traceSummary,
  keyFromSpec,
  specTokenLayout,
  DEFAULT_TOOL_MIX,
  TRACE_KEY_BASE,
  TRACE_VOCAB,
  MAX_SPEC_TOKENS,
  type TraceEvent,
  type TraceWait,
  type TraceEnd,
  type KeySpec,
  type TokenSegment,
  type LogNormal,
  type ToolClass,
  type GenerateTraceOptions,
  type TraceKeyBase,
  type TraceSummary,
} from './trace.js';
