"""The example programs in examples/python, run as a user runs them (when this is a checkout)."""

from __future__ import annotations

import os
import subprocess
import sys
import unittest

import waitprep

from _support import REPO, TableCase, digest_of, needs_library

EXAMPLES = os.path.join(REPO, "examples", "python")


@needs_library
@unittest.skipUnless(os.path.isdir(EXAMPLES), "examples/python is not beside this checkout of python/")
class EnginePin(TableCase):
    def run_example(self, *args: str) -> subprocess.CompletedProcess:
        package_root = os.path.dirname(os.path.dirname(os.path.abspath(waitprep.__file__)))
        env = dict(os.environ, PYTHONPATH=package_root, WAITPREP_LIBRARY=waitprep.load_library()._name, PYTHONDONTWRITEBYTECODE="1")
        return subprocess.run([sys.executable, os.path.join(EXAMPLES, "engine_pin.py"), *args], capture_output=True, text=True, env=env, timeout=60)

    def test_it_pins_what_was_published_and_releases_it(self) -> None:
        r = self.publish(digest_of(1), location=0x1000)
        run = self.run_example(self.name, digest_of(1).hex())
        self.assertEqual((run.returncode, run.stderr), (0, ""))
        self.assertEqual(run.stdout, "hit: slot %d generation %d, 4096 bytes at 0x1000\n" % (r.slot, r.generation))
        self.assertEqual(self.producer.try_evict(digest_of(1)), "evicted")

    def test_a_miss_prints_its_reason_and_exits_1(self) -> None:
        self.producer.reserve(digest_of(2))
        run = self.run_example(self.name, digest_of(2).hex())
        self.assertEqual((run.returncode, run.stdout), (1, "miss: preparing\n"))


if __name__ == "__main__":
    unittest.main()
