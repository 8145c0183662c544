"""numpy == interpreter == C for reductions: sum/max/min over symbolic axes, where=, argmax, softmax."""
import functools

import numpy as np
import pytest
from hypothesis import given

from diff_strategies import ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES, dims, seeds
from refcomp import te
from refcomp.testing import as_float, check, random_array


@functools.lru_cache(maxsize=None)
def row_reductions(dtype):
    """sum, max, min over the last axis of A (n, m), and a sum masked by where=."""
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), dtype, "A")
    outs = []
    for name, reducer in [("S", te.sum), ("M", te.max), ("N", te.min)]:
        k = te.reduce_axis(m, "k")
        outs.append(te.compute((n,), lambda i, k=k, r=reducer: r(A[i, k], axis=k), name=name))
    k = te.reduce_axis(m, "k")
    outs.append(te.compute((n,), lambda i: te.sum(A[i, k], axis=k, where=k % 2 == 0), name="E"))
    return te.create_prim_func([A] + outs, name=f"row_reductions_{dtype}")


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@given(n=dims(1, 5), m=dims(1, 12), seed=seeds)
def test_row_reductions(dtype, n, m, seed):
    rng = np.random.default_rng(seed)
    a = random_array(rng, (n, m), dtype)
    even = a[:, ::2]
    if dtype in INT_DTYPES:
        # integer sums wrap in the dtype, as numpy's do with dtype=
        expected = [a.sum(1, dtype=dtype), a.max(1), a.min(1), even.sum(1, dtype=dtype)]
        magnitude = [None] * 4
    else:
        f = as_float(a, dtype)
        expected = [f.sum(1), f.max(1), f.min(1), f[:, ::2].sum(1)]
        magnitude = [np.abs(f).sum(1), None, None, np.abs(f[:, ::2]).sum(1)]
    outputs = [np.empty((n,), a.dtype) for _ in expected]
    check(row_reductions(dtype), [a], outputs, expected, dtype=dtype, terms=m, magnitude=magnitude, seed=seed)


@functools.lru_cache(maxsize=None)
def column_sum_of_3d(dtype):
    """Reduce over two axes (the first and last) of a 3-d tensor, accumulating in float32/int64."""
    a, b, c = te.var("a"), te.var("b"), te.var("c")
    A = te.placeholder((a, b, c), dtype, "A")
    acc = "int64" if dtype in INT_DTYPES else ("float64" if dtype == "float64" else "float32")
    r0, r2 = te.reduce_axis(a, "r0"), te.reduce_axis(c, "r2")
    S = te.compute((b,), lambda j: te.sum(A[r0, j, r2].astype(acc), axis=[r0, r2]), name="S")
    return te.create_prim_func([A, S], name=f"sum02_{dtype}"), acc


@pytest.mark.parametrize("dtype", ["int8", "uint16", "int32", "float16", "bfloat16", "float32", "float64"])
@given(a=dims(1, 4), b=dims(1, 4), c=dims(1, 5), seed=seeds)
def test_multi_axis_reduction_with_wider_accumulator(dtype, a, b, c, seed):
    rng = np.random.default_rng(seed)
    x = random_array(rng, (a, b, c), dtype)
    func, acc = column_sum_of_3d(dtype)
    if dtype in INT_DTYPES:
        expected = x.astype(np.int64).sum((0, 2))
        magnitude = None
    else:
        f = as_float(x, dtype)
        expected, magnitude = f.sum((0, 2)), np.abs(f).sum((0, 2))
    check(func, [x], [np.empty((b,), acc)], [expected], dtype=acc, terms=a * c, magnitude=[magnitude], seed=seed)


@functools.lru_cache(maxsize=None)
def argmax_program(dtype):
    """argmax over rows, argmax-style: the max, then the first index holding it (via select)."""
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), dtype, "A")
    k = te.reduce_axis(m, "k")
    M = te.compute((n,), lambda i: te.max(A[i, k], axis=k), name="M")
    k2 = te.reduce_axis(m, "k2")
    I = te.compute((n,), lambda i: te.min(te.select(A[i, k2] == M[i], k2, m), axis=k2), name="I")
    return te.create_prim_func([A, I], name=f"argmax_{dtype}")


@pytest.mark.parametrize("dtype", ["int8", "uint32", "int64", "float16", "bfloat16", "float32"])
@given(n=dims(1, 5), m=dims(1, 10), seed=seeds)
def test_argmax_via_select(dtype, n, m, seed):
    rng = np.random.default_rng(seed)
    small = dtype in INT_DTYPES
    a = random_array(rng, (n, m), dtype, low=0 if small else None, high=5 if small else None)  # ties happen
    expected = as_float(a, dtype).argmax(1).astype(np.int32)
    check(argmax_program(dtype), [a], [np.empty((n,), np.int32)], [expected], dtype="int32", seed=seed)


@functools.lru_cache(maxsize=None)
def softmax_program(dtype):
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), dtype, "A")
    k = te.reduce_axis(m, "k")
    M = te.compute((n,), lambda i: te.max(A[i, k], axis=k), name="row_max")
    E = te.compute((n, m), lambda i, j: te.exp(A[i, j] - M[i]), name="shifted_exp")
    k2 = te.reduce_axis(m, "k2")
    S = te.compute((n,), lambda i: te.sum(E[i, k2], axis=k2), name="row_sum")
    P = te.compute((n, m), lambda i, j: E[i, j] / S[i], name="P")
    return te.create_prim_func([A, P], name=f"softmax_{dtype}")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@given(n=dims(1, 4), m=dims(1, 16), seed=seeds)
def test_softmax(dtype, n, m, seed):
    rng = np.random.default_rng(seed)
    a = random_array(rng, (n, m), dtype, low=-6, high=6)
    f = as_float(a, dtype)
    e = np.exp(f - f.max(1, keepdims=True))
    expected = e / e.sum(1, keepdims=True)
    # every probability carries the rounding of exp, of the row sum and of the division
    check(softmax_program(dtype), [a], [np.empty((n, m), a.dtype)], [expected], dtype=dtype,
          terms=m + 8, magnitude=[np.maximum(expected, expected.max(1, keepdims=True) * 0 + 1.0 / m)], seed=seed)
