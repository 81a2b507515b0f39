// `waitprep experiment` (experiment/, docs/experiment.md): the virtual-time replay of every
// policy through the real WaitCoordinator. Checked here: determinism (the same arguments give the
// same JSON, in this process and in a fresh one), accounting (every wait ends exactly once, every
// wake is exactly one hit or one miss with a cause, every unit ends exactly once), the cost
// model's geometry, the shared-bandwidth links, and the Mooncake importer on a slice of the
// trace (test/fixtures/mooncake-conversation-head800.jsonl: its first 800 lines). Reduced sizes;
// no figure is asserted, only what must hold whatever the figures are.
import { createHash } from 'node:crypto';
import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import fc from 'fast-check';
import { experimentOptions } from '../../experiment/cli.js';
import { EventQueue, MinHeap, Network } from '../../experiment/clock.js';
import { POLICIES } from '../../experiment/policies.js';
import { MODELS, PRESETS, kvBytesPerToken, resolvePreset } from '../../experiment/presets.js';
import { BUCKETS, CAUSES, replay } from '../../experiment/replay.js';
import { formatHtml, formatMarkdown } from '../../experiment/report.js';
import { mergeOutputs, runExperiment } from '../../experiment/run.js';
import { generatorTrace, mooncakeTrace } from '../../experiment/traces.js';

const root = join(import.meta.dirname, '..', '..');
const bin = join(root, 'bin', 'waitprep.js');
const MOONCAKE_SLICE = join(import.meta.dirname, '..', 'fixtures', 'mooncake-conversation-head800.jsonl');
const sum = (counts: Record<string, number>): number => Object.values(counts).reduce((a, b) => a + b, 0);

type Result = ReturnType<typeof replay>;
type Trace = ReturnType<typeof generatorTrace>;

/** What must hold of one replay, counted against the trace itself. */
function expectAccounted(trace: Trace, r: Result): void {
  const wakeEvents = trace.events.filter((e: { kind: string }) => e.kind === 'wake').length;
  const cancelEvents = trace.events.filter((e: { kind: string }) => e.kind === 'cancel').length;
  // Every wait ends exactly once.
  expect(r.waits).toBe(trace.waits.length);
  expect(sum(r.endings)).toBe(r.waits);
  expect(r.endings.wake).toBe(wakeEvents);
  expect(r.endings.cancel).toBe(cancelEvents);
  expect(r.endings.open).toBe(0);
  // Every wake is one hit or one miss with a cause, and has a latency.
  expect(r.wakes).toBe(wakeEvents);
  expect(r.hits + sum(r.misses)).toBe(r.wakes);
  expect(Object.keys(r.misses)).toEqual([...CAUSES]);
  expect(sum(r.hitsByTier)).toBe(r.hits);
  expect(r.latency.count).toBe(r.wakes);
  expect(r.buckets.map((b: { name: string }) => b.name)).toEqual(BUCKETS.map((b) => b.name));
  expect(r.buckets.reduce((n: number, b: { wakes: number }) => n + b.wakes, 0)).toBe(r.wakes);
  expect(r.buckets.reduce((n: number, b: { hits: number }) => n + b.hits, 0)).toBe(r.hits);
  const tools = Object.values(r.tools) as Array<{ wakes: number; hits: number }>;
  expect(tools.reduce((n, t) => n + t.wakes, 0)).toBe(r.wakes);
  expect(tools.reduce((n, t) => n + t.hits, 0)).toBe(r.hits);
  expect(r.missPath.load + r.missPath.recompute + r.missPath.none).toBe(sum(r.misses));
  // The coordinator saw exactly the wakes that went through it, and counted each once.
  expect(r.lookups.coordinator + r.lookups.direct).toBe(r.wakes);
  expect(r.coordinator.wakes).toBe(r.lookups.coordinator);
  expect(r.coordinator.hits + sum(r.coordinator.misses)).toBe(r.coordinator.wakes);
  expect(r.coordinator.waiting).toBe(0);
  expect(r.coordinator.queued).toBe(0);
  expect(r.coordinator.inFlight).toBe(0);
  // Every unit ends exactly once, as the coordinator counted it.
  const u = r.units;
  expect(u.completed + u.alreadyReady + u.aborted + u.failed).toBe(u.issued);
  expect(r.coordinator.issued).toBe(u.issued);
  expect(r.coordinator.completed).toBe(u.completed + u.alreadyReady);
  expect(r.coordinator.failed).toBe(u.aborted + u.failed);
  expect(r.wasted.units).toBeLessThanOrEqual(u.issued);
  expect(r.wasted.bytes).toBeLessThanOrEqual(u.bytes + 1);
  for (const [, v] of Object.entries(r.memory.peak)) expect(v as number).toBeGreaterThanOrEqual(0);
  expect(r.latency.p50).toBeLessThanOrEqual(r.latency.p95);
  expect(r.latency.p95).toBeLessThanOrEqual(r.latency.p99);
}

describe('experiment: accounting', () => {
  const trace = generatorTrace({ agents: 60, seconds: 900, seed: 7 });
  for (const presetName of Object.keys(PRESETS)) {
    it(`every wait, wake and unit is accounted for under every policy (${presetName})`, () => {
      const preset = resolvePreset(presetName);
      for (const policy of POLICIES) {
        const r = replay(trace, preset, policy, { seed: 1, checkAborts: true, checkWaits: true });
        expectAccounted(trace, r);
        if (policy.name === 'none') expect(r.hits).toBe(0);
        if (policy.name.startsWith('keep-gpu')) expect(r.hitsByTier.gpu).toBe(r.hits);
        if (policy.name.startsWith('keep-gpu') || policy.name === 'none') expect(r.units.issued).toBe(0);
        if (policy.name === 'fifo-1-no-join') expect(r.coordinator.joins).toBe(0);
        // The host arena's budget holds prepared artifacts and staging together.
        expect(r.memory.peak.arenaBytes + r.memory.peak.stagingBytes).toBeLessThanOrEqual(preset.hostArenaBytes);
        // Running turns and retained KV share each engine's capacity (less the device pool's reservation).
        for (const row of r.memory.series ?? []) expect(row[4] + row[6]).toBeLessThanOrEqual(preset.gpuKvBytesPerEngine * preset.engines);
      }
    });
  }

  it('accounts the Mooncake slice too, under every policy', () => {
    const mooncake = mooncakeTrace(readFileSync(MOONCAKE_SLICE, 'utf8'));
    const preset = resolvePreset('70b-b300-pcie6');
    for (const policy of POLICIES) expectAccounted(mooncake, replay(mooncake, preset, policy, { seed: 2, checkAborts: true, checkWaits: true }));
  });
});

describe('experiment: determinism', () => {
  const options = {
    presets: ['70b-pcie5-host'], agents: [25], seconds: 400, seeds: [1, 2, 3], trace: 'generator',
    mooncakeFile: '', sharedPrefixTokens: 0, policies: null, sampleSeconds: 10,
  };

  it('the same options give byte-identical JSON; another seed list does not', () => {
    const a = JSON.stringify(runExperiment(options));
    expect(JSON.stringify(runExperiment(options))).toBe(a);
    expect(JSON.stringify(runExperiment({ ...options, seeds: [4] }))).not.toBe(a);
  });

  it('`waitprep experiment --json` prints one object, the same in two processes, with progress on stderr', () => {
    const args = [bin, 'experiment', '--json', '--agents', '15', '--seconds', '300', '--seeds', '1,2,3', '--preset', '8b-pcie5-nvme,70b-b300-pcie6'];
    const first = spawnSync(process.execPath, args, { encoding: 'utf8', timeout: 120_000 });
    expect(first.status).toBe(0);
    expect(first.stderr).toMatch(/\[\d+\/\d+ [\d.]+ s\] 8b-pcie5-nvme 15 agents seed 1 none: hit/);
    const second = execFileSync(process.execPath, [...args, '--quiet'], { encoding: 'utf8', timeout: 120_000 });
    expect(createHash('sha256').update(second).digest('hex')).toBe(createHash('sha256').update(first.stdout).digest('hex'));
    expect(first.stdout.trim().split('\n')).toHaveLength(1);
    const output = JSON.parse(first.stdout);
    expect(output.runs).toHaveLength(2);
    for (const run of output.runs) {
      expect(run.policies.map((p: { name: string }) => p.name)).toEqual(POLICIES.map((p) => p.name));
      for (const p of run.policies) expect(p.seeds).toHaveLength(3);
      const oracle = run.policies.find((p: { name: string }) => p.name === 'oracle-jit');
      expect(oracle.summary.hitsOfOracle.mean).toBe(1);
    }
  });

  it('the table and the HTML report come from the same run', () => {
    const dir = execFileSync('mktemp', ['-d'], { encoding: 'utf8' }).trim();
    const html = join(dir, 'report.html');
    const text = execFileSync(process.execPath, [bin, 'experiment', '--agents', '10,20', '--seconds', '300', '--seeds', '1', '--quiet', '--html', html], { encoding: 'utf8', timeout: 120_000 });
    expect(text).toMatch(/^8b-pcie5-nvme, 10 agents, generator trace/m);
    expect(text).toMatch(/^fifo-1 +\d/m);
    const page = readFileSync(html, 'utf8');
    expect(page).toMatch(/^<!doctype html>/);
    expect(page).toContain('next turns with their context ready, against agents');
    expect(page).toContain('<th>of oracle</th>');
    expect(page).not.toMatch(/<script|https?:\/\/(?!www\.w3\.org)/);
    execFileSync('rm', ['-rf', dir]);
  });

  it('--from reports a saved --json run as Markdown without running it again', () => {
    const dir = execFileSync('mktemp', ['-d'], { encoding: 'utf8' }).trim();
    const saved = join(dir, 'run.json');
    const json = execFileSync(process.execPath, [bin, 'experiment', '--json', '--quiet', '--agents', '10', '--seconds', '200', '--seeds', '1,2', '--policies', 'none,fifo-1,oracle-jit'], { encoding: 'utf8', timeout: 60_000 });
    execFileSync('sh', ['-c', 'cat > "$1"', 'sh', saved], { input: json });
    const markdown = execFileSync(process.execPath, [bin, 'experiment', '--from', saved, '--markdown'], { encoding: 'utf8' });
    expect(markdown).toMatch(/^\| policy \| hit rate, 10 agents \(of oracle-jit\) \| bytes hit \| mean \| p50 \| p95 \| p99 \| wasted GB \(share\) \| commonest miss causes \|$/m);
    expect(markdown).toMatch(/^\| oracle-jit \| [^|]*\(1\.00\) \|/m);
    expect(markdown.match(/^\| (none|fifo-1|oracle-jit) \|/gm)).toHaveLength(3);
    execFileSync('rm', ['-rf', dir]);
  });

  it('saved outputs merged (--from A,B) are the object one run of all their presets, agent counts and policies prints', () => {
    const base = { ...options, presets: ['8b-pcie5-nvme', '70b-b300-pcie6'], agents: [10, 20], seconds: 200, seeds: [1, 2] };
    const whole = JSON.stringify(runExperiment(base));
    const rest = POLICIES.map((p) => p.name).filter((name) => !['none', 'fifo-1', 'oracle-jit'].includes(name));
    // The oracle lives in the first part only: the others' hits of it are recomputed in the merge.
    const parts = [
      runExperiment({ ...base, policies: ['none', 'fifo-1', 'oracle-jit'] }),
      runExperiment({ ...base, presets: ['8b-pcie5-nvme'], agents: [20], policies: rest }),
      runExperiment({ ...base, presets: ['70b-b300-pcie6'], policies: rest }),
      runExperiment({ ...base, presets: ['8b-pcie5-nvme'], agents: [10], policies: rest }),
    ];
    expect(parts[1]!.runs[0].policies[0].summary.hitsOfOracle).toBeNull();
    expect(JSON.stringify(mergeOutputs(parts))).toBe(whole);
    // Not one experiment: another seed list, or a policy twice.
    expect(() => mergeOutputs([parts[0], runExperiment({ ...base, seeds: [3], policies: ['fifo-2'] })])).toThrow(/differ in seeds/);
    expect(() => mergeOutputs([parts[0], parts[0]])).toThrow(/policy none twice/);
  });

  it('reports runs merged with different policies per agent count by name: a dash where one lacks a policy', () => {
    const base = { ...options, agents: [10], seconds: 200, seeds: [1] };
    const merged = mergeOutputs([
      runExperiment({ ...base, policies: ['none', 'oracle-jit'] }),
      runExperiment({ ...base, agents: [20], policies: ['fifo-1', 'oracle-jit'] }),
    ]);
    const markdown = formatMarkdown(merged);
    expect(markdown).toMatch(/^\| fifo-1 \| - \| [\d.]+% \(\d\.\d\d\) \|/m);
    expect(markdown).toMatch(/^\| oracle-jit \| [\d.]+% \(1\.00\) \| [\d.]+% \(1\.00\) \|/m);
    // A policy only the smaller run has still gets its row, with no latency at the largest count.
    expect(markdown).toMatch(/^\| none \| [\d.]+% \(\d\.\d\d\) \| - \| - \| - \| - \| - \| - \| - \| - \|$/m);
    // Merged in either order, the agent counts ascend and the latency is the largest count's.
    const reversed = mergeOutputs([
      runExperiment({ ...base, agents: [20], policies: ['fifo-1', 'oracle-jit'] }),
      runExperiment({ ...base, policies: ['none', 'oracle-jit'] }),
    ]);
    expect(reversed.options.agents).toEqual([10, 20]);
    expect(formatMarkdown(reversed)).toBe(markdown);
    expect(markdown).toContain('latency and misses at 20 agents');
    const html = formatHtml(merged);
    for (const name of ['none', 'fifo-1', 'oracle-jit']) expect(html).toContain(`>${name}</text>`);
    expect(html).not.toMatch(/NaN|undefined/);
  });

  it('--from A,B --json prints, byte for byte, what the single run prints', () => {
    const dir = execFileSync('mktemp', ['-d'], { encoding: 'utf8' }).trim();
    const args = ['experiment', '--json', '--quiet', '--agents', '10', '--seconds', '200', '--seeds', '1,2'];
    const save = (name: string, extra: string[]): string => {
      const file = join(dir, name);
      writeFileSync(file, execFileSync(process.execPath, [bin, ...args, ...extra], { encoding: 'utf8', timeout: 60_000 }));
      return file;
    };
    const a = save('a.json', ['--preset', 'all', '--policies', 'none,fifo-1,oracle-jit']);
    const b = save('b.json', ['--preset', 'all', '--policies', 'fifo-8,keep-gpu-2s']);
    const whole = execFileSync(process.execPath, [bin, ...args, '--preset', 'all', '--policies', 'none,keep-gpu-2s,fifo-1,fifo-8,oracle-jit'], { encoding: 'utf8', timeout: 60_000 });
    expect(execFileSync(process.execPath, [bin, 'experiment', '--from', `${a},${b}`, '--json'], { encoding: 'utf8' })).toBe(whole);
    const clash = spawnSync(process.execPath, [bin, 'experiment', '--from', `${a},${a}`, '--markdown'], { encoding: 'utf8' });
    expect(clash.status).toBe(2);
    expect(clash.stderr).toMatch(/^waitprep experiment: --from: cannot merge: .* has policy none twice/);
    // Options that would shape a run are refused with --from, not silently ignored.
    const shaped = spawnSync(process.execPath, [bin, 'experiment', '--from', a, '--agents', '5000', '--markdown'], { encoding: 'utf8' });
    expect(shaped.status).toBe(2);
    expect(shaped.stderr).toMatch(/^waitprep experiment: --from reports saved outputs as they were run; it takes no --agents/);
    execFileSync('rm', ['-rf', dir]);
  });

  it("runs from the README: its `npm run experiment` is the package script, and the script's command runs", () => {
    expect(readFileSync(join(root, 'README.md'), 'utf8')).toMatch(/^npm run experiment +# /m);
    const script: string = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).scripts.experiment;
    // The script builds first (the suite has built already), then runs the command these tests run.
    const command = script.split('&&').at(-1)!.trim();
    expect(command).toBe('node bin/waitprep.js experiment');
    const text = execFileSync('sh', ['-c', `${command} --agents 5 --seconds 120 --seeds 1 --policies none,fifo-1 --quiet`], { cwd: root, encoding: 'utf8', timeout: 60_000 });
    expect(text).toMatch(/^8b-pcie5-nvme, 5 agents, generator trace/m);
    expect(text).toMatch(/^fifo-1 +\d/m);
  });

  it('a bad option is a usage error (exit 2)', () => {
    for (const args of [['--agents', '0'], ['--preset', 'nope'], ['--policies', 'fifo-9'], ['--bogus']]) {
      const run = spawnSync(process.execPath, [bin, 'experiment', ...args], { encoding: 'utf8' });
      expect(run.status).toBe(2);
      expect(run.stderr).toMatch(/^waitprep experiment: /);
    }
  });
});

describe('experiment: cost model and links', () => {
  it('KV bytes per token come from the geometry, MLA included', () => {
    expect(kvBytesPerToken(MODELS['llama-3.1-8b'])).toBe(32 * 8 * 128 * 2 * 2);
    expect(kvBytesPerToken(MODELS['llama-3.1-70b'])).toBe(80 * 8 * 128 * 2 * 2);
    expect(kvBytesPerToken(MODELS['deepseek-v3'])).toBe(61 * (512 + 64) * 2);
    const p = resolvePreset('70b-pcie5-host');
    expect(p.engines).toBe(2);
    expect(p.h2dBytesPerSecPerEngine).toBe(4 * PRESETS['70b-pcie5-host'].h2dBytesPerSecPerGpu);
    expect(resolvePreset('8b-pcie5-nvme').sourceBytesPerSec).toBe(8 * 12e9);
  });

  it('the min-heap pops in (key, sequence) order whatever the pushes and pops between', () => {
    // Keys from a small range, so ties are common: the sequence must break them as scheduled.
    const op = fc.oneof(fc.record({ push: fc.integer({ min: 0, max: 5 }) }), fc.constant({ pop: true }));
    fc.assert(
      fc.property(fc.array(op, { maxLength: 200 }), (ops) => {
        const before = (a: { key: number; seq: number }, b: { key: number; seq: number }) => a.key < b.key || (a.key === b.key && a.seq < b.seq);
        const heap = new MinHeap(before);
        const model: Array<{ key: number; seq: number }> = [];
        let seq = 0;
        for (const o of ops) {
          if ('push' in o) {
            const item = { key: o.push, seq: seq++ };
            heap.push(item);
            model.push(item);
            model.sort((a, b) => (before(a, b) ? -1 : 1));
          } else if (model.length > 0) {
            expect(heap.top()).toBe(model[0]);
            expect(heap.pop()).toBe(model.shift());
          }
          expect(heap.size).toBe(model.length);
        }
      }),
      { numRuns: 200 },
    );
  });

  it('transfers on one link share it equally; a capped one keeps only its cap', () => {
    const q = new EventQueue();
    const net = new Network(q);
    const link = net.link('l', 100);
    const ends: Array<[string, number]> = [];
    net.transfer(100, [link], Infinity, () => ends.push(['a', q.now]));
    net.transfer(100, [link], Infinity, () => ends.push(['b', q.now]));
    q.at(0.5, () => net.transfer(10, [link], 10, () => ends.push(['c', q.now])));
    q.run();
    // Until 0.5 s a and b move 50/s each (25 moved). Then a third each (equal shares, not
    // max-min: c's unused share is not handed on), c capped at 10/s, so c ends at 1.5 s with
    // a and b at 75 - 100/3 left; alone again at 50/s, they end 5/6 s later.
    expect(ends.map(([n]) => n)).toEqual(['c', 'a', 'b']);
    expect(ends[0]![1]).toBeCloseTo(1.5, 9);
    expect(ends[1]![1]).toBeCloseTo(1.5 + (75 - 100 / 3) / 50, 9);
    expect(ends[2]![1]).toBeCloseTo(ends[1]![1], 12);
    expect(link.bytes).toBeCloseTo(210, 6);
  });

  /** Runs `q` to the end, throwing past `most` events: a timer set again at the same time forever is a failure, not a hang. */
  const runBounded = (q: EventQueue, most = 100_000): void => {
    let events = 0;
    q.run(() => {
      if (++events > most) throw new Error(`still running at t = ${q.now} s after ${most} events`);
    });
  };

  it('a transfer late in a replay completes, though its last bytes take less time than the clock can step (t = 1e6 s and 2^20 s)', () => {
    // At t = 2^20 s the clock steps by 2^-32 s, 23 bytes' time at 100 GB/s: a remainder of a few
    // bytes would be due at the same `now` again and again.
    for (const [start, rate, size] of [[1e6, 96e9, 1e9], [1e6, 100e9, 1e9 + 2], [2 ** 20, 100e9, 7e8 + 5]] as const) {
      const q = new EventQueue();
      const net = new Network(q);
      const link = net.link('l', rate);
      let ended = NaN;
      q.at(start, () => net.transfer(size, [link], Infinity, () => (ended = q.now)));
      runBounded(q);
      expect(ended).toBeCloseTo(start + size / rate, 6);
      // What it moved is its size, less at most the bytes of the few clock steps it may end early by.
      expect(Math.abs(link.bytes - size)).toBeLessThanOrEqual(1 + rate * ended * 2 ** -50);
    }
  });

  it('transfers sharing links at any time up to 2^40 s all complete, each once, none before its bytes could have moved', () => {
    fc.assert(
      fc.property(
        fc.double({ min: 0, max: 2 ** 40, noNaN: true }),
        fc.array(fc.record({ delay: fc.double({ min: 0, max: 1, noNaN: true }), bytes: fc.integer({ min: 1, max: 2 ** 40 }), path: fc.integer({ min: 0, max: 2 }), cap: fc.constantFrom(Infinity, 6e9, 1e3) }), { minLength: 1, maxLength: 20 }),
        (start, transfers) => {
          const q = new EventQueue();
          const net = new Network(q);
          const a = net.link('a', 96e9);
          const b = net.link('b', 50e9);
          const paths = [[a], [b], [a, b]];
          const begun = transfers.map(() => NaN);
          const ends = transfers.map(() => [] as number[]);
          transfers.forEach((t, i) => q.at(start + t.delay, () => {
            begun[i] = q.now;
            net.transfer(t.bytes, paths[t.path]!, t.cap, () => ends[i]!.push(q.now));
          }));
          runBounded(q);
          transfers.forEach((t, i) => {
            expect(ends[i]).toHaveLength(1);
            // Never sooner than its bytes take at its cap or its slowest link alone, less the last
            // byte and the few steps of the clock a remainder is allowed to be early by.
            const alone = Math.min(t.cap, ...paths[t.path]!.map((l) => l.bytesPerSec));
            const end = ends[i]![0]!;
            expect(end - begun[i]!).toBeGreaterThanOrEqual((t.bytes - 1) / alone - end * 2 ** -48);
          });
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe('experiment: the Mooncake importer', () => {
  const text = readFileSync(MOONCAKE_SLICE, 'utf8');

  it('infers sessions from prefix chains: each wait sits between two turns of one session, keyed by the earlier turn\'s chain', () => {
    const trace = mooncakeTrace(text);
    expect(trace.info.requests).toBe(800);
    expect(trace.waits.length).toBeGreaterThan(50);
    const requests = text.trim().split('\n').map((line) => JSON.parse(line));
    const chains = new Set(requests.map((r: { hash_ids: number[] }) => `0:${r.hash_ids.join(',')}`));
    const byAgent = new Map<string, Array<{ start: number; end: number }>>();
    for (const w of trace.waits) {
      expect(w.end).toBeGreaterThan(w.start);
      expect(w.tool).toBe('conversation');
      // The key is a real request's whole chain, and the context its input.
      expect(chains.has(w.keyId)).toBe(true);
      expect(w.sharedTokens).toBeLessThanOrEqual(w.tokens);
      if (!byAgent.has(w.agent)) byAgent.set(w.agent, []);
      byAgent.get(w.agent)!.push(w);
    }
    // One session's waits never overlap: each next one starts after the previous one's wake.
    for (const waits of byAgent.values()) for (let i = 1; i < waits.length; i++) expect(waits[i]!.start).toBeGreaterThan(waits[i - 1]!.end);
    // Times are the trace's: every wake is a request's arrival.
    const arrivals = new Set(requests.map((r: { timestamp: number }) => r.timestamp / 1000));
    for (const w of trace.waits) expect(arrivals.has(w.end)).toBe(true);
  });

  it('the widely shared leading block is no session: requests sharing only it are not chained', () => {
    const lines = [
      { timestamp: 0, input_length: 1024, output_length: 10, hash_ids: [0, 1] },
      { timestamp: 0, input_length: 1024, output_length: 10, hash_ids: [0, 2] },
      { timestamp: 0, input_length: 1024, output_length: 10, hash_ids: [0, 3] },
      { timestamp: 0, input_length: 1024, output_length: 10, hash_ids: [0, 4] },
      // Continues [0, 1] (its last block was partial): one wait, keyed by [0, 1].
      { timestamp: 60_000, input_length: 1600, output_length: 10, hash_ids: [0, 1, 5, 6] },
      // Extends [0, 1] again: a fork, a second agent demanding the same key.
      { timestamp: 90_000, input_length: 1600, output_length: 10, hash_ids: [0, 1, 7, 8] },
      // Shares only block 0 with everything: a new session, no wait.
      { timestamp: 120_000, input_length: 1024, output_length: 10, hash_ids: [0, 9] },
    ].map((l) => JSON.stringify(l)).join('\n');
    const trace = mooncakeTrace(lines);
    expect(trace.waits.map((w: { keyId: string; agent: string }) => w.keyId)).toEqual(['0:0,1', '0:0,1']);
    expect(new Set(trace.waits.map((w: { agent: string }) => w.agent)).size).toBe(2);
    expect(trace.waits[0].sharedTokens).toBe(512);
    // The turn's service time comes off the gap: 512 uncached tokens (the shared block is in the
    // prefix cache) at 10k/s plus 10 output tokens at 30 ms.
    expect(trace.waits[0].start).toBeCloseTo(0.0512 + 0.3, 9);
    expect(trace.waits[0].end).toBe(60);
  });

  it('every request is accounted for: a turn that arrives before the previous one is served makes no wait and is counted', () => {
    const lines = [
      // Served until 0.1024 s of prefill plus 100 output tokens at 30 ms: 3.1 s.
      { timestamp: 0, input_length: 1024, output_length: 100, hash_ids: [0, 1] },
      // Continues it at 1 s, before that: no wait, counted as overlapping.
      { timestamp: 1_000, input_length: 1600, output_length: 10, hash_ids: [0, 1, 5, 6] },
      // Continues that one well after it is served: one wait.
      { timestamp: 60_000, input_length: 2100, output_length: 10, hash_ids: [0, 1, 5, 6, 7] },
    ].map((l) => JSON.stringify(l)).join('\n');
    const trace = mooncakeTrace(lines);
    expect(trace.info).toMatchObject({ requests: 3, sessions: 1, overlapping: 1 });
    expect(trace.waits.map((w: { keyId: string }) => w.keyId)).toEqual(['0:0,1,5,6']);
  });

  it('more agents than the slice holds are tiled copies with their own agents and keys', () => {
    const one = mooncakeTrace(text);
    const sessions = one.info.sessionsWithWaits;
    const tiled = mooncakeTrace(text, { agents: sessions * 2 + 1 });
    expect(tiled.info.copies).toBe(3);
    expect(tiled.info.agents).toBe(sessions * 2 + 1);
    const keysOfCopy = (c: number) => new Set(tiled.waits.filter((w: { agent: string }) => w.agent.startsWith(`c${c}/`)).map((w: { keyId: string }) => w.keyId));
    for (const key of keysOfCopy(1)) expect(keysOfCopy(0).has(key)).toBe(false);
  });
});

describe('experiment: docs/experiment.md', () => {
  const doc = readFileSync(join(root, 'docs', 'experiment.md'), 'utf8');
  const names = POLICIES.map((p) => p.name);

  it("§ Reproducing's commands parse, read only what an earlier one wrote, and cover every preset, seed, size and policy of the figures", () => {
    const section = doc.slice(doc.indexOf('\n## Reproducing'));
    const block = /```sh\n([\s\S]*?)```/.exec(section)![1]!;
    const commands = block.replace(/\\\n\s*/g, '').split('\n').map((line) => line.trim()).filter((line) => line.length > 0);
    const prefix = 'node bin/waitprep.js experiment ';
    // A usage error exits 2: here it fails the test instead of ending the worker.
    const exit = vi.spyOn(process, 'exit').mockImplementation((code) => {
      throw new Error(`usage error (exit ${code})`);
    });
    const written = new Set<string>();
    const runs: Array<ReturnType<typeof experimentOptions>> = [];
    try {
      for (const command of commands) {
        expect(command.startsWith(prefix)).toBe(true);
        const [args, out] = command.slice(prefix.length).split(/ +> +/);
        const options = experimentOptions(args!.split(/ +/));
        if (options.from === null) runs.push(options);
        else for (const file of options.from) expect(written.has(file), `${file} is written before it is read`).toBe(true);
        // Reports are made on demand, outside docs/: nothing generated is committed there.
        if (options.html !== null) expect(options.html).toMatch(/^reports\//);
        if (out !== '/dev/null') written.add(out!);
      }
    } finally {
      exit.mockRestore();
    }
    for (const trace of ['generator', 'mooncake']) {
      for (const agents of [100, 1000, 5000]) {
        const covering = runs.filter((r) => r.trace === trace && r.agents.includes(agents));
        expect(covering.flatMap((r) => r.policies ?? names).sort(), `${trace}, ${agents} agents: every policy once`).toEqual([...names].sort());
        for (const r of covering) {
          expect(r.presets).toEqual(Object.keys(PRESETS));
          expect(r.seeds).toEqual([1, 2, 3]);
          expect(r.seconds).toBe(3600);
        }
      }
    }
  });

  it("§ Today's figures has a table of every policy, in report order, for each preset of each figure, and links no generated report", () => {
    const figures = doc.slice(doc.indexOf("\n## Today's figures"), doc.indexOf('\n## Findings'));
    const tables = figures.split(/^\*\*(?=[\w-]+\*\*, \w+ trace)/m).slice(1);
    // One table per preset and trace, each with a column per agent count.
    expect(tables).toHaveLength(3 * 2);
    for (const table of tables) {
      const rows = [...table.matchAll(/^\| ([\w+-]+) \|/gm)].map((m) => m[1]).filter((name) => name !== 'policy');
      expect(rows).toEqual(names);
    }
    expect(figures).not.toMatch(/\]\([\w./-]+\.html\)/);
  });
});
