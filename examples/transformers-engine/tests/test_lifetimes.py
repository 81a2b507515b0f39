"""Lifetimes, with the engine as its own process: the storage tier's eviction is refused while the
engine holds the pin it took from a handoff token, and an engine killed while it holds one leaves
nothing pinned once the table reaps it."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import unittest
from array import array

from _support import EXAMPLE, REPO, SEED, StorageCase, library_problem, tokens

import waitprep

PROBLEM = library_problem()


@unittest.skipIf(PROBLEM is not None, "libwaitprep.so: %s" % PROBLEM)
class Lifetimes(StorageCase, unittest.TestCase):
    def setUp(self) -> None:
        super().setUp()
        self.context = tokens(70, 96)
        self.digest, _, _ = self.publish_context(self.context)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([EXAMPLE, os.path.join(REPO, "python")]), PYTHONDONTWRITEBYTECODE="1")
        self.engine = subprocess.Popen(
            [sys.executable, "-m", "tfengine.engine", "--geometry", "tiny", "--seed", str(SEED), "--disk", self.disk],
            cwd=EXAMPLE, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        self.addCleanup(self.stop)
        self.assertEqual(self.read()["event"], "ready")

    def stop(self) -> None:
        if self.engine.poll() is None:
            self.engine.kill()
        self.engine.wait()
        self.engine.stdin.close()
        self.engine.stdout.close()

    def read(self) -> dict:
        line = self.engine.stdout.readline()
        self.assertTrue(line, "the engine closed its stdout")
        return json.loads(line)

    def send(self, message: dict) -> None:
        self.engine.stdin.write(json.dumps(message) + "\n")
        self.engine.stdin.flush()

    def send_turn(self, token: str) -> None:
        prompt = self.context + tokens(71, 8)
        request = {
            "op": "turn", "id": 1, "tokens": base64.b64encode(array("I", prompt).tobytes()).decode(),
            "task": "task-0", "namespace": "team-a", "pageGeneration": 0,
            "keyHex": waitprep.key_digest(self.fields(prompt)).hex(), "save": False, "decode": 2,
            "prefix": {"length": len(self.context), "keyHex": self.digest.hex()}, "handoff": token, "holdPin": True,
        }
        self.send(request)

    def hand_over(self) -> None:
        """The orchestrator's side of a handoff: pin, pass the token, close once the engine holds
        its own pin. The engine then keeps it until it is sent {"op": "release"}."""
        lease = self.consumer.try_pin(self.digest)
        self.assertNotIsInstance(lease, str)
        self.send_turn(lease.handoff_token())
        self.assertEqual(self.read(), {"event": "pinned", "id": 1})
        lease.close()
        self.assertEqual(self.producer.summary().pinned_slots, 1)

    def test_eviction_is_refused_while_the_engine_holds_its_pin(self) -> None:
        self.hand_over()
        self.assertEqual(self.tier.evict(self.digest), "pinned")
        self.assertEqual(self.consumer.peek(self.digest), "ready")
        self.send({"op": "release"})
        reply = self.read()
        self.assertEqual((reply["event"], reply["path"], reply["cachedTokens"]), ("turn", "leased", len(self.context)))
        self.assertEqual(self.producer.summary().pinned_slots, 0)
        self.assertEqual(self.tier.evict(self.digest), "evicted")
        self.assertEqual(self.consumer.try_pin(self.digest), "absent")
        self.assertEqual(os.listdir(self.tier.directory), [])

    def test_an_engine_killed_mid_turn_leaves_nothing_pinned_after_a_reap(self) -> None:
        self.hand_over()
        os.kill(self.engine.pid, signal.SIGKILL)
        self.assertEqual(self.engine.wait(), -signal.SIGKILL)
        # Dead, its pin still counts until a reap: the artifact must not vanish under a live reader
        # the table cannot yet tell from a dead one.
        self.assertEqual(self.tier.evict(self.digest), "pinned")
        self.assertGreaterEqual(self.producer.reap_dead_clients(), 1)
        self.assertEqual(self.producer.summary().pinned_slots, 0)
        self.assertEqual(self.tier.evict(self.digest), "evicted")
        self.assertEqual(self.tier.stats()["evictRefusedPinned"], 1)


if __name__ == "__main__":
    unittest.main()
