"""A compiled kernel loaded with cffi (ABI mode): a checked, in-place callable."""
from __future__ import annotations

import time as _time
from pathlib import Path
from typing import Any

import cffi

from ..ast.function import PrimFunc
from ..errors import BuildError, RuntimeFailure
from .args import Signature

_AMX_REQUESTED = False
# Loaded kernels are never unloaded: an OpenMP kernel's dlclose can drop the last reference to
# libgomp while its idle worker threads still run inside it, which crashes the process.  So each
# shared object stays open for the life of the process (keyed by path: a cache hit reuses it).
_LOADED: dict[str, tuple] = {}


def request_amx_permission() -> None:
    """Ask Linux once per process for permission to use AMX tile data (arch_prctl)."""
    global _AMX_REQUESTED
    if _AMX_REQUESTED:
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    sys_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata = 158, 0x1023, 18
    if libc.syscall(sys_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) != 0:
        errno = ctypes.get_errno()
        raise BuildError(f"the kernel needs AMX tiles, but the OS refused the permission "
                         f"(arch_prctl errno {errno}); this CPU or kernel may not support AMX")
    _AMX_REQUESTED = True


def _load(path: Path, cdef: str):
    """The (ffi, lib) of a shared object, loaded once per process and kept open."""
    key = str(path)
    if key in _LOADED:
        return _LOADED[key]
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    try:
        lib = ffi.dlopen(key, ffi.RTLD_NOW | ffi.RTLD_LOCAL)
    except OSError as exc:
        raise BuildError(f"the compiled kernel {path} cannot be loaded: {exc}") from exc
    _LOADED[key] = (ffi, lib)
    return ffi, lib


class Library:
    """A kernel built by refcomp.build: call it with numpy arrays (and scalars), in place.

    `lib.source` is the standalone C text, `lib.func` the PrimFunc it was built from,
    `lib.lowered` the lowered IR that was emitted, `lib.time(*args)` a timing helper.
    """

    def __init__(self, module, path: Path, func: PrimFunc, lowered: PrimFunc, target) -> None:
        self.module = module
        self.source: str = module.source
        self.path = Path(path)
        self.func = func
        self.lowered = lowered
        self.target = target
        self.signature = Signature(func, [p.obj for p in module.params if p.kind == "size"])
        if module.needs_amx:
            request_amx_permission()
        self._ffi, self._lib = _load(self.path, module.cdef())
        self._entry = getattr(self._lib, module.symbol)
        self._message = getattr(self._lib, module.message_symbol)
        self._pointer_types = [p.c_type.replace(" restrict", "") for p in module.params if p.kind == "buffer"]

    def __repr__(self) -> str:
        return f"<refcomp.Library {self.signature.describe()} target={self.target.text!r}>"

    def _c_arguments(self, args: tuple, kwargs: dict) -> tuple[list, list]:
        bound = self.signature.bind(args, kwargs)
        values: list[Any] = []
        buffer_index = 0
        for param in self.module.params:
            if param.kind == "buffer":
                array = bound.arrays[buffer_index]
                # __array_interface__ is much cheaper than array.ctypes (a helper object per call)
                address = array.__array_interface__["data"][0]
                values.append(self._ffi.cast(self._pointer_types[buffer_index], address))
                buffer_index += 1
            else:
                values.append(bound.env[param.obj])
        return values, bound.arrays

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        """Run the kernel in place on the given arrays; raises ArgumentError or RuntimeFailure."""
        values, arrays = self._c_arguments(args, kwargs)
        code = self._entry(*values)
        del arrays  # kept alive until the call returned
        if code != 0:
            message = self._ffi.string(self._message(code)).decode("utf-8", "replace")
            raise RuntimeFailure(f"{self.func.name}: kernel failed with code {code}: {message}")

    def time(self, *args: Any, number: int = 10, repeat: int = 3, **kwargs: Any) -> float:
        """The best mean seconds per call over `repeat` rounds of `number` calls (checks done once)."""
        values, arrays = self._c_arguments(args, kwargs)
        entry = self._entry
        best = float("inf")
        for _ in range(max(1, repeat)):
            start = _time.perf_counter()
            for _ in range(max(1, number)):
                code = entry(*values)
            elapsed = (_time.perf_counter() - start) / max(1, number)
            if code != 0:
                message = self._ffi.string(self._message(code)).decode("utf-8", "replace")
                raise RuntimeFailure(f"{self.func.name}: kernel failed with code {code}: {message}")
            best = min(best, elapsed)
        del arrays
        return best
