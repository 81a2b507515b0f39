"""Threads sharing one consumer Table and one producer Table (docs/lease-table.md, "Threads").

ctypes releases the GIL on every call, so the calls really run at once: four threads pin and
check through one consumer, two pin prefix runs and hand their first lease to an exact pin
through it, two pin in bursts inside C through it (wp_pin_loop), and two evict and republish
through one producer. A lease must never outlive its artifact or lack its pin bit,
and nothing may be left pinned at the end. WAITPREP_THREAD_SECONDS sets how long they run.
"""

from __future__ import annotations

import os
import threading
import time
import unittest
from typing import Callable, Dict, List, Tuple

import waitprep

from _support import digest_of, needs_library, table_name

KEYS = 12  # 0-3 shared by every pinner; 4 + 2i and 5 + 2i pinner i's own
SECONDS = float(os.environ.get("WAITPREP_THREAD_SECONDS", "2"))


@needs_library
class SharedHandles(unittest.TestCase):
    def test_threads_never_hold_an_evicted_artifact_or_a_lease_without_its_bit_and_leak_no_pin(self) -> None:
        digests = [digest_of(k) for k in range(KEYS)]
        name = table_name("threads")
        producer = waitprep.create_table(name, 64)
        self.addCleanup(waitprep.unlink_table, name)
        self.addCleanup(producer.close)
        consumer = waitprep.open_table(name)
        self.addCleanup(consumer.close)
        bit = consumer.client_index
        counts: Dict[str, int] = {"rounds": 0, "evicted_while_held": 0, "held_without_bit": 0, "refused_unpins": 0, "evictions": 0, "bursts": 0, "prefix_rounds": 0}
        errors: List[str] = []
        lock = threading.Lock()
        stop = threading.Event()

        def add(**deltas: int) -> None:
            with lock:
                for field, delta in deltas.items():
                    counts[field] += delta

        def publish(k: int) -> None:
            try:
                producer.publish(producer.reserve(digests[k]), 64, k, k, 1, 1)
            except waitprep.WaitprepError as error:
                if error.code != "ERR_KEY_EXISTS":  # the other evictor republished it first
                    raise

        def check_held(held: List[Tuple[int, "waitprep.Lease"]]) -> Tuple[int, int]:
            """(leases whose artifact is gone while held, leases whose slot lacks our pin bit)."""
            evicted = no_bit = 0
            for k, lease in held:
                state, generation = consumer.slot_state(lease.slot)
                if generation != lease.generation or state not in ("ready", "evicting") or lease.meta.location != k:
                    evicted += 1
                if bit not in consumer.pin_holders(lease.slot):
                    no_bit += 1
            return evicted, no_bit

        def guarded(fn: Callable[[int], None]) -> Callable[[int], None]:
            def run(i: int) -> None:
                try:
                    fn(i)
                except Exception as error:  # reported, so that a failure names itself
                    errors.append(repr(error))
                    stop.set()

            return run

        @guarded
        def pinner(i: int) -> None:
            rounds = evicted = no_bit = refused = 0
            while not stop.is_set():
                held = []
                for k in (rounds % 4, (rounds + 1) % 4, 4 + 2 * i + rounds % 2):
                    lease = consumer.try_pin(digests[k])
                    if isinstance(lease, waitprep.Lease):
                        held.append((k, lease))
                e, b = check_held(held)
                evicted += e
                no_bit += b
                for k, lease in reversed(held):
                    if not lease.close():
                        refused += 1
                rounds += 1
            add(rounds=rounds, evicted_while_held=evicted, held_without_bit=no_bit, refused_unpins=refused)

        @guarded
        def prefixer(i: int) -> None:
            # Prefix runs and handoffs through the same handle: a run's pins and an exact pin of a
            # token hold exactly as single pins do, and a run releases exactly what it pinned.
            rounds = evicted = no_bit = refused = 0
            while not stop.is_set():
                run = consumer.try_pin_prefix(digests[:4])
                exact = consumer.try_pin_exact(run[0].handoff_token()) if len(run) else "absent"
                held = [(k, lease) for k, lease in enumerate(run)] + ([(0, exact)] if isinstance(exact, waitprep.Lease) else [])
                e, b = check_held(held)
                evicted += e
                no_bit += b
                if isinstance(exact, waitprep.Lease) and not exact.close():
                    refused += 1
                if run.close() != len(run):
                    refused += 1
                rounds += 1
            add(prefix_rounds=rounds, evicted_while_held=evicted, held_without_bit=no_bit, refused_unpins=refused)

        @guarded
        def burster(i: int) -> None:
            # Pins and unpins inside C with the GIL released: a whole burst overlaps the others.
            n = 0
            while not stop.is_set():
                consumer.pin_loop(digests[(n + i) % 4], 20000)
                n += 1
            add(bursts=n)

        @guarded
        def evictor(i: int) -> None:
            evictions, n = 0, i
            while not stop.is_set():
                k = n % KEYS
                result = producer.try_evict(digests[k])
                if result == "evicted":
                    evictions += 1
                if result in ("evicted", "absent"):
                    publish(k)
                n += 1
            add(evictions=evictions)

        for k in range(KEYS):
            publish(k)
        threads = [threading.Thread(target=pinner, args=(i,)) for i in range(4)]
        threads += [threading.Thread(target=prefixer, args=(i,)) for i in range(2)]
        threads += [threading.Thread(target=burster, args=(i,)) for i in range(2)]
        threads += [threading.Thread(target=evictor, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        stop.wait(SECONDS)
        stop.set()
        for t in threads:
            t.join()
        print("\npython threads: %s" % counts)

        self.assertEqual(errors, [])
        self.assertGreater(counts["rounds"], 0)
        self.assertGreater(counts["prefix_rounds"], 0)
        self.assertGreater(counts["evictions"], 0)
        self.assertEqual(
            {
                "evicted_while_held": counts["evicted_while_held"],
                "held_without_bit": counts["held_without_bit"],
                "refused_unpins": counts["refused_unpins"],
                "leaked_pin_bits": sum(1 for s in range(producer.capacity) if producer.pin_holders(s)),
                "leaked_pin_counts": sum(1 for s in range(producer.capacity) if consumer.client_pins(s)),
                "unevictable": sum(1 for d in digests if producer.try_evict(d) == "pinned"),
            },
            dict.fromkeys(["evicted_while_held", "held_without_bit", "refused_unpins", "leaked_pin_bits", "leaked_pin_counts", "unevictable"], 0),
        )


if __name__ == "__main__":
    unittest.main()


@needs_library
class ConcurrentClose(unittest.TestCase):
    def test_threads_closing_one_table_at_once_close_its_handle_once(self) -> None:
        # Without Table.close's lock, two closers could both take the live handle and pass it to
        # wp_close twice (a double free in C, which shows as a crash of this process).
        name = table_name("close")
        producer = waitprep.create_table(name, 16)
        self.addCleanup(waitprep.unlink_table, name)
        self.addCleanup(producer.close)
        for _ in range(200):
            table = waitprep.open_table(name)
            start = threading.Barrier(4)

            def closer() -> None:
                start.wait()
                table.close()

            threads = [threading.Thread(target=closer) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertTrue(table.closed)
        self.assertEqual(producer.summary().clients.active, 1)  # every consumer's entry was freed, once
