"""The loader base of compiled kernels: one loaded-library cache, argument binding, timing.

`Library` (C) and `CudaLibrary` (CUDA) are both a `LoadedKernel`: built from an emitted module,
the path of its shared object, the PrimFunc and lowered IR it came from, and its Target.  The
shared object is opened with cffi (ABI mode) once per process and kept open: loaded libraries are
never unloaded, because an OpenMP kernel's dlclose can drop the last reference to libgomp while
its idle worker threads still run inside it, which crashes the process.  The cache is keyed by
(path, target); the path already names the content hash of the source and flags, so a cache hit
of the build reuses the loaded library.
"""
from __future__ import annotations

import time as _time
from pathlib import Path
from typing import Any, Callable

import cffi

from ..ast.function import PrimFunc
from ..errors import BuildError, RuntimeFailure
from ..target import Target
from .args import Signature

_LOADED: dict[tuple[str, Target], tuple] = {}


def load_shared(path: Path, cdef: str, target: Target):
    """The (ffi, lib) of a shared object, loaded once per process for (path, target) and kept open."""
    key = (str(path), target)
    if key in _LOADED:
        return _LOADED[key]
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    try:
        lib = ffi.dlopen(str(path), ffi.RTLD_NOW | ffi.RTLD_LOCAL)
    except OSError as exc:
        raise BuildError(f"the compiled {target.kind} module {path} cannot be loaded: {exc}") from exc
    _LOADED[key] = (ffi, lib)
    return ffi, lib


def loaded_count() -> int:
    """How many shared objects this process has loaded (tests use it to see the cache work)."""
    return len(_LOADED)


class LoadedKernel:
    """A kernel built by refcomp.build: call it with arrays (and scalars) in parameter order.

    `source` is the emitted text, `func` the PrimFunc it was built from, `lowered` the IR that was
    emitted, `target` the Target, `path` the shared object, `time(*args)` a best-of timer.
    Subclasses say how arguments reach the kernel (`_prepared_call`).
    """

    label = "LoadedKernel"

    def __init__(self, module, path: Path, func: PrimFunc, lowered: PrimFunc, target: Target) -> None:
        self.module = module
        self.source: str = module.source
        self.path = Path(path)
        self.func = func
        self.lowered = lowered
        self.target = target
        self.signature = Signature(func, [p.obj for p in module.params if p.kind == "size"])
        self._ffi, self._lib = load_shared(self.path, module.cdef(), target)
        self._entry = getattr(self._lib, module.symbol)
        self._message = getattr(self._lib, module.message_symbol)

    def __repr__(self) -> str:
        return f"<refcomp.{self.label} {self.signature.describe()} target={str(self.target)!r}>"

    def __reduce__(self):
        """Pickles as what it was built from; unpickling loads the same shared object again (in
        another process of this machine, while the file is there: the tuner's runner sends a
        kernel its build process compiled to the process that times it)."""
        return (type(self), (self.module, self.path, self.func, self.lowered, self.target))

    def _failure(self, code: int, what: str = "kernel") -> RuntimeFailure:
        message = self._ffi.string(self._message(code)).decode("utf-8", "replace")
        return RuntimeFailure(f"{self.func.name}: {what} failed with code {code}: {message}")

    def _prepared_call(self, args: tuple, kwargs: dict) -> tuple[Callable[[], None], Any]:
        """A no-argument function running the kernel once on the checked arguments, and what it
        needs kept alive; the checks run here, once."""
        raise NotImplementedError

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        """Run the kernel in place on the given arrays; raises ArgumentError or RuntimeFailure."""
        run, keep = self._prepared_call(args, kwargs)
        run()
        del keep  # kept alive until the call returned

    def time(self, *args: Any, number: int = 10, repeat: int = 3, **kwargs: Any) -> float:
        """The best mean seconds per call over `repeat` rounds of `number` calls (checks done once)."""
        run, keep = self._prepared_call(args, kwargs)
        best = float("inf")
        for _ in range(max(1, repeat)):
            start = _time.perf_counter()
            for _ in range(max(1, number)):
                run()
            best = min(best, (_time.perf_counter() - start) / max(1, number))
        del keep
        return best
