"""Integer value ranges of expressions under known variable ranges, exact about wrap-around.

`Bounds.of(expr)` returns the inclusive interval `(lo, hi)` the expression's *machine* value lies in,
or None when evaluating it might wrap around its integer width (then the mathematical and the machine
value may differ, and rewrites that rely on ordinary arithmetic must not fire).
"""
from __future__ import annotations

from ...ast import (
    Add, BufferLoad, Cast, FloorDiv, FloorMod, IntImm, Max, Min, Mul, PrimExpr, Select, SizeVar, Sub,
    TruncDiv, TruncMod, Var,
)
from ...ast.dtype import DataType

Interval = tuple[int, int]


def dtype_range(dtype: DataType) -> Interval:
    """Every value an integer (or bool) scalar type can hold."""
    return int(dtype.min_value()), int(dtype.max_value())


def _fits(interval: Interval, dtype: DataType) -> bool:
    lo, hi = dtype_range(dtype)
    return lo <= interval[0] and interval[1] <= hi


class Bounds:
    """Interval analysis over integer scalar expressions, with a scoped table of variable ranges."""

    def __init__(self) -> None:
        self.ranges: dict[Var, Interval] = {}

    # ------------------------------------------------------------------ scopes

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

    # ------------------------------------------------------------------ analysis

    def of(self, expr: PrimExpr) -> Interval | None:
        """The interval of expr's value, or None when unknown or when it may wrap around."""
        dtype = expr.dtype
        if dtype.lanes != 1 or not (dtype.is_integer or dtype.is_bool):
            return None
        result = self._of(expr)
        if result is not None and not _fits(result, dtype):
            return None
        return result

    def _of(self, expr: PrimExpr) -> Interval | None:
        if isinstance(expr, IntImm):
            return expr.value, expr.value
        if isinstance(expr, Var):
            if expr in self.ranges:
                return self.ranges[expr]
            lo, hi = dtype_range(expr.dtype)
            return (max(lo, 0), hi) if isinstance(expr, SizeVar) else (lo, hi)
        if isinstance(expr, (Add, Sub, Mul, Min, Max)):
            a, b = self.of(expr.a), self.of(expr.b)
            if a is None or b is None:
                return None
            if isinstance(expr, Add):
                return a[0] + b[0], a[1] + b[1]
            if isinstance(expr, Sub):
                return a[0] - b[1], a[1] - b[0]
            if isinstance(expr, Min):
                return min(a[0], b[0]), min(a[1], b[1])
            if isinstance(expr, Max):
                return max(a[0], b[0]), max(a[1], b[1])
            corners = [x * y for x in a for y in b]
            return min(corners), max(corners)
        if isinstance(expr, (FloorDiv, FloorMod, TruncDiv, TruncMod)):
            return self._of_division(expr)
        if isinstance(expr, Select):
            a, b = self.of(expr.true_value), self.of(expr.false_value)
            if a is None or b is None:
                return dtype_range(expr.dtype)
            return min(a[0], b[0]), max(a[1], b[1])
        if isinstance(expr, Cast):
            source = expr.value.dtype
            if source.is_integer or source.is_bool:
                inner = self.of(expr.value)
                if inner is not None and _fits(inner, expr.dtype):
                    return inner
            return dtype_range(expr.dtype)
        if isinstance(expr, BufferLoad):
            return dtype_range(expr.dtype)
        # Any other integer expression holds some value of its type (never "wraps" by itself).
        return dtype_range(expr.dtype)

    def _of_division(self, expr: PrimExpr) -> Interval | None:
        a = self.of(expr.a)
        divisor = expr.b.value if isinstance(expr.b, IntImm) else None
        if divisor is None or divisor <= 0:
            if isinstance(expr, FloorMod):
                b = self.of(expr.b)
                if b is not None and b[0] > 0:  # 0 <= a mod b < b for positive b
                    return 0, b[1] - 1
            return None  # unknown divisor: INT_MIN // -1 may wrap
        if isinstance(expr, FloorDiv):
            return None if a is None else (a[0] // divisor, a[1] // divisor)
        if isinstance(expr, FloorMod):
            if a is not None and a[0] // divisor == a[1] // divisor:
                return a[0] % divisor, a[1] % divisor
            return 0, divisor - 1
        if a is None:
            return None
        if isinstance(expr, TruncDiv):
            return _trunc_div(a[0], divisor), _trunc_div(a[1], divisor)
        # TruncMod: the sign follows the dividend
        if a[0] >= 0 and a[0] // divisor == a[1] // divisor:
            return a[0] % divisor, a[1] % divisor
        return (0 if a[0] >= 0 else -(divisor - 1)), (divisor - 1 if a[1] > 0 else 0)


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


class _Binding:
    """Context manager that installs a variable range and restores the previous one."""

    def __init__(self, bounds: Bounds, var: Var, interval: Interval | None) -> None:
        self.bounds, self.var, self.interval = bounds, var, interval
        self.saved: Interval | None = None
        self.had = False

    def __enter__(self) -> None:
        self.had = self.var in self.bounds.ranges
        self.saved = self.bounds.ranges.get(self.var)
        if self.interval is None:
            self.bounds.ranges.pop(self.var, None)
        else:
            self.bounds.ranges[self.var] = self.interval

    def __exit__(self, *exc: object) -> None:
        if self.had:
            self.bounds.ranges[self.var] = self.saved  # type: ignore[assignment]
        else:
            self.bounds.ranges.pop(self.var, None)
