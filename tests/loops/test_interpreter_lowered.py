"""The interpreter on lowered and scheduled forms: Allocate, Let, Assert, If, While, vectors, deep nests."""
import numpy as np
import pytest

import refcomp
from refcomp import IRError, RuntimeFailure
from refcomp.ast import (
    Allocate, AssertStmt, Block, BlockRealize, Broadcast, Buffer, BufferRegion, BufferStore, Call,
    Evaluate, For, IfThenElse, IntImm, IterVar, Let, LetStmt, MatchBufferRegion, PrimFunc, Ramp,
    Range, SizeVar, Var, While, const, seq,
)
from refcomp.ast.stmt import true


def test_allocate_let_assert_if_and_while():
    n = SizeVar("n")
    A = Buffer("A", (n,), "int32")
    B = Buffer("B", (n,), "int32")
    tmp = Buffer("tmp", (n,), "int32")
    i, j, acc = Var("i"), Var("j"), Var("acc")
    # tmp[i] = A[i] * 3; then B[i] = sum_{j <= i} tmp[j] via a while loop over a counter buffer
    counter = Buffer("counter", (1,), "int32")
    fill = For(i, 0, n, "serial", LetStmt(acc, A[i] * 3, BufferStore(tmp, acc, (i,))))
    prefix = For(i, 0, n, "serial", seq(
        BufferStore(counter, const(0), (0,)),
        BufferStore(B, const(0), (i,)),
        While(counter[0] <= i, seq(
            BufferStore(B, B[i] + tmp[counter[0]], (i,)),
            BufferStore(counter, counter[0] + 1, (0,)),
        )),
        IfThenElse(B[i] < 0, BufferStore(B, const(0), (i,)), Evaluate(Call("assume", (true(),), "bool"))),
    ))
    body = AssertStmt(n > 0, "n must be positive",
                      Allocate(tmp, Allocate(counter, seq(fill, prefix))))
    func = PrimFunc((A, B), body)
    a = np.array([3, -1, 4, -20, 5], np.int32)
    b = np.zeros(5, np.int32)
    refcomp.interpret(func, a, b)
    np.testing.assert_array_equal(b, np.maximum(np.cumsum(a * 3), 0))
    with pytest.raises(RuntimeFailure, match="assertion failed: n must be positive"):
        refcomp.interpret(func, np.zeros(0, np.int32), np.zeros(0, np.int32))
    del j


def test_vector_ramp_and_broadcast():
    n = SizeVar("n")
    A = Buffer("A", (n * 4,), "float32")
    B = Buffer("B", (n * 4,), "float32")
    i = Var("i")
    lanes = Ramp(i * 4, const(1), 4)
    v = Var("v", "float32x4")
    value = Let(v, A[lanes], v * Broadcast(const(2.0), 4) + A[Ramp(i * 4 + 3, const(-1), 4)])
    func = PrimFunc((A, B), For(i, 0, n, "vectorized", BufferStore(B, value, (lanes,))))
    a = np.random.default_rng(2).random(12).astype(np.float32)
    b = np.zeros(12, np.float32)
    refcomp.interpret(func, a, b, n=3)
    expected = (a.reshape(3, 4) * np.float32(2) + a.reshape(3, 4)[:, ::-1]).ravel()
    np.testing.assert_array_equal(b, expected)


def test_vector_store_evaluates_all_lanes_before_storing():
    A = Buffer("A", (5,), "int32")
    # A[1:5] = A[0:4] as one vector operation shifts, rather than smearing A[0]
    func = PrimFunc((A,), BufferStore(A, A[Ramp(const(0), const(1), 4)], (Ramp(const(1), const(1), 4),)))
    a = np.arange(5, dtype=np.int32)
    refcomp.interpret(func, a)
    np.testing.assert_array_equal(a, [0, 0, 1, 2, 3])


def test_every_loop_kind_runs_sequentially():
    A = Buffer("A", (2, 3, 4, 5), "int32")
    vs = [Var(f"i{k}") for k in range(4)]
    body = BufferStore(A, ((vs[0] * 3 + vs[1]) * 4 + vs[2]) * 5 + vs[3], tuple(vs))
    kinds = [("thread_binding", "blockIdx.x"), ("parallel", None), ("unrolled", None), ("vectorized", None)]
    for v, extent, (kind, tag) in reversed(list(zip(vs, A.shape, kinds))):
        body = For(v, 0, extent, kind, body, thread_binding=tag)
    a = np.zeros((2, 3, 4, 5), np.int32)
    refcomp.interpret(PrimFunc((A,), body), a)
    np.testing.assert_array_equal(a.ravel(), np.arange(a.size))


def test_loop_nests_deeper_than_python_allows():
    depth = 26
    A = Buffer("A", (2,) * 4, "int32")
    vs = [Var(f"i{k}") for k in range(depth)]
    body = BufferStore(A, A[vs[0], vs[1], vs[2], vs[3]] + 1, (vs[0], vs[1], vs[2], vs[3]))
    for k, v in reversed(list(enumerate(vs))):
        body = For(v, 0, 2 if k < 4 else 1, "serial", body)
    a = np.zeros((2,) * 4, np.int32)
    refcomp.interpret(PrimFunc((A,), body), a)
    np.testing.assert_array_equal(a, np.ones_like(a))


def test_block_predicate_and_split_loops():
    """A split with a tail: the block predicate masks the extra iterations."""
    n = SizeVar("n")
    A = Buffer("A", (n,), "float32")
    B = Buffer("B", (n,), "float32")
    io, ii = Var("io"), Var("ii")
    vi = Var("vi")
    block = Block("B", (IterVar(vi, Range.from_extent(n), "spatial"),), (), (),
                  BufferStore(B, A[vi] + 1.0, (vi,)))
    realize = BlockRealize((io * 4 + ii,), io * 4 + ii < n, block)
    func = PrimFunc((A, B), For(io, 0, (n + 3) // 4, "serial", For(ii, 0, 4, "serial", realize)))
    a = np.random.default_rng(5).random(10).astype(np.float32)
    b = np.zeros(10, np.float32)
    refcomp.interpret(func, a, b)
    np.testing.assert_array_equal(b, a + np.float32(1))


def test_match_buffer_views_a_region():
    A = Buffer("A", (4, 8), "float32")
    tile = Buffer("tile", (2, 4), "float32")
    i, j, x, y = Var("i"), Var("j"), Var("x"), Var("y")
    vi, vj = Var("vi"), Var("vj")
    region = BufferRegion(A, (Range(vi * 2, const(2)), Range(vj * 4, const(4))))
    inner = For(x, 0, 2, "serial", For(y, 0, 4, "serial", BufferStore(tile, tile[x, y] * 10.0, (x, y))))
    block = Block("scale", (IterVar(vi, Range.from_extent(2)), IterVar(vj, Range.from_extent(2))),
                  (region,), (region,), inner, match_buffers=(MatchBufferRegion(tile, region),))
    func = PrimFunc((A,), For(i, 0, 2, "serial", For(j, 0, 2, "serial", BlockRealize((i, j), true(), block))))
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    expected = a * 10
    refcomp.interpret(func, a)
    np.testing.assert_array_equal(a, expected)


def test_flattened_alias_of_a_parameter_by_name():
    """Lowering may re-declare a parameter with its flat shape; the interpreter views the same data."""
    n = SizeVar("n")
    A = Buffer("A", (n, 3), "int32")
    A_flat = Buffer("A", (n * 3,), "int32")
    i = Var("i")
    func = PrimFunc((A,), For(i, 0, n * 3, "serial", BufferStore(A_flat, A_flat[i] * 2 + i, (i,))))
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    refcomp.interpret(func, a)
    np.testing.assert_array_equal(a.ravel(), np.arange(6) * 3)


def test_lowered_flat_parameters_keep_their_original_shapes():
    n = SizeVar("n")
    A = Buffer("A", (n, 3), "float64")
    A_flat = Buffer("A", (n * 3,), "float64")
    i = Var("i")
    func = PrimFunc((A_flat,), For(i, 0, n * 3, "serial", BufferStore(A_flat, A_flat[i] + 1.0, (i,))),
                    attrs={"original_buffers": {A_flat: A}})
    a = np.zeros((2, 3))
    refcomp.interpret(func, a)  # n is bound from the original 2-d shape
    np.testing.assert_array_equal(a, np.ones((2, 3)))
    with pytest.raises(refcomp.ArgumentError, match=r"A: expected 2 dimensions \(n, 3\), got 1"):
        refcomp.interpret(func, np.zeros(6))


def test_undeclared_buffer_and_unbound_var_are_ir_errors():
    A = Buffer("A", (4,), "int32")
    ghost = Buffer("ghost", (4,), "int32")
    i, k = Var("i"), Var("k")
    with pytest.raises(IRError, match="ghost is used but never declared"):
        refcomp.interpret(PrimFunc((A,), For(i, 0, 4, "serial", BufferStore(A, ghost[i], (i,)))),
                          np.zeros(4, np.int32))
    with pytest.raises(IRError, match="variable k is used where it is not defined"):
        refcomp.interpret(PrimFunc((A,), For(i, 0, 4, "serial", BufferStore(A, k, (i,)))), np.zeros(4, np.int32))
    with pytest.raises(IRError, match="call_extern"):
        refcomp.interpret(PrimFunc((A,), Evaluate(Call("call_extern", (const(1),), "int32"))), np.zeros(4, np.int32))


def test_compiled_program_is_cached_per_function():
    from refcomp.loops.interpreter import compile_kernel

    A = Buffer("A", (4,), "int32")
    i = Var("i")
    func = PrimFunc((A,), For(i, 0, 4, "serial", BufferStore(A, A[i] + IntImm(1), (i,))))
    assert compile_kernel(func) is compile_kernel(func)
    assert "def _kernel" in refcomp.loops.interpreter.python_source(func)


def test_expressions_deeper_than_python_allows():
    import functools

    from refcomp import te

    A = te.placeholder((2, 300), "float32", "A")
    S = te.compute((2,), lambda i: functools.reduce(lambda x, y: x + y, [A[i, k] for k in range(300)]), name="S")
    # a deep chain of lazy selections: the untaken branches would read out of bounds
    L = te.compute((2,), lambda i: functools.reduce(
        lambda acc, k: te.if_then_else(A[i, k] > 1.0, acc, A[i, k + 1000]), range(60), A[i, 0]), name="L")
    func = te.create_prim_func([A, S, L])
    a = (np.random.default_rng(4).random((2, 300)) + 1.5).astype(np.float32)  # every A > 1: the guarded branch never runs
    s, lazy = np.empty(2, np.float32), np.empty(2, np.float32)
    refcomp.interpret(func, a, s, lazy)
    expected = a[:, 0].copy()
    for k in range(1, 300):
        expected = expected + a[:, k]
    np.testing.assert_array_equal(s, expected)
    np.testing.assert_array_equal(lazy, a[:, 0])
