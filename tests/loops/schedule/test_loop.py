"""split, fuse, reorder, add_unit_loop: golden before/after, numbers, replay, every rejection."""
import numpy as np
import pytest

from refcomp.ast import SizeVar, Buffer
from refcomp.loops.schedule import Schedule

from . import programs as P
from .helpers import assert_rejected, assert_script, check_numbers, check_replay


def _ref_elementwise(a, b):
    return {1: a * 2}


def test_split_inferred_factor(rng):
    before = P.elementwise(16, 8)
    sch = Schedule(before)
    i, _ = sch.get_loops(sch.get_block("B"))
    outer, inner = sch.split(i, [None, 4])
    assert [sch.get(l).extent.value for l in (outer, inner)] == [4, 4]
    assert_script(sch.func, '''
        @T.prim_func
        def main(A: T.Buffer((16, 8), "float32"), B: T.Buffer((16, 8), "float32")):
            with T.block("root"):
                T.reads()
                T.writes()
                for i_0, i_1, j in T.grid(4, 4, 8):
                    with T.block("B"):
                        vi = T.axis.spatial(16, i_0 * 4 + i_1)
                        vj = T.axis.spatial(8, j)
                        T.reads(A[vi, vj])
                        T.writes(B[vi, vj])
                        B[vi, vj] = A[vi, vj] * T.float32(2.0)
    ''')
    check_numbers(before, sch.func, rng, _ref_elementwise)
    check_replay(sch, before)


def test_split_imperfect_adds_predicate(rng):
    before = P.elementwise(10, 8)
    sch = Schedule(before)
    i, _ = sch.get_loops(sch.get_block("B"))
    sch.split(i, [3, 4])
    assert_script(sch.func, '''
        @T.prim_func
        def main(A: T.Buffer((10, 8), "float32"), B: T.Buffer((10, 8), "float32")):
            with T.block("root"):
                T.reads()
                T.writes()
                for i_0, i_1, j in T.grid(3, 4, 8):
                    with T.block("B"):
                        vi = T.axis.spatial(10, i_0 * 4 + i_1)
                        vj = T.axis.spatial(8, j)
                        T.where(i_0 * 4 + i_1 < 10)
                        T.reads(A[vi, vj])
                        T.writes(B[vi, vj])
                        B[vi, vj] = A[vi, vj] * T.float32(2.0)
    ''')
    check_numbers(before, sch.func, rng, _ref_elementwise)
    check_replay(sch, before)


def test_split_three_ways_reduction(rng):
    before = P.matmul(8, 6, 24)
    sch = Schedule(before)
    _, _, k = sch.get_loops(sch.get_block("C"))
    loops = sch.split(k, [2, None, 3])
    assert [sch.get(l).extent.value for l in loops] == [2, 4, 3]
    check_numbers(before, sch.func, rng, lambda a, b, c: {2: a @ b})
    check_replay(sch, before)


def test_split_symbolic_extent(rng):
    from refcomp import te

    n = te.size_var("n")
    A = te.placeholder((n,), "float32", "A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    before = te.create_prim_func([A, B])
    sch = Schedule(before)
    (i,) = sch.get_loops(sch.get_block("B"))
    outer, inner = sch.split(i, [None, 4])
    assert sch.get(inner).extent.value == 4
    assert "T.where" in sch.func.script()
    for size in (1, 7, 8):
        a = rng.standard_normal(size).astype("float32")
        b = np.full(size, np.nan, dtype="float32")
        from refcomp.loops.interpreter import interpret

        interpret(sch.func, a, b)
        np.testing.assert_allclose(b, a + 1, rtol=1e-6)
    check_replay(sch, before)


@pytest.mark.parametrize("factors, message", [
    ([0, 4], r"split: factors: expected positive ints with at most one None, got \[0, 4\]"),
    ([None, None], r"at most one None"),
    ([2.5, None], r"expected positive ints"),
    ([], r"expected positive ints"),
    ([2, 4], r"split: the factors \[2, 4\] multiply to 8, less than the extent 16"),
])
def test_split_rejects_bad_factors(factors, message):
    sch = Schedule(P.elementwise(16, 8))
    i, _ = sch.get_loops(sch.get_block("B"))
    assert_rejected(sch, lambda: sch.split(i, factors), message)


def test_split_rejects_non_serial_and_annotated_loops():
    sch = Schedule(P.elementwise(16, 8))
    i, j = sch.get_loops(sch.get_block("B"))
    sch.parallel(i)
    assert_rejected(sch, lambda: sch.split(i, [None, 4]), "split: loop i is parallel; only serial loops")
    sch.annotate(j, "pragma", 1)
    assert_rejected(sch, lambda: sch.split(j, [None, 4]), r"split: loop j has annotations \['pragma'\]")


def test_split_disable_predication_needs_exact_factors():
    sch = Schedule(P.elementwise(10, 8))
    i, _ = sch.get_loops(sch.get_block("B"))
    assert_rejected(sch, lambda: sch.split(i, [3, 4], disable_predication=True), "disable_predication")


def test_stale_loop_handle_is_rejected():
    sch = Schedule(P.elementwise(16, 8))
    i, _ = sch.get_loops(sch.get_block("B"))
    sch.split(i, [None, 4])
    assert_rejected(sch, lambda: sch.split(i, [None, 2]), "split: loop handle i refers to no loop")


def test_fuse(rng):
    before = P.elementwise(16, 8)
    sch = Schedule(before)
    i, j = sch.get_loops(sch.get_block("B"))
    fused = sch.fuse(i, j)
    assert sch.get(fused).extent.value == 128
    assert_script(sch.func, '''
        @T.prim_func
        def main(A: T.Buffer((16, 8), "float32"), B: T.Buffer((16, 8), "float32")):
            with T.block("root"):
                T.reads()
                T.writes()
                for i_j_fused in range(128):
                    with T.block("B"):
                        vi = T.axis.spatial(16, i_j_fused // 8)
                        vj = T.axis.spatial(8, i_j_fused % 8)
                        T.reads(A[vi, vj])
                        T.writes(B[vi, vj])
                        B[vi, vj] = A[vi, vj] * T.float32(2.0)
    ''')
    check_numbers(before, sch.func, rng, _ref_elementwise)
    check_replay(sch, before)


def test_fuse_three_loops_of_conv(rng):
    before = P.conv2d()
    sch = Schedule(before)
    f, y, x, *_ = sch.get_loops(sch.get_block("O"))
    fused = sch.fuse(f, y, x)
    assert sch.get(fused).extent.value == 4 * 6 * 6
    check_numbers(before, sch.func, rng)
    check_replay(sch, before)


def test_fuse_rejections():
    sch = Schedule(P.two_elementwise())
    i, j = sch.get_loops(sch.get_block("B"))
    i2, _ = sch.get_loops(sch.get_block("C"))
    assert_rejected(sch, lambda: sch.fuse(i), "fuse: expected at least 2 loops, got 1")
    assert_rejected(sch, lambda: sch.fuse(j, i), "fuse: loop i is not the only child of loop j")
    assert_rejected(sch, lambda: sch.fuse(i, i2), "fuse: loop i is not the only child of loop i")
    assert_rejected(sch, lambda: sch.fuse(i, i), "fuse: a loop appears twice")


def test_reorder(rng):
    before = P.elementwise(16, 8)
    sch = Schedule(before)
    i, j = sch.get_loops(sch.get_block("B"))
    sch.reorder(j, i)
    assert_script(sch.func, '''
        @T.prim_func
        def main(A: T.Buffer((16, 8), "float32"), B: T.Buffer((16, 8), "float32")):
            with T.block("root"):
                T.reads()
                T.writes()
                for j, i in T.grid(8, 16):
                    with T.block("B"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        T.reads(A[vi, vj])
                        T.writes(B[vi, vj])
                        B[vi, vj] = A[vi, vj] * T.float32(2.0)
    ''')
    check_numbers(before, sch.func, rng, _ref_elementwise)
    check_replay(sch, before)


def test_reorder_tiles_of_matmul(rng):
    before = P.matmul(12, 8, 16)
    sch = Schedule(before)
    i, j, k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, [None, 4])
    k0, k1 = sch.split(k, [None, 4])
    sch.reorder(i0, j0, k0, i1, k1, j1)
    names = [sch.get(l).loop_var.name for l in sch.get_loops(sch.get_block("C"))]
    assert names == ["i_0", "j_0", "r0_0", "i_1", "r0_1", "j_1"]
    check_numbers(before, sch.func, rng, lambda a, b, c: {2: a @ b})
    check_replay(sch, before)


def test_reorder_rejections():
    sch = Schedule(P.two_elementwise())
    i, j = sch.get_loops(sch.get_block("B"))
    i2, j2 = sch.get_loops(sch.get_block("C"))
    assert_rejected(sch, lambda: sch.reorder(j, j), "reorder: a loop appears more than once")
    assert_rejected(sch, lambda: sch.reorder(i, j2), "reorder: loop .* is not on the same chain")
    sch2 = Schedule(P.matmul_relu())
    c_loops = sch2.get_loops(sch2.get_block("C"))
    sch2.reverse_compute_at(sch2.get_block("D"), c_loops[1])
    assert_rejected(sch2, lambda: sch2.reorder(c_loops[2], c_loops[1]), "reorder: the loops are not a chain")


def test_reorder_rejects_non_affine_binding():
    from refcomp.ast import BlockRealize
    from refcomp.loops.primitives.tree import replace_in_func, walk

    func = P.elementwise(4, 4)
    realize = next(s for s in walk(func.body) if isinstance(s, BlockRealize) and s.block.name == "B")
    i = realize.iter_values[0]
    bad = replace_in_func(func, {id(realize): realize.with_(iter_values=(i * i // 4, realize.iter_values[1]))})
    sch = Schedule(bad)
    li, lj = sch.get_loops(sch.get_block("B"))
    assert_rejected(sch, lambda: sch.reorder(lj, li), "binding of vi is not affine")


def test_add_unit_loop(rng):
    before = P.elementwise(16, 8)
    sch = Schedule(before)
    unit = sch.add_unit_loop(sch.get_block("B"))
    assert sch.get(unit).extent.value == 1
    assert_script(sch.func, '''
        @T.prim_func
        def main(A: T.Buffer((16, 8), "float32"), B: T.Buffer((16, 8), "float32")):
            with T.block("root"):
                T.reads()
                T.writes()
                for i, j, u in T.grid(16, 8, 1):
                    with T.block("B"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        T.reads(A[vi, vj])
                        T.writes(B[vi, vj])
                        B[vi, vj] = A[vi, vj] * T.float32(2.0)
    ''')
    outer = sch.add_unit_loop(sch.get_loops(sch.get_block("B"))[0])
    assert sch.get_loops(sch.get_block("B"))[0].var is outer.var
    check_numbers(before, sch.func, rng, _ref_elementwise)
    check_replay(sch, before)


def test_reorder_over_two_blocks(rng):
    before = P.two_elementwise(8, 4)
    sch = Schedule(before)
    i, j = sch.get_loops(sch.get_block("C"))
    sch.compute_at(sch.get_block("B"), j, preserve_unit_loops=True)
    _, _, unit_i, unit_j = sch.get_loops(sch.get_block("B"))
    sch.reorder(j, i)
    check_numbers(before, sch.func, rng, lambda a, c: {1: a * 2 + 1})
    check_replay(sch, before)


def test_reorder_refuses_when_blocks_feed_each_other_across_iterations():
    from refcomp.ast import Block, BlockRealize, BufferRegion, BufferStore, For, IterVar, Range, Var, seq
    from refcomp.ast.stmt import true

    A, B, C = Buffer("A", (4, 4)), Buffer("B", (4, 4)), Buffer("C", (4, 4))
    i, j = Var("i"), Var("j")
    b0, b1, c0, c1 = Var("b0"), Var("b1"), Var("c0"), Var("c1")
    prev = (c0 + 3) % 4  # C reads the B row of another i
    write_b = BlockRealize((i, j), true(), Block("B", (IterVar(b0, Range(0, 4)), IterVar(b1, Range(0, 4))),
                                                 (BufferRegion(A, (Range(b0, 1), Range(b1, 1))),),
                                                 (BufferRegion(B, (Range(b0, 1), Range(b1, 1))),),
                                                 BufferStore(B, A[b0, b1], (b0, b1))))
    write_c = BlockRealize((i, j), true(), Block("C", (IterVar(c0, Range(0, 4)), IterVar(c1, Range(0, 4))),
                                                 (BufferRegion(B, (Range(prev, 1), Range(c1, 1))),),
                                                 (BufferRegion(C, (Range(c0, 1), Range(c1, 1))),),
                                                 BufferStore(C, B[prev, c1], (c0, c1))))
    func = P.func([A, C], [For(i, 0, 4, "serial", For(j, 0, 4, "serial", seq(write_b, write_c)))], allocs=[B])
    sch = Schedule(func)
    li, lj = sch.get_loops(sch.get_block("B"))
    assert_rejected(sch, lambda: sch.reorder(lj, li),
                    "reorder: block C reads B written by block B in other iterations of loop j")
