"""The stored/removed event feed (waitprep.adapters.events): records read back in order, the ring's
bound and the rule for a reader that falls behind, a reader racing a producer process that writes
while it reads, and files that are not a feed."""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
import unittest

import waitprep
from waitprep.adapters.events import REMOVED, STORED, EventFeedReader, EventFeedWriter

from _engines import item, start_producer
from _support import needs_library


def digest(i: int) -> bytes:
    return hashlib.sha256(b"event-%d" % i).digest()


class Feed(unittest.TestCase):
    def setUp(self) -> None:
        directory = tempfile.TemporaryDirectory()
        self.addCleanup(directory.cleanup)
        self.path = os.path.join(directory.name, "t-events")

    def writer(self, capacity: int) -> EventFeedWriter:
        writer = EventFeedWriter(self.path, capacity)
        self.addCleanup(writer.close)
        return writer

    def reader(self) -> EventFeedReader:
        reader = EventFeedReader(self.path)
        self.addCleanup(reader.close)
        return reader

    def test_events_come_back_in_order_with_their_kinds_digests_and_engine_keys(self) -> None:
        writer = self.writer(8)
        reader = self.reader()
        writer.append([(STORED, digest(0), b"k0"), (STORED, digest(1), b"")])
        writer.append([(REMOVED, digest(0), b"k0" * 40)])
        batch = reader.take()
        self.assertEqual(batch.lost, 0)
        self.assertEqual([(e.seq, e.kind, e.digest, e.engine_key) for e in batch.events],
                         [(0, "stored", digest(0), b"k0"), (1, "stored", digest(1), b""), (2, "removed", digest(0), b"k0" * 40)])
        self.assertEqual(reader.take().events, [])

    def test_a_reader_that_falls_behind_skips_to_the_oldest_event_held_and_counts_what_it_lost(self) -> None:
        writer = self.writer(4)
        behind = self.reader()
        writer.append([(STORED, digest(i), b"") for i in range(3)])
        self.assertEqual([e.seq for e in behind.take().events], [0, 1, 2])
        writer.append([(STORED, digest(i), b"") for i in range(3, 13)])  # 10 more into a ring of 4
        batch = behind.take()
        self.assertEqual([e.seq for e in batch.events], [9, 10, 11, 12])
        self.assertEqual([e.digest for e in batch.events], [digest(i) for i in range(9, 13)])
        self.assertEqual(batch.lost, 6)
        self.assertEqual(behind.lost_total, 6)
        # A new reader starts at the oldest event still held, having lost nothing.
        fresh = self.reader()
        batch = fresh.take()
        self.assertEqual(([e.seq for e in batch.events], batch.lost), ([9, 10, 11, 12], 0))

    def test_a_batch_across_the_end_of_the_ring(self) -> None:
        writer = self.writer(5)
        reader = self.reader()
        writer.append([(STORED, digest(i), b"") for i in range(4)])
        reader.take()
        writer.append([(REMOVED, digest(i), b"%d" % i) for i in range(4, 8)])
        self.assertEqual([(e.seq, e.engine_key) for e in reader.take().events], [(4, b"4"), (5, b"5"), (6, b"6"), (7, b"7")])

    def test_what_is_not_a_feed_or_not_an_event_is_refused(self) -> None:
        with open(self.path, "wb") as f:
            f.write(b"WPEX" + bytes(60))
        with self.assertRaises(waitprep.WaitprepError) as caught:
            EventFeedReader(self.path)
        self.assertEqual(caught.exception.code, "ERR_BAD_SEGMENT")
        os.unlink(self.path)
        writer = self.writer(2)
        for bad in ([(3, digest(0), b"")], [(STORED, b"short", b"")], [(STORED, digest(0), b"x" * 81)]):
            with self.assertRaises(waitprep.WaitprepError) as caught:
                writer.append(bad)
            self.assertEqual(caught.exception.code, "ERR_INVALID_ARGUMENT")
        writer.close()
        with self.assertRaises(waitprep.WaitprepError) as caught:
            writer.append([])
        self.assertEqual(caught.exception.code, "ERR_CLOSED")


@needs_library
class FeedAcrossProcesses(unittest.TestCase):
    def test_a_reader_racing_a_producer_process_sees_whole_events_in_order(self) -> None:
        producer = start_producer(self.addCleanup, "events", capacity=64, feed_capacity=16)
        reader = EventFeedReader(producer.feed_path)
        self.addCleanup(reader.close)
        items = [item(digest(i), b"key-%d" % i, size=64) for i in range(32)]
        producer.call("churn_start", items=items, interval=0)
        expected_seq = None
        seen = lost = 0
        known = {digest(i): b"key-%d" % i for i in range(32)}
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            batch = reader.take()
            lost += batch.lost
            if batch.events:
                first = batch.events[0].seq
                if expected_seq is not None:
                    self.assertEqual(first, expected_seq + batch.lost)
                for a, b in zip(batch.events, batch.events[1:]):
                    self.assertEqual(b.seq, a.seq + 1)
                for e in batch.events:
                    self.assertEqual(known[e.digest], e.engine_key)  # never a torn record
                expected_seq = batch.events[-1].seq + 1
                seen += len(batch.events)
            time.sleep(0.001)
        counts = producer.call("churn_stop")
        final = reader.take()
        seen += len(final.events)
        lost += final.lost
        self.assertGreater(counts["evicted"] + counts["republished"], 0)
        # Each eviction and each publish wrote one event: every one was read or counted lost.
        self.assertEqual(seen + lost, counts["evicted"] + counts["republished"])


if __name__ == "__main__":
    unittest.main()
