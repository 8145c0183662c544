"""The one scalar evaluator: floor vs trunc, the one division-by-zero rule, casts, wrapping, laziness,
arrays of points."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from refcomp.ast import (
    Call, Cast, FloorDiv, IntImm, Let, Max, Min, Not, Select, Var, floordiv, floormod, truncdiv, truncmod,
)
from refcomp.shape import EvaluationError, UnboundVariable, ZeroDivisionFailure, evaluate
from refcomp.shape.evaluate import ZERO_DIVISION, trunc_div, trunc_mod
from refcomp.ast import dtype

x, y = Var("x"), Var("y")


@pytest.mark.parametrize("a, b", [(7, 2), (-7, 2), (7, -2), (-7, -2), (0, 3), (6, 3)])
def test_floor_and_trunc_division(a, b):
    env = {x: a, y: b}
    assert evaluate(floordiv(x, y), env) == a // b and evaluate(floormod(x, y), env) == a % b
    q = int(a / b)  # Python float division truncated: C's rule for these small values
    assert evaluate(truncdiv(x, y), env) == q == trunc_div(a, b)
    assert evaluate(truncmod(x, y), env) == a - b * q == trunc_mod(a, b)


def test_division_by_zero_has_no_value():
    with pytest.raises(EvaluationError):
        evaluate(floordiv(x, y), {x: 1, y: 0})


def test_casts_wrap_and_arithmetic_wraps_only_when_asked():
    assert evaluate(Cast("int8", x), {x: 200}) == -56
    assert evaluate(Cast("uint8", x), {x: -1}) == 255
    assert dtype("int32").wrap(2 ** 31) == -(2 ** 31)
    big = Var("b", "int8")
    assert evaluate(big + IntImm(1, "int8"), {big: 127}) == 128
    assert evaluate(big + IntImm(1, "int8"), {big: 127}, wrap=True) == -128


def test_if_then_else_is_lazy_and_select_is_not():
    lazy = Call("if_then_else", (y != 0, floordiv(x, y), IntImm(0)), "int32")
    assert evaluate(lazy, {x: 5, y: 0}) == 0
    with pytest.raises(EvaluationError):
        evaluate(Select(y != 0, floordiv(x, y), IntImm(0)), {x: 5, y: 0})


def test_let_and_missing_variables():
    v = Var("v")
    assert evaluate(Let(v, x + 1, v * v), {x: 2}) == 9
    with pytest.raises(EvaluationError, match="no value for variable x"):
        evaluate(x + 1, {})


# ----------------------------------------------------------------------------- the one division rule

i64 = Var("a", "int64"), Var("b", "int64")
WIDE = st.integers(-(2 ** 70), 2 ** 70)
DIVISIONS = {
    "floordiv": (floordiv, lambda a, b: a // b),
    "floormod": (floormod, lambda a, b: a % b),
    # C's / and % on exact integers: numpy's fmod and trunc agree for int64 values
    "truncdiv": (truncdiv, lambda a, b: int(np.trunc(np.float64(a) / np.float64(b)))
                 if abs(a) < 2 ** 50 and abs(b) < 2 ** 50 else None),
    "truncmod": (truncmod, lambda a, b: int(np.fmod(np.int64(a), np.int64(b)))
                 if abs(a) < 2 ** 62 and abs(b) < 2 ** 62 else None),
}


@pytest.mark.parametrize("name", DIVISIONS)
@given(a=WIDE, b=WIDE.filter(lambda v: v != 0))
def test_division_rules_match_python_and_numpy(name, a, b):
    build, reference = DIVISIONS[name]
    x, y = i64
    got = evaluate(build(x, y), {x: a, y: b})
    want = reference(a, b)
    if want is not None:
        assert got == want
    # the defining identities hold exactly for every size
    q_floor, q_trunc = evaluate(floordiv(x, y), {x: a, y: b}), evaluate(truncdiv(x, y), {x: a, y: b})
    assert evaluate(floormod(x, y), {x: a, y: b}) == a - b * q_floor
    assert evaluate(truncmod(x, y), {x: a, y: b}) == a - b * q_trunc
    assert abs(q_trunc) == abs(a) // abs(b)


@pytest.mark.parametrize("name", DIVISIONS)
@given(a=WIDE)
def test_every_division_by_zero_is_one_named_error(name, a):
    build, _ = DIVISIONS[name]
    x, y = i64
    with pytest.raises(ZeroDivisionFailure, match=f"^{ZERO_DIVISION}$"):
        evaluate(build(x, y), {x: a, y: 0})
    with pytest.raises(ZeroDivisionFailure):  # also under wrap-around, and inside a let
        evaluate(Let(Var("t", "int64"), build(x, y), x), {x: a, y: 0}, wrap=True)
    assert issubclass(ZeroDivisionFailure, EvaluationError)


@pytest.mark.parametrize("dtype_name", ["int8", "int32", "int64"])
def test_minimum_over_minus_one_wraps_only_when_asked(dtype_name):
    t = dtype(dtype_name)
    x, y = Var("x", dtype_name), Var("y", dtype_name)
    low = t.min_value()
    assert evaluate(floordiv(x, y), {x: low, y: -1}) == -low
    assert evaluate(floordiv(x, y), {x: low, y: -1}, wrap=True) == low
    assert evaluate(truncdiv(x, y), {x: low, y: -1}, wrap=True) == low
    assert evaluate(floormod(x, y), {x: low, y: -1}, wrap=True) == 0


@given(a=st.integers(-1000, 1000), b=st.integers(-1000, 1000), c=st.booleans())
def test_min_max_select_and_casts(a, b, c):
    x, y = Var("x"), Var("y")
    flag = Var("c", "bool")
    env = {x: a, y: b, flag: c}
    assert evaluate(Min(x, y), env) == min(a, b) and evaluate(Max(x, y), env) == max(a, b)
    assert evaluate(Select(flag, x, y), env) == (a if c else b)
    assert evaluate(Not(flag), env) == (not c)
    assert evaluate(Cast("int8", x), env) == int(np.array(a).astype(np.int8))
    assert evaluate(Cast("uint16", x), env) == int(np.array(a).astype(np.uint16))
    assert evaluate(Cast("bool", x), env) == (a != 0)


def test_float_division_is_ieee():
    f, g = Var("f", "float64"), Var("g", "float64")
    assert evaluate(f / g, {f: 1.0, g: 0.0}) == float("inf")
    assert evaluate(f / g, {f: -1.0, g: 0.0}) == float("-inf")
    assert evaluate(f / g, {f: 1.0, g: -0.0}) == float("-inf")
    assert np.isnan(evaluate(f / g, {f: 0.0, g: 0.0}))


def test_unbound_variables_name_the_variable():
    with pytest.raises(UnboundVariable) as info:
        evaluate(floordiv(x, y), {x: 3})
    assert info.value.var is y


@given(st.lists(st.tuples(st.integers(-50, 50), st.integers(-50, 50)), min_size=1, max_size=30))
def test_arrays_of_points_agree_with_one_point_at_a_time(points):
    """The batch form (numpy arrays of points) gives each point's scalar value."""
    a_values = np.array([p[0] for p in points], np.int64)
    b_values = np.array([p[1] for p in points], np.int64)
    exprs = [floordiv(x, y + 100), floormod(x * 3, y - 60), truncdiv(x - 7, y + 51), truncmod(x, y - 51),
             Select(x < y, Min(x, y), Max(x, IntImm(2))), Cast("int8", x * 5), (x < y) & (y > 0) | (x == 3)]
    for expr in exprs:
        batch = np.broadcast_to(evaluate(expr, {x: a_values, y: b_values}), a_values.shape)
        single = [evaluate(expr, {x: int(a), y: int(b)}) for a, b in zip(a_values, b_values)]
        assert [int(v) for v in batch] == [int(v) for v in single], expr
    if (b_values == 0).any():
        with pytest.raises(ZeroDivisionFailure):
            evaluate(FloorDiv(x, y), {x: a_values, y: b_values})
