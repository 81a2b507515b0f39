// The agent-trace generator, its JSONL loader/writer and summary (lib/trace/trace.ts, docs/agent-trace.md).
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  generateTrace,
  keyFromSpec,
  loadTraceJsonl,
  specTokenLayout,
  traceSummary,
  traceToJsonl,
  MAX_SPEC_TOKENS,
  type GenerateTraceOptions,
  type KeySpec,
  type TraceEvent,
  type TraceWait,
} from '../../lib/trace/trace.js';
import { WaitprepError } from '../../lib/index.js';

const root = join(import.meta.dirname, '..', '..');

function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

/** The caught error, for asserting on its code, field and message. */
function errorOf(fn: () => unknown): WaitprepError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(WaitprepError);
    return error as WaitprepError;
  }
  throw new Error('expected a throw');
}

/**
 * Checks the structural invariants every generated trace keeps, independently of the
 * summary's own bookkeeping: times finite, within [0, seconds] and non-decreasing; only
 * waits carry keys; per agent, generations strictly increase across waits; every wait
 * is ended exactly once, by a wake or cancel of its generation or by the agent's next
 * wait while it is open (a replacement); nothing is left open.
 */
function checkInvariants(events: readonly TraceEvent[], seconds: number): { replacements: number; toolCalls: number } {
  let last = 0;
  let replacements = 0;
  let toolCalls = 0;
  const agents = new Map<string, { open: number | null; lastGeneration: number }>();
  for (const e of events) {
    expect(Number.isFinite(e.t)).toBe(true);
    expect(e.t).toBeGreaterThanOrEqual(last);
    expect(e.t).toBeLessThanOrEqual(seconds);
    last = e.t;
    const state = agents.get(e.agent) ?? { open: null, lastGeneration: -1 };
    agents.set(e.agent, state);
    if (e.event === 'wait') {
      expect(e.key).toBeDefined();
      expect(e.generation).toBeGreaterThan(state.lastGeneration);
      state.lastGeneration = e.generation;
      if (state.open !== null) replacements++;
      else toolCalls++;
      state.open = e.generation;
    } else {
      expect(e.key).toBeUndefined();
      expect(state.open).toBe(e.generation);
      state.open = null;
    }
  }
  for (const state of agents.values()) expect(state.open).toBeNull();
  return { replacements, toolCalls };
}

function waitsOf(events: readonly TraceEvent[], agent: string): TraceWait[] {
  return events.filter((e): e is TraceWait => e.event === 'wait' && e.agent === agent);
}

describe('generateTrace: tool classes', () => {
  it('every wait names a class of the mix, a replacement the class of the call it replaces, in about the mix\'s shares', () => {
    const events = generateTrace({ agents: 400, seconds: 3600, seed: 5, replaceFraction: 0.2 });
    const counts = new Map<string, number>();
    const open = new Map<string, TraceWait>();
    for (const e of events) {
      if (e.event !== 'wait') {
        open.delete(e.agent);
        continue;
      }
      expect(['file', 'shell', 'build', 'web', 'subagent']).toContain(e.tool);
      const replaced = open.get(e.agent);
      if (replaced !== undefined) expect(e.tool).toBe(replaced.tool);
      else counts.set(e.tool!, (counts.get(e.tool!) ?? 0) + 1);
      open.set(e.agent, e);
    }
    const calls = [...counts.values()].reduce((a, b) => a + b, 0);
    expect(counts.get('file')! / calls).toBeGreaterThan(0.55);
    expect(counts.get('file')! / calls).toBeLessThan(0.65);
    expect(counts.get('build')! / calls).toBeGreaterThan(0.13);
    expect(counts.get('build')! / calls).toBeLessThan(0.21);
  });

  it('a custom mix\'s names are what the waits carry', () => {
    const events = generateTrace({ agents: 5, seconds: 600, seed: 1, toolMix: [{ name: 'lookup', weight: 1, mu: -1, sigma: 0.5 }] });
    const tools = new Set(events.filter((e): e is TraceWait => e.event === 'wait').map((e) => e.tool));
    expect([...tools]).toEqual(['lookup']);
  });
});

describe('generateTrace: determinism', () => {
  it('the same seed gives identical events; another seed gives different ones', () => {
    const options: GenerateTraceOptions = { agents: 24, seconds: 600, seed: 42 };
    const a = generateTrace(options);
    expect(a.length).toBeGreaterThan(100);
    expect(generateTrace({ ...options })).toEqual(a);
    expect(traceToJsonl(generateTrace(options))).toBe(traceToJsonl(a));
    expect(generateTrace({ ...options, seed: 43 })).not.toEqual(a);
    // Seeds beyond 32 bits and negative seeds are distinct seeds too.
    const big = generateTrace({ ...options, seed: 2 ** 40 + 42 });
    expect(big).not.toEqual(a);
    expect(generateTrace({ ...options, seed: -42 })).not.toEqual(a);
    expect(generateTrace({ ...options, seed: 2 ** 40 + 42 })).toEqual(big);
  });

  it('is the same trace in another process (the built dist/, a fresh V8)', () => {
    const options = { agents: 64, seconds: 900, seed: 42 };
    const script = `
      import { createHash } from 'node:crypto';
      const { generateTrace, traceToJsonl } = await import(${JSON.stringify(join(root, 'dist', 'trace', 'trace.js'))});
      process.stdout.write(createHash('sha256').update(traceToJsonl(generateTrace(${JSON.stringify(options)}))).digest('hex'));
    `;
    const child = execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' });
    expect(child).toMatch(/^[0-9a-f]{64}$/);
    expect(child).toBe(sha256(traceToJsonl(generateTrace(options))));
  });

  it("an agent's session does not depend on how many other agents there are", () => {
    // Fixed arrival rate and task count: the default of each depends on `agents`.
    const few = generateTrace({ agents: 5, seconds: 900, seed: 9, arrivalRate: 0.1, tasks: 2 });
    const many = generateTrace({ agents: 12, seconds: 900, seed: 9, arrivalRate: 0.1, tasks: 2 });
    for (let i = 0; i < 5; i++) {
      const agent = `agent-${i}`;
      expect(few.some((e) => e.agent === agent)).toBe(true);
      expect(many.filter((e) => e.agent === agent)).toEqual(few.filter((e) => e.agent === agent));
    }
  });
});

describe('generateTrace: invariants over many seeds', () => {
  it('times sorted, every wait ends once, generations increase, JSONL round-trips', () => {
    fc.assert(
      fc.property(
        fc.record({
          seed: fc.maxSafeInteger(),
          agents: fc.integer({ min: 1, max: 24 }),
          seconds: fc.integer({ min: 5, max: 900 }),
          cancelFraction: fc.double({ min: 0, max: 0.5, noNaN: true }),
          replaceFraction: fc.double({ min: 0, max: 0.5, noNaN: true }),
        }),
        (options) => {
          const events = generateTrace(options);
          const { replacements } = checkInvariants(events, options.seconds);
          const summary = traceSummary(events);
          expect(summary.open).toBe(0);
          expect(summary.replacements).toBe(replacements);
          expect(summary.waits).toBe(summary.wakes + summary.cancels + summary.replacements);
          expect(loadTraceJsonl(traceToJsonl(events))).toEqual(events);
        },
      ),
      { numRuns: 60 },
    );
  });

  it('several agents demand the same key: same task, same first key; other tasks, other keys', () => {
    const events = generateTrace({ agents: 16, seconds: 900, seed: 7 });
    const summary = traceSummary(events);
    expect(summary.sharedKeys).toBeGreaterThan(0);
    expect(summary.sharedKeyWaits).toBeGreaterThanOrEqual(2 * summary.sharedKeys);
    // 16 agents, ceil(16 / 4) = 4 tasks: agents 0, 4, 8, 12 are task-0.
    const first = (agent: string): KeySpec => waitsOf(events, agent)[0]!.key;
    const k0 = keyFromSpec(first('agent-0'));
    expect(keyFromSpec(first('agent-4')).equals(k0)).toBe(true);
    expect(keyFromSpec(first('agent-8')).equals(k0)).toBe(true);
    expect(keyFromSpec(first('agent-1')).equals(k0)).toBe(false);
    // Every agent shares the system prefix tokens, even across tasks.
    const a = specTokenLayout(first('agent-0'));
    const b = specTokenLayout(first('agent-1'));
    expect(Buffer.from(a.subarray(0, 14_000)).equals(Buffer.from(b.subarray(0, 14_000)))).toBe(true);
    // Later turns grow the agent's own context: the earlier layout is a prefix of the later.
    const waits = waitsOf(events, 'agent-0');
    expect(waits.length).toBeGreaterThan(2);
    const later = specTokenLayout(waits[2]!.key);
    expect(later.length).toBeGreaterThan(a.length);
    expect(Buffer.from(later.subarray(0, a.length)).equals(Buffer.from(a))).toBe(true);
    expect(keyFromSpec(waits[2]!.key).equals(k0)).toBe(false);
    expect(keyFromSpec(waitsOf(events, 'agent-4')[2]!.key).equals(keyFromSpec(waits[2]!.key))).toBe(false);
  });

  it('tool waits are heavy-tailed: p99 / p50 > 10 over a large trace, with long calls present', () => {
    const summary = traceSummary(generateTrace({ agents: 400, seconds: 3600, seed: 42, cancelFraction: 0, replaceFraction: 0 }));
    expect(summary.waits).toBeGreaterThan(3000);
    const { p50, p99, max } = summary.waitSeconds;
    expect(p50).toBeGreaterThan(0);
    expect(p99 / p50).toBeGreaterThan(10);
    expect(p50).toBeLessThan(1); // most calls are file ops
    expect(max).toBeGreaterThan(60); // sub-agents and timeouts
  });

  it('the defaults produce the figures docs/agent-trace.md quotes (2000 agents, one hour, seed 42)', () => {
    const events = generateTrace({ agents: 2000, seconds: 3600, seed: 42, cancelFraction: 0, replaceFraction: 0 });
    const summary = traceSummary(events);
    expect(summary.waits).toBe(43_688);
    expect(summary.waitSeconds.p50.toFixed(2)).toBe('0.07');
    expect(summary.waitSeconds.p90.toFixed(1)).toBe('4.5');
    expect(summary.waitSeconds.p99).toBe(120);
    // What traceSummary does not report: mean, the share over a minute, waits per session.
    const started = new Map<string, number>();
    const durations: number[] = [];
    const perAgent = new Map<string, number>();
    for (const e of events) {
      const id = `${e.agent}#${e.generation}`;
      if (e.event === 'wait') {
        started.set(id, e.t);
        perAgent.set(e.agent, (perAgent.get(e.agent) ?? 0) + 1);
      } else if (started.has(id)) {
        durations.push(e.t - started.get(id)!);
        started.delete(id);
      }
    }
    const total = durations.reduce((a, b) => a + b, 0);
    const long = durations.filter((d) => d > 60);
    const sessions = [...perAgent.values()].sort((a, b) => a - b);
    expect((total / durations.length).toFixed(1)).toBe('4.0');
    expect(((100 * long.length) / durations.length).toFixed(1)).toBe('1.8');
    expect(((100 * long.reduce((a, b) => a + b, 0)) / total).toFixed(0)).toBe('62');
    expect(sessions[Math.ceil(0.5 * sessions.length) - 1]).toBe(16);
    expect(sessions[Math.ceil(0.9 * sessions.length) - 1]).toBe(46);
  });

  it('cancellations and replacements come at about the configured fractions', () => {
    const events = generateTrace({ agents: 400, seconds: 3600, seed: 3, cancelFraction: 0.1, replaceFraction: 0.15 });
    const { replacements, toolCalls } = checkInvariants(events, 3600);
    const summary = traceSummary(events);
    expect(toolCalls).toBeGreaterThan(3000);
    expect(summary.cancels / toolCalls).toBeGreaterThan(0.07);
    expect(summary.cancels / toolCalls).toBeLessThan(0.13);
    expect(replacements / toolCalls).toBeGreaterThan(0.11);
    expect(replacements / toolCalls).toBeLessThan(0.19);

    const none = traceSummary(generateTrace({ agents: 50, seconds: 900, seed: 3, cancelFraction: 0, replaceFraction: 0 }));
    expect(none).toMatchObject({ cancels: 0, replacements: 0 });
    const all = traceSummary(generateTrace({ agents: 50, seconds: 900, seed: 3, cancelFraction: 1, replaceFraction: 1 }));
    expect(all.wakes).toBe(0);
    expect(all.replacements).toBe(all.cancels);
  });

  it('a replacement demands the grown context: its layout extends the replaced one', () => {
    const events = generateTrace({ agents: 8, seconds: 900, seed: 5, replaceFraction: 1 });
    const waits = waitsOf(events, 'agent-0');
    const [replaced, replacing] = [waits[0]!, waits[1]!];
    expect(replacing.generation).toBe(replaced.generation + 1);
    const before = specTokenLayout(replaced.key);
    const after = specTokenLayout(replacing.key);
    expect(after.length).toBeGreaterThan(before.length);
    expect(Buffer.from(after.subarray(0, before.length)).equals(Buffer.from(before))).toBe(true);
  });

  it('rejects bad options with ERR_INVALID_ARGUMENT naming the option', () => {
    const cases: Array<[unknown, string]> = [
      [undefined, 'options'],
      [{ seconds: 10, seed: 1 }, 'options.agents'],
      [{ agents: 0, seconds: 10, seed: 1 }, 'options.agents'],
      [{ agents: 1, seconds: -1, seed: 1 }, 'options.seconds'],
      [{ agents: 1, seconds: Infinity, seed: 1 }, 'options.seconds'],
      [{ agents: 1, seconds: 10, seed: 1.5 }, 'options.seed'],
      [{ agents: 1, seconds: 10, seed: 1, agent: 3 }, 'options.agent'],
      [{ agents: 1, seconds: 10, seed: 1, cancelFraction: 2 }, 'options.cancelFraction'],
      [{ agents: 1, seconds: 10, seed: 1, replaceFraction: Number.NaN }, 'options.replaceFraction'],
      [{ agents: 1, seconds: 10, seed: 1, toolMix: [] }, 'options.toolMix'],
      [{ agents: 1, seconds: 10, seed: 1, toolMix: [{ name: 'x', weight: 1, mu: 0, sigma: -1 }] }, 'options.toolMix[0].sigma'],
      [{ agents: 1, seconds: 10, seed: 1, callsPerSession: { mu: 1, sigma: 1, min: 5, max: 2 } }, 'options.callsPerSession.max'],
      [{ agents: 1, seconds: 10, seed: 1, namespace: '' }, 'options.namespace'],
    ];
    for (const [options, field] of cases) {
      const error = errorOf(() => generateTrace(options as GenerateTraceOptions));
      expect(error.code).toBe('ERR_INVALID_ARGUMENT');
      expect(error.field).toBe(field);
    }
  });
});

describe('keyFromSpec', () => {
  const spec: KeySpec = { task: 'coding', namespace: 'team-a', tokens: [{ seed: 'system/x', length: 300 }, [7, 8, 9]] };

  it('is deterministic, and a seeded run is only a compact spelling of its tokens', () => {
    const layout = specTokenLayout(spec);
    expect(layout.length).toBe(303);
    expect(Array.from(layout.subarray(300))).toEqual([7, 8, 9]);
    const explicit: KeySpec = { ...spec, tokens: [Array.from(layout)] };
    expect(keyFromSpec(explicit).equals(keyFromSpec(spec))).toBe(true);
    expect(keyFromSpec(spec).hex).toBe(keyFromSpec(JSON.parse(JSON.stringify(spec))).hex);
    // A shorter seeded run is a prefix of a longer one with the same seed.
    const short = specTokenLayout({ ...spec, tokens: [{ seed: 'system/x', length: 100 }] });
    expect(Array.from(short)).toEqual(Array.from(layout.subarray(0, 100)));
  });

  it('task, namespace, tokens and the base fields are all identity', () => {
    const k = keyFromSpec(spec);
    expect(keyFromSpec({ ...spec, task: 'qa' }).equals(k)).toBe(false);
    expect(keyFromSpec({ ...spec, namespace: 'team-b' }).equals(k)).toBe(false);
    expect(keyFromSpec({ ...spec, tokens: [{ seed: 'system/y', length: 300 }, [7, 8, 9]] }).equals(k)).toBe(false);
    expect(keyFromSpec(spec, { model: 'other-model' }).equals(k)).toBe(false);
    expect(keyFromSpec(spec, {}).equals(k)).toBe(true);
    expect(k.source).toMatchObject({ task: 'coding', namespace: 'team-a', model: 'trace-model' });
  });

  it('rejects malformed specs and unknown base fields', () => {
    expect(errorOf(() => keyFromSpec({ ...spec, tokens: [] })).field).toBe('spec.tokens');
    expect(errorOf(() => keyFromSpec({ ...spec, tokens: [{ seed: 's', length: MAX_SPEC_TOKENS + 1 }] })).field).toBe('spec.tokens[0].length');
    expect(errorOf(() => keyFromSpec({ ...spec, tokens: [{ seed: 's', length: MAX_SPEC_TOKENS }, [1]] })).field).toBe('spec.tokens');
    expect(errorOf(() => keyFromSpec(spec, { modle: 'x' } as never)).field).toBe('base.modle');
    expect(errorOf(() => keyFromSpec(spec, { modle: 'x' } as never)).message).toMatch(/^Expected `base\.modle` to be absent \(unknown field; known fields: snapshotKind, /);
  });
});

describe('JSONL', () => {
  it('round-trips a generated trace, byte for byte on the second write', () => {
    const events = generateTrace({ agents: 12, seconds: 600, seed: 11, replaceFraction: 0.2, cancelFraction: 0.2 });
    const text = traceToJsonl(events);
    expect(text.endsWith('\n')).toBe(true);
    expect(text.split('\n').length).toBe(events.length + 1);
    const loaded = loadTraceJsonl(text);
    expect(loaded).toEqual(events);
    expect(traceToJsonl(loaded)).toBe(text);
  });

  it('reads a hand-written trace: blank lines and CRLF skipped, generation defaults to 0', () => {
    const key = { task: 't', namespace: 'n', tokens: [[1, 2, 3]] };
    const text = [
      JSON.stringify({ t: 0, agent: 'a', event: 'wait', key }),
      '',
      JSON.stringify({ t: 0.5, agent: 'b', event: 'wait', key, generation: 3 }) + '\r',
      JSON.stringify({ t: 1, agent: 'b', generation: 4, event: 'wait', key: { ...key, tokens: [[1, 2, 3], { seed: 'x', length: 4 }] } }),
      JSON.stringify({ t: 1, agent: 'a', event: 'wake' }),
      JSON.stringify({ t: 2.25, agent: 'b', generation: 4, event: 'cancel' }),
      '',
    ].join('\n');
    const events = loadTraceJsonl(text);
    expect(events.map((e) => [e.t, e.agent, e.generation, e.event])).toEqual([
      [0, 'a', 0, 'wait'],
      [0.5, 'b', 3, 'wait'],
      [1, 'b', 4, 'wait'],
      [1, 'a', 0, 'wake'],
      [2.25, 'b', 4, 'cancel'],
    ]);
    expect(traceSummary(events)).toEqual({
      agents: 2,
      events: 5,
      waits: 3,
      wakes: 1,
      cancels: 1,
      replacements: 1,
      open: 0,
      distinctKeys: 2,
      sharedKeys: 1,
      sharedKeyWaits: 2,
      waitSeconds: { p50: 1, p90: 1.25, p99: 1.25, max: 1.25 },
      lastT: 2.25,
    });
    expect(loadTraceJsonl('')).toEqual([]);
    expect(traceSummary([])).toMatchObject({ waits: 0, waitSeconds: { p50: 0, p90: 0, p99: 0, max: 0 }, lastT: 0 });
  });

  it('a loader error names the line (message) and the field (error.field)', () => {
    const key = { task: 't', namespace: 'n', tokens: [[1]] };
    const good = JSON.stringify({ t: 1, agent: 'a', event: 'wait', key });
    const cases: Array<[string, string]> = [
      ['{"t": 2, "agent": ', 'line'],
      ['[1, 2]', 'line'],
      [JSON.stringify({ t: -1, agent: 'b', event: 'wake' }), 't'],
      [JSON.stringify({ t: '2', agent: 'b', event: 'wake' }), 't'],
      [JSON.stringify({ t: 2, event: 'wait', key }), 'agent'],
      [JSON.stringify({ t: 2, agent: 'b', event: 'sleep' }), 'event'],
      [JSON.stringify({ t: 2, agent: 'b', generation: -1, event: 'wait', key }), 'generation'],
      [JSON.stringify({ t: 2, agent: 'b', event: 'wait' }), 'key'],
      [JSON.stringify({ t: 2, agent: 'a', event: 'wake', key }), 'key'],
      [JSON.stringify({ t: 2, agent: 'b', evnt: 'wait', event: 'wait', key }), 'evnt'],
      [JSON.stringify({ t: 2, agent: 'b', event: 'wait', key: { ...key, model: 'm' } }), 'key.model'],
      [JSON.stringify({ t: 2, agent: 'b', event: 'wait', key: { ...key, task: '' } }), 'key.task'],
      [JSON.stringify({ t: 2, agent: 'b', event: 'wait', key: { ...key, tokens: [[1], { seed: 's', length: 0 }] } }), 'key.tokens[1].length'],
      [JSON.stringify({ t: 2, agent: 'b', event: 'wait', key: { ...key, tokens: [[1, 2, 1.5]] } }), 'key.tokens[0][2]'],
      [JSON.stringify({ t: 2, agent: 'b', event: 'wait', key: { ...key, tokens: ['abc'] } }), 'key.tokens[0]'],
      [JSON.stringify({ t: 0.5, agent: 'a', event: 'wake' }), 't'], // time went back
      [JSON.stringify({ t: 2, agent: 'b', event: 'wake' }), 'generation'], // b never waited
      [JSON.stringify({ t: 2, agent: 'a', generation: 1, event: 'cancel' }), 'generation'], // a never waited at 1
      [JSON.stringify({ t: 2, agent: 'a', event: 'wait', key }), 'generation'], // (a, 0) waited already
      [JSON.stringify({ t: 2, agent: 'b', event: 'wait', key, tool: '' }), 'tool'],
      [JSON.stringify({ t: 2, agent: 'b', event: 'wait', key, tool: 3 }), 'tool'],
      [JSON.stringify({ t: 2, agent: 'a', event: 'wake', tool: 'file' }), 'tool'], // only a wait has a tool class
    ];
    for (const [bad, field] of cases) {
      const text = `${good}\n\n${bad}\n${good}\n`;
      const error = errorOf(() => loadTraceJsonl(text));
      expect(error.code).toBe('ERR_INVALID_ARGUMENT');
      expect(error.field).toBe(field);
      expect(error.message).toMatch(/\bline 3\b/);
    }
  });

  it('a wait may carry its tool class; one without loads as before', () => {
    const key = { task: 't', namespace: 'n', tokens: [[1]] };
    const text = [
      JSON.stringify({ t: 0, agent: 'a', event: 'wait', key, tool: 'build' }),
      JSON.stringify({ t: 1, agent: 'b', event: 'wait', key }),
      JSON.stringify({ t: 2, agent: 'a', event: 'wake' }),
      JSON.stringify({ t: 3, agent: 'b', event: 'wake' }),
    ].join('\n');
    const events = loadTraceJsonl(text);
    expect(events.map((e) => (e.event === 'wait' ? e.tool : undefined))).toEqual(['build', undefined, undefined, undefined]);
    expect('tool' in events[1]!).toBe(false);
    expect(traceToJsonl(events).split('\n')[0]).toBe('{"t":0,"agent":"a","generation":0,"event":"wait","key":{"task":"t","namespace":"n","tokens":[[1]]},"tool":"build"}');
    expect(loadTraceJsonl(traceToJsonl(events))).toEqual(events);
  });

  it('the writer checks what it writes and names the event', () => {
    const key = { task: 't', namespace: 'n', tokens: [[1]] };
    const unsorted = [
      { t: 2, agent: 'a', generation: 0, event: 'wait', key },
      { t: 1, agent: 'a', generation: 0, event: 'wake' },
    ] as TraceEvent[];
    const error = errorOf(() => traceToJsonl(unsorted));
    expect(error.field).toBe('t');
    expect(error.message).toMatch(/events\[1\]/);
    expect(errorOf(() => traceToJsonl([null as unknown as TraceEvent])).field).toBe('events[0]');
  });
});
