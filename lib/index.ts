export { WaitprepError, type WaitprepErrorCode } from './errors.js';
export {
  artifactKey,
  encodeArtifactKey,
  isArtifactKey,
  ArtifactKey,
  KEY_ENCODING_MAGIC,
  KEY_FIELD_TAGS,
  type ArtifactKeyFields,
  type ArtifactKeySource,
} from './key.js';
export { WaitCoordinator, type WaitCoordinatorOptions, type IssuedWorkTicket } from './coordinator.js';
export { InMemoryBackend } from './memory-backend.js';
export {
  openLeaseTable,
  unlinkLeaseTable,
  leaseTableBackend,
  LeaseTable,
  type OpenLeaseTableOptions,
  type ArtifactMeta,
  type DeviceWrite,
  type Reservation,
} from './lease-table/table.js';
export type { TableInspection, SlotInspection, ClientInspection } from './lease-table/inspect.js';
export { cudaDevices, type CudaDevice, type CudaDevices } from './cuda.js';
export { implementation, implementationReason, nativeLoadError, nativeLibraryPath, type Implementation } from './native.js';
export type {
  ArtifactBackend,
  Consumer,
  CoordinatorStats,
  DeviceTarget,
  Lease,
  Miss,
  Outcome,
  Readiness,
  ReadinessRequest,
  ResourceGrant,
  WaitAdmission,
  WaitOptions,
  WaitStatus,
  WakeResult,
  WorkTicket,
} from './types.js';
