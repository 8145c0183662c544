"""The Analyzer's fast queries: simplify under ranges and facts, can_prove, const_int_bound."""
from refcomp.ast import IntImm, Range, SizeVar, Var, max_, min_, structural_equal
from refcomp.shape import Analyzer
from refcomp.shape.render import render


def _tiled():
    i, j, n = Var("i"), Var("j"), SizeVar("n")
    ana = Analyzer()
    ana.bind(i, Range(IntImm(0), n))
    ana.bind(j, (0, 32))
    return ana, i, j, n


def test_split_index_recovers_outer_and_inner():
    ana, i, j, _ = _tiled()
    assert ana.simplify((i * 32 + j) // 32) is i
    assert ana.simplify((i * 32 + j) % 32) is j


def test_fuse_identity_folds_back():
    ana, i, j, _ = _tiled()
    fused = i * 32 + j
    assert render(ana.simplify(fused // 32 * 32 + fused % 32)) == "i*32 + j"


def test_like_terms_merge_and_cancel():
    ana, i, j, _ = _tiled()
    assert render(ana.simplify(i * 4 + 3 - i * 4 + j * 2 - j)) == "j + 3"


def test_min_max_decided_by_ranges():
    ana, i, j, n = _tiled()
    assert ana.simplify(min_(j, 40)) is j
    assert ana.simplify(max_(i, n)) is n


def test_can_prove_uses_symbolic_ranges():
    ana, i, j, n = _tiled()
    assert ana.can_prove(i < n)
    assert ana.can_prove(i * 32 + j < n * 32)
    assert not ana.can_prove(i * 32 + j < n)
    with ana.constraint(i * 32 + j < n):
        assert ana.can_prove(i * 32 + j < n + 1)
    assert not ana.can_prove(i * 32 + j < n + 1)  # the constraint is gone


def test_const_int_bound():
    ana, i, j, _ = _tiled()
    assert ana.const_int_bound(j * 4 + 1) == (1, 125)
    assert ana.const_int_bound(i) == (0, 2**31 - 2)  # i < n <= int32 max
    assert ana.const_int_bound(Var("x")) == (None, None)


def test_unchanged_expression_is_returned_itself():
    ana, i, j, n = _tiled()
    expr = i * 32 + j
    assert ana.simplify(expr) is expr
    cond = i * 32 + j < n
    assert structural_equal(ana.simplify(cond), cond)
