"""Deciding relations between symbolic shape dims: proved, disproved (with a counterexample), unknown.

The shape engineer's Z3 bridge (`refcomp.shape.prove`) is used when present.  Without it, a
relation is proved only when both sides fold to the same constant or are the same expression, and
disproved only by a concrete assignment, found by evaluation, that violates it.  Either way a
claimed counterexample is always checked by evaluating the expressions, so "disproved" is sound.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterable, Mapping

from ..ast import expr as tir
from ..ast.functor import free_vars
from ..ast.structural import structural_equal


@dataclass(frozen=True)
class Decision:
    """The outcome of asking whether a relation holds for every value of its size vars."""

    status: str  # "proved" | "disproved" | "unknown"
    counterexample: dict[str, int] | None = None

    @property
    def proved(self) -> bool:
        return self.status == "proved"

    @property
    def disproved(self) -> bool:
        return self.status == "disproved"


class NotConstant(Exception):
    """An expression could not be evaluated to a number."""


def evaluate(expr: tir.PrimExpr, env: Mapping[tir.Var, int]) -> int | float | bool:
    """The value of a scalar expression with its variables given in env (exact integer semantics)."""
    e = expr
    if isinstance(e, (tir.IntImm, tir.FloatImm)):
        return bool(e.value) if e.dtype.is_bool else e.value
    if isinstance(e, tir.Var):
        if e not in env:
            raise NotConstant(e.name)
        return env[e]
    if isinstance(e, tir.Cast):
        v = evaluate(e.value, env)
        if e.dtype.is_float:
            return float(v)
        if e.dtype.is_bool:
            return bool(v)
        return int(v)
    if isinstance(e, tir.Not):
        return not evaluate(e.a, env)
    if isinstance(e, tir.Select):
        return evaluate(e.true_value if evaluate(e.condition, env) else e.false_value, env)
    if isinstance(e, tir.BinaryOp):
        a, b = evaluate(e.a, env), evaluate(e.b, env)
        return _binary(e, a, b)
    raise NotConstant(type(e).__name__)


def _binary(e: tir.BinaryOp, a, b):
    if isinstance(e, tir.Add):
        return a + b
    if isinstance(e, tir.Sub):
        return a - b
    if isinstance(e, tir.Mul):
        return a * b
    if isinstance(e, tir.Div):
        return a / b if b != 0 else float("nan")
    if isinstance(e, (tir.FloorDiv, tir.FloorMod, tir.TruncDiv, tir.TruncMod)):
        if b == 0:
            raise NotConstant("division by zero")
        if isinstance(e, tir.FloorDiv):
            return a // b
        if isinstance(e, tir.FloorMod):
            return a % b
        q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
        return q if isinstance(e, tir.TruncDiv) else a - b * q
    if isinstance(e, tir.Min):
        return min(a, b)
    if isinstance(e, tir.Max):
        return max(a, b)
    ops = {tir.EQ: a == b, tir.NE: a != b, tir.LT: a < b, tir.LE: a <= b, tir.GT: a > b, tir.GE: a >= b}
    for cls, value in ops.items():
        if isinstance(e, cls):
            return value
    if isinstance(e, tir.And):
        return bool(a) and bool(b)
    if isinstance(e, tir.Or):
        return bool(a) or bool(b)
    raise NotConstant(type(e).__name__)


def const_value(expr: tir.PrimExpr) -> int | None:
    """The integer value of an expression without free variables, else None."""
    try:
        if free_vars(expr):
            return None
        value = evaluate(expr, {})
    except NotConstant:
        return None
    return int(value) if not isinstance(value, float) else None


# Small values tried when searching a counterexample by evaluation: dims 0..5 and a few larger.
_PROBE_VALUES = (1, 2, 3, 0, 4, 5, 7, 16, 33)


def _search_counterexample(cond: tir.PrimExpr, assumptions: Iterable[tir.PrimExpr]) -> dict | None:
    assumptions = tuple(assumptions)
    names = free_vars(cond)
    for a in assumptions:
        for v in free_vars(a):
            if v not in names:
                names.append(v)
    if len(names) > 4:
        names = names[:4]
    values = _PROBE_VALUES if len(names) <= 2 else _PROBE_VALUES[:5]
    for combo in itertools.product(values, repeat=len(names)):
        env = dict(zip(names, combo))
        try:
            if not all(evaluate(a, env) for a in assumptions):
                continue
            if not evaluate(cond, env):
                return {v.name: k for v, k in env.items()}
        except NotConstant:
            return None
    return None


def prove(cond: tir.PrimExpr, assumptions: Iterable[tir.PrimExpr] = ()) -> Decision:
    """Does cond hold for every non-negative value of its size vars satisfying the assumptions?"""
    assumptions = tuple(assumptions)
    try:
        from ..shape import prove as shape_prove  # the Z3 bridge, when it has landed
    except ImportError:
        shape_prove = None
    if shape_prove is not None:
        result = shape_prove(cond, assumptions=assumptions)
        return Decision(result.status, dict(result.counterexample) if result.counterexample else None)
    value = const_value(cond)
    if value is not None:
        return Decision("proved") if value else Decision("disproved", {})
    if isinstance(cond, tir.EQ) and structural_equal(cond.a, cond.b, map_free_vars=False):
        return Decision("proved")
    found = _search_counterexample(cond, assumptions)
    return Decision("disproved", found) if found is not None else Decision("unknown")


def decide_equal(a: tir.PrimExpr, b: tir.PrimExpr, assumptions: Iterable[tir.PrimExpr] = ()) -> Decision:
    """Is a == b for all values of the size vars?"""
    if a is b or structural_equal(a, b, map_free_vars=False):
        return Decision("proved")
    ca, cb = const_value(a), const_value(b)
    if ca is not None and cb is not None:
        return Decision("proved") if ca == cb else Decision("disproved", {})
    return prove(tir.EQ(*_same_dtype(a, b)), assumptions)


def _same_dtype(a: tir.PrimExpr, b: tir.PrimExpr) -> tuple[tir.PrimExpr, tir.PrimExpr]:
    if a.dtype == b.dtype:
        return a, b
    return a.astype("int64"), b.astype("int64")


def is_const(expr: tir.PrimExpr, value: int) -> bool:
    """True when expr is (folds to) the constant value."""
    return const_value(expr) == value


def product(dims: Iterable[tir.PrimExpr]) -> tir.PrimExpr:
    """The product of dims as an int64 expression (1 for none), folding constants."""
    result: tir.PrimExpr = tir.IntImm(1, "int64")
    for d in dims:
        if is_const(result, 1):
            result = d
        elif is_const(d, 1):
            continue
        else:
            cr, cd = const_value(result), const_value(d)
            result = tir.IntImm(cr * cd, "int64") if cr is not None and cd is not None else result * d
    return result


def simplify(expr: tir.PrimExpr) -> tir.PrimExpr:
    """Fold constants (via refcomp.shape's Analyzer when present)."""
    value = const_value(expr)
    if value is not None:
        return tir.IntImm(value, expr.dtype if expr.dtype.is_integer else "int64")
    try:
        from ..shape import Analyzer
    except ImportError:
        return expr
    try:
        return Analyzer().simplify(expr)
    except Exception:  # a simplifier failure must not change meaning; keep the expression
        return expr
