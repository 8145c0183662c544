"""A compiled C kernel (a LoadedKernel): a checked, in-place callable."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..ast.function import PrimFunc
from ..errors import BuildError
from ..target import Target
from .loader import LoadedKernel

_AMX_REQUESTED = False


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


class Library(LoadedKernel):
    """A C kernel built by refcomp.build: call it with numpy arrays (and scalars), in place.

    `lib.source` is the standalone C text, `lib.func` the PrimFunc it was built from,
    `lib.lowered` the lowered IR that was emitted, `lib.time(*args)` a timing helper.
    """

    label = "Library"

    def __init__(self, module, path: Path, func: PrimFunc, lowered: PrimFunc, target: Target) -> None:
        if module.needs_amx:
            request_amx_permission()
        super().__init__(module, path, func, lowered, target)
        self._pointer_types = [p.c_type.replace(" restrict", "") for p in module.params if p.kind == "buffer"]

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

    def _prepared_call(self, args: tuple, kwargs: dict):
        values, arrays = self._c_arguments(args, kwargs)
        entry = self._entry

        def run() -> None:
            code = entry(*values)
            if code != 0:
                raise self._failure(code)

        return run, arrays
