"""The vLLM adapter (waitprep.adapters.vllm) against a producer process: the call patterns of vLLM's
offloading connector and the scenarios of vLLM's own manager tests (tests/v1/kv_offload/cpu/
test_manager.py: lookup of a block still being written, loads protecting blocks from eviction,
two loads of one block, key order in the load spec, events), then the engine subclass through a
stand-in of vllm/v1/kv_offload/base.py, and the module without vLLM."""

from __future__ import annotations

import hashlib
import unittest
from typing import Any, List

import waitprep
from waitprep.adapters._core import AdapterConfig
from waitprep.adapters.vllm import HANDOFF_PARAM, TASK_PARAM, VllmManagerCore, VllmWorkerCore
from waitprep.arena import read_arena_record
from waitprep.engine_keys import vllm_offload_key
from waitprep.testing.producer import expected_payload

import _engines
from _engines import item, start_producer
from _support import needs_library

SIZE = 512


def settings(table: str, **overrides: Any) -> AdapterConfig:
    values = {"table": table, "runtime": "vllm/0.23", "model": "meta-llama/Llama-3.1-8B-Instruct", "dtype": "bf16", "layout": "NHD",
              "task": "coding", "namespace": "tenant-1"}
    values.update(overrides)
    return AdapterConfig(values)


@needs_library
class ManagerCore(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.producer = start_producer(cls.addClassCleanup, "vllm")

    def core(self, **kwargs: Any) -> VllmManagerCore:
        core = VllmManagerCore.open(settings(self.producer.table, **kwargs.pop("settings", {})), **kwargs)
        self.addCleanup(core.shutdown)
        return core

    def keys(self, n: int, group: int = 0) -> List[bytes]:
        return [vllm_offload_key(hashlib.sha256(("%s/%d" % (self.id(), i)).encode()).digest(), group) for i in range(n)]

    def publish(self, core: VllmManagerCore, keys: List[bytes], params: Any = None) -> None:
        items = [item(d, k, SIZE) for k in keys for d in core.digests(k, params)]
        self.assertEqual(set(self.producer.publish(items)), {"published"})

    def evict(self, core: VllmManagerCore, key: bytes) -> str:
        return self.producer.evict([core.digests(key)[0]])[0]

    def test_lookup_is_pending_while_the_block_is_being_written_then_hit(self) -> None:
        core = self.core()
        a, b, c = self.keys(3)
        self.producer.call("reserve", items=[item(core.digests(a)[0], a, SIZE)])
        self.assertEqual(core.lookup(a, "r"), "pending")
        self.assertEqual(core.lookup(b, "r"), "miss")
        self.producer.call("complete", digests=[core.digests(a)[0].hex()])
        self.assertEqual(core.lookup(a, "r"), "hit")
        self.publish(core, [c])
        self.assertEqual(core.lookup(c, "r"), "hit")
        self.assertEqual(self.evict(core, c), "evicted")  # lookup never pinned
        self.assertEqual(core.lookup(c, "r"), "miss")
        self.assertEqual(core.pins_held, 0)

    def test_a_load_protects_its_blocks_from_eviction_until_complete_load(self) -> None:
        core = self.core()
        keys = self.keys(4)
        self.publish(core, keys)
        plan = core.prepare_load(keys[1:3], "r")
        self.assertEqual(plan.missing, [])
        self.assertEqual([self.evict(core, k) for k in keys], ["evicted", "pinned", "pinned", "evicted"])
        core.complete_load(keys[1:3], "r")
        self.assertEqual([self.evict(core, k) for k in keys[1:3]], ["evicted", "evicted"])
        self.assertEqual(core.pins_held, 0)

    def test_two_loads_of_one_block_hold_two_pins(self) -> None:
        core = self.core()
        (key,) = self.keys(1)
        self.publish(core, [key])
        core.prepare_load([key], "r1")
        core.prepare_load([key], "r2")
        core.prepare_load([key], "r2")  # the same request twice, as vLLM's own test does
        self.assertEqual(core.pins_held, 3)
        core.complete_load([key], "r1")
        self.assertEqual(self.evict(core, key), "pinned")
        core.complete_load([key], "r2")
        self.assertEqual(self.evict(core, key), "pinned")
        self.assertEqual(core.complete_load([key], "r1"), 0)  # r1 holds none now: nothing to release
        core.complete_load([key], "r2")
        self.assertEqual(self.evict(core, key), "evicted")

    def test_the_load_spec_is_co_indexed_with_the_keys_in_any_order(self) -> None:
        core = self.core()
        keys = self.keys(3)
        self.publish(core, keys)
        for order in ([0, 1, 2], [1, 2, 0], [2, 0, 1]):
            ordered = [keys[i] for i in order]
            plan = core.prepare_load(ordered, "r")
            self.assertEqual(plan.keys, ordered)
            for key, digests, metas in zip(plan.keys, plan.digests, plan.metas):
                record = read_arena_record(plan.table, digests[0], metas[0])
                self.assertEqual(record.header.digest, core.digests(key)[0])
                self.assertEqual(record.payload, expected_payload(core.digests(key)[0], SIZE))
            core.complete_load(list(reversed(ordered)), "r")  # order irrelevant
        self.assertEqual(core.pins_held, 0)

    def test_a_block_evicted_after_lookup_fails_the_transfer_and_writes_no_wrong_bytes(self) -> None:
        core = self.core()
        keys = self.keys(4)
        self.publish(core, keys)
        self.assertEqual([core.lookup(k, "r") for k in keys], ["hit"] * 4)
        self.assertEqual(self.evict(core, keys[1]), "evicted")
        # Its slot is reused by another artifact: a reader that went by the old location would
        # find that one's record.
        self.publish(core, self.keys(1, group=9))
        plan = core.prepare_load(keys, "r")
        self.assertEqual(plan.missing, [1])  # the blocks after it still pinned
        written: dict = {}
        self.assertFalse(VllmWorkerCore().load(plan, lambda i, payload: written.__setitem__(i, bytes(payload))))
        self.assertEqual(sorted(written), [0])
        self.assertEqual(written[0], expected_payload(core.digests(keys[0])[0], SIZE))
        core.complete_load(keys, "r")
        self.assertEqual(core.pins_held, 0)

    def test_kv_group_indexes_are_separate_artifacts(self) -> None:
        core = self.core()
        (g0,) = self.keys(1, group=0)
        g1 = g0[:-4] + (1).to_bytes(4, "big")
        self.assertNotEqual(core.digests(g0), core.digests(g1))
        self.publish(core, [g0])
        self.assertEqual((core.lookup(g0, "r"), core.lookup(g1, "r")), ("hit", "miss"))

    def test_each_tensor_parallel_rank_has_its_artifact_unless_ranks_share_bytes(self) -> None:
        core = self.core(tp_degree=2)
        key, other = self.keys(2)
        d0, d1 = core.digests(key)
        self.assertNotEqual(d0, d1)
        self.producer.publish([item(d0, key, SIZE)])
        self.assertEqual(core.lookup(key, "r"), "miss")  # rank 1's bytes are not there
        self.producer.publish([item(d1, key, SIZE)])
        self.assertEqual(core.lookup(key, "r"), "hit")
        plan = core.prepare_load([key], "r")
        self.assertEqual(len(plan.metas[0]), 2)
        rank1: dict = {}
        self.assertTrue(VllmWorkerCore(rank=1, ranks=2).load(plan, lambda i, p: rank1.__setitem__(i, bytes(p))))
        self.assertEqual(rank1[0], expected_payload(d1, SIZE))
        core.complete_load([key], "r")
        shared = self.core(tp_degree=8, shared_across_ranks=True)
        self.assertEqual(len(shared.digests(other)), 1)

    def test_the_handoff_token_is_pinned_for_the_request_and_released_when_it_finishes(self) -> None:
        core = self.core()
        (key,) = self.keys(1)
        self.publish(core, [key])
        orchestrator = waitprep.open_table(self.producer.table)
        self.addCleanup(orchestrator.close)
        lease = orchestrator.try_pin(core.digests(key)[0])
        self.assertIsInstance(lease, waitprep.Lease)
        self.assertEqual(core.on_new_request("r", {HANDOFF_PARAM: lease.handoff_token()}), "pinned")
        lease.close()  # the engine holds its own pin now
        self.assertEqual(self.evict(core, key), "pinned")
        self.assertTrue(core.on_request_finished("r"))
        self.assertEqual(self.evict(core, key), "evicted")
        self.assertIsNone(core.on_new_request("no-token", {}))
        stale = "wp1:%s:0:1:%s" % (self.producer.table, "00" * 32)  # a slot generation and digest that are not there
        self.assertEqual(core.on_new_request("stale", {HANDOFF_PARAM: stale}), "stale-handoff")
        self.assertEqual(core.pins_held, 0)

    def test_a_request_names_its_task_in_kv_transfer_params(self) -> None:
        core = self.core()
        (key,) = self.keys(1)
        review = {TASK_PARAM: "review"}
        self.assertNotEqual(core.digests(key), core.digests(key, review))
        self.publish(core, [key])  # under the configured task
        self.assertEqual(core.lookup(key, "r", review), "miss")
        self.assertEqual(core.lookup(key, "r"), "hit")
        with self.assertRaises(waitprep.WaitprepError) as caught:
            core.digests(key, {TASK_PARAM: ""})
        self.assertEqual(caught.exception.field, "kv_transfer_params.%s" % TASK_PARAM)
        # One request's bad parameters never raise into the scheduler: its lookups miss, its loads fail.
        bad = {TASK_PARAM: 7}
        self.assertEqual(core.lookup(key, "r", bad), "miss")
        self.assertEqual(core.prepare_load([key], "r", bad).missing, [0])
        self.assertEqual(core.complete_load([key], "r", bad), 0)
        self.assertEqual(core.on_new_request("r", {HANDOFF_PARAM: "not-a-token"}), "invalid-token")
        self.assertEqual(core.stats["bad_params"], 3)
        self.assertEqual(core.pins_held, 0)

    def test_events_report_this_deployments_stores_and_removals_in_order(self) -> None:
        core = self.core()
        core.take_events()  # what earlier tests left in the feed
        keys = self.keys(3)
        self.publish(core, keys)
        # Another deployment's artifact in the same table (another model) is not this manager's.
        foreign = VllmManagerCore.open(settings(self.producer.table, model="other-model"))
        self.addCleanup(foreign.shutdown)
        self.producer.publish([item(foreign.digests(keys[0])[0], keys[0], SIZE)])
        self.evict(core, keys[1])
        self.assertEqual(core.take_events(), [(False, keys), (True, [keys[1]])])
        self.assertEqual(core.take_events(), [])

    def test_settings_are_checked_and_name_what_is_wrong(self) -> None:
        with self.assertRaises(waitprep.WaitprepError) as caught:
            AdapterConfig({"table": "t", "runtime": "r", "colour": "blue"}, "kv_connector_extra_config.waitprep")
        self.assertEqual(caught.exception.field, "kv_connector_extra_config.waitprep.colour")
        with self.assertRaises(waitprep.WaitprepError) as caught:
            VllmManagerCore.open(settings(self.producer.table, model=None))
        self.assertEqual(caught.exception.field, "waitprep.model")


class _Page:
    """A KV block's page as the worker writes it: ``view``/``reshape``/slice give the page, ``copy_`` writes."""

    def __init__(self, memory: bytearray, start: int, end: int) -> None:
        self.memory, self.start, self.end = memory, start, end

    def view(self, dtype: Any) -> "_Page":
        return self

    def reshape(self, *shape: Any) -> "_Page":
        return self

    def __getitem__(self, s: slice) -> "_Page":
        return _Page(self.memory, self.start, self.start + (s.stop if s.stop is not None else self.end - self.start))

    def copy_(self, source: Any) -> None:
        self.memory[self.start:self.end] = bytes(source)


class _Tensor:
    def __init__(self, blocks: int, page_bytes: int) -> None:
        self.page_bytes = page_bytes
        self.memory = bytearray(blocks * page_bytes)

    def __getitem__(self, block: int) -> _Page:
        return _Page(self.memory, block * self.page_bytes, (block + 1) * self.page_bytes)


class _Ref:
    def __init__(self, tensor_idx: int, page_size_bytes: int) -> None:
        self.tensor_idx, self.page_size_bytes = tensor_idx, page_size_bytes


class _Caches:
    def __init__(self, tensors: List[_Tensor], group_data_refs: List[List[_Ref]]) -> None:
        self.tensors = [type("T", (), {"tensor": t})() for t in tensors]
        self.group_data_refs = group_data_refs


class _Config:
    """vLLM 0.23's OffloadingConfig, as much as the spec reads of it."""

    def __init__(self, extra_config: Any, world_size: int = 1, rank: int = 0, replicated_layout: bool = False) -> None:
        self.extra_config = extra_config
        self.model = type("Model", (), {"name": "meta-llama/Llama-3.1-8B-Instruct", "dtype": "bfloat16"})()
        self.parallel = type("Parallel", (), {"world_size": world_size, "rank": rank, "tp_size": world_size, "pp_size": 1})()
        self.replicated_layout = replicated_layout


@needs_library
class EngineClasses(unittest.TestCase):
    """The engine's classes through a stand-in of vLLM's base module."""

    def setUp(self) -> None:
        self.producer = start_producer(self.addCleanup, "vllm-engine")

    def test_importing_defines_a_concrete_manager_and_reads_only_offloading_manager(self) -> None:
        with _engines.engine("vllm") as module:
            base = module.fake_base
            self.assertTrue(module.ENGINE_AVAILABLE)
            self.assertEqual(base.names_read, {"OffloadingManager"})
            self.assertTrue(issubclass(module.WaitprepOffloadingManager, base.OffloadingManager))
            self.assertEqual(getattr(module.WaitprepOffloadingManager, "__abstractmethods__", frozenset()), frozenset())

    def test_the_manager_answers_in_vllms_types(self) -> None:
        with _engines.engine("vllm") as module:
            base = module.fake_base
            manager = module.WaitprepOffloadingManager(VllmManagerCore.open(settings(self.producer.table)))
            self.addCleanup(manager.shutdown)
            core = manager.core
            key, absent, pending = [vllm_offload_key(hashlib.sha256(b"e%d" % i).digest(), 0) for i in range(3)]
            self.producer.publish([item(core.digests(key)[0], key, SIZE)])
            self.producer.call("reserve", items=[item(core.digests(pending)[0], pending, SIZE)])
            ctx = base.ReqContext(req_id="r", kv_transfer_params=None)
            self.assertIsInstance(manager.on_new_request(ctx), base.RequestOffloadingContext)
            self.assertIs(manager.lookup(key, ctx), base.LookupResult.HIT)
            self.assertIs(manager.lookup(absent, ctx), base.LookupResult.MISS)
            self.assertIs(manager.lookup(pending, ctx), base.LookupResult.HIT_PENDING)
            spec = manager.prepare_load([key], ctx)
            self.assertIsInstance(spec, base.LoadStoreSpec)
            self.assertEqual(spec.plan.missing, [])
            self.assertIsNone(manager.prepare_store([key], ctx))
            manager.complete_load([key], ctx)
            manager.on_request_finished(ctx)
            events = list(manager.take_events())
            self.assertEqual([(e.keys, e.removed, e.medium) for e in events], [([key], False, base.Medium.CPU)])
            self.assertEqual(core.pins_held, 0)

    def test_the_spec_is_found_by_name_and_gives_a_manager_and_a_worker_that_loads(self) -> None:
        with _engines.engine("vllm") as module:
            base = module.fake_base
            spec_cls = getattr(module, "WaitprepOffloadingSpec")  # as vLLM's factory takes it
            self.assertTrue(issubclass(spec_cls, base.OffloadingSpec))
            # No model or dtype in the settings: the spec takes vLLM's.
            waitprep_settings = {"table": self.producer.table, "runtime": "vllm/0.23", "layout": "NHD", "task": "t", "namespace": "n"}
            spec = spec_cls(_Config({"spec_name": "WaitprepOffloadingSpec", "waitprep": waitprep_settings}))
            manager = spec.get_manager()
            self.addCleanup(manager.shutdown)
            self.assertEqual(manager.core.keyers_for_default()[0].profile, "dtype=bfloat16,layout=NHD,tp=1,rank=0")
            # Block i of group 0 is two pages (one per data reference), each 256 bytes: 512 in all.
            tensors = [_Tensor(8, 256), _Tensor(8, 256)]
            worker = spec.get_worker(_Caches(tensors, [[_Ref(0, 256), _Ref(1, 256)]]))
            self.assertIsInstance(worker, base.OffloadingWorker)
            torch = __import__("sys").modules["torch"]
            if not hasattr(torch, "frombuffer"):
                torch.frombuffer = lambda data, dtype=None: data  # type: ignore[attr-defined]
            keys = [vllm_offload_key(hashlib.sha256(b"w%d" % i).digest(), 0) for i in range(2)]
            digests = [manager.core.digests(k)[0] for k in keys]
            self.producer.publish([item(d, k, SIZE) for d, k in zip(digests, keys)])
            ctx = base.ReqContext(req_id="r")
            spec_load = manager.prepare_load(keys, ctx)
            dst = type("GPUSpec", (), {"block_ids": [5, 2]})()
            self.assertTrue(worker.submit_load(7, spec_load, dst))
            self.assertEqual([(r.job_id, r.success) for r in worker.get_finished()], [(7, True)])
            for digest, block in zip(digests, (5, 2)):
                want = expected_payload(digest, SIZE)
                self.assertEqual(bytes(tensors[0].memory[block * 256:(block + 1) * 256]), want[:256])
                self.assertEqual(bytes(tensors[1].memory[block * 256:(block + 1) * 256]), want[256:])
            manager.complete_load(keys, ctx)
            self.assertFalse(worker.submit_store(8, None, None))
            self.assertEqual(manager.core.pins_held, 0)
            # Two workers: one artifact each, and each worker reads its own; one for all when replicated.
            second = spec_cls(_Config({"waitprep": waitprep_settings}, world_size=2, rank=1))
            self.assertEqual(second.get_worker(_Caches(tensors, [])).core.rank, 1)
            two = second.get_manager()
            self.addCleanup(two.shutdown)
            self.assertEqual([k.profile for k in two.core.keyers_for_default()], ["dtype=bfloat16,layout=NHD,tp=2,rank=0", "dtype=bfloat16,layout=NHD,tp=2,rank=1"])
            shared = spec_cls(_Config({"waitprep": waitprep_settings}, world_size=8, rank=3, replicated_layout=True)).get_manager()
            self.addCleanup(shared.shutdown)
            self.assertEqual([k.profile for k in shared.core.keyers_for_default()], ["dtype=bfloat16,layout=NHD,tp=1,rank=0"])

    def test_without_vllm_the_module_imports_and_says_what_is_missing(self) -> None:
        with _engines.engine("vllm", absent=True) as module:
            self.assertFalse(module.ENGINE_AVAILABLE)
            for use in (lambda: module.WaitprepOffloadingManager(None), lambda: getattr(module, "WaitprepOffloadingSpec")):
                with self.assertRaises(waitprep.WaitprepError) as caught:
                    use()
                self.assertEqual(caught.exception.code, "ERR_ENGINE_UNAVAILABLE")
                self.assertIn("vllm.v1.kv_offload.base", str(caught.exception))
            core = module.VllmManagerCore.open(settings(self.producer.table))  # the core needs no vLLM
            self.addCleanup(core.shutdown)
            self.assertEqual(core.lookup(b"\x01" * 36, "r"), "miss")


if __name__ == "__main__":
    unittest.main()
