"""Geometries of the randomly initialised Llama-architecture model, the model built from a seed, and
the identity of what it computes.

Nothing here loads weights: ``LlamaForCausalLM(config)`` with a seeded generator gives the same
random weights for the same geometry and seed on any machine with the same torch build, so two
processes (an engine and the test that checks it) hold the same model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Dict, Sequence

#: The vocabulary of waitprep's agent traces (lib/trace/trace.ts TRACE_VOCAB): trace tokens are model
#: tokens as they are, with no mapping that identity would have to account for.
VOCAB = 128_256


@dataclass(frozen=True)
class Geometry:
    """A Llama-architecture geometry: what LlamaConfig takes, and nothing it derives."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    context: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def kv_bytes_per_token(self, dtype_bytes: int = 4) -> int:
        """K and V of one token over every layer."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes

    def label(self) -> str:
        return (f"{self.layers} layers, hidden {self.hidden}, {self.heads} heads ({self.kv_heads} KV), "
                f"intermediate {self.intermediate}, context {self.context}, vocabulary {VOCAB}")


GEOMETRIES: Dict[str, Geometry] = {
    # Small enough that a test builds it and runs turns in well under a second each.
    "tiny": Geometry("tiny", layers=2, hidden=64, heads=4, kv_heads=2, intermediate=176, context=2048),
    # Big enough that a prompt's prefill outweighs a restore from a lease on a CPU (about 1 s
    # against tens of ms at 2k tokens), small enough to replay in under 3 minutes on 2 cores:
    # about 80M parameters, 65M of them the tied embedding, 8 KiB of fp32 KV per token.
    "medium": Geometry("medium", layers=8, hidden=512, heads=8, kv_heads=2, intermediate=1408, context=4096),
    # The recorded figures: about 123M parameters (tied embeddings), 16 KiB of fp32 KV per token.
    "large": Geometry("large", layers=8, hidden=1024, heads=16, kv_heads=4, intermediate=2816, context=8192),
}

#: The dtype every tensor is in. fp32: the CPU has fast fp32 kernels, and it is the runtime's
#: real KV dtype here, so the bytes leased are the bytes the model computes with.
DTYPE = "float32"


def build_model(geometry: Geometry, seed: int, device: str = "cpu", dtype: str = DTYPE) -> Any:
    """The model for ``geometry`` with random weights drawn from ``seed``, in eval mode, on the CPU
    in fp32 unless ``device`` (a torch device string, e.g. ``"cuda"``) and ``dtype`` (``"bfloat16"``)
    say otherwise. Weights are created and drawn on that device, in that dtype: an 8B model is
    never materialised in fp32 on the host first."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=geometry.hidden,
        intermediate_size=geometry.intermediate,
        num_hidden_layers=geometry.layers,
        num_attention_heads=geometry.heads,
        num_key_value_heads=geometry.kv_heads,
        max_position_embeddings=geometry.context,
        tie_word_embeddings=True,
        torch_dtype=dtype,
    )
    if device == "cpu" and dtype == DTYPE:
        # fork_rng: seeding the global generator here would change every later draw in the caller.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = LlamaForCausalLM(config)
        return model.eval()
    where = torch.device(device)
    forked = [where.index or 0] if where.type == "cuda" else []
    default_dtype = torch.get_default_dtype()
    with torch.random.fork_rng(devices=forked), where:
        torch.manual_seed(seed)
        # Modules take the default dtype for their parameters as they are built.
        torch.set_default_dtype(getattr(torch, dtype))
        try:
            model = LlamaForCausalLM(config)
        finally:
            torch.set_default_dtype(default_dtype)
    return model.eval()


def model_identity(geometry: Geometry, seed: int, device: str = "cpu", dtype: str = DTYPE) -> Dict[str, str]:
    """The key's ``runtime``, ``model`` and ``profile``: two engines that differ in any of them
    compute different KV for the same tokens, so their keys must differ (the device type and the
    dtype are in ``profile``)."""
    import torch
    import transformers

    g = geometry
    return {
        "runtime": f"transformers-{transformers.__version__}/torch-{torch.__version__}",
        "model": f"llama-random-seed{seed}-L{g.layers}-H{g.hidden}-A{g.heads}-KV{g.kv_heads}-I{g.intermediate}-C{g.context}-V{VOCAB}",
        "profile": f"{dtype}-dynamiccache-{device.split(':')[0]}",
    }


def key_fields(identity: Dict[str, str], tokens: Sequence[int], task: str, namespace: str, page_generation: int) -> Dict[str, Any]:
    """The artifact-key fields of the KV of exactly ``tokens`` (docs/key-encoding.md), for
    ``waitprep.key_digest``. The orchestrator builds the same fields in Node (keyFromSpec with
    the base ``identity`` gives), so both name one digest."""
    return {
        "source": {
            "snapshotKind": "kv-cache",
            "runtime": identity["runtime"],
            "model": identity["model"],
            "adapter": "none",
            "profile": identity["profile"],
            "positionPolicy": "absolute",
            "task": task,
            "namespace": namespace,
            "tokenLayout": list(tokens),
        },
        "sourcePageGeneration": page_generation,
        "codec": "none",
        "codecConfig": "none",
        "representationVersion": 1,
    }


def geometry_dict(geometry: Geometry) -> Dict[str, Any]:
    return asdict(geometry)
