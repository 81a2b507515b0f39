import { threadId } from 'node:worker_threads';

/** The id of the thread (isolate) running now. Its own module so tests can stand in for another thread. */
export function currentThreadId(): number {
  return threadId;
}
