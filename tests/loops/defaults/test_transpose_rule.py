"""The transpose rule: a transposed read cache-blocked in TILE x TILE tiles, checked against numpy
and the interpreter over odd, prime and unit shapes."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import refcomp
from refcomp import te
from refcomp.ast import For
from refcomp.graph.passes import default_schedule as ds
from refcomp.loops.defaults import MIN_EXTENT_OF_TRANSPOSE, transposed_pair
from refcomp.loops.interpreter import interpret
from refcomp.loops.primitives.tree import walk

DIMS = st.sampled_from([1, 2, 7, 31, 67, 128, 131, 160])


def _transpose(shape: tuple, perm: tuple, scale: bool):
    x = te.placeholder(shape, "float32", "x")
    out_shape = tuple(shape[p] for p in perm)

    def value(*i):
        index = [None] * len(shape)
        for k, p in enumerate(perm):
            index[p] = i[k]
        v = x[tuple(index)]
        return v * 2.0 + 1.0 if scale else v

    return te.create_prim_func([x, te.compute(out_shape, value, name="t")])


def _check(shape, perm, scale, seed):
    func = _transpose(shape, perm, scale)
    scheduled = ds.schedule_kernel(func)
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    expected = np.transpose(x, perm) * 2.0 + 1.0 if scale else np.transpose(x, perm)
    out = np.empty(expected.shape, np.float32)
    refcomp.build(scheduled)(x, out)
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    interpreted = np.empty_like(out)
    interpret(scheduled, x, interpreted)
    np.testing.assert_allclose(interpreted, expected, rtol=1e-6)
    return func, scheduled


@settings(max_examples=5, deadline=None)
@given(rows=DIMS, cols=DIMS, scale=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_transpose_rule_matches_numpy_and_interpreter(rows, cols, scale, seed):
    func, scheduled = _check((rows, cols), (1, 0), scale, seed)
    applies = min(rows, cols) >= MIN_EXTENT_OF_TRANSPOSE
    assert (transposed_pair(func) is not None) == applies
    assert any(isinstance(s, For) and s.kind == "parallel" for s in walk(scheduled.body)) or rows * cols < 64


@settings(max_examples=3, deadline=None)
@given(batch=st.sampled_from([1, 3]), rows=st.sampled_from([128, 131]), cols=st.sampled_from([128, 137]),
       seed=st.integers(0, 2**31 - 1))
def test_batched_transpose_of_the_last_two_axes(batch, rows, cols, seed):
    func, _ = _check((batch, rows, cols), (0, 2, 1), False, seed)
    assert transposed_pair(func) is not None


def test_a_copy_in_order_is_not_a_transpose():
    x = te.placeholder((160, 160), "float32", "x")
    func = te.create_prim_func([x, te.compute((160, 160), lambda i, j: x[i, j] + 1.0, name="t")])
    assert transposed_pair(func) is None
