"""The affine forms behind blockize and tensorize: floor division and modulo by a constant whose
dividend is a multiple of g plus a tile loop below g keep only the outer part in the atom."""
from __future__ import annotations

import itertools

import pytest

from refcomp.ast import FloorDiv, FloorMod, Var, const
from refcomp.loops.primitives.tensorize_affine import normalize
from refcomp.shape import evaluate


def _vars_in(form):
    return form.vars()


@pytest.mark.parametrize("op", [FloorDiv, FloorMod])
@pytest.mark.parametrize("g,c,extent", [(32, 512, 32), (16, 64, 16), (32, 512, 20), (6, 12, 6)])
def test_a_tile_loop_below_g_leaves_the_atom(op, g, c, extent):
    outer, inner = Var("vo"), Var("j")
    expr = op(outer * const(g) + inner, const(c))
    form = normalize(expr, {inner: (0, extent - 1)})
    if op is FloorDiv:
        assert inner not in _vars_in(form)  # the tile loop is gone: the index does not move
    else:
        assert form.coef(inner) == 1  # g * floormod(vo, c / g) + j
    rewritten = form.to_expr()
    for vo, j in itertools.product(range(0, 3 * c // g + 2), range(extent)):
        env = {outer: vo, inner: j}
        assert evaluate(rewritten, env) == evaluate(expr, env), (vo, j)


def test_nested_division_of_a_blocked_layout():
    """(vo * 32 + j) % 512 // 32 and % 32: the panel within the block and the column."""
    outer, inner = Var("vo"), Var("j")
    j_total = outer * const(32) + inner
    panel = normalize(FloorDiv(FloorMod(j_total, const(512)), const(32)), {inner: (0, 31)})
    column = normalize(FloorMod(FloorMod(j_total, const(512)), const(32)), {inner: (0, 31)})
    assert inner not in panel.vars()
    assert column.key() == normalize(inner).key()


def test_a_part_that_can_reach_g_keeps_the_atom():
    outer, inner = Var("vo"), Var("j")
    form = normalize(FloorDiv(outer * const(32) + inner, const(512)), {inner: (0, 32)})  # j may be 32
    assert inner in form.vars()
