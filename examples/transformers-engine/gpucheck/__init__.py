"""The device check: waitprep's GPU paths on a real GPU, in one command (``scripts/gpu-check.sh``).

It needs only CMake, a C compiler, nvcc (for the CUDA example) and a Python with CUDA PyTorch and
transformers; no Node and no network. What it runs, in order, each part writing its figures into
one JSON report as it finishes:

- :mod:`gpucheck.build`: ``libwaitprep.so`` with CMake, and ``examples/cuda/record_device_write.cu``
  with nvcc, linked against it.
- :mod:`gpucheck.devices`: the machine, driver and versions; the device UUIDs waitprep's CUDA
  discovery reports against PyTorch's and ``nvidia-smi -L``'s.
- :mod:`gpucheck.readiness`: device readiness with real copies: a producer copies a published
  artifact from pinned host memory into a device arena on its stream and records the device write
  only once the copy completed (from a host function on the stream, or after an event its worker
  synchronized); consumers pin with targets; a stress of consumers pinning while the producer
  reuses arenas. :mod:`gpucheck.streams` is the stream (CUDA, or an ordered worker thread that
  stands in for one on the CPU).
- :mod:`gpucheck.restore`: the transformers engine (``tfengine``) in bf16 on the GPU with the
  geometry of Llama-3.1-8B: prefill rates, the restore of a leased KV record from a pinned host
  arena into a device cache beside a plain host-to-device copy, a hit's next turn against a full
  recompute, and the prefill a hit saves.

``--dry-run`` runs every part that can run on the CPU on a tiny geometry and says, in the report,
why each CUDA-only part was skipped: it proves the check works before a GPU is spent on it.
docs/gpu.md has the command, the properties that fail it, and the results.
"""
