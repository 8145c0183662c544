"""cache_read, cache_write, set_scope, storage_align, transform_layout."""
import numpy as np

from refcomp import te
from refcomp.ast import Buffer
from refcomp.loops.schedule import Schedule

from . import programs as P
from .helpers import assert_rejected, assert_script, check_numbers, check_replay


def _te_matmul(n=8, m=32, k=4):
    A = te.placeholder((n, k), "float32", "A")
    B = te.placeholder((k, m), "float32", "B")
    r = te.reduce_axis((0, k), "k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return te.create_prim_func([A, B, C])


def test_cache_read(rng):
    before = P.two_elementwise(8, 4)
    sch = Schedule(before)
    cached = sch.cache_read(sch.get_block("B"), 0, "global")
    assert cached.name == "A_global"
    assert_script(sch.func, '''
        @T.prim_func
        def main(A: T.Buffer((8, 4), "float32"), C: T.Buffer((8, 4), "float32")):
            with T.block("root"):
                T.reads()
                T.writes()
                B = T.alloc_buffer((8, 4), "float32")
                A_global = T.alloc_buffer((8, 4), "float32")
                for ax0, ax1 in T.grid(8, 4):
                    with T.block("A_global"):
                        v0, v1 = T.axis.remap("SS", [ax0, ax1])
                        T.reads(A[v0, v1])
                        T.writes(A_global[v0, v1])
                        A_global[v0, v1] = A[v0, v1]
                for i, j in T.grid(8, 4):
                    with T.block("B"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        T.reads(A_global[vi, vj])
                        T.writes(B[vi, vj])
                        B[vi, vj] = A_global[vi, vj] * T.float32(2.0)
                for i_1, j_1 in T.grid(8, 4):
                    with T.block("C"):
                        vi_1, vj_1 = T.axis.remap("SS", [i_1, j_1])
                        T.reads(B[vi_1, vj_1])
                        T.writes(C[vi_1, vj_1])
                        C[vi_1, vj_1] = B[vi_1, vj_1] + T.float32(1.0)
    ''')
    check_numbers(before, sch.func, rng, lambda a, c: {1: a * 2 + 1})
    check_replay(sch, before)


def test_cache_read_of_intermediate_goes_after_its_writer(rng):
    before = P.two_elementwise(8, 4)
    sch = Schedule(before)
    sch.cache_read(sch.get_block("C"), 0, "local")
    names = [b.name for b in sch.get_child_blocks(sch.get_block("root"))]
    assert names == ["B", "B_local", "C"]
    check_numbers(before, sch.func, rng)
    check_replay(sch, before)


def test_cache_write(rng):
    before = P.matmul(8, 6, 4)
    sch = Schedule(before)
    sch.cache_write(sch.get_block("C"), 0, "local")
    assert_script(sch.func, '''
        @T.prim_func
        def main(A: T.Buffer((8, 4), "float32"), B: T.Buffer((4, 6), "float32"), C: T.Buffer((8, 6), "float32")):
            with T.block("root"):
                T.reads()
                T.writes()
                C_local = T.alloc_buffer((8, 6), "float32", scope="local")
                for i, j, r0 in T.grid(8, 6, 4):
                    with T.block("C"):
                        vi, vj, vr0 = T.axis.remap("SSR", [i, j, r0])
                        T.reads(C_local[vi, vj], A[vi, vr0], B[vr0, vj])
                        T.writes(C_local[vi, vj])
                        with T.init():
                            C_local[vi, vj] = T.float32(0.0)
                        C_local[vi, vj] = C_local[vi, vj] + A[vi, vr0] * B[vr0, vj]
                for ax0, ax1 in T.grid(8, 6):
                    with T.block("C_local"):
                        v0, v1 = T.axis.remap("SS", [ax0, ax1])
                        T.reads(C_local[v0, v1])
                        T.writes(C[v0, v1])
                        C[v0, v1] = C_local[v0, v1]
    ''')
    check_numbers(before, sch.func, rng, lambda a, b, c: {2: a @ b})
    check_replay(sch, before)


def test_cache_write_then_reverse_compute_at(rng):
    before = P.matmul(8, 12, 4)
    sch = Schedule(before)
    c = sch.get_block("C")
    store = sch.cache_write(c, 0, "global")
    i, j, k = sch.get_loops(c)
    sch.reverse_compute_at(store, j)
    check_numbers(before, sch.func, rng, lambda a, b, c: {2: a @ b})
    check_replay(sch, before)


def test_cache_rejections():
    sch = Schedule(P.two_elementwise(8, 4))
    b = sch.get_block("B")
    assert_rejected(sch, lambda: sch.cache_read(b, 3, "global"), "cache_read: read_buffer_index: block B has 1 read")
    assert_rejected(sch, lambda: sch.cache_read(b, 0, "texture"), "cache_read: storage_scope: expected one of")
    assert_rejected(sch, lambda: sch.cache_write(b, 1, "local"), "cache_write: write_buffer_index")


def test_cache_write_and_read_need_a_single_writer():
    A, B, C = Buffer("A", (4,)), Buffer("B", (4,)), Buffer("C", (4,))
    func = P.func([A, B, C], [P.stage("B", B, (4,), lambda i: A[i] * 2.0),
                              P.stage("B2", B, (4,), lambda i: A[i] + 1.0),
                              P.stage("C", C, (4,), lambda i: B[i] + 1.0)])
    sch = Schedule(func)
    b, c = sch.get_block("B"), sch.get_block("C")
    assert_rejected(sch, lambda: sch.cache_write(b, 0, "local"), "cache_write: 2 blocks write B; exactly one may")
    assert_rejected(sch, lambda: sch.cache_read(c, 0, "local"), "cache_read: 2 blocks write B; at most one may")


def test_set_scope(rng):
    before = P.two_elementwise(8, 4)
    sch = Schedule(before)
    b = sch.get_block("B")
    sch.set_scope(b, 0, "shared")
    assert 'B = T.alloc_buffer((8, 4), "float32", scope="shared")' in sch.func.script()
    check_numbers(before, sch.func, rng)
    check_replay(sch, before)
    assert_rejected(sch, lambda: sch.set_scope(sch.get(b) and b, 0, "nowhere"), "set_scope: storage_scope")
    c = sch.get_block("C")
    assert_rejected(sch, lambda: sch.set_scope(c, 0, "local"), "set_scope: C is not allocated in a block")


def test_storage_align(rng):
    before = P.two_elementwise(8, 4)
    sch = Schedule(before)
    b = sch.get_block("B")
    sch.storage_align(b, 0, 0, 8, 3)
    assert 'strides=(11, 1)' in sch.func.script()
    check_numbers(before, sch.func, rng)
    check_replay(sch, before)
    assert_rejected(sch, lambda: sch.storage_align(b, 0, 1, 8, 3), "storage_align: axis: the last axis")
    assert_rejected(sch, lambda: sch.storage_align(b, 0, 5, 8, 3), r"storage_align: axis: expected an int in \[-2, 2\)")
    assert_rejected(sch, lambda: sch.storage_align(b, 0, 0, 0, 0), "storage_align: factor: expected a positive int")
    assert_rejected(sch, lambda: sch.storage_align(b, 0, 0, 8, 8), r"storage_align: offset: expected an int in \[0, 8\)")


def test_transform_layout_packs_a_matrix(rng):
    before = _te_matmul(8, 32, 4)
    sch = Schedule(before)
    c = sch.get_block("C")
    sch.transform_layout(c, ("read", 1), lambda k, j: (j // 16, k, j % 16))
    script = sch.func.script()
    assert 'B: T.Buffer((2, 4, 16), "float32")' in script
    assert "B[v_j // 16, v_k, v_j % 16]" in script
    a = rng.standard_normal((8, 4)).astype("float32")
    b = rng.standard_normal((4, 32)).astype("float32")
    packed = np.ascontiguousarray(b.reshape(4, 2, 16).transpose(1, 0, 2))
    out = np.full((8, 32), np.nan, dtype="float32")
    from refcomp.loops.interpreter import interpret

    interpret(sch.func, a, packed, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    check_replay(sch, before)
    assert "lambda k, j: ((j // 16), k, (j % 16))" in sch.trace.as_python()


def test_transform_layout_of_a_cached_intermediate(rng):
    before = _te_matmul(8, 32, 4)
    sch = Schedule(before)
    c = sch.get_block("C")
    pack = sch.cache_read(c, 1, "global")
    sch.transform_layout(pack, ("write", 0), lambda k, j: (j // 16, k, j % 16))
    check_numbers(before, sch.func, rng, lambda a, b, c: {2: a @ b})
    check_replay(sch, before)


def test_transform_layout_rejections():
    sch = Schedule(_te_matmul(8, 32, 4))
    c = sch.get_block("C")
    assert_rejected(sch, lambda: sch.transform_layout(c, ("read", 1), lambda k, j: (j, j)),
                    r"takes shape \(4, 32\) to \(32, 32\), which adds padding; give pad_value")
    assert_rejected(sch, lambda: sch.transform_layout(c, ("read", 1), lambda k, j: (j % 16, k)),
                    r"sends two elements to one place \(128 elements into \(16, 4\)\)")
    # padding an input: nothing in the function would fill it
    assert_rejected(sch, lambda: sch.transform_layout(c, ("read", 1), lambda k, j: (k // 3, k % 3, j), pad_value=0.0),
                    "transform_layout: B is not written in the function")
    assert_rejected(sch, lambda: sch.transform_layout(c, ("read", 1), lambda k, j: (k, j), pad_value="x"),
                    "transform_layout: pad_value: expected an int or a float, got 'x'")
    assert_rejected(sch, lambda: sch.transform_layout(c, ("read", 1), lambda k: (k,)),
                    "the buffer has 2 dims but the map takes 1 indices")
    assert_rejected(sch, lambda: sch.transform_layout(c, ("read", 1), lambda k, j: (j % 2, (j + k) % 16, k)),
                    "sends two elements to one place")
    assert_rejected(sch, lambda: sch.transform_layout(c, "Z", lambda k, j: (j, k)),
                    "transform_layout: block C accesses no buffer named 'Z'")


def test_pad_einsum_matmul(rng):
    before = P.matmul(7, 10, 5)
    sch = Schedule(before)
    c = sch.get_block("C")
    sch.pad_einsum(c, [4, 4, 4])
    assert [sch.get(l).extent.value for l in sch.get_loops(c)] == [8, 12, 8]
    names = [b.name for b in sch.get_child_blocks(sch.get_block("root"))]
    assert names == ["A_pad", "B_pad", "C", "C_pad_back"]
    script = sch.func.script()
    assert 'A_pad = T.alloc_buffer((8, 8), "float32")' in script
    assert "T.if_then_else(v0 < 7 and v1 < 5, A[v0, v1], T.float32(0.0))" in script
    check_numbers(before, sch.func, rng, lambda a, b, c: {2: a @ b})
    check_replay(sch, before)


def test_pad_einsum_spatial_only_then_split(rng):
    before = P.elementwise(10, 6)
    sch = Schedule(before)
    b = sch.get_block("B")
    sch.pad_einsum(b, [8, 1])
    i, _ = sch.get_loops(b)
    sch.split(i, [None, 8])
    assert "T.where" not in sch.func.script()  # the padded loop splits evenly
    check_numbers(before, sch.func, rng, lambda a, b: {1: a * 2})
    check_replay(sch, before)


def test_pad_einsum_rejections():
    sch = Schedule(P.matmul(7, 10, 5))
    c = sch.get_block("C")
    assert_rejected(sch, lambda: sch.pad_einsum(c, [4, 4]), r"pad_einsum: padding: expected 3 positive ints")
    assert_rejected(sch, lambda: sch.pad_einsum(c, [4, 0, 4]), r"pad_einsum: padding: expected 3 positive ints")
    sch = Schedule(P.conv1d(10, 3))
    conv = sch.get_block("C")
    assert_rejected(sch, lambda: sch.pad_einsum(conv, [4, 1]), r"pad_einsum: block C is not an einsum: index vi \+ vr0")
    A, B = Buffer("A", (3, 5)), Buffer("B", (3,))
    from refcomp.ast import max_

    maxred = P.func([A, B], [P.stage("B", B, (3,), lambda i, r: A[i, r], reduce=(5,), init=-1e30, combine=max_)])
    sch = Schedule(maxred)
    m = sch.get_block("B")
    assert_rejected(sch, lambda: sch.pad_einsum(m, [1, 4]), "padding a reduce iter of block B needs out = out +")
    sch = Schedule(P.matmul(8, 8, 8))
    c = sch.get_block("C")
    i, _, _ = sch.get_loops(c)
    sch.split(i, [None, 4])
    assert_rejected(sch, lambda: sch.pad_einsum(c, [4, 4, 4]), "pad_einsum: block C needs trivial bindings")


def test_set_scope_and_storage_align_golden(rng):
    before = P.two_elementwise(8, 4)
    sch = Schedule(before)
    b = sch.get_block("B")
    sch.set_scope(b, 0, "shared")
    sch.storage_align(b, 0, 0, 8, 3)
    assert_script(sch.func, '''
        @T.prim_func
        def main(A: T.Buffer((8, 4), "float32"), C: T.Buffer((8, 4), "float32")):
            with T.block("root"):
                T.reads()
                T.writes()
                B = T.alloc_buffer((8, 4), "float32", scope="shared", strides=(11, 1))
                for i, j in T.grid(8, 4):
                    with T.block("B"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        T.reads(A[vi, vj])
                        T.writes(B[vi, vj])
                        B[vi, vj] = A[vi, vj] * T.float32(2.0)
                for i_1, j_1 in T.grid(8, 4):
                    with T.block("C"):
                        vi_1, vj_1 = T.axis.remap("SS", [i_1, j_1])
                        T.reads(B[vi_1, vj_1])
                        T.writes(C[vi_1, vj_1])
                        C[vi_1, vj_1] = B[vi_1, vj_1] + T.float32(1.0)
    ''')
    check_numbers(before, sch.func, rng)
    check_replay(sch, before)


def test_transform_layout_golden(rng):
    before = P.two_elementwise(4, 8)
    sch = Schedule(before)
    sch.transform_layout(sch.get_block("B"), ("write", 0), lambda i, j: (j // 4, i, j % 4))
    assert_script(sch.func, '''
        @T.prim_func
        def main(A: T.Buffer((4, 8), "float32"), C: T.Buffer((4, 8), "float32")):
            with T.block("root"):
                T.reads()
                T.writes()
                B = T.alloc_buffer((2, 4, 4), "float32")
                for i, j in T.grid(4, 8):
                    with T.block("B"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        T.reads(A[vi, vj])
                        T.writes(B[vj // 4, vi, vj % 4])
                        B[vj // 4, vi, vj % 4] = A[vi, vj] * T.float32(2.0)
                for i_1, j_1 in T.grid(4, 8):
                    with T.block("C"):
                        vi_1, vj_1 = T.axis.remap("SS", [i_1, j_1])
                        T.reads(B[vj_1 // 4, vi_1, vj_1 % 4])
                        T.writes(C[vi_1, vj_1])
                        C[vi_1, vj_1] = B[vj_1 // 4, vi_1, vj_1 % 4] + T.float32(1.0)
    ''')
    check_numbers(before, sch.func, rng, lambda a, c: {1: a * 2 + 1})
    check_replay(sch, before)


def test_pad_einsum_golden(rng):
    before = P.elementwise(6, 3)
    sch = Schedule(before)
    sch.pad_einsum(sch.get_block("B"), [4, 1])
    assert_script(sch.func, '''
        @T.prim_func
        def main(A: T.Buffer((6, 3), "float32"), B: T.Buffer((6, 3), "float32")):
            with T.block("root"):
                T.reads()
                T.writes()
                A_pad = T.alloc_buffer((8, 3), "float32")
                B_pad = T.alloc_buffer((8, 3), "float32")
                for ax0, ax1 in T.grid(8, 3):
                    with T.block("A_pad"):
                        v0, v1 = T.axis.remap("SS", [ax0, ax1])
                        T.reads(A[v0, v1])
                        T.writes(A_pad[v0, v1])
                        A_pad[v0, v1] = T.if_then_else(v0 < 6, A[v0, v1], T.float32(0.0))
                for i, j in T.grid(8, 3):
                    with T.block("B"):
                        vi, vj = T.axis.remap("SS", [i, j])
                        T.reads(A_pad[vi, vj])
                        T.writes(B_pad[vi, vj])
                        B_pad[vi, vj] = A_pad[vi, vj] * T.float32(2.0)
                for ax0_1, ax1_1 in T.grid(6, 3):
                    with T.block("B_pad_back"):
                        v0_1, v1_1 = T.axis.remap("SS", [ax0_1, ax1_1])
                        T.reads(B_pad[v0_1, v1_1])
                        T.writes(B[v0_1, v1_1])
                        B[v0_1, v1_1] = B_pad[v0_1, v1_1]
    ''')
    check_numbers(before, sch.func, rng, lambda a, b: {1: a * 2})
    check_replay(sch, before)


def test_layout_changes_refuse_buffers_viewed_by_match_buffer():
    from refcomp.ast import MatchBufferRegion, Range
    from refcomp.loops.primitives.tree import replace_in_func

    func = P.two_elementwise(8, 4)
    from refcomp.loops.primitives.lookup import locate_block

    realize = locate_block(func, "C", "test").realize
    B = realize.block.reads[0].buffer
    view = Buffer("B_tile", (1, 4))
    match = MatchBufferRegion(view, P.BufferRegion(B, (Range(realize.block.iter_vars[0].var, 1), Range(0, 4))))
    func = replace_in_func(func, {id(realize): realize.with_(block=realize.block.with_(match_buffers=(match,)))})
    sch = Schedule(func)
    b = sch.get_block("B")
    assert_rejected(sch, lambda: sch.transform_layout(b, ("write", 0), lambda i, j: (j, i)),
                    "transform_layout: block C views B through match_buffer B_tile")
    assert_rejected(sch, lambda: sch.storage_align(b, 0, 0, 8, 1), "storage_align: block C views B")


# ----------------------------------------------------------------------------- padding, big maps, int64

def _scale_then_shift(n: int = 100):
    """B = A * 2 (intermediate); C = B + 1, one-dimensional."""
    A, B, C = Buffer("A", (n,)), Buffer("B", (n,)), Buffer("C", (n,))
    return P.func([A, C], [P.stage("B", B, (n,), lambda i: A[i] * 2.0),
                           P.stage("C", C, (n,), lambda i: B[i] + 1.0)], allocs=[B])


def test_transform_layout_pads_an_intermediate(rng):
    before = _scale_then_shift(100)
    sch = Schedule(before)
    sch.transform_layout("B", ("write", 0), lambda i: (i // 32, i % 32), pad_value=-1.0)
    assert_script(sch.func, '''
        @T.prim_func
        def main(A: T.Buffer((100,), "float32"), C: T.Buffer((100,), "float32")):
            with T.block("root"):
                T.reads()
                T.writes()
                B = T.alloc_buffer((4, 32), "float32")
                for i in range(100):
                    with T.block("B"):
                        vi = T.axis.spatial(100, i)
                        T.reads(A[vi])
                        T.writes(B[vi // 32, vi % 32])
                        B[vi // 32, vi % 32] = A[vi] * T.float32(2.0)
                for ax0 in range(28):
                    with T.block("B_pad"):
                        v0 = T.axis.spatial(128, ax0 + 100)
                        T.reads()
                        T.writes(B[v0 // 32, v0 % 32])
                        B[v0 // 32, v0 % 32] = T.float32(-1.0)
                for i_1 in range(100):
                    with T.block("C"):
                        vi_1 = T.axis.spatial(100, i_1)
                        T.reads(B[vi_1 // 32, vi_1 % 32])
                        T.writes(C[vi_1])
                        C[vi_1] = B[vi_1 // 32, vi_1 % 32] + T.float32(1.0)
    ''')
    check_numbers(before, sch.func, rng, lambda a, c: {1: a * 2 + 1})
    check_replay(sch, before)


def test_transform_layout_pads_an_output_with_pad_value(rng):
    """The caller passes the padded layout of an output and reads pad_value in the padding."""
    import refcomp
    from refcomp.loops.interpreter import interpret

    A, B = Buffer("A", (10, 7)), Buffer("B", (10, 7))
    before = P.func([A, B], [P.stage("B", B, (10, 7), lambda i, j: A[i, j] * 2.0)])
    sch = Schedule(before)
    sch.transform_layout("B", "B", lambda i, j: (j // 4, i, j % 4), pad_value=7.5)
    assert [int(d.value) for d in sch.func.buffers[1].shape] == [2, 10, 4]
    a = rng.standard_normal((10, 7)).astype(np.float32)
    expected = np.full((10, 8), 7.5, np.float32)
    expected[:, :7] = a * 2
    expected = expected.reshape(10, 2, 4).transpose(1, 0, 2)
    for run in (lambda *xs: interpret(sch.func, *xs), refcomp.build(sch.func)):
        out = rng.standard_normal((2, 10, 4)).astype(np.float32)
        run(a, out)
        np.testing.assert_allclose(out, expected, rtol=1e-6)
    check_replay(sch, before)


def test_transform_layout_pad_value_is_an_int_for_int_buffers(rng):
    A, B = Buffer("A", (6,), "int32"), Buffer("B", (6,), "int32")
    before = P.func([A, B], [P.stage("B", B, (6,), lambda i: A[i] + 3)])
    sch = Schedule(before)
    b = sch.get_block("B")
    assert_rejected(sch, lambda: sch.transform_layout(b, "B", lambda i: (i // 4, i % 4), pad_value=0.5),
                    "transform_layout: pad_value 0.5 is not a int32 value")
    sch.transform_layout("B", "B", lambda i: (i // 4, i % 4), pad_value=-9)
    import refcomp

    a = rng.integers(-5, 5, 6).astype(np.int32)
    out = rng.integers(-5, 5, (2, 4)).astype(np.int32)
    refcomp.build(sch.func)(a, out)
    np.testing.assert_array_equal(out.ravel(), np.concatenate([a + 3, [-9, -9]]))


def test_transform_layout_refuses_padding_it_cannot_list():
    """i + i // 3 for i < 6 is one-to-one into 7 places, but leaves a hole (3) in the middle: no
    larger box of i maps onto the new shape, so the padding cannot be listed."""
    sch = Schedule(_scale_then_shift(6))
    b = sch.get_block("B")
    assert_rejected(sch, lambda: sch.transform_layout(b, ("write", 0), lambda i: (i + i // 3,), pad_value=0.0),
                    "transform_layout: cannot list the padding of the map")


def test_transform_layout_of_a_large_buffer_is_proved_one_to_one():
    sch = Schedule(P.elementwise(2048, 2048))
    sch.transform_layout("B", ("write", 0), lambda i, j: (i // 16, j, i % 16))
    assert [int(d.value) for d in sch.func.buffers[1].shape] == [128, 2048, 16]
    b = sch.get_block("B")
    assert_rejected(sch, lambda: sch.transform_layout(b, ("write", 0), lambda a, b, c: (a, b // 2, (b + c) % 32)),
                    "sends two elements to one place")


def test_transform_layout_int64_shapes(rng):
    """Buffers with int64 dims (from the graph level): the map's int32 constants follow the indices."""
    from refcomp.ast import IntImm

    n, k, m = (IntImm(v, "int64") for v in (8, 4, 32))
    A = te.placeholder((n, k), "float32", "A")
    B = te.placeholder((k, m), "float32", "B")
    r = te.reduce_axis((IntImm(0, "int64"), k), "k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    before = te.create_prim_func([A, B, C])
    sch = Schedule(before)
    pack = sch.cache_read(sch.get_block("C"), 1, "global")
    sch.transform_layout(pack, ("write", 0), lambda kk, j: (j // 16, kk, j % 16))
    text = sch.func.script()
    assert "B_global[v_j // T.int64(16), v_k, v_j % T.int64(16)]" in text
    check_numbers(before, sch.func, rng, lambda a, b, c: {2: a @ b})
    check_replay(sch, before)


def test_transform_layout_refuses_padding_written_inside_a_nested_block():
    sch = Schedule(_scale_then_shift(100))
    b = sch.get_block("B")
    (i,) = sch.get_loops(b)
    _, inner = sch.split(i, [None, 10])
    sch.blockize(inner)
    assert_rejected(sch, lambda: sch.transform_layout(b, ("write", 0), lambda i: (i // 32, i % 32), pad_value=0.0),
                    "transform_layout: block B writes B inside a nested block")
    sch.transform_layout(b, ("write", 0), lambda i: (i // 10, i % 10))  # no padding: no fill needed


def test_pad_einsum_refuses_a_block_sharing_its_innermost_loop():
    """After compute_at, the producer sits in the consumer's loop: padding that loop would drop it
    (found by the random schedule test)."""
    sch = Schedule(P.two_elementwise(5, 3))
    i, _ = sch.get_loops(sch.get_block("C"))
    sch.compute_at(sch.get_block("B"), i)
    c = sch.get_block("C")
    i, j = sch.get_loops(c)
    sch.compute_at(sch.get_block("B"), j)
    assert_rejected(sch, lambda: sch.pad_einsum(c, [2, 2]), "pad_einsum: block C must be alone in its loop nest")


def _symbolic_batch_relu():
    """y[n, c, x] = max(t[n, c, x], 0) with t = a * 2 an intermediate; n is symbolic."""
    from refcomp.ast import SizeVar

    n = SizeVar("n", "int64")
    a = te.placeholder((n, 12, 5), "float32", "A")
    t = te.compute((n, 12, 5), lambda i, c, x: a[i, c, x] * 2.0, name="T")
    y = te.compute((n, 12, 5), lambda i, c, x: te.max(t[i, c, x], 0.0), name="Y")
    return te.create_prim_func([a, y])


def test_transform_layout_keeps_a_symbolic_batch_dim(rng):
    import refcomp
    from refcomp.loops.interpreter import interpret

    before = _symbolic_batch_relu()
    sch = Schedule(before)
    sch.transform_layout(sch.get_block("T"), ("write", 0), lambda i, c, x: (i, c // 4, x, c % 4))
    allocated = [b for b in sch.func.body.block.alloc_buffers if b.name == "T"][0]
    assert str(allocated.shape[0]) == "n" and [int(d.value) for d in allocated.shape[1:]] == [3, 5, 4]
    check_replay(sch, before)
    library = refcomp.build(sch.func)
    for batch in (1, 3):
        a = rng.standard_normal((batch, 12, 5)).astype(np.float32)
        got, interpreted = np.full_like(a, 7.0), np.full_like(a, 7.0)
        library(a, got)
        interpret(sch.func, a, interpreted)
        np.testing.assert_allclose(got, np.maximum(a * 2, 0), rtol=1e-6)
        np.testing.assert_allclose(interpreted, np.maximum(a * 2, 0), rtol=1e-6)


def test_transform_layout_moves_only_constant_dims():
    sch = Schedule(_symbolic_batch_relu())
    t = sch.get_block("T")
    assert_rejected(sch, lambda: sch.transform_layout(t, ("write", 0), lambda i, c, x: (c, i + x, x)),
                    r"symbolic dim 0 \(n\) that the map .* does not keep as a whole index")
    assert_rejected(sch, lambda: sch.transform_layout(t, ("write", 0), lambda i, c, x: (i // 2, c, x, i % 3)),
                    "does not keep as a whole index")
    assert_rejected(sch, lambda: sch.transform_layout(t, ("write", 0), lambda i, c, x: (i, c // 5, x, c % 5),
                                                      pad_value=0.0),
                    "adds padding to T, whose shape is not constant")


def test_transform_layout_splits_a_symbolic_dim_into_padded_panels(rng):
    """(i // 4, c, x, i % 4) packs a symbolic n into ceildiv(n, 4) panels of 4; the fill
    T_pad stores the pad value in the last panel's rows n .. 4 * ceildiv(n, 4) - 1 only."""
    import refcomp
    from refcomp.loops.interpreter import interpret

    before = _symbolic_batch_relu()
    sch = Schedule(before)
    t = sch.get_block("T")
    assert_rejected(sch, lambda: sch.transform_layout(t, ("write", 0), lambda i, c, x: (i // 4, c, x, i % 4)),
                    r"splits the symbolic dim 0 \(n\) of T by 4, which pads it unless 4 divides it; give pad_value")
    sch.transform_layout(t, ("write", 0), lambda i, c, x: (i // 4, c, x, i % 4), pad_value=-1.0)
    allocated = [b for b in sch.func.body.block.alloc_buffers if b.name == "T"][0]
    assert [int(d.value) for d in allocated.shape[1:]] == [12, 5, 4]
    from refcomp.shape.evaluate import evaluate

    n = before.params[0].shape[0]
    assert [int(evaluate(allocated.shape[0], {n: v})) for v in (1, 4, 5, 8, 9)] == [1, 1, 2, 2, 3]
    from refcomp.ast import Block, For, collect

    (fill,) = [b for b in collect(sch.func.body, Block) if b.name == "T_pad"]  # rows of the rounded box
    assert [int(evaluate(fill.iter_vars[0].dom.extent, {n: v})) for v in (1, 4, 5)] == [4, 4, 8]
    # ... and its loop over the padding alone: 4 * ceildiv(n, 4) - n rows
    pad_loops = [f for f in collect(sch.func.body, For) if f.loop_var.name == "ax0" and "n" in f.extent.script()]
    assert [int(evaluate(pad_loops[0].extent, {n: v})) for v in (1, 4, 5, 11)] == [3, 0, 3, 1]
    check_replay(sch, before)
    library = refcomp.build(sch.func)
    for batch in (1, 3, 4, 5, 8, 11):
        a = rng.standard_normal((batch, 12, 5)).astype(np.float32)
        got, interpreted = np.full_like(a, 7.0), np.full_like(a, 7.0)
        library(a, got)
        interpret(sch.func, a, interpreted)
        np.testing.assert_allclose(got, np.maximum(a * 2, 0), rtol=1e-6)
        np.testing.assert_allclose(interpreted, np.maximum(a * 2, 0), rtol=1e-6)


def test_transform_layout_splits_one_symbolic_dim_and_pads_nothing_else():
    from refcomp.ast import SizeVar

    n, m = SizeVar("n", "int64"), SizeVar("m", "int64")
    a = te.placeholder((n, m, 6), "float32", "A")
    t = te.compute((n, m, 6), lambda i, j, c: a[i, j, c] * 2.0, name="T")
    y = te.compute((n, m, 6), lambda i, j, c: t[i, j, c] + 1.0, name="Y")
    sch = Schedule(te.create_prim_func([a, y]))
    blk = sch.get_block("T")
    assert_rejected(sch, lambda: sch.transform_layout(blk, ("write", 0),
                                                      lambda i, j, c: (i // 2, j // 2, c, i % 2, j % 2), pad_value=0.0),
                    "splits 2 symbolic dims of T; at most one can be split")
    assert_rejected(sch, lambda: sch.transform_layout(blk, ("write", 0), lambda i, j, c: (i // 2, j, c, i % 2),
                                                      pad_value=0.0),
                    "splits a symbolic dim of T and keeps another")
    sch2 = Schedule(_symbolic_batch_relu())
    blk2 = sch2.get_block("T")
    assert_rejected(sch2, lambda: sch2.transform_layout(blk2, ("write", 0),
                                                        lambda i, c, x: (i // 2, c // 5, x, i % 2, c % 5), pad_value=0.0),
                    "splits a symbolic dim of T and pads a constant one")


def test_transform_layout_maps_a_region_with_ranges_to_a_box():
    """A region with ranges (a whole plane of one channel) keeps its ranges and points through a
    map that splits the channel, instead of growing to the whole buffer."""
    from refcomp.ast import BufferRegion, Range
    from refcomp.loops.primitives.index_map import IndexMap
    from refcomp.loops.primitives.storage import _Relayout

    old = Buffer("X", (2, 32, 6, 6), "float32")
    new = Buffer("Xc", (2, 2, 6, 6, 16), "float32")
    relayout = _Relayout(old, new, IndexMap.from_callable(lambda n, c, y, x: (n, c // 16, y, x, c % 16)))
    region = relayout.visit(BufferRegion(old, (Range(1, 1), Range(17, 1), Range(0, 6), Range(2, 3))))
    from refcomp.shape.evaluate import evaluate

    got = [(int(evaluate(r.min, {})), int(evaluate(r.extent, {}))) for r in region.region]
    assert got == [(1, 1), (1, 1), (0, 6), (2, 3), (1, 1)]
    mixed = _Relayout(old, new, IndexMap.from_callable(lambda n, c, y, x: (n, c // 16, x, y, c % 16)))
    region = mixed.visit(BufferRegion(old, (Range(0, 2), Range(3, 1), Range(0, 6), Range(0, 6))))
    assert [int(evaluate(r.extent, {})) for r in region.region] == [2, 1, 6, 6, 1]
