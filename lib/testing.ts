/**
 * `waitprep/testing`: what tests, benchmarks and the demo need beyond the main entry. None of it
 * is on a serving path, and none of it is covered by semver the way the main entry is.
 *
 * - `InMemoryBackend`: a backend for coordinator tests (also exported from `waitprep`).
 * - `nativeAddon`: the loaded addon itself, or `null`, for benchmarks that time its parts (the
 *   C pin loop, the exchange buffer) without the TypeScript wrapper.
 * - `keyBucketsFor`: the slots a key may occupy (its two buckets), so a benchmark can fill them
 *   on purpose.
 * - `preparationTaskOf`: what PreparationDriver posts to a pool thread for an issued unit, the
 *   task and the post's transfer list, so a benchmark can time the hand-off of the real thing.
 *   For a long key (a SharedArrayBuffer store) `task.keyBytes` is a view of the key's own store,
 *   which the driver's worker copies before `prepare` sees it: read it, never write to it, or the
 *   key's bytes no longer match its digest.
 * - `fnv1a`: the package's one FNV-1a (the trace generator's seeds, the coordinator's indexes), so
 *   the experiment derives its seeded choices the same way rather than with a copy.
 */
export { InMemoryBackend } from './coordinator/memory-backend.js';
export { nativeAddon, type NativeAddon } from './lease-table/native.js';
export { keyBucketsFor } from './lease-table/js-handle.js';
export { postOf as preparationTaskOf } from './driver/driver.js';
export { fnv1a } from './internal/fnv1a.js';
