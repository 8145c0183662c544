"""Exact evaluation of integer and boolean expressions for given variable values.

This is the arbiter the prover's counterexamples are checked against, so it follows the IR's
semantics literally: `//` and `%` floor, TruncDiv/TruncMod truncate toward zero, casts between
integer types wrap to the target width, comparisons give bools.  With `wrap=True`, + - * and the
divisions also wrap to their dtype's width (what compiled code does); by default they are exact
mathematical integers (the "no overflow" reading that the simplifier and the default proofs use,
see spec/shapes.md).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping

from ..ast.dtype import DataType
from ..ast.expr import (
    EQ, GE, GT, LE, LT, NE, Add, And, Call, Cast, Div, FloatImm, FloorDiv, FloorMod, IntImm, Let,
    Max, Min, Mul, Not, Or, PrimExpr, Select, Sub, TruncDiv, TruncMod, Var,
)


class EvaluationError(ValueError):
    """The expression has no value here (division by zero, an unbound variable, an opaque node)."""


def trunc_div(a: int, b: int) -> int:
    """Integer division rounding toward zero (C's /)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def trunc_mod(a: int, b: int) -> int:
    """a - b * trunc_div(a, b): the sign follows a (C's %)."""
    return a - b * trunc_div(a, b)


def _div_checked(op: Callable[[int, int], int], a: int, b: int) -> int:
    if b == 0:
        raise EvaluationError("division by zero")
    return op(a, b)


_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    Add: lambda a, b: a + b,
    Sub: lambda a, b: a - b,
    Mul: lambda a, b: a * b,
    FloorDiv: lambda a, b: _div_checked(lambda x, y: x // y, a, b),
    FloorMod: lambda a, b: _div_checked(lambda x, y: x % y, a, b),
    TruncDiv: lambda a, b: _div_checked(trunc_div, a, b),
    TruncMod: lambda a, b: _div_checked(trunc_mod, a, b),
    Min: min,
    Max: max,
    EQ: lambda a, b: a == b,
    NE: lambda a, b: a != b,
    LT: lambda a, b: a < b,
    LE: lambda a, b: a <= b,
    GT: lambda a, b: a > b,
    GE: lambda a, b: a >= b,
    And: lambda a, b: bool(a) and bool(b),
    Or: lambda a, b: bool(a) or bool(b),
}
_WRAPPING = (Add, Sub, Mul, FloorDiv, TruncDiv)  # x // -1 overflows at the minimum


def evaluate(expr: PrimExpr, env: Mapping[Var, Any], *, wrap: bool = False,
             opaque: Callable[[PrimExpr], Any] | None = None) -> Any:
    """The value of expr with each Var taken from env (ints, bools; floats pass through).

    `opaque(node)` supplies values for nodes with no meaning here (buffer loads, unknown calls);
    without it such a node raises EvaluationError.
    """
    return _Evaluator(env, wrap, opaque).run(expr)


class _Evaluator:
    def __init__(self, env: Mapping[Var, Any], wrap: bool, opaque) -> None:
        self.env = dict(env)
        self.wrap = wrap
        self.opaque = opaque

    def run(self, expr: PrimExpr) -> Any:
        """The value of expr."""
        kind = type(expr)
        if isinstance(expr, Var):
            if expr not in self.env:
                raise EvaluationError(f"no value for variable {expr.name}")
            return self.env[expr]
        if kind is IntImm:
            return bool(expr.value) if expr.dtype.is_bool else expr.value
        if kind is FloatImm:
            return expr.value
        op = _BINARY.get(kind)
        if op is not None:
            if kind is And:  # both sides are evaluated by the IR, but a false left side decides
                return bool(self.run(expr.a)) and bool(self.run(expr.b))
            if kind is Or:
                return bool(self.run(expr.a)) or bool(self.run(expr.b))
            value = op(self.run(expr.a), self.run(expr.b))
            if self.wrap and kind in _WRAPPING and expr.dtype.is_integer:
                value = expr.dtype.wrap(value)
            return value
        if kind is Div:
            return self.run(expr.a) / self.run(expr.b)
        if kind is Not:
            return not self.run(expr.a)
        if kind is Select:
            cond = self.run(expr.condition)
            true_value, false_value = self.run(expr.true_value), self.run(expr.false_value)
            return true_value if cond else false_value
        if kind is Cast:
            return self.cast(self.run(expr.value), expr.dtype)
        if kind is Let:
            saved = self.env.get(expr.var, _MISSING)
            self.env[expr.var] = self.run(expr.value)
            try:
                return self.run(expr.body)
            finally:
                if saved is _MISSING:
                    del self.env[expr.var]
                else:
                    self.env[expr.var] = saved
        if kind is Call and expr.op == "if_then_else":
            cond, then_value, else_value = expr.args
            return self.run(then_value) if self.run(cond) else self.run(else_value)
        if kind is Call and expr.op == "abs":
            return abs(self.run(expr.args[0]))
        if self.opaque is not None:
            return self.opaque(expr)
        raise EvaluationError(f"cannot evaluate a {kind.__name__} here")

    @staticmethod
    def cast(value: Any, target: DataType) -> Any:
        """value converted to target with the IR's cast rules."""
        if target.is_bool:
            return bool(value)
        if target.is_integer:
            if isinstance(value, float):
                if not math.isfinite(value):
                    raise EvaluationError(f"cast of {value} to {target} is undefined")
                value = int(value)  # truncates toward zero, as C does
            return target.wrap(int(value))
        if target.is_float:
            return float(value)
        raise EvaluationError(f"cannot cast to {target}")


_MISSING = object()
