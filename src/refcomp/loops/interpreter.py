"""The reference interpreter: runs any PrimFunc on numpy arrays, in place, with the IR's exact semantics.

    refcomp.interpret(func, A, B, C)          # buffers in parameter order, written in place
    refcomp.interpret(func, A, B, n=5)        # scalar parameters by name (or positionally)

Symbolic dims are bound from the arrays' shapes; an array of the wrong shape, dtype or count is
an ArgumentError naming the parameter.  The function is compiled once into Python source (cached
per PrimFunc, see interpreter_codegen) and each call copies the arrays into flat Python lists,
runs, and writes the buffers the function stores to back into the arrays (also when it fails
part way, as compiled code would have).  bfloat16 buffers take uint16 arrays of bit patterns.
Long innermost loops whose iterations are independent run as numpy array operations where that
is exact bit for bit (interpreter_vector); `scalar_only()` switches that off.

Semantics (the rules spec/ir.md states):
* Blocks: a BlockRealize runs its block when the predicate holds, with the iter vars bound to
  the iter values; the init statement runs first when every reduce iter var is at the minimum
  of its domain (always, for a block with no reduce iter vars); alloc_buffers are allocated
  fresh on each execution of the block.  Read/write regions are declarations and do not run.
* Fresh allocations (alloc_buffers, Allocate) hold garbage, not zeros: NaN for floats, the
  byte pattern 0x5A.. for integers, True for bools, so a missing init shows in results.
* Every loop kind (serial, parallel, vectorized, unrolled, thread_binding) runs its iterations
  in order; the extent is evaluated once on entry.
* Every buffer access is checked against the buffer's shape; an out-of-bounds index, an integer
  division by zero or a failed AssertStmt is a RuntimeFailure with the IR marked.
* if_then_else evaluates only the taken branch; Select, And and Or evaluate both operands.
* Arithmetic, casts, NaN and division rules: see refcomp.loops.interpreter_values.
"""
from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any

import numpy as np

from ..ast import (
    Add, Buffer, Cast, FloorDiv, FloorMod, IntImm, IRModule, Max, Min, Mul, PrimExpr, PrimFunc, Sub,
    Var, free_vars,
)
from ..ast.dtype import DataType
from ..errors import ArgumentError, InternalError, RefcompError
from . import interpreter_values as values
from .interpreter_codegen import Compiler, Kernel

__all__ = ["interpret", "compile_kernel", "python_source", "scalar_only"]

_CACHE: "OrderedDict[tuple[int, bool], tuple[PrimFunc, Kernel]]" = OrderedDict()
_CACHE_SIZE = 256


# The numpy fast path for independent innermost loops (interpreter_vector); results are the same
# bit for bit either way, so this only trades speed (tests switch it off to compare both paths).
VECTORIZE = os.environ.get("REFCOMP_INTERPRETER_VECTORIZE", "1") != "0"


def compile_kernel(func: PrimFunc, vectorize: bool | None = None) -> Kernel:
    """The interpreter's compiled form of func (cached; the cache holds func so ids stay valid)."""
    vectorize = VECTORIZE if vectorize is None else vectorize
    key = (id(func), vectorize)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is func:
        _CACHE.move_to_end(key)
        return hit[1]
    kernel = Compiler(func, vectorize=vectorize).compile()
    _CACHE[key] = (func, kernel)
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return kernel


_VECTORIZE_OVERRIDE: list[bool] = []


class scalar_only:
    """Context manager: interpret without the numpy fast path (to compare both paths)."""

    def __enter__(self) -> None:
        _VECTORIZE_OVERRIDE.append(False)

    def __exit__(self, *exc: Any) -> None:
        _VECTORIZE_OVERRIDE.pop()


def python_source(func: PrimFunc) -> str:
    """The Python source the interpreter runs for func (for debugging)."""
    return compile_kernel(_as_prim_func(func)).source


def interpret(func: "PrimFunc | IRModule", *args: Any, **scalars: Any) -> None:
    """Run func on numpy arrays in place (see the module docstring for the exact semantics)."""
    func = _as_prim_func(func)
    kernel = compile_kernel(func, _VECTORIZE_OVERRIDE[-1] if _VECTORIZE_OVERRIDE else None)
    buffers, scalar_values, outputs = _bind(func, kernel, args, scalars)
    try:
        kernel.run(buffers, scalar_values)
    except RefcompError:
        raise
    except RecursionError as exc:
        raise InternalError(f"interpreter ran out of stack running {func.name}: {exc}", ir=func) from exc
    except Exception as exc:  # a Python error here is a bug of the interpreter, not of the user
        raise InternalError(f"interpreter failed running {func.name}: {type(exc).__name__}: {exc}",
                            ir=func) from exc
    finally:
        for array, data, dtype in outputs:
            _write_back(array, data, dtype)


def _as_prim_func(func: Any) -> PrimFunc:
    if isinstance(func, PrimFunc):
        return func
    if isinstance(func, IRModule):
        prims = {name: f for name, f in func if isinstance(f, PrimFunc)}
        if "main" in prims:
            return prims["main"]
        if len(prims) == 1:
            return next(iter(prims.values()))
        raise ArgumentError(f"interpret: the module has {len(prims)} PrimFuncs and none is 'main'; "
                            "pass the function itself, e.g. mod['name']")
    raise ArgumentError(f"interpret: expected a PrimFunc or IRModule, got {type(func).__name__}")


# ----------------------------------------------------------------------------- arguments

def _bind(func: PrimFunc, kernel: Kernel, args: tuple, scalars: dict) -> tuple[list, list, list]:
    """Match args to params, bind size vars, check shapes and dtypes; lists for the kernel."""
    params = list(func.params)
    buffer_params = [p for p in params if isinstance(p, Buffer)]
    if len(args) == len(params):
        pairs = list(zip(params, args))
    elif len(args) == len(buffer_params) and len(args) < len(params):
        pairs = list(zip(buffer_params, args))
    else:
        expected = ", ".join(_describe_param(p) for p in params)
        raise ArgumentError(f"{func.name}: expected {len(params)} arguments ({expected}), got {len(args)}")
    given = {p: a for p, a in pairs}
    names = {p.name: p for p in params if isinstance(p, Var)}
    shape_vars = {v.name: v for v in kernel.scalar_inputs}
    env: dict[Var, Any] = {}
    for key, value in scalars.items():
        var = names.get(key)
        var = shape_vars.get(key) if var is None else var
        if var is None:
            raise ArgumentError(f"{func.name}: unknown scalar argument {key!r}; "
                                f"scalars are {sorted(set(names) | set(shape_vars))}")
        if var in given:
            raise ArgumentError(f"{func.name}: scalar {key} given both by position and by name")
        env[var] = _scalar(func, var, value)
    for p in params:
        if isinstance(p, Var):
            if p in given:
                env[p] = _scalar(func, p, given[p])
            elif p not in env:
                raise ArgumentError(f"{func.name}: missing scalar argument {p.name} ({p.dtype})")

    # A lowered function has flat parameters; attrs["original_buffers"] keeps the shapes callers use.
    original = func.attrs.get("original_buffers") or {}
    signature = {p: original.get(p, p) for p in buffer_params}
    arrays: list[np.ndarray] = []
    for p in buffer_params:
        array = given[p]
        p = signature[p]
        if not isinstance(array, np.ndarray):
            raise ArgumentError(f"{func.name}: parameter {p.name} expects a numpy array of {p.dtype} "
                                f"with shape {_show_shape(p.shape)}, got {type(array).__name__}")
        want = p.dtype.numpy()
        if array.dtype != want:
            extra = " (bfloat16 is passed as uint16 bit patterns)" if p.dtype.name == "bfloat16" else ""
            raise ArgumentError(f"{func.name}: parameter {p.name} expects dtype {p.dtype}{extra}, "
                                f"got {array.dtype}")
        arrays.append(array)
    # Bind size vars from the dims that are a bare variable, then check every dim.
    for p, array in zip(buffer_params, arrays):
        if array.ndim == len(signature[p].shape):
            for dim, size in zip(signature[p].shape, array.shape):
                if isinstance(dim, Var) and dim not in env:
                    env[dim] = int(size)
    for p, array in zip(buffer_params, arrays):
        _check_shape(func, signature[p], array, env)

    lists: list[list] = []
    outputs: list[tuple[np.ndarray, list, DataType]] = []
    seen: list[tuple[np.ndarray, list]] = []
    for p, array in zip(buffer_params, arrays):
        data = None
        for other, other_data in seen:
            if other is array:
                data = other_data  # the same array twice: one list, so writes are seen by both
            elif np.may_share_memory(other, array):
                raise ArgumentError(f"{func.name}: the array for parameter {p.name} overlaps another argument")
        if data is None:
            data = _to_list(array, p.dtype)
            seen.append((array, data))
        if p in kernel.written and all(out is not array for out, _, _ in outputs):
            if not array.flags.writeable:
                raise ArgumentError(f"{func.name}: parameter {p.name} is written but its array is read-only")
            outputs.append((array, data, p.dtype))
        lists.append(data)
    scalar_values = []
    for var in kernel.scalar_inputs:
        if var not in env:
            raise ArgumentError(f"{func.name}: cannot bind {var.name} from the arrays' shapes; pass {var.name}=...")
        scalar_values.append(env[var])
    return lists, scalar_values, outputs


def _describe_param(p: Any) -> str:
    if isinstance(p, Buffer):
        return f"{p.name}: {p.dtype}{_show_shape(p.shape)}"
    return f"{p.name}: {p.dtype}"


def _show_shape(shape: tuple[PrimExpr, ...]) -> str:
    parts = [str(d.value) if isinstance(d, IntImm) else _show_expr(d) for d in shape]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def _show_expr(e: PrimExpr) -> str:
    try:
        from ..ast.printer import script

        return script(e)
    except Exception:  # the printer is optional here
        return getattr(e, "name", type(e).__name__)


def _check_shape(func: PrimFunc, p: Buffer, array: np.ndarray, env: dict) -> None:
    shape = array.shape
    if len(shape) != len(p.shape):
        raise ArgumentError(f"{func.name}: parameter {p.name} expects a {len(p.shape)}-d array of shape "
                            f"{_show_shape(p.shape)}, got shape {tuple(array.shape)}")
    expected = []
    for dim in p.shape:
        missing = [v.name for v in free_vars(dim) if v not in env]
        if missing:
            raise ArgumentError(f"{func.name}: cannot infer {', '.join(missing)} for parameter {p.name}; "
                                f"pass {missing[0]}=... explicitly")
        expected.append(_eval_int(dim, env))
    if tuple(expected) != tuple(shape):
        bindings = ", ".join(f"{v.name} = {env[v]}" for v in dict.fromkeys(
            v for d in p.shape for v in free_vars(d)))
        where = f" with {bindings}" if bindings else ""
        raise ArgumentError(f"{func.name}: parameter {p.name} expects shape {_show_shape(p.shape)} = "
                            f"{tuple(expected)}{where}, got {tuple(array.shape)}")


def _eval_int(e: PrimExpr, env: dict) -> int:
    """Value of an integer shape expression (the usual shape arithmetic)."""
    if isinstance(e, IntImm):
        return e.value
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, Cast):
        return _eval_int(e.value, env)
    ops = {Add: lambda a, b: a + b, Sub: lambda a, b: a - b, Mul: lambda a, b: a * b,
           FloorDiv: lambda a, b: a // b if b else 0, FloorMod: lambda a, b: a % b if b else 0,
           Min: min, Max: max}
    for cls, fn in ops.items():
        if isinstance(e, cls):
            return fn(_eval_int(e.a, env), _eval_int(e.b, env))
    raise ArgumentError(f"shape expression {type(e).__name__} cannot be evaluated from the arguments")


def _scalar(func: PrimFunc, var: Var, value: Any) -> Any:
    t = var.dtype
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, np.generic):
        value = value.item()
    if t.is_bool:
        if not isinstance(value, (bool, int)):
            raise ArgumentError(f"{func.name}: scalar {var.name} expects a bool, got {value!r}")
        return bool(value)
    if t.is_integer:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ArgumentError(f"{func.name}: scalar {var.name} expects an integer ({t}), got {value!r}")
        low, high = values.int_range(t)
        if not low <= value <= high:
            raise ArgumentError(f"{func.name}: scalar {var.name} = {value} does not fit in {t}")
        return value
    if t.is_float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ArgumentError(f"{func.name}: scalar {var.name} expects a number ({t}), got {value!r}")
        rounder = values.float_rounder(t)
        return rounder(float(value)) if rounder else float(value)
    raise ArgumentError(f"{func.name}: scalar {var.name} of dtype {t} cannot be passed to the interpreter")


# ----------------------------------------------------------------------------- arrays <-> lists

def _to_list(array: np.ndarray, t: DataType):
    return values.to_storage(array, t)


def _write_back(array: np.ndarray, data, t: DataType) -> None:
    array[...] = values.from_storage(data, t).reshape(array.shape)
