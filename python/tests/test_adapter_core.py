"""The adapters' engine-free bookkeeping: the per-request lease stacks (PinLedger, vLLM's loads) and
the per-key counts (KeyPins, LMCache's anonymous unpins), over every order of the calls two
requests sharing keys can make; and the settings every adapter reads."""

from __future__ import annotations

import itertools
import threading
import unittest
from typing import List

import waitprep
from waitprep.adapters import AdapterConfig, PinLedger
from waitprep.adapters.lmcache import KeyPins


class FakeLease:
    """Stands for a Lease: the bookkeeping only moves them around."""

    count = itertools.count()

    def __init__(self) -> None:
        self.n = next(FakeLease.count)


class Ledger(unittest.TestCase):
    def test_each_owner_releases_its_own_pins_in_any_order(self) -> None:
        ledger = PinLedger()
        a, b = b"a" * 32, b"b" * 32
        la1, la2, lb = FakeLease(), FakeLease(), FakeLease()
        ledger.add_many("r1", [(a, la1), (b, lb)])
        ledger.add("r2", a, la2)
        self.assertEqual(ledger.held, 3)
        self.assertEqual(ledger.owners(), {"r1": 2, "r2": 1})
        self.assertIs(ledger.take("r2", a), la2)
        self.assertIsNone(ledger.take("r2", a))  # r2 holds no more
        self.assertTrue(ledger.holds(a, "r1"))
        self.assertEqual(ledger.take_many("r1", [b, a]), [lb, la1])
        self.assertEqual(ledger.held, 0)
        self.assertFalse(ledger.holds(a))

    def test_take_owner_and_take_all(self) -> None:
        ledger = PinLedger()
        keys = [bytes([i]) * 32 for i in range(4)]
        for i, key in enumerate(keys):
            ledger.add("r%d" % (i % 2), key, FakeLease())
        self.assertEqual(len(ledger.take_owner("r0")), 2)
        self.assertEqual(ledger.held, 2)
        self.assertEqual(len(ledger.take_all()), 2)
        self.assertEqual(ledger.held, 0)

    def test_threads_adding_and_taking_leave_nothing(self) -> None:
        ledger = PinLedger()
        keys = [bytes([i]) * 32 for i in range(8)]

        def run(owner: str) -> None:
            for _ in range(500):
                for key in keys:
                    ledger.add(owner, key, FakeLease())
                for key in reversed(keys):
                    self.assertIsNotNone(ledger.take(owner, key))

        threads = [threading.Thread(target=run, args=("r%d" % i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(ledger.held, 0)


class Counts(unittest.TestCase):
    def test_every_order_of_two_requests_flows_ends_with_no_pin_left(self) -> None:
        """Requests a and b each pin one key (in either order, a also twice), then each flow ends with
        its unpins or its cancel, in either order: nothing is left, and nothing is released twice."""
        key = b"k" * 32
        for a_pins, first, a_end, b_end in itertools.product((1, 2), ("a", "b"), ("unpin", "cancel"), ("unpin", "cancel")):
            for order in (("a", "b"), ("b", "a")):
                with self.subTest(a_pins=a_pins, first=first, a_end=a_end, b_end=b_end, order=order):
                    pins = KeyPins()
                    pinned = {"a": a_pins, "b": 1}
                    for owner in (first, "b" if first == "a" else "a"):
                        for _ in range(pinned[owner]):
                            pins.add(owner, [(key, FakeLease())])
                    released: List[FakeLease] = []
                    for owner in order:
                        if (a_end if owner == "a" else b_end) == "unpin":
                            for _ in range(pinned[owner]):
                                lease = pins.take_one(key)
                                if lease is not None:
                                    released.append(lease)
                        else:
                            released.extend(pins.take_owner(owner))
                    self.assertEqual(pins.held, 0)
                    self.assertEqual(len(released), len(set(id(r) for r in released)))
                    self.assertEqual(len(released), a_pins + 1)

    def test_cancel_releases_no_more_than_the_request_took(self) -> None:
        pins = KeyPins()
        k1, k2 = b"1" * 32, b"2" * 32
        pins.add("a", [(k1, FakeLease()), (k2, FakeLease())])
        pins.add("b", [(k1, FakeLease())])
        pins.add(None, [(k2, FakeLease())])
        self.assertEqual(len(pins.take_owner("a")), 2)
        self.assertEqual(pins.held, 2)  # b's pin on k1 and the anonymous one on k2
        self.assertEqual(pins.take_owner("a"), [])
        self.assertIsNotNone(pins.take_one(k2))
        self.assertIsNone(pins.take_one(k2))


class Settings(unittest.TestCase):
    def test_required_unknown_and_ill_typed_settings_are_named(self) -> None:
        for values, field in (
            ({"runtime": "r"}, "w.table"),
            ({"table": "t"}, "w.runtime"),
            ({"table": "t", "runtime": "r", "dtyp": "bf16"}, "w.dtyp"),
            ({"table": "t", "runtime": "r", "task": ""}, "w.task"),
            ({"table": "t", "runtime": "r", "verify_checksum": "yes"}, "w.verify_checksum"),
            ({"table": "t", "runtime": "r", "representation_version": -1}, "w.representation_version"),
            ({"table": "t", "runtime": "r", "events": 3}, "w.events"),
        ):
            with self.subTest(field=field), self.assertRaises(waitprep.WaitprepError) as caught:
                AdapterConfig(values, "w")
            self.assertEqual(caught.exception.field, field)

    def test_defaults_and_the_feed_path(self) -> None:
        c = AdapterConfig({"table": "t1", "runtime": "r"})
        self.assertEqual((c.adapter, c.snapshot_kind, c.codec, c.verify_checksum), ("none", "kv-chunk", "none", True))
        self.assertEqual(c.feed_path(), "/dev/shm/t1-events")
        self.assertIsNone(AdapterConfig({"table": "t1", "runtime": "r", "events": False}).feed_path())
        self.assertEqual(AdapterConfig({"table": "t1", "runtime": "r", "events": "/tmp/x"}).feed_path(), "/tmp/x")
        with self.assertRaises(waitprep.WaitprepError) as caught:
            c.need("dtype")
        self.assertEqual(caught.exception.field, "waitprep.dtype")
        self.assertEqual(c.need("model", "from-the-engine"), "from-the-engine")


if __name__ == "__main__":
    unittest.main()
