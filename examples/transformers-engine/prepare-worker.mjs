// The preparation worker module the orchestrator's PreparationDriver runs in its pool threads.
//
// A unit is prepared by the storage tier (python -m tfengine.storage), a separate process and the
// table's producer; a pool thread cannot reach the orchestrator's child pipes, so each unit goes
// over the Unix socket the storage tier listens on (TFENGINE_STORAGE_SOCKET in the pool's env):
// one JSON line out, { op: "prepare", id, keyHex, keyBytes } with keyBytes the key's wire form in
// base64 (the storage tier hashes it itself), and one line back, { ok, sizeBytes, prepS, ... } or
// { ok: false, error }. A refusal or a closed connection throws, which the driver reports as a
// failed unit. A unit whose consumers left before it was sent is not sent.
import { connect } from 'node:net';

export default async function prepare(task, { signal }) {
  signal.throwIfAborted();
  const path = process.env.TFENGINE_STORAGE_SOCKET;
  if (!path) throw new Error('TFENGINE_STORAGE_SOCKET is not set');
  const keyBytes = Buffer.from(task.keyBytes.buffer, task.keyBytes.byteOffset, task.keyBytes.byteLength).toString('base64');
  const line = JSON.stringify({ op: 'prepare', id: task.id, keyHex: task.keyHex, keyBytes }) + '\n';
  const reply = await new Promise((resolve, reject) => {
    const socket = connect(path);
    let text = '';
    let answered = false;
    socket.setEncoding('utf8');
    socket.on('connect', () => socket.write(line));
    socket.on('data', (chunk) => {
      text += chunk;
      const end = text.indexOf('\n');
      if (end < 0) return;
      answered = true;
      socket.end();
      try {
        resolve(JSON.parse(text.slice(0, end)));
      } catch (error) {
        reject(error);
      }
    });
    socket.on('error', (error) => {
      if (!answered) reject(new Error(`storage tier unreachable at ${path}: ${error.message}`));
    });
    socket.on('close', () => {
      if (!answered) reject(new Error('the storage tier closed the connection without answering'));
    });
  });
  if (!reply.ok) throw new Error(`storage tier refused ${task.keyHex.slice(0, 12)}: ${reply.error}`);
  return reply;
}
