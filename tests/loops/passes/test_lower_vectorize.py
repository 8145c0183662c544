"""Pass vectorize: vector IR for vectorized loops, tails, predicates, and the loops it must keep."""
import pytest

from refcomp import te
from refcomp.ast import (
    Broadcast, Buffer, BufferLoad, BufferStore, Call, Cast, Evaluate, For, IfThenElse, IntImm, LetStmt, PrimFunc,
    Ramp, Select, StringImm, Var, assert_structural_equal, collect, const, seq,
)
from refcomp.loops.passes.flatten_buffers import flatten_buffers
from refcomp.loops.passes.lower_blocks import lower_blocks
from refcomp.loops.passes.simplify import simplify
from refcomp.loops.vectorize import vectorize

from lowering_programs import conv2d_padded, elementwise, matmul, row_sum, split, with_kind
from numerics import check_same_results


def prepared(func):
    return simplify(flatten_buffers(lower_blocks(func)))


def vectorized(func):
    return simplify(vectorize(prepared(func)))


def vector_lanes(func):
    return sorted({s.value.dtype.lanes for s in collect(func, BufferStore) if s.value.dtype.lanes > 1})


def kept_loops(func):
    return [loop for loop in collect(func, For) if loop.kind == "vectorized"]


def test_power_of_two_extent_becomes_one_vector_statement():
    func = with_kind(elementwise(n=16), "i", "vectorized")
    result = vectorized(func)
    A, B, C = result.params
    ramp = Ramp(IntImm(0, "int32"), IntImm(1, "int32"), 16)
    a, b = BufferLoad(A, (ramp,)), BufferLoad(B, (ramp,))
    expected = PrimFunc(result.params, BufferStore(C, a * b + a, (ramp,)), attrs=result.attrs)
    assert_structural_equal(result, expected)
    assert str(result.body.value.dtype) == "float32x16"
    check_same_results(func, result)


def test_constant_extent_uses_smaller_vectors_for_the_rest():
    func = with_kind(elementwise(n=39), "i", "vectorized")
    result = vectorized(func)
    assert vector_lanes(result) == [2, 4, 16]  # 39 = 2 * 16 + 4 + 2 + 1
    assert not kept_loops(result)
    check_same_results(func, result)


def test_float64_uses_eight_lanes():
    func = with_kind(elementwise(n=16, dtype="float64"), "i", "vectorized")
    assert vector_lanes(vectorized(func)) == [8]
    check_same_results(func, vectorized(func))


@pytest.mark.parametrize("n", [0, 1, 15, 16, 35])
def test_symbolic_extent_has_vector_main_part_and_scalar_tail(n):
    func = with_kind(elementwise(), "i", "vectorized")
    result = vectorized(func)
    loops = collect(result, For)
    assert [loop.kind for loop in loops] == ["serial", "serial"]
    assert vector_lanes(result) == [16]
    check_same_results(func, result, sizes={"n": n})


@pytest.mark.parametrize("n", [5, 16, 37])
def test_imperfect_split_is_vectorised_under_an_every_lane_test(n):
    func = split(elementwise(), "i", 8)
    func = with_kind(with_kind(func, "i_i", "vectorized"), "i_o", "parallel")
    result = vectorized(func)
    (outer,) = [loop for loop in collect(result, For) if loop.kind == "parallel"]
    branch = outer.body
    assert isinstance(branch, IfThenElse) and branch.else_case is not None
    assert branch.then_case.value.dtype.lanes == 8
    # the chunk some lanes of which fail the test runs as two halves of 4 lanes: the first tested
    # again (a vector of 4, else a serial loop); the second, whose test is the whole chunk's
    # (the last lane), known to fail there: a serial loop
    first, second = branch.else_case.stmts
    assert isinstance(first, IfThenElse) and first.then_case.value.dtype.lanes == 4
    assert isinstance(first.else_case, For) and first.else_case.kind == "serial"
    assert isinstance(second, For) and second.kind == "serial"
    check_same_results(func, result, sizes={"n": n})


def test_matmul_inner_reduction_loop_stays_inside_the_vector_body():
    func = with_kind(matmul(3, 12, 5), "j", "vectorized")
    result = vectorized(func)
    assert vector_lanes(result) == [4, 8]
    loads = [l for l in collect(result, BufferLoad) if l.dtype.lanes > 1]
    assert {l.buffer.name for l in loads} == {"B", "C"}
    assert any(isinstance(b.value, BufferLoad) and b.value.buffer.name == "A" for b in collect(result, Broadcast))
    check_same_results(func, result)


def serial_loops(func, name):
    return [loop for loop in collect(func, For) if loop.loop_var.name == name and loop.kind == "serial"]


def test_reduction_into_one_element_becomes_a_serial_loop():
    func = with_kind(row_sum(3, 16), "k", "vectorized")
    result = vectorized(func)
    assert not kept_loops(result) and not vector_lanes(result)
    assert serial_loops(result, "k")  # "omp simd" over k would race on B[i]: it is not kept
    check_same_results(func, result)


def test_padding_guard_is_decided_per_chunk():
    func = with_kind(conv2d_padded(h=3, w=20), "x", "vectorized")  # the padding stage
    result = vectorized(func)
    chunks = [s for s in collect(result, IfThenElse)
              if isinstance(s.then_case, BufferStore) and s.then_case.value.dtype.lanes > 1]
    # 22 columns, cut where the padding test changes (columns 1 and 21): column 0 scalar, the
    # image's 20 columns a vector of 16 and one of 4, each run when the row is inside (tested at
    # run time: a test that does not depend on the column fails for both halves alike, a serial
    # loop), column 21 scalar; no chunk straddles the edge
    assert sorted(chunk.then_case.value.dtype.lanes for chunk in chunks) == [4, 16]
    for chunk in chunks:
        assert isinstance(chunk.else_case, For) and chunk.else_case.kind == "serial"
        assert not collect(chunk.then_case, Call)  # if_then_else taken: a plain vector load
    check_same_results(func, result)


def test_lane_cuts_are_the_edges_of_linear_tests_in_the_loop_var_alone():
    from refcomp.ast import And, GE, LT
    from refcomp.loops.vectorize import _lane_cuts

    x, y = Var("x"), Var("y")
    inside = And(GE(x - 1, const(0)), LT(x - 1, const(20)))
    assert _lane_cuts([inside], x, 0, 22) == [1, 21]
    assert _lane_cuts([inside], x, 1, 21) == []  # no edge strictly inside the range
    assert _lane_cuts([And(GE(x * 2, const(7)), LT(y, const(3)))], x, 0, 10) == [4]  # 2x >= 7 from x = 4
    assert _lane_cuts([LT(x + y, const(5))], x, 0, 10) == []  # another var: not decided statically
    assert _lane_cuts([inside, GE(x, const(5)), LT(x, const(9))], x, 0, 22) == []  # more than two cuts


@pytest.mark.parametrize("w", [1, 3, 7, 13, 30])
def test_padded_rows_of_every_width_match(w):
    """The halving of chunks that touch the padding gives the same numbers at odd, prime and tiny
    widths."""
    func = with_kind(conv2d_padded(h=3, w=w), "x", "vectorized")
    check_same_results(func, vectorized(func))


def test_concat_select_runs_as_vectors_on_both_sides():
    """A concat's select (the rotate-half of rotary embeddings: out[c] = -A[c + 16] below 16,
    A[c - 16] from there): a chunk of 16 lanes lies on one side, so it runs as vector code with
    the first branch or with the second (tested per chunk), no lane by lane."""
    A, B = Buffer("A", (4 * 32,)), Buffer("B", (4 * 32,))
    j, c0, c1 = Var("j"), Var("c0"), Var("c1")
    c = c0 * 16 + c1
    value = Call("if_then_else", (c < 16, const(0.0) - A[j * 32 + c + 16], A[j * 32 + c - 16]), "float32")
    body = For(c1, 0, 16, "vectorized", BufferStore(B, value, (j * 32 + c,)))
    func = PrimFunc((A, B), For(j, 0, 4, "serial", For(c0, 0, 2, "serial", body)))
    result = vectorized(func)
    assert not kept_loops(result) and not serial_loops(result, "c1")
    stores = [s for s in collect(result, BufferStore) if s.value.dtype.lanes == 16]
    assert len(stores) == 2
    check_same_results(func, result)


def test_guard_using_an_inner_loop_var_keeps_the_loop():
    A, B = Buffer("A", (64,)), Buffer("B", (8,))
    i, k = Var("i"), Var("k")
    guarded = Call("if_then_else", (i + k < 8, A[i * 8 + k], const(0.0)), "float32")
    body = For(k, 0, 8, "serial", BufferStore(B, B[i] + guarded, (i,)))
    func = PrimFunc((A, B), For(i, 0, 8, "vectorized", body))
    result = vectorize(func)
    assert len(kept_loops(result)) == 1
    check_same_results(func, result)


def test_convolution_output_row_vectorises_around_the_reduction():
    func = with_kind(conv2d_padded(), "x", "vectorized", occurrence=1)
    result = vectorized(func)
    assert vector_lanes(result) == [2, 4]  # w = 7 = 4 + 2 + 1
    check_same_results(func, result)


def test_relu_guard_becomes_a_select():
    A = te.placeholder((16,), "float32", "A")
    B = te.compute((16,), lambda i: te.if_then_else(A[i] > 0.0, A[i], te.const(0.0, "float32")), name="B")
    func = with_kind(te.create_prim_func([A, B]), "i", "vectorized")
    result = vectorized(func)
    (store,) = collect(result, BufferStore)
    assert isinstance(store.value, Select) and store.value.dtype.lanes == 16
    check_same_results(func, result)


def test_casts_and_math_calls_get_vector_types():
    A = te.placeholder((32,), "int8", "A")
    B = te.compute((32,), lambda i: te.exp(A[i].astype("float32") * 0.25), name="B")
    func = with_kind(te.create_prim_func([A, B]), "i", "vectorized")
    result = vectorized(func)
    (store,) = collect(result, BufferStore)
    call = store.value
    assert isinstance(call, Call) and call.op == "exp" and str(call.dtype) == "float32x16"
    assert any(str(c.dtype) == "float32x16" and str(c.value.dtype) == "int8x16" for c in collect(result, Cast))
    check_same_results(func, result)


def test_transpose_gathers_on_load_and_scatter_store_by_ramp():
    A = te.placeholder((8, 4), "float32", "A")
    B = te.compute((4, 8), lambda i, j: A[j, i] + 1.0, name="B")
    func = with_kind(te.create_prim_func([A, B]), "j", "vectorized")
    result = vectorized(func)
    (load,) = [l for l in collect(result, BufferLoad) if l.dtype.lanes > 1]
    assert isinstance(load.indices[0], Ramp) and load.indices[0].stride.value == 4
    check_same_results(func, result)
    # j outer, i inner and vectorized: the store walks B's column, 8 elements apart
    flat_a, flat_b = Buffer("A", (32,)), Buffer("B", (32,))
    i, j = Var("i"), Var("j")
    body = For(j, 0, 8, "serial", For(i, 0, 4, "vectorized", BufferStore(
        flat_b, flat_a[j * 4 + i] + 1.0, (i * 8 + j,))))
    func = PrimFunc((flat_a, flat_b), body)
    result = vectorized(func)
    (store,) = collect(result, BufferStore)
    assert store.indices[0].stride.value == 8 and store.value.dtype.lanes == 4
    check_same_results(func, result)
    # the same loop vectorised over the outer j: the store then moves with the inner loop i,
    # which the checks do not analyse: the loop runs serially
    outer = PrimFunc((flat_a, flat_b), For(j, 0, 8, "vectorized", For(i, 0, 4, "serial", body.body.body)))
    assert not kept_loops(vectorize(outer)) and serial_loops(vectorize(outer), "j")


def test_effects_and_cross_lane_dependences_make_the_loop_serial():
    A = Buffer("A", (17,))
    i = Var("i")
    hook = Evaluate(Call("call_extern", (StringImm("hook"), i), "int32"))
    with_call = PrimFunc((A,), For(i, 0, 16, "vectorized", seq(hook, BufferStore(A, const(1.0), (i,)))))
    assert serial_loops(vectorize(with_call), "i")
    shift = PrimFunc((A,), For(i, 0, 16, "vectorized", BufferStore(A, A[i + 1] * 2.0, (i,))))
    result = vectorize(shift)
    assert serial_loops(result, "i") and not kept_loops(result)
    check_same_results(shift, result)


def test_triangular_inner_loop_keeps_the_loop_for_simd():
    A = Buffer("A", (8,))
    i, j = Var("i"), Var("j")
    body = For(j, 0, i, "serial", BufferStore(A, A[i] + 1.0, (i,)))
    func = PrimFunc((A,), For(i, 0, 8, "vectorized", body))
    result = vectorize(func)
    assert len(kept_loops(result)) == 1  # lanes touch disjoint elements: omp simd is fine
    check_same_results(func, result)


def test_nested_vectorized_loops_vectorise_the_inner_one():
    func = with_kind(with_kind(matmul(4, 8, 3), "j", "vectorized"), "i", "vectorized")
    result = vectorized(func)
    assert not kept_loops(result) and serial_loops(result, "i")  # the outer one holds vector code
    assert vector_lanes(result) == [8]
    check_same_results(func, result)


def test_every_copy_of_the_body_has_its_own_loop_vars():
    func = with_kind(matmul(2, 7, 3), "j", "vectorized")
    result = vectorized(func)
    bound = [loop.loop_var for loop in collect(result, For)]
    assert len(bound) == len(set(bound))


def test_loop_with_nonzero_start_vectorises_from_its_start():
    A, B = Buffer("A", (40,)), Buffer("B", (40,))
    i = Var("i")
    func = PrimFunc((A, B), For(i, 3, 21, "vectorized", BufferStore(B, A[i] * 3.0, (i,))))
    result = vectorized(func)
    ramps = [s.indices[0] for s in collect(result, BufferStore) if isinstance(s.indices[0], Ramp)]
    assert sorted((r.base.value, r.lanes) for r in ramps) == [(3, 16), (19, 4)]  # 21 = 16 + 4 + 1
    check_same_results(func, result)


@pytest.mark.parametrize("dtype,lanes", [("float16", 32), ("bfloat16", 32), ("int8", 32), ("uint16", 32),
                                         ("int64", 8)])
def test_narrow_and_wide_types_vectorise_with_matching_lane_counts(dtype, lanes):
    A = te.placeholder((40,), dtype, "A")
    if dtype in ("float16", "bfloat16"):
        B = te.compute((40,), lambda i: (A[i].astype("float32") * 0.5).astype(dtype), name="B")
    else:
        B = te.compute((40,), lambda i: A[i] * 3 + 1, name="B")
    func = with_kind(te.create_prim_func([A, B]), "i", "vectorized")
    result = vectorized(func)
    widest = max(vector_lanes(result))
    assert widest == (16 if dtype in ("float16", "bfloat16") else lanes)  # the float32 casts set the width
    check_same_results(func, result)


def test_vectorize_alone_picks_gpu_width_for_thread_bound_functions():
    A = Buffer("A", (256,))
    t, v = Var("t"), Var("v")
    body = For(t, 0, 16, "thread_binding", For(v, 0, 16, "vectorized", BufferStore(
        A, A[t * 16 + v] * 2.0, (t * 16 + v,))), thread_binding="threadIdx.x")
    func = PrimFunc((A,), body)
    assert vector_lanes(vectorize(func)) == [4]  # float4
    assert vector_lanes(vectorize(func, vector_bytes=64)) == [16]
    check_same_results(func, vectorize(func))


def test_outer_loop_vectorises_when_inner_loops_stay_within_a_lane():
    A = te.placeholder((8, 10), "float32", "A")
    B = te.compute((8, 10), lambda i, j: A[i, j] * 2.0, name="B")
    func = with_kind(te.create_prim_func([A, B]), "i", "vectorized")  # j runs inside each lane
    result = vectorized(func)
    (store,) = collect(result, BufferStore)
    assert store.value.dtype.lanes == 8 and store.indices[0].stride.value == 10
    assert [loop.loop_var.name for loop in collect(result, For)] == ["j"]
    check_same_results(func, result)


def test_loop_bounds_read_from_memory_are_read_once():
    N = Buffer("N", (64,), "int32")
    i = Var("i")
    # for i in [N[40], N[40] + N[41]): N[i] += 1 -- the vector part changes N[40] and N[41],
    # so the tail after it must not compute its start from them again
    func = PrimFunc((N,), For(i, N[40], N[41], "vectorized", BufferStore(N, N[i] + 1, (i,))))
    result = vectorize(func)
    assert vector_lanes(result) and isinstance(result.body, LetStmt)
    import numpy as np
    from numerics import interpreter
    for version in (func, result):
        n = np.zeros(64, "int32")
        n[40], n[41] = 30, 20
        interpreter()(version, n)
        expected = np.zeros(64, "int32")
        expected[40], expected[41] = 30, 20
        expected[30:50] += 1
        np.testing.assert_array_equal(n, expected)


def test_gather_of_rows_with_a_64_bit_offset_stays_contiguous_and_full_width():
    """D[r, f] = S[rows[r], f] with S's row count int64: the flattened index is
    int64(rows[r]) * 32 + int64(f); the widened loop index is a Ramp again (a contiguous load)
    and the int64 offset does not halve the float32 lanes."""
    from refcomp.ast import SizeVar
    k = SizeVar("k", "int64")
    S, D = Buffer("S", (k, 32), "float32"), Buffer("D", (4, 32), "float32")
    rows = Buffer("rows", (4,), "int32")
    r, f = Var("r"), Var("f")
    body = For(r, IntImm(0), IntImm(4), "serial",
               For(f, IntImm(0), IntImm(32), "vectorized", BufferStore(D, S[rows[r], f], (r, f))))
    func = PrimFunc((rows, S, D), body, "gather_rows")
    result = vectorized(func)
    assert vector_lanes(result) == [16]
    loads = [load for load in collect(result, BufferLoad) if load.buffer.name == "S"]
    assert loads and all(isinstance(load.indices[0], Ramp) for load in loads)
    assert all(str(load.indices[0].dtype) == "int64x16" for load in loads)
