"""waitprep behind vLLM's offloading connector: an ``OffloadingManager`` whose offloaded tier is a
waitprep lease table, an ``OffloadingSpec`` that vLLM loads by name, and the worker that reads the
table's arena records into the engine's blocks.

Written against ``vllm/v1/kv_offload/base.py`` as of vLLM 0.23 (the interface moved there from
``abstract.py`` in 0.21; ``on_new_request`` is abstract since about 0.23): one ``OffloadKey`` per
``lookup``, answered ``HIT`` / ``HIT_PENDING`` / ``MISS``; a ``ReqContext`` on every call; keys that
carry a KV-group index. Enable it with::

    --kv-transfer-config '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
      "kv_connector_extra_config": {"spec_name": "WaitprepOffloadingSpec",
        "spec_module_path": "waitprep.adapters.vllm",
        "waitprep": {"table": "engine0-kv", "runtime": "vllm/0.23", "model": "meta-llama/Llama-3.1-8B-Instruct",
                     "dtype": "bf16", "layout": "NHD", "task": "default", "namespace": "default"}}}'

Importing this module reads ``OffloadingManager`` from vLLM and nothing else (not even its version):
the spec and worker classes, and the names the manager answers with (``LookupResult``,
``OffloadingEvent``, ...), are read from the same module when first used. Without vLLM the module
imports, and :class:`WaitprepOffloadingManager` raises ``ERR_ENGINE_UNAVAILABLE`` saying what is
missing. The logic is :class:`VllmManagerCore` and :class:`VllmWorkerCore`, which take plain values
and need no vLLM.

Rules the manager keeps:

- ``lookup`` peeks: it never pins (vLLM's lookup must not protect anything). ``ready`` is ``HIT``,
  ``preparing`` (reserved, not yet published) ``HIT_PENDING``, anything else ``MISS``.
- ``prepare_load`` pins every given key's artifact for the request, one pin per (request, key), so
  two requests loading one block hold two pins; ``complete_load`` releases one of the request's
  pins per key, in whatever order the keys come. ``prepare_load`` cannot fail in vLLM: a key whose
  artifact was evicted since ``lookup`` goes into the load spec without a location, and the
  worker reports that transfer failed, so vLLM recomputes; it never copies another artifact's
  bytes (a record names its key, and ``read_arena_record`` checks it).
- A handoff token in ``kv_transfer_params["waitprep_handoff"]`` is pinned in ``on_new_request`` and
  released in ``on_request_finished``. ``kv_transfer_params["waitprep_task"]`` and
  ``["waitprep_namespace"]`` override the configured task and namespace for that request's keys.
  A request's bad parameters never raise into vLLM's scheduler: a malformed token is the miss
  ``invalid-token``, and a task or namespace that is not a non-empty string makes the request's
  lookups miss.
- ``prepare_store`` returns None: the engine is not the table's producer (one producer per table,
  the storage worker), so this tier takes no stores.
- ``take_events`` reads the producer's stored/removed feed (``waitprep.adapters.events``), bounded,
  with the rule stated there for a reader that falls behind.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .. import arena as _arena
from ..engine_keys import EngineKeys
from ..errors import WaitprepError, invalid
from ..table import Lease, LeaseMeta, open_table
from ._core import AdapterConfig, PinLedger, TableClient, engine_unavailable
from .events import EventFeedReader

__all__ = [
    "INTERFACE",
    "ENGINE_AVAILABLE",
    "HANDOFF_PARAM",
    "TASK_PARAM",
    "NAMESPACE_PARAM",
    "LoadPlan",
    "VllmManagerCore",
    "VllmWorkerCore",
    "WaitprepOffloadingManager",
]

#: The interface this module is written against.
INTERFACE = "vllm.v1.kv_offload.base (vLLM 0.23: OffloadKey with KV-group index, LookupResult, ReqContext, abstract on_new_request)"
_BASE = "vllm.v1.kv_offload.base"
#: ``kv_transfer_params`` entries the manager reads.
HANDOFF_PARAM = "waitprep_handoff"
TASK_PARAM = "waitprep_task"
NAMESPACE_PARAM = "waitprep_namespace"
_DIGEST_CACHE = 1 << 16


class LoadPlan:
    """What ``prepare_load`` hands the worker: the keys in the engine's order, and for each key one
    digest and one meta per rank's artifact (``metas[i]`` is None when key ``i`` could not be
    pinned: its transfer fails)."""

    __slots__ = ("keys", "digests", "metas", "table", "arena_root", "verify_checksum")

    def __init__(self, keys: List[bytes], digests: List[Tuple[bytes, ...]], metas: List[Optional[Tuple[LeaseMeta, ...]]], table: str, arena_root: str, verify_checksum: bool) -> None:
        self.keys = keys
        self.digests = digests
        self.metas = metas
        self.table = table
        self.arena_root = arena_root
        self.verify_checksum = verify_checksum

    @property
    def missing(self) -> List[int]:
        """Indexes of the keys that could not be pinned."""
        return [i for i, meta in enumerate(self.metas) if meta is None]

    def __repr__(self) -> str:
        return "<LoadPlan %d keys, %d missing>" % (len(self.keys), len(self.missing))


def _params(params: Optional[Mapping[str, Any]]) -> Mapping[str, Any]:
    return params if isinstance(params, Mapping) else {}


class VllmManagerCore:
    """The manager's logic, with no vLLM: keys in (``OffloadKey`` bytes), answers out as strings
    (``'hit'``, ``'pending'``, ``'miss'``) and :class:`LoadPlan`.

    ``table`` is a consumer Table (opened by :meth:`open`), ``config`` an :class:`AdapterConfig`.
    ``tp_degree`` is the number of workers whose bytes differ and ``shared_across_ranks`` whether
    they all hold the same bytes; the spec reads both from vLLM's offloading config (its world size,
    which counts tensor, pipeline and context parallelism alike, and ``replicated_layout``): each
    block is one artifact per worker, keyed with the profile ``tp=<workers>,rank=<worker>``, or one
    artifact for all workers when they share their bytes (MLA). ``model`` and ``dtype`` are the
    engine's, used when the settings do not name them.

    Thread-safe: vLLM calls the manager from its scheduler thread, and the tests call it from several.
    """

    def __init__(self, table: Any, config: AdapterConfig, *, tp_degree: int = 1, shared_across_ranks: bool = False, feed: Optional[EventFeedReader] = None,
                 model: Optional[str] = None, dtype: Optional[str] = None) -> None:
        self.config = config
        self.default_task = config.need("task")
        self.default_namespace = config.need("namespace")
        self._model = config.model or config.need("model", model)
        self._dtype = config.dtype or config.need("dtype", dtype)
        self._layout = config.need("layout")
        self.client = TableClient(table, config.arena_root, config.verify_checksum)
        self.ranks = 1 if shared_across_ranks else tp_degree
        self.tp_degree = tp_degree
        self.shared_across_ranks = shared_across_ranks
        self.ledger = PinLedger()
        self._lock = threading.Lock()
        self._keyers: Dict[Tuple[str, str], Tuple[EngineKeys, ...]] = {}
        self._cache: Dict[Tuple[str, str], Dict[bytes, Tuple[bytes, ...]]] = {}
        self._handoffs: Dict[str, Lease] = {}
        self._feed = feed
        #: Counters for monitoring and the tests.
        self.stats: Dict[str, int] = dict.fromkeys(
            ("lookups", "hits", "pending", "misses", "loads", "load_keys_missing", "handoffs_pinned", "handoffs_missed", "events", "events_lost", "bad_params"), 0)
        self._keyers_for(self.default_task, self.default_namespace)

    @classmethod
    def open(cls, config: AdapterConfig, **kwargs: Any) -> "VllmManagerCore":
        """Opens the configured table as a consumer (and its event feed, unless it is off or absent)."""
        table = open_table(config.table)
        feed = None
        try:
            path = config.feed_path()
            if path is not None:
                try:
                    feed = EventFeedReader(path)
                except FileNotFoundError:
                    feed = None
            return cls(table, config, feed=feed, **kwargs)
        except BaseException:
            if feed is not None:
                feed.close()
            table.close()
            raise

    # Keys.

    def _keyers_for(self, task: str, namespace: str) -> Tuple[EngineKeys, ...]:
        keyers = self._keyers.get((task, namespace))
        if keyers is None:
            c = self.config
            keyers = tuple(
                EngineKeys("vllm", **c.key_options(model=self._model, dtype=self._dtype, layout=self._layout, tp_degree=self.tp_degree,
                                                    rank=rank, task=task, namespace=namespace, shared_across_ranks=self.shared_across_ranks))
                for rank in range(self.ranks)
            )
            with self._lock:
                keyers = self._keyers.setdefault((task, namespace), keyers)
                self._cache.setdefault((task, namespace), {})
        return keyers

    def keyers_for_default(self) -> Tuple[EngineKeys, ...]:
        """The keyers of the configured task and namespace, one per worker whose bytes differ."""
        return self._keyers_for(self.default_task, self.default_namespace)

    def _scope(self, params: Optional[Mapping[str, Any]]) -> Tuple[str, str]:
        p = _params(params)
        task = p.get(TASK_PARAM, self.default_task)
        namespace = p.get(NAMESPACE_PARAM, self.default_namespace)
        if not isinstance(task, str) or not task:
            raise invalid("kv_transfer_params.%s" % TASK_PARAM, "a non-empty string", task)
        if not isinstance(namespace, str) or not namespace:
            raise invalid("kv_transfer_params.%s" % NAMESPACE_PARAM, "a non-empty string", namespace)
        return task, namespace

    def digests(self, key: bytes, params: Optional[Mapping[str, Any]] = None) -> Tuple[bytes, ...]:
        """The digests of ``key``'s artifacts, one per rank (one when ranks share their bytes)."""
        scope = self._scope(params)
        cache = self._cache.get(scope)
        if cache is not None:
            found = cache.get(key)
            if found is not None:
                return found
        keyers = self._keyers_for(*scope)
        cache = self._cache[scope]
        digests = tuple(keyer.digest(key) for keyer in keyers)
        if len(cache) >= _DIGEST_CACHE:
            cache.clear()  # bounded: a scheduler asks again for the keys it still waits on
        cache[bytes(key)] = digests
        return digests

    # The manager's calls.

    def _digests_or_none(self, key: bytes, params: Optional[Mapping[str, Any]]) -> Optional[Tuple[bytes, ...]]:
        """:meth:`digests`, or None for a request whose parameters name no valid task or namespace:
        the scheduler's calls must not raise for one request's bad parameters, so such a request
        misses (and is counted in ``stats["bad_params"]``)."""
        try:
            return self.digests(key, params)
        except WaitprepError:
            self.stats["bad_params"] += 1
            return None

    def lookup(self, key: bytes, req_id: str = "", params: Optional[Mapping[str, Any]] = None) -> str:
        """``'hit'`` when every artifact of ``key`` is ready, ``'pending'`` when none is missing but
        some is still being prepared, else ``'miss'``. Pins nothing."""
        peek = self.client.peek
        pending = False
        stats = self.stats
        stats["lookups"] += 1
        digests = self._digests_or_none(key, params)
        if digests is None:
            stats["misses"] += 1
            return "miss"
        for digest in digests:
            state = peek(digest)
            if state == "ready":
                continue
            if state == "preparing":
                pending = True
                continue
            stats["misses"] += 1
            return "miss"
        if pending:
            stats["pending"] += 1
            return "pending"
        stats["hits"] += 1
        return "hit"

    def prepare_load(self, keys: Sequence[bytes], req_id: str = "", params: Optional[Mapping[str, Any]] = None) -> LoadPlan:
        """Pins every artifact of every key for ``req_id`` and returns the plan the worker loads.
        A key with an artifact it could not pin has no metas: that transfer fails on the worker."""
        keys = [bytes(k) for k in keys]
        found = [self._digests_or_none(k, params) for k in keys]
        if any(ds is None for ds in found):
            c = self.config
            return LoadPlan(keys, [()] * len(keys), [None] * len(keys), self.client.name, c.arena_root, c.verify_checksum)
        per_key: List[Tuple[bytes, ...]] = found  # type: ignore[assignment]
        flat = [d for ds in per_key for d in ds]
        run = self.client.pin_prefix(flat)
        pinned: List[Optional[Lease]] = [run[i] for i in range(len(run))]
        # Past the run's first miss, each artifact on its own: one evicted block in the middle must
        # not cost the blocks after it.
        for i in range(len(run), len(flat)):
            got = self.client.pin(flat[i])
            pinned.append(got if isinstance(got, Lease) else None)
        held = [(flat[i], lease) for i, lease in enumerate(pinned) if lease is not None]
        self.ledger.add_many(req_id, held)
        metas: List[Optional[Tuple[LeaseMeta, ...]]] = []
        r = self.ranks
        for i in range(len(keys)):
            leases = pinned[i * r:(i + 1) * r]
            metas.append(None if any(lease is None for lease in leases) else tuple(lease.meta for lease in leases))  # type: ignore[union-attr]
        self.stats["loads"] += 1
        self.stats["load_keys_missing"] += sum(1 for m in metas if m is None)
        c = self.config
        return LoadPlan(keys, per_key, metas, self.client.name, c.arena_root, c.verify_checksum)

    def complete_load(self, keys: Iterable[bytes], req_id: str = "", params: Optional[Mapping[str, Any]] = None) -> int:
        """Releases one of ``req_id``'s pins per artifact of each key (any order); returns how many."""
        digests = [d for k in keys for d in (self._digests_or_none(k, params) or ())]
        return self.client.release(self.ledger.take_many(req_id, digests))

    def on_new_request(self, req_id: str, params: Optional[Mapping[str, Any]] = None) -> Optional[str]:
        """Pins the handoff token in ``params`` for the request, if there is one: ``'pinned'``, the
        miss reason, or None (no token)."""
        token = _params(params).get(HANDOFF_PARAM)
        if token is None:
            return None
        try:
            got = self.client.pin_exact(token)
        except WaitprepError:  # a malformed token, or another table's: this request's problem, not the scheduler's
            got = "invalid-token"
        if not isinstance(got, Lease):
            self.stats["handoffs_missed"] += 1
            return got
        with self._lock:
            old = self._handoffs.pop(req_id, None)
            self._handoffs[req_id] = got
        if old is not None:
            old.close()
        self.stats["handoffs_pinned"] += 1
        return "pinned"

    def on_request_finished(self, req_id: str) -> bool:
        """Releases the request's handoff pin (its load pins are released by ``complete_load``,
        which vLLM may still call after this). True when one was released."""
        with self._lock:
            lease = self._handoffs.pop(req_id, None)
        return lease.close() if lease is not None else False

    def take_events(self) -> List[Tuple[bool, List[bytes]]]:
        """The feed's events since the last call, as ``(removed, offload_keys)`` runs in order.
        Only this deployment's artifacts count: an event is reported when its digest is the first
        rank's digest of its engine key under a task and namespace this manager has keyed. Empty
        without a feed."""
        feed = self._feed
        if feed is None:
            return []
        batch = feed.take()
        self.stats["events_lost"] += batch.lost
        with self._lock:
            keyers = [ks[0] for ks in self._keyers.values()]
        out: List[Tuple[bool, List[bytes]]] = []
        for event in batch.events:
            if len(event.engine_key) < 5 or not any(k.digest(event.engine_key) == event.digest for k in keyers):
                continue
            removed = event.kind == "removed"
            if out and out[-1][0] == removed:
                out[-1][1].append(event.engine_key)
            else:
                out.append((removed, [event.engine_key]))
            self.stats["events"] += 1
        return out

    def reset_cache(self) -> None:
        """Forgets the digests it computed; pins of loads in flight stay until their ``complete_load``."""
        with self._lock:
            for cache in self._cache.values():
                cache.clear()

    @property
    def pins_held(self) -> int:
        """Load pins and handoff pins held now."""
        return self.ledger.held + len(self._handoffs)

    def shutdown(self) -> None:
        """Releases every pin and closes the table and the feed."""
        with self._lock:
            handoffs = list(self._handoffs.values())
            self._handoffs.clear()
        self.client.release(self.ledger.take_all() + [h for h in handoffs if not h.closed])
        if self._feed is not None:
            self._feed.close()
        self.client.table.close()


class VllmWorkerCore:
    """The worker's reads, with no vLLM: for each key of a :class:`LoadPlan`, this rank's record,
    checked against its key, handed to ``write(index, payload)``. A plan key without metas, or a
    record that does not belong, makes the transfer fail; bytes are written only for keys whose
    record was read whole and matched."""

    def __init__(self, rank: int = 0, ranks: int = 1) -> None:
        self.rank = rank if ranks > 1 else 0
        self.stats: Dict[str, int] = {"loads": 0, "failed": 0, "bytes": 0}
        self._clients: Dict[Tuple[str, str], Any] = {}

    def load(self, plan: LoadPlan, write: Callable[[int, memoryview], None]) -> bool:
        """Reads every key's record and writes it; False at the first key it cannot (the keys
        before it were written: vLLM discards a failed transfer's blocks and recomputes them)."""
        self.stats["loads"] += 1
        for i, metas in enumerate(plan.metas):
            if metas is None:
                self.stats["failed"] += 1
                return False
            record = _arena.read_arena_record(plan.table, plan.digests[i][self.rank], metas[self.rank], plan.arena_root, plan.verify_checksum)
            if isinstance(record, _arena.Mismatch):
                self.stats["failed"] += 1
                return False
            write(i, memoryview(record.payload))
            self.stats["bytes"] += len(record.payload)
        return True


# --- The engine's classes ---------------------------------------------------------------------

def _settings(extra_config: Any) -> AdapterConfig:
    values = extra_config.get("waitprep") if isinstance(extra_config, Mapping) else None
    if values is None:
        raise invalid("kv_connector_extra_config.waitprep", "the adapter's settings (a mapping with table, runtime, model, dtype, layout, task, namespace)", values)
    return AdapterConfig(values, "kv_connector_extra_config.waitprep")


def _base() -> Any:
    return importlib.import_module(_BASE)


_RESULTS = {"hit": "HIT", "pending": "HIT_PENDING", "miss": "MISS"}

try:
    from vllm.v1.kv_offload.base import OffloadingManager as _OffloadingManager
except Exception as error:  # an absent engine, or one that fails to import
    ENGINE_AVAILABLE = False
    _IMPORT_ERROR: Optional[BaseException] = error

    class WaitprepOffloadingManager:  # type: ignore[no-redef]
        """Stands in for the vLLM manager when vLLM cannot be imported: using it says why."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise engine_unavailable("waitprep.adapters.vllm", "vLLM's %s (OffloadingManager, vLLM 0.21 or later)" % _BASE, _IMPORT_ERROR)  # type: ignore[arg-type]

else:
    ENGINE_AVAILABLE = True
    _IMPORT_ERROR = None

    class WaitprepOffloadingManager(_OffloadingManager):  # type: ignore[no-redef]
        """vLLM's ``OffloadingManager`` over a waitprep table (the rules are the module's)."""

        def __init__(self, core: VllmManagerCore) -> None:
            self.core = core

        def lookup(self, key: Any, req_context: Any) -> Any:
            return getattr(_base().LookupResult, _RESULTS[self.core.lookup(key, req_context.req_id, req_context.kv_transfer_params)])

        def prepare_load(self, keys: Any, req_context: Any) -> Any:
            return _spec_class()(self.core.prepare_load(list(keys), req_context.req_id, req_context.kv_transfer_params))

        def complete_load(self, keys: Any, req_context: Any) -> None:
            self.core.complete_load(keys, req_context.req_id, req_context.kv_transfer_params)

        def prepare_store(self, keys: Any, req_context: Any) -> None:
            return None

        def on_new_request(self, req_context: Any) -> Any:
            self.core.on_new_request(req_context.req_id, req_context.kv_transfer_params)
            context = getattr(_base(), "RequestOffloadingContext", None)
            return context() if context is not None else None

        def on_request_finished(self, req_context: Any) -> None:
            self.core.on_request_finished(req_context.req_id)

        def take_events(self) -> Iterable[Any]:
            base = _base()
            medium = base.Medium.CPU if hasattr(base, "Medium") else "CPU"
            for removed, keys in self.core.take_events():
                yield base.OffloadingEvent(keys=keys, medium=medium, removed=removed)

        def reset_cache(self) -> None:
            self.core.reset_cache()

        def shutdown(self) -> None:
            self.core.shutdown()


_built: Dict[str, Any] = {}


def _spec_class() -> Any:
    """``WaitprepLoadStoreSpec``: vLLM's ``LoadStoreSpec`` carrying a :class:`LoadPlan`, built on first use."""
    cls = _built.get("WaitprepLoadStoreSpec")
    if cls is None:
        base = _base()

        def __init__(self: Any, plan: LoadPlan) -> None:
            self.plan = plan

        cls = type("WaitprepLoadStoreSpec", (base.LoadStoreSpec,), {"__init__": __init__, "__module__": __name__,
                                                                      "medium": staticmethod(lambda: "waitprep"),
                                                                      "__repr__": lambda self: "<WaitprepLoadStoreSpec %r>" % (self.plan,)})
        _built["WaitprepLoadStoreSpec"] = cls
    return cls


def _parallel(spec: Any) -> Tuple[int, int, bool]:
    """(workers, this worker's index, whether every worker holds the same bytes) from the spec's
    configuration: ``config.parallel`` (world size, rank; the scheduler is rank 0) and
    ``config.replicated_layout`` in vLLM 0.23's ``OffloadingConfig``; an older spec's
    ``vllm_config`` gives the TP degree and ``use_mla`` instead, and vLLM's parallel state the rank."""
    config = getattr(spec, "config", None)
    parallel = getattr(config, "parallel", None)
    if parallel is not None:
        return int(parallel.world_size), int(parallel.rank), bool(getattr(config, "replicated_layout", False))
    vllm_config = getattr(spec, "vllm_config", None)
    tp = getattr(getattr(vllm_config, "parallel_config", None), "tensor_parallel_size", None)
    mla = getattr(getattr(vllm_config, "model_config", None), "use_mla", None)
    return (tp if isinstance(tp, int) and tp >= 1 else 1), _worker_rank(), bool(mla)


def _model(spec: Any) -> Tuple[Optional[str], Optional[str]]:
    """(model name, KV dtype) from ``config.model`` in vLLM 0.23's ``OffloadingConfig``, when there."""
    model = getattr(getattr(spec, "config", None), "model", None)
    return getattr(model, "name", None), getattr(model, "dtype", None)


def _worker_rank() -> int:
    try:
        parallel_state = importlib.import_module("vllm.distributed.parallel_state")
        return int(parallel_state.get_tensor_model_parallel_rank())
    except Exception:  # not initialised (a single process): rank 0
        return 0


def _build_spec_and_worker() -> None:
    base = _base()

    class WaitprepOffloadingWorker(base.OffloadingWorker):  # type: ignore[misc, name-defined]
        """Loads a plan's records into this rank's KV blocks: for key ``i``, the record's payload is
        the block's pages, one after another, one per data reference of the key's KV group
        (``kv_caches.group_data_refs[group]``), each ``page_size_bytes`` long. Loads run on the
        calling thread and are finished when ``submit_load`` returns; stores are refused."""

        def __init__(self, kv_caches: Any, rank: int, ranks: int) -> None:
            self.kv_caches = kv_caches
            self.core = VllmWorkerCore(rank, ranks)
            self._finished: List[Any] = []

        def submit_store(self, job_id: int, src_spec: Any, dst_spec: Any) -> bool:
            return False

        def submit_load(self, job_id: int, src_spec: Any, dst_spec: Any) -> bool:
            plan: LoadPlan = src_spec.plan
            block_ids = [int(b) for b in dst_spec.block_ids]
            torch = importlib.import_module("torch")
            refs = self.kv_caches.group_data_refs
            tensors = self.kv_caches.tensors

            def write(i: int, payload: memoryview) -> None:
                group = int.from_bytes(plan.keys[i][-4:], "big")
                at = 0
                for ref in refs[group]:
                    page = tensors[ref.tensor_idx].tensor[block_ids[i]].view(torch.uint8).reshape(-1)[:ref.page_size_bytes]
                    page.copy_(torch.frombuffer(bytearray(payload[at:at + ref.page_size_bytes]), dtype=torch.uint8))
                    at += ref.page_size_bytes

            ok = self.core.load(plan, write)
            self._finished.append(base.TransferResult(job_id=job_id, success=ok))
            return True

        def get_finished(self) -> List[Any]:
            done, self._finished = self._finished, []
            return done

        def wait(self, job_ids: Any) -> None:
            return None

    class WaitprepOffloadingSpec(base.OffloadingSpec):  # type: ignore[misc, name-defined]
        """What ``spec_name`` names: reads ``kv_connector_extra_config["waitprep"]`` and gives vLLM the
        manager (scheduler side) and the worker (each worker process)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.waitprep_settings = _settings(self.extra_config)
            self.waitprep_workers, self.waitprep_rank, self.waitprep_shared = _parallel(self)

        def get_manager(self) -> Any:
            model, dtype = _model(self)
            core = VllmManagerCore.open(self.waitprep_settings, tp_degree=self.waitprep_workers, shared_across_ranks=self.waitprep_shared,
                                        model=model, dtype=dtype)
            return WaitprepOffloadingManager(core)

        def get_worker(self, kv_caches: Any) -> Any:
            ranks = 1 if self.waitprep_shared else self.waitprep_workers
            return WaitprepOffloadingWorker(kv_caches, self.waitprep_rank, ranks)

    for cls in (WaitprepOffloadingWorker, WaitprepOffloadingSpec):
        cls.__module__ = __name__
        _built[cls.__name__] = cls


def __getattr__(name: str) -> Any:
    """``WaitprepOffloadingSpec`` and ``WaitprepOffloadingWorker`` are built from vLLM's base module
    the first time they are asked for (vLLM's factory asks for the spec by name)."""
    if name in ("WaitprepOffloadingSpec", "WaitprepOffloadingWorker", "WaitprepLoadStoreSpec"):
        if not ENGINE_AVAILABLE:
            raise engine_unavailable("waitprep.adapters.vllm", "vLLM's %s" % _BASE, _IMPORT_ERROR)  # type: ignore[arg-type]
        if name == "WaitprepLoadStoreSpec":
            return _spec_class()
        if name not in _built:
            _build_spec_and_worker()
        return _built[name]
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
