"""The LMCache adapter (waitprep.adapters.lmcache) against a producer process: the scenarios of
LMCache's own plugin tests (tests/v1/storage_backend/test_storage_plugin.py: the plugin loaded from
the configuration, contains / get / remove / batched_contains through the storage manager), the
pin pattern LMCache's storage manager makes (two lookups of one chunk, unpin of every key on every
backend, cancel_request), the coroutines, and the module without LMCache."""

from __future__ import annotations

import asyncio
import unittest
from typing import Any, Dict, List, Optional

import waitprep
from waitprep.adapters._core import AdapterConfig
from waitprep.adapters.lmcache import LmcacheStorageCore, settings_from_extra_config
from waitprep.engine_keys import EngineKeys
from waitprep.testing.producer import expected_payload

import _engines
from _engines import BFLOAT16, CacheEngineKey, FakeLocalCPUBackend, LMCacheConfig, LMCacheMetadata, item, start_producer
from _support import needs_library

CHUNK = 16
KV_SHAPE = (2, 2, CHUNK, 1, 4)  # layers, K/V, tokens, heads, head size: 256 bf16 values a chunk
SIZE = 512


def key(chunk_hash: int, worker_id: int = 0, world_size: int = 1) -> CacheEngineKey:
    return CacheEngineKey(model_name="test_model", world_size=world_size, worker_id=worker_id, chunk_hash=chunk_hash, dtype=BFLOAT16)


def extra_config(table: str, **overrides: Any) -> Dict[str, Any]:
    values = {
        "storage_plugin.waitprep.module_path": "waitprep.adapters.lmcache",
        "storage_plugin.waitprep.class_name": "WaitprepStoragePlugin",
        "waitprep.table": table, "waitprep.runtime": "lmcache/0.4", "waitprep.layout": "KV_2LTD",
        "waitprep.task": "coding", "waitprep.namespace": "tenant-1",
    }
    values.update(overrides)
    return values


class StorageManager:
    """The storage manager's side of LMCache's calls on its backends, as its tests drive them."""

    def __init__(self, backends: Dict[str, Any]) -> None:
        self.storage_backends = backends

    def contains(self, k: Any, pin: bool = False) -> Optional[str]:
        for name, backend in self.storage_backends.items():
            if backend.contains(k, pin):
                return name
        return None

    def get(self, k: Any) -> Any:
        for backend in self.storage_backends.values():
            obj = backend.get_blocking(k)
            if obj is not None:
                return obj
        return None

    def remove(self, k: Any) -> int:
        return sum(backend.remove(k) for backend in self.storage_backends.values())

    def batched_contains(self, keys: List[Any], pin: bool = False) -> int:
        return max(backend.batched_contains(keys, pin) for backend in self.storage_backends.values())

    def batched_unpin(self, keys: List[Any]) -> None:
        for backend in self.storage_backends.values():
            for k in keys:
                backend.unpin(k)

    def close(self) -> None:
        for backend in self.storage_backends.values():
            backend.close()


@needs_library
class StorageCore(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.producer = start_producer(cls.addClassCleanup, "lmcache")

    def core(self) -> LmcacheStorageCore:
        core = LmcacheStorageCore.open(settings_from_extra_config(extra_config(self.producer.table)))
        self.addCleanup(core.close)
        return core

    def publish(self, core: LmcacheStorageCore, keys: List[Any]) -> None:
        self.assertEqual(set(self.producer.publish([item(core.digest(k), size=SIZE, tokens=CHUNK, fmt="KV_2LTD") for k in keys])), {"published"})

    def hashes(self, n: int) -> List[int]:
        base = abs(hash(self.id())) % (1 << 40)
        return [base * 100 + i for i in range(n)]

    def test_the_key_is_the_cache_engine_keys_fields_with_the_configured_layout_task_and_namespace(self) -> None:
        core = self.core()
        want = EngineKeys("lmcache", runtime="lmcache/0.4", model="test_model", task="coding", namespace="tenant-1",
                          profile={"dtype": "bfloat16", "layout": "KV_2LTD", "tp_degree": 2, "rank": 1})
        self.assertEqual(core.digest(key(-77, worker_id=1, world_size=2)), want.digest(-77))
        self.assertNotEqual(core.digest(key(5, worker_id=0, world_size=2)), core.digest(key(5, worker_id=1, world_size=2)))

    def test_two_lookups_of_one_chunk_hold_two_pins_and_unpin_releases_one_at_a_time(self) -> None:
        core = self.core()
        (h,) = self.hashes(1)
        self.publish(core, [key(h)])
        self.assertTrue(core.contains(key(h), pin=True))
        self.assertTrue(core.contains(key(h), pin=True))  # a second request sharing the prefix
        self.assertEqual(core.pins_held, 2)
        self.assertTrue(core.unpin(key(h)))
        self.assertEqual(self.producer.evict([core.digest(key(h))]), ["pinned"])
        self.assertTrue(core.unpin(key(h)))
        self.assertFalse(core.unpin(key(h)))  # nothing left: releases nothing
        self.assertEqual(self.producer.evict([core.digest(key(h))]), ["evicted"])

    def test_unpin_of_every_key_on_every_backend_releases_only_what_is_held(self) -> None:
        core = self.core()
        hs = self.hashes(4)
        self.publish(core, [key(h) for h in hs])
        self.assertEqual(core.batched_contains([key(h) for h in hs[:2]], pin=True), 2)
        results = [core.unpin(key(h)) for h in hs]  # the storage manager does not know who pinned what
        self.assertEqual(results, [True, True, False, False])
        self.assertEqual(core.pins_held, 0)

    def test_a_requests_pins_are_released_by_cancel_request_and_everything_by_close(self) -> None:
        core = self.core()
        hs = self.hashes(3)
        self.publish(core, [key(h) for h in hs])
        self.assertEqual(core.batched_contains([key(h) for h in hs], pin=True, owner="req-a"), 3)
        self.assertEqual(core.batched_contains([key(h) for h in hs[:1]], pin=True, owner="req-b"), 1)
        self.assertEqual(core.cancel("req-a"), 3)
        self.assertEqual(core.pins_held, 1)
        self.assertEqual(self.producer.evict([core.digest(key(hs[1]))]), ["evicted"])
        self.assertEqual(self.producer.evict([core.digest(key(hs[0]))]), ["pinned"])
        other = LmcacheStorageCore.open(settings_from_extra_config(extra_config(self.producer.table)))
        self.assertTrue(other.contains(key(hs[2]), pin=True))
        other.close()
        self.assertEqual(self.producer.evict([core.digest(key(hs[2]))]), ["evicted"])

    def test_batched_contains_without_pin_counts_the_leading_ready_chunks(self) -> None:
        core = self.core()
        hs = self.hashes(4)
        self.publish(core, [key(h) for h in hs[:2]] + [key(hs[3])])
        self.assertEqual(core.batched_contains([key(h) for h in hs]), 2)
        self.assertEqual(core.pins_held, 0)
        self.assertEqual(self.producer.call("summary")["pinned_slots"], 0)

    def test_settings_are_the_waitprep_entries_of_extra_config(self) -> None:
        with self.assertRaises(waitprep.WaitprepError) as caught:
            settings_from_extra_config({"waitprep.table": "t", "waitprep.runtime": "r", "waitprep.colour": "blue"})
        self.assertEqual(caught.exception.field, "extra_config.waitprep.colour")
        with self.assertRaises(waitprep.WaitprepError) as caught:
            LmcacheStorageCore(None, AdapterConfig({"table": "t", "runtime": "r", "task": "t", "namespace": "n"}, "extra_config.waitprep"))
        self.assertEqual(caught.exception.field, "extra_config.waitprep.layout")


@needs_library
class EngineClass(unittest.TestCase):
    """The plugin through a stand-in of LMCache's abstract_backend module and its plugin launcher."""

    def setUp(self) -> None:
        self.producer = start_producer(self.addCleanup, "lmcache-engine")
        self.metadata = LMCacheMetadata(model_name="test_model", world_size=1, worker_id=0, kv_dtype=BFLOAT16, kv_shape=KV_SHAPE)

    def plugins(self, module: Any, **extra: Any) -> StorageManager:
        config = LMCacheConfig(storage_plugins=["waitprep"], extra_config=extra_config(self.producer.table, **extra))
        self.loop = asyncio.new_event_loop()
        self.addCleanup(self.loop.close)
        self.cpu = FakeLocalCPUBackend()
        manager = StorageManager(_engines.lmcache_create_storage_plugins(config, self.metadata, self.cpu, self.loop))
        self.addCleanup(manager.close)
        return manager

    def publish(self, plugin: Any, chunk_hashes: List[int]) -> None:
        self.producer.publish([item(plugin.core.digest(key(h)), size=SIZE, tokens=CHUNK, fmt="KV_2LTD") for h in chunk_hashes])

    def test_loaded_from_the_configuration_it_answers_the_storage_managers_calls(self) -> None:
        with _engines.engine("lmcache") as module:
            base = module.fake_base
            self.assertEqual(base.names_read, {"StoragePluginInterface"})
            manager = self.plugins(module)
            plugin = manager.storage_backends["waitprep"]
            self.assertIsInstance(plugin, base.StoragePluginInterface)
            self.assertEqual(str(plugin), "WaitprepStoragePlugin")
            self.assertIsNone(manager.contains(key(12345)))
            self.publish(plugin, [67890, 1000, 1001, 1002])
            obj = manager.get(key(67890))
            self.assertIsNotNone(obj)
            self.assertEqual(bytes(obj.byte_array), expected_payload(plugin.core.digest(key(67890)), SIZE))
            self.assertEqual(obj.shape, KV_SHAPE)
            self.assertEqual(obj.fmt.name, "KV_2LTD")
            self.assertEqual(manager.batched_contains([key(h) for h in (1000, 1001, 1002)]), 3)
            self.assertIs(plugin.get_allocator_backend(), self.cpu)
            self.assertIsNone(plugin.batched_submit_put_task([key(1)], [obj]))
            self.assertFalse(plugin.exists_in_put_tasks(key(1)))
            self.assertIsNone(plugin.touch_cache())
            self.assertEqual(self.producer.call("summary")["pinned_slots"], 0)

    def test_remove_refuses_where_lmcaches_own_test_expects_the_key_gone(self) -> None:
        with _engines.engine("lmcache") as module:
            manager = self.plugins(module)
            plugin = manager.storage_backends["waitprep"]
            self.publish(plugin, [11111])
            self.assertEqual(manager.remove(key(11111)), 0)
            self.assertEqual(plugin.batched_remove([key(11111)]), 0)
            self.assertEqual(manager.contains(key(11111)), "waitprep")  # still there: only the producer evicts
            self.assertEqual(self.producer.evict([plugin.core.digest(key(11111))]), ["evicted"])
            self.assertIsNone(manager.contains(key(11111)))

    def test_the_coroutines_pin_for_the_lookup_read_the_leading_run_and_cancel_request_releases(self) -> None:
        with _engines.engine("lmcache") as module:
            manager = self.plugins(module)
            plugin = manager.storage_backends["waitprep"]
            self.publish(plugin, [1, 2, 4])
            keys = [key(h) for h in (1, 2, 3, 4)]
            hits = self.loop.run_until_complete(plugin.batched_async_contains("req-1", keys, pin=True))
            self.assertEqual(hits, 2)
            self.assertEqual(plugin.core.pins_held, 2)
            objs = self.loop.run_until_complete(plugin.batched_get_non_blocking("req-1", keys))
            self.assertEqual(len(objs), 2)  # the leading run: chunk 3 is not there
            self.assertEqual([bytes(o.byte_array) for o in objs], [expected_payload(plugin.core.digest(k), SIZE) for k in keys[:2]])
            future = plugin.get_non_blocking(keys[3])
            self.assertEqual(bytes(future.result().byte_array), expected_payload(plugin.core.digest(keys[3]), SIZE))
            self.assertIsNone(plugin.get_non_blocking(keys[2]))
            plugin.cancel_request("req-1")
            self.assertEqual(plugin.core.pins_held, 0)
            self.assertEqual(self.producer.call("summary")["pinned_slots"], 0)

    def test_a_chunk_evicted_before_the_read_gives_none_and_its_memory_back(self) -> None:
        with _engines.engine("lmcache") as module:
            manager = self.plugins(module)
            plugin = manager.storage_backends["waitprep"]
            self.publish(plugin, [7])
            self.assertEqual(self.producer.evict([plugin.core.digest(key(7))]), ["evicted"])
            self.assertIsNone(plugin.get_blocking(key(7)))
            self.assertEqual(self.cpu.allocated, [])  # nothing was allocated for a chunk that is gone

    def test_without_an_allocator_backend_it_says_so(self) -> None:
        with _engines.engine("lmcache") as module:
            config = LMCacheConfig(storage_plugins=["waitprep"], extra_config=extra_config(self.producer.table))
            plugin = _engines.lmcache_create_storage_plugins(config, self.metadata, None, None)["waitprep"]
            self.addCleanup(plugin.close)
            with self.assertRaises(waitprep.WaitprepError) as caught:
                plugin.get_allocator_backend()
            self.assertEqual(caught.exception.code, "ERR_CLOSED")

    def test_without_lmcache_the_module_imports_and_says_what_is_missing(self) -> None:
        with _engines.engine("lmcache", absent=True) as module:
            self.assertFalse(module.ENGINE_AVAILABLE)
            with self.assertRaises(waitprep.WaitprepError) as caught:
                module.WaitprepStoragePlugin()
            self.assertEqual(caught.exception.code, "ERR_ENGINE_UNAVAILABLE")
            self.assertIn("lmcache.v1.storage_backend.abstract_backend", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
