"""The simplifier: one engine for integer expressions, in either of the project's integer semantics.

`Simplifier(analyzer)` reads integers as mathematical integers (the shape level, spec/shapes.md:
no intermediate overflows).  Its facts are an Analyzer's (variable ranges, constraints), and they
decide the rules that need a bound, e.g. `(i*32 + j) // 32 -> i` needs `0 <= j < 32`.

`Simplifier(wrap=True, bounds=...)` reads them as the machine does: two's-complement wrap-around in
their width (the loop level, lowering).  Additive and multiplicative normalisation holds modulo
2^bits and is always allowed (linear sums, coefficients wrapped); a rewrite that needs ordinary
arithmetic (floor division of a sum, deciding a comparison or a min/max, splitting a zero sum)
fires only when the wrap-around interval analysis (`bounds.Bounds`) shows that no intermediate
can wrap.  This mode never asks Z3 and keeps no result cache, since its ranges change as a pass
walks into loops.

Both modes share the canonical sum (`canonical.Sum`), the structural key (`keys.expr_key`), the
interval rules (`bounds`) and the constant folding: integer constants, casts, and float constants
where IEEE gives the same bits (computed in their own precision; `x * 1.0`, `x / 1.0`; no
reassociation).  The result of a node that did not change is the node itself, so `is` tells a
pass that nothing changed.
"""
from __future__ import annotations

import dataclasses
from math import gcd
from typing import TYPE_CHECKING

from ..ast.expr import (
    EQ, GE, GT, LE, LT, NE, Add, And, BinaryOp, Broadcast, BufferLoad, Call, Cast, CompareOp, Div,
    FloatImm, FloorDiv, FloorMod, IntImm, Let, Max, Min, Mul, Not, Or, PrimExpr, Ramp, Select,
    StringImm, Sub, TruncDiv, TruncMod, Var,
)
from ..ast.functor import is_pure
from .bounds import Bounds, Interval
from .canonical import Sum, linear_form, to_sum
from .constant_fold import (
    NEGATE, bool_const, const_value, fold_cast, fold_float_binary, fold_logic, fold_min_max, fold_not,
    fold_trunc, is_false, is_true,
)
from .evaluate import trunc_div, trunc_mod
from .keys import expr_key, same_expr

if TYPE_CHECKING:
    from .analyzer import Analyzer

_ARITH = (Add, Sub, Mul, IntImm)
_FOLD = {
    Add: lambda a, b: a + b, Sub: lambda a, b: a - b, Mul: lambda a, b: a * b,
    Min: min, Max: max,
}
_COMPARE = {
    LT: lambda a, b: a < b, LE: lambda a, b: a <= b, GT: lambda a, b: a > b,
    GE: lambda a, b: a >= b, EQ: lambda a, b: a == b, NE: lambda a, b: a != b,
}


def _bool(value: bool) -> IntImm:
    return IntImm(int(value), "bool")


def _is_scalar_int(expr: PrimExpr) -> bool:
    return expr.dtype.lanes == 1 and expr.dtype.is_integer


class Simplifier:
    """Simplifies expressions in one integer semantics (see the module docstring).

    Mathematical integers: the facts of `analyzer` (caches live in the analyzer).  Wrap-around
    (wrap=True): the variable ranges of `bounds`, a scoped `Bounds` that a pass may bind as it walks.
    """

    def __init__(self, analyzer: "Analyzer | None" = None, *, wrap: bool = False,
                 bounds: Bounds | None = None) -> None:
        if not wrap and analyzer is None:
            raise TypeError("Simplifier: the mathematical-integer mode needs an Analyzer (or pass wrap=True)")
        self.analyzer = analyzer
        self.wrap = wrap
        self.bounds = bounds if bounds is not None else Bounds()
        self._active: set[PrimExpr] = set()

    def __call__(self, expr: PrimExpr) -> PrimExpr:
        return self.simplify(expr)

    # ---------------------------------------------------------------- entry
    def simplify(self, expr: PrimExpr) -> PrimExpr:
        """expr simplified; the very same object when nothing could be simplified."""
        if self.wrap:
            return self._simplify_wrapping(expr)
        cache = self.analyzer._simplify_cache
        cached = cache.get(expr)
        if cached is not None:
            return cached
        if expr in self._active:
            return expr  # asked again while simplifying it (through a range or fact): leave it
        self._active.add(expr)
        try:
            result = self._visit(expr)
        finally:
            self._active.discard(expr)
        if result is not expr and expr_key(result) == expr_key(expr):
            result = expr  # keep sharing when the rewrite is a structural no-op
        cache[expr] = result
        cache.setdefault(result, result)
        return result

    def to_sum(self, expr: PrimExpr) -> Sum:
        """The canonical sum of a (simplified) integer expression."""
        return to_sum(expr, self._atom_sum)

    def _atom_sum(self, expr: PrimExpr) -> Sum:
        simplified = self.simplify(expr)
        if type(simplified) in _ARITH:
            return to_sum(simplified, Sum.atom)
        return Sum.atom(simplified)

    def _from_sum(self, total: Sum, original: PrimExpr) -> PrimExpr:
        """total back as IR: a polynomial that must fit the dtype, or (wrap) a linear sum wrapped to it."""
        total.merge_div_mod(expand=not self.wrap)
        result = total.to_expr(wrap=self.wrap)
        return original if result is None else result

    def _rest_quotient(self, rest: Sum, divisor: int) -> int | None:
        """The k with rest in [k*divisor, (k+1)*divisor) for every value the facts allow, if there is one.

        Mathematical integers: rest's interval, or two proofs from the Analyzer's facts.
        Wrap-around: rest's interval, known only when nothing in rest can wrap.
        """
        if rest.is_const():
            return rest.const // divisor
        if self.wrap:
            interval = self.bounds.of(rest.to_expr(wrap=True))
            if interval is None:
                return None
            lo, hi = interval
            return lo // divisor if lo // divisor == hi // divisor else None
        lo, hi = self.analyzer._sum_interval(rest)
        k = lo // divisor
        if k == hi // divisor or (self.analyzer._provable_nonpos(_minus_const(rest, (k + 1) * divisor - 1))
                                  and self.analyzer._provable_nonpos(_negated_plus(rest, k * divisor))):
            return k
        return None

    # ---------------------------------------------------------------- dispatch
    def _visit(self, expr: PrimExpr) -> PrimExpr:
        kind = type(expr)
        if kind is IntImm or kind is FloatImm or kind is StringImm or isinstance(expr, Var):
            return expr
        scalar_int = _is_scalar_int(expr)
        if scalar_int and kind in (Add, Sub, Mul):
            return self._from_sum(self.to_sum(expr), expr)
        if scalar_int and kind in (FloorDiv, FloorMod):
            return self._floor_div_mod(expr)
        if scalar_int and kind in (TruncDiv, TruncMod):
            return self._trunc_div_mod(expr)
        if scalar_int and kind in (Min, Max):
            return self._min_max(expr)
        if isinstance(expr, CompareOp) and _is_scalar_int(expr.a):
            return self._compare(kind, self.simplify(expr.a), self.simplify(expr.b), expr)
        if kind is And or kind is Or:
            return self._logic(expr)
        if kind is Not:
            return self._not(expr)
        if kind is Select:
            return self._select(expr.condition, expr.true_value, expr.false_value, expr)
        if kind is Call and expr.op == "if_then_else":
            return self._select(expr.args[0], expr.args[1], expr.args[2], expr)
        if kind is Cast:
            return self._cast(expr)
        return self._children(expr)

    def _children(self, expr: PrimExpr) -> PrimExpr:
        """Simplify the operands only."""
        if isinstance(expr, BinaryOp):
            a, b = self.simplify(expr.a), self.simplify(expr.b)
            if expr.dtype.is_float:
                return fold_float_binary(expr if a is expr.a and b is expr.b else type(expr)(a, b))
            if a is expr.a and b is expr.b:
                return expr
            a_value, b_value = _const(a), _const(b)
            fold = _FOLD.get(type(expr))
            if fold is not None and a_value is not None and b_value is not None and a.dtype.lanes == 1:
                return _int_const(fold(a_value, b_value), expr) or type(expr)(a, b)
            return type(expr)(a, b)
        if isinstance(expr, BufferLoad):
            return expr.with_(indices=tuple(self.simplify(i) for i in expr.indices))
        if isinstance(expr, Call):
            return expr.with_(args=tuple(self.simplify(a) for a in expr.args))
        if isinstance(expr, Ramp):
            return expr.with_(base=self.simplify(expr.base), stride=self.simplify(expr.stride))
        if isinstance(expr, Broadcast):
            return expr.with_(value=self.simplify(expr.value))
        if isinstance(expr, Let):
            value = self.simplify(expr.value)
            if not _is_scalar_int(value):
                return expr.with_(value=value, body=self.simplify(expr.body))
            with self.analyzer.bound_scope(expr.var, value):  # inside the body, var == value
                body = self.simplify(expr.body)
            return expr.with_(value=value, body=body)
        if isinstance(expr, Not):
            return expr.with_(a=self.simplify(expr.a))
        if isinstance(expr, Select):
            return expr.with_(condition=self.simplify(expr.condition),
                              true_value=self.simplify(expr.true_value),
                              false_value=self.simplify(expr.false_value))
        if isinstance(expr, Cast):
            return expr.with_(value=self.simplify(expr.value))
        return expr

    # ---------------------------------------------------------------- division
    def _floor_div_mod(self, expr: PrimExpr) -> PrimExpr:
        is_div = type(expr) is FloorDiv
        a, b = self.simplify(expr.a), self.simplify(expr.b)
        divisor = _const(b)
        if divisor is None:
            return self._symbolic_div_mod(expr, a, b, is_div)
        if divisor == 0:
            return expr if (a is expr.a and b is expr.b) else type(expr)(a, b)
        if divisor < 0:  # a // -c == (-a) // c and a % -c == -((-a) % c)
            negated = self.simplify(Sub(IntImm(0, a.dtype), a))
            positive = IntImm(-divisor, b.dtype)
            if is_div:
                return self.simplify(FloorDiv(negated, positive))
            return self.simplify(Sub(IntImm(0, a.dtype), FloorMod(negated, positive)))
        try:
            reduced = self._reduce_div_mod(self.to_sum(a), divisor, is_div)
        except _GiveUp:
            return expr if (a is expr.a and b is expr.b) else type(expr)(a, b)
        return self._from_sum(reduced, expr)

    def _reduce_div_mod(self, total: Sum, divisor: int, is_div: bool) -> Sum:
        """floor(total / divisor) or total mod divisor as a sum, divisor > 0."""
        if divisor == 1:
            return total if is_div else Sum(total.dtype)
        quotient, rest = total.split_by_divisor(divisor)
        result = quotient if is_div else Sum(total.dtype)
        # rest in [k*d, (k+1)*d) for one k: the quotient is k and the remainder rest - k*d
        k = self._rest_quotient(rest, divisor)
        if k is not None:
            if is_div:
                result.const += k
                return result
            return result.add(rest).add(Sum(total.dtype, -k * divisor))
        # common factor: (g*x + r) // (g*c) == (x + r // g) // c, and similarly for %
        g = gcd(rest.coef_gcd(), divisor)
        if g > 1:
            low_part = rest.const % g
            inner = Sum(total.dtype, rest.const // g)
            for coef, mono in rest.items():
                inner.add_term(coef // g, mono)
            reduced = self._reduce_div_mod(inner, divisor // g, is_div)
            if is_div:
                return result.add(reduced)
            return result.add(reduced.scaled(g)).add(Sum(total.dtype, low_part))
        # nested: (y // c2) // c == y // (c2 * c); (y % (c*m)) % c == y % c
        single = _single_atom(rest)
        if single is not None:
            inner_divisor = _const(single.b) if isinstance(single, (FloorDiv, FloorMod)) else None
            if is_div and isinstance(single, FloorDiv) and inner_divisor and inner_divisor > 0:
                return result.add(self.to_sum(self.simplify(FloorDiv(single.a, IntImm(inner_divisor * divisor, single.b.dtype)))))
            if not is_div and isinstance(single, FloorMod) and inner_divisor and inner_divisor % divisor == 0:
                return result.add(self.to_sum(self.simplify(FloorMod(single.a, IntImm(divisor, single.b.dtype)))))
        rest_expr = rest.to_expr()
        if rest_expr is None:
            raise _GiveUp
        node = (FloorDiv if is_div else FloorMod)(rest_expr, IntImm(divisor, rest_expr.dtype))
        return result.add(Sum.atom(node))

    def _symbolic_div_mod(self, expr: PrimExpr, a: PrimExpr, b: PrimExpr, is_div: bool) -> PrimExpr:
        analyzer = self.analyzer
        if expr_key(a) == expr_key(b) and analyzer._provable_nonpos(_negated_plus(self.to_sum(b), 1)):
            return IntImm(1 if is_div else 0, expr.dtype)
        # a == b*Q + R with 0 <= R < b: a // b == Q and a % b == R (`(i*m + j) // m -> i`)
        quotient, rest = _split_by_monomial(self.to_sum(a), self.to_sum(b))
        difference = rest.copy().add(self.to_sum(b), -1)  # R - b
        if analyzer._provable_nonpos(_negated_plus(rest, 0)) and analyzer._provable_nonpos(_minus_const(difference, -1)):
            if is_div:
                return self._from_sum(quotient, expr) if not quotient.is_const() or quotient.const else IntImm(0, expr.dtype)
            return self._from_sum(rest, expr)
        if a is expr.a and b is expr.b:
            return expr
        return type(expr)(a, b)

    def _trunc_div_mod(self, expr: PrimExpr) -> PrimExpr:
        a, b = self.simplify(expr.a), self.simplify(expr.b)
        a_value, b_value = _const(a), _const(b)
        if a_value is not None and b_value:
            op = trunc_div if type(expr) is TruncDiv else trunc_mod
            folded = _int_const(op(a_value, b_value), expr)
            if folded is not None:
                return folded
        # with a >= 0 and b > 0 truncation and floor agree
        if b_value is not None and b_value > 0 and self.analyzer._provable_nonpos(_negated_plus(self.to_sum(a), 0)):
            floor_kind = FloorDiv if type(expr) is TruncDiv else FloorMod
            return self.simplify(floor_kind(a, b))
        if a is expr.a and b is expr.b:
            return expr
        return type(expr)(a, b)

    # ---------------------------------------------------------------- min / max
    def _min_max(self, expr: PrimExpr) -> PrimExpr:
        a, b = self.simplify(expr.a), self.simplify(expr.b)
        is_min = type(expr) is Min
        if expr_key(a) == expr_key(b):
            return a
        difference = self.to_sum(a).add(self.to_sum(b), -1)
        if self.analyzer._provable_nonpos(difference):  # a <= b
            return a if is_min else b
        if self.analyzer._provable_nonpos(difference.scaled(-1)):  # b <= a
            return b if is_min else a
        if a is expr.a and b is expr.b:
            return expr
        return type(expr)(a, b)

    # ---------------------------------------------------------------- comparisons
    def _compare(self, kind, a: PrimExpr, b: PrimExpr, original: PrimExpr) -> PrimExpr:
        try:
            difference = self.to_sum(a).add(self.to_sum(b), -1)  # a - b
        except _GiveUp:
            return original
        decided = self._decide(kind, difference)
        if decided is not None:
            return _bool(decided)
        rebuilt = _comparison_from_sum(kind, difference)
        if rebuilt is not None:
            return rebuilt
        return original if (a is original.a and b is original.b) else kind(a, b)

    def _decide(self, kind, d: Sum) -> bool | None:
        """The truth of `d <kind> 0` when the facts decide it."""
        prove = self.analyzer._provable_nonpos
        if d.is_const():
            return {LT: d.const < 0, LE: d.const <= 0, GT: d.const > 0, GE: d.const >= 0,
                    EQ: d.const == 0, NE: d.const != 0}[kind]
        if kind is EQ or kind is NE:
            g = d.coef_gcd()
            if g and d.const % g:
                return kind is NE  # g*x == -c has no integer solution
            if prove(_minus_const(d, -1)) or prove(_negated_plus(d, 1)):
                return kind is NE
            if prove(d) and prove(d.scaled(-1)):
                return kind is EQ
            return None
        if kind is GT or kind is GE:
            d = d.scaled(-1)
            kind = LT if kind is GT else LE
        strict_true = _minus_const(d, -1) if kind is LT else d  # d < 0  <=>  d + 1 <= 0
        if prove(strict_true):
            return True
        false_when = _negated_plus(d, 0) if kind is LT else _negated_plus(d, 1)
        if prove(false_when):
            return False
        return None

    # ---------------------------------------------------------------- logic
    def _logic(self, expr: PrimExpr) -> PrimExpr:
        is_and = type(expr) is And
        a = self.simplify(expr.a)
        a_value = _const(a)
        if a_value is not None and a.dtype.lanes == 1:
            if bool(a_value) != is_and:
                return _bool(not is_and)
            return self.simplify(expr.b)
        b = self.simplify(expr.b)
        b_value = _const(b)
        if b_value is not None and b.dtype.lanes == 1:
            return a if bool(b_value) == is_and else _bool(not is_and)
        if expr_key(a) == expr_key(b):
            return a
        decided = self._one_side_decides(a, b, is_and)
        if decided is None:
            decided = self._one_side_decides(b, a, is_and)
        if decided is not None:
            return decided
        if a is expr.a and b is expr.b:
            return expr
        return type(expr)(a, b)

    def _one_side_decides(self, a: PrimExpr, b: PrimExpr, is_and: bool) -> PrimExpr | None:
        """`a and b` is a when a implies b, False when a excludes b (dually for `or`)."""
        if not (isinstance(b, CompareOp) and isinstance(a, (CompareOp, And, Or, Not))):
            return None
        if a.dtype.lanes != 1 or not _is_scalar_int(b.a):
            return None
        with self.analyzer.constraint(a if is_and else Not(a)):
            value = _const(self.simplify(b))
        if value is None:
            return None
        if is_and:
            return a if value else _bool(False)
        return _bool(True) if value else a

    def _not(self, expr: Not) -> PrimExpr:
        a = self.simplify(expr.a)
        value = _const(a)
        if value is not None and a.dtype.lanes == 1:
            return _bool(not value)
        if isinstance(a, Not):
            return a.a
        flipped = NEGATE.get(type(a))
        if flipped is not None:
            return self.simplify(flipped(a.a, a.b))
        return expr if a is expr.a else Not(a)

    def _select(self, condition, true_value, false_value, original: PrimExpr) -> PrimExpr:
        cond = self.simplify(condition)
        value = _const(cond)
        if value is not None and cond.dtype.lanes == 1:
            return self.simplify(true_value if value else false_value)
        with self.analyzer.constraint(cond):
            t = self.simplify(true_value)
        with self.analyzer.constraint(Not(cond)):
            f = self.simplify(false_value)
        if expr_key(t) == expr_key(f) and isinstance(original, Select):
            return t  # both sides are evaluated by Select: it is the same value either way
        if cond is condition and t is true_value and f is false_value:
            return original
        if isinstance(original, Select):
            return Select(cond, t, f)
        return original.with_(args=(cond, t, f))

    def _cast(self, expr: Cast) -> PrimExpr:
        value = self.simplify(expr.value)
        return fold_cast(expr if value is expr.value else Cast(expr.dtype, value))

    # ================================================================ wrap-around mode
    # Children first, then one rule for the node; the rules below only fire where `bounds` shows
    # that nothing wraps, except the additive/multiplicative normalisation, exact modulo 2^bits.

    def _simplify_wrapping(self, expr: PrimExpr) -> PrimExpr:
        if isinstance(expr, (IntImm, FloatImm, StringImm, Var)):
            return expr
        if isinstance(expr, Let):
            value = self._simplify_wrapping(expr.value)
            with self.bounds.bind(expr.var, self.bounds.of(value)):
                body = self._simplify_wrapping(expr.body)
            return expr.with_(value=value, body=body)
        rebuilt = self._wrapping_children(expr)
        result = self._wrapping_rule(rebuilt)
        if result is not expr and same_expr(result, expr):
            return expr
        return result

    def _wrapping_children(self, expr: PrimExpr) -> PrimExpr:
        changes = {}
        for field in dataclasses.fields(expr):
            old = getattr(expr, field.name)
            if isinstance(old, PrimExpr):
                new = self._simplify_wrapping(old)
            elif isinstance(old, tuple) and old and all(isinstance(x, PrimExpr) for x in old):
                items = tuple(self._simplify_wrapping(x) for x in old)
                new = old if all(a is b for a, b in zip(items, old)) else items
            else:
                continue
            if new is not old:
                changes[field.name] = new
        return expr.with_(**changes) if changes else expr

    def _wrapping_rule(self, e: PrimExpr) -> PrimExpr:
        if isinstance(e, (Add, Sub, Mul)):
            return self._wrapping_arith(e)
        if isinstance(e, Div):
            return fold_float_binary(e)
        if isinstance(e, (FloorDiv, FloorMod)):
            return self._wrapping_floor_division(e)
        if isinstance(e, (TruncDiv, TruncMod)):
            return fold_trunc(e)
        if isinstance(e, (Min, Max)):
            return self._wrapping_min_max(e)
        if isinstance(e, CompareOp):
            return self._wrapping_compare(e)
        if isinstance(e, (And, Or)):
            return fold_logic(e)
        if isinstance(e, Not):
            return fold_not(e)
        if isinstance(e, Select):
            if is_true(e.condition) and is_pure(e.false_value):
                return e.true_value
            if is_false(e.condition) and is_pure(e.true_value):
                return e.false_value
            if same_expr(e.true_value, e.false_value) and is_pure(e.condition):
                return e.true_value
            return e
        if isinstance(e, Cast):
            return fold_cast(e)
        if isinstance(e, Call) and e.op == "if_then_else" and len(e.args) == 3:
            if is_true(e.args[0]):
                return e.args[1]
            if is_false(e.args[0]):
                return e.args[2]
            return e
        if isinstance(e, Broadcast) and e.lanes == 1:
            return e.value
        return e

    def _wrapping_arith(self, e: PrimExpr) -> PrimExpr:
        dtype = e.dtype
        if dtype.lanes != 1:
            return e
        if dtype.is_float:
            return fold_float_binary(e)
        a, b = const_value(e.a), const_value(e.b)
        if a is not None and b is not None:
            value = a + b if isinstance(e, Add) else a - b if isinstance(e, Sub) else a * b
            return IntImm(dtype.wrap(value), dtype)
        if dtype.is_int:
            return self._from_sum(linear_form(e), e)
        # unsigned: identities only (a negative coefficient has no unsigned constant)
        if isinstance(e, (Add, Sub)) and b == 0:
            return e.a
        if isinstance(e, Add) and a == 0:
            return e.b
        if isinstance(e, Mul):
            if b == 1:
                return e.a
            if a == 1:
                return e.b
            if (a == 0 and is_pure(e.b)) or (b == 0 and is_pure(e.a)):
                return IntImm(0, dtype)
        return e

    def _wrapping_floor_division(self, e: PrimExpr) -> PrimExpr:
        dtype = e.dtype
        divisor = e.b.value if isinstance(e.b, IntImm) else None
        if dtype.lanes != 1 or divisor is None or divisor == 0:
            return e
        is_div = isinstance(e, FloorDiv)
        if isinstance(e.a, IntImm):
            value = e.a.value // divisor if is_div else e.a.value % divisor
            return IntImm(dtype.wrap(value), dtype)
        if divisor == 1:
            return e.a if is_div else IntImm(0, dtype)
        if divisor < 0 or not dtype.is_int:
            return e
        if is_div and isinstance(e.a, FloorDiv) and isinstance(e.a.b, IntImm) and e.a.b.value > 0:
            product = e.a.b.value * divisor
            if product <= int(dtype.max_value()):
                return self._wrapping_floor_division(FloorDiv(e.a.a, IntImm(product, dtype)))
        if not is_div and isinstance(e.a, FloorMod) and isinstance(e.a.b, IntImm) \
                and e.a.b.value > 0 and e.a.b.value % divisor == 0:
            return self._wrapping_floor_division(FloorMod(e.a.a, e.b))
        if self.bounds.of(e.a) is None:
            return e  # the dividend may wrap: ordinary arithmetic does not apply
        quotient, remainder = linear_form(e.a).split_by_divisor(divisor)
        k = self._rest_quotient(remainder, divisor)
        if k is not None:  # the remainder lies within one multiple of the divisor
            if is_div:
                quotient.const += k
                return quotient.to_expr(wrap=True)
            remainder.const -= k * divisor
            return remainder.to_expr(wrap=True)
        rest = remainder.to_expr(wrap=True)
        if not is_div and self.bounds.of(rest) is not None:  # (c*q + r) mod c == r mod c
            return FloorMod(rest, e.b)
        return e

    def _wrapping_min_max(self, e: PrimExpr) -> PrimExpr:
        if e.dtype.lanes != 1:
            return e
        is_min = isinstance(e, Min)
        if const_value(e.a) is not None and const_value(e.b) is not None:
            return fold_min_max(e)
        if same_expr(e.a, e.b):
            return e.a
        if not e.dtype.is_integer:
            return e
        ra, rb = self.bounds.of(e.a), self.bounds.of(e.b)
        if ra is None or rb is None:
            return e
        if ra[1] <= rb[0]:
            return e.a if is_min else e.b
        if rb[1] <= ra[0]:
            return e.b if is_min else e.a
        return e

    def _wrapping_compare(self, e: CompareOp) -> PrimExpr:
        lanes = e.dtype.lanes
        a, b = const_value(e.a), const_value(e.b)
        if a is not None and b is not None and lanes == 1:
            return bool_const(_COMPARE[type(e)](a, b))
        if lanes != 1 or not e.a.dtype.is_integer:
            return e
        ra, rb = self.bounds.of(e.a), self.bounds.of(e.b)
        if ra is not None and rb is not None:
            difference = self._linear_range(linear_form(e.a).add(linear_form(e.b), -1))
            if difference is None:
                difference = (ra[0] - rb[1], ra[1] - rb[0])
            decided = _decide_interval(type(e), difference)
            if decided is not None:
                return bool_const(decided)
        if isinstance(e, EQ) and const_value(e.b) == 0:
            return self._zero_sum(e)
        return e

    def _zero_sum(self, e: EQ) -> PrimExpr:
        """c1*t1 + ... + ck*tk == 0 with positive c and non-negative t, no wrap: every t == 0.

        This is how an init guard `k_0 * 2 + k_1 == 0` after a split becomes `k_0 == 0 and
        k_1 == 0`, a test each loop level can hoist.
        """
        if self.bounds.of(e.a) is None:
            return e
        form = linear_form(e.a)
        terms = list(form.linear_terms())
        if form.const != 0 or len(terms) < 2 or len(terms) != form.term_count():
            return e
        for atom, c in terms:
            r = self.bounds.of(atom)
            if c <= 0 or r is None or r[0] < 0:
                return e
        condition: PrimExpr | None = None
        for atom, _ in terms:
            term = EQ(atom, IntImm(0, atom.dtype))
            condition = term if condition is None else And(condition, term)
        return condition

    def _linear_range(self, form: Sum) -> Interval | None:
        lo = hi = form.const
        for atom, c in form.linear_terms():
            r = self.bounds.of(atom)
            if r is None:
                return None
            lo += min(c * r[0], c * r[1])
            hi += max(c * r[0], c * r[1])
        return lo, hi


def simplify_expr(expr: PrimExpr, bounds: Bounds | None = None) -> PrimExpr:
    """expr simplified with wrap-around integers under the variable ranges in bounds (none: unconstrained)."""
    return Simplifier(wrap=True, bounds=bounds).simplify(expr)


def _decide_interval(op: type, difference: Interval) -> bool | None:
    """The truth of `a <op> b` when a - b lies in difference, if the interval decides it."""
    lo, hi = difference
    if op is LT:
        return True if hi < 0 else False if lo >= 0 else None
    if op is LE:
        return True if hi <= 0 else False if lo > 0 else None
    if op is GT:
        return True if lo > 0 else False if hi <= 0 else None
    if op is GE:
        return True if lo >= 0 else False if hi < 0 else None
    if op is EQ:
        return True if lo == hi == 0 else False if lo > 0 or hi < 0 else None
    if op is NE:
        return False if lo == hi == 0 else True if lo > 0 or hi < 0 else None
    return None


class _GiveUp(Exception):
    """A canonical form could not be turned back into IR (a constant outside its dtype)."""


def _const(expr: PrimExpr) -> int | None:
    return expr.value if isinstance(expr, IntImm) else None


def _int_const(value: int, like: PrimExpr) -> IntImm | None:
    dtype = like.dtype
    if not dtype.is_integer:
        return None
    if not dtype.min_value() <= value <= dtype.max_value():
        return None
    return IntImm(value, dtype)


def _split_by_monomial(total: Sum, divisor: Sum) -> tuple[Sum, Sum]:
    """(Q, R) with total == divisor*Q + R, Q taking the terms that are multiples of divisor.

    Only a divisor that is one monomial with a positive coefficient (`m`, `4*n*k`) splits terms
    off; otherwise Q is 0 and R is total.
    """
    quotient, rest = Sum(total.dtype), total.copy()
    if divisor.const or divisor.term_count() != 1:
        return quotient, rest
    d_coef, d_mono = next(iter(divisor.items()))
    if d_coef <= 0:
        return quotient, rest
    d_powers = {key: power for key, _, power in d_mono}
    for coef, mono in list(total.items()):
        powers = {key: power for key, _, power in mono}
        if coef % d_coef or any(powers.get(key, 0) < power for key, power in d_powers.items()):
            continue
        reduced = tuple((key, atom, power - d_powers.get(key, 0)) for key, atom, power in mono
                        if power - d_powers.get(key, 0) > 0)
        quotient.add_term(coef // d_coef, reduced)
        rest.add_term(-coef, mono)
    return quotient, rest


def _single_atom(total: Sum) -> PrimExpr | None:
    """The atom x when total is exactly 1*x."""
    if total.const or total.term_count() != 1:
        return None
    coef, mono = next(iter(total.items()))
    if coef != 1 or len(mono) != 1 or mono[0][2] != 1:
        return None
    return mono[0][1]


def _minus_const(total: Sum, value: int) -> Sum:
    """total - value."""
    result = total.copy()
    result.const -= value
    return result


def _negated_plus(total: Sum, value: int) -> Sum:
    """value - total."""
    result = total.scaled(-1)
    result.const += value
    return result


def _divide_comparison(kind, d: Sum) -> Sum:
    """An equivalent `d' <kind> 0` with the common factor of d's coefficients divided out.

    With d = g*D + c: D < -c/g and friends, rounded so that integer solutions stay the same
    (`2*x - 2*n + 3 < 0` becomes `x - n + 2 <= 0` in LT form: `x - n + 2 < 1`).
    """
    g = d.coef_gcd()
    if g <= 1 or d.is_const():
        return d
    c = d.const
    if kind is LT:      # g*D + c <= -1  <=>  D <= floor((-1 - c) / g)
        new_const = -((-1 - c) // g + 1)
    elif kind is LE:    # D <= floor(-c / g)
        new_const = -((-c) // g)
    elif kind is GT:    # g*D + c >= 1  <=>  D >= ceil((1 - c) / g)
        new_const = -(-((c - 1) // g) - 1)
    elif kind is GE:    # D >= ceil(-c / g)
        new_const = -(-(c // g))
    elif c % g == 0:    # EQ / NE with a divisible constant
        new_const = c // g
    else:
        return d
    out = Sum(d.dtype, new_const)
    for coef, mono in d.items():
        out.add_term(coef // g, mono)
    return out


def _comparison_from_sum(kind, d: Sum) -> PrimExpr | None:
    """`P <kind> N` from d = P - N: positive terms on the left, negative ones on the right.

    `>` and `>=` come out as `<` and `<=` with the sides swapped, so that one condition has one
    form (`x < n` whether it was written `x < n` or `n > x`).
    """
    d = _divide_comparison(kind, d)
    if kind is GT or kind is GE:
        d, kind = d.scaled(-1), (LT if kind is GT else LE)
    left, right = Sum(d.dtype), Sum(d.dtype)
    for coef, mono in d.items():
        (left if coef > 0 else right).add_term(abs(coef), mono)
    if d.const > 0:
        left.const = d.const
    else:
        right.const = -d.const
    a, b = left.to_expr(), right.to_expr()
    if a is None or b is None:
        return None
    return kind(a, b)
