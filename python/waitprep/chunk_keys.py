"""Chained chunk keys (docs/engine-keys.md): the key form of engines that address KV as fixed-size
chunks (LMCache chunks, vLLM blocks, SGLang pages) under chained hashes.

Each chunk is an ordinary WPK1 artifact key (docs/key-encoding.md) whose ``tokenLayout`` holds only
that chunk's tokens and whose ``source.extra["waitprep.parent"]`` is its parent chunk's digest in hex
(``""`` for the first chunk). The digest of chunk i therefore identifies the whole prefix up to and
including chunk i, while the key holds one chunk of tokens at most. A :class:`ChunkChain` is one
session's chain: it keeps the last digest, the digest list and the unfinished tail (fewer than
``chunk_tokens`` tokens), so the next turn hashes only its own tokens.

The bytes are the same as Node's ``ChunkChain`` (lib/keys/chunk-keys.ts) writes, checked by the shared
vectors in test/vectors/chunk-keys.json. Standard library only.
"""

from __future__ import annotations

import hashlib
import struct
import sys
from array import array
from collections.abc import Mapping as _Mapping, Set as _Set
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from ._ints import U32_MAX, int_in, is_int, is_u64
from .errors import WaitprepError, invalid
from .key import InvalidKeyError

__all__ = [
    "CHUNK_PARENT_FIELD",
    "MANIFEST_FIELD",
    "RESERVED_EXTRA_PREFIX",
    "MAX_CHUNK_TOKENS",
    "Profile",
    "chunk_profile",
    "ChunkKey",
    "ManifestKey",
    "ChunkChain",
    "chunk_keys",
    "manifest_key",
]

#: The ``source.extra`` name that holds a chunk's parent digest (64 lowercase hex; "" for the first chunk).
CHUNK_PARENT_FIELD = "waitprep.parent"
#: The ``source.extra`` name that marks a manifest key; its value is the decimal chunk count.
MANIFEST_FIELD = "waitprep.manifest"
#: ``source.extra`` names starting with this are the package's own; a caller's extra may not use them.
RESERVED_EXTRA_PREFIX = "waitprep."
#: The largest ``chunk_tokens`` a chain takes (2**20).
MAX_CHUNK_TOKENS = 1 << 20

_MAGIC = b"WPK1"
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_TP_MAX = 65536
_PROFILE_WORD_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:+-/")
_BIG_ENDIAN = sys.byteorder == "big"
# Tokens are packed with array("I"): the encoding needs it to be 4 bytes.
assert array("I").itemsize == 4, "array('I') is not 4 bytes on this platform"
_TOKEN_TAG = b"\x09"
_EXTRA_TAG = b"\x0a"
_PARENT_NAME = CHUNK_PARENT_FIELD.encode("ascii")
_MANIFEST_NAME = MANIFEST_FIELD.encode("ascii")

Tokens = Union[Sequence[int], array, memoryview]


class Profile(NamedTuple):
    """The parts of the KV profile: what makes two engines' bytes for the same tokens differ."""

    dtype: str
    layout: str
    tp_degree: int
    rank: int


def chunk_profile(profile: Union[Profile, Mapping[str, object]]) -> str:
    """The canonical ``source.profile`` string: ``dtype=<dtype>,layout=<layout>,tp=<tp_degree>,rank=<rank>``.

    ``profile`` is a :class:`Profile` or a mapping with the keys ``dtype``, ``layout``, ``tp_degree``
    and ``rank``. Raises :class:`WaitprepError` ``ERR_INVALID_ARGUMENT`` naming ``profile.<part>``.
    """
    if isinstance(profile, Profile):
        parts = profile._asdict()
    elif isinstance(profile, Mapping):
        parts = dict(profile)
        for name in parts:
            if name not in Profile._fields:
                raise invalid("profile." + str(name), "absent (unknown option; known options: %s)" % ", ".join(Profile._fields), parts[name])
    else:
        raise invalid("profile", "a Profile(dtype, layout, tp_degree, rank)", profile)
    words = {}
    for name in ("dtype", "layout"):
        value = parts.get(name)
        if not isinstance(value, str) or not 1 <= len(value) <= 64 or not set(value) <= _PROFILE_WORD_CHARS:
            raise invalid("profile." + name, "1-64 of A-Z a-z 0-9 _ . : + - /", value)
        words[name] = value
    tp = parts.get("tp_degree")
    if not int_in(tp, 1, _TP_MAX):
        raise invalid("profile.tp_degree", "an integer in [1, %d]" % _TP_MAX, tp)
    rank = parts.get("rank")
    if not is_int(rank) or not 0 <= rank < tp:  # type: ignore[operator]
        raise invalid("profile.rank", "an integer in [0, %d] (below tp_degree)" % (tp - 1), rank)  # type: ignore[operator]
    return "dtype=%s,layout=%s,tp=%d,rank=%d" % (words["dtype"], words["layout"], tp, rank)


def _key_string(field: str, value: object, allow_empty: bool = False) -> bytes:
    if not isinstance(value, str) or (not allow_empty and value == ""):
        raise InvalidKeyError(field, "a string" if allow_empty else "a non-empty string", value)
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidKeyError(field, "well-formed Unicode (no lone surrogate)", value) from None


def _key_u64(field: str, value: object) -> int:
    if not is_u64(value):
        raise InvalidKeyError(field, "a non-negative integer (at most 2^64-1)", value)
    return value  # type: ignore[return-value]


def _field(tag: int, payload: bytes) -> bytes:
    return bytes((tag,)) + _U32.pack(len(payload)) + payload


def _entry(name: bytes, value: bytes) -> bytes:
    return _U32.pack(len(name)) + name + _U32.pack(len(value)) + value


class _Template:
    """The session-wide parts of every chunk encoding: everything but the tokens and the parent."""

    __slots__ = ("head", "tail", "entries", "before", "after")

    def __init__(self, head: bytes, tail: bytes, entries: List[Tuple[bytes, bytes]]) -> None:
        self.head = head
        self.tail = tail
        #: The caller's extra entries as (name, value) UTF-8 bytes, sorted by name bytes.
        self.entries = entries
        self.before = b"".join(_entry(n, v) for n, v in entries if n < _PARENT_NAME) + _U32.pack(len(_PARENT_NAME)) + _PARENT_NAME
        self.after = b"".join(_entry(n, v) for n, v in entries if n > _PARENT_NAME)

    def encode(self, token_bytes: Union[bytes, memoryview], parent_hex: bytes) -> bytes:
        extra_length = len(self.before) + 4 + len(parent_hex) + len(self.after)
        return b"".join((
            self.head, _TOKEN_TAG, _U32.pack(len(token_bytes)), token_bytes,
            _EXTRA_TAG, _U32.pack(extra_length), self.before, _U32.pack(len(parent_hex)), parent_hex, self.after,
            self.tail,
        ))


class ChunkKey:
    """One chunk's key: its digest, its place in the chain and its canonical WPK1 encoding.

    It holds the chunk's own tokens (inside ``encoding``) and nothing of the prefix but the parent's
    digest. ``digest`` is what the lease table takes.
    """

    __slots__ = ("index", "token_count", "partial", "parent_hex", "digest", "hex", "encoding", "_template")

    def __init__(self, index: int, token_count: int, partial: bool, parent_hex: str, encoding: bytes, template: _Template) -> None:
        #: The chunk's position in its chain: 0 for the first.
        self.index = index
        #: Tokens in this chunk: chunk_tokens, or fewer for a partial tail.
        self.token_count = token_count
        #: True for a tail a later turn may still extend.
        self.partial = partial
        #: The parent chunk's digest in hex; "" for the first chunk.
        self.parent_hex = parent_hex
        #: The canonical WPK1 encoding (the key's wire form, as Node's key.toBytes()).
        self.encoding = encoding
        #: SHA-256 of the encoding: 32 bytes, the key's identity.
        self.digest = hashlib.sha256(encoding).digest()
        self.hex = self.digest.hex()
        self._template = template

    def tokens(self) -> List[int]:
        """The chunk's tokens, read back from its encoding."""
        start = len(self._template.head) + 5
        out = array("I")
        out.frombytes(self.encoding[start:start + 4 * self.token_count])
        if _BIG_ENDIAN:
            out.byteswap()
        return out.tolist()

    def __repr__(self) -> str:
        return "<ChunkKey #%d %s… %d tokens%s>" % (self.index, self.hex[:16], self.token_count, " partial" if self.partial else "")


class ManifestKey:
    """A manifest's key (docs/engine-keys.md#manifests): its digest, encoding and chunk count."""

    __slots__ = ("chunk_count", "digest", "hex", "encoding")

    def __init__(self, chunk_count: int, encoding: bytes) -> None:
        self.chunk_count = chunk_count
        self.encoding = encoding
        self.digest = hashlib.sha256(encoding).digest()
        self.hex = self.digest.hex()

    def __repr__(self) -> str:
        return "<ManifestKey %s… %d chunks>" % (self.hex[:16], self.chunk_count)


def _token_bytes(tokens: Tokens) -> bytes:
    """uint32 little-endian bytes of ``tokens``; ERR_INVALID_KEY naming ``tokens[i]`` for a bad one.

    An ``array('I')`` or a one-dimensional uint32 memoryview (``memoryview(numpy_uint32_array)``)
    is taken as its bytes, without a pass over the tokens."""
    if isinstance(tokens, memoryview) and tokens.ndim == 1 and tokens.format in ("I", "@I", "=I", "<I") and tokens.itemsize == 4:
        if tokens.format == "<I" or not _BIG_ENDIAN:
            return tokens.tobytes()
        swapped = array("I", tokens.tobytes())
        swapped.byteswap()
        return swapped.tobytes()
    if isinstance(tokens, array) and tokens.itemsize == 4 and tokens.typecode in ("I", "L"):
        packed = tokens
    else:
        kind = type(tokens)
        # A mapping or a set is not a token sequence (a set has no order; a dict would give its keys).
        if kind is not list and kind is not tuple and (isinstance(tokens, (str, bytes, bytearray, _Mapping, _Set)) or not hasattr(tokens, "__len__")):
            raise InvalidKeyError("tokens", "a sequence of integers in [0, 2^32-1] (a list, tuple or array('I'))", tokens)
        try:
            packed = array("I", tokens)
        except (OverflowError, TypeError):
            packed = None
        # array() takes a bool for 1 or 0: one pass over the element types (C loops, no Python
        # per token) finds one, and only then are the tokens walked to name it.
        if packed is None or bool in set(map(type, tokens)):
            for i, token in enumerate(tokens):
                if type(token) is bool or not isinstance(token, int) or not 0 <= token <= U32_MAX:
                    raise InvalidKeyError("tokens[%d]" % i, "an integer token in [0, 2^32-1] (not a bool)", token) from None
            packed = array("I", tokens)
    if _BIG_ENDIAN:
        packed = array("I", packed)
        packed.byteswap()
    return packed.tobytes()


class ChunkChain:
    """One session's chain of chunk keys.

    :meth:`extend` takes the session's tokens turn by turn and returns the keys of the chunks they
    complete; the unfinished tail waits for the next turn (:meth:`partial` keys it as it stands).
    The chain keeps the last digest, the digest list (32 bytes a chunk, for manifests) and at most
    ``chunk_tokens - 1`` pending tokens: never the prefix's tokens.

    Keyword arguments are the WPK1 source and key fields (docs/key-encoding.md) in snake_case;
    ``profile`` is a :class:`Profile`. Raises :class:`WaitprepError`: ``ERR_INVALID_ARGUMENT`` for
    ``chunk_tokens``, ``profile.*`` and a reserved ``extra`` name, ``ERR_INVALID_KEY`` naming the key
    field (``source.model``) for a value the key encoding refuses.
    """

    def __init__(
        self,
        *,
        runtime: str,
        model: str,
        profile: Union[Profile, Mapping[str, object]],
        task: str,
        namespace: str,
        chunk_tokens: int,
        adapter: str = "none",
        snapshot_kind: str = "kv-chunk",
        position_policy: str = "absolute",
        extra: Optional[Mapping[str, str]] = None,
        source_page_generation: int = 0,
        codec: str = "none",
        codec_config: str = "none",
        representation_version: int = 1,
    ) -> None:
        if not int_in(chunk_tokens, 1, MAX_CHUNK_TOKENS):
            raise invalid("chunk_tokens", "an integer in [1, %d]" % MAX_CHUNK_TOKENS, chunk_tokens)
        self.chunk_tokens = chunk_tokens
        #: The ``source.profile`` string every chunk carries (:func:`chunk_profile`).
        self.profile = chunk_profile(profile)
        if extra is not None and not isinstance(extra, Mapping):
            raise invalid("extra", "a mapping of str -> str", extra)
        for name in (extra or {}):
            if isinstance(name, str) and name.startswith(RESERVED_EXTRA_PREFIX):
                raise invalid("extra." + name, 'absent (names starting with "%s" are the package\'s own)' % RESERVED_EXTRA_PREFIX, extra[name])  # type: ignore[index]
        # Checked in the encoding's field order, so the first bad field is the one Node names too.
        strings = (
            (1, "source.snapshotKind", snapshot_kind), (2, "source.runtime", runtime), (3, "source.model", model),
            (4, "source.adapter", adapter), (5, "source.profile", self.profile), (6, "source.positionPolicy", position_policy),
            (7, "source.task", task), (8, "source.namespace", namespace),
        )
        head = [_MAGIC] + [_field(tag, _key_string(field, value)) for tag, field, value in strings]
        entries = []
        for name, value in (extra or {}).items():
            entries.append((_key_string("source.extra (a name)", name), _key_string("source.extra." + str(name), value, True)))
        entries.sort(key=lambda entry: entry[0])
        tail = b"".join((
            _field(0x0B, _U64.pack(_key_u64("sourcePageGeneration", source_page_generation))),
            _field(0x0C, _key_string("codec", codec)),
            _field(0x0D, _key_string("codecConfig", codec_config)),
            _field(0x0E, _U64.pack(_key_u64("representationVersion", representation_version))),
        ))
        self._template = _Template(b"".join(head), tail, entries)
        self._pending = array("I")
        self._parent = b""
        self._last = None  # type: Optional[ChunkKey]
        self._digests = []  # type: List[bytes]
        self._hashed = 0

    @property
    def chunks(self) -> int:
        """Full chunks keyed so far."""
        return len(self._digests)

    @property
    def pending_tokens(self) -> int:
        """Tokens waiting for the next turn to complete a chunk: always below chunk_tokens."""
        return len(self._pending)

    @property
    def hashed_tokens(self) -> int:
        """Tokens hashed so far, over every extend and partial: a turn hashes only its new tokens."""
        return self._hashed

    @property
    def last_hex(self) -> str:
        """The last full chunk's digest in hex; "" before the first."""
        return self._parent.decode("ascii")

    @property
    def last(self) -> Optional[ChunkKey]:
        """The last full chunk's key, or None before the first."""
        return self._last

    def digests(self) -> List[bytes]:
        """The full chunks' 32-byte digests, in chain order (a new list)."""
        return list(self._digests)

    def extend(self, tokens: Tokens) -> List[ChunkKey]:
        """Appends a turn's tokens and returns the keys of the chunks they complete, in order.

        Tokens past the last full chunk are kept until the next call. ``tokens`` is a sequence of
        ints in [0, 2**32-1] (a list, or an ``array('I')``); a bad one raises ERR_INVALID_KEY naming
        ``tokens[i]``, and the chain is unchanged then.
        """
        data = _token_bytes(tokens)
        size = 4 * self.chunk_tokens
        out = []
        at = 0
        if self._pending:
            pending = _token_bytes(self._pending)
            take = min(size - len(pending), len(data))
            pending += data[:take]
            at = take
            if len(pending) == size:
                out.append(self._commit(pending))
                self._pending = array("I")
            else:
                self._pending = self._from_bytes(pending)
        view = memoryview(data)
        while len(data) - at >= size:
            out.append(self._commit(view[at:at + size]))
            at += size
        if at < len(data):
            rest = self._from_bytes(data[at:])
            self._pending.extend(rest)
        return out

    def partial(self) -> Optional[ChunkKey]:
        """The key of the pending tail as it stands (chained to the last full chunk), or None.

        Not part of the chain: the next :meth:`extend` may still grow that chunk, and its key will differ.
        """
        if not self._pending:
            return None
        data = _token_bytes(self._pending)
        self._hashed += len(self._pending)
        parent = self._parent
        return ChunkKey(len(self._digests), len(self._pending), True, parent.decode("ascii"), self._template.encode(data, parent), self._template)

    def manifest_key(self) -> ManifestKey:
        """The manifest key of the chain's full chunks so far (see :func:`manifest_key`)."""
        if self._last is None:
            raise WaitprepError("ERR_INVALID_ARGUMENT", "manifest_key(): the chain has no full chunk yet", field="chain")
        return manifest_key(self._last)

    @staticmethod
    def _from_bytes(data: bytes) -> array:
        out = array("I")
        out.frombytes(data)
        if _BIG_ENDIAN:
            out.byteswap()
        return out

    def _commit(self, data: Union[bytes, memoryview]) -> ChunkKey:
        parent = self._parent
        key = ChunkKey(len(self._digests), len(data) // 4, False, parent.decode("ascii"), self._template.encode(data, parent), self._template)
        self._hashed += key.token_count
        self._digests.append(key.digest)
        self._parent = key.hex.encode("ascii")
        self._last = key
        return key


def chunk_keys(tokens: Tokens, **options: object) -> Tuple[List[ChunkKey], Optional[ChunkKey]]:
    """The keys of one prompt without a session: (full chunks, the partial tail's key or None)."""
    chain = ChunkChain(**options)  # type: ignore[arg-type]
    chunks = chain.extend(tokens)
    return chunks, chain.partial()


def manifest_key(last: ChunkKey) -> ManifestKey:
    """The manifest key of the prefix that ends with ``last`` (a full or partial chunk).

    ``last``'s key fields with ``extra["waitprep.manifest"]`` = the chunk count (``last.index + 1``):
    it holds only ``last``'s tokens, its digest identifies the whole prefix through ``last``'s parent
    chain, and the marker keeps it apart from every chunk key.
    """
    if not isinstance(last, ChunkKey):
        raise invalid("last", "a ChunkKey", last)
    t = last._template
    count = last.index + 1
    start = len(t.head) + 5
    token_bytes = last.encoding[start:start + 4 * last.token_count]
    entries = t.entries + [(_PARENT_NAME, last.parent_hex.encode("ascii")), (_MANIFEST_NAME, str(count).encode("ascii"))]
    entries.sort(key=lambda entry: entry[0])
    extra = b"".join(_entry(n, v) for n, v in entries)
    encoding = b"".join((t.head, _field(0x09, token_bytes), _field(0x0A, extra), t.tail))
    return ManifestKey(count, encoding)
