"""The lowering pipeline: schedules from refcomp.Schedule lowered and run, the debug switch, the contract."""
import logging

import numpy as np
import pytest
from hypothesis import given, strategies as st

import refcomp
from refcomp import te
from refcomp.ast import (
    AssertStmt, Block, BlockRealize, Buffer, BufferLoad, BufferStore, For, IRModule, MatchBufferRegion,
    PrimFunc, Ramp, Var, collect, const,
)
from refcomp.ast.wellformed import verify_well_formed
from refcomp.loops.lower import PIPELINE, lower, original_buffer


def _random(func, rng, sizes=None):
    arrays = []
    for buffer in func.buffers:
        shape = [d.value if hasattr(d, "value") else sizes[d.name] for d in buffer.shape]
        if buffer.dtype.is_integer:
            arrays.append(rng.integers(-1000, 1000, size=shape).astype(buffer.dtype.numpy()))
        else:
            arrays.append(rng.standard_normal(shape).astype(buffer.dtype.numpy()))
    return arrays


def assert_lowering_preserves_results(func, rng, sizes=None, rtol=1e-5):
    """interpret(func) == interpret(lower(func)) on fresh random data; returns the lowered func."""
    lowered = lower(func, after_pass=lambda name, f: verify_well_formed(f))
    inputs = _random(func, rng, sizes)
    expected = [a.copy() for a in inputs]
    refcomp.interpret(func, *expected)
    got = [a.copy() for a in inputs]  # a lowered function takes the arrays its original took
    refcomp.interpret(lowered, *got)
    for want, have in zip(expected, got):
        np.testing.assert_allclose(have.reshape(want.shape), want, rtol=rtol, atol=1e-5)
    return lowered


def assert_contract(lowered):
    """What the emitters may rely on: no blocks, flat buffers, originals recorded."""
    assert not collect(lowered, Block) and not collect(lowered, BlockRealize)
    assert not collect(lowered, MatchBufferRegion)
    for node in collect(lowered, BufferLoad) + collect(lowered, BufferStore):
        assert len(node.buffer.shape) == 1 and not node.buffer.strides
    for param in lowered.buffers:
        assert len(param.shape) == 1
        assert original_buffer(lowered, param) is not None


def matmul(m, n, k):
    A = te.placeholder((m, k), "float32", "A")
    B = te.placeholder((k, n), "float32", "B")
    r = te.reduce_axis(k, "k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return te.create_prim_func([A, B, C])


def test_tiled_matmul_schedule(rng):
    sch = refcomp.Schedule(matmul(16, 40, 6))
    i, j, k = sch.get_loops(sch.get_block("C"))
    io, ii = sch.split(i, [None, 4])
    jo, ji = sch.split(j, [None, 16])  # 40 = 3 * 16 - 8: imperfect
    ko, ki = sch.split(k, [None, 2])
    sch.reorder(io, jo, ko, ii, ki, ji)
    sch.vectorize(ji)
    sch.parallel(io)
    lowered = assert_lowering_preserves_results(sch.func, rng)
    assert_contract(lowered)
    assert any(isinstance(s.indices[0], Ramp) for s in collect(lowered, BufferStore))
    assert [l.kind for l in collect(lowered, For) if l.kind == "parallel"] == ["parallel"]


def test_softmax_with_vectorized_rows(rng):
    A = te.placeholder((3, 24), "float32", "A")
    k1, k2 = te.reduce_axis(24, "k1"), te.reduce_axis(24, "k2")
    M = te.compute((3,), lambda i: te.max(A[i, k1], axis=k1), name="M")
    E = te.compute((3, 24), lambda i, j: te.exp(A[i, j] - M[i]), name="E")
    S = te.compute((3,), lambda i: te.sum(E[i, k2], axis=k2), name="S")
    O = te.compute((3, 24), lambda i, j: E[i, j] / S[i], name="O")
    sch = refcomp.Schedule(te.create_prim_func([A, O]))
    for name in ("E", "O"):
        _, j = sch.get_loops(sch.get_block(name))
        sch.vectorize(j)
    lowered = assert_lowering_preserves_results(sch.func, rng)
    assert_contract(lowered)
    calls = [c for c in collect(lowered, refcomp.ast.Call) if c.op == "exp"]
    assert calls and all(c.dtype.lanes == 16 or c.dtype.lanes == 8 for c in calls)


def test_symbolic_elementwise_with_strided_vector_split(rng):
    n = te.size_var("n")
    A = te.placeholder((n, 3), "float32", "A")
    B = te.compute((n, 3), lambda i, j: te.sigmoid(A[i, j]) * 2.0, name="B")
    sch = refcomp.Schedule(te.create_prim_func([A, B]))
    i, j = sch.get_loops(sch.get_block("B"))
    outer, inner = sch.split(i, [None, 8])  # n = 8 * ceil(n / 8) - r: imperfect, symbolic
    sch.reorder(outer, j, inner)
    sch.vectorize(inner)  # lanes 3 rows apart: strided loads and stores
    for size in (1, 5, 11):
        assert_lowering_preserves_results(sch.func, rng, sizes={"n": size})


def test_thread_bindings_scopes_and_asserts_are_kept():
    A = Buffer("A", (64,))
    L = Buffer("L", (4,), scope="local")
    b, t = Var("b"), Var("t")
    store = BufferStore(A, const(1.0), (b * 4 + t,))
    body = For(b, 0, 16, "thread_binding", For(t, 0, 4, "thread_binding", AssertStmt(
        b < 100, "b in range", store), thread_binding="threadIdx.x"), thread_binding="blockIdx.x")
    func = PrimFunc((A,), refcomp.ast.Allocate(L, body))
    lowered = lower(func)
    kinds = [(l.kind, l.thread_binding) for l in collect(lowered, For)]
    assert ("thread_binding", "blockIdx.x") in kinds and ("thread_binding", "threadIdx.x") in kinds
    assert lowered.body.buffer.scope == "local"
    unknown = PrimFunc((A,), For(b, 0, 16, "serial", AssertStmt(b < A.shape[0] // Var("q"), "guard", store)))
    assert collect(lower(unknown), AssertStmt)  # a guard that cannot be decided stays


def test_debug_switch_prints_the_ir_after_every_pass(monkeypatch, capsys):
    monkeypatch.setenv("REFCOMP_DEBUG", "1")
    lower(matmul(2, 3, 2))
    err = capsys.readouterr().err
    for name, _ in PIPELINE:
        assert f"IR after {name}" in err


def test_debug_logger_gets_the_ir(caplog):
    with caplog.at_level(logging.DEBUG, logger="refcomp.lower"):
        lower(matmul(2, 3, 2))
    assert "IR after flatten_buffers" in caplog.text and "C[i * 3 + j]" in caplog.text


def test_after_pass_hook_and_modules():
    seen = []
    module = IRModule({"mm": matmul(2, 3, 2)})
    lowered = lower(module, after_pass=lambda name, func: seen.append(name))
    assert seen == [name for name, _ in PIPELINE]
    assert not collect(lowered["mm"], Block)
    with pytest.raises(TypeError, match="PrimFunc or IRModule"):
        lower("not a function")


# ----------------------------------------------------------------------------- random schedules

def _program(draw):
    """A small te program and the name of the block to schedule."""
    kind = draw(st.sampled_from(["elementwise", "chain", "reduction", "matmul", "pooling"]))
    dtype = draw(st.sampled_from(["float32", "float64", "int32"]))
    m, n = draw(st.integers(1, 9)), draw(st.integers(1, 19))
    A = te.placeholder((m, n), dtype, "A")
    unary = (lambda x: te.exp(x * 0.5) + x) if dtype != "int32" else (lambda x: x * 3 - (x // 4))
    if kind == "elementwise":
        B = te.compute((m, n), lambda i, j: unary(A[i, j]), name="B")
        return te.create_prim_func([A, B]), "B"
    if kind == "chain":
        T = te.compute((m, n), lambda i, j: unary(A[i, j]), name="T")
        B = te.compute((n, m), lambda j, i: T[i, j] + A[i, j], name="B")
        return te.create_prim_func([A, B]), draw(st.sampled_from(["T", "B"]))
    if kind == "reduction":
        k = te.reduce_axis(n, "k")
        reducer = draw(st.sampled_from([te.sum, te.max]))
        B = te.compute((m,), lambda i: reducer(A[i, k], axis=k), name="B")
        return te.create_prim_func([A, B]), "B"
    if kind == "pooling":
        r = te.reduce_axis(2, "r")
        B = te.compute((m, n - 1 if n > 1 else 1), lambda i, j: te.max(A[i, te.min(j + r, n - 1)], axis=r), name="B")
        return te.create_prim_func([A, B]), "B"
    p = draw(st.integers(1, 5))
    W = te.placeholder((n, p), dtype, "W")
    k = te.reduce_axis(n, "k")
    B = te.compute((m, p), lambda i, j: te.sum(A[i, k] * W[k, j], axis=k), name="B")
    return te.create_prim_func([A, W, B]), "B"


@st.composite
def scheduled_programs(draw):
    """A small te program under a random sequence of schedule steps (rejected steps skipped)."""
    func, block_name = _program(draw)
    sch = refcomp.Schedule(func)
    for _ in range(draw(st.integers(0, 5))):
        step = draw(st.sampled_from(["split", "fuse", "reorder", "vectorize", "parallel", "unroll"]))
        loops = sch.get_loops(sch.get_block(block_name))
        pick = draw(st.integers(0, len(loops) - 1))
        try:
            if step == "split":
                sch.split(loops[pick], [None, draw(st.integers(1, 8))])
            elif step == "fuse" and pick + 1 < len(loops):
                sch.fuse(loops[pick], loops[pick + 1])
            elif step == "reorder" and len(loops) > 1:
                sch.reorder(*draw(st.permutations(loops)))
            elif step in ("vectorize", "parallel", "unroll"):
                getattr(sch, step)(loops[pick])
        except refcomp.ScheduleError:
            pass  # the schedule is unchanged; try the next step
    return sch.func


@given(func=scheduled_programs(), seed=st.integers(0, 2**31 - 1))
def test_random_scheduled_programs_lower_to_the_same_results(func, seed):
    rng = np.random.default_rng(seed)
    inputs = _random(func, rng)
    expected = [a.copy() for a in inputs]
    refcomp.interpret(func, *expected)

    def same_numbers(name, lowered):  # after every pass, not only at the end
        verify_well_formed(lowered)
        got = [a.copy() for a in inputs]
        refcomp.interpret(lowered, *got)
        for want, have in zip(expected, got):
            np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-5, err_msg=f"after {name}")

    assert_contract(lower(func, after_pass=same_numbers))


def test_cache_stages_keep_their_scopes_and_strided_buffers_flatten(rng):
    sch = refcomp.Schedule(matmul(8, 16, 4))
    block = sch.get_block("C")
    i, _, _ = sch.get_loops(block)
    writer = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(writer, i)
    reader = sch.cache_read(block, 0, "shared")
    sch.storage_align(reader, 0, 0, 16, 4)
    strides = [b.strides for b in collect(sch.func, refcomp.ast.Block)[-1].alloc_buffers]
    lowered = assert_lowering_preserves_results(sch.func, rng)
    assert_contract(lowered)
    scopes = {a.buffer.name: a.buffer.scope for a in collect(lowered, refcomp.ast.Allocate)}
    assert scopes == {"C_local": "local", "A_shared": "shared"}
    assert any(strides), "storage_align should have given the shared buffer explicit strides"


def test_tensorized_tile_lowers_to_a_call_on_flat_addresses():
    A = te.placeholder((12, 8), "float32", "A")
    B = te.placeholder((8, 32), "float32", "B")
    r = te.reduce_axis(8, "k")
    C = te.compute((12, 32), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    sch = refcomp.Schedule(te.create_prim_func([A, B, C]))
    block = sch.get_block("C")
    i, j, k = sch.get_loops(block)
    io, ii = sch.split(i, [None, 6])
    jo, ji = sch.split(j, [None, 16])
    sch.reorder(io, jo, ii, ji, k)
    sch.decompose_reduction(block, ii)
    sch.tensorize(ii, "x86.avx2.sgemm_6x16")
    lowered = lower(sch.func)
    assert_contract(lowered)
    (call,) = [c for c in collect(lowered, refcomp.ast.Call) if c.op == "call_extern"]
    a_ptr, b_ptr, c_ptr = [arg for arg in call.args if isinstance(arg, refcomp.ast.Call)]
    loop_vars = {l.loop_var.name: l.loop_var for l in collect(lowered, For)}
    i0, j0 = loop_vars["i_0"], loop_vars["j_0"]
    from refcomp.ast import assert_structural_equal
    assert_structural_equal(a_ptr.args[0].indices[0], i0 * 48, map_free_vars=False)
    assert_structural_equal(c_ptr.args[0].indices[0], i0 * 192 + j0 * 16, map_free_vars=False)
    assert lowered.attrs["cpu_features"] == sch.func.attrs["cpu_features"]  # other attrs survive


def test_lowered_vector_code_compiles_and_matches_numpy(rng):
    n = te.size_var("n")
    A = te.placeholder((n, 3), "float32", "A")
    B = te.compute((n, 3), lambda i, j: te.sigmoid(A[i, j]) * 2.0, name="B")
    sch = refcomp.Schedule(te.create_prim_func([A, B]))
    i, j = sch.get_loops(sch.get_block("B"))
    outer, inner = sch.split(i, [None, 8])
    sch.reorder(outer, j, inner)
    sch.vectorize(inner)
    assert any(isinstance(s.indices[0], Ramp) for s in collect(lower(sch.func), BufferStore))
    lib = refcomp.build(sch.func)
    for size in (1, 5, 37):
        a = rng.standard_normal((size, 3)).astype("float32")
        b = np.full_like(a, np.nan)
        lib(a, b)
        np.testing.assert_allclose(b, 2.0 / (1.0 + np.exp(-a)), rtol=1e-5, atol=1e-6)


def _rfactor():
    A = te.placeholder((4, 32), "float32", "A")
    k = te.reduce_axis(32, "k")
    B = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="B")
    sch = refcomp.Schedule(te.create_prim_func([A, B]))
    _, kk = sch.get_loops(sch.get_block("B"))
    _, ki = sch.split(kk, [None, 8])
    sch.rfactor(ki, 0)
    return sch.func


def _two_stages():
    A = te.placeholder((6, 10), "float32", "A")
    T = te.compute((6, 10), lambda i, j: A[i, j] * 2.0, name="T")
    B = te.compute((6, 10), lambda i, j: T[i, j] + 1.0, name="B")
    return refcomp.Schedule(te.create_prim_func([A, B]))


def _compute_at():
    sch = _two_stages()
    i, j = sch.get_loops(sch.get_block("B"))
    sch.compute_at(sch.get_block("T"), i)
    _, inner = sch.split(j, [None, 4])
    sch.vectorize(inner)
    return sch.func


def _compute_inline():
    sch = _two_stages()
    sch.compute_inline(sch.get_block("T"))
    return sch.func


def _packed_layout():
    sch = refcomp.Schedule(matmul(8, 16, 4))
    sch.transform_layout(sch.get_block("C"), ("read", 1), lambda k, j: (j // 8, k, j % 8))
    return sch.func


def _gpu_bound():
    A = te.placeholder((64,), "float32", "A")
    B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
    sch = refcomp.Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_block("B"))
    outer, inner = sch.split(i, [None, 32])
    sch.bind(outer, "blockIdx.x")
    sch.bind(inner, "threadIdx.x")
    return sch.func


@pytest.mark.parametrize("make", [_rfactor, _compute_at, _compute_inline, _packed_layout, _gpu_bound],
                         ids=["rfactor", "compute_at", "compute_inline", "transform_layout", "bind"])
def test_schedules_of_every_family_lower_to_the_same_results(make, rng):
    assert_contract(assert_lowering_preserves_results(make(), rng))


def test_vector_width_follows_the_target_kind():
    A = te.placeholder((4, 64), "float32", "A")
    B = te.compute((4, 64), lambda i, j: A[i, j] + 1.0, name="B")
    sch = refcomp.Schedule(te.create_prim_func([A, B]))
    i, j = sch.get_loops(sch.get_block("B"))
    sch.vectorize(j)
    lanes = lambda f: {s.value.dtype.lanes for s in collect(f, BufferStore)}  # noqa: E731
    assert lanes(lower(sch.func)) == {16}  # 64 bytes of float32 on the CPU
    assert lanes(lower(sch.func, vector_bytes=32)) == {8}
    sch.bind(i, "threadIdx.x")
    assert lanes(lower(sch.func)) == {4}  # float4 on a GPU
