"""What every adapter shares, free of any engine: its configuration, the table calls it makes, and
the ledger of the pins it holds.

The table calls go through :class:`TableClient` only, a handful of small methods over today's API
(``peek``, ``try_pin``, ``try_pin_prefix``, ``unpin_many``, ``read_arena_record``), so that a
faster call (a batched peek, an index-based run, a read into the caller's buffer) replaces one
method body and no adapter changes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from .. import arena as _arena
from .._ints import is_u64
from ..errors import WaitprepError, invalid
from ..table import Lease, LeaseRun, Table

__all__ = ["AdapterConfig", "TableClient", "PinLedger", "engine_unavailable"]

Buffer = Union[bytearray, memoryview, Any]


def engine_unavailable(module: str, needs: str, error: BaseException) -> WaitprepError:
    """The error an adapter's engine class raises when its engine could not be imported."""
    return WaitprepError(
        "ERR_ENGINE_UNAVAILABLE",
        "%s needs %s, and importing it failed: %s: %s. Install the engine, or use the module's engine-free core class"
        % (module, needs, type(error).__name__, error),
    )


_STRINGS = ("table", "runtime", "model", "dtype", "layout", "adapter", "task", "namespace", "arena_root",
            "snapshot_kind", "position_policy", "codec", "codec_config")
_KNOWN = frozenset(_STRINGS + ("verify_checksum", "events", "source_page_generation", "representation_version", "extra"))


class AdapterConfig:
    """An adapter's settings, read from the engine's own configuration (``waitprep`` in vLLM's
    ``kv_connector_extra_config`` and SGLang's ``--hicache-storage-backend-extra-config``; the
    ``waitprep.*`` entries of LMCache's ``extra_config``). Every name but ``table`` and ``runtime``
    has a default or comes from the engine; docs/integration.md lists which.

    - ``table``: the lease table's name; ``arena_root`` (default ``/dev/shm``) where its arenas are.
    - ``runtime``, ``model``, ``adapter`` (default ``"none"``), ``dtype``, ``layout``, ``task``,
      ``namespace``, ``snapshot_kind``, ``position_policy``, ``codec``, ``codec_config``,
      ``source_page_generation``, ``representation_version``, ``extra``: the key's identity
      (:class:`waitprep.engine_keys.EngineKeys`).
    - ``verify_checksum`` (default True): check each record's payload against its checksum.
    - ``events``: the stored/removed feed's path (default ``<arena_root>/<table>-events``);
      ``False`` for none.
    """

    def __init__(self, values: Mapping[str, Any], where: str = "waitprep") -> None:
        if not isinstance(values, Mapping):
            raise invalid(where, "a mapping of adapter settings", values)
        for name in values:
            if name not in _KNOWN:
                raise invalid("%s.%s" % (where, name), "absent (unknown setting; known: %s)" % ", ".join(sorted(_KNOWN)), values[name])
        self.where = where
        for name in _STRINGS:
            value = values.get(name)
            if value is not None and (not isinstance(value, str) or not value):
                raise invalid("%s.%s" % (where, name), "a non-empty string", value)
        get = values.get
        self.table = self._required(values, "table")
        self.runtime = self._required(values, "runtime")
        self.model: Optional[str] = get("model")
        self.dtype: Optional[str] = get("dtype")
        self.layout: Optional[str] = get("layout")
        self.adapter: str = get("adapter") or "none"
        self.task: Optional[str] = get("task")
        self.namespace: Optional[str] = get("namespace")
        self.arena_root: str = get("arena_root") or _arena.DEFAULT_ARENA_ROOT
        self.snapshot_kind: str = get("snapshot_kind") or "kv-chunk"
        self.position_policy: str = get("position_policy") or "absolute"
        self.codec: str = get("codec") or "none"
        self.codec_config: str = get("codec_config") or "none"
        verify = get("verify_checksum", True)
        if not isinstance(verify, bool):
            raise invalid(where + ".verify_checksum", "a bool", verify)
        self.verify_checksum = verify
        for name in ("source_page_generation", "representation_version"):
            value = get(name, 0 if name == "source_page_generation" else 1)
            if not is_u64(value):
                raise invalid("%s.%s" % (where, name), "an integer in [0, 2^64-1]", value)
            setattr(self, name, value)
        extra = get("extra") or {}
        if not isinstance(extra, Mapping):
            raise invalid(where + ".extra", "a mapping of str -> str", extra)
        self.extra: Dict[str, str] = dict(extra)
        events = get("events")
        if events is not None and events is not False and (not isinstance(events, str) or not events):
            raise invalid(where + ".events", "a path, or False for no feed", events)
        self.events: Union[None, bool, str] = events

    def _required(self, values: Mapping[str, Any], name: str) -> str:
        value = values.get(name)
        if value is None:
            raise invalid("%s.%s" % (self.where, name), "a non-empty string (required)", value)
        return value  # type: ignore[no-any-return]

    def need(self, name: str, value: Optional[str] = None) -> str:
        """``value`` if given (it came from the engine), else the setting ``name``, which must be set."""
        if value is not None:
            return value
        got = getattr(self, name)
        if got is None:
            raise invalid("%s.%s" % (self.where, name), "a non-empty string (required: the engine does not give it)", None)
        return got  # type: ignore[no-any-return]

    def key_options(self, *, model: str, dtype: str, layout: str, tp_degree: int, rank: int, task: str, namespace: str,
                    shared_across_ranks: bool = False, extra: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
        """The keyword options of an :class:`~waitprep.engine_keys.EngineKeys` for these settings."""
        merged = dict(self.extra)
        merged.update(extra or {})
        return dict(
            runtime=self.runtime, model=model, adapter=self.adapter, task=task, namespace=namespace,
            profile={"dtype": dtype, "layout": layout, "tp_degree": tp_degree, "rank": rank},
            shared_across_ranks=shared_across_ranks, snapshot_kind=self.snapshot_kind, position_policy=self.position_policy,
            extra=merged, source_page_generation=self.source_page_generation, codec=self.codec, codec_config=self.codec_config,
            representation_version=self.representation_version,
        )

    def feed_path(self) -> Optional[str]:
        """The event feed's path, or None when the feed is off."""
        from .events import default_feed_path

        if self.events is False:
            return None
        if isinstance(self.events, str):
            return self.events
        return default_feed_path(self.table, self.arena_root)


class TableClient:
    """An adapter's calls on its table: small methods over today's API, one place to make them faster.

    ``table`` is a consumer :class:`~waitprep.Table`, shared by every thread of the adapter.
    """

    __slots__ = ("table", "name", "arena_root", "verify_checksum", "_peek", "_pin")

    def __init__(self, table: Table, arena_root: str = _arena.DEFAULT_ARENA_ROOT, verify_checksum: bool = True) -> None:
        self.table = table
        self.name = table.name
        self.arena_root = arena_root
        self.verify_checksum = verify_checksum
        self._peek = table.peek
        self._pin = table.try_pin

    def peek(self, digest: bytes) -> str:
        """'ready', or why a pin would miss now ('absent', 'preparing', 'evicting', 'table-closed')."""
        return self._peek(digest)

    def leading_ready(self, digests: Sequence[bytes]) -> int:
        """How many leading digests are 'ready' now, without pinning any: one call into the table
        (``peek_prefix``), which stops at the first that is not."""
        return self.table.peek_prefix(digests)

    def pin(self, digest: bytes) -> Union[Lease, str]:
        """A Lease, or the miss reason."""
        return self._pin(digest)

    def pin_exact(self, token: str) -> Union[Lease, str]:
        """This client's own pin on the artifact a handoff token names, or the miss reason."""
        return self.table.try_pin_exact(token)

    def pin_prefix(self, digests: Sequence[bytes]) -> LeaseRun:
        """The longest READY leading run of ``digests``, pinned in one call."""
        return self.table.try_pin_prefix(digests)

    def release(self, leases: List[Lease]) -> int:
        """Closes many leases in one call; returns the pins released."""
        if not leases:
            return 0
        if len(leases) == 1:
            return 1 if leases[0].close() else 0
        return self.table.unpin_many(leases)

    def read(self, digest: bytes, meta: Any) -> Union[_arena.ArenaRecord, _arena.Mismatch]:
        """The record ``meta.location`` names, checked against ``digest`` (hold a pin while reading)."""
        return _arena.read_arena_record(self.name, digest, meta, self.arena_root, self.verify_checksum)

    def read_into(self, digest: bytes, meta: Any, out: Union[Buffer, Callable[[_arena.RecordHeader], Buffer]]) -> Union[_arena.RecordHeader, _arena.Mismatch]:
        """Reads the record's payload into ``out``: a writable buffer, or a function that takes the
        record's header and returns one (to allocate by size). The header, or the Mismatch (a
        buffer too small is ``wrong-size``); nothing is written for a mismatch."""
        record = self.read(digest, meta)
        if isinstance(record, _arena.Mismatch):
            return record
        buffer = out(record.header) if callable(out) else out
        view = memoryview(buffer).cast("B")
        n = len(record.payload)
        if len(view) < n:
            return _arena.Mismatch("wrong-size", "the record's payload is %d bytes, the buffer %d" % (n, len(view)))
        view[:n] = record.payload
        return record.header


class PinLedger:
    """The pins an adapter holds, counted per key and per owner (a request), safe across threads.

    Each pin is one lease of its own, so two owners pinning one key hold two pins, and releasing
    one leaves the other: a key stays pinned exactly while some owner holds it. The engine's
    calls take and give pins through :meth:`add` and :meth:`take`; the leases that come out are
    closed by the caller (outside the lock, in one call for many).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # digest -> [(owner, lease), ...] oldest first
        self._by_key: Dict[bytes, List[Tuple[Optional[str], Lease]]] = {}
        self._held = 0

    def add(self, owner: Optional[str], digest: bytes, lease: Lease) -> None:
        with self._lock:
            self._by_key.setdefault(digest, []).append((owner, lease))
            self._held += 1

    def add_many(self, owner: Optional[str], pinned: Iterable[Tuple[bytes, Lease]]) -> None:
        with self._lock:
            by_key = self._by_key
            n = 0
            for digest, lease in pinned:
                by_key.setdefault(digest, []).append((owner, lease))
                n += 1
            self._held += n

    def take(self, owner: Optional[str], digest: bytes) -> Optional[Lease]:
        """Removes and returns one of ``owner``'s leases on ``digest`` (its newest), or None."""
        with self._lock:
            stack = self._by_key.get(digest)
            if not stack:
                return None
            for i in range(len(stack) - 1, -1, -1):
                if stack[i][0] == owner:
                    lease = stack.pop(i)[1]
                    if not stack:
                        del self._by_key[digest]
                    self._held -= 1
                    return lease
            return None

    def take_many(self, owner: Optional[str], digests: Iterable[bytes]) -> List[Lease]:
        """One of ``owner``'s leases for each digest that has one, removed: for a batch of releases."""
        out = []
        for digest in digests:
            lease = self.take(owner, digest)
            if lease is not None:
                out.append(lease)
        return out

    def take_any(self, digest: bytes, prefer: Optional[str] = None) -> Optional[Lease]:
        """Removes and returns a lease on ``digest``: ``prefer``'s newest if it holds one, else the
        oldest of any owner. For releases that name no owner."""
        lease = self.take(prefer, digest)
        if lease is not None:
            return lease
        with self._lock:
            stack = self._by_key.get(digest)
            if not stack:
                return None
            lease = stack.pop(0)[1]
            if not stack:
                del self._by_key[digest]
            self._held -= 1
            return lease

    def take_owner(self, owner: Optional[str]) -> List[Lease]:
        """Every lease ``owner`` holds, removed."""
        out: List[Lease] = []
        with self._lock:
            for digest in list(self._by_key):
                stack = self._by_key[digest]
                keep = [entry for entry in stack if entry[0] != owner]
                if len(keep) != len(stack):
                    out.extend(lease for o, lease in stack if o == owner)
                    if keep:
                        self._by_key[digest] = keep
                    else:
                        del self._by_key[digest]
            self._held -= len(out)
        return out

    def take_all(self) -> List[Lease]:
        """Every lease, removed."""
        with self._lock:
            out = [lease for stack in self._by_key.values() for _, lease in stack]
            self._by_key.clear()
            self._held = 0
        return out

    def holds(self, digest: bytes, owner: Any = ...) -> bool:
        """True when some owner (or ``owner``, when given) holds a pin on ``digest``."""
        with self._lock:
            stack = self._by_key.get(digest)
            if not stack:
                return False
            return owner is ... or any(o == owner for o, _ in stack)

    @property
    def held(self) -> int:
        """Pins held now."""
        return self._held

    def owners(self) -> Dict[Optional[str], int]:
        """Pins held per owner now."""
        counts: Dict[Optional[str], int] = OrderedDict()
        with self._lock:
            for stack in self._by_key.values():
                for owner, _ in stack:
                    counts[owner] = counts.get(owner, 0) + 1
        return counts
