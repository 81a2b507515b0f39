// bench:pin store `js`: the JavaScript fallback (SharedArrayBuffer, the same layout and protocol
// as the addon), timed like `native`. A SharedArrayBuffer cannot cross a process, so its
// contended pinners are worker_threads of the case process.
import { createTable, openTableConsumer, packageVersion } from './lease-table.js';

export const pinners = 'worker_threads';

export function describe() {
  return { version: `waitprep ${packageVersion}, JavaScript fallback over SharedArrayBuffer` };
}

export const create = (ctx, published) => createTable(ctx, published, 'js');
export const openConsumer = (ctx, local) => openTableConsumer(ctx, local);
