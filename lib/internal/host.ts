import type { ReadinessRequest } from '../types.js';

/**
 * The host readiness request, one frozen object for the whole package: the coordinator's host
 * demands hold it, and the lease table's `tryPin` takes it as its default and, seeing this very
 * object, skips reading the request's fields. So a coordinator's host wake passes it through
 * without a check.
 */
export const HOST: ReadinessRequest = Object.freeze({ readiness: 'host' });
