"""compute_at, reverse_compute_at, compute_inline, reverse_compute_inline."""
import numpy as np
import pytest

from refcomp.loops.schedule import Schedule

from . import programs as P
from .helpers import assert_rejected, assert_script, check_numbers, check_replay


def _ref_two(a, c):
    return {1: a * 2 + 1}


def test_compute_at_two_elementwise(rng):
    before = P.two_elementwise(16, 8)
    sch = Schedule(before)
    i, _ = sch.get_loops(sch.get_block("C"))
    sch.compute_at(sch.get_block("B"), i)
    assert_script(sch.func, '''
        @T.prim_func
        def main(A: T.Buffer((16, 8), "float32"), C: T.Buffer((16, 8), "float32")):
            with T.block("root"):
                T.reads()
                T.writes()
                B = T.alloc_buffer((16, 8), "float32")
                for i in range(16):
                    for ax0 in range(8):
                        with T.block("B"):
                            vi, vj = T.axis.remap("SS", [i, ax0])
                            T.reads(A[vi, vj])
                            T.writes(B[vi, vj])
                            B[vi, vj] = A[vi, vj] * T.float32(2.0)
                    for j in range(8):
                        with T.block("C"):
                            vi_1, vj_1 = T.axis.remap("SS", [i, j])
                            T.reads(B[vi_1, vj_1])
                            T.writes(C[vi_1, vj_1])
                            C[vi_1, vj_1] = B[vi_1, vj_1] + T.float32(1.0)
    ''')
    check_numbers(before, sch.func, rng, _ref_two)
    check_replay(sch, before)


def test_compute_at_preserve_unit_loops_and_tiles(rng):
    before = P.two_elementwise(16, 8)
    sch = Schedule(before)
    i, j = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, [None, 4])
    sch.compute_at(sch.get_block("B"), j, preserve_unit_loops=True)
    loops = sch.get_loops(sch.get_block("B"))
    assert [sch.get(l).extent.value for l in loops] == [4, 4, 8, 1, 1]
    check_numbers(before, sch.func, rng, _ref_two)
    check_replay(sch, before)


def test_compute_at_stencil_region_gets_domain_predicate(rng):
    before = P.conv1d(20, 3)
    sch = Schedule(before)
    i, _ = sch.get_loops(sch.get_block("C"))
    i0, _ = sch.split(i, [None, 8])
    sch.compute_at(sch.get_block("P"), i0)
    (i0_, ax0) = sch.get_loops(sch.get_block("P"))
    assert sch.get(ax0).extent.value == 10  # 8 outputs need 8 + 3 - 1 inputs
    assert "T.where(i_0 * 8 + ax0 < 22)" in sch.func.script()
    check_numbers(before, sch.func, rng)
    check_replay(sch, before)


def test_compute_at_reduction_producer(rng):
    before = P.matmul_relu(8, 6, 4)
    sch = Schedule(before)
    i, j = sch.get_loops(sch.get_block("D"))
    sch.compute_at(sch.get_block("C"), j)
    assert [sch.get(l).loop_var.name for l in sch.get_loops(sch.get_block("C"))] == ["i", "j", "ax0"]
    check_numbers(before, sch.func, rng, lambda a, b, d: {2: np.maximum(a @ b, 0)})
    check_replay(sch, before)


def test_compute_at_rejections():
    sch = Schedule(P.two_elementwise(16, 8))
    b, c = sch.get_block("B"), sch.get_block("C")
    bi, _ = sch.get_loops(b)
    ci, _ = sch.get_loops(c)
    assert_rejected(sch, lambda: sch.compute_at(b, bi), "compute_at: loop i is an ancestor of block B")
    assert_rejected(sch, lambda: sch.compute_at(c, bi), "compute_at: block C is an output block")
    sch2 = Schedule(P.matmul_relu())
    d, c_outer = sch2.get_block("D"), sch2.get_loops(sch2.get_block("C"))[0]
    assert_rejected(sch2, lambda: sch2.compute_at(d, c_outer), "compute_at: block D is an output block")


def test_compute_at_needs_all_consumers_under_the_loop():
    from refcomp.ast import Buffer

    A, B, C, D = (Buffer(n, (8,)) for n in "ABCD")
    func = P.func([A, C, D], [P.stage("B", B, (8,), lambda i: A[i] * 2.0),
                              P.stage("C", C, (8,), lambda i: B[i] + 1.0),
                              P.stage("D", D, (8,), lambda i: B[i] - 1.0)], allocs=[B])
    sch = Schedule(func)
    (ci,) = sch.get_loops(sch.get_block("C"))
    b = sch.get_block("B")
    assert_rejected(sch, lambda: sch.compute_at(b, ci),
                    "compute_at: requires all the consumer blocks of B to be under loop i; block D is not")


def test_compute_at_refuses_predicated_producer():
    sch = Schedule(P.two_elementwise(10, 8))
    bi, _ = sch.get_loops(sch.get_block("B"))
    sch.split(bi, [3, 4])
    ci, _ = sch.get_loops(sch.get_block("C"))
    b = sch.get_block("B")
    assert_rejected(sch, lambda: sch.compute_at(b, ci), "compute_at: block B has a predicate")


def test_reverse_compute_at(rng):
    before = P.two_elementwise(16, 8)
    sch = Schedule(before)
    i, _ = sch.get_loops(sch.get_block("B"))
    sch.reverse_compute_at(sch.get_block("C"), i)
    assert_script(sch.func, '''
        @T.prim_func
        def main(A: T.Buffer((16, 8), "float32"), C: T.Buffer((16, 8), "float32")):
            with T.block("root"):
                T.reads()
                T.writes()
                B = T.alloc_buffer((16, 8), "float32")
                for i in range(16):
                    for j in range(8):
                        with T.block("B"):
                            vi, vj = T.axis.remap("SS", [i, j])
                            T.reads(A[vi, vj])
                            T.writes(B[vi, vj])
                            B[vi, vj] = A[vi, vj] * T.float32(2.0)
                    for ax0 in range(8):
                        with T.block("C"):
                            vi_1, vj_1 = T.axis.remap("SS", [i, ax0])
                            T.reads(B[vi_1, vj_1])
                            T.writes(C[vi_1, vj_1])
                            C[vi_1, vj_1] = B[vi_1, vj_1] + T.float32(1.0)
    ''')
    check_numbers(before, sch.func, rng, _ref_two)
    check_replay(sch, before)


def test_reverse_compute_at_epilogue_of_tiled_matmul(rng):
    before = P.matmul_relu(8, 12, 4)
    sch = Schedule(before)
    i, j, k = sch.get_loops(sch.get_block("C"))
    j0, j1 = sch.split(j, [None, 4])
    sch.reorder(i, j0, k, j1)
    sch.reverse_compute_at(sch.get_block("D"), j0)
    assert [sch.get(l).extent.value for l in sch.get_loops(sch.get_block("D"))] == [8, 3, 4]
    check_numbers(before, sch.func, rng, lambda a, b, d: {2: np.maximum(a @ b, 0)})
    check_replay(sch, before)


def test_reverse_compute_at_rejections():
    sch = Schedule(P.two_elementwise(16, 8))
    b, c = sch.get_block("B"), sch.get_block("C")
    ci, _ = sch.get_loops(c)
    assert_rejected(sch, lambda: sch.reverse_compute_at(c, ci), "reverse_compute_at: loop i is an ancestor of block C")
    assert_rejected(sch, lambda: sch.reverse_compute_at(b, ci), "reverse_compute_at: block B has no producer")


def test_compute_inline(rng):
    before = P.two_elementwise(16, 8)
    sch = Schedule(before)
    sch.compute_inline(sch.get_block("B"))
    assert_script(sch.func, '''
        @T.prim_func
        def main(A: T.Buffer((16, 8), "float32"), C: T.Buffer((16, 8), "float32")):
            with T.block("root"):
                T.reads()
                T.writes()
                for i, j in T.grid(16, 8):
                    with T.block("C"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        T.reads(A[vi, vj])
                        T.writes(C[vi, vj])
                        C[vi, vj] = A[vi, vj] * T.float32(2.0) + T.float32(1.0)
    ''')
    check_numbers(before, sch.func, rng, _ref_two)
    check_replay(sch, before)
    assert_rejected(sch, lambda: sch.get_loops(sch.get_block("B")), "no block named 'B'")


def test_compute_inline_into_stencil(rng):
    before = P.conv1d(12, 3)
    sch = Schedule(before)
    sch.compute_inline(sch.get_block("P"))
    assert "P[" not in sch.func.script()
    check_numbers(before, sch.func, rng)
    check_replay(sch, before)


def test_compute_inline_rejections():
    sch = Schedule(P.matmul_relu())
    c, d = sch.get_block("C"), sch.get_block("D")
    assert_rejected(sch, lambda: sch.compute_inline(c), "compute_inline: block C is not a complete block")
    assert_rejected(sch, lambda: sch.compute_inline(d), "compute_inline: block D is an output block")


def test_reverse_compute_inline(rng):
    before = P.two_elementwise(16, 8)
    sch = Schedule(before)
    sch.reverse_compute_inline(sch.get_block("C"))
    assert_script(sch.func, '''
        @T.prim_func
        def main(A: T.Buffer((16, 8), "float32"), C: T.Buffer((16, 8), "float32")):
            with T.block("root"):
                T.reads()
                T.writes()
                for i, j in T.grid(16, 8):
                    with T.block("B"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        T.reads(A[vi, vj])
                        T.writes(C[vi, vj])
                        C[vi, vj] = A[vi, vj] * T.float32(2.0) + T.float32(1.0)
    ''')
    check_numbers(before, sch.func, rng, _ref_two)
    check_replay(sch, before)


def test_reverse_compute_inline_rejections():
    sch = Schedule(P.matmul_relu())
    c, d = sch.get_block("C"), sch.get_block("D")
    assert_rejected(sch, lambda: sch.reverse_compute_inline(c), "reverse_compute_inline: block C is not a complete block")
    assert_rejected(sch, lambda: sch.reverse_compute_inline(d), "reverse_compute_inline: producer C is not a complete block")
    sch2 = Schedule(P.elementwise())
    b = sch2.get_block("B")
    assert_rejected(sch2, lambda: sch2.reverse_compute_inline(b), "must have exactly one producer")


def _sum_of_two_stages():
    """B = A * 2, then D = A + 1, then the sum E = B + D (a residual sum of two convolutions'
    outputs, in small; te orders the blocks B, D, E)."""
    from refcomp import te

    A = te.placeholder((6, 5), "float32", "A")
    D = te.compute((6, 5), lambda i, j: A[i, j] + 1.0, name="D")
    B = te.compute((6, 5), lambda i, j: A[i, j] * 2.0, name="B")
    E = te.compute((6, 5), lambda i, j: B[i, j] + D[i, j], name="E")
    return te.create_prim_func([A, E])


def test_reverse_compute_inline_reads_an_earlier_stage_too(rng):
    """The consumer also reads B, whose block is done before its last producer D starts: it folds
    into D, which then reads B and writes E; B stays a stage of its own."""
    before = _sum_of_two_stages()
    sch = Schedule(before)
    sch.reverse_compute_inline(sch.get_block("E"))
    script = sch.func.script()
    assert 'T.block("E")' not in script and 'T.block("B")' in script
    d = sch.get(sch.get_block("D"))
    assert {r.buffer.name for r in d.reads} == {"A", "B"} and [w.buffer.name for w in d.writes] == ["E"]
    check_numbers(before, sch.func, rng, lambda a, e: {1: a * 2 + (a + 1)})
    check_replay(sch, before)


def test_reverse_compute_inline_refuses_a_stage_not_done_before_the_producer():
    """B and D computed row by row inside E's row loop (compute_at puts D's row first): D is not
    done when B's first row runs, so the sum is not moved into B."""
    sch = Schedule(_sum_of_two_stages())
    for name in ("B", "D"):
        i, _ = sch.get_loops(sch.get_block("E"))
        sch.compute_at(sch.get_block(name), i)
    e = sch.get_block("E")
    assert_rejected(sch, lambda: sch.reverse_compute_inline(e),
                    "reverse_compute_inline: block E also reads what block D writes, which is not done before "
                    "producer B starts")


def test_reverse_compute_inline_over_a_symbolic_extent(rng):
    """A dimension of symbolic size n spanned by iters of extent n (a model's batch): the
    consumer folds into its producer; numbers checked at several n."""
    from refcomp import te
    from refcomp.loops.interpreter import interpret

    n = te.size_var("n")
    A = te.placeholder((n, 4), "float32", "A")
    B = te.compute((n, 4), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((n, 4), lambda i, j: B[i, j] + 1.0, name="C")
    before = te.create_prim_func([A, C])
    sch = Schedule(before)
    sch.reverse_compute_inline(sch.get_block("C"))
    assert 'T.block("C")' not in sch.func.script()
    import refcomp

    library = refcomp.build(sch.func)
    for size in (1, 2, 7):
        a = rng.standard_normal((size, 4)).astype("float32")
        for run in (lambda *xs: interpret(sch.func, *xs), library):
            c = np.full((size, 4), np.nan, dtype="float32")
            run(a, c)
            np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)
    check_replay(sch, before)


def test_compute_at_symbolic_extent_keeps_a_predicate(rng):
    from refcomp import te
    from refcomp.loops.interpreter import interpret

    n = te.size_var("n")
    A = te.placeholder((n,), "float32", "A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((n,), lambda i: B[i] + 1.0, name="C")
    before = te.create_prim_func([A, C])
    sch = Schedule(before)
    (i,) = sch.get_loops(sch.get_block("C"))
    outer, _ = sch.split(i, [None, 8])
    sch.compute_at(sch.get_block("B"), outer)
    assert "T.where(i_0 * 8 + ax0 < n)" in sch.func.script()
    import refcomp

    library = refcomp.build(sch.func)
    for size in (1, 8, 13):
        a = rng.standard_normal(size).astype("float32")
        for run in (lambda *xs: interpret(sch.func, *xs), library):
            c = np.full(size, np.nan, dtype="float32")
            run(a, c)
            np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)
    check_replay(sch, before)


def test_compute_at_refuses_when_a_block_between_touches_the_buffers():
    from refcomp.ast import Buffer

    A, B, C, D = (Buffer(n, (8,)) for n in "ABCD")
    # B = A * 2; D = A + 1 writes A's neighbour... here: E overwrites B's input A between B and C
    func = P.func([A, C, D], [P.stage("B", B, (8,), lambda i: A[i] * 2.0),
                              P.stage("A2", A, (8,), lambda i: D[i] + 1.0),
                              P.stage("C", C, (8,), lambda i: B[i] + 1.0)], allocs=[B])
    sch = Schedule(func)
    (ci,) = sch.get_loops(sch.get_block("C"))
    b = sch.get_block("B")
    assert_rejected(sch, lambda: sch.compute_at(b, ci),
                    "compute_at: block A2 between block B and loop i accesses the same buffers")


def test_reverse_compute_at_needs_all_producers_under_the_loop():
    from refcomp.ast import Buffer

    A, B, C, D = (Buffer(n, (8,)) for n in "ABCD")
    func = P.func([A, D], [P.stage("B", B, (8,), lambda i: A[i] * 2.0),
                           P.stage("C", C, (8,), lambda i: A[i] + 1.0),
                           P.stage("D", D, (8,), lambda i: B[i] + C[i])], allocs=[B, C])
    sch = Schedule(func)
    (bi,) = sch.get_loops(sch.get_block("B"))
    d = sch.get_block("D")
    assert_rejected(sch, lambda: sch.reverse_compute_at(d, bi),
                    "reverse_compute_at: requires all the producer blocks of D to be under loop i; block C is not")


def test_inlining_refuses_buffers_viewed_by_match_buffer():
    from refcomp.ast import Buffer, BufferRegion, MatchBufferRegion, Range
    from refcomp.loops.primitives.lookup import locate_block
    from refcomp.loops.primitives.tree import replace_in_func

    func = P.two_elementwise(8, 4)
    realize = locate_block(func, "C", "test").realize
    B = realize.block.reads[0].buffer
    view = MatchBufferRegion(Buffer("B_tile", (1, 4)),
                             BufferRegion(B, (Range(realize.block.iter_vars[0].var, 1), Range(0, 4))))
    func = replace_in_func(func, {id(realize): realize.with_(block=realize.block.with_(match_buffers=(view,)))})
    sch = Schedule(func)
    b, c = sch.get_block("B"), sch.get_block("C")
    assert_rejected(sch, lambda: sch.compute_inline(b), "compute_inline: block C views B through match_buffer")
    assert_rejected(sch, lambda: sch.reverse_compute_inline(c), "reverse_compute_inline: block C views B")


# ----------------------------------------------------------------------------- floor div/mod regions

def _upsample_rows():
    """B = A * 2 (4 x 8, intermediate); C[i, j] = B[i // 4, j] + 1 (16 x 8)."""
    from refcomp.ast import Buffer

    A, B, C = Buffer("A", (4, 8)), Buffer("B", (4, 8)), Buffer("C", (16, 8))
    return P.func([A, C], [P.stage("B", B, (4, 8), lambda i, j: A[i, j] * 2.0),
                           P.stage("C", C, (16, 8), lambda i, j: B[i // 4, j] + 1.0)], allocs=[B])


def _ref_upsample(a, c):
    return {1: np.repeat(a * 2, 4, axis=0) + 1}


def test_compute_at_region_read_through_floordiv_of_a_split_loop(rng):
    before = _upsample_rows()
    sch = Schedule(before)
    i, _ = sch.get_loops(sch.get_block("C"))
    i0, _ = sch.split(i, [None, 8])
    sch.compute_at(sch.get_block("B"), i0)  # (i0 * 8 + i1) // 4 for i1 < 8: rows 2 * i0 and 2 * i0 + 1
    assert_script(sch.func, '''
        @T.prim_func
        def main(A: T.Buffer((4, 8), "float32"), C: T.Buffer((16, 8), "float32")):
            with T.block("root"):
                T.reads()
                T.writes()
                B = T.alloc_buffer((4, 8), "float32")
                for i_0 in range(2):
                    for ax0, ax1 in T.grid(2, 8):
                        with T.block("B"):
                            vi = T.axis.spatial(4, i_0 * 2 + ax0)
                            vj = T.axis.spatial(8, ax1)
                            T.reads(A[vi, vj])
                            T.writes(B[vi, vj])
                            B[vi, vj] = A[vi, vj] * T.float32(2.0)
                    for i_1, j in T.grid(8, 8):
                        with T.block("C"):
                            vi_1 = T.axis.spatial(16, i_0 * 8 + i_1)
                            vj_1 = T.axis.spatial(8, j)
                            T.reads(B[vi_1 // 4, vj_1])
                            T.writes(C[vi_1, vj_1])
                            C[vi_1, vj_1] = B[vi_1 // 4, vj_1] + T.float32(1.0)
    ''')
    check_numbers(before, sch.func, rng, _ref_upsample)
    check_replay(sch, before)


def test_compute_at_region_whose_floordiv_does_not_divide_the_tile(rng):
    """(3 * i0 + i1) // 4 with i1 < 3 spans one or two rows: the covering region is two rows from
    (3 * i0) // 4, guarded by the domain predicate."""
    before = _upsample_rows()
    sch = Schedule(before)
    i, _ = sch.get_loops(sch.get_block("C"))
    i0, _ = sch.split(i, [None, 3])
    sch.compute_at(sch.get_block("B"), i0)
    text = sch.func.script()
    assert "vi = T.axis.spatial(4, i_0 * 3 // 4 + ax0)" in text and "T.where(i_0 * 3 // 4 + ax0 < 4)" in text
    check_numbers(before, sch.func, rng, _ref_upsample)


def test_compute_at_and_reverse_compute_at_under_a_fused_and_split_loop(rng):
    before = P.two_elementwise(16, 8)
    sch = Schedule(before)
    i, j = sch.get_loops(sch.get_block("C"))
    outer, _ = sch.split(sch.fuse(i, j), [None, 16])
    sch.compute_at(sch.get_block("B"), outer)
    assert_script(sch.func, '''
        @T.prim_func
        def main(A: T.Buffer((16, 8), "float32"), C: T.Buffer((16, 8), "float32")):
            with T.block("root"):
                T.reads()
                T.writes()
                B = T.alloc_buffer((16, 8), "float32")
                for i_j_fused_0 in range(8):
                    for ax0, ax1 in T.grid(2, 8):
                        with T.block("B"):
                            vi = T.axis.spatial(16, i_j_fused_0 * 2 + ax0)
                            vj = T.axis.spatial(8, ax1)
                            T.reads(A[vi, vj])
                            T.writes(B[vi, vj])
                            B[vi, vj] = A[vi, vj] * T.float32(2.0)
                    for i_j_fused_1 in range(16):
                        with T.block("C"):
                            vi_1 = T.axis.spatial(16, (i_j_fused_0 * 16 + i_j_fused_1) // 8)
                            vj_1 = T.axis.spatial(8, (i_j_fused_0 * 16 + i_j_fused_1) % 8)
                            T.reads(B[vi_1, vj_1])
                            T.writes(C[vi_1, vj_1])
                            C[vi_1, vj_1] = B[vi_1, vj_1] + T.float32(1.0)
    ''')
    sch.parallel(outer)  # the tile's producer and consumer stay in one iteration
    check_numbers(before, sch.func, rng, _ref_two)
    check_replay(sch, before)

    sch2 = Schedule(before)
    i, j = sch2.get_loops(sch2.get_block("B"))
    outer2, _ = sch2.split(sch2.fuse(i, j), [None, 16])
    sch2.reverse_compute_at(sch2.get_block("C"), outer2)
    assert "vi_1 = T.axis.spatial(16, i_j_fused_0 * 2 + ax0)" in sch2.func.script()
    check_numbers(before, sch2.func, rng, _ref_two)
    check_replay(sch2, before)


def test_reverse_compute_at_refuses_a_written_region_that_is_not_a_box():
    """A tile of 12 fused elements covers 12 of a 2 x 8 box of rows and columns: a consumer run on
    the box would read 4 elements the tile did not write."""
    sch = Schedule(P.two_elementwise(16, 8))
    i, j = sch.get_loops(sch.get_block("B"))
    outer, _ = sch.split(sch.fuse(i, j), [None, 12])
    c = sch.get_block("C")
    assert_rejected(sch, lambda: sch.reverse_compute_at(c, outer),
                    "reverse_compute_at: cannot bound the region of B written under loop i_j_fused_0")


def test_parallel_refuses_a_consumer_reading_outside_a_coupled_tile():
    """compute_at under a 12-element fused tile computes a covering 2 x 8 box; the iterations then
    overlap (a recomputed halo), so the tile loop cannot be parallel."""
    sch = Schedule(P.two_elementwise(16, 8))
    i, j = sch.get_loops(sch.get_block("C"))
    outer, _ = sch.split(sch.fuse(i, j), [None, 12])
    sch.compute_at(sch.get_block("B"), outer)
    assert_rejected(sch, lambda: sch.parallel(outer), "parallel: block B writes overlapping parts")


# ----------------------------------------------------------------------------- reduce iters of a consumer

def _row_sums_of_a_product():
    """B = A * 2 (8 x 16, intermediate); C[i] = sum_r B[i, r]."""
    from refcomp.ast import Buffer

    A, B, C = Buffer("A", (8, 16)), Buffer("B", (8, 16)), Buffer("C", (8,))
    return P.func([A, C], [P.stage("B", B, (8, 16), lambda i, j: A[i, j] * 2.0),
                           P.stage("C", C, (8,), lambda i, r: B[i, r], reduce=(16,), init=0.0)], allocs=[B])


def _ref_row_sums(a, c):
    return {1: (a * 2).sum(axis=1)}


def test_reverse_compute_at_consumer_reducing_over_the_produced_tile(rng):
    before = _row_sums_of_a_product()
    sch = Schedule(before)
    i, j = sch.get_loops(sch.get_block("B"))
    j0, _ = sch.split(j, [None, 4])
    sch.reorder(j0, i)
    sch.reverse_compute_at(sch.get_block("C"), j0)
    assert_script(sch.func, '''
        @T.prim_func
        def main(A: T.Buffer((8, 16), "float32"), C: T.Buffer((8,), "float32")):
            with T.block("root"):
                T.reads()
                T.writes()
                B = T.alloc_buffer((8, 16), "float32")
                for j_0 in range(4):
                    for i, j_1 in T.grid(8, 4):
                        with T.block("B"):
                            vi = T.axis.spatial(8, i)
                            vj = T.axis.spatial(16, j_0 * 4 + j_1)
                            T.reads(A[vi, vj])
                            T.writes(B[vi, vj])
                            B[vi, vj] = A[vi, vj] * T.float32(2.0)
                    for ax0, ax1 in T.grid(8, 4):
                        with T.block("C"):
                            vi_1 = T.axis.spatial(8, ax0)
                            vr0 = T.axis.reduce(16, j_0 * 4 + ax1)
                            T.reads(C[vi_1], B[vi_1, vr0])
                            T.writes(C[vi_1])
                            with T.init():
                                C[vi_1] = T.float32(0.0)
                            C[vi_1] = C[vi_1] + B[vi_1, vr0]
    ''')
    check_numbers(before, sch.func, rng, _ref_row_sums)
    check_replay(sch, before)


def test_reverse_compute_at_consumer_reducing_over_a_whole_row(rng):
    before = _row_sums_of_a_product()
    sch = Schedule(before)
    i, _ = sch.get_loops(sch.get_block("B"))
    sch.reverse_compute_at(sch.get_block("C"), i)
    sch.parallel(i)
    check_numbers(before, sch.func, rng, _ref_row_sums)
    check_replay(sch, before)


def test_reverse_compute_at_reduction_split_across_a_parallel_loop_is_refused():
    sch = Schedule(_row_sums_of_a_product())
    i, j = sch.get_loops(sch.get_block("B"))
    j0, _ = sch.split(j, [None, 4])
    sch.reorder(j0, i)
    sch.parallel(j0)
    c = sch.get_block("C")
    assert_rejected(sch, lambda: sch.reverse_compute_at(c, j0), "reverse_compute_at: loop j_0 carries the reduction")


def test_reverse_compute_at_refuses_a_reduction_that_would_add_a_term_twice():
    """The producer writes B[f // 2] in iterations 2t and 2t + 1: a consumer summing B tile by
    tile would add each element twice."""
    from refcomp.ast import Block, BlockRealize, Buffer, BufferRegion, BufferStore, For, IterVar, Range, Var
    from refcomp.ast.stmt import true

    A, B, C = Buffer("A", (16,)), Buffer("B", (16,)), Buffer("C", (1,))
    f, v = Var("f"), Var("v")
    writer = Block("B", (IterVar(v, Range(0, 16)),), (BufferRegion(A, (Range(v, 1),)),),
                   (BufferRegion(B, (Range(v, 1),)),), BufferStore(B, A[v] * 2.0, (v,)))
    produce = For(f, 0, 32, "serial", BlockRealize((f // 2,), true(), writer))
    total = P.stage("C", C, (1,), lambda i, r: B[r], reduce=(16,), init=0.0)
    sch = Schedule(P.func([A, C], [produce, total], allocs=[B]))
    (loop,) = sch.get_loops(sch.get_block("B"))
    c = sch.get_block("C")
    assert_rejected(sch, lambda: sch.reverse_compute_at(c, loop),
                    "reverse_compute_at: the reduce iter vr0 of block C would be split across the producers' tiles, "
                    "but its 32 tile points do not match its domain of 16")


def test_compute_at_under_int64_loops_keeps_loop_types(rng):
    """Graph-level kernels have int64 dims: the regenerated loops get int64 extents (an int32
    extent under an int64 loop var is ill-formed IR)."""
    import refcomp
    from refcomp import te
    from refcomp.ast import IntImm
    from refcomp.ast.wellformed import verify_well_formed

    m, n, k = (IntImm(v, "int64") for v in (40, 64, 48))
    a_t = te.placeholder((m, k), "float32", "A")
    b_t = te.placeholder((k, n), "float32", "B")
    r = te.reduce_axis((IntImm(0, "int64"), k), "k")
    c_t = te.compute((m, n), lambda i, j: te.sum(a_t[i, r] * b_t[r, j], axis=r), name="C")
    sch = Schedule(te.create_prim_func([a_t, b_t, c_t]))
    block = sch.get_block("C")
    packed = sch.cache_read(block, 1, "global")
    i, j, kk = sch.get_loops(block)
    j0, _ = sch.split(j, [None, 32])
    sch.reorder(j0, i)
    sch.compute_at(packed, j0)
    verify_well_formed(sch.func)
    copy_loops = sch.get_loops(packed)
    assert all(str(sch.get(loop).extent.dtype) == "int64" for loop in copy_loops)
    a = rng.standard_normal((40, 48)).astype(np.float32)
    b = rng.standard_normal((48, 64)).astype(np.float32)
    c = rng.standard_normal((40, 64)).astype(np.float32)
    refcomp.build(sch.func)(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-4)


def _row_max_then_subtract():
    """M[i] = max over a symbolic row length m of A[i, :]; C[i, j] = A[i, j] - M[i]."""
    from refcomp import te

    n, m = te.size_var("n", "int64"), te.size_var("m", "int64")
    A = te.placeholder((n, m), "float32", "A")
    k = te.reduce_axis((0, m), "k")
    M = te.compute((n,), lambda i: te.max(A[i, k], axis=k), name="M")
    C = te.compute((n, m), lambda i, j: A[i, j] - M[i], name="C")
    return te.create_prim_func([A, C])


@pytest.mark.parametrize("sizes", [(1, 1), (3, 7), (4, 33)])
def test_compute_at_under_a_row_loop_with_a_symbolic_row_length(sizes):
    """C's loop j has a symbolic extent but C reads M[i] only: the region is bounded without it
    (before: "cannot bound the region of M read under loop i")."""
    import refcomp

    before = _row_max_then_subtract()
    sch = Schedule(before)
    i, _ = sch.get_loops(sch.get_block("C"))
    sch.compute_at(sch.get_block("M"), i)
    sch.parallel(i)
    text = sch.func.script()
    assert text.index('T.block("M")') < text.index('T.block("C")') and text.count("T.parallel(") == 1
    n, m = sizes
    a = np.random.default_rng(n + m).standard_normal((n, m)).astype(np.float32)
    out = np.empty_like(a)
    refcomp.build(sch.func)(a, out)
    np.testing.assert_allclose(out, a - a.max(axis=1, keepdims=True))


def test_compute_at_covers_a_guarded_read_through_a_symbolic_loop_by_the_whole_dim(rng):
    """A combine stage reads P[i, t] under `t < 4` (else Q[i, t - 4]), t ranging over the
    symbolic m + 4: the read covers P's whole (constant) lane dim, so P moves under the row loop
    computing its 4 lanes per row."""
    import refcomp
    from refcomp import te

    n, m = te.size_var("n", "int64"), te.size_var("m", "int64")
    A = te.placeholder((n, 4), "float32", "A")
    Q = te.placeholder((n, m), "float32", "Q")
    P = te.compute((n, 4), lambda i, l: A[i, l] * 2.0, name="P")
    t = te.reduce_axis((0, m + 4), "t")
    S = te.compute((n,), lambda i: te.sum(te.if_then_else(t < 4, P[i, t], Q[i, t - 4]), axis=t), name="S")
    before = te.create_prim_func([A, Q, S])
    sch = Schedule(before)
    (i, _) = sch.get_loops(sch.get_block("S"))
    sch.compute_at(sch.get_block("P"), i)
    sch.parallel(i)
    for rows, cols in [(5, 3), (1, 1), (2, 0)]:
        a = rng.standard_normal((rows, 4)).astype(np.float32)
        q = rng.standard_normal((rows, cols)).astype(np.float32)
        out = np.empty((rows,), np.float32)
        refcomp.build(sch.func)(a, q, out)
        np.testing.assert_allclose(out, (a * 2).sum(axis=1) + q.sum(axis=1), rtol=1e-5, atol=1e-5)
