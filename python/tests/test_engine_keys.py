"""Engine keys (waitprep.engine_keys, docs/engine-keys.md) against the vectors Node passes, and the
rules the vectors cannot show alone: the digest is the SHA-256 of the generic encoder's bytes for
the fields, every form of one storage key gives one digest, and an LMCache key's fields map onto
the profile as the docs say."""

import hashlib
import json
import os
import random
import unittest

from waitprep import WaitprepError
from waitprep import key as wpkey
from waitprep.engine_keys import (
    ENGINE_HASH_FIELD,
    KV_GROUP_FIELD,
    EngineKeys,
    lmcache_dtype_name,
    split_offload_key,
    vllm_offload_key,
)

VECTORS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "test", "vectors", "engine-keys.json")

_NAMES = {
    "sharedAcrossRanks": "shared_across_ranks",
    "snapshotKind": "snapshot_kind",
    "positionPolicy": "position_policy",
    "sourcePageGeneration": "source_page_generation",
    "codecConfig": "codec_config",
    "representationVersion": "representation_version",
}


def kwargs_of(options):
    """Node option names (the vectors') -> EngineKeys keyword names."""
    out = {}
    for name, value in options.items():
        if name in ("sourcePageGeneration", "representationVersion") and isinstance(value, str):
            value = int(value)
        if name == "profile" and isinstance(value, dict):
            value = {"tp_degree" if k == "tpDegree" else k: v for k, v in value.items()}
        out[_NAMES.get(name, name)] = value
    return out


def engine_key_of(json_key):
    if "offloadKeyHex" in json_key:
        return bytes.fromhex(json_key["offloadKeyHex"])
    if "pageKey" in json_key:
        return json_key["pageKey"]
    return int(json_key["chunkHash"])


OPTIONS = dict(runtime="vllm/0.23", model="m", profile={"dtype": "bf16", "layout": "NHD", "tp_degree": 2, "rank": 1}, task="t", namespace="n")


class VectorTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(VECTORS, encoding="utf-8") as f:
            cls.file = json.load(f)

    def test_vectors(self):
        self.assertEqual({v["engine"] for v in self.file["vectors"]}, {"vllm", "sglang", "lmcache"})
        for v in self.file["vectors"]:
            with self.subTest(v["name"]):
                keys = EngineKeys(v["engine"], **kwargs_of(v["options"]))
                engine_key = engine_key_of(v["engineKey"])
                self.assertEqual(keys.digest(engine_key).hex(), v["digestHex"])
                self.assertEqual(keys.encoding(engine_key).hex(), v["canonicalHex"])
                self.assertEqual(wpkey.encode(keys.fields(engine_key)).hex(), v["canonicalHex"])

    def test_invalid(self):
        self.assertGreaterEqual(len(self.file["invalid"]), 8)
        for bad in self.file["invalid"]:
            with self.subTest(bad["name"]):
                json_key = bad["engineKey"]
                # A chunk hash the vectors spell wrong stays a string here: the keyer must refuse it.
                engine_key = json_key["chunkHash"] if "chunkHash" in json_key else engine_key_of(json_key)
                with self.assertRaises(WaitprepError) as caught:
                    EngineKeys(bad["engine"], **kwargs_of(bad["options"])).digest(engine_key)
                self.assertEqual(caught.exception.code, bad["code"])
                self.assertEqual(caught.exception.field, bad["pythonField"])


class EngineKeyTests(unittest.TestCase):
    def test_digest_is_the_sha256_of_the_generic_encoding_on_random_keys(self):
        rng = random.Random(7)
        for _ in range(200):
            extra = {"k%d" % rng.randrange(50): "v" * rng.randrange(3) for _ in range(rng.randrange(4))}
            if rng.random() < 0.3:
                extra["z-after"] = "1"
            options = dict(OPTIONS, extra=extra)
            cases = (
                ("vllm", bytes(rng.randrange(256) for _ in range(rng.randrange(5, 40)))),
                ("sglang", "".join(rng.choice("0123456789abcdef页") for _ in range(rng.randrange(1, 70)))),
                ("lmcache", rng.randrange(-(2**80), 2**80)),
            )
            for engine, engine_key in cases:
                keys = EngineKeys(engine, **options)
                want = wpkey.encode(keys.fields(engine_key))
                self.assertEqual(keys.encoding(engine_key), want)
                self.assertEqual(keys.digest(engine_key), hashlib.sha256(want).digest())

    def test_offload_key_round_trip_and_its_fields(self):
        block = hashlib.sha256(b"b").digest()
        offload_key = vllm_offload_key(block, 3)
        self.assertEqual(offload_key, block + b"\x00\x00\x00\x03")
        self.assertEqual(split_offload_key(offload_key), (block, 3))
        fields = EngineKeys("vllm", **OPTIONS).fields(offload_key)
        self.assertEqual(fields["source"]["extra"][ENGINE_HASH_FIELD], block.hex())
        self.assertEqual(fields["source"]["extra"][KV_GROUP_FIELD], "3")
        self.assertEqual(fields["source"]["tokenLayout"], [0])
        # A bytearray or memoryview of the same key is the same key.
        keys = EngineKeys("vllm", **OPTIONS)
        self.assertEqual(keys.digest(bytearray(offload_key)), keys.digest(offload_key))
        self.assertEqual(keys.digest(memoryview(offload_key)), keys.digest(offload_key))

    def test_chunk_hash_as_int_or_decimal_string(self):
        keys = EngineKeys("lmcache", **OPTIONS)
        self.assertEqual(keys.digest(-42), keys.digest("-42"))
        self.assertEqual(keys.digest(2**70), keys.digest(str(2**70)))
        for bad in (True, 1.0, "1.5", "007", "-0", "", " 1", "١"):
            with self.subTest(bad=bad), self.assertRaises(WaitprepError) as caught:
                keys.digest(bad)
            self.assertEqual(caught.exception.field, "engine_key")

    def test_mla_ranks_share_one_digest(self):
        def digest(rank, shared=True):
            return EngineKeys("sglang", **dict(OPTIONS, profile={"dtype": "bf16", "layout": "mla", "tp_degree": 8, "rank": rank}, shared_across_ranks=shared)).digest("p")

        self.assertEqual({digest(r) for r in range(8)}, {digest(0)})
        self.assertNotEqual(digest(3, shared=False), digest(3))

    def test_lmcache_dtype_names(self):
        class FakeDtype:
            def __str__(self):
                return "torch.bfloat16"

        self.assertEqual(lmcache_dtype_name(FakeDtype()), "bfloat16")
        self.assertEqual(lmcache_dtype_name("float16"), "float16")

    def test_digest_from_many_threads(self):
        import threading

        keys = EngineKeys("vllm", **OPTIONS)
        inputs = [vllm_offload_key(hashlib.sha256(b"%d" % i).digest(), i % 3) for i in range(500)]
        want = [keys.digest(k) for k in inputs]
        got = [[] for _ in range(4)]

        def run(out):
            out.extend(keys.digest(k) for k in inputs)

        threads = [threading.Thread(target=run, args=(g,)) for g in got]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for g in got:
            self.assertEqual(g, want)


if __name__ == "__main__":
    unittest.main()
