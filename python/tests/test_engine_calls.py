"""An engine's batched calls: peek_many and peek_prefix (wp_peek_many), a prefix run given back by
position (LeaseRun.release, wp_unpin_indexed), the digests a batch takes, and reading a record
into the caller's buffer (arena.read_arena_record_into); and their benchmark, run small."""

from __future__ import annotations

import array
import hashlib
import json
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import waitprep
from waitprep import WaitprepError
from waitprep.arena import (
    ARENA_RECORD_HEADER_BYTES,
    Mismatch,
    RecordHeader,
    arena_directory,
    arena_location,
    arena_path,
    encode_arena_record,
    read_arena_record,
    read_arena_record_into,
)

from _support import TableCase, child_env, digest_of, needs_library

try:
    import numpy
except ImportError:  # numpy is optional: without it the same cases run on other buffers
    numpy = None

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "engine_calls.py")


@needs_library
class PeekMany(TableCase):
    capacity = 64

    def setUp(self) -> None:
        super().setUp()
        self.digests = [digest_of(500 + i) for i in range(10)]
        for d in self.digests[:3]:
            self.publish(d)
        self.producer.reserve(self.digests[3])  # preparing
        self.publish(self.digests[4])           # ready after the gap; 5.. absent

    def test_each_answer_is_what_peek_answers_and_nothing_is_pinned(self) -> None:
        answers = self.consumer.peek_many(self.digests)
        self.assertEqual(answers, [self.consumer.peek(d) for d in self.digests])
        self.assertEqual(answers[:6], ["ready", "ready", "ready", "preparing", "ready", "absent"])
        self.assertEqual(self.consumer.peek_many(b"".join(self.digests)), answers)
        self.assertEqual(self.consumer.peek_many(bytearray(b"".join(self.digests[2:4]))), ["ready", "preparing"])
        self.assertEqual(self.consumer.peek_many([]), [])
        self.assertEqual(self.producer.summary().pinned_slots, 0)

    def test_the_prefix_counts_the_leading_ready_digests(self) -> None:
        self.assertEqual(self.consumer.peek_prefix(self.digests), 3)
        self.assertEqual(self.consumer.peek_prefix(b"".join(self.digests[4:])), 1)
        self.assertEqual(self.consumer.peek_prefix(self.digests[3:]), 0)
        self.assertEqual(self.consumer.peek_prefix(b""), 0)
        self.assertEqual(self.producer.try_evict(self.digests[1]), "evicted")
        self.assertEqual(self.consumer.peek_prefix(self.digests), 1)
        self.assertEqual(self.consumer.peek_many(self.digests[:2]), ["ready", "absent"])

    def test_malformed_digests_are_refused_and_a_closed_table_misses(self) -> None:
        # A container that is not a run of digests is ERR_INVALID_ARGUMENT; an element that is not a
        # 32-byte digest is ERR_INVALID_KEY naming it, as try_pin names a bad digest.
        cases = [
            (b"x" * 31, ("ERR_INVALID_ARGUMENT", "digests")),
            ([b"x" * 31, b"y" * 33], ("ERR_INVALID_KEY", "digests[0]")),
            ([self.digests[0], "text"], ("ERR_INVALID_KEY", "digests[1]")),
            ((d for d in self.digests), ("ERR_INVALID_ARGUMENT", "digests")),
            (7, ("ERR_INVALID_ARGUMENT", "digests")),
            ({self.digests[0]: 1}, ("ERR_INVALID_ARGUMENT", "digests")),
        ]
        for bad, expected in cases:
            for call in (self.consumer.peek_many, self.consumer.peek_prefix, self.consumer.try_pin_prefix):
                with self.assertRaises(WaitprepError) as caught:
                    call(bad)  # type: ignore[arg-type]
                self.assertEqual((caught.exception.code, caught.exception.field), expected)
        self.consumer.close()
        self.assertEqual(self.consumer.peek_many(self.digests[:2]), ["table-closed", "table-closed"])
        self.assertEqual(self.consumer.peek_prefix(self.digests), 0)


@needs_library
class RunReleasedByIndex(TableCase):
    capacity = 64

    def setUp(self) -> None:
        super().setUp()
        self.digests = [digest_of(600 + i) for i in range(6)]
        for d in self.digests:
            self.publish(d)

    def held(self, run: waitprep.LeaseRun) -> "list[int]":
        return [self.consumer.client_pins(run._raw[i].slot) for i in range(len(run))]

    def test_positions_in_any_order_each_once_then_close_releases_the_rest(self) -> None:
        run = self.consumer.try_pin_prefix(self.digests)
        other = self.consumer.try_pin_prefix(self.digests)  # a second request loading the same blocks
        self.assertEqual(self.held(run), [2] * 6)
        self.assertEqual(run.release([4, 0, 2, 4]), 3)
        self.assertEqual(self.held(run), [1, 2, 1, 2, 1, 2])
        self.assertEqual(self.producer.try_evict(self.digests[0]), "pinned")  # the other request's pin
        self.assertEqual(run.release(array.array("I", [0, 1])), 1)
        self.assertEqual(run.close(), 2)
        self.assertEqual(run.release([3]), 0)  # closed: nothing left to release
        self.assertEqual(other.release(range(6)), 6)
        self.assertEqual(other.close(), 0)
        self.assertEqual(self.producer.summary().pinned_slots, 0)

    def test_a_lease_read_from_the_run_is_closed_by_its_release(self) -> None:
        run = self.consumer.try_pin_prefix(self.digests)
        lease = run[1]
        self.assertEqual(run.release([1]), 1)
        self.assertTrue(lease.closed)
        self.assertFalse(lease.close())
        self.assertTrue(run[2].close())
        self.assertEqual(run.release([2, 3]), 1)  # 2 was released by its lease
        self.assertEqual(run.close(), 3)

    def test_a_u32_buffer_gives_positions_and_other_widths_are_refused(self) -> None:
        # numpy's arrays where numpy imports, else memoryviews of array.array: both are buffers.
        u32 = (lambda v: numpy.array(v, dtype=numpy.uint32)) if numpy is not None else (lambda v: memoryview(array.array("I", v)))
        u64 = (lambda v: numpy.array(v, dtype=numpy.uint64)) if numpy is not None else (lambda v: memoryview(array.array("Q", v)))
        run = self.consumer.try_pin_prefix(self.digests)
        self.assertEqual(run.release(u32([5, 3])), 2)
        with self.assertRaises(WaitprepError):
            run.release(u64([1]))
        self.assertEqual(run.close(), 4)

    def test_a_bad_position_releases_nothing(self) -> None:
        run = self.consumer.try_pin_prefix(self.digests[:3])
        for bad in ([0, 3], [-1], ["0"], [0.5], b"\x00\x01", array.array("H", [0]), 5):
            with self.assertRaises(WaitprepError) as caught:
                run.release(bad)  # type: ignore[arg-type]
            self.assertEqual((caught.exception.code, caught.exception.field), ("ERR_INVALID_ARGUMENT", "indexes"))
        self.assertEqual(self.held(run), [1, 1, 1])
        self.assertEqual(run.close(), 3)

    def test_a_closed_table_releases_nothing(self) -> None:
        run = self.consumer.try_pin_prefix(self.digests)
        self.consumer.close()
        self.assertEqual(run.release([0, 1]), 0)
        self.assertEqual(self.producer.summary().pinned_slots, 0)


class ReadInto(unittest.TestCase):
    def setUp(self) -> None:
        self.root = tempfile.mkdtemp(prefix="wp-into-pytest-")
        self.addCleanup(shutil.rmtree, self.root, True)
        self.digest = hashlib.sha256(b"into").digest()
        self.payload = bytes(range(256)) * 4099  # not a multiple of a page
        data, self.header = encode_arena_record(self.digest, self.payload, 3, "bf16/NHD")
        os.makedirs(arena_directory("t", self.root))
        self.path = arena_path("t", 2, self.root)
        with open(self.path, "wb") as f:
            f.write(b"\0" * 64 + data)
        self.meta = dict(location=arena_location(2, 64), size_bytes=len(self.payload), checksum=self.header.checksum)

    def read(self, buffer: object, **kw: object) -> object:
        return read_arena_record_into("t", self.digest, kw.pop("meta", self.meta), buffer, root=self.root, **kw)  # type: ignore[arg-type]

    def test_every_writable_buffer_receives_the_payload(self) -> None:
        n = len(self.payload)
        buffers = {"bytearray": bytearray(n + 10), "mmap": mmap.mmap(-1, n), "memoryview": memoryview(bytearray(n)),
                   "array": array.array("Q", bytes(-(-n // 8) * 8))}
        if numpy is not None:
            buffers["numpy"] = numpy.zeros(n, dtype=numpy.uint8)
            buffers["numpy 2-d"] = numpy.zeros((2, -(-n // 2)), dtype=numpy.uint8)
        for kind, buf in buffers.items():
            for verify in (True, False):
                with self.subTest(kind=kind, verify=verify):
                    memoryview(buf).cast("B")[:] = b"\xaa" * memoryview(buf).nbytes
                    got = self.read(buf, verify_checksum=verify)
                    self.assertEqual(got, self.header)
                    self.assertIsInstance(got, RecordHeader)
                    self.assertEqual(memoryview(buf).cast("B")[:n].tobytes(), self.payload)
                    self.assertEqual(memoryview(buf).cast("B")[n:].tobytes(), b"\xaa" * (memoryview(buf).nbytes - n))

    def test_mismatches_are_the_readers_and_a_corrupt_payload_is_caught_only_with_the_checksum(self) -> None:
        buf = bytearray(len(self.payload))
        for meta, reason in ((dict(self.meta, size_bytes=1), "wrong-size"), (dict(self.meta, checksum=0), "wrong-checksum"),
                             (dict(self.meta, location=arena_location(3, 0)), "no-arena"), (dict(self.meta, location=arena_location(2, 8)), "bad-header"),
                             (dict(self.meta, location=arena_location(2, 1 << 24)), "out-of-bounds")):
            with self.subTest(reason=reason):
                got = self.read(buf, meta=meta)
                self.assertIsInstance(got, Mismatch)
                self.assertEqual(got.reason, read_arena_record("t", self.digest, meta, root=self.root).reason)  # type: ignore[union-attr]
                self.assertEqual(got.reason, reason)  # type: ignore[union-attr]
        self.assertEqual(read_arena_record_into("t", hashlib.sha256(b"other").digest(), self.meta, buf, root=self.root).reason, "wrong-key")  # type: ignore[union-attr]
        corrupt_at = 64 + ARENA_RECORD_HEADER_BYTES + 1000
        with open(self.path, "r+b") as f:
            f.seek(corrupt_at)
            f.write(b"\xff" if self.payload[1000] != 0xFF else b"\x00")
        self.assertEqual(self.read(buf).reason, "corrupt-payload")  # type: ignore[union-attr]
        self.assertEqual(self.read(buf, verify_checksum=False), self.header)  # the check is what catches it
        self.assertNotEqual(bytes(buf), self.payload)
        os.truncate(self.path, corrupt_at)
        self.assertEqual(self.read(buf).reason, "out-of-bounds")  # type: ignore[union-attr]

    def test_a_buffer_that_cannot_take_the_payload_is_refused(self) -> None:
        n = len(self.payload)
        refused = [bytes(n), bytearray(n - 1), memoryview(bytearray(2 * n))[::2], "text", None]
        if numpy is not None:
            refused.append(numpy.zeros((n, 2), dtype=numpy.uint8).T)  # not C-contiguous
        for buf in refused:
            with self.assertRaises(WaitprepError) as caught:
                self.read(buf)
            self.assertEqual((caught.exception.code, caught.exception.field), ("ERR_INVALID_ARGUMENT", "buffer"))


class ReadIntoInParts(unittest.TestCase):
    """A payload of PARALLEL_READ_BYTES or more is read in parts on several threads: every byte lands
    where it belongs, whatever the part boundaries, and a file that ends early is reported, not hung on."""

    def setUp(self) -> None:
        self.root = tempfile.mkdtemp(prefix="wp-parts-pytest-")
        self.addCleanup(shutil.rmtree, self.root, True)

    def test_a_large_payload_read_in_parts_is_the_record_byte_for_byte(self) -> None:
        from waitprep import _arena_into

        digest = hashlib.sha256(b"parts").digest()
        # Not a multiple of the part size, of 64 KiB or of a page; every 8-byte word says where it is.
        n = _arena_into.PARALLEL_READ_BYTES + 3 * 65536 + 1234
        payload = b"".join(i.to_bytes(8, "little") for i in range(-(-n // 8)))[:n]
        data, header = encode_arena_record(digest, payload, 0, "raw")
        os.makedirs(arena_directory("p", self.root))
        with open(arena_path("p", 0, self.root), "wb") as f:
            f.write(data)
        meta = dict(location=arena_location(0, 0), size_bytes=n, checksum=header.checksum)
        buf = bytearray(n)
        self.assertEqual(read_arena_record_into("p", digest, meta, buf, root=self.root), header)
        self.assertEqual(bytes(buf), payload)

    @unittest.skipUnless(hasattr(os, "fork"), "os.fork is not available here")
    def test_a_forked_child_reads_in_parts_after_its_parent_did(self) -> None:
        from waitprep import _arena_into

        path = os.path.join(self.root, "fork")
        n = _arena_into.PARALLEL_READ_BYTES + 65536
        with open(path, "wb") as f:
            f.write(b"\x02" * n)
        fd = os.open(path, os.O_RDONLY)
        self.addCleanup(os.close, fd)
        self.assertIsNone(_arena_into._read_parts(fd, memoryview(bytearray(n)), 0))  # the parent's pool now exists
        child = os.fork()
        if child == 0:  # pragma: no cover - the child's outcome is its exit status
            ok = False
            try:
                buf = bytearray(n)
                ok = _arena_into._read_parts(fd, memoryview(buf), 0) is None and buf == b"\x02" * n
            finally:
                os._exit(0 if ok else 1)
        deadline = time.monotonic() + 60
        while True:
            done, status = os.waitpid(child, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(child, 9)
                os.waitpid(child, 0)
                self.fail("the forked child's read in parts hung")
            time.sleep(0.01)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)

    def test_a_file_shorter_than_the_parts_is_a_short_read_not_a_hang(self) -> None:
        from waitprep import _arena_into

        path = os.path.join(self.root, "short")
        n = _arena_into.PARALLEL_READ_BYTES + 65536
        with open(path, "wb") as f:
            f.write(b"\x01" * (n // 2))
        fd = os.open(path, os.O_RDONLY)
        self.addCleanup(os.close, fd)
        buf = bytearray(n)
        short = _arena_into._read_parts(fd, memoryview(buf), 0)
        self.assertIsNotNone(short)
        self.assertLessEqual(short, n // 2)  # type: ignore[operator]
        self.assertEqual(bytes(buf[: n // 2]), b"\x01" * (n // 2))


@needs_library
class ReadIntoUnderALease(TableCase):
    def test_reads_through_a_lease_meta(self) -> None:
        root = tempfile.mkdtemp(prefix="wp-into-pytest-")
        self.addCleanup(shutil.rmtree, root, True)
        digest = digest_of(700)
        data, header = encode_arena_record(digest, b"payload bytes", 1, "raw")
        os.makedirs(arena_directory(self.name, root))
        with open(arena_path(self.name, 0, root), "wb") as f:
            f.write(data)
        self.producer.publish(self.producer.reserve(digest), size_bytes=header.payload_length, location=arena_location(0, 0),
                              checksum=header.checksum, codec_id=0, representation_version=1)
        buf = bytearray(64)
        with self.consumer.try_pin(digest) as lease:  # type: ignore[union-attr]
            self.assertEqual(read_arena_record_into(self.name, digest, lease.meta, buf, root=root), header)
        self.assertEqual(bytes(buf[: header.payload_length]), b"payload bytes")


@needs_library
@unittest.skipUnless(os.path.isfile(BENCH), "python/bench/engine_calls.py is not beside these tests")
class EngineCallsBench(unittest.TestCase):
    def test_it_runs_every_group_small_and_prints_each_case_beside_its_floor(self) -> None:
        run = subprocess.run([sys.executable, BENCH, "--rounds", "3", "--blocks", "64", "--peeks", "16", "--record-mib", "1", "--json"],
                             capture_output=True, text=True, env=child_env(), timeout=300)
        self.assertEqual(run.returncode, 0, run.stderr)
        out = json.loads(run.stdout)
        self.assertEqual({r["group"] for r in out["results"]}, {"peek", "runs", "read", "overhead"})
        for r in out["results"]:
            self.assertGreater(r["us"], 0, r)
        floored = [r for r in out["results"] if "floor_us" in r]
        self.assertTrue(all(r["floor_us"] > 0 and r["x_floor"] > 0 for r in floored))
        for case in ("peek_many(packed)", "peek_prefix(packed)", "prepare+complete, run released by index", "try_pin_exact(parsed token) + close"):
            self.assertIn(case, [r["case"] for r in floored])
        self.assertTrue(any(r["case"].startswith("read_arena_record_into(bytearray)") and r["of_memcpy"] > 0 for r in out["results"]))


if __name__ == "__main__":
    unittest.main()
