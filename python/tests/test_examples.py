"""The example programs in examples/python, run as a user runs them (when this is a checkout)."""

from __future__ import annotations

import os
import subprocess
import sys
import unittest

import waitprep

from _support import REPO, TableCase, child_env, digest_of, needs_library

EXAMPLES = os.path.join(REPO, "examples", "python")


@needs_library
@unittest.skipUnless(os.path.isdir(EXAMPLES), "examples/python is not beside this checkout of python/")
class EnginePin(TableCase):
    def run_example(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, os.path.join(EXAMPLES, "engine_pin.py"), *args], capture_output=True, text=True, env=child_env(), timeout=60)

    def test_it_pins_what_was_published_and_releases_it(self) -> None:
        r = self.publish(digest_of(1), location=0x1000)
        run = self.run_example(self.name, digest_of(1).hex())
        self.assertEqual((run.returncode, run.stderr), (0, ""))
        token = waitprep.format_handoff_token(self.name, r.slot, r.generation, digest_of(1))
        self.assertEqual(run.stdout, "hit: slot %d generation %d, 4096 bytes at 0x1000, token %s\n" % (r.slot, r.generation, token))
        self.assertEqual(self.producer.try_evict(digest_of(1)), "evicted")

    def test_with_a_token_it_pins_exactly_that_lease_and_holds_it_until_told(self) -> None:
        self.publish(digest_of(1))
        handing = self.consumer.try_pin(digest_of(1))
        assert isinstance(handing, waitprep.Lease)
        token = handing.handoff_token()
        child = subprocess.Popen(
            [sys.executable, os.path.join(EXAMPLES, "engine_pin.py"), "--token", token, "--hold"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(),
        )
        self.addCleanup(child.kill)
        assert child.stdout is not None and child.stdin is not None
        self.assertTrue(child.stdout.readline().endswith(", token %s\n" % token))
        handing.close()
        self.assertEqual(self.producer.try_evict(digest_of(1)), "pinned")
        child.stdin.write("done\n")
        child.stdin.flush()
        self.assertEqual(child.stdout.readline(), "released\n")
        self.assertEqual(child.wait(timeout=60), 0)
        self.assertEqual(self.producer.try_evict(digest_of(1)), "evicted")
        run = self.run_example("--token", token)
        self.assertEqual((run.returncode, run.stdout), (1, "miss: stale-handoff\n"))

    def test_a_miss_prints_its_reason_and_exits_1(self) -> None:
        self.producer.reserve(digest_of(2))
        run = self.run_example(self.name, digest_of(2).hex())
        self.assertEqual((run.returncode, run.stdout), (1, "miss: preparing\n"))


if __name__ == "__main__":
    unittest.main()
