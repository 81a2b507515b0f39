"""Where an artifact's bytes are (docs/arena-records.md), the same rules as Node's
lib/lease-table/arena-record.ts.

A lease's ``meta.location`` is one u64: its top 16 bits name an arena, its low 48 bits are the byte
offset of a record in it. Arena ``i`` of table ``T`` is the file ``<root>/T-arena/<i>.wpa`` (root
``/dev/shm``), so a reader holding only the table's name and a lease finds the bytes. Each record
starts with a fixed 96-byte header (magic, the artifact key's digest, payload length, token count,
a short format string, the payload's checksum) that :func:`read_arena_record` checks against the
key and the meta before it hands out the payload. A record that does not belong is a
:class:`Mismatch` value, as a miss is.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
import struct
from typing import Any, Callable, Mapping, NamedTuple, Optional, Tuple, TypeVar, Union

T = TypeVar("T")

from ._ints import int_in, is_u32, is_u64
from .errors import WaitprepError, invalid, with_errno

__all__ = [
    "ARENA_RECORD_MAGIC",
    "ARENA_RECORD_VERSION",
    "ARENA_RECORD_HEADER_BYTES",
    "ARENA_INDEX_BITS",
    "ARENA_OFFSET_BITS",
    "MAX_ARENA_INDEX",
    "MAX_ARENA_OFFSET",
    "DEFAULT_ARENA_ROOT",
    "MAX_ARENA_RECORD_PAYLOAD_BYTES",
    "RecordHeader",
    "ArenaRecord",
    "Mismatch",
    "arena_location",
    "split_location",
    "arena_directory",
    "arena_path",
    "is_arena_file_name",
    "record_checksum",
    "encode_record_header",
    "encode_arena_record",
    "decode_record_header",
    "check_record_header",
    "read_arena_record",
    "check_arena_directory",
    "ensure_arena_directory",
    "read_arena_record_into",
]

#: First bytes of every record: ASCII ``WPAR`` ("waitprep arena record").
ARENA_RECORD_MAGIC = b"WPAR"
#: The record header's version; a reader refuses any other.
ARENA_RECORD_VERSION = 1
#: Bytes of the record header; the payload follows it.
ARENA_RECORD_HEADER_BYTES = 96
#: Bits of ``location`` naming the arena (its top bits), and giving the record's offset (its low bits).
ARENA_INDEX_BITS = 16
ARENA_OFFSET_BITS = 48
MAX_ARENA_INDEX = (1 << ARENA_INDEX_BITS) - 1
MAX_ARENA_OFFSET = (1 << ARENA_OFFSET_BITS) - 1
#: Where arenas live unless a reader or writer says otherwise.
DEFAULT_ARENA_ROOT = "/dev/shm"
#: The largest payload :func:`read_arena_record` reads: 1 GiB (Node's ``MAX_ARENA_RECORD_PAYLOAD_BYTES``).
#: It copies the payload into memory, so a record announcing more (a damaged header, or a sparse
#: file that says 5 GiB) is the mismatch ``out-of-bounds`` before anything is allocated. A reader
#: of larger records maps the arena itself and checks the header with :func:`decode_record_header`
#: and :func:`check_record_header`.
MAX_ARENA_RECORD_PAYLOAD_BYTES = 1 << 30

# magic, version, header bytes, digest, payload length, token count, format, checksum, reserved
_HEADER = struct.Struct("<4sHH32sQQ24sQQ")
_FORMAT = re.compile(r"^[\x21-\x7e]{1,24}$")
_ARENA_FILE = re.compile(r"^(0|[1-9][0-9]{0,4})\.wpa$")
_TABLE_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}$")
assert _HEADER.size == ARENA_RECORD_HEADER_BYTES


class RecordHeader(NamedTuple):
    """What a record header says."""

    digest: bytes
    payload_length: int
    token_count: int
    format: str
    checksum: int


class ArenaRecord(NamedTuple):
    """A record that belongs to the key: its header and its payload."""

    header: RecordHeader
    payload: bytes


class Mismatch(NamedTuple):
    """A read that found no record belonging to the key. ``reason`` is one of ``no-arena``,
    ``out-of-bounds``, ``bad-header``, ``wrong-key``, ``wrong-size``, ``wrong-checksum``,
    ``corrupt-payload`` (Node's words); ``message`` says what was expected and what was there."""

    reason: str
    message: str


_BYTES_LIKE = (bytes, bytearray, memoryview)


def record_checksum(payload: Union[bytes, bytearray, memoryview]) -> int:
    """The first 8 bytes of the payload's SHA-256 as a big-endian u64: the record's and the meta's checksum."""
    if not isinstance(payload, _BYTES_LIKE):
        raise invalid("payload", "bytes, a bytearray or a memoryview", payload)
    return int.from_bytes(hashlib.sha256(payload).digest()[:8], "big")


def arena_location(arena: int, offset: int) -> int:
    """``location`` for the record at byte ``offset`` of arena ``arena``."""
    if not int_in(arena, 0, MAX_ARENA_INDEX):
        raise invalid("arena", "an integer in [0, %d]" % MAX_ARENA_INDEX, arena)
    if not int_in(offset, 0, MAX_ARENA_OFFSET):
        raise invalid("offset", "an integer in [0, 2^48-1]", offset)
    return (arena << ARENA_OFFSET_BITS) | offset


def split_location(location: int) -> "tuple[int, int]":
    """(arena, offset) of a ``location``."""
    if not is_u64(location):
        raise invalid("location", "a u64", location)
    return location >> ARENA_OFFSET_BITS, location & MAX_ARENA_OFFSET


def _root(root: object) -> str:
    path = os.fspath(root) if isinstance(root, os.PathLike) else root
    if not isinstance(path, str) or not path:
        raise invalid("root", "a non-empty str (a directory path)", root)
    return path


def arena_directory(table_name: str, root: str = DEFAULT_ARENA_ROOT) -> str:
    """The directory holding table ``table_name``'s arenas: ``<root>/<table_name>-arena``."""
    if not isinstance(table_name, str) or not _TABLE_NAME.fullmatch(table_name):
        raise invalid("table_name", "a lease table name (1-200 of A-Z a-z 0-9 . _ -, not starting with a dot)", table_name)
    return os.path.join(_root(root), table_name + "-arena")


def arena_path(table_name: str, arena: int, root: str = DEFAULT_ARENA_ROOT) -> str:
    """The file of arena ``arena`` of table ``table_name``: ``<root>/<table_name>-arena/<arena>.wpa``."""
    if not int_in(arena, 0, MAX_ARENA_INDEX):
        raise invalid("arena", "an integer in [0, %d]" % MAX_ARENA_INDEX, arena)
    return os.path.join(arena_directory(table_name, root), "%d.wpa" % arena)


def is_arena_file_name(name: str) -> bool:
    """True for a file name the arena rule gives (``<index>.wpa``, decimal, no leading zeros, at most 65535)."""
    return isinstance(name, str) and bool(_ARENA_FILE.fullmatch(name)) and int(name[:-4]) <= MAX_ARENA_INDEX


def _digest(field: str, value: object) -> bytes:
    digest = getattr(value, "digest", value)
    if isinstance(digest, (bytes, bytearray)) and len(digest) == 32:
        return bytes(digest)
    raise invalid(field, "a 32-byte digest (or a key with .digest)", value)


def _u64(field: str, value: object) -> int:
    if not is_u64(value):
        raise invalid(field, "a u64", value)
    return value  # type: ignore[return-value]


def encode_record_header(digest: bytes, payload_length: int, token_count: int, format: str, checksum: int) -> bytes:
    """The 96-byte header (docs/arena-records.md has the layout)."""
    if not isinstance(format, str) or not _FORMAT.match(format):
        raise invalid("format", "1-24 printable ASCII characters, no space", format)
    return _HEADER.pack(ARENA_RECORD_MAGIC, ARENA_RECORD_VERSION, ARENA_RECORD_HEADER_BYTES, _digest("digest", digest),
                        _u64("payload_length", payload_length), _u64("token_count", token_count), format.encode("ascii"),
                        _u64("checksum", checksum), 0)


def encode_arena_record(key: object, payload: Union[bytes, bytearray, memoryview], token_count: int, format: str) -> "tuple[bytes, RecordHeader]":
    """A whole record (header and payload) for ``key`` (a digest, or a key with ``.digest``): what a
    producer writes at the record's offset, and its header (whose ``checksum`` and
    ``payload_length`` are the meta's ``checksum`` and ``size_bytes``)."""
    if not isinstance(payload, _BYTES_LIKE):
        raise invalid("payload", "bytes, a bytearray or a memoryview", payload)
    payload = bytes(payload)
    header = RecordHeader(_digest("key", key), len(payload), token_count, format, record_checksum(payload))
    return encode_record_header(*header) + payload, header


def decode_record_header(data: Union[bytes, bytearray, memoryview]) -> Union[RecordHeader, Mismatch]:
    """The header's fields, or why the bytes are not a record header of this version."""
    if not isinstance(data, _BYTES_LIKE):
        raise invalid("data", "bytes, a bytearray or a memoryview", data)
    data = bytes(data[:ARENA_RECORD_HEADER_BYTES])
    if len(data) < ARENA_RECORD_HEADER_BYTES:
        return Mismatch("out-of-bounds", "a record header is %d bytes, got %d" % (ARENA_RECORD_HEADER_BYTES, len(data)))
    magic, version, size, digest, length, tokens, raw_format, checksum, reserved = _HEADER.unpack(data)
    if magic != ARENA_RECORD_MAGIC:
        return Mismatch("bad-header", "expected the magic WPAR (57 50 41 52), got %s" % magic.hex())
    if version != ARENA_RECORD_VERSION or size != ARENA_RECORD_HEADER_BYTES:
        return Mismatch("bad-header", "expected version %d with a %d-byte header, got version %d, %d bytes" % (ARENA_RECORD_VERSION, ARENA_RECORD_HEADER_BYTES, version, size))
    text = raw_format.rstrip(b"\0")
    if b"\0" in text or not _FORMAT.match(text.decode("latin-1")):
        return Mismatch("bad-header", "expected a format of 1-24 printable ASCII characters, NUL-padded")
    if reserved != 0:
        return Mismatch("bad-header", "expected the reserved bytes 88-95 to be zero")
    return RecordHeader(digest, length, tokens, text.decode("ascii"), checksum)


_META_FIELDS = ("location", "size_bytes", "checksum")


def _meta(meta: object, need_location: bool) -> "Tuple[Optional[int], Optional[int], Optional[int]]":
    """(location, size_bytes, checksum) of a meta, None where absent. A field that is there but not
    a u64 (a float, a negative, a str, a bool) is ERR_INVALID_ARGUMENT naming it: a caller's
    mistake, not a record that fails to belong."""
    if isinstance(meta, Mapping):
        values = [meta.get(name) for name in _META_FIELDS]
    elif meta is not None and not isinstance(meta, (str, bytes, bytearray, int, float)) and any(hasattr(meta, name) for name in _META_FIELDS):
        values = [getattr(meta, name, None) for name in _META_FIELDS]
    else:
        raise invalid("meta", "a lease's meta (LeaseMeta), a mapping or an object with location, size_bytes, checksum", meta)
    for name, value in zip(_META_FIELDS, values):
        if value is None and (name != "location" or not need_location):
            continue
        if not is_u64(value):
            raise invalid("meta." + name, "a u64 (an int in [0, 2^64-1], not a bool)" + ("" if name == "location" else ", or None"), value)
    return values[0], values[1], values[2]


def _mismatch(header: RecordHeader, digest: bytes, size: Optional[int], checksum: Optional[int]) -> Optional[Mismatch]:
    if header.digest != digest:
        return Mismatch("wrong-key", "the record is for %s, not %s" % (header.digest.hex(), digest.hex()))
    if size is not None and size != header.payload_length:
        return Mismatch("wrong-size", "the meta says %d bytes, the record holds %d" % (size, header.payload_length))
    if checksum is not None and checksum != header.checksum:
        return Mismatch("wrong-checksum", "the meta's checksum is %d, the record's %d" % (checksum, header.checksum))
    return None


def check_record_header(header: RecordHeader, key: object, meta: object = None) -> Optional[Mismatch]:
    """Checks a header against the key (a digest, or a key with ``.digest``) and, when given, the
    lease's meta (``size_bytes`` = payload length, ``checksum`` = the header's). None when it belongs.
    A header that is not a :class:`RecordHeader`, or a meta field that is not a u64, is
    ``ERR_INVALID_ARGUMENT``."""
    if not isinstance(header, RecordHeader):
        raise invalid("header", "a RecordHeader (decode_record_header)", header)
    digest = _digest("key", key)
    _, size, checksum = (None, None, None) if meta is None else _meta(meta, False)
    return _mismatch(header, digest, size, checksum)


def _pread_fully(fd: int, length: int, offset: int) -> bytes:
    """``length`` bytes at ``offset``, or fewer where the file ends first."""
    data = os.pread(fd, length, offset)  # one read on a regular file, unless it ends first
    if len(data) == length or not data:
        return data
    parts = [data]
    done = len(data)
    while done < length:
        chunk = os.pread(fd, length - done, offset + done)
        if not chunk:
            break
        parts.append(chunk)
        done += len(chunk)
    return b"".join(parts)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device"


def _open_arena(arena: int, path: str) -> "Union[Tuple[int, int], Mismatch]":
    """The arena file open for reading, and its size; or ``no-arena``. An arena is a regular file,
    judged on the open descriptor (the file that is read): O_NOFOLLOW refuses a link planted under
    the name, O_NONBLOCK keeps a FIFO from blocking the open. The caller closes the descriptor."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        if error.errno == errno.ELOOP:
            return Mismatch("no-arena", "arena %d (%s) is a symbolic link, not a regular file" % (arena, path))
        return Mismatch("no-arena", "arena %d (%s) cannot be opened: %s" % (arena, path, error.strerror))
    try:
        st = os.fstat(fd)
    except OSError as error:
        os.close(fd)
        return Mismatch("no-arena", "arena %d (%s) cannot be read: %s" % (arena, path, error.strerror))
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return Mismatch("no-arena", "arena %d (%s) is %s, not a regular file" % (arena, path, _kind(st.st_mode)))
    return fd, st.st_size


def read_arena_record(table_name: str, key: object, meta: object, root: str = DEFAULT_ARENA_ROOT, verify_checksum: bool = True) -> Union[ArenaRecord, Mismatch]:
    """Reads the record ``meta.location`` names for ``key`` from table ``table_name``'s arenas.

    ``meta`` is a lease's :class:`~waitprep.LeaseMeta` (or anything with ``location`` and, to be
    checked, ``size_bytes`` and ``checksum``; a dict works too). Checks the header, the digest, the
    meta's size and checksum and, unless ``verify_checksum`` is False, the payload's own checksum.
    Hold a pin on the artifact while reading: a record whose artifact was evicted may be gone or
    replaced, which this reports as a :class:`Mismatch`, never returns.

    Whatever is at the arena's path is a value, never an exception or a wait: anything but a
    regular file (a FIFO, a directory, a device, a symbolic link) is ``no-arena``; a header or
    payload past the file's end, or a payload over :data:`MAX_ARENA_RECORD_PAYLOAD_BYTES`, is
    ``out-of-bounds``, found before the payload is allocated. A malformed argument (a meta field
    that is not a u64, a bad key, table name or root, a non-bool ``verify_checksum``) is
    ``ERR_INVALID_ARGUMENT`` before the file is opened.
    """
    return _read_record(table_name, key, meta, root, verify_checksum, _read_payload)


def _read_payload(fd: int, header: RecordHeader, start: int, path: str) -> "Union[Tuple[ArenaRecord, bytes], Mismatch]":
    # The most a reader copies into a new buffer, checked before a byte is allocated.
    if header.payload_length > MAX_ARENA_RECORD_PAYLOAD_BYTES:
        return Mismatch("out-of-bounds", "the payload of %d bytes is over the %d bytes a reader copies (MAX_ARENA_RECORD_PAYLOAD_BYTES); map the arena to read it"
                        % (header.payload_length, MAX_ARENA_RECORD_PAYLOAD_BYTES))
    payload = _pread_fully(fd, header.payload_length, start)
    if len(payload) < header.payload_length:
        return Mismatch("out-of-bounds", "%s ended after %d of %d payload bytes" % (path, len(payload), header.payload_length))
    return ArenaRecord(header, payload), payload


def _read_record(
    table_name: str,
    key: object,
    meta: object,
    root: str,
    verify_checksum: object,
    read: "Callable[[int, RecordHeader, int, str], Union[Tuple[T, Any], Mismatch]]",
) -> "Union[T, Mismatch]":
    """What both readers share: the arguments checked before the file is opened, the arena opened
    as a regular file, its header read and checked against the key and meta, the payload's bounds
    against the file's size; then ``read(fd, header, payload offset, path)`` takes the payload (a
    new buffer, or the caller's) and returns (the result, the payload's bytes where they landed),
    whose checksum is checked there unless ``verify_checksum`` is False."""
    digest = _digest("key", key)
    location, size, checksum = _meta(meta, True)
    if type(verify_checksum) is not bool:
        raise invalid("verify_checksum", "a bool", verify_checksum)
    arena, offset = split_location(location)  # type: ignore[arg-type]
    path = arena_path(table_name, arena, root)
    opened = _open_arena(arena, path)
    if isinstance(opened, Mismatch):
        return opened
    fd, file_size = opened
    try:
        if offset + ARENA_RECORD_HEADER_BYTES > file_size:
            return Mismatch("out-of-bounds", "no %d-byte header at offset %d of %s (%d bytes)" % (ARENA_RECORD_HEADER_BYTES, offset, path, file_size))
        header = decode_record_header(_pread_fully(fd, ARENA_RECORD_HEADER_BYTES, offset))
        if isinstance(header, Mismatch):
            return header
        wrong = _mismatch(header, digest, size, checksum)
        if wrong is not None:
            return wrong
        start = offset + ARENA_RECORD_HEADER_BYTES
        if start + header.payload_length > file_size:
            return Mismatch("out-of-bounds", "the payload of %d bytes runs past the end of %s (%d bytes)" % (header.payload_length, path, file_size))
        got = read(fd, header, start, path)
        if isinstance(got, Mismatch):
            return got
        result, payload = got
        if verify_checksum:
            actual = record_checksum(payload)
            if actual != header.checksum:
                return Mismatch("corrupt-payload", "the payload's checksum is %d, its header says %d" % (actual, header.checksum))
        return result
    except OSError as error:
        # A read the kernel refuses (EIO from a damaged device) is the file's doing, not the caller's.
        return Mismatch("no-arena", "arena %d (%s) cannot be read: %s" % (arena, path, error.strerror))
    finally:
        os.close(fd)


# --- The arena directory under the lease table's trust rules ------------------------------------
#
# Readers load whatever bytes an arena file holds at a published location, so whoever may write the
# directory or its files can make them load bytes of their own choosing, as whoever may write a
# table file can rewrite what consumers pin. A producer writes into an arena directory only when
# the table's rule for its file holds for the directory and every file in it: a directory (not a
# link) owned by this process's effective uid (or the trusted one) that neither group nor others
# may write unless trusted, in a root no one else can rename it out of (Node: lib/lease-table/arena-directory.ts).


class _Trust(NamedTuple):
    uid: Optional[int]
    group_writable: bool
    world_writable: bool


def _trust(trust_uid: object, trust_group_writable: object, trust_world_writable: object) -> _Trust:
    if trust_uid is not None and not is_u32(trust_uid):
        raise invalid("trust_uid", "a uid (an int in [0, 2^32-1]) or None", trust_uid)
    for field, value in (("trust_group_writable", trust_group_writable), ("trust_world_writable", trust_world_writable)):
        if type(value) is not bool:
            raise invalid(field, "a bool", value)
    return _Trust(trust_uid, trust_group_writable, trust_world_writable)  # type: ignore[arg-type]


def _untrusted_write_bits(mode: int, trust: _Trust) -> int:
    bits = mode & 0o022
    if trust.group_writable:
        bits &= ~0o020
    if trust.world_writable:
        bits &= ~0o002
    return bits


def _owner_trusted(uid: int, trust: _Trust) -> bool:
    return uid == os.geteuid() or (trust.uid is not None and uid == trust.uid)


def _untrusted(path: str, found: str, trust: _Trust) -> WaitprepError:
    owners = ["uid %d (this process)" % os.geteuid()] + (["uid %d (trust_uid)" % trust.uid] if trust.uid is not None else [])
    writers = ["the owner"] + (["the group"] if trust.group_writable else []) + (["others"] if trust.world_writable else [])
    return WaitprepError(
        "ERR_UNTRUSTED_ARENA",
        "refusing an untrusted arena: %s %s; an arena directory and its files are trusted when they are a directory and regular "
        "files (no links) owned by %s that only %s may write, in a root owned by uid 0 or the owner that others may write only "
        "with the sticky bit. Whoever may write an arena can change the bytes readers load; remove it, or pass trust_uid, "
        "trust_group_writable or trust_world_writable if this sharing is intended (docs/arena-records.md)"
        % (path, found, " or ".join(owners), ", ".join(writers)),
    )


def _mode_text(st: os.stat_result) -> str:
    return "owned by uid %d with mode 0o%03o" % (st.st_uid, stat.S_IMODE(st.st_mode))


def _judge(path: str, st: os.stat_result, kind: str, trust: _Trust) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise _untrusted(path, "is a symbolic link (owned by uid %d)" % st.st_uid, trust)
    if not (stat.S_ISDIR(st.st_mode) if kind == "directory" else stat.S_ISREG(st.st_mode)):
        raise _untrusted(path, "is not a %s (%s)" % ("directory" if kind == "directory" else "regular file", _mode_text(st)), trust)
    if not _owner_trusted(st.st_uid, trust) or _untrusted_write_bits(st.st_mode, trust):
        raise _untrusted(path, "is %s" % _mode_text(st), trust)


def _judge_root(root: str, trust: _Trust) -> None:
    """The root must keep others from renaming the arena directory away and putting their own in its
    place: owned by uid 0 or a trusted owner, writable by others only with the sticky bit."""
    st = os.stat(root)
    if not stat.S_ISDIR(st.st_mode):
        raise _untrusted(root, "(the arena root) is not a directory (%s)" % _mode_text(st), trust)
    owner = st.st_uid == 0 or _owner_trusted(st.st_uid, trust)
    if not owner or (_untrusted_write_bits(st.st_mode, trust) and not st.st_mode & stat.S_ISVTX):
        raise _untrusted(root, "(the arena root) is %s: someone else could replace the arena directory in it" % _mode_text(st), trust)


def _check(directory: str, root: str, trust: _Trust) -> bool:
    try:
        _judge_root(root, trust)
        st = os.lstat(directory)
    except FileNotFoundError:
        return False
    _judge(directory, st, "directory", trust)
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        try:
            entry = os.lstat(path)
        except FileNotFoundError:
            continue  # removed meanwhile
        _judge(path, entry, "file", trust)
    return True


def _system_error(directory: str, error: OSError) -> WaitprepError:
    denied = error.errno in (errno.EACCES, errno.EPERM)
    return WaitprepError(
        "ERR_PERMISSION_DENIED" if denied else "ERR_SYSTEM",
        with_errno("arena directory %s: %s failed" % (directory, error.filename or "a system call"), error.errno or 0),
        errno=error.errno or 0,
    )


def check_arena_directory(
    table_name: str,
    root: str = DEFAULT_ARENA_ROOT,
    *,
    trust_uid: Optional[int] = None,
    trust_group_writable: bool = False,
    trust_world_writable: bool = False,
) -> bool:
    """Whether table ``table_name``'s arena directory (``<root>/<table_name>-arena``) exists: False
    when it does not, True when it does and it, every entry in it and its root pass the lease
    table's trust rules (a directory and regular files, no links, owned by this process's effective
    uid or ``trust_uid``, that neither group nor others may write unless ``trust_group_writable`` /
    ``trust_world_writable``; a root owned by uid 0 or the owner, writable by others only with the
    sticky bit). Raises ``ERR_UNTRUSTED_ARENA`` naming what it found otherwise, and
    ``ERR_INVALID_ARGUMENT`` for a malformed argument (Node: ``checkArenaDirectory``)."""
    directory = arena_directory(table_name, root)
    trust = _trust(trust_uid, trust_group_writable, trust_world_writable)
    try:
        return _check(directory, _root(root), trust)
    except OSError as error:
        raise _system_error(directory, error) from error


def ensure_arena_directory(
    table_name: str,
    root: str = DEFAULT_ARENA_ROOT,
    *,
    mode: int = 0o755,
    trust_uid: Optional[int] = None,
    trust_group_writable: bool = False,
    trust_world_writable: bool = False,
) -> str:
    """Table ``table_name``'s arena directory, created (with ``mode``, and the root if it is
    missing) when absent, and checked as :func:`check_arena_directory` checks it either way: what a
    producer calls before it writes its first arena. Returns its path. ``ERR_UNTRUSTED_ARENA`` for
    an existing directory the table's rules do not trust (never taken over), ``ERR_INVALID_ARGUMENT``
    for a malformed argument or a mode others could write (Node: ``ensureArenaDirectory``)."""
    directory = arena_directory(table_name, root)
    trust = _trust(trust_uid, trust_group_writable, trust_world_writable)
    if not int_in(mode, 0o700, 0o777):
        raise invalid("mode", "a permission mode in [0o700, 0o777] (the owner needs rwx)", mode)
    if _untrusted_write_bits(mode, trust):  # type: ignore[arg-type]
        raise invalid("mode", "a mode that lets only the owner write, unless trust_group_writable / trust_world_writable accept those bits", mode)
    base = _root(root)
    try:
        os.makedirs(base, exist_ok=True)
        _judge_root(base, trust)  # before anything is created in it
        try:
            # Not makedirs: an existing directory is judged below, never adopted silently.
            os.mkdir(directory, mode)  # type: ignore[arg-type]
        except FileExistsError:
            pass
        if not _check(directory, base, trust):
            raise WaitprepError("ERR_UNTRUSTED_ARENA", "refusing an untrusted arena: %s disappeared as it was created" % directory)
    except OSError as error:
        raise _system_error(directory, error) from error
    return directory
# Reading into a caller's buffer lives in its own module, which builds on the checks above.
from ._arena_into import read_arena_record_into  # noqa: E402
