import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import {
  artifactKey,
  nativeLibraryPath,
  openLeaseTable,
  unlinkLeaseTable,
  type ArtifactKeyFields,
  type LeaseTable,
} from '../../lib/index.js';
import { BACKEND_MISS_REASONS, TABLE_MISS_REASON } from '../../lib/coordinator/miss-reasons.js';
import { TARGET_A, TARGET_B } from '../helpers.js';
import { NATIVE, runsIf } from '../skip-reasons.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const hasPython = spawnSync('python3', ['--version'], { encoding: 'utf8' }).status === 0;
const libPath = nativeLibraryPath();

/** Three pages of one prompt: the fields both sides build their keys from. */
const FIELDS: ArtifactKeyFields[] = [0, 1, 2].map((page) => ({
  source: {
    snapshotKind: 'kv-page',
    runtime: 'python-runtime',
    model: 'tiny-model',
    adapter: 'none',
    profile: 'default',
    positionPolicy: 'absolute',
    task: 'chat',
    namespace: `tenant-${page}`,
    tokenLayout: [101, 2023, 2003, page],
    extra: { dtype: 'bf16' },
  },
  sourcePageGeneration: page + 1,
  codec: 'identity',
  codecConfig: 'v0',
  representationVersion: 3,
}));

interface Published {
  event: 'published';
  table: string;
  pid: number;
  keys: {
    index: number;
    digest: string;
    slot: number;
    generation: string;
    meta: { sizeBytes: string; location: string; checksum: string; codecId: number; representationVersion: number };
  }[];
  deviceWrites: { index: number; result: string }[];
}

/** The producer script as a child process, with its stdout read one JSON line at a time. */
class Producer {
  readonly child: ChildProcessWithoutNullStreams;
  readonly #lines: string[] = [];
  readonly #waiters: ((line: string | null) => void)[] = [];
  #ended = false;
  stderr = '';
  readonly exited: Promise<number | null>;

  constructor(args: string[]) {
    this.child = spawn('python3', ['examples/python/runtime_producer.py', ...args], {
      cwd: root,
      env: { ...process.env, WAITPREP_LIBRARY: libPath!, PYTHONPATH: `${root}python`, PYTHONDONTWRITEBYTECODE: '1' },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    this.child.stderr.setEncoding('utf8').on('data', (chunk: string) => (this.stderr += chunk));
    const rl = createInterface({ input: this.child.stdout });
    rl.on('line', (line) => {
      const waiter = this.#waiters.shift();
      if (waiter) waiter(line);
      else this.#lines.push(line);
    });
    rl.on('close', () => {
      this.#ended = true;
      for (const waiter of this.#waiters.splice(0)) waiter(null);
    });
    this.exited = new Promise((resolve) => this.child.on('exit', (code) => resolve(code)));
  }

  /** The next JSON line; fails (with the script's stderr) on end of output or after `ms`. */
  async next<T = Record<string, unknown>>(ms = 15_000): Promise<T> {
    const queued = this.#lines.shift();
    const line =
      queued ??
      (this.#ended
        ? null
        : await new Promise<string | null>((resolve, reject) => {
            const timer = setTimeout(() => reject(new Error(`no line from runtime_producer.py in ${ms} ms; stderr:\n${this.stderr}`)), ms);
            this.#waiters.push((l) => {
              clearTimeout(timer);
              resolve(l);
            });
          }));
    if (line === null) throw new Error(`runtime_producer.py ended its output; stderr:\n${this.stderr}`);
    return JSON.parse(line) as T;
  }

  send(command: string): void {
    this.child.stdin.write(`${command}\n`);
  }

  async evict(): Promise<string[]> {
    this.send('evict');
    const reply = await this.next<{ event: string; results: string[] }>();
    expect(reply.event).toBe('evict');
    return reply.results;
  }
}

describe.runIf(runsIf('Python runtime and Node share a table', NATIVE, [hasPython, 'no python3 on PATH'], [libPath !== null, 'libwaitprep.so is not built']))('Python runtime (the waitprep package over libwaitprep.so) and Node share a table', () => {
  const cleanup: (() => void)[] = [];
  afterEach(() => {
    for (const fn of cleanup.splice(0).reverse()) fn();
  });

  it('Python publishes; Node pins with the same keys and metadata; evict respects pins; device records match', async () => {
    const name = `wp-pyinterop-${process.pid}-${Date.now()}`;
    const keys = FIELDS.map((fields) => artifactKey(fields));
    cleanup.push(() => unlinkLeaseTable(name));
    const producer = new Producer([
      '--table',
      name,
      '--capacity',
      '32',
      '--keys',
      JSON.stringify(FIELDS),
      '--device-write',
      JSON.stringify({ key: 0, device: TARGET_A.device, arena: TARGET_A.arena, arenaGeneration: TARGET_A.arenaGeneration, writeSeq: 9 }),
    ]);
    cleanup.push(() => {
      if (producer.child.exitCode === null && producer.child.signalCode === null) producer.child.kill('SIGKILL');
    });

    const published = await producer.next<Published>();
    expect(published.event, producer.stderr).toBe('published');
    expect(published.table).toBe(name);
    expect(published.keys.map((k) => k.index)).toEqual([0, 1, 2]);
    // The Python reference encoder and artifactKey() give the same digest.
    expect(published.keys.map((k) => k.digest)).toEqual(keys.map((k) => k.hex));
    expect(published.deviceWrites).toEqual([expect.objectContaining({ index: 0, result: 'recorded' })]);

    let table: LeaseTable | null = openLeaseTable({ name, role: 'consumer', implementation: 'native' });
    cleanup.push(() => table?.close());
    expect(table.implementation).toBe('native');
    expect(table.capacity).toBe(32);

    // Host pins: every key hits, with exactly the slot, generation and metadata Python published.
    const leases = keys.map((key, i) => {
      const lease = table!.tryPin(key);
      if (lease.kind !== 'lease') throw new Error(`key ${i}: miss ${lease.reason}`);
      const p = published.keys[i]!;
      expect(lease.readiness).toBe('host');
      expect(lease.slot).toBe(p.slot);
      expect(BigInt(lease.generation)).toBe(BigInt(p.generation));
      const meta = lease.meta as Record<string, number | bigint>;
      expect({
        sizeBytes: BigInt(meta.sizeBytes!),
        location: BigInt(meta.location!),
        checksum: BigInt(meta.checksum!),
        codecId: meta.codecId,
        representationVersion: meta.representationVersion,
      }).toEqual({
        sizeBytes: BigInt(p.meta.sizeBytes),
        location: BigInt(p.meta.location),
        checksum: BigInt(p.meta.checksum),
        codecId: p.meta.codecId,
        representationVersion: p.meta.representationVersion,
      });
      // What runtime_producer.py's prepare() publishes, independently of what it printed.
      expect(BigInt(meta.sizeBytes!)).toBe(65536n * BigInt(i + 1));
      expect(BigInt(meta.location!)).toBe(0x7f00_0000_0000_0000n + BigInt(i) * 0x10_0000n);
      expect(meta.codecId).toBe(1);
      expect(meta.representationVersion).toBe(3);
      return lease;
    });

    // Device readiness: the record Python wrote for key 0 matches TARGET_A only.
    const onDevice = table.tryPin(keys[0]!, { readiness: 'device', target: TARGET_A });
    expect(onDevice).toMatchObject({ kind: 'lease', readiness: 'device', slot: published.keys[0]!.slot });
    if (onDevice.kind === 'lease') onDevice.close();
    expect(table.tryPin(keys[0]!, { readiness: 'device', target: TARGET_B })).toEqual({ kind: 'miss', reason: 'arena-generation-mismatch' });
    expect(table.tryPin(keys[0]!, { readiness: 'device', target: { ...TARGET_A, device: 'GPU-00000000-0000-0000-0000-000000000001' } })).toEqual({
      kind: 'miss',
      reason: 'device-mismatch',
    });
    expect(table.tryPin(keys[1]!, { readiness: 'device', target: TARGET_A })).toEqual({ kind: 'miss', reason: 'no-device-record' });

    // Hold key 1 only: Python's try_evict reports it pinned and evicts the others.
    leases[0]!.close();
    leases[2]!.close();
    expect(await producer.evict()).toEqual(['evicted', 'pinned', 'evicted']);
    expect(table.tryPin(keys[0]!)).toEqual({ kind: 'miss', reason: 'absent' });
    expect(table.tryPin(keys[2]!)).toEqual({ kind: 'miss', reason: 'absent' });
    // The pinned artifact stayed READY and pinnable.
    const again = table.tryPin(keys[1]!);
    expect(again).toMatchObject({ kind: 'lease', slot: published.keys[1]!.slot });
    if (again.kind === 'lease') again.close();

    // Released: now it goes.
    leases[1]!.close();
    expect(await producer.evict()).toEqual(['absent', 'evicted', 'absent']);
    expect(table.tryPin(keys[1]!)).toEqual({ kind: 'miss', reason: 'absent' });

    producer.send('exit');
    expect(await producer.exited, producer.stderr).toBe(0);
    expect(producer.stderr).toBe('');

    table.close();
    table = null;
    expect(unlinkLeaseTable(name)).toBe(true);
  });

  it('the package checks its status numbers against the library at load, names a renumbered one, and names misses as Node does', () => {
    const script = [
      'import json, waitprep',
      'from waitprep import _abi, library',
      'lib = waitprep.load_library()',
      'spell = lambda status: library.status_name(lib, status)',
      'renumbered = dict(_abi.STATUS, WP_MISS_EVICTING=99)',
      'print(json.dumps({"loaded": library.status_mismatch(spell), "renumbered": library.status_mismatch(spell, renumbered), "reasons": _abi.MISS_REASON, "all": waitprep.MISS_REASONS}))',
    ].join('\n');
    const run = spawnSync('python3', ['-c', script], {
      cwd: root,
      env: { ...process.env, WAITPREP_LIBRARY: libPath!, PYTHONPATH: `${root}python`, PYTHONDONTWRITEBYTECODE: '1' },
      encoding: 'utf8',
    });
    expect(run.status, run.stderr).toBe(0);
    expect(JSON.parse(run.stdout)).toEqual({
      loaded: null,
      renumbered: 'status WP_MISS_EVICTING is 99 in this package, but the library spells 99 as WP_UNKNOWN',
      reasons: Object.fromEntries(Object.entries(TABLE_MISS_REASON)),
      all: [...Object.values(TABLE_MISS_REASON), ...BACKEND_MISS_REASONS],
    });
  });

  it('a second producer is refused while Python holds the role, and Node may produce after Python exits', async () => {
    const name = `wp-pyinterop-role-${process.pid}-${Date.now()}`;
    cleanup.push(() => unlinkLeaseTable(name));
    const producer = new Producer(['--table', name, '--keys', JSON.stringify(FIELDS.slice(0, 1))]);
    cleanup.push(() => {
      if (producer.child.exitCode === null && producer.child.signalCode === null) producer.child.kill('SIGKILL');
    });
    const published = await producer.next<Published>();
    expect(published.event, producer.stderr).toBe('published');

    expect(() => openLeaseTable({ name, role: 'producer', implementation: 'native' })).toThrow(
      expect.objectContaining({ code: 'ERR_WRITER_EXISTS' }),
    );
    producer.send('exit');
    expect(await producer.exited, producer.stderr).toBe(0);

    const table = openLeaseTable({ name, role: 'producer', implementation: 'native' });
    cleanup.push(() => table.close());
    expect(table.tryEvict(artifactKey(FIELDS[0]!))).toBe('evicted');
  });
});
