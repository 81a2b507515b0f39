"""The engine: turns for agent sessions on the random-weight model, and its bounded LRU of sessions' KV.

A turn prefills a prompt and decodes a few tokens greedily. Its prompt's leading part may come
from a ``DynamicCache`` (resident in the engine's LRU, rebuilt from a lease, or none: a full
recompute). After the turn the cache is cropped back to the prompt, so what the engine keeps and
what the disk tier saves is the KV of exactly the prompt's tokens, the tokens its key names.

The LRU stands in for GPU memory: it holds whole sessions' caches up to a byte budget and drops
the least recently used. A session whose KV was dropped while its agent waited on a tool is what
waitprep's preparation is for.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence, Tuple

from . import kvcodec
from .model import Geometry, build_model


def cache_bytes(cache: Any) -> int:
    """Bytes of K and V a ``DynamicCache`` holds."""
    return sum(layer.keys.numel() * layer.keys.element_size() * 2 for layer in cache.layers)


class SessionCache:
    """A bounded LRU of caches by digest (hex): the engine's stand-in for GPU memory.

    An entry is the KV of exactly the tokens its key names. ``take`` removes the entry: the turn
    that uses a cache extends it in place, after which it is no longer the KV of that key.
    """

    def __init__(self, budget_bytes: int) -> None:
        if budget_bytes < 0:
            raise ValueError(f"budget_bytes must be >= 0, got {budget_bytes}")
        self.budget_bytes = budget_bytes
        self.used_bytes = 0
        self.evictions = 0
        self._entries: "OrderedDict[str, Tuple[Any, int]]" = OrderedDict()

    def __contains__(self, digest_hex: str) -> bool:
        return digest_hex in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, digest_hex: str, cache: Any) -> List[str]:
        """Keeps ``cache`` under ``digest_hex`` and returns the digests it evicted (least recently
        used first). A cache larger than the whole budget is not kept."""
        size = cache_bytes(cache)
        old = self._entries.pop(digest_hex, None)
        if old is not None:
            self.used_bytes -= old[1]
        evicted: List[str] = []
        if size > self.budget_bytes:
            return evicted
        while self._entries and self.used_bytes + size > self.budget_bytes:
            gone, (_, gone_size) = self._entries.popitem(last=False)
            self.used_bytes -= gone_size
            self.evictions += 1
            evicted.append(gone)
        self._entries[digest_hex] = (cache, size)
        self.used_bytes += size
        return evicted

    def take(self, digest_hex: str) -> Optional[Any]:
        """Removes and returns the cache under ``digest_hex``, or None."""
        entry = self._entries.pop(digest_hex, None)
        if entry is None:
            return None
        self.used_bytes -= entry[1]
        return entry[0]


@dataclass
class TurnResult:
    """One turn: the next token's logits, the greedy tokens, the cache of the prompt, timings."""

    #: Logits of the token after the prompt (1-D, the vocabulary): what "same output" compares.
    logits: Any
    #: The greedy tokens decoded, the first of them from ``logits``.
    tokens: List[int]
    #: The KV of exactly the prompt's tokens (the decoded tokens' KV cropped off).
    cache: Any
    #: Tokens the prefill computed, and tokens it took from the given cache.
    prefill_tokens: int
    cached_tokens: int
    #: Seconds: the prefill up to the first token's logits, then the rest of the decode.
    prefill_s: float
    decode_s: float
    extra: dict = field(default_factory=dict)


class Engine:
    """The model of ``geometry`` from ``seed``, serving turns; ``cache`` is its session LRU."""

    def __init__(self, geometry: Geometry, seed: int, cache_budget_bytes: int = 0) -> None:
        self.geometry = geometry
        self.seed = seed
        self.model = build_model(geometry, seed)
        self.cache = SessionCache(cache_budget_bytes)

    def layer_shapes(self) -> List[List[int]]:
        """The shape every cached layer has ([batch 1, KV heads, tokens (any), head dim])."""
        g = self.geometry
        return [[1, g.kv_heads, -1, g.head_dim] for _ in range(g.layers)]

    def decode_cache(self, payload: "bytes | bytearray | memoryview") -> Any:
        """A ``DynamicCache`` from a payload, refused unless its shapes are this model's."""
        return kvcodec.decode(payload, config=self.model.config, expect_layers=self.layer_shapes())

    def turn(self, tokens: Sequence[int], prefix: Any = None, decode: int = 4) -> TurnResult:
        """Prefills ``tokens`` (all of them, or those after ``prefix``, a ``DynamicCache`` of
        their leading part, which the turn consumes) and decodes ``decode`` tokens greedily."""
        import torch

        n = len(tokens)
        cached = 0 if prefix is None else prefix.get_seq_length()
        if n > self.geometry.context:
            raise ValueError(f"a {n}-token prompt does not fit the {self.geometry.context}-token context")
        if cached >= n:
            # The next token's logits come from the last prompt token's forward pass, which a
            # cache does not keep: at least one token must be computed.
            raise ValueError(f"the prefix cache holds {cached} tokens of a {n}-token prompt: at least one must be new")
        if decode < 1:
            raise ValueError(f"decode must be >= 1, got {decode}")
        ids = torch.tensor([list(tokens[cached:])], dtype=torch.long)
        with torch.inference_mode():
            start = time.perf_counter()
            out = self.model(input_ids=ids, past_key_values=prefix, use_cache=True, logits_to_keep=1)
            logits = out.logits[0, -1].clone()
            prefill_s = time.perf_counter() - start
            cache = out.past_key_values
            produced = [int(torch.argmax(logits))]
            start = time.perf_counter()
            for _ in range(decode - 1):
                step = self.model(input_ids=torch.tensor([[produced[-1]]]), past_key_values=cache, use_cache=True, logits_to_keep=1)
                produced.append(int(torch.argmax(step.logits[0, -1])))
            decode_s = time.perf_counter() - start
        # Every decoded token but the last went into the cache; crop back to the prompt's KV.
        extra = cache.get_seq_length() - n
        if extra > 0:
            cache.crop(-extra)
        return TurnResult(logits, produced, cache, n - cached, cached, prefill_s, decode_s)
