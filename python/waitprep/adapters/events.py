"""The stored/removed feed: what a table's producer published and evicted, for engines that report
KV-cache events (vLLM's ``take_events``, read by KV-aware routers).

One file per table, ``<arena root>/<table>-events`` by default, written by the table's producer
only and read by any number of engine processes. It is a ring of ``capacity`` fixed-size records
after a 64-byte header, all integers little-endian:

header: ``WPEV`` | version u32 (1) | capacity u32 | record bytes u32 (128) | next sequence u64 | zeros to 64
record: sequence u64 | kind u8 (1 stored, 2 removed) | engine-key length u8 | 6 zero bytes |
        digest 32 bytes | engine key (up to 80 bytes, the rest zero)

Event ``s`` (numbered from 0) lives in record ``s % capacity``; the header's next sequence is the
number of events written so far. The writer takes an exclusive ``flock`` on the file for each batch
it appends, and readers a shared one while they copy, so a reader never sees half a record.

**Bounded, and the rule when a reader falls behind.** The ring holds the last ``capacity`` events and
the producer never waits for a reader. A reader that has fallen more than ``capacity`` events
behind has lost the oldest of them: its next :meth:`EventFeedReader.take` skips to the oldest event
still held and reports how many it skipped (``lost``; ``lost_total`` counts them all). The table stays
the truth: a router that missed a ``removed`` event keeps routing to a block that is gone, and the
engine's lookup there misses; it never reads wrong bytes.
"""

from __future__ import annotations

import fcntl
import os
import struct
from typing import Iterable, List, NamedTuple, Optional, Tuple

from .. import arena as _arena
from .._ints import int_in
from ..errors import WaitprepError, invalid

__all__ = ["STORED", "REMOVED", "FEED_MAGIC", "MAX_ENGINE_KEY_BYTES", "FeedEvent", "FeedBatch", "EventFeedWriter", "EventFeedReader", "default_feed_path"]

FEED_MAGIC = b"WPEV"
FEED_VERSION = 1
#: Event kinds.
STORED = 1
REMOVED = 2
#: The longest engine key a record holds (a vLLM OffloadKey of a 76-byte block hash).
MAX_ENGINE_KEY_BYTES = 80

_HEADER = struct.Struct("<4sIIIQ")
_HEADER_BYTES = 64
_RECORD = struct.Struct("<QBB6x32s80s")
_RECORD_BYTES = 128
_NEXT_AT = 16


class FeedEvent(NamedTuple):
    """One event: its sequence number, ``'stored'`` or ``'removed'``, the artifact's digest, and
    the engine's own key for it (for vLLM the OffloadKey) as the producer was given it."""

    seq: int
    kind: str
    digest: bytes
    engine_key: bytes


class FeedBatch(NamedTuple):
    """What one :meth:`EventFeedReader.take` returns: the events, oldest first, and how many this
    reader lost by falling behind since its last take."""

    events: List[FeedEvent]
    lost: int


def default_feed_path(table: str, root: str = _arena.DEFAULT_ARENA_ROOT) -> str:
    """``<root>/<table>-events``: where a table's feed is unless the adapter is told otherwise."""
    _arena.arena_directory(table, root)  # checks the table name
    return os.path.join(root, table + "-events")


def _bad(path: str, what: str) -> WaitprepError:
    return WaitprepError("ERR_BAD_SEGMENT", "%s is not a waitprep event feed: %s" % (path, what))


class EventFeedWriter:
    """The producer's end: creates (or, with ``create=False``, reopens) the feed and appends events."""

    def __init__(self, path: str, capacity: int = 4096, create: bool = True, mode: int = 0o600) -> None:
        if not int_in(capacity, 1, 1 << 24):
            raise invalid("capacity", "an integer in [1, 2^24]", capacity)
        self.path = path
        if create:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), mode)
            try:
                os.ftruncate(fd, _HEADER_BYTES + capacity * _RECORD_BYTES)
                os.pwrite(fd, _HEADER.pack(FEED_MAGIC, FEED_VERSION, capacity, _RECORD_BYTES, 0), 0)
            except BaseException:
                os.close(fd)
                raise
        else:
            fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
            capacity = _read_header(fd, path)[0]
        self._fd: Optional[int] = fd
        self.capacity = capacity

    def append(self, events: Iterable[Tuple[int, bytes, bytes]]) -> int:
        """Appends ``(kind, digest, engine_key)`` events (kind :data:`STORED` or :data:`REMOVED`) as
        one batch; returns the sequence number of the next event. Readers see all or none of it."""
        records = []
        for kind, digest, engine_key in events:
            if kind not in (STORED, REMOVED):
                raise invalid("kind", "STORED (1) or REMOVED (2)", kind)
            if not isinstance(digest, (bytes, bytearray)) or len(digest) != 32:
                raise invalid("digest", "32 bytes", digest)
            if not isinstance(engine_key, (bytes, bytearray)) or len(engine_key) > MAX_ENGINE_KEY_BYTES:
                raise invalid("engine_key", "at most %d bytes" % MAX_ENGINE_KEY_BYTES, engine_key)
            records.append((kind, bytes(digest), bytes(engine_key)))
        fd = self._fd
        if fd is None:
            raise WaitprepError("ERR_CLOSED", "append(): the event feed is closed")
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            (next_seq,) = struct.unpack("<Q", os.pread(fd, 8, _NEXT_AT))
            for kind, digest, engine_key in records:
                at = _HEADER_BYTES + (next_seq % self.capacity) * _RECORD_BYTES
                os.pwrite(fd, _RECORD.pack(next_seq, kind, len(engine_key), digest, engine_key), at)
                next_seq += 1
            os.pwrite(fd, struct.pack("<Q", next_seq), _NEXT_AT)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        return next_seq

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> "EventFeedWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_header(fd: int, path: str) -> Tuple[int, int]:
    header = os.pread(fd, _HEADER.size, 0)
    if len(header) < _HEADER.size:
        raise _bad(path, "shorter than its header")
    magic, version, capacity, record_bytes, next_seq = _HEADER.unpack(header)
    if magic != FEED_MAGIC or version != FEED_VERSION or record_bytes != _RECORD_BYTES or capacity == 0:
        raise _bad(path, "magic %r, version %d, record bytes %d, capacity %d" % (magic, version, record_bytes, capacity))
    if os.fstat(fd).st_size < _HEADER_BYTES + capacity * _RECORD_BYTES:
        raise _bad(path, "shorter than its %d records" % capacity)
    return capacity, next_seq


class EventFeedReader:
    """An engine's end: takes the events written since its last take. A new reader starts at the
    oldest event the ring still holds. One reader belongs to one consumer of events (its cursor is
    its own); :meth:`take` may be called from any thread, one at a time."""

    def __init__(self, path: str) -> None:
        self.path = path
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            try:
                self.capacity, next_seq = _read_header(fd, path)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        except BaseException:
            os.close(fd)
            raise
        self._fd: Optional[int] = fd
        self._cursor = max(0, next_seq - self.capacity)
        #: Events this reader lost by falling behind, over its life.
        self.lost_total = 0

    def take(self) -> FeedBatch:
        """The events since the last take (oldest first) and how many were lost in between."""
        fd = self._fd
        if fd is None:
            raise WaitprepError("ERR_CLOSED", "take(): the event feed reader is closed")
        fcntl.flock(fd, fcntl.LOCK_SH)
        try:
            (next_seq,) = struct.unpack("<Q", os.pread(fd, 8, _NEXT_AT))
            cursor = self._cursor
            lost = 0
            if next_seq - cursor > self.capacity:
                lost = next_seq - self.capacity - cursor
                cursor = next_seq - self.capacity
            count = next_seq - cursor
            blob = b""
            if count:
                first = cursor % self.capacity
                upto = min(count, self.capacity - first)
                blob = os.pread(fd, upto * _RECORD_BYTES, _HEADER_BYTES + first * _RECORD_BYTES)
                if upto < count:
                    blob += os.pread(fd, (count - upto) * _RECORD_BYTES, _HEADER_BYTES)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        events = []
        for i in range(count):
            seq, kind, key_length, digest, key = _RECORD.unpack_from(blob, i * _RECORD_BYTES)
            if seq != cursor + i or kind not in (STORED, REMOVED) or key_length > MAX_ENGINE_KEY_BYTES:
                raise _bad(self.path, "record %d holds sequence %d, kind %d" % (cursor + i, seq, kind))
            events.append(FeedEvent(seq, "stored" if kind == STORED else "removed", digest, key[:key_length]))
        self._cursor = next_seq
        self.lost_total += lost
        return FeedBatch(events, lost)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> "EventFeedReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
