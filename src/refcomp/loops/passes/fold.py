"""A small, always-available expression simplifier: constant folding and index arithmetic.

Every rewrite here is exact under the IR's semantics: integers wrap around in their width, so
additive/multiplicative normalisation (which holds modulo 2^bits) is always allowed, while a rewrite
that needs ordinary integer arithmetic (floor division of a sum, deciding a comparison) fires only
when `Bounds` shows that no intermediate value can wrap.  Floats are folded only where IEEE gives the
same bits (constants computed in their own precision, `x * 1.0`); no reassociation.
"""
from __future__ import annotations

import dataclasses
import math
import warnings
import numpy as np

from ...ast import (
    EQ, GE, GT, LE, LT, NE, Add, And, Broadcast, Call, Cast, CompareOp, Div, FloatImm, FloorDiv,
    FloorMod, IntImm, Let, Max, Min, Mul, Not, Or, PrimExpr, Select, StringImm, Sub, TruncDiv,
    TruncMod, Var,
)
from ...ast.dtype import DataType
from ...ast.functor import is_pure
from .bounds import Bounds, Interval
from .linear import Linear, build_linear, linear_form, merge_div_mod, same_expr

# ----------------------------------------------------------------------------- constants


def _int(value: int, dtype: DataType) -> IntImm:
    return IntImm(dtype.wrap(value), dtype)


def _is_signed_scalar(dtype: DataType) -> bool:
    return dtype.lanes == 1 and dtype.is_int


def _numpy_float(dtype: DataType) -> np.dtype | None:
    # bfloat16 has no numpy type: its constants are not folded
    return None if dtype.name == "bfloat16" or dtype.lanes != 1 else dtype.numpy()


def _const_value(expr: PrimExpr) -> int | float | None:
    if isinstance(expr, (IntImm, FloatImm)):
        return expr.value
    return None


def is_true(expr: PrimExpr) -> bool:
    """expr is the constant true."""
    return isinstance(expr, IntImm) and expr.dtype.is_bool and expr.value == 1


def is_false(expr: PrimExpr) -> bool:
    """expr is the constant false."""
    return isinstance(expr, IntImm) and expr.dtype.is_bool and expr.value == 0


def bool_const(value: bool, lanes: int = 1) -> PrimExpr:
    scalar = IntImm(int(bool(value)), DataType("bool"))
    return scalar if lanes == 1 else Broadcast(scalar, lanes)


# ----------------------------------------------------------------------------- the simplifier


class ExprSimplifier:
    """Simplifies expressions bottom-up using the variable ranges in `bounds`."""

    def __init__(self, bounds: Bounds | None = None) -> None:
        self.bounds = bounds if bounds is not None else Bounds()
        self.keys: dict[int, tuple] = {}  # expr_key cache for this simplifier's lifetime

    def __call__(self, expr: PrimExpr) -> PrimExpr:
        return self.simplify(expr)

    def simplify(self, expr: PrimExpr) -> PrimExpr:
        """expr simplified; the very same object when nothing could be simplified."""
        if isinstance(expr, (IntImm, FloatImm, StringImm, Var)):
            return expr
        if isinstance(expr, Let):
            value = self.simplify(expr.value)
            with self.bounds.bind(expr.var, self.bounds.of(value)):
                body = self.simplify(expr.body)
            return expr.with_(value=value, body=body)
        rebuilt = self._children(expr)
        result = self._rewrite(rebuilt)
        if result is not expr and self.same(result, expr):
            return expr
        return result

    def same(self, a: PrimExpr, b: PrimExpr) -> bool:
        return same_expr(a, b, self.keys)

    def linear(self, expr: PrimExpr) -> Linear:
        return linear_form(expr, self.keys)

    def _children(self, expr: PrimExpr) -> PrimExpr:
        changes = {}
        for field in dataclasses.fields(expr):
            old = getattr(expr, field.name)
            if isinstance(old, PrimExpr):
                new = self.simplify(old)
            elif isinstance(old, tuple) and old and all(isinstance(x, PrimExpr) for x in old):
                items = tuple(self.simplify(x) for x in old)
                new = old if all(a is b for a, b in zip(items, old)) else items
            else:
                continue
            if new is not old:
                changes[field.name] = new
        return expr.with_(**changes) if changes else expr

    # ------------------------------------------------------------------ per-node rules

    def _rewrite(self, e: PrimExpr) -> PrimExpr:
        if isinstance(e, (Add, Sub, Mul)):
            return self._arith(e)
        if isinstance(e, Div):
            return self._float_binary(e)
        if isinstance(e, (FloorDiv, FloorMod)):
            return self._floor_division(e)
        if isinstance(e, (TruncDiv, TruncMod)):
            return self._trunc_division(e)
        if isinstance(e, (Min, Max)):
            return self._min_max(e)
        if isinstance(e, CompareOp):
            return self._compare(e)
        if isinstance(e, (And, Or)):
            return self._logic(e)
        if isinstance(e, Not):
            return self._not(e)
        if isinstance(e, Select):
            if is_true(e.condition) and is_pure(e.false_value):
                return e.true_value
            if is_false(e.condition) and is_pure(e.true_value):
                return e.false_value
            if self.same(e.true_value, e.false_value) and is_pure(e.condition):
                return e.true_value
            return e
        if isinstance(e, Cast):
            return self._cast(e)
        if isinstance(e, Call) and e.op == "if_then_else" and len(e.args) == 3:
            if is_true(e.args[0]):
                return e.args[1]
            if is_false(e.args[0]):
                return e.args[2]
            return e
        if isinstance(e, Broadcast) and e.lanes == 1:
            return e.value
        return e

    def _arith(self, e: PrimExpr) -> PrimExpr:
        dtype = e.dtype
        if dtype.lanes != 1:
            return e
        if dtype.is_float:
            return self._float_binary(e)
        a, b = _const_value(e.a), _const_value(e.b)
        if a is not None and b is not None:
            value = a + b if isinstance(e, Add) else a - b if isinstance(e, Sub) else a * b
            return _int(value, dtype)
        if _is_signed_scalar(dtype):
            return build_linear(merge_div_mod(self.linear(e)), dtype)
        # unsigned: identities only (a negative coefficient has no unsigned constant)
        if isinstance(e, (Add, Sub)) and b == 0:
            return e.a
        if isinstance(e, Add) and a == 0:
            return e.b
        if isinstance(e, Mul):
            if b == 1:
                return e.a
            if a == 1:
                return e.b
            if (a == 0 and is_pure(e.b)) or (b == 0 and is_pure(e.a)):
                return IntImm(0, dtype)
        return e

    def _float_binary(self, e: PrimExpr) -> PrimExpr:
        if isinstance(e, Mul) and _const_value(e.b) == 1.0:
            return e.a
        if isinstance(e, Mul) and _const_value(e.a) == 1.0:
            return e.b
        if isinstance(e, Div) and _const_value(e.b) == 1.0:
            return e.a
        np_type = _numpy_float(e.dtype)
        a, b = _const_value(e.a), _const_value(e.b)
        if np_type is None or a is None or b is None:
            return e
        x, y = np.array(a, dtype=np_type), np.array(b, dtype=np_type)
        with np.errstate(all="ignore"):
            value = x + y if isinstance(e, Add) else x - y if isinstance(e, Sub) else \
                x * y if isinstance(e, Mul) else x / y
        return FloatImm(float(value), e.dtype)

    def _floor_division(self, e: PrimExpr) -> PrimExpr:
        dtype = e.dtype
        divisor = e.b.value if isinstance(e.b, IntImm) else None
        if dtype.lanes != 1 or divisor is None or divisor == 0:
            return e
        is_div = isinstance(e, FloorDiv)
        if isinstance(e.a, IntImm):
            value = e.a.value // divisor if is_div else e.a.value % divisor
            return _int(value, dtype)
        if divisor == 1:
            return e.a if is_div else IntImm(0, dtype)
        if divisor < 0 or not _is_signed_scalar(dtype):
            return e
        if is_div and isinstance(e.a, FloorDiv) and isinstance(e.a.b, IntImm) and e.a.b.value > 0:
            product = e.a.b.value * divisor
            if product <= int(dtype.max_value()):
                return self._floor_division(FloorDiv(e.a.a, IntImm(product, dtype)))
        if not is_div and isinstance(e.a, FloorMod) and isinstance(e.a.b, IntImm) \
                and e.a.b.value > 0 and e.a.b.value % divisor == 0:
            return self._floor_division(FloorMod(e.a.a, e.b))
        if self.bounds.of(e.a) is None:
            return e  # the dividend may wrap: ordinary arithmetic does not apply
        form = self.linear(e.a)
        quotient, remainder = Linear(self.keys), Linear(self.keys)
        for atom, c in form.nonzero():
            if c % divisor == 0:
                quotient.add(atom, c // divisor)
            else:
                remainder.add(atom, c)
        quotient.constant, remainder.constant = form.constant // divisor, form.constant % divisor
        rest = build_linear(remainder, dtype)
        rest_range = self.bounds.of(rest)
        if rest_range is None:
            return e
        low, high = rest_range[0] // divisor, rest_range[1] // divisor
        if low == high:  # rest lies within one multiple of the divisor
            if is_div:
                quotient.constant += low
                return build_linear(quotient, dtype)
            remainder.constant -= low * divisor
            return build_linear(remainder, dtype)
        if not is_div:  # (c*q + r) mod c == r mod c
            return FloorMod(rest, e.b)
        return e

    def _trunc_division(self, e: PrimExpr) -> PrimExpr:
        a, b = _const_value(e.a), _const_value(e.b)
        if e.dtype.lanes != 1 or a is None or b is None or b == 0:
            return e
        quotient = abs(a) // abs(b)
        quotient = quotient if (a >= 0) == (b >= 0) else -quotient
        value = quotient if isinstance(e, TruncDiv) else a - b * quotient
        return _int(value, e.dtype)

    def _min_max(self, e: PrimExpr) -> PrimExpr:
        if e.dtype.lanes != 1:
            return e
        is_min = isinstance(e, Min)
        a, b = _const_value(e.a), _const_value(e.b)
        if a is not None and b is not None:
            if isinstance(a, float) and (math.isnan(a) or math.isnan(b)):
                return e
            value = min(a, b) if is_min else max(a, b)
            return IntImm(int(value), e.dtype) if e.dtype.is_integer else FloatImm(value, e.dtype)
        if self.same(e.a, e.b):
            return e.a
        if not e.dtype.is_integer:
            return e
        ra, rb = self.bounds.of(e.a), self.bounds.of(e.b)
        if ra is None or rb is None:
            return e
        if ra[1] <= rb[0]:
            return e.a if is_min else e.b
        if rb[1] <= ra[0]:
            return e.b if is_min else e.a
        return e

    def _compare(self, e: CompareOp) -> PrimExpr:
        lanes = e.dtype.lanes
        a, b = _const_value(e.a), _const_value(e.b)
        if a is not None and b is not None and lanes == 1:
            return bool_const(_decide(type(e), a, b))
        if lanes != 1 or not e.a.dtype.is_integer:
            return e
        decided = self._decide_by_bounds(e)
        if decided is not None:
            return bool_const(decided)
        if isinstance(e, EQ) and _const_value(e.b) == 0:
            return self._zero_sum(e)
        return e

    def _zero_sum(self, e: EQ) -> PrimExpr:
        """c1*t1 + ... + ck*tk == 0 with positive c and non-negative t, no wrap: every t == 0.

        This is how an init guard `k_0 * 2 + k_1 == 0` after a split becomes `k_0 == 0 and
        k_1 == 0`, a test each loop level can hoist.
        """
        if self.bounds.of(e.a) is None:
            return e
        form = self.linear(e.a)
        terms = form.nonzero()
        if form.constant != 0 or len(terms) < 2:
            return e
        for atom, c in terms:
            r = self.bounds.of(atom)
            if c <= 0 or r is None or r[0] < 0:
                return e
        condition: PrimExpr | None = None
        for atom, _ in terms:
            term = EQ(atom, IntImm(0, atom.dtype))
            condition = term if condition is None else And(condition, term)
        return condition

    def _decide_by_bounds(self, e: CompareOp) -> bool | None:
        ra, rb = self.bounds.of(e.a), self.bounds.of(e.b)
        if ra is None or rb is None:
            return None
        difference = self._linear_range(self.linear(e.a).plus(self.linear(e.b), -1))
        if difference is None:
            difference = (ra[0] - rb[1], ra[1] - rb[0])
        lo, hi = difference
        op = type(e)
        if op is LT:
            return True if hi < 0 else False if lo >= 0 else None
        if op is LE:
            return True if hi <= 0 else False if lo > 0 else None
        if op is GT:
            return True if lo > 0 else False if hi <= 0 else None
        if op is GE:
            return True if lo >= 0 else False if hi < 0 else None
        if op is EQ:
            return True if lo == hi == 0 else False if lo > 0 or hi < 0 else None
        if op is NE:
            return False if lo == hi == 0 else True if lo > 0 or hi < 0 else None
        return None

    def _linear_range(self, form: Linear) -> Interval | None:
        lo = hi = form.constant
        for atom, c in form.nonzero():
            r = self.bounds.of(atom)
            if r is None:
                return None
            lo += min(c * r[0], c * r[1])
            hi += max(c * r[0], c * r[1])
        return lo, hi

    def _logic(self, e: PrimExpr) -> PrimExpr:
        if e.dtype.lanes != 1:
            return e
        is_and = isinstance(e, And)
        for this, other in ((e.a, e.b), (e.b, e.a)):
            if is_true(this):
                return other if is_and else (this if is_pure(other) else e)
            if is_false(this):
                return (this if is_pure(other) else e) if is_and else other
        if self.same(e.a, e.b) and is_pure(e.a):
            return e.a
        return e

    def _not(self, e: Not) -> PrimExpr:
        inner = e.a
        if isinstance(inner, IntImm):
            return bool_const(not inner.value, 1)
        if isinstance(inner, Not):
            return inner.a
        if isinstance(inner, CompareOp) and inner.a.dtype.is_integer:
            flipped = {LT: GE, LE: GT, GT: LE, GE: LT, EQ: NE, NE: EQ}[type(inner)]
            return flipped(inner.a, inner.b)
        return e

    def _cast(self, e: Cast) -> PrimExpr:
        target, value = e.dtype, e.value
        if value.dtype == target:
            return value
        if target.lanes != 1:
            return e
        if isinstance(value, IntImm):
            if target.is_integer or target.is_bool:
                return _int(value.value, target)
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


def _decide(op: type, a: int | float, b: int | float) -> bool:
    if op is LT:
        return a < b
    if op is LE:
        return a <= b
    if op is GT:
        return a > b
    if op is GE:
        return a >= b
    if op is EQ:
        return a == b
    return a != b


def simplify_expr(expr: PrimExpr, bounds: Bounds | None = None) -> PrimExpr:
    """expr simplified under the variable ranges in bounds (none: every variable is unconstrained)."""
    return ExprSimplifier(bounds).simplify(expr)
