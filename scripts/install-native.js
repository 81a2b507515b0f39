#!/usr/bin/env node
// Builds the optional native addon and libwaitprep.so at install time. It never fails the
// install: without a compiler the JavaScript fallback is used, and `implementation` /
// `implementationReason` say so at run time. npm hides this script's output, so what happened
// is also written to build/waitprep-install.json, which the loader (lib/lease-table/native.ts) reads to
// say why no addon loaded (no compiler, which build failed and its first error).
//
// Order: a prebuild for this platform wins; else cmake-js (when the package's
// dev tools are present and cmake exists); else node-gyp as bundled with npm.
// Nothing here downloads: cmake-js takes headers from node-api-headers
// (package.json "binary.napi_versions") and node-gyp from npm's nodedir.
import { spawnSync } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, writeSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(import.meta.url);
const HOW_TO_BUILD = require('./build-advice.cjs');
const note = (message) => process.stderr.write(`waitprep: ${message}\n`);

/**
 * npm shows an install step's output only with --foreground-scripts or when the step fails, and
 * this one never fails: a project that installs waitprep as a dependency would not learn that
 * it got the JavaScript fallback. So when the addon was not built and npm captures stderr, the
 * line also goes to the terminal the install runs in, if there is one (CI has none: nothing).
 */
function tellTerminal(message) {
  // WAITPREP_NO_FALLBACK_WARNING=1 silences the fallback's notices, this one too.
  if (process.stderr.isTTY || process.env.WAITPREP_NO_FALLBACK_WARNING === '1') return;
  let tty;
  try {
    tty = openSync('/dev/tty', 'w');
    writeSync(tty, `waitprep: ${message}\n`);
  } catch {
    // No controlling terminal (CI, a detached install): the record and `waitprep doctor` say it.
  } finally {
    if (tty !== undefined) closeSync(tty);
  }
}

/**
 * Says how the install step ended, on stderr and in build/waitprep-install.json, and exits 0.
 * `reason` is one clause the loader puts after "the Node-API addon was not built at install: ".
 */
function finish(outcome, reason, message = reason, { tell = outcome === 'skipped' || outcome === 'failed' } = {}) {
  note(message);
  if (tell) tellTerminal(`${message}. Check what loads: \`npx waitprep doctor\``);
  try {
    // Written last: node-gyp rebuild empties build/ first.
    mkdirSync(join(root, 'build'), { recursive: true });
    writeFileSync(join(root, 'build', 'waitprep-install.json'), `${JSON.stringify({ outcome, reason, at: new Date().toISOString() }, null, 2)}\n`);
  } catch (error) {
    note(`could not write build/waitprep-install.json (${error.message})`);
  }
  process.exit(0);
}

if (process.env.WAITPREP_SKIP_NATIVE_BUILD === '1') {
  finish('skipped', 'WAITPREP_SKIP_NATIVE_BUILD=1 was set', 'WAITPREP_SKIP_NATIVE_BUILD=1: not building the native addon; the JavaScript fallback will be used', { tell: false });
}
if (existsSync(join(root, 'prebuilds', `${process.platform}-${process.arch}`))) {
  finish('prebuild', `the prebuild in prebuilds/${process.platform}-${process.arch} is used`, `using the prebuild in prebuilds/${process.platform}-${process.arch}`);
}

// npm installs none of a folder's dependencies when a project installs the folder by path, yet
// runs this step there; the prepare step that follows installs them and runs this step again.
// Without node-addon-api no build can work, so say that instead of showing node-gyp's failure.
try {
  require.resolve('node-addon-api');
} catch {
  finish('skipped', "the package's dependencies are not installed (node-addon-api is missing), so nothing can be built yet",
    "the package's dependencies are not installed here (node-addon-api is missing): not building now; `npm install` in this folder builds it",
    { tell: false });
}

/** The line of a build's output that says what went wrong: a compiler's `error:`, else a tool's own. */
function firstError(output) {
  const lines = output.split('\n').map((line) => line.trim());
  return lines.find((line) => /\berror:/i.test(line)) ?? lines.find((line) => /\bERR!|\berror\b/i.test(line) && !/^gyp ERR! (stack|System|command|cwd|node -v|node-gyp -v|not ok)/.test(line));
}

/** Runs one build; on failure, the clause naming the tool, how it ended and its first error. */
function run(label, command, args) {
  // stderr is kept to find the first error, and still shown (after the build) to whoever sees it.
  const result = spawnSync(command, args, { cwd: root, stdio: ['ignore', 'inherit', 'pipe'], encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  process.stderr.write(result.stderr ?? '');
  if (result.status === 0) return null;
  const ended = result.error ? result.error.message : result.signal ? `killed by ${result.signal}` : `exit ${result.status}`;
  const error = firstError(result.stderr ?? '');
  return `${label} failed (${ended}${error ? `; first error: ${error.slice(0, 300)}` : ''})`;
}

function has(command) {
  return spawnSync(command, ['--version'], { stdio: 'ignore' }).status === 0;
}

let cmakeJs = null;
try {
  cmakeJs = require.resolve('cmake-js/bin/cmake-js');
} catch {
  // cmake-js is a devDependency: absent in a user's install, where node-gyp builds instead.
}

// Both build paths need a C++ compiler; without one, say so plainly instead of letting a build
// tool fail with a page of stack traces.
const compiler = [process.env.CXX, 'c++', 'g++', 'clang++'].find((c) => c && has(c));
if (compiler === undefined) {
  finish(
    'skipped',
    'no C++ compiler on PATH (c++, g++, clang++ or $CXX)',
    `no C++ compiler on PATH (c++, g++, clang++ or $CXX): the native addon is not built; the JavaScript fallback will be used. To build it later: ${HOW_TO_BUILD}`,
  );
}

const attempts = [];
if (cmakeJs && has('cmake')) attempts.push(['cmake-js', process.execPath, [cmakeJs, 'compile', '--log-level', 'warn']]);
const nodeGyp = process.env.npm_config_node_gyp;
if (nodeGyp && existsSync(nodeGyp) && has('make')) attempts.push(['node-gyp', process.execPath, [nodeGyp, 'rebuild']]);

const failures = [];
for (const [label, command, args] of attempts) {
  const failure = run(label, command, args);
  if (failure === null) finish('built', `the native addon and libwaitprep.so were built with ${label}`);
  note(failure);
  failures.push(failure);
}
if (attempts.length === 0) {
  finish(
    'skipped',
    'no native build tool found (cmake-js with cmake, or node-gyp through npm with make)',
    'no native build tool found (cmake-js with cmake, or node-gyp through npm with make); the JavaScript fallback will be used',
  );
}
finish('failed', failures.join('; then '), `the native addon could not be built; the JavaScript fallback will be used. To build it later: ${HOW_TO_BUILD}`);
