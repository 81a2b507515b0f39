"""Chained chunk keys (waitprep.chunk_keys, docs/engine-keys.md) against the vectors Node passes,
and the session properties: any split into turns gives the same chain, a turn hashes only its new
tokens, no key holds more than one chunk of tokens."""

import json
import os
import random
import unittest
from array import array

from waitprep import WaitprepError
from waitprep import key as wpkey
from waitprep.chunk_keys import (
    CHUNK_PARENT_FIELD,
    MANIFEST_FIELD,
    ChunkChain,
    Profile,
    chunk_keys,
    chunk_profile,
    manifest_key,
)
from waitprep.manifest import encode_manifest

VECTORS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "test", "vectors", "chunk-keys.json")

#: Node option names (the vectors') -> ChunkChain keyword names.
_NAMES = {
    "chunkTokens": "chunk_tokens",
    "snapshotKind": "snapshot_kind",
    "positionPolicy": "position_policy",
    "sourcePageGeneration": "source_page_generation",
    "codecConfig": "codec_config",
    "representationVersion": "representation_version",
}


def kwargs_of(options):
    out = {}
    for name, value in options.items():
        if name in ("sourcePageGeneration", "representationVersion") and isinstance(value, str):
            value = int(value)
        if name == "profile" and isinstance(value, dict):
            value = {"tp_degree" if k == "tpDegree" else k: v for k, v in value.items()}
        out[_NAMES.get(name, name)] = value
    return out


OPTIONS = dict(runtime="vllm/0.11.0", model="m", profile=Profile("bf16", "NHD", 2, 1), task="t", namespace="n", chunk_tokens=16)


def spec_fields(tokens, parent_hex, extra=None):
    """The WPK1 fields the spec gives a chunk of OPTIONS, for the package's generic encoder."""
    entries = dict(extra or {})
    entries[CHUNK_PARENT_FIELD] = parent_hex
    return {
        "source": {
            "snapshotKind": "kv-chunk", "runtime": "vllm/0.11.0", "model": "m", "adapter": "none",
            "profile": "dtype=bf16,layout=NHD,tp=2,rank=1", "positionPolicy": "absolute", "task": "t", "namespace": "n",
            "tokenLayout": list(tokens), "extra": entries,
        },
        "sourcePageGeneration": 0, "codec": "none", "codecConfig": "none", "representationVersion": 1,
    }


class VectorTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(VECTORS, encoding="utf-8") as f:
            cls.file = json.load(f)

    def test_vectors(self):
        self.assertGreaterEqual(len(self.file["vectors"]), 10)
        for v in self.file["vectors"]:
            with self.subTest(v["name"]):
                chain = ChunkChain(**kwargs_of(v["options"]))
                chunks = [c for turn in v["turns"] for c in chain.extend(turn)]
                got = [{"index": c.index, "tokenCount": c.token_count, "parentHex": c.parent_hex, "digestHex": c.hex} for c in chunks]
                want = [{k: c[k] for k in ("index", "tokenCount", "parentHex", "digestHex")} for c in v["chunks"]]
                self.assertEqual(got, want)
                for chunk, w in zip(chunks, v["chunks"]):
                    if "canonicalHex" in w:
                        self.assertEqual(chunk.encoding.hex(), w["canonicalHex"])
                partial = chain.partial()
                got_partial = None if partial is None else {"tokenCount": partial.token_count, "parentHex": partial.parent_hex, "digestHex": partial.hex}
                self.assertEqual(got_partial, v["partial"])
                if v["manifest"] is None:
                    with self.assertRaises(WaitprepError):
                        chain.manifest_key()
                else:
                    m = chain.manifest_key()
                    self.assertEqual(m.hex, v["manifest"]["digestHex"])
                    self.assertEqual(m.chunk_count, v["manifest"]["chunkCount"])
                    if "canonicalHex" in v["manifest"]:
                        self.assertEqual(m.encoding.hex(), v["manifest"]["canonicalHex"])
                    total = sum(c.token_count for c in chunks)
                    self.assertEqual(encode_manifest([c.digest for c in chunks], total).hex(), v["manifest"]["bytesHex"])
                self.assertEqual([d.hex() for d in chain.digests()], [c["digestHex"] for c in v["chunks"]])

    def test_invalid(self):
        self.assertGreaterEqual(len(self.file["invalid"]), 10)
        for v in self.file["invalid"]:
            with self.subTest(v["name"]):
                with self.assertRaises(WaitprepError) as caught:
                    chain = ChunkChain(**kwargs_of(v["options"]))
                    for turn in v["turns"]:
                        chain.extend(turn)
                self.assertEqual((caught.exception.code, caught.exception.field), (v["code"], v["pythonField"]))


class ChainTests(unittest.TestCase):
    def test_any_split_into_turns_gives_the_same_chain(self):
        rng = random.Random(14)
        for _ in range(200):
            tokens = [rng.randrange(2**32) for _ in range(rng.randrange(81))]
            whole, whole_partial = chunk_keys(tokens, **OPTIONS)
            cuts = sorted({rng.randrange(len(tokens) + 1) for _ in range(rng.randrange(6))})
            chain = ChunkChain(**OPTIONS)
            keys = []
            start = 0
            for end in cuts + [len(tokens)]:
                keys.extend(chain.extend(tokens[start:end]))
                start = end
            self.assertEqual([k.hex for k in keys], [k.hex for k in whole])
            partial = chain.partial()
            self.assertEqual(None if partial is None else partial.hex, None if whole_partial is None else whole_partial.hex)

    def test_a_turn_hashes_only_its_new_tokens(self):
        chain = ChunkChain(**dict(OPTIONS, chunk_tokens=256))
        chain.extend(array("I", [(i * 7919) % 128000 for i in range(32 * 1024 + 100)]))
        self.assertEqual(chain.hashed_tokens, 32 * 1024)
        self.assertEqual(chain.pending_tokens, 100)
        before = chain.hashed_tokens
        added = chain.extend(list(range(600)))
        self.assertEqual(len(added), 2)
        self.assertEqual(chain.hashed_tokens - before, 512)
        self.assertEqual(chain.pending_tokens, 188)
        self.assertEqual(chain.chunks, 130)

    def test_every_token_container_gives_the_same_keys(self):
        tokens = [(i * 7919) % 128000 for i in range(100)]
        want = [k.hex for k in chunk_keys(tokens, **OPTIONS)[0]]
        packed = array("I", tokens)
        for given in (tuple(tokens), packed, memoryview(packed), memoryview(packed.tobytes()).cast("I")):
            self.assertEqual([k.hex for k in chunk_keys(given, **OPTIONS)[0]], want, type(given))

    def test_no_key_holds_more_than_one_chunk(self):
        chain = ChunkChain(**dict(OPTIONS, chunk_tokens=64))
        keys = []
        for turn in range(20):
            keys.extend(chain.extend([turn * 1000 + i for i in range(97)]))
            self.assertLess(chain.pending_tokens, 64)
        for k in keys:
            self.assertEqual(k.token_count, 64)
            self.assertEqual(len(k.tokens()), 64)
        self.assertEqual(keys[3].tokens(), [1095, 1096] + [2000 + i for i in range(62)])

    def test_matches_the_generic_encoder(self):
        tokens = list(range(40))
        chunks, partial = chunk_keys(tokens, **dict(OPTIONS, extra={"lane": "7"}))
        parent = ""
        for i, c in enumerate(chunks):
            self.assertEqual(c.encoding, wpkey.encode(spec_fields(tokens[16 * i:16 * i + 16], parent, {"lane": "7"})))
            parent = c.hex
        self.assertEqual(partial.digest, wpkey.digest(spec_fields(tokens[32:], parent, {"lane": "7"})))
        m = manifest_key(chunks[-1])
        fields = spec_fields(tokens[16:32], chunks[0].hex, {"lane": "7", MANIFEST_FIELD: "2"})
        self.assertEqual(m.digest, wpkey.digest(fields))

    def test_chaining_and_field_separation(self):
        tokens = list(range(16 * 6))
        a = [k.hex for k in chunk_keys(tokens, **OPTIONS)[0]]
        changed = list(tokens)
        changed[16 * 3 + 5] = 999999
        b = [k.hex for k in chunk_keys(changed, **OPTIONS)[0]]
        self.assertEqual(a[:3], b[:3])
        self.assertTrue(all(x != y for x, y in zip(a[3:], b[3:])))
        variants = [
            OPTIONS, dict(OPTIONS, model="m2"), dict(OPTIONS, adapter="lora-a"), dict(OPTIONS, task="t2"),
            dict(OPTIONS, namespace="n2"), dict(OPTIONS, profile=Profile("fp16", "NHD", 2, 1)),
            dict(OPTIONS, profile=Profile("bf16", "HND", 2, 1)), dict(OPTIONS, profile=Profile("bf16", "NHD", 4, 1)),
            dict(OPTIONS, profile=Profile("bf16", "NHD", 2, 0)),
        ]
        self.assertEqual(len({chunk_keys(tokens, **o)[0][0].hex for o in variants}), len(variants))

    def test_refusals_leave_the_chain_unchanged(self):
        self.assertEqual(chunk_profile({"dtype": "bf16", "layout": "NHD", "tp_degree": 2, "rank": 1}), "dtype=bf16,layout=NHD,tp=2,rank=1")
        with self.assertRaises(WaitprepError) as caught:
            chunk_profile({"dtype": "bf16", "layout": "NHD", "tp_degree": 2, "rank": 1, "gpu": "h100"})
        self.assertEqual(caught.exception.field, "profile.gpu")
        chain = ChunkChain(**OPTIONS)
        chain.extend([1, 2, 3])
        for bad, field in (([4, -5], "tokens[1]"), ([4, 1.5], "tokens[1]"), ("1 2", "tokens")):
            with self.assertRaises(WaitprepError) as caught:
                chain.extend(bad)
            self.assertEqual((caught.exception.code, caught.exception.field), ("ERR_INVALID_KEY", field))
            self.assertEqual(chain.pending_tokens, 3)
        with self.assertRaises(WaitprepError):
            ChunkChain(**OPTIONS).manifest_key()


if __name__ == "__main__":
    unittest.main()
