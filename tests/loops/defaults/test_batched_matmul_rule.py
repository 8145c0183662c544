"""The batched A @ B^T rule: B packed into lane panels, checked against numpy and the interpreter
over odd, prime and unit shapes."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import refcomp
from refcomp import te
from refcomp.ast import Block
from refcomp.graph.passes import default_schedule as ds
from refcomp.loops.defaults import transposed_operand
from refcomp.loops.interpreter import interpret
from refcomp.loops.primitives.tree import walk

DIMS = st.sampled_from([1, 2, 3, 7, 8, 13, 17, 32])


def _bmm(batch, m, n, k, transposed=True):
    a = te.placeholder((batch, m, k), "float32", "A")
    b = te.placeholder((batch, n, k) if transposed else (batch, k, n), "float32", "B")
    r = te.reduce_axis((0, k), "k")
    if transposed:
        c = te.compute((batch, m, n), lambda h, i, j: te.sum(a[h, i, r] * b[h, j, r], axis=r), name="C")
    else:
        c = te.compute((batch, m, n), lambda h, i, j: te.sum(a[h, i, r] * b[h, r, j], axis=r), name="C")
    return te.create_prim_func([a, b, c])


@settings(max_examples=6, deadline=None)
@given(batch=st.sampled_from([1, 2, 3]), m=DIMS, n=DIMS, k=DIMS, seed=st.integers(0, 2**31 - 1))
def test_bmm_bt_rule_matches_numpy_and_interpreter(batch, m, n, k, seed):
    func = _bmm(batch, m, n, k)
    assert transposed_operand(func) is not None
    scheduled = ds.schedule_kernel(func)
    assert any(isinstance(s, Block) and s.name == "B_global" for s in walk(scheduled.body))
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((batch, m, k)).astype(np.float32)
    b = rng.standard_normal((batch, n, k)).astype(np.float32)
    expected = a @ b.transpose(0, 2, 1)
    c = rng.standard_normal((batch, m, n)).astype(np.float32)  # the kernel zeroes C itself
    refcomp.build(scheduled)(a, b, c)
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5)
    interpreted = np.empty_like(c)
    interpret(scheduled, a, b, interpreted)
    np.testing.assert_allclose(interpreted, expected, rtol=1e-5, atol=1e-5)


def test_untransposed_bmm_is_left_to_the_generic_schedule():
    assert transposed_operand(_bmm(2, 8, 8, 8, transposed=False)) is None
