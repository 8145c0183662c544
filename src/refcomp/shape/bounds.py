"""Constant-bound (interval) analysis of integer expressions.

`bound(expr)` gives (lo, hi) with lo <= expr <= hi for every value of the variables allowed by the
`var_bound` callback.  Each node's interval is clamped to its dtype's range: under the no-overflow
reading (spec/shapes.md) a value of an int32 expression is an int32.  Division by an interval that
contains 0 is split around 0, since x // 0 has no value to bound.
"""
from __future__ import annotations

import functools
from typing import Callable

from ..ast.dtype import DataType
from ..ast.expr import (
    Add, BinaryOp, Call, Cast, CompareOp, FloorDiv, FloorMod, IntImm, Let, Max, Min, Mul, Not,
    PrimExpr, Select, Sub, TruncDiv, TruncMod, Var,
)
from .evaluate import trunc_div, trunc_mod

Interval = tuple[int, int]
VarBound = Callable[[Var], Interval]


@functools.lru_cache(maxsize=None)
def dtype_interval(dtype: DataType) -> Interval:
    """The full range of an integer or bool dtype."""
    element = dtype.element
    if element.is_bool:
        return (0, 1)
    if element.is_integer:
        return (int(element.min_value()), int(element.max_value()))
    raise TypeError(f"no integer interval for {dtype}")


def _clamp(interval: Interval, dtype: DataType) -> Interval:
    lo, hi = dtype_interval(dtype)
    return (max(interval[0], lo), min(interval[1], hi))


def _corners(op, a: Interval, b: Interval) -> Interval:
    values = [op(x, y) for x in a for y in b]
    return (min(values), max(values))


def _nonzero_parts(b: Interval) -> list[Interval]:
    parts = []
    if b[0] <= -1:
        parts.append((b[0], min(b[1], -1)))
    if b[1] >= 1:
        parts.append((max(b[0], 1), b[1]))
    return parts


def _union(intervals: list[Interval], fallback: Interval) -> Interval:
    if not intervals:
        return fallback
    return (min(i[0] for i in intervals), max(i[1] for i in intervals))


def _floordiv(a: Interval, b: Interval) -> list[Interval]:
    return [_corners(lambda x, y: x // y, a, part) for part in _nonzero_parts(b)]


def _truncdiv(a: Interval, b: Interval) -> list[Interval]:
    out = []
    for part in _nonzero_parts(b):
        # trunc division is monotone in a for a fixed sign of b, but not across a == 0
        pieces = [p for p in ((a[0], min(a[1], 0)), (max(a[0], 0), a[1])) if p[0] <= p[1]]
        out.extend(_corners(trunc_div, piece, part) for piece in pieces)
    return out


def _floormod(a: Interval, b: Interval) -> list[Interval]:
    out = []
    for lo, hi in _nonzero_parts(b):
        if lo > 0:
            if a[0] >= 0 and a[1] < lo:
                out.append(a)
            else:
                out.append((0, hi - 1))
        else:
            if a[1] <= 0 and a[0] > hi:
                out.append(a)
            else:
                out.append((lo + 1, 0))
    return out


def _truncmod(a: Interval, b: Interval) -> list[Interval]:
    out = []
    for lo, hi in _nonzero_parts(b):
        smallest = min(abs(lo), abs(hi))
        largest = max(abs(lo), abs(hi))
        if -smallest < a[0] and a[1] < smallest:
            out.append(a)  # |a| < |b|: a % b == a
        elif a[0] >= 0:
            out.append((0, min(a[1], largest - 1)))
        elif a[1] <= 0:
            out.append((max(a[0], -(largest - 1)), 0))
        else:
            out.append((max(a[0], -(largest - 1)), min(a[1], largest - 1)))
    return out


def _mul(a: Interval, b: Interval) -> Interval:
    return _corners(lambda x, y: x * y, a, b)


class BoundEvaluator:
    """Interval analysis over one var-bound function, caching each subexpression's interval."""

    def __init__(self, var_bound: VarBound) -> None:
        self.var_bound = var_bound
        self.cache: dict[PrimExpr, Interval] = {}
        self.let_bounds: dict[Var, Interval] = {}

    def bound(self, expr: PrimExpr) -> Interval:
        """(lo, hi) of an integer or bool expression."""
        cached = self.cache.get(expr)
        if cached is not None:
            return cached
        result = _clamp(self._compute(expr), expr.dtype)
        if result[0] > result[1]:  # an empty set means the facts contradict; stay sound
            result = (result[1], result[0])
        self.cache[expr] = result
        return result

    def _compute(self, expr: PrimExpr) -> Interval:
        kind = type(expr)
        if kind is IntImm:
            return (expr.value, expr.value)
        if isinstance(expr, Var):
            if expr in self.let_bounds:
                return self.let_bounds[expr]
            return self.var_bound(expr)
        if not (expr.dtype.element.is_integer or expr.dtype.element.is_bool):
            raise TypeError(f"no integer bound for a {expr.dtype} expression")
        if isinstance(expr, CompareOp) or kind is Not:
            return (0, 1)
        if isinstance(expr, BinaryOp):
            if expr.dtype.element.is_bool:
                return (0, 1)
            a, b = self.bound(expr.a), self.bound(expr.b)
            if kind is Add:
                return (a[0] + b[0], a[1] + b[1])
            if kind is Sub:
                return (a[0] - b[1], a[1] - b[0])
            if kind is Mul:
                if expr.a is expr.b:
                    return _square(a)
                return _mul(a, b)
            if kind is Min:
                return (min(a[0], b[0]), min(a[1], b[1]))
            if kind is Max:
                return (max(a[0], b[0]), max(a[1], b[1]))
            full = dtype_interval(expr.dtype)
            if kind is FloorDiv:
                return _union(_floordiv(a, b), full)
            if kind is FloorMod:
                return _union(_floormod(a, b), full)
            if kind is TruncDiv:
                return _union(_truncdiv(a, b), full)
            if kind is TruncMod:
                return _union(_truncmod(a, b), full)
            return full
        if kind is Select:
            t, f = self.bound(expr.true_value), self.bound(expr.false_value)
            return (min(t[0], f[0]), max(t[1], f[1]))
        if kind is Cast:
            source = expr.value.dtype.element
            if source.is_integer or source.is_bool:
                inner = self.bound(expr.value)
                target = dtype_interval(expr.dtype)
                if target[0] <= inner[0] and inner[1] <= target[1]:
                    return inner
            return dtype_interval(expr.dtype)
        if kind is Call:
            if expr.op == "if_then_else":
                t, f = self.bound(expr.args[1]), self.bound(expr.args[2])
                return (min(t[0], f[0]), max(t[1], f[1]))
            if expr.op == "abs":
                lo, hi = self.bound(expr.args[0])
                if lo >= 0:
                    return (lo, hi)
                if hi <= 0:
                    return (-hi, -lo)
                return (0, max(-lo, hi))
            return dtype_interval(expr.dtype)
        if kind is Let:
            saved = self.let_bounds.get(expr.var)
            self.let_bounds[expr.var] = self.bound(expr.value) if expr.value.dtype.element.is_integer else (0, 1)
            try:
                return self._compute(expr.body)
            finally:
                if saved is None:
                    del self.let_bounds[expr.var]
                else:
                    self.let_bounds[expr.var] = saved
        return dtype_interval(expr.dtype)


def _square(a: Interval) -> Interval:
    lo, hi = a
    candidates = (lo * lo, hi * hi)
    if lo <= 0 <= hi:
        return (0, max(candidates))
    return (min(candidates), max(candidates))
