"""A graph function compiled to C (spec/graph_c.md): one cffi call per model call.

    fn = executable.compiled["main"]
    y = fn(x, w)                    # numpy arrays in, numpy arrays out, like the VM

The Python side checks what only it can see (argument count, rank, dtype: the same ArgumentError
texts as the VM), packs the shapes and pointers, and keeps, per tuple of input shapes, the output
shapes and arena size the C function reported on a first dry run.  Every dim check, the runtime
shape checks and all kernel calls run in C (while it runs, OpenBLAS is one-threaded and the C
function shares each large product over OpenMP threads, as the VM does over its own); an error code comes back with its message and is
raised as ArgumentError (code 1) or RuntimeFailure (code 2: a kernel failed; code 3: a
tensor is larger than its declared upper bounds allow).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..ast.dtype import dtype as to_dtype, storage_array
from ..errors import ArgumentError, RuntimeFailure
from ..target import Target
from .loader import LoadedKernel, load_shared
from .vm import call_session

_ALIGN = 64
# Constants of at least this many bytes are copied into memory the kernel asks to back with
# 2 MiB pages (`huge_page_array`).
_HUGE_PAGE = 2 << 20
HUGE_PAGES = True
ARENA_HUGE_PAGES = True


def huge_page_array(array: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of `array` in anonymous memory aligned to 2 MiB and advised to the
    kernel as huge-page backed (Linux `madvise(MADV_HUGEPAGE)`, which transparent huge pages in
    "madvise" mode wait for), so that streaming a large constant (a pre-packed GEMM weight, read
    from L3 or memory on every call) takes one TLB entry per 2 MiB instead of 512.  The array
    itself where it is smaller than 2 MiB or the platform has no such advice."""
    array = np.ascontiguousarray(array)
    raw = huge_page_bytes(array.nbytes)
    if raw is None:
        return array
    copy = raw.view(array.dtype).reshape(array.shape)
    copy[...] = array
    return copy


def aligned_constant(array: np.ndarray) -> np.ndarray:
    """A constant as a compiled graph function keeps it: in huge pages from 2 MiB up
    (huge_page_array), else C-contiguous at a 64-byte boundary (a copy where numpy's allocation is
    not: a large one sits 16 bytes into its pages, so every 64-byte vector load of a pre-packed
    weight spans two cache lines; the LLM's down product, K 688 x N 256 on 32 or 128 rows, one
    thread, CPU time: 0.086 -> 0.081 ms and 0.30-0.32 -> 0.30 with its packed weight aligned,
    0.093 -> 0.081 and 0.35-0.36 -> 0.30 in the (row x column block) grid)."""
    shape = np.shape(array)
    array = huge_page_array(array)
    if array.shape != shape:  # ascontiguousarray makes a 0-d array 1-d
        array = array.reshape(shape)
    if array.__array_interface__["data"][0] % _ALIGN == 0:
        return array
    raw = np.empty(array.nbytes + _ALIGN, np.uint8)
    start = (-raw.__array_interface__["data"][0]) % _ALIGN
    copy = raw[start:start + array.nbytes].view(array.dtype).reshape(shape)
    copy[...] = array
    return copy


def huge_page_bytes(nbytes: int) -> np.ndarray | None:
    """`nbytes` uninitialised bytes in anonymous memory aligned to 2 MiB and advised for huge pages
    (as huge_page_array); None below 2 MiB or where the platform has no such advice."""
    import mmap

    if not HUGE_PAGES or nbytes < _HUGE_PAGE or not hasattr(mmap, "MADV_HUGEPAGE"):
        return None
    try:
        region = mmap.mmap(-1, nbytes + _HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        region.madvise(mmap.MADV_HUGEPAGE)
    except (OSError, ValueError):
        return None
    raw = np.frombuffer(region, dtype=np.uint8)  # keeps the mapping alive as long as the view
    start = (-raw.__array_interface__["data"][0]) % _HUGE_PAGE
    return raw[start:start + nbytes]


def _numpy_dtype(dtype: str) -> np.dtype:
    return to_dtype(dtype).numpy()


class CompiledGraphFunction:
    """One graph function as a loaded C function (built by refcomp.graph.build)."""

    def __init__(self, path: Path, symbol: str, name: str, inputs: Sequence[tuple[str, int, str]],
                 outputs: Sequence[tuple[int, str]], returns_tuple: bool, constants: Sequence[np.ndarray],
                 kernels: Sequence[LoadedKernel], sgemm_address: int | None, kernel_calls: int,
                 param_names: Sequence[str], target: Target, source: str,
                 call_sites: Sequence[str] = ()) -> None:
        self.name = name
        self.path = Path(path)
        self.source = source
        self.kernel_calls = kernel_calls
        self.call_sites = tuple(call_sites)
        self._symbol = symbol
        self._target = target
        self._inputs = list(inputs)
        self._dtypes = [_numpy_dtype(d) for _, _, d in self._inputs]
        self._outputs = [(ndim, _numpy_dtype(d)) for ndim, d in outputs]
        self._returns_tuple = returns_tuple
        self._param_names = tuple(param_names)
        self._constants = [aligned_constant(c) for c in constants]
        self._kernels = list(kernels)  # kept alive: fns points into their libraries
        self._addresses = []
        for k in self._kernels:
            self._addresses += [int(k._ffi.cast("uintptr_t", k._entry)), int(k._ffi.cast("uintptr_t", k._message))]
        self._uses_blas = sgemm_address is not None
        if sgemm_address is not None:
            self._addresses.append(sgemm_address)
        self._profiled: CompiledGraphFunction | None = None
        self._site_seconds = None
        self._load(path, profiled=False)

    def _load(self, path: Path, profiled: bool) -> None:
        """Load the C function at path and make the call's argument buffers for its ffi (a fresh
        plan cache and arena: the profiled twin of profile() keeps its own)."""
        symbol = self._symbol
        cdef = (f"int32_t {symbol}(const int64_t* shapes, void* const* inputs, void* const* consts, "
                "void* const* fns, void* const* outputs, int64_t* out_shapes, uint8_t* arena, "
                "int64_t arena_bytes, int64_t* arena_need, int32_t dry_run);\n"
                f"const char* {symbol}_message(void);\n")
        if profiled:
            cdef += f"double* {symbol}_site_seconds(void);\n"
        self._ffi, self._lib = load_shared(path, cdef, self._target)
        ffi = self._ffi
        self._entry = getattr(self._lib, symbol)
        self._message = getattr(self._lib, f"{symbol}_message")
        if profiled:
            self._site_seconds = getattr(self._lib, f"{symbol}_site_seconds")()
        self._fns = ffi.new("void*[]", [ffi.cast("void*", a) for a in self._addresses] or [ffi.NULL])
        self._consts = ffi.new("void*[]", [ffi.cast("void*", c.__array_interface__["data"][0])
                                           for c in self._constants] or [ffi.NULL])
        self._shapes = ffi.new("int64_t[]", max(1, sum(n for _, n, _ in self._inputs)))
        self._in = ffi.new("void*[]", max(1, len(self._inputs)))
        self._out = ffi.new("void*[]", max(1, len(self._outputs)))
        self._out_shapes = ffi.new("int64_t[]", max(1, sum(n for n, _ in self._outputs)))
        self._need = ffi.new("int64_t[1]")
        self._plans: dict[tuple, tuple[list[tuple[int, ...]], int]] = {}
        self._arena = np.empty(0, np.uint8)
        self._arena_pointer = ffi.NULL

    def __repr__(self) -> str:
        return f"<refcomp.CompiledGraphFunction {self.name}({', '.join(self._param_names)})>"

    def _failure(self, code: int) -> Exception:
        message = self._ffi.string(self._message()).decode("utf-8", "replace")
        if code == 1:
            return ArgumentError(message)
        if code == 3:
            return RuntimeFailure(message, hint="raise the upper bound of the size vars or call with smaller inputs")
        return RuntimeFailure(message)

    def _check(self, args: tuple) -> list[np.ndarray]:
        if len(args) != len(self._inputs):
            raise ArgumentError(f"{self.name} takes {len(self._inputs)} arguments "
                                f"({', '.join(self._param_names)}), got {len(args)}")
        arrays = []
        for a, (what, ndim, dtype), expected in zip(args, self._inputs, self._dtypes):
            if not isinstance(a, np.ndarray):
                raise ArgumentError(f"{what}: expected a tensor, got {type(a).__name__}")
            if a.ndim != ndim:
                raise ArgumentError(f"{what}: expected a {ndim}-d tensor, got shape {a.shape}")
            if a.dtype != expected:
                a = storage_array(a)  # an ml_dtypes float8/int4 array: its storage form
            if a.dtype != expected:
                raise ArgumentError(f"{what}: expected dtype {dtype}, got {a.dtype}")
            arrays.append(np.asarray(a, order="C"))
        return arrays

    def _plan(self, key: tuple) -> tuple[list[tuple[int, ...]], int]:
        plan = self._plans.get(key)
        if plan is None:
            code = self._entry(self._shapes, self._in, self._consts, self._fns, self._out, self._out_shapes,
                               self._ffi.NULL, 0, self._need, 1)
            if code != 0:
                raise self._failure(code)
            shapes, k = [], 0
            for ndim, _ in self._outputs:
                shapes.append(tuple(int(self._out_shapes[k + i]) for i in range(ndim)))
                k += ndim
            plan = (shapes, int(self._need[0]))
            self._plans[key] = plan
        return plan

    def arena_bytes(self, *args: Any) -> int:
        """Bytes of arena a call with these arguments uses."""
        return self._plan(self._pack(self._check(args)))[1]

    def _pack(self, arrays: list[np.ndarray]) -> tuple:
        """Write the arrays' shapes and data pointers for the C function; the tuple of the shapes
        (the key of the call's plan)."""
        # ffi.from_buffer takes the data pointer through the buffer protocol: about a tenth of
        # casting __array_interface__'s address (a dict built per array), which added some 2 us
        # per array to every call (the LLM's decode step makes thirteen calls of two to four)
        k = 0
        shapes, pointers, from_buffer = self._shapes, self._in, self._ffi.from_buffer
        key = []
        for i, a in enumerate(arrays):
            shape = a.shape
            ndim = len(shape)
            shapes[k:k + ndim] = shape
            k += ndim
            key.append(shape)
            pointers[i] = from_buffer(a)
        return tuple(key)

    def _run(self) -> int:
        return self._entry(self._shapes, self._in, self._consts, self._fns, self._out, self._out_shapes,
                           self._arena_pointer, max(0, self._arena.size - _ALIGN), self._need, 0)

    def __call__(self, *args: Any) -> Any:
        arrays = self._check(args)
        out_shapes, need = self._plan(self._pack(arrays))
        if need > self._arena.size - _ALIGN:
            # the arena, like a large constant, in huge pages where it is large (ARENA_HUGE_PAGES)
            huge = huge_page_bytes(need + _ALIGN) if ARENA_HUGE_PAGES else None
            self._arena = huge if huge is not None else np.empty(need + _ALIGN, np.uint8)
            address = self._arena.__array_interface__["data"][0]
            self._arena_pointer = self._ffi.cast("uint8_t*", address + (-address) % _ALIGN)
        outs = []
        pointers, from_buffer = self._out, self._ffi.from_buffer
        for j, (shape, (_, dtype)) in enumerate(zip(out_shapes, self._outputs)):
            o = np.empty(shape, dtype)
            pointers[j] = from_buffer(o)
            outs.append(o)
        if self._uses_blas:
            with call_session():
                code = self._run()
        else:
            code = self._run()
        if code != 0:
            raise self._failure(code)
        del arrays
        return tuple(outs) if self._returns_tuple else outs[0]

    def profile(self, *args: Any, repeat: int = 20) -> "GraphProfile":
        """Where a call with these arguments spends its time: each call site's wall time (a kernel
        or an sgemm call), the mean over `repeat` calls after three warm-up calls (means add up: the
        sites and the time outside them make the mean call; medians would not), from a twin of
        this function built with timers between its calls (`RCG_PROFILE`, spec/graph_c.md; the
        function itself has none).  The twin runs the same kernels on the same data."""
        import copy
        import time

        from ..emit_c import compile_shared

        if repeat < 1:
            raise ValueError(f"profile: repeat must be at least 1, got {repeat}")
        if self._profiled is None:
            twin = copy.copy(self)
            path = compile_shared("#define RCG_PROFILE 1\n" + self.source, self._target, f"graph_{self.name}_profile")
            twin._load(path, profiled=True)
            self._profiled = twin
        twin = self._profiled
        sites = len(self.call_sites)
        for _ in range(WARM_UP_CALLS):  # the plan, the arena, first touches, the thread pool
            twin(*args)
        per_site: list[list[float]] = [[] for _ in range(sites)]
        totals = []
        for _ in range(repeat):
            for i in range(sites):
                twin._site_seconds[i] = 0.0
            start = time.perf_counter()
            twin(*args)
            totals.append(time.perf_counter() - start)
            for i in range(sites):
                per_site[i].append(twin._site_seconds[i])
        return GraphProfile(self.name, [(name, float(np.mean(t))) for name, t in zip(self.call_sites, per_site)],
                            float(np.mean(totals)))


# Calls before a profile's timed ones: the first call plans, takes the arena and wakes the
# OpenMP pool; the next ones still ran tens of times slower than later ones on a small model
# (an MLP of 64 x 16 x 32: 194 us for the GEMM over 20 calls after one warm-up, 3 us over 500).
WARM_UP_CALLS = 3


class GraphProfile:
    """A compiled graph function's profile (CompiledGraphFunction.profile): `sites`, the kernel
    (or BLAS symbol) and mean seconds of each call site in call order; `total`, the mean
    seconds of a whole call from Python (the sites' sum plus the argument checks and the call).
    str() gives the table by kernel, slowest first."""

    def __init__(self, name: str, sites: list[tuple[str, float]], total: float) -> None:
        self.name, self.sites, self.total = name, sites, total

    def by_kernel(self) -> list[tuple[str, int, float]]:
        """(kernel, call sites, seconds) per kernel, slowest first."""
        grouped: dict[str, list[float]] = {}
        for kernel, seconds in self.sites:
            grouped.setdefault(kernel, []).append(seconds)
        return sorted(((k, len(v), sum(v)) for k, v in grouped.items()), key=lambda row: -row[2])

    def __str__(self) -> str:
        rows = self.by_kernel()
        width = max([len("kernel")] + [len(k) for k, _, _ in rows])
        total = self.total or 1.0
        lines = [f"profile of {self.name}: {self.total * 1e3:.3f} ms a call (mean)",
                 f"{'kernel':<{width}}  calls        ms      %"]
        lines += [f"{k:<{width}}  {n:>5}  {s * 1e3:>8.3f}  {100 * s / total:>5.1f}" for k, n, s in rows]
        rest = self.total - sum(s for _, s in self.sites)
        lines.append(f"{'(outside the calls)':<{width}}  {'':>5}  {rest * 1e3:>8.3f}  {100 * rest / total:>5.1f}")
        return "\n".join(lines)
