"""The canonical form of integer expressions: a constant plus a sum of scaled monomials.

`3*i*j + 2*(x // 4) - n + 7` is held as {i*j: 3, (x // 4): 2, n: -1} + 7.  A monomial is a product
of *atoms* with powers; an atom is any expression that is not + - * or a constant (a variable, a
floordiv, a min, a load, ...), identified by its structural key so that like terms merge.  Terms
keep the order in which they first appeared, so the rendered form reads like the input.

This is the one linear/affine form of the project.  Read with `to_sum` it is a polynomial (products
of sums are expanded); read with `linear_form` it is linear: a product of two non-constants stays one
atom, so every monomial is a single atom of power 1 (`linear_terms`).  Addition, subtraction,
multiplication and the merge of `c*(x // c) + x % c` into `x` are identities of the integers and
also of two's-complement arithmetic (they hold modulo 2^bits), so the form serves both integer
semantics of the simplifier.  Only the way back to IR differs: `to_expr()` assumes mathematical
integers and gives None when a coefficient does not fit the dtype, `to_expr(wrap=True)` writes
coefficients wrapped to the dtype, as the machine computes them (spec/shapes.md, "overflow").
"""
from __future__ import annotations

from math import gcd
from typing import Callable, Iterable, Iterator

from ..ast.dtype import DataType
from ..ast.expr import Add, Cast, FloorMod, IntImm, Mul, PrimExpr, Sub, Var
from ..ast.functor import free_vars
from .keys import expr_key

# A monomial: tuple of (atom key, atom expression, power), in first-appearance order.
Monomial = tuple


def _mono_key(mono: Monomial):
    return frozenset((key, power) for key, _, power in mono)


class Sum:
    """const + sum(coef * monomial); a mutable scratch value, never part of the IR."""

    __slots__ = ("terms", "const", "dtype")

    def __init__(self, dtype: DataType, const: int = 0) -> None:
        self.dtype = dtype
        self.const = const
        self.terms: dict = {}  # mono key -> [coef, monomial]

    # ---------------------------------------------------------------- construction
    @staticmethod
    def atom(expr: PrimExpr) -> "Sum":
        """The sum holding just `1 * expr`."""
        result = Sum(expr.dtype)
        mono = ((expr_key(expr), expr, 1),)
        result.terms[_mono_key(mono)] = [1, mono]
        return result

    def copy(self) -> "Sum":
        """An independent copy."""
        result = Sum(self.dtype, self.const)
        result.terms = {k: [c, m] for k, (c, m) in self.terms.items()}
        return result

    def add_term(self, coef: int, mono: Monomial) -> None:
        """self += coef * mono (in place)."""
        if coef == 0:
            return
        if not mono:
            self.const += coef
            return
        key = _mono_key(mono)
        entry = self.terms.get(key)
        if entry is None:
            self.terms[key] = [coef, mono]
        else:
            entry[0] += coef
            if entry[0] == 0:
                del self.terms[key]

    def add(self, other: "Sum", scale: int = 1) -> "Sum":
        """self += scale * other (in place); returns self."""
        if scale == 0:
            return self
        self.const += scale * other.const
        for coef, mono in other.terms.values():
            self.add_term(scale * coef, mono)
        return self

    def scaled(self, factor: int) -> "Sum":
        """factor * self, as a new sum."""
        result = Sum(self.dtype, self.const * factor)
        if factor:
            result.terms = {k: [c * factor, m] for k, (c, m) in self.terms.items()}
        return result

    def mul(self, other: "Sum") -> "Sum":
        """The product, expanded."""
        if other.is_const():
            return self.scaled(other.const)
        if self.is_const():
            return other.scaled(self.const)
        result = Sum(self.dtype, self.const * other.const)
        for coef, mono in self.terms.values():
            result.add_term(coef * other.const, mono)
        for coef, mono in other.terms.values():
            result.add_term(coef * self.const, mono)
        for c1, m1 in self.terms.values():
            for c2, m2 in other.terms.values():
                result.add_term(c1 * c2, _mono_product(m1, m2))
        return result

    # ---------------------------------------------------------------- queries
    def is_const(self) -> bool:
        """True when no term is left (the sum is its constant)."""
        return not self.terms

    def term_count(self) -> int:
        """The number of non-constant terms."""
        return len(self.terms)

    def items(self) -> Iterable[tuple[int, Monomial]]:
        """(coefficient, monomial) pairs in first-seen order."""
        return ((c, m) for c, m in self.terms.values())

    def linear_coef(self, key) -> int | None:
        """The coefficient of the degree-1 monomial whose single atom has this key, if present."""
        entry = self.terms.get(frozenset(((key, 1),)))
        return entry[0] if entry is not None else None

    def linear_terms(self) -> Iterator[tuple[PrimExpr, int]]:
        """(atom, coefficient) of each degree-1 term, in first-seen order (all terms of a linear form)."""
        for coef, mono in self.terms.values():
            if len(mono) == 1 and mono[0][2] == 1:
                yield mono[0][1], coef

    def coefficient(self, atom: PrimExpr) -> int:
        """The coefficient of `1 * atom` (0 when absent)."""
        return self.linear_coef(expr_key(atom)) or 0

    def pop(self, atom: PrimExpr) -> int:
        """Remove the term `c * atom` and return c (0 when absent)."""
        entry = self.terms.pop(frozenset(((expr_key(atom), 1),)), None)
        return entry[0] if entry is not None else 0

    def minus(self, other: "Sum") -> "Sum":
        """self - other, as a new sum."""
        return self.copy().add(other, -1)

    def shifted(self, value: int) -> "Sum":
        """self + value, as a new sum."""
        result = self.copy()
        result.const += value
        return result

    def plus(self, other: "Sum", scale: int = 1) -> "Sum":
        """self + scale * other, as a new sum."""
        return self.copy().add(other, scale)

    def coef_gcd(self) -> int:
        """gcd of the non-constant coefficients (0 when there are none)."""
        g = 0
        for coef, _ in self.terms.values():
            g = gcd(g, coef)
        return g

    def split_by_divisor(self, divisor: int) -> tuple["Sum", "Sum"]:
        """(quotient, rest) with self == divisor * quotient + rest, rest's coefs not multiples of divisor.

        The constant goes to rest whole except for its floor-multiple of divisor; rest's constant
        is then in [0, divisor).
        """
        quotient, rest = Sum(self.dtype), Sum(self.dtype)
        for coef, mono in self.terms.values():
            if coef % divisor == 0:
                quotient.add_term(coef // divisor, mono)
            else:
                rest.add_term(coef, mono)
        quotient.const, rest.const = divmod(self.const, divisor)
        return quotient, rest

    def merge_div_mod(self, expand: bool = True) -> "Sum":
        """Fold k*c*(x // c) + k*(x % c) into k*x, the identity that split/fuse produce.

        x is read back as a polynomial, or (expand=False) as a linear form.
        """
        for coef, mono in list(self.terms.values()):
            if len(mono) != 1 or mono[0][2] != 1:
                continue
            mod_expr = mono[0][1]
            if not isinstance(mod_expr, FloorMod):
                continue
            if not isinstance(mod_expr.b, IntImm):
                if self._merge_symbolic(mono, mod_expr, expand):
                    return self.merge_div_mod(expand)
                continue
            if mod_expr.b.value <= 0:
                continue
            divisor = mod_expr.b.value
            div_key = ("FloorDiv", expr_key(mod_expr.a), expr_key(mod_expr.b))
            div_coef = self.linear_coef(div_key)
            mod_coef = self.linear_coef(mono[0][0])
            if div_coef is None or mod_coef is None or div_coef % divisor:
                continue
            per_div = div_coef // divisor
            if per_div * mod_coef <= 0:
                continue
            k = mod_coef if abs(mod_coef) <= abs(per_div) else per_div
            div_mono = self.terms[frozenset(((div_key, 1),))][1]
            self.add_term(-k, mono)
            self.add_term(-k * divisor, div_mono)
            self.add(to_sum(mod_expr.a, Sum.atom, expand), k)
            return self.merge_div_mod(expand)
        return self

    def _merge_symbolic(self, mod_mono: Monomial, mod_expr: FloorMod, expand: bool) -> bool:
        """Fold k*(x // b)*b + k*(x % b) into k*x for a divisor b that is one atom."""
        divisor = mod_expr.b
        div_key = ("FloorDiv", expr_key(mod_expr.a), expr_key(divisor))
        product_key = frozenset(((div_key, 1), (expr_key(divisor), 1)))
        entry = self.terms.get(product_key)
        mod_coef = self.terms[_mono_key(mod_mono)][0]
        if entry is None or entry[0] != mod_coef:
            return False
        self.add_term(-mod_coef, mod_mono)
        self.add_term(-mod_coef, entry[1])
        self.add(to_sum(mod_expr.a, Sum.atom, expand), mod_coef)
        return True

    # ---------------------------------------------------------------- back to IR
    def to_expr(self, wrap: bool = False, cast_atoms: bool = False) -> PrimExpr | None:
        """The expression for this sum, or None when a coefficient does not fit the dtype.

        With wrap=True every coefficient is wrapped to the dtype (the sum read modulo 2^bits) and
        the result is never None.  cast_atoms=True casts atoms of another dtype to the sum's (a
        linear form read through integer casts); otherwise every atom must have the sum's dtype.
        """
        if cast_atoms and any(atom.dtype != self.dtype for _, m in self.terms.values() for _, atom, _ in m):
            cast = Sum(self.dtype, self.const)
            for coef, mono in self.terms.values():
                cast.add_term(coef, tuple((k, a if a.dtype == self.dtype else Cast(self.dtype, a), p)
                                          for k, a, p in mono))
            return cast.to_expr(wrap)
        if wrap:
            return self._to_wrapped_expr()
        low, high = self.dtype.min_value(), self.dtype.max_value()
        try:
            positives = [(c, m) for c, m in self.terms.values() if c > 0]
            negatives = [(-c, m) for c, m in self.terms.values() if c < 0]
            for c, _ in positives + negatives:
                if not low <= c <= high:
                    return None
            if not low <= self.const <= high:
                return None
            result: PrimExpr | None = None
            for coef, mono in positives:
                term = _term_expr(coef, mono, self.dtype)
                result = term if result is None else Add(result, term)
            const = self.const
            if result is None and negatives:
                # `c - x` when there is a positive constant, else `0 - x` (the IR's negation)
                result, const = IntImm(max(const, 0), self.dtype), min(const, 0)
            for coef, mono in negatives:
                result = Sub(result, _term_expr(coef, mono, self.dtype))
            if result is None:
                return IntImm(const, self.dtype)
            if const > 0:
                result = Add(result, IntImm(const, self.dtype))
            elif const < 0:
                result = Sub(result, IntImm(-const, self.dtype)) if -const <= high else Add(result, IntImm(const, self.dtype))
            return result
        except (ValueError, TypeError):
            return None


    def _to_wrapped_expr(self) -> PrimExpr:
        """Positive terms first, then subtracted ones, then the constant; coefficients wrapped."""
        dtype = self.dtype
        high = int(dtype.max_value())
        terms = [(c, m) for c, m in ((dtype.wrap(c), m) for c, m in self.terms.values()) if c != 0]
        const = dtype.wrap(self.const)
        result: PrimExpr | None = None
        for coef, mono in terms:
            if coef > 0:
                term = _term_expr(coef, mono, dtype)
                result = term if result is None else Add(result, term)
        for coef, mono in terms:
            if coef > 0:
                continue
            if result is None or -coef > high:
                term = _term_expr(coef, mono, dtype)
                result = term if result is None else Add(result, term)
            else:
                result = Sub(result, _term_expr(-coef, mono, dtype))
        if result is None:
            return IntImm(const, dtype)
        if const > 0:
            return Add(result, IntImm(const, dtype))
        if const < 0:
            return Sub(result, IntImm(-const, dtype)) if -const <= high else Add(result, IntImm(const, dtype))
        return result


def _mono_product(m1: Monomial, m2: Monomial) -> Monomial:
    merged: dict = {}
    for key, expr, power in m1 + m2:
        if key in merged:
            merged[key] = (key, merged[key][1], merged[key][2] + power)
        else:
            merged[key] = (key, expr, power)
    return tuple(merged.values())


def _mono_expr(mono: Monomial) -> PrimExpr:
    result: PrimExpr | None = None
    for _, expr, power in mono:
        for _ in range(power):
            result = expr if result is None else Mul(result, expr)
    assert result is not None
    return result


def _term_expr(coef: int, mono: Monomial, dtype: DataType) -> PrimExpr:
    base = _mono_expr(mono)
    return base if coef == 1 else Mul(base, IntImm(coef, dtype))


# Products of sums with more terms than this are kept as one atom rather than expanded.
EXPAND_LIMIT = 16


def to_sum(expr: PrimExpr, atom: Callable[[PrimExpr], "Sum"], expand: bool = True) -> Sum:
    """The canonical sum of an integer expression; `atom(e)` gives the sum for each non-arithmetic part.

    expand=False reads a linear form: a product of two non-constants is one atom, left as written.
    """
    kind = type(expr)
    if kind is IntImm:
        return Sum(expr.dtype, expr.value)
    if kind is Add:
        return to_sum(expr.a, atom, expand).add(to_sum(expr.b, atom, expand))
    if kind is Sub:
        return to_sum(expr.a, atom, expand).add(to_sum(expr.b, atom, expand), -1)
    if kind is Mul:
        left, right = to_sum(expr.a, atom, expand), to_sum(expr.b, atom, expand)
        if left.is_const() or right.is_const():
            return left.mul(right)
        if not expand:
            return atom(expr)
        if left.term_count() * right.term_count() <= EXPAND_LIMIT:
            return left.mul(right)
        return atom(Mul(left.to_expr() or expr.a, right.to_expr() or expr.b))
    return atom(expr)


def linear_form(expr: PrimExpr) -> Sum:
    """expr as a linear sum: +, - and multiplication by a constant opened up, anything else an atom."""
    return to_sum(expr, Sum.atom, expand=False)



def inner_span(expr: PrimExpr, extents: dict) -> int | None:
    """How far expr can move (max - min) while the vars in extents run over [min, min + extent).

    Other variables are held fixed.  None when a var of extents occurs other than linearly, or its
    extent (a dict value) is not a known constant.  Exact integer arithmetic (no wrap assumed).
    """
    span = 0
    for atom, coefficient in linear_form(expr).linear_terms():
        if isinstance(atom, Var) and atom in extents:
            extent = extents[atom]
            if extent is None:
                return None
            span += abs(coefficient) * max(extent - 1, 0)
        elif any(v in extents for v in free_vars(atom)):
            return None
    return span
