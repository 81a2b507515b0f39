"""Finding and loading libwaitprep.so, the lease table's C ABI.

Where it looks, in order:

1. the path passed to :func:`load_library` (or to ``open_table(..., library=...)``);
2. the environment variable ``WAITPREP_LIBRARY`` (``WAITPREP_LIB`` is accepted as an older name);
3. the package's own copy, ``waitprep/libwaitprep.so``: what ``pip install ./python`` (or a wheel
   from ``pip wheel ./python``) builds from the C sources and installs inside the package;
4. the Node package beside this one: when this package is used from a waitprep checkout on
   ``PYTHONPATH``, its
   ``build/Release`` (what ``npm install`` builds) and then its ``prebuilds/linux-<arch>`` (what
   prebuildify ships).

A path that 1 or 2 names is the one used: when it does not load, that is the error, and no other
library is tried in its place (a deployment that names a library means that one). When nothing
is named and nothing is found, :class:`~waitprep.WaitprepError` ``ERR_NATIVE_UNAVAILABLE`` lists
every place looked at.
"""

from __future__ import annotations

import ctypes
import os
import platform
import threading
from collections.abc import Mapping as _Mapping
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from . import _abi
from .errors import WaitprepError, describe

__all__ = ["load_library", "library_candidates", "status_name", "status_mismatch"]

_ARCH = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}
_loaded: Dict[str, ctypes.CDLL] = {}
_lock = threading.Lock()


def _own() -> str:
    """The copy installed inside this package (the wheel's)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libwaitprep.so")


def _beside() -> List[str]:
    """The Node package's build and prebuild directories, when this package sits inside one."""
    node_package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    arch = _ARCH.get(platform.machine().lower(), platform.machine().lower())
    return [
        os.path.join(node_package, "build", "Release", "libwaitprep.so"),
        os.path.join(node_package, "prebuilds", "linux-%s" % arch, "libwaitprep.so"),
    ]


def library_candidates(path: Optional[str] = None, environ: Optional[Mapping[str, str]] = None) -> List[Tuple[str, str]]:
    """Where :func:`load_library` would look, in order: ``(where, path)`` pairs.

    ``where`` says how the path was found ('argument', 'WAITPREP_LIBRARY', 'WAITPREP_LIB',
    'package', 'beside'). A named path (the argument, or either variable) is the only candidate.
    """
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise WaitprepError("ERR_INVALID_ARGUMENT", "Expected `path` to be a path to libwaitprep.so (str or os.PathLike) or None, got %s" % describe(path), field="path")
    if environ is not None and not isinstance(environ, _Mapping):
        raise WaitprepError("ERR_INVALID_ARGUMENT", "Expected `environ` to be a mapping (os.environ) or None, got %s" % describe(environ), field="environ")
    env = os.environ if environ is None else environ
    if path:
        named = os.fspath(path)
        if not isinstance(named, str):
            raise WaitprepError("ERR_INVALID_ARGUMENT", "Expected `path` to be a str path, got %s" % describe(named), field="path")
        return [("argument", named)]
    for variable in ("WAITPREP_LIBRARY", "WAITPREP_LIB"):
        if env.get(variable):
            return [(variable, env[variable])]
    return [("package", _own())] + [("beside", candidate) for candidate in _beside()]


def load_library(path: Optional[str] = None) -> ctypes.CDLL:
    """libwaitprep.so, loaded and checked: every function typed, the ABI version and every status
    number this package acts on compared with the library's. The same file loads once.

    Raises ``ERR_NATIVE_UNAVAILABLE`` saying where it looked, or naming the library that did not
    load or does not match.
    """
    candidates = library_candidates(path)
    looked: List[str] = []
    for where, candidate in candidates:
        searched = where in ("package", "beside")
        label = candidate if searched else "%s (%s)" % (candidate, where)
        if not os.path.isfile(candidate):
            looked.append("%s: no such file" % label)
            if searched:
                continue
            break
        return _load(os.path.realpath(candidate), label)
    if candidates[0][0] == "package":
        looked.insert(0, "no path given, WAITPREP_LIBRARY and WAITPREP_LIB unset")
    raise WaitprepError(
        "ERR_NATIVE_UNAVAILABLE",
        "libwaitprep.so not found; looked at: %s. Install the package with pip (pip install ./python, or a wheel "
        "from pip wheel ./python: either builds the library into the package), or pass its path, or set "
        "WAITPREP_LIBRARY to one (in Node, nativeLibraryPath() names the build there)" % "; ".join(looked),
    )


def _load(real: str, label: str) -> ctypes.CDLL:
    with _lock:
        lib = _loaded.get(real)
        if lib is not None:
            return lib
        try:
            lib = ctypes.CDLL(real, use_errno=True)
        except OSError as error:
            raise WaitprepError("ERR_NATIVE_UNAVAILABLE", "%s did not load: %s" % (label, error)) from error
        for name, (restype, argtypes) in _abi.SIGNATURES.items():
            try:
                fn = getattr(lib, name)
            except AttributeError:
                raise WaitprepError("ERR_NATIVE_UNAVAILABLE", "%s has no %s: not a libwaitprep.so of ABI %d" % (label, name, _abi.ABI_VERSION)) from None
            fn.restype = restype
            fn.argtypes = argtypes
        version = lib.wp_abi_version()
        if version != _abi.ABI_VERSION:
            raise WaitprepError(
                "ERR_NATIVE_UNAVAILABLE", "%s has ABI version %d; this package mirrors version %d" % (label, version, _abi.ABI_VERSION)
            )
        mismatch = status_mismatch(lambda status: status_name(lib, status))
        if mismatch is not None:
            raise WaitprepError("ERR_NATIVE_UNAVAILABLE", "%s: %s; waitprep._abi.STATUS must mirror native/include/waitprep.h" % (label, mismatch))
        _loaded[real] = lib
        return lib


def status_name(lib: ctypes.CDLL, status: int) -> str:
    """wp_status_name(status) as a str."""
    raw = lib.wp_status_name(status)
    return raw.decode("ascii", "replace") if raw else "WP_STATUS_%d" % status


def status_mismatch(spell: Callable[[int], str], statuses: Optional[Mapping[str, int]] = None) -> Optional[str]:
    """The first of ``statuses`` (default: the package's) that the library numbers differently, as
    a sentence; None when all agree.

    ``spell`` is wp_status_name as a function of the number. The library spells numbers but does
    not list its statuses, so this checks the direction a caller depends on: every number this
    package acts on (a miss reason, WP_PINNED, …) means the same status in the library. A status
    only the library has needs no check: it reaches Python as an error under the library's name.
    """
    for name, status in (_abi.STATUS if statuses is None else statuses).items():
        spelled = spell(status)
        if spelled != name:
            return "status %s is %d in this package, but the library spells %d as %s" % (name, status, status, spelled)
    return None
