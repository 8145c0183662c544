"""Property tests: the simplifier keeps the value of random integer expressions."""
from __future__ import annotations

import itertools

import pytest
import z3
from hypothesis import given, settings, strategies as st

from refcomp.ast import IntImm, Range
from refcomp.shape import Analyzer, EvaluationError, evaluate
from refcomp.shape.render import render
from refcomp.shape.z3_bridge import Encoder

from shape_strategies import RANGES, VARS, assignments, conditions, int_exprs


def _ranged_analyzer() -> Analyzer:
    ana = Analyzer()
    for var, (lo, ext) in RANGES.items():
        ana.bind(var, Range(IntImm(lo), IntImm(ext)))
    return ana


def _value(expr, env):
    try:
        return evaluate(expr, env)
    except (EvaluationError, ZeroDivisionError):
        return None


@given(int_exprs, st.lists(assignments(), min_size=5, max_size=5))
def test_simplified_equals_original_on_random_assignments(expr, envs):
    simplified = _ranged_analyzer().simplify(expr)
    for env in envs:
        expected = _value(expr, env)
        if expected is None:
            continue  # undefined (division by zero): nothing to preserve
        assert evaluate(simplified, env) == expected, (render(expr), render(simplified), env)


@given(int_exprs, assignments())
def test_simplified_without_ranges_equals_original(expr, env):
    simplified = Analyzer().simplify(expr)
    expected = _value(expr, env)
    if expected is not None:
        assert evaluate(simplified, env) == expected, (render(expr), render(simplified), env)


@given(conditions(), st.lists(assignments(), min_size=5, max_size=5))
def test_simplified_condition_keeps_truth(cond, envs):
    simplified = _ranged_analyzer().simplify(cond)
    for env in envs:
        expected = _value(cond, env)
        if expected is not None:
            assert bool(evaluate(simplified, env)) == bool(expected), (render(cond), render(simplified), env)


@settings(max_examples=15)
@given(int_exprs)
def test_z3_finds_no_input_where_simplified_differs(expr):
    """Ask Z3 whether expr != simplified has a solution inside the ranges (where expr is defined)."""
    simplified = _ranged_analyzer().simplify(expr)
    if simplified is expr:
        return
    enc = Encoder()
    solver = z3.Solver()
    solver.set("timeout", 5000)
    for var, (lo, ext) in RANGES.items():
        term = enc.var(var)
        solver.add(term >= lo, term < lo + ext)
    solver.add(enc.encode(expr) != enc.encode(simplified))
    solver.add(*enc.side)
    answer = solver.check()
    if answer == z3.sat:
        model = solver.model()
        env = {v: model.eval(enc.var(v), model_completion=True).as_long() for v in VARS}
        # Z3's div by 0 is arbitrary: only a difference where expr has a value counts
        expected = _value(expr, env)
        assert expected is None or expected == evaluate(simplified, env), (render(expr), render(simplified), env)


def test_bounds_are_sound_on_exhaustive_grid():
    """const_int_bound contains every value on the whole (small) domain."""
    from refcomp.ast import floordiv, floormod, min_, truncdiv, truncmod

    x, y = VARS[0], VARS[1]
    ana = _ranged_analyzer()
    cases = [x * y - 3, floordiv(x, 4) * 4, floormod(x * 3 + y, 5), min_(x, y) - x, truncdiv(x, 3),
             truncmod(x, -3), floordiv(x, y + 1), floormod(x, y - 3), x * x - y]
    grid = list(itertools.product(range(-6, 7), range(0, 8)))
    for expr in cases:
        lo, hi = ana.const_int_bound(expr)
        for xv, yv in grid:
            value = _value(expr, {x: xv, y: yv})
            if value is None:
                continue
            assert (lo is None or lo <= value) and (hi is None or value <= hi), (render(expr), xv, yv, lo, hi)


@given(st.sampled_from(VARS), int_exprs, int_exprs, st.booleans(), st.lists(assignments(), min_size=5, max_size=5))
def test_symbolic_divisor_rules_keep_the_value(divisor, q, r, take_mod, envs):
    """(q*d + r) // d and % d, the shapes the symbolic-divisor rules look for."""
    from refcomp.ast import floordiv, floormod

    expr = (floormod if take_mod else floordiv)(q * divisor + r, divisor)
    simplified = _ranged_analyzer().simplify(expr)
    for env in envs:
        expected = _value(expr, env)
        if expected is not None:
            assert evaluate(simplified, env) == expected, (render(expr), render(simplified), env)
