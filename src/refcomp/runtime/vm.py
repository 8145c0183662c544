"""The graph VM: runs lowered graph functions (a flat list of instructions over registers).

    ex = refcomp.graph.build(mod, target="c")
    vm = refcomp.runtime.VirtualMachine(ex)
    (y,) = vm["main"](x)            # numpy arrays in, numpy arrays out

At entry every argument is matched against its parameter's struct info: rank and dtype must agree,
dims are compared with (or bind) the size vars, and every runtime check recorded by shape inference
is evaluated as soon as its vars are bound; a mismatch is an ArgumentError naming the parameter and
the dims.  Kernels are callables taking arrays (inputs, then preallocated outputs) and trailing
integer scalars; tensors planned into a storage arena are views into preallocated byte buffers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..ast import expr as tir
from ..ast.functor import free_vars
from ..errors import ArgumentError, RuntimeFailure

# ----------------------------------------------------------------------------- instructions


@dataclass(frozen=True)
class MatchShape:
    """Check register `reg` against a tensor pattern, binding size vars that are still unbound."""

    reg: int
    shape: tuple | None  # tuple of PrimExpr, or None for any shape of that rank
    ndim: int
    dtype: str | None
    what: str


@dataclass(frozen=True)
class Check:
    """Evaluate condition once its size vars are bound; raise with message when false."""

    condition: tir.PrimExpr
    message: str


@dataclass(frozen=True)
class LoadConst:
    """dst = a constant array."""

    dst: int
    value: Any


@dataclass(frozen=True)
class Alloc:
    """dst = an uninitialized tensor of shape; in storage token `token` when planned (else fresh)."""

    dst: int
    shape: tuple
    dtype: str
    token: int | None = None


@dataclass(frozen=True)
class CallKernel:
    """kernel(*args, *outs, *scalars): a compiled PrimFunc writing into preallocated outputs."""

    kernel: str
    args: tuple[int, ...]
    outs: tuple[int, ...]
    scalars: tuple = ()


@dataclass(frozen=True)
class CallPacked:
    """An external function in destination-passing style: fn(*args, *outs)."""

    symbol: str
    args: tuple[int, ...]
    outs: tuple[int, ...]


@dataclass(frozen=True)
class CallFunction:
    """dst = another graph function of the executable applied to args."""

    dst: int
    function: str
    args: tuple[int, ...]


@dataclass(frozen=True)
class Move:
    """dst = src (the same value; no copy)."""

    dst: int
    src: int


@dataclass(frozen=True)
class MakeTuple:
    """dst = (regs...)."""

    dst: int
    fields: tuple[int, ...]


@dataclass(frozen=True)
class GetItem:
    """dst = src[index]."""

    dst: int
    src: int
    index: int


@dataclass(frozen=True)
class MakeShape:
    """dst = a tuple of ints (a ShapeExpr value) or a scalar (a PrimValue)."""

    dst: int
    values: tuple
    scalar: bool = False


@dataclass(frozen=True)
class Branch:
    """dst = the result of then_code or else_code, chosen by register cond (a bool scalar)."""

    dst: int
    cond: int
    then_code: tuple
    then_result: int
    else_code: tuple
    else_result: int


@dataclass(frozen=True)
class Return:
    """Leave the function with register reg."""

    reg: int


@dataclass
class VMFunction:
    """One lowered graph function: parameter count, register count, code, storage tokens."""

    name: str
    num_params: int
    num_regs: int
    code: tuple
    param_names: tuple[str, ...]
    checks: tuple[Check, ...] = ()
    token_bytes: tuple[tir.PrimExpr, ...] = ()  # bytes of each storage token (upper-bound expression)
    token_limits: tuple[int | None, ...] = ()   # the same evaluated at the declared upper bounds


@dataclass
class Executable:
    """What graph.build produces: lowered graph functions, compiled kernels, external functions."""

    functions: dict[str, VMFunction]
    kernels: dict[str, Callable]
    externs: dict[str, Callable] = field(default_factory=dict)
    target: str = "c"
    stats: dict[str, Any] = field(default_factory=dict)
    module: Any = None  # the final IRModule, for inspection

    def arena_bytes(self, function: str = "main") -> int:
        """Bytes of preallocated storage the planner reserved for function (at the upper bounds)."""
        return int(sum(v or 0 for v in self.functions[function].token_limits))


# ----------------------------------------------------------------------------- external functions

_EXTERNS: dict[str, Callable] = {}


def register_extern(symbol: str, function: Callable | None = None):
    """Register a Python callable (destination-passing: fn(*inputs, *outputs)) under symbol."""
    def add(fn: Callable) -> Callable:
        _EXTERNS[symbol] = fn
        return fn

    return add(function) if function is not None else add


def extern_from_library(symbol: str, library_path: str, c_symbol: str, signature: str,
                        adapter: Callable[..., Any]) -> Callable:
    """Register a C function of a shared library: `adapter(cfunc, ffi, *arrays)` calls it.

    signature is the C declaration, e.g. "void cblas_sgemm(int, int, int, int, int, int, float, "
    "const float*, int, const float*, int, float, float*, int);".
    """
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(signature)
    lib = ffi.dlopen(library_path)
    cfunc = getattr(lib, c_symbol)

    def call(*arrays):
        return adapter(cfunc, ffi, *arrays)

    call._keepalive = (ffi, lib)  # type: ignore[attr-defined]
    return register_extern(symbol, call)


# ----------------------------------------------------------------------------- the machine


class _Frame:
    def __init__(self, function: VMFunction) -> None:
        self.regs: list[Any] = [None] * function.num_regs
        self.env: dict[tir.Var, int] = {}
        self.pending = list(function.checks)


class VirtualMachine:
    """Runs an Executable's functions on numpy arrays."""

    def __init__(self, executable: Executable) -> None:
        self.executable = executable
        self._storage: dict[str, list[bytearray | None]] = {}
        self.kernel_calls = 0

    def __getitem__(self, name: str) -> Callable[..., Any]:
        if name not in self.executable.functions:
            raise KeyError(f"executable has no function {name!r}; it has {sorted(self.executable.functions)}")
        return lambda *args: self.invoke(name, *args)

    def invoke(self, name: str, *args: Any) -> Any:
        """Run function `name` on args (numpy arrays, ints for prim params, tuples for tuple params)."""
        function = self.executable.functions[name]
        if len(args) != function.num_params:
            raise ArgumentError(f"{name} takes {function.num_params} arguments "
                                f"({', '.join(function.param_names)}), got {len(args)}")
        frame = _Frame(function)
        for k, a in enumerate(args):
            # np.asarray keeps 0-d arrays 0-d (np.ascontiguousarray would make them 1-d)
            frame.regs[k] = np.asarray(a, order="C") if isinstance(a, np.ndarray) else a
        with _blas_session():
            return self._run(function, function.code, frame)

    # ------------------------------------------------------------------ execution

    def _run(self, function: VMFunction, code: Sequence, frame: _Frame) -> Any:
        regs = frame.regs
        for inst in code:
            kind = type(inst)
            if kind is CallKernel:
                self._call_kernel(inst, frame)
            elif kind is Alloc:
                regs[inst.dst] = self._alloc(function, inst, frame)
            elif kind is MatchShape:
                self._match(inst, frame)
            elif kind is LoadConst:
                regs[inst.dst] = inst.value
            elif kind is Move:
                regs[inst.dst] = regs[inst.src]
            elif kind is MakeTuple:
                regs[inst.dst] = tuple(regs[r] for r in inst.fields)
            elif kind is GetItem:
                regs[inst.dst] = regs[inst.src][inst.index]
            elif kind is MakeShape:
                values = tuple(_eval_int(v, frame.env) for v in inst.values)
                regs[inst.dst] = values[0] if inst.scalar else values
            elif kind is CallPacked:
                self._call_packed(inst, frame)
            elif kind is CallFunction:
                regs[inst.dst] = self.invoke(inst.function, *(regs[r] for r in inst.args))
            elif kind is Branch:
                taken = bool(np.asarray(regs[inst.cond]).item())
                sub_code, result = (inst.then_code, inst.then_result) if taken else (inst.else_code, inst.else_result)
                self._run(function, sub_code, frame)
                regs[inst.dst] = regs[result]
            elif kind is Return:
                return regs[inst.reg]
            else:  # pragma: no cover - the lowering emits only the kinds above
                raise RuntimeFailure(f"VM: unknown instruction {inst!r}")
        return None

    def _call_kernel(self, inst: CallKernel, frame: _Frame) -> None:
        kernel = self.executable.kernels[inst.kernel]
        regs = frame.regs
        scalars = [_eval_int(s, frame.env) for s in inst.scalars]
        self.kernel_calls += 1
        kernel(*(regs[r] for r in inst.args), *(regs[r] for r in inst.outs), *scalars)

    def _call_packed(self, inst: CallPacked, frame: _Frame) -> None:
        fn = self.executable.externs.get(inst.symbol) or _EXTERNS.get(inst.symbol)
        if fn is None:
            raise RuntimeFailure(f"call_dps_packed: no external function {inst.symbol!r} is registered",
                                 hint="register it with refcomp.runtime.vm.register_extern(symbol, fn)")
        regs = frame.regs
        fn(*(regs[r] for r in inst.args), *(regs[r] for r in inst.outs))

    def _alloc(self, function: VMFunction, inst: Alloc, frame: _Frame) -> np.ndarray:
        shape = tuple(_eval_int(d, frame.env) for d in inst.shape)
        dtype = np.dtype(inst.dtype) if inst.dtype != "bfloat16" else np.dtype("uint16")
        if inst.token is None:
            return np.empty(shape, dtype=dtype)
        pools = self._storage.setdefault(function.name, [None] * len(function.token_bytes))
        need = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        limit = function.token_limits[inst.token]
        if limit is not None and need > limit:
            raise RuntimeFailure(
                f"{function.name}: a tensor of shape {shape} needs {need} bytes, more than the {limit} bytes "
                "planned from the declared upper bounds (tir_var_upper_bound)",
                hint="raise the upper bound of the size vars or call with smaller inputs")
        pool = pools[inst.token]
        if pool is None or len(pool) < need:
            pool = bytearray(max(need, limit or 0, 1))
            pools[inst.token] = pool
        return np.frombuffer(pool, dtype=dtype, count=int(np.prod(shape, dtype=np.int64))).reshape(shape)

    def _match(self, inst: MatchShape, frame: _Frame) -> None:
        value = frame.regs[inst.reg]
        if not isinstance(value, np.ndarray):
            raise ArgumentError(f"{inst.what}: expected a tensor, got {type(value).__name__}")
        if inst.ndim != -1 and value.ndim != inst.ndim:
            raise ArgumentError(f"{inst.what}: expected a {inst.ndim}-d tensor, got shape {value.shape}")
        if inst.dtype is not None:
            expected = np.dtype(inst.dtype) if inst.dtype != "bfloat16" else np.dtype("uint16")
            if value.dtype != expected:
                raise ArgumentError(f"{inst.what}: expected dtype {inst.dtype}, got {value.dtype}")
        if inst.shape is not None:
            env = frame.env
            for axis, (dim, actual) in enumerate(zip(inst.shape, value.shape)):
                if isinstance(dim, tir.Var) and dim not in env:
                    env[dim] = int(actual)
                    continue
                expected = _eval_int(dim, env)
                if expected != actual:
                    raise ArgumentError(
                        f"{inst.what}: dim {axis} is {actual} but must be {_show(dim)} = {expected} "
                        f"(shape {value.shape}, {_bound_text(env)})")
        self._run_checks(frame)

    def _run_checks(self, frame: _Frame) -> None:
        remaining = []
        for check in frame.pending:
            if all(v in frame.env for v in free_vars(check.condition)):
                if not _eval_int(check.condition, frame.env):
                    raise ArgumentError(f"runtime shape check failed: {check.message} ({_bound_text(frame.env)})")
            else:
                remaining.append(check)
        frame.pending = remaining


def _show(dim: tir.PrimExpr) -> str:
    from ..ast.graph_script import format_prim_expr

    return format_prim_expr(dim)


def _bound_text(env: Mapping[tir.Var, int]) -> str:
    return ", ".join(f"{v.name} = {k}" for v, k in env.items()) or "no size vars bound"


def _eval_int(expr: Any, env: Mapping[tir.Var, int]) -> int:
    if isinstance(expr, int):
        return expr
    from ..graph.shape_facts import NotConstant, evaluate

    try:
        value = evaluate(expr, env)
    except NotConstant as exc:
        raise RuntimeFailure(f"VM: cannot evaluate {_show(expr)}: {exc} is not bound") from None
    return int(value) if not isinstance(value, bool) else value


# ----------------------------------------------------------------------------- BLAS through cffi

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


_SHARED_BLAS: _SharedBlas | None = None
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


def _blas_session():
    """The context a top-level VM call runs in: OpenBLAS one-threaded, GEMMs shared (see _SharedBlas)."""
    import contextlib

    return _SHARED_BLAS if _SHARED_BLAS is not None else contextlib.nullcontext()


def _column_blocks(n: int, parts: int) -> list[tuple[int, int]]:
    """[n0, n1) blocks of n columns for parts threads, bounds on multiples of 16 (whole vectors)."""
    bounds = [0] + [min(n, (n * i // parts + 15) // 16 * 16) for i in range(1, parts)] + [n]
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo]


def _sgemm_adapter(transpose_b: bool, batch=None):
    def call(cfunc, ffi, a, b, out):
        parts = _SHARED_BLAS.threads if _SHARED_BLAS is not None else 1
        if b.ndim > 2:  # equal batch dims: one sgemm per batch entry
            count = int(np.prod(a.shape[:-2]))  # not -1: that is ambiguous for an empty matrix
            a3 = a.reshape((count,) + a.shape[-2:])
            b3 = b.reshape((count,) + b.shape[-2:])
            o3 = out.reshape((count,) + out.shape[-2:])
            if parts > 1 and count >= parts and _large_enough_to_batch(*a3.shape[1:], o3.shape[-1]):
                # whole entries per thread (each a one-threaded batched call or loop)
                edges = [count * i // parts for i in range(parts + 1)]
                _SHARED_BLAS.run([lambda lo=lo, hi=hi: entries(a3[lo:hi], b3[lo:hi], o3[lo:hi])
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
            _SHARED_BLAS.run([lambda lo=lo, hi=hi: columns(a, b, out, m, k, n, lo, hi)
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
        sgemm[0](_CBLAS_ROW_MAJOR, _CBLAS_NO_TRANS, _CBLAS_TRANS if transpose_b else _CBLAS_NO_TRANS,
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
    sgemm: list = [None]
    ffi_cast = None

    def bound(cfunc, ffi, *arrays):
        nonlocal ffi_cast
        if sgemm[0] is None:
            sgemm[0], ffi_cast = cfunc, ffi.cast
        return call(cfunc, ffi, *arrays)

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
    global _SHARED_BLAS
    _SHARED_BLAS = _shared_blas(path)
    batch = _batch_sgemm(path)
    extern_from_library("refcomp.blas.sgemm_nn", path, "scipy_cblas_sgemm64_", _SGEMM_DECL,
                        _sgemm_adapter(False, batch))
    extern_from_library("refcomp.blas.sgemm_nt", path, "scipy_cblas_sgemm64_", _SGEMM_DECL,
                        _sgemm_adapter(True, batch))
    return True
