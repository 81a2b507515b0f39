// The demo's preparation worker module, run by PreparationDriver in a piscina worker thread.
//
// A worker thread cannot use the parent process's IPC channel to the storage worker child, so
// prepare() forwards the unit over a Unix socket the storage worker listens on (the path comes in
// the WAITPREP_DEMO_SOCKET environment variable, set through the pool's `env`): one connection per
// unit, the request out ({ id, keyHex, keyBytes }: keyBytes is the key's wire form, the canonical
// bytes task.keyBytes carries, in base64), one JSON line back ({ ok, sizeBytes } or
// { ok: false, error }). The storage worker reads lines of at most 64 KiB and a long context's
// key is more (1.1 MiB of base64 for 213,000 tokens), so keyBytes goes in parts of at most
// KEY_PART_CHARS, one line each: every line but the last has `more: true` (the protocol is in
// worker/storage.js). It resolves when the storage worker has published, and throws when it
// refused or the connection closed without a reply (a dead storage worker). A unit whose
// consumers all left before it was sent is not sent (the driver's abort); once sent, the storage
// worker finishes it (preparation there is short and has no safe boundary of its own).
import { connect } from 'node:net';

/**
 * Base64 characters of keyBytes per line: 48 KiB, which leaves 16 KiB of the storage worker's
 * 64 KiB line (SOCKET_LIMITS.MAX_LINE_BYTES) for the id, the keyHex and the JSON around them.
 */
const KEY_PART_CHARS = 48 << 10;

/** The request's lines: keyBytes cut into parts of at most KEY_PART_CHARS, `more: true` on all but the last. */
export function requestLines(id, keyHex, keyBytes) {
  const lines = [];
  let at = 0;
  for (; keyBytes.length - at > KEY_PART_CHARS; at += KEY_PART_CHARS) {
    lines.push(JSON.stringify({ id, keyHex, keyBytes: keyBytes.slice(at, at + KEY_PART_CHARS), more: true }));
  }
  lines.push(JSON.stringify({ id, keyHex, keyBytes: keyBytes.slice(at) }));
  return lines.join('\n') + '\n';
}

export default async function prepare(task, { signal }) {
  signal.throwIfAborted();
  const socketPath = process.env.WAITPREP_DEMO_SOCKET;
  if (!socketPath) throw new Error('WAITPREP_DEMO_SOCKET is not set');
  const keyBytes = Buffer.from(task.keyBytes.buffer, task.keyBytes.byteOffset, task.keyBytes.byteLength).toString('base64');
  const request = requestLines(task.id, task.keyHex, keyBytes);
  const reply = await new Promise((resolve, reject) => {
    const socket = connect(socketPath);
    let buffered = '';
    let done = false;
    socket.setEncoding('utf8');
    socket.on('connect', () => socket.write(request));
    socket.on('data', (chunk) => {
      buffered += chunk;
      const newline = buffered.indexOf('\n');
      if (newline < 0) return;
      done = true;
      socket.end();
      try {
        resolve(JSON.parse(buffered.slice(0, newline)));
      } catch (error) {
        reject(error);
      }
    });
    socket.on('error', (error) => {
      if (!done) reject(new Error(`storage worker unreachable: ${error.message}`));
    });
    socket.on('close', () => {
      if (!done) reject(new Error('storage worker closed the connection without replying'));
    });
  });
  if (!reply.ok) throw new Error(`storage worker refused ${task.keyHex.slice(0, 12)}: ${reply.error}`);
  return { sizeBytes: reply.sizeBytes, alreadyReady: reply.alreadyReady === true };
}
