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

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..ast import expr as tir
from ..ast.dtype import dtype as to_dtype, storage_array
from ..ast.functor import free_vars
from ..errors import ArgumentError, RuntimeFailure
from ..shape.evaluate import EvaluationError, UnboundVariable, evaluate

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
class MatchShapeValue:
    """Check shape value `reg` (a tuple of ints) against a pattern, binding vars that are still unbound."""

    reg: int
    values: tuple | None  # tuple of PrimExpr, or None for any values of that length
    ndim: int
    what: str


@dataclass(frozen=True)
class TensorToShape:
    """dst = the entries of 1-d integer tensor src, as a shape value (a tuple of ints)."""

    dst: int
    src: int


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
class CallHost:
    """dst = fn(arrays, attrs): an operator the VM runs on the host (string ops), returning fresh
    arrays whose shapes may depend on the data; integer expressions in attrs are evaluated over
    the bound size vars first; `what` names it in errors."""

    dst: int
    fn: Callable[..., Any]
    args: tuple[int, ...]
    what: str
    attrs: Mapping[str, Any] = field(default_factory=dict)


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
class View:
    """dst = src's storage under shape (the same element count, row-major; no copy)."""

    dst: int
    src: int
    shape: tuple


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
    compiled: dict[str, Callable] = field(default_factory=dict)  # graph functions compiled to C
    executors: dict[str, str] = field(default_factory=dict)  # "compiled" or "vm: <reason>" per function

    @property
    def executor(self) -> str:
        """How main (else the only function) runs: "compiled" (one C call) or "vm: <why>"."""
        name = "main" if "main" in self.functions else next(iter(self.functions), "main")
        return self.executors.get(name, "vm")

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


MAX_CALL_DEPTH = 20000  # graph function calls nested at run time (a recursive loop's iterations)


class _Frame:
    def __init__(self, function: VMFunction) -> None:
        self.regs: list[Any] = [None] * function.num_regs
        self.env: dict[tir.Var, int] = {}
        self.pending = list(function.checks)


class VirtualMachine:
    """Runs an Executable's functions on numpy arrays."""

    def __init__(self, executable: Executable, executor: str = "auto") -> None:
        """executor "auto" runs the functions compiled to C where there are; "vm" always interprets."""
        if executor not in ("auto", "vm"):
            raise ValueError(f"VirtualMachine: executor must be 'auto' or 'vm', got {executor!r}")
        self.executable = executable
        self.use_compiled = executor == "auto"
        self._storage: dict[str, list[bytearray | None]] = {}
        self.kernel_calls = 0

    def __getitem__(self, name: str) -> Callable[..., Any]:
        if name not in self.executable.functions:
            raise KeyError(f"executable has no function {name!r}; it has {sorted(self.executable.functions)}")
        return lambda *args: self.invoke(name, *args)

    def invoke(self, name: str, *args: Any) -> Any:
        """Run function `name` on args (numpy arrays, ints for prim params, tuples for tuple params)."""
        import sys

        limit = sys.getrecursionlimit()
        with call_session():
            try:
                return self._invoke(name, args)
            except RecursionError:
                raise RuntimeFailure(f"{name}: graph function calls nested too deep for Python "
                                     f"(at most {MAX_CALL_DEPTH} are allowed)") from None
            finally:
                sys.setrecursionlimit(limit)  # deep recursion raised it for this call only

    def _invoke(self, name: str, args: Sequence[Any]) -> Any:
        compiled = self.executable.compiled.get(name) if self.use_compiled else None
        if compiled is not None:
            self.kernel_calls += compiled.kernel_calls
            return compiled(*args)
        function = self.executable.functions[name]
        if len(args) != function.num_params:
            raise ArgumentError(f"{name} takes {function.num_params} arguments "
                                f"({', '.join(function.param_names)}), got {len(args)}")
        frame = _Frame(function)
        for k, a in enumerate(args):
            # np.asarray keeps 0-d arrays 0-d (np.ascontiguousarray would make them 1-d)
            frame.regs[k] = np.asarray(a, order="C") if isinstance(a, np.ndarray) else a
        return self._run(function, function.code, frame)

    def _call_function(self, name: str, args: Sequence[Any]) -> Any:
        """A graph function called by another (recursion runs a run-time loop: one call per step)."""
        import sys

        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_CALL_DEPTH:
                raise RuntimeFailure(f"{name}: graph function calls nested deeper than {MAX_CALL_DEPTH} "
                                     "(a loop run by recursion makes two calls per iteration)")
            if self._depth > 64:  # each call takes a few Python frames: make room for MAX_CALL_DEPTH
                sys.setrecursionlimit(max(sys.getrecursionlimit(), 8 * MAX_CALL_DEPTH + 1000))
            return self._invoke(name, args)
        finally:
            self._depth -= 1

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
            elif kind is View:
                regs[inst.dst] = self._view(inst, frame)
            elif kind is MakeTuple:
                regs[inst.dst] = tuple(regs[r] for r in inst.fields)
            elif kind is GetItem:
                regs[inst.dst] = regs[inst.src][inst.index]
            elif kind is MakeShape:
                values = tuple(_eval_int(v, frame.env) for v in inst.values)
                regs[inst.dst] = values[0] if inst.scalar else values
            elif kind is CallPacked:
                self._call_packed(inst, frame)
            elif kind is TensorToShape:
                regs[inst.dst] = tuple(int(v) for v in np.asarray(regs[inst.src]).reshape(-1))
            elif kind is MatchShapeValue:
                self._match_shape_value(inst, frame)
            elif kind is CallHost:
                regs[inst.dst] = self._call_host(inst, frame)
            elif kind is CallFunction:
                regs[inst.dst] = self._call_function(inst.function, tuple(regs[r] for r in inst.args))
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

    def _call_host(self, inst: CallHost, frame: _Frame) -> Any:
        try:
            attrs = {k: _bound_value(v, frame.env) for k, v in inst.attrs.items()}
            result = inst.fn([frame.regs[r] for r in inst.args], attrs)
        except (ValueError, TypeError, IndexError, KeyError, UnicodeError) as exc:
            raise RuntimeFailure(f"{inst.what}: {type(exc).__name__}: {exc}") from None
        return tuple(result) if isinstance(result, (list, tuple)) else result

    def _view(self, inst: View, frame: _Frame) -> np.ndarray:
        source = frame.regs[inst.src]
        shape = tuple(_eval_int(d, frame.env) for d in inst.shape)
        if int(np.prod(shape, dtype=np.int64)) != source.size:
            raise RuntimeFailure(f"view of a tensor of shape {source.shape} as {shape}: the element counts differ")
        return source.reshape(shape)  # a view: every tensor the VM holds is C-contiguous

    def _alloc(self, function: VMFunction, inst: Alloc, frame: _Frame) -> np.ndarray:
        shape = tuple(_eval_int(d, frame.env) for d in inst.shape)
        dtype = to_dtype(inst.dtype).numpy()
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
            expected = to_dtype(inst.dtype).numpy()
            if value.dtype != expected:
                value = frame.regs[inst.reg] = storage_array(value)  # ml_dtypes float8/int4, numpy str
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
                        f"{inst.what}: dim {axis} is {actual} but {_must_be(dim)}{expected} "
                        f"(shape {value.shape}, {_bound_text(env)})")
        self._run_checks(frame)

    def _match_shape_value(self, inst: MatchShapeValue, frame: _Frame) -> None:
        value = frame.regs[inst.reg]
        if not isinstance(value, tuple):
            raise ArgumentError(f"{inst.what}: expected a shape value, got {type(value).__name__}")
        if inst.ndim != -1 and len(value) != inst.ndim:
            raise ArgumentError(f"{inst.what}: expected a shape of {inst.ndim} values, got {value}")
        if inst.values is not None:
            env = frame.env
            for k, (dim, actual) in enumerate(zip(inst.values, value)):
                if isinstance(dim, tir.Var) and dim not in env:
                    if isinstance(dim, tir.SizeVar) and actual < 0:
                        raise ArgumentError(f"{inst.what}: value {k} is {actual}, but {dim.name} is a size "
                                            f"(>= 0) (shape value {value})")
                    env[dim] = int(actual)
                    continue
                expected = _eval_int(dim, env)
                if expected != actual:
                    raise ArgumentError(f"{inst.what}: value {k} is {actual} but {_must_be(dim)}"
                                        f"{expected} (shape value {value}, {_bound_text(env)})")
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


def _bound_value(value: Any, env: Mapping[tir.Var, int]) -> Any:
    """An attribute value with its integer expressions evaluated (tuples item by item)."""
    if isinstance(value, tir.PrimExpr) and not isinstance(value, (tir.IntImm, tir.FloatImm, tir.StringImm)):
        return _eval_int(value, env)
    if isinstance(value, tuple):
        return tuple(_bound_value(v, env) for v in value)
    return value


def _show(dim: tir.PrimExpr) -> str:
    from ..ast.graph_script import format_prim_expr

    return format_prim_expr(dim)


def _must_be(dim: tir.PrimExpr) -> str:
    """The text before the expected value in a dim mismatch: "must be n * 2 = " for an expression
    (its value follows), "must be " for a constant (which is its own value: no "16 = 16")."""
    return "must be " if isinstance(dim, (int, tir.IntImm)) else f"must be {_show(dim)} = "


def _bound_text(env: Mapping[tir.Var, int]) -> str:
    return ", ".join(f"{v.name} = {k}" for v, k in env.items()) or "no size vars bound"


def _eval_int(expr: Any, env: Mapping[tir.Var, int]) -> int:
    if isinstance(expr, int):
        return expr
    try:
        value = evaluate(expr, env)
    except UnboundVariable as exc:
        raise RuntimeFailure(f"VM: cannot evaluate {_show(expr)}: {exc.var.name} is not bound") from None
    except EvaluationError as exc:
        raise RuntimeFailure(f"VM: cannot evaluate {_show(expr)}: {exc}") from None
    return int(value) if not isinstance(value, bool) else value


# ----------------------------------------------------------------------------- the call session

_call_session: Callable[[], Any] = contextlib.nullcontext


def set_call_session(factory: Callable[[], Any]) -> None:
    """Run every VM call inside `factory()`, a context manager (refcomp.runtime.blas shares
    OpenBLAS's GEMMs over the VM's threads this way once its externs are registered)."""
    global _call_session
    _call_session = factory


def call_session() -> Any:
    """The context a VM call runs in: the registered session, else nothing."""
    return _call_session()
