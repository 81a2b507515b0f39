// The stores bench:pin measures, by name, in table order. Each is a module with
//
//   describe()                  { version } for the report, or { unavailable: why } to skip it
//   notApplicable(kase)?        why it cannot run that case at all, or null
//   startServer()?              the harness starts it once before the cases: { port, stop() }
//   cleanUp(table)?             the harness removes what a case process that died left
//   pinners?                    'worker_threads' when its contenders must share this process
//                               (default: processes)
//   create(ctx, published)      in the case process: build and fill the store, adding to `ctx`
//                               what a pinner needs to open it; { local, verify(), dispose() }
//   openConsumer(ctx, local)    one pinner: { expect, async?, batch(), check(), close() }, where
//                               batch() runs ctx.sizes.batch ops (a lookup and pin of the key, and
//                               the release of the pin when it hit) and returns how many had the
//                               expected outcome; check() throws if this pinner still holds a pin
import * as cFloor from './c-floor.js';
import * as js from './js.js';
import * as map from './map.js';
import * as native from './native.js';
import * as redis from './redis.js';
import * as sqlite from './sqlite.js';

export const STORES = { native, js, 'c-floor': cFloor, sqlite, redis, map };
export const IMPLEMENTATIONS = Object.keys(STORES);
