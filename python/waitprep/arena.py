"""Where an artifact's bytes are (docs/arena-records.md), the same rules as Node's
lib/arena-record.ts.

A lease's ``meta.location`` is one u64: its top 16 bits name an arena, its low 48 bits are the byte
offset of a record in it. Arena ``i`` of table ``T`` is the file ``<root>/T-arena/<i>.wpa`` (root
``/dev/shm``), so a reader holding only the table's name and a lease finds the bytes. Each record
starts with a fixed 96-byte header (magic, the artifact key's digest, payload length, token count,
a short format string, the payload's checksum) that :func:`read_arena_record` checks against the
key and the meta before it hands out the payload. A record that does not belong is a
:class:`Mismatch` value, as a miss is.
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
from typing import NamedTuple, Optional, Union

from ._ints import int_in, is_u64
from .errors import invalid

__all__ = [
    "ARENA_RECORD_MAGIC",
    "ARENA_RECORD_VERSION",
    "ARENA_RECORD_HEADER_BYTES",
    "ARENA_INDEX_BITS",
    "ARENA_OFFSET_BITS",
    "MAX_ARENA_INDEX",
    "MAX_ARENA_OFFSET",
    "DEFAULT_ARENA_ROOT",
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


def record_checksum(payload: Union[bytes, bytearray, memoryview]) -> int:
    """The first 8 bytes of the payload's SHA-256 as a big-endian u64: the record's and the meta's checksum."""
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


def arena_directory(table_name: str, root: str = DEFAULT_ARENA_ROOT) -> str:
    """The directory holding table ``table_name``'s arenas: ``<root>/<table_name>-arena``."""
    if not isinstance(table_name, str) or not _TABLE_NAME.match(table_name):
        raise invalid("table_name", "a lease table name (1-200 of A-Z a-z 0-9 . _ -, not starting with a dot)", table_name)
    return os.path.join(root, table_name + "-arena")


def arena_path(table_name: str, arena: int, root: str = DEFAULT_ARENA_ROOT) -> str:
    """The file of arena ``arena`` of table ``table_name``: ``<root>/<table_name>-arena/<arena>.wpa``."""
    if not int_in(arena, 0, MAX_ARENA_INDEX):
        raise invalid("arena", "an integer in [0, %d]" % MAX_ARENA_INDEX, arena)
    return os.path.join(arena_directory(table_name, root), "%d.wpa" % arena)


def is_arena_file_name(name: str) -> bool:
    """True for a file name the arena rule gives (``<index>.wpa``, decimal, no leading zeros, at most 65535)."""
    return bool(_ARENA_FILE.match(name)) and int(name[:-4]) <= MAX_ARENA_INDEX


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
    payload = bytes(payload)
    header = RecordHeader(_digest("key", key), len(payload), token_count, format, record_checksum(payload))
    return encode_record_header(*header) + payload, header


def decode_record_header(data: Union[bytes, bytearray, memoryview]) -> Union[RecordHeader, Mismatch]:
    """The header's fields, or why the bytes are not a record header of this version."""
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


def _meta_field(meta: object, name: str) -> Optional[int]:
    if meta is None:
        return None
    if isinstance(meta, dict):
        return meta.get(name)  # type: ignore[no-any-return]
    return getattr(meta, name, None)


def check_record_header(header: RecordHeader, key: object, meta: object = None) -> Optional[Mismatch]:
    """Checks a header against the key (a digest, or a key with ``.digest``) and, when given, the
    lease's meta (``size_bytes`` = payload length, ``checksum`` = the header's). None when it belongs."""
    digest = _digest("key", key)
    if header.digest != digest:
        return Mismatch("wrong-key", "the record is for %s, not %s" % (header.digest.hex(), digest.hex()))
    size = _meta_field(meta, "size_bytes")
    if size is not None and size != header.payload_length:
        return Mismatch("wrong-size", "the meta says %d bytes, the record holds %d" % (size, header.payload_length))
    checksum = _meta_field(meta, "checksum")
    if checksum is not None and checksum != header.checksum:
        return Mismatch("wrong-checksum", "the meta's checksum is %d, the record's %d" % (checksum, header.checksum))
    return None


def read_arena_record(table_name: str, key: object, meta: object, root: str = DEFAULT_ARENA_ROOT, verify_checksum: bool = True) -> Union[ArenaRecord, Mismatch]:
    """Reads the record ``meta.location`` names for ``key`` from table ``table_name``'s arenas.

    ``meta`` is a lease's :class:`~waitprep.LeaseMeta` (or anything with ``location`` and, to be
    checked, ``size_bytes`` and ``checksum``; a dict works too). Checks the header, the digest, the
    meta's size and checksum and, unless ``verify_checksum`` is False, the payload's own checksum.
    Hold a pin on the artifact while reading: a record whose artifact was evicted may be gone or
    replaced, which this reports as a :class:`Mismatch`, never returns.
    """
    location = _meta_field(meta, "location")
    arena, offset = split_location(location)  # type: ignore[arg-type]
    path = arena_path(table_name, arena, root)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        return Mismatch("no-arena", "arena %d (%s) cannot be opened: %s" % (arena, path, error.strerror))
    try:
        size = os.fstat(fd).st_size
        if offset + ARENA_RECORD_HEADER_BYTES > size:
            return Mismatch("out-of-bounds", "no %d-byte header at offset %d of %s (%d bytes)" % (ARENA_RECORD_HEADER_BYTES, offset, path, size))
        header = decode_record_header(os.pread(fd, ARENA_RECORD_HEADER_BYTES, offset))
        if isinstance(header, Mismatch):
            return header
        wrong = check_record_header(header, key, meta)
        if wrong is not None:
            return wrong
        start = offset + ARENA_RECORD_HEADER_BYTES
        if start + header.payload_length > size:
            return Mismatch("out-of-bounds", "the payload of %d bytes runs past the end of %s (%d bytes)" % (header.payload_length, path, size))
        parts = []
        done = 0
        while done < header.payload_length:
            chunk = os.pread(fd, header.payload_length - done, start + done)
            if not chunk:
                return Mismatch("out-of-bounds", "%s ended after %d of %d payload bytes" % (path, done, header.payload_length))
            parts.append(chunk)
            done += len(chunk)
        payload = b"".join(parts)
        if verify_checksum and record_checksum(payload) != header.checksum:
            return Mismatch("corrupt-payload", "the payload's checksum is %d, its header says %d" % (record_checksum(payload), header.checksum))
        return ArenaRecord(header, payload)
    finally:
        os.close(fd)


# Reading into a caller's buffer lives in its own module, which builds on the checks above.
from ._arena_into import read_arena_record_into  # noqa: E402
