// Python threads sharing one handle over ctypes (ctypes releases the GIL on every call, so the
// calls really run at once): four threads pin and check through one consumer Table, two more pin
// in bursts through it (wp_pin_loop), while two threads evict and republish through one producer
// Table. A lease must never outlive its artifact or lack its
// pin bit, and nothing may be left pinned at the end (docs/lease-table.md, "Threads").
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { nativeLibraryPath } from '../lib/index.js';
import { NATIVE, runsIf } from './skip-reasons.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const hasPython = spawnSync('python3', ['--version'], { encoding: 'utf8' }).status === 0;
const libPath = nativeLibraryPath();

const SCRIPT = `
import ctypes, hashlib, json, os, sys, threading, time
sys.path.insert(0, os.path.join(sys.argv[1], "examples", "python"))
import waitprep_table as w

KEYS = 12  # 0-3 shared by every pinner, 4 + 2i and 5 + 2i pinner i's own
digests = [hashlib.sha256(b"k%d" % k).digest() for k in range(KEYS)]
name = "waitprep-py-threads-%d" % os.getpid()
producer = w.Table.open(name, True, 64)
consumer = w.Table.open(name, False)
bit_owner = consumer.client_index
counts = {"rounds": 0, "evicted_while_held": 0, "held_without_bit": 0, "refused_unpins": 0, "evictions": 0, "errors": []}
lock = threading.Lock()
stop = threading.Event()

def publish(k):
    try:
        producer.publish(producer.reserve(digests[k]), 64, k, k, 1, 1)
    except w.WaitprepError as e:
        if e.name != "WP_EXISTS":  # the other evictor republished it first
            raise

def pinner(i):
    rounds = evicted = no_bit = refused = 0
    try:
        while not stop.is_set():
            held = []
            for k in (rounds % 4, (rounds + 1) % 4, 4 + 2 * i + rounds % 2):
                lease = consumer.try_pin(digests[k])
                if not isinstance(lease, str):
                    held.append((k, lease))
            for k, lease in held:
                state, generation = consumer.slot_state(lease.slot)
                if generation != lease.generation or state not in ("ready", "evicting") or lease.meta["location"] != k:
                    evicted += 1
                if bit_owner not in consumer.pin_holders(lease.slot):
                    no_bit += 1
            for k, lease in reversed(held):
                if not lease.unpin():
                    refused += 1
            rounds += 1
    except Exception as e:  # reported, so that a failure names itself
        counts["errors"].append(repr(e))
    with lock:
        counts["rounds"] += rounds
        counts["evicted_while_held"] += evicted
        counts["held_without_bit"] += no_bit
        counts["refused_unpins"] += refused

# wp_pin_loop pins and unpins a digest n times in C, with the GIL released throughout: two threads
# calling it on the shared keys keep pins and unpins of one slot overlapping for whole bursts.
lib = w.load()
lib.wp_pin_loop.restype = ctypes.c_uint64
lib.wp_pin_loop.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint64]

def burster(i):
    n = 0
    try:
        while not stop.is_set():
            lib.wp_pin_loop(consumer._handle, digests[(n + i) % 4], 20000)
            n += 1
    except Exception as e:
        counts["errors"].append(repr(e))

def evictor(i):
    evictions = 0
    n = i
    try:
        while not stop.is_set():
            k = n % KEYS
            result = producer.try_evict(digests[k])
            if result == "evicted":
                evictions += 1
            if result in ("evicted", "absent"):
                publish(k)
            n += 1
    except Exception as e:
        counts["errors"].append(repr(e))
    with lock:
        counts["evictions"] += evictions

try:
    for k in range(KEYS):
        publish(k)
    threads = [threading.Thread(target=pinner, args=(i,)) for i in range(4)]
    threads += [threading.Thread(target=burster, args=(i,)) for i in range(2)]
    threads += [threading.Thread(target=evictor, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    time.sleep(float(sys.argv[2]))
    stop.set()
    for t in threads:
        t.join()
    counts["leaked_pin_bits"] = sum(1 for s in range(producer.capacity) if producer.pin_holders(s))
    counts["leaked_pin_counts"] = sum(1 for s in range(producer.capacity) if consumer.client_pins(s))
    counts["unevictable"] = sum(1 for d in digests if producer.try_evict(d) == "pinned")
finally:
    consumer.close()
    producer.close()
    w.unlink(name)
print(json.dumps(counts))
`;

describe.runIf(runsIf('python threads on one handle', NATIVE, [hasPython, 'python3 is not installed'], [libPath !== null, 'libwaitprep.so is not built']))(
  'python: threads sharing one consumer handle and one producer handle',
  () => {
    it('never hold a lease on an evicted artifact or without the pin bit, and leak no pin', () => {
      const run = spawnSync('python3', ['-c', SCRIPT, root, '3'], { encoding: 'utf8', env: { ...process.env, WAITPREP_LIB: libPath! }, timeout: 60_000 });
      expect(run.status, run.stderr).toBe(0);
      const counts = JSON.parse(run.stdout.trim());
      console.log(`python threads: ${JSON.stringify(counts)}`);
      expect(counts.errors).toEqual([]);
      expect(counts.rounds).toBeGreaterThan(0);
      expect(counts.evictions).toBeGreaterThan(0);
      expect({
        evictedWhileHeld: counts.evicted_while_held,
        heldWithoutBit: counts.held_without_bit,
        refusedUnpins: counts.refused_unpins,
        leakedPinBits: counts.leaked_pin_bits,
        leakedPinCounts: counts.leaked_pin_counts,
        unevictable: counts.unevictable,
      }).toEqual({ evictedWhileHeld: 0, heldWithoutBit: 0, refusedUnpins: 0, leakedPinBits: 0, leakedPinCounts: 0, unevictable: 0 });
    });
  },
);
