"""Affine forms of index expressions and interval relaxation, for region and binding analysis.

A linear form is shape's canonical sum read linearly: sum(coeff * atom) + const, where an atom is a
Var or a non-linear subexpression (e.g. `x // 4`) kept whole.  `relax` turns an expression over some loop vars with constant ranges
into the [min, max] it takes as those vars range, still symbolic in the other vars.  Anything it
cannot bound exactly gives None, so callers fail closed.
"""
from __future__ import annotations

import math
from typing import Mapping

from ...ast import Cast, FloorDiv, FloorMod, IntImm, PrimExpr, Var, free_vars
from ...ast.dtype import dtype as to_dtype
from ...shape.bounds import Intervals
from ...shape.canonical import Sum, to_sum


def linear(expr: PrimExpr) -> Sum:
    """expr as a linear form (shape's canonical sum); integer-to-integer casts are opened up."""
    return to_sum(expr, _atom, expand=False)


def _atom(expr: PrimExpr) -> Sum:
    if isinstance(expr, Cast) and expr.dtype.is_integer and expr.value.dtype.is_integer:
        return to_sum(expr.value, _atom, expand=False)
    return Sum.atom(expr)


def int_bounds(expr: PrimExpr, ranges: Mapping[Var, tuple[int, int]]) -> tuple[int, int] | None:
    """Constant [lo, hi] of expr when the ranges of its vars determine one; else None."""
    return Intervals(ranges.get, closed=True).of(expr)


def relax(expr: PrimExpr, ranges: Mapping[Var, tuple[int, int]],
          cover: bool = False) -> tuple[Sum, Sum] | None:
    """[min, max] of expr as the vars in `ranges` vary, as linear forms over the other vars.

    Exact for affine expressions.  A non-linear atom involving only relaxed vars is bounded by
    intervals; one involving none of them stays symbolic; a floor div or mod by a positive
    constant of an affine mix of both is bounded by `_relax_division`.  Otherwise None.

    The bounds are tight (both ends reached, for every value of the other vars) unless `cover`
    is set, which also accepts bounds that may exceed the values by a constant (good enough for
    a region that only has to contain what is read, never for one that claims what is written).
    """
    form = linear(expr)
    low, high = Sum(form.dtype, form.const), Sum(form.dtype, form.const)
    relaxed = set(ranges)
    for coeff, mono in form.items():
        atom = mono[0][1]
        used = set(free_vars(atom))
        if not used & relaxed:
            low.add_term(coeff, mono)
            high.add_term(coeff, mono)
            continue
        if not used <= relaxed:
            bounds = _relax_division(atom, ranges, cover)
            if bounds is None:
                return None
            lo_form, hi_form = bounds
            if coeff < 0:
                lo_form, hi_form = hi_form, lo_form
            low.add(lo_form, coeff)
            high.add(hi_form, coeff)
            continue
        bounds = int_bounds(atom, ranges)
        if bounds is None:
            return None
        lo, hi = sorted((bounds[0] * coeff, bounds[1] * coeff))
        low.const += lo
        high.const += hi
    return low, high


def _relax_division(atom: PrimExpr, ranges: Mapping[Var, tuple[int, int]],
                    cover: bool) -> tuple[Sum, Sum] | None:
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
    dtype = atom.dtype
    k0 = xlo.const
    g = xlo.coef_gcd()

    def constant(value: int) -> Sum:
        return Sum(dtype, value)

    if g % c == 0:  # includes no symbolic part at all (g = 0)
        if isinstance(atom, FloorDiv):
            quotient = Sum(dtype)
            for coeff, mono in xlo.items():
                quotient.add_term(coeff // c, mono)
            return quotient.plus(constant(k0 // c)), quotient.plus(constant((k0 + d) // c))
        if d + 1 >= c:
            return constant(0), constant(c - 1)
        if k0 % c + d < c:
            return constant(k0 % c), constant(k0 % c + d)
        return (constant(0), constant(c - 1)) if cover else None
    if isinstance(atom, FloorMod):
        return (constant(0), constant(c - 1)) if cover or d + 1 >= c else None
    h = math.gcd(g, c)
    extents = {(r + k0 + d) // c - (r + k0) // c for r in range(0, c, h)}
    if len(extents) > 1 and not cover:
        return None
    start = Sum.atom(FloorDiv(form_expr(xlo, atom.a.dtype), IntImm(c, atom.a.dtype)))
    return start, start.plus(constant(max(extents)))


def constant_difference(a: Sum, b: Sum) -> int | None:
    """a - b when it is a constant, else None."""
    diff = a.minus(b)
    return diff.const if diff.is_const() else None


def form_expr(form: Sum, dtype) -> PrimExpr:
    """A linear form as an expression of dtype (atoms of another integer type are cast to it)."""
    dtype = to_dtype(dtype)
    if form.dtype != dtype:
        form = Sum(dtype).add(form)
    result = form.to_expr(cast_atoms=True)
    return result if result is not None else form.to_expr(wrap=True, cast_atoms=True)
