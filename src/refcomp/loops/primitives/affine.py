"""Affine forms of index expressions and interval relaxation, for region and binding analysis.

A `Linear` is sum(coeff * atom) + const, where an atom is a Var or a non-linear subexpression
(e.g. `x // 4`) kept whole.  `relax` turns an expression over some loop vars with constant ranges
into the [min, max] it takes as those vars range, still symbolic in the other vars.  Anything it
cannot bound exactly gives None, so callers fail closed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from ...ast import (
    Add, Cast, FloorDiv, FloorMod, IntImm, Max, Min, Mul, PrimExpr, Sub, Var, const, free_vars,
)


def expr_key(expr: PrimExpr) -> Any:
    """A hashable structural key of an expression (vars by identity)."""
    if isinstance(expr, Var):
        return ("var", id(expr))
    if isinstance(expr, IntImm):
        return ("int", expr.value, str(expr.dtype))
    parts = [type(expr).__name__]
    for name in expr.fields():
        value = getattr(expr, name)
        if isinstance(value, PrimExpr):
            parts.append(expr_key(value))
        elif isinstance(value, tuple):
            parts.append(tuple(expr_key(v) if isinstance(v, PrimExpr) else v for v in value))
        elif name != "dtype":
            parts.append(id(value) if not isinstance(value, (int, str, float)) else value)
    return tuple(parts)


@dataclass
class Linear:
    """sum(coeff * atom) + const over integer atoms."""

    terms: dict[Any, tuple[PrimExpr, int]] = field(default_factory=dict)
    const: int = 0

    def add(self, other: "Linear", scale: int = 1) -> "Linear":
        """self + scale * other."""
        terms = dict(self.terms)
        for key, (atom, coeff) in other.terms.items():
            old = terms.get(key, (atom, 0))[1]
            if old + scale * coeff == 0:
                terms.pop(key, None)
            else:
                terms[key] = (atom, old + scale * coeff)
        return Linear(terms, self.const + scale * other.const)

    def scale(self, factor: int) -> "Linear":
        """factor * self."""
        if factor == 0:
            return Linear()
        return Linear({k: (a, c * factor) for k, (a, c) in self.terms.items()}, self.const * factor)

    def is_const(self) -> bool:
        """No terms: the form is its constant."""
        return not self.terms

    def minus(self, other: "Linear") -> "Linear":
        """self - other."""
        return self.add(other, -1)

    def to_expr(self, dtype: str = "int32") -> PrimExpr:
        """The form as an expression: terms in insertion order, then the constant."""
        result: PrimExpr | None = None
        for atom, coeff in self.terms.values():
            term = atom if coeff == 1 else atom * coeff if coeff > 0 else None
            if term is None:
                term_abs = atom if coeff == -1 else atom * (-coeff)
                result = (const(0, dtype) - term_abs) if result is None else result - term_abs
                continue
            result = term if result is None else result + term
        if result is None:
            return const(self.const, dtype)
        if self.const > 0:
            result = result + self.const
        elif self.const < 0:
            result = result - (-self.const)
        return result


def linear(expr: PrimExpr) -> Linear:
    """expr as a Linear form; non-linear parts become atoms."""
    if isinstance(expr, IntImm):
        return Linear(const=expr.value)
    if isinstance(expr, Add):
        return linear(expr.a).add(linear(expr.b))
    if isinstance(expr, Sub):
        return linear(expr.a).minus(linear(expr.b))
    if isinstance(expr, Mul):
        a, b = linear(expr.a), linear(expr.b)
        if a.is_const():
            return b.scale(a.const)
        if b.is_const():
            return a.scale(b.const)
    if isinstance(expr, Cast) and expr.dtype.is_integer and expr.value.dtype.is_integer:
        return linear(expr.value)
    return Linear({expr_key(expr): (expr, 1)})


def int_bounds(expr: PrimExpr, ranges: Mapping[Var, tuple[int, int]]) -> tuple[int, int] | None:
    """Constant [lo, hi] of expr when every var in it has a constant range; else None."""
    if isinstance(expr, IntImm):
        return (expr.value, expr.value)
    if isinstance(expr, Var):
        return ranges.get(expr)
    if isinstance(expr, Cast):
        return int_bounds(expr.value, ranges)
    if isinstance(expr, (Add, Sub, Mul, Min, Max, FloorDiv, FloorMod)):
        a, b = int_bounds(expr.a, ranges), int_bounds(expr.b, ranges)
        if a is None or b is None:
            return None
        if isinstance(expr, Add):
            return (a[0] + b[0], a[1] + b[1])
        if isinstance(expr, Sub):
            return (a[0] - b[1], a[1] - b[0])
        if isinstance(expr, Mul):
            corners = [x * y for x in a for y in b]
            return (min(corners), max(corners))
        if isinstance(expr, Min):
            return (min(a[0], b[0]), min(a[1], b[1]))
        if isinstance(expr, Max):
            return (max(a[0], b[0]), max(a[1], b[1]))
        if b[0] != b[1] or b[0] <= 0:
            return None  # only division by a positive constant is bounded here
        c = b[0]
        if isinstance(expr, FloorDiv):
            return (a[0] // c, a[1] // c)
        if a[1] - a[0] + 1 >= c or a[0] // c != a[1] // c:
            return (0, c - 1)
        return (a[0] % c, a[1] % c)
    return None


def relax(expr: PrimExpr, ranges: Mapping[Var, tuple[int, int]],
          cover: bool = False) -> tuple[Linear, Linear] | None:
    """[min, max] of expr as the vars in `ranges` vary, as Linear forms over the other vars.

    Exact for affine expressions.  A non-linear atom involving only relaxed vars is bounded by
    intervals; one involving none of them stays symbolic; a floor div or mod by a positive
    constant of an affine mix of both is bounded by `_relax_division`.  Otherwise None.

    The bounds are tight (both ends reached, for every value of the other vars) unless `cover`
    is set, which also accepts bounds that may exceed the values by a constant (good enough for
    a region that only has to contain what is read, never for one that claims what is written).
    """
    form = linear(expr)
    low, high = Linear(const=form.const), Linear(const=form.const)
    relaxed = set(ranges)
    for key, (atom, coeff) in form.terms.items():
        used = set(free_vars(atom))
        if not used & relaxed:
            low = low.add(Linear({key: (atom, coeff)}))
            high = high.add(Linear({key: (atom, coeff)}))
            continue
        if not used <= relaxed:
            bounds = _relax_division(atom, ranges, cover)
            if bounds is None:
                return None
            lo_form, hi_form = bounds
            if coeff < 0:
                lo_form, hi_form = hi_form, lo_form
            low = low.add(lo_form, coeff)
            high = high.add(hi_form, coeff)
            continue
        bounds = int_bounds(atom, ranges)
        if bounds is None:
            return None
        lo, hi = sorted((bounds[0] * coeff, bounds[1] * coeff))
        low = low.add(Linear(const=lo))
        high = high.add(Linear(const=hi))
    return low, high


def _relax_division(atom: PrimExpr, ranges: Mapping[Var, tuple[int, int]],
                    cover: bool) -> tuple[Linear, Linear] | None:
    """Bounds of `x // c` or `x % c` where x = s + k0 + t: s a symbolic affine part (other vars),
    t the relaxed part, ranging over [0, d].

    When c divides every coefficient of s (a tile loop times a multiple of c, as after split or
    fuse), `(s + k0 + t) // c = s / c + (k0 + t) // c` and `(s + k0 + t) % c = (k0 + t) % c`:
    tight.  Otherwise s mod c is a multiple of h = gcd(coefficients, c), and the extent of
    `x // c` is worked out for each such residue: tight when it is the same for all, else
    (cover only) the largest.  `x % c` is then tight only when t spans c values."""
    if not isinstance(atom, (FloorDiv, FloorMod)) or not isinstance(atom.b, IntImm) or atom.b.value <= 0:
        return None
    inner = relax(atom.a, ranges, cover)
    if inner is None:
        return None
    xlo, xhi = inner
    d = constant_difference(xhi, xlo)
    if d is None or d < 0:
        return None
    c = atom.b.value
    symbolic = Linear(dict(xlo.terms))
    k0 = xlo.const
    g = 0
    for _, coeff in symbolic.terms.values():
        g = math.gcd(g, coeff)
    if g % c == 0:  # includes no symbolic part at all (g = 0)
        if isinstance(atom, FloorDiv):
            quotient = Linear({k: (a, coeff // c) for k, (a, coeff) in symbolic.terms.items()})
            return quotient.add(Linear(const=k0 // c)), quotient.add(Linear(const=(k0 + d) // c))
        if d + 1 >= c:
            return Linear(const=0), Linear(const=c - 1)
        if k0 % c + d < c:
            return Linear(const=k0 % c), Linear(const=k0 % c + d)
        return (Linear(const=0), Linear(const=c - 1)) if cover else None
    if isinstance(atom, FloorMod):
        return (Linear(const=0), Linear(const=c - 1)) if cover or d + 1 >= c else None
    h = math.gcd(g, c)
    extents = {(r + k0 + d) // c - (r + k0) // c for r in range(0, c, h)}
    if len(extents) > 1 and not cover:
        return None
    dtype = atom.a.dtype
    start = FloorDiv(xlo.to_expr(str(dtype)), IntImm(c, dtype))
    low = Linear({expr_key(start): (start, 1)})
    return low, low.add(Linear(const=max(extents)))


def constant_difference(a: Linear, b: Linear) -> int | None:
    """a - b when it is a constant, else None."""
    diff = a.minus(b)
    return diff.const if diff.is_const() else None
