"""The simplifier's rules one by one: the expected form, and Z3's word that it equals the input."""
from __future__ import annotations

import pytest

from refcomp.ast import Let, Range, IntImm, SizeVar, Var, max_, min_, select, truncdiv, truncmod
from refcomp.shape import Analyzer, prove
from refcomp.shape.render import render

i, j, x, y, n, m, k = Var("i"), Var("j"), Var("x"), Var("y"), SizeVar("n"), SizeVar("m"), Var("k")
RANGES = {i: Range(IntImm(0), n), j: Range(IntImm(0), IntImm(32)), k: Range(IntImm(0), m)}

RULES = [
    # canonical sums
    (lambda: x * 4 + 3 - x * 4 + y * 2 - y, "y + 3"),
    (lambda: (x + 1) * (x - 1), "x*x - 1"),
    (lambda: x - (x - 3), "3"),
    (lambda: 0 - x, "0 - x"),
    # floordiv / floormod with bounds
    (lambda: (i * 32 + j) // 32, "i"),
    (lambda: (i * 32 + j) % 32, "j"),
    (lambda: (i * 32 + j) // 32 * 32 + (i * 32 + j) % 32, "i*32 + j"),
    (lambda: (j + 40) // 32, "(j + 8) // 32 + 1"),
    (lambda: (x * 8 + 4) // 16, "x // 2"),
    (lambda: (x * 6) % 4, "x*3 % 2*2"),
    (lambda: x // 4 // 8, "x // 32"),
    (lambda: x % 32 % 8, "x % 8"),
    (lambda: (0 - x) // -4, "x // 4"),
    (lambda: x % 1, "0"),
    (lambda: i // n, "0"),
    (lambda: j % 33, "j"),
    (lambda: truncdiv(i * 32 + j, 32), "i"),
    # symbolic divisors: flattened and fused indices
    (lambda: (i * m + k) // m, "i"),
    (lambda: (i * m + k) % m, "k"),
    (lambda: (i * m + k + m) // m, "i + 1"),
    (lambda: (x // m) * m + x % m, "x"),
    (lambda: k // m, "0"),
    (lambda: truncmod(j + 64, 32), "j"),
    # min / max
    (lambda: min_(j, 40), "j"),
    (lambda: max_(i, n), "n"),
    (lambda: min_(x + 2, x + 5), "x + 2"),
    (lambda: max_(x, x), "x"),
    # comparisons: decided, normalised, divided by the common factor
    (lambda: i + 1 <= n, "True"),
    (lambda: i < n - 1, "i + 1 < n"),
    (lambda: 2 * x < 2 * n - 3, "x + 1 < n"),
    (lambda: x * 4 < 6, "x < 2"),
    (lambda: x * 2 + 1 == 4, "False"),
    # logic
    (lambda: (x < n) & (x < n + 4), "x < n"),
    (lambda: (x < 3) & (x > 5), "False"),
    (lambda: (x < 3) | (x < 5), "x < 5"),
    (lambda: (x < n) | (x >= n), "True"),
    (lambda: ~(x < n), "n <= x"),  # > and >= come out as < and <=
    (lambda: n > x * 2, "x*2 < n"),
    # select
    (lambda: select(j < 32, x, y), "x"),
    (lambda: select(x < 3, min_(x, 3), 7), "select(x < 3, x, 7)"),
    # let: the body knows the variable's value
    (lambda: Let(y, j * 4, select(y < 128, y + 1, IntImm(0))), "(let y = j*4 in y + 1)"),
]


def _analyzer() -> Analyzer:
    ana = Analyzer()
    for var, rng in RANGES.items():
        ana.bind(var, rng)
    return ana


@pytest.mark.parametrize("build, expected", RULES, ids=[text for _, text in RULES])
def test_rule(build, expected):
    expr = build()
    simplified = _analyzer().simplify(expr)
    assert render(simplified) == expected
    facts = [IntImm(0) <= i, i < n, IntImm(0) <= j, j < IntImm(32), IntImm(0) <= k, k < m]
    same = prove(simplified == expr, facts, use_fast_path=False)
    assert same.proved, same


def test_simplify_keeps_unchanged_nodes_and_caches():
    ana = _analyzer()
    expr = i * 32 + j
    assert ana.simplify(expr) is expr
    first = ana.simplify((i * 32 + j) // 32)
    assert ana.simplify((i * 32 + j) // 32) is first or render(first) == "i"


def test_constraint_scope_is_undone():
    ana = Analyzer()
    with ana.constraint(x < 10):
        assert ana.can_prove(x < 11)
        assert ana.const_int_bound(x) == (None, 9)
    assert not ana.can_prove(x < 11)
    assert ana.const_int_bound(x) == (None, None)


def test_bound_scope_restores_the_previous_range():
    ana = Analyzer()
    ana.bind(x, (0, 4))
    with ana.bound_scope(x, (0, 100)):
        assert ana.const_int_bound(x) == (0, 99)
    assert ana.const_int_bound(x) == (0, 3)
