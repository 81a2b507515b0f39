// bench:pin store `c-floor`: the same lookup + pin + unpin as `native`, in a C loop inside the
// native library (wp_pin_loop): no JavaScript and no N-API crossing per pin. One pinLoop call is
// one batch, so its own crossing adds < 0.2 ns per op at a batch of 256. The floor the addon's
// figures are read against.
import { implementation, implementationReason } from 'waitprep';
import { EXCHANGE } from 'waitprep/layout';
import { nativeAddon } from 'waitprep/testing';
import { benchKey } from '../common.js';
import { coldNotApplicable } from './cases.js';
import { createTable, packageVersion, removeLeftTable } from './lease-table.js';

export function describe() {
  if (implementation !== 'native') return { unavailable: `the native addon is not loaded: ${implementationReason}` };
  return { version: `wp_pin_loop in the waitprep ${packageVersion} addon` };
}

export function notApplicable(kase) {
  if (kase === 'device-hit') return 'wp_pin_loop pins for host readiness only (it takes no device target)';
  return coldNotApplicable(kase, 'wp_pin_loop pins one digest; the C cold-slot figure is `core_bench cold` (bench/native/core_bench.c)');
}

export const create = (ctx, published) => createTable(ctx, published, 'native');
export const cleanUp = removeLeftTable;

export function openConsumer(ctx) {
  const key = benchKey(ctx.pinIndex);
  const B = ctx.sizes.batch;
  const expectLease = ctx.expect === 'lease';
  const [status, h] = nativeAddon.open(ctx.table, false, 0, 0o600, new BigUint64Array(EXCHANGE.WORDS));
  if (status !== 0) throw new Error(`c-floor: opening ${ctx.table} failed with status ${status}`);
  const digest = new Uint8Array(Buffer.from(key.hex, 'hex'));
  const iterations = BigInt(B);
  return {
    expect: ctx.expect,
    batch() {
      const hits = Number(nativeAddon.pinLoop(h, digest, iterations));
      return expectLease ? hits : B - hits;
    },
    check() {
      if (ctx.slot >= 0 && nativeAddon.clientPins(h, ctx.slot) !== 0) throw new Error('bench miscounted: the C loop left pins');
    },
    close: () => nativeAddon.close(h),
  };
}
