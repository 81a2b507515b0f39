"""Engine-shaped threads against a producer process that evicts and republishes the whole time.

For each engine, the threads make the calls the engine makes, from the threads it makes them on:
vLLM's scheduler (lookup, prepare_load, complete_load in shuffled order with several requests
sharing blocks, take_events) handing load plans to worker threads that read the records; SGLang's
prefetch thread (batch_exists, then a revoke below the threshold) handing runs to its I/O thread
(batch_get into host pages) while the backup thread stores; LMCache's lookups pinning for a
request, reading, then either the storage manager's unpin of every key or cancel_request, beside
single contains(pin)/unpin pairs. Each ends with no pin held (the adapter's count and the table's),
no byte read that differs from what the producer wrote for that key, and the producer's evictions
not starved by pins. WAITPREP_ADAPTER_STRESS_SECONDS sets how long each runs (default 2).
"""

from __future__ import annotations

import hashlib
import os
import queue
import random
import threading
import time
import unittest
from typing import Any, Callable, Dict, List

from waitprep.adapters._core import AdapterConfig
from waitprep.adapters.lmcache import LmcacheStorageCore, settings_from_extra_config
from waitprep.adapters.sglang import SglangStorageCore
from waitprep.adapters.vllm import VllmManagerCore, VllmWorkerCore
from waitprep.engine_keys import vllm_offload_key
from waitprep.testing.producer import ProducerProcess, expected_payload

from _engines import BFLOAT16, CacheEngineKey, FakeHostPool, item, start_producer
from _support import needs_library

SECONDS = float(os.environ.get("WAITPREP_ADAPTER_STRESS_SECONDS", "2"))
KEYS = 48
WINDOW = 8
SIZE = 2048


class Tally:
    """Counters and errors shared by the threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Dict[str, int] = {}
        self.errors: List[str] = []

    def add(self, **deltas: int) -> None:
        with self._lock:
            for name, delta in deltas.items():
                self.counts[name] = self.counts.get(name, 0) + delta

    def get(self, name: str) -> int:
        return self.counts.get(name, 0)

    def guard(self, body: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                body()
            except BaseException as error:  # reported by the test, not lost in a thread
                with self._lock:
                    self.errors.append("%s: %r" % (threading.current_thread().name, error))

        return run


@needs_library
class EngineShapedStress(unittest.TestCase):
    def churn(self, producer: ProducerProcess, items: List[Dict[str, Any]]) -> None:
        producer.publish(items)
        producer.call("churn_start", items=items, interval=0.0005)

    def finish(self, producer: ProducerProcess, tally: Tally, pins_held: int) -> Dict[str, int]:
        """Checks what every stress must end with; returns the producer's churn counts."""
        self.assertEqual(tally.errors, [])
        self.assertEqual(pins_held, 0)
        self.assertEqual(producer.call("summary")["pinned_slots"], 0)
        counts = producer.call("churn_stop")
        self.assertEqual(tally.get("mismatches"), 0)
        # Not starved: pins are held for a load, not for a wait, so most evictions go through.
        attempts = counts["evicted"] + counts["pinned"]
        self.assertGreaterEqual(counts["evicted"], 10, counts)
        self.assertGreaterEqual(counts["evicted"], attempts // 10, counts)
        return counts

    def run_threads(self, threads: List[threading.Thread], stop: threading.Event, after_stop: Callable[[], None]) -> None:
        for t in threads:
            t.start()
        time.sleep(SECONDS)
        stop.set()
        after_stop()
        for t in threads:
            t.join(60)
            self.assertFalse(t.is_alive(), t.name)

    def test_vllm_scheduler_and_workers(self) -> None:
        producer = start_producer(self.addCleanup, "stress-vllm", capacity=128, record_bytes=SIZE)
        core = VllmManagerCore.open(AdapterConfig({"table": producer.table, "runtime": "vllm/0.23", "model": "m", "dtype": "bf16",
                                                   "layout": "NHD", "task": "t", "namespace": "n"}))
        self.addCleanup(core.shutdown)
        keys = [vllm_offload_key(hashlib.sha256(b"stress-%d" % i).digest(), i % 2) for i in range(KEYS)]
        self.churn(producer, [item(core.digests(k)[0], k, SIZE) for k in keys])
        tally, stop = Tally(), threading.Event()
        work: "queue.Queue[Any]" = queue.Queue()
        done: "queue.Queue[str]" = queue.Queue()

        def scheduler() -> None:
            rng = random.Random(1)
            in_flight: Dict[str, List[bytes]] = {}
            n = 0
            while not stop.is_set() or in_flight:
                while True:
                    try:
                        req = done.get_nowait()
                    except queue.Empty:
                        break
                    loaded = in_flight.pop(req)
                    rng.shuffle(loaded)  # complete_load takes keys in any order
                    core.complete_load(loaded, req)
                    core.on_request_finished(req)
                if not stop.is_set() and len(in_flight) < 8:
                    req, n = "req-%d" % n, n + 1
                    start = rng.randrange(KEYS - WINDOW)  # overlapping windows: requests share blocks
                    wanted = keys[start:start + WINDOW]
                    core.on_new_request(req, {})
                    hits = 0
                    for k in wanted:
                        if core.lookup(k, req) != "hit":
                            break
                        hits += 1
                    if hits:
                        in_flight[req] = wanted[:hits]
                        work.put((req, core.prepare_load(wanted[:hits], req)))
                    else:
                        core.on_request_finished(req)
                tally.add(events=sum(len(ks) for _, ks in core.take_events()))
                time.sleep(0.0002)

        def worker() -> None:
            reader = VllmWorkerCore()
            while True:
                job = work.get()
                if job is None:
                    return
                req, plan = job

                def write(i: int, payload: memoryview) -> None:
                    same = bytes(payload) == expected_payload(plan.digests[i][0], SIZE)
                    tally.add(blocks=1, mismatches=0 if same else 1)

                tally.add(loads_ok=1) if reader.load(plan, write) else tally.add(loads_failed=1)
                done.put(req)

        threads = [threading.Thread(target=tally.guard(scheduler), name="scheduler")]
        workers = [threading.Thread(target=tally.guard(worker), name="worker-%d" % i) for i in range(2)]

        def after_stop() -> None:
            threads[0].join(60)
            for _ in workers:
                work.put(None)

        self.run_threads(threads + workers, stop, after_stop)
        self.finish(producer, tally, core.pins_held)
        self.assertGreater(tally.get("loads_ok"), 0, tally.counts)
        self.assertGreater(tally.get("events"), 0, tally.counts)

    def test_sglang_prefetch_io_and_backup_threads(self) -> None:
        producer = start_producer(self.addCleanup, "stress-sglang", capacity=128, record_bytes=SIZE)
        core = SglangStorageCore.open(AdapterConfig({"table": producer.table, "runtime": "sglang/0.5", "dtype": "bf16",
                                                     "layout": "page_first", "task": "t", "namespace": "n"}), model_name="m")
        self.addCleanup(core.close)
        keys = [hashlib.sha256(b"page-%d" % i).hexdigest() for i in range(KEYS)]
        self.churn(producer, [item(core.digest(k), size=SIZE) for k in keys])
        tally, stop = Tally(), threading.Event()
        runs: "queue.Queue[Any]" = queue.Queue()
        threshold = 2

        def prefetch() -> None:
            rng = random.Random(2)
            while not stop.is_set():
                start = rng.randrange(KEYS - WINDOW)
                batch = keys[start:start + WINDOW]
                hit = core.batch_exists(batch)  # then all-reduced (MIN) over the TP group: one rank here
                if hit < threshold:
                    tally.add(revoked=1)  # revoked: the storage layer never hears of it
                else:
                    runs.put(batch[:hit])
                time.sleep(0.0002)
            runs.put(None)

        def io() -> None:
            while True:
                batch = runs.get()
                if batch is None:
                    return
                pool = FakeHostPool(pages=len(batch), page_size=1, page_bytes=SIZE)

                def page(i: int) -> Any:
                    flat = pool.get_dummy_flat_data_page()
                    return flat, flat.numpy()

                results = core.batch_get(batch, page, lambda i, flat: pool.set_from_flat_data_page(i, flat))
                for i, ok in enumerate(results):
                    if ok:
                        same = bytes(pool.pages[i]) == expected_payload(core.digest(batch[i]), SIZE)
                        tally.add(pages=1, mismatches=0 if same else 1)
                    else:
                        tally.add(pages_missed=1)

        def backup() -> None:
            while not stop.is_set():
                if core.decline_set(WINDOW) != [False] * WINDOW:
                    tally.add(bad_set_answers=1)
                time.sleep(0.001)

        threads = [threading.Thread(target=tally.guard(f), name=f.__name__) for f in (prefetch, io, backup)]
        self.run_threads(threads, stop, lambda: None)
        self.finish(producer, tally, 0)
        self.assertGreater(tally.get("pages"), 0, tally.counts)
        self.assertEqual(tally.get("bad_set_answers"), 0)

    def test_lmcache_lookups_reads_unpins_and_cancels(self) -> None:
        producer = start_producer(self.addCleanup, "stress-lmcache", capacity=128, record_bytes=SIZE)
        core = LmcacheStorageCore.open(settings_from_extra_config({
            "waitprep.table": producer.table, "waitprep.runtime": "lmcache/0.4", "waitprep.layout": "KV_2LTD",
            "waitprep.task": "t", "waitprep.namespace": "n"}))
        self.addCleanup(core.close)
        keys = [CacheEngineKey("m", 1, 0, 9000 + i, BFLOAT16) for i in range(KEYS)]
        self.churn(producer, [item(core.digest(k), size=SIZE) for k in keys])
        tally, stop = Tally(), threading.Event()

        def request(seed: int) -> Callable[[], None]:
            def run() -> None:
                rng = random.Random(seed)
                n = 0
                while not stop.is_set():
                    lookup_id, n = "req-%d-%d" % (seed, n), n + 1
                    start = rng.randrange(KEYS - WINDOW)
                    window = keys[start:start + WINDOW]
                    hits = core.batched_contains(window, pin=True, owner=lookup_id)
                    for k in window[:hits]:
                        buffers: List[bytearray] = []
                        header = core.read(k, lambda h: buffers.append(bytearray(h.payload_length)) or buffers[-1])
                        if header is None:
                            tally.add(read_misses=1)
                            continue
                        same = bytes(buffers[0]) == expected_payload(core.digest(k), SIZE)
                        tally.add(chunks=1, mismatches=0 if same else 1)
                    if rng.random() < 0.5:
                        for k in window:  # the storage manager unpins every key, pinned or not
                            core.unpin(k)
                    else:
                        core.cancel(lookup_id)
                    time.sleep(0.0002)

            return run

        def pin_pairs() -> None:
            rng = random.Random(9)
            while not stop.is_set():
                k = rng.choice(keys)
                if core.contains(k, pin=True):
                    core.unpin(k)
                time.sleep(0.0002)

        threads = [threading.Thread(target=tally.guard(request(s)), name="request-%d" % s) for s in range(3)]
        threads.append(threading.Thread(target=tally.guard(pin_pairs), name="pin-pairs"))
        self.run_threads(threads, stop, lambda: None)
        self.finish(producer, tally, core.pins_held)
        self.assertGreater(tally.get("chunks"), 0, tally.counts)


if __name__ == "__main__":
    unittest.main()
