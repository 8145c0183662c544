"""The Z3 encoding matches refcomp's evaluator operator by operator; dumps, time limits, wrapping."""
from __future__ import annotations

import itertools
import os

import pytest
import z3

from refcomp.ast import (
    Cast, IntImm, Max, Min, Select, SizeVar, Var, floordiv, floormod, truncdiv, truncmod,
)
from refcomp.shape import evaluate, prove
from refcomp.shape.prove import clear_cache
from refcomp.shape.z3_bridge import Encoder

a, b = Var("a"), Var("b")
OPERATORS = {
    "floordiv": floordiv(a, b), "floormod": floormod(a, b), "truncdiv": truncdiv(a, b),
    "truncmod": truncmod(a, b), "min": Min(a, b), "max": Max(a, b), "select": Select(a < b, a * b, a - b),
    "mul": a * b, "cast_int8": Cast("int8", a * b), "cast_bool": Cast("int32", Cast("bool", a)),
}


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_each_operator_agrees_with_the_evaluator_on_a_grid(name):
    expr = OPERATORS[name]
    enc = Encoder()
    term = enc.encode(expr)
    for x, y in itertools.product(range(-9, 10), [-7, -3, -2, -1, 1, 2, 3, 7, 100]):
        got = z3.simplify(z3.substitute(term, (enc.var(a), z3.IntVal(x)), (enc.var(b), z3.IntVal(y))))
        assert got.as_long() == evaluate(expr, {a: x, b: y}), (name, x, y)


def test_wrap_mode_models_two_complement_overflow():
    x = Var("x", "int8")
    assert prove(x + IntImm(1, "int8") > x).proved  # exact integers: always true
    wrapped = prove(x + IntImm(1, "int8") > x, overflow="wrap")
    assert wrapped.disproved and wrapped.counterexample == {"x": 127}
    assert evaluate(x + IntImm(1, "int8"), {x: 127}, wrap=True) == -128


def test_size_vars_are_non_negative_and_dtypes_bound_vars():
    n = SizeVar("n")
    assert prove(n >= 0).proved
    assert prove(n <= 2 ** 31 - 1).proved and prove(n.astype("int64") < IntImm(2 ** 31, "int64")).proved
    assert prove(Var("v") >= 0).disproved


def test_timeout_gives_unknown_which_is_not_proved():
    x, y, z = Var("x", "int64"), Var("y", "int64"), Var("z", "int64")
    # a cubic Fermat-style claim Z3 cannot settle in 1 ms
    claim = x * x * x + y * y * y != z * z * z
    result = prove(claim, [x > 0, y > 0, z > 0], timeout_ms=1, use_fast_path=False)
    assert result.unknown and not result and "Z3 gave up" in result.reason


def test_smt_dump_writes_replayable_queries(tmp_path, monkeypatch):
    monkeypatch.setenv("REFCOMP_SMT_DUMP", str(tmp_path))
    clear_cache()
    i, n = Var("i"), SizeVar("n")
    result = prove(i * 4 + 3 < n * 4, [i >= 0, i < n], use_fast_path=False)
    assert result.proved
    (dump,) = list(tmp_path.iterdir())
    text = dump.read_text()
    assert "; refcomp query: prove i*4 + 3 < n*4" in text
    solver = z3.Solver()
    solver.from_string(text)
    assert solver.check() == z3.unsat  # the dumped query says the claim holds


def test_division_by_zero_counterexamples_are_never_reported():
    x, y = Var("x"), Var("y")
    # false only where y == 0 (where the division has no value)
    result = prove((x // y) * y + x % y == x, [x >= 0, y >= 0, y < 5])
    assert not result.disproved
    result = prove(x // y < 3, [x >= 0, x < 20, y > 0, y < 5])
    assert result.disproved and result.counterexample["y"] != 0
    assert evaluate(x // y, result.model) >= 3


def test_cache_answers_the_same_structure_again():
    from refcomp.shape.prove import reset_stats, stats

    clear_cache()
    reset_stats()
    for _ in range(3):
        i, n = Var("i"), SizeVar("n")  # fresh objects each time: still the same query? no: new vars
        prove(i < n, [i >= 0, i < n - 1])
    assert stats()["cached"] == 0  # different variables are different queries
    i, n = Var("i"), SizeVar("n")
    for _ in range(3):
        prove(i * 2 < n * 2, [i >= 0, i < n])
    assert stats()["cached"] == 2
