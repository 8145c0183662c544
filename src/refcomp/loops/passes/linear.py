"""Integer expressions as linear forms, and the structural keys that identify subexpressions.

`linear_form(e)` reads e as sum(coefficient * atom) + constant, opening up +, - and
multiplication by constants; `build_linear` writes such a form back as an expression.  Both are
exact modulo 2^bits, so they hold under the IR's wrap-around integer semantics.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ...ast import Add, Call, FloatImm, FloorDiv, FloorMod, IntImm, Mul, PrimExpr, StringImm, Sub, Var
from ...ast.buffer import Buffer
from ...ast.dtype import DataType
from ...ast.functor import is_pure
from ...ast.node import Node


def expr_key(expr: Any, cache: dict[int, tuple] | None = None) -> Any:
    """A hashable key equal for two expressions exactly when they are the same tree (vars by identity).

    cache (id -> (node, key)), when given, remembers the keys of nodes already seen, which makes
    repeated keys of overlapping trees linear instead of quadratic.
    """
    if isinstance(expr, Var):
        return ("var", id(expr))
    if isinstance(expr, Buffer):
        return ("buffer", id(expr))
    if isinstance(expr, IntImm):
        return ("int", expr.value, str(expr.dtype))
    if isinstance(expr, FloatImm):
        return ("float", repr(expr.value), str(expr.dtype))
    if isinstance(expr, StringImm):
        return ("str", expr.value)
    if isinstance(expr, tuple):
        return tuple(expr_key(item, cache) for item in expr)
    if isinstance(expr, Call) and not is_pure(expr):
        return ("call", id(expr))  # two impure calls are never the same value
    if isinstance(expr, Node):
        if cache is not None:
            hit = cache.get(id(expr))
            if hit is not None and hit[0] is expr:
                return hit[1]
        parts: list[Any] = [type(expr).__name__]
        for field in dataclasses.fields(expr):
            parts.append(expr_key(getattr(expr, field.name), cache))
        key = tuple(parts)
        if cache is not None:
            cache[id(expr)] = (expr, key)  # the node is kept alive so its id is not reused
        return key
    if isinstance(expr, DataType):
        return str(expr)
    return expr


def same_expr(a: PrimExpr, b: PrimExpr, cache: dict[int, tuple] | None = None) -> bool:
    """True when a and b are the same expression tree (variables compared by identity)."""
    return a is b or expr_key(a, cache) == expr_key(b, cache)


class Linear:
    """sum(coefficient * atom) + constant over exact integers; atoms kept in first-seen order."""

    def __init__(self, cache: dict[int, tuple] | None = None) -> None:
        self.terms: dict[Any, list] = {}  # key -> [atom, coefficient]
        self.constant = 0
        self.cache = cache

    def add(self, atom: PrimExpr, coefficient: int) -> None:
        key = expr_key(atom, self.cache)
        if key in self.terms:
            self.terms[key][1] += coefficient
        else:
            self.terms[key] = [atom, coefficient]

    def scaled(self, factor: int) -> "Linear":
        out = Linear(self.cache)
        for key, (atom, coefficient) in self.terms.items():
            out.terms[key] = [atom, coefficient * factor]
        out.constant = self.constant * factor
        return out

    def plus(self, other: "Linear", sign: int = 1) -> "Linear":
        out = self.scaled(1)
        for atom, coefficient in other.terms.values():
            out.add(atom, sign * coefficient)
        out.constant += sign * other.constant
        return out

    def nonzero(self) -> list[tuple[PrimExpr, int]]:
        return [(atom, c) for atom, c in self.terms.values() if c != 0]

    def is_constant(self) -> bool:
        return not self.nonzero()


def linear_form(expr: PrimExpr, cache: dict[int, tuple] | None = None) -> Linear:
    """expr as a Linear over signed-integer atoms (Add, Sub and multiplication by constants opened up)."""
    out = Linear(cache)
    if isinstance(expr, IntImm):
        out.constant = expr.value
    elif isinstance(expr, (Add, Sub)):
        out = linear_form(expr.a, cache).plus(linear_form(expr.b, cache), 1 if isinstance(expr, Add) else -1)
    elif isinstance(expr, Mul):
        a, b = linear_form(expr.a, cache), linear_form(expr.b, cache)
        if b.is_constant():
            out = a.scaled(b.constant)
        elif a.is_constant():
            out = b.scaled(a.constant)
        else:
            out.add(expr, 1)
    else:
        out.add(expr, 1)
    return out


def merge_div_mod(form: Linear) -> Linear:
    """Replace k*c*(x // c) + k*(x % c) by k*x (an identity of floor division, valid modulo 2^bits)."""
    changed = True
    while changed:
        changed = False
        for key, (atom, k) in list(form.terms.items()):
            if k == 0 or not isinstance(atom, FloorMod) or not isinstance(atom.b, IntImm) or atom.b.value <= 0:
                continue
            quotient_key = expr_key(FloorDiv(atom.a, atom.b))
            entry = form.terms.get(quotient_key)
            if entry is None or entry[1] != k * atom.b.value:
                continue
            del form.terms[key], form.terms[quotient_key]
            form = form.plus(linear_form(atom.a, form.cache).scaled(k))
            changed = True
            break
    return form


def build_linear(form: Linear, dtype: DataType) -> PrimExpr:
    """The expression of a Linear in dtype: positive terms first, then subtracted ones, then the constant."""
    terms = [(atom, dtype.wrap(c)) for atom, c in form.nonzero()]
    terms = [(atom, c) for atom, c in terms if c != 0]
    constant = dtype.wrap(form.constant)
    positive = [(a, c) for a, c in terms if c > 0]
    negative = [(a, c) for a, c in terms if c < 0]
    result: PrimExpr | None = None
    for atom, c in positive:
        term = atom if c == 1 else Mul(atom, IntImm(c, dtype))
        result = term if result is None else Add(result, term)
    for atom, c in negative:
        magnitude = -c
        if result is None or magnitude > int(dtype.max_value()):
            term = Mul(atom, IntImm(c, dtype))
            result = term if result is None else Add(result, term)
        else:
            term = atom if magnitude == 1 else Mul(atom, IntImm(magnitude, dtype))
            result = Sub(result, term)
    if result is None:
        return IntImm(constant, dtype)
    if constant > 0:
        result = Add(result, IntImm(constant, dtype))
    elif constant < 0:
        result = Sub(result, IntImm(-constant, dtype)) if -constant <= int(dtype.max_value()) \
            else Add(result, IntImm(constant, dtype))
    return result


def inner_span(expr: PrimExpr, extents: dict[Var, int | None]) -> int | None:
    """How far expr can move (max - min) while the vars in extents run over [min, min + extent).

    Other variables are held fixed.  None when a var of extents occurs other than linearly, or its
    extent is not a known constant.  Exact integer arithmetic (indices are assumed not to wrap).
    """
    from ...ast.functor import free_vars

    span = 0
    for atom, coefficient in linear_form(expr).nonzero():
        if isinstance(atom, Var) and atom in extents:
            extent = extents[atom]
            if extent is None:
                return None
            span += abs(coefficient) * max(extent - 1, 0)
        elif any(v in extents for v in free_vars(atom)):
            return None
    return span
