"""The machine and its GPUs: versions for the report, and each source's device UUIDs in the one
form device targets use (``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx``, lower case)."""

from __future__ import annotations

import ctypes
import os
import platform
import re
import shutil
import subprocess
import sys
from typing import Any, Dict, List, Optional, Tuple

_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_SMI_LINE = re.compile(r"^GPU (\d+): (.*?) \(UUID: (GPU-[0-9A-Fa-f-]+)\)\s*$")


def format_uuid(raw: bytes) -> str:
    """The target string of 16 UUID bytes, as ``nvidia-smi -L`` prints it."""
    if len(raw) != 16:
        raise ValueError(f"a device UUID is 16 bytes, got {len(raw)}")
    h = raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def normalize_uuid(value: Any) -> Optional[str]:
    """A UUID in any form a source gives (16 bytes; 32 hex digits with or without dashes, with or
    without ``GPU-``) as the target string, or None when it is none of these."""
    if isinstance(value, (bytes, bytearray)):
        return format_uuid(bytes(value)) if len(value) == 16 else None
    text = str(value).strip().lower()
    raw = getattr(value, "bytes", None)  # PyTorch's _CUuuid: 16 byte values, and a str() of them
    if not _HEX32.match(text.removeprefix("gpu-").replace("-", "")) and raw is not None and len(raw) == 16:
        return format_uuid(bytes(bytearray(raw)))
    if text.startswith("gpu-"):
        text = text[4:]
    digits = text.replace("-", "")
    if not _HEX32.match(digits):
        return None
    return format_uuid(bytes.fromhex(digits))


class _WpCudaDevice(ctypes.Structure):
    _fields_ = [("ordinal", ctypes.c_uint32), ("uuid", ctypes.c_uint8 * 16)]


def waitprep_devices(library: str) -> Tuple[Optional[List[Dict[str, Any]]], Optional[str]]:
    """What waitprep's CUDA discovery (``wp_cuda_devices`` in libwaitprep.so, which dlopens the
    driver) reports: ``([{"ordinal", "uuid"}], None)``, or ``(None, its reason)``."""
    lib = ctypes.CDLL(library)
    fn = lib.wp_cuda_devices
    fn.argtypes = [ctypes.POINTER(_WpCudaDevice), ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
    fn.restype = ctypes.c_int
    out = (_WpCudaDevice * 64)()
    reason = ctypes.create_string_buffer(512)
    n = fn(out, 64, reason, len(reason))
    if n < 0:
        return None, reason.value.decode("utf-8", "replace")
    return [{"ordinal": int(out[i].ordinal), "uuid": format_uuid(bytes(out[i].uuid))} for i in range(n)], None


def torch_devices() -> Tuple[Optional[List[Dict[str, Any]]], Optional[str]]:
    """PyTorch's view: ``([{"ordinal", "uuid", "name"}], None)``, or ``(None, why not)``."""
    import torch

    if not torch.cuda.is_available():
        return None, f"torch {torch.__version__} sees no CUDA device (torch.cuda.is_available() is False)"
    found = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        raw = getattr(props, "uuid", None)
        found.append({"ordinal": i, "uuid": normalize_uuid(raw), "raw": str(raw), "name": props.name})
    return found, None


def parse_nvidia_smi_list(text: str) -> List[Dict[str, Any]]:
    """The GPUs of ``nvidia-smi -L`` output (MIG lines, indented under their GPU, are not GPUs)."""
    found = []
    for line in text.splitlines():
        m = _SMI_LINE.match(line)
        if m:
            found.append({"index": int(m.group(1)), "name": m.group(2), "uuid": normalize_uuid(m.group(3))})
    return found


def nvidia_smi_devices() -> Tuple[Optional[List[Dict[str, Any]]], Optional[str]]:
    """``nvidia-smi -L``'s GPUs, or ``(None, why not)``."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None, "nvidia-smi is not on PATH"
    done = subprocess.run([smi, "-L"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    if done.returncode != 0:
        return None, f"nvidia-smi -L exited {done.returncode}: {done.stdout.strip()[-300:]}"
    return parse_nvidia_smi_list(done.stdout), None


def _smi_query(fields: str) -> Optional[List[str]]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    done = subprocess.run([smi, f"--query-gpu={fields}", "--format=csv,noheader"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=60)
    if done.returncode != 0 or not done.stdout.strip():
        return None
    return [part.strip() for part in done.stdout.strip().splitlines()[0].split(",")]


def _driver_cuda_version() -> Optional[str]:
    """The CUDA version the driver supports (cuDriverGetVersion), e.g. "13.0"."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    version = ctypes.c_int(0)
    if cuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
        return None
    return f"{version.value // 1000}.{(version.value % 1000) // 10}"


def _cpu_model() -> Optional[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _git_commit(repo: str) -> Optional[str]:
    git = shutil.which("git")
    if git is None or not os.path.exists(os.path.join(repo, ".git")):
        return None
    done = subprocess.run([git, "-C", repo, "rev-parse", "HEAD"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return done.stdout.strip() or None


def environment(repo: str, device: str) -> Dict[str, Any]:
    """The machine, the GPU (when ``device`` is CUDA), the driver and every version that ran."""
    import torch
    import transformers

    env: Dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "git_commit": _git_commit(repo),
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        index = torch.device(device).index or 0
        props = torch.cuda.get_device_properties(index)
        env["gpu"] = {
            "name": props.name,
            "memory_gib": round(props.total_memory / 2**30, 1),
            "multiprocessors": props.multi_processor_count,
            "capability": f"{props.major}.{props.minor}",
        }
        env["cudnn"] = torch.backends.cudnn.version()
        env["driver_cuda"] = _driver_cuda_version()
        smi = _smi_query("driver_version")
        env["driver"] = smi[0] if smi else None
        # Asked apart: a field a driver or VM does not know must not lose the driver's version.
        link = _smi_query("pcie.link.gen.max,pcie.link.width.max,pcie.link.gen.current,pcie.link.width.current")
        if link is not None and len(link) == 4:
            env["pcie"] = {"max": f"gen {link[0]} x{link[1]}", "current": f"gen {link[2]} x{link[3]}"}
    return env
