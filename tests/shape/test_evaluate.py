"""The exact evaluator that checks every counterexample: floor vs trunc, casts, wrapping, laziness."""
from __future__ import annotations

import pytest

from refcomp.ast import Call, Cast, IntImm, Let, Select, Var, floordiv, floormod, truncdiv, truncmod
from refcomp.shape import EvaluationError, evaluate
from refcomp.shape.evaluate import trunc_div, trunc_mod
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
