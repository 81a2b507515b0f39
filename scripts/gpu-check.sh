#!/usr/bin/env bash
# waitprep's device check (docs/gpu.md): runs examples/transformers-engine/gpucheck with a Python
# that has CUDA PyTorch and transformers; it builds libwaitprep.so with CMake and the CUDA example
# with nvcc into build-gpu-check/ first. Needs no Node and no network. The report (JSON) goes to
# --json, else $GPU_CHECK_JSON, else $OUT/gpu-check.json, else build-gpu-check/gpu-check.json.
#
#   scripts/gpu-check.sh              # on a GPU: everything, Llama-3.1-8B geometry (under 4 minutes on an H100)
#   scripts/gpu-check.sh --dry-run    # no GPU: every CPU-runnable part on a tiny geometry
#   scripts/gpu-check.sh --help       # every option
#
# GPU_CHECK_PYTHON names the interpreter (default: python3). Exit status: 0 when every property
# held, 1 when one was violated, 2 for a usage error.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${GPU_CHECK_PYTHON:-python3}"
export PYTHONPATH="$root/python:$root/examples/transformers-engine${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
cd "$root"
exec "$python" -m gpucheck "$@"
