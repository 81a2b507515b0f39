"""The storage tier: disk tier to arena, checked before publishing, evicting under a budget but
never what is pinned."""

from __future__ import annotations

import os
import unittest

from _support import StorageCase, engine, library_problem, tokens

import torch

from waitprep import arena

from tfengine import storage

PROBLEM = library_problem()


@unittest.skipIf(PROBLEM is not None, "libwaitprep.so: %s" % PROBLEM)
class Prepare(StorageCase, unittest.TestCase):
    def test_publishes_a_checked_record_the_engine_rebuilds_bit_for_bit(self) -> None:
        context = tokens(40, 120)
        digest, reply, first = self.publish_context(context)
        self.assertTrue(reply["ok"])
        self.assertEqual(reply["tokens"], 120)
        lease = self.consumer.try_pin(digest)
        self.assertNotIsInstance(lease, str)
        with lease:
            payload = storage.read_leased(self.consumer, lease)
            self.assertEqual(lease.meta.size_bytes, len(payload))
            self.assertEqual(lease.meta.checksum, arena.record_checksum(payload))
            self.assertEqual(arena.split_location(lease.meta.location)[1], 0)
            rebuilt = engine().decode_cache(payload)
        for a, b in zip(first.cache.layers, rebuilt.layers):
            self.assertTrue(torch.equal(a.keys, b.keys))
            self.assertTrue(torch.equal(a.values, b.values))

    def test_a_tier_publishes_only_its_own_record_format(self) -> None:
        self.assertEqual(storage.record_format("bfloat16"), "tfkv1-bfloat16")
        bf16 = storage.StorageTier(self.producer, self.disk, self.budget, format=storage.record_format("bfloat16"))
        digest, wire, _ = self.save_context(tokens(44, 30))  # saved as float32 records
        with self.assertRaisesRegex(ValueError, "record format 'tfkv1-float32', expected 'tfkv1-bfloat16'"):
            bf16.prepare(digest.hex(), wire)
        self.assertEqual(self.consumer.peek(digest), "absent")
        self.assertTrue(self.tier.prepare(digest.hex(), wire)["ok"])

    def test_an_artifact_ready_already_is_not_prepared_twice(self) -> None:
        digest, wire, _ = self.save_context(tokens(41, 60))
        self.assertFalse(self.tier.prepare(digest.hex(), wire)["alreadyReady"])
        self.assertTrue(self.tier.prepare(digest.hex(), wire)["alreadyReady"])
        self.assertEqual(self.tier.stats()["prepared"], 1)

    def test_a_corrupt_disk_file_is_refused_and_nothing_is_ready(self) -> None:
        digest, wire, _ = self.save_context(tokens(42, 60))
        path = storage.disk_path(self.disk, digest)
        with open(path, "r+b") as f:
            f.seek(-1, os.SEEK_END)
            last = f.read(1)
            f.seek(-1, os.SEEK_END)
            f.write(bytes([last[0] ^ 1]))
        with self.assertRaisesRegex(ValueError, "checksum"):
            self.tier.prepare(digest.hex(), wire)
        self.assertEqual(self.consumer.try_pin(digest), "absent")
        self.assertEqual(os.listdir(self.tier.directory), [])
        self.assertEqual(self.tier.stats()["failed"], 1)

    def test_a_disk_file_of_another_key_is_refused(self) -> None:
        digest, wire, _ = self.save_context(tokens(43, 60))
        other, other_wire, _ = self.save_context(tokens(44, 60))
        os.replace(storage.disk_path(self.disk, other), storage.disk_path(self.disk, digest))
        with self.assertRaisesRegex(storage.RecordError, "wrong-key"):
            self.tier.prepare(digest.hex(), wire)
        self.assertEqual(self.consumer.try_pin(digest), "absent")

    def test_a_key_missing_from_the_disk_tier_fails_and_a_forged_digest_is_refused(self) -> None:
        digest, wire, _ = self.save_context(tokens(45, 60))
        os.unlink(storage.disk_path(self.disk, digest))
        with self.assertRaisesRegex(ValueError, "not in the disk tier"):
            self.tier.prepare(digest.hex(), wire)
        with self.assertRaisesRegex(ValueError, "hashes to"):
            self.tier.prepare("00" * 32, wire)
        self.assertEqual(self.consumer.try_pin(digest), "absent")


@unittest.skipIf(PROBLEM is not None, "libwaitprep.so: %s" % PROBLEM)
class Budget(StorageCase, unittest.TestCase):
    # Two records of a 64-token context fit, three do not (the tiny model: 512 bytes a token).
    budget = 2 * (64 * 512 + 2048)

    def test_evicts_the_least_recently_prepared_and_frees_its_arena(self) -> None:
        a, _, _ = self.publish_context(tokens(50, 64))
        b, _, _ = self.publish_context(tokens(51, 64))
        c, _, _ = self.publish_context(tokens(52, 64))
        self.assertEqual(self.consumer.try_pin(a), "absent")
        for digest in (b, c):
            lease = self.consumer.try_pin(digest)
            self.assertNotIsInstance(lease, str)
            lease.close()
        stats = self.tier.stats()
        self.assertEqual((stats["evicted"], stats["residentArtifacts"]), (1, 2))
        self.assertLessEqual(stats["usedBytes"], self.budget)
        self.assertEqual(len(os.listdir(self.tier.directory)), 2)

    def test_never_evicts_a_pinned_artifact_and_refuses_what_does_not_fit(self) -> None:
        a, _, _ = self.publish_context(tokens(53, 64))
        b, _, _ = self.publish_context(tokens(54, 64))
        held = [self.consumer.try_pin(a), self.consumer.try_pin(b)]
        digest, wire, _ = self.save_context(tokens(55, 64))
        with self.assertRaisesRegex(ValueError, "do not fit"):
            self.tier.prepare(digest.hex(), wire)
        self.assertEqual(self.tier.stats()["evictRefusedPinned"], 2)
        self.assertEqual(self.consumer.try_pin(digest), "absent")
        for digest_held, lease in zip((a, b), held):
            self.assertEqual(storage.read_leased(self.consumer, lease)[:4], b"TFKV", digest_held.hex())
        held[0].close()
        self.assertTrue(self.tier.prepare(digest.hex(), wire)["ok"])
        self.assertEqual(self.consumer.try_pin(a), "absent")
        held[1].close()

    def test_with_eviction_values_evicts_the_lowest_and_never_one_worth_as_much_as_the_new_one(self) -> None:
        a, _, _ = self.publish_context(tokens(56, 64))
        b, _, _ = self.publish_context(tokens(57, 64))
        c, wire_c, _ = self.save_context(tokens(58, 64))
        d, wire_d, _ = self.save_context(tokens(59, 64))
        # `a`, the least recently prepared, is wanted soon; `b` by nobody: `b` goes, not `a`.
        reply = self.tier.set_eviction_values([[a.hex(), 1.5], [c.hex(), 1.2], [d.hex(), 0.1], ["not a key", 3], [b.hex(), float("nan")]])
        self.assertEqual(reply, {"ok": True, "values": 3})
        self.assertTrue(self.tier.prepare(c.hex(), wire_c)["ok"])
        self.assertEqual(self.consumer.try_pin(b), "absent")
        for digest in (a, c):
            lease = self.consumer.try_pin(digest)
            self.assertNotIsInstance(lease, str)
            lease.close()
        # `d` is worth less than both residents: nothing is evicted for it.
        with self.assertRaisesRegex(ValueError, "worth more"):
            self.tier.prepare(d.hex(), wire_d)
        stats = self.tier.stats()
        self.assertEqual((stats["evicted"], stats["worthMoreSkips"], stats["valueUpdates"]), (1, 2, 1))
        with self.assertRaisesRegex(ValueError, "eviction-values"):
            self.tier.set_eviction_values({"a": 1})


if __name__ == "__main__":
    unittest.main()
