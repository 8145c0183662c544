"""The one evaluator of scalar expressions: exact values for given variable values.

Every part of refcomp that needs the value of an index or shape expression asks this module: the
prover checks its counterexamples here, argument checks evaluate symbolic dims here, the VM
evaluates shapes at run time here, schedule legality enumerates small iteration spaces here, and
the interpreter takes its integer division from here.  It follows the IR's semantics literally
(spec/ir.md §2, spec/shapes.md):

* `//` and `%` (FloorDiv, FloorMod) floor; TruncDiv/TruncMod truncate toward zero.
* An integer division or modulo by zero has no value: it raises ZeroDivisionFailure, whose message
  is "integer division by zero" (ZERO_DIVISION), everywhere.  Float `Div` is IEEE: x / 0 is
  +-inf by the signs, 0 / 0 and NaN / 0 are NaN.
* Casts between integer types wrap to the target width; to bool is `!= 0`; a float cast to an
  integer truncates toward zero (a non-finite one has no value).
* With `wrap=True`, + - * and the divisions also wrap to their dtype's width (what compiled code
  does); by default they are exact mathematical integers (the "no overflow" reading that the
  simplifier and the default proofs use).
* Select evaluates both sides; if_then_else only the taken one; a false left side of And (a true
  one of Or) decides without evaluating the right side.

A variable's value may be a Python number or a numpy array of int64 points (all broadcast
together); the result is then an array over the same points, so a whole iteration space is
evaluated at once.  In that form a division fails if any point divides by zero, if_then_else
evaluates both sides, And/Or evaluate both sides, and values live in int64 (a uint64 beyond
int64's range cannot be represented).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import numpy as np

from ..ast.dtype import DataType
from ..ast.expr import (
    EQ, GE, GT, LE, LT, NE, Add, And, Call, Cast, Div, FloatImm, FloorDiv, FloorMod, IntImm, Let,
    Max, Min, Mul, Not, Or, PrimExpr, Select, Sub, TruncDiv, TruncMod, Var,
)

ZERO_DIVISION = "integer division by zero"


class EvaluationError(ValueError):
    """The expression has no value here (division by zero, an unbound variable, an opaque node)."""


class ZeroDivisionFailure(EvaluationError):
    """An integer division or modulo by zero: the one rule, with the one message."""

    def __init__(self, message: str = ZERO_DIVISION) -> None:
        super().__init__(message)


class UnboundVariable(EvaluationError):
    """A variable of the expression has no value; `var` is that variable."""

    def __init__(self, var: Var) -> None:
        super().__init__(f"no value for variable {var.name}")
        self.var = var


# ----------------------------------------------------------------------------- the operations

def trunc_div(a: Any, b: Any) -> Any:
    """Integer division rounding toward zero (C's /), for a nonzero divisor."""
    q = abs(a) // abs(b)
    same_sign = (a >= 0) == (b >= 0)
    if isinstance(same_sign, np.ndarray):
        return np.where(same_sign, q, -q)
    return q if same_sign else -q


def trunc_mod(a: Any, b: Any) -> Any:
    """a - b * trunc_div(a, b): the sign follows a (C's %), for a nonzero divisor."""
    return a - b * trunc_div(a, b)


def check_divisor(b: Any) -> None:
    """Raise ZeroDivisionFailure when b (or any point of an array b) is zero."""
    if bool((b == 0).any()) if isinstance(b, np.ndarray) else b == 0:
        raise ZeroDivisionFailure()


def floordiv(a: Any, b: Any) -> Any:
    """FloorDiv: the quotient rounded toward negative infinity; a zero divisor fails."""
    check_divisor(b)
    return a // b


def floormod(a: Any, b: Any) -> Any:
    """FloorMod: a - b * floordiv(a, b), the sign follows b; a zero divisor fails."""
    check_divisor(b)
    return a % b


def truncdiv(a: Any, b: Any) -> Any:
    """TruncDiv: the quotient rounded toward zero; a zero divisor fails."""
    check_divisor(b)
    return trunc_div(a, b)


def truncmod(a: Any, b: Any) -> Any:
    """TruncMod: a - b * truncdiv(a, b), the sign follows a; a zero divisor fails."""
    check_divisor(b)
    return trunc_mod(a, b)


def float_div(a: Any, b: Any) -> Any:
    """IEEE division: a / 0 is +-inf (by the signs) or NaN for 0/0 and NaN/0."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.true_divide(a, b)
    try:
        return a / b
    except ZeroDivisionError:
        if a != a or a == 0:
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)


def _minimum(a: Any, b: Any) -> Any:
    return np.minimum(a, b) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else min(a, b)


def _maximum(a: Any, b: Any) -> Any:
    return np.maximum(a, b) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else max(a, b)


def _is_array(value: Any) -> bool:
    return isinstance(value, np.ndarray)


_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    Add: lambda a, b: a + b,
    Sub: lambda a, b: a - b,
    Mul: lambda a, b: a * b,
    FloorDiv: floordiv,
    FloorMod: floormod,
    TruncDiv: truncdiv,
    TruncMod: truncmod,
    Div: float_div,
    Min: _minimum,
    Max: _maximum,
    EQ: lambda a, b: a == b,
    NE: lambda a, b: a != b,
    LT: lambda a, b: a < b,
    LE: lambda a, b: a <= b,
    GT: lambda a, b: a > b,
    GE: lambda a, b: a >= b,
}
_WRAPPING = (Add, Sub, Mul, FloorDiv, TruncDiv)  # x // -1 overflows at the minimum


def wrap_to(dtype: DataType, value: Any) -> Any:
    """value reduced into dtype's two's-complement range (each point of an int64 array)."""
    if not isinstance(value, np.ndarray):
        return dtype.wrap(value)
    if dtype.is_bool:
        return value != 0
    if dtype.bits < 64:
        return value.astype(np.int64).astype(dtype.numpy()).astype(np.int64)
    return value.astype(np.int64)


# ----------------------------------------------------------------------------- evaluation

def evaluate(expr: PrimExpr, env: Mapping[Var, Any], *, wrap: bool = False,
             opaque: Callable[[PrimExpr], Any] | None = None) -> Any:
    """The value of expr with each Var taken from env (ints, bools, floats, or numpy arrays).

    `opaque(node)` supplies values for nodes with no meaning here (buffer loads, unknown calls);
    without it such a node raises EvaluationError.  An unbound variable raises UnboundVariable,
    a division by zero ZeroDivisionFailure (both EvaluationErrors).
    """
    kind = type(expr)
    if kind is IntImm:
        return bool(expr.value) if expr.dtype.is_bool else expr.value
    if isinstance(expr, Var):
        try:
            return env[expr]
        except KeyError:
            raise UnboundVariable(expr) from None
    return _Evaluator(env, wrap, opaque).run(expr)


class _Evaluator:
    def __init__(self, env: Mapping[Var, Any], wrap: bool, opaque) -> None:
        self.env = env
        self.lets: dict[Var, Any] = {}
        self.wrap = wrap
        self.opaque = opaque

    def run(self, expr: PrimExpr) -> Any:
        """The value of expr."""
        kind = type(expr)
        if isinstance(expr, Var):
            if expr in self.lets:
                return self.lets[expr]
            if expr not in self.env:
                raise UnboundVariable(expr)
            return self.env[expr]
        if kind is IntImm:
            return bool(expr.value) if expr.dtype.is_bool else expr.value
        if kind is FloatImm:
            return expr.value
        if kind is And or kind is Or:
            return self.logical(expr, kind is And)
        op = _BINARY.get(kind)
        if op is not None:
            value = op(self.run(expr.a), self.run(expr.b))
            if self.wrap and kind in _WRAPPING and expr.dtype.is_integer:
                value = wrap_to(expr.dtype, value)
            return value
        if kind is Not:
            value = self.run(expr.a)
            return np.logical_not(value) if _is_array(value) else not value
        if kind is Select:
            cond = self.run(expr.condition)
            true_value, false_value = self.run(expr.true_value), self.run(expr.false_value)
            return self.choose(cond, true_value, false_value)
        if kind is Cast:
            return cast(self.run(expr.value), expr.dtype)
        if kind is Let:
            saved = self.lets.get(expr.var, _MISSING)
            self.lets[expr.var] = self.run(expr.value)
            try:
                return self.run(expr.body)
            finally:
                if saved is _MISSING:
                    del self.lets[expr.var]
                else:
                    self.lets[expr.var] = saved
        if kind is Call and expr.op == "if_then_else":
            cond, then_value, else_value = expr.args
            cond = self.run(cond)
            if _is_array(cond):
                return self.choose(cond, self.run(then_value), self.run(else_value))
            return self.run(then_value) if cond else self.run(else_value)
        if kind is Call and expr.op == "abs":
            return abs(self.run(expr.args[0]))
        if self.opaque is not None:
            return self.opaque(expr)
        raise EvaluationError(f"cannot evaluate a {kind.__name__} here")

    def logical(self, expr: PrimExpr, conjunction: bool) -> Any:
        left = self.run(expr.a)
        if not _is_array(left):
            if bool(left) != conjunction:  # a false left side of And (true of Or) decides
                return not conjunction
            right = self.run(expr.b)
            if not _is_array(right):
                return bool(right)
        else:
            right = self.run(expr.b)
        return np.logical_and(left, right) if conjunction else np.logical_or(left, right)

    @staticmethod
    def choose(cond: Any, true_value: Any, false_value: Any) -> Any:
        if _is_array(cond) or _is_array(true_value) or _is_array(false_value):
            return np.where(cond, true_value, false_value)
        return true_value if cond else false_value


def cast(value: Any, target: DataType) -> Any:
    """value converted to target with the IR's cast rules."""
    if target.is_bool:
        return value != 0 if _is_array(value) else bool(value)
    if target.is_integer:
        if _is_array(value):
            if value.dtype.kind == "f":
                if not np.isfinite(value).all():
                    raise EvaluationError(f"cast of a non-finite value to {target} is undefined")
                value = np.trunc(value).astype(np.int64)
            return wrap_to(target, value)
        if isinstance(value, float):
            if not math.isfinite(value):
                raise EvaluationError(f"cast of {value} to {target} is undefined")
            value = int(value)  # truncates toward zero, as C does
        return target.wrap(int(value))
    if target.is_float:
        return value.astype(np.float64) if _is_array(value) else float(value)
    raise EvaluationError(f"cannot cast to {target}")


_MISSING = object()
