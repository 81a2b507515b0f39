"""Restore against recompute, with the transformers engine (``tfengine``) on the device.

For each prompt size S the check runs, on one engine (random weights drawn on the device, SDPA):

1. **Full prefill** of S tokens: warmed up once, then timed ``reps`` times (the median is the
   prefill rate). One of those turns also decodes greedily, the reference for the comparison.
2. **The prefix's KV published.** A turn on the prompt's first S - N tokens (N: the new tokens a
   tool call adds); its cache (the *resident* cache: it never left the device) saved by the
   storage tier to its disk tier (``tfengine.storage.save_to_disk``) and prepared into an arena
   (``StorageTier.prepare``: checked, written to ``/dev/shm``, published in the lease table).
3. **The pinned host arena.** The arena file is mapped and registered with CUDA
   (``cudaHostRegister``), as a serving engine would register its arenas once; that one-time cost
   is reported apart.
4. **Restore**, timed from the pin to a usable device cache: pin the key (the Python package),
   check the record's header against the key and the lease's meta, one host-to-device copy of the
   KV bytes from the registered mapping on a stream of its own, and the ``DynamicCache`` built
   over them; beside it, in the same run, a plain host-to-device copy of the same number of bytes
   from a pinned buffer.
5. **The hit's turn**: prefill of the N new tokens on the restored cache, then the same greedy
   decode. Its logits are compared with the full recompute's (bounded: the failing property), and
   bit for bit with the same turn on the resident cache; the restored K and V are compared byte
   for byte with the resident cache's.

What a hit saves: full prefill - (restore + prefill of the N new tokens), each a median.
"""

from __future__ import annotations

import base64
import ctypes
import mmap
import os
import random
import statistics
import tempfile
import time
import warnings
from typing import Any, Dict, List, Optional, Tuple

#: The geometry of Llama-3.1-8B (its published config): 128 KiB of bf16 KV per token.
LLAMA_31_8B = dict(name="llama-3.1-8b", layers=32, hidden=4096, heads=32, kv_heads=8, intermediate=14336, context=131072)

#: cuMemHostRegister flags (cuda.h): every context may use the range; the device only reads it.
_REGISTER_PORTABLE = 0x01
_REGISTER_READ_ONLY = 0x08


def _driver_register(ptr: int, size: int) -> int:
    """Registers (page-locks) host memory with the CUDA driver, read-only: the CUresult.

    The driver API, not the runtime's cudaHostRegister: a refused runtime call would also leave
    its error as the thread's last error, which PyTorch then reports at its next kernel launch."""
    driver = ctypes.CDLL("libcuda.so.1")
    fn = getattr(driver, "cuMemHostRegister_v2", None) or driver.cuMemHostRegister
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return int(fn(ptr, size, _REGISTER_PORTABLE | _REGISTER_READ_ONLY))


def _driver_unregister(ptr: int) -> int:
    driver = ctypes.CDLL("libcuda.so.1")
    driver.cuMemHostUnregister.argtypes = [ctypes.c_void_p]
    driver.cuMemHostUnregister.restype = ctypes.c_int
    return int(driver.cuMemHostUnregister(ptr))

#: The bound on |hit logits - full recompute logits|, as a share of the largest full-recompute
#: logit. Why this much: the two paths compute the last N tokens with different kernels and
#: matrix shapes (the whole prompt at once, or N tokens against a cache), so every bf16 activation
#: may round differently: bf16 keeps 8 significant bits (a relative step of 2^-8 = 0.4%), and 32
#: layers of residual sums carry such roundings to the logits. 5% of the largest logit is about
#: 13 such steps at the top logit's scale: a hit whose KV is the right KV stays well inside it, and
#: the byte comparison of the restored cache (exact) is what catches a restore of wrong bytes.
LOGIT_BOUND_SHARE = 0.05


def _median(values: List[float]) -> float:
    return float(statistics.median(values))


def _tokens(seed: int, n: int, vocab: int) -> List[int]:
    rng = random.Random(seed)
    return [rng.randrange(vocab) for _ in range(n)]


class HostArena:
    """An arena file mapped read-only, as a uint8 tensor over the mapping, registered with CUDA when
    the engine runs on a GPU (``how`` says what was done; a registration CUDA refuses falls back to
    a pinned copy of the file, and says so)."""

    def __init__(self, path: str, cuda: bool) -> None:
        import torch

        self.path = path
        self.registered = False
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            size = os.fstat(fd).st_size
            self.map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fd)
        self.view = memoryview(self.map)
        with warnings.catch_warnings():
            # frombuffer warns that the mapping is not writable: the tensor is only ever read.
            warnings.simplefilter("ignore", UserWarning)
            self.tensor = torch.frombuffer(self.map, dtype=torch.uint8)
        self.how = "mapped (CPU: nothing to register)"
        self.register_s = 0.0
        if not cuda:
            return
        # The driver API registers in the calling thread's current context: the runtime has made
        # the device's primary context current here by the time anything synchronizes.
        torch.cuda.synchronize()
        start = time.perf_counter()
        status = _driver_register(self.tensor.data_ptr(), size)
        if status == 0:
            self.registered = True
            self.how = "mapped read-only and registered (cuMemHostRegister, read-only)"
        else:
            # A driver or device that refuses read-only registration: a pinned copy keeps the
            # copy asynchronous, and the report says the arena was copied.
            mapped = self.tensor
            self.tensor = torch.empty(size, dtype=torch.uint8, pin_memory=True)
            self.tensor.copy_(mapped)
            del mapped
            self.view.release()
            self.view = memoryview(self.tensor.numpy())
            self.how = f"copied into pinned memory (cuMemHostRegister of the read-only mapping returned CUresult {status})"
        self.register_s = time.perf_counter() - start

    def close(self) -> None:
        import torch

        if self.registered:
            torch.cuda.synchronize()  # no copy may still read the range
            _driver_unregister(self.tensor.data_ptr())
            self.registered = False
        self.view.release()
        del self.tensor
        try:
            self.map.close()
        except BufferError:
            pass  # a view of it is still referenced somewhere: the mapping goes with the last one


def restore(consumer: Any, digest: bytes, arenas: Dict[int, HostArena], engine: Any, stream: Any) -> Tuple[Any, Any, Dict[str, float]]:
    """The leased record of ``digest`` as a device cache: ``(cache, device buffer, timings)``.

    The pin is held from the lookup until the bytes are on the device (the copy has completed);
    the cache is built over a device buffer the caller keeps, then the lease is released.
    """
    import torch
    from transformers import DynamicCache
    from waitprep import arena

    from tfengine import kvcodec

    sync = torch.cuda.synchronize if engine.device.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    lease = consumer.try_pin(digest)
    if isinstance(lease, str):
        raise RuntimeError(f"the restore's pin missed: {lease}")
    try:
        index, offset = arena.split_location(lease.meta.location)
        host = arenas[index]
        header = arena.decode_record_header(host.view[offset:offset + arena.ARENA_RECORD_HEADER_BYTES])
        wrong = header if isinstance(header, arena.Mismatch) else arena.check_record_header(header, digest, lease.meta)
        if wrong is not None:
            raise RuntimeError(f"the leased record does not belong to its key: {wrong.reason}: {wrong.message}")
        start = offset + arena.ARENA_RECORD_HEADER_BYTES
        meta, tensors_at = kvcodec.header(host.view[start:start + header.payload_length])
        shapes = meta["layers"]
        want = engine.layer_shapes()
        if len(shapes) != len(want) or any(w != -1 and g != w for got, exp in zip(shapes, want) for g, w in zip(got, exp)):
            raise RuntimeError(f"the record's layer shapes {shapes[:1]}... are not the model's {want[:1]}...")
        first = start + tensors_at
        n = header.payload_length - tensors_at
        src = host.tensor[first:first + n]
        t1 = time.perf_counter()
        buf = torch.empty(n, dtype=torch.uint8, device=engine.device)
        if engine.device.type == "cuda":
            with torch.cuda.stream(stream):
                buf.copy_(src, non_blocking=True)
            stream.synchronize()
        else:
            buf.copy_(src)
        t2 = time.perf_counter()
    finally:
        lease.close()
    dtype = getattr(torch, meta["dtype"])
    size = torch.tensor([], dtype=dtype).element_size()
    data = []
    at = 0
    for shape in shapes:
        count = shape[0] * shape[1] * shape[2] * shape[3] * size
        k = buf[at:at + count].view(dtype).view(*shape)
        v = buf[at + count:at + 2 * count].view(dtype).view(*shape)
        data.append((k, v))
        at += 2 * count
    cache = DynamicCache(data, config=engine.model.config)
    sync()
    t3 = time.perf_counter()
    return cache, buf, {
        "pin_and_check_s": t1 - t0,
        "copy_s": t2 - t1,
        "cache_build_s": t3 - t2,
        "total_s": t3 - t0,
        "bytes": n,
        "offset": first,
        "source_alignment": int(src.data_ptr() % 4096),
    }


def plain_copy(n: int, device: Any, stream: Any, source: Any) -> float:
    """Seconds of one host-to-device copy of ``source`` (pinned on a GPU) into a fresh device buffer."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()
        start = time.perf_counter()
        dst = torch.empty(n, dtype=torch.uint8, device=device)
        with torch.cuda.stream(stream):
            dst.copy_(source, non_blocking=True)
        stream.synchronize()
        return time.perf_counter() - start
    start = time.perf_counter()
    torch.empty(n, dtype=torch.uint8).copy_(source)
    return time.perf_counter() - start


def same_kv(a: Any, b: Any) -> bool:
    """Whether two caches hold the same K and V, byte for byte."""
    import torch

    if len(a.layers) != len(b.layers):
        return False
    return all(x.keys.dtype == y.keys.dtype and torch.equal(x.keys.view(torch.uint8), y.keys.view(torch.uint8))
               and torch.equal(x.values.view(torch.uint8), y.values.view(torch.uint8))
               for x, y in zip(a.layers, b.layers))


def rotated_layers(cache: Any, engine: Any) -> Any:
    """The control: a cache holding the right K and V in the wrong layers (layer i gets layer
    i + 1's), the kind of wrong restore whose logits the bound must reject."""
    from transformers import DynamicCache

    layers = [(layer.keys, layer.values) for layer in cache.layers]
    return DynamicCache(layers[1:] + layers[:1], config=engine.model.config)


def compare_logits(hit: Any, full: Any) -> Dict[str, Any]:
    """The hit's next-token logits against the full recompute's."""
    import torch

    h, f = hit.logits.float(), full.logits.float()
    diff = (h - f).abs()
    scale = float(f.abs().max())
    agree = sum(1 for x, y in zip(hit.tokens, full.tokens) if x == y)
    first_split = next((i for i, (x, y) in enumerate(zip(hit.tokens, full.tokens)) if x != y), len(hit.tokens))
    return {
        "max_abs_diff": float(diff.max()),
        "rms_diff": float(diff.pow(2).mean().sqrt()),
        "logit_scale": scale,
        "bound": LOGIT_BOUND_SHARE * scale,
        "top1_same": int(torch.argmax(h)) == int(torch.argmax(f)),
        "greedy_tokens": len(hit.tokens),
        "greedy_agree": agree,
        "greedy_agree_share": agree / max(1, len(hit.tokens)),
        "greedy_same_until": first_split,
    }


def run(report: Any, device: str, dtype: str, geometry: Any, sizes: List[int], new_tokens: int, decode: int, reps: int,
        table_name: str, seed: int, arena_root: str) -> Dict[str, Any]:
    """Every size, its properties recorded on ``report``; returns the figures."""
    import shutil

    import torch
    import waitprep

    from tfengine import kvcodec
    from tfengine.engine import Engine
    from tfengine.model import VOCAB, key_fields, model_identity
    from tfengine.storage import StorageTier, record_format, save_to_disk

    figures: Dict[str, Any] = {
        "geometry": dict(geometry.__dict__, head_dim=geometry.head_dim, vocabulary=VOCAB),
        "dtype": dtype,
        "device": device,
        "attention": None,
        "new_tokens": new_tokens,
        "decode_tokens": decode,
        "reps": reps,
        "kv_bytes_per_token": geometry.kv_bytes_per_token(torch.tensor([], dtype=getattr(torch, dtype)).element_size()),
        "logit_bound_share": LOGIT_BOUND_SHARE,
        "sizes": [],
    }
    start = time.perf_counter()
    engine = Engine(geometry, seed, 0, device, dtype)
    if engine.device.type == "cuda":
        torch.cuda.synchronize()
    figures["model_build_s"] = round(time.perf_counter() - start, 2)
    figures["parameters"] = sum(p.numel() for p in engine.model.parameters())
    figures["attention"] = engine.model.config._attn_implementation
    identity = model_identity(geometry, seed, device, dtype)
    cuda = engine.device.type == "cuda"
    stream = torch.cuda.Stream(device=engine.device) if cuda else None
    disk = tempfile.mkdtemp(prefix="gpucheck-disk-")
    table = waitprep.create_table(table_name, 64)
    consumer = waitprep.open_table(table_name)
    biggest = max(sizes) * figures["kv_bytes_per_token"]
    tier = StorageTier(table, disk, 2 * biggest + (1 << 30), arena_root, format=record_format(dtype))
    try:
        for size in sizes:
            row = _one_size(report, engine, identity, tier, consumer, stream, size, new_tokens, decode, reps, seed, disk, arena_root,
                            kvcodec, key_fields, save_to_disk, record_format(dtype))
            figures["sizes"].append(row)
            report.put("restore", figures)
            if cuda:
                torch.cuda.empty_cache()
    finally:
        tier.close()
        consumer.close()
        table.close()
        waitprep.unlink_table(table_name)
        shutil.rmtree(disk, ignore_errors=True)
    return figures


def _one_size(report: Any, engine: Any, identity: Dict[str, str], tier: Any, consumer: Any, stream: Any, size: int, new_tokens: int,
              decode: int, reps: int, seed: int, disk: str, arena_root: str, kvcodec: Any, key_fields: Any, save_to_disk: Any,
              fmt: str) -> Dict[str, Any]:
    import torch
    import waitprep
    from waitprep import arena

    from tfengine.model import VOCAB

    cuda = engine.device.type == "cuda"
    prompt = _tokens(seed * 1_000_003 + size, size, VOCAB)
    prefix = prompt[:size - new_tokens]
    row: Dict[str, Any] = {"tokens": size, "prefix_tokens": len(prefix), "new_tokens": new_tokens}

    # 1. Full prefill: one warm-up, then reps turns (the first of them also decodes: the reference).
    engine.turn(prompt, None, decode=1)
    full = engine.turn(prompt, None, decode=decode)
    full_s = [full.prefill_s]
    full.cache = None
    for _ in range(reps - 1):
        full_s.append(engine.turn(prompt, None, decode=1).prefill_s)
    row["full_prefill_s"] = _median(full_s)
    row["full_prefill_s_all"] = [round(s, 5) for s in full_s]
    row["prefill_tokens_per_s"] = size / row["full_prefill_s"]

    # 2. The prefix's KV: computed (the resident cache), saved, prepared, published.
    resident = engine.turn(prefix, None, decode=1).cache
    fields = key_fields(identity, prefix, "gpucheck", "gpucheck", 0)
    digest = waitprep.key_digest(fields)
    start = time.perf_counter()
    payload = kvcodec.encode(resident)
    save_to_disk(disk, digest, payload, len(prefix), fmt)
    del payload
    prepared = tier.prepare(digest.hex(), base64.b64encode(waitprep.encode_key(fields)).decode())
    row["publish_s"] = round(time.perf_counter() - start, 3)
    row["record_bytes"] = prepared["sizeBytes"]
    os.unlink(os.path.join(disk, digest.hex() + ".wpar"))

    # 3. The pinned host arena.
    lease = consumer.try_pin(digest)
    if isinstance(lease, str):
        raise RuntimeError(f"the prepared record's pin missed: {lease}")
    index, _ = arena.split_location(lease.meta.location)
    lease.close()
    host = HostArena(arena.arena_path(consumer.name, index, arena_root), cuda)
    row["host_arena"] = {"how": host.how, "register_s": round(host.register_s, 4)}
    try:
        # 4 and 5. Restores, each followed by the hit's turn; the first of each warms up.
        restores: List[Dict[str, float]] = []
        hit_prefill: List[float] = []
        hit = None
        for rep in range(reps + 1):
            cache, buf, timing = restore(consumer, digest, {index: host}, engine, stream)
            control = None
            if rep == 0:
                row["restored_kv_equals_resident"] = same_kv(cache, resident)
                control = rotated_layers(cache, engine)
            turn = engine.turn(prompt, cache, decode=decode if rep == 0 else 1)
            turn.cache = None
            if rep == 0:
                hit = turn
                wrong = engine.turn(prompt, control, decode=1)
                row["control_rotated_layers_max_abs_diff"] = float((wrong.logits.float() - full.logits.float()).abs().max())
                del wrong, control
            else:
                restores.append(timing)
                hit_prefill.append(turn.prefill_s)
            del cache, buf, turn
        assert hit is not None
        n = restores[0]["bytes"]
        row["restore"] = {
            "bytes": n,
            "total_ms": _median([r["total_s"] for r in restores]) * 1e3,
            "copy_ms": _median([r["copy_s"] for r in restores]) * 1e3,
            "pin_and_check_ms": _median([r["pin_and_check_s"] for r in restores]) * 1e3,
            "cache_build_ms": _median([r["cache_build_s"] for r in restores]) * 1e3,
            "source_alignment": restores[0]["source_alignment"],
        }
        row["restore"]["gb_per_s"] = n / (row["restore"]["total_ms"] / 1e3) / 1e9
        row["restore"]["copy_gb_per_s"] = n / (row["restore"]["copy_ms"] / 1e3) / 1e9

        # The same bytes, a plain host-to-device copy from a pinned buffer of their own.
        first = restores[0]["offset"]
        source = torch.empty(n, dtype=torch.uint8, pin_memory=cuda)
        source.copy_(host.tensor[first:first + n])
        plain = [plain_copy(n, engine.device, stream, source) for _ in range(reps + 1)][1:]
        del source
        row["plain_h2d"] = {"bytes": n, "ms": _median(plain) * 1e3, "gb_per_s": n / _median(plain) / 1e9}

        row["hit_prefill_s"] = _median(hit_prefill)
        row["saved_per_hit_s"] = row["full_prefill_s"] - (row["restore"]["total_ms"] / 1e3 + row["hit_prefill_s"])

        # The same turn on the resident cache (it never left the device): the restore's effect alone.
        on_resident = engine.turn(prompt, resident, decode=decode)
        on_resident.cache = None
        row["hit_logits_equal_resident_bitwise"] = bool(torch.equal(hit.logits, on_resident.logits))
        row["hit_tokens_equal_resident"] = hit.tokens == on_resident.tokens
        del on_resident, resident
        row["logits"] = compare_logits(hit, full)
    finally:
        host.close()
        tier.evict(digest)

    where = f"{size} tokens ({len(prefix)} restored + {new_tokens} new)"
    report.holds(f"restore: {where}: the restored K and V equal the resident cache's, byte for byte", row["restored_kv_equals_resident"],
                 f"{row['restore']['bytes']} bytes restored through the lease table and a pinned host arena")
    logits = row["logits"]
    report.holds(f"restore: {where}: the hit's logits are within the bound of a full recompute's", logits["max_abs_diff"] <= logits["bound"],
                 f"max |diff| {logits['max_abs_diff']:.4g} <= {logits['bound']:.4g} ({LOGIT_BOUND_SHARE:g} x the largest logit {logits['logit_scale']:.4g}); "
                 f"greedy agreement {logits['greedy_agree']}/{logits['greedy_tokens']}")
    control = row["control_rotated_layers_max_abs_diff"]
    if engine.geometry.layers >= 8:
        report.holds(f"restore: {where}: control: a restore with its layers out of order is outside the bound", control > logits["bound"],
                     f"max |diff| {control:.4g} > {logits['bound']:.4g} (else the bound could not tell a wrong restore from a right one)")
    # A model of two narrow layers attends almost uniformly, so even a wrong restore moves its
    # logits little: there the control is a figure (control_rotated_layers_max_abs_diff) only.
    return row
