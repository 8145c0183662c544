"""The interval analysis of integer expressions, for either integer semantics.

One set of interval rules, two readings of a result that leaves the dtype's range:

- mathematical integers (`Intervals(var_bound)`, the shape level): under the no-overflow reading of
  spec/shapes.md a value of an int32 expression is an int32, so every node's interval is clamped
  to its dtype.  `bound(expr)` is always an interval.
- two's-complement wrap-around (`Intervals(var_bound, wrap=True)`, the loop level): the interval
  is of the *machine* value.  A node whose mathematical interval leaves its dtype may wrap, so its
  interval is unknown: `of(expr)` is None, and so is every interval computed from it.  Rewrites
  that need ordinary arithmetic fire only where `of` is not None.

A third reading, `closed=True` (mathematical), answers only what the variable ranges determine:
a variable whose `var_bound` is None, a load, an opaque call or a division by an interval that
contains 0 make the interval unknown (None) instead of the dtype's range.  Schedule primitives use it
to size buffers and check layouts, where a dtype-wide range would be a wrong answer, not a safe one.

Division by an interval that contains 0 is split around 0 in the mathematical reading (x // 0 has
no value to bound); with wrap-around an unknown divisor gives "unknown" (INT_MIN // -1 wraps).
`Bounds` is the wrap-around analysis with a scoped table of variable ranges, for passes that walk
loops.
"""
from __future__ import annotations

import functools
from typing import Callable

from ..ast.dtype import DataType
from ..ast.expr import (
    Add, BinaryOp, Call, Cast, CompareOp, FloorDiv, FloorMod, IntImm, Let, Max, Min, Mul, Not,
    PrimExpr, Select, SizeVar, Sub, TruncDiv, TruncMod, Var,
)
from .evaluate import trunc_div

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


def default_var_interval(var: Var) -> Interval:
    """What a variable with no known range can hold: its dtype's range (from 0 for a SizeVar)."""
    lo, hi = dtype_interval(var.dtype)
    return (max(lo, 0), hi) if isinstance(var, SizeVar) else (lo, hi)


def _fits(interval: Interval, dtype: DataType) -> bool:
    lo, hi = dtype_interval(dtype)
    return lo <= interval[0] and interval[1] <= hi


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
        if lo == hi > 0 and a[0] // lo == a[1] // lo:  # a within one multiple of the divisor
            out.append((a[0] % lo, a[1] % lo))
        elif lo > 0:
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
        if lo == hi > 0 and a[0] >= 0 and a[0] // lo == a[1] // lo:
            out.append((a[0] % lo, a[1] % lo))
        elif -smallest < a[0] and a[1] < smallest:
            out.append(a)  # |a| < |b|: a % b == a
        elif a[0] >= 0:
            out.append((0, min(a[1], largest - 1)))
        elif a[1] <= 0:
            out.append((max(a[0], -(largest - 1)), 0))
        else:
            out.append((max(a[0], -(largest - 1)), min(a[1], largest - 1)))
    return out


def mul_interval(a: Interval, b: Interval) -> Interval:
    """The interval of x * y for x in a, y in b."""
    return _corners(lambda x, y: x * y, a, b)


def square_interval(a: Interval) -> Interval:
    """The interval of x * x for x in a."""
    lo, hi = a
    candidates = (lo * lo, hi * hi)
    if lo <= 0 <= hi:
        return (0, max(candidates))
    return (min(candidates), max(candidates))


_DIVISION = {FloorDiv: _floordiv, FloorMod: _floormod, TruncDiv: _truncdiv, TruncMod: _truncmod}


class Intervals:
    """Interval analysis over one var-bound function, in one integer semantics (module docstring)."""

    def __init__(self, var_bound: VarBound = default_var_interval, wrap: bool = False,
                 closed: bool = False) -> None:
        self.var_bound = var_bound
        self.wrap = wrap
        self.closed = closed
        self.cache: dict[PrimExpr, Interval | None] = {}
        self.let_bounds: dict[Var, Interval | None] = {}

    def bound(self, expr: PrimExpr) -> Interval:
        """(lo, hi) of an integer or bool expression (mathematical reading: never unknown)."""
        result = self.of(expr)
        return dtype_interval(expr.dtype) if result is None else result

    def of(self, expr: PrimExpr) -> Interval | None:
        """(lo, hi) of expr's value; None when it is not a scalar integer or (wrap) it may wrap."""
        if expr in self.cache:
            return self.cache[expr]
        dtype = expr.dtype
        if self.wrap and (dtype.lanes != 1 or not (dtype.is_integer or dtype.is_bool)):
            return None
        result = self._compute(expr)
        if result is not None:
            if self.wrap:
                if not _fits(result, dtype):
                    result = None
            else:
                lo, hi = dtype_interval(dtype)
                result = (max(result[0], lo), min(result[1], hi))
                if result[0] > result[1]:  # an empty set means the facts contradict; stay sound
                    result = (result[1], result[0])
        self.cache[expr] = result
        return result

    def _compute(self, expr: PrimExpr) -> Interval | None:
        kind = type(expr)
        if kind is IntImm:
            return (expr.value, expr.value)
        if isinstance(expr, Var):
            if expr in self.let_bounds:
                return self.let_bounds[expr]
            return self.var_bound(expr)  # None (closed): not determined by the ranges
        if not (expr.dtype.element.is_integer or expr.dtype.element.is_bool):
            raise TypeError(f"no integer bound for a {expr.dtype} expression")
        if isinstance(expr, CompareOp) or kind is Not:
            return (0, 1)
        if isinstance(expr, BinaryOp):
            if expr.dtype.element.is_bool:
                return (0, 1)
            division = _DIVISION.get(kind)
            if division is not None:
                return self._division(expr, division)
            a, b = self.of(expr.a), self.of(expr.b)
            if a is None or b is None:
                return None
            if kind is Add:
                return (a[0] + b[0], a[1] + b[1])
            if kind is Sub:
                return (a[0] - b[1], a[1] - b[0])
            if kind is Mul:
                return square_interval(a) if expr.a is expr.b else mul_interval(a, b)
            if kind is Min:
                return (min(a[0], b[0]), min(a[1], b[1]))
            if kind is Max:
                return (max(a[0], b[0]), max(a[1], b[1]))
            return self._opaque(expr)
        if kind is Select:
            return self._either(expr.true_value, expr.false_value, expr.dtype)
        if kind is Cast:
            source = expr.value.dtype.element
            if source.is_integer or source.is_bool:
                inner = self.of(expr.value)
                if inner is not None and _fits(inner, expr.dtype):
                    return inner
            return self._opaque(expr)
        if kind is Call:
            if expr.op == "if_then_else":
                return self._either(expr.args[1], expr.args[2], expr.dtype)
            if expr.op == "abs":
                inner = self.of(expr.args[0])
                if inner is None:
                    return None
                lo, hi = inner
                if lo >= 0:
                    return (lo, hi)
                if hi <= 0:
                    return (-hi, -lo)
                return (0, max(-lo, hi))
            return self._opaque(expr)
        if kind is Let:
            return self._let(expr)
        return self._opaque(expr)

    def _opaque(self, expr: PrimExpr) -> Interval | None:
        """A value the rules cannot follow (a load, an opaque call): some value of its type."""
        return None if self.closed else dtype_interval(expr.dtype)

    def _division(self, expr: PrimExpr, parts) -> Interval | None:
        a, b = self.of(expr.a), self.of(expr.b)
        if self.wrap and not (b is not None and b[0] > 0):
            return None  # a divisor that may be -1 or 0: INT_MIN // -1 wraps, x // 0 is unknown
        if self.closed and (b is None or b[0] <= 0 <= b[1]):
            return None
        if b is None:
            return None
        if a is None:
            if type(expr) is FloorMod and b[0] > 0:
                return (0, b[1] - 1)  # 0 <= a mod b < b for positive b, whatever a is
            return None
        return _union(parts(a, b), dtype_interval(expr.dtype))

    def _either(self, t: PrimExpr, f: PrimExpr, dtype: DataType) -> Interval:
        ti, fi = self.of(t), self.of(f)
        if ti is None or fi is None:
            return None if self.closed else dtype_interval(dtype)
        return (min(ti[0], fi[0]), max(ti[1], fi[1]))

    def _let(self, expr: Let) -> Interval | None:
        saved = self.let_bounds.get(expr.var, _MISSING)
        value = expr.value
        self.let_bounds[expr.var] = self.of(value) if value.dtype.element.is_integer else (0, 1)
        self.cache.clear()  # intervals of the body's subexpressions hold for this binding only
        try:
            return self._compute(expr.body)
        finally:
            if saved is _MISSING:
                del self.let_bounds[expr.var]
            else:
                self.let_bounds[expr.var] = saved
            self.cache.clear()


_MISSING = object()


class Bounds(Intervals):
    """The wrap-around interval analysis with a scoped table of variable ranges (for loop passes)."""

    def __init__(self) -> None:
        super().__init__(self._lookup, wrap=True)
        self.ranges: dict[Var, Interval] = {}

    def _lookup(self, var: Var) -> Interval:
        found = self.ranges.get(var)
        return found if found is not None else default_var_interval(var)

    def bind(self, var: Var, interval: Interval | None) -> "_Binding":
        """Within the `with` block, var is known to lie in interval (inclusive); None: unknown."""
        return _Binding(self, var, interval)

    def bind_loop(self, var: Var, minimum: PrimExpr, extent: PrimExpr) -> "_Binding":
        """Within the `with` block, var runs over [minimum, minimum + extent)."""
        lo_range, extent_range = self.of(minimum), self.of(extent)
        interval = None
        if lo_range is not None and extent_range is not None and extent_range[1] >= 1:
            interval = (lo_range[0], lo_range[1] + extent_range[1] - 1)
            if not _fits(interval, var.dtype):
                interval = None
        return _Binding(self, var, interval)


class _Binding:
    """Context manager that installs a variable range and restores the previous one."""

    def __init__(self, bounds: Bounds, var: Var, interval: Interval | None) -> None:
        self.bounds, self.var, self.interval = bounds, var, interval
        self.saved: Interval | None = None
        self.had = False

    def __enter__(self) -> None:
        ranges = self.bounds.ranges
        self.had = self.var in ranges
        self.saved = ranges.get(self.var)
        if self.interval is None:
            ranges.pop(self.var, None)
        else:
            ranges[self.var] = self.interval
        self.bounds.cache.clear()

    def __exit__(self, *exc: object) -> None:
        ranges = self.bounds.ranges
        if self.had:
            ranges[self.var] = self.saved  # type: ignore[assignment]
        else:
            ranges.pop(self.var, None)
        self.bounds.cache.clear()
