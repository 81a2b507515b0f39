// The throwaway redis-server the bench:pin harness starts for the `redis` store: 127.0.0.1 on a
// free port, no persistence, ended when the run ends.
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { connect, createServer } from 'node:net';

/** redis-server's version, or null when it is not on PATH. */
export function redisServerVersion() {
  const r = spawnSync('redis-server', ['--version'], { encoding: 'utf8' });
  if (r.error || r.status !== 0) return null;
  return /v=(\S+)/.exec(r.stdout)?.[1] ?? r.stdout.trim();
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

function ping(port) {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    let reply = '';
    socket.setTimeout(500, () => {
      socket.destroy();
      resolve(false);
    });
    socket.on('connect', () => socket.write('PING\r\n'));
    socket.on('data', (d) => {
      reply += d;
      if (reply.includes('\r\n')) {
        socket.destroy();
        resolve(reply.startsWith('+PONG'));
      }
    });
    socket.on('error', () => resolve(false));
  });
}

/** Starts a throwaway redis-server on 127.0.0.1 (no persistence); `stop()` ends it. */
export async function startRedis() {
  const port = await freePort();
  const server = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--loglevel', 'warning'], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  server.stderr.setEncoding('utf8').on('data', (d) => (stderr += d));
  let exited = false;
  const exit = once(server, 'exit').then(() => (exited = true));
  server.on('error', () => {});
  const stop = async () => {
    if (exited) return;
    server.kill('SIGTERM');
    const timer = setTimeout(() => server.kill('SIGKILL'), 5000);
    await exit;
    clearTimeout(timer);
  };
  const deadline = Date.now() + 10_000;
  while (!(await ping(port))) {
    if (exited || Date.now() > deadline) {
      await stop();
      throw new Error(stderr.trim().split('\n').pop() || 'no PONG within 10 s');
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  return { port, stop };
}
