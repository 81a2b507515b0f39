// The waitprep command line as a user first meets it: help and version for the command and each
// subcommand (exit 0, on stdout), and the usage errors that say what was wrong and what is valid
// (exit 2, one message on stderr). Needs the built dist/ (bin/ imports the package by name).
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const BIN = join(import.meta.dirname, '..', '..', 'bin', 'waitprep.js');
const VERSION = (JSON.parse(readFileSync(join(import.meta.dirname, '..', '..', 'package.json'), 'utf8')) as { version: string }).version;
const dir = mkdtempSync(join(tmpdir(), 'waitprep-cli-help-'));

afterAll(() => rmSync(dir, { recursive: true, force: true }));

function cli(...args: string[]): { status: number | null; stdout: string; stderr: string } {
  const env = { ...process.env, WAITPREP_NO_FALLBACK_WARNING: '1' };
  const result = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', env, timeout: 30_000 });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

describe('waitprep help and version', () => {
  it.each([['--help'], ['-h'], ['help'], []])('waitprep %s prints the usage on stdout and exits 0', (...args: string[]) => {
    const run = cli(...args);
    expect({ status: run.status, stderr: run.stderr }).toEqual({ status: 0, stderr: '' });
    expect(run.stdout).toMatch(/^usage: waitprep <command>/);
    for (const command of ['demo', 'inspect', 'reap', 'clean']) expect(run.stdout).toMatch(new RegExp(`^ {2}${command} `, 'm'));
  });

  it("waitprep --version prints the package's version and exits 0", () => {
    const run = cli('--version');
    expect({ status: run.status, stderr: run.stderr }).toEqual({ status: 0, stderr: '' });
    expect(run.stdout).toBe(`waitprep ${VERSION}\n`);
  });

  it.each([
    ['demo', /^usage: waitprep demo \[options\]/],
    ['inspect', /^usage: waitprep inspect <table> \[--json\]/],
    ['reap', /^usage: waitprep reap <table> \[--json\]/],
    ['clean', /^usage: waitprep clean \[<table>\.\.\.\] \[--dry-run\] \[--json\]/],
  ])('waitprep %s --help (and -h) prints that command\'s usage and exits 0', (command, usage) => {
    for (const flag of ['--help', '-h']) {
      const run = cli(command, flag);
      expect({ status: run.status, stderr: run.stderr }).toEqual({ status: 0, stderr: '' });
      expect(run.stdout).toMatch(usage);
    }
  });

  it.each([
    ['demo', /^usage: waitprep demo \[options\]/],
    ['experiment', /^usage: waitprep experiment \[options\]/],
    ['inspect', /^usage: waitprep inspect <table>/],
    ['doctor', /^usage: waitprep doctor \[--json\]/],
  ])("waitprep help %s prints that command's usage, not the general one", (command, usage) => {
    const run = cli('help', command);
    expect({ status: run.status, stderr: run.stderr }).toEqual({ status: 0, stderr: '' });
    expect(run.stdout).toMatch(usage);
  });

  it('waitprep help of an unknown command is exit 2', () => {
    const run = cli('help', 'no-such-command');
    expect(run.status).toBe(2);
    expect(run.stderr).toMatch(/^waitprep help: unknown command "no-such-command"/);
  });

  it('after `--`, --help is a table name, not a request for help', () => {
    const run = cli('inspect', '--', '--help');
    expect(run.stdout).not.toMatch(/^usage:/);
    expect(run.status).not.toBe(0);
  });

  it('an unknown command is exit 2 and points at --help', () => {
    const run = cli('no-such-command');
    expect({ status: run.status, stderr: run.stderr }).toEqual({ status: 2, stderr: expect.any(String) });
    expect(run.stderr).toMatch(/unknown command "no-such-command"; try `waitprep --help`/);
  });
});

describe('waitprep demo usage errors', () => {
  it.each([
    [['--agents', '-3'], '--agents must be an integer from 1 to 1000000, got "-3"'],
    [['--agents', '2.5'], '--agents must be an integer from 1 to 1000000, got "2.5"'],
    [['--seconds', '0'], '--seconds must be a number > 0, got "0"'],
    [['--seconds', ''], '--seconds must be a number > 0, got ""'],
    [['--seed', 'x'], '--seed must be a safe integer, got "x"'],
    [['--time-scale', '-1'], '--time-scale must be a number > 0, got "-1"'],
    [['--budget-mb', '0'], '--budget-mb must be a number > 0, got "0"'],
    [['--metrics-port', '70000'], '--metrics-port must be an integer from 0 to 65535, got "70000"'],
    [['--storage-exit-after', '-1'], '--storage-exit-after must be an integer >= 0, got "-1"'],
    [['--miss-cost-ms', '-5'], '--miss-cost-ms must be a number >= 0, got "-5"'],
    [['--agents'], '--agents must be an integer from 1 to 1000000, got nothing'],
  ])('demo %j: says the valid range and what came, exit 2', (args, message) => {
    const run = cli('demo', ...args);
    expect(run.status).toBe(2);
    expect(run.stdout).toBe('');
    expect(run.stderr.split('\n')[0]).toBe(`waitprep demo: ${message}`);
  });

  it.each([['--agents', '3'], ['--compare'], ['--seconds', '1'], ['--trace', 'x.jsonl']])('demo --scripted %s: refused, --scripted takes only --json', (...flags: string[]) => {
    const run = cli('demo', '--scripted', ...flags);
    expect(run.status).toBe(2);
    expect(run.stdout).toBe('');
    expect(run.stderr.split('\n')[0]).toBe(`waitprep demo: --scripted takes only --json, got ${JSON.stringify(flags[0])}`);
  });

  it('a missing --trace file is one line naming it, exit 2', () => {
    const missing = join(dir, 'missing.jsonl');
    for (const extra of [[], ['--compare']]) {
      const run = cli('demo', '--trace', missing, ...extra);
      expect(run.status).toBe(2);
      expect(run.stdout).toBe('');
      expect(run.stderr).toBe(`waitprep demo: --trace ${JSON.stringify(missing)}: no such file\n`);
    }
  });

  it('a malformed --trace file is one line saying where, exit 2', () => {
    const bad = join(dir, 'bad.jsonl');
    writeFileSync(bad, '{"t": 0, "agent": "a"}\n');
    const run = cli('demo', '--trace', bad);
    expect(run.status).toBe(2);
    expect(run.stderr.trimEnd().split('\n')).toHaveLength(1);
    expect(run.stderr).toMatch(/^waitprep demo: --trace ".*bad\.jsonl": .*line 1/);
  });
});

describe('waitprep inspect, reap and clean given a /dev/shm path', () => {
  it.each([['inspect'], ['reap'], ['clean']])('%s /dev/shm/NAME suggests the bare name, exit 2', (command) => {
    const run = cli(command, '/dev/shm/engine0-kv');
    expect(run.status).toBe(2);
    expect(run.stderr).toContain(`"/dev/shm/engine0-kv" is a path; name the table instead: waitprep ${command} engine0-kv`);
  });
});

describe('without the addon: the fallback warning never comes before a usage error', () => {
  // A copy of the package as an install without a compiler leaves it: no build/, no prebuilds/,
  // so importing it falls back and (by default) warns.
  const root = join(import.meta.dirname, '..', '..');
  const pkg = join(dir, 'unbuilt');
  for (const part of ['dist', 'bin', 'demo', 'experiment', 'worker', 'scripts', 'package.json']) cpSync(join(root, part), join(pkg, part), { recursive: true });
  symlinkSync(join(root, 'node_modules'), join(pkg, 'node_modules'));

  /** The command in the copy, with the warning on (the test config turns it off). */
  function unbuilt(...args: string[]): { status: number | null; stdout: string; stderr: string } {
    const { WAITPREP_NO_FALLBACK_WARNING: _w, WAITPREP_IMPLEMENTATION: _i, ...env } = process.env;
    const result = spawnSync(process.execPath, [join(pkg, 'bin', 'waitprep.js'), ...args], { encoding: 'utf8', env, timeout: 30_000 });
    return { status: result.status, stdout: result.stdout, stderr: result.stderr };
  }

  it.each([
    [['demo', '--bogus'], 'waitprep demo: unknown option "--bogus"'],
    [['demo', '--agents', '0'], 'waitprep demo: --agents must be an integer from 1 to 1000000, got "0"'],
    [['experiment', '--agents', 'x'], 'waitprep experiment: --agents: expected a positive integer, got "x" (`waitprep experiment --help` lists the options)'],
    [['inspect'], 'waitprep inspect: the table name is missing'],
  ])('%j: the usage error is the first line, and nothing warns', (args, first) => {
    const run = unbuilt(...args);
    expect(run.status).toBe(2);
    expect(run.stderr.split('\n')[0]).toBe(first);
    expect(run.stderr).not.toContain('WAITPREP_FALLBACK');
  });

  it("the operator's commands give the same advice on how to get the addon as the install step and the loader", () => {
    const advice = createRequire(import.meta.url)('../../scripts/build-advice.cjs') as string;
    const run = unbuilt('inspect', 'engine0-kv');
    expect(run.status).toBe(5);
    expect(run.stderr).toMatch(/the native addon is not loaded, so no shared-memory table can be opened: /);
    expect(run.stderr).toContain(`To get it: ${advice}`);
    expect(unbuilt('doctor').stdout).toContain(`to get the addon: ${advice}`);
    expect(run.stderr).not.toContain('WAITPREP_FALLBACK');
  });

  it('waitprep doctor says the fallback is in use, why, and how to get the addon (exit 1)', () => {
    const run = unbuilt('doctor');
    expect(run.status).toBe(1);
    expect(run.stderr).toBe('');
    expect(run.stdout).toMatch(/^implementation: js \(no Node-API addon is built, and the install step left no record/m);
    expect(run.stdout).toMatch(/^libwaitprep\.so: not built$/m);
    expect(run.stdout).toMatch(/^to get the addon: install a C\+\+ compiler, make and python3, then run `npm rebuild waitprep`/m);
    const json = JSON.parse(unbuilt('doctor', '--json').stdout);
    expect(json).toMatchObject({ implementation: 'js', library: null, install: null, ok: false });
  });
});
