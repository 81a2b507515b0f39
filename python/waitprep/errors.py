"""The package's one exception class, and how a libwaitprep status becomes one."""

from __future__ import annotations

import os
from typing import Optional

__all__ = ["WaitprepError", "describe"]


class WaitprepError(Exception):
    """Every error this package raises. A miss is a value, never an error.

    ``code`` is a stable string, the same one the Node API gives for the same failure
    (``'ERR_TABLE_NOT_FOUND'``, ``'ERR_UNTRUSTED_SEGMENT'``, ``'ERR_INVALID_KEY'``, …): match on
    it, never on the message. ``status`` is the libwaitprep status code behind it (None when the
    error was decided in Python), ``status_name`` its ``wp_status_name`` spelling, ``errno`` the
    system error of a refused or failed system call (0: none), and ``field`` the dotted name of
    the offending argument or key field for ``ERR_INVALID_ARGUMENT`` and ``ERR_INVALID_KEY``.
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: Optional[int] = None,
        status_name: Optional[str] = None,
        errno: int = 0,
        field: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.status_name = status_name
        self.errno = errno
        self.field = field


def describe(value: object) -> str:
    """A value for a message: what came, with its type."""
    if isinstance(value, str):
        shown = value if len(value) <= 60 else value[:60] + "\u2026"
        return "%s (string)" % ascii(shown)
    if value is None:
        return "None"
    if isinstance(value, (bytes, bytearray)) and len(value) > 40:
        return "%d bytes (%s)" % (len(value), type(value).__name__)
    return "%r (%s)" % (value, type(value).__name__)


def invalid(field: str, expected: str, got: object, code: str = "ERR_INVALID_ARGUMENT") -> WaitprepError:
    """``Expected `field` to be <expected>, got <got>``, the Node API's message for the same check."""
    return WaitprepError(code, "Expected `%s` to be %s, got %s" % (field, expected, describe(got)), field=field)


def with_errno(message: str, errno_value: int) -> str:
    return message if errno_value == 0 else "%s (%s)" % (message, os.strerror(errno_value))
