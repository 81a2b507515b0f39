"""waitprep behind LMCache: a storage plugin (``StoragePluginInterface``) whose store is a waitprep
lease table.

Written against ``lmcache/v1/storage_backend/abstract_backend.py`` as of LMCache 0.4 (the
``StoragePluginInterface`` constructor takes ``config``, ``metadata``, ``local_cpu_backend``,
``loop`` and ``dst_device``; ``get_allocator_backend`` is abstract; ``cancel_request``,
``batched_async_contains`` and ``batched_get_non_blocking`` exist; ``submit_prefetch_task`` is gone;
``CacheEngineKey`` lost its ``fmt`` field). Enable it in LMCache's configuration::

    storage_plugins: ["waitprep"]
    extra_config:
      storage_plugin.waitprep.module_path: waitprep.adapters.lmcache
      storage_plugin.waitprep.class_name: WaitprepStoragePlugin
      waitprep.table: engine0-kv
      waitprep.runtime: lmcache/0.4
      waitprep.layout: KV_2LTD
      waitprep.task: default
      waitprep.namespace: default

Importing this module reads ``StoragePluginInterface`` from LMCache and nothing else; without
LMCache it imports, and :class:`WaitprepStoragePlugin` raises ``ERR_ENGINE_UNAVAILABLE`` saying what
is missing. The logic is :class:`LmcacheStorageCore`, which needs no LMCache.

Rules the plugin keeps:

- Pins are counted per key and per request (:class:`KeyPins`). ``contains(key, pin=True)``,
  ``pin`` and ``batched_contains(keys, pin=True)`` take a pin of their own each time (two requests
  sharing a prefix hold two pins); ``batched_async_contains(lookup_id, keys, pin=True)`` takes
  them for ``lookup_id``. ``unpin(key)`` releases one pin on the key; LMCache's storage manager
  calls it for every key on every backend, and a key this plugin holds no pin on answers False
  and releases nothing. ``cancel_request(req_id)`` releases as many pins on each key as that
  request took (LMCache's lookup id is its request id), never more than the key still holds,
  and ``close`` releases everything.
- A read takes a pin of its own for as long as it copies the record into a ``MemoryObj`` from the
  allocator backend (``get_allocator_backend``: the local CPU backend LMCache hands the plugin).
- ``remove`` refuses (False), and so ``batched_remove`` removes nothing: eviction belongs to the
  table's producer, the storage worker, and the table never evicts a pinned artifact. LMCache's
  own remove test expects the key gone after ``remove``; here it stays until the producer evicts it.
- ``batched_submit_put_task`` stores nothing and returns None, and ``exists_in_put_tasks`` is False:
  the engine is not the table's producer.
- Keys: the ``CacheEngineKey``'s model, world size (as the TP degree), worker (as the rank) and
  dtype, the configured layout, task and namespace, and its chunk hash for the token layout.
  LMCache's key carries no task or namespace: one plugin configuration serves one task and
  namespace, and requests of different tasks with the same tokens share artifacts unless they run
  under different configurations.
"""

from __future__ import annotations

import asyncio
import importlib
import threading
from concurrent.futures import Future
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .. import arena as _arena
from ..engine_keys import EngineKeys, lmcache_dtype_name
from ..errors import WaitprepError
from ..table import Lease, open_table
from ._core import AdapterConfig, TableClient, engine_unavailable

__all__ = ["INTERFACE", "ENGINE_AVAILABLE", "KeyPins", "LmcacheStorageCore", "WaitprepStoragePlugin", "settings_from_extra_config"]

#: The interface this module is written against.
INTERFACE = "lmcache.v1.storage_backend.abstract_backend.StoragePluginInterface (LMCache 0.4: abstract get_allocator_backend, cancel_request, coroutines)"
_BASE = "lmcache.v1.storage_backend.abstract_backend"


class KeyPins:
    """The plugin's pins: the leases held on each key, and how many each request took.

    ``unpin`` names no request, so a release cannot be charged to the request it belongs to.
    What is kept instead holds under every order of calls: each key's leases are counted, an
    ``unpin`` closes one of the key's leases, and ``cancel(owner)`` closes as many of each key's
    leases as ``owner`` took there, capped by what the key still holds; a key's request counts are
    dropped when its last lease is closed. A request's flow ends with either its unpins or its
    cancel, and then nothing leaks: after every flow has ended, each key's leases are gone.
    The one cost: a request that is both unpinned and cancelled releases its pins twice, and the
    second release takes another request's pin on the key early; that request's reads still take
    a pin of their own (:meth:`LmcacheStorageCore.read`), so it may miss, never read wrong bytes.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._leases: Dict[bytes, List[Lease]] = {}
        self._taken: Dict[bytes, Dict[str, int]] = {}
        self._held = 0

    def add(self, owner: Optional[str], pinned: Sequence[Tuple[bytes, Lease]]) -> None:
        with self._lock:
            for digest, lease in pinned:
                self._leases.setdefault(digest, []).append(lease)
                if owner is not None:
                    counts = self._taken.setdefault(digest, {})
                    counts[owner] = counts.get(owner, 0) + 1
            self._held += len(pinned)

    def _pop(self, digest: bytes, n: int) -> List[Lease]:
        leases = self._leases.get(digest)
        if not leases:
            return []
        out = leases[-n:]
        del leases[-n:]
        if not leases:
            del self._leases[digest]
            self._taken.pop(digest, None)
        self._held -= len(out)
        return out

    def take_one(self, digest: bytes) -> Optional[Lease]:
        with self._lock:
            out = self._pop(digest, 1)
        return out[0] if out else None

    def take_owner(self, owner: str) -> List[Lease]:
        out: List[Lease] = []
        with self._lock:
            for digest in [d for d, counts in self._taken.items() if owner in counts]:
                n = self._taken[digest].pop(owner)
                out.extend(self._pop(digest, n))
        return out

    def take_all(self) -> List[Lease]:
        with self._lock:
            out = [lease for leases in self._leases.values() for lease in leases]
            self._leases.clear()
            self._taken.clear()
            self._held = 0
        return out

    @property
    def held(self) -> int:
        return self._held


class LmcacheStorageCore:
    """The plugin's logic, with no LMCache: keys are anything with ``model_name``, ``world_size``,
    ``worker_id``, ``chunk_hash`` and ``dtype`` (LMCache's ``CacheEngineKey``). Thread-safe: LMCache
    calls its backends from its own threads and from the event loop it hands them."""

    def __init__(self, table: Any, config: AdapterConfig) -> None:
        self.config = config
        self._layout = config.need("layout")
        self._task = config.need("task")
        self._namespace = config.need("namespace")
        self.client = TableClient(table, config.arena_root, config.verify_checksum)
        self.pins = KeyPins()
        self._keyers: Dict[Tuple[Any, ...], EngineKeys] = {}
        self._lock = threading.Lock()
        #: Counters for monitoring and the tests.
        self.stats: Dict[str, int] = dict.fromkeys(("pins", "pin_misses", "unpins", "unpins_of_nothing", "reads", "read_misses", "removes_refused"), 0)

    @classmethod
    def open(cls, config: AdapterConfig) -> "LmcacheStorageCore":
        """Opens the configured table as a consumer (closed again if the settings are refused)."""
        table = open_table(config.table)
        try:
            return cls(table, config)
        except BaseException:
            table.close()
            raise

    def digest(self, key: Any) -> bytes:
        """The digest of a ``CacheEngineKey``'s artifact."""
        scope = (key.model_name, key.world_size, key.worker_id, str(key.dtype))
        keyer = self._keyers.get(scope)
        if keyer is None:
            keyer = EngineKeys("lmcache", **self.config.key_options(
                model=key.model_name, dtype=lmcache_dtype_name(key.dtype), layout=self._layout, tp_degree=key.world_size,
                rank=key.worker_id, task=self._task, namespace=self._namespace))
            with self._lock:
                keyer = self._keyers.setdefault(scope, keyer)
        return keyer.digest(key.chunk_hash)

    def contains(self, key: Any, pin: bool = False, owner: Optional[str] = None) -> bool:
        digest = self.digest(key)
        if not pin:
            return self.client.peek(digest) == "ready"
        return self._pin(owner, digest)

    def _pin(self, owner: Optional[str], digest: bytes) -> bool:
        got = self.client.pin(digest)
        if isinstance(got, Lease):
            self.pins.add(owner, [(digest, got)])
            self.stats["pins"] += 1
            return True
        self.stats["pin_misses"] += 1
        return False

    def batched_contains(self, keys: Sequence[Any], pin: bool = False, owner: Optional[str] = None) -> int:
        """How many leading keys are ready; with ``pin``, each of them pinned for ``owner``."""
        digests = [self.digest(k) for k in keys]
        if not pin:
            return self.client.leading_ready(digests)
        run = self.client.pin_prefix(digests)
        n = len(run)
        self.pins.add(owner, [(digests[i], run[i]) for i in range(n)])
        self.stats["pins"] += n
        return n

    def pin(self, key: Any, owner: Optional[str] = None) -> bool:
        return self._pin(owner, self.digest(key))

    def unpin(self, key: Any) -> bool:
        """Releases one pin on ``key``; False when this plugin holds none on it."""
        lease = self.pins.take_one(self.digest(key))
        if lease is None:
            self.stats["unpins_of_nothing"] += 1
            return False
        self.stats["unpins"] += 1
        return lease.close()

    def read(self, key: Any, into: Callable[[_arena.RecordHeader], Any]) -> Optional[_arena.RecordHeader]:
        """Pins ``key``'s artifact, reads its record into the buffer ``into(header)`` returns (the
        engine's memory object, sized from the header), and releases the pin: the header, or None
        when the artifact is not ready or its record does not belong."""
        digest = self.digest(key)
        lease = self.client.pin(digest)
        if not isinstance(lease, Lease):
            self.stats["read_misses"] += 1
            return None
        try:
            got = self.client.read_into(digest, lease.meta, into)
        finally:
            lease.close()
        if isinstance(got, _arena.Mismatch):
            self.stats["read_misses"] += 1
            return None
        self.stats["reads"] += 1
        return got

    def cancel(self, owner: str) -> int:
        """Releases, on each key, as many pins as ``owner`` took there (capped by what the key still
        holds); returns how many."""
        return self.client.release(self.pins.take_owner(owner))

    def refuse_remove(self) -> bool:
        self.stats["removes_refused"] += 1
        return False

    @property
    def pins_held(self) -> int:
        return self.pins.held

    def close(self) -> None:
        """Releases every pin and closes the table."""
        self.client.release(self.pins.take_all())
        self.client.table.close()


def settings_from_extra_config(extra_config: Any) -> AdapterConfig:
    """The plugin's settings from LMCache's ``extra_config``: its ``waitprep.<name>`` entries."""
    values = {}
    if isinstance(extra_config, Mapping):
        for name, value in extra_config.items():
            if isinstance(name, str) and name.startswith("waitprep."):
                values[name[len("waitprep."):]] = value
    return AdapterConfig(values, "extra_config.waitprep")


def _memory_format(header: _arena.RecordHeader) -> Any:
    formats = importlib.import_module("lmcache.v1.memory_management").MemoryFormat
    return getattr(formats, header.format, None) or formats.KV_2LTD


def _size(shape: List[int]) -> Any:
    try:
        return importlib.import_module("torch").Size(shape)
    except ImportError:
        return tuple(shape)


try:
    from lmcache.v1.storage_backend.abstract_backend import StoragePluginInterface as _StoragePluginInterface
except Exception as error:  # an absent engine, or one that fails to import
    ENGINE_AVAILABLE = False
    _IMPORT_ERROR: Optional[BaseException] = error

    class WaitprepStoragePlugin:  # type: ignore[no-redef]
        """Stands in for the LMCache plugin when LMCache cannot be imported: using it says why."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise engine_unavailable("waitprep.adapters.lmcache", "LMCache's %s (StoragePluginInterface, LMCache 0.4 or later)" % _BASE, _IMPORT_ERROR)  # type: ignore[arg-type]

else:
    ENGINE_AVAILABLE = True
    _IMPORT_ERROR = None

    class WaitprepStoragePlugin(_StoragePluginInterface):  # type: ignore[no-redef]
        """LMCache's ``StoragePluginInterface`` over a waitprep table (the rules are the module's)."""

        def __init__(self, config: Any = None, metadata: Any = None, local_cpu_backend: Any = None, loop: Any = None, dst_device: str = "cpu") -> None:
            super().__init__(dst_device=dst_device, config=config, metadata=metadata, local_cpu_backend=local_cpu_backend, loop=loop)
            self.core = LmcacheStorageCore.open(settings_from_extra_config(getattr(config, "extra_config", None)))

        def __str__(self) -> str:
            return "WaitprepStoragePlugin"

        def contains(self, key: Any, pin: bool = False) -> bool:
            return self.core.contains(key, pin)

        def batched_contains(self, keys: List[Any], pin: bool = False) -> int:
            return self.core.batched_contains(keys, pin)

        async def batched_async_contains(self, lookup_id: str, keys: List[Any], pin: bool = False) -> int:
            return self.core.batched_contains(keys, pin, owner=lookup_id)

        def pin(self, key: Any) -> bool:
            return self.core.pin(key)

        def unpin(self, key: Any) -> bool:
            return self.core.unpin(key)

        def _memory_obj(self, key: Any, header: _arena.RecordHeader) -> Any:
            """A memory object for ``header``'s record from the allocator backend (its shape LMCache's
            ``kv_shape`` with the record's token count), and the buffer to read it into."""
            shape = list(self.metadata.kv_shape)
            shape[2] = header.token_count
            obj = self.get_allocator_backend().allocate(_size(shape), key.dtype, _memory_format(header))
            if obj is None:
                raise WaitprepError("ERR_NO_SPACE", "WaitprepStoragePlugin: the allocator backend had no room for a %d-byte chunk" % header.payload_length)
            return obj

        def get_blocking(self, key: Any) -> Any:
            made: List[Any] = []

            def into(header: _arena.RecordHeader) -> Any:
                obj = self._memory_obj(key, header)
                made.append(obj)
                return obj.byte_array

            try:
                header = self.core.read(key, into)
            except WaitprepError:
                header = None
            if header is None:
                for obj in made:
                    obj.ref_count_down()
                return None
            return made[0]

        def batched_get_blocking(self, keys: List[Any]) -> List[Any]:
            return [self.get_blocking(key) for key in keys]

        def get_non_blocking(self, key: Any, location: Any = None) -> Optional[Future]:
            obj = self.get_blocking(key)
            if obj is None:
                return None
            future: Future = Future()
            future.set_result(obj)
            return future

        async def batched_get_non_blocking(self, lookup_id: str, keys: List[Any], transfer_spec: Any = None) -> List[Any]:
            objs = await asyncio.get_running_loop().run_in_executor(None, self.batched_get_blocking, keys)
            out: List[Any] = []
            for obj in objs:
                if obj is None:
                    break
                out.append(obj)
            for obj in objs[len(out):]:
                if obj is not None:
                    obj.ref_count_down()
            return out

        def batched_submit_put_task(self, keys: Any, objs: Any, transfer_spec: Any = None, on_complete_callback: Any = None) -> None:
            return None

        async def async_batched_submit_put_task(self, keys: Any, objs: Any, transfer_spec: Any = None, on_complete_callback: Any = None) -> None:
            return None

        def exists_in_put_tasks(self, key: Any) -> bool:
            return False

        def remove(self, key: Any, force: bool = True) -> bool:
            return self.core.refuse_remove()

        def touch_cache(self) -> None:
            return None

        def cancel_request(self, req_id: str) -> None:
            self.core.cancel(req_id)

        def get_allocator_backend(self) -> Any:
            if self.local_cpu_backend is None:
                raise WaitprepError("ERR_CLOSED", "WaitprepStoragePlugin: LMCache handed the plugin no local CPU backend to allocate memory objects from")
            return self.local_cpu_backend

        def close(self) -> None:
            self.core.close()
