"""Tensor expressions (TVM's `te`): describe tensors by index formulas, then make a PrimFunc.

    n = te.var("n")
    A = te.placeholder((n, 4), "float32", "A")
    k = te.reduce_axis(4, "k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    func = te.create_prim_func([A, B])

`create_prim_func` lays the program out as TVM does: a root block "root" holding the intermediate
buffers, and per compute stage a loop nest around one block named after the tensor, with spatial
and reduce iteration variables, read/write regions and (for reductions) an init statement.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ..ast import (
    Broadcast, Call, PrimExpr, PrimFunc, Var, SizeVar, all_, any_, const, convert, floordiv, floormod, select,
    truncdiv, truncmod,
)
from ..ast.dtype import DataType, dtype as to_dtype
from ..ast.expr import _promote
from ..ast.intrinsics import FLOAT_BINARY, FLOAT_UNARY
from .tensor import (  # noqa: A004 - TVM's names sum/max/min
    Axis, CommReducer, ComputeOp, PlaceholderOp, Reduce, Tensor, comm_reducer, compute, max, min,
    placeholder, prod, reduce_axis, sum,
)

__all__ = [
    "Tensor", "Axis", "Reduce", "var", "size_var", "placeholder", "compute", "reduce_axis",
    "comm_reducer", "sum", "max", "min", "prod", "if_then_else", "select", "const", "max_value",
    "min_value", "create_prim_func", "floordiv", "floormod", "truncdiv", "truncmod", "all", "any",
    "cast", "reinterpret", "abs", "power", "pow", "isnan", "isinf", "isfinite", *FLOAT_UNARY,
    *FLOAT_BINARY,
]


# ----------------------------------------------------------------------------- variables, constants

def var(name: str = "tindex", dtype: "DataType | str" = "int32") -> Var:
    """A scalar variable; used in a shape it becomes a size variable bound from the arrays."""
    return Var(name, to_dtype(dtype))


def size_var(name: str = "size", dtype: "DataType | str" = "int32") -> SizeVar:
    """A variable known to be >= 0, for symbolic shape dimensions."""
    return SizeVar(name, to_dtype(dtype))


def max_value(dtype: "DataType | str") -> PrimExpr:
    """The largest finite value of dtype (TVM's convention: finite for floats too)."""
    t = to_dtype(dtype)
    if t.is_float:
        return const(_finite_limit(t), t)
    return const(t.max_value(), t)


def min_value(dtype: "DataType | str") -> PrimExpr:
    """The smallest finite value of dtype (TVM's convention: finite for floats too)."""
    t = to_dtype(dtype)
    if t.is_float:
        return const(-_finite_limit(t), t)
    return const(t.min_value(), t)


def _finite_limit(t: DataType) -> float:
    if t.name == "bfloat16":
        return float(np.array(0x7F7F0000, np.uint32).view(np.float32))
    return float(np.finfo(t.numpy()).max)


def cast(value: Any, dtype: "DataType | str") -> PrimExpr:
    """value converted to dtype (see spec/ir.md for the exact rules)."""
    return convert(value).astype(dtype)


def reinterpret(value: Any, dtype: "DataType | str") -> PrimExpr:
    """The bits of value read as dtype (same width)."""
    value = convert(value)
    target = to_dtype(dtype)
    if target.bits * target.lanes != value.dtype.bits * value.dtype.lanes:
        raise TypeError(f"reinterpret: {value.dtype} and {target} have different widths")
    return Call("reinterpret", (value,), target)


# ----------------------------------------------------------------------------- math intrinsics

def _float_arg(op: str, value: Any) -> PrimExpr:
    value = convert(value)
    if not value.dtype.element.is_float:
        raise TypeError(f"te.{op} needs a float argument, got {value.dtype}; cast it first, e.g. x.astype('float32')")
    return value


def _make_unary(op: str) -> Callable[[Any], PrimExpr]:
    def intrinsic(x: Any) -> PrimExpr:
        x = _float_arg(op, x)
        return Call(op, (x,), x.dtype)

    intrinsic.__name__ = op
    intrinsic.__doc__ = f"Element-wise {op} of a float expression (C's {op}, exact IEEE special cases)."
    return intrinsic


def _make_binary(op: str) -> Callable[[Any, Any], PrimExpr]:
    def intrinsic(x: Any, y: Any) -> PrimExpr:
        x, y = _promote(x, y)
        _float_arg(op, x)
        return Call(op, (x, y), x.dtype)

    intrinsic.__name__ = op
    intrinsic.__doc__ = f"Element-wise {op} of two float expressions (C's {op})."
    return intrinsic


for _op in FLOAT_UNARY:
    globals()[_op] = _make_unary(_op)
for _op in FLOAT_BINARY:
    globals()[_op] = _make_binary(_op)
del _op
power = pow = globals()["pow"]


def abs(x: Any) -> PrimExpr:  # noqa: A001 - TVM's name
    """Absolute value (integers wrap: abs(INT_MIN) == INT_MIN)."""
    x = convert(x)
    if x.dtype.element.is_bool:
        return x
    if x.dtype.element.is_uint:
        return x
    return Call("abs", (x,), x.dtype)


def _make_predicate(op: str, for_integers: bool) -> Callable[[Any], PrimExpr]:
    def predicate(x: Any) -> PrimExpr:
        x = convert(x)
        result = DataType("bool", x.dtype.lanes)
        if not x.dtype.element.is_float:
            # integers are never NaN or infinite: a constant, broadcast to the lanes of x
            return const(for_integers) if x.dtype.lanes == 1 else Broadcast(const(for_integers), x.dtype.lanes)
        return Call(op, (x,), result)

    predicate.__name__ = op
    predicate.__doc__ = f"True where x is {op[2:]} (constant {for_integers} for integers)."
    return predicate


isnan = _make_predicate("isnan", False)
isinf = _make_predicate("isinf", False)
isfinite = _make_predicate("isfinite", True)


def if_then_else(cond: Any, true_value: Any, false_value: Any) -> PrimExpr:
    """cond ? true_value : false_value, evaluating only the taken branch (unlike select)."""
    cond = convert(cond)
    if not cond.dtype.is_bool:
        raise TypeError(f"if_then_else condition must be bool, got {cond.dtype}")
    true_value, false_value = _promote(true_value, false_value)
    return Call("if_then_else", (cond, true_value, false_value), true_value.dtype)


def all(*conditions: Any) -> PrimExpr:  # noqa: A001 - TVM's name
    """The conjunction of conditions."""
    if len(conditions) == 1 and isinstance(conditions[0], (list, tuple)):
        conditions = tuple(conditions[0])
    return all_(*conditions)


def any(*conditions: Any) -> PrimExpr:  # noqa: A001 - TVM's name
    """The disjunction of conditions."""
    if len(conditions) == 1 and isinstance(conditions[0], (list, tuple)):
        conditions = tuple(conditions[0])
    return any_(*conditions)


# ----------------------------------------------------------------------------- create_prim_func

def create_prim_func(tensors: Sequence["Tensor | Var"], name: str = "main") -> PrimFunc:
    """A PrimFunc computing the given output tensors from the given placeholders (TVM's layout).

    Parameters are the buffers of `tensors` in order (a te.var in the list becomes a scalar
    parameter); vars used in shapes become size vars bound from the arrays; every other computed
    tensor becomes an intermediate allocated in the root block.
    """
    from .prim_func import build_prim_func

    return build_prim_func(list(tensors), name)


