"""Constant folding shared by both integer semantics of the simplifier (shape/simplify.py).

Integer constants, casts of constants, and float constants where IEEE gives the same bits: the
operation is computed in the operands' own precision (numpy scalars), `x * 1.0` and `x / 1.0` are
`x`; nothing is reassociated, `x + 0.0` is kept (`-0.0 + 0.0` is `+0.0`), bfloat16 is not folded.
An operand with side effects is never dropped.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from ..ast.dtype import DataType
from ..ast.expr import (
    EQ, GE, GT, LE, LT, NE, Add, And, Broadcast, Cast, CompareOp, Div, FloatImm, IntImm, Max, Min,
    Mul, Not, PrimExpr, Sub, TruncDiv,
)
from ..ast.functor import is_pure
from .evaluate import trunc_div, trunc_mod
from .keys import same_expr

NEGATE = {LT: GE, LE: GT, GT: LE, GE: LT, EQ: NE, NE: EQ}


def is_true(expr: PrimExpr) -> bool:
    """expr is the constant true."""
    return isinstance(expr, IntImm) and expr.dtype.is_bool and expr.value == 1


def is_false(expr: PrimExpr) -> bool:
    """expr is the constant false."""
    return isinstance(expr, IntImm) and expr.dtype.is_bool and expr.value == 0


def bool_const(value: bool, lanes: int = 1) -> PrimExpr:
    """The constant true or false, broadcast to lanes."""
    scalar = IntImm(int(bool(value)), DataType("bool"))
    return scalar if lanes == 1 else Broadcast(scalar, lanes)


def const_value(expr: PrimExpr) -> int | float | None:
    """The value of an int or float constant, else None."""
    if isinstance(expr, (IntImm, FloatImm)):
        return expr.value
    return None


def _numpy_float(dtype: DataType) -> np.dtype | None:
    # bfloat16 has no numpy type: its constants are not folded
    return None if dtype.name == "bfloat16" or dtype.lanes != 1 else dtype.numpy()


def fold_float_binary(e: PrimExpr) -> PrimExpr:
    """A float + - * / min max of constants computed in its own precision; `x * 1.0`, `x / 1.0`."""
    if isinstance(e, (Min, Max)):
        return fold_min_max(e)
    if isinstance(e, Mul) and const_value(e.b) == 1.0:
        return e.a
    if isinstance(e, Mul) and const_value(e.a) == 1.0:
        return e.b
    if isinstance(e, Div) and const_value(e.b) == 1.0:
        return e.a
    np_type = _numpy_float(e.dtype)
    a, b = const_value(e.a), const_value(e.b)
    if np_type is None or a is None or b is None or not isinstance(e, (Add, Sub, Mul, Div)):
        return e
    x, y = np.array(a, dtype=np_type), np.array(b, dtype=np_type)
    with np.errstate(all="ignore"):
        value = x + y if isinstance(e, Add) else x - y if isinstance(e, Sub) else \
            x * y if isinstance(e, Mul) else x / y
    return FloatImm(float(value), e.dtype)


def fold_min_max(e: PrimExpr) -> PrimExpr:
    """min/max of two constants (NaN operands are left alone)."""
    a, b = const_value(e.a), const_value(e.b)
    if e.dtype.lanes != 1 or a is None or b is None:
        return e
    if isinstance(a, float) and (math.isnan(a) or math.isnan(b)):
        return e
    value = min(a, b) if isinstance(e, Min) else max(a, b)
    return IntImm(int(value), e.dtype) if e.dtype.is_integer else FloatImm(value, e.dtype)


def fold_trunc(e: PrimExpr) -> PrimExpr:
    """C-style division or remainder of two integer constants, wrapped to the dtype."""
    a, b = const_value(e.a), const_value(e.b)
    if e.dtype.lanes != 1 or a is None or b is None or b == 0:
        return e
    value = trunc_div(a, b) if isinstance(e, TruncDiv) else trunc_mod(a, b)
    return IntImm(e.dtype.wrap(value), e.dtype)


def fold_logic(e: PrimExpr) -> PrimExpr:
    """`and`/`or` with a constant side (an impure other side is kept where it would be dropped)."""
    if e.dtype.lanes != 1:
        return e
    is_and = isinstance(e, And)
    for this, other in ((e.a, e.b), (e.b, e.a)):
        if is_true(this):
            return other if is_and else (this if is_pure(other) else e)
        if is_false(this):
            return (this if is_pure(other) else e) if is_and else other
    if same_expr(e.a, e.b) and is_pure(e.a):
        return e.a
    return e


def fold_not(e: Not) -> PrimExpr:
    """`not` of a constant, of a `not`, or of an integer comparison (flipped)."""
    inner = e.a
    if isinstance(inner, IntImm):
        return bool_const(not inner.value, 1)
    if isinstance(inner, Not):
        return inner.a
    if isinstance(inner, CompareOp) and inner.a.dtype.is_integer:
        return NEGATE[type(inner)](inner.a, inner.b)
    return e


def fold_cast(e: Cast) -> PrimExpr:
    """A cast of a constant, or to the type its value already has."""
    target, value = e.dtype, e.value
    if value.dtype == target:
        return value
    if target.lanes != 1:
        return e
    if isinstance(value, IntImm):
        if target.is_integer or target.is_bool:
            return IntImm(target.wrap(value.value), target)
        np_type = _numpy_float(target)
        if np_type is not None and abs(value.value) <= 2 ** 53:  # exact in double: one rounding
            return FloatImm(float(np.array(float(value.value)).astype(np_type)), target)
    if isinstance(value, FloatImm):
        np_type = _numpy_float(value.dtype)
        if np_type is None:
            return e
        if target.is_float and _numpy_float(target) is not None:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                converted = np.array(value.value, dtype=np_type).astype(_numpy_float(target))
            return FloatImm(float(converted), target)
        if target.is_integer and math.isfinite(value.value):
            truncated = int(value.value)  # C truncates toward zero; out of range is left unfolded
            if target.min_value() <= truncated <= target.max_value():
                return IntImm(truncated, target)
        if target.is_bool:
            return bool_const(value.value != 0.0)
    return e
