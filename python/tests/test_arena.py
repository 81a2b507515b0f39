"""Arena records (waitprep.arena, docs/arena-records.md): the location split, the naming rule, the
96-byte header (the worked example's bytes, which Node also writes: test/lease-table/arena-record.test.ts) and
a reader that returns a payload only when it belongs to the key and the meta."""

import hashlib
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # _support; waitprep itself comes from the installed copy or PYTHONPATH

from _support import TableCase, needs_library  # noqa: E402
from waitprep import WaitprepError  # noqa: E402
from waitprep.arena import (  # noqa: E402
    ARENA_RECORD_HEADER_BYTES,
    MAX_ARENA_INDEX,
    MAX_ARENA_OFFSET,
    ArenaRecord,
    Mismatch,
    RecordHeader,
    arena_directory,
    arena_location,
    arena_path,
    check_record_header,
    decode_record_header,
    encode_arena_record,
    encode_record_header,
    is_arena_file_name,
    read_arena_record,
    record_checksum,
    split_location,
)

EXAMPLE_DIGEST = hashlib.sha256(b"waitprep").digest()
EXAMPLE_HEADER = (
    "5750415201006000c0567d5ebeed3882d0a1ce75d45cf397eee6de82bfab7db697f04caca15870760b000000000000000200000000000000"
    "626631362f4e484400000000000000000000000000000000fcb96c5cafa683370000000000000000"
)


class LocationAndNameTests(unittest.TestCase):
    def test_location_split(self):
        self.assertEqual(arena_location(3, 4096), (3 << 48) | 4096)
        self.assertEqual(split_location((3 << 48) | 4096), (3, 4096))
        self.assertEqual(split_location(arena_location(MAX_ARENA_INDEX, MAX_ARENA_OFFSET)), (MAX_ARENA_INDEX, MAX_ARENA_OFFSET))
        for arena, offset, field in ((MAX_ARENA_INDEX + 1, 0, "arena"), (-1, 0, "arena"), (0, 2**48, "offset"), (0, True, "offset")):
            with self.assertRaises(WaitprepError) as caught:
                arena_location(arena, offset)
            self.assertEqual((caught.exception.code, caught.exception.field), ("ERR_INVALID_ARGUMENT", field))
        with self.assertRaises(WaitprepError):
            split_location(2**64)

    def test_names_from_the_table(self):
        self.assertEqual(arena_directory("engine0-kv"), "/dev/shm/engine0-kv-arena")
        self.assertEqual(arena_path("engine0-kv", 3), "/dev/shm/engine0-kv-arena/3.wpa")
        self.assertEqual(arena_path("engine0-kv", 0, "/tmp/x"), "/tmp/x/engine0-kv-arena/0.wpa")
        with self.assertRaises(WaitprepError):
            arena_directory("../etc")
        for name in ("0.wpa", "3.wpa", "65535.wpa"):
            self.assertTrue(is_arena_file_name(name))
        for name in ("03.wpa", "65536.wpa", "1.safetensors", "x.wpa", ".wpa"):
            self.assertFalse(is_arena_file_name(name))


class HeaderTests(unittest.TestCase):
    def test_worked_example(self):
        data, header = encode_arena_record(EXAMPLE_DIGEST, b"hello arena", 2, "bf16/NHD")
        self.assertEqual(data[:ARENA_RECORD_HEADER_BYTES].hex(), EXAMPLE_HEADER)
        self.assertEqual(data[ARENA_RECORD_HEADER_BYTES:], b"hello arena")
        self.assertEqual(header, RecordHeader(EXAMPLE_DIGEST, 11, 2, "bf16/NHD", record_checksum(b"hello arena")))
        self.assertEqual(record_checksum(b"hello arena"), int.from_bytes(hashlib.sha256(b"hello arena").digest()[:8], "big"))
        self.assertEqual(decode_record_header(bytes.fromhex(EXAMPLE_HEADER)), header)

    def test_refusals(self):
        good = bytes.fromhex(EXAMPLE_HEADER)
        for at, byte in ((0, 0x58), (4, 2), (6, 64), (66, 0x41), (56, 0x20), (56, 0), (90, 1)):
            bad = bytearray(good)
            bad[at] = byte
            self.assertEqual(decode_record_header(bytes(bad)).reason, "bad-header", at)
        self.assertEqual(decode_record_header(good[:95]).reason, "out-of-bounds")
        for fmt in ("has space", "x" * 25, ""):
            with self.assertRaises(WaitprepError):
                encode_record_header(EXAMPLE_DIGEST, 0, 0, fmt, 0)
        header = decode_record_header(good)
        meta = dict(location=0, size_bytes=11, checksum=header.checksum)
        self.assertIsNone(check_record_header(header, EXAMPLE_DIGEST, meta))
        self.assertEqual(check_record_header(header, b"\0" * 32, meta).reason, "wrong-key")
        self.assertEqual(check_record_header(header, EXAMPLE_DIGEST, dict(meta, size_bytes=12)).reason, "wrong-size")
        self.assertEqual(check_record_header(header, EXAMPLE_DIGEST, dict(meta, checksum=1)).reason, "wrong-checksum")


class ReadTests(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="wp-arena-pytest-")
        self.addCleanup(shutil.rmtree, self.root, True)
        self.digests = [hashlib.sha256(b"k%d" % i).digest() for i in range(2)]
        self.payloads = [b"first payload", b"\x07" * 70000]
        records = [encode_arena_record(d, p, 4, "bf16/NHD") for d, p in zip(self.digests, self.payloads)]
        second = -(-len(records[0][0]) // 8) * 8
        os.makedirs(arena_directory("t", self.root))
        self.path = arena_path("t", 5, self.root)
        with open(self.path, "wb") as f:
            f.write(records[0][0].ljust(second, b"\0") + records[1][0])
        self.metas = [dict(location=arena_location(5, off), size_bytes=len(p), checksum=r[1].checksum)
                      for off, p, r in zip((0, second), self.payloads, records)]

    def read(self, key=None, meta=None, table="t", **kw):
        return read_arena_record(table, self.digests[1] if key is None else key, self.metas[1] if meta is None else meta, root=self.root, **kw)

    def test_reads_each_record(self):
        for i in range(2):
            got = read_arena_record("t", self.digests[i], self.metas[i], root=self.root)
            self.assertIsInstance(got, ArenaRecord, got)
            self.assertEqual(got.payload, self.payloads[i])

    def test_every_mismatch_is_a_value(self):
        m = self.metas[1]
        self.assertEqual(self.read(key=self.digests[0]).reason, "wrong-key")
        self.assertEqual(self.read(meta=dict(m, size_bytes=1)).reason, "wrong-size")
        self.assertEqual(self.read(meta=dict(m, checksum=0)).reason, "wrong-checksum")
        self.assertEqual(self.read(meta=dict(m, location=arena_location(6, 0))).reason, "no-arena")
        self.assertEqual(self.read(meta=dict(m, location=arena_location(5, 1 << 20))).reason, "out-of-bounds")
        self.assertEqual(self.read(meta=dict(m, location=arena_location(5, 8))).reason, "bad-header")
        self.assertEqual(self.read(table="other").reason, "no-arena")
        offset = split_location(m["location"])[1] + ARENA_RECORD_HEADER_BYTES + 500
        with open(self.path, "r+b") as f:
            f.seek(offset)
            f.write(b"\x08")
        self.assertEqual(self.read().reason, "corrupt-payload")
        self.assertIsInstance(self.read(verify_checksum=False), ArenaRecord)
        os.truncate(self.path, offset)
        self.assertIsInstance(self.read(), Mismatch)
        self.assertEqual(self.read().reason, "out-of-bounds")


@needs_library
class LeaseMetaTests(TableCase):
    def test_reads_through_a_lease_meta(self):
        """The reader takes a lease's LeaseMeta as it comes from try_pin."""
        root = tempfile.mkdtemp(prefix="wp-arena-pytest-")
        self.addCleanup(shutil.rmtree, root, True)
        digest = hashlib.sha256(b"lease-meta").digest()
        data, header = encode_arena_record(digest, b"payload", 1, "raw")
        os.makedirs(arena_directory(self.name, root))
        with open(arena_path(self.name, 1, root), "wb") as f:
            f.write(data)
        reservation = self.producer.reserve(digest)
        self.producer.publish(reservation, size_bytes=header.payload_length, location=arena_location(1, 0), checksum=header.checksum,
                              codec_id=0, representation_version=1)
        with self.consumer.try_pin(digest) as lease:
            got = read_arena_record(self.name, digest, lease.meta, root=root)
        self.assertIsInstance(got, ArenaRecord, got)
        self.assertEqual(got.payload, b"payload")


if __name__ == "__main__":
    unittest.main()
