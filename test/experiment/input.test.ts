// `waitprep experiment` under hostile input (experiment/cli.js, traces.js, run.js): every malformed
// trace, file that is not a trace, and bad option ends in one line on stderr naming the line and
// field (or the option), exit 2, with no stack; a FIFO, device or directory is refused without
// being read; a trace whose time span would need more memory (its memory samples) than a run keeps
// is refused before any replay, with what it would need; a late one within that runs. Each case is
// run as a real process with a 256 MiB heap, so an input that makes the CLI allocate without
// bound fails here instead of taking the machine.
import { spawnSync } from 'node:child_process';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { brotliCompressSync, gzipSync } from 'node:zlib';
import { afterAll, describe, expect, it } from 'vitest';

const bin = join(import.meta.dirname, '..', '..', 'bin', 'waitprep.js');
const dir = mkdtempSync(join(tmpdir(), 'wp-experiment-input-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Runs `waitprep experiment` with `args`, after the options of a small run (1 agent, 1 seed, 1 policy) unless `--from` is among them. */
function experiment(args: string[]): { status: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string } {
  const small = args.includes('--from') ? [] : ['--agents', '1', '--seeds', '1', '--policies', 'fifo-1', '--quiet'];
  const run = spawnSync(process.execPath, [bin, 'experiment', ...small, ...args], {
    encoding: 'utf8',
    // A hang guard, not a timing: reading a FIFO or /dev/zero would never end.
    timeout: 60_000,
    env: { ...process.env, NODE_OPTIONS: '--max-old-space-size=256' },
  });
  return { status: run.status, signal: run.signal, stdout: run.stdout, stderr: run.stderr };
}

/**
 * What every refusal must be: exit 2, one line on stderr matching `says`, no stack, and nothing
 * on stdout unless `printed` (a report file that cannot be written is found after the run).
 */
function expectRefused(args: string[], says: RegExp, { printed = false } = {}): string {
  const run = experiment(args);
  expect({ status: run.status, signal: run.signal }, run.stderr).toEqual({ status: 2, signal: null });
  const lines = run.stderr.split('\n').filter((line) => line.length > 0);
  expect(lines, run.stderr).toHaveLength(1);
  expect(lines[0]).toMatch(/^waitprep experiment: /);
  expect(lines[0]).toMatch(says);
  expect(run.stderr).not.toMatch(/^\s+at /m);
  if (!printed) expect(run.stdout).toBe('');
  return lines[0]!;
}

/** A JSONL trace file made of `events` (objects, or raw line text). */
function traceFile(name: string, events: Array<object | string>): string {
  const path = join(dir, name);
  writeFileSync(path, events.map((e) => (typeof e === 'string' ? e : JSON.stringify(e))).join('\n') + '\n');
  return path;
}

const key = { task: 't', namespace: 'n', tokens: [{ seed: 's', length: 512 }] };
const wait = (t: number, extra: object = {}) => ({ t, agent: 'a', generation: 0, event: 'wait', key, ...extra });
const wake = (t: number, extra: object = {}) => ({ t, agent: 'a', generation: 0, event: 'wake', ...extra });

describe('waitprep experiment: a malformed JSONL trace names the line and field, exit 2', () => {
  const cases: Array<[string, Array<object | string>, RegExp]> = [
    ['bad JSON', [wait(0), '{"t": 1, "agent": '], /line 2 to be one JSON object, got invalid JSON/],
    ['a line that is not an object', ['[1, 2]'], /line 1 to be an object/],
    ['NaN as a time', [wait(0, { t: 'NaN' })], /`t` on line 1 to be a finite number >= 0/],
    ['an infinite time (1e999)', ['{"t":1e999,"agent":"a","event":"wake"}'], /`t` on line 1 to be a finite number >= 0/],
    ['a negative time', [wait(-1)], /`t` on line 1 to be a finite number >= 0/],
    ['a time that goes back', [wait(5), wake(4)], /`t` on line 2 to be >= 5/],
    ['a negative generation', [wait(0, { generation: -1 })], /`generation` on line 1 to be a non-negative safe integer/],
    ['a fractional generation', [wait(0, { generation: 1.5 })], /`generation` on line 1/],
    ['a generation of 2^53', [wait(0, { generation: 2 ** 53 })], /`generation` on line 1/],
    ['a wake of a generation never waited', [wait(0), wake(1, { generation: 3 })], /`generation` on line 2/],
    ['a token length of 0', [wait(0, { key: { ...key, tokens: [{ seed: 's', length: 0 }] } })], /`key\.tokens\[0\]\.length` on line 1/],
    ['a token length over the maximum', [wait(0, { key: { ...key, tokens: [{ seed: 's', length: 2 ** 24 + 1 }] } })], /`key\.tokens\[0\]\.length` on line 1/],
    ['a fractional token length', [wait(0, { key: { ...key, tokens: [{ seed: 's', length: 2.5 }] } })], /`key\.tokens\[0\]\.length` on line 1/],
    ['a token id of 2^32', [wait(0, { key: { ...key, tokens: [[1, 2 ** 32]] } })], /`key\.tokens\[0\]\[1\]` on line 1/],
    ['no token segments', [wait(0, { key: { ...key, tokens: [] } })], /`key\.tokens` on line 1/],
    ['a wait without a key', [{ t: 0, agent: 'a', event: 'wait' }], /`key` on line 1/],
    ['an unknown field', [wait(0, { priority: 1 })], /priority/],
    ['an unknown event', [wait(0, { event: 'sleep' })], /`event` on line 1/],
    ['deeply nested JSON', ['['.repeat(100_000)], /line 1 to be one JSON object, got invalid JSON/],
  ];
  it.each(cases)('%s', (name, events, says) => {
    const path = traceFile(`${name.replace(/\W+/g, '-')}.jsonl`, events);
    expectRefused(['--trace', path], new RegExp(`--trace: ${JSON.stringify(path).replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}: .*${says.source}`));
  });
});

describe('waitprep experiment: what is not a trace file is refused without being read', () => {
  it('a missing file, a directory, /dev/zero, /dev/null (a device) and a FIFO', () => {
    expectRefused(['--trace', join(dir, 'no-such.jsonl')], /--trace: cannot read ".*no-such\.jsonl": no such file/);
    const sub = join(dir, 'a-directory');
    mkdirSync(sub);
    expectRefused(['--trace', sub], /is a directory, not a regular file: refused without reading it/);
    expectRefused(['--trace', '/dev/zero'], /"\/dev\/zero" is a character device, not a regular file/);
    expectRefused(['--mooncake-file', '/dev/null', '--trace', 'mooncake'], /--mooncake-file: "\/dev\/null" is a character device/);
    // Nobody writes to this FIFO: opening it to read would wait forever, and so would this test.
    const fifo = join(dir, 'fifo');
    execFileSync('mkfifo', [fifo]);
    expectRefused(['--trace', fifo], /is a FIFO, not a regular file: refused without reading it/);
    expectRefused(['--from', fifo], /--from: ".*fifo" is a FIFO/);
  });

  it('a corrupt .gz or .br Mooncake file, and a saved output that is not JSON', () => {
    const gz = join(dir, 'corrupt.jsonl.gz');
    writeFileSync(gz, gzipSync('{"timestamp": 0}\n').subarray(0, 12));
    expectRefused(['--trace', 'mooncake', '--mooncake-file', gz], /--mooncake-file: ".*corrupt\.jsonl\.gz" is not gzip-compressed data/);
    const br = join(dir, 'corrupt.jsonl.br');
    writeFileSync(br, Buffer.from('not brotli at all'));
    expectRefused(['--trace', 'mooncake', '--mooncake-file', br], /--mooncake-file: ".*corrupt\.jsonl\.br" is not Brotli-compressed data/);
    const saved = join(dir, 'saved.json');
    writeFileSync(saved, '{"experiment": ');
    expectRefused(['--from', saved], /--from: ".*saved\.json" is not one JSON object/);
  });
});

describe('waitprep experiment: a malformed Mooncake line names the line and field, exit 2', () => {
  const request = { timestamp: 0, input_length: 1000, output_length: 10, hash_ids: [1, 2] };
  const cases: Array<[string, Array<object | string>, RegExp]> = [
    ['bad JSON', [request, '{"timestamp": '], /line 2: not one JSON object/],
    ['a negative timestamp', [{ ...request, timestamp: -5 }], /line 1: expected `timestamp` to be a finite number of milliseconds >= 0, got -5/],
    ['a timestamp that is a string', [{ ...request, timestamp: '0' }], /line 1: expected `timestamp`/],
    ['a fractional input length', [{ ...request, input_length: 1.5 }], /line 1: expected `input_length` to be an integer/],
    ['an output length over the maximum', [{ ...request, output_length: 1e12 }], /line 1: expected `output_length` to be an integer in \[0, 16777216\]/],
    ['no hash ids', [{ ...request, hash_ids: [] }], /line 1: expected `hash_ids` to be a non-empty array/],
    ['a negative hash id', [request, { ...request, hash_ids: [1, -2] }], /line 2: expected `hash_ids\[1\]` to be an integer in \[0, 2\^32-1\]/],
  ];
  it.each(cases)('%s', (name, lines, says) => {
    const path = traceFile(`mooncake-${name.replace(/\W+/g, '-')}.jsonl`, lines);
    expectRefused(['--trace', 'mooncake', '--mooncake-file', path], new RegExp(`--mooncake-file: ".*": ${says.source}`));
  });

  it('a .br Mooncake file whose timestamps span 10^15 ms is refused before replaying, naming the memory', () => {
    const path = join(dir, 'mooncake-long.jsonl.br');
    const lines = [request, { ...request, timestamp: 1e15, hash_ids: [1, 2, 3] }].map((r) => JSON.stringify(r)).join('\n');
    writeFileSync(path, brotliCompressSync(lines));
    expectRefused(['--trace', 'mooncake', '--mooncake-file', path], /refused before replaying: a replay samples memory .* GiB.*; --sample-seconds [\d.e+]+ or more would fit$/);
  });
});

describe('waitprep experiment: bad options name the option, exit 2', () => {
  it.each([
    [['--agents', '1e12'], /--agents: expected at most 1000000 agents, got "1e12"/],
    [['--agents', '0'], /--agents: expected a positive integer, got "0"/],
    [['--agents', 'many'], /--agents: expected a positive integer/],
    [['--seconds', 'NaN'], /--seconds: expected a number > 0, got "NaN"/],
    [['--sample-seconds', '0'], /--sample-seconds: expected a number > 0/],
    [['--shared-prefix-tokens=-5'], /--shared-prefix-tokens: expected an integer >= 0, got "-5"/],
    [['--seeds', '1.5'], /--seeds: expected an integer/],
  ])('%j', (args, says) => {
    expectRefused(args as string[], says);
  });

  it('an --html file that cannot be written (its folder would sit under a regular file)', () => {
    const file = join(dir, 'a-regular-file');
    writeFileSync(file, '');
    expectRefused(['--html', join(file, 'sub', 'report.html'), '--seconds', '60'], /--html: cannot write ".*report\.html": ENOTDIR/, { printed: true });
  });

  it('a sampling interval that would keep too many samples is refused with the memory, and the interval it names runs', () => {
    const said = expectRefused(['--seconds', '600', '--sample-seconds', '0.00001'], /--seconds: the generated trace of 1 agents, seed 1: refused before replaying: a replay samples memory every 0\.00001 s .* about \d+ (MiB|GiB) .*; --sample-seconds [\d.e-]+ or more would fit$/);
    const fits = /--sample-seconds ([\d.e-]+) or more would fit/.exec(said)![1]!;
    const run = experiment(['--seconds', '600', '--sample-seconds', fits]);
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/^fifo-1 +\d/m);
  });
});

describe('waitprep experiment: a trace with a late or long time span', () => {
  /** Two turns of one agent from `start`, their context `tokens` long. */
  const events = (start: number, tokens = 512) => {
    const context = { key: { ...key, tokens: [{ seed: 's', length: tokens }] } };
    return [wait(start, context), wake(start + 2), wait(start + 3, { ...context, generation: 1 }), wake(start + 9, { generation: 1 })];
  };

  it.each([
    ['t = 1e12', 1e12],
    ['t = 2^53', 2 ** 53],
  ])('a two-line trace ending at %s is refused before replaying, with the memory its samples would need', (_, t) => {
    const path = traceFile(`long-${t}.jsonl`, [wait(0), wake(t)]);
    expectRefused(['--trace', path], /refused before replaying: a replay samples memory every 10 s from t = 0 to its last event \(line 2, field t\) at t = \d+ s: \d+ samples per replay, 2 replays' worth kept by this run, about [\d.]+ GiB \(a run keeps at most \d+ samples, about 256 MiB\); --sample-seconds [\d.e+]+ or more would fit$/);
  });

  it('one that starts at t = 1e6 s runs, with the figures of the same trace shifted to start at 0', () => {
    // The replay's clock steps by about 1e-10 s there, less than a byte's time on the fastest
    // links: a transfer's last bytes can be due sooner than the clock can step. 2,048 tokens
    // leave such a remainder on this preset.
    const rows = (run: ReturnType<typeof experiment>) => run.stdout.split('\n').filter((line) => /^fifo-1 /.test(line));
    const late = experiment(['--trace', traceFile('late.jsonl', events(1e6, 2048))]);
    expect(late.status, late.stderr).toBe(0);
    const shifted = experiment(['--trace', traceFile('shifted.jsonl', events(0, 2048))]);
    expect(shifted.status, shifted.stderr).toBe(0);
    expect(rows(late).length).toBeGreaterThan(0);
    expect(rows(late)).toEqual(rows(shifted));
  });

  it('one that starts so late that its samples would not fit is refused, saying to shift it', () => {
    const later = traceFile('later.jsonl', events(1e8));
    expectRefused(['--trace', later], /refused before replaying: a replay samples memory every 10 s from t = 0 to its last event \(line 4, field t\) at t = 100000009 s: .*; it starts at t = 100000000 s: shift its times to start near 0$/);
  });
});
