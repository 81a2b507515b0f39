"""Identity: a changed token, task, namespace or page generation is a different key, a miss, and
never someone else's KV, even with a valid handoff token for the original in hand."""

from __future__ import annotations

import base64
import io
import unittest
from array import array

from _support import StorageCase, engine, library_problem, tokens

import waitprep

from tfengine.engine import EngineServer

PROBLEM = library_problem()


def b64(layout):
    return base64.b64encode(array("I", layout).tobytes()).decode()


@unittest.skipIf(PROBLEM is not None, "libwaitprep.so: %s" % PROBLEM)
class Identity(StorageCase, unittest.TestCase):
    def setUp(self) -> None:
        super().setUp()
        self.context = tokens(60, 80)
        self.prompt = self.context + tokens(61, 8)
        self.digest, _, _ = self.publish_context(self.context)
        self.server = EngineServer(engine(), self.disk, out=io.StringIO())
        self.addCleanup(self.server.close)
        changed = list(self.context)
        changed[40] = (changed[40] + 1) % 128_256
        self.variants = {
            "one token": (changed, {}),
            "task": (self.context, {"task": "task-1"}),
            "namespace": (self.context, {"namespace": "team-b"}),
            "page generation": (self.context, {"page_generation": 1}),
        }

    def request(self, context, handoff, task="task-0", namespace="team-a", page_generation=0):
        prompt = list(context) + self.prompt[len(self.context):]
        fields = self.fields(prompt, task, namespace, page_generation)
        prefix = waitprep.key_digest(self.fields(context, task, namespace, page_generation)).hex()
        return {"op": "turn", "id": 1, "tokens": b64(prompt), "task": task, "namespace": namespace, "pageGeneration": page_generation,
                "keyHex": waitprep.key_digest(fields).hex(), "save": False, "decode": 1,
                "prefix": {"length": len(context), "keyHex": prefix}, "handoff": handoff}

    def test_every_variant_is_another_key_and_a_miss(self) -> None:
        for what, (context, identity) in self.variants.items():
            with self.subTest(what):
                digest = waitprep.key_digest(self.fields(context, **identity))
                self.assertNotEqual(digest, self.digest)
                self.assertEqual(self.consumer.try_pin(digest), "absent")
                self.assertEqual(self.consumer.peek(digest), "absent")

    def test_the_engine_refuses_the_original_leases_token_for_a_variant(self) -> None:
        lease = self.consumer.try_pin(self.digest)
        self.assertNotIsInstance(lease, str)
        with lease:
            token = lease.handoff_token()
            for what, (context, identity) in self.variants.items():
                with self.subTest(what):
                    with self.assertRaisesRegex(ValueError, "handoff token names %s, not the prefix's key" % self.digest.hex()):
                        self.server.turn(self.request(context, token, **identity))
            # The same token for the key it names is a lease hit.
            reply = self.server.turn(self.request(self.context, token))
            self.assertEqual((reply["path"], reply["cachedTokens"]), ("leased", len(self.context)))
        self.assertEqual(self.producer.summary().pinned_slots, 0)

    def test_a_variant_without_a_lease_is_recomputed(self) -> None:
        for what, (context, identity) in self.variants.items():
            with self.subTest(what):
                reply = self.server.turn(self.request(context, None, **identity))
                self.assertEqual((reply["path"], reply["cachedTokens"]), ("recompute", 0))

    def test_a_late_lookup_finds_only_the_prefixs_own_key(self) -> None:
        for what, (context, identity) in self.variants.items():
            with self.subTest(what):
                request = self.request(context, None, **identity)
                request.update(lookupTable=self.name, cause="preparing")
                reply = self.server.turn(request)
                self.assertEqual((reply["path"], reply["cause"], reply["cachedTokens"]), ("recompute", "preparing, then absent", 0))
        request = self.request(self.context, None)
        request["lookupTable"] = self.name
        reply = self.server.turn(request)
        self.assertEqual((reply["path"], reply.get("lookup"), reply["cachedTokens"]), ("leased", "late", len(self.context)))
        self.assertEqual(self.producer.summary().pinned_slots, 0)

    def test_the_engine_refuses_digests_that_are_not_its_tokens_keys(self) -> None:
        request = self.request(self.context, None)
        request["keyHex"] = self.digest.hex()
        with self.assertRaisesRegex(ValueError, "the key of these tokens is"):
            self.server.turn(request)
        request = self.request(self.context, None)
        request["prefix"]["keyHex"] = "ab" * 32
        with self.assertRaisesRegex(ValueError, "the key of the prefix is"):
            self.server.turn(request)


if __name__ == "__main__":
    unittest.main()
