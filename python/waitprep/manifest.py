"""Manifests (docs/engine-keys.md#manifests): the complete publishable unit of a chunked request.

A manifest's key identifies the whole prefix (the last chunk's key plus the manifest marker,
:func:`waitprep.chunk_keys.manifest_key`); its bytes list the chunks' digests in order.
:class:`ManifestProducer` is the producer's side over a :class:`waitprep.Table`, with the same
rules as Node's ``ManifestProducer`` (lib/lease-table/manifest-producer.ts):

1. :meth:`ManifestProducer.reserve` pins every listed chunk through the producer's own handle, so a
   chunk that is not READY gives :class:`Incomplete` and nothing is reserved;
   :meth:`ManifestProducer.publish` makes the manifest READY while those pins still hold, then
   releases them.
2. :meth:`ManifestProducer.try_evict` of a chunk first evicts every published manifest that lists
   it. A pinned manifest refuses (``'pinned'``), and then the chunk stays: while a manifest is
   pinned, none of its chunks is evicted.

The rule holds for evictions made through the helper: route every eviction of a chunk through it.
One helper may be used from several threads (a lock keeps each operation whole).
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Sequence as _Sequence
from typing import Dict, List, NamedTuple, Optional, Sequence, Set, Union

from ._ints import is_u64
from .chunk_keys import CHUNK_PARENT_FIELD, ChunkKey, ManifestKey, manifest_key
from .errors import WaitprepError, describe, invalid

__all__ = [
    "MANIFEST_MAGIC",
    "MANIFEST_HEADER_BYTES",
    "DecodedManifest",
    "Incomplete",
    "ManifestReservation",
    "ManifestProducer",
    "encode_manifest",
    "decode_manifest",
]

#: First bytes of a manifest's bytes: "WPM" and the format version 1.
MANIFEST_MAGIC = b"WPM1"
#: Bytes before the digests: magic, u32le chunk count, u64le total tokens.
MANIFEST_HEADER_BYTES = 16
_HEADER = struct.Struct("<4sIQ")
_DIGEST_BYTES = 32


class DecodedManifest(NamedTuple):
    """A manifest's bytes, read back: the chunk digests in chain order and their total token count."""

    digests: List[bytes]
    total_tokens: int


def _is_sequence(value: object) -> bool:
    """A list, tuple or other ordered sequence, not a str or bytes: a mapping or a set has no
    chain order, and an iterator no length."""
    return type(value) is list or type(value) is tuple or (isinstance(value, _Sequence) and not isinstance(value, (str, bytes, bytearray)))


def encode_manifest(digests: Sequence[bytes], total_tokens: int) -> bytes:
    """``WPM1``, the chunk count (u32le), the total tokens (u64le), then each 32-byte digest in order."""
    if not _is_sequence(digests) or not digests or len(digests) > 0xFFFFFFFF:
        raise invalid("digests", "a non-empty sequence of 32-byte digests", digests)
    if not is_u64(total_tokens):
        raise invalid("total_tokens", "a u64", total_tokens)
    for i, digest in enumerate(digests):
        if not isinstance(digest, (bytes, bytearray)) or len(digest) != _DIGEST_BYTES:
            raise invalid("digests[%d]" % i, "32 bytes", digest)
    return _HEADER.pack(MANIFEST_MAGIC, len(digests), total_tokens) + b"".join(bytes(d) for d in digests)


def decode_manifest(data: Union[bytes, bytearray, memoryview]) -> DecodedManifest:
    """Reads a manifest's bytes strictly; ERR_INVALID_ARGUMENT (field ``manifest``) saying what differs."""
    def bad(expected: str, got: str) -> WaitprepError:
        return WaitprepError("ERR_INVALID_ARGUMENT", "Expected the manifest bytes to be %s, got %s" % (expected, got), field="manifest")

    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise bad("bytes, a bytearray or a memoryview", describe(data))
    data = bytes(data)
    if len(data) < MANIFEST_HEADER_BYTES:
        raise bad("at least %d bytes" % MANIFEST_HEADER_BYTES, str(len(data)))
    magic, count, total = _HEADER.unpack_from(data, 0)
    if magic != MANIFEST_MAGIC:
        raise bad("headed by the magic WPM1", magic.hex())
    if count == 0:
        raise bad("a non-zero chunk count", "0")
    want = MANIFEST_HEADER_BYTES + _DIGEST_BYTES * count
    if len(data) != want:
        raise bad("%d bytes long for %d chunks" % (want, count), str(len(data)))
    digests = [data[MANIFEST_HEADER_BYTES + _DIGEST_BYTES * i:MANIFEST_HEADER_BYTES + _DIGEST_BYTES * (i + 1)] for i in range(count)]
    return DecodedManifest(digests, total)


class Incomplete(NamedTuple):
    """A manifest that cannot be published yet: the first listed chunk not READY, and its miss reason."""

    chunk: int
    reason: str


class ManifestReservation:
    """A manifest reserved by :meth:`ManifestProducer.reserve`, to publish or abandon."""

    __slots__ = ("key", "reservation", "bytes", "chunks", "_pins", "_helper")

    def __init__(self, key: ManifestKey, reservation: object, data: bytes, chunks: List[bytes], pins: list, helper: "ManifestProducer") -> None:
        self.key = key
        #: The table's reservation of the manifest's slot.
        self.reservation = reservation
        #: The manifest's bytes (:func:`encode_manifest`): store them, then publish their location.
        self.bytes = data
        #: The listed chunks' digests, in order.
        self.chunks = chunks
        self._pins = pins
        self._helper = helper  # type: Optional[ManifestProducer]


def _chunk_digest(index: int, chunk: object) -> bytes:
    if isinstance(chunk, ChunkKey):
        return chunk.digest
    if isinstance(chunk, (bytes, bytearray)) and len(chunk) == _DIGEST_BYTES:
        return bytes(chunk)
    raise invalid("chunks[%d]" % index, "a ChunkKey or a 32-byte digest", chunk)


class ManifestProducer:
    """The producer's manifest rules over its table (see the module's text). ``table`` is the
    package's :class:`waitprep.Table` opened as the producer, or anything with its ``try_pin``,
    ``reserve``, ``publish``, ``abandon`` and ``try_evict``."""

    def __init__(self, table: object) -> None:
        for name in ("try_pin", "reserve", "publish", "abandon", "try_evict"):
            if not callable(getattr(table, name, None)):
                raise invalid("table", "a waitprep Table opened as the producer", table)
        self.table = table
        self._lock = threading.RLock()
        self._manifests = {}  # type: Dict[bytes, List[bytes]]
        self._listed_by = {}  # type: Dict[bytes, Set[bytes]]

    def reserve(self, manifest: ManifestKey, chunks: Sequence[Union[ChunkKey, bytes]], total_tokens: Optional[int] = None) -> Union[ManifestReservation, Incomplete]:
        """Reserves ``manifest``'s slot once every chunk in ``chunks`` (chain order) is READY.

        Returns the reservation with the manifest's bytes, or :class:`Incomplete` (the first chunk
        not READY and why) with nothing reserved or pinned. ``manifest`` is a
        :class:`~waitprep.chunk_keys.ManifestKey` counting ``len(chunks)`` chunks; when the chunks are
        ChunkKeys they must be one chain from its first chunk, and ``manifest`` the manifest key of
        the prefix they end (ERR_INVALID_ARGUMENT otherwise; bare digests cannot be checked so).
        ``total_tokens`` defaults to the chunks' token counts summed; give it when ``chunks`` are bare
        digests. The table's reserve errors pass through (``ERR_KEY_EXISTS`` for a manifest already
        there).
        """
        if not isinstance(manifest, ManifestKey):
            raise invalid("manifest", "a ManifestKey (waitprep.chunk_keys.manifest_key)", manifest)
        if not _is_sequence(chunks) or not chunks:
            raise invalid("chunks", "a non-empty sequence of the chunks the manifest lists", chunks)
        if manifest.chunk_count != len(chunks):
            raise invalid("chunks", "the %d chunks the manifest key counts" % manifest.chunk_count, "%d chunks" % len(chunks))
        digests = [_chunk_digest(i, chunk) for i, chunk in enumerate(chunks)]
        if all(isinstance(chunk, ChunkKey) for chunk in chunks):
            # The listed digests must be the chain the manifest key names, or a pin of the manifest
            # would promise chunks of some other prefix.
            for i, chunk in enumerate(chunks):
                parent = "" if i == 0 else chunks[i - 1].hex  # type: ignore[union-attr]
                if chunk.parent_hex != parent:  # type: ignore[union-attr]
                    raise invalid("chunks[%d]" % i, "the chain's chunk %d (its %s names the chunk before it)" % (i, CHUNK_PARENT_FIELD), chunk)
            if manifest_key(chunks[-1]).digest != manifest.digest:  # type: ignore[arg-type]
                raise invalid("manifest", "the manifest key of the prefix the chunks end (manifest_key(last chunk))", manifest)
        if total_tokens is None:
            if not all(isinstance(chunk, ChunkKey) for chunk in chunks):
                raise invalid("total_tokens", "given when the chunks are bare digests", None)
            total_tokens = sum(chunk.token_count for chunk in chunks)  # type: ignore[union-attr]
        data = encode_manifest(digests, total_tokens)
        with self._lock:
            pins = []
            for i, digest in enumerate(digests):
                got = self.table.try_pin(digest)  # type: ignore[attr-defined]
                if isinstance(got, str):
                    self._release(pins)
                    return Incomplete(i, got)
                pins.append(got)
            try:
                reservation = self.table.reserve(manifest.digest)  # type: ignore[attr-defined]
            except BaseException:
                self._release(pins)
                raise
            return ManifestReservation(manifest, reservation, data, digests, pins, self)

    def publish(self, reserved: ManifestReservation, size_bytes: int, location: int, checksum: int, codec_id: int, representation_version: int) -> None:
        """Publishes a reserved manifest with its stored bytes' metadata while the chunk pins hold,
        then records what it lists and releases the pins. A refused publish raises and keeps the
        pins until :meth:`abandon`."""
        with self._lock:
            self._check(reserved, "publish")
            self.table.publish(reserved.reservation, size_bytes=size_bytes, location=location, checksum=checksum,  # type: ignore[attr-defined]
                               codec_id=codec_id, representation_version=representation_version)
            reserved._helper = None
            self._manifests[reserved.key.digest] = list(reserved.chunks)
            for digest in reserved.chunks:
                self._listed_by.setdefault(digest, set()).add(reserved.key.digest)
            self._release(reserved._pins)

    def abandon(self, reserved: ManifestReservation) -> None:
        """Gives the manifest's slot back and releases its chunk pins."""
        with self._lock:
            self._check(reserved, "abandon")
            reserved._helper = None
            try:
                self.table.abandon(reserved.reservation)  # type: ignore[attr-defined]
            finally:
                self._release(reserved._pins)

    def try_evict(self, key: Union[ChunkKey, ManifestKey, bytes]) -> str:
        """Evicts ``key`` (a ChunkKey, ManifestKey or 32-byte digest) unless it is pinned, or, for a
        chunk, unless a manifest listing it is pinned: each published manifest listing the chunk is
        evicted first, and the first that refuses (``'pinned'``) keeps the chunk (manifests evicted
        before it stay evicted). ``'evicted'``, ``'pinned'`` or ``'absent'``."""
        if isinstance(key, (ChunkKey, ManifestKey)):
            digest = key.digest
        elif isinstance(key, (bytes, bytearray)) and len(key) == _DIGEST_BYTES:
            digest = bytes(key)
        else:
            raise invalid("key", "a ChunkKey, a ManifestKey or a 32-byte digest", key)
        with self._lock:
            if digest in self._manifests:
                return self._evict_manifest(digest)
            for manifest in list(self._listed_by.get(digest, ())):
                if self._evict_manifest(manifest) == "pinned":
                    return "pinned"
            return self.table.try_evict(digest)  # type: ignore[attr-defined, no-any-return]

    def manifests_listing(self, chunk: Union[ChunkKey, bytes]) -> List[bytes]:
        """The digests of the published manifests that list ``chunk`` (a new list)."""
        digest = _chunk_digest(0, chunk)
        with self._lock:
            return list(self._listed_by.get(digest, ()))

    @property
    def manifests(self) -> int:
        """Published manifests this helper knows."""
        return len(self._manifests)

    def _evict_manifest(self, digest: bytes) -> str:
        result = self.table.try_evict(digest)  # type: ignore[attr-defined]
        if result == "pinned":
            return result  # type: ignore[no-any-return]
        for chunk in self._manifests.pop(digest):
            listing = self._listed_by.get(chunk)
            if listing is not None:
                listing.discard(digest)
                if not listing:
                    del self._listed_by[chunk]
        return result  # type: ignore[no-any-return]

    def _check(self, reserved: object, what: str) -> None:
        if not isinstance(reserved, ManifestReservation) or reserved._helper is not self:
            raise WaitprepError("ERR_STALE_RESERVATION", "%s: not a pending manifest reservation of this helper (published or abandoned already, or another helper's)" % what)

    @staticmethod
    def _release(pins: list) -> None:
        for pin in pins:
            pin.close()
        del pins[:]
