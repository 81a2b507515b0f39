"""The key encoder against test/vectors/keys.json, the vectors Node's artifactKey() passes too."""

from __future__ import annotations

import json
import os
import unittest
from array import array
from typing import Any, Dict

import waitprep
from waitprep import key

from _support import KEY_VECTORS


@unittest.skipUnless(os.path.isfile(KEY_VECTORS), "test/vectors/keys.json is not beside this checkout of python/")
class KeyVectors(unittest.TestCase):
    data: Dict[str, Any]

    @classmethod
    def setUpClass(cls) -> None:
        with open(KEY_VECTORS, encoding="utf-8") as f:
            cls.data = json.load(f)

    def test_encoding_is_wpk1(self) -> None:
        self.assertEqual(self.data["encoding"], "WPK1")
        self.assertEqual(key.MAGIC, b"WPK1")

    def test_every_vector_reproduces_its_bytes_and_digest(self) -> None:
        self.assertGreater(len(self.data["vectors"]), 0)
        for vector in self.data["vectors"]:
            with self.subTest(vector["name"]):
                fields = key.from_json(vector["fields"])
                if "canonicalHex" in vector:
                    self.assertEqual(key.encode(fields).hex(), vector["canonicalHex"])
                self.assertEqual(key.digest(fields).hex(), vector["digestHex"])
                self.assertEqual(waitprep.key_digest(fields), key.digest(fields))

    def test_every_invalid_case_is_rejected_naming_its_field(self) -> None:
        self.assertGreater(len(self.data["invalid"]), 0)
        for case in self.data["invalid"]:
            with self.subTest(case["name"]):
                with self.assertRaises(waitprep.WaitprepError) as caught:
                    key.encode(key.from_json(case["fields"]))
                self.assertEqual(caught.exception.code, "ERR_INVALID_KEY")
                self.assertEqual(caught.exception.field, case["field"])
                self.assertIn(case["field"], str(caught.exception))
                self.assertIsInstance(caught.exception, key.InvalidKeyError)


class KeyForms(unittest.TestCase):
    FIELDS: Dict[str, Any] = {
        "source": {
            "snapshotKind": "kv-page", "runtime": "r", "model": "m", "adapter": "none", "profile": "p",
            "positionPolicy": "absolute", "task": "t", "namespace": "n", "tokenLayout": [1, 2, 3],
        },
        "sourcePageGeneration": 7, "codec": "none", "codecConfig": "none", "representationVersion": 1,
    }

    def with_source(self, **source: object) -> Dict[str, Any]:
        return dict(self.FIELDS, source=dict(self.FIELDS["source"], **source))

    def test_an_array_and_a_list_of_the_same_tokens_are_one_key(self) -> None:
        self.assertEqual(key.digest(self.with_source(tokenLayout=array("I", [1, 2, 3]))), key.digest(self.FIELDS))

    def test_an_empty_extra_equals_none_and_extra_order_does_not_matter(self) -> None:
        self.assertEqual(key.digest(self.with_source(extra={})), key.digest(self.FIELDS))
        self.assertEqual(key.digest(self.with_source(extra={"a": "1", "b": "2"})), key.digest(self.with_source(extra={"b": "2", "a": "1"})))

    def test_one_token_or_the_task_makes_another_key(self) -> None:
        self.assertNotEqual(key.digest(self.with_source(tokenLayout=[1, 2, 4])), key.digest(self.FIELDS))
        self.assertNotEqual(key.digest(self.with_source(task="u")), key.digest(self.FIELDS))

    def test_a_decimal_string_generation_from_json_is_the_integer(self) -> None:
        self.assertEqual(key.digest(key.from_json(dict(self.FIELDS, sourcePageGeneration="7"))), key.digest(self.FIELDS))


if __name__ == "__main__":
    unittest.main()
