"""Manifests (waitprep.manifest, docs/engine-keys.md#manifests) over a real table: published only
once every listed chunk is READY, and while a manifest is pinned the producer's helper never evicts
a chunk it lists. Plus the manifest bytes, which are the same as Node's."""

import os
import sys
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # _support; waitprep itself comes from the installed copy or PYTHONPATH

from _support import TableCase, needs_library  # noqa: E402
from waitprep import WaitprepError  # noqa: E402
from waitprep.chunk_keys import ChunkChain, Profile  # noqa: E402
from waitprep.manifest import Incomplete, ManifestProducer, ManifestReservation, decode_manifest, encode_manifest  # noqa: E402


def make_chain(tokens=64):
    chain = ChunkChain(runtime="test", model="m", profile=Profile("bf16", "NHD", 1, 0), task="t", namespace="manifest-test", chunk_tokens=16)
    return chain, chain.extend(list(range(tokens)))


@needs_library
class ManifestProducerTests(TableCase):
    capacity = 64

    def publish_chunks(self, chunks):
        for chunk in chunks:
            self.producer.publish(self.producer.reserve(chunk.digest), size_bytes=4096, location=0, checksum=0, codec_id=0, representation_version=1)

    def pins_held(self):
        return sum(self.producer.client_pins(slot) for slot in range(self.capacity))

    def reserve(self, helper, manifest, chunks):
        r = helper.reserve(manifest, chunks)
        self.assertIsInstance(r, ManifestReservation, r)
        return r

    def publish(self, helper, r):
        helper.publish(r, size_bytes=len(r.bytes), location=0, checksum=0, codec_id=0, representation_version=1)

    def test_published_only_when_every_chunk_is_ready(self):
        chain, chunks = make_chain()
        helper = ManifestProducer(self.producer)
        manifest = chain.manifest_key()
        self.publish_chunks(chunks[:2])
        preparing = self.producer.reserve(chunks[2].digest)
        self.assertEqual(helper.reserve(manifest, chunks), Incomplete(2, "preparing"))
        self.producer.publish(preparing, size_bytes=1, location=0, checksum=0, codec_id=0, representation_version=1)
        self.assertEqual(helper.reserve(manifest, chunks), Incomplete(3, "absent"))
        self.assertEqual(self.consumer.try_pin(manifest.digest), "absent")
        self.assertEqual(self.pins_held(), 0)

        self.publish_chunks(chunks[3:])
        r = self.reserve(helper, manifest, chunks)
        self.assertEqual(self.consumer.try_pin(manifest.digest), "preparing")
        for chunk in chunks:
            self.assertEqual(helper.try_evict(chunk), "pinned")
        self.assertEqual(decode_manifest(r.bytes), ([c.digest for c in chunks], 64))
        self.assertEqual(r.chunks, chain.digests())
        self.publish(helper, r)
        self.assertEqual(self.pins_held(), 0)
        with self.consumer.try_pin(manifest.digest) as lease:
            self.assertEqual(lease.meta.size_bytes, 16 + 32 * 4)
        self.assertEqual(helper.manifests, 1)

    def test_a_pinned_manifest_keeps_every_chunk(self):
        chain, chunks = make_chain()
        helper = ManifestProducer(self.producer)
        self.publish_chunks(chunks)
        manifest = chain.manifest_key()
        self.publish(helper, self.reserve(helper, manifest, chunks))
        lease = self.consumer.try_pin(manifest.digest)
        self.assertNotIsInstance(lease, str)
        for chunk in chunks:
            self.assertEqual(helper.try_evict(chunk), "pinned")
        self.assertEqual(helper.try_evict(manifest), "pinned")
        for chunk in chunks:
            with self.consumer.try_pin(chunk.digest):
                pass
        lease.close()
        self.assertEqual(helper.manifests_listing(chunks[1]), [manifest.digest])
        self.assertEqual(helper.try_evict(chunks[1]), "evicted")
        self.assertEqual(self.consumer.try_pin(manifest.digest), "absent")
        self.assertEqual(self.consumer.try_pin(chunks[1].digest), "absent")
        self.assertEqual(helper.manifests, 0)
        self.assertEqual(helper.try_evict(chunks[0].digest), "evicted")
        self.assertEqual(helper.try_evict(chunks[0]), "absent")

    def test_a_shared_chunk_stays_while_either_manifest_is_pinned(self):
        chain, first = make_chain(32)
        short = chain.manifest_key()
        chunks = first + chain.extend(list(range(100, 116)))
        long = chain.manifest_key()
        helper = ManifestProducer(self.producer)
        self.publish_chunks(chunks)
        self.publish(helper, self.reserve(helper, short, chunks[:2]))
        self.publish(helper, self.reserve(helper, long, chunks))
        with self.consumer.try_pin(short.digest):
            self.assertEqual(helper.try_evict(chunks[2]), "evicted")
            self.assertEqual(self.consumer.try_pin(long.digest), "absent")
            self.assertEqual(helper.try_evict(chunks[0]), "pinned")
        self.assertEqual(helper.try_evict(chunks[0]), "evicted")

    def test_abandon_and_refusals(self):
        chain, chunks = make_chain()
        helper = ManifestProducer(self.producer)
        self.publish_chunks(chunks)
        r = self.reserve(helper, chain.manifest_key(), chunks)
        helper.abandon(r)
        self.assertEqual(self.pins_held(), 0)
        for call in (lambda: self.publish(helper, r), lambda: helper.abandon(r)):
            with self.assertRaises(WaitprepError) as caught:
                call()
            self.assertEqual(caught.exception.code, "ERR_STALE_RESERVATION")
        again = self.reserve(helper, chain.manifest_key(), chunks)
        with self.assertRaises(WaitprepError) as caught:
            helper.reserve(chain.manifest_key(), chunks)
        self.assertEqual(caught.exception.code, "ERR_KEY_EXISTS")
        self.assertEqual(self.pins_held(), 4)
        self.publish(helper, again)
        other = ChunkChain(runtime="test", model="other-model", profile=Profile("bf16", "NHD", 1, 0), task="t", namespace="manifest-test", chunk_tokens=16)
        other.extend(list(range(64)))
        for bad, field in ((lambda: helper.reserve(chunks[3], chunks), "manifest"),
                           (lambda: helper.reserve(chain.manifest_key(), chunks[1:]), "chunks"),
                           (lambda: helper.reserve(chain.manifest_key(), chunks[:3] + ["x"]), "chunks[3]"),
                           (lambda: helper.reserve(chain.manifest_key(), [c.digest for c in chunks]), "total_tokens"),
                           (lambda: ManifestProducer(object()), "table"),
                           (lambda: helper.reserve(chain.manifest_key(), [chunks[0], chunks[2], chunks[1], chunks[3]]), "chunks[1]"),
                           (lambda: helper.reserve(other.manifest_key(), chunks), "manifest")):
            with self.assertRaises(WaitprepError) as caught:
                bad()
            self.assertEqual((caught.exception.code, caught.exception.field), ("ERR_INVALID_ARGUMENT", field))

    def test_threads_evicting_while_a_manifest_is_pinned(self):
        chain, chunks = make_chain(16 * 8)
        helper = ManifestProducer(self.producer)
        self.publish_chunks(chunks)
        manifest = chain.manifest_key()
        self.publish(helper, self.reserve(helper, manifest, chunks))
        lease = self.consumer.try_pin(manifest.digest)
        results = []

        def evict(chunk):
            for _ in range(50):
                results.append(helper.try_evict(chunk))

        threads = [threading.Thread(target=evict, args=(chunk,)) for chunk in chunks]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(set(results), {"pinned"})
        for chunk in chunks:
            with self.consumer.try_pin(chunk.digest):
                pass
        lease.close()


class ManifestBytesTests(unittest.TestCase):
    def test_round_trip_and_strict_reads(self):
        _, chunks = make_chain()
        data = encode_manifest([c.digest for c in chunks], 64)
        self.assertEqual(len(data), 16 + 32 * 4)
        self.assertEqual(data[:4], b"WPM1")
        self.assertEqual(decode_manifest(data).digests, [c.digest for c in chunks])
        zero_count = bytearray(data[:16])
        zero_count[4:8] = b"\0\0\0\0"
        for bad in (data[:15], data[:-1], data + b"\0", b"X" + data[1:], bytes(zero_count)):
            with self.assertRaises(WaitprepError) as caught:
                decode_manifest(bad)
            self.assertEqual((caught.exception.code, caught.exception.field), ("ERR_INVALID_ARGUMENT", "manifest"))
        with self.assertRaises(WaitprepError):
            encode_manifest([], 0)
        with self.assertRaises(WaitprepError):
            encode_manifest([b"x" * 31], 0)


if __name__ == "__main__":
    unittest.main()
