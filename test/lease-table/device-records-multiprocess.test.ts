// Device records under real concurrency: a producer keeps rewriting the device records of a few
// published keys (and now and then evicts and republishes one), while pinners in child processes
// (native table, POSIX shared memory) or in worker_threads (JavaScript fallback,
// SharedArrayBuffer) pin with readiness 'device' against many targets. Three variants: native
// with the producer in this process; native with a producer in C over libwaitprep.so that
// rewrites records in a tight loop (compiled here with cc; a JavaScript producer writes too
// slowly for a pinner's read to overlap a write often enough to catch a broken native seqlock);
// the JavaScript fallback with the producer in this thread.
//
// The producer only ever writes these whole records (device, arena, arenaGeneration):
//   (U, A1, G1) and (U, A2, G2)   -- arena and arena generation always change together;
//   (U(k), k, k) for k in K_VALUES -- every field derived from k, the device UUID too.
// The pinners (test/fixtures/device-pinner.mjs, which imports ../../dist/index.js: build
// first) ask for those ("written" targets: hits expected) and for triples that mix fields of
// two different records or name values never written, such as (U, A1, G2) or (U(k), k, k + 1).
// A hit on one of those could only come from a torn read of the seqlocked record (or a record
// that was never written), so every such hit is counted as a violation.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { childWithResult, stepUntilEnded, workerWithResult, type Running } from '../children.js';
import { artifactKey, nativeLibraryPath, openLeaseTable, unlinkLeaseTable, type LeaseTable } from '../../lib/index.js';
import { LOCATION_BASE, keyFields, publicationMeta } from '../fixtures/lease-stress-common.mjs';
import { NATIVE, runsIf } from '../skip-reasons.js';

const PINNER = join(import.meta.dirname, '..', 'fixtures', 'device-pinner.mjs');
const KEY_COUNT = 4;
const KEYS = Array.from({ length: KEY_COUNT }, (_, k) => artifactKey(keyFields(k)));
const PINNERS = 2;
/** The producer evicts (and republishes) one key every EVICT_EVERY record writes. */
const EVICT_EVERY = 97;

const U = 'GPU-5e1f0a11-2b3c-4d5e-8f90-a1b2c3d4e5f6';
const A1 = 1;
const G1 = 1001;
const A2 = 2;
const G2 = 1002;
const K_VALUES = [100, 102, 104, 106];

/** A device UUID whose two 8-byte halves both depend on k. */
function uuidFor(k: number): string {
  return `GPU-${k.toString(16).padStart(8, '0')}-0000-4000-8000-${k.toString(16).padStart(12, '0')}`;
}

interface DeviceTargetSpec {
  label: string;
  device: string;
  arena: number;
  arenaGeneration: number;
  /** True: the producer writes exactly this record. False: never written, a hit is a violation. */
  written: boolean;
}

const target = (label: string, device: string, arena: number, arenaGeneration: number, written: boolean): DeviceTargetSpec => ({
  label,
  device,
  arena,
  arenaGeneration,
  written,
});

/** Every record the producer writes, in the order it cycles through them. */
const RECORDS = [
  { device: U, arena: A1, arenaGeneration: G1 },
  { device: U, arena: A2, arenaGeneration: G2 },
  ...K_VALUES.map((k) => ({ device: uuidFor(k), arena: k, arenaGeneration: k })),
];

const TARGETS: DeviceTargetSpec[] = [
  target('A1/G1', U, A1, G1, true),
  target('A2/G2', U, A2, G2, true),
  ...K_VALUES.map((k) => target(`k=${k}`, uuidFor(k), k, k, true)),
  // Arena of one record with the arena generation of the other, and the reverse.
  target('A1/G2', U, A1, G2, false),
  target('A2/G1', U, A2, G1, false),
  ...K_VALUES.flatMap((k) => [
    target(`k=${k}/gen ${k + 1}`, uuidFor(k), k, k + 1, false), // the generation of no record with arena k
    target(`k=${k + 1}`, uuidFor(k + 1), k + 1, k + 1, false), // odd k: never written at all
    target(`uuid ${k + 2}/k=${k}`, uuidFor(k + 2), k, k, false), // another record's device UUID
    target(`U/k=${k}`, U, k, k, false), // the A records' UUID with a k record's arena
    target(`uuid ${k}/A2/G2`, uuidFor(k), A2, G2, false), // a k record's UUID with the A2 record's arena
  ]),
];

/** What each pinner reports. */
interface PinnerResult {
  pins: number;
  hits: Record<string, number>;
  misses: Record<string, number>;
  violations: number;
  samples: string[];
  clientIndex: number;
  ms: number;
}

type Pinner = Running<PinnerResult>;

interface PinnerConfig {
  name: string;
  keyCount: number;
  seed: number;
  minMs: number;
  maxMs: number;
  targets: DeviceTargetSpec[];
}

const cleanups: Array<() => void | Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function processPinner(config: PinnerConfig): Pinner {
  return tracked(childWithResult<PinnerResult>(PINNER, [JSON.stringify(config)]));
}

function workerPinner(config: PinnerConfig, buffer: SharedArrayBuffer): Pinner {
  return tracked(workerWithResult<PinnerResult>(PINNER, { config, buffer }));
}

/** Stops the pinner after the test if it is still running. */
function tracked(pinner: Pinner): Pinner {
  cleanups.push(async () => {
    pinner.kill();
    await pinner.done;
  });
  return pinner;
}

interface LastRecord {
  device: string;
  arena: number;
  arenaGeneration: number;
  writeSeq: number;
}

/**
 * Publishes the keys with a first record each, starts the pinners, then rewrites device
 * records round-robin (writeSeq increasing; each key cycles through RECORDS) and every
 * EVICT_EVERY writes evicts and republishes one key (which clears its record until the next
 * write), until every pinner has exited. Yields to the event loop every 256 writes.
 */
async function stress(producer: LeaseTable, startPinners: () => Pinner[]) {
  let serial = 0;
  let writeSeq = 0;
  const cursor = new Array<number>(KEY_COUNT).fill(0);
  const last: Array<LastRecord | null> = new Array(KEY_COUNT).fill(null);
  const publish = (k: number) => {
    const reservation = producer.reserve(KEYS[k]!);
    producer.publish(reservation, publicationMeta(k, ++serial));
    last[k] = null;
  };
  const write = (k: number) => {
    const record = RECORDS[cursor[k]++ % RECORDS.length]!;
    const seq = ++writeSeq;
    const outcome = producer.recordDeviceWrite(KEYS[k]!, { ...record, writeSeq: seq });
    if (outcome !== 'recorded') throw new Error(`recordDeviceWrite(key ${k}) was ${outcome}: every key is always published`);
    last[k] = { ...record, writeSeq: seq };
  };
  for (let k = 0; k < KEY_COUNT; k++) {
    publish(k);
    write(k);
  }

  const outcomes = { evicted: 0, pinned: 0, absent: 0 };
  let round = 0;
  const finished = await stepUntilEnded(startPinners(), () => {
    write(round % KEY_COUNT);
    if (round % EVICT_EVERY === 0) {
      const k = (round / EVICT_EVERY) % KEY_COUNT;
      const outcome = producer.tryEvict(KEYS[k]!);
      outcomes[outcome]++;
      if (outcome === 'evicted') publish(k);
    }
    round++;
  });
  return { finished, outcomes, writes: writeSeq, last };
}

function uuidHex(device: string): string {
  return device.slice(4).replaceAll('-', '').toLowerCase();
}

/** What the pinners must show, whoever the producer was. */
function checkPinners(finished: Array<{ result: PinnerResult | null; code: number | null; signal: string | null; log: string }>): void {
  for (const { result, code, signal, log } of finished) {
    expect({ code, signal }, log).toEqual({ code: 0, signal: null });
    expect(result, log).not.toBeNull();
    expect(result!.samples, `violations: ${result!.samples.join('; ')}`).toEqual([]);
    expect(result!.violations).toBe(0);
    for (const t of TARGETS) {
      if (t.written) expect(result!.hits[t.label], `hits on the written target ${t.label}`).toBeGreaterThan(0);
      else expect(result!.hits[t.label], `hits on the never-written target ${t.label}`).toBe(0);
    }
    // Misses by reason: the record named another arena or device (device-mismatch), or the same
    // arena with another arena generation (arena-generation-mismatch), many times over.
    expect(result!.misses['device-mismatch'] ?? 0).toBeGreaterThan(0);
    expect(result!.misses['arena-generation-mismatch'] ?? 0).toBeGreaterThan(0);
  }
  // Pinners in separate threads/processes hold separate client entries.
  expect(new Set(finished.map((f) => f.result!.clientIndex)).size).toBe(finished.length);
}

/**
 * What the table must show once every pinner has exited: only `table`'s own client is
 * registered, every key is READY with no pin holder, and each slot carries the last record
 * written for its key (none when the key was republished since).
 */
function checkTable(table: LeaseTable, last: Array<LastRecord | null>): void {
  const view = table.inspect();
  expect(view.clients.map((c) => c.index)).toEqual([table.clientIndex]);
  expect(view.slots).toHaveLength(KEY_COUNT);
  for (const slot of view.slots) {
    expect(slot.state).toBe('ready');
    expect(slot.pinHolders).toEqual([]);
    const k = Number(slot.meta.location) - LOCATION_BASE;
    expect(slot.digestHex).toBe(KEYS[k]!.hex);
    const want = last[k] ?? null;
    expect(slot.device).toEqual(
      want === null
        ? null
        : { deviceUuidHex: uuidHex(want.device), arena: BigInt(want.arena), arenaGeneration: BigInt(want.arenaGeneration), writeSeq: BigInt(want.writeSeq) },
    );
  }
  for (let s = 0; s < table.capacity; s++) expect(table.clientPins(s)).toBe(0);
  expect(table.reapDeadClients()).toBe(0);
}

function report(what: string, finished: Array<{ result: PinnerResult | null }>, producer: string): void {
  const sum = (pick: (r: PinnerResult) => Record<string, number>) => {
    const total: Record<string, number> = {};
    for (const f of finished) for (const [name, n] of Object.entries(pick(f.result!))) total[name] = (total[name] ?? 0) + n;
    return total;
  };
  const hits = Object.fromEntries(Object.entries(sum((r) => r.hits)).filter(([, n]) => n > 0));
  console.log(
    `${what}: ${finished.reduce((n, f) => n + f.result!.pins, 0)} device pins by ${finished.length} pinners ` +
      `in ${finished.map((f) => f.result!.ms).join('/')} ms; hits ${JSON.stringify(hits)}; misses ${JSON.stringify(sum((r) => r.misses))}; ${producer}`,
  );
}

/**
 * A producer in C over libwaitprep.so that rewrites the same records in a tight loop (tens of
 * nanoseconds a write instead of the microseconds of a call from JavaScript), so a pinner's
 * record read overlaps a write far more often. Compiled by the test with the system's cc.
 */
const C_PRODUCER = String.raw`/* A tight-loop device-record producer over libwaitprep.so (written and compiled by
 * test/lease-table/device-records-multiprocess.test.ts). argv: table, key count, key digests (hex),
 * record count, records "uuidhex,arena,arenaGeneration". Opens the table as its producer,
 * publishes the keys, prints "ready", then rewrites records round-robin (every EVICT_EVERY
 * writes it evicts and republishes one key) until stdin closes, and prints a JSON summary. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "waitprep.h"

#define EVICT_EVERY 997u
#define LOCATION_BASE 0x70000000ull
#define STRESS_KEY_COUNT 8u /* publicationMeta's checksum stride (lease-stress-common.mjs) */

static void hex_bytes(const char *hex, uint8_t *out, size_t n) {
  for (size_t i = 0; i < n; i++) sscanf(hex + 2 * i, "%2hhx", &out[i]);
}

int main(int argc, char **argv) {
  if (argc < 4) return 2;
  const char *name = argv[1];
  int nkeys = atoi(argv[2]);
  int nrec = atoi(argv[3 + nkeys]);
  uint8_t digests[16][32];
  wp_device_record recs[64];
  if (nkeys < 1 || nkeys > 16 || nrec < 1 || nrec > 64 || argc != 4 + nkeys + nrec) return 2;
  for (int k = 0; k < nkeys; k++) hex_bytes(argv[3 + k], digests[k], 32);
  for (int r = 0; r < nrec; r++) {
    const char *spec = argv[4 + nkeys + r];
    memset(&recs[r], 0, sizeof recs[r]);
    hex_bytes(spec, recs[r].device_uuid, 16);
    unsigned long long arena, gen;
    if (sscanf(spec + 32, ",%llu,%llu", &arena, &gen) != 2) return 2;
    recs[r].arena = arena;
    recs[r].arena_generation = gen;
  }
  wp_table *t;
  int rc = wp_open(name, 1, 0, &t);
  if (rc != WP_OK) { fprintf(stderr, "wp_open: %s\n", wp_status_name(rc)); return 3; }
  unsigned long long serial = 0, seq = 0, writes = 0, evicted = 0, pinned = 0, failures = 0;
  unsigned cursor[16] = {0};
  long long last[16];
  unsigned long long last_seq[16];
  for (int k = 0; k < nkeys; k++) {
    wp_reservation res;
    serial++;
    wp_meta meta = {4096 + serial, LOCATION_BASE + k, serial * STRESS_KEY_COUNT + k, (uint32_t)(serial & 0xffff), 1};
    if (wp_reserve(t, digests[k], &res) != WP_OK || wp_publish(t, &res, &meta) != WP_OK) return 4;
    last[k] = -1;
  }
  printf("ready\n");
  fflush(stdout);
  for (unsigned long long i = 0;; i++) {
    if ((i & 4095) == 0) {
      struct pollfd p = {0, POLLIN, 0};
      if (poll(&p, 1, 0) > 0) {
        char c;
        if (read(0, &c, 1) <= 0) break;
      }
    }
    int k = (int)(i % (unsigned)nkeys);
    int r = (int)(cursor[k]++ % (unsigned)nrec);
    wp_device_record rec = recs[r];
    rec.write_seq = ++seq;
    if (wp_record_device_write(t, digests[k], &rec) != WP_OK) failures++;
    writes++;
    last[k] = r;
    last_seq[k] = rec.write_seq;
    if (i % EVICT_EVERY == 0) {
      int e = (int)((i / EVICT_EVERY) % (unsigned)nkeys);
      int out = wp_try_evict(t, digests[e]);
      if (out == WP_OK) {
        wp_reservation res;
        serial++;
        wp_meta meta = {4096 + serial, LOCATION_BASE + e, serial * STRESS_KEY_COUNT + e, (uint32_t)(serial & 0xffff), 1};
        if (wp_reserve(t, digests[e], &res) != WP_OK || wp_publish(t, &res, &meta) != WP_OK) failures++;
        evicted++;
        last[e] = -1;
      } else if (out == WP_PINNED) {
        pinned++;
      } else {
        failures++;
      }
    }
  }
  printf("{\"writes\":%llu,\"evicted\":%llu,\"pinned\":%llu,\"failures\":%llu,\"last\":[", writes, evicted, pinned, failures);
  for (int k = 0; k < nkeys; k++) printf("%s[%lld,%llu]", k ? "," : "", last[k], last[k] < 0 ? 0ull : last_seq[k]);
  printf("]}\n");
  wp_close(t);
  return 0;
}
`;

const hasCompiler = spawnSync('cc', ['--version'], { stdio: 'ignore' }).status === 0;
const libraryPath = nativeLibraryPath();

describe.runIf(runsIf('device records (native)', NATIVE))('device records: pinner processes vs a producer rewriting them (native)', () => {
  const pinners = (name: string) =>
    Array.from({ length: PINNERS }, (_, i) => processPinner({ name, keyCount: KEY_COUNT, seed: i + 1, minMs: 2000, maxMs: 8000, targets: TARGETS }));

  it(`${PINNERS} processes pin device targets while this process rewrites the records: only whole, written records ever hit; no pin is left`, async () => {
    const name = `wp-devrec-${process.pid}-${randomBytes(4).toString('hex')}`;
    const producer = openLeaseTable({ name, role: 'producer', create: { capacity: 64 }, implementation: 'native' });
    cleanups.push(() => {
      producer.close();
      unlinkLeaseTable(name);
    });
    const run = await stress(producer, () => pinners(name));
    checkPinners(run.finished);
    expect(run.outcomes.absent).toBe(0);
    expect(run.outcomes.evicted).toBeGreaterThan(0);
    expect(run.writes).toBeGreaterThan(1000);
    checkTable(producer, run.last);
    for (const key of KEYS) expect(producer.tryEvict(key)).toBe('evicted');
    report('native', run.finished, `producer (this process): ${run.writes} record writes, evictions ${JSON.stringify(run.outcomes)}`);
  });

  it.runIf(runsIf('device records against a C producer', [hasCompiler, 'no C compiler (cc) on PATH'], [libraryPath !== null, 'libwaitprep.so is not built']))(
    `${PINNERS} processes pin device targets while a C producer rewrites the records in a tight loop: same checks`,
    async () => {
      const scratch = mkdtempSync(join(tmpdir(), 'waitprep-devrec-'));
      cleanups.push(() => rmSync(scratch, { recursive: true, force: true }));
      const source = join(scratch, 'device-producer.c');
      const binary = join(scratch, 'device-producer');
      writeFileSync(source, C_PRODUCER);
      const libDir = dirname(libraryPath!);
      const include = join(import.meta.dirname, '..', '..', 'native', 'include');
      execFileSync('cc', ['-O2', '-Wall', '-Werror', '-I', include, source, '-o', binary, '-L', libDir, '-lwaitprep', `-Wl,-rpath,${libDir}`]);

      // This process creates the table and watches it as a consumer; the C program is its producer.
      const name = `wp-devrec-c-${process.pid}-${randomBytes(4).toString('hex')}`;
      const observer = openLeaseTable({ name, role: 'consumer', create: { capacity: 64 }, implementation: 'native' });
      cleanups.push(() => {
        observer.close();
        unlinkLeaseTable(name);
      });
      const records = RECORDS.map((r) => `${uuidHex(r.device)},${r.arena},${r.arenaGeneration}`);
      const child = spawn(binary, [name, String(KEY_COUNT), ...KEYS.map((k) => k.hex), String(records.length), ...records], {
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.setEncoding('utf8');
      child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
      const exited = new Promise<{ code: number | null; signal: string | null }>((resolve) => child.on('close', (code, signal) => resolve({ code, signal })));
      cleanups.push(async () => {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
        await exited;
      });
      await new Promise<void>((resolve, reject) => {
        child.stdout.on('data', (chunk: string) => {
          stdout += chunk;
          if (stdout.startsWith('ready\n')) resolve();
        });
        void exited.then(({ code }) => reject(new Error(`the C producer exited (${code}) before it was ready: ${stdout} ${stderr}`)));
      });

      const finished = await Promise.all(pinners(name).map((p) => p.done));
      child.stdin.end(); // the producer stops at end of input
      expect(await exited, stderr).toEqual({ code: 0, signal: null });
      const summary = JSON.parse(stdout.slice('ready\n'.length).trim()) as {
        writes: number;
        evicted: number;
        pinned: number;
        failures: number;
        last: Array<[number, number]>;
      };
      checkPinners(finished);
      expect(summary.failures).toBe(0);
      expect(summary.evicted).toBeGreaterThan(0);
      expect(summary.writes).toBeGreaterThan(100_000);
      checkTable(
        observer,
        summary.last.map(([r, seq]) => (r < 0 ? null : { ...RECORDS[r]!, writeSeq: seq })),
      );
      report('native, C producer', finished, `producer (C): ${summary.writes} record writes, ${summary.evicted} evictions, ${summary.pinned} pinned`);
    },
  );
});

describe('device records: worker_threads vs a producer rewriting them (JavaScript fallback)', () => {
  it(`${PINNERS} workers over one SharedArrayBuffer: only whole, written records ever hit; no pin is left`, async () => {
    const name = `wp-devrec-js-${process.pid}-${randomBytes(4).toString('hex')}`;
    const producer = openLeaseTable({ name, role: 'producer', create: { capacity: 64 }, implementation: 'js' });
    cleanups.push(() => producer.close());
    expect(producer.implementation).toBe('js');
    const buffer = producer.sharedBuffer!;
    const run = await stress(producer, () =>
      Array.from({ length: PINNERS }, (_, i) =>
        workerPinner({ name, keyCount: KEY_COUNT, seed: i + 11, minMs: 1000, maxMs: 5000, targets: TARGETS }, buffer),
      ),
    );
    checkPinners(run.finished);
    expect(run.outcomes.absent).toBe(0);
    expect(run.outcomes.evicted).toBeGreaterThan(0);
    checkTable(producer, run.last);
    for (const key of KEYS) expect(producer.tryEvict(key)).toBe('evicted');
    report('js', run.finished, `producer (this thread): ${run.writes} record writes, evictions ${JSON.stringify(run.outcomes)}`);
  });
});
