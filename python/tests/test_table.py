"""Both roles over libwaitprep.so: the Node API's semantics and error codes, from Python."""

from __future__ import annotations

import copy
import ctypes
import os
import stat
import unittest
from typing import Callable

import waitprep
from waitprep.table import status_error

from _support import TableCase, digest_of, needs_library, table_name

GPU_A = "GPU-5e1f0c2a-1111-2222-3333-444455556666"
GPU_B = "GPU-00000000-0000-0000-0000-000000000001"


@needs_library
class PublishAndPin(TableCase):
    def test_a_published_artifact_pins_with_the_metadata_it_was_published_with(self) -> None:
        d = digest_of(1)
        reservation = self.producer.reserve(d)
        self.assertEqual(self.consumer.try_pin(d), "preparing")
        self.producer.publish(reservation, size_bytes=2**63 + 5, location=0x7F00_0000_0000_0001, checksum=2**64 - 1, codec_id=3, representation_version=4)
        lease = self.consumer.try_pin(d)
        self.assertIsInstance(lease, waitprep.Lease)
        assert isinstance(lease, waitprep.Lease)
        self.assertEqual((lease.slot, lease.generation), tuple(reservation))
        self.assertEqual(lease.meta, waitprep.LeaseMeta(2**63 + 5, 0x7F00_0000_0000_0001, 2**64 - 1, 3, 4))
        self.assertEqual(lease.digest, d)
        self.assertEqual(lease.readiness, "host")
        self.assertEqual(self.consumer.client_pins(lease.slot), 1)
        self.assertEqual(self.consumer.pin_holders(lease.slot), [self.consumer.client_index])
        self.assertTrue(lease.close())
        self.assertEqual(self.consumer.client_pins(lease.slot), 0)

    def test_a_miss_is_a_reason_string(self) -> None:
        self.assertEqual(self.consumer.try_pin(digest_of(2)), "absent")
        self.assertIn("absent", waitprep.MISS_REASONS)
        self.assertIn("table-closed", waitprep.MISS_REASONS)

    def test_a_lease_is_a_context_manager_and_releases_once(self) -> None:
        d = digest_of(3)
        self.publish(d)
        lease = self.consumer.try_pin(d)
        assert isinstance(lease, waitprep.Lease)
        with lease as held:
            self.assertIs(held, lease)
            self.assertEqual(self.producer.try_evict(d), "pinned")
        self.assertTrue(lease.closed)
        self.assertFalse(lease.close())
        self.assertEqual(self.producer.try_evict(d), "evicted")
        self.assertEqual(self.consumer.try_pin(d), "absent")

    def test_unpin_says_whether_it_released(self) -> None:
        # wp_unpin's status: a second release, one through a copy of a released lease, or one of
        # another client's lease releases nothing and says so.
        d = digest_of(4)
        self.publish(d)
        first = self.consumer.try_pin(d)
        second = self.consumer.try_pin(d)
        assert isinstance(first, waitprep.Lease) and isinstance(second, waitprep.Lease)
        twin = waitprep.Lease(self.consumer, copy.copy(first._raw), d, "host")
        foreign = waitprep.Lease(self.producer, copy.copy(second._raw), d, "host")
        self.assertTrue(first.close())
        self.assertFalse(first.close())
        self.assertFalse(twin.close())
        self.assertFalse(foreign.close())
        self.assertEqual(self.consumer.client_pins(second.slot), 1)
        self.assertTrue(self.consumer.unpin(second))
        self.assertEqual(self.consumer.client_pins(second.slot), 0)

    def test_abandon_frees_the_slot_under_a_new_generation(self) -> None:
        d = digest_of(5)
        reservation = self.producer.reserve(d)
        self.producer.abandon(reservation)
        self.assertEqual(self.consumer.try_pin(d), "absent")
        again = self.producer.reserve(d)
        self.assertEqual(again.slot, reservation.slot)
        self.assertGreater(again.generation, reservation.generation)
        with self.assertRaises(waitprep.WaitprepError) as caught:
            self.producer.publish(reservation, 1, 2, 3, 4, 5)
        self.assertEqual(caught.exception.code, "ERR_STALE_RESERVATION")
        self.assertEqual(caught.exception.status_name, "WP_STALE")

    def test_eviction_results(self) -> None:
        d = digest_of(6)
        self.assertEqual(self.producer.try_evict(d), "absent")
        self.publish(d)
        self.assertEqual(self.producer.try_evict(d), "evicted")
        self.assertEqual(self.producer.try_evict(d), "absent")


@needs_library
class Errors(TableCase):
    capacity = 1

    def expect_code(self, code: str, fn: Callable[..., object], *args: object, **kwargs: object) -> waitprep.WaitprepError:
        with self.assertRaises(waitprep.WaitprepError) as caught:
            fn(*args, **kwargs)
        self.assertEqual(caught.exception.code, code, str(caught.exception))
        return caught.exception

    def test_the_codes_of_the_node_api(self) -> None:
        self.publish(digest_of(1))
        self.expect_code("ERR_KEY_EXISTS", self.producer.reserve, digest_of(1))
        self.expect_code("ERR_TABLE_FULL", self.producer.reserve, digest_of(2))
        self.expect_code("ERR_NOT_PRODUCER", self.consumer.reserve, digest_of(3))
        self.expect_code("ERR_NOT_PRODUCER", self.consumer.try_evict, digest_of(1))
        self.expect_code("ERR_WRITER_EXISTS", waitprep.open_table, self.name, "producer")
        self.expect_code("ERR_TABLE_EXISTS", waitprep.create_table, self.name, 4)
        missing = self.expect_code("ERR_TABLE_NOT_FOUND", waitprep.open_table, table_name("missing"))
        self.assertEqual((missing.status, missing.status_name), (46, "WP_ERR_NOT_FOUND"))

    def test_arguments_are_checked_before_any_call(self) -> None:
        self.assertEqual(self.expect_code("ERR_INVALID_KEY", self.consumer.try_pin, b"short").field, "digest")
        self.assertEqual(self.expect_code("ERR_INVALID_ARGUMENT", waitprep.open_table, ".hidden").field, "name")
        self.expect_code("ERR_INVALID_ARGUMENT", waitprep.open_table, self.name, "reader")
        self.expect_code("ERR_INVALID_ARGUMENT", waitprep.create_table, table_name("c"), 0)
        self.expect_code("ERR_INVALID_ARGUMENT", waitprep.create_table, table_name("c"), 4, mode=0)
        self.expect_code("ERR_INVALID_ARGUMENT", waitprep.create_table, table_name("c"), 4, mode=0o666)
        self.expect_code("ERR_INVALID_ARGUMENT", self.producer.publish, (0, -1), 1, 2, 3, 4, 5)
        self.expect_code("ERR_INVALID_ARGUMENT", self.producer.publish, self.producer.reserve(digest_of(9)), -1, 2, 3, 4, 5)
        self.expect_code("ERR_INVALID_ARGUMENT", self.producer.record_device_write, digest_of(1), "GPU-00000000-0000-0000-0000-000000000000", 1, 1, 1)

    def test_a_closed_table_misses_table_closed_and_refuses_the_rest(self) -> None:
        self.publish(digest_of(1))
        lease = self.consumer.try_pin(digest_of(1))
        self.consumer.close()
        self.consumer.close()
        self.assertTrue(self.consumer.closed)
        self.assertEqual(self.consumer.try_pin(digest_of(1)), "table-closed")
        assert isinstance(lease, waitprep.Lease)
        self.assertFalse(lease.close())  # close released every pin
        self.expect_code("ERR_CLOSED", self.consumer.summary)
        self.expect_code("ERR_CLOSED", self.consumer.inspect)
        self.assertEqual(self.producer.try_evict(digest_of(1)), "evicted")

    def test_an_unknown_status_is_err_system_with_its_number(self) -> None:
        error = status_error(self.producer.library, 99, "call()")
        self.assertEqual((error.code, error.status), ("ERR_SYSTEM", 99))


@needs_library
class DeviceRecords(TableCase):
    def test_a_device_pin_hits_only_its_exact_target(self) -> None:
        d, other = digest_of(1), digest_of(2)
        self.publish(d)
        self.publish(other)
        self.assertEqual(self.producer.record_device_write(d, GPU_A, 3, 7, 1), "recorded")
        self.assertEqual(self.producer.record_device_write(digest_of(3), GPU_A, 3, 7, 1), "absent")
        lease = self.consumer.try_pin(d, device=GPU_A, arena=3, arena_generation=7)
        assert isinstance(lease, waitprep.Lease)
        self.assertEqual(lease.readiness, "device")
        lease.close()
        self.assertEqual(self.consumer.try_pin(d, device=GPU_A, arena=3, arena_generation=8), "arena-generation-mismatch")
        self.assertEqual(self.consumer.try_pin(d, device=GPU_B, arena=3, arena_generation=7), "device-mismatch")
        self.assertEqual(self.consumer.try_pin(other, device=GPU_A, arena=3, arena_generation=7), "no-device-record")
        self.assertEqual(self.consumer.try_pin(d, device="GPU-nope", arena=3, arena_generation=7), "invalid-target")
        self.assertEqual(self.consumer.try_pin(d, device=GPU_A, arena=-1, arena_generation=7), "invalid-target")

    def test_device_uuid_bytes_is_the_uuid_in_order(self) -> None:
        self.assertEqual(waitprep.device_uuid_bytes(GPU_A).hex(), "5e1f0c2a111122223333444455556666")


@needs_library
class Operations(TableCase):
    def test_summary_counts_slots_pins_and_clients(self) -> None:
        self.publish(digest_of(1))
        self.producer.reserve(digest_of(2))
        lease = self.consumer.try_pin(digest_of(1))
        summary = self.consumer.summary()
        self.assertEqual(summary.capacity, 16)
        self.assertEqual(summary.slots, waitprep.SlotCounts(free=14, reserved=1, ready=1, evicting=0))
        self.assertEqual(summary.pinned_slots, 1)
        self.assertEqual(summary.clients, waitprep.ClientCounts(claiming=0, active=2, reaping=0))
        self.assertEqual(summary.producer, self.producer.client_index)
        assert isinstance(lease, waitprep.Lease)
        lease.close()
        self.assertEqual(self.consumer.summary().pinned_slots, 0)

    def test_inspect_lists_slots_and_clients(self) -> None:
        r = self.publish(digest_of(1), location=77)
        self.producer.record_device_write(digest_of(1), GPU_A, 3, 7, 9)
        lease = self.consumer.try_pin(digest_of(1))
        view = self.consumer.inspect()
        self.assertEqual((view.abi_version, view.capacity, view.producer), (waitprep.ABI_VERSION, 16, self.producer.client_index))
        self.assertEqual(sorted(c.index for c in view.clients), sorted([self.producer.client_index, self.consumer.client_index]))
        me = next(c for c in view.clients if c.index == self.consumer.client_index)
        self.assertEqual((me.state, me.pid, me.producer), ("active", os.getpid(), False))
        self.assertTrue(next(c for c in view.clients if c.index == self.producer.client_index).producer)
        [slot] = view.slots
        self.assertEqual((slot.slot, slot.state, slot.generation, slot.pin_holders), (r.slot, "ready", r.generation, [self.consumer.client_index]))
        self.assertEqual(slot.digest_hex, digest_of(1).hex())
        self.assertEqual(slot.meta.location, 77)
        assert slot.device is not None
        self.assertEqual((slot.device.device_uuid_hex, slot.device.arena, slot.device.arena_generation, slot.device.write_seq), ("5e1f0c2a111122223333444455556666", 3, 7, 9))
        assert isinstance(lease, waitprep.Lease)
        lease.close()

    def test_a_dead_clients_pins_are_reaped(self) -> None:
        d = digest_of(1)
        self.publish(d)
        pid = os.fork()
        if pid == 0:  # the child pins through its own client and dies holding it
            try:
                child = waitprep.open_table(self.name)
                child.try_pin(d)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        self.assertEqual(self.producer.try_evict(d), "pinned")
        self.assertEqual(self.consumer.reap_dead_clients(), 1)
        self.assertEqual(self.consumer.reap(), 0)
        self.assertEqual(self.producer.try_evict(d), "evicted")


@needs_library
class Trust(unittest.TestCase):
    def test_a_world_writable_file_is_refused_unless_trusted(self) -> None:
        name = table_name("trust")
        producer = waitprep.create_table(name, 4)
        self.addCleanup(waitprep.unlink_table, name)
        self.addCleanup(producer.close)
        os.chmod("/dev/shm/" + name, 0o666)
        with self.assertRaises(waitprep.WaitprepError) as caught:
            waitprep.open_table(name)
        self.assertEqual((caught.exception.code, caught.exception.status_name), ("ERR_UNTRUSTED_SEGMENT", "WP_ERR_UNTRUSTED_SEGMENT"))
        self.assertIn("with mode 0o666", str(caught.exception))
        with waitprep.open_table(name, trust_group_writable=True, trust_world_writable=True) as trusted:
            self.assertFalse(trusted.closed)
        self.assertEqual(stat.S_IMODE(os.stat("/dev/shm/" + name).st_mode), 0o666)

    def test_unlink_says_whether_there_was_a_table(self) -> None:
        name = table_name("unlink")
        waitprep.create_table(name, 1).close()
        self.assertTrue(waitprep.unlink_table(name))
        self.assertFalse(waitprep.unlink_table(name))


@needs_library
class LibraryArgument(unittest.TestCase):
    def test_a_table_opens_over_a_library_passed_by_path_or_loaded(self) -> None:
        lib = waitprep.load_library()
        name = table_name("lib")
        with waitprep.create_table(name, 2, library=lib._name) as a, waitprep.open_table(name, library=lib) as b:
            self.assertIs(a.library, b.library)
            self.assertIsInstance(a.library, ctypes.CDLL)
        waitprep.unlink_table(name, library=lib)


if __name__ == "__main__":
    unittest.main()
