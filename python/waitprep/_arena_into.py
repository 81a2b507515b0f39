"""Reading an arena record's payload into the caller's buffer (``waitprep.arena.read_arena_record_into``).

``read_arena_record`` returns the payload as a new ``bytes``: each read then pays for a fresh
buffer (its page faults) besides the kernel's copy. An engine that reads into memory it keeps (a
pinned host page, a numpy array, an ``mmap``) passes that memory here instead: the kernel copies
the payload straight into it (``preadv``), and the SHA-256 check, optional, reads it there.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from typing import Optional, Tuple, Union

from .arena import DEFAULT_ARENA_ROOT, Mismatch, RecordHeader, _read_record
from .errors import invalid

__all__ = ["read_arena_record_into"]

#: Payloads of at least this many bytes are read in parts by several threads at once: the kernel's
#: copy out of the page cache runs at a fraction of a memcpy on one core, and `preadv` releases the
#: GIL, so parts on other cores overlap. Smaller reads stay on the caller's thread (no hand-off).
PARALLEL_READ_BYTES = 8 << 20
#: The most threads one read uses (also bounded by the CPUs this process may run on).
MAX_READ_THREADS = 4

_pool = None
_pool_lock = threading.Lock()


def _read_threads() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(MAX_READ_THREADS, cpus))


def _forget_pool() -> None:
    # A forked child inherits the pool object but none of its threads (engines fork their workers:
    # vLLM's multiprocessing, for one): its first large read would queue parts nobody runs and
    # wait for ever. The child makes a pool of its own on its first large read instead.
    global _pool
    _pool = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def _executor() -> "concurrent.futures.ThreadPoolExecutor":
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(max_workers=MAX_READ_THREADS, thread_name_prefix="waitprep-read")
        return _pool


def _read_range(fd: int, target: memoryview, offset: int) -> Optional[int]:
    """Fills ``target`` from ``offset`` of ``fd``; the bytes read when the file ended first, else None."""
    done = 0
    while done < len(target):
        # preadv writes into the caller's memory; a short read (a large payload, a signal) goes on.
        got = os.preadv(fd, [target[done:]], offset + done)
        if got == 0:
            return done
        done += got
    return None


def _read_parts(fd: int, target: memoryview, offset: int) -> Optional[int]:
    """Fills ``target`` from ``offset`` of ``fd``, in parts on several threads when it is large;
    None when every byte came, else how many leading bytes are known to have (a lower bound)."""
    length = len(target)
    threads = _read_threads() if length >= PARALLEL_READ_BYTES else 1
    if threads == 1:
        return _read_range(fd, target, offset)
    # Parts on 64 KiB boundaries, so no two threads write one page.
    step = ((length + threads - 1) // threads + 0xFFFF) & ~0xFFFF
    bounds = [(at, min(length, at + step)) for at in range(0, length, step)]
    futures = [_executor().submit(_read_range, fd, target[a:b], offset + a) for a, b in bounds[1:]]
    first = _read_range(fd, target[bounds[0][0]:bounds[0][1]], offset)
    short = None if first is None else first
    for (a, _b), future in zip(bounds[1:], futures):
        got = future.result()
        if got is not None and short is None:
            short = a + got
    return short

_WRITABLE = "a writable, C-contiguous buffer (bytearray, numpy array, mmap, memoryview of one, ...)"


def read_arena_record_into(
    table_name: str,
    key: object,
    meta: object,
    buffer: object,
    root: str = DEFAULT_ARENA_ROOT,
    verify_checksum: bool = True,
) -> Union[RecordHeader, Mismatch]:
    """Reads the record ``meta.location`` names for ``key`` from table ``table_name``'s arenas, as
    :func:`~waitprep.arena.read_arena_record` does, but into ``buffer``: its first
    ``payload_length`` bytes receive the payload, and the record's :class:`RecordHeader` is
    returned (or a :class:`Mismatch`, as there; after a Mismatch the buffer's bytes are
    unspecified). No buffer of the payload's size is made.

    ``buffer``: any writable C-contiguous buffer (``bytearray``, a numpy array, an ``mmap``, a
    ``memoryview`` of one; read as bytes) of at least the payload's length, else
    ``ERR_INVALID_ARGUMENT`` (``meta.size_bytes`` is that length). ``verify_checksum=False`` skips
    the SHA-256 check of the payload (the header, key, size and meta checksum are still checked):
    for a producer trusted to have validated what it published. Hold a pin on the artifact while
    reading.
    """
    try:
        view = memoryview(buffer)  # type: ignore[arg-type]
    except TypeError:
        raise invalid("buffer", _WRITABLE, buffer) from None
    if view.readonly or not view.c_contiguous:
        raise invalid("buffer", _WRITABLE, buffer)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")

    def into(fd: int, header: RecordHeader, start: int, path: str) -> "Union[Tuple[RecordHeader, memoryview], Mismatch]":
        length = header.payload_length
        if length > view.nbytes:
            raise invalid("buffer", "%s of at least the payload's %d bytes" % (_WRITABLE, length), "%d bytes" % view.nbytes)
        target = view[:length]
        short = _read_parts(fd, target, start)
        if short is not None:
            return Mismatch("out-of-bounds", "%s ended after %d of %d payload bytes" % (path, short, length))
        return header, target

    return _read_record(table_name, key, meta, root, verify_checksum, into)
