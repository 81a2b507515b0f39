"""The SGLang adapter (waitprep.adapters.sglang) against a producer process: HiCache's call pattern
(batch_exists on the prefetch thread, the count all-reduced and the prefetch maybe revoked, then
batch_get_v1 into host pages on another thread; batch_set_v1 from the backup thread), the
scenarios of SGLang's own storage tests (pages read back byte for byte into the host pool, MLA
against per-rank keys, the dynamic backend built by the factory), and the module without SGLang."""

from __future__ import annotations

import hashlib
import unittest
from typing import Any, List

import waitprep
from waitprep.adapters._core import AdapterConfig
from waitprep.adapters.sglang import SglangStorageCore
from waitprep.testing.producer import expected_payload

import _engines
from _engines import FakeHostPool, item, start_producer
from _support import needs_library

SIZE = 256
PAGE_SIZE = 4


def waitprep_settings(table: str, **overrides: Any) -> dict:
    values = {"table": table, "runtime": "sglang/0.5", "dtype": "bf16", "layout": "page_first", "task": "coding", "namespace": "tenant-1"}
    values.update(overrides)
    return values


def page_keys(salt: str, n: int) -> List[str]:
    """Chained page keys as SGLang makes them: SHA-256 hex over the prior key and the page."""
    keys, prior = [], ""
    for i in range(n):
        prior = hashlib.sha256(("%s|%s|%d" % (prior, salt, i)).encode()).hexdigest()
        keys.append(prior)
    return keys


@needs_library
class StorageCore(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.producer = start_producer(cls.addClassCleanup, "sglang")

    def core(self, **kwargs: Any) -> SglangStorageCore:
        core = SglangStorageCore.open(AdapterConfig(waitprep_settings(self.producer.table)), model_name=kwargs.pop("model_name", "Qwen/Qwen3-8B"), **kwargs)
        self.addCleanup(core.close)
        return core

    def publish(self, core: SglangStorageCore, keys: List[str]) -> None:
        self.assertEqual(set(self.producer.publish([item(core.digest(k), size=SIZE, tokens=PAGE_SIZE) for k in keys])), {"published"})

    def read_pages(self, core: SglangStorageCore, keys: List[str], pool: FakeHostPool, pages: List[int]) -> List[bool]:
        host_indices = pool.host_indices(pages)

        def page(i: int) -> Any:
            flat = pool.get_dummy_flat_data_page()
            return flat, flat.numpy()

        def done(i: int, flat: Any) -> None:
            pool.set_from_flat_data_page(host_indices[i * PAGE_SIZE], flat)

        return core.batch_get(keys, page, done)

    def test_batch_exists_counts_the_leading_ready_pages_and_pins_nothing(self) -> None:
        core = self.core()
        keys = page_keys(self.id(), 5)
        self.publish(core, keys[:2] + keys[3:])
        self.assertEqual(core.batch_exists(keys), 2)
        self.assertEqual(core.batch_exists(keys[3:]), 2)
        self.assertTrue(core.exists(keys[0]))
        self.assertFalse(core.exists(keys[2]))
        self.assertEqual(self.producer.call("summary")["pinned_slots"], 0)
        self.assertEqual(self.producer.evict([core.digest(keys[0])]), ["evicted"])

    def test_pages_come_back_byte_for_byte_into_their_host_pages(self) -> None:
        core = self.core()
        keys = page_keys(self.id(), 4)
        self.publish(core, keys)
        pool = FakeHostPool(pages=8, page_size=PAGE_SIZE, page_bytes=SIZE)
        self.assertEqual(self.read_pages(core, keys, pool, [6, 1, 3, 0]), [True] * 4)
        for key, page in zip(keys, [6, 1, 3, 0]):
            self.assertEqual(bytes(pool.pages[page]), expected_payload(core.digest(key), SIZE))
        self.assertEqual(bytes(pool.pages[2]), bytes(SIZE))  # untouched
        self.assertEqual(self.producer.call("summary")["pinned_slots"], 0)  # the run was released

    def test_a_page_evicted_after_batch_exists_is_false_from_there_on_and_no_wrong_bytes_land(self) -> None:
        core = self.core()
        keys = page_keys(self.id(), 4)
        self.publish(core, keys)
        self.assertEqual(core.batch_exists(keys), 4)
        self.assertEqual(self.producer.evict([core.digest(keys[2])]), ["evicted"])
        self.publish(core, page_keys(self.id() + "/other", 1))  # takes the freed record slot
        pool = FakeHostPool(pages=4, page_size=PAGE_SIZE, page_bytes=SIZE)
        self.assertEqual(self.read_pages(core, keys, pool, [0, 1, 2, 3]), [True, True, False, False])
        self.assertEqual(bytes(pool.pages[2]), bytes(SIZE))
        self.assertEqual(bytes(pool.pages[3]), bytes(SIZE))

    def test_stores_are_declined_with_a_list(self) -> None:
        core = self.core()
        self.assertEqual(core.decline_set(3), [False, False, False])
        self.assertEqual(core.decline_set(0), [])

    def test_keys_are_per_rank_except_for_mla(self) -> None:
        (key,) = page_keys(self.id(), 1)
        mha = {rank: self.core(tp_rank=rank, tp_size=2).digest(key) for rank in (0, 1)}
        self.assertNotEqual(mha[0], mha[1])
        mla = {rank: self.core(tp_rank=rank, tp_size=4, is_mla_model=True).digest(key) for rank in range(4)}
        self.assertEqual(len(set(mla.values())), 1)
        # Pipeline and context-parallel ranks hold different layers and slices: their own keys.
        self.assertNotEqual(self.core(pp_rank=0, pp_size=2).digest(key), self.core(pp_rank=1, pp_size=2).digest(key))
        self.assertNotEqual(self.core(cp_rank=0, cp_size=2).digest(key), self.core().digest(key))
        # The model comes from SGLang's storage config unless the settings name one.
        self.assertNotEqual(self.core(model_name="a").digest(key), self.core(model_name="b").digest(key))


@needs_library
class EngineClass(unittest.TestCase):
    """The backend through a stand-in of SGLang's hicache_storage module and its dynamic factory."""

    def setUp(self) -> None:
        self.producer = start_producer(self.addCleanup, "sglang-engine")

    def storage_config(self, base: Any, **overrides: Any) -> Any:
        fields = dict(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1, is_mla_model=False,
                      enable_storage_metrics=False, is_page_first_layout=True, model_name="Qwen/Qwen3-8B",
                      extra_config={"backend_name": "waitprep", "module_path": "waitprep.adapters.sglang",
                                    "class_name": "WaitprepHiCacheStorage", "waitprep": waitprep_settings(self.producer.table)})
        fields.update(overrides)
        return base.HiCacheStorageConfig(**fields)

    def test_the_dynamic_factory_builds_it_and_hicache_reads_pages_through_it(self) -> None:
        with _engines.engine("sglang") as module:
            base = module.fake_base
            self.assertEqual(base.names_read, {"HiCacheStorage"})
            backend = _engines.sglang_create_dynamic_backend(self.storage_config(base))
            self.addCleanup(backend.close)
            self.assertIsInstance(backend, base.HiCacheStorage)
            pool = FakeHostPool(pages=8, page_size=PAGE_SIZE, page_bytes=SIZE)
            backend.register_mem_pool_host(pool)
            keys = page_keys(self.id(), 3)
            self.producer.publish([item(backend.core.digest(k), size=SIZE) for k in keys[:2]])
            self.assertEqual(backend.batch_exists(keys), 2)
            self.assertEqual(backend.batch_get_v1(keys, pool.host_indices([5, 4, 7])), [True, True, False])
            self.assertEqual(bytes(pool.pages[5]), expected_payload(backend.core.digest(keys[0]), SIZE))
            self.assertEqual(bytes(pool.pages[4]), expected_payload(backend.core.digest(keys[1]), SIZE))
            self.assertEqual(backend.batch_set_v1(keys, pool.host_indices([0, 1, 2])), [False, False, False])
            self.assertIs(backend.set(keys[0]), False)
            self.assertIs(backend.batch_set(keys), False)
            self.assertTrue(backend.exists(keys[0]))
            target = _engines.FakeTensor(bytearray(SIZE))
            self.assertIs(backend.get(keys[1], target), target)
            self.assertEqual(bytes(target.data), expected_payload(backend.core.digest(keys[1]), SIZE))
            self.assertIsNone(backend.get(keys[2], _engines.FakeTensor(bytearray(SIZE))))
            for method, args in (("batch_exists_v2", (keys,)), ("batch_get_v2", ([],)), ("batch_set_v2", ([],))):
                with self.assertRaises(waitprep.WaitprepError) as caught:
                    getattr(backend, method)(*args)
                self.assertEqual(caught.exception.code, "ERR_UNSUPPORTED")
            self.assertEqual(self.producer.call("summary")["pinned_slots"], 0)

    def test_the_prefetch_threads_calls_answer_a_miss_rather_than_raise(self) -> None:
        with _engines.engine("sglang") as module:
            backend = _engines.sglang_create_dynamic_backend(self.storage_config(module.fake_base))
            self.addCleanup(backend.close)
            keys = page_keys(self.id(), 2)
            # No host pool registered yet, and a key that is no page key: HiCache's threads would die on an exception.
            self.assertEqual(backend.batch_get_v1(keys, list(range(2 * PAGE_SIZE))), [False, False])
            self.assertEqual(backend.batch_exists([keys[0], None]), 0)
            self.assertEqual(backend.core.stats["errors"], 2)

    def test_the_storage_config_sets_the_ranks(self) -> None:
        with _engines.engine("sglang") as module:
            base = module.fake_base
            (key,) = page_keys(self.id(), 1)
            made = []
            for rank in range(2):
                backend = _engines.sglang_create_dynamic_backend(self.storage_config(base, tp_rank=rank, tp_size=2, is_mla_model=True))
                self.addCleanup(backend.close)
                made.append(backend.core.digest(key))
            self.assertEqual(made[0], made[1])
            backend = _engines.sglang_create_dynamic_backend(self.storage_config(base, tp_rank=1, tp_size=2))
            self.addCleanup(backend.close)
            self.assertNotEqual(backend.core.digest(key), made[0])

    def test_missing_settings_are_named(self) -> None:
        with _engines.engine("sglang") as module:
            config = self.storage_config(module.fake_base, extra_config={"backend_name": "waitprep", "module_path": "waitprep.adapters.sglang", "class_name": "WaitprepHiCacheStorage"})
            with self.assertRaises(waitprep.WaitprepError) as caught:
                _engines.sglang_create_dynamic_backend(config)
            self.assertEqual(caught.exception.field, "hicache_storage_backend_extra_config.waitprep")

    def test_without_sglang_the_module_imports_and_says_what_is_missing(self) -> None:
        with _engines.engine("sglang", absent=True) as module:
            self.assertFalse(module.ENGINE_AVAILABLE)
            with self.assertRaises(waitprep.WaitprepError) as caught:
                module.WaitprepHiCacheStorage(None, {})
            self.assertEqual(caught.exception.code, "ERR_ENGINE_UNAVAILABLE")
            self.assertIn("sglang.srt.mem_cache.hicache_storage", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
