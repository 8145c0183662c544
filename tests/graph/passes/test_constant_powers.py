"""constant_powers: pow with a constant exponent of 2 or 3 becomes a product; other calls stay."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import refcomp
from refcomp import te
from refcomp.ast import Call, collect
from refcomp.graph.passes.constant_powers import reduce_constant_powers
from refcomp.graph.passes.default_schedule import schedule_kernel


def _power(n, exponent, dtype="float32"):
    a = te.placeholder((n,), dtype, "A")
    b = te.compute((n,), lambda i: te.power(a[i], exponent), name="B")
    return te.create_prim_func([a, b])


def _pow_calls(func):
    return [c for c in collect(func.body, Call) if c.op == "pow"]


@pytest.mark.parametrize("exponent", [2.0, 3.0])
def test_small_integer_exponents_become_products(exponent):
    func = _power(7, exponent)
    assert _pow_calls(func) and not _pow_calls(reduce_constant_powers(func))


@pytest.mark.parametrize("exponent", [0.5, 2.5, 4.0, -2.0])
def test_other_exponents_stay_calls(exponent):
    func = _power(7, exponent)
    assert reduce_constant_powers(func) is func


@settings(max_examples=8, deadline=None)
@given(n=st.sampled_from([1, 7, 16, 37]), exponent=st.sampled_from([2.0, 3.0]), dtype=st.sampled_from(["float32", "float64"]),
       seed=st.integers(0, 2**32 - 1))
def test_scheduled_kernel_matches_numpy(n, exponent, dtype, seed):
    x = np.random.default_rng(seed).standard_normal(n).astype(dtype) * 4
    out = np.empty_like(x)
    refcomp.build(schedule_kernel(_power(n, exponent, dtype)))(x, out)
    np.testing.assert_allclose(out, np.power(x, exponent), rtol=2e-6 if dtype == "float32" else 1e-14)
