"""Same output: the next turn from KV rebuilt out of bytes against the live cache and a full recompute."""

from __future__ import annotations

import unittest

from _support import engine, tokens

import torch

from tfengine import kvcodec
from tfengine.engine import SessionCache, cache_bytes


def copy_cache(e, cache):
    """An independent copy of a cache (a turn extends the cache it is given)."""
    return e.decode_cache(kvcodec.encode(cache))


class KVBytes(unittest.TestCase):
    def test_round_trip_is_bit_exact(self) -> None:
        e = engine()
        first = e.turn(tokens(1, 150), None, decode=3)
        payload = kvcodec.encode(first.cache)
        rebuilt = e.decode_cache(payload)
        self.assertEqual(rebuilt.get_seq_length(), 150)
        self.assertEqual(kvcodec.tokens_of(payload), 150)
        for a, b in zip(first.cache.layers, rebuilt.layers):
            self.assertTrue(torch.equal(a.keys, b.keys))
            self.assertTrue(torch.equal(a.values, b.values))
        self.assertEqual(kvcodec.encode(rebuilt), payload)
        self.assertEqual(len(payload) - kvcodec.header(payload)[1], cache_bytes(first.cache))

    def test_a_rebuilt_cache_owns_its_tensors(self) -> None:
        e = engine()
        payload = bytearray(kvcodec.encode(e.turn(tokens(2, 40), None, decode=1).cache))
        rebuilt = e.decode_cache(payload)
        before = rebuilt.layers[0].keys.clone()
        offset = kvcodec.header(payload)[1]
        payload[offset:] = bytes(len(payload) - offset)  # what a producer reusing the arena would do
        self.assertTrue(torch.equal(rebuilt.layers[0].keys, before))

    def test_malformed_payloads_are_refused(self) -> None:
        e = engine()
        payload = kvcodec.encode(e.turn(tokens(3, 20), None, decode=1).cache)
        with self.assertRaisesRegex(kvcodec.KVFormatError, "magic"):
            kvcodec.header(b"XXXX" + payload[4:])
        with self.assertRaisesRegex(kvcodec.KVFormatError, "describes"):
            kvcodec.header(payload[:-4])
        with self.assertRaisesRegex(kvcodec.KVFormatError, "shorter"):
            kvcodec.header(b"TF")
        wrong = [[1, 1, -1, 16] for _ in range(e.geometry.layers)]
        with self.assertRaisesRegex(kvcodec.KVFormatError, "model's"):
            kvcodec.decode(payload, expect_layers=wrong)
        with self.assertRaisesRegex(kvcodec.KVFormatError, "layers"):
            kvcodec.decode(payload, expect_layers=wrong[:1])


class OtherDtypes(unittest.TestCase):
    """An engine in bf16 (the GPU check's dtype), here on the CPU: its KV bytes round-trip and the
    key names the dtype and the device type."""

    def test_a_bf16_engine_round_trips_its_kv_and_its_key_says_bf16(self) -> None:
        from _support import SEED

        from tfengine.engine import Engine
        from tfengine.model import GEOMETRIES, model_identity

        e = Engine(GEOMETRIES["tiny"], SEED, device="cpu", dtype="bfloat16")
        self.assertEqual({p.dtype for p in e.model.parameters()}, {torch.bfloat16})
        first = e.turn(tokens(9, 60), None, decode=2)
        payload = kvcodec.encode(first.cache)
        self.assertEqual(kvcodec.header(payload)[0]["dtype"], "bfloat16")
        rebuilt = e.decode_cache(payload)
        for a, b in zip(first.cache.layers, rebuilt.layers):
            self.assertTrue(torch.equal(a.keys.view(torch.uint8), b.keys.view(torch.uint8)))
        after = tokens(9, 60) + tokens(10, 8)
        self.assertTrue(torch.equal(e.turn(after, rebuilt, decode=2).logits, e.turn(after, copy_cache(e, first.cache), decode=2).logits))
        self.assertEqual(model_identity(GEOMETRIES["tiny"], SEED)["profile"], "float32-dynamiccache-cpu")
        self.assertEqual(model_identity(GEOMETRIES["tiny"], SEED, "cuda:0", "bfloat16")["profile"], "bfloat16-dynamiccache-cuda")

    def test_the_default_engine_keeps_its_weights(self) -> None:
        from _support import SEED

        from tfengine.model import GEOMETRIES, build_model

        self.assertTrue(all(torch.equal(a, b) for a, b in zip(engine().model.parameters(), build_model(GEOMETRIES["tiny"], SEED, "cpu", "float32").parameters())))


class NextTurn(unittest.TestCase):
    """The turn after a tool call: prompt = the previous context + the tool's result."""

    def setUp(self) -> None:
        self.e = engine()
        self.context = tokens(10, 300)
        self.prompt = self.context + tokens(11, 48)
        self.first = self.e.turn(self.context, None, decode=4)
        self.payload = kvcodec.encode(self.first.cache)

    def test_the_first_turns_cache_is_the_prompts_kv(self) -> None:
        self.assertEqual(self.first.cache.get_seq_length(), len(self.context))
        again = self.e.turn(self.context, None, decode=1)
        for a, b in zip(self.first.cache.layers, again.cache.layers):
            self.assertTrue(torch.equal(a.keys, b.keys))

    def test_rebuilt_kv_gives_bit_identical_logits_to_the_live_cache(self) -> None:
        live = self.e.turn(self.prompt, copy_cache(self.e, self.first.cache), decode=4)
        leased = self.e.turn(self.prompt, self.e.decode_cache(self.payload), decode=4)
        self.assertTrue(torch.equal(leased.logits, live.logits))
        self.assertEqual(leased.tokens, live.tokens)
        self.assertEqual((leased.prefill_tokens, leased.cached_tokens), (48, 300))

    def test_rebuilt_kv_matches_a_full_recompute(self) -> None:
        # A full recompute runs the same arithmetic in differently shaped matrix products (348
        # query rows instead of 48, attention over one block instead of cache + new), so fp32
        # sums may round differently: the tolerance allows a few ulps of the logits' scale and
        # nothing that could change a greedy choice. Measured here: at most 1.2e-7 (tiny) and
        # 0.0 (the large geometry).
        leased = self.e.turn(self.prompt, self.e.decode_cache(self.payload), decode=4)
        full = self.e.turn(self.prompt, None, decode=4)
        scale = float(full.logits.abs().max())
        diff = float((leased.logits - full.logits).abs().max())
        self.assertLessEqual(diff, 1e-5 * max(1.0, scale), f"max |delta logit| {diff} at scale {scale}")
        self.assertEqual(leased.tokens, full.tokens)
        self.assertEqual(int(torch.argmax(leased.logits)), int(torch.argmax(full.logits)))
        self.assertEqual((full.prefill_tokens, full.cached_tokens), (348, 0))

    def test_a_cache_as_long_as_the_prompt_is_refused(self) -> None:
        with self.assertRaisesRegex(ValueError, "at least one must be new"):
            self.e.turn(self.context, self.e.decode_cache(self.payload), decode=1)


class SessionLRU(unittest.TestCase):
    def test_evicts_least_recently_used_within_the_budget(self) -> None:
        e = engine()
        caches = [e.turn(tokens(20 + i, 32), None, decode=1).cache for i in range(3)]
        size = cache_bytes(caches[0])
        lru = SessionCache(2 * size)
        self.assertEqual(lru.put("a", caches[0]), [])
        self.assertEqual(lru.put("b", caches[1]), [])
        self.assertEqual(lru.put("a", caches[0]), [])  # a is now the most recent
        self.assertEqual(lru.put("c", caches[2]), ["b"])
        self.assertIn("a", lru)
        self.assertNotIn("b", lru)
        self.assertIs(lru.take("c"), caches[2])
        self.assertIsNone(lru.take("c"))
        self.assertEqual((len(lru), lru.used_bytes, lru.evictions), (1, size, 1))

    def test_a_cache_over_the_whole_budget_is_not_kept(self) -> None:
        e = engine()
        cache = e.turn(tokens(30, 32), None, decode=1).cache
        lru = SessionCache(cache_bytes(cache) - 1)
        self.assertEqual(lru.put("x", cache), [])
        self.assertNotIn("x", lru)
        self.assertEqual(lru.used_bytes, 0)


if __name__ == "__main__":
    unittest.main()
