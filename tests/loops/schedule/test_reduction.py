"""decompose_reduction, rfactor."""
import numpy as np
import pytest

import refcomp

from refcomp.ast import Buffer, min_
from refcomp.loops.schedule import Schedule

from . import programs as P
from .helpers import assert_rejected, assert_script, check_numbers, check_replay


def test_decompose_reduction(rng):
    before = P.row_sum(4, 8)
    sch = Schedule(before)
    b = sch.get_block("B")
    _, k = sch.get_loops(b)
    init = sch.decompose_reduction(b, k)
    assert init.name == "B_init"
    assert_script(sch.func, '''
        @T.prim_func
        def main(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4,), "float32")):
            with T.block("root"):
                T.reads()
                T.writes()
                for i in range(4):
                    with T.block("B_init"):
                        vi_init = T.axis.spatial(4, i)
                        T.reads()
                        T.writes(B[vi_init])
                        B[vi_init] = T.float32(0.0)
                    for r0 in range(8):
                        with T.block("B"):
                            vi, vr0 = T.axis.remap("SR", [i, r0])
                            T.reads(B[vi], A[vi, vr0])
                            T.writes(B[vi])
                            B[vi] = B[vi] + A[vi, vr0]
    ''')
    check_numbers(before, sch.func, rng, lambda a, b: {1: a.sum(axis=1)})
    check_replay(sch, before)


def test_decompose_reduction_above_spatial_loops(rng):
    before = P.matmul(8, 6, 4)
    sch = Schedule(before)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    sch.decompose_reduction(c, i)
    init_loops = sch.get_loops(sch.get_block("C_init"))
    assert [sch.get(l).loop_var.name for l in init_loops] == ["i_init", "j_init"]
    check_numbers(before, sch.func, rng, lambda a, b, c: {2: a @ b})
    check_replay(sch, before)


def test_decompose_reduction_rejections():
    sch = Schedule(P.two_elementwise())
    b = sch.get_block("B")
    i, _ = sch.get_loops(b)
    assert_rejected(sch, lambda: sch.decompose_reduction(b, i), "decompose_reduction: block B is not a reduction block")
    sch = Schedule(P.matmul())
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    sch.reorder(k, i, j)
    assert_rejected(sch, lambda: sch.decompose_reduction(c, j),
                    "decompose_reduction: loop r0 above loop j binds a reduce iter of block C")
    sch3 = Schedule(P.matmul_relu())
    d_loop = sch3.get_loops(sch3.get_block("D"))[0]
    c3 = sch3.get_block("C")
    assert_rejected(sch3, lambda: sch3.decompose_reduction(c3, d_loop), "is not an ancestor of block C")


def test_rfactor(rng):
    before = P.row_sum(4, 8)
    sch = Schedule(before)
    b = sch.get_block("B")
    _, k = sch.get_loops(b)
    _, inner = sch.split(k, [None, 4])
    rf = sch.rfactor(inner, 1)
    assert rf.name == "B_rf"
    assert_script(sch.func, '''
        @T.prim_func
        def main(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4,), "float32")):
            with T.block("root"):
                T.reads()
                T.writes()
                B_rf = T.alloc_buffer((4, 4), "float32")
                for i, r0_0, r0_1 in T.grid(4, 2, 4):
                    with T.block("B_rf"):
                        vi, vr0_0, vr0_1 = T.axis.remap("SRS", [i, r0_0, r0_1])
                        T.reads(B_rf[vi, vr0_1], A[vi, vr0_0 * 4 + vr0_1])
                        T.writes(B_rf[vi, vr0_1])
                        with T.init():
                            B_rf[vi, vr0_1] = T.float32(0.0)
                        B_rf[vi, vr0_1] = B_rf[vi, vr0_1] + A[vi, vr0_0 * 4 + vr0_1]
                for ax0, ax1 in T.grid(4, 4):
                    with T.block("B"):
                        vi_1, vr0_1_1 = T.axis.remap("SR", [ax0, ax1])
                        T.reads(B[vi_1], B_rf[vi_1, vr0_1_1])
                        T.writes(B[vi_1])
                        with T.init():
                            B[vi_1] = T.float32(0.0)
                        B[vi_1] = B[vi_1] + B_rf[vi_1, vr0_1_1]
    ''')
    check_numbers(before, sch.func, rng, lambda a, b: {1: a.sum(axis=1)})
    check_replay(sch, before)


def test_rfactor_makes_the_reduction_parallel(rng):
    before = P.matmul(4, 6, 32)
    sch = Schedule(before)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    ko, ki = sch.split(k, [4, None])
    assert_rejected(sch, lambda: sch.parallel(ko), "carries the reduction")
    sch.rfactor(ko, 0)
    sch.reorder(ko, i, j)
    sch.parallel(ko)
    check_numbers(before, sch.func, rng, lambda a, b, c: {2: a @ b})
    check_replay(sch, before)


def test_rfactor_min_reduction(rng):
    A, B = Buffer("A", (3, 12)), Buffer("B", (3,))
    before = P.func([A, B], [P.stage("B", B, (3,), lambda i, r: A[i, r], reduce=(12,), init=float("inf"),
                                     combine=min_)])
    sch = Schedule(before)
    _, k = sch.get_loops(sch.get_block("B"))
    _, inner = sch.split(k, [None, 3])
    sch.rfactor(inner, -1)
    check_numbers(before, sch.func, rng, lambda a, b: {1: a.min(axis=1)})


def test_rfactor_rejections():
    sch = Schedule(P.matmul())
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    assert_rejected(sch, lambda: sch.rfactor(i, 0), "rfactor: loop i must bind only reduce iters of block C")
    assert_rejected(sch, lambda: sch.rfactor(k, 3), r"rfactor: factor_axis: expected an int in \[-3, 2\], got 3")
    sch.unroll(k)
    assert_rejected(sch, lambda: sch.rfactor(k, 0), "rfactor: loop r0 must be serial, it is unrolled")
    A, B = Buffer("A", (3, 4)), Buffer("B", (3,))
    minus = P.func([A, B], [P.stage("B", B, (3,), lambda i, r: A[i, r], reduce=(4,), init=0.0,
                                    combine=lambda acc, x: acc - x)])
    sch = Schedule(minus)
    _, k = sch.get_loops(sch.get_block("B"))
    assert_rejected(sch, lambda: sch.rfactor(k, 0), r"rfactor: block B: the update is not out = out \+ x")
    sch = Schedule(P.two_elementwise())
    i, _ = sch.get_loops(sch.get_block("B"))
    assert_rejected(sch, lambda: sch.rfactor(i, 0), "rfactor: block B is not a reduction block")


def test_rfactor_takes_symbolic_loops_around_the_factored_one(rng):
    from refcomp import te

    n, m = te.size_var("n", "int64"), te.size_var("m", "int64")
    a = te.placeholder((n, 32), "float32", "A")
    r = te.reduce_axis((0, 32), "r")
    before = te.create_prim_func([a, te.compute((n,), lambda i: te.sum(a[i, r], axis=r), name="B")])
    sch = Schedule(before)
    _, k = sch.get_loops(sch.get_block("B"))
    sch.rfactor(sch.split(k, [None, 16])[1], 0)
    x = rng.standard_normal((5, 32)).astype(np.float32)
    out = np.empty(5, np.float32)
    refcomp.build(sch.func)(x, out)
    np.testing.assert_allclose(out, x.sum(axis=1), rtol=1e-5, atol=1e-5)
    # the factored loop's extent sizes the partials: it must be constant
    a = te.placeholder((4, m), "float32", "A")
    r = te.reduce_axis((0, m), "r")
    sch = Schedule(te.create_prim_func([a, te.compute((4,), lambda i: te.sum(a[i, r], axis=r), name="B")]))
    _, k = sch.get_loops(sch.get_block("B"))
    assert_rejected(sch, lambda: sch.rfactor(k, 0), "rfactor: loop .* needs a constant extent and a zero start")


def test_rfactor_of_the_whole_reduction_loop(rng):
    before = P.row_sum(4, 6)
    sch = Schedule(before)
    _, k = sch.get_loops(sch.get_block("B"))
    rf = sch.rfactor(k, 0)
    assert sch.get(rf).init is None  # one term per partial: a plain copy
    check_numbers(before, sch.func, rng, lambda a, b: {1: a.sum(axis=1)})
    check_replay(sch, before)


@pytest.mark.parametrize("factor, which", [(8, 1), (3, 1), (3, 0), (2, 0)])
def test_rfactor_of_an_imperfect_split(factor, which, rng):
    before = P.row_sum(3, 5)
    sch = Schedule(before)
    _, k = sch.get_loops(sch.get_block("B"))
    pieces = sch.split(k, [None, factor])
    sch.rfactor(pieces[which], 0)
    check_numbers(before, sch.func, rng, lambda a, b: {1: a.sum(axis=1)})
    check_replay(sch, before)


def test_rfactor_keeps_a_non_identity_init(rng):
    A, B = Buffer("A", (3, 8)), Buffer("B", (3,))
    before = P.func([A, B], [P.stage("B", B, (3,), lambda i, r: A[i, r], reduce=(8,), init=5.0)])
    sch = Schedule(before)
    _, k = sch.get_loops(sch.get_block("B"))
    _, inner = sch.split(k, [None, 4])
    sch.rfactor(inner, 0)
    check_numbers(before, sch.func, rng, lambda a, b: {1: a.sum(axis=1) + 5})
