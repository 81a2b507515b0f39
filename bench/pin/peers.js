// The peer stores' packages (better-sqlite3, ioredis) live in bench/peers/, a package of their
// own with its own lockfile, so the package's install never builds or fetches them. The harness
// installs them on demand, the first time a peer row is asked for.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const PEERS = fileURLToPath(new URL('../peers/', import.meta.url));

/** `require` as seen from bench/peers/: the peer stores load their packages through it. */
export const requirePeer = createRequire(new URL('../peers/package.json', import.meta.url));

/** The stores whose packages come from bench/peers/. */
export const PEER_STORES = ['sqlite', 'redis'];

/**
 * Installs bench/peers/ from its lockfile when its node_modules is missing. Progress goes to
 * stderr, so `--json` keeps stdout to itself. Never throws: a store whose package is still
 * missing afterwards reports itself unavailable, and the bench skips it with that note.
 */
export function ensurePeers() {
  if (existsSync(`${PEERS}node_modules`)) return;
  process.stderr.write('bench:pin: installing the peer stores\' packages into bench/peers (npm ci, once)\n');
  // Scripts off first, so that a failed native build cannot roll back ioredis with it.
  if (!npm(['ci', '--ignore-scripts', '--no-audit', '--no-fund'])) return;
  // better-sqlite3's install would try prebuild-install, which downloads a binary from GitHub;
  // building from source reaches nothing but the npm registry, and needs a C++ compiler.
  if (!npm(['rebuild', 'better-sqlite3'], { npm_config_build_from_source: 'true' })) {
    process.stderr.write(
      'bench:pin: better-sqlite3 could not be built from source (needs a C++ compiler and make); sqlite will be skipped. ' +
        'Delete bench/peers/node_modules to retry.\n',
    );
  }
}

function npm(args, env = {}) {
  // Under `npm run`, npm_execpath is the npm that started us; otherwise the one on PATH.
  const execpath = process.env.npm_execpath;
  const [command, prefix] = execpath && existsSync(execpath) ? [process.execPath, [execpath]] : ['npm', []];
  const result = spawnSync(command, [...prefix, ...args, '--prefix', PEERS], {
    cwd: PEERS,
    env: { ...process.env, ...env },
    stdio: ['ignore', 2, 2],
  });
  if (result.status === 0) return true;
  process.stderr.write(`bench:pin: npm ${args.join(' ')} in bench/peers failed (${result.error ? result.error.message : `exit ${result.status}`})\n`);
  return false;
}
