"""Arena records under hostile input (waitprep.arena, docs/arena-records.md), as Node's
test/lease-table/arena-record-hostile.test.ts: whatever sits at an arena's path is a Mismatch value, returned
without blocking or allocating; a malformed meta or argument is ERR_INVALID_ARGUMENT before the
file is opened; and an arena directory is created or accepted only under the lease table's trust
rules (ERR_UNTRUSTED_ARENA otherwise)."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # _support; waitprep itself comes from the installed copy or PYTHONPATH

from _support import TableCase, child_env, needs_library  # noqa: E402
from waitprep import WaitprepError  # noqa: E402
from waitprep.arena import (  # noqa: E402
    MAX_ARENA_RECORD_PAYLOAD_BYTES,
    ArenaRecord,
    Mismatch,
    arena_directory,
    arena_location,
    arena_path,
    check_arena_directory,
    check_record_header,
    decode_record_header,
    encode_arena_record,
    encode_record_header,
    ensure_arena_directory,
    is_arena_file_name,
    read_arena_record,
    record_checksum,
)

DIGEST = hashlib.sha256(b"hostile").digest()
PAYLOAD = b"eleven byte"


class ArenaCase(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="wp-arena-hostile-")
        self.addCleanup(shutil.rmtree, self.root, True)

    def one_record(self):
        """Table ``t``'s arena 0 holding one record of DIGEST; its meta and path."""
        data, header = encode_arena_record(DIGEST, PAYLOAD, 1, "raw")
        os.makedirs(arena_directory("t", self.root))
        path = arena_path("t", 0, self.root)
        with open(path, "wb") as f:
            f.write(data)
        return dict(location=arena_location(0, 0), size_bytes=len(PAYLOAD), checksum=header.checksum), path

    def read(self, meta, **kw):
        return read_arena_record("t", kw.pop("key", DIGEST), meta, root=kw.pop("root", self.root), **kw)

    def refused(self, code, call, *args, **kw):
        with self.assertRaises(WaitprepError) as caught:
            call(*args, **kw)
        self.assertEqual(caught.exception.code, code, caught.exception)
        return caught.exception


class WhatSitsAtThePath(ArenaCase):
    def test_a_fifo_is_no_arena_at_once(self):
        meta, path = self.one_record()
        os.unlink(path)
        os.mkfifo(path)

        def rescue():
            # A blocking open waits for a writer for ever: this is one, after 3 s, so that a reader
            # that blocks ends (and fails the test) instead of hanging the run. A reader that did
            # not block has left, and this nonblocking open finds no reader.
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass

        rescuer = threading.Timer(3.0, rescue)
        rescuer.start()
        self.addCleanup(rescuer.cancel)
        got = self.read(meta)
        self.assertIsInstance(got, Mismatch, got)
        self.assertEqual(got.reason, "no-arena")
        self.assertIn("FIFO", got.message)

    def test_a_directory_is_no_arena_not_an_exception(self):
        meta, path = self.one_record()
        os.unlink(path)
        os.mkdir(path)
        got = self.read(meta)
        self.assertEqual((type(got), got.reason), (Mismatch, "no-arena"))
        self.assertIn("directory", got.message)

    def test_a_symbolic_link_is_never_followed(self):
        meta, path = self.one_record()
        elsewhere = os.path.join(self.root, "elsewhere.wpa")
        shutil.copyfile(path, elsewhere)
        os.unlink(path)
        os.symlink(elsewhere, path)
        got = self.read(meta)
        self.assertEqual((type(got), got.reason), (Mismatch, "no-arena"))
        self.assertIn("symbolic link", got.message)

    def test_a_sparse_file_announcing_5_gib_is_out_of_bounds_without_allocating_it(self):
        meta, path = self.one_record()
        huge = 5 << 30
        with open(path, "wb") as f:
            f.write(encode_record_header(DIGEST, huge, 1, "raw", 0))
            f.truncate(96 + huge)  # sparse: no page of it is written
        # In a child whose address space is capped at 1.5 GiB, so that a reader that allocates
        # what the header says fails there (MemoryError) instead of taking this machine's memory.
        script = "\n".join([
            "import json, resource, sys",
            "resource.setrlimit(resource.RLIMIT_AS, (3 << 29, 3 << 29))",
            "from waitprep.arena import read_arena_record",
            "a = json.loads(sys.argv[1])",
            "out = []",
            "for meta in a['metas']:",
            "    try:",
            "        got = read_arena_record('t', bytes.fromhex(a['digest']), meta, root=a['root'])",
            "        out.append([type(got).__name__, getattr(got, 'reason', None), getattr(got, 'message', '')])",
            "    except BaseException as error:",
            "        out.append([type(error).__name__, None, str(error)])",
            "print(json.dumps(out))",
        ])
        metas = [dict(location=meta["location"]), dict(location=meta["location"], size_bytes=huge)]
        run = subprocess.run([sys.executable, "-c", script, json.dumps(dict(digest=DIGEST.hex(), root=self.root, metas=metas))],
                             capture_output=True, text=True, env=child_env() if _has_library() else _plain_env(), timeout=120)
        self.assertEqual(run.returncode, 0, run.stderr)
        for kind, reason, message in json.loads(run.stdout):
            self.assertEqual((kind, reason), ("Mismatch", "out-of-bounds"), message)
            self.assertIn(str(MAX_ARENA_RECORD_PAYLOAD_BYTES), message)

    def test_a_payload_over_the_maximum_is_out_of_bounds_even_where_the_file_holds_it(self):
        meta, path = self.one_record()
        over = MAX_ARENA_RECORD_PAYLOAD_BYTES + 1
        with open(path, "wb") as f:
            f.write(encode_record_header(DIGEST, over, 1, "raw", 0))
            f.truncate(96 + over)
        got = self.read(dict(location=meta["location"]))
        self.assertEqual((type(got), got.reason), (Mismatch, "out-of-bounds"))


def _has_library():
    from _support import LIBRARY_PROBLEM

    return LIBRARY_PROBLEM is None


def _plain_env():
    import waitprep

    return dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(waitprep.__file__))), PYTHONDONTWRITEBYTECODE="1")


class MalformedArguments(ArenaCase):
    def test_a_meta_field_that_is_not_a_u64_is_refused_naming_it(self):
        meta, _ = self.one_record()
        for value in (11.0, "11", True, -1, 2**64, float("nan"), [11], b"11"):
            for name in ("size_bytes", "checksum", "location"):
                with self.subTest(field=name, value=value):
                    error = self.refused("ERR_INVALID_ARGUMENT", self.read, dict(meta, **{name: value}))
                    self.assertEqual(error.field, "meta." + name)
        self.assertEqual(self.refused("ERR_INVALID_ARGUMENT", self.read, dict(size_bytes=11)).field, "meta.location")
        for bad in (None, "x", 7, 1.5, b"meta", object()):
            with self.subTest(meta=bad):
                self.assertEqual(self.refused("ERR_INVALID_ARGUMENT", self.read, bad).field, "meta")
        # A lease's meta, a mapping, and an object with the fields are all taken.
        lease_meta = type("Meta", (), dict(location=meta["location"], size_bytes=len(PAYLOAD), checksum=meta["checksum"]))()
        for good in (meta, lease_meta, dict(meta, size_bytes=None, checksum=None)):
            self.assertIsInstance(self.read(good), ArenaRecord)

    def test_the_other_arguments_are_checked_before_the_file_is_opened(self):
        meta, _ = self.one_record()
        missing = dict(meta, location=arena_location(9, 0))
        self.assertEqual(self.read(missing).reason, "no-arena")
        for field, kw in (
            ("key", dict(key=b"short")),
            ("key", dict(key="not a digest")),
            ("root", dict(root=None)),
            ("root", dict(root="")),
            ("root", dict(root=5)),
            ("verify_checksum", dict(verify_checksum="no")),
            ("verify_checksum", dict(verify_checksum=1)),
        ):
            with self.subTest(field=field, kw=kw):
                self.assertEqual(self.refused("ERR_INVALID_ARGUMENT", self.read, missing, **kw).field, field)
        self.assertEqual(self.refused("ERR_INVALID_ARGUMENT", read_arena_record, "../t", DIGEST, missing, root=self.root).field, "table_name")

    def test_check_record_header_refuses_a_malformed_meta_or_header(self):
        header = decode_record_header(encode_arena_record(DIGEST, PAYLOAD, 1, "raw")[0])
        self.assertIsNone(check_record_header(header, DIGEST, dict(size_bytes=11)))
        for size in ("11", 11.0, True):
            self.assertEqual(self.refused("ERR_INVALID_ARGUMENT", check_record_header, header, DIGEST, dict(size_bytes=size)).field, "meta.size_bytes")
        self.assertEqual(self.refused("ERR_INVALID_ARGUMENT", check_record_header, (DIGEST, 11), DIGEST).field, "header")

    def test_bytes_arguments_must_be_bytes(self):
        for call, field in (
            (lambda v: record_checksum(v), "payload"),
            (lambda v: encode_arena_record(DIGEST, v, 1, "raw"), "payload"),
            (lambda v: decode_record_header(v), "data"),
        ):
            for bad in (None, "text", 5, [1, 2]):
                with self.subTest(field=field, bad=bad):
                    self.assertEqual(self.refused("ERR_INVALID_ARGUMENT", call, bad).field, field)
        self.assertEqual(self.refused("ERR_INVALID_ARGUMENT", arena_directory, "t", None).field, "root")
        self.assertFalse(is_arena_file_name(5))
        self.assertFalse(is_arena_file_name("1.wpa\n"))


class ArenaDirectoryTrust(ArenaCase):
    def test_created_owner_writable_only_and_found_again_trusted(self):
        self.assertFalse(check_arena_directory("t", self.root))
        made = ensure_arena_directory("t", self.root)
        self.assertEqual(made, arena_directory("t", self.root))
        umask = os.umask(0)
        os.umask(umask)
        self.assertEqual(os.stat(made).st_mode & 0o777, 0o755 & ~umask)
        with open(os.path.join(made, "0.wpa"), "wb"):
            pass
        os.chmod(os.path.join(made, "0.wpa"), 0o644)
        self.assertTrue(check_arena_directory("t", self.root))
        self.assertEqual(ensure_arena_directory("t", self.root), made)

    def test_links_write_bits_and_untrusted_entries_are_refused(self):
        def link_dir(arena):
            os.mkdir(arena + ".real")
            os.symlink(arena + ".real", arena)

        def writable(mode):
            def plant(arena):
                os.mkdir(arena)
                os.chmod(arena, mode)
            return plant

        def entry(make):
            def plant(arena):
                os.mkdir(arena)
                make(os.path.join(arena, "0.wpa"))
            return plant

        def world_writable_file(path):
            with open(path, "wb"):
                pass
            os.chmod(path, 0o666)

        cases = (
            ("a link to a directory", link_dir, "symbolic link"),
            ("a group-writable directory", writable(0o775), "mode 0o775"),
            ("a world-writable directory", writable(0o757), "mode 0o757"),
            ("a file, not a directory", lambda arena: open(arena, "wb").close(), "not a directory"),
            ("a linked entry", entry(lambda path: os.symlink("/etc/passwd", path)), "symbolic link"),
            ("a world-writable entry", entry(world_writable_file), "mode 0o666"),
            ("a directory entry", entry(os.mkdir), "not a regular file"),
            ("a FIFO entry", entry(os.mkfifo), "not a regular file"),
        )
        for what, plant, says in cases:
            with self.subTest(what=what):
                root = tempfile.mkdtemp(prefix="wp-arena-hostile-", dir=self.root)
                plant(arena_directory("t", root))
                for call in (check_arena_directory, ensure_arena_directory):
                    error = self.refused("ERR_UNTRUSTED_ARENA", call, "t", root)
                    self.assertIn(says, str(error))

    def test_a_root_others_may_write_needs_the_sticky_bit(self):
        os.chmod(self.root, 0o777)
        self.refused("ERR_UNTRUSTED_ARENA", ensure_arena_directory, "t", self.root)
        self.assertFalse(os.path.exists(arena_directory("t", self.root)))
        self.assertFalse(check_arena_directory("t", os.path.join(self.root, "absent")))
        os.chmod(self.root, 0o1777)
        self.assertEqual(ensure_arena_directory("t", self.root), arena_directory("t", self.root))

    def test_trusted_write_bits_are_accepted_and_malformed_arguments_refused(self):
        os.mkdir(arena_directory("t", self.root))
        os.chmod(arena_directory("t", self.root), 0o775)
        self.assertTrue(check_arena_directory("t", self.root, trust_group_writable=True))
        for field, call in (
            ("mode", lambda: ensure_arena_directory("u", self.root, mode=0o775)),
            ("mode", lambda: ensure_arena_directory("u", self.root, mode=0o600)),
            ("mode", lambda: ensure_arena_directory("u", self.root, mode=True)),
            ("trust_group_writable", lambda: check_arena_directory("t", self.root, trust_group_writable=1)),
            ("trust_uid", lambda: check_arena_directory("t", self.root, trust_uid=-1)),
            ("trust_uid", lambda: check_arena_directory("t", self.root, trust_uid=True)),
            ("table_name", lambda: ensure_arena_directory("../x", self.root)),
            ("root", lambda: ensure_arena_directory("t", None)),
        ):
            with self.subTest(field=field):
                self.assertEqual(self.refused("ERR_INVALID_ARGUMENT", call).field, field)

    @unittest.skipUnless(os.geteuid() == 0, "not running as root, so no second uid to own a directory")
    def test_another_uids_directory_or_entry_is_refused_unless_trusted(self):
        arena = arena_directory("t", self.root)
        os.mkdir(arena)
        os.chown(arena, 65534, 65534)
        self.assertIn("owned by uid 65534", str(self.refused("ERR_UNTRUSTED_ARENA", ensure_arena_directory, "t", self.root)))
        self.assertEqual(ensure_arena_directory("t", self.root, trust_uid=65534), arena)
        os.chown(arena, 0, 0)
        with open(os.path.join(arena, "3.wpa"), "wb"):
            pass
        os.chown(os.path.join(arena, "3.wpa"), 65534, 65534)
        self.assertIn("3.wpa is owned by uid 65534", str(self.refused("ERR_UNTRUSTED_ARENA", check_arena_directory, "t", self.root)))


@needs_library
class LeaseMetaRead(TableCase):
    def test_a_directory_at_a_leases_arena_is_a_value(self):
        root = tempfile.mkdtemp(prefix="wp-arena-hostile-")
        self.addCleanup(shutil.rmtree, root, True)
        os.makedirs(arena_path(self.name, 4, root))
        self.producer.publish(self.producer.reserve(DIGEST), size_bytes=11, location=arena_location(4, 0), checksum=1, codec_id=0, representation_version=1)
        with self.consumer.try_pin(DIGEST) as lease:
            got = read_arena_record(self.name, DIGEST, lease.meta, root=root)
        self.assertEqual((type(got), got.reason), (Mismatch, "no-arena"))


if __name__ == "__main__":
    unittest.main()
