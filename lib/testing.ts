/**
 * `waitprep/testing`: what tests, benchmarks and the demo need beyond the main entry. None of it
 * is on a serving path, and none of it is covered by semver the way the main entry is.
 *
 * - `InMemoryBackend`: a backend for coordinator tests (also exported from `waitprep`).
 * - `nativeAddon`: the loaded addon itself, or `null`, for benchmarks that time its parts (the
 *   C pin loop, the exchange buffer) without the TypeScript wrapper.
 * - `homeSlotFor`: the JS fallback's home-slot function, so a benchmark can build a full probe
 *   window on purpose.
 */
export { InMemoryBackend } from './memory-backend.js';
export { nativeAddon, type NativeAddon } from './native.js';
export { homeSlotFor } from './lease-table/js-handle.js';
