"""The VM's BLAS externs: refcomp.blas.sgemm_nn (a @ b) and sgemm_nt (a @ b.T) on numpy's OpenBLAS.

Registered by register_blas (graph.build does it for target "c").  Operands are C-contiguous;
leading dims of a are the GEMM's rows; equal batch dims on both sides are a batch of products.
Batches of large entries are one call of OpenBLAS's batched sgemm.  While a VM function runs,
OpenBLAS is one-threaded and large products are shared over the VM's own threads (_SharedBlas).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .vm import _EXTERNS, extern_from_library, set_call_session

_CBLAS_ROW_MAJOR, _CBLAS_NO_TRANS, _CBLAS_TRANS = 101, 111, 112
_SGEMM_DECL = ("void scipy_cblas_sgemm64_(int order, int transa, int transb, int64_t m, int64_t n, int64_t k, "
               "float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, "
               "int64_t ldc);")


def openblas_path() -> str | None:
    """The OpenBLAS shared library bundled with numpy (ILP64, `scipy_` prefixed symbols), if present."""
    import glob
    import os

    root = os.path.dirname(os.path.dirname(np.__file__))
    found = sorted(glob.glob(os.path.join(root, "numpy.libs", "libscipy_openblas64_*.so")))
    return found[0] if found else None


# One call for a batch of equal-shaped products: OpenBLAS shares the entries out over its threads,
# each running a one-thread sgemm, instead of every small product waking (and leaving spinning)
# the whole pool.  Row-major, one group of `count` entries.
_SGEMM_BATCH_DECL = ("void scipy_cblas_sgemm_batch64_(int order, const int* transa, const int* transb, "
                     "const int64_t* m, const int64_t* n, const int64_t* k, const float* alpha, const float** a, "
                     "const int64_t* lda, const float** b, const int64_t* ldb, const float* beta, float** c, "
                     "const int64_t* ldc, int64_t group_count, const int64_t* group_size);")


def _batch_sgemm(path: str):
    """(ffi, the batched sgemm) from the library at path, or None when it lacks one."""
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(_SGEMM_BATCH_DECL)
    lib = ffi.dlopen(path)
    try:
        cfunc = lib.scipy_cblas_sgemm_batch64_
    except AttributeError:
        return None
    return ffi, cfunc, lib


# OpenBLAS may route small entries (m*n*k <= 1e6, or m*n <= 1200 for one transpose case, on its
# AVX-512 kernels) to its small-matrix kernels, whose batched dispatch crashes in the runtime-
# dispatched builds numpy ships (fixed upstream after 0.3.31, OpenBLAS pull request 5980): smaller
# batches keep one sgemm per entry, with a 4x margin over those limits.
_BATCH_MIN_MNK = 4_000_000
_BATCH_MIN_MN = 4800


def _large_enough_to_batch(m: int, k: int, n: int) -> bool:
    return m * n * k > _BATCH_MIN_MNK and m * n > _BATCH_MIN_MN


def _entry_pointers(x: np.ndarray) -> np.ndarray:
    """The address of each (rows, cols) matrix of a C-contiguous (count, rows, cols) array."""
    return np.uint64(x.ctypes.data) + np.arange(x.shape[0], dtype=np.uint64) * np.uint64(x.strides[0])


class _SharedBlas:
    """OpenBLAS one-threaded while a VM runs, each large GEMM shared out over the VM's own threads.

    OpenBLAS's idle workers spin for about 0.1 s after every call, taking a core from the OpenMP
    kernels that run between the GEMMs (measured: every kernel of a transformer block then ran at
    one-thread speed on 2 cores).  So while a VM function runs, OpenBLAS is set to one thread (its
    workers stay asleep) and a large sgemm is split by output columns, or a batch by entries, over
    as many threads as OpenBLAS had; the helpers block, not spin, when idle.  The previous thread
    count is restored when the outermost VM call returns."""

    def __init__(self, get_threads: Callable[[], int], set_threads: Callable[[int], None]) -> None:
        import threading

        self._get, self._set = get_threads, set_threads
        self._lock = threading.Lock()
        self._depth = 0
        self._saved = 1
        self.threads = 1  # the share count while a VM runs, else 1 (OpenBLAS threads itself)
        self._pool = None
        self._pool_size = 0

    def __enter__(self) -> "_SharedBlas":
        with self._lock:
            if self._depth == 0:
                self._saved = max(int(self._get()), 1)
                if self._saved > 1:
                    self._set(1)
                self.threads = self._saved
            self._depth += 1
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                self.threads = 1
                if self._saved > 1:
                    self._set(self._saved)

    def run(self, tasks: list[Callable[[], None]]) -> None:
        """Run the tasks, the first on this thread and the rest on helpers; return when all are done."""
        if len(tasks) > 1:
            from concurrent.futures import ThreadPoolExecutor

            if self._pool is None or self._pool_size < len(tasks) - 1:
                self._pool_size = len(tasks) - 1
                self._pool = ThreadPoolExecutor(max_workers=self._pool_size, thread_name_prefix="refcomp-blas")
            futures = [self._pool.submit(task) for task in tasks[1:]]
            try:
                tasks[0]()
            finally:
                for future in futures:
                    future.result()
            return
        for task in tasks:
            task()


SHARED_BLAS: _SharedBlas | None = None
_OPENBLAS_THREADS_DECL = ("int scipy_openblas_get_num_threads64_(void); "
                          "void scipy_openblas_set_num_threads64_(int num_threads);")


def _shared_blas(path: str) -> _SharedBlas | None:
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(_OPENBLAS_THREADS_DECL)
    lib = ffi.dlopen(path)
    try:
        get, put = lib.scipy_openblas_get_num_threads64_, lib.scipy_openblas_set_num_threads64_
    except AttributeError:
        return None
    shared = _SharedBlas(get, put)
    shared._keepalive = (ffi, lib)  # type: ignore[attr-defined]
    return shared


def _column_blocks(n: int, parts: int) -> list[tuple[int, int]]:
    """[n0, n1) blocks of n columns for parts threads, bounds on multiples of 16 (whole vectors)."""
    bounds = [0] + [min(n, (n * i // parts + 15) // 16 * 16) for i in range(1, parts)] + [n]
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo]


def _sgemm_adapter(transpose_b: bool, batch=None):
    def call(a, b, out):
        parts = SHARED_BLAS.threads if SHARED_BLAS is not None else 1
        if b.ndim > 2:  # equal batch dims: one sgemm per batch entry
            count = int(np.prod(a.shape[:-2]))  # not -1: that is ambiguous for an empty matrix
            a3 = a.reshape((count,) + a.shape[-2:])
            b3 = b.reshape((count,) + b.shape[-2:])
            o3 = out.reshape((count,) + out.shape[-2:])
            if parts > 1 and count >= parts and _large_enough_to_batch(*a3.shape[1:], o3.shape[-1]):
                # whole entries per thread (each a one-threaded batched call or loop)
                edges = [count * i // parts for i in range(parts + 1)]
                SHARED_BLAS.run([lambda lo=lo, hi=hi: entries(a3[lo:hi], b3[lo:hi], o3[lo:hi])
                                  for lo, hi in zip(edges, edges[1:])])
                return
            if count < parts:  # too few entries to share: share each one's columns instead
                for i in range(count):
                    single(a3[i], b3[i], o3[i], parts)
                return
            entries(a3, b3, o3)
            return
        single(a, b, out, parts)

    def single(a, b, out, parts=1):
        """out = a @ op(b) for 2-d b, split by columns over `parts` threads when large."""
        k = a.shape[-1]
        m = int(np.prod(a.shape[:-1]))  # not a.size // k: with k == 0 the output must still be zeroed
        n = out.shape[-1]
        if m == 0 or n == 0:
            return
        if k == 0:
            out[...] = 0
            return
        if parts > 1 and _large_enough_to_batch(m, k, n) and n >= 32 * parts:
            SHARED_BLAS.run([lambda lo=lo, hi=hi: columns(a, b, out, m, k, n, lo, hi)
                              for lo, hi in _column_blocks(n, parts)])
            return
        columns(a, b, out, m, k, n, 0, n)

    def columns(a, b, out, m, k, n, lo, hi):
        """out[:, lo:hi] = a @ op(b)[:, lo:hi] (out's rows keep their full stride n)."""
        size = out.itemsize
        pa = ffi_cast("const float*", a.ctypes.data)
        pb = ffi_cast("const float*", b.ctypes.data + size * (lo * k if transpose_b else lo))
        pc = ffi_cast("float*", out.ctypes.data + size * lo)
        ldb = k if transpose_b else n
        sgemm(_CBLAS_ROW_MAJOR, _CBLAS_NO_TRANS, _CBLAS_TRANS if transpose_b else _CBLAS_NO_TRANS,
                 m, hi - lo, k, 1.0, pa, k, pb, ldb, 0.0, pc, n)

    def entries(a3, b3, o3):
        if batch is not None and a3.shape[0] > 1 and _large_enough_to_batch(*a3.shape[1:], o3.shape[-1]):
            _call_batch(a3, b3, o3)
            return
        for i in range(a3.shape[0]):
            single(a3[i], b3[i], o3[i])  # not shared: this may already run on a helper thread

    def _call_batch(a3, b3, o3):
        bffi, bfunc, _ = batch
        (count, m, k), n = a3.shape, o3.shape[-1]
        pointers = [_entry_pointers(x) for x in (a3, b3, o3)]
        new = bffi.new
        bfunc(_CBLAS_ROW_MAJOR, new("int[1]", [_CBLAS_NO_TRANS]),
              new("int[1]", [_CBLAS_TRANS if transpose_b else _CBLAS_NO_TRANS]),
              new("int64_t[1]", [m]), new("int64_t[1]", [n]), new("int64_t[1]", [k]), new("float[1]", [1.0]),
              bffi.cast("const float**", pointers[0].ctypes.data), new("int64_t[1]", [k]),
              bffi.cast("const float**", pointers[1].ctypes.data), new("int64_t[1]", [k if transpose_b else n]),
              new("float[1]", [0.0]), bffi.cast("float**", pointers[2].ctypes.data), new("int64_t[1]", [n]),
              1, new("int64_t[1]", [count]))

    # the sgemm and its ffi are known once extern_from_library hands them to the first call
    sgemm = ffi_cast = None

    def bound(cfunc, ffi, *arrays):
        nonlocal sgemm, ffi_cast
        if sgemm is None:
            sgemm, ffi_cast = cfunc, ffi.cast
        return call(*arrays)

    return bound


def register_blas() -> bool:
    """Register refcomp.blas.sgemm_nn (a @ b) and sgemm_nt (a @ b.T) from numpy's OpenBLAS; False if absent.

    Batched operands (equal leading dims) go through OpenBLAS's batched sgemm when the library has
    it (one call), else one sgemm per entry.  While a VM function runs, large products are shared
    over the VM's threads with OpenBLAS one-threaded (see _SharedBlas)."""
    if "refcomp.blas.sgemm_nn" in _EXTERNS:
        return True
    path = openblas_path()
    if path is None:
        return False
    global SHARED_BLAS
    SHARED_BLAS = _shared_blas(path)
    if SHARED_BLAS is not None:
        set_call_session(lambda: SHARED_BLAS)
    batch = _batch_sgemm(path)
    extern_from_library("refcomp.blas.sgemm_nn", path, "scipy_cblas_sgemm64_", _SGEMM_DECL,
                        _sgemm_adapter(False, batch))
    extern_from_library("refcomp.blas.sgemm_nt", path, "scipy_cblas_sgemm64_", _SGEMM_DECL,
                        _sgemm_adapter(True, batch))
    return True


_SGEMM_HANDLE: tuple | None = None


def sgemm_address() -> int | None:
    """The address of OpenBLAS's cblas sgemm (the one refcomp.blas.* call), for compiled graph
    functions that call it directly; None when numpy's OpenBLAS is absent."""
    global _SGEMM_HANDLE
    if _SGEMM_HANDLE is None:
        path = openblas_path()
        if path is None:
            return None
        import cffi

        ffi = cffi.FFI()
        ffi.cdef(_SGEMM_DECL)
        lib = ffi.dlopen(path)
        _SGEMM_HANDLE = (ffi, lib, int(ffi.cast("uintptr_t", lib.scipy_cblas_sgemm64_)))
    return _SGEMM_HANDLE[2]


def shared_sgemm(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> bool:
    """out = a @ b (C-contiguous 2-D float32 arrays, out not overlapping either) through numpy's
    OpenBLAS with its own workers asleep: one-threaded sgemm calls on blocks of a's rows, shared
    over as many blocking helper threads as OpenBLAS had (the _SharedBlas of a VM call), so no
    OpenBLAS thread spins on a core that the OpenMP kernels before and after the product want.
    False, with nothing done, where numpy's OpenBLAS or its thread controls are absent or the
    operands are not of that form."""
    if not (a.ndim == b.ndim == out.ndim == 2 and a.dtype == b.dtype == out.dtype == np.float32
            and all(x.flags.c_contiguous for x in (a, b, out))
            and a.shape[1] == b.shape[0] and out.shape == (a.shape[0], b.shape[1])):
        return False
    if not register_blas() or SHARED_BLAS is None or sgemm_address() is None:
        return False
    ffi, _, address = _SGEMM_HANDLE
    sgemm = ffi.cast("void(*)(int, int, int, int64_t, int64_t, int64_t, float, const float*, int64_t, "
                     "const float*, int64_t, float, float*, int64_t)", address)
    (m, k), n = a.shape, b.shape[1]
    if m == 0 or n == 0:
        return True
    if k == 0:
        out[...] = 0
        return True

    def rows(lo: int, hi: int) -> None:
        sgemm(_CBLAS_ROW_MAJOR, _CBLAS_NO_TRANS, _CBLAS_NO_TRANS, hi - lo, n, k, 1.0,
              ffi.cast("const float*", a.ctypes.data + lo * k * 4), k, ffi.cast("const float*", b.ctypes.data), n,
              0.0, ffi.cast("float*", out.ctypes.data + lo * n * 4), n)

    with SHARED_BLAS as shared:
        parts = shared.threads if _large_enough_to_batch(m, k, n) else 1
        edges = [m * i // parts for i in range(parts + 1)]
        shared.run([lambda lo=lo, hi=hi: rows(lo, hi) for lo, hi in zip(edges, edges[1:]) if hi > lo])
    return True


def set_openblas_threads(count: int) -> bool:
    """Set the thread count of numpy's OpenBLAS (what a numpy product and shared_sgemm then use);
    False where it cannot be set."""
    if not register_blas() or SHARED_BLAS is None:
        return False
    SHARED_BLAS._set(max(1, int(count)))
    return True
