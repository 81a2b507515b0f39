// The demo's storage logic: what the lease table's single producer does with a request. The
// storage-worker process (bin/storage-worker.js) runs it over its socket; on the JavaScript
// fallback, where a table cannot cross processes, the demo runs it in its own process
// (demo/run.js) on the same socket protocol.
//
// Requests come over a Unix socket, one JSON line per request ({ id, keyHex, keyBytes }) and one
// per reply ({ id, ok, ... }), from the demo's piscina worker threads (demo/prepare-worker.js).
// `keyBytes` is the key's wire form in base64: its canonical encoding (docs/key-encoding.md), as
// PreparationTask.keyBytes carries it. It is decoded strictly (decodeArtifactKey, which hashes it
// once); bytes that are not a key, or whose digest is not the request's keyHex, are refused.
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
import { mkdirSync, rmSync, statfsSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { MAX_ARENA_INDEX, arenaDirectory, arenaLocation, decodeArtifactKey, encodeArenaRecord, readArenaRecord, recordChecksum, splitLocation } from 'waitprep';

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

/** The request's key, from its wire form; throws unless it is a key whose digest is the request's keyHex. */
function keyOf(request) {
  if (typeof request.keyBytes !== 'string') throw new Error('the request has no keyBytes (the key\'s canonical bytes in base64)');
  const key = decodeArtifactKey(Buffer.from(request.keyBytes, 'base64'));
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
  mkdirSync(arenaDir, { recursive: true });
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

/** Serves `storage.handle` on a Unix socket: one JSON request per line, one JSON reply per line. */
export function serveSocket(storage, socketPath) {
  rmSync(socketPath, { force: true });
  const server = createServer((socket) => {
    let buffered = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk) => {
      buffered += chunk;
      let newline;
      while ((newline = buffered.indexOf('\n')) >= 0) {
        const line = buffered.slice(0, newline);
        buffered = buffered.slice(newline + 1);
        let reply;
        try {
          const request = JSON.parse(line);
          reply = { id: request.id, ...storage.handle(request) };
        } catch (error) {
          reply = { ok: false, error: `bad request: ${error.message}` };
        }
        socket.write(JSON.stringify(reply) + '\n');
      }
    });
    socket.on('error', () => {});
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(socketPath, () => resolve(server));
  });
}
