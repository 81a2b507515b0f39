"""ctypes wrapper over libwaitprep.so, the lease table's C ABI (standard library only).

A model runtime written in Python uses this to be a table's producer: it
reserves a slot for an artifact key, validates the prepared bytes, publishes
the artifact's metadata, evicts, and records device writes. Consumers (Node's
``openLeaseTable``, or this wrapper) pin READY artifacts.

    import waitprep_key, waitprep_table

    lib = waitprep_table.load()            # WAITPREP_LIB, or load("/path/to/libwaitprep.so")
    table = waitprep_table.Table.open("my-table", producer=True, create_capacity=1024, lib=lib)
    d = waitprep_key.digest(fields)
    reservation = table.reserve(d)         # (slot, generation)
    ...                                    # prepare and validate the artifact
    table.publish(reservation, size_bytes=..., location=..., checksum=..., codec_id=..., representation_version=...)
    table.try_evict(d)                     # 'evicted' | 'pinned' | 'absent'
    table.close()

The structures below mirror native/include/waitprep.h field for field (C
layout, natural alignment, x86-64 / aarch64 Linux). Every error raises
:class:`WaitprepError`, whose message names ``wp_status_name(status)``.
"""

import ctypes
import os
import re

__all__ = [
    "WaitprepError",
    "WpMeta",
    "WpLease",
    "WpReservation",
    "WpDeviceRecord",
    "WpOpenOptions",
    "Lease",
    "Table",
    "load",
    "unlink",
    "device_uuid_bytes",
    "STATUS",
    "MISS_REASON",
    "status_mismatch",
    "ABI_VERSION",
]

#: WP_ABI_VERSION of the header this wrapper mirrors; checked against wp_abi_version() at load.
ABI_VERSION = 3

#: Status codes (the header's enum).
STATUS = {
    "WP_OK": 0,
    "WP_MISS_ABSENT": 1,
    "WP_MISS_PREPARING": 2,
    "WP_MISS_EVICTING": 3,
    "WP_MISS_CONTENDED": 4,
    "WP_MISS_NO_DEVICE_RECORD": 5,
    "WP_MISS_DEVICE_MISMATCH": 6,
    "WP_MISS_ARENA_GENERATION_MISMATCH": 7,
    "WP_MISS_DEVICE_WRITE_INCOMPLETE": 8,
    "WP_MISS_STALE_HANDOFF": 9,
    "WP_EXISTS": 20,
    "WP_FULL": 21,
    "WP_PINNED": 22,
    "WP_ABSENT": 23,
    "WP_STALE": 24,
    "WP_ERR_INVALID_ARGUMENT": 40,
    "WP_ERR_BAD_SEGMENT": 41,
    "WP_ERR_WRITER_EXISTS": 42,
    "WP_ERR_NOT_PRODUCER": 43,
    "WP_ERR_NO_CLIENT_SLOT": 44,
    "WP_ERR_SYSTEM": 45,
    "WP_ERR_NOT_FOUND": 46,
    "WP_ERR_EXISTS": 47,
    "WP_ERR_NO_MEMORY": 48,
    "WP_ERR_NO_SPACE": 49,
    "WP_ERR_PERMISSION": 50,
    "WP_ERR_UNTRUSTED_SEGMENT": 51,
}

#: wp_open_options.flags (waitprep.h): the trust an open may widen.
WP_OPEN_TRUST_UID = 2
WP_OPEN_TRUST_GROUP_WRITE = 4
WP_OPEN_TRUST_WORLD_WRITE = 8
_S = STATUS

#: wp_try_pin's miss statuses by code, named as lib/miss-reasons.ts names them on the Node side:
#: the status name without WP_MISS_, lowercase, "_" as "-" (WP_MISS_NO_DEVICE_RECORD: "no-device-record").
MISS_REASON = {code: name[len("WP_MISS_"):].lower().replace("_", "-") for name, code in STATUS.items() if name.startswith("WP_MISS_")}

_U32_MAX = 2**32 - 1
_U64_MAX = 2**64 - 1
_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}$")
_GPU_UUID = re.compile(r"^GPU-([0-9a-fA-F]{8})-([0-9a-fA-F]{4})-([0-9a-fA-F]{4})-([0-9a-fA-F]{4})-([0-9a-fA-F]{12})$")


# --- Structures (native/include/waitprep.h) ----------------------------------------------------


class WpMeta(ctypes.Structure):
    """typedef struct { uint64_t size_bytes, location, checksum; uint32_t codec_id, representation_version; } wp_meta;"""

    _fields_ = [
        ("size_bytes", ctypes.c_uint64),
        ("location", ctypes.c_uint64),
        ("checksum", ctypes.c_uint64),
        ("codec_id", ctypes.c_uint32),
        ("representation_version", ctypes.c_uint32),
    ]


class WpLease(ctypes.Structure):
    """typedef struct { uint32_t slot; uint64_t generation; wp_meta meta; uint64_t token; } wp_lease;"""

    _fields_ = [
        ("slot", ctypes.c_uint32),
        ("generation", ctypes.c_uint64),
        ("meta", WpMeta),
        ("token", ctypes.c_uint64),
    ]


class WpReservation(ctypes.Structure):
    """typedef struct { uint32_t slot; uint64_t generation; } wp_reservation;"""

    _fields_ = [
        ("slot", ctypes.c_uint32),
        ("generation", ctypes.c_uint64),
    ]


class WpDeviceRecord(ctypes.Structure):
    """typedef struct { uint8_t device_uuid[16]; uint64_t arena, arena_generation, write_seq; } wp_device_record;"""

    _fields_ = [
        ("device_uuid", ctypes.c_uint8 * 16),
        ("arena", ctypes.c_uint64),
        ("arena_generation", ctypes.c_uint64),
        ("write_seq", ctypes.c_uint64),
    ]


class WpOpenOptions(ctypes.Structure):
    """typedef struct { uint32_t create_capacity, mode, flags, trusted_uid; } wp_open_options;"""

    _fields_ = [
        ("create_capacity", ctypes.c_uint32),
        ("mode", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("trusted_uid", ctypes.c_uint32),
    ]


assert ctypes.sizeof(WpMeta) == 32, ctypes.sizeof(WpMeta)
assert ctypes.sizeof(WpLease) == 56, ctypes.sizeof(WpLease)
assert ctypes.sizeof(WpReservation) == 16, ctypes.sizeof(WpReservation)
assert ctypes.sizeof(WpDeviceRecord) == 40, ctypes.sizeof(WpDeviceRecord)
assert ctypes.sizeof(WpOpenOptions) == 16, ctypes.sizeof(WpOpenOptions)
assert WpLease.meta.offset == 16 and WpLease.token.offset == 48
assert WpDeviceRecord.arena.offset == 16 and WpDeviceRecord.write_seq.offset == 32


# --- Errors -------------------------------------------------------------------------------------


class WaitprepError(RuntimeError):
    """A libwaitprep call failed. ``status`` is the code, ``name`` its wp_status_name spelling."""

    def __init__(self, what, status, name, errno_value=0):
        detail = "%s failed: %s (status %d)" % (what, name, status)
        if errno_value:
            detail += ": %s" % os.strerror(errno_value)
        super().__init__(detail)
        self.status = status
        self.name = name
        self.errno = errno_value


# --- Loading ------------------------------------------------------------------------------------

_VOIDP = ctypes.c_void_p
_DIGEST = ctypes.c_char_p  # const uint8_t digest[32]: a bytes object of exactly 32 bytes

_SIGNATURES = {
    "wp_open": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint32, ctypes.POINTER(_VOIDP)]),
    "wp_open_ex": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(WpOpenOptions), ctypes.POINTER(_VOIDP)]),
    "wp_close": (None, [_VOIDP]),
    "wp_unlink": (ctypes.c_int, [ctypes.c_char_p]),
    "wp_try_pin": (ctypes.c_int, [_VOIDP, _DIGEST, ctypes.POINTER(WpDeviceRecord), ctypes.POINTER(WpLease)]),
    "wp_unpin": (ctypes.c_int, [_VOIDP, ctypes.POINTER(WpLease)]),
    "wp_reserve": (ctypes.c_int, [_VOIDP, _DIGEST, ctypes.POINTER(WpReservation)]),
    "wp_publish": (ctypes.c_int, [_VOIDP, ctypes.POINTER(WpReservation), ctypes.POINTER(WpMeta)]),
    "wp_abandon": (ctypes.c_int, [_VOIDP, ctypes.POINTER(WpReservation)]),
    "wp_try_evict": (ctypes.c_int, [_VOIDP, _DIGEST]),
    "wp_record_device_write": (ctypes.c_int, [_VOIDP, _DIGEST, ctypes.POINTER(WpDeviceRecord)]),
    "wp_reap_dead_clients": (ctypes.c_int, [_VOIDP]),
    "wp_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "wp_abi_version": (ctypes.c_uint32, []),
    "wp_capacity": (ctypes.c_uint32, [_VOIDP]),
    "wp_client_index": (ctypes.c_int, [_VOIDP]),
    "wp_is_producer": (ctypes.c_int, [_VOIDP]),
    "wp_client_pins": (ctypes.c_uint32, [_VOIDP, ctypes.c_uint32]),
    "wp_slot_state_gen": (ctypes.c_uint64, [_VOIDP, ctypes.c_uint32]),
    "wp_slot_pin_mask": (ctypes.c_uint64, [_VOIDP, ctypes.c_uint32]),
}

_loaded = {}


def load(path=None):
    """Loads libwaitprep.so from ``path``, else from the WAITPREP_LIB environment variable.

    Declares every function's argument and result types and checks the ABI
    version. Loading the same path twice returns the same library object.
    """
    if path is None:
        path = os.environ.get("WAITPREP_LIB")
    if not path:
        raise ValueError("libwaitprep.so not given: pass its path or set WAITPREP_LIB (Node: nativeLibraryPath())")
    path = os.path.abspath(path)
    if path in _loaded:
        return _loaded[path]
    lib = ctypes.CDLL(path, use_errno=True)
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    version = lib.wp_abi_version()
    if version != ABI_VERSION:
        raise RuntimeError("%s has ABI version %d; this wrapper mirrors version %d" % (path, version, ABI_VERSION))
    mismatch = status_mismatch(lambda status: status_name(lib, status))
    if mismatch is not None:
        raise RuntimeError("%s: %s; STATUS must mirror native/include/waitprep.h" % (path, mismatch))
    _loaded[path] = lib
    return lib


def status_name(lib, status):
    """wp_status_name(status) as a str."""
    raw = lib.wp_status_name(status)
    return raw.decode("ascii", "replace") if raw else "WP_STATUS_%d" % status


def status_mismatch(spell, statuses=STATUS):
    """The first of ``statuses`` the library numbers differently, as a sentence; None when all agree.

    ``spell`` is wp_status_name as a function of the number. The library spells numbers but does
    not list its statuses, so this checks the direction a caller depends on: every number this
    wrapper acts on (a miss reason, WP_PINNED, ...) means the same status in the library. A status
    only the library has needs no check: it reaches Python as a WaitprepError under the library's
    own name.
    """
    for name, status in statuses.items():
        spelled = spell(status)
        if spelled != name:
            return "status %s is %d in this wrapper, but the library spells %d as %s" % (name, status, status, spelled)
    return None


def _fail(lib, what, status):
    errno_value = ctypes.get_errno() if status in (_S["WP_ERR_SYSTEM"], _S["WP_ERR_PERMISSION"]) else 0
    return WaitprepError(what, status, status_name(lib, status), errno_value)


def _check_name(name):
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError("table name must be 1-200 of A-Z a-z 0-9 . _ -, not starting with a dot; got %r" % (name,))
    return name.encode("ascii")


def unlink(name, lib=None):
    """Removes a table's name (/dev/shm/<name>). True when removed, False when it did not exist;
    WaitprepError (WP_ERR_PERMISSION) when the caller may not remove it."""
    lib = lib if lib is not None else load()
    status = lib.wp_unlink(_check_name(name))
    if status == _S["WP_OK"]:
        return True
    if status == _S["WP_ERR_NOT_FOUND"]:
        return False
    raise _fail(lib, "wp_unlink(%r)" % name, status)


# --- Argument helpers ---------------------------------------------------------------------------


def _digest(value):
    if isinstance(value, (bytearray, memoryview)):
        value = bytes(value)
    if not isinstance(value, bytes) or len(value) != 32:
        raise ValueError("a digest is 32 bytes (waitprep_key.digest(fields)); got %r" % (value,))
    return value


def _u64(field, value):
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _U64_MAX:
        raise ValueError("%s must be an integer in [0, 2^64-1]; got %r" % (field, value))
    return value


def _u32(field, value):
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _U32_MAX:
        raise ValueError("%s must be an integer in [0, 2^32-1]; got %r" % (field, value))
    return value


def device_uuid_bytes(device):
    """'GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx' (as nvidia-smi prints it) -> its 16 bytes, in order."""
    match = _GPU_UUID.match(device) if isinstance(device, str) else None
    if match is None:
        raise ValueError("device must be 'GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx'; got %r" % (device,))
    return bytes.fromhex("".join(match.groups()))


def _device_record(device, arena, arena_generation, write_seq=0):
    record = WpDeviceRecord()
    ctypes.memmove(record.device_uuid, device_uuid_bytes(device), 16)
    record.arena = _u64("arena", arena)
    record.arena_generation = _u64("arena_generation", arena_generation)
    record.write_seq = _u64("write_seq", write_seq)
    return record


def _reservation(value):
    if isinstance(value, WpReservation):
        return value
    try:
        slot, generation = value
    except (TypeError, ValueError):
        raise ValueError("a reservation is the (slot, generation) pair reserve() returned; got %r" % (value,)) from None
    r = WpReservation()
    r.slot = _u32("reservation slot", slot)
    r.generation = _u64("reservation generation", generation)
    return r


# --- Leases and tables --------------------------------------------------------------------------


class Lease:
    """A pin on a READY artifact. ``unpin`` (or Table.unpin) releases it exactly once."""

    __slots__ = ("_raw", "_table", "readiness")

    def __init__(self, table, raw, readiness):
        self._raw = raw
        self._table = table
        self.readiness = readiness

    @property
    def slot(self):
        return self._raw.slot

    @property
    def generation(self):
        return self._raw.generation

    @property
    def meta(self):
        m = self._raw.meta
        return {
            "size_bytes": m.size_bytes,
            "location": m.location,
            "checksum": m.checksum,
            "codec_id": m.codec_id,
            "representation_version": m.representation_version,
        }

    @property
    def closed(self):
        return self._table is None

    def unpin(self):
        """Releases the pin. True when this call released it; False when it released nothing: a
        second call, a table closed since, or a lease wp_unpin calls stale (released already
        through a copy, or not this table's)."""
        table, self._table = self._table, None
        if table is None or table._handle is None:
            return False
        return table._lib.wp_unpin(table._handle, ctypes.byref(self._raw)) == _S["WP_OK"]

    close = unpin

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.unpin()

    def __repr__(self):
        state = "closed" if self.closed else "held"
        return "<Lease slot=%d generation=%d %s %s>" % (self.slot, self.generation, self.readiness, state)


class Table:
    """One client's handle on a lease table. Use :meth:`open`.

    Any number of threads may pin, unpin, publish and evict through one handle at once (the C core
    locks the handle's private state, see waitprep.h "Threads"); :meth:`close` must come after every
    other thread is done with it.
    """

    def __init__(self, lib, handle, name, producer):
        self._lib = lib
        self._handle = handle
        self.name = name
        self.producer = producer

    @classmethod
    def open(cls, name, producer, create_capacity=0, mode=0, lib=None, trust_uid=None, trust_group_writable=False,
             trust_world_writable=False):
        """Opens (create_capacity 0) or creates (create_capacity > 0; the table must not exist) a table.

        ``producer`` claims the single producer role (WP_ERR_WRITER_EXISTS if a live one holds it).
        ``mode`` is the creation mode (0: 0600). ``lib`` defaults to :func:`load` () (WAITPREP_LIB).
        An open trusts only a file owned by this process's effective uid that neither group nor
        others may write (else WP_ERR_UNTRUSTED_SEGMENT); ``trust_uid`` accepts a second owner, and
        ``trust_group_writable`` / ``trust_world_writable`` accept (and let a creation set) those
        write bits. See docs/operations.md, "Permissions".
        """
        lib = lib if lib is not None else load()
        raw_name = _check_name(name)
        flags = (WP_OPEN_TRUST_GROUP_WRITE if trust_group_writable else 0) | (WP_OPEN_TRUST_WORLD_WRITE if trust_world_writable else 0)
        if trust_uid is not None:
            flags |= WP_OPEN_TRUST_UID
        options = WpOpenOptions(_u32("create_capacity", create_capacity), _u32("mode", mode), flags,
                                _u32("trust_uid", trust_uid if trust_uid is not None else 0))
        handle = _VOIDP()
        status = lib.wp_open_ex(raw_name, 1 if producer else 0, ctypes.byref(options), ctypes.byref(handle))
        if status != _S["WP_OK"]:
            raise _fail(lib, "wp_open(%r, producer=%s)" % (name, bool(producer)), status)
        return cls(lib, handle, name, bool(producer))

    def _h(self, what):
        if self._handle is None:
            raise WaitprepError(what, -1, "table closed")
        return self._handle

    @property
    def closed(self):
        return self._handle is None

    @property
    def capacity(self):
        return self._lib.wp_capacity(self._h("capacity"))

    @property
    def client_index(self):
        return self._lib.wp_client_index(self._h("client_index"))

    def close(self):
        """Releases every pin this client holds, gives up the producer role, unregisters. Idempotent."""
        handle, self._handle = self._handle, None
        if handle is not None:
            self._lib.wp_close(handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # Producer side.

    def reserve(self, digest):
        """Reserves a slot for the key's digest. Returns (slot, generation). WP_EXISTS / WP_FULL raise."""
        out = WpReservation()
        status = self._lib.wp_reserve(self._h("reserve"), _digest(digest), ctypes.byref(out))
        if status != _S["WP_OK"]:
            raise _fail(self._lib, "wp_reserve(%s)" % _digest(digest).hex(), status)
        return (out.slot, out.generation)

    def publish(self, reservation, size_bytes, location, checksum, codec_id, representation_version):
        """Makes a reserved artifact READY with its metadata. Validate the bytes and geometry first."""
        r = _reservation(reservation)
        meta = WpMeta(
            _u64("size_bytes", size_bytes),
            _u64("location", location),
            _u64("checksum", checksum),
            _u32("codec_id", codec_id),
            _u32("representation_version", representation_version),
        )
        status = self._lib.wp_publish(self._h("publish"), ctypes.byref(r), ctypes.byref(meta))
        if status != _S["WP_OK"]:
            raise _fail(self._lib, "wp_publish(slot %d, generation %d)" % (r.slot, r.generation), status)

    def abandon(self, reservation):
        """Gives a reserved slot back (preparation failed or was stopped)."""
        r = _reservation(reservation)
        status = self._lib.wp_abandon(self._h("abandon"), ctypes.byref(r))
        if status != _S["WP_OK"]:
            raise _fail(self._lib, "wp_abandon(slot %d, generation %d)" % (r.slot, r.generation), status)

    def try_evict(self, digest):
        """'evicted', 'pinned' (pinned, or a pin racing in: retry later) or 'absent'. Never evicts a pinned artifact."""
        status = self._lib.wp_try_evict(self._h("try_evict"), _digest(digest))
        if status == _S["WP_OK"]:
            return "evicted"
        if status == _S["WP_PINNED"]:
            return "pinned"
        if status == _S["WP_ABSENT"]:
            return "absent"
        raise _fail(self._lib, "wp_try_evict(%s)" % _digest(digest).hex(), status)

    def record_device_write(self, digest, device, arena, arena_generation, write_seq):
        """Records a completed device write for a READY artifact. 'recorded' or 'absent'.

        ``device`` is the GPU UUID string 'GPU-…' as nvidia-smi prints it.
        """
        record = _device_record(device, arena, arena_generation, write_seq)
        status = self._lib.wp_record_device_write(self._h("record_device_write"), _digest(digest), ctypes.byref(record))
        if status == _S["WP_OK"]:
            return "recorded"
        if status == _S["WP_ABSENT"]:
            return "absent"
        raise _fail(self._lib, "wp_record_device_write(%s)" % _digest(digest).hex(), status)

    # Consumer side (any client).

    def try_pin(self, digest, device=None, arena=0, arena_generation=0):
        """Pins a READY artifact: a :class:`Lease`, or the miss reason as a str ('absent', 'preparing', …).

        With ``device`` (a 'GPU-…' UUID), hits only if the slot carries a completed device-write
        record for that device, arena and arena generation.
        """
        target = None
        if device is not None:
            target = ctypes.byref(_device_record(device, arena, arena_generation))
        out = WpLease()
        status = self._lib.wp_try_pin(self._h("try_pin"), _digest(digest), target, ctypes.byref(out))
        if status == _S["WP_OK"]:
            return Lease(self, out, "host" if device is None else "device")
        if status in MISS_REASON:
            return MISS_REASON[status]
        raise _fail(self._lib, "wp_try_pin(%s)" % _digest(digest).hex(), status)

    def unpin(self, lease):
        """Releases a lease from :meth:`try_pin` (idempotent): True when this call released it."""
        if not isinstance(lease, Lease):
            raise ValueError("unpin takes a Lease from try_pin; got %r" % (lease,))
        return lease.unpin()

    def client_pins(self, slot):
        """Pins this client holds on ``slot``."""
        return self._lib.wp_client_pins(self._h("client_pins"), _u32("slot", slot))

    def slot_state(self, slot):
        """The slot's (state, generation) as the shared segment holds them now, for tools and tests.

        state is 'free', 'reserved', 'ready' or 'evicting'.
        """
        word = self._lib.wp_slot_state_gen(self._h("slot_state"), _u32("slot", slot))
        return ("free", "reserved", "ready", "evicting")[word & 0x3], word >> 8

    def pin_holders(self, slot):
        """Client indexes whose pin bit is set on ``slot`` now, for tools and tests."""
        mask = self._lib.wp_slot_pin_mask(self._h("pin_holders"), _u32("slot", slot))
        return [i for i in range(64) if mask >> i & 1]

    def reap_dead_clients(self):
        """Releases the pins and entries of clients whose process died. Returns how many were reaped."""
        reaped = self._lib.wp_reap_dead_clients(self._h("reap_dead_clients"))
        if reaped < 0:
            raise _fail(self._lib, "wp_reap_dead_clients", -reaped)
        return reaped

    def __repr__(self):
        state = "closed" if self.closed else "open"
        return "<Table %r %s %s>" % (self.name, "producer" if self.producer else "consumer", state)
