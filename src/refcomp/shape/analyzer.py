"""The Analyzer: facts about variables (ranges, constraints) and the fast queries over them.

    ana = Analyzer()
    ana.bind(i, Range(0, n))            # or ana.bind(i, (0, n))
    with ana.constraint(i * 32 + j < n):
        ana.simplify(expr)
    ana.can_prove(i < n)                # fast path only: simplifier + bounds, never Z3
    ana.const_int_bound(i * 4)          # (0, None): None where unbounded
    ana.prove(cond)                     # fast path, then Z3 under the same facts

All answers assume no intermediate overflow (spec/shapes.md).  Caches are dropped whenever the facts
change, so every answer is for the facts in force when it was asked.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from ..ast.expr import (
    EQ, GE, GT, LE, LT, NE, And, IntImm, Not, PrimExpr, Range, SizeVar, Var, convert,
)
from ..ast.functor import free_vars
from .bounds import Interval, Intervals, dtype_interval, mul_interval, square_interval
from .canonical import Sum, to_sum
from .simplify import Simplifier

# Substitution steps tried by the symbolic-bound fast path before it gives up.
_SYMBOLIC_STEPS = 8


class Analyzer:
    """Variable ranges and constraints, with a simplifier and a bound analysis that use them."""

    def __init__(self) -> None:
        self.ranges: dict[Var, Range] = {}
        self.constraints: list[PrimExpr] = []  # every fact in force, as written (for Z3)
        self._facts: list[Sum] = []  # the linear ones, each meaning `sum <= 0`
        self._var_limits: dict[Var, Interval] = {}  # single-variable facts
        self._simplifier = Simplifier(self)
        self._reset_caches()

    # ---------------------------------------------------------------- facts
    def bind(self, var: Var, value: "Range | tuple | PrimExpr | int", allow_override: bool = True) -> None:
        """Declare var's range: a Range, a (min, extent) pair, or one exact value.

        A second bind of the same var replaces the first; with allow_override=False it is an
        error unless the range is the same object (TVM's strict mode).
        """
        if isinstance(value, tuple):
            value = Range(convert(value[0]), convert(value[1]))
        elif not isinstance(value, Range):
            value = Range(convert(value), IntImm(1, var.dtype if var.dtype.is_integer else "int32"))
        old = self.ranges.get(var)
        if old is value:
            return
        if old is not None and not allow_override:
            raise ValueError(f"Analyzer.bind: {var.name} is already bound; pass allow_override=True to rebind")
        self.ranges[var] = value
        self._reset_caches()

    def unbind(self, var: Var) -> None:
        """Forget var's range."""
        if self.ranges.pop(var, None) is not None:
            self._reset_caches()

    @contextlib.contextmanager
    def constraint(self, condition: PrimExpr) -> Iterator[None]:
        """Within the block, condition is a fact."""
        saved = (len(self.constraints), list(self._facts), dict(self._var_limits))
        self.assume(condition)
        try:
            yield
        finally:
            count, facts, limits = saved
            del self.constraints[count:]
            self._facts, self._var_limits = facts, limits
            self._reset_caches()

    @contextlib.contextmanager
    def bound_scope(self, var: Var, value: "Range | tuple | PrimExpr | int") -> Iterator[None]:
        """Within the block, var has this range (the previous one, if any, comes back after)."""
        previous = self.ranges.get(var)
        self.bind(var, value, allow_override=True)
        try:
            yield
        finally:
            if previous is None:
                self.unbind(var)
            else:
                self.bind(var, previous, allow_override=True)

    def assume(self, condition: PrimExpr) -> None:
        """Add a permanent fact."""
        condition = convert(condition)
        self.constraints.append(condition)
        for fact in self._linear_facts(condition):
            self._facts.append(fact)
            self._tighten(fact)
        self._reset_caches()

    def _linear_facts(self, condition: PrimExpr) -> list[Sum]:
        if isinstance(condition, And):
            return self._linear_facts(condition.a) + self._linear_facts(condition.b)
        if isinstance(condition, Not):
            inner = condition.a
            flipped = {LT: GE, LE: GT, GT: LE, GE: LT, EQ: NE, NE: EQ}.get(type(inner))
            return self._linear_facts(flipped(inner.a, inner.b)) if flipped else []
        kind = type(condition)
        if kind not in (LT, LE, GT, GE, EQ) or condition.a.dtype.lanes != 1 or not condition.a.dtype.is_integer:
            return []
        simplifier = self._simplifier
        d = simplifier.to_sum(condition.a).add(simplifier.to_sum(condition.b), -1)
        if kind is LT:
            d.const += 1
            return [d]
        if kind is LE:
            return [d]
        negated = d.scaled(-1)
        if kind is GT:
            negated.const += 1
            return [negated]
        if kind is GE:
            return [negated]
        return [d, negated]

    def _tighten(self, fact: Sum) -> None:
        """Record a fact `c*v + k <= 0` on one variable as a limit on v."""
        if fact.term_count() != 1:
            return
        coef, mono = next(iter(fact.items()))
        if len(mono) != 1 or mono[0][2] != 1 or not isinstance(mono[0][1], Var):
            return
        var = mono[0][1]
        lo, hi = self._var_limits.get(var, dtype_interval(var.dtype))
        if coef > 0:
            hi = min(hi, (-fact.const) // coef)
        else:
            lo = max(lo, -((-fact.const) // -coef))  # v >= ceil(k / |c|)
        self._var_limits[var] = (lo, hi)

    def _reset_caches(self) -> None:
        self._simplify_cache: dict[PrimExpr, PrimExpr] = {}
        self._nonpos_cache: dict = {}
        self._var_interval_cache: dict[Var, Interval] = {}
        self._in_progress: set[Var] = set()
        self._bounds = Intervals(self._var_interval)

    # ---------------------------------------------------------------- public queries
    def simplify(self, expr: "PrimExpr | int") -> PrimExpr:
        """An equal, simpler expression under the facts in force."""
        return self._simplifier.simplify(convert(expr))

    def can_prove(self, condition: "PrimExpr | bool") -> bool:
        """True only when the fast path (simplifier and bounds, no Z3) shows condition always holds."""
        if isinstance(condition, bool):
            return condition
        result = self.simplify(condition)
        return isinstance(result, IntImm) and result.value != 0

    def const_int_bound(self, expr: "PrimExpr | int") -> tuple[int | None, int | None]:
        """(lo, hi) with lo <= expr <= hi; None on a side that is unbounded (its dtype's extreme)."""
        expr = convert(expr)
        lo, hi = self._bounds.bound(self.simplify(expr))
        full_lo, full_hi = dtype_interval(expr.dtype)
        return (None if lo <= full_lo else lo, None if hi >= full_hi else hi)

    def prove(self, condition: PrimExpr, timeout_ms: int | None = None):
        """A ProofResult for condition under this analyzer's ranges and constraints (Z3 if needed)."""
        from .prove import prove

        return prove(condition, assumptions=self.assumption_exprs(), timeout_ms=timeout_ms, analyzer=self)

    def assumption_exprs(self) -> list[PrimExpr]:
        """Every fact in force as a boolean expression: ranges first, then constraints."""
        out: list[PrimExpr] = []
        for var, rng in self.ranges.items():
            out.append(rng.min <= var if rng.min.dtype == var.dtype else _cast_compare(rng.min, var, LE))
            upper = rng.min + rng.extent
            out.append(var < upper if upper.dtype == var.dtype else _cast_compare(var, upper, LT))
        out.extend(self.constraints)
        return out

    # ---------------------------------------------------------------- internals used by the simplifier
    def _var_interval(self, var: Var) -> Interval:
        cached = self._var_interval_cache.get(var)
        if cached is not None:
            return cached
        lo, hi = dtype_interval(var.dtype)
        if isinstance(var, SizeVar):
            lo = max(lo, 0)
        rng = self.ranges.get(var)
        if rng is not None and var not in self._in_progress:
            self._in_progress.add(var)
            try:
                range_lo = self._bounds.bound(rng.min)[0]
                range_hi = self._sum_interval(_raw_sum(rng.min).add(_raw_sum(rng.extent)))[1] - 1
            finally:
                self._in_progress.discard(var)
            lo, hi = max(lo, range_lo), min(hi, range_hi)
        limit = self._var_limits.get(var)
        if limit is not None:
            lo, hi = max(lo, limit[0]), min(hi, limit[1])
        if lo > hi:  # no value at all (an empty loop, contradictory facts): any answer holds
            hi = lo
        self._var_interval_cache[var] = (lo, hi)
        return (lo, hi)

    def _sum_interval(self, total: Sum) -> Interval:
        lo = hi = total.const
        for coef, mono in total.items():
            interval = None
            for _, atom, power in mono:
                atom_interval = self._bounds.bound(atom)
                if power == 2:
                    factor = square_interval(atom_interval)
                else:
                    factor = atom_interval
                    for _ in range(power - 1):
                        factor = mul_interval(factor, atom_interval)
                interval = factor if interval is None else mul_interval(interval, factor)
            assert interval is not None
            scaled = mul_interval(interval, (coef, coef))
            lo += scaled[0]
            hi += scaled[1]
        return (lo, hi)

    def _provable_nonpos(self, total: Sum) -> bool:
        """Whether total <= 0 follows from bounds, facts, or symbolic range substitution."""
        key = (frozenset((k, c) for k, (c, _) in total.terms.items()), total.const)
        cached = self._nonpos_cache.get(key)
        if cached is not None:
            return cached
        result = self._nonpos(total)
        self._nonpos_cache[key] = result
        return result

    def _nonpos(self, total: Sum) -> bool:
        if self._sum_interval(total)[1] <= 0:
            return True
        if self._symbolic_upper(total) <= 0:
            return True
        for fact in self._facts:
            if not any(key in total.terms for key in fact.terms):
                continue  # nothing cancels: total - fact is no easier than total itself
            for scale in _fact_scales(total, fact):
                rest = total.copy().add(fact, -scale)  # total = scale*fact + rest <= rest
                if self._sum_interval(rest)[1] <= 0 or self._symbolic_upper(rest) <= 0:
                    return True
        return False

    def _symbolic_upper(self, total: Sum) -> int:
        """An upper bound of total after replacing loop variables by the ends of their ranges.

        A variable v can be replaced when total is `C*v + rest` with v in neither C nor rest (v may
        sit in several monomials: `i*m + j - n*m` has C = m) and C's sign is known: then the
        largest value is at v's upper end if C >= 0, at its lower end if C <= 0.  Variables whose
        ranges mention others go first (j in [0, i) before i), so every step stays exact.
        """
        current = total.copy()
        substituted = False
        for _ in range(_SYMBOLIC_STEPS):
            choice = self._substitutable(current)
            if choice is None:
                break
            var, coefficient, terms, positive = choice
            rng = self.ranges[var]
            end = _raw_sum(rng.min)
            if positive:
                end.add(_raw_sum(rng.extent))
                end.const -= 1
            for coef, mono in terms:
                current.add_term(-coef, mono)
            current.add(coefficient.mul(end))
            substituted = True
        if not substituted:
            return self._sum_interval(total)[1]
        return self._sum_interval(current)[1]

    def _substitutable(self, current: Sum):
        """(var, its coefficient C, the terms holding it, C >= 0) for the next variable to replace."""
        direct: dict[Var, list] = {}   # var -> terms where it is a direct factor of power 1
        inside: set[Var] = set()       # vars inside atoms, or with a power above 1
        for coef, mono in current.items():
            for _, atom, power in mono:
                if isinstance(atom, Var) and power == 1:
                    direct.setdefault(atom, []).append((coef, mono))
                else:
                    inside.update(_vars_of(atom))
        referenced: set[Var] = set()
        for var in set(direct) | inside:
            rng = self.ranges.get(var)
            if rng is not None:
                referenced.update(_vars_of(rng.min))
                referenced.update(_vars_of(rng.extent))
        for var, terms in direct.items():
            if var not in self.ranges or var in inside or var in referenced:
                continue
            coefficient = Sum(current.dtype)
            for coef, mono in terms:
                coefficient.add_term(coef, tuple(item for item in mono if item[1] is not var))
            if any(var in _vars_of(atom) for _, mono in coefficient.items() for _, atom, _ in mono):
                continue
            lo, hi = self._sum_interval(coefficient)
            if lo < 0 < hi or (lo == 0 and hi == 0):
                continue
            rng = self.ranges[var]
            symbolic = not (isinstance(rng.min, IntImm) and isinstance(rng.extent, IntImm))
            if symbolic or not coefficient.is_const():  # else intervals know as much
                return var, coefficient, terms, lo >= 0
        return None


def _raw_sum(expr: PrimExpr) -> Sum:
    """The canonical sum of expr with its non-arithmetic parts taken as they are (no simplifying).

    Range ends are turned into sums while the simplifier may be busy with them, so they must not
    go back through it.
    """
    cached = _RAW_SUMS.get(expr)
    if cached is None:
        if len(_RAW_SUMS) > 50_000:
            _RAW_SUMS.clear()
        cached = _RAW_SUMS[expr] = to_sum(expr, Sum.atom)
    return cached.copy()


# expr -> its raw canonical sum; keyed by the (immutable) expression object, which the dict keeps alive
_RAW_SUMS: dict[PrimExpr, Sum] = {}


def _fact_scales(total: Sum, fact: Sum) -> list[int]:
    """Positive multiples k for which total - k*fact cancels a term of total (1 always tried)."""
    scales = [1]
    for key, (coef, _) in fact.terms.items():
        entry = total.terms.get(key)
        if entry is not None and entry[0] % coef == 0 and entry[0] // coef > 1:
            scale = entry[0] // coef
            if scale not in scales:
                scales.append(scale)
    return scales


_VARS_CACHE: dict[PrimExpr, frozenset] = {}


def _vars_of(expr: PrimExpr) -> frozenset:
    cached = _VARS_CACHE.get(expr)
    if cached is None:
        if len(_VARS_CACHE) > 100_000:
            _VARS_CACHE.clear()
        cached = frozenset(free_vars(expr)) if not isinstance(expr, Var) else frozenset((expr,))
        _VARS_CACHE[expr] = cached
    return cached


def _cast_compare(a: PrimExpr, b: PrimExpr, kind) -> PrimExpr:
    wide = a.dtype if a.dtype.bits >= b.dtype.bits else b.dtype
    return kind(a.astype(wide), b.astype(wide))
