"""Deciding relations between symbolic shape dims: proved, disproved (with a counterexample), unknown.

The graph level's view of `refcomp.shape`: relations go to its prover (simplifier, then Z3, every
counterexample checked by its evaluator), constants are folded by its evaluator and expressions
simplified by its Analyzer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..ast import expr as tir
from ..ast.functor import free_vars
from ..ast.structural import structural_equal
from ..shape import Analyzer
from ..shape import prove as shape_prove
from ..shape.evaluate import EvaluationError, evaluate


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


def const_value(expr: tir.PrimExpr) -> int | None:
    """The integer value of an expression without free variables, else None."""
    if free_vars(expr):
        return None
    try:
        value = evaluate(expr, {})
    except EvaluationError:
        return None
    return int(value) if not isinstance(value, float) else None


def prove(cond: tir.PrimExpr, assumptions: Iterable[tir.PrimExpr] = ()) -> Decision:
    """Does cond hold for every non-negative value of its size vars satisfying the assumptions?"""
    result = shape_prove(cond, assumptions=tuple(assumptions))
    return Decision(result.status, dict(result.counterexample) if result.counterexample else None)


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
    """expr with its constants folded and simplified by refcomp.shape's Analyzer."""
    value = const_value(expr)
    if value is not None:
        return tir.IntImm(value, expr.dtype if expr.dtype.is_integer else "int64")
    return Analyzer().simplify(expr)
