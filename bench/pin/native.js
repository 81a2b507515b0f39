// bench:pin store `native`: the lease table through the Node-API addon (POSIX shared memory),
// timed as a caller sees it: `table.tryPin(key)` and `lease.close()`.
import { implementation, implementationReason } from 'waitprep';
import { nativeAddon } from 'waitprep/testing';
import { createTable, openTableConsumer, packageVersion, removeLeftTable } from './lease-table.js';

export function describe() {
  if (implementation !== 'native') return { unavailable: `the native addon is not loaded: ${implementationReason}` };
  return { version: `waitprep ${packageVersion}, Node-API addon ABI ${nativeAddon.abiVersion}` };
}

export const create = (ctx, published) => createTable(ctx, published, 'native');
export const openConsumer = (ctx, local) => openTableConsumer(ctx, local);
export const cleanUp = removeLeftTable;
