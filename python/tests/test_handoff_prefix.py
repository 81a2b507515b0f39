"""Handoff tokens and exact pins, prefix lookups over many chunks, and peek."""

from __future__ import annotations

import unittest

import waitprep

from _support import TableCase, digest_of, needs_library, table_name

GPU_A = "GPU-5e1f0c2a-1111-2222-3333-444455556666"


class Tokens(unittest.TestCase):
    def test_format_is_nodes_and_parse_reads_it_back(self) -> None:
        token = waitprep.format_handoff_token("engine0-kv", 7, 2**56 - 1, bytes(range(32)))
        self.assertEqual(token, "wp1:engine0-kv:7:72057594037927935:" + bytes(range(32)).hex())
        parsed = waitprep.parse_handoff_token(token)
        self.assertEqual(parsed, waitprep.HandoffToken("engine0-kv", 7, 2**56 - 1, bytes(range(32))))
        self.assertEqual(str(parsed), token)

    def test_parse_is_strict(self) -> None:
        hex64 = "ab" * 32
        for bad in (
            "wp1:t:1:2:" + hex64 + "\n",
            "wp1:t:01:2:" + hex64,
            "wp1:t:1:02:" + hex64,
            "wp1:t:1:2:" + hex64.upper(),
            "wp1:t:1:2:" + hex64[:-2],
            "wp1:.t:1:2:" + hex64,
            "wp2:t:1:2:" + hex64,
            "wp1:t:4294967296:2:" + hex64,
            "wp1:t:1:%d:%s" % (2**56, hex64),
            "wp1:t:-1:2:" + hex64,
            b"wp1:t:1:2:" + hex64.encode(),
        ):
            with self.subTest(bad=bad):
                with self.assertRaises(waitprep.WaitprepError) as caught:
                    waitprep.parse_handoff_token(bad)
                self.assertEqual((caught.exception.code, caught.exception.field), ("ERR_INVALID_ARGUMENT", "token"))


@needs_library
class ExactPins(TableCase):
    def setUp(self) -> None:
        super().setUp()
        self.engine = waitprep.open_table(self.name)  # the receiving process's client
        self.addCleanup(self.engine.close)

    def held(self, lease: object) -> waitprep.Lease:
        self.assertIsInstance(lease, waitprep.Lease, lease)
        assert isinstance(lease, waitprep.Lease)
        return lease

    def test_the_receiver_pins_the_same_artifact_for_itself_and_eviction_waits_for_it(self) -> None:
        reservation = self.publish(digest_of(1), location=99)
        handing = self.held(self.consumer.try_pin(digest_of(1)))
        token = handing.handoff_token()
        self.assertEqual(token, "wp1:%s:%d:%d:%s" % (self.name, reservation.slot, reservation.generation, digest_of(1).hex()))
        own = self.held(self.engine.try_pin_exact(token))
        self.assertEqual((own.slot, own.generation, own.digest, own.meta.location), (reservation.slot, reservation.generation, digest_of(1), 99))
        self.assertEqual(self.engine.client_pins(own.slot), 1)
        self.assertEqual(sorted(self.engine.pin_holders(own.slot)), sorted([self.consumer.client_index, self.engine.client_index]))
        handing.close()  # the rule: the orchestrator closes once the engine holds its own pin
        self.assertEqual(self.producer.try_evict(digest_of(1)), "pinned")
        self.assertEqual(own.handoff_token(), token)
        own.close()
        self.assertEqual(self.producer.try_evict(digest_of(1)), "evicted")

    def test_a_parsed_token_and_a_device_target_work_as_for_try_pin(self) -> None:
        self.publish(digest_of(1))
        self.producer.record_device_write(digest_of(1), GPU_A, 3, 7, 1)
        token = waitprep.parse_handoff_token(self.held(self.consumer.try_pin(digest_of(1))).handoff_token())
        with self.held(self.engine.try_pin_exact(token, device=GPU_A, arena=3, arena_generation=7)) as lease:
            self.assertEqual(lease.readiness, "device")
        self.assertEqual(self.engine.try_pin_exact(token, device=GPU_A, arena=3, arena_generation=8), "arena-generation-mismatch")
        self.assertEqual(self.engine.try_pin_exact(token, device="GPU-x"), "invalid-target")

    def test_a_stale_token_misses_stale_handoff(self) -> None:
        self.publish(digest_of(1))
        lease = self.held(self.consumer.try_pin(digest_of(1)))
        token = lease.handoff_token()
        lease.close()
        self.assertEqual(self.producer.try_evict(digest_of(1)), "evicted")
        self.assertEqual(self.engine.try_pin_exact(token), "stale-handoff")
        self.publish(digest_of(1))  # the same digest again: a new generation, so the old token stays stale
        self.assertEqual(self.engine.try_pin_exact(token), "stale-handoff")

    def test_a_recycled_slot_misses_stale_handoff(self) -> None:
        name = table_name("recycled")
        producer = waitprep.create_table(name, 1)  # one slot: every artifact lands in slot 0
        self.addCleanup(waitprep.unlink_table, name)
        self.addCleanup(producer.close)
        engine = waitprep.open_table(name)
        self.addCleanup(engine.close)
        first = producer.reserve(digest_of(1))
        producer.publish(first, 1, 2, 3, 4, 5)
        token = waitprep.format_handoff_token(name, first.slot, first.generation, digest_of(1))
        self.assertEqual(producer.try_evict(digest_of(1)), "evicted")
        second = producer.reserve(digest_of(2))
        producer.publish(second, 1, 2, 3, 4, 5)
        self.assertEqual(second.slot, first.slot)
        self.assertEqual(engine.try_pin_exact(token), "stale-handoff")
        # The new occupant's generation with the old digest is a forgery, not a hit.
        self.assertEqual(engine.try_pin_exact(waitprep.format_handoff_token(name, second.slot, second.generation, digest_of(1))), "stale-handoff")

    def test_a_forged_token_misses_or_is_refused(self) -> None:
        r = self.publish(digest_of(1))
        self.assertEqual(self.engine.try_pin_exact(waitprep.format_handoff_token(self.name, r.slot, r.generation, digest_of(9))), "stale-handoff")
        self.assertEqual(self.engine.try_pin_exact(waitprep.format_handoff_token(self.name, r.slot, r.generation + 5, digest_of(1))), "stale-handoff")
        for token in (
            waitprep.format_handoff_token("another-table", r.slot, r.generation, digest_of(1)),
            waitprep.format_handoff_token(self.name, self.capacity, 0, digest_of(1)),
            "not a token",
        ):
            with self.subTest(token=token):
                with self.assertRaises(waitprep.WaitprepError) as caught:
                    self.engine.try_pin_exact(token)
                self.assertEqual((caught.exception.code, caught.exception.field), ("ERR_INVALID_ARGUMENT", "token"))
        self.assertEqual(self.engine.client_pins(r.slot), 0)

    def test_a_closed_lease_gives_no_token_and_a_closed_table_misses(self) -> None:
        self.publish(digest_of(1))
        lease = self.held(self.consumer.try_pin(digest_of(1)))
        token = lease.handoff_token()
        lease.close()
        with self.assertRaises(waitprep.WaitprepError) as caught:
            lease.handoff_token()
        self.assertEqual(caught.exception.code, "ERR_CLOSED")
        self.engine.close()
        self.assertEqual(self.engine.try_pin_exact(token), "table-closed")


@needs_library
class Prefix(TableCase):
    capacity = 256

    def test_the_leading_ready_run_is_pinned_in_order_and_released_in_one_call(self) -> None:
        chunks = [digest_of(i) for i in range(8)]
        for d in chunks[:5]:
            self.publish(d)
        self.producer.reserve(chunks[5])
        for form in (chunks, b"".join(chunks)):
            with self.subTest(form=type(form).__name__):
                run = self.consumer.try_pin_prefix(form)
                self.assertEqual(len(run), 5)
                self.assertEqual([lease.digest for lease in run], chunks[:5])
                self.assertEqual(run[-1].digest, chunks[4])
                self.assertEqual([lease.digest for lease in run[1:3]], chunks[1:3])
                self.assertEqual([self.consumer.client_pins(lease.slot) for lease in run], [1] * 5)
                self.assertEqual(self.consumer.peek(chunks[len(run)]), "preparing")
                self.assertEqual(self.producer.try_evict(chunks[2]), "pinned")
                self.assertEqual(run.close(), 5)
                self.assertTrue(run.closed and all(lease.closed for lease in run))
                self.assertEqual(run.close(), 0)
                self.assertEqual([self.consumer.client_pins(lease.slot) for lease in run], [0] * 5)

    def test_a_lease_closed_by_itself_is_skipped_and_the_run_is_a_context_manager(self) -> None:
        chunks = [digest_of(i) for i in range(3)]
        for d in chunks:
            self.publish(d)
        with self.consumer.try_pin_prefix(chunks) as run:
            self.assertTrue(run[1].close())
        self.assertTrue(run.closed)
        self.assertEqual([self.consumer.client_pins(lease.slot) for lease in run], [0, 0, 0])
        for d in chunks:
            self.assertEqual(self.producer.try_evict(d), "evicted")

    def test_unpin_many_releases_a_list_of_leases_and_refuses_another_tables(self) -> None:
        chunks = [digest_of(i) for i in range(4)]
        for d in chunks:
            self.publish(d)
        leases = [self.consumer.try_pin(d) for d in chunks]
        leases[0].close()  # type: ignore[union-attr]
        other_name = table_name("other")
        other = waitprep.create_table(other_name, 4)
        self.addCleanup(waitprep.unlink_table, other_name)
        self.addCleanup(other.close)
        other.publish(other.reserve(chunks[0]), 1, 2, 3, 4, 5)
        foreign = other.try_pin(chunks[0])
        with self.assertRaises(waitprep.WaitprepError) as caught:
            self.consumer.unpin_many(leases + [foreign])  # type: ignore[arg-type]
        self.assertEqual(caught.exception.code, "ERR_INVALID_ARGUMENT")
        self.assertFalse(any(lease.closed for lease in leases[1:]))  # type: ignore[union-attr]
        self.assertEqual(self.consumer.unpin_many(leases), 3)  # type: ignore[arg-type]
        self.assertEqual(self.consumer.unpin_many(leases), 0)  # type: ignore[arg-type]
        self.assertEqual(self.consumer.unpin_many(self.consumer.try_pin_prefix(chunks)), 4)

    def test_a_miss_first_is_an_empty_run_and_bad_input_is_refused(self) -> None:
        self.assertEqual(len(self.consumer.try_pin_prefix([digest_of(1)])), 0)
        self.assertEqual(len(self.consumer.try_pin_prefix([])), 0)
        # A bad element is a bad digest (ERR_INVALID_KEY, as try_pin says); a bad whole is not.
        for bad, code in (([digest_of(1), b"short"], "ERR_INVALID_KEY"), (b"x" * 33, "ERR_INVALID_ARGUMENT"), ([1, 2], "ERR_INVALID_KEY"), (None, "ERR_INVALID_ARGUMENT")):
            with self.subTest(bad=bad):
                with self.assertRaises(waitprep.WaitprepError) as caught:
                    self.consumer.try_pin_prefix(bad)  # type: ignore[arg-type]
                self.assertEqual(caught.exception.code, code)
        with self.assertRaises(waitprep.WaitprepError) as caught:
            self.consumer.try_pin_prefix([digest_of(1)], device="GPU-x")
        self.assertEqual((caught.exception.code, caught.exception.field), ("ERR_INVALID_ARGUMENT", "device"))
        self.consumer.close()
        with self.assertRaises(waitprep.WaitprepError) as caught:
            self.consumer.try_pin_prefix([digest_of(1)])
        self.assertEqual(caught.exception.code, "ERR_CLOSED")

    def test_a_device_prefix_stops_at_the_first_chunk_without_that_record(self) -> None:
        chunks = [digest_of(i) for i in range(3)]
        for d in chunks:
            self.publish(d)
        for d in chunks[:2]:
            self.producer.record_device_write(d, GPU_A, 3, 7, 1)
        with self.consumer.try_pin_prefix(chunks, device=GPU_A, arena=3, arena_generation=7) as run:
            self.assertEqual((len(run), run[0].readiness), (2, "device"))


@needs_library
class Peek(TableCase):
    def test_peek_reads_the_state_without_pinning(self) -> None:
        d = digest_of(1)
        self.assertEqual(self.consumer.peek(d), "absent")
        reservation = self.producer.reserve(d)
        self.assertEqual(self.consumer.peek(d), "preparing")
        self.producer.publish(reservation, 1, 2, 3, 4, 5)
        self.assertEqual(self.consumer.peek(d), "ready")
        self.assertEqual(self.consumer.client_pins(reservation.slot), 0)
        self.assertEqual(self.producer.try_evict(d), "evicted")
        self.consumer.close()
        self.assertEqual(self.consumer.peek(d), "table-closed")


if __name__ == "__main__":
    unittest.main()
