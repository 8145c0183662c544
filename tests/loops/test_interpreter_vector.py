"""The interpreter's numpy fast path gives bit for bit the scalar path's results (and errors)."""
import functools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import refcomp
from refcomp import RuntimeFailure, te
from refcomp.ast import Buffer, BufferStore, For, PrimFunc, SizeVar, Var
from refcomp.loops.interpreter import python_source, scalar_only
from refcomp.loops.interpreter_vector import MIN_EXTENT
from refcomp.testing import random_array

WIDE = MIN_EXTENT + 37  # an inner extent the fast path takes
DTYPES = ["int8", "int32", "uint16", "int64", "uint64", "float16", "float32", "float64"]


def both_paths(func, *arrays, **scalars):
    """Outputs of the fast and the scalar path (the arrays are copied for each)."""
    fast = [a.copy() for a in arrays]
    refcomp.interpret(func, *fast, **scalars)
    slow = [a.copy() for a in arrays]
    with scalar_only():
        refcomp.interpret(func, *slow, **scalars)
    return fast, slow


def assert_same(fast, slow):
    for f, s in zip(fast, slow):
        assert f.dtype == s.dtype
        np.testing.assert_array_equal(np.atleast_1d(f).view(np.uint8), np.atleast_1d(s).view(np.uint8))  # bits


@functools.lru_cache(maxsize=None)
def many_ops(dtype):
    n = te.var("n")
    A = te.placeholder((n, WIDE), dtype, "A")
    B = te.placeholder((WIDE,), dtype, "B")
    is_int = not dtype.startswith("float")
    ops = [lambda x, y: x + y, lambda x, y: x * y - x, lambda x, y: te.select(x < y, x, y),
           lambda x, y: te.if_then_else(x > y, x, y + y)]
    if is_int:
        ops += [lambda x, y: x // y, lambda x, y: x % y, lambda x, y: te.max(x, y) - te.min(x, y)]
    else:
        ops += [lambda x, y: x / y, lambda x, y: (x * 0.5).astype("float64").astype(dtype)]
    ops += [lambda x, y: x.astype("int16").astype(dtype), lambda x, y: (x == y).astype(dtype)]
    outs = [te.compute((n, WIDE), lambda i, j, f=f: f(A[i, j], B[j]), name=f"out{k}") for k, f in enumerate(ops)]
    return te.create_prim_func([A, B] + outs, name=f"many_{dtype}"), len(ops)


@pytest.mark.parametrize("dtype", DTYPES)
@settings(max_examples=8)  # each example runs ~5k elements twice, the slow way included
@given(n=st.integers(1, 2), seed=st.integers(0, 2**32 - 1))
def test_many_ops_agree(dtype, n, seed):
    rng = np.random.default_rng(seed)
    func, count = many_ops(dtype)
    a = random_array(rng, (n, WIDE), dtype, low=-1000 if dtype.startswith("float") else None,
                     high=1000 if dtype.startswith("float") else None)
    b = random_array(rng, (WIDE,), dtype, nonzero=True)
    if dtype.startswith("int"):
        b[b == -1] = 7  # keep INT_MIN // -1 for its own test
    outs = [np.zeros((n, WIDE), a.dtype) for _ in range(count)]
    fast, slow = both_paths(func, a, b, *outs)
    assert_same(fast, slow)
    if dtype != "float16":  # float16 buffers are Python lists: always the scalar path
        assert "_V" in python_source(func)  # the fast path was generated for these loops


def test_lazy_branches_and_predicates_agree():
    n = te.var("n")
    A = te.placeholder((n,), "float32", "A")
    # the untaken branch reads out of bounds; the fast path evaluates each branch on its lanes only
    B = te.compute((n,), lambda i: te.if_then_else(i > 0, A[i - 1], A[i] * 3.0), name="B")
    func = te.create_prim_func([A, B])
    s = refcomp.Schedule(func)
    (i,) = s.get_loops(s.get_block("B"))
    s.split(i, [None, WIDE])  # a tail: the block predicate masks the extra iterations
    a = np.random.default_rng(0).random(WIDE * 2 + 5).astype(np.float32)
    fast, slow = both_paths(s.func, a, np.zeros_like(a))
    assert_same(fast, slow)
    np.testing.assert_array_equal(fast[1], np.concatenate([a[:1] * np.float32(3), a[:-1]]))


def test_init_of_a_reduction_with_a_spatial_inner_loop():
    """Loops i, k, j: the init (at k == 0) is held back per lane while the body reads C[i, j]."""
    A = te.placeholder((3, 4), "float32", "A")
    B = te.placeholder((4, WIDE), "float32", "B")
    k = te.reduce_axis(4, "k")
    C = te.compute((3, WIDE), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = refcomp.Schedule(te.create_prim_func([A, B, C]))
    i, j, kk = s.get_loops(s.get_block("C"))
    s.reorder(i, kk, j)
    rng = np.random.default_rng(1)
    a, b = rng.random((3, 4), dtype=np.float32), rng.random((4, WIDE), dtype=np.float32)
    fast, slow = both_paths(s.func, a, b, np.full((3, WIDE), np.nan, np.float32))
    assert_same(fast, slow)
    np.testing.assert_allclose(fast[2], a @ b, rtol=1e-6)


def test_errors_and_wrap_around_fall_back_to_the_scalar_path():
    n = SizeVar("n")
    A = Buffer("A", (n,), "int32")
    B = Buffer("B", (n,), "int32")
    i = Var("i")
    div = PrimFunc((A, B), For(i, 0, n, "serial", BufferStore(B, A[i] // B[i], (i,))))
    a = np.arange(WIDE, dtype=np.int32) - 50
    b = np.ones(WIDE, np.int32)
    b[100] = 0
    with pytest.raises(RuntimeFailure, match="division by zero"):
        refcomp.interpret(div, a, b.copy())
    b[100], a[3], b[3] = 1, np.iinfo(np.int32).min, -1
    fast, slow = both_paths(div, a, b)
    assert_same(fast, slow)
    assert fast[1][3] == np.iinfo(np.int32).min
    past_end = PrimFunc((A,), For(i, 0, n + 1, "serial", BufferStore(A, A[i] + 1, (i,))))
    with pytest.raises(RuntimeFailure, match=rf"load from A\[{WIDE}\] is out of bounds"):  # the value is read first
        refcomp.interpret(past_end, a.copy())


def test_colliding_stores_keep_the_last_write():
    n = SizeVar("n")
    A = Buffer("A", (n,), "float64")
    B = Buffer("B", (n,), "float64")
    i = Var("i")
    func = PrimFunc((A, B), For(i, 0, n, "serial", BufferStore(B, A[i], (i // 2,))))
    a = np.random.default_rng(2).random(WIDE)
    fast, slow = both_paths(func, a, np.zeros(WIDE))
    assert_same(fast, slow)
    np.testing.assert_array_equal(fast[1][: WIDE // 2], a[1: WIDE // 2 * 2: 2])


def test_zero_dimensional_buffers_in_a_fast_loop():
    A = te.placeholder((WIDE,), "float32", "A")
    s = te.placeholder((), "float32", "s")
    B = te.compute((WIDE,), lambda i: A[i] * s[()], name="B")
    func = te.create_prim_func([A, s, B])
    a = np.random.default_rng(3).random(WIDE).astype(np.float32)
    fast, slow = both_paths(func, a, np.array(3.0, np.float32), np.zeros(WIDE, np.float32))
    assert_same(fast, slow)
    np.testing.assert_array_equal(fast[2], a * np.float32(3))


def test_an_array_passed_twice_keeps_scalar_order():
    n = te.var("n")
    A = te.placeholder((n,), "int32", "A")
    B = te.compute((n,), lambda i: te.if_then_else(i > 0, A[te.max(i - 1, 0)], 0) + 1, name="B")
    func = te.create_prim_func([A, B])
    x = np.zeros(WIDE, np.int32)
    refcomp.interpret(func, x, x)  # in place: iteration i reads what iteration i - 1 wrote
    np.testing.assert_array_equal(x, np.arange(1, WIDE + 1))
