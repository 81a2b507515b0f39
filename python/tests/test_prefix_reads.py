"""A prefix pin names only what it pins, whatever the caller's sequence answers on a later read.

``Table.try_pin_prefix`` packs the caller's digests into one bytes object and both pins and names
every lease from that copy. A sequence that answers differently each time it is read (here: its
first read of an index gives one digest, every later read another) must not get a lease whose
``digest`` names an artifact the lease does not pin, which the producer could then evict while
the engine reads it.
"""

from __future__ import annotations

import unittest
from typing import List, Sequence, Union, overload

from _support import TableCase, digest_of, needs_library


class Changing(Sequence[bytes]):
    """Index ``i`` answers ``first[i]`` on its first read and ``later[i]`` on every read after."""

    def __init__(self, first: List[bytes], later: List[bytes]) -> None:
        self.first, self.later = first, later
        self.reads = [0] * len(first)

    def __len__(self) -> int:
        return len(self.first)

    @overload
    def __getitem__(self, index: int) -> bytes: ...

    @overload
    def __getitem__(self, index: slice) -> List[bytes]: ...

    def __getitem__(self, index: Union[int, slice]) -> Union[bytes, List[bytes]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        self.reads[index] += 1
        return self.first[index] if self.reads[index] == 1 else self.later[index]


@needs_library
class PrefixReads(TableCase):
    capacity = 32

    def assert_pinned_as_named(self, named: List[bytes], published: List[bytes]) -> None:
        """Every digest a lease names is pinned (the producer cannot evict it); every other
        published digest is not (the run holds no pin that no lease names)."""
        for digest in named:
            self.assertEqual(self.producer.try_evict(digest), "pinned", digest.hex())
        for digest in published:
            if digest not in named:
                self.assertEqual(self.producer.try_evict(digest), "evicted", digest.hex())

    def test_a_sequence_that_changes_its_answers_gets_leases_named_by_what_they_pin(self) -> None:
        first = [digest_of(i) for i in range(1, 5)]
        later = [digest_of(i) for i in range(11, 15)]
        for digest in first + later:
            self.publish(digest)
        chunks = Changing(first, later)
        with self.consumer.try_pin_prefix(chunks) as run:
            self.assertEqual(len(run), 4)
            named = [lease.digest for lease in run]
            self.assertIn(named, (first, later))
            self.assertTrue(all(n >= 1 for n in chunks.reads), chunks.reads)
            self.assert_pinned_as_named(named, first + later)
            self.assertEqual(run.close(), 4)

    def test_a_run_that_stops_stops_where_its_leases_say(self) -> None:
        # The first answers stop the run after two chunks (the third is absent); the later ones
        # would all be READY. The run is as long as the copy it pinned says, no longer.
        ready = [digest_of(i) for i in (1, 2, 4)]
        for digest in ready + [digest_of(23)]:
            self.publish(digest)
        chunks = Changing([digest_of(1), digest_of(2), digest_of(3), digest_of(4)], [digest_of(1), digest_of(2), digest_of(23), digest_of(4)])
        run = self.consumer.try_pin_prefix(chunks)
        try:
            named = [lease.digest for lease in run]
            self.assertIn(named, ([digest_of(1), digest_of(2)], [digest_of(1), digest_of(2), digest_of(23), digest_of(4)]))
            self.assert_pinned_as_named(named, ready + [digest_of(23)])
        finally:
            run.close()


if __name__ == "__main__":
    unittest.main()
