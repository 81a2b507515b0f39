"""What the tests share: the library (or why it is missing), fresh table names, the repo's vectors."""

from __future__ import annotations

import os
import sys
import unittest
from typing import Optional

import waitprep

# CI runs the suite against the copy `pip install` put in a virtual environment and says so: then
# a test that found the checkout's copy instead would test the wrong files.
if os.environ.get("WAITPREP_TEST_INSTALLED") == "1" and not os.path.abspath(waitprep.__file__).startswith(os.path.abspath(sys.prefix) + os.sep):
    raise RuntimeError("WAITPREP_TEST_INSTALLED=1, but waitprep was imported from %s, not from %s" % (waitprep.__file__, sys.prefix))

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEY_VECTORS = os.path.join(REPO, "test", "vectors", "keys.json")


def _library_problem() -> Optional[str]:
    try:
        waitprep.load_library()
    except waitprep.WaitprepError as error:
        return str(error)
    return None


LIBRARY_PROBLEM = _library_problem()

#: Decorates a TestCase that needs libwaitprep.so: skipped, saying why, where it cannot load.
needs_library = unittest.skipIf(LIBRARY_PROBLEM is not None, "libwaitprep.so: %s" % LIBRARY_PROBLEM)

_serial = [0]


def table_name(what: str) -> str:
    """A table name no other test or run uses."""
    _serial[0] += 1
    return "wp-pytest-%s-%d-%d" % (what, os.getpid(), _serial[0])


class TableCase(unittest.TestCase):
    """Gives each test a producer table of 16 slots (``self.producer``) and a consumer
    (``self.consumer``) on it, closed and unlinked afterwards."""

    capacity = 16

    def setUp(self) -> None:
        self.name = table_name(type(self).__name__.lower())
        self.producer = waitprep.create_table(self.name, self.capacity)
        self.addCleanup(waitprep.unlink_table, self.name)
        self.addCleanup(self.producer.close)
        self.consumer = waitprep.open_table(self.name)
        self.addCleanup(self.consumer.close)

    def publish(self, digest: bytes, location: int = 0) -> waitprep.Reservation:
        reservation = self.producer.reserve(digest)
        self.producer.publish(reservation, size_bytes=4096, location=location, checksum=7, codec_id=1, representation_version=2)
        return reservation


def child_env() -> dict:
    """This environment for a child process, with this copy of the package and its library."""
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(waitprep.__file__)))
    return dict(os.environ, PYTHONPATH=package_root, WAITPREP_LIBRARY=waitprep.load_library()._name, PYTHONDONTWRITEBYTECODE="1")


def digest_of(n: int) -> bytes:
    import hashlib

    return hashlib.sha256(b"key-%d" % n).digest()
