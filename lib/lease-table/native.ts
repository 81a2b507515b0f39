import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The package root (dist/ and lib/ both sit one level below it). */
const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const require = createRequire(import.meta.url);

import { WaitprepError } from '../errors.js';
import { LAYOUT, STATUS } from './layout.js';
import type { NativeTableAddon } from './native-handle.js';

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
 * differs. Exported for test/lease-table/native-loading.test.ts.
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

/** What scripts/install-native.js wrote to build/waitprep-install.json about the install-time build. */
interface InstallRecord {
  outcome: 'built' | 'prebuild' | 'skipped' | 'failed';
  reason: string;
}

/**
 * How to get the addon, for the messages that say it is missing: the same sentence the install
 * step prints (scripts/build-advice.cjs, which the install step reads before dist/ exists).
 */
const HOW_TO_BUILD = require(join(root, 'scripts', 'build-advice.cjs')) as string;

const installRecordPath = join(root, 'build', 'waitprep-install.json');

function readInstallRecord(): InstallRecord | null {
  try {
    const record = JSON.parse(readFileSync(installRecordPath, 'utf8')) as Partial<InstallRecord>;
    return typeof record.outcome === 'string' && typeof record.reason === 'string' ? (record as InstallRecord) : null;
  } catch {
    return null;
  }
}

/**
 * Why no addon could be loaded, in one clause. node-gyp-build only says "No native build was
 * found", which is true of every cause; the install step's record says which one it was (no
 * compiler, a failed build, a skipped build), and no record means the install step never ran.
 */
function whyNotLoaded(error: Error): string {
  const first = error.message.split('\n')[0];
  if (!first.startsWith('No native build was found')) return `the Node-API addon did not load (${first})`;
  const record = readInstallRecord();
  if (record === null) {
    return (
      'no Node-API addon is built, and the install step left no record (it did not run: npm was given --ignore-scripts, ' +
      'or the project denies waitprep\'s install script in package.json "allowScripts": `npm install-scripts approve waitprep` allows it)'
    );
  }
  if (record.outcome === 'skipped' || record.outcome === 'failed') return `the Node-API addon was not built at install: ${record.reason}`;
  return `the Node-API addon did not load (${first}), although the install step reported: ${record.reason}`;
}

/** The switch's values; unset or empty is `'auto'`. */
const CHOICES = ['auto', 'native', 'js'] as const;

interface Loaded {
  addon: NativeAddon | null;
  addonFile: string | null;
  error: Error | null;
  reason: string;
  /** When the addon is not in use against the caller's wish: why, as one clause. */
  whyNot: string;
}

const FALLBACK = '; using the JavaScript fallback';

function load(choice: (typeof CHOICES)[number]): Loaded {
  if (choice === 'js') {
    const reason = 'WAITPREP_IMPLEMENTATION=js forces the JavaScript fallback';
    return { addon: null, addonFile: null, error: null, reason, whyNot: reason };
  }
  const gypBuild = require('node-gyp-build') as { resolve(dir: string): string };
  let addonFile: string | null = null;
  try {
    // node-gyp-build looks in build/Release, build/Debug, then prebuilds/<platform>-<arch>.
    addonFile = gypBuild.resolve(root);
    const addon = require(addonFile) as NativeAddon;
    const mismatch = layoutMismatch(addon);
    if (mismatch !== null) {
      const error = new Error(`waitprep addon layout differs from the JavaScript layout: ${mismatch}`);
      return { addon: null, addonFile, error, reason: error.message + FALLBACK, whyNot: error.message };
    }
    return { addon, addonFile, error: null, reason: 'the Node-API addon loaded', whyNot: '' };
  } catch (cause) {
    const error = cause instanceof Error ? cause : new Error(String(cause));
    const whyNot = whyNotLoaded(error);
    return { addon: null, addonFile, error, reason: whyNot + FALLBACK, whyNot };
  }
}

/**
 * The error for a caller that asked for the native implementation when the addon is not loaded:
 * what asked, why the addon is missing ({@link implementationReason}) and how to build it.
 */
export function nativeUnavailableError(asker: string): WaitprepError {
  const fix = choice === 'js' ? 'unset WAITPREP_IMPLEMENTATION, or set it to native' : HOW_TO_BUILD;
  return new WaitprepError('ERR_NATIVE_UNAVAILABLE', `${asker} needs the native implementation, but ${loaded.whyNot}. To get it: ${fix}`, {
    cause: loaded.error ?? undefined,
  });
}

const rawChoice = process.env.WAITPREP_IMPLEMENTATION;
const choice = rawChoice === undefined || rawChoice === '' ? 'auto' : rawChoice;
if (!(CHOICES as readonly string[]).includes(choice)) {
  // A misspelt switch must not quietly mean 'auto': that is how a production host loses its
  // cross-process tables without anyone noticing.
  throw new WaitprepError('ERR_INVALID_ENV', `Expected WAITPREP_IMPLEMENTATION to be 'auto', 'native' or 'js' (or unset), got ${JSON.stringify(choice)}`);
}
const loaded = load(choice as (typeof CHOICES)[number]);

/** The loaded addon, or `null` when the JavaScript fallback is in use. */
export const nativeAddon: NativeAddon | null = loaded.addon;
/** `'native'` when the addon loaded, else `'js'`. */
export const implementation: Implementation = loaded.addon === null ? 'js' : 'native';
/** Why {@link implementation} is what it is, in one sentence. */
export const implementationReason: string = loaded.reason;
/** The error the load threw (node-gyp-build's has no code), or `null`. */
export const nativeLoadError: Error | null = loaded.error;

if (choice === 'native' && loaded.addon === null) throw nativeUnavailableError('WAITPREP_IMPLEMENTATION=native');

/** Set on globalThis so that two copies of the package in one process (dist/ and lib/, or two installs) warn once between them. */
const WARNED = Symbol.for('waitprep.fallbackWarned');
if (choice === 'auto' && loaded.addon === null && process.env.WAITPREP_NO_FALLBACK_WARNING !== '1' && !(globalThis as Record<symbol, unknown>)[WARNED]) {
  (globalThis as Record<symbol, unknown>)[WARNED] = true;
  process.emitWarning(`waitprep is using its JavaScript fallback: ${loaded.whyNot}`, {
    code: 'WAITPREP_FALLBACK',
    detail:
      "Lease tables opened with implementation 'auto' live in this process only, so no other process can share them. " +
      `To get the addon: ${HOW_TO_BUILD}. To choose the fallback and silence this warning: WAITPREP_IMPLEMENTATION=js, or WAITPREP_NO_FALLBACK_WARNING=1.`,
  });
}

/**
 * Absolute path of `libwaitprep.so` (the C ABI for model runtimes), or `null` when it is not built.
 * It is looked for beside the addon that loaded first (the two come from one build), then in
 * build/Release (cmake-js and node-gyp), then in prebuilds/<platform>-<arch> (prebuildify).
 */
export function nativeLibraryPath(): string | null {
  const dirs = [join(root, 'build', 'Release'), join(root, 'prebuilds', `${process.platform}-${process.arch}`)];
  if (loaded.addonFile !== null) dirs.unshift(dirname(loaded.addonFile));
  for (const dir of dirs) {
    const path = join(dir, 'libwaitprep.so');
    if (existsSync(path)) return path;
  }
  return null;
}
