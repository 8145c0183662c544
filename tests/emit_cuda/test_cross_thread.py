"""Cross-thread reductions: a reduction loop bound to threadIdx, simulated against numpy, nvcc-compiled."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import refcomp
from refcomp import te, workloads
from refcomp.ast import Allocate, Call, collect
from refcomp.emit_cuda.prepare import prepare
from refcomp.emit_cuda.simulate import run_checked
from refcomp.loops.interpreter import interpret

from gpu_programs import check_on_the_gpu, needs_nvcc


def row_reduce(rows, cols, kind="sum", dtype="float32"):
    A = te.placeholder((rows, cols), dtype, name="A")
    k = te.reduce_axis((0, cols), name="k")
    reducer = {"sum": te.sum, "max": te.max, "min": te.min}[kind]
    B = te.compute((rows,), lambda i: reducer(A[i, k], axis=k), name="B")
    return te.create_prim_func([A, B])


def bind_row_reduce(func, threads, lane_outer=True):
    """Rows over blockIdx.x, the reduction split by `threads`, its lane loop bound to threadIdx.x."""
    sch = refcomp.Schedule(func)
    i, k = sch.get_loops(sch.get_block("B"))
    ko, ki = sch.split(k, factors=[None, threads])
    if lane_outer:
        sch.reorder(ki, ko)
    sch.bind(i, "blockIdx.x")
    sch.bind(ki, "threadIdx.x")
    return sch


def cross_thread_rows(func, output, reductions, elementwise, producers, threads):
    """Every stage of a row in one block; each reduction's lane loop bound to threadIdx.x directly."""
    sch = refcomp.Schedule(func)
    row, col = sch.get_loops(sch.get_block(output))
    sch.bind(row, "blockIdx.x")
    _, lane = sch.split(col, factors=[None, threads])
    sch.bind(lane, "threadIdx.x")
    for name in producers:
        sch.compute_at(sch.get_block(name), row)
    for name in reductions:
        block = sch.get_block(name)
        ko, ki = sch.split(sch.get_loops(block)[-1], factors=[None, threads])
        sch.reorder(ki, ko)
        sch.bind(ki, "threadIdx.x")
        sch.set_scope(block, 0, "shared")
    for name in elementwise:
        block = sch.get_block(name)
        _, lane = sch.split(sch.get_loops(block)[-1], factors=[None, threads])
        sch.bind(lane, "threadIdx.x")
        sch.set_scope(block, 0, "shared")
    return sch


def softmax_cross_thread(rows, cols, threads):
    return cross_thread_rows(workloads.softmax(rows, cols), "O", ["M", "S"], ["E"], ["S", "E", "M"], threads)


def layer_norm_cross_thread(rows, cols, threads):
    return cross_thread_rows(workloads.layer_norm(rows, cols), "out", ["mean", "var"], [], ["var", "mean"], threads)


def _softmax(a):
    e = np.exp(a - a.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def _layer_norm(a):
    return (a - a.mean(1, keepdims=True)) / np.sqrt(a.var(1, keepdims=True) + 1e-5)


_NUMPY = {"sum": lambda a: a.sum(1), "max": lambda a: a.max(1), "min": lambda a: a.min(1)}


@pytest.mark.parametrize("threads", [1, 2, 16, 32, 48, 64, 128])
@pytest.mark.parametrize("kind", ["sum", "max", "min"])
def test_row_reduction_bound_to_threads_simulates(threads, kind, rng):
    cols = threads * 3
    sch = bind_row_reduce(row_reduce(5, cols, kind), threads)
    a = rng.standard_normal((5, cols)).astype("float32")
    out = rng.standard_normal(5).astype("float32")
    run_checked(sch.func, a, out)
    np.testing.assert_allclose(out, _NUMPY[kind](a), rtol=1e-5, atol=1e-5)
    expected = rng.standard_normal(5).astype("float32")
    interpret(sch.func, a, expected)  # the scheduled function itself keeps its meaning
    np.testing.assert_allclose(expected, _NUMPY[kind](a), rtol=1e-5, atol=1e-5)


@settings(max_examples=15, deadline=None)
@given(rows=st.integers(1, 4), threads=st.integers(1, 40), chunks=st.integers(1, 3), lane_outer=st.booleans(),
       extra=st.integers(0, 5), seed=st.integers(0, 2**31 - 1))
def test_cross_thread_any_extent(rows, threads, chunks, lane_outer, extra, seed):
    """Any thread count, lane loop inside or outside the serial loop, a ragged last chunk (predicate)."""
    cols = threads * chunks + (extra if threads > 1 else 0)
    sch = bind_row_reduce(row_reduce(rows, cols), threads, lane_outer)
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (rows, cols)).astype("float32")
    out = rng.uniform(-1, 1, rows).astype("float32")
    run_checked(sch.func, a, out)
    np.testing.assert_allclose(out, a.sum(1), rtol=1e-5, atol=1e-5)


def test_tree_for_wide_blocks_and_shuffle_for_one_warp():
    wide = prepare(bind_row_reduce(row_reduce(2, 256), 64).func)
    assert "B_red" in {a.buffer.name for a in collect(wide.body, Allocate)}
    assert not [c for c in collect(wide.body, Call) if c.op == "warp_reduce"]
    syncs = [c for c in collect(wide.body, Call) if c.op == "tvm_storage_sync"]
    assert len(syncs) >= 6  # one before each of the 6 tree steps (64 -> 1) at least
    for threads in (32, 16, 4):  # one warp, or its first lanes: a shuffle butterfly of that width
        warp = prepare(bind_row_reduce(row_reduce(2, threads * 2), threads).func)
        calls = [c for c in collect(warp.body, Call) if c.op == "warp_reduce"]
        assert len(calls) == 1 and calls[0].args[2].value == threads
    odd = prepare(bind_row_reduce(row_reduce(2, 24), 12).func)  # not a power of two: the tree
    assert not [c for c in collect(odd.body, Call) if c.op == "warp_reduce"]


@pytest.mark.parametrize("threads", [32, 64, 40])
def test_softmax_with_cross_thread_reductions(threads, rng):
    sch = softmax_cross_thread(3, 128, threads)
    a = rng.standard_normal((3, 128)).astype("float32")
    out = rng.standard_normal((3, 128)).astype("float32")
    run_checked(sch.func, a, out)
    np.testing.assert_allclose(out, _softmax(a), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("threads", [32, 128])
def test_layer_norm_with_cross_thread_reductions(threads, rng):
    sch = layer_norm_cross_thread(4, 256, threads)
    a = rng.standard_normal((4, 256)).astype("float32")
    out = rng.standard_normal((4, 256)).astype("float32")
    run_checked(sch.func, a, out)
    np.testing.assert_allclose(out, _layer_norm(a), rtol=1e-4, atol=1e-5)


def test_local_output_is_an_all_reduce(rng):
    """A row sum kept per thread (local) and used by every thread: each thread gets the total."""
    A = te.placeholder((3, 64), "float32", name="A")
    k = te.reduce_axis((0, 64), name="k")
    S = te.compute((3,), lambda i: te.sum(A[i, k], axis=k), name="S")
    O = te.compute((3, 64), lambda i, j: A[i, j] - S[i], name="O")
    sch = refcomp.Schedule(te.create_prim_func([A, O]))
    row, col = sch.get_loops(sch.get_block("O"))
    sch.bind(row, "blockIdx.x")
    sch.bind(col, "threadIdx.x")
    sch.compute_at(sch.get_block("S"), row)
    block = sch.get_block("S")
    ko, ki = sch.split(sch.get_loops(block)[-1], factors=[None, 16])
    sch.reorder(ki, ko)
    sch.bind(ki, "threadIdx.x")
    sch.set_scope(block, 0, "local")
    a = rng.standard_normal((3, 64)).astype("float32")
    out = rng.standard_normal((3, 64)).astype("float32")
    run_checked(sch.func, a, out)
    np.testing.assert_allclose(out, a - a.sum(1, keepdims=True), rtol=1e-5, atol=1e-5)


def test_bind_refuses_what_is_not_a_cross_thread_reduction():
    # a reduction whose update is not out = out op x
    A = te.placeholder((4, 32), "float32", name="A")
    k = te.reduce_axis((0, 32), name="k")
    B = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="B")
    sch = refcomp.Schedule(te.create_prim_func([A, B]))
    i, kk = sch.get_loops(sch.get_block("B"))
    with pytest.raises(refcomp.ScheduleError, match="carries the reduction"):
        sch.parallel(kk)  # only threadIdx may carry a reduction
    with pytest.raises(refcomp.ScheduleError, match="carries the reduction"):
        sch.bind(kk, "blockIdx.x")
    # a reduce loop outside the nest directly around the block (the block's loop holds another stage)
    sch = refcomp.Schedule(workloads.softmax(2, 64))
    m = sch.get_block("M")
    row, k1 = sch.get_loops(m)
    ko, ki = sch.split(k1, factors=[None, 16])
    sch.reorder(ki, ko)
    kio, kii = sch.split(ki, factors=[None, 4])
    sch.bind(kii, "threadIdx.x")  # kio, ko above: a perfect nest, accepted
    sch = refcomp.Schedule(workloads.matmul(8, 8, 8))
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.reorder(i, k, j)
    with pytest.raises(refcomp.ScheduleError, match="reduce iters only"):
        sch.bind(k, "threadIdx.x")  # j, a spatial loop, lies between k and the block


def test_bind_refuses_a_product_reduction():
    A = te.placeholder((2, 8), "float32", name="A")
    k = te.reduce_axis((0, 8), name="k")
    B = te.compute((2,), lambda i: te.prod(A[i, k], axis=k), name="B") if hasattr(te, "prod") else None
    if B is None:
        pytest.skip("te has no product reduction")
    sch = refcomp.Schedule(te.create_prim_func([A, B]))
    _, kk = sch.get_loops(sch.get_block("B"))
    with pytest.raises(refcomp.ScheduleError, match="out = out \\+ x"):
        sch.bind(kk, "threadIdx.x")


def test_trace_round_trip_of_a_cross_thread_bind(rng):
    sch = bind_row_reduce(row_reduce(3, 96), 32)
    replayed = refcomp.Schedule.from_trace(row_reduce(3, 96), sch.trace.to_json())
    a = rng.standard_normal((3, 96)).astype("float32")
    out = rng.standard_normal(3).astype("float32")
    run_checked(replayed.func, a, out)
    np.testing.assert_allclose(out, a.sum(1), rtol=1e-5, atol=1e-5)


@needs_nvcc
@pytest.mark.parametrize("make", [lambda: bind_row_reduce(row_reduce(8, 256), 64).func,
                                  lambda: bind_row_reduce(row_reduce(8, 96, "max"), 32).func,
                                  lambda: bind_row_reduce(row_reduce(8, 48, "min"), 16).func,
                                  lambda: softmax_cross_thread(8, 256, 128).func,
                                  lambda: layer_norm_cross_thread(8, 256, 64).func],
                         ids=["sum64", "max32", "min16", "softmax128", "layer_norm64"])
def test_cross_thread_compiles_with_nvcc(make):
    lib = refcomp.build(make(), target="cuda")
    assert "__syncthreads" in lib.source or "__shfl_xor_sync" in lib.source
    assert lib.path.exists()


@pytest.mark.gpu
@pytest.mark.parametrize("make", [lambda: bind_row_reduce(row_reduce(8, 256), 64).func,
                                  lambda: bind_row_reduce(row_reduce(8, 48, "max"), 16).func,
                                  lambda: softmax_cross_thread(8, 256, 128).func],
                         ids=["sum64", "max16", "softmax128"])
def test_cross_thread_on_the_gpu(make, rng):
    func = make()
    check_on_the_gpu(func, rng)


def test_rows_over_thread_y_each_reduced_across_thread_x(rng):
    """4 rows per GPU block on threadIdx.y, each row's reduction across 32 threads of threadIdx.x:
    every row of threads combines its own partials (the shared buffer has one row per ty)."""
    sch = refcomp.Schedule(row_reduce(12, 64))
    i, k = sch.get_loops(sch.get_block("B"))
    io, ii = sch.split(i, factors=[None, 4])
    ko, ki = sch.split(k, factors=[None, 32])
    sch.reorder(io, ii, ki, ko)
    sch.bind(io, "blockIdx.x")
    sch.bind(ii, "threadIdx.y")
    sch.bind(ki, "threadIdx.x")
    prepared = prepare(sch.func)
    red = [a.buffer for a in collect(prepared.body, Allocate) if a.buffer.name == "B_red"]
    assert red and red[0].shape[0].value == 4 * 32
    a = rng.standard_normal((12, 64)).astype("float32")
    out = rng.standard_normal(12).astype("float32")
    run_checked(sch.func, a, out)
    np.testing.assert_allclose(out, a.sum(1), rtol=1e-5, atol=1e-5)


def test_a_reduction_to_one_value_becomes_a_one_block_kernel(rng):
    A = te.placeholder((100,), "float32", name="A")
    k = te.reduce_axis((0, 100), name="k")
    B = te.compute((1,), lambda _: te.max(A[k], axis=k), name="B")
    sch = refcomp.Schedule(te.create_prim_func([A, B]))
    loops = sch.get_loops(sch.get_block("B"))
    ko, ki = sch.split(loops[-1], factors=[None, 64])  # 128 > 100: the predicate guards the tail
    sch.reorder(ki, ko)
    sch.bind(ki, "threadIdx.x")
    a = rng.standard_normal(100).astype("float32")
    out = rng.standard_normal(1).astype("float32")
    run_checked(sch.func, a, out)
    np.testing.assert_allclose(out, [a.max()])


def test_bind_before_and_after():
    """bind of a reduction loop changes only that loop's kind (the script shows the binding)."""
    sch = refcomp.Schedule(row_reduce(4, 64))
    i, k = sch.get_loops(sch.get_block("B"))
    ko, ki = sch.split(k, factors=[None, 32])
    sch.reorder(ki, ko)
    sch.bind(i, "blockIdx.x")
    before = sch.func.script()
    sch.bind(ki, "threadIdx.x")
    after = sch.func.script()
    assert "for k_1, k_0 in T.grid(32, 2):" in before
    expected_after = '''@T.prim_func
def main(A: T.Buffer((4, 64), "float32"), B: T.Buffer((4,), "float32")):
    with T.block("root"):
        T.reads()
        T.writes()
        for i in T.thread_binding(4, thread="blockIdx.x"):
            for k_1 in T.thread_binding(32, thread="threadIdx.x"):
                for k_0 in range(2):
                    with T.block("B"):
                        v_i = T.axis.spatial(4, i)
                        v_k = T.axis.reduce(64, k_0 * 32 + k_1)
                        T.reads(A[v_i, v_k])
                        T.writes(B[v_i])
                        with T.init():
                            B[v_i] = T.float32(0.0)
                        B[v_i] = B[v_i] + A[v_i, v_k]'''
    assert after.strip() == expected_after
    # the numbers: the interpreter runs the bound loop serially, the simulation across threads
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 64)).astype("float32")
    out, simulated = np.zeros(4, "float32") + 5, np.zeros(4, "float32") + 5
    interpret(sch.func, a, out)
    run_checked(sch.func, a, simulated)
    np.testing.assert_allclose(out, a.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(simulated, a.sum(1), rtol=1e-5, atol=1e-5)


def test_bind_names_each_cross_thread_condition():
    # a loop holding two blocks
    sch = refcomp.Schedule(workloads.matmul(8, 8, 16))
    block = sch.get_block("C")
    i, j, k = sch.get_loops(block)
    ko, ki = sch.split(k, factors=[None, 4])
    copy = sch.cache_read(block, 0, "shared")
    sch.compute_at(copy, ko)
    with pytest.raises(refcomp.ScheduleError, match="cross-thread reduction over loop .*exactly one block"):
        sch.bind(ko, "threadIdx.x")
    # a reduce loop above the bound one that also holds another stage: outside the nest
    with pytest.raises(refcomp.ScheduleError, match="outside the reduction nest"):
        sch.bind(ki, "threadIdx.x")
    # the plain shape: one block, its only reduce loop bound
    sch = refcomp.Schedule(row_reduce(2, 8))
    _, k2 = sch.get_loops(sch.get_block("B"))
    sch.bind(k2, "threadIdx.x")  # the plain shape is accepted


def test_moving_a_block_under_a_cross_thread_loop_is_refused():
    A = te.placeholder((2, 64), "float32", name="A")
    E = te.compute((2, 64), lambda i, j: te.exp(A[i, j]), name="E")
    k = te.reduce_axis((0, 64), name="k")
    S = te.compute((2,), lambda i: te.sum(E[i, k], axis=k), name="S")
    sch = refcomp.Schedule(te.create_prim_func([A, S]))
    i, kk = sch.get_loops(sch.get_block("S"))
    ko, ki = sch.split(kk, factors=[None, 32])
    sch.reorder(ki, ko)
    sch.bind(ki, "threadIdx.x")
    with pytest.raises(refcomp.ScheduleError, match="cross-thread reduction over loop .*exactly one block"):
        sch.compute_at(sch.get_block("E"), ko)
