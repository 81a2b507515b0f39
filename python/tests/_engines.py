"""Minimal stand-ins for the engines' interface modules, and a producer process per test.

The engines cannot be installed here. Each fake below holds only what the adapters touch, with
the signatures and abstract methods of the engine version the adapter names (written from reading
those interfaces: vLLM's vllm/v1/kv_offload/base.py, SGLang's mem_cache/hicache_storage.py and
storage/backend_factory.py, LMCache's v1/storage_backend/abstract_backend.py), so that importing an
adapter with a fake installed defines its engine subclass exactly as with the engine, and an
abstract method the adapter forgot makes the class impossible to instantiate, as it would there.
:func:`engine` installs one in ``sys.modules`` (recording every name the adapter reads from it),
imports the adapter fresh, and puts everything back afterwards.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import enum
import importlib
import sys
import types
from typing import Any, Dict, Iterator, List, Optional, Set

import waitprep
from waitprep.testing.producer import ProducerProcess

from _support import child_env, table_name


class RecordingModule(types.ModuleType):
    """A module that remembers which of its public names were read."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        object.__setattr__(self, "_read", set())

    def __getattribute__(self, attr: str) -> Any:
        if not attr.startswith("_") and attr not in RecordingModule.__dict__:
            object.__getattribute__(self, "_read").add(attr)
        return super().__getattribute__(attr)

    @property
    def names_read(self) -> Set[str]:
        return set(object.__getattribute__(self, "_read"))

    def forget(self) -> None:
        object.__getattribute__(self, "_read").clear()


def _package(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = []  # type: ignore[attr-defined]
    return module


# --- vLLM: vllm/v1/kv_offload/base.py ----------------------------------------------------------

def _vllm_base() -> RecordingModule:
    m = RecordingModule("vllm.v1.kv_offload.base")

    class LookupResult(enum.Enum):
        MISS = enum.auto()
        HIT = enum.auto()
        HIT_PENDING = enum.auto()
        RETRY = enum.auto()

    class Medium(enum.Enum):
        CPU = "CPU"
        STORAGE = "STORAGE"

    @dataclasses.dataclass
    class ReqContext:
        req_id: str
        kv_transfer_params: Optional[Dict[str, Any]] = None

    class LoadStoreSpec:
        pass

    @dataclasses.dataclass
    class OffloadingEvent:
        keys: List[bytes]
        medium: Any
        removed: bool

    @dataclasses.dataclass
    class RequestOffloadingContext:
        policy: str = "chunk_level"

    @dataclasses.dataclass
    class TransferResult:
        job_id: int
        success: bool
        transfer_size: Optional[int] = None
        transfer_time: Optional[float] = None

    def make_offload_key(block_hash: bytes, group_idx: int) -> bytes:
        return block_hash + group_idx.to_bytes(4, "big", signed=False)

    class OffloadingManager(abc.ABC):
        @abc.abstractmethod
        def lookup(self, key, req_context): ...

        @abc.abstractmethod
        def prepare_load(self, keys, req_context): ...

        def touch(self, keys, req_context):
            return None

        def complete_load(self, keys, req_context):
            return None

        @abc.abstractmethod
        def prepare_store(self, keys, req_context): ...

        def complete_store(self, keys, req_context, success=True):
            return None

        @abc.abstractmethod
        def on_new_request(self, req_context): ...

        def on_request_finished(self, req_context):
            return None

        def take_events(self):
            return ()

        def on_schedule_end(self, context):
            return None

        def has_pending_work(self):
            return False

        def reset_cache(self):
            return None

        def get_stats(self):
            return None

        def shutdown(self):
            return None

    class OffloadingWorker(abc.ABC):
        @abc.abstractmethod
        def submit_store(self, job_id, src_spec, dst_spec): ...

        @abc.abstractmethod
        def submit_load(self, job_id, src_spec, dst_spec): ...

        @abc.abstractmethod
        def get_finished(self): ...

        @abc.abstractmethod
        def wait(self, job_ids): ...

        def shutdown(self):
            return None

    class OffloadingSpec(abc.ABC):
        def __init__(self, config):
            self.config = config
            self.extra_config = config.extra_config

        @abc.abstractmethod
        def get_manager(self): ...

        @abc.abstractmethod
        def get_worker(self, kv_caches): ...

    for obj in (LookupResult, Medium, ReqContext, LoadStoreSpec, OffloadingEvent, RequestOffloadingContext, TransferResult,
                make_offload_key, OffloadingManager, OffloadingWorker, OffloadingSpec):
        setattr(m, obj.__name__, obj)
    return m


# --- SGLang: python/sglang/srt/mem_cache/hicache_storage.py ------------------------------------

def _sglang_storage() -> RecordingModule:
    m = RecordingModule("sglang.srt.mem_cache.hicache_storage")

    @dataclasses.dataclass
    class HiCacheStorageConfig:
        tp_rank: int
        tp_size: int
        pp_rank: int
        pp_size: int
        attn_cp_rank: int
        attn_cp_size: int
        is_mla_model: bool
        enable_storage_metrics: bool
        is_page_first_layout: bool
        model_name: Optional[str]
        dp_rank: int = 0
        dp_size: int = 1
        extra_config: Optional[dict] = None

    class HiCacheStorage(abc.ABC):
        def register_mem_pool_host(self, mem_pool_host):
            self.mem_pool_host = mem_pool_host

        def batch_exists_v2(self, keys, pool_transfers=None, extra_info=None):
            raise NotImplementedError()

        def batch_get_v2(self, transfers, extra_info=None):
            raise NotImplementedError()

        def batch_set_v2(self, transfers, extra_info=None):
            raise NotImplementedError()

        def batch_get_v1(self, keys, host_indices, extra_info=None):
            raise NotImplementedError()

        def batch_set_v1(self, keys, host_indices, extra_info=None):
            raise NotImplementedError()

        @abc.abstractmethod
        def get(self, key, target_location=None, target_sizes=None): ...

        @abc.abstractmethod
        def batch_get(self, keys, target_locations=None, target_sizes=None): ...

        @abc.abstractmethod
        def set(self, key, value=None, target_location=None, target_sizes=None): ...

        @abc.abstractmethod
        def batch_set(self, keys, values=None, target_locations=None, target_sizes=None): ...

        @abc.abstractmethod
        def exists(self, key): ...

        def batch_exists(self, keys, extra_info=None):
            for i in range(len(keys)):
                if not self.exists(keys[i]):
                    return i
            return len(keys)

        def clear(self):
            return None

        def get_stats(self):
            return None

    m.HiCacheStorageConfig = HiCacheStorageConfig
    m.HiCacheStorage = HiCacheStorage
    m.STORAGE_BATCH_SIZE = 128
    return m


def sglang_create_dynamic_backend(storage_config: Any, **kwargs: Any) -> Any:
    """What SGLang's StorageBackendFactory does for ``--hicache-storage-backend dynamic``: import
    ``module_path``, take ``class_name``, check it subclasses HiCacheStorage, construct it as
    ``cls(storage_config, kwargs)``."""
    base = sys.modules["sglang.srt.mem_cache.hicache_storage"]
    config = storage_config.extra_config
    for field in ("backend_name", "module_path", "class_name"):
        if field not in config:
            raise ValueError("Missing required field '%s' in backend config for 'dynamic' backend" % field)
    cls = getattr(importlib.import_module(config["module_path"]), config["class_name"])
    if not issubclass(cls, base.HiCacheStorage):
        raise TypeError("Backend class %s must inherit from HiCacheStorage" % config["class_name"])
    return cls(storage_config, kwargs)


class FakeTensor:
    """The little of a torch tensor the SGLang backend uses on a host page: ``view(torch.uint8)``
    and ``numpy()`` (here a bytearray, the page's memory)."""

    def __init__(self, data: bytearray) -> None:
        self.data = data

    def view(self, dtype: Any) -> "FakeTensor":
        return self

    def numpy(self) -> bytearray:
        return self.data


class FakeHostPool:
    """An SGLang host KV pool of ``pages`` pages (``page_size`` tokens, ``page_bytes`` bytes each),
    with the calls HiCache's storage backends make on it."""

    def __init__(self, pages: int, page_size: int, page_bytes: int) -> None:
        self.page_size = page_size
        self.page_bytes = page_bytes
        self.pages = [bytearray(page_bytes) for _ in range(pages)]
        self.layout = "page_first"

    def get_dummy_flat_data_page(self) -> FakeTensor:
        return FakeTensor(bytearray(self.page_bytes))

    def set_from_flat_data_page(self, index: int, data_page: FakeTensor) -> None:
        self.pages[index // self.page_size][:] = data_page.data

    def host_indices(self, pages: List[int]) -> List[int]:
        """Token indices of whole pages, ``page_size`` per page, as HiCache passes them."""
        return [p * self.page_size + t for p in pages for t in range(self.page_size)]


# --- LMCache: lmcache/v1/storage_backend/abstract_backend.py -----------------------------------

def _lmcache_backend() -> RecordingModule:
    m = RecordingModule("lmcache.v1.storage_backend.abstract_backend")

    class StorageBackendInterface(metaclass=abc.ABCMeta):
        def __init__(self, dst_device="cuda"):
            self.dst_device = dst_device

        @abc.abstractmethod
        def contains(self, key, pin=False): ...

        @abc.abstractmethod
        def exists_in_put_tasks(self, key): ...

        @abc.abstractmethod
        def batched_submit_put_task(self, keys, objs, transfer_spec=None, on_complete_callback=None): ...

        async def async_batched_submit_put_task(self, keys, objs, transfer_spec=None, on_complete_callback=None):
            raise NotImplementedError

        @abc.abstractmethod
        def get_blocking(self, key): ...

        def get_non_blocking(self, key, location=None):
            raise NotImplementedError

        async def batched_async_contains(self, lookup_id, keys, pin=False):
            raise NotImplementedError

        async def batched_get_non_blocking(self, lookup_id, keys, transfer_spec=None):
            raise NotImplementedError

        def batched_get_blocking(self, keys):
            return [self.get_blocking(key) for key in keys]

        @abc.abstractmethod
        def pin(self, key): ...

        @abc.abstractmethod
        def unpin(self, key): ...

        @abc.abstractmethod
        def remove(self, key, force=True): ...

        def batched_remove(self, keys, force=True):
            return sum(self.remove(key, force=force) for key in keys)

        @abc.abstractmethod
        def get_allocator_backend(self): ...

        @abc.abstractmethod
        def close(self): ...

        def batched_contains(self, keys, pin=False):
            hits = 0
            for key in keys:
                if not self.contains(key, pin):
                    break
                hits += 1
            return hits

        def touch_cache(self):
            raise NotImplementedError

        def cancel_request(self, req_id):
            return None

    class StoragePluginInterface(StorageBackendInterface):
        def __init__(self, dst_device="cuda", config=None, metadata=None, local_cpu_backend=None, loop=None):
            super().__init__(dst_device=dst_device)
            self.config = config
            self.metadata = metadata
            self.local_cpu_backend = local_cpu_backend
            self.loop = loop

    m.StorageBackendInterface = StorageBackendInterface
    m.StoragePluginInterface = StoragePluginInterface
    return m


def _lmcache_memory() -> types.ModuleType:
    m = types.ModuleType("lmcache.v1.memory_management")

    class MemoryFormat(enum.Enum):
        UNDEFINED = 0
        KV_2LTD = 1
        KV_T2D = 2

    m.MemoryFormat = MemoryFormat
    return m


@dataclasses.dataclass(frozen=True)
class CacheEngineKey:
    """LMCache's key (0.4: ``fmt`` gone)."""

    model_name: str
    world_size: int
    worker_id: int
    chunk_hash: int
    dtype: Any
    request_configs: Optional[dict] = None


class FakeDtype:
    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.itemsize = size

    def __str__(self) -> str:
        return "torch." + self.name


BFLOAT16 = FakeDtype("bfloat16", 2)


class FakeMemoryObj:
    def __init__(self, nbytes: int, shape: Any, fmt: Any) -> None:
        self.data = bytearray(nbytes)
        self.shape = shape
        self.fmt = fmt
        self.refs = 1

    @property
    def byte_array(self) -> memoryview:
        return memoryview(self.data)

    def ref_count_down(self) -> None:
        self.refs -= 1


class FakeLocalCPUBackend:
    """LMCache's local CPU backend as an allocator: ``allocate(shapes, dtypes, fmt)``."""

    def __init__(self) -> None:
        self.allocated: List[FakeMemoryObj] = []

    def allocate(self, shapes: Any, dtypes: Any, fmt: Any = None, eviction: bool = True, busy_loop: bool = True) -> FakeMemoryObj:
        n = 1
        for d in shapes:
            n *= d
        obj = FakeMemoryObj(n * dtypes.itemsize, tuple(shapes), fmt)
        self.allocated.append(obj)
        return obj


@dataclasses.dataclass
class LMCacheMetadata:
    model_name: str
    world_size: int
    worker_id: int
    kv_dtype: Any
    kv_shape: tuple


@dataclasses.dataclass
class LMCacheConfig:
    storage_plugins: List[str]
    extra_config: Dict[str, Any]


def lmcache_create_storage_plugins(config: LMCacheConfig, metadata: Any, local_cpu_backend: Any, loop: Any, dst_device: str = "cpu") -> Dict[str, Any]:
    """What LMCache's plugin launcher does: for each name in ``storage_plugins``, import
    ``storage_plugin.<name>.module_path``, take ``.class_name``, construct it with keywords."""
    out = {}
    for name in config.storage_plugins:
        module_path = config.extra_config.get("storage_plugin.%s.module_path" % name)
        class_name = config.extra_config.get("storage_plugin.%s.class_name" % name)
        cls = getattr(importlib.import_module(module_path), class_name)
        out[name] = cls(config=config, dst_device=dst_device, metadata=metadata, local_cpu_backend=local_cpu_backend, loop=loop)
    return out


# --- Installing a fake ------------------------------------------------------------------------

_TREES = {
    "vllm": (["vllm", "vllm.v1", "vllm.v1.kv_offload"], "vllm.v1.kv_offload.base", _vllm_base),
    "sglang": (["sglang", "sglang.srt", "sglang.srt.mem_cache"], "sglang.srt.mem_cache.hicache_storage", _sglang_storage),
    "lmcache": (["lmcache", "lmcache.v1", "lmcache.v1.storage_backend"], "lmcache.v1.storage_backend.abstract_backend", _lmcache_backend),
}


@contextlib.contextmanager
def engine(name: str, absent: bool = False) -> Iterator[types.ModuleType]:
    """Imports ``waitprep.adapters.<name>`` fresh with the fake engine installed (or, with
    ``absent``, with the engine's package unimportable) and yields the adapter module; the fake
    module is the adapter's ``fake_base`` attribute. Everything is put back afterwards."""
    packages, base_name, make = _TREES[name]
    adapter_name = "waitprep.adapters." + name
    saved = {n: sys.modules.get(n) for n in packages + [base_name, adapter_name, "torch", "lmcache.v1.memory_management"]}
    import waitprep.adapters as adapters_package

    saved_attr = getattr(adapters_package, name, None)
    try:
        for n in saved:
            sys.modules.pop(n, None)
        base = None
        if absent:
            sys.modules[packages[0]] = None  # type: ignore[assignment]  # import fails: "import of ... halted"
        else:
            for n in packages:
                sys.modules[n] = _package(n)
            base = make()
            sys.modules[base.__name__] = base
            if name == "lmcache":
                sys.modules["lmcache.v1.memory_management"] = _lmcache_memory()
            if saved["torch"] is None:
                torch = types.ModuleType("torch")
                torch.uint8 = "uint8"  # type: ignore[attr-defined]
                torch.Size = tuple  # type: ignore[attr-defined]
                sys.modules["torch"] = torch
        module = importlib.import_module(adapter_name)
        module.fake_base = base  # type: ignore[attr-defined]
        yield module
    finally:
        for n, old in saved.items():
            if old is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = old
        if saved_attr is not None:
            setattr(adapters_package, name, saved_attr)


# --- A producer per test ----------------------------------------------------------------------

def start_producer(cleanup: Any, what: str, capacity: int = 256, record_bytes: int = 4096, feed_capacity: int = 4096) -> ProducerProcess:
    """A producer process, stopped by ``cleanup`` (a TestCase's ``addCleanup`` or
    ``addClassCleanup``); its table is ``.table``."""
    name = table_name(what)
    producer = ProducerProcess(name, capacity=capacity, record_bytes=record_bytes, feed_capacity=feed_capacity, env=child_env())
    cleanup(producer.close)
    return producer


def item(digest: bytes, engine_key: bytes = b"", size: int = 512, tokens: int = 16, fmt: str = "raw") -> Dict[str, Any]:
    """A producer ``publish`` item."""
    return {"digest": digest.hex(), "engineKey": engine_key.hex(), "size": size, "tokens": tokens, "format": fmt}

