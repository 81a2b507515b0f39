"""A producer's stream: work that runs in the order it was enqueued, off the thread that enqueued it.

:class:`CudaStream` is a CUDA stream (PyTorch's) with host functions enqueued through the driver's
``cuLaunchHostFunc``, the call docs/device-readiness.md names (``cudaLaunchHostFunc`` is the
runtime's wrapper of it). :class:`CpuStream` stands in for one on a machine without a GPU: one
worker thread runs copies, host functions and event markers in order, so the same readiness code
runs, and its ordering is checked, in the CPU dry run.

Both offer ``copy(dst, src)`` (asynchronous), ``host_function(fn)`` (``fn`` runs once everything
enqueued before it has finished; it must make no CUDA call), ``event()`` (an object with
``synchronize()`` and ``query()``), ``hold()`` (everything enqueued after it waits until the
returned release is called: a copy the check keeps incomplete on purpose), ``busy()`` and
``synchronize()``.
"""

from __future__ import annotations

import ctypes
import itertools
import queue
import threading
from typing import Any, Callable, Dict, Optional

#: How long a held stream waits for its release before it goes on regardless (a check that
#: failed between hold and release must not leave a stream blocked for ever).
HOLD_LIMIT_S = 60.0


class CpuStream:
    """An ordered queue of work run by one worker thread: a CUDA stream's ordering on the CPU."""

    kind = "cpu"

    def __init__(self) -> None:
        self._queue: "queue.Queue[Optional[Callable[[], None]]]" = queue.Queue()
        self._pending = 0
        self._lock = threading.Lock()
        self.error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._work, name="cpu-stream", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while True:
            fn = self._queue.get()
            if fn is None:
                return
            try:
                fn()
            except BaseException as error:  # kept, and raised by synchronize(): a stream reports its errors there
                self.error = error
            finally:
                with self._lock:
                    self._pending -= 1

    def _put(self, fn: Callable[[], None]) -> None:
        with self._lock:
            self._pending += 1
        self._queue.put(fn)

    def copy(self, dst: Any, src: Any) -> None:
        self._put(lambda: dst.copy_(src))

    def host_function(self, fn: Callable[[], None]) -> None:
        self._put(fn)

    def event(self) -> "_CpuEvent":
        event = _CpuEvent()
        self._put(event._done.set)
        return event

    def hold(self) -> Callable[[], None]:
        gate = threading.Event()
        self._put(lambda: gate.wait(HOLD_LIMIT_S))
        return gate.set

    def busy(self) -> bool:
        with self._lock:
            return self._pending > 0

    def synchronize(self) -> None:
        self.event().synchronize()
        if self.error is not None:
            raise RuntimeError(f"work on the stream failed: {self.error!r}") from self.error

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()


class _CpuEvent:
    def __init__(self) -> None:
        self._done = threading.Event()

    def synchronize(self) -> None:
        self._done.wait()

    def query(self) -> bool:
        return self._done.is_set()


_HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class CudaStream:
    """A CUDA stream of ``device`` (a non-blocking stream from PyTorch's pool), with host functions.

    Copies from pinned host memory are asynchronous (``cudaMemcpyAsync`` behind
    ``copy_(non_blocking=True)``). A host function is a Python callable run by the driver's
    callback thread (ctypes takes the GIL for it); one C trampoline serves every call, and the
    callable is kept until it ran.
    """

    kind = "cuda"

    def __init__(self, device: str) -> None:
        import torch

        self._torch = torch
        self.stream = torch.cuda.Stream(device=device)
        driver = ctypes.CDLL("libcuda.so.1")
        self._launch = driver.cuLaunchHostFunc
        self._launch.argtypes = [ctypes.c_void_p, _HOST_FN, ctypes.c_void_p]
        self._launch.restype = ctypes.c_int
        self._waiting: Dict[int, Callable[[], None]] = {}
        self._ids = itertools.count(1)  # 0 would be a NULL userData
        self._lock = threading.Lock()
        self.error: Optional[BaseException] = None
        self._trampoline = _HOST_FN(self._run)

    def _run(self, key: Optional[int]) -> None:
        with self._lock:
            fn = self._waiting.pop(key or 0, None)
        if fn is None:
            return
        try:
            fn()
        except BaseException as error:  # an exception must not cross into the driver's thread
            self.error = error

    def copy(self, dst: Any, src: Any) -> None:
        with self._torch.cuda.stream(self.stream):
            dst.copy_(src, non_blocking=True)

    def host_function(self, fn: Callable[[], None]) -> None:
        key = next(self._ids)
        with self._lock:
            self._waiting[key] = fn
        status = self._launch(ctypes.c_void_p(self.stream.cuda_stream), self._trampoline, ctypes.c_void_p(key))
        if status != 0:
            with self._lock:
                self._waiting.pop(key, None)
            raise RuntimeError(f"cuLaunchHostFunc failed with CUresult {status}")

    def event(self) -> Any:
        event = self._torch.cuda.Event()
        event.record(self.stream)
        return event

    def hold(self) -> Callable[[], None]:
        gate = threading.Event()
        self.host_function(lambda: gate.wait(HOLD_LIMIT_S))
        return gate.set

    def busy(self) -> bool:
        return not self.stream.query()

    def synchronize(self) -> None:
        self.stream.synchronize()
        if self.error is not None:
            raise RuntimeError(f"a host function failed: {self.error!r}") from self.error

    def close(self) -> None:
        self.synchronize()
