// The planner's engine-neutral retention hint, mapped onto what serving engines accept. The
// planner advises; the engine decides what to keep. docs/planner.md § Engine hints says which
// source each shape was read from and what is not confirmed.
import type { RetentionHint } from './planner.js';

/**
 * vLLM: a `kv_hints` entry of type SET_PRIORITY with `value` (the priority, higher kept longer)
 * and `ttl_seconds`, as described for some development versions of vLLM's sources. Not
 * confirmed in a released vLLM: check the version you run before relying on it.
 */
export interface VllmKvHint {
  readonly type: 'SET_PRIORITY';
  readonly value: number;
  readonly ttl_seconds?: number;
}

/** `hint` as a vLLM kv_hints SET_PRIORITY entry; no `ttl_seconds` when the hint has none. */
export function vllmKvHint(hint: RetentionHint): VllmKvHint {
  return hint.ttlSeconds === null ? { type: 'SET_PRIORITY', value: hint.priority } : { type: 'SET_PRIORITY', value: hint.priority, ttl_seconds: hint.ttlSeconds };
}

/**
 * SGLang: the request's `priority` (0-99 here), which the radix cache evicts by when the server
 * runs with `--radix-eviction-policy priority` (lower priority first). `retention_seconds` is an
 * open proposal, not a released field: it is set only when asked for.
 */
export interface SglangRetention {
  readonly priority: number;
  readonly retention_seconds?: number;
}

/** `hint` as SGLang request fields; `withRetentionSeconds` adds the proposed `retention_seconds`. */
export function sglangRetention(hint: RetentionHint, { withRetentionSeconds = false } = {}): SglangRetention {
  const priority = Math.min(99, Math.max(0, Math.round(hint.priority)));
  return withRetentionSeconds && hint.ttlSeconds !== null ? { priority, retention_seconds: hint.ttlSeconds } : { priority };
}

/**
 * TensorRT-LLM: the fields of `TokenRangeRetentionConfig(token_start, token_end, priority,
 * duration_ms)` in a request's `KvCacheRetentionConfig`: priority 1-100 (35 is its default),
 * higher evicted later; `duration_ms` after which the range returns to the default priority;
 * `token_end` null: to the end of the sequence.
 */
export interface TrtllmTokenRangeRetention {
  readonly tokenStart: number;
  readonly tokenEnd: number | null;
  readonly priority: number;
  readonly durationMs: number | null;
}

/** `hint` for tokens [`tokenStart`, `tokenEnd`) of the paused context (default: all of it). */
export function trtllmRetention(hint: RetentionHint, tokenStart = 0, tokenEnd: number | null = null): TrtllmTokenRangeRetention {
  const priority = Math.min(100, Math.max(1, Math.round(hint.priority)));
  return { tokenStart, tokenEnd, priority, durationMs: hint.ttlSeconds === null ? null : hint.ttlSeconds * 1000 };
}
