"""Handoff tokens: how the client that holds a lease (the Node orchestrator, at wake) names it to
another process (the engine), which pins the same artifact for itself with
``Table.try_pin_exact`` (C ``wp_try_pin_exact``).

The format is the Node package's (lib/lease-table/handoff.ts; docs/lease-table.md, "Handing a
lease to another process")::

    wp1:<table name>:<slot>:<slot generation>:<digest>

slot and generation in decimal without leading zeros, the digest as 64 lowercase hex digits. A
token is a name, not a capability: it grants nothing the table's own access rules do not. The rule
that makes a handoff safe: the handing client keeps its lease until the receiver has its own pin
(``try_pin_exact`` returned a Lease), then closes it.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ._ints import U32_MAX
from .errors import invalid

__all__ = ["HandoffToken", "format_handoff_token", "parse_handoff_token"]

_TOKEN = re.compile(r"wp1:([A-Za-z0-9_-][A-Za-z0-9._-]{0,199}):(0|[1-9][0-9]{0,9}):(0|[1-9][0-9]{0,16}):([0-9a-f]{64})")
_TABLE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}")
_EXPECTED = "a handoff token 'wp1:<table>:<slot>:<generation>:<64 lowercase hex digest>' from lease.handoff_token()"
_GENERATION_LIMIT = 1 << 56


class HandoffToken(NamedTuple):
    """A parsed token: the table's name, the slot, the slot generation and the 32-byte digest."""

    table: str
    slot: int
    generation: int
    digest: bytes

    def __str__(self) -> str:
        return format_handoff_token(*self)


def format_handoff_token(table: str, slot: int, generation: int, digest: bytes) -> str:
    """The token for (table, slot, generation, digest): what ``Lease.handoff_token()`` gives, and
    what Node's ``lease.handoffToken()`` gives for the same lease. ``ERR_INVALID_ARGUMENT`` (field
    ``token``) unless ``table`` is a table name, ``slot`` an int in [0, 2^32-1], ``generation`` an
    int in [0, 2^56) (bools are not ints) and ``digest`` 32 bytes: a token is never written that
    :func:`parse_handoff_token` would refuse."""
    token = checked_token(HandoffToken(table, slot, generation, digest))
    if not _TABLE.fullmatch(token.table):
        raise invalid("token", "a token of a table name (1-200 of A-Z a-z 0-9 . _ -, not starting with a dot)", table)
    return _format(token)


def _format(token: HandoffToken) -> str:
    """The token's text; its fields were checked (or come from a live lease)."""
    return "wp1:%s:%d:%d:%s" % (token.table, token.slot, token.generation, token.digest.hex())


def checked_token(token: HandoffToken) -> HandoffToken:
    """``token`` when its fields have the types and ranges :func:`parse_handoff_token` gives (a str
    table, a u32 slot, a generation below 2^56, 32 bytes of digest; bools are not ints), else
    ``ERR_INVALID_ARGUMENT`` (field ``token``). For a token built by hand; a bytearray or
    memoryview digest is taken as its bytes. The table's name is compared by the table it is
    used on (or checked by :func:`format_handoff_token`)."""
    table, slot, generation, digest = token
    if type(digest) is not bytes and isinstance(digest, (bytearray, memoryview)):
        digest = bytes(digest)
        token = token._replace(digest=digest)
    if not (
        type(slot) is int and type(generation) is int and type(digest) is bytes and type(table) is str
        and 0 <= slot <= U32_MAX and 0 <= generation < _GENERATION_LIMIT and len(digest) == 32
    ):
        raise invalid("token", "a HandoffToken(table: str, slot: int in [0, 2^32-1], generation: int below 2^56, digest: 32 bytes), as parse_handoff_token gives", tuple(token))
    return token


def parse_handoff_token(token: object) -> HandoffToken:
    """Parses a token strictly: exactly the format, a table name, a slot that is a u32, a generation
    below 2^56. Anything else is ``ERR_INVALID_ARGUMENT`` (field ``token``). Whether it is current
    is for the table to say: a stale token parses."""
    match = _TOKEN.fullmatch(token) if isinstance(token, str) else None
    if match is None:
        raise invalid("token", _EXPECTED, token)
    slot, generation = int(match.group(2)), int(match.group(3))
    if slot > U32_MAX or generation >= _GENERATION_LIMIT:
        raise invalid("token", _EXPECTED + ", slot at most 2^32-1 and generation below 2^56", token)
    return HandoffToken(match.group(1), slot, generation, bytes.fromhex(match.group(4)))
