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
    assert_rejected(sch, lambda: sch.bind(k, "blockIdx.x"), "bind: loop r0 carries the reduction")
    sch.bind(k, "threadIdx.x")  # a cross-thread reduction (tests/emit_cuda/test_cross_thread.py)


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


# ----------------------------------------------------------------------------- fused loops, update blocks

def test_parallel_fused_loop_is_proved_injective(rng):
    before = P.two_elementwise(12, 10)
    sch = Schedule(before)
    c = sch.get_block("C")
    i, j = sch.get_loops(c)
    fused = sch.fuse(i, j)
    outer, _ = sch.split(fused, [None, 8])  # 120 = 15 * 8: vi = (o * 8 + t) // 10, vj = ... % 10
    sch.parallel(outer)
    b = sch.get_block("B")
    bi, bj = sch.get_loops(b)
    sch.parallel(sch.fuse(bi, bj))
    assert_script(sch.func, '''
        @T.prim_func
        def main(A: T.Buffer((12, 10), "float32"), C: T.Buffer((12, 10), "float32")):
            with T.block("root"):
                T.reads()
                T.writes()
                B = T.alloc_buffer((12, 10), "float32")
                for i_j_fused in T.parallel(120):
                    with T.block("B"):
                        vi = T.axis.spatial(12, i_j_fused // 10)
                        vj = T.axis.spatial(10, i_j_fused % 10)
                        T.reads(A[vi, vj])
                        T.writes(B[vi, vj])
                        B[vi, vj] = A[vi, vj] * T.float32(2.0)
                for i_j_fused_0 in T.parallel(15):
                    for i_j_fused_1 in range(8):
                        with T.block("C"):
                            vi_1 = T.axis.spatial(12, (i_j_fused_0 * 8 + i_j_fused_1) // 10)
                            vj_1 = T.axis.spatial(10, (i_j_fused_0 * 8 + i_j_fused_1) % 10)
                            T.reads(B[vi_1, vj_1])
                            T.writes(C[vi_1, vj_1])
                            C[vi_1, vj_1] = B[vi_1, vj_1] + T.float32(1.0)
    ''')
    check_numbers(before, sch.func, rng, lambda a, c: {1: a * 2 + 1})
    check_replay(sch, before)


def test_parallel_fused_loop_too_large_to_enumerate():
    sch = Schedule(P.elementwise(2048, 2048))
    i, j = sch.get_loops(sch.get_block("B"))
    fused = sch.fuse(i, j)
    sch.parallel(fused)  # 2^22 iterations: decided by the proof, not by enumeration
    assert sch.get(fused).kind == "parallel"




def test_parallel_refuses_non_injective_floordiv_binding():
    A, B = Buffer("A", (1 << 22,)), Buffer("B", (1 << 21,))
    f, v = Var("f"), Var("v")
    block = Block("B", (IterVar(v, Range(0, 1 << 21)),), (BufferRegion(A, (Range(v, 1),)),),
                  (BufferRegion(B, (Range(v, 1),)),), BufferStore(B, A[v], (v,)))
    sch = Schedule(P.func([A, B], [For(f, 0, 1 << 22, "serial", BlockRealize((f // 2,), true(), block))]))
    (loop,) = sch.get_loops(sch.get_block("B"))
    error = assert_rejected(sch, lambda: sch.parallel(loop),
                            "parallel: block B writes overlapping parts of its output in different iterations of "
                            "loop f")
    assert error is not None


def test_parallel_update_block_of_decomposed_reduction(rng):
    before = P.matmul(8, 6, 4)
    sch = Schedule(before)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    sch.decompose_reduction(c, k)
    sch.parallel(i)
    sch.vectorize(j)
    assert_script(sch.func, '''
        @T.prim_func
        def main(A: T.Buffer((8, 4), "float32"), B: T.Buffer((4, 6), "float32"), C: T.Buffer((8, 6), "float32")):
            with T.block("root"):
                T.reads()
                T.writes()
                for i in T.parallel(8):
                    for j in T.vectorized(6):
                        with T.block("C_init"):
                            vi_init, vj_init = T.axis.remap("SS", [i, j])
                            T.reads()
                            T.writes(C[vi_init, vj_init])
                            C[vi_init, vj_init] = T.float32(0.0)
                        for r0 in range(4):
                            with T.block("C"):
                                vi, vj, vr0 = T.axis.remap("SSR", [i, j, r0])
                                T.reads(C[vi, vj], A[vi, vr0], B[vr0, vj])
                                T.writes(C[vi, vj])
                                C[vi, vj] = C[vi, vj] + A[vi, vr0] * B[vr0, vj]
    ''')
    check_numbers(before, sch.func, rng, lambda a, b, c: {2: a @ b})
    check_replay(sch, before)


def test_parallel_update_block_above_its_init(rng):
    before = P.matmul(8, 6, 4)
    sch = Schedule(before)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    sch.decompose_reduction(c, i)  # the init nest runs first, outside i
    sch.parallel(i)
    check_numbers(before, sch.func, rng, lambda a, b, c: {2: a @ b})


def test_parallel_update_block_still_refuses_reduce_loops():
    sch = Schedule(P.matmul(8, 6, 4))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    sch.decompose_reduction(c, i)
    assert_rejected(sch, lambda: sch.parallel(k), "parallel: loop r0 carries the reduction of block C")
    sch.reorder(k, j)
    assert_rejected(sch, lambda: sch.parallel(k), "parallel: loop r0 carries the reduction of block C")


def test_parallel_update_block_must_read_only_what_it_writes():
    """An init-less block that reads a neighbour of its output element is not an update block."""
    A, C = Buffer("A", (8, 4)), Buffer("C", (9,))
    i, k, vi, vk = Var("i"), Var("k"), Var("vi"), Var("vk")
    block = Block("C", (IterVar(vi, Range(0, 8)), IterVar(vk, Range(0, 4), "reduce")),
                  (BufferRegion(C, (Range(vi + 1, 1),)), BufferRegion(A, (Range(vi, 1), Range(vk, 1)))),
                  (BufferRegion(C, (Range(vi, 1),)),), BufferStore(C, C[vi + 1] + A[vi, vk], (vi,)))
    nest = For(i, 0, 8, "serial", For(k, 0, 4, "serial", BlockRealize((i, k), true(), block)))
    sch = Schedule(P.func([A, C], [nest]))
    loop, _ = sch.get_loops(sch.get_block("C"))
    assert_rejected(sch, lambda: sch.parallel(loop), "parallel: block C reads elements of C that it does not write")


def _tile_with_local_buffer(m: int):
    """for i: block tile (allocates T[m]): T[j] = A[i, j] * 2; C[i, j] = T[j] + 1."""
    A, C, T = Buffer("A", (8, m)), Buffer("C", (8, m)), Buffer("T", (m,))
    i, vi, j, vj, j2, vj2 = (Var(n) for n in ("i", "vi", "j", "vj", "j2", "vj2"))
    write = Block("T", (IterVar(vj, Range(0, m)),), (BufferRegion(A, (Range(vi, 1), Range(vj, 1))),),
                  (BufferRegion(T, (Range(vj, 1),)),), BufferStore(T, A[vi, vj] * 2.0, (vj,)))
    read = Block("C", (IterVar(vj2, Range(0, m)),), (BufferRegion(T, (Range(vj2, 1),)),),
                 (BufferRegion(C, (Range(vi, 1), Range(vj2, 1))),), BufferStore(C, T[vj2] + 1.0, (vi, vj2)))
    body = seq(For(j, 0, m, "serial", BlockRealize((j,), true(), write)),
               For(j2, 0, m, "serial", BlockRealize((j2,), true(), read)))
    tile = Block("tile", (IterVar(vi, Range(0, 8)),), (BufferRegion(A, (Range(vi, 1), Range(0, m))),),
                 (BufferRegion(C, (Range(vi, 1), Range(0, m))),), body, alloc_buffers=(T,))
    return P.func([A, C], [For(i, 0, 8, "serial", BlockRealize((i,), true(), tile))])


@pytest.mark.parametrize("m", [64, 8192])
def test_parallel_loop_with_a_block_local_buffer(rng, m):
    """Each iteration gets its own T: on the stack when it is small and of constant size (64
    floats), else allocated per iteration (8192 floats, over the 16 KiB stack limit)."""
    import refcomp

    before = _tile_with_local_buffer(m)
    sch = Schedule(before)
    (i,) = sch.get_loops(sch.get_block("tile"))
    sch.parallel(i)
    check_numbers(before, sch.func, rng, lambda a, c: {1: a * 2 + 1})
    source = refcomp.build(sch.func).source
    if m == 64:
        assert "float T[64]" in source and "alloc(" not in source
    else:
        assert "float* T = (float*)aligned_alloc(" in source or "float* T = (float*)malloc(" in source


def _symbolic_elementwise():
    from refcomp import te

    n, m = te.size_var("n", "int64"), te.size_var("m", "int64")
    A = te.placeholder((n, 4, m), "float32", "A")
    B = te.compute((n, 4, m), lambda i, j, k: A[i, j, k] * 2.0, name="B")
    return te.create_prim_func([A, B])


@pytest.mark.parametrize("sizes", [(1, 1), (2, 3), (3, 17), (5, 1)])
def test_parallel_fused_loop_over_symbolic_extents(sizes):
    """fuse over (n, 4, m) binds `f // (4 * m)`, `f % (4 * m) // m`, `f % m`: affine in the loop
    var (the divisors use no loop var), and injective (proved in nested form, `f // m // 4`).
    Before, parallel refused it: "the binding of vi is not affine in the loop variables"."""
    import numpy as np

    import refcomp

    before = _symbolic_elementwise()
    sch = Schedule(before)
    fused = sch.fuse(*sch.get_loops(sch.get_block("B")))
    sch.parallel(fused)
    assert sch.get(sch.get_loops(sch.get_block("B"))[0]).kind == "parallel"
    text = sch.func.script()
    assert '% (T.Cast("int64", 4) * m) // m' in text and "i_j_k_fused % m" in text
    n, m = sizes
    a = np.random.default_rng(n * 31 + m).standard_normal((n, 4, m)).astype(np.float32)
    out = np.empty_like(a)
    refcomp.build(sch.func)(a, out)
    np.testing.assert_array_equal(out, a * 2)


def test_parallel_refuses_symbolic_floordiv_that_is_not_injective():
    """`v = f // m` over f < n * m writes B[v] m times from m iterations: still refused."""
    from refcomp.ast import SizeVar

    n, m = SizeVar("n", "int64"), SizeVar("m", "int64")
    A, B = Buffer("A", (n,)), Buffer("B", (n,))
    f, v = Var("f", "int64"), Var("v", "int64")
    block = Block("B", (IterVar(v, Range(0, n)),), (BufferRegion(A, (Range(v, 1),)),),
                  (BufferRegion(B, (Range(v, 1),)),), BufferStore(B, A[v], (v,)))
    sch = Schedule(P.func([A, B], [For(f, 0, n * m, "serial", BlockRealize((f // m,), true(), block))]))
    (loop,) = sch.get_loops(sch.get_block("B"))
    with pytest.raises(Exception, match="parallel: "):
        sch.parallel(loop)
