"""Interval analysis: every value an expression takes lies inside its const_int_bound."""
from __future__ import annotations

from hypothesis import given, strategies as st

from refcomp.ast import IntImm, Range
from refcomp.shape import Analyzer, EvaluationError, evaluate
from refcomp.shape.bounds import dtype_interval
from refcomp.shape.render import render

from shape_strategies import RANGES, assignments, int_exprs


@given(int_exprs, st.lists(assignments(), min_size=8, max_size=8))
def test_bound_contains_every_sampled_value(expr, envs):
    ana = Analyzer()
    for var, (lo, ext) in RANGES.items():
        ana.bind(var, Range(IntImm(lo), IntImm(ext)))
    lo, hi = ana.const_int_bound(expr)
    for env in envs:
        try:
            value = evaluate(expr, env)
        except (EvaluationError, ZeroDivisionError):
            continue
        assert (lo is None or lo <= value) and (hi is None or value <= hi), (render(expr), env, lo, hi)


def test_dtype_intervals():
    from refcomp.ast import dtype

    assert dtype_interval(dtype("int8")) == (-128, 127)
    assert dtype_interval(dtype("uint16")) == (0, 65535)
    assert dtype_interval(dtype("bool")) == (0, 1)
