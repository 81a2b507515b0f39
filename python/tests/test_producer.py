"""The producer process the adapter tests run (waitprep.testing.producer): records a reader can
check byte for byte, reservations, evictions that free a record slot for another artifact, reaping
a consumer killed while it held a pin, and a bad command answered rather than fatal."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import unittest

import waitprep
from waitprep.arena import read_arena_record
from waitprep.testing.producer import expected_payload

from _engines import item, start_producer
from _support import child_env, needs_library


def digest(i: int) -> bytes:
    return hashlib.sha256(b"producer-%d" % i).digest()


@needs_library
class Producer(unittest.TestCase):
    def setUp(self) -> None:
        self.producer = start_producer(self.addCleanup, "producer", capacity=8, record_bytes=1024)
        self.table = waitprep.open_table(self.producer.table)
        self.addCleanup(self.table.close)

    def test_published_records_read_back_and_evicted_slots_are_reused(self) -> None:
        self.assertEqual(self.producer.publish([item(digest(0), size=1000, tokens=7, fmt="KV_2LTD")]), ["published"])
        self.assertEqual(self.producer.publish([item(digest(0))]), ["exists"])
        lease = self.table.try_pin(digest(0))
        record = read_arena_record(self.producer.table, digest(0), lease.meta)
        self.assertEqual((record.payload, record.header.token_count, record.header.format), (expected_payload(digest(0), 1000), 7, "KV_2LTD"))
        old_location = lease.meta.location
        self.assertEqual(self.producer.evict([digest(0)]), ["pinned"])
        lease.close()
        self.assertEqual(self.producer.evict([digest(0), digest(0)]), ["evicted", "absent"])
        self.producer.publish([item(digest(1), size=1000)])
        lease = self.table.try_pin(digest(1))
        self.assertEqual(lease.meta.location, old_location)  # the freed slot, now another artifact's record
        self.assertEqual(read_arena_record(self.producer.table, digest(0), lease.meta).reason, "wrong-key")
        lease.close()

    def test_a_reserved_artifact_is_preparing_until_completed_or_abandoned(self) -> None:
        self.producer.call("reserve", items=[item(digest(2)), item(digest(3))])
        self.assertEqual((self.table.peek(digest(2)), self.table.peek(digest(3))), ("preparing", "preparing"))
        self.assertEqual(self.producer.call("complete", digests=[digest(2).hex()])["results"], ["published"])
        self.assertEqual(self.producer.call("abandon", digests=[digest(3).hex(), digest(4).hex()])["results"], ["abandoned", "absent"])
        self.assertEqual((self.table.peek(digest(2)), self.table.peek(digest(3))), ("ready", "absent"))

    def test_a_full_arena_or_an_oversized_record_is_refused_per_item(self) -> None:
        results = self.producer.publish([item(digest(10 + i), size=100) for i in range(9)] + [item(digest(30), size=5000)])
        self.assertEqual(results.count("published"), 8)
        self.assertEqual(results[-2:], ["full", "full"])

    def test_reap_releases_the_pins_of_a_consumer_killed_while_holding_them(self) -> None:
        self.producer.publish([item(digest(5))])
        script = (
            "import sys, waitprep\n"
            "t = waitprep.open_table(sys.argv[1])\n"
            "lease = t.try_pin(bytes.fromhex(sys.argv[2]))\n"
            "print(type(lease).__name__, flush=True)\n"
            "sys.stdin.read()\n"
        )
        child = subprocess.Popen([sys.executable, "-c", script, self.producer.table, digest(5).hex()], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, env=child_env())
        self.addCleanup(child.wait)
        self.assertEqual(child.stdout.readline().strip(), "Lease")
        child.stdout.close()
        self.assertEqual(self.producer.call("summary")["pinned_slots"], 1)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        child.stdin.close()
        self.assertEqual(self.producer.evict([digest(5)]), ["pinned"])
        self.assertEqual(self.producer.call("reap")["reaped"], 1)
        self.assertEqual(self.producer.call("summary")["pinned_slots"], 0)
        self.assertEqual(self.producer.evict([digest(5)]), ["evicted"])

    def test_a_bad_command_is_answered_and_the_producer_goes_on(self) -> None:
        with self.assertRaises(RuntimeError) as caught:
            self.producer.call("bogus")
        self.assertIn("ERR_INVALID_ARGUMENT", str(caught.exception))
        with self.assertRaises(RuntimeError):
            self.producer.call("publish", items=[{"digest": "not hex"}])
        self.assertEqual(self.producer.publish([item(digest(6))]), ["published"])


if __name__ == "__main__":
    unittest.main()
