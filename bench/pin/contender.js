// One pinner of a contended bench:pin case, started by case.js: a child process
// (`pin.js --contender --ctx JSON`, ready/go/result as lines on stdin and stdout) or, for a store
// whose table cannot leave its process, a worker thread (a shared word is the start gate, the
// result a message). Either way: open the store, warm up, say ready, wait, measure, report.
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { parentPort, workerData } from 'node:worker_threads';
import { measureAndClose, pinnerResult, warmUp } from './clock.js';
import { STORES } from './stores.js';

export async function contenderProcess(ctx) {
  const consumer = await STORES[ctx.impl].openConsumer(ctx, null);
  await warmUp(consumer, ctx.sizes);
  process.stdout.write('ready\n');
  await once(createInterface({ input: process.stdin }), 'line');
  const m = await measureAndClose(consumer, ctx.sizes);
  process.stdout.write(JSON.stringify(pinnerResult(m, ctx.sizes.batch)) + '\n');
}

export async function contenderThread() {
  const { ctx, gate } = workerData;
  const consumer = await STORES[ctx.impl].openConsumer(ctx, null);
  await warmUp(consumer, ctx.sizes);
  parentPort.postMessage('ready');
  Atomics.wait(gate, 0, 0);
  const m = await measureAndClose(consumer, ctx.sizes);
  parentPort.postMessage(pinnerResult(m, ctx.sizes.batch));
}
