"""Affine index forms for blockize and tensorize: sum(coef * atom) + const over integer atoms.

An atom is a variable or a floor division / modulo of a form by a positive constant that could not
be resolved.  `normalize` brings an index expression to this form using what is known of each
variable's range, so `(vk_o * 64 + vk) // 2` becomes `vk_o * 32 + vk // 2`, and `vj // 16` with
`vj` in [0, 16) becomes 0.  Two indices are equal when their forms are; the difference of two
forms tells a tile offset from an index that moves with the tile.

The arithmetic is shape's canonical sum (`refcomp.shape.canonical.Sum`) with Vars and Atoms as its
atoms; an `Affine` is that sum frozen, with its terms in a canonical order (Vars by name, then
atoms), so equal forms have equal keys and print the same.  Bounds of a form come from shape's
interval analysis in its closed reading (only what the known ranges determine).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from ...ast import Add, Cast, FloorDiv, FloorMod, IntImm, Mul, PrimExpr, Sub, Var, const
from ...ast.dtype import DataType, dtype as to_dtype
from ...shape.bounds import Intervals
from ...shape.canonical import Sum

_SUM_DTYPE = to_dtype("int64")  # the scratch sums never go back to IR themselves

Bounds = Mapping[Var, tuple[int, int]]  # inclusive [lo, hi] of each bounded var


@dataclass(frozen=True, eq=False)
class Atom:
    """floordiv(form, divisor) or floormod(form, divisor) that normalization could not remove."""

    op: str  # "div" | "mod"
    form: "Affine"
    divisor: int

    def key(self) -> tuple:
        return (self.op, self.form.key(), self.divisor)


@dataclass(frozen=True, eq=False)
class Affine:
    """sum(coef * term) + const; terms are Vars or Atoms, compared by `key`."""

    terms: tuple[tuple[object, int], ...]  # (Var | Atom, nonzero coef), in canonical order
    const: int = 0

    @staticmethod
    def make(terms: dict, const_value: int) -> "Affine":
        total = Sum(_SUM_DTYPE, const_value)
        for term, coef in terms.items():
            total.add_term(coef, ((_term_key(term), term, 1),))
        return Affine.of_sum(total)

    @staticmethod
    def of_sum(total: Sum) -> "Affine":
        """The frozen form of a linear sum whose atoms are Vars and Atoms."""
        items = sorted(((mono[0][1], coef) for coef, mono in total.items()), key=lambda tc: _order(tc[0]))
        return Affine(tuple(items), total.const)

    def as_sum(self) -> Sum:
        """The form as a (fresh, mutable) canonical sum."""
        total = Sum(_SUM_DTYPE, self.const)
        for term, coef in self.terms:
            total.add_term(coef, ((_term_key(term), term, 1),))
        return total

    def key(self) -> tuple:
        return (tuple((_term_key(t), c) for t, c in self.terms), self.const)

    def __add__(self, other: "Affine") -> "Affine":
        return Affine.of_sum(self.as_sum().add(other.as_sum()))

    def scale(self, factor: int) -> "Affine":
        return Affine.of_sum(self.as_sum().scaled(factor))

    def __sub__(self, other: "Affine") -> "Affine":
        return Affine.of_sum(self.as_sum().add(other.as_sum(), -1))

    def vars(self) -> set[Var]:
        """Every Var appearing in the form, inside atoms too."""
        out: set[Var] = set()
        for term, _ in self.terms:
            if isinstance(term, Var):
                out.add(term)
            else:
                out |= term.form.vars()
        return out

    def is_const(self) -> bool:
        return not self.terms

    def coef(self, term) -> int:
        """The coefficient of a Var or Atom term (0 when absent)."""
        return self.as_sum().linear_coef(_term_key(term)) or 0

    def bounds(self, known: Bounds) -> tuple[int, int] | None:
        """Inclusive [lo, hi] of the form, or None when a term is unbounded."""
        lo = hi = self.const
        intervals = Intervals(known.get, closed=True)
        for term, coef in self.terms:
            rng = intervals.of(term if isinstance(term, Var) else term_expr(term, _SUM_DTYPE))
            if rng is None:
                return None
            a, b = coef * rng[0], coef * rng[1]
            lo, hi = lo + min(a, b), hi + max(a, b)
        return lo, hi

    def to_expr(self, dtype: DataType | str = "int32") -> PrimExpr:
        """The form as an IR expression: positive terms, then the constant, then subtracted terms."""
        dtype = to_dtype(dtype)

        def piece_of(term, magnitude: int) -> PrimExpr:
            piece = term if isinstance(term, Var) else term_expr(term, dtype)
            if piece.dtype != dtype:
                piece = piece.astype(dtype)
            return piece if magnitude == 1 else Mul(piece, const(magnitude, dtype))

        result: PrimExpr | None = None
        for term, coef in self.terms:
            if coef > 0:
                piece = piece_of(term, coef)
                result = piece if result is None else Add(result, piece)
        if self.const or result is None:
            if result is None:
                result = const(self.const, dtype)
            elif self.const > 0:
                result = Add(result, const(self.const, dtype))
            else:
                result = Sub(result, const(-self.const, dtype))
        for term, coef in self.terms:
            if coef < 0:
                piece = piece_of(term, -coef)
                result = Sub(result, piece) if not (isinstance(result, IntImm) and result.value == 0) \
                    else Mul(piece, const(-1, dtype)) if -coef != 1 else Sub(const(0, dtype), piece)
        return result


def term_expr(atom: Atom, dtype) -> PrimExpr:
    inner = atom.form.to_expr(dtype)
    divisor = const(atom.divisor, inner.dtype)
    return FloorDiv(inner, divisor) if atom.op == "div" else FloorMod(inner, divisor)


def _term_key(term) -> tuple:
    return ("var", id(term)) if isinstance(term, Var) else ("atom",) + term.key()


def _order(term) -> tuple:
    # Vars by name then identity (stable within a run), atoms after vars.
    if isinstance(term, Var):
        return (0, term.name, id(term))
    return (1, str(term.key()))


def normalize(expr: PrimExpr, known: Bounds | None = None) -> Affine | None:
    """The affine form of an integer index expression, or None when it is not affine."""
    known = known or {}
    if isinstance(expr, IntImm):
        return Affine((), expr.value)
    if isinstance(expr, Var):
        return Affine(((expr, 1),), 0)
    if isinstance(expr, (Add, Sub)):
        a, b = normalize(expr.a, known), normalize(expr.b, known)
        if a is None or b is None:
            return None
        return a + b if isinstance(expr, Add) else a - b
    if isinstance(expr, Mul):
        a, b = normalize(expr.a, known), normalize(expr.b, known)
        if a is None or b is None:
            return None
        if a.is_const():
            return b.scale(a.const)
        if b.is_const():
            return a.scale(b.const)
        return None
    if isinstance(expr, (FloorDiv, FloorMod)):
        a, b = normalize(expr.a, known), normalize(expr.b, known)
        if a is None or b is None or not b.is_const() or b.const <= 0:
            return None
        return divmod_form(a, b.const, "div" if isinstance(expr, FloorDiv) else "mod", known)
    if isinstance(expr, Cast) and expr.dtype.is_integer and expr.value.dtype.is_integer:
        return normalize(expr.value, known)
    return None


def divmod_form(a: Affine, c: int, op: str, known: Bounds) -> Affine:
    """floordiv(a, c) or floormod(a, c) with the multiples of c taken out and ranges used."""
    if c == 1:
        return a if op == "div" else Affine((), 0)
    quotient_sum, remainder_sum = a.as_sum().split_by_divisor(c)
    remainder, quotient = Affine.of_sum(remainder_sum), Affine.of_sum(quotient_sum)
    rng = remainder.bounds(known)
    if rng is not None and rng[0] // c == rng[1] // c:
        # the remainder stays inside one multiple of c: the division is a constant
        base = rng[0] // c
        if op == "div":
            return quotient + Affine((), base)
        return remainder - Affine((), base * c)
    split = _split_small_part(remainder, c, known)
    if split is not None:
        # remainder = g * x + y with g | c and 0 <= y < g: floordiv(., c) = floordiv(x, c / g),
        # floormod(., c) = g * floormod(x, c / g) + y, so y (a tile loop) leaves the atom
        g, x, y = split
        inner = divmod_form(x, c // g, op, known)
        if op == "div":
            return quotient + inner
        return inner.scale(g) + y
    atom = Atom(op, remainder, c)
    if op == "div":
        return quotient + Affine(((atom, 1),), 0)
    return Affine(((atom, 1),), 0)


def _split_small_part(form: Affine, c: int, known: Bounds) -> tuple[int, Affine, Affine] | None:
    """(g, x, y) with form = g * x + y, g > 1 the largest divisor of c for which the terms whose
    coefficients g does not divide, and the constant, make a y bounded in [0, g); else None."""
    for g in sorted({math.gcd(c, abs(k)) for _, k in form.terms} - {1, c}, reverse=True):
        big = {t: k // g for t, k in form.terms if k % g == 0}
        small = Affine.make({t: k for t, k in form.terms if k % g}, form.const)
        rng = small.bounds(known)
        if rng is not None and rng[0] >= 0 and rng[1] < g:
            return g, Affine.make(big, 0), small
    return None


def simplify_index(expr: PrimExpr, known: Bounds | None = None) -> PrimExpr:
    """expr rewritten from its affine form when it has one (else unchanged)."""
    form = normalize(expr, known)
    return expr if form is None else form.to_expr(expr.dtype)
