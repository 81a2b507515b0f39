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
import { artifactKey } from 'waitprep';
import { TRACE_KEY_BASE, generateTrace, loadTraceJsonl } from 'waitprep/trace';

const BLOCK_TOKENS = 512;

function fnv(text, basis) {
  let h = basis >>> 0;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

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
    return keyFields(spec.task, spec.namespace, [fnv(keyId, 0x811c9dc5), fnv(keyId, 0x050c5d1f), fnv(keyId, 0x2545f491), spec.tokens.length]);
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
  return fromEvents(path, loadTraceJsonl(text), { sharedTokens, info: { source: path } });
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
  for (const line of text.split('\n')) {
    const trimmed = line.trim();
    if (trimmed === '') continue;
    const r = JSON.parse(trimmed);
    if (!Number.isFinite(r.timestamp) || !Array.isArray(r.hash_ids) || r.hash_ids.length === 0) throw new Error(`not a Mooncake request line: ${trimmed.slice(0, 80)}`);
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

function serviceSeconds(r, service) {
  const uncached = Math.max(0, r.input - r.cached * BLOCK_TOKENS);
  return uncached / service.prefillTokensPerSec + r.output * service.secondsPerOutputToken;
}
