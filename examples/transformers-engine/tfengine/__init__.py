"""A model runtime behind waitprep's lease table: a randomly initialised Llama-architecture model
served by Hugging Face transformers on the CPU, whose KV caches are prepared during tool waits.

- :mod:`tfengine.model`: geometries, the model built from a seed, the key fields of a context.
- :mod:`tfengine.kvcodec`: a ``DynamicCache`` to bytes and back, losslessly.
- :mod:`tfengine.engine`: turns (prefill, short greedy decode) and the engine's bounded LRU of
  sessions' KV; ``python -m tfengine.engine`` is the engine process.
- :mod:`tfengine.storage`: the storage tier, the lease table's producer; ``python -m
  tfengine.storage`` is its process.

torch and transformers are imported by the modules that need them, not here, so the storage
tier's process never loads them.
"""
