"""Builds what the check runs, without Node: ``libwaitprep.so`` with CMake (the same
CMakeLists.txt the package builds from; without cmake-js it configures the C library alone) and
the CUDA example with nvcc, linked against that library."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from typing import Any, Dict, List, Optional

#: The CUDA example, from the repository root.
CUDA_EXAMPLE = os.path.join("examples", "cuda", "record_device_write.cu")


def _run(argv: List[str], cwd: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def build_library(repo: str, build_dir: str) -> Dict[str, Any]:
    """``cmake`` configure and build of the ``waitprep`` target: ``{"path", "seconds"}``, or
    ``{"error"}`` with the build's last lines."""
    cmake = shutil.which("cmake")
    if cmake is None:
        return {"error": "cmake is not on PATH"}
    start = time.perf_counter()
    steps = [
        [cmake, "-S", repo, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release"],
        [cmake, "--build", build_dir, "--target", "waitprep", "--parallel"],
    ]
    for argv in steps:
        done = _run(argv, repo)
        if done.returncode != 0:
            return {"error": f"{' '.join(argv[:2])}... exited {done.returncode}:\n{_tail(done.stdout)}"}
    path = os.path.join(build_dir, "libwaitprep.so")
    if not os.path.isfile(path):
        return {"error": f"the build finished without {path}"}
    return {"path": path, "seconds": round(time.perf_counter() - start, 2)}


def build_cuda_example(repo: str, build_dir: str, library_dir: str) -> Dict[str, Any]:
    """The CUDA example, compiled and linked with nvcc against ``library_dir``'s libwaitprep.so
    (an rpath to it, so it runs as built): ``{"path", "seconds", "nvcc"}``, or ``{"error"}``."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return {"error": "nvcc is not on PATH"}
    version = _run([nvcc, "--version"], repo).stdout.strip().splitlines()
    out = os.path.join(build_dir, "record_device_write")
    argv = [nvcc, "-O2", "-I", os.path.join(repo, "native", "include"), os.path.join(repo, CUDA_EXAMPLE), "-o", out,
            "-L", library_dir, "-lwaitprep", f"-Xlinker=-rpath={os.path.abspath(library_dir)}"]
    start = time.perf_counter()
    done = _run(argv, repo)
    if done.returncode != 0:
        return {"error": f"nvcc exited {done.returncode}:\n{_tail(done.stdout)}", "nvcc": version[-1] if version else None}
    return {"path": out, "seconds": round(time.perf_counter() - start, 2), "nvcc": version[-1] if version else None}


def run_cuda_example(path: str, table: str, timeout: float = 120) -> Dict[str, Any]:
    """Runs the built example as a producer of table ``table``: its exit code and output lines."""
    start = time.perf_counter()
    try:
        done = subprocess.run([path, table], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as error:
        return {"exit": None, "lines": (error.stdout or "").splitlines() if isinstance(error.stdout, str) else [], "error": f"timed out after {timeout} s"}
    return {"exit": done.returncode, "lines": done.stdout.strip().splitlines(), "seconds": round(time.perf_counter() - start, 2)}


def expected_example_lines(lines: List[str]) -> Optional[str]:
    """Why the example's output is not the documented sequence of outcomes, or None when it is."""
    want = [
        ("host function: WP_OK", "the host-function record"),
        ("WP_OK; device bytes equal the artifact's", "a hit whose device bytes equal the artifact's"),
        ("before a new write: WP_MISS_ARENA_GENERATION_MISMATCH", "a miss on the reused arena's new generation"),
        ("event: WP_OK", "the event record"),
        ("after it: WP_OK", "a hit on the new generation"),
    ]
    text = "\n".join(lines)
    for needle, what in want:
        if needle not in text:
            return f"no line with {needle!r} ({what})"
    return None
