"""Engine keys (docs/engine-keys.md, "Engine keys: keys without tokens"): the waitprep digest of an
artifact computed from nothing but what an engine's storage interface is handed.

No engine hands its storage layer tokens. vLLM's offloading manager gets an ``OffloadKey`` (a block
hash, then the KV-group index as 4 big-endian bytes), SGLang's HiCache storage a page key (a string),
LMCache's storage plugins a ``CacheEngineKey`` (model, world size, worker, an integer chunk hash,
dtype). The engine chains each of those hashes over the prompt's tokens itself, so the hash stands
for the ordered token layout: an engine key is an ordinary WPK1 key whose ``tokenLayout`` is the
single token 0 and whose ``source.extra`` carries ``waitprep.engine`` (the engine's name),
``waitprep.engine-hash`` (its hash as text: a vLLM block hash in lowercase hex, an SGLang page key
as given, an LMCache chunk hash in decimal) and, for vLLM, ``waitprep.kv-group`` (the group index in
decimal). Every other identity field comes from the keyer's options, as a chunk chain writes it.

The bytes are Node's ``EngineKeys`` (lib/keys/engine-keys.ts), checked by the shared vectors in
test/vectors/engine-keys.json. Standard library only.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from ._ints import U32_MAX, int_in, is_int
from .chunk_keys import RESERVED_EXTRA_PREFIX, Profile, _entry, chunk_profile
from .errors import WaitprepError, invalid
from .key import encode as _encode

__all__ = [
    "ENGINE_FIELD",
    "ENGINE_HASH_FIELD",
    "KV_GROUP_FIELD",
    "ENGINES",
    "EngineKeys",
    "vllm_offload_key",
    "split_offload_key",
    "lmcache_dtype_name",
]

#: ``source.extra`` name holding the engine's name.
ENGINE_FIELD = "waitprep.engine"
#: ``source.extra`` name holding the engine's hash as text: what stands for the token layout.
ENGINE_HASH_FIELD = "waitprep.engine-hash"
#: ``source.extra`` name holding a vLLM key's KV-group index, in decimal.
KV_GROUP_FIELD = "waitprep.kv-group"
#: The engines an :class:`EngineKeys` takes keys of.
ENGINES = ("vllm", "sglang", "lmcache")

_U32 = struct.Struct("<I")
_TOKENS_FIELD = b"\x09\x04\x00\x00\x00\x00\x00\x00\x00"  # tag 0x09, length 4, the token 0
_HASH_NAME = _U32.pack(len(ENGINE_HASH_FIELD)) + ENGINE_HASH_FIELD.encode("ascii")
_GROUP_NAME = _U32.pack(len(KV_GROUP_FIELD)) + KV_GROUP_FIELD.encode("ascii")


def _bad_key(expected: str, got: object) -> WaitprepError:
    return invalid("engine_key", expected, got, "ERR_INVALID_KEY")


def split_offload_key(offload_key: Union[bytes, bytearray, memoryview]) -> Tuple[bytes, int]:
    """(block hash, KV-group index) of a vLLM ``OffloadKey``: the block hash followed by the group
    as 4 big-endian bytes (vLLM's ``make_offload_key``). ``ERR_INVALID_KEY`` (``engine_key``) for
    anything shorter than 5 bytes."""
    if not isinstance(offload_key, (bytes, bytearray, memoryview)) or len(offload_key) < 5:
        raise _bad_key("a vLLM OffloadKey: a block hash of at least 1 byte, then the KV-group index as 4 big-endian bytes", offload_key)
    data = bytes(offload_key)
    return data[:-4], int.from_bytes(data[-4:], "big")


def vllm_offload_key(block_hash: bytes, group: int) -> bytes:
    """vLLM's ``make_offload_key(block_hash, group_idx)``: the block hash, then the group as 4 big-endian bytes."""
    if not isinstance(block_hash, (bytes, bytearray)) or not block_hash:
        raise invalid("block_hash", "non-empty bytes", block_hash)
    if not int_in(group, 0, U32_MAX):
        raise invalid("group", "an integer in [0, 2^32-1]", group)
    return bytes(block_hash) + group.to_bytes(4, "big")


def lmcache_dtype_name(dtype: object) -> str:
    """The profile's dtype word for an LMCache key's ``dtype``: ``str(dtype)`` without a leading
    ``torch.`` (``torch.bfloat16`` -> ``bfloat16``); a string is taken as given."""
    text = dtype if isinstance(dtype, str) else str(dtype)
    return text[6:] if text.startswith("torch.") else text


class EngineKeys:
    """One engine deployment's keyer: turns each storage key its engine hands it into the 32-byte
    digest a producer publishes under and a consumer pins.

    ``engine`` is ``'vllm'``, ``'sglang'`` or ``'lmcache'``. The keyword options are a chunk chain's
    (:class:`waitprep.chunk_keys.ChunkChain`) without ``chunk_tokens``, plus
    ``shared_across_ranks``: True when every tensor-parallel rank holds the same bytes (MLA's latent
    KV); the profile is then written with TP degree 1 and rank 0, the bytes an unsharded engine
    holds, so every rank computes one digest. The options are checked once: ``ERR_INVALID_ARGUMENT``
    for ``engine``, ``profile.*``, ``shared_across_ranks`` and a reserved ``extra`` name,
    ``ERR_INVALID_KEY`` naming the key field (``source.task``) for a value the encoding refuses.

    :meth:`digest` is safe to call from any number of threads (it keeps no state of its own).
    """

    __slots__ = ("engine", "profile", "_fields", "_head", "_before", "_after", "_tail", "_fixed", "digest")

    def __init__(
        self,
        engine: str,
        *,
        runtime: str,
        model: str,
        profile: Union[Profile, Mapping[str, object]],
        task: str,
        namespace: str,
        adapter: str = "none",
        shared_across_ranks: bool = False,
        snapshot_kind: str = "kv-chunk",
        position_policy: str = "absolute",
        extra: Optional[Mapping[str, str]] = None,
        source_page_generation: int = 0,
        codec: str = "none",
        codec_config: str = "none",
        representation_version: int = 1,
    ) -> None:
        if engine not in ENGINES:
            raise invalid("engine", "'vllm', 'sglang' or 'lmcache'", engine)
        if not isinstance(shared_across_ranks, bool):
            raise invalid("shared_across_ranks", "a bool", shared_across_ranks)
        #: The engine whose keys this keyer takes.
        self.engine = engine
        #: The ``source.profile`` every key carries.
        self.profile = chunk_profile(profile)
        if shared_across_ranks:
            parts = profile._asdict() if isinstance(profile, Profile) else dict(profile)
            self.profile = chunk_profile(dict(parts, tp_degree=1, rank=0))
        if extra is not None and not isinstance(extra, Mapping):
            raise invalid("extra", "a mapping of str -> str", extra)
        for name in (extra or {}):
            if isinstance(name, str) and name.startswith(RESERVED_EXTRA_PREFIX):
                raise invalid("extra." + name, 'absent (names starting with "%s" are the package\'s own)' % RESERVED_EXTRA_PREFIX, extra[name])  # type: ignore[index]
        reserved = {ENGINE_FIELD: engine, ENGINE_HASH_FIELD: "0"}
        if engine == "vllm":
            reserved[KV_GROUP_FIELD] = "0"
        self._fields = {
            "source": {
                "snapshotKind": snapshot_kind, "runtime": runtime, "model": model, "adapter": adapter,
                "profile": self.profile, "positionPolicy": position_policy, "task": task, "namespace": namespace,
                "tokenLayout": [0], "extra": dict(extra or {}, **reserved),
            },
            "sourcePageGeneration": source_page_generation,
            "codec": codec,
            "codecConfig": codec_config,
            "representationVersion": representation_version,
        }  # type: Dict[str, Any]
        # The package's generic encoder judges (and names) every key field as Node's artifactKey does.
        probe = _encode(self._fields)
        # Cut the session-wide bytes out of that encoding, so the bytes a keyer writes are the
        # generic encoder's by construction (checked on the probe below).
        at = 4
        for _ in range(9):
            at += 5 + _U32.unpack_from(probe, at + 1)[0]
        self._head = probe[:at] + b"\x0a"
        self._tail = probe[at + 5 + _U32.unpack_from(probe, at + 1)[0]:]
        # Every reserved name starts with the reserved prefix and no caller name does, so the
        # caller's names sort wholly before or wholly after the reserved block (by UTF-8 bytes).
        first = ENGINE_FIELD.encode("ascii")
        entries = sorted((name.encode("utf-8"), value.encode("utf-8")) for name, value in (extra or {}).items())
        self._before = b"".join(_entry(n, v) for n, v in entries if n < first) + _entry(first, engine.encode("ascii")) + _HASH_NAME
        self._after = b"".join(_entry(n, v) for n, v in entries if n > first)
        self._fixed = len(self._before) + 4 + len(self._after)
        self.digest = {"vllm": self._vllm_digest, "sglang": self._sglang_digest, "lmcache": self._lmcache_digest}[engine]
        if self._assemble(b"0", b"0" if engine == "vllm" else None) != probe:
            raise AssertionError("waitprep internal: engine key template disagrees with waitprep.key.encode")

    # digest(engine_key) -> bytes is bound per engine in __init__ (one attribute read, no dispatch).

    def encoding(self, engine_key: object) -> bytes:
        """The WPK1 encoding of ``engine_key``'s key: what :meth:`digest` is the SHA-256 of."""
        return self._assemble(*self._hash_text(engine_key))

    def fields(self, engine_key: object) -> Dict[str, Any]:
        """The WPK1 fields of ``engine_key``'s key (``waitprep.key.encode`` gives the same bytes)."""
        hash_text, group = self._hash_text(engine_key)
        source = dict(self._fields["source"])
        extra = dict(source["extra"])
        extra[ENGINE_HASH_FIELD] = hash_text.decode("utf-8")
        if group is not None:
            extra[KV_GROUP_FIELD] = group.decode("ascii")
        source["extra"] = extra
        source["tokenLayout"] = [0]
        return dict(self._fields, source=source)

    def _hash_text(self, engine_key: object) -> Tuple[bytes, Optional[bytes]]:
        if self.engine == "vllm":
            block_hash, group = split_offload_key(engine_key)  # type: ignore[arg-type]
            return block_hash.hex().encode("ascii"), str(group).encode("ascii")
        if self.engine == "sglang":
            return self._page_key(engine_key), None
        return self._chunk_hash(engine_key), None

    @staticmethod
    def _page_key(page_key: object) -> bytes:
        if not isinstance(page_key, str) or not page_key:
            raise _bad_key("an SGLang page key: a non-empty, well-formed string", page_key)
        try:
            return page_key.encode("utf-8")
        except UnicodeEncodeError:
            raise _bad_key("an SGLang page key: a non-empty, well-formed string", page_key) from None

    @staticmethod
    def _chunk_hash(chunk_hash: object) -> bytes:
        if is_int(chunk_hash):
            return str(chunk_hash).encode("ascii")
        if isinstance(chunk_hash, str) and chunk_hash != "-0":
            digits = chunk_hash[1:] if chunk_hash.startswith("-") else chunk_hash
            if digits.isascii() and digits.isdigit() and (digits == "0" or digits[0] != "0"):
                return chunk_hash.encode("ascii")
        raise _bad_key("an LMCache chunk hash: an int, or its decimal string", chunk_hash)

    def _assemble(self, hash_text: bytes, group: Optional[bytes]) -> bytes:
        extra_length = self._fixed + len(hash_text)
        if group is None:
            return b"".join((self._head, _U32.pack(extra_length), self._before, _U32.pack(len(hash_text)), hash_text, self._after, self._tail))
        extra_length += len(_GROUP_NAME) + 4 + len(group)
        return b"".join((
            self._head, _U32.pack(extra_length), self._before, _U32.pack(len(hash_text)), hash_text,
            _GROUP_NAME, _U32.pack(len(group)), group, self._after, self._tail,
        ))

    def _vllm_digest(self, offload_key: bytes) -> bytes:
        """The digest of a vLLM ``OffloadKey`` (bytes: block hash, then the group as 4 big-endian bytes)."""
        if type(offload_key) is not bytes or len(offload_key) < 5:
            block_hash, group_index = split_offload_key(offload_key)
            offload_key = block_hash + group_index.to_bytes(4, "big")
        hash_text = offload_key[:-4].hex().encode("ascii")
        group = str(int.from_bytes(offload_key[-4:], "big")).encode("ascii")
        return hashlib.sha256(self._assemble(hash_text, group)).digest()

    def _sglang_digest(self, page_key: str) -> bytes:
        """The digest of an SGLang page key (a non-empty string, taken as given)."""
        return hashlib.sha256(self._assemble(self._page_key(page_key), None)).digest()

    def _lmcache_digest(self, chunk_hash: Union[int, str]) -> bytes:
        """The digest of an LMCache chunk hash (an int, or its decimal string; negative allowed)."""
        return hashlib.sha256(self._assemble(self._chunk_hash(chunk_hash), None)).digest()

    def __repr__(self) -> str:
        return "<EngineKeys %s %s>" % (self.engine, self.profile)
