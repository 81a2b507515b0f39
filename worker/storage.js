// The demo's storage logic: what the lease table's single producer does with a request. The
// storage-worker process (bin/storage-worker.js) runs it over its socket; on the JavaScript
// fallback, where a table cannot cross processes, the demo runs it in its own process
// (demo/run.js) on the same socket protocol.
//
// Requests come over a Unix socket from the demo's piscina worker threads (demo/prepare-worker.js),
// one JSON object per line, and each request gets one reply line ({ id, ok, ... }). A request is
// { id, keyHex, keyBytes }: `keyBytes` is the key's wire form in base64, its canonical encoding
// (docs/key-encoding.md), as PreparationTask.keyBytes carries it. A line is at most 64 KiB
// (SOCKET_LIMITS.MAX_LINE_BYTES) and a long context's key is larger (4 bytes a token, 4/3 of that
// in base64: 1.1 MiB for 213,000 tokens), so `keyBytes` may come in parts, one line each:
//   { id, keyHex, keyBytes: "<part>", more: true }   no reply; the part is kept
//   ...
//   { id, keyHex, keyBytes: "<last part>" }           the request: keyBytes is every part, in order
// The parts of one request come one after another on their connection, with the same id and
// keyHex; a line for another id or keyHex before the last part, a part whose keyBytes is not
// base64, or parts over MAX_REQUEST_BYTES in all get one { id, ok: false, error } reply and the
// connection is closed. A request's parts are dropped when its connection closes.
// The assembled keyBytes are decoded strictly (decodeArtifactKey, which hashes them once); bytes
// that are not a key, or whose digest is not the request's keyHex, are refused.
// The socket is bounded whatever clients send (SOCKET_LIMITS), and an arena directory that exists
// already is used only if it passes the lease table's trust rules (ensureArenaDirectory).
//
// What "prepare" means here (a stand-in, nothing is compressed and nothing is a real snapshot):
//   1. reserve the key's slot (consumers see `preparing` from now on);
//   2. build a synthetic source snapshot laid out like a safetensors file, deterministically from
//      the key (syntheticSource): 8-byte little-endian header length, a JSON header
//      { name: { dtype, shape, data_offsets } }, then the tensor data;
//   3. validate its geometry (validateSafetensors): header length, dtypes, every tensor's byte
//      count equals product(shape) * dtype size, offsets in bounds, sorted, non-overlapping and
//      covering the data section exactly;
//   4. write it into the host arena as one arena record (docs/arena-records.md): a 96-byte header
//      (magic, the key's digest, payload length, token count, format "safetensors", the payload's
//      checksum) and the source after it, at offset 0 of its own arena file
//      `<arena dir>/<index>.wpa`; `location` (published in the meta) is arenaLocation(index, 0),
//      the index in its top 16 bits. The demo's arena dir is `/dev/shm/<table>-arena`, the
//      naming rule's, so a reader finds the bytes from the table name and the lease alone;
//   5. read the record back and check it (readArenaRecord: the header belongs to the key, the
//      payload's checksum, SHA-256's first 8 bytes as a big-endian u64, matches the header's);
//   6. under a byte budget, evict unpinned artifacts (tryEvict returns 'pinned' for a pinned one:
//      it is skipped, never evicted) in the eviction order: least recently used first, unless the
//      orchestrator sent eviction values (below), then lowest value first (least recently used
//      among equals) and never one worth as much as the new artifact; if what may go is not
//      enough, the request fails and the slot is abandoned;
//   7. publish { sizeBytes (the payload's), location, checksum, codecId: 0 (none), representationVersion }.
// An evicted artifact's arena file is removed and its index reused.
// "Recently used" = published or requested again (a request for a key already published).
// Eviction values: a request line { op: 'eviction-values', values: [[keyHex, value], ...] } replaces
// the values the worker orders eviction by (a PausePlanner's evictionValue: -1 for an artifact no
// open pause wants, higher for one a pause likely to wake soon wants). A key it was given no value
// for counts as -1 when resident, and may evict anything when it is the new artifact's.
// Dead clients' pins are reaped every 500 ms.
import { rmSync, statfsSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { MAX_ARENA_INDEX, arenaDirectory, ensureArenaDirectory, arenaLocation, decodeArtifactKey, encodeArenaRecord, readArenaRecord, recordChecksum, splitLocation } from 'waitprep';

/** The most eviction values kept: one per open pause of a planner's bound is plenty. */
const MAX_VALUES = 100_000;

/** Bytes per element of the dtypes the synthetic source uses. */
const DTYPE_SIZE = { BF16: 2, F16: 2, F32: 4, U8: 1 };
const LAYERS = 2;
const HEAD_DIM = 64;
/** Tokens per row of the synthetic KV tensors. */
const TOKENS_PER_ROW = 16;

/**
 * A synthetic source snapshot, laid out like safetensors, made from the key's digest and token
 * count alone: LAYERS x (k, v) tensors of BF16, shape [ceil(tokens / 16), 64], data from a
 * xorshift32 stream seeded by the digest.
 */
export function syntheticSource(keyHex, tokenCount) {
  const rows = Math.max(1, Math.ceil(tokenCount / TOKENS_PER_ROW));
  const header = {};
  let offset = 0;
  for (let layer = 0; layer < LAYERS; layer++) {
    for (const part of ['k', 'v']) {
      const bytes = rows * HEAD_DIM * DTYPE_SIZE.BF16;
      header[`layers.${layer}.${part}`] = { dtype: 'BF16', shape: [rows, HEAD_DIM], data_offsets: [offset, offset + bytes] };
      offset += bytes;
    }
  }
  header.__metadata__ = { key: keyHex, tokens: String(tokenCount) };
  const json = Buffer.from(JSON.stringify(header));
  const out = Buffer.alloc(8 + json.length + offset);
  out.writeBigUInt64LE(BigInt(json.length), 0);
  json.copy(out, 8);
  let state = Number.parseInt(keyHex.slice(0, 8), 16) >>> 0 || 1;
  const data = out.subarray(8 + json.length);
  const words = Math.floor(data.length / 4);
  const view = new DataView(data.buffer, data.byteOffset, data.length);
  for (let i = 0; i < words; i++) {
    state ^= state << 13;
    state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5;
    state >>>= 0;
    view.setUint32(i * 4, state, true);
  }
  return out;
}

/** Throws unless `buffer` is a well-formed safetensors layout; returns its tensor count and data bytes. */
export function validateSafetensors(buffer) {
  if (buffer.length < 8) throw new Error('source: shorter than the 8-byte header length');
  const headerLength = buffer.readBigUInt64LE(0);
  if (headerLength > BigInt(buffer.length - 8)) throw new Error(`source: header length ${headerLength} runs past the end`);
  const dataStart = 8 + Number(headerLength);
  const header = JSON.parse(buffer.subarray(8, dataStart).toString('utf8'));
  const dataLength = buffer.length - dataStart;
  const spans = [];
  for (const [name, tensor] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const size = DTYPE_SIZE[tensor.dtype];
    if (size === undefined) throw new Error(`source: tensor ${name} has unknown dtype ${tensor.dtype}`);
    if (!Array.isArray(tensor.shape) || !tensor.shape.every((d) => Number.isSafeInteger(d) && d >= 0)) throw new Error(`source: tensor ${name} has a bad shape`);
    const [begin, end] = tensor.data_offsets ?? [];
    if (!Number.isSafeInteger(begin) || !Number.isSafeInteger(end) || begin < 0 || end < begin || end > dataLength) {
      throw new Error(`source: tensor ${name} has offsets out of bounds`);
    }
    const want = tensor.shape.reduce((a, b) => a * b, 1) * size;
    if (end - begin !== want) throw new Error(`source: tensor ${name} spans ${end - begin} bytes, its shape needs ${want}`);
    spans.push([begin, end, name]);
  }
  spans.sort((a, b) => a[0] - b[0]);
  let at = 0;
  for (const [begin, end, name] of spans) {
    if (begin !== at) throw new Error(`source: tensor ${name} starts at ${begin}, expected ${at} (gap or overlap)`);
    at = end;
  }
  if (at !== dataLength) throw new Error(`source: tensors cover ${at} of ${dataLength} data bytes`);
  return { tensors: spans.length, dataBytes: dataLength };
}

/** SHA-256 of the bytes, first 8 bytes as a big-endian u64 (a bigint): the arena record's checksum. */
export const checksumOf = recordChecksum;

/** The arena file holding the record at `location`: `<arenaDir>/<arena index>.wpa`. */
export function arenaFile(arenaDir, location) {
  return join(arenaDir, `${splitLocation(location).arena}.wpa`);
}

/** The record format the demo writes: the payload is a safetensors-like source. */
export const RECORD_FORMAT = 'safetensors';

/**
 * Writes an artifact into the arena. The arena is a tmpfs (/dev/shm): a full one fails write()
 * with ENOSPC (only a store through a mapping of unbacked pages would be a SIGBUS), and that
 * becomes an error naming the room needed and left, after the partial file is removed so that it
 * holds no space; the caller's catch refuses the request and abandons the slot.
 */
function writeArtifact(file, bytes) {
  try {
    writeFileSync(file, bytes);
  } catch (error) {
    if (error?.code !== 'ENOSPC') throw error;
    rmSync(file, { force: true });
    let free = 'an unknown number of';
    try {
      const fs = statfsSync(dirname(file));
      free = String(fs.bavail * fs.bsize);
    } catch {
      // the message still names the size needed
    }
    throw Object.assign(new Error(`the arena ${dirname(file)} has no room for ${bytes.length} bytes (${free} bytes free); request refused, slot abandoned`), { code: 'ENOSPC' });
  }
}

/**
 * The request's key, from its wire form; throws unless it is a key whose digest is the request's
 * keyHex. A request assembled from parts (serveSocket) carries its keyBytes decoded already.
 */
function keyOf(request) {
  const { keyBytes } = request;
  if (typeof keyBytes !== 'string' && !(keyBytes instanceof Uint8Array)) throw new Error('the request has no keyBytes (the key\'s canonical bytes in base64)');
  const key = decodeArtifactKey(typeof keyBytes === 'string' ? Buffer.from(keyBytes, 'base64') : keyBytes);
  if (key.hex !== request.keyHex) throw new Error(`key bytes hash to ${key.hex}, request says ${request.keyHex}`);
  return key;
}

/**
 * The storage logic over an open producer table. `handle(request)` -> reply. Used by the child
 * process below, and in-process by the demo on the JavaScript fallback.
 */
export function startStorage({ table, arenaDir, budgetBytes, exitAfter = Infinity, onExitAfter = null, reapMs = 500 }) {
  // Readers find the arenas from the table's name alone, so the directory must be the rule's.
  const arenaRoot = dirname(arenaDir);
  if (arenaDir !== arenaDirectory(table.name, arenaRoot)) {
    throw new Error(`the arena directory ${arenaDir} is not ${arenaDirectory(table.name, arenaRoot)}: arenas of table ${table.name} are named <root>/${table.name}-arena (docs/arena-records.md)`);
  }
  // Made 0o755 when absent; an existing one is used only under the table's trust rules (owned by
  // this user, a directory and not a link, writable by nobody else, every entry a regular file of
  // ours): whoever else could write it could swap a record under a published location.
  ensureArenaDirectory(table.name, { root: arenaRoot });
  /** keyHex -> { key, location, sizeBytes, recordBytes }, in least-recently-used-first order. */
  const resident = new Map();
  /** keyHex -> eviction value, as the orchestrator last sent them (empty: plain LRU). */
  let values = new Map();
  let usedBytes = 0;
  /** Arena indexes given back by evictions, reused before new ones, so live ones stay below 2^16. */
  const freeArenas = [];
  let nextArena = 0;
  const stats = {
    requests: 0, prepared: 0, preparedBytes: 0, alreadyReady: 0, failed: 0, evicted: 0, evictedBytes: 0,
    pinnedSkips: 0, worthMoreSkips: 0, valueUpdates: 0, reaped: 0, busyMs: 0, budgetBytes,
  };
  const reaper = setInterval(() => {
    try {
      stats.reaped += table.reapDeadClients();
    } catch {
      // closed under us at exit
    }
  }, reapMs);
  reaper.unref();

  function drop(keyHex, entry) {
    resident.delete(keyHex);
    usedBytes -= entry.recordBytes;
    rmSync(arenaFile(arenaDir, entry.location), { force: true });
    freeArenas.push(splitLocation(entry.location).arena);
  }

  function takeArena() {
    if (freeArenas.length > 0) return freeArenas.pop();
    if (nextArena > MAX_ARENA_INDEX) throw new Error(`every arena index up to ${MAX_ARENA_INDEX} holds a resident artifact`);
    return nextArena++;
  }

  /**
   * Evicts unpinned artifacts in the eviction order until `need` more bytes fit for `forHex`;
   * false when what may go is not enough (pinned, or worth as much as `forHex`'s artifact).
   */
  function makeRoom(need, forHex) {
    if (usedBytes + need <= budgetBytes) return true;
    const own = values.get(forHex) ?? Infinity;
    const worth = (keyHex) => values.get(keyHex) ?? -1;
    // Least recently used first; with values, lowest value first (the sort is stable).
    const order = [...resident];
    if (values.size > 0) order.sort((a, b) => worth(a[0]) - worth(b[0]));
    for (const [keyHex, entry] of order) {
      if (usedBytes + need <= budgetBytes) return true;
      if (worth(keyHex) >= own) {
        stats.worthMoreSkips++;
        continue;
      }
      const result = table.tryEvict(entry.key);
      if (result === 'pinned') {
        stats.pinnedSkips++;
        continue;
      }
      if (result === 'evicted') {
        stats.evicted++;
        stats.evictedBytes += entry.sizeBytes;
      }
      drop(keyHex, entry);
    }
    return usedBytes + need <= budgetBytes;
  }

  function handle(request) {
    if (stats.requests >= exitAfter) {
      process.stderr.write(`storage worker: WAITPREP_STORAGE_EXIT_AFTER=${exitAfter} reached; exiting with code 3 without replying\n`);
      // In-process (JavaScript fallback) the demo stops itself, cleaning up; a child process just dies.
      if (onExitAfter === null) process.exit(3);
      onExitAfter();
      return { ok: false, error: 'the storage worker stopped' };
    }
    if (request.op === 'eviction-values') return setValues(request.values);
    stats.requests++;
    const started = performance.now();
    let reservation = null;
    try {
      const key = keyOf(request);
      const known = resident.get(key.hex);
      if (known !== undefined) {
        // Already published (the coordinator forgot its history): touch it and say so.
        resident.delete(key.hex);
        resident.set(key.hex, known);
        stats.alreadyReady++;
        return { ok: true, sizeBytes: known.sizeBytes, location: String(known.location), alreadyReady: true };
      }
      reservation = table.reserve(key);
      const source = syntheticSource(key.hex, key.tokenCount);
      validateSafetensors(source);
      const record = encodeArenaRecord(key, source, { format: RECORD_FORMAT });
      const recordBytes = record.bytes.length;
      if (recordBytes > budgetBytes) throw new Error(`artifact of ${recordBytes} bytes exceeds the whole budget of ${budgetBytes}`);
      if (!makeRoom(recordBytes, key.hex)) throw new Error(`over budget: ${usedBytes} of ${budgetBytes} bytes used and every resident artifact is pinned or worth as much as this one`);
      const location = arenaLocation(takeArena(), 0);
      const file = arenaFile(arenaDir, location);
      try {
        writeArtifact(file, record.bytes);
        // Read back as a reader would, and check the record belongs to the key before publishing it.
        const meta = { location, sizeBytes: source.length, checksum: record.header.checksum };
        const back = readArenaRecord({ tableName: table.name, key, meta, root: arenaRoot });
        if (back.kind !== 'record') throw new Error(`the record read back from ${file} does not belong to the key (${back.reason}): ${back.message}`);
      } catch (error) {
        rmSync(file, { force: true });
        freeArenas.push(splitLocation(location).arena);
        throw error;
      }
      const checksum = record.header.checksum;
      table.publish(reservation, { sizeBytes: source.length, location, checksum, codecId: 0, representationVersion: Number(key.representationVersion) });
      reservation = null;
      resident.set(key.hex, { key, location, sizeBytes: source.length, recordBytes });
      usedBytes += recordBytes;
      stats.prepared++;
      stats.preparedBytes += source.length;
      return { ok: true, sizeBytes: source.length, location: String(location), checksum: String(checksum) };
    } catch (error) {
      stats.failed++;
      if (reservation !== null) {
        try {
          table.abandon(reservation);
        } catch {
          // already gone
        }
      }
      return { ok: false, error: error instanceof Error ? `${error.code ? `${error.code}: ` : ''}${error.message}` : String(error) };
    } finally {
      stats.busyMs += performance.now() - started;
    }
  }

  /** Replaces the eviction values (at most MAX_VALUES; non-finite values are ignored). */
  function setValues(given) {
    if (!Array.isArray(given)) return { ok: false, error: 'eviction-values needs values: [[keyHex, value], ...]' };
    const next = new Map();
    for (const pair of given) {
      if (next.size >= MAX_VALUES) break;
      if (Array.isArray(pair) && typeof pair[0] === 'string' && Number.isFinite(pair[1])) next.set(pair[0], pair[1]);
    }
    values = next;
    stats.valueUpdates++;
    return { ok: true, values: next.size };
  }

  function snapshot() {
    return { ...stats, usedBytes, resident: resident.size };
  }

  function close() {
    clearInterval(reaper);
    rmSync(arenaDir, { recursive: true, force: true });
  }

  return { handle, stats: snapshot, close };
}

/**
 * The socket's bounds. Anything on the host that can reach the socket is a client, so what
 * clients send must not grow the worker without limit:
 * - a line is at most MAX_LINE_BYTES (64 KiB, newline excluded): a longer one gets one refusal and
 *   the connection is closed. A request whose key does not fit one line sends it in parts;
 * - a request's parts hold at most MAX_REQUEST_BYTES of keyBytes in all: a key of a million tokens
 *   (4 bytes a token, 4/3 of that in base64: 5.3 MiB) and its other fields. The demo's largest
 *   contexts, about 213,000 tokens, make 1.1 MiB. Preparing a key costs about 120 bytes of memory
 *   a token for the moment (its source, its record and the record read back), 115 MiB at a
 *   million tokens: with the buffers below, the worker grows by under 256 MiB whatever is sent;
 * - the bytes received and not yet answered, over every connection together, are at most
 *   MAX_UNANSWERED_BYTES: the parts of requests not yet complete count, until the request is
 *   answered or its connection closes. The connection that would go over is refused;
 * - at most MAX_CONNECTIONS are served at once, as many more are refused with a reply, and any
 *   beyond those are closed unanswered;
 * - a connection whose client does not read its replies stops being read once MAX_REPLY_BACKLOG
 *   bytes of them wait, until they drain.
 * Together that is under 100 MiB of buffers, plus the one request being prepared. A refused
 * connection is closed once its client closes, or LINGER_MS after the refusal.
 */
export const SOCKET_LIMITS = Object.freeze({
  MAX_LINE_BYTES: 64 << 10,
  MAX_REQUEST_BYTES: 6 << 20,
  MAX_UNANSWERED_BYTES: 64 << 20,
  MAX_CONNECTIONS: 64,
  MAX_REPLY_BACKLOG: 256 << 10,
  LINGER_MS: 10_000,
});

/** One reply line; a reply is always one JSON object, so a client can tell it from the next. */
function replyLine(reply) {
  return JSON.stringify(reply) + '\n';
}

/** The characters of base64 (and of its URL-safe form, which Buffer also decodes). */
const BASE64 = /^[A-Za-z0-9+/=_-]*$/;

/** A request's parts broke the protocol: answered with `id`, and the connection is closed. */
class PartsRefused extends Error {
  constructor(message, id) {
    super(message);
    this.id = id;
  }
}

/**
 * Serves `storage.handle` on a Unix socket: one JSON object per line, a request's keyBytes in one
 * line or in parts (lines with `more: true`, not answered), one JSON reply per request, within
 * SOCKET_LIMITS. A line longer than MAX_LINE_BYTES, parts that break the protocol (see the module
 * header) and a connection over MAX_CONNECTIONS get one `{ ok: false, error }` reply, and the
 * connection is closed once it is written.
 */
export function serveSocket(storage, socketPath) {
  const { MAX_LINE_BYTES, MAX_REQUEST_BYTES, MAX_UNANSWERED_BYTES, MAX_CONNECTIONS, MAX_REPLY_BACKLOG, LINGER_MS } = SOCKET_LIMITS;
  rmSync(socketPath, { force: true });
  /** Connections open: `held` in all, `serving` of them served (the rest are being refused). */
  let held = 0;
  let serving = 0;
  /** Bytes received and not yet answered, over every connection. */
  let unanswered = 0;
  const server = createServer((socket) => {
    // Room for as many refusals as served connections; past that a connection is dropped unanswered.
    if (held >= 2 * MAX_CONNECTIONS) {
      socket.destroy();
      return;
    }
    held++;
    socket.once('close', () => held--);
    socket.on('error', () => {});
    /** Bytes received and not yet answered: whole lines, then at most one partial line. */
    let pending = Buffer.alloc(0);
    /** Whether `pending` holds a whole line, left for 'drain' while the reply backlog is full. */
    let waiting = false;
    /** Chunks of the partial line received since, none with a newline: joined when one comes. */
    let parts = [];
    let partBytes = 0;
    /**
     * The request whose keyBytes are arriving in parts, or null: its id and keyHex, the parts so
     * far decoded (`decoded`, Buffers: off the JavaScript heap, where tens of MiB of strings
     * would wait for a full collection), the last under-4 base64 characters not yet decoded
     * (`carry`), and `bytes`, the base64 characters received.
     */
    let assembly = null;
    let refused = false;
    const dropAssembly = () => {
      if (assembly === null) return;
      unanswered -= assembly.bytes;
      assembly = null;
    };
    const release = () => {
      unanswered -= pending.length + partBytes;
      pending = Buffer.alloc(0);
      parts = [];
      partBytes = 0;
      dropAssembly();
    };
    socket.once('close', release);
    // A refused client may still be writing: closing at once would make its next write fail
    // (EPIPE), and its socket would be torn down before it read the reply. So the reply ends our
    // side, and what still comes is read and dropped, holding nothing, until the client closes
    // or LINGER_MS pass.
    const refuse = (error, id) => {
      refused = true;
      release();
      socket.removeAllListeners('data');
      socket.on('data', () => {});
      socket.resume();
      socket.end(replyLine(id === undefined ? { ok: false, error } : { id, ok: false, error }));
      const timer = setTimeout(() => socket.destroy(), LINGER_MS);
      timer.unref();
      socket.once('close', () => clearTimeout(timer));
    };
    const tooLong = `request line longer than ${MAX_LINE_BYTES} bytes (a longer keyBytes is sent in parts, lines with more: true); connection closed`;
    if (serving >= MAX_CONNECTIONS) {
      refuse(`too many connections: the storage worker serves at most ${MAX_CONNECTIONS} at once; connection closed`);
      return;
    }
    serving++;
    socket.once('close', () => serving--);
    /**
     * The request a parsed line completes, or undefined for a part (kept, not answered). Throws
     * PartsRefused when the line breaks the parts protocol.
     */
    const assemble = (request) => {
      const more = typeof request === 'object' && request !== null && request.more === true;
      if (!more && assembly === null) return request;
      const { id, keyHex, keyBytes } = request ?? {};
      if (assembly !== null && (id !== assembly.id || keyHex !== assembly.keyHex)) {
        throw new PartsRefused(`request ${JSON.stringify(assembly.id)} abandoned: a line for id ${JSON.stringify(id)}, keyHex ${JSON.stringify(keyHex)} came before its last part; connection closed`, assembly.id);
      }
      // Base64 only: a part is then held at one byte a character, as the bounds count it.
      if (typeof keyBytes !== 'string' || !BASE64.test(keyBytes)) throw new PartsRefused('a part of a request has no keyBytes (a string of base64); connection closed', id);
      const bytes = (assembly?.bytes ?? 0) + keyBytes.length;
      if (bytes > MAX_REQUEST_BYTES) throw new PartsRefused(`request keyBytes longer than ${MAX_REQUEST_BYTES} bytes; connection closed`, id);
      if (more) {
        // Held until the request is answered or the connection closes, and counted as unanswered.
        // Base64 decodes 4 characters at a time, so a part is decoded up to its last whole group.
        if (assembly === null) assembly = { id, keyHex, decoded: [], carry: '', bytes: 0 };
        const text = assembly.carry + keyBytes;
        const whole = text.length - (text.length % 4);
        assembly.decoded.push(Buffer.from(text.slice(0, whole), 'base64'));
        assembly.carry = text.slice(whole);
        assembly.bytes += keyBytes.length;
        unanswered += keyBytes.length;
        return undefined;
      }
      const decoded = Buffer.concat([...assembly.decoded, Buffer.from(assembly.carry + keyBytes, 'base64')]);
      dropAssembly();
      return { ...request, keyBytes: decoded };
    };
    const serve = () => {
      if (refused) return;
      let newline;
      while (socket.writableLength < MAX_REPLY_BACKLOG && (newline = pending.indexOf(0x0a)) >= 0 && newline <= MAX_LINE_BYTES) {
        const line = pending.toString('utf8', 0, newline);
        pending = pending.subarray(newline + 1);
        unanswered -= newline + 1;
        let reply;
        try {
          const request = assemble(JSON.parse(line));
          if (request === undefined) continue;
          reply = { id: request.id, ...storage.handle(request) };
        } catch (error) {
          if (error instanceof PartsRefused) {
            refuse(error.message, error.id);
            return;
          }
          reply = { ok: false, error: `bad request: ${error.message}` };
        }
        socket.write(replyLine(reply));
      }
      const end = pending.indexOf(0x0a);
      if ((end < 0 ? pending.length : end) > MAX_LINE_BYTES) {
        refuse(tooLong);
        return;
      }
      waiting = end >= 0;
      // With the backlog full, stop reading until the client takes its replies ('drain').
      if (socket.writableLength >= MAX_REPLY_BACKLOG) socket.pause();
      else if (socket.isPaused()) socket.resume();
    };
    socket.on('drain', serve);
    socket.on('data', (chunk) => {
      unanswered += chunk.length;
      const partial = !waiting && chunk.indexOf(0x0a) < 0;
      if (partial) {
        parts.push(chunk);
        partBytes += chunk.length;
      } else {
        pending = Buffer.concat([pending, ...parts, chunk]);
        parts = [];
        partBytes = 0;
      }
      // A whole line over the limit is found by serve(), which answers the lines before it first.
      if (partial && pending.length + partBytes > MAX_LINE_BYTES) refuse(tooLong);
      else if (unanswered > MAX_UNANSWERED_BYTES) refuse(`the storage worker holds ${MAX_UNANSWERED_BYTES} bytes of unanswered requests, its most; connection closed`);
      else if (!partial) serve();
    });
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(socketPath, () => resolve(server));
  });
}
