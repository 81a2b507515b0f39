// The experiment's traces: the package's generator, any JSONL trace (waitprep/trace's format),
// and the Mooncake FAST'25 request trace (experiment/traces/README.md), each turned into one
// replay form:
//
//   waits   [{ agent, generation, start, end, tool, keyId, tokens, sharedTokens }]: one per wait;
//           `end` is its wake or cancel, or the start of the wait that replaced it
//   events  [{ t, kind: 'wait' | 'wake' | 'cancel', wait }]: in trace order (ties keep it)
//   keyFor(keyId) -> { key, fields }: the ArtifactKey (built once, shared by every replay)
//
// Keys of the generator's traces are built from the key spec's segments (each seeded run's seed
// and length, explicit ids as they are), not from the expanded token ids: two waits share a key
// exactly when their specs are equal, as with keyFromSpec, but 100,000 keys take a second instead
// of a minute. Mooncake keys are the hash-id chains themselves.
import { constants as bufferConstants } from 'node:buffer';
import { closeSync, constants as fsConstants, fstatSync, openSync, readSync, statSync } from 'node:fs';
import { brotliDecompressSync, gunzipSync } from 'node:zlib';
import { WaitprepError, artifactKey } from 'waitprep';
import { MAX_SPEC_TOKENS, TRACE_KEY_BASE, generateTrace, loadTraceJsonl } from 'waitprep/trace';
import { fnv1a } from 'waitprep/testing';

const BLOCK_TOKENS = 512;

function keyFields(task, namespace, tokenLayout) {
  const { snapshotKind, runtime, model, adapter, profile, positionPolicy, sourcePageGeneration, codec, codecConfig, representationVersion } = TRACE_KEY_BASE;
  return {
    source: { snapshotKind, runtime, model, adapter, profile, positionPolicy, task, namespace, tokenLayout },
    sourcePageGeneration, codec, codecConfig, representationVersion,
  };
}

/**
 * Finishes a replay form: the key cache. (Class-aware policies learn class medians online, from
 * the waits that have ended, not from the trace.)
 */
function finish(name, waits, events, buildKey, info) {
  const keys = new Map();
  const built = new Map();
  const keyFor = (keyId) => {
    let entry = built.get(keyId);
    if (entry === undefined) {
      const fields = buildKey(keyId);
      entry = { fields, key: artifactKey(fields) };
      built.set(keyId, entry);
    }
    return entry;
  };
  const agents = new Set(waits.map((w) => w.agent)).size;
  return { name, waits, events, keys, keyFor, info: { ...info, agents, waits: waits.length, lastT: events.length ? events[events.length - 1].t : 0 } };
}

/**
 * A waitprep/trace event list as a replay. `sharedTokens`: the leading tokens every agent shares
 * (the generator's system prefix), which a preset may take as resident on the GPU.
 */
export function fromEvents(name, traceEvents, { sharedTokens = 0, info = {} } = {}) {
  const waits = [];
  const events = [];
  const byId = new Map();
  const open = new Map();
  const specs = new Map();
  let staleEnds = 0;
  for (const e of traceEvents) {
    if (e.event === 'wait') {
      const keyId = JSON.stringify([e.key.task, e.key.namespace, e.key.tokens]);
      if (!specs.has(keyId)) specs.set(keyId, e.key);
      const tokens = e.key.tokens.reduce((n, s) => n + s.length, 0);
      const w = { agent: e.agent, generation: e.generation, start: e.t, end: e.t, tool: e.tool ?? 'unknown', keyId, tokens, sharedTokens: Math.min(sharedTokens, tokens) };
      const previous = open.get(e.agent);
      if (previous !== undefined) previous.end = e.t;
      open.set(e.agent, w);
      byId.set(`${e.agent}#${e.generation}`, waits.length);
      events.push({ t: e.t, kind: 'wait', wait: waits.length });
      waits.push(w);
    } else {
      const index = byId.get(`${e.agent}#${e.generation}`);
      // A wake or cancel of a wait already replaced or ended names no open wait: skipped.
      if (index === undefined || open.get(e.agent) !== waits[index]) {
        staleEnds++;
        continue;
      }
      open.delete(e.agent);
      waits[index].end = e.t;
      events.push({ t: e.t, kind: e.event, wait: index });
    }
  }
  const buildKey = (keyId) => {
    const spec = specs.get(keyId);
    return keyFields(spec.task, spec.namespace, [fnv1a(keyId, 0x811c9dc5), fnv1a(keyId, 0x050c5d1f), fnv1a(keyId, 0x2545f491), spec.tokens.length]);
  };
  return finish(name, waits, events, buildKey, { ...info, staleEnds, openAtEnd: open.size });
}

/** The package's generator (generateTrace), with its default 14,000-token shared system prefix. */
export function generatorTrace({ agents, seconds, seed }) {
  const events = generateTrace({ agents, seconds, seed });
  return fromEvents(`generator(agents=${agents}, seconds=${seconds}, seed=${seed})`, events, {
    sharedTokens: 14_000,
    info: { source: 'generator', requestedAgents: agents, seconds, seed },
  });
}

/** A JSONL trace file's text (loadTraceJsonl), with no shared prefix unless told. */
export function jsonlTrace(path, text, { sharedTokens = 0 } = {}) {
  const trace = fromEvents(path, loadTraceJsonl(text), { sharedTokens, info: { source: path } });
  // The line of the last event, for an error about its time; kept out of `info`, which reports print.
  return Object.assign(trace, { lastLine: lastLineNumber(text) });
}

/** The number of the last line that is not blank (as loadTraceJsonl counts lines), or 0. */
function lastLineNumber(text) {
  const body = text.trimEnd();
  if (body.length === 0) return 0;
  let lines = 1;
  for (let at = body.indexOf('\n'); at >= 0; at = body.indexOf('\n', at + 1)) lines++;
  return lines;
}

// ---------------------------------------------------------------------------------------------
// Reading a trace and checking it can be replayed, before anything is replayed. Every refusal is
// an ERR_INVALID_ARGUMENT whose `field` is the command-line option that named the input, and
// whose message is one line naming the file, the line and the field (or the option).

/** The most bytes of trace text read, before or after decompression: what one string can hold. */
export const MAX_TRACE_BYTES = bufferConstants.MAX_STRING_LENGTH;

/** A refusal of what `option` named. */
export function inputError(option, message, cause) {
  return new WaitprepError('ERR_INVALID_ARGUMENT', `${option}: ${message}`, { field: option, cause });
}

function kindOf(stat) {
  if (stat.isDirectory()) return 'a directory';
  if (stat.isFIFO()) return 'a FIFO';
  if (stat.isCharacterDevice()) return 'a character device';
  if (stat.isBlockDevice()) return 'a block device';
  if (stat.isSocket()) return 'a socket';
  return 'not a regular file';
}

/**
 * The text of the trace file at `path`, which `option` named; a `.br` or `.gz` file is
 * decompressed first. Only a regular file is read: a directory, FIFO, device or socket is refused
 * from its status, before it is opened (reading /dev/zero or a FIFO would never end, and opening
 * a FIFO would wait for a writer), and it is opened non-blocking and checked again, so a file
 * swapped in between is refused too. Text over MAX_TRACE_BYTES is refused.
 */
export function readTraceText(path, option) {
  const shown = JSON.stringify(path);
  let stat;
  try {
    stat = statSync(path);
  } catch (error) {
    throw inputError(option, `cannot read ${shown}: ${error.code === 'ENOENT' ? 'no such file' : error.message}`, error);
  }
  if (!stat.isFile()) throw inputError(option, `${shown} is ${kindOf(stat)}, not a regular file: refused without reading it`);
  const tooLarge = (bytes, what) => inputError(option, `${shown} ${what} ${bytes} bytes, over the ${MAX_TRACE_BYTES} a trace may have (the most one string holds)`);
  if (stat.size > MAX_TRACE_BYTES) throw tooLarge(stat.size, 'has');
  let bytes;
  let fd;
  try {
    fd = openSync(path, fsConstants.O_RDONLY | fsConstants.O_NONBLOCK);
    const opened = fstatSync(fd);
    if (!opened.isFile() || opened.dev !== stat.dev || opened.ino !== stat.ino) throw inputError(option, `${shown} was replaced while it was opened: refused`);
    if (opened.size > MAX_TRACE_BYTES) throw tooLarge(opened.size, 'has');
    bytes = Buffer.allocUnsafe(opened.size);
    let at = 0;
    for (let n; at < bytes.length && (n = readSync(fd, bytes, at, bytes.length - at, at)) > 0;) at += n;
    bytes = bytes.subarray(0, at);
  } catch (error) {
    if (error instanceof WaitprepError) throw error;
    throw inputError(option, `cannot read ${shown}: ${error.message}`, error);
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
  const compressed = path.endsWith('.br') ? 'Brotli' : path.endsWith('.gz') ? 'gzip' : null;
  if (compressed !== null) {
    try {
      const decompress = compressed === 'Brotli' ? brotliDecompressSync : gunzipSync;
      bytes = decompress(bytes, { maxOutputLength: MAX_TRACE_BYTES });
    } catch (error) {
      if (error?.code === 'ERR_BUFFER_TOO_LARGE') throw tooLarge(MAX_TRACE_BYTES, 'decompresses to more than');
      throw inputError(option, `${shown} is not ${compressed}-compressed data (${error.message})`, error);
    }
  }
  return bytes.toString('utf8');
}

/**
 * Bytes one memory sample of a replay takes while the run holds it: an array of six numbers
 * (about 107 bytes measured on V8) and its slot in the series.
 */
const SAMPLE_BYTES = 112;
/** The most memory samples one run keeps: about 256 MiB of them, and about 110 MB as JSON. */
export const MAX_KEPT_SAMPLES = Math.floor((256 << 20) / SAMPLE_BYTES);

const formatBytes = (bytes) => (bytes >= 2 ** 30 ? `${Number((bytes / 2 ** 30).toPrecision(3))} GiB` : `${Math.ceil(bytes / 2 ** 20)} MiB`);

/**
 * Throws unless `trace` can be replayed in bounded memory: a replay samples memory every
 * `sampleSeconds` from t = 0 to the trace's last event, and the run keeps `seriesKept` replays'
 * series (every policy of the current agent count and seed, and the first seed's of each run
 * done), so a trace that ends late, or starts late, costs memory however few its events. Over
 * MAX_KEPT_SAMPLES, it is refused with the memory it would need and the sampling interval that
 * would fit. Its time alone is no reason to refuse it: the replay's clock treats what remains of
 * a transfer as arrived once it is due within the clock's step (experiment/clock.js), so a replay
 * ends at any time.
 *
 * The refusal is an ERR_INVALID_ARGUMENT naming the line of the last event when the trace has
 * `lastLine`, and the option that would make it fit.
 */
export function checkReplayable(trace, { sampleSeconds, seriesKept }) {
  const lastT = trace.info.lastT;
  const firstT = trace.events.length > 0 ? trace.events[0].t : 0;
  const last = `its last event${trace.lastLine ? ` (line ${trace.lastLine}, field t)` : ''} at t = ${lastT} s`;
  const perReplay = Math.floor(lastT / sampleSeconds) + 1;
  if (perReplay * seriesKept <= MAX_KEPT_SAMPLES) return;
  const fits = lastT / (Math.floor(MAX_KEPT_SAMPLES / seriesKept) - 1);
  const memory = `a replay samples memory every ${sampleSeconds} s from t = 0 to ${last}: ${perReplay} samples per replay, ` +
    `${seriesKept} replays' worth kept by this run, about ${formatBytes(perReplay * seriesKept * SAMPLE_BYTES)} ` +
    `(a run keeps at most ${MAX_KEPT_SAMPLES} samples, about ${formatBytes(MAX_KEPT_SAMPLES * SAMPLE_BYTES)})` +
    (Number.isFinite(fits) && fits > 0 ? `; --sample-seconds ${roundUp(fits)} or more would fit` : '');
  const remedy = firstT > lastT / 2 ? `; it starts at t = ${firstT} s: shift its times to start near 0` : '';
  throw new WaitprepError('ERR_INVALID_ARGUMENT', `refused before replaying: ${memory}${remedy}`, { field: 'sample-seconds' });
}

/** `x` rounded up to two significant digits. */
function roundUp(x) {
  const step = 10 ** (Math.floor(Math.log10(x)) - 1);
  return Number((Math.ceil(x / step) * step).toPrecision(2));
}

/** The serving assumptions the Mooncake importer uses for a turn's service time. */
export const MOONCAKE_SERVICE = Object.freeze({ prefillTokensPerSec: 10_000, secondsPerOutputToken: 0.03, fanout: 4 });

/**
 * Imports the Mooncake FAST'25 JSONL (`{ timestamp, input_length, output_length, hash_ids }`,
 * experiment/traces/README.md) as a replay:
 *
 * - Widely shared leading blocks: a block after which at least `fanout` different blocks follow
 *   across the trace branches; a request's shared prefix is its leading run of branching blocks
 *   (the system prompts). Hash ids are prefix-chained, so a block id names its whole prefix.
 * - Sessions: a request continues the latest earlier request whose blocks it extends (all of
 *   them, or all but a partial last block) beyond its shared prefix. A request that extends one
 *   already continued starts a fork: a new agent whose first wait demands the same key.
 * - Waits: from the previous turn's arrival plus its service time (uncached prefill at
 *   `prefillTokensPerSec`, output at `secondsPerOutputToken`) to the next turn's arrival; a gap
 *   that is not positive is dropped and counted. Tool class: 'conversation'.
 * - Keys: the previous turn's hash-id chain, so turns that really share a prefix share a key.
 *   Context: its input tokens; shared: its shared prefix blocks x 512 tokens.
 * - `agents`: the first that many sessions with a wait; more than the trace holds are made by
 *   tiling copies (own agents and keys), each shifted by a fixed fraction of the trace's span,
 *   whole sessions wrapped around so that every copy stays intact.
 */
export function mooncakeTrace(text, { agents = null, service = MOONCAKE_SERVICE, name = 'mooncake-fast25-conversation' } = {}) {
  const requests = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const trimmed = lines[i].trim();
    if (trimmed === '') continue;
    const r = mooncakeRequest(trimmed, i + 1);
    requests.push({ index: requests.length, t: r.timestamp / 1000, input: r.input_length, output: r.output_length, ids: r.hash_ids });
  }
  requests.sort((a, b) => a.t - b.t || a.index - b.index);

  const next = new Map();
  for (const r of requests) {
    for (let i = 0; i + 1 < r.ids.length; i++) {
      let set = next.get(r.ids[i]);
      if (set === undefined) next.set(r.ids[i], (set = new Set()));
      if (set.size < service.fanout) set.add(r.ids[i + 1]);
    }
  }
  const branches = (id) => (next.get(id)?.size ?? 0) >= service.fanout;
  const sharedBlocks = (r) => {
    let n = 0;
    while (n < r.ids.length && branches(r.ids[n])) n++;
    return n;
  };

  const endsAt = new Map();
  const sessionOf = new Map();
  const continued = new Set();
  const turns = [];
  let sessions = 0;
  let overlapping = 0;
  for (const r of requests) {
    r.shared = sharedBlocks(r);
    let previous = null;
    for (let length = r.ids.length; length > r.shared; length--) {
      const p = endsAt.get(r.ids[length - 1]);
      if (p !== undefined && length >= p.ids.length - 1) {
        previous = p;
        break;
      }
    }
    let session;
    if (previous === null) session = sessions++;
    else if (!continued.has(previous)) session = sessionOf.get(previous);
    else session = sessions++;
    sessionOf.set(r, session);
    r.cached = previous === null ? r.shared : Math.min(r.ids.length, previous.ids.length - 1);
    if (previous !== null) {
      continued.add(previous);
      const start = previous.t + serviceSeconds(previous, service);
      if (r.t > start) turns.push({ session, previous, start, end: r.t });
      else overlapping++;
    }
    endsAt.set(r.ids[r.ids.length - 1], r);
    if (r.ids.length >= 2) endsAt.set(r.ids[r.ids.length - 2], r);
  }

  const bySession = new Map();
  for (const turn of turns) {
    if (!bySession.has(turn.session)) bySession.set(turn.session, []);
    bySession.get(turn.session).push(turn);
  }
  const available = [...bySession.values()];
  const span = requests.length ? requests[requests.length - 1].t - requests[0].t : 0;
  const wanted = agents ?? available.length;
  const copies = Math.max(1, Math.ceil(wanted / Math.max(1, available.length)));
  const chosen = [];
  for (let c = 0; c < copies && chosen.length < wanted; c++) {
    const shift = c === 0 ? 0 : ((c * 0.6180339887498949) % 1) * span;
    for (const session of available) {
      if (chosen.length >= wanted) break;
      let offset = shift;
      if (session[0].start + offset > span) offset -= span;
      chosen.push({ copy: c, offset, session });
    }
  }

  const waits = [];
  const keyIds = new Map();
  for (const { copy, offset, session } of chosen) {
    session.forEach((turn, generation) => {
      const p = turn.previous;
      const keyId = `${copy}:${p.ids.join(',')}`;
      keyIds.set(keyId, { copy, ids: p.ids });
      const tokens = Math.max(p.input, 1);
      waits.push({
        agent: `c${copy}/s${turn.session}`, generation, start: turn.start + offset, end: turn.end + offset, tool: 'conversation',
        keyId, tokens, sharedTokens: Math.min(tokens, p.shared * BLOCK_TOKENS),
      });
    });
  }
  const events = [];
  waits.forEach((w, i) => {
    events.push({ t: w.start, kind: 'wait', wait: i, order: 2 * i });
    events.push({ t: w.end, kind: 'wake', wait: i, order: 2 * i + 1 });
  });
  events.sort((a, b) => a.t - b.t || a.order - b.order);
  const buildKey = (keyId) => {
    const { copy, ids } = keyIds.get(keyId);
    return keyFields('conversation', `mooncake/copy-${copy}`, ids);
  };
  return finish(name, waits, events, buildKey, {
    source: 'mooncake', requests: requests.length, sessions, sessionsWithWaits: available.length, copies, overlapping,
    service: { ...service },
  });
}

/**
 * One Mooncake request line, checked: `timestamp` a finite number of milliseconds >= 0, the
 * lengths integers in [0, MAX_SPEC_TOKENS] (as a JSONL trace's key may hold), `hash_ids` a
 * non-empty array of uint32 (they become the key's token layout). Throws ERR_INVALID_ARGUMENT
 * naming the line and the field.
 */
function mooncakeRequest(line, number) {
  const bad = (field, expected, got) => {
    const shown = typeof got === 'string' ? JSON.stringify(got.slice(0, 60)) : Array.isArray(got) ? `an array of length ${got.length}` : typeof got === 'object' && got !== null ? 'an object' : String(got);
    return new WaitprepError('ERR_INVALID_ARGUMENT', `line ${number}: expected \`${field}\` to be ${expected}, got ${shown}`, { field });
  };
  let r;
  try {
    r = JSON.parse(line);
  } catch (error) {
    throw new WaitprepError('ERR_INVALID_ARGUMENT', `line ${number}: not one JSON object (${error.message})`, { field: 'line', cause: error });
  }
  if (typeof r !== 'object' || r === null || Array.isArray(r)) throw bad('line', 'a JSON object { timestamp, input_length, output_length, hash_ids }', r);
  if (typeof r.timestamp !== 'number' || !Number.isFinite(r.timestamp) || r.timestamp < 0) throw bad('timestamp', 'a finite number of milliseconds >= 0', r.timestamp);
  for (const field of ['input_length', 'output_length']) {
    const value = r[field];
    if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > MAX_SPEC_TOKENS) throw bad(field, `an integer in [0, ${MAX_SPEC_TOKENS}]`, value);
  }
  const ids = r.hash_ids;
  if (!Array.isArray(ids) || ids.length === 0) throw bad('hash_ids', 'a non-empty array of block hash ids', ids);
  for (let j = 0; j < ids.length; j++) {
    if (typeof ids[j] !== 'number' || !Number.isInteger(ids[j]) || ids[j] < 0 || ids[j] > 0xffff_ffff) throw bad(`hash_ids[${j}]`, 'an integer in [0, 2^32-1]', ids[j]);
  }
  return r;
}

function serviceSeconds(r, service) {
  const uncached = Math.max(0, r.input - r.cached * BLOCK_TOKENS);
  return uncached / service.prefillTokensPerSec + r.output * service.secondsPerOutputToken;
}
