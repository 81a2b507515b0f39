import { channel } from 'node:diagnostics_channel';
import type { Consumer, DeviceTarget, Readiness, WaitStatus } from '../types.js';

/**
 * The `node:diagnostics_channel` names a {@link WaitCoordinator} publishes on.
 * Subscribe with `diagnostics_channel.subscribe(CHANNELS.wake, (message) => …)`.
 *
 * A channel costs nothing while nobody subscribes: every publish is guarded by
 * `hasSubscribers`, so no message object is even built. Messages are published
 * synchronously at the end of the call, after the coordinator's state is
 * consistent (and after an aborted unit's signal fired), so a subscriber may
 * read `stats()` or call back in. Each message is a fresh plain object.
 *
 * One message per counter increment: `wait` ↔ `waitsByStatus`, `wake` ↔
 * `wakes`, `cancel` ↔ `cancels`, `begin` ↔ `issued`, `complete` ↔
 * `completed` + `failed`, `stale` ↔ `staleEvents`, `overload` ↔ `overloads`.
 * `shutdown` is published on every `shutdown()` call.
 */
export const CHANNELS = Object.freeze({
  /** {@link WaitMessage}: an `onWait` that returned, whatever its status. */
  wait: 'waitprep:wait',
  /** {@link WakeMessage}: every `onWake`, a stale ticket included (a `stale-ticket` miss). */
  wake: 'waitprep:wake',
  /** {@link CancelMessage}: an `onCancel` that removed a consumer. */
  cancel: 'waitprep:cancel',
  /** {@link BeginMessage}: `beginNext` issued a unit. */
  begin: 'waitprep:begin',
  /** {@link CompleteMessage}: `complete` applied an outcome. */
  complete: 'waitprep:complete',
  /** {@link StaleMessage}: a stale wake, cancel or completion. */
  stale: 'waitprep:stale',
  /** {@link OverloadMessage}: an `onWait` was overloaded (published after its `wait` message). */
  overload: 'waitprep:overload',
  /** {@link ShutdownMessage}: every `shutdown()` call. */
  shutdown: 'waitprep:shutdown',
} as const);

/** Channel objects, made once: looking a channel up per event would cost a map lookup each time. */
export const waitChannel = channel(CHANNELS.wait);
export const wakeChannel = channel(CHANNELS.wake);
export const cancelChannel = channel(CHANNELS.cancel);
export const beginChannel = channel(CHANNELS.begin);
export const completeChannel = channel(CHANNELS.complete);
export const staleChannel = channel(CHANNELS.stale);
export const overloadChannel = channel(CHANNELS.overload);
export const shutdownChannel = channel(CHANNELS.shutdown);

/** Published on `waitprep:wait`. */
export interface WaitMessage {
  /** The ticket of an admitted wait (a number from a coordinator with `tickets: 'number'`), else `null`. */
  ticket: string | number | null;
  status: WaitStatus;
  /** For `overloaded` and `rejected`: why; else `null`. */
  reason: string | null;
  /** The consumer as validated (a frozen copy). */
  consumer: Consumer;
  /** The key's 64 hex characters. */
  key: string;
  /** The readiness asked for, as passed (`'host'` when none was; a non-string described, e.g. `5 (number)`). */
  readiness: string;
}

/** Published on `waitprep:wake`, after the backend call (and any lease check) finished. */
export interface WakeMessage {
  /** The ticket as passed (a stale one may be any string, a bigint or a safe-integer number). */
  ticket: string | number | bigint;
  result: 'hit' | 'miss';
  /** The miss reason (`stale-ticket` for a stale ticket); `null` for a hit. */
  reason: string | null;
  /** The woken wait's key (hex); `null` for a stale ticket. */
  key: string | null;
  /** The woken wait's consumer; `null` for a stale ticket. */
  consumer: Consumer | null;
  /** The readiness the wait asked for; `null` for a stale ticket. */
  readiness: Readiness | null;
}

/** Published on `waitprep:cancel` when a consumer was removed. */
export interface CancelMessage {
  ticket: string | number;
  /** The cancelled wait's key (hex). */
  key: string;
  consumer: Consumer;
}

/** Published on `waitprep:begin` when a unit was issued. */
export interface BeginMessage {
  /** The issued unit's id. */
  work: string;
  /** The unit's key (hex). */
  key: string;
  readiness: Readiness;
  target: DeviceTarget | null;
  /** The grant's `worker` and `grant`. */
  worker: string;
  grant: string;
  issuedAt: number;
}

/** Published on `waitprep:complete` when an outcome was applied. */
export interface CompleteMessage {
  work: string;
  /** The unit's key (hex). */
  key: string;
  outcome: 'completed' | 'failed';
  /** A success with no consumer left (`stats().wasted`). */
  wasted: boolean;
  /** The unit's signal had aborted (its consumers all left) before the outcome came. */
  aborted: boolean;
  /** The `error` a failure reported, as given; `undefined` for a success. */
  error: unknown;
}

/** Published on `waitprep:stale`: a call that named no current wait or unit and changed nothing else. */
export interface StaleMessage {
  call: 'onWake' | 'onCancel' | 'complete';
  /** The ticket (`onWake`, `onCancel`) or work id (`complete`) as passed. */
  id: unknown;
}

/** Published on `waitprep:overload`. */
export interface OverloadMessage {
  reason: 'queue-full' | 'too-many-waiting';
  consumer: Consumer;
  /** The key (hex). */
  key: string;
  /** Units queued and consumers waiting when the wait was refused. */
  queued: number;
  waiting: number;
}

/** Published on `waitprep:shutdown`, on every call. */
export interface ShutdownMessage {
  drained: boolean;
  /** The id of the unit still in flight, or `null`. */
  inFlight: string | null;
  /** Units left queued and consumers still waiting. */
  queued: number;
  waiting: number;
}
