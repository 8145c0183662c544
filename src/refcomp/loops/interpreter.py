"""The reference interpreter: runs any PrimFunc on numpy arrays, in place, with the IR's exact semantics.

    refcomp.interpret(func, A, B, C)          # buffers in parameter order, written in place
    refcomp.interpret(func, A, B, n=5)        # scalar parameters by name (or positionally)

Symbolic dims are bound from the arrays' shapes; an array of the wrong shape, dtype or count is
an ArgumentError naming the parameter (refcomp.shape.arguments, the checker compiled kernels use
too; the interpreter reads any layout and lets the same array be passed twice).  The function is compiled once into Python source (cached
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

from ..ast import Buffer, IRModule, PrimFunc
from ..ast.dtype import DataType
from ..errors import ArgumentError, InternalError, RefcompError
from ..shape.arguments import Signature
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

_SIGNATURES: "OrderedDict[int, tuple[PrimFunc, Signature]]" = OrderedDict()


def _signature(func: PrimFunc, kernel: Kernel) -> Signature:
    """The argument checker of func for the interpreter (cached like the kernel)."""
    hit = _SIGNATURES.get(id(func))
    if hit is not None and hit[0] is func:
        _SIGNATURES.move_to_end(id(func))
        return hit[1]
    signature = Signature(func, kernel.scalar_inputs, raw_pointers=False)
    _SIGNATURES[id(func)] = (func, signature)
    while len(_SIGNATURES) > _CACHE_SIZE:
        _SIGNATURES.popitem(last=False)
    return signature


def _bind(func: PrimFunc, kernel: Kernel, args: tuple, scalars: dict) -> tuple[list, list, list]:
    """Check the call with the one argument checker; the kernel's lists, scalars and outputs."""
    bound = _signature(func, kernel).bind(args, scalars)
    buffer_params = [p for p in func.params if isinstance(p, Buffer)]
    lists: list[list] = []
    outputs: list[tuple[np.ndarray, list, DataType]] = []
    seen: list[tuple[np.ndarray, list]] = []
    for p, array in zip(buffer_params, bound.arrays):
        data = next((d for other, d in seen if other is array), None)
        if data is None:  # the same array twice: one list, so writes are seen by both
            data = _to_list(array, p.dtype)
            seen.append((array, data))
        if p in kernel.written and all(out is not array for out, _, _ in outputs):
            outputs.append((array, data, p.dtype))
        lists.append(data)
    scalar_values = []
    for var in kernel.scalar_inputs:
        value = bound.env[var]
        rounder = values.float_rounder(var.dtype) if var.dtype.is_float else None
        scalar_values.append(rounder(value) if rounder else value)
    return lists, scalar_values, outputs


# ----------------------------------------------------------------------------- arrays <-> lists

def _to_list(array: np.ndarray, t: DataType):
    return values.to_storage(array, t)


def _write_back(array: np.ndarray, data, t: DataType) -> None:
    array[...] = values.from_storage(data, t).reshape(array.shape)
