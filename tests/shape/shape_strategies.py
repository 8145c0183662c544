"""Hypothesis strategies for random integer expressions over a few ranged variables."""
from __future__ import annotations

from hypothesis import strategies as st

from refcomp.ast import (
    IntImm, Max, Min, Select, SizeVar, TruncDiv, TruncMod, Var, floordiv, floormod,
)

VARS = (Var("x"), Var("y"), Var("z"), SizeVar("n"))
# each variable's range: (min, extent); small so brute force is exact
RANGES = {VARS[0]: (-6, 13), VARS[1]: (0, 8), VARS[2]: (-3, 5), VARS[3]: (0, 9)}


def leaves():
    return st.one_of(st.sampled_from(VARS), st.integers(-9, 9).map(IntImm))


def _combine(children):
    small_const = st.sampled_from([1, 2, 3, 4, 8, 16, 32, -2, -4]).map(IntImm)
    binary = st.sampled_from(["+", "-", "*", "//", "%", "min", "max", "truncdiv", "truncmod"])

    def build(op, a, b):
        return {
            "+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
            "//": lambda: floordiv(a, b), "%": lambda: floormod(a, b),
            "min": lambda: Min(a, b), "max": lambda: Max(a, b),
            "truncdiv": lambda: TruncDiv(a, b), "truncmod": lambda: TruncMod(a, b),
        }[op]()

    def build_const_div(op, a, c):
        return floordiv(a, c) if op == "//" else floormod(a, c)

    comparison = st.sampled_from(["<", "<=", "=="])

    def build_select(cmp, a, b, t, f):
        cond = {"<": lambda: a < b, "<=": lambda: a <= b, "==": lambda: a == b}[cmp]()
        return Select(cond, t, f)

    return st.one_of(
        st.builds(build, binary, children, children),
        # division by a constant is by far the common case in index expressions
        st.builds(build_const_div, st.sampled_from(["//", "%"]), children, small_const),
        st.builds(build_select, comparison, children, children, children, children),
    )


int_exprs = st.recursive(leaves(), _combine, max_leaves=10)


def conditions():
    """Random comparisons and their conjunctions over int_exprs."""
    cmp = st.sampled_from(["<", "<=", "==", "!=", ">", ">="])

    def build(op, a, b):
        return {"<": lambda: a < b, "<=": lambda: a <= b, "==": lambda: a == b,
                "!=": lambda: a != b, ">": lambda: a > b, ">=": lambda: a >= b}[op]()

    atom = st.builds(build, cmp, int_exprs, int_exprs)
    return st.one_of(atom, st.builds(lambda a, b: a & b, atom, atom), st.builds(lambda a, b: a | b, atom, atom))


def assignments():
    """A value for each variable inside its range."""
    return st.fixed_dictionaries({v: st.integers(lo, lo + ext - 1) for v, (lo, ext) in RANGES.items()})
