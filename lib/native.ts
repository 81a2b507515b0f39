import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The package root (dist/ and lib/ both sit one level below it). */
const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(import.meta.url);

import { LAYOUT, STATUS } from './lease-table/layout.js';
import type { NativeTableAddon } from './lease-table/native-handle.js';

/** What the addon exports. */
export type NativeAddon = NativeTableAddon;

/**
 * The addon's layout constants and status codes must equal the JavaScript
 * mirror's, or the two implementations would read each other's segments
 * differently, and a status would mean one thing in C and another here (a
 * miss reported under the wrong reason, an error taken for a miss). Every
 * status the addon reports must be one JavaScript knows by the same number,
 * and every status JavaScript knows must be in the addon. A mismatch keeps
 * the addon out (the fallback is used) and says which constant or status
 * differs. Exported for test/native-loading.test.ts.
 */
export function layoutMismatch(addon: Pick<NativeAddon, 'layout' | 'statuses'>): string | null {
  for (const [name, value] of Object.entries(LAYOUT)) {
    if (addon.layout?.[name] !== value) return `${name} is ${addon.layout?.[name]} in the addon, ${value} in JavaScript`;
  }
  const statuses: Readonly<Record<string, number>> | undefined = addon.statuses;
  if (typeof statuses !== 'object' || statuses === null) return 'the addon reports no status table';
  for (const [name, value] of Object.entries(STATUS)) {
    const native = statuses[`WP_${name}`];
    if (native !== value) return `status WP_${name} is ${native ?? 'missing'} in the addon, ${value} in JavaScript`;
  }
  for (const [name, value] of Object.entries(statuses)) {
    if (!name.startsWith('WP_') || !Object.hasOwn(STATUS, name.slice(3))) return `status ${name} is ${value} in the addon, missing in JavaScript`;
  }
  return null;
}

/** Which implementation of the native parts is in use. */
export type Implementation = 'native' | 'js';

function load(): { addon: NativeAddon | null; error: Error | null; reason: string } {
  if (process.env.WAITPREP_IMPLEMENTATION === 'js') {
    return { addon: null, error: null, reason: 'WAITPREP_IMPLEMENTATION=js forces the JavaScript fallback' };
  }
  try {
    // node-gyp-build looks in build/Release, build/Debug, then prebuilds/<platform>-<arch>.
    const addon = (require('node-gyp-build') as (dir: string) => NativeAddon)(root);
    const mismatch = layoutMismatch(addon);
    if (mismatch !== null) {
      const error = new Error(`waitprep addon layout differs from the JavaScript layout: ${mismatch}`);
      return { addon: null, error, reason: `${error.message}; using the JavaScript fallback` };
    }
    return { addon, error: null, reason: 'the Node-API addon loaded' };
  } catch (cause) {
    const error = cause instanceof Error ? cause : new Error(String(cause));
    return { addon: null, error, reason: `the Node-API addon did not load (${error.message.split('\n')[0]}); using the JavaScript fallback` };
  }
}

const loaded = load();

/** The loaded addon, or `null` when the JavaScript fallback is in use. */
export const nativeAddon: NativeAddon | null = loaded.addon;
/** `'native'` when the addon loaded, else `'js'`. */
export const implementation: Implementation = loaded.addon === null ? 'js' : 'native';
/** Why {@link implementation} is what it is, in one sentence. */
export const implementationReason: string = loaded.reason;
/** The error node-gyp-build threw (it has no code), or `null`. */
export const nativeLoadError: Error | null = loaded.error;

/** Absolute path of `libwaitprep.so` (the C ABI for model runtimes), or `null` when it is not built. */
export function nativeLibraryPath(): string | null {
  const path = join(root, 'build', 'Release', 'libwaitprep.so');
  return existsSync(path) ? path : null;
}
