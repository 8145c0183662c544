"""A CUDA kernel built by refcomp.build(..., target="cuda"), callable from Python.

Arguments may be device arrays (anything with `__cuda_array_interface__`: CuPy, torch) or, for
convenience, numpy arrays, which are copied to the device before the call and back after it.
Shapes, dtypes and layout are checked exactly as for C kernels before anything is launched.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..ast.function import PrimFunc
from ..errors import ArgumentError, RuntimeFailure
from ..target import Target
from .loader import LoadedKernel


class _DeviceArrayView:
    """The shape/dtype/strides of a device array, as the argument checks read them."""

    def __init__(self, value: Any) -> None:
        info = value.__cuda_array_interface__
        self.shape = tuple(int(d) for d in info["shape"])
        self.dtype = np.dtype(info["typestr"])
        self.pointer = int(info["data"][0])
        strides = info.get("strides")
        itemsize = self.dtype.itemsize
        compact = []
        step = itemsize
        for dim in reversed(self.shape):
            compact.append(step)
            step *= max(dim, 1)
        self.contiguous = strides is None or tuple(strides) == tuple(reversed(compact))

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def host_proxy(self) -> np.ndarray:
        # A host array of the same shape and dtype, so the shared checks apply unchanged; np.empty
        # only reserves address space, its pages are never touched.
        return np.empty(self.shape, self.dtype)


def cuda_device_count() -> int:
    """The number of CUDA devices the driver reports (0 without a driver or a device); asks the
    driver library directly, so nothing needs to be built first."""
    import ctypes

    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return int(count.value)


def cuda_device_name(index: int = 0) -> str | None:
    """The name of CUDA device `index` as the driver reports it (None without one)."""
    import ctypes

    if cuda_device_count() <= index:
        return None
    driver = ctypes.CDLL("libcuda.so.1")
    device = ctypes.c_int(0)
    name = ctypes.create_string_buffer(256)
    if driver.cuDeviceGet(ctypes.byref(device), index) != 0 or driver.cuDeviceGetName(name, 256, device) != 0:
        return None
    return name.value.decode(errors="replace")


class DeviceArray:
    """A copy of a numpy array in device memory, owned by the library that made it (`to_device`).

    It has `__cuda_array_interface__`, so the library's kernels take it as a device argument;
    `copy_to(host)` brings the contents back; `free()` (or garbage collection) releases it."""

    def __init__(self, library: "CudaLibrary", host: np.ndarray) -> None:
        self._library = library
        self.shape, self.dtype, self.nbytes = host.shape, host.dtype, host.nbytes
        self._pointer = library._alloc(max(host.nbytes, 1))
        if self._pointer == library._ffi.NULL:
            raise RuntimeFailure(f"{library.func.name}: cudaMalloc of {host.nbytes} bytes failed")
        source = np.ascontiguousarray(host)
        if library._copy(self._pointer, library._ffi.cast("void*", source.ctypes.data), host.nbytes, 1) != 0:
            self.free()
            raise RuntimeFailure(f"{library.func.name}: copy to the device failed")

    @property
    def __cuda_array_interface__(self) -> dict:
        address = int(self._library._ffi.cast("uintptr_t", self._pointer))
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (address, False), "version": 3}

    def copy_to(self, host: np.ndarray) -> None:
        """Copy the device contents into host (C-contiguous, same shape and dtype)."""
        if host.shape != self.shape or host.dtype != self.dtype or not host.flags.c_contiguous:
            raise ArgumentError(f"copy_to: expected a C-contiguous {self.dtype} array of shape {self.shape}")
        library = self._library
        if library._copy(library._ffi.cast("void*", host.ctypes.data), self._pointer, self.nbytes, 0) != 0:
            raise RuntimeFailure(f"{library.func.name}: copy from the device failed")

    def free(self) -> None:
        if self._pointer is not None and self._pointer != self._library._ffi.NULL:
            self._library._free(self._pointer)
        self._pointer = None

    def __del__(self) -> None:
        try:
            self.free()
        except Exception:  # interpreter shutdown
            pass


class CudaLibrary(LoadedKernel):
    """Call with arrays in the order of the function's parameters; runs on the GPU in place.

    `time(*args)` times whole calls: with numpy arguments that includes the copies to and from the
    device, with device arrays only the launches.
    """

    label = "CudaLibrary"

    def __init__(self, module, path: Path, func: PrimFunc, prepared: PrimFunc, target: Target) -> None:
        super().__init__(module, path, func, prepared, target)
        symbol = module.symbol
        self._device_count = getattr(self._lib, f"{symbol}_device_count")
        self._alloc = getattr(self._lib, f"{symbol}_alloc")
        self._free = getattr(self._lib, f"{symbol}_free")
        self._copy = getattr(self._lib, f"{symbol}_copy")

    def device_available(self) -> bool:
        return self._device_count() > 0

    def _require_device(self) -> None:
        count = self._device_count()
        if count <= 0:
            detail = "no device found"
            if count < 0:
                detail = self._ffi.string(self._message(self.module.launch_failed_code)).decode()
            raise RuntimeFailure(
                f"{self.func.name}: no CUDA device is available to run this kernel ({detail}); "
                "the source (lib.source) and the compiled module (lib.path) were built"
            )

    def to_device(self, array: np.ndarray) -> DeviceArray:
        """A device copy of a numpy array, to call kernels without copies (needs a device)."""
        self._require_device()
        return DeviceArray(self, np.asarray(array))

    def _prepared_call(self, args: tuple, kwargs: dict):
        self._check(args, kwargs)
        return (lambda: self._launch(args, kwargs)), args

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        """Check the arguments, copy numpy arrays in, launch, copy them back."""
        self._launch(args, kwargs)

    def _check(self, args: tuple, kwargs: dict):
        """The views of args and their binding, after every check that needs no device."""
        views = [(_DeviceArrayView(a) if hasattr(a, "__cuda_array_interface__") else a) for a in args]
        proxies = [v.host_proxy() if isinstance(v, _DeviceArrayView) else v for v in views]
        bound = self.signature.bind(proxies, kwargs)
        device_views = [(v, p) for v, p in zip(views, self.func.params) if isinstance(v, _DeviceArrayView)]
        for k, (first, first_param) in enumerate(device_views):
            for second, second_param in device_views[k + 1:]:
                if first.pointer < second.pointer + second.nbytes and second.pointer < first.pointer + first.nbytes:
                    raise ArgumentError(f"{first_param.name} and {second_param.name} overlap in device memory; "
                                        "the kernel's buffers must be distinct")
        alignment = self.module.pointer_alignment
        for view, param in zip(views, self.func.params):
            if not isinstance(view, _DeviceArrayView):
                continue
            if not view.contiguous:
                raise ArgumentError(f"{param.name}: device arrays must be C-contiguous")
            if view.pointer % alignment:
                raise ArgumentError(f"{param.name}: the kernel uses {alignment}-byte vector accesses, but the "
                                    f"device pointer {view.pointer:#x} is not {alignment}-byte aligned")
        return views, bound

    def _launch(self, args: tuple, kwargs: dict) -> None:
        views, bound = self._check(args, kwargs)
        self._require_device()
        buffer_values = [v for v in views if isinstance(v, (np.ndarray, _DeviceArrayView))]
        staged: list[tuple[np.ndarray, Any]] = []
        pointers = []
        try:
            for value in buffer_values:
                if isinstance(value, _DeviceArrayView):
                    pointers.append(self._ffi.cast("void*", value.pointer))
                    continue
                device = self._alloc(value.nbytes)
                if device == self._ffi.NULL:
                    raise RuntimeFailure(f"{self.func.name}: cudaMalloc of {value.nbytes} bytes failed")
                staged.append((value, device))
                if self._copy(device, self._ffi.cast("void*", value.ctypes.data), value.nbytes, 1) != 0:
                    raise RuntimeFailure(f"{self.func.name}: copy to the device failed")
                pointers.append(device)
            values = []
            buffer_index = 0
            for param in self.module.params:
                if param.kind == "buffer":
                    values.append(self._ffi.cast(param.c_type.replace(" __restrict__", ""), pointers[buffer_index]))
                    buffer_index += 1
                else:
                    values.append(bound.env[param.obj])
            code = self._entry(*values)
            if code != 0:
                raise self._failure(code, "CUDA kernel")
            for host, device in staged:
                if self._copy(self._ffi.cast("void*", host.ctypes.data), device, host.nbytes, 0) != 0:
                    raise RuntimeFailure(f"{self.func.name}: copy from the device failed")
        finally:
            for _, device in staged:
                self._free(device)
