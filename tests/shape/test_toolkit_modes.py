"""The one expression toolkit in both integer semantics: simplifier, intervals, linear form, keys."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from refcomp.ast import (
    Add, Call, FloatImm, FloorDiv, FloorMod, IntImm, Let, Max, Min, Mul, Range, SizeVar, StringImm, Sub, Var,
    const,
)
from refcomp.shape import Analyzer, EvaluationError, evaluate
from refcomp.shape.bounds import Bounds, Intervals, default_var_interval
from refcomp.shape.canonical import Sum, linear_form, to_sum
from refcomp.shape.keys import expr_key, same_expr
from refcomp.shape.simplify import Simplifier, simplify_expr

from shape_strategies import RANGES, assignments, int_exprs

i8, j8 = Var("i8", "int8"), Var("j8", "int8")


def _value(expr, env, wrap):
    try:
        return evaluate(expr, env, wrap=wrap)
    except (EvaluationError, ZeroDivisionError, ValueError):
        return None  # undefined (a division by zero): nothing to compare


def _wrap_simplifier(ranges) -> Simplifier:
    bounds = Bounds()
    bounds.ranges.update(ranges)
    return Simplifier(wrap=True, bounds=bounds)


# ----------------------------------------------------------------------------- one engine

def test_both_modes_are_the_same_engine():
    assert type(Analyzer()._simplifier) is Simplifier
    assert Simplifier(wrap=True).wrap and not Analyzer()._simplifier.wrap
    with pytest.raises(TypeError, match="needs an Analyzer"):
        Simplifier()


def test_modes_differ_only_where_wrapping_matters():
    i, j = Var("i"), Var("j")
    ana = Analyzer()
    ana.bind(i, Range(0, 2**30 + 1))
    ana.bind(j, Range(0, 4))
    # mathematical integers: i*4 does not overflow by assumption
    assert ana.simplify((i * 4 + j) // 4) is i
    # wrap-around: i*4 may wrap in int32, so the division stays
    assert isinstance(_wrap_simplifier({i: (0, 2**30), j: (0, 3)})((i * 4 + j) // 4), FloorDiv)
    # ... and fires where the interval analysis shows no wrap
    assert _wrap_simplifier({i: (0, 1000), j: (0, 3)})((i * 4 + j) // 4) is i


def test_math_mode_folds_floats_and_casts_like_the_wrap_mode():
    a, b = FloatImm(0.1, "float32"), FloatImm(0.2, "float32")
    for simplify in (Analyzer().simplify, simplify_expr):
        assert simplify(a + b).value == float(np.float32(0.1) + np.float32(0.2))
        assert simplify(Min(a, b)).value == a.value
        x = Var("x", "float32")
        assert simplify(x * 1.0) is x
        assert simplify(const(300).astype("int8")).value == 44


def test_let_binds_the_value_range_in_both_modes():
    i, t = Var("i"), Var("t")
    expr = Let(t, FloorMod(i, const(4)), FloorDiv(t, const(4)))  # t in [0, 3]: t // 4 == 0
    assert simplify_expr(expr).body.value == 0
    assert Analyzer().simplify(expr).body.value == 0


# ----------------------------------------------------------------------------- value properties

_ops = [Add, Sub, Mul, FloorDiv, FloorMod, Min, Max]


def _small_exprs(leaves):
    def build(op, a, b):
        if op in (FloorDiv, FloorMod) and (not isinstance(b, IntImm) or b.value == 0):
            b = IntImm(3, a.dtype)
        return op(a, b)

    return st.recursive(leaves, lambda c: st.tuples(st.sampled_from(_ops), c, c).map(lambda t: build(*t)),
                        max_leaves=8)


_int8_leaf = st.one_of(st.sampled_from([i8, j8]), st.integers(-128, 127).map(lambda v: IntImm(v, "int8")))


@given(expr=_small_exprs(_int8_leaf), vi=st.integers(-128, 127), vj=st.integers(0, 7))
def test_wrap_mode_keeps_the_machine_value_in_a_narrow_type(expr, vi, vj):
    """int8 wraps often: the simplified expression has the same machine value everywhere."""
    result = _wrap_simplifier({j8: (0, 7)})(expr)
    env = {i8: vi, j8: vj}
    expected = _value(expr, env, wrap=True)
    if expected is not None:
        assert evaluate(result, env, wrap=True) == expected, (expr.script(), result.script(), env)


@given(int_exprs, st.lists(assignments(), min_size=4, max_size=4))
def test_wrap_mode_keeps_values_in_ranges_where_nothing_overflows(expr, envs):
    ranges = {v: (lo, lo + ext - 1) for v, (lo, ext) in RANGES.items()}
    result = _wrap_simplifier(ranges)(expr)
    for env in envs:
        expected = _value(expr, env, wrap=True)
        if expected is not None:
            assert evaluate(result, env, wrap=True) == expected, (expr.script(), result.script(), env)


@given(int_exprs, st.lists(assignments(), min_size=4, max_size=4))
def test_intervals_contain_every_value_in_all_readings(expr, envs):
    ranges = {v: (lo, lo + ext - 1) for v, (lo, ext) in RANGES.items()}
    math = Intervals(lambda v: ranges.get(v, default_var_interval(v)))
    wrap = Intervals(lambda v: ranges.get(v, default_var_interval(v)), wrap=True)
    closed = Intervals(ranges.get, closed=True)
    for env in envs:
        value = _value(expr, env, wrap=False)
        if value is None:
            continue
        lo, hi = math.bound(expr)
        assert lo <= value <= hi
        for reading in (wrap, closed):
            interval = reading.of(expr)
            if interval is not None:  # unknown is always allowed
                assert interval[0] <= value <= interval[1]


@given(int_exprs, assignments())
def test_linear_and_polynomial_forms_keep_the_value(expr, env):
    for total in (linear_form(expr), to_sum(expr, Sum.atom)):
        expected = _value(expr, env, wrap=False)
        if expected is None:
            continue
        back = total.to_expr()
        if back is not None:
            assert evaluate(back, env) == expected
        assert evaluate(total.to_expr(wrap=True), env, wrap=True) == _value(expr, env, wrap=True)


@settings(max_examples=15, deadline=None)
@given(_small_exprs(_int8_leaf))
def test_z3_finds_no_int8_input_where_the_wrap_mode_differs(expr):
    from refcomp.shape.prove import prove

    result = _wrap_simplifier({j8: (0, 7)})(expr)
    if result is expr:
        return
    proof = prove(result == expr, (j8 >= 0, j8 <= 7), overflow="wrap", use_fast_path=False, timeout_ms=5000)
    assert proof.status != "disproved", f"{expr.script()} -> {result.script()}: {proof.counterexample}"


# ----------------------------------------------------------------------------- the pieces

def test_closed_intervals_know_only_what_the_ranges_determine():
    i, j, k = Var("i"), Var("j"), Var("k")
    closed = Intervals({i: (0, 3), j: (0, 3)}.get, closed=True)
    assert closed.of((i * 4 + j) // 3) == (0, 5)
    assert closed.of(i // j) is None  # j may be 0
    assert closed.of(i + k) is None  # k has no range
    assert closed.of(FloorMod(k, const(8))) == (0, 7)
    assert Intervals({i: (0, 3)}.get).bound(i + k) == (-(2**31), 2**31 - 1)


def test_wrap_intervals_are_unknown_where_a_value_may_wrap():
    n = SizeVar("n")
    bounds = Bounds()
    assert bounds.of(n) == (0, 2**31 - 1)
    assert bounds.of(n + 1) is None and bounds.of(n * 2) is None
    with bounds.bind(n, (0, 100)):
        assert bounds.of(n * 2 + 1) == (1, 201)
    assert bounds.of(n * 2 + 1) is None  # the binding ended


def test_linear_form_keeps_products_of_non_constants_whole():
    i, j = Var("i"), Var("j")
    form = linear_form((i + 1) * j + i * 4)
    assert [(same_expr(a, (i + 1) * j), c) for a, c in form.linear_terms()][0] == (True, 1)
    assert form.coefficient(i) == 4 and form.const == 0
    assert to_sum((i + 1) * j, Sum.atom).term_count() == 2  # the polynomial reading expands it


def test_wrapped_rendering_writes_machine_coefficients():
    i = Var("i", "int8")
    expr = i * 100 + i * 100
    total = linear_form(expr)  # 200 * i: 200 wraps to -56 in int8
    assert total.to_expr() is None
    assert evaluate(total.to_expr(wrap=True), {i: 3}, wrap=True) == evaluate(expr, {i: 3}, wrap=True)


def test_one_structural_key():
    i = Var("i")
    assert expr_key(i * 2 + 1) == expr_key(i * 2 + 1)
    assert expr_key(Var("i")) != expr_key(i)
    assert expr_key(FloatImm(0.0, "float32")) != expr_key(FloatImm(-0.0, "float32"))
    nan = FloatImm(float("nan"), "float32")
    assert expr_key(nan) == expr_key(FloatImm(float("nan"), "float32"))
    pure = Call("exp", (FloatImm(1.0, "float32"),), "float32")
    assert expr_key(pure) == expr_key(Call("exp", (FloatImm(1.0, "float32"),), "float32"))
    first = Call("call_extern", (StringImm("rand"),), "int32")
    second = Call("call_extern", (StringImm("rand"),), "int32")
    assert expr_key(first) == expr_key(first) and expr_key(first) != expr_key(second)
    assert not same_expr(first + 1, second + 1)
    assert expr_key((i, i + 1)) == (expr_key(i), expr_key(i + 1))
