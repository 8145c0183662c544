"""Exact translation of refcomp expressions into Z3 terms.

Integers are Z3 `Int`s (unbounded), each variable constrained to its dtype's range (and >= 0 for a
SizeVar).  Two readings of + - *:
  * overflow="assume_none" (default): exact mathematical results, i.e. the claim is about programs
    in which no intermediate overflows (what the simplifier assumes too);
  * overflow="wrap": every + - * (and floordiv) result reduced into its dtype's width, which is
    what the compiled code computes; use it to prove claims that must hold even when values wrap.
Whatever the mode, each operator is encoded exactly: floor and truncating division and modulo,
min/max, select/if_then_else, casts (integer narrowing wraps).  A division by zero has no value in
the IR; Z3's own `div` by 0 is an unconstrained value, so no claim can rely on it.  Parts with no
integer meaning here (buffer loads, float math, unknown calls) become fresh constants of their type,
one per distinct subterm, so the claim is proved for every value they might take.
"""
from __future__ import annotations

from typing import Any

import z3

from ..ast.dtype import DataType
from ..ast.expr import (
    EQ, GE, GT, LE, LT, NE, Add, And, Call, Cast, FloorDiv, FloorMod, IntImm, Let, Max, Min, Mul,
    Not, Or, PrimExpr, Select, SizeVar, Sub, TruncDiv, TruncMod, Var,
)
from .bounds import dtype_interval
from .keys import expr_key

OVERFLOW_MODES = ("assume_none", "wrap")


class Encoder:
    """Turns expressions into Z3 terms; remembers the variables and opaque parts it met."""

    def __init__(self, overflow: str = "assume_none") -> None:
        if overflow not in OVERFLOW_MODES:
            raise ValueError(f"overflow must be one of {OVERFLOW_MODES}, got {overflow!r}")
        self.overflow = overflow
        self.vars: dict[Var, Any] = {}       # refcomp var -> z3 constant
        self.opaque: dict[Any, tuple[PrimExpr, Any]] = {}  # structural key -> (node, z3 constant)
        self.side: list[Any] = []            # range facts of every constant made
        self.divisors: list[Any] = []        # every divisor met (to look for defined counterexamples)
        self._names: set[str] = set()
        self._lets: dict[Var, Any] = {}

    # ---------------------------------------------------------------- leaves
    def _fresh_name(self, base: str) -> str:
        name, k = base, 1
        while name in self._names:
            name = f"{base}!{k}"
            k += 1
        self._names.add(name)
        return name

    def var(self, var: Var) -> Any:
        """The Z3 constant of var, made (with its range facts) on first use."""
        term = self.vars.get(var)
        if term is not None:
            return term
        name = self._fresh_name(var.name)
        if var.dtype.is_bool:
            term = z3.Bool(name)
        elif var.dtype.is_integer:
            term = z3.Int(name)
            lo, hi = dtype_interval(var.dtype)
            if isinstance(var, SizeVar):
                lo = max(lo, 0)
            self.side.append(z3.And(term >= lo, term <= hi))
        else:
            term = z3.Real(name)  # floats only ever reach opaque comparisons
        self.vars[var] = term
        return term

    def _opaque(self, expr: PrimExpr) -> Any:
        key = expr_key(expr)
        entry = self.opaque.get(key)
        if entry is not None:
            return entry[1]
        name = self._fresh_name(f"{type(expr).__name__.lower()}!{len(self.opaque)}")
        dtype = expr.dtype
        if dtype.is_bool:
            term = z3.Bool(name)
        else:
            term = z3.Int(name)
            if dtype.is_integer:
                lo, hi = dtype_interval(dtype)
                self.side.append(z3.And(term >= lo, term <= hi))
        self.opaque[key] = (expr, term)
        return term

    # ---------------------------------------------------------------- expressions
    def encode(self, expr: PrimExpr) -> Any:
        """The Z3 term of expr (Bool for bools, Int for integers)."""
        if expr.dtype.lanes != 1:
            return self._opaque(expr)
        kind = type(expr)
        if isinstance(expr, Var):
            if expr in self._lets:
                return self._lets[expr]
            if not (expr.dtype.is_integer or expr.dtype.is_bool):
                return self._opaque(expr)
            return self.var(expr)
        if kind is IntImm:
            return z3.BoolVal(bool(expr.value)) if expr.dtype.is_bool else z3.IntVal(expr.value)
        if kind in (LT, LE, GT, GE, EQ, NE):
            if not _exact_type(expr.a.dtype):
                return self._opaque(expr)
            a, b = self.encode(expr.a), self.encode(expr.b)
            if expr.a.dtype.is_bool and kind in (EQ, NE):
                return (a == b) if kind is EQ else (a != b)
            if expr.a.dtype.is_bool:
                a, b = _bool_to_int(a), _bool_to_int(b)
            return {LT: a < b, LE: a <= b, GT: a > b, GE: a >= b, EQ: a == b, NE: a != b}[kind]
        if kind is And:
            return z3.And(self.encode(expr.a), self.encode(expr.b))
        if kind is Or:
            return z3.Or(self.encode(expr.a), self.encode(expr.b))
        if kind is Not:
            return z3.Not(self.encode(expr.a))
        if kind is Select:
            if not _exact_type(expr.dtype):
                return self._opaque(expr)
            return z3.If(self.encode(expr.condition), self.encode(expr.true_value), self.encode(expr.false_value))
        if kind is Call and expr.op == "if_then_else" and _exact_type(expr.dtype):
            cond, then_value, else_value = expr.args
            return z3.If(self.encode(cond), self.encode(then_value), self.encode(else_value))
        if kind is Call and expr.op == "abs" and expr.dtype.is_integer:
            x = self.encode(expr.args[0])
            return z3.If(x >= 0, x, -x)
        if kind is Cast:
            return self._cast(expr)
        if kind is Let:
            saved = self._lets.get(expr.var)
            self._lets[expr.var] = self.encode(expr.value)
            try:
                return self.encode(expr.body)
            finally:
                if saved is None:
                    del self._lets[expr.var]
                else:
                    self._lets[expr.var] = saved
        if not expr.dtype.is_integer:
            return self._opaque(expr)
        if kind in (Add, Sub, Mul, FloorDiv, FloorMod, TruncDiv, TruncMod, Min, Max):
            a, b = self.encode(expr.a), self.encode(expr.b)
            if kind in (FloorDiv, FloorMod, TruncDiv, TruncMod):
                self.divisors.append(b)
            if kind is Add:
                return self._wrap(a + b, expr.dtype)
            if kind is Sub:
                return self._wrap(a - b, expr.dtype)
            if kind is Mul:
                return self._wrap(a * b, expr.dtype)
            if kind is FloorDiv:
                return self._wrap(floor_div(a, b), expr.dtype)
            if kind is FloorMod:
                return a - b * floor_div(a, b)
            if kind is TruncDiv:
                return self._wrap(trunc_div(a, b), expr.dtype)
            if kind is TruncMod:
                return a - b * trunc_div(a, b)
            if kind is Min:
                return z3.If(a <= b, a, b)
            return z3.If(a >= b, a, b)
        return self._opaque(expr)

    def _wrap(self, term: Any, dtype: DataType) -> Any:
        if self.overflow != "wrap":
            return term
        return wrap_int(term, dtype)

    def _cast(self, expr: Cast) -> Any:
        source, target = expr.value.dtype, expr.dtype
        if not _exact_type(source) or not _exact_type(target):
            return self._opaque(expr)
        value = self.encode(expr.value)
        if target.is_bool:
            return value if source.is_bool else value != 0
        if source.is_bool:
            return _bool_to_int(value)
        lo, hi = dtype_interval(target)
        source_lo, source_hi = dtype_interval(source)
        if lo <= source_lo and source_hi <= hi:
            return value  # widening keeps the value
        return wrap_int(value, target)


def _exact_type(dtype: DataType) -> bool:
    return dtype.lanes == 1 and (dtype.is_integer or dtype.is_bool)


def _bool_to_int(term: Any) -> Any:
    return z3.If(term, z3.IntVal(1), z3.IntVal(0)) if z3.is_bool(term) else term


def floor_div(a: Any, b: Any) -> Any:
    """floor(a / b) for b != 0 (SMT-LIB `div` is Euclidean: it floors only for b > 0)."""
    return z3.If(b >= 0, a / b, (-a) / (-b))


def trunc_div(a: Any, b: Any) -> Any:
    """a / b rounded toward zero, for b != 0."""
    magnitude = z3.If(a >= 0, a, -a) / z3.If(b >= 0, b, -b)
    return z3.If((a >= 0) == (b >= 0), magnitude, -magnitude)


def wrap_int(term: Any, dtype: DataType) -> Any:
    """term reduced into dtype's two's-complement range."""
    lo, hi = dtype_interval(dtype)
    width = hi - lo + 1
    return z3.If(z3.And(term >= lo, term <= hi), term, ((term - lo) % width) + lo)
