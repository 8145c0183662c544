"""The named legality checks, each with programs that must pass and programs that must fail."""
import pytest

from refcomp.ast import SizeVar, Var
from refcomp.errors import ScheduleError
from refcomp.loops.primitives import legality as L
from refcomp.loops.primitives.affine import constant_difference, int_bounds, linear, relax
from refcomp.loops.primitives.lookup import locate_block

from . import programs as P
from .test_kinds import _neighbour_reader


def _realize(func, name):
    return locate_block(func, name, "test").realize


def test_prove_by_enumeration_gives_a_counterexample():
    i, j = Var("i"), Var("j")
    assert L.prove(i * 4 + j < 16, {i: (0, 3), j: (0, 3)}) == ("proved", None)
    status, example = L.prove(i * 4 + j < 15, {i: (0, 3), j: (0, 3)})
    assert status == "disproved" and example == {"i": 3, "j": 3}


def test_prove_symbolic_goes_to_the_solver_and_unknown_fails_closed():
    n, i = SizeVar("n"), Var("i")
    assert L.prove(i * 0 + n >= 0, {})[0] == "proved"
    func = P.elementwise()
    with pytest.raises(ScheduleError, match="does not hold"):
        L.require_proved(i < 3, {i: (0, 5)}, "demo", "i < 3", func)
    status, _ = L.prove(i * i < n * n + 1, {})  # nonlinear: the solver may or may not settle it
    if status == "unknown":
        with pytest.raises(ScheduleError, match="prover answered unknown"):
            L.require_proved(i * i < n * n + 1, {}, "demo", "i*i < n*n + 1", func)


def test_check_affine_binding():
    func = P.elementwise(4, 4)
    L.check_affine_binding(func, _realize(func, "B"), "demo")
    realize = _realize(func, "B")
    i, j = realize.iter_values
    for good in (i * 4 + j, (i * 4 + j) // 3, (i + j) % 4):
        L.check_affine_binding(func, realize.with_(iter_values=(good, j)), "demo")
    for bad in (i * j, (i // j), (i * i) % 4):
        with pytest.raises(ScheduleError, match="demo: block B: the binding of vi is not affine"):
            L.check_affine_binding(func, realize.with_(iter_values=(bad, j)), "demo")


def test_check_complete_or_reduction():
    func = P.matmul()
    L.check_complete_or_reduction(func, _realize(func, "C"), "demo")
    func = P.two_elementwise()
    L.check_complete_or_reduction(func, _realize(func, "C"), "demo")
    realize = _realize(func, "C")
    no_init = P.row_sum()
    r = _realize(no_init, "B")
    with pytest.raises(ScheduleError, match="has reduce iters but no init"):
        L.check_complete_or_reduction(no_init, r.with_(block=r.block.with_(init=None)), "demo")
    reads_own = realize.with_(block=realize.block.with_(reads=realize.block.reads + realize.block.writes))
    with pytest.raises(ScheduleError, match="reads the buffer it writes but is not a reduction block"):
        L.check_complete_or_reduction(func, reads_own, "demo")


def test_check_no_loop_carried_dependence():
    func = P.matmul()
    i, j, k = locate_block(func, "C", "t").loops
    L.check_no_loop_carried_dependence(func, i, "demo")
    L.check_no_loop_carried_dependence(func, j, "demo")
    with pytest.raises(ScheduleError, match="loop r0 carries the reduction"):
        L.check_no_loop_carried_dependence(func, k, "demo")
    bad = _neighbour_reader()
    (loop,) = locate_block(bad, "B", "t").loops
    with pytest.raises(ScheduleError, match="reads B written by block B in other iterations"):
        L.check_no_loop_carried_dependence(bad, loop, "demo")


def test_check_not_output_block():
    func = P.two_elementwise()
    L.check_not_output_block(func, locate_block(func, "B", "t"), "demo")
    with pytest.raises(ScheduleError, match="block C is an output block"):
        L.check_not_output_block(func, locate_block(func, "C", "t"), "demo")


def test_check_loop_is_plain():
    func = P.elementwise()
    i, j = locate_block(func, "B", "t").loops
    L.check_loop_is_plain(func, i, "demo")
    with pytest.raises(ScheduleError, match="demo: loop i must start at 0"):
        L.check_loop_is_plain(func, i.with_(min=P.const(1)), "demo")


def test_relax_and_int_bounds():
    i, j, o = Var("i"), Var("j"), Var("o")
    low, high = relax(o * 8 + i * 2 + j, {i: (0, 3), j: (0, 1)})
    assert constant_difference(high, low) == 7
    assert constant_difference(low, linear(o * 8)) == 0
    assert relax(o * i, {i: (0, 3)}) is None  # mixes a relaxed and a kept var non-linearly
    assert int_bounds((i * 4 + j) // 3, {i: (0, 3), j: (0, 3)}) == (0, 5)
    assert int_bounds((i * 4 + j) % 16, {i: (0, 3), j: (0, 3)}) == (0, 15)
    assert int_bounds(i // j, {i: (0, 3), j: (0, 3)}) is None


def test_nested_fused_form_rewrites_only_matching_size_var_products():
    """`f // (4 * m)` -> `f // m // 4` and `f % (4 * m) // m` -> `f // m % 4`; a divisor with
    another size var (n is not m, though both are size vars) or a plain var stays as it is."""
    from refcomp.ast import IntImm

    f, v = Var("f", "int64"), Var("v", "int64")
    n, m = SizeVar("n", "int64"), SizeVar("m", "int64")
    four = IntImm(4, "int64")
    assert str(L.nested_fused_form(f // (four * m))) == str(f // m // four)
    assert str(L.nested_fused_form(f % (four * m) // m)) == str(f // m % four)
    for unchanged in (f % (four * n) // m, f // (v * m), f % (four * v) // v, f // four):
        assert str(L.nested_fused_form(unchanged)) == str(unchanged)



def test_nested_fused_form_takes_output_lengths_shown_positive():
    """A pooled output length over size vars is a factor when interval analysis shows it >= 0
    (`(h + 1) // 2`), or when it is the one such factor of the extent of a loop around the
    block (`(h + 1) // 2 - 1`, negative for h = 0, is >= 1 wherever that loop runs); never when
    that extent has two factors that may be negative."""
    from refcomp.ast import For, IntImm
    from refcomp.ast.stmt import Evaluate

    f = Var("f", "int64")
    b, h, w = (SizeVar(n, "int64") for n in "bhw")
    two = IntImm(2, "int64")
    rows, short = (h + 1) // two, (h + 1) // two - 1
    assert str(L.nested_fused_form(f // (two * rows))) == str(f // rows // two)
    unknown = f % (two * short) // short
    assert str(L.nested_fused_form(unknown)) == str(unknown)
    body = Evaluate(IntImm(0, "int32"))
    fused = For(f, 0, b * two * short, "serial", body)
    assert [str(e) for e in L._positive_extent_factors([fused])] == [str(short)]
    assert str(L.nested_fused_form(unknown, L._positive_extent_factors([fused]))) == str(f // short % two)
    both = For(f, 0, short * ((w + 1) // two - 1), "serial", body)
    assert L._positive_extent_factors([both]) == []


def _blockized_tile_writes(step: int):
    """for io in 0..8: one block writing B[(16 io' .. + 15) // 16, 0:16] where io' = step * io, the
    region a blockized 16-wide tile of a copy into a (8, 16) layout declares: v // 16 with
    v = step * io + t for t < 16 inside the block."""
    from refcomp.ast import (Block, BlockRealize, Buffer, BufferRegion, Evaluate, FloorDiv, For, IntImm, IterVar,
                             Range)
    from refcomp.ast.stmt import true

    b = Buffer("B", (8, 16), "float32")
    io, t, vo = Var("io"), Var("t"), Var("vo")
    region = BufferRegion(b, (Range(FloorDiv(vo * 16, IntImm(16, "int32")), 1), Range(0, 16)))
    block = Block("tile", (IterVar(vo, Range(0, 8)),), (), (region,), Evaluate(IntImm(0, "int32")))
    realize = BlockRealize((FloorDiv(io * step + t, IntImm(16, "int32")),), true(), block)
    inner = For(t, 0, 16, "serial", realize)
    return For(io, 0, 8, "serial", inner), realize, region


def test_access_region_resolves_divisions_the_loop_ranges_decide():
    """(16 io + t) // 16 with t < 16 is io: one block per iteration of io (the blockized tile of a
    packing copy, which a parallel loop over io may then run), where relaxing the division as
    written mixes t and io and gives no bound."""
    loop, realize, region = _blockized_tile_writes(16)
    (first, rows) = L.access_region(loop, realize, region)
    assert constant_difference(first[0], linear(loop.loop_var)) == 0 == constant_difference(first[1], first[0])
    assert constant_difference(rows[1], rows[0]) == 15


def test_access_region_keeps_divisions_that_straddle_blocks():
    """(8 io + t) // 16 for t < 16 crosses into the next block for odd io: not one point."""
    loop, realize, region = _blockized_tile_writes(8)
    found = L.access_region(loop, realize, region)
    assert found is None or constant_difference(found[0][1], found[0][0]) != 0
