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

import json
import os
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence, Tuple

from . import kvcodec
from .model import DTYPE, Geometry, build_model


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
    """The model of ``geometry`` from ``seed``, serving turns; ``cache`` is its session LRU.

    ``device`` and ``dtype`` default to the CPU in fp32 (the example's engine process); the GPU
    check builds one in bf16 on ``"cuda"``.
    """

    def __init__(self, geometry: Geometry, seed: int, cache_budget_bytes: int = 0, device: str = "cpu", dtype: str = DTYPE) -> None:
        import torch

        self.geometry = geometry
        self.seed = seed
        self.device = torch.device(device)
        self.dtype = dtype
        self.model = build_model(geometry, seed, device, dtype)
        self.cache = SessionCache(cache_budget_bytes)
        # CUDA runs kernels asynchronously: a turn's timings wait for the device to finish the
        # work they time. On the CPU there is nothing to wait for.
        self._sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)

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
        ids = torch.tensor([list(tokens[cached:])], dtype=torch.long, device=self.device)
        with torch.inference_mode():
            self._sync()
            start = time.perf_counter()
            out = self.model(input_ids=ids, past_key_values=prefix, use_cache=True, logits_to_keep=1)
            logits = out.logits[0, -1].clone()
            self._sync()
            prefill_s = time.perf_counter() - start
            cache = out.past_key_values
            produced = [int(torch.argmax(logits))]
            start = time.perf_counter()
            for _ in range(decode - 1):
                step = self.model(input_ids=torch.tensor([[produced[-1]]], device=self.device), past_key_values=cache, use_cache=True, logits_to_keep=1)
                produced.append(int(torch.argmax(step.logits[0, -1])))
            decode_s = time.perf_counter() - start
        # Every decoded token but the last went into the cache; crop back to the prompt's KV.
        extra = cache.get_seq_length() - n
        if extra > 0:
            cache.crop(-extra)
        return TurnResult(logits, produced, cache, n - cached, cached, prefill_s, decode_s)


# --- The engine process -------------------------------------------------------------------------
#
# python -m tfengine.engine --geometry tiny --seed 11 --cache-tokens N --disk DIR
#
# One JSON object a line each way. It prints {"event": "ready", ...} with its identity (the key
# fields it computes KV for) and its KV bytes per token once the model is built, then serves
# requests in order:
#
#   {"op": "turn", "id", "tokens": base64 of uint32 LE, "task", "namespace", "pageGeneration",
#    "keyHex": the key of exactly these tokens' KV, "save": bool,
#    "prefix": null | {"length": n, "keyHex": the key of tokens[:n]'s KV},
#    "handoff": null | a lease's handoff token for the prefix, "decode": k, "check": bool,
#    "lookupTable": null | a table to look the prefix up in when there is no token (the wake
#    missed; with --late-lookup the orchestrator asks the engine to try again when it gets there),
#    "holdPin": bool (tests: keep the pin until a {"op": "release"} line comes)}
#   {"op": "exit"}
#
# A turn with a handoff token first pins that artifact for itself (exact pin) and says so with
# {"event": "pinned", "id"} (or {"event": "handoff-miss", "id", "reason"}), so the orchestrator
# can close its own lease. It holds its pin while it reads and checks the record and builds the
# cache (which owns copies), then releases it, runs the turn and answers {"event": "turn", ...}.
# It never trusts the orchestrator's digests: it rebuilds both keys from the tokens it was sent
# and refuses a request whose digests differ, refuses a token naming any artifact but the
# prefix's, and checks a leased record's header against the prefix's key before it reads the KV.


def _tokens(b64: str) -> List[int]:
    import base64
    from array import array

    raw = base64.b64decode(b64, validate=True)
    if len(raw) % 4:
        raise ValueError(f"tokens: {len(raw)} bytes is not a whole number of uint32s")
    values = array("I")
    values.frombytes(raw)
    if sys.byteorder != "little":
        values.byteswap()
    return values.tolist()


class EngineServer:
    """The request loop of the engine process: an :class:`Engine`, the disk tier it saves to, and
    a consumer handle on each lease table a handoff token names (opened on first use)."""

    def __init__(self, engine: Engine, disk_dir: str, out: Any = sys.stdout) -> None:
        from .model import model_identity

        self.engine = engine
        self.tables: dict = {}
        self.lines: Any = iter(())
        self.disk_dir = disk_dir
        self.identity = model_identity(engine.geometry, engine.seed)
        self.out = out

    def table_named(self, name: str) -> Any:
        from waitprep import open_table

        if name not in self.tables:
            self.tables[name] = open_table(name, "consumer")
        return self.tables[name]

    def close(self) -> None:
        for table in self.tables.values():
            table.close()
        self.tables.clear()

    def say(self, message: dict) -> None:
        self.out.write(json.dumps(message, separators=(",", ":")) + "\n")
        self.out.flush()

    def digest(self, tokens: Sequence[int], request: dict) -> str:
        from waitprep import key_digest

        from .model import key_fields

        return key_digest(key_fields(self.identity, tokens, request["task"], request["namespace"], request["pageGeneration"])).hex()

    def turn(self, request: dict) -> dict:
        from waitprep import parse_handoff_token

        from . import storage

        rid = request["id"]
        tokens = _tokens(request["tokens"])
        key_hex = self.digest(tokens, request)
        if key_hex != request["keyHex"]:
            raise ValueError(f"turn {rid}: the key of these tokens is {key_hex}, the request names {request['keyHex']}")
        prefix_req = request.get("prefix")
        reply: dict = {"event": "turn", "id": rid, "tokens": len(tokens), "bytesRead": 0, "bytesWritten": 0}
        prefix_hex = None
        if prefix_req is not None:
            n = int(prefix_req["length"])
            if not 0 < n < len(tokens):
                raise ValueError(f"turn {rid}: a prefix of {n} tokens of a {len(tokens)}-token prompt")
            prefix_hex = self.digest(tokens[:n], request)
            if prefix_hex != prefix_req["keyHex"]:
                raise ValueError(f"turn {rid}: the key of the prefix is {prefix_hex}, the request names {prefix_req['keyHex']}")
        lease = None
        cache = None
        # The time to first token counts from here: the request is checked, the KV not yet found.
        start = time.perf_counter()
        try:
            table = None
            if prefix_hex is None:
                reply["path"], reply["cause"] = "recompute", request.get("cause", "first-turn")
            elif (cache := self.engine.cache.take(prefix_hex)) is not None:
                reply["path"] = "resident"
            elif request.get("handoff"):
                table = self.table_named(parse_handoff_token(request["handoff"]).table)
                got = table.try_pin_exact(request["handoff"])
                if isinstance(got, str):
                    self.say({"event": "handoff-miss", "id": rid, "reason": got})
                    reply["path"], reply["cause"] = "recompute", f"handoff-{got}"
                elif got.digest.hex() != prefix_hex:
                    got.close()
                    raise ValueError(f"turn {rid}: the handoff token names {got.digest.hex()}, not the prefix's key {prefix_hex}")
                else:
                    lease = got
                    self.say({"event": "pinned", "id": rid})
            elif request.get("lookupTable"):
                # The wake missed; by the time the engine reaches the turn the unit may have
                # published. A lookup by the prefix's own digest can only find the prefix's KV.
                table = self.table_named(request["lookupTable"])
                got = table.try_pin(bytes.fromhex(prefix_hex))
                if isinstance(got, str):
                    reply["path"], reply["cause"] = "recompute", f"{request.get('cause', 'no-lease')}, then {got}"
                else:
                    lease = got
                    reply["lookup"] = "late"
            else:
                reply["path"], reply["cause"] = "recompute", request.get("cause", "no-lease")
            if lease is not None:
                if request.get("holdPin"):
                    self.wait_for_release()
                try:
                    payload = storage.read_leased(table, lease)
                except storage.RecordError as error:
                    reply["path"], reply["cause"] = "recompute", f"record-{error.reason}"
                else:
                    reply["bytesRead"] = len(payload)
                    cache = self.engine.decode_cache(payload)
                    del payload
                    reply["path"] = "leased"
                # The cache owns copies now (kvcodec.decode), so the pin goes before the
                # prefill. holdPin (above) keeps it until told: the lifetime tests' window.
                lease.close()
            restore_s = time.perf_counter() - start
            result = self.engine.turn(tokens, cache, int(request.get("decode", 4)))
        finally:
            if lease is not None:
                lease.close()
        reply.update(
            ttftS=restore_s + result.prefill_s,
            restoreS=restore_s,
            prefillS=result.prefill_s,
            decodeS=result.decode_s,
            prefillTokens=result.prefill_tokens,
            cachedTokens=result.cached_tokens,
            output=result.tokens,
        )
        if request.get("check") and result.cached_tokens > 0:
            full = self.engine.turn(tokens, None, int(request.get("decode", 4)))
            import torch

            reply["check"] = {
                "fullPrefillS": full.prefill_s,
                "maxAbsDiff": float((result.logits - full.logits).abs().max()),
                "logitScale": float(full.logits.abs().max()),
                "bitExact": bool(torch.equal(result.logits, full.logits)),
                "sameTokens": result.tokens == full.tokens,
            }
        evicted = self.engine.cache.put(key_hex, result.cache)
        reply["evicted"] = len(evicted)
        if request.get("save"):
            start = time.perf_counter()
            reply["bytesWritten"] = storage.save_to_disk(self.disk_dir, bytes.fromhex(key_hex), kvcodec.encode(result.cache), len(tokens))
            reply["saveS"] = time.perf_counter() - start
        return reply

    def wait_for_release(self) -> None:
        """Holds the turn (and its pin) until the next request line is {"op": "release"}."""
        for line in self.lines:
            if json.loads(line).get("op") == "release":
                return

    def serve(self, lines: Any = sys.stdin) -> None:
        self.lines = iter(lines)
        import torch

        g = self.engine.geometry
        self.say({"event": "ready", "pid": os.getpid(), "identity": self.identity, "geometry": g.label(), "kvBytesPerToken": g.kv_bytes_per_token(),
                  "cacheBudgetBytes": self.engine.cache.budget_bytes, "threads": torch.get_num_threads()})
        for line in self.lines:
            request = json.loads(line)
            if request.get("op") == "exit":
                return
            try:
                self.say(self.turn(request))
            except Exception as error:  # one bad request is answered, not fatal to the engine
                self.say({"event": "error", "id": request.get("id"), "error": f"{type(error).__name__}: {error}"})


def main(argv: "Sequence[str] | None" = None) -> None:
    import argparse

    import torch

    from .model import GEOMETRIES

    parser = argparse.ArgumentParser(prog="python -m tfengine.engine", description=__doc__.split("\n\n")[0])
    parser.add_argument("--geometry", choices=sorted(GEOMETRIES), default="tiny")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--cache-tokens", type=int, default=0, help="the session LRU's budget in tokens of KV (the stand-in for GPU memory)")
    parser.add_argument("--disk", required=True, help="the disk tier's directory")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    geometry = GEOMETRIES[args.geometry]
    server = EngineServer(Engine(geometry, args.seed, args.cache_tokens * geometry.kv_bytes_per_token()), args.disk)
    try:
        server.serve()
    finally:
        server.close()


if __name__ == "__main__":
    main()
