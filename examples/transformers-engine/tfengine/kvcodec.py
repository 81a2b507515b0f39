"""A ``DynamicCache`` as bytes and back, losslessly: the payload the disk tier and the arena hold.

Layout (little-endian)::

    "TFKV"  u16 version (1)  u16 n (header length)  n bytes of JSON header
    then, for layer 0, 1, ...: K's bytes, then V's bytes, each C-contiguous

The JSON header is ``{"dtype": "float32", "layers": [[B, H, S, D], ...], "tokens": S}``: one
shape per layer, the same shape for K and V (a Llama layer caches both as
``[batch, kv_heads, tokens, head_dim]``). A reader checks the magic, the version, the dtype and
that the tensors' sizes add up to exactly the payload's length before it builds anything.
"""

from __future__ import annotations

import json
import struct
import warnings
from typing import Any, List, Sequence, Tuple

MAGIC = b"TFKV"
VERSION = 1
_PREAMBLE = struct.Struct("<4sHH")

_DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2}


class KVFormatError(ValueError):
    """Bytes that are not a KV payload this module wrote, or that do not fit the model."""


def _dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def encode(cache: Any) -> bytes:
    """The bytes of every layer's K and V in ``cache`` (a ``DynamicCache``)."""
    import torch

    layers: List[Tuple[Any, Any]] = [(layer.keys, layer.values) for layer in cache.layers]
    if not layers:
        raise KVFormatError("the cache has no layers")
    dtype = str(layers[0][0].dtype).removeprefix("torch.")
    if dtype not in _DTYPES:
        raise KVFormatError(f"dtype {dtype} is not one this format carries ({', '.join(_DTYPES)})")
    shapes = []
    for k, v in layers:
        if k.shape != v.shape or k.dtype != layers[0][0].dtype or v.dtype != k.dtype:
            raise KVFormatError(f"a layer's K {tuple(k.shape)} {k.dtype} and V {tuple(v.shape)} {v.dtype} differ")
        shapes.append(list(k.shape))
    header = json.dumps({"dtype": dtype, "layers": shapes, "tokens": shapes[0][2]}, separators=(",", ":"), sort_keys=True).encode()
    parts = [_PREAMBLE.pack(MAGIC, VERSION, len(header)), header]
    for k, v in layers:
        for t in (k, v):
            # .contiguous() is a no-op for a cache the model filled; a cropped one may be a view.
            # .cpu() brings a device cache's bytes to the host (a no-op on the CPU).
            parts.append(t.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes())
    return b"".join(parts)


def header(payload: "bytes | bytearray | memoryview") -> Tuple[dict, int]:
    """The JSON header and the offset of the first tensor, checked against the payload's length."""
    view = memoryview(payload)
    if len(view) < _PREAMBLE.size:
        raise KVFormatError(f"{len(view)} bytes: shorter than the {_PREAMBLE.size}-byte preamble")
    magic, version, n = _PREAMBLE.unpack_from(view)
    if magic != MAGIC:
        raise KVFormatError(f"magic {bytes(magic)!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise KVFormatError(f"version {version}, expected {VERSION}")
    start = _PREAMBLE.size + n
    if start > len(view):
        raise KVFormatError(f"a {n}-byte header does not fit in {len(view)} bytes")
    try:
        meta = json.loads(bytes(view[_PREAMBLE.size:start]))
    except ValueError as error:
        raise KVFormatError(f"the header is not JSON: {error}") from None
    if not isinstance(meta, dict) or meta.get("dtype") not in _DTYPES or not isinstance(meta.get("layers"), list) or not meta["layers"]:
        raise KVFormatError(f"header {meta!r}: expected dtype, layers and tokens")
    size = _DTYPES[meta["dtype"]]
    expected = start
    for shape in meta["layers"]:
        if not (isinstance(shape, list) and len(shape) == 4 and all(isinstance(d, int) and d > 0 for d in shape)):
            raise KVFormatError(f"layer shape {shape!r}: expected four positive integers")
        if shape[2] != meta.get("tokens"):
            raise KVFormatError(f"layer shape {shape!r} does not hold {meta.get('tokens')!r} tokens")
        expected += 2 * shape[0] * shape[1] * shape[2] * shape[3] * size
    if expected != len(view):
        raise KVFormatError(f"the header describes {expected} bytes, the payload has {len(view)}")
    return meta, start


def decode(payload: "bytes | bytearray | memoryview", config: Any = None, expect_layers: "Sequence[Sequence[int]] | None" = None) -> Any:
    """A ``DynamicCache`` holding copies of the K and V ``payload`` carries.

    ``payload`` may be a read-only mapping of the arena: the tensors read from it are copied into
    the cache before this returns, so the caller may release its lease once the cache is built.
    ``expect_layers``, when given, is the shape each layer must have ([B, H, S, D], -1 for a
    dimension that may be anything).
    """
    import torch
    from transformers import DynamicCache

    meta, offset = header(payload)
    dtype = _dtype(meta["dtype"])
    size = _DTYPES[meta["dtype"]]
    if expect_layers is not None:
        if len(expect_layers) != len(meta["layers"]):
            raise KVFormatError(f"{len(meta['layers'])} layers, the model has {len(expect_layers)}")
        for got, want in zip(meta["layers"], expect_layers):
            if any(w != -1 and g != w for g, w in zip(got, want)):
                raise KVFormatError(f"layer shape {got}, the model's is {list(want)}")
    view = memoryview(payload)
    data = []
    with warnings.catch_warnings():
        # frombuffer warns that a read-only buffer is not writable; these views are only read.
        warnings.simplefilter("ignore", UserWarning)
        for shape in meta["layers"]:
            n = shape[0] * shape[1] * shape[2] * shape[3] * size
            k = torch.frombuffer(view, dtype=dtype, count=n // size, offset=offset).view(*shape)
            v = torch.frombuffer(view, dtype=dtype, count=n // size, offset=offset + n).view(*shape)
            data.append((k, v))
            offset += 2 * n
    cache = DynamicCache(data, config=config)
    # DynamicCache fills a layer by concatenating onto an empty tensor, which copies; should a
    # transformers release keep the given tensors instead, copy them here, or the cache would
    # read the arena after the lease is gone.
    for layer, (k, v) in zip(cache.layers, data):
        if layer.keys.data_ptr() == k.data_ptr() or layer.values.data_ptr() == v.data_ptr():
            layer.keys, layer.values = layer.keys.clone(), layer.values.clone()
    return cache


def tokens_of(payload: "bytes | bytearray | memoryview") -> int:
    """How many tokens of KV a payload holds."""
    return int(header(payload)[0]["tokens"])
