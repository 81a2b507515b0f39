"""waitprep behind SGLang's HiCache: a dynamic storage backend (``HiCacheStorage``) whose third tier
is a waitprep lease table.

Written against ``python/sglang/srt/mem_cache/hicache_storage.py`` as of SGLang 0.5 (the storage
config carries TP, PP, attention-CP and DP ranks and ``is_mla_model``; ``batch_get_v1`` /
``batch_set_v1`` raise in the base instead of returning None; ``*_v2`` methods serve hybrid pools),
and the dynamic factory in ``storage/backend_factory.py``, which constructs the class as
``cls(storage_config, kwargs)``. Enable it with::

    --enable-hierarchical-cache --hicache-storage-backend dynamic \\
    --hicache-storage-backend-extra-config '{"backend_name": "waitprep",
        "module_path": "waitprep.adapters.sglang", "class_name": "WaitprepHiCacheStorage",
        "waitprep": {"table": "engine0-kv", "runtime": "sglang/0.5", "dtype": "bf16",
                     "layout": "page_first", "task": "default", "namespace": "default"}}'

Importing this module reads ``HiCacheStorage`` from SGLang and nothing else; without SGLang it
imports, and :class:`WaitprepHiCacheStorage` raises ``ERR_ENGINE_UNAVAILABLE`` saying what is
missing. The logic is :class:`SglangStorageCore`, which needs no SGLang.

Rules the backend keeps:

- ``batch_exists`` peeks and pins nothing. It runs on HiCache's prefetch thread; its count is then
  all-reduced across the TP group and compared with the prefetch threshold, and a prefetch below
  it is revoked without the storage layer hearing of it, and ``batch_get_v1`` runs later on
  another thread. A pin taken here would outlive that revoke, so there is none.
- ``batch_get_v1`` pins the leading ready run in one call, reads each pinned page's record into
  its host page, and releases the run before it returns: True for each page read, False from the
  first page it could not pin or whose record did not belong on.
- ``batch_set_v1`` answers False for every key, a list, never None: the engine is not the table's
  producer (the backup thread wraps the answer in ``all(...)``).
- Keys are per rank: each TP rank keys its own bytes (``tp=<size>,rank=<rank>`` in the profile),
  except for MLA models, whose ranks hold the same bytes and share one artifact; pipeline and
  attention context-parallel ranks, when there are several, go into the key's extra entries
  ``sglang.pp`` and ``sglang.cp`` (``<rank>/<size>``), as SGLang's file backend names its files.
- ``batch_exists_v2``, ``batch_get_v2`` and ``batch_set_v2`` (Mamba, SWA, DeepSeek V4 pools beside
  the KV) raise ``ERR_UNSUPPORTED``: a hybrid model's extra pools have no artifacts here.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..engine_keys import EngineKeys
from ..errors import WaitprepError, invalid
from ..table import open_table
from .. import arena as _arena
from ._core import AdapterConfig, TableClient, engine_unavailable

__all__ = ["INTERFACE", "ENGINE_AVAILABLE", "SglangStorageCore", "WaitprepHiCacheStorage"]

#: The interface this module is written against.
INTERFACE = "sglang.srt.mem_cache.hicache_storage.HiCacheStorage (SGLang 0.5: batch_get_v1/batch_set_v1, *_v2 for hybrid pools)"
_BASE = "sglang.srt.mem_cache.hicache_storage"


class SglangStorageCore:
    """The backend's logic, with no SGLang: page keys (strings) in, counts and lists of bools out.

    Thread-safe: HiCache calls ``batch_exists`` from its prefetch thread, ``batch_get_v1`` from its
    prefetch I/O thread and ``batch_set_v1`` from its backup thread, on one backend.
    """

    def __init__(self, table: Any, config: AdapterConfig, *, tp_rank: int = 0, tp_size: int = 1, is_mla_model: bool = False,
                 model_name: Optional[str] = None, pp_rank: int = 0, pp_size: int = 1, cp_rank: int = 0, cp_size: int = 1) -> None:
        self.config = config
        extra: Dict[str, str] = {}
        if pp_size > 1:
            extra["sglang.pp"] = "%d/%d" % (pp_rank, pp_size)
        if cp_size > 1:
            extra["sglang.cp"] = "%d/%d" % (cp_rank, cp_size)
        self.keys = EngineKeys("sglang", **config.key_options(
            model=config.need("model", model_name), dtype=config.need("dtype"), layout=config.need("layout"),
            tp_degree=tp_size, rank=tp_rank, task=config.need("task"), namespace=config.need("namespace"),
            shared_across_ranks=is_mla_model, extra=extra))
        self.digest = self.keys.digest
        self.client = TableClient(table, config.arena_root, config.verify_checksum)
        #: Counters for monitoring and the tests.
        self.stats: Dict[str, int] = dict.fromkeys(("exists_calls", "gets", "pages_read", "pages_missed", "sets_declined", "errors"), 0)

    @classmethod
    def open(cls, config: AdapterConfig, **kwargs: Any) -> "SglangStorageCore":
        """Opens the configured table as a consumer (closed again if the settings are refused)."""
        table = open_table(config.table)
        try:
            return cls(table, config, **kwargs)
        except BaseException:
            table.close()
            raise

    def batch_exists(self, keys: Sequence[str]) -> int:
        """How many leading pages are ready now. Pins nothing (see the module's rules)."""
        self.stats["exists_calls"] += 1
        digest = self.digest
        return self.client.leading_ready([digest(k) for k in keys])

    def exists(self, key: str) -> bool:
        return self.client.peek(self.digest(key)) == "ready"

    def batch_get(self, keys: Sequence[str], page: Callable[[int], Tuple[Any, Any]], done: Callable[[int, Any], None]) -> List[bool]:
        """Pins the leading ready run of ``keys``, reads each pinned page's record into the buffer
        ``page(i)`` returns (as ``(handle, writable buffer)``), calls ``done(i, handle)`` after
        each page read whole, and releases the run. One bool per key: True up to the first page it
        could not pin or whose record did not belong, False from there."""
        self.stats["gets"] += 1
        digests = [self.digest(k) for k in keys]
        out = [False] * len(keys)
        run = self.client.pin_prefix(digests)
        try:
            for i in range(len(run)):
                handle, buffer = page(i)
                got = self.client.read_into(digests[i], run[i].meta, buffer)
                if isinstance(got, _arena.Mismatch):
                    break
                done(i, handle)
                out[i] = True
        finally:
            run.close()
        read = sum(out)
        self.stats["pages_read"] += read
        self.stats["pages_missed"] += len(keys) - read
        return out

    def get(self, key: str, buffer: Any) -> bool:
        """Pins one page, reads its record into ``buffer``, releases it: True when read whole."""
        return self.batch_get([key], lambda i: (None, buffer), lambda i, handle: None)[0]

    def decline_set(self, count: int) -> List[bool]:
        """The answer to a store: False for each key (the engine is not the table's producer)."""
        self.stats["sets_declined"] += count
        return [False] * count

    def close(self) -> None:
        self.client.table.close()


def _unsupported(method: str) -> WaitprepError:
    return WaitprepError(
        "ERR_UNSUPPORTED",
        "WaitprepHiCacheStorage.%s: hybrid pools (Mamba, SWA, DeepSeek V4 state beside the KV) have no artifacts in a "
        "waitprep table; use this backend for models whose HiCache holds only KV pages" % method,
    )


def _settings(storage_config: Any) -> AdapterConfig:
    extra = getattr(storage_config, "extra_config", None)
    values = extra.get("waitprep") if isinstance(extra, Mapping) else None
    if values is None:
        raise invalid("hicache_storage_backend_extra_config.waitprep", "the adapter's settings (a mapping with table, runtime, dtype, layout, task, namespace)", values)
    return AdapterConfig(values, "hicache_storage_backend_extra_config.waitprep")


try:
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage as _HiCacheStorage
except Exception as error:  # an absent engine, or one that fails to import
    ENGINE_AVAILABLE = False
    _IMPORT_ERROR: Optional[BaseException] = error

    class WaitprepHiCacheStorage:  # type: ignore[no-redef]
        """Stands in for the SGLang backend when SGLang cannot be imported: using it says why."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise engine_unavailable("waitprep.adapters.sglang", "SGLang's %s (HiCacheStorage, SGLang 0.5 or later)" % _BASE, _IMPORT_ERROR)  # type: ignore[arg-type]

else:
    ENGINE_AVAILABLE = True
    _IMPORT_ERROR = None

    class WaitprepHiCacheStorage(_HiCacheStorage):  # type: ignore[no-redef]
        """SGLang's ``HiCacheStorage`` over a waitprep table (the rules are the module's)."""

        def __init__(self, storage_config: Any, kwargs: Any = None) -> None:
            c = storage_config
            self.core = SglangStorageCore.open(
                _settings(c), tp_rank=c.tp_rank, tp_size=c.tp_size, is_mla_model=bool(c.is_mla_model), model_name=c.model_name,
                pp_rank=getattr(c, "pp_rank", 0), pp_size=getattr(c, "pp_size", 1),
                cp_rank=getattr(c, "attn_cp_rank", 0), cp_size=getattr(c, "attn_cp_size", 1))
            self.mem_pool_host: Any = None

        def _pages(self, host_indices: Any) -> Tuple[Callable[[int], Tuple[Any, Any]], Callable[[int, Any], None]]:
            pool = self.mem_pool_host
            if pool is None:
                raise WaitprepError("ERR_CLOSED", "WaitprepHiCacheStorage: no host memory pool registered (register_mem_pool_host)")
            torch = importlib.import_module("torch")
            page_size = getattr(pool, "page_size", 1) or 1

            def page(i: int) -> Tuple[Any, Any]:
                flat = pool.get_dummy_flat_data_page()
                return flat, memoryview(flat.view(torch.uint8).numpy())

            def done(i: int, flat: Any) -> None:
                pool.set_from_flat_data_page(int(host_indices[i * page_size]), flat)

            return page, done

        # HiCache runs these two on daemon threads it never restarts: an exception would switch
        # the storage tier off for the life of the process, so a failure is answered as a miss
        # and counted (core.stats["errors"]).

        def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
            try:
                return self.core.batch_exists(keys)
            except WaitprepError:
                self.core.stats["errors"] += 1
                return 0

        def batch_get_v1(self, keys: List[str], host_indices: Any, extra_info: Any = None) -> List[bool]:
            try:
                page, done = self._pages(host_indices)
                return self.core.batch_get(keys, page, done)
            except WaitprepError:
                self.core.stats["errors"] += 1
                return [False] * len(keys)

        def batch_set_v1(self, keys: List[str], host_indices: Any, extra_info: Any = None) -> List[bool]:
            return self.core.decline_set(len(keys))

        def exists(self, key: str) -> bool:
            return self.core.exists(key)

        def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Any:
            if target_location is None:
                return None
            torch = importlib.import_module("torch")
            return target_location if self.core.get(key, memoryview(target_location.view(torch.uint8).numpy())) else None

        def batch_get(self, keys: List[str], target_locations: Any = None, target_sizes: Any = None) -> List[Any]:
            return [self.get(key, target) for key, target in zip(keys, target_locations or [None] * len(keys))]

        def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
            return self.core.decline_set(1)[0]

        def batch_set(self, keys: List[str], values: Any = None, target_locations: Any = None, target_sizes: Any = None) -> bool:
            self.core.decline_set(len(keys))
            return not keys

        def batch_exists_v2(self, keys: Any, pool_transfers: Any = None, extra_info: Any = None) -> Any:
            raise _unsupported("batch_exists_v2")

        def batch_get_v2(self, transfers: Any, extra_info: Any = None) -> Any:
            raise _unsupported("batch_get_v2")

        def batch_set_v2(self, transfers: Any, extra_info: Any = None) -> Any:
            raise _unsupported("batch_set_v2")

        def clear(self) -> None:
            return None

        def get_stats(self) -> Any:
            return None

        def close(self) -> None:
            self.core.close()
