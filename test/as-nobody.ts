// Running part of a test as a second uid: a child `node` as nobody (setpriv), importing the built
// package. Needs root, setpriv, the built dist/, and a checkout nobody can read; each is a
// Requirement for runsIf, so a test that lacks one is skipped with that reason.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Requirement } from './skip-reasons.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dist = join(root, 'dist', 'index.js');
const isRoot = typeof process.geteuid === 'function' && process.geteuid() === 0;
const setpriv = spawnSync('setpriv', ['--version'], { encoding: 'utf8' }).status === 0;
const AS_NOBODY = ['--reuid=nobody', '--regid=nogroup', '--clear-groups', process.execPath, '--input-type=module', '-e'];

export const ROOT: Requirement = [isRoot, 'not running as root, so no second uid to run as'];
export const SETPRIV: Requirement = [setpriv, 'setpriv (util-linux) is not installed'];
export const DIST: Requirement = [existsSync(dist), 'dist/ is not built (npx tsc -p .)'];
/**
 * The child imports this checkout as nobody, so nobody must be able to read it: a clone under a
 * mode-0700 directory (mktemp -d) cannot be, and the test is skipped there with that reason.
 */
const readable = isRoot && setpriv && existsSync(dist) &&
  spawnSync('setpriv', [...AS_NOBODY, `await import(${JSON.stringify(dist)})`], { timeout: 30_000 }).status === 0;
export const READABLE: Requirement = [readable, `nobody cannot import the package at ${root} (a directory above it is not readable by others)`];

/** Runs `body` (an async function body over `m`, the package) as nobody; its last printed line, parsed as JSON, comes back. */
export function asNobody(body: string): { status: number | null; out: unknown; stderr: string } {
  const script = `const m = await import(${JSON.stringify(dist)});\n${body}`;
  const run = spawnSync('setpriv', [...AS_NOBODY, script], { encoding: 'utf8', timeout: 30_000 });
  let out: unknown = null;
  try {
    out = JSON.parse(run.stdout.trim().split('\n').pop() ?? '');
  } catch {
    out = run.stdout;
  }
  return { status: run.status, out, stderr: run.stderr };
}

/** A statement printing, as JSON, `{ value }` of expression `call`, or `{ code, message }` of what it throws. */
export const caught = (call: string) =>
  `try { const value = ${call}; console.log(JSON.stringify({ value })); } ` +
  `catch (e) { console.log(JSON.stringify({ code: e.code, message: e.message })); }`;
