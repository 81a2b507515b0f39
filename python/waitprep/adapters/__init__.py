"""Engine adapters: waitprep's lease table behind the storage interfaces of vLLM, SGLang and LMCache.

- ``waitprep.adapters.vllm``: an ``OffloadingManager`` (vLLM's offloading connector), with its
  ``OffloadingSpec`` and worker.
- ``waitprep.adapters.sglang``: a ``HiCacheStorage`` (SGLang's dynamic HiCache storage backend).
- ``waitprep.adapters.lmcache``: a ``StoragePluginInterface`` (LMCache's storage plugins).

Each module imports without its engine; its engine class then says what is missing when it is
used. The logic lives in engine-free classes (``VllmManagerCore``, ``SglangStorageCore``,
``LmcacheStorageCore``) that the engine classes call, and that take plain values. How to enable
each, what each version changed and which test covers which row: docs/integration.md.
"""

from ._core import AdapterConfig, PinLedger, TableClient
from .events import EventFeedReader, EventFeedWriter, FeedEvent, default_feed_path

__all__ = ["AdapterConfig", "PinLedger", "TableClient", "EventFeedReader", "EventFeedWriter", "FeedEvent", "default_feed_path"]
