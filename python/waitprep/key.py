"""The artifact-key encoder (encoding "WPK1"): the same 32-byte digest as Node's ``artifactKey(fields).digest``.

A runtime written in Python builds the digest it reserves, publishes and pins under without Node.
``fields`` has the shape docs/key-encoding.md describes::

    {
        "source": {
            "snapshotKind": str, "runtime": str, "model": str,
            "adapter": str,            # "none" when there is no adapter
            "profile": str, "positionPolicy": str, "task": str, "namespace": str,
            "tokenLayout": [int, ...], # uint32 tokens, ordered, non-empty
            "extra": {str: str},       # optional; empty is the same as absent
        },
        "sourcePageGeneration": int,   # 0 .. 2**64-1
        "codec": str,
        "codecConfig": str,
        "representationVersion": int,  # 0 .. 2**64-1
    }

Validation matches the JavaScript implementation field for field, and fields
are checked in the same order, so both report the same first bad field. Every
rejection raises :class:`InvalidKeyError`: a :class:`~waitprep.WaitprepError` with
code ``'ERR_INVALID_KEY'`` (and a ``ValueError``), whose ``field`` is the dotted
name of the offending field (``"source.task"``, ``"source.tokenLayout[3]"``).
test/vectors/keys.json holds the vectors both languages pass
(python/tests/test_key.py, test/keys/key.test.ts).

Two differences come from the languages, not the format: a JavaScript number
has no integer/float split, so an integral ``float`` is accepted where a
JavaScript number would be (tokens, and generations up to 2**53-1); and a
Python ``str`` holds code points, so any surrogate code point is rejected
(``json.loads`` already joins an escaped surrogate pair into one code point).
"""

from __future__ import annotations

import hashlib
import re
import struct
from array import array
from typing import Any, Dict, List, Mapping, Tuple

from ._ints import U32_MAX, is_u32, is_u64
from .errors import WaitprepError, describe as _describe

__all__ = ["InvalidKeyError", "encode", "digest", "from_json", "MAGIC", "TAGS", "KeyFields"]

#: Key fields as :func:`encode` takes them (see the module's docstring for the shape).
KeyFields = Mapping[str, Any]

#: First bytes of every encoding: "WPK" and the encoding version 1.
MAGIC = b"WPK1"

#: Field tags, in the order the fields are encoded.
TAGS = {
    "snapshotKind": 0x01,
    "runtime": 0x02,
    "model": 0x03,
    "adapter": 0x04,
    "profile": 0x05,
    "positionPolicy": 0x06,
    "task": 0x07,
    "namespace": 0x08,
    "tokenLayout": 0x09,
    "extra": 0x0A,
    "sourcePageGeneration": 0x0B,
    "codec": 0x0C,
    "codecConfig": 0x0D,
    "representationVersion": 0x0E,
}

_SOURCE_STRING_FIELDS = (
    "snapshotKind",
    "runtime",
    "model",
    "adapter",
    "profile",
    "positionPolicy",
    "task",
    "namespace",
)
_SOURCE_FIELDS = frozenset(_SOURCE_STRING_FIELDS + ("tokenLayout", "extra"))
_TOP_FIELDS = frozenset(("source", "sourcePageGeneration", "codec", "codecConfig", "representationVersion"))
_SAFE_MAX = 2**53 - 1
_DECIMAL = re.compile(r"[0-9]+")


class InvalidKeyError(WaitprepError, ValueError):
    """The fields do not make a valid key (code ``'ERR_INVALID_KEY'``); ``field`` names the first bad one."""

    def __init__(self, field: str, expected: str, got: object) -> None:
        super().__init__("ERR_INVALID_KEY", "Expected `%s` to be %s, got %s" % (field, expected, _describe(got)), field=field)


def _identity_string(field: str, value: object, allow_empty: bool = False) -> str:
    if not isinstance(value, str) or (not allow_empty and value == ""):
        raise InvalidKeyError(field, "a string" if allow_empty else "a non-empty string", value)
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in value):
        raise InvalidKeyError(field, "well-formed Unicode (no lone surrogate)", value)
    return value


def _u64(field: str, value: object) -> int:
    if is_u64(value):
        return value  # type: ignore[return-value]
    # An integral float is what a JavaScript number is; it must be a safe integer there.
    if isinstance(value, float) and value.is_integer() and 0 <= value <= _SAFE_MAX:
        return int(value)
    raise InvalidKeyError(field, "a non-negative integer (at most 2^64-1)", value)


def _token_layout(value: object) -> List[int]:
    field = "source.tokenLayout"
    tokens: List[int] = []
    if isinstance(value, array) and value.typecode in ("I", "L"):
        tokens = list(value)
    elif isinstance(value, (list, tuple)):
        for i, token in enumerate(value):
            if isinstance(token, float) and token.is_integer():
                token = int(token)
            if not is_u32(token):
                raise InvalidKeyError("%s[%d]" % (field, i), "an integer token in [0, 2^32-1]", token)
            tokens.append(token)
    else:
        raise InvalidKeyError(field, "a list of non-negative integers", value)
    if not tokens:
        raise InvalidKeyError(field, "a non-empty token layout", value)
    if any(t > U32_MAX for t in tokens):
        raise InvalidKeyError(field, "uint32 tokens", value)
    if len(tokens) * 4 > U32_MAX:
        raise InvalidKeyError(field, "at most 2^30-1 tokens", value)
    return tokens


def _validate(fields: object) -> Dict[str, Any]:
    if not isinstance(fields, dict):
        raise InvalidKeyError("fields", "a dict of key fields", fields)
    for name in fields:
        if name not in _TOP_FIELDS:
            raise InvalidKeyError(name, "absent (unknown key field)", fields[name])
    source = fields.get("source")
    if not isinstance(source, dict):
        raise InvalidKeyError("source", "a dict with the runtime source key", source)
    for name in source:
        if name not in _SOURCE_FIELDS:
            raise InvalidKeyError("source." + str(name), "absent (unknown source field)", source[name])
    strings = {name: _identity_string("source." + name, source.get(name)) for name in _SOURCE_STRING_FIELDS}
    tokens = _token_layout(source.get("tokenLayout"))

    entries: List[Tuple[bytes, bytes]] = []
    if "extra" in source:
        extra = source["extra"]
        if not isinstance(extra, dict):
            raise InvalidKeyError("source.extra", "a dict of str -> str", extra)
        for name, value in extra.items():
            _identity_string("source.extra (a name)", name)
            _identity_string("source.extra." + name, value, allow_empty=True)
            entries.append((name.encode("utf-8"), value.encode("utf-8")))
        # By the UTF-8 bytes of the name, which is Unicode code point order.
        entries.sort(key=lambda entry: entry[0])

    return {
        "strings": strings,
        "tokens": tokens,
        "extra": entries,
        "sourcePageGeneration": _u64("sourcePageGeneration", fields.get("sourcePageGeneration")),
        "codec": _identity_string("codec", fields.get("codec")),
        "codecConfig": _identity_string("codecConfig", fields.get("codecConfig")),
        "representationVersion": _u64("representationVersion", fields.get("representationVersion")),
    }


def _field(tag: int, payload: bytes) -> bytes:
    if len(payload) > U32_MAX:
        raise InvalidKeyError("field 0x%02x" % tag, "at most 2^32-1 encoded bytes", "%d bytes" % len(payload))
    return struct.pack("<BI", tag, len(payload)) + payload


def encode(fields: KeyFields) -> bytes:
    """The canonical "WPK1" encoding of ``fields`` (bytes). Raises InvalidKeyError."""
    v = _validate(fields)
    parts = [MAGIC]
    for name in _SOURCE_STRING_FIELDS:
        parts.append(_field(TAGS[name], v["strings"][name].encode("utf-8")))
    parts.append(_field(TAGS["tokenLayout"], struct.pack("<%dI" % len(v["tokens"]), *v["tokens"])))
    extra = b"".join(
        struct.pack("<I", len(name)) + name + struct.pack("<I", len(value)) + value for name, value in v["extra"]
    )
    parts.append(_field(TAGS["extra"], extra))
    parts.append(_field(TAGS["sourcePageGeneration"], struct.pack("<Q", v["sourcePageGeneration"])))
    parts.append(_field(TAGS["codec"], v["codec"].encode("utf-8")))
    parts.append(_field(TAGS["codecConfig"], v["codecConfig"].encode("utf-8")))
    parts.append(_field(TAGS["representationVersion"], struct.pack("<Q", v["representationVersion"])))
    return b"".join(parts)


def digest(fields: KeyFields) -> bytes:
    """SHA-256 of :func:`encode` (32 bytes): the key's identity."""
    return hashlib.sha256(encode(fields)).digest()


def from_json(fields: Any) -> Any:
    """Key fields as JSON carries them -> fields for :func:`encode`.

    A decimal string in ``sourcePageGeneration`` or ``representationVersion`` stands for an
    integer too large for a JSON number (the package writes u64s that way). Anything else is
    passed through for :func:`encode` to judge.
    """
    if not isinstance(fields, dict):
        return fields
    out = dict(fields)
    for name in ("sourcePageGeneration", "representationVersion"):
        value = out.get(name)
        # Only ASCII decimal digits: int() would also take "1_000", " 7", "+7" and other scripts'
        # digits, and raise ValueError on the rest; anything else is left for encode() to refuse.
        if isinstance(value, str) and _DECIMAL.fullmatch(value):
            out[name] = int(value)
    return out
