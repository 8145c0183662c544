"""parallel, vectorize, unroll, bind, annotate, unannotate."""
import pytest

from refcomp.ast import Block, BlockRealize, Buffer, BufferRegion, BufferStore, For, IterVar, Range, Var, seq
from refcomp.ast.stmt import true
from refcomp.loops.schedule import Schedule

from . import programs as P
from .helpers import assert_rejected, assert_script, check_numbers, check_replay


def test_parallel_vectorize_unroll_annotate(rng):
    before = P.matmul(8, 6, 4)
    sch = Schedule(before)
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.parallel(i)
    sch.vectorize(j)
    sch.unroll(k)
    sch.annotate(sch.get_block("C"), "meta", "x")
    sch.annotate(i, "pragma_auto_unroll", 16)
    assert_script(sch.func, '''
        @T.prim_func
        def main(A: T.Buffer((8, 4), "float32"), B: T.Buffer((4, 6), "float32"), C: T.Buffer((8, 6), "float32")):
            with T.block("root"):
                T.reads()
                T.writes()
                for i in T.parallel(8, annotations={"pragma_auto_unroll": 16}):
                    for j in T.vectorized(6):
                        for r0 in T.unroll(4):
                            with T.block("C"):
                                vi, vj, vr0 = T.axis.remap("SSR", [i, j, r0])
                                T.reads(C[vi, vj], A[vi, vr0], B[vr0, vj])
                                T.writes(C[vi, vj])
                                T.block_attr({"meta": "x"})
                                with T.init():
                                    C[vi, vj] = T.float32(0.0)
                                C[vi, vj] = C[vi, vj] + A[vi, vr0] * B[vr0, vj]
    ''')
    check_numbers(before, sch.func, rng, lambda a, b, c: {2: a @ b})
    check_replay(sch, before)


def test_unannotate_restores(rng):
    before = P.elementwise()
    sch = Schedule(before)
    i, _ = sch.get_loops(sch.get_block("B"))
    sch.annotate(i, "k", 1.5)
    sch.unannotate(i, "k")
    assert dict(sch.get(i).annotations) == {}
    assert_rejected(sch, lambda: sch.unannotate(i, "k"), "unannotate: i has no annotation 'k'")
    assert_rejected(sch, lambda: sch.annotate(i, "k", [1]), "annotate: ann_val: expected a str, int, float or bool")
    check_replay(sch, before)


def test_annotate_with_sampled_value():
    before = P.elementwise()
    sch = Schedule(before, seed=5)
    i, _ = sch.get_loops(sch.get_block("B"))
    v = sch.sample_categorical([0, 16, 64], [0.2, 0.3, 0.5])
    sch.annotate(i, "pragma_auto_unroll_max_step", v)
    assert sch.get(i).annotations["pragma_auto_unroll_max_step"] == v.value
    check_replay(sch, before)


def test_parallel_rejects_reduction_loop():
    sch = Schedule(P.matmul())
    _, _, k = sch.get_loops(sch.get_block("C"))
    assert_rejected(sch, lambda: sch.parallel(k), "parallel: loop r0 carries the reduction of block C")
    assert_rejected(sch, lambda: sch.vectorize(k), "vectorize: loop r0 carries the reduction of block C")
    assert_rejected(sch, lambda: sch.bind(k, "threadIdx.x"), "bind: loop r0 carries the reduction")


def test_parallel_rejects_loop_every_iteration_writes_the_same_place():
    sch = Schedule(P.elementwise(4, 4))
    unit = sch.add_unit_loop(sch.get_block("B"))
    sch.parallel(unit)  # one iteration cannot race with itself
    i, j, _ = sch.get_loops(sch.get_block("B"))
    wide = sch.fuse(i, j)
    sch2 = Schedule(P.row_sum(4, 8))
    i2, k2 = sch2.get_loops(sch2.get_block("B"))
    sch2.reorder(k2, i2)
    assert_rejected(sch2, lambda: sch2.parallel(k2), "parallel: loop r0 carries the reduction of block B")
    assert sch.get(wide).extent.value == 16


def _neighbour_reader():
    """for i: B[i] = A[i]; C[i] = B[(i + 1) % 8]: C reads what another iteration writes."""
    A, B, C = Buffer("A", (8,)), Buffer("B", (8,)), Buffer("C", (8,))
    i = Var("i")
    vb, vc = Var("vb"), Var("vc")
    write_b = BlockRealize((i,), true(), Block("B", (IterVar(vb, Range(0, 8)),), (BufferRegion(A, (Range(vb, 1),)),),
                                              (BufferRegion(B, (Range(vb, 1),)),), BufferStore(B, A[vb], (vb,))))
    nxt = (vc + 1) % 8
    write_c = BlockRealize((i,), true(), Block("C", (IterVar(vc, Range(0, 8)),), (BufferRegion(B, (Range(nxt, 1),)),),
                                              (BufferRegion(C, (Range(vc, 1),)),), BufferStore(C, B[nxt], (vc,))))
    return P.func([A, C], [For(i, 0, 8, "serial", seq(write_b, write_c))], allocs=[B])


def test_parallel_rejects_cross_iteration_dependence():
    sch = Schedule(_neighbour_reader())
    (i,) = sch.get_loops(sch.get_block("B"))
    assert_rejected(sch, lambda: sch.parallel(i), "parallel: block C reads B written by block B in other iterations")


def test_parallel_accepts_same_iteration_dependence(rng):
    before = P.two_elementwise(8, 4)
    sch = Schedule(before)
    i, _ = sch.get_loops(sch.get_block("C"))
    sch.compute_at(sch.get_block("B"), i)
    sch.parallel(i)
    check_numbers(before, sch.func, rng)


def test_vectorize_needs_constant_extent():
    from refcomp import te

    n = te.size_var("n")
    A = te.placeholder((n,), "float32", "A")
    B = te.compute((n,), lambda i: A[i] * 3.0, name="B")
    sch = Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_block("B"))
    assert_rejected(sch, lambda: sch.vectorize(i), "vectorize: loop i needs a constant extent")
    sch.parallel(i)


def test_bind_and_its_rules():
    before = P.elementwise(16, 8)
    sch = Schedule(before)
    i, j = sch.get_loops(sch.get_block("B"))
    assert_rejected(sch, lambda: sch.bind(i, "threadIdx.w"), "bind: thread_axis: expected one of")
    sch.bind(i, "blockIdx.x")
    assert_rejected(sch, lambda: sch.bind(j, "blockIdx.x"), "bind: blockIdx.x is already bound to loop i")
    sch.bind(j, "threadIdx.x")
    assert_rejected(sch, lambda: sch.parallel(i), "parallel: loop i is bound to blockIdx.x")
    assert_script(sch.func, '''
        @T.prim_func
        def main(A: T.Buffer((16, 8), "float32"), B: T.Buffer((16, 8), "float32")):
            with T.block("root"):
                T.reads()
                T.writes()
                for i in T.thread_binding(16, thread="blockIdx.x"):
                    for j in T.thread_binding(8, thread="threadIdx.x"):
                        with T.block("B"):
                            vi, vj = T.axis.remap("SS", [i, j])
                            T.reads(A[vi, vj])
                            T.writes(B[vi, vj])
                            B[vi, vj] = A[vi, vj] * T.float32(2.0)
    ''')
    check_replay(sch, before)


def test_parallel_rejects_loop_the_block_ignores():
    func = P.elementwise(4, 4)
    root = func.body.block
    repeat = For(Var("x"), 0, 2, "serial", root.body)
    func = func.with_(body=func.body.with_(block=root.with_(body=repeat)))
    sch = Schedule(func)
    x, _, _ = sch.get_loops(sch.get_block("B"))
    err = assert_rejected(sch, lambda: sch.parallel(x), "parallel: block B does not depend on loop x: every "
                                                        "iteration would write the same elements")
    assert err.ir is sch.func and err.spot is sch.get(x)


def test_parallel_refuses_recomputed_halo():
    sch = Schedule(P.conv1d(20, 3))
    i, _ = sch.get_loops(sch.get_block("C"))
    outer, _ = sch.split(i, [None, 8])
    sch.compute_at(sch.get_block("P"), outer)
    assert_rejected(sch, lambda: sch.parallel(outer),
                    "parallel: block P writes overlapping parts of its output in different iterations of loop i_0")


def test_compute_at_into_a_parallel_loop_keeps_iterations_independent(rng):
    sch = Schedule(P.conv1d(20, 3))
    i, _ = sch.get_loops(sch.get_block("C"))
    outer, _ = sch.split(i, [None, 8])
    sch.parallel(outer)
    p = sch.get_block("P")
    assert_rejected(sch, lambda: sch.compute_at(p, outer), "compute_at: block P writes overlapping parts of its output")
    before = P.two_elementwise(16, 8)
    sch = Schedule(before)
    i, _ = sch.get_loops(sch.get_block("C"))
    outer, _ = sch.split(i, [None, 4])
    sch.parallel(outer)
    sch.compute_at(sch.get_block("B"), outer)  # disjoint tiles: fine
    check_numbers(before, sch.func, rng)


def test_gpu_block_private_scopes(rng):
    before = P.matmul(8, 8, 4)
    sch = Schedule(before)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    sch.bind(j, "blockIdx.x")
    shared = sch.cache_read(c, 1, "global")  # the A operand (reads are C, A, B)
    assert_rejected(sch, lambda: sch.compute_at(shared, j),
                    "compute_at: block A_global does not depend on loop j: every iteration would write")
    sch = Schedule(before)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    sch.bind(j, "blockIdx.x")
    tile = sch.cache_read(c, 1, "shared")
    sch.compute_at(tile, j)  # each GPU block has its own copy of a shared buffer
    check_numbers(before, sch.func, rng, lambda a, b, c: {2: a @ b}, compiled=False)


def test_bind_limits_threads_per_block():
    sch = Schedule(P.elementwise(64, 32))
    i, j = sch.get_loops(sch.get_block("B"))
    sch.bind(j, "threadIdx.x")
    assert_rejected(sch, lambda: sch.bind(i, "threadIdx.y"),
                    "bind: threadIdx.y of extent 64 makes 2048 threads per GPU block; at most 1024")
    sch.bind(i, "blockIdx.x")
