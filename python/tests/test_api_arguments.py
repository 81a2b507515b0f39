"""Every wrong argument to the Python API is the package's WaitprepError, with the code the same
mistake gets elsewhere in the package (ERR_INVALID_KEY for a bad token or digest, where a key is
expected; ERR_INVALID_ARGUMENT otherwise), never a TypeError, a ctypes.ArgumentError or a quiet
acceptance: a bool is not an int, and a mapping or a set is not a sequence."""

import hashlib
import unittest

import waitprep
from waitprep import HandoffToken, WaitprepError
from waitprep import key as wpkey
from waitprep.chunk_keys import ChunkChain, Profile, chunk_keys
from waitprep.manifest import ManifestProducer, decode_manifest, encode_manifest

from _support import TableCase, digest_of, needs_library

CHAIN = dict(runtime="rt", model="m", profile=Profile("bf16", "NHD", 1, 0), task="t", namespace="n", chunk_tokens=4)


class ArgumentCase(unittest.TestCase):
    def refused(self, code, field, call, *args, **kw):
        with self.assertRaises(WaitprepError) as caught:
            call(*args, **kw)
        self.assertEqual((caught.exception.code, caught.exception.field), (code, field), caught.exception)
        return caught.exception


@needs_library
class HandBuiltTokens(TableCase, ArgumentCase):
    def held_in_slot(self, wanted):
        """A published digest whose slot is in ``wanted`` and whose generation is 0 or 1: a bool
        standing for that slot or generation would name the artifact."""
        for n in range(2000):
            reservation = self.producer.reserve(digest_of(n))
            if reservation.slot in wanted and reservation.generation in (0, 1):
                self.producer.publish(reservation, 1, 2, 3, 4, 5)
                return digest_of(n), reservation
            self.producer.abandon(reservation)
        self.fail("no digest landed in slots %s" % (wanted,))

    def test_str_and_float_fields_are_refused_as_a_bad_token(self):
        digest, r = self.held_in_slot(range(self.capacity))
        for token in (
            HandoffToken(self.name, str(r.slot), r.generation, digest),
            HandoffToken(self.name, float(r.slot), r.generation, digest),
            HandoffToken(self.name, r.slot, str(r.generation), digest),
            HandoffToken(self.name, r.slot, float(r.generation), digest),
            HandoffToken(self.name, r.slot, float("nan"), digest),
            HandoffToken(self.name, None, r.generation, digest),
            HandoffToken(self.name, -1, r.generation, digest),
            HandoffToken(self.name, r.slot, -1, digest),
            HandoffToken(self.name, r.slot, 1 << 56, digest),
            HandoffToken(self.name, r.slot, r.generation, digest.hex()),
            HandoffToken(self.name, r.slot, r.generation, digest[:31]),
            HandoffToken(None, r.slot, r.generation, digest),
        ):
            with self.subTest(token=token):
                self.refused("ERR_INVALID_ARGUMENT", "token", self.consumer.try_pin_exact, token)
        self.assertEqual(self.consumer.client_pins(r.slot), 0)

    def test_a_bool_slot_or_generation_is_not_an_int(self):
        digest, r = self.held_in_slot((0, 1))
        as_bool = HandoffToken(self.name, bool(r.slot), r.generation, digest)
        self.refused("ERR_INVALID_ARGUMENT", "token", self.consumer.try_pin_exact, as_bool)
        self.refused("ERR_INVALID_ARGUMENT", "token", self.consumer.try_pin_exact, HandoffToken(self.name, r.slot, bool(r.generation), digest))
        self.assertEqual(self.consumer.client_pins(r.slot), 0)
        # The same token with ints pins, and the str form of a bad token is the same refusal.
        with self.consumer.try_pin_exact(HandoffToken(self.name, r.slot, r.generation, digest)) as lease:
            self.assertEqual(lease.digest, digest)
        self.refused("ERR_INVALID_ARGUMENT", "token", str, as_bool)

    def test_format_handoff_token_writes_only_what_parse_reads(self):
        for args in (
            ("t", True, 1, digest_of(1)),
            ("t", 1.0, 1, digest_of(1)),
            ("t", 1, 1.5, digest_of(1)),
            ("t", 1, -1, digest_of(1)),
            ("t", 2**32, 1, digest_of(1)),
            ("t", 1, 1, b"short"),
            ("t", 1, 1, [1] * 32),
            (".hidden", 1, 1, digest_of(1)),
            (None, 1, 1, digest_of(1)),
        ):
            with self.subTest(args=args):
                self.refused("ERR_INVALID_ARGUMENT", "token", waitprep.format_handoff_token, *args)
        token = waitprep.format_handoff_token("t", 1, 2, bytearray(digest_of(1)))
        self.assertEqual(waitprep.parse_handoff_token(token), HandoffToken("t", 1, 2, digest_of(1)))


@needs_library
class Collections(TableCase, ArgumentCase):
    def test_unpin_many_takes_an_iterable_of_leases_only(self):
        self.publish(digest_of(1))
        lease = self.consumer.try_pin(digest_of(1))
        for bad in (None, 5, "leases", {lease: 1}):
            with self.subTest(bad=bad):
                self.refused("ERR_INVALID_ARGUMENT", "leases", self.consumer.unpin_many, bad)
        self.assertFalse(lease.closed)
        self.assertEqual(self.consumer.unpin_many({lease}), 1)  # a set of leases is an iterable of them

    def test_try_pin_prefix_takes_a_sequence_not_a_mapping_or_set(self):
        chunks = [digest_of(i) for i in range(3)]
        for d in chunks:
            self.publish(d)
        for bad in (dict.fromkeys(chunks), set(chunks), frozenset(chunks[:1]), iter(chunks)):
            with self.subTest(bad=type(bad).__name__):
                self.refused("ERR_INVALID_ARGUMENT", "digests", self.consumer.try_pin_prefix, bad)
        self.assertEqual([self.producer.try_evict(d) for d in chunks], ["evicted"] * 3)  # nothing was pinned

    def test_a_bad_element_is_a_bad_digest_as_try_pin_says(self):
        self.refused("ERR_INVALID_KEY", "digest", self.consumer.try_pin, b"short")
        self.refused("ERR_INVALID_KEY", "digests[1]", self.consumer.try_pin_prefix, [digest_of(1), b"short"])
        self.refused("ERR_INVALID_KEY", "digests[0]", self.consumer.try_pin_prefix, [None])

    def test_a_reservation_is_a_pair_in_order(self):
        for n in range(100):
            reservation = self.producer.reserve(digest_of(n))
            if reservation.slot != reservation.generation:
                break
        for bad in ({reservation.slot, reservation.generation}, {reservation.slot: 0, reservation.generation: 0}, (True, reservation.generation)):
            with self.subTest(bad=bad):
                self.refused("ERR_INVALID_ARGUMENT", "reservation", self.producer.publish, bad, 1, 2, 3, 4, 5)
        self.producer.publish(list(reservation), 1, 2, 3, 4, 5)


@needs_library
class OpenOptions(ArgumentCase):
    def test_trust_flags_are_bools_and_library_a_path(self):
        from _support import table_name

        name = table_name("opts")
        table = waitprep.create_table(name, 4)
        self.addCleanup(waitprep.unlink_table, name)
        self.addCleanup(table.close)
        for kw in (dict(trust_group_writable="yes"), dict(trust_world_writable=1), dict(trust_group_writable=None)):
            with self.subTest(kw=kw):
                self.refused("ERR_INVALID_ARGUMENT", next(iter(kw)), waitprep.open_table, name, **kw)
        created = table_name("c")
        self.addCleanup(waitprep.unlink_table, created)  # should the refusal fail, the table goes too
        self.refused("ERR_INVALID_ARGUMENT", "trust_group_writable", waitprep.create_table, created, 4, mode=0o660, trust_group_writable=1)
        for bad in (5, {}, b"/lib/libwaitprep.so"):
            with self.subTest(library=bad):
                self.refused("ERR_INVALID_ARGUMENT", "library", waitprep.open_table, name, library=bad)


class Library(ArgumentCase):
    def test_a_library_path_is_a_str_or_none(self):
        for bad in (5, {}, set(), ["x"]):
            with self.subTest(path=bad):
                self.refused("ERR_INVALID_ARGUMENT", "path", waitprep.load_library, bad)
                self.refused("ERR_INVALID_ARGUMENT", "path", waitprep.library_candidates, bad)
        self.refused("ERR_INVALID_ARGUMENT", "environ", waitprep.library_candidates, None, ["WAITPREP_LIBRARY=x"])
        self.assertEqual(waitprep.library_candidates("/x/libwaitprep.so"), [("argument", "/x/libwaitprep.so")])


class Manifests(ArgumentCase):
    def test_decode_manifest_takes_bytes_only(self):
        for bad in (None, "WPM1" + "\0" * 44, 48, [0] * 48):
            with self.subTest(bad=bad):
                error = self.refused("ERR_INVALID_ARGUMENT", "manifest", decode_manifest, bad)
                self.assertIn("bytes", str(error))

    def test_encode_manifest_takes_a_sequence_of_digests(self):
        for bad in ({digest_of(1)}, {digest_of(1): 0}, iter([digest_of(1)]), 5, None):
            with self.subTest(bad=type(bad).__name__):
                self.refused("ERR_INVALID_ARGUMENT", "digests", encode_manifest, bad, 1)
        self.refused("ERR_INVALID_ARGUMENT", "total_tokens", encode_manifest, [digest_of(1)], True)
        self.assertEqual(decode_manifest(encode_manifest((digest_of(1),), 4)).digests, [digest_of(1)])


@needs_library
class ManifestChunks(TableCase, ArgumentCase):
    def test_reserve_takes_the_chunks_as_a_sequence(self):
        chain = ChunkChain(**CHAIN)
        chunks = chain.extend(list(range(8)))
        helper = ManifestProducer(self.producer)
        for bad in (set(chunks), dict.fromkeys(chunks), iter(chunks), 5):
            with self.subTest(bad=type(bad).__name__):
                self.refused("ERR_INVALID_ARGUMENT", "chunks", helper.reserve, chain.manifest_key(), bad)


class Tokens(ArgumentCase):
    def test_a_bool_token_is_a_bad_token(self):
        for tokens, field in (([True], "tokens[0]"), ([1, 2, False], "tokens[2]"), ((5, True, 6, 7), "tokens[1]")):
            with self.subTest(tokens=tokens):
                chain = ChunkChain(**CHAIN)
                chain.extend([9])
                self.refused("ERR_INVALID_KEY", field, chain.extend, tokens)
                self.assertEqual((chain.pending_tokens, chain.chunks), (1, 0))  # unchanged
                self.refused("ERR_INVALID_KEY", field, chunk_keys, tokens, **CHAIN)

    def test_a_mapping_or_set_is_not_a_token_sequence(self):
        for bad in ({1, 2, 3, 4}, frozenset((1,)), {1: 2, 3: 4}, "1234", b"\x01\x02"):
            with self.subTest(bad=bad):
                self.refused("ERR_INVALID_KEY", "tokens", ChunkChain(**CHAIN).extend, bad)
        self.assertEqual(len(ChunkChain(**CHAIN).extend((1, 2, 3, 4))), 1)

    def test_from_json_takes_only_decimal_digit_strings_as_integers(self):
        fields = {
            "source": {"snapshotKind": "kv", "runtime": "r", "model": "m", "adapter": "none", "profile": "p", "positionPolicy": "abs",
                       "task": "t", "namespace": "n", "tokenLayout": [1]},
            "sourcePageGeneration": 3, "codec": "none", "codecConfig": "none", "representationVersion": 1,
        }
        self.assertEqual(wpkey.digest(wpkey.from_json(dict(fields, sourcePageGeneration="3"))), wpkey.digest(fields))
        for text in ("abc", "\u0663", "1_0", " 3", "+3", "-3", ""):
            with self.subTest(text=text):
                self.refused("ERR_INVALID_KEY", "sourcePageGeneration", wpkey.digest, wpkey.from_json(dict(fields, sourcePageGeneration=text)))
        self.assertEqual(hashlib.sha256(wpkey.encode(fields)).digest(), wpkey.digest(fields))


if __name__ == "__main__":
    unittest.main()
