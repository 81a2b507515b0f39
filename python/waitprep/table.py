"""The lease table from Python: both roles over libwaitprep.so, with the Node API's semantics.

A model runtime's storage worker is a table's single producer: it reserves a slot for an
artifact's digest, prepares and validates the bytes, publishes the metadata, evicts what nobody
pins and records device writes. Any client pins READY artifacts::

    import waitprep

    table = waitprep.create_table("engine0-kv", capacity=1024, role="producer")
    digest = waitprep.key_digest(fields)
    reservation = table.reserve(digest)
    ...                                       # write the bytes, validate size, geometry, checksum
    table.publish(reservation, size_bytes=4096, location=0, checksum=0, codec_id=0, representation_version=1)

    lease = table.try_pin(digest)             # a Lease, or a miss reason: 'absent', 'preparing', ...
    if isinstance(lease, waitprep.Lease):
        with lease:
            read(lease.meta.location, lease.meta.size_bytes)
    table.close()

Errors are :class:`~waitprep.WaitprepError` with the Node API's codes; a miss is a value.

Threads: one :class:`Table` may be used from any number of threads at once. The C handle locks
its private pin records (waitprep.h, "Threads"), and this side keeps no shared mutable state: each
call builds its own ctypes structures, and a lease's release is decided by the C core (its token:
a second release, from any thread, releases nothing). :meth:`Table.close` must come after every
other thread is done with the table, as ``wp_close`` requires.
"""

from __future__ import annotations

import array
import ctypes
import os
import re
import threading
from collections.abc import Iterable as _Iterable, Mapping as _Mapping, Sequence as _Sequence
from typing import TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Union, overload

from . import _abi
from ._ints import int_in, is_u32, is_u64
from ._abi import MISS_REASON, WpDeviceRecord, WpLease, WpMeta, WpOpenOptions, WpReservation, WpSummary
from .errors import WaitprepError, invalid, with_errno
from .handoff import HandoffToken, _format, checked_token, parse_handoff_token
from .inspection import ClientCounts, SlotCounts, TableInspection, TableSummary, decode_segment
from .library import load_library, status_name

if TYPE_CHECKING:
    from typing import Literal

    Role = Literal["consumer", "producer"]
    EvictResult = Literal["evicted", "pinned", "absent"]
else:
    Role = str
    EvictResult = str

__all__ = [
    "Lease",
    "LeaseRun",
    "LeaseMeta",
    "Reservation",
    "Table",
    "open_table",
    "create_table",
    "unlink_table",
    "device_uuid_bytes",
    "MISS_REASONS",
]

_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}")
_GPU_UUID = re.compile(r"GPU-([0-9a-fA-F]{8})-([0-9a-fA-F]{4})-([0-9a-fA-F]{4})-([0-9a-fA-F]{4})-([0-9a-fA-F]{12})")
_byref = ctypes.byref

#: Every miss reason a table gives: one per WP_MISS_* status (lib/coordinator/miss-reasons.ts's names), then
#: the two a table decides itself: a malformed device target, and a closed table.
MISS_REASONS = tuple(MISS_REASON.values()) + ("invalid-target", "table-closed")


class LeaseMeta(NamedTuple):
    """The metadata the producer published with the artifact (Node: ``lease.meta``)."""

    size_bytes: int
    location: int
    checksum: int
    codec_id: int
    representation_version: int


class Reservation(NamedTuple):
    """A slot reserved for a digest, to publish or abandon."""

    slot: int
    generation: int


# --- Errors from statuses ---------------------------------------------------------------------

_CODES = {
    _abi.STATUS["WP_ERR_PERMISSION"]: ("ERR_PERMISSION_DENIED", "permission denied: the table's owner or mode does not let this user do it"),
    _abi.STATUS["WP_ERR_BAD_SEGMENT"]: ("ERR_BAD_SEGMENT", "the segment is not a waitprep lease table of this ABI (wrong magic, version, size or geometry)"),
    _abi.STATUS["WP_ERR_WRITER_EXISTS"]: ("ERR_WRITER_EXISTS", "another live producer holds this table"),
    _abi.STATUS["WP_ERR_NOT_PRODUCER"]: ("ERR_NOT_PRODUCER", "only the table's producer may do this"),
    _abi.STATUS["WP_ERR_NOT_FOUND"]: ("ERR_TABLE_NOT_FOUND", "no such table"),
    _abi.STATUS["WP_ERR_EXISTS"]: ("ERR_TABLE_EXISTS", "a table of that name already exists"),
    _abi.STATUS["WP_ERR_NO_CLIENT_SLOT"]: ("ERR_NO_CLIENT_SLOT", "all 64 client entries are taken by live clients"),
    _abi.STATUS["WP_ERR_NO_SPACE"]: ("ERR_NO_SPACE", "/dev/shm cannot hold the table (docs/operations.md: sizing /dev/shm)"),
    _abi.STATUS["WP_ERR_UNTRUSTED_SEGMENT"]: ("ERR_UNTRUSTED_SEGMENT", "refusing an untrusted table file"),
    _abi.STATUS["WP_FULL"]: ("ERR_TABLE_FULL", "every slot of the key's two buckets is taken; evict first"),
    _abi.STATUS["WP_EXISTS"]: ("ERR_KEY_EXISTS", "the key is already reserved or published"),
    _abi.STATUS["WP_STALE"]: ("ERR_STALE_RESERVATION", "the reservation was already published or abandoned"),
    _abi.STATUS["WP_ERR_INVALID_ARGUMENT"]: ("ERR_INVALID_ARGUMENT", "invalid argument"),
}


def status_error(lib: ctypes.CDLL, status: int, what: str, detail: Optional[str] = None) -> WaitprepError:
    """The error a caller sees for a failed call's status (the Node API's code for it)."""
    errno_value = ctypes.get_errno() if status in (_abi.WP_ERR_SYSTEM, _abi.WP_ERR_PERMISSION) else 0
    code, text = _CODES.get(status, ("ERR_SYSTEM", "failed with status %d" % status))
    name = status_name(lib, status)
    message = "%s: %s (%s)" % (what, detail or text, name)
    return WaitprepError(code, with_errno(message, errno_value), status=status, status_name=name, errno=errno_value)


def _closed(what: str) -> WaitprepError:
    return WaitprepError("ERR_CLOSED", "%s: the table handle is closed" % what)


# --- Argument checks ----------------------------------------------------------------------------


def _digest(value: object) -> bytes:
    if isinstance(value, (bytearray, memoryview)):
        value = bytes(value)
    if not isinstance(value, bytes) or len(value) != 32:
        raise invalid("digest", "32 bytes (waitprep.key_digest(fields), or a key's SHA-256)", value, "ERR_INVALID_KEY")
    return value


_DIGESTS_EXPECTED = "32-byte digests back to back (one bytes-like object), or a sequence of 32-byte digests"


def _packed_digests(value: object) -> bytes:
    """Digests as one bytes object of 32-byte digests back to back, from packed bytes (used as they
    are) or a sequence of 32-byte digests, read once in order (joined in one pass; each length
    checked in another). A mapping or a set is not a run of chunks (and has no order to pin in):
    ERR_INVALID_ARGUMENT; an element that is not 32 bytes: ERR_INVALID_KEY naming it."""
    if type(value) is bytes:
        packed = value
    elif isinstance(value, (bytearray, memoryview)):
        packed = bytes(value)
    else:
        if type(value) is not list and type(value) is not tuple and (not isinstance(value, _Sequence) or isinstance(value, str)):
            raise invalid("digests", "a sequence (list, tuple) of 32-byte digests, or one bytes object of them back to back", value)
        try:
            packed = b"".join(value)  # type: ignore[arg-type]
            # Every element 32 long, and 32 bytes each in all: every element is 32 bytes.
            ok = list(map(len, value)).count(32) == len(value)  # type: ignore[arg-type]
        except TypeError:
            ok = False
        if not ok or len(packed) != 32 * len(value):  # type: ignore[arg-type]
            raise _bad_digests(value)
    if len(packed) % 32:
        raise invalid("digests", _DIGESTS_EXPECTED + " (a length that is a multiple of 32)", value)
    return packed


#: wp_peek_many's status bytes as peek's answers: 'ready' or the miss reason (None: not a peek's).
_PEEK_ANSWERS: List[Optional[str]] = ["ready"] + [MISS_REASON.get(status) for status in range(1, 256)]


def _u64(field: str, value: object) -> int:
    if not is_u64(value):
        raise invalid(field, "an integer in [0, 2^64-1]", value)
    return value  # type: ignore[return-value]


def _u32(field: str, value: object) -> int:
    if not is_u32(value):
        raise invalid(field, "an integer in [0, 2^32-1]", value)
    return value


def _name(name: object) -> bytes:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise invalid("name", "1-200 characters of A-Z a-z 0-9 . _ -, not starting with a dot", name)
    return name.encode("ascii")


def device_uuid_bytes(device: str) -> bytes:
    """'GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx' (as nvidia-smi prints it) -> its 16 bytes, in order."""
    match = _GPU_UUID.fullmatch(device) if isinstance(device, str) else None
    if match is None:
        raise invalid("device", "a GPU UUID 'GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx'", device)
    return bytes.fromhex("".join(match.groups()))


def _target(device: object, arena: object, arena_generation: object) -> Optional[WpDeviceRecord]:
    """A pin's device target, or None when it is malformed (the miss 'invalid-target', as in Node)."""
    match = _GPU_UUID.fullmatch(device) if isinstance(device, str) else None
    if match is None:
        return None
    for value in (arena, arena_generation):
        if not is_u64(value):
            return None
    record = WpDeviceRecord()
    ctypes.memmove(record.device_uuid, bytes.fromhex("".join(match.groups())), 16)
    record.arena = arena
    record.arena_generation = arena_generation
    return record


def _reservation(value: object) -> WpReservation:
    slot: object
    generation: object
    # A pair in order: a set or a mapping of two numbers would unpack in an order of its own.
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise invalid("reservation", "the Reservation (slot, generation) that reserve() returned", value)
    slot, generation = value
    slot_ok = is_u32(slot)
    generation_ok = is_u64(generation)
    if not (slot_ok and generation_ok):
        raise invalid("reservation", "a Reservation from reserve() (slot a u32, generation a u64)", value)
    return WpReservation(slot, generation)


def _bad_digests(digests: object) -> WaitprepError:
    """The error for a sequence of digests that did not pack: ERR_INVALID_KEY naming the first
    element that is not 32 bytes (as try_pin names a bad digest), else ERR_INVALID_ARGUMENT."""
    for i, digest in enumerate(digests):  # type: ignore[call-overload]
        if not isinstance(digest, (bytes, bytearray, memoryview)) or len(digest) != 32:
            return invalid("digests[%d]" % i, "32 bytes (a chunk's digest)", digest, "ERR_INVALID_KEY")
    return invalid("digests", "a sequence of 32-byte digests, or one bytes object of them back to back", digests)


# --- Leases -------------------------------------------------------------------------------------


class Lease:
    """A pin on a READY artifact, held until :meth:`close` (or the end of a ``with`` block).

    While it is held the producer cannot evict the artifact, and its bytes stay where ``meta``
    says. Closing releases the pin exactly once, from any thread; closing a lease of a table that
    was closed (which released every pin) releases nothing.
    """

    __slots__ = ("_raw", "_table", "digest", "readiness")

    def __init__(self, table: "Table", raw: WpLease, digest: bytes, readiness: str) -> None:
        self._raw = raw
        self._table: Optional[Table] = table
        #: The artifact's 32-byte digest.
        self.digest = digest
        #: 'host', or 'device' for a pin that asked for a device target.
        self.readiness = readiness

    @property
    def slot(self) -> int:
        """The table slot the artifact is in."""
        return self._raw.slot

    @property
    def generation(self) -> int:
        """The slot's generation when pinned (never reused: the pin cannot bind to a recycled slot)."""
        return self._raw.generation

    @property
    def meta(self) -> LeaseMeta:
        """What the producer published: size, location, checksum, codec id, representation version."""
        m = self._raw.meta
        return LeaseMeta(m.size_bytes, m.location, m.checksum, m.codec_id, m.representation_version)

    @property
    def closed(self) -> bool:
        return self._table is None

    def close(self) -> bool:
        """Releases the pin. True when this call released it; False when it released nothing (a
        second call, a table closed since, or a copy of a lease released already)."""
        table, self._table = self._table, None
        if table is None:
            return False
        handle = table._handle
        if handle is None:
            return False
        return table._wp_unpin(handle, _byref(self._raw)) == 0

    unpin = close

    def handoff_token(self) -> str:
        """A short string naming this lease's artifact (table, slot, slot generation, digest) for
        another process, which pins it for itself with :meth:`Table.try_pin_exact` (Node:
        ``tryPinExact``). Keep this lease until that process says it holds its own pin, then close
        it. ``ERR_CLOSED`` once closed: a token is handed over only while its lease is held."""
        table = self._table
        if table is None:
            raise WaitprepError(
                "ERR_CLOSED",
                'handoff_token(): the lease is closed; a token is handed over only while its lease is held (docs/lease-table.md, "Handing a lease to another process")',
            )
        return _format(HandoffToken(table.name, self._raw.slot, self._raw.generation, self.digest))

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return "<Lease slot=%d generation=%d %s %s>" % (self.slot, self.generation, self.readiness, "closed" if self.closed else "held")


class LeaseRun(Sequence[Lease]):
    """The leases :meth:`Table.try_pin_prefix` pinned, in chunk order: the leading READY run.

    ``len(run)`` is how many leading chunks are pinned. The pins are held in one ctypes array and a
    :class:`Lease` is made for a chunk only when it is read (``run[i]``, iteration), so that a
    prefix lookup costs one crossing, not one Python object per chunk. :meth:`release` gives back
    chunks by position (an engine that completes blocks in any order), :meth:`close` (or the end of
    a ``with`` block) every pin still held, each in one call (``wp_unpin_indexed``,
    ``wp_unpin_many``); a pin released before, by either or by a lease read from the run and closed
    by itself, is skipped (its pin record says it was released).
    """

    __slots__ = ("_table", "_raw", "_digests", "_n", "_readiness", "_leases")

    def __init__(self, table: "Table", raw: "ctypes.Array[WpLease]", digests: bytes, n: int, readiness: str) -> None:
        self._table: Optional[Table] = table
        self._raw = raw
        self._digests = digests
        self._n = n
        self._readiness = readiness
        self._leases: Optional[Dict[int, Lease]] = None  # the chunks read as Leases, made on first read

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> Lease: ...

    @overload
    def __getitem__(self, index: slice) -> List[Lease]: ...

    def __getitem__(self, index: Union[int, slice]) -> Union[Lease, List[Lease]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._n))]
        if index < 0:
            index += self._n
        if not 0 <= index < self._n:
            raise IndexError("LeaseRun index %d out of range (%d pinned)" % (index, self._n))
        leases = self._leases
        if leases is None:
            leases = self._leases = {}
        lease = leases.get(index)
        if lease is None:
            lease = Lease(self._table, self._raw[index], self._digests[32 * index : 32 * index + 32], self._readiness)  # type: ignore[arg-type]
            leases[index] = lease
        return lease

    def __iter__(self) -> Iterator[Lease]:
        return (self[i] for i in range(self._n))

    @property
    def closed(self) -> bool:
        return self._table is None

    def close(self) -> int:
        """Releases every pin of the run still held, in one call. Returns how many it released
        (0 the second time, or on a table closed since: closing it released every pin)."""
        table, self._table = self._table, None
        for lease in (self._leases or {}).values():
            lease._table = None
        if table is None or self._n == 0:
            return 0
        handle = table._handle
        if handle is None:
            return 0
        released = table._lib.wp_unpin_many(handle, self._raw, self._n)
        if released < 0:
            raise status_error(table._lib, -released, "LeaseRun.close()")
        return released

    def release(self, indexes: Union[Sequence[int], "array.array[int]", memoryview]) -> int:
        """Releases the pins of the chunks at ``indexes`` (positions in the run, any order), in one
        call, and returns how many it released: a position released before (or repeated) releases
        nothing, and :meth:`close` later releases only the rest. ``indexes``: a sequence of ints, or
        a buffer of native u32 (``array('I')``, a numpy ``uint32`` array). An index outside
        ``[0, len(run))`` is ``ERR_INVALID_ARGUMENT``, and then nothing is released. 0 once the run
        or its table is closed (closing released every pin)."""
        table = self._table
        try:
            view = memoryview(indexes)  # type: ignore[arg-type]
        except TypeError:
            view = None
        at: Optional["ctypes.Array[ctypes.c_uint32]"] = None
        if view is not None:
            # A buffer must hold native u32s: bytes of another width are not read as positions.
            if view.format in ("I", "=I", "<I") and view.itemsize == 4 and view.ndim == 1 and view.c_contiguous:
                at = (ctypes.c_uint32 * view.shape[0]).from_buffer_copy(view)  # type: ignore[index]
        else:
            try:
                packed = array.array("I", indexes)  # type: ignore[arg-type]
                at = (ctypes.c_uint32 * len(packed)).from_buffer(packed)
            except (TypeError, OverflowError, ValueError):
                pass
        if at is None:
            raise invalid("indexes", "positions in the run: a sequence of ints in [0, %d), or a 1-dimensional buffer of native u32" % self._n, indexes)
        if table is None:
            return 0
        handle = table._handle
        if handle is None:
            return 0
        released = table._lib.wp_unpin_indexed(handle, self._raw, self._n, at, len(at))
        if released < 0:
            raise invalid("indexes", "positions in the run, each in [0, %d)" % self._n, indexes)
        if self._leases:
            for index in at:
                lease = self._leases.get(index)
                if lease is not None:
                    lease._table = None
        return released

    def __enter__(self) -> "LeaseRun":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return "<LeaseRun %d pinned %s>" % (self._n, "closed" if self.closed else "held")


# --- Tables -------------------------------------------------------------------------------------


class Table:
    """One client's handle on a lease table: :func:`open_table` or :func:`create_table`.

    Safe to share between threads (see the module's docstring); close it last.
    """

    def __init__(self, lib: ctypes.CDLL, handle: ctypes.c_void_p, name: str, role: Role) -> None:
        self._lib = lib
        self._handle: Optional[ctypes.c_void_p] = handle
        self._close_lock = threading.Lock()  # so two closes never both pass the live handle to wp_close
        #: The table's name (``/dev/shm/<name>``).
        self.name = name
        #: 'producer' or 'consumer'.
        self.role: Role = role
        #: Number of slots.
        self.capacity: int = lib.wp_capacity(handle)
        #: This client's index in the table's registry (0-63).
        self.client_index: int = lib.wp_client_index(handle)
        # Looked up once: the pin and unpin paths make one ctypes call each and nothing more.
        self._wp_try_pin = lib.wp_try_pin
        self._wp_unpin = lib.wp_unpin

    @property
    def library(self) -> ctypes.CDLL:
        """The loaded libwaitprep.so."""
        return self._lib

    @property
    def closed(self) -> bool:
        return self._handle is None

    def _h(self, what: str) -> ctypes.c_void_p:
        handle = self._handle
        if handle is None:
            raise _closed(what)
        return handle

    def close(self) -> None:
        """Releases every pin this client holds, gives up the producer role, unregisters. Idempotent,
        also when two threads close at once (only one closes the C handle). No other thread may be
        inside, or enter, a pin, unpin or other call on this table once it starts."""
        with self._close_lock:
            handle, self._handle = self._handle, None
        if handle is not None:
            self._lib.wp_close(handle)

    def __enter__(self) -> "Table":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return "<Table %r %s %s>" % (self.name, self.role, "closed" if self.closed else "open")

    # Consumer side (any client).

    def try_pin(self, digest: bytes, device: Optional[str] = None, arena: int = 0, arena_generation: int = 0) -> Union[Lease, str]:
        """Nonblocking lookup and atomic pin of a READY artifact: a :class:`Lease`, or the miss
        reason as a str ('absent', 'preparing', 'evicting', 'contended'; for a device pin also
        'no-device-record', 'device-mismatch', 'arena-generation-mismatch',
        'device-write-incomplete'; 'invalid-target' for a malformed target, 'table-closed').

        With ``device`` (a 'GPU-…' UUID), hits only when the slot carries a completed device-write
        record for exactly that device, ``arena`` and ``arena_generation``.
        """
        if type(digest) is not bytes or len(digest) != 32:
            digest = _digest(digest)
        handle = self._handle
        if handle is None:
            return "table-closed"
        target = None
        if device is not None:
            record = _target(device, arena, arena_generation)
            if record is None:
                return "invalid-target"
            target = _byref(record)
        out = WpLease()
        return self._pinned(self._wp_try_pin(handle, digest, target, _byref(out)), out, digest, device, "try_pin")

    def _pinned(self, status: int, out: WpLease, digest: bytes, device: Optional[str], what: str, token: object = None) -> Union[Lease, str]:
        """A pin call's answer: its Lease, its miss reason, or (any other status) the error, named
        ``what(token)``, or ``what(digest hex)`` when no token is given."""
        if status == 0:
            return Lease(self, out, digest, "host" if device is None else "device")
        reason = MISS_REASON.get(status)
        if reason is not None:
            return reason
        raise status_error(self._lib, status, "%s(%s)" % (what, digest.hex() if token is None else str(token)))

    def unpin(self, lease: Lease) -> bool:
        """``lease.close()``: True when this call released it."""
        if not isinstance(lease, Lease):
            raise invalid("lease", "a Lease from try_pin()", lease)
        return lease.close()

    def try_pin_exact(
        self,
        token: Union[str, HandoffToken],
        device: Optional[str] = None,
        arena: int = 0,
        arena_generation: int = 0,
    ) -> Union[Lease, str]:
        """Pins, for this client, the artifact another client's lease names in ``token`` (from
        ``lease.handoff_token()`` or Node's ``lease.handoffToken()``, a str or a parsed
        :class:`~waitprep.HandoffToken`): a hit only while that slot still holds that generation
        of that digest in READY, and ``device`` as for :meth:`try_pin`.

        A token of a lease since evicted, or of a slot since reused, is the miss 'stale-handoff';
        'evicting', 'preparing', 'contended' and the device misses as for try_pin; 'table-closed'.
        A malformed token, one naming another table, or a slot beyond this table's capacity is
        ``ERR_INVALID_ARGUMENT``. The handing client keeps its lease until this one has its own.
        """
        # A hand-built token is checked as parsing checks a string (its slot and generation go to C).
        parsed = checked_token(token) if isinstance(token, HandoffToken) else parse_handoff_token(token)
        if parsed.table != self.name:
            raise invalid("token", "a handoff token of table %r" % self.name, token)
        if parsed.slot >= self.capacity:
            raise invalid("token", "a handoff token whose slot is below the table's capacity %d" % self.capacity, token)
        digest = parsed.digest
        handle = self._handle
        if handle is None:
            return "table-closed"
        target = None
        if device is not None:
            record = _target(device, arena, arena_generation)
            if record is None:
                return "invalid-target"
            target = _byref(record)
        out = WpLease()
        status = self._lib.wp_try_pin_exact(handle, parsed.slot, parsed.generation, digest, target, _byref(out))
        return self._pinned(status, out, digest, device, "try_pin_exact", token)

    def try_pin_prefix(
        self,
        digests: Union[bytes, Sequence[bytes]],
        device: Optional[str] = None,
        arena: int = 0,
        arena_generation: int = 0,
    ) -> LeaseRun:
        """Pins the longest READY leading run of a chunked request's chunks in one call
        (``wp_try_pin_prefix``): chunks ``[0, len(run))`` are pinned, the rest not (:meth:`peek`
        says why the run stopped). ``digests``: a sequence of 32-byte digests, or one bytes object
        of digests back to back. Release with ``run.close()``, :meth:`unpin_many`, or each lease.

        ``ERR_INVALID_KEY`` naming ``digests[i]`` for an element that is not 32 bytes (as
        :meth:`try_pin` for a bad digest); ``ERR_INVALID_ARGUMENT`` for anything but a sequence or
        bytes (a mapping, a set, an iterator), packed bytes that are not whole digests, or a
        malformed device target (there is no miss to carry it); ``ERR_CLOSED`` on a closed table.
        """
        packed = _packed_digests(digests)
        n = len(packed) // 32
        target = None
        if device is not None:
            record = _target(device, arena, arena_generation)
            if record is None:
                raise invalid("device", "a device target: a GPU UUID 'GPU-…' and arena, arena_generation in [0, 2^64-1]", (device, arena, arena_generation))
            target = _byref(record)
        handle = self._h("try_pin_prefix")
        leases = (WpLease * n)()
        run = self._lib.wp_try_pin_prefix(handle, packed, n, target, leases)
        if run < 0:
            raise status_error(self._lib, -run, "try_pin_prefix(%d digests)" % n)
        return LeaseRun(self, leases, packed, run, "host" if device is None else "device")

    def unpin_many(self, leases: Iterable[Lease]) -> int:
        """Closes many of this table's leases in one call (``wp_unpin_many``) and returns how many
        pins that released. Leases already closed are skipped. Every element must be a Lease of
        this table (or closed): one of another table, or anything but an iterable of leases (None,
        a mapping), is ``ERR_INVALID_ARGUMENT`` before any is closed. A :class:`LeaseRun` is closed
        as ``run.close()`` closes it."""
        if isinstance(leases, LeaseRun):
            if leases._table not in (None, self):
                raise invalid("leases", "leases of table %r" % self.name, leases)
            return leases.close()
        if type(leases) is not list and (isinstance(leases, (str, bytes, bytearray, memoryview, _Mapping)) or not isinstance(leases, _Iterable)):
            raise invalid("leases", "a LeaseRun, or an iterable (a list, tuple or set) of leases of table %r" % self.name, leases)
        items = list(leases)
        for lease in items:
            if not isinstance(lease, Lease) or lease._table not in (None, self):
                raise invalid("leases", "an iterable of leases of table %r" % self.name, lease)
        held = [lease for lease in items if lease._table is self]
        raw = (WpLease * len(held))()
        for i, lease in enumerate(held):
            raw[i] = lease._raw
            lease._table = None
        handle = self._handle
        if handle is None or not held:
            return 0
        released = self._lib.wp_unpin_many(handle, raw, len(held))
        if released < 0:
            raise status_error(self._lib, -released, "unpin_many(%d leases)" % len(held))
        return released

    def peek(self, digest: bytes) -> str:
        """What a host :meth:`try_pin` of ``digest`` would answer now, without pinning: 'ready', or
        the miss ('absent', 'preparing', 'evicting'; 'table-closed'). A hint for engines whose
        lookup must not pin: the artifact may be evicted the moment after."""
        if type(digest) is not bytes or len(digest) != 32:
            digest = _digest(digest)
        handle = self._handle
        if handle is None:
            return "table-closed"
        status = self._lib.wp_peek(handle, digest)
        if status == 0:
            return "ready"
        reason = MISS_REASON.get(status)
        if reason is not None:
            return reason
        raise status_error(self._lib, status, "peek(%s)" % digest.hex())

    def peek_many(self, digests: Union[bytes, Sequence[bytes]]) -> List[str]:
        """:meth:`peek` for many digests in one call (``wp_peek_many``): one answer per digest, in
        order ('ready', 'absent', 'preparing', 'evicting'; 'table-closed' for each on a closed
        table). ``digests``: packed bytes of 32-byte digests back to back, or a sequence of them.
        Each answer is a hint, and the batch is not one snapshot. Pins nothing."""
        packed = _packed_digests(digests)
        n = len(packed) >> 5
        handle = self._handle
        if handle is None:
            return ["table-closed"] * n
        statuses = ctypes.create_string_buffer(n)
        leading = self._lib.wp_peek_many(handle, packed, n, statuses)
        if leading < 0:
            raise status_error(self._lib, -leading, "peek_many(%d digests)" % n)
        answers = _PEEK_ANSWERS
        out = [answers[status] for status in statuses.raw]
        if None in out:
            raise status_error(self._lib, statuses.raw[out.index(None)], "peek_many(%d digests)" % n)
        return out  # type: ignore[return-value]

    def peek_prefix(self, digests: Union[bytes, Sequence[bytes]]) -> int:
        """How many leading digests :meth:`peek` finds 'ready' now, in one call that stops at the
        first that is not (an engine's count of leading hits: SGLang's ``batch_exists``, LMCache's
        ``batched_contains``). 0 on a closed table. A hint, as peek is; pins nothing."""
        packed = _packed_digests(digests)
        handle = self._handle
        if handle is None:
            return 0
        leading = self._lib.wp_peek_many(handle, packed, len(packed) >> 5, None)
        if leading < 0:
            raise status_error(self._lib, -leading, "peek_prefix(%d digests)" % (len(packed) >> 5))
        return leading

    def client_pins(self, slot: int) -> int:
        """Pins this client holds on ``slot``. A snapshot for tests and inspection: while other
        threads of this Table pin or unpin the slot, it may mix two moments (waitprep.h)."""
        return self._lib.wp_client_pins(self._h("client_pins"), _u32("slot", slot))

    def slot_state(self, slot: int) -> "tuple[str, int]":
        """The slot's (state, generation) as the segment holds them now, for tools and tests;
        state is 'free', 'reserved', 'ready' or 'evicting'."""
        word = self._lib.wp_slot_state_gen(self._h("slot_state"), _u32("slot", slot))
        return _abi.SLOT_STATES[word & 0x3], word >> 8

    def pin_holders(self, slot: int) -> "list[int]":
        """Client indexes whose pin bit is set on ``slot`` now, for tools and tests."""
        mask = self._lib.wp_slot_pin_mask(self._h("pin_holders"), _u32("slot", slot))
        return [i for i in range(_abi.WP_MAX_CLIENTS) if mask >> i & 1]

    def pin_loop(self, digest: bytes, iterations: int) -> int:
        """Pins and unpins ``digest`` ``iterations`` times inside C (wp_pin_loop, the GIL released
        throughout): the floor a ctypes pin is measured against. Returns how many pins hit."""
        return self._lib.wp_pin_loop(self._h("pin_loop"), _digest(digest), _u64("iterations", iterations))

    # Producer side.

    def reserve(self, digest: bytes) -> Reservation:
        """Reserves a slot for ``digest`` before the artifact is prepared. ``ERR_KEY_EXISTS`` when
        it is reserved or published already, ``ERR_TABLE_FULL`` when both its buckets are full."""
        digest = _digest(digest)
        out = WpReservation()
        status = self._lib.wp_reserve(self._h("reserve"), digest, _byref(out))
        if status != 0:
            raise status_error(self._lib, status, "reserve(%s)" % digest.hex())
        return Reservation(out.slot, out.generation)

    def publish(self, reservation: Reservation, size_bytes: int, location: int, checksum: int, codec_id: int, representation_version: int) -> None:
        """Makes a reserved artifact READY with its metadata. Validate the bytes and geometry first:
        every consumer takes a published artifact as ready."""
        r = _reservation(reservation)
        meta = WpMeta(
            _u64("size_bytes", size_bytes),
            _u64("location", location),
            _u64("checksum", checksum),
            _u32("codec_id", codec_id),
            _u32("representation_version", representation_version),
        )
        status = self._lib.wp_publish(self._h("publish"), _byref(r), _byref(meta))
        if status != 0:
            raise status_error(self._lib, status, "publish(slot %d, generation %d)" % (r.slot, r.generation))

    def abandon(self, reservation: Reservation) -> None:
        """Gives a reserved slot back (preparation failed or was stopped)."""
        r = _reservation(reservation)
        status = self._lib.wp_abandon(self._h("abandon"), _byref(r))
        if status != 0:
            raise status_error(self._lib, status, "abandon(slot %d, generation %d)" % (r.slot, r.generation))

    def try_evict(self, digest: bytes) -> EvictResult:
        """'evicted', 'pinned' (pinned, or a pin racing in: retry later) or 'absent'. Never evicts a
        pinned artifact: free the bytes only after 'evicted'."""
        digest = _digest(digest)
        status = self._lib.wp_try_evict(self._h("try_evict"), digest)
        if status == 0:
            return "evicted"
        if status == _abi.WP_PINNED:
            return "pinned"
        if status == _abi.WP_ABSENT:
            return "absent"
        raise status_error(self._lib, status, "try_evict(%s)" % digest.hex())

    def record_device_write(self, digest: bytes, device: str, arena: int, arena_generation: int, write_seq: int) -> str:
        """Records a completed device write for a READY artifact: 'recorded' or 'absent'. A newer
        record replaces an older one. ``device`` is the GPU UUID 'GPU-…' as nvidia-smi prints it."""
        digest = _digest(digest)
        uuid = device_uuid_bytes(device)
        if uuid == bytes(16):
            raise invalid("device", "a GPU UUID other than all zeros (reserved for 'no record')", device)
        record = WpDeviceRecord()
        ctypes.memmove(record.device_uuid, uuid, 16)
        record.arena = _u64("arena", arena)
        record.arena_generation = _u64("arena_generation", arena_generation)
        record.write_seq = _u64("write_seq", write_seq)
        status = self._lib.wp_record_device_write(self._h("record_device_write"), digest, _byref(record))
        if status == 0:
            return "recorded"
        if status == _abi.WP_ABSENT:
            return "absent"
        raise status_error(self._lib, status, "record_device_write(%s)" % digest.hex())

    # Operations (any client).

    def reap_dead_clients(self) -> int:
        """Releases the pins and entries of clients whose process died (pid plus start time: a
        reused pid is not life); a dead producer's role is freed too. Returns how many were reaped."""
        reaped = self._lib.wp_reap_dead_clients(self._h("reap_dead_clients"))
        if reaped < 0:
            raise status_error(self._lib, -reaped, "reap_dead_clients()")
        return reaped

    reap = reap_dead_clients

    def summary(self) -> TableSummary:
        """Counts for monitoring (wp_summarize): slots by state, pinned slots, clients by state, the
        producer, reaped clients. Read in place, one pass, no copy of the segment."""
        out = WpSummary()
        status = self._lib.wp_summarize(self._h("summary"), _byref(out))
        if status == _abi.WP_ERR_BAD_SEGMENT:
            raise self._truncated("summary") or status_error(
                self._lib, status, "summary()", "the segment's header is corrupt: its capacity changed since open, or its producer word names no client"
            )
        if status != 0:
            raise status_error(self._lib, status, "summary()")
        return TableSummary(
            capacity=self.capacity,
            slots=SlotCounts(*out.slots),
            pinned_slots=out.pinned_slots,
            clients=ClientCounts(out.clients[1], out.clients[2], out.clients[3]),
            producer=None if out.producer_client < 0 else out.producer_client,
            reaped_clients=out.reaped_clients,
        )

    def inspect(self) -> TableInspection:
        """Slots, states, pin holders and registered clients, for operators: a decoded copy of the
        segment (lib/lease-table/inspect.ts's fields, snake_case)."""
        handle = self._h("inspect")
        truncated = self._truncated("inspect")
        if truncated is not None:
            raise truncated
        size = ctypes.c_size_t()
        base = self._lib.wp_segment(handle, _byref(size))
        if not base:
            raise _closed("inspect")
        return decode_segment(ctypes.string_at(base, size.value), self.capacity)

    def _truncated(self, what: str) -> Optional[WaitprepError]:
        """ERR_BAD_SEGMENT when the file was truncated under this handle (nothing past its end is read)."""
        file_size = ctypes.c_uint64()
        status = self._lib.wp_check_segment(self._h(what), _byref(file_size))
        if status != _abi.WP_ERR_BAD_SEGMENT:
            return None
        return WaitprepError(
            "ERR_BAD_SEGMENT",
            "%s: the segment's file is now %d bytes, shorter than the %d bytes of capacity %d mapped at open: someone truncated "
            "/dev/shm/%s. Nothing past its end was read; every client still attached crashes (SIGBUS) on its next pin. Never "
            "truncate a live table (docs/lease-table.md#limits)" % (what, file_size.value, _abi.segment_size(self.capacity), self.capacity, self.name),
            status=status,
            status_name="WP_ERR_BAD_SEGMENT",
        )


# --- Opening ------------------------------------------------------------------------------------


def _library(library: Union[None, str, "os.PathLike[str]", ctypes.CDLL]) -> ctypes.CDLL:
    if isinstance(library, ctypes.CDLL):
        return library
    if library is not None and not isinstance(library, (str, os.PathLike)):
        raise invalid("library", "a path to libwaitprep.so, a loaded one (ctypes.CDLL), or None", library)
    return load_library(library)  # type: ignore[arg-type]


def _trust(trust_uid: Optional[int], group_writable: bool, world_writable: bool) -> "tuple[int, int]":
    for field, value in (("trust_group_writable", group_writable), ("trust_world_writable", world_writable)):
        if type(value) is not bool:
            raise invalid(field, "a bool", value)
    flags = (_abi.WP_OPEN_TRUST_GROUP_WRITE if group_writable else 0) | (_abi.WP_OPEN_TRUST_WORLD_WRITE if world_writable else 0)
    if trust_uid is None:
        return flags, 0
    return flags | _abi.WP_OPEN_TRUST_UID, _u32("trust_uid", trust_uid)


def _untrusted(lib: ctypes.CDLL, name: str, what: str, flags: int, uid: int) -> WaitprepError:
    """ERR_UNTRUSTED_SEGMENT naming the owner and mode found, against what this open trusted."""
    owner, mode = ctypes.c_uint32(), ctypes.c_uint32()
    if lib.wp_segment_owner(name.encode("ascii"), _byref(owner), _byref(mode)) == 0:
        kind = mode.value & 0o170000
        found = "/dev/shm/%s is owned by uid %d with mode 0o%03o%s" % (name, owner.value, mode.value & 0o7777, "" if kind == 0o100000 else ", and is not a regular file")
        if kind == 0o120000:
            found = "/dev/shm/%s is a symbolic link (owned by uid %d)" % (name, owner.value)
    else:
        found = "/dev/shm/%s could not be examined" % name
    owners = ["uid %d (this process)" % os.geteuid()] + (["uid %d (trust_uid)" % uid] if flags & _abi.WP_OPEN_TRUST_UID else [])
    writers = ["the owner"] + (["the group"] if flags & _abi.WP_OPEN_TRUST_GROUP_WRITE else []) + (["others"] if flags & _abi.WP_OPEN_TRUST_WORLD_WRITE else [])
    detail = (
        "refusing an untrusted table file: %s; this open trusts a regular file (not a link) owned by %s that only %s may write. "
        "Whoever may write it can rewrite what consumers pin or crash them; if this sharing is intended, pass trust_uid, "
        "trust_group_writable or trust_world_writable (docs/lease-table.md#limits)" % (found, " or ".join(owners), ", ".join(writers))
    )
    return status_error(lib, _abi.WP_ERR_UNTRUSTED_SEGMENT, what, detail)


def _other_abi(name: str) -> Optional[str]:
    """For ERR_BAD_SEGMENT at open: the ABI version that made the segment, when it is another one."""
    try:
        with open("/dev/shm/" + name, "rb") as f:
            header = f.read(12)
    except OSError:
        return None
    if len(header) < 12 or int.from_bytes(header[:8], "little") != _abi.WP_MAGIC:
        return None
    abi = int.from_bytes(header[8:12], "little")
    if abi == _abi.ABI_VERSION:
        return None
    return (
        "the segment was made by ABI version %d and this package is ABI version %d: never share a segment across ABI versions "
        '(docs/operations.md, "Upgrading across ABI versions")' % (abi, _abi.ABI_VERSION)
    )


def _open(name: str, role: Role, capacity: int, mode: int, library: Any, trust_uid: Optional[int], trust_group_writable: bool, trust_world_writable: bool) -> Table:
    raw_name = _name(name)
    if role not in ("consumer", "producer"):
        raise invalid("role", "'consumer' or 'producer'", role)
    flags, uid = _trust(trust_uid, trust_group_writable, trust_world_writable)
    lib = _library(library)
    what = "%s(%r)" % ("create_table" if capacity else "open_table", name)
    options = WpOpenOptions(capacity, mode, flags, uid)
    handle = ctypes.c_void_p()
    status = lib.wp_open_ex(raw_name, 1 if role == "producer" else 0, _byref(options), _byref(handle))
    if status != 0:
        if status == _abi.WP_ERR_UNTRUSTED_SEGMENT:
            raise _untrusted(lib, name, what, flags, uid)
        if status == _abi.WP_ERR_NO_SPACE:
            raise status_error(lib, status, what, "/dev/shm cannot hold a table of capacity %d (%d bytes; docs/operations.md: sizing /dev/shm)" % (capacity, _abi.segment_size(capacity)))
        raise status_error(lib, status, what, _other_abi(name) if status == _abi.WP_ERR_BAD_SEGMENT else None)
    return Table(lib, handle, name, role)


def open_table(
    name: str,
    role: Role = "consumer",
    *,
    library: Union[None, str, "os.PathLike[str]", ctypes.CDLL] = None,
    trust_uid: Optional[int] = None,
    trust_group_writable: bool = False,
    trust_world_writable: bool = False,
) -> Table:
    """Opens an existing table and registers this process as one of its clients.

    ``role='producer'`` claims the single producer role (``ERR_WRITER_EXISTS`` while a live one
    holds it). ``library``: a path to libwaitprep.so or a loaded one (default: see
    :func:`~waitprep.load_library`). An open trusts only a regular file owned by this process's
    effective uid that neither group nor others may write (else ``ERR_UNTRUSTED_SEGMENT``, naming
    what it found); ``trust_uid`` accepts a second owner, ``trust_group_writable`` /
    ``trust_world_writable`` accept those write bits. Errors: ``ERR_INVALID_ARGUMENT``,
    ``ERR_TABLE_NOT_FOUND``, ``ERR_BAD_SEGMENT``, ``ERR_WRITER_EXISTS``, ``ERR_NO_CLIENT_SLOT``,
    ``ERR_PERMISSION_DENIED``, ``ERR_UNTRUSTED_SEGMENT``, ``ERR_NATIVE_UNAVAILABLE``.
    """
    return _open(name, role, 0, 0, library, trust_uid, trust_group_writable, trust_world_writable)


def create_table(
    name: str,
    capacity: int,
    role: Role = "producer",
    *,
    mode: int = 0o600,
    library: Union[None, str, "os.PathLike[str]", ctypes.CDLL] = None,
    trust_uid: Optional[int] = None,
    trust_group_writable: bool = False,
    trust_world_writable: bool = False,
) -> Table:
    """Creates a table of ``capacity`` slots (it must not exist: ``ERR_TABLE_EXISTS``) and opens it.

    ``mode`` (default 0o600) must be one its own opens accept: a group-writable mode needs
    ``trust_group_writable``, a world-writable one ``trust_world_writable``, and 0 is refused.
    ``ERR_NO_SPACE`` when /dev/shm cannot hold it. Otherwise as :func:`open_table`.
    """
    if not int_in(capacity, 1, _abi.WP_MAX_CAPACITY):
        raise invalid("capacity", "an integer in [1, %d]" % _abi.WP_MAX_CAPACITY, capacity)
    if not int_in(mode, 1, 0o777):
        raise invalid("mode", "a permission mode in [0o1, 0o777] (0 would make a table nobody can open)", mode)
    if mode & 0o020 and not trust_group_writable:
        raise invalid("mode", "a mode the group may not write, unless trust_group_writable is true", mode)
    if mode & 0o002 and not trust_world_writable:
        raise invalid("mode", "a mode others may not write (anyone on the host), unless trust_world_writable is true", mode)
    return _open(name, role, capacity, mode, library, trust_uid, trust_group_writable, trust_world_writable)


def unlink_table(name: str, library: Union[None, str, "os.PathLike[str]", ctypes.CDLL] = None) -> bool:
    """Removes a table's name (``/dev/shm/<name>``); open handles keep working until closed. True
    when removed, False when there was no such table; ``ERR_PERMISSION_DENIED`` when this user may
    not remove it."""
    raw_name = _name(name)
    lib = _library(library)
    status = lib.wp_unlink(raw_name)
    if status == 0:
        return True
    if status == _abi.WP_ERR_NOT_FOUND:
        return False
    raise status_error(lib, status, "unlink_table(%r)" % name)
