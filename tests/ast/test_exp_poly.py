"""refcomp.ast.exp_poly: the one inline float32 exp, rendered as a loop-IR expression (the
attention kernel's) and as the C emitter's vector helper, each checked against numpy."""
from __future__ import annotations

import numpy as np
import pytest

from refcomp import build
from refcomp.ast import Buffer, BufferStore, For, IntImm, PrimFunc, Var, seq
from refcomp.ast.exp_poly import COEFFICIENTS, exp_expr, exp_steps
from refcomp.errors import InternalError

N = 4096


def _kernel(degree: int):
    """exp_expr(x, degree) over N floats twice: in 16-lane vectors and one float at a time."""
    x, vec, one = (Buffer(name, (IntImm(N, "int64"),), "float32") for name in ("x", "vec", "one"))
    i, j = Var("i", "int64"), Var("j", "int64")
    zero = IntImm(0, "int64")
    body = seq(For(i, zero, IntImm(N, "int64"), "vectorized", BufferStore(vec, exp_expr(x[i], degree), (i,))),
               For(j, zero, IntImm(N, "int64"), "serial", BufferStore(one, exp_expr(x[j], degree), (j,))))
    return build(PrimFunc((x, vec, one), body, f"exp_poly_{degree}"))


@pytest.fixture(scope="module", params=sorted(COEFFICIENTS))
def kernel(request):
    return request.param, _kernel(request.param)


def test_expression_is_exp_within_two_units(kernel, rng):
    """Over the range whose 2^n is a normal number ([-87, 88]) and its ends, in vector and scalar
    code: within 2 units in the last place of float32, the two forms bit for bit equal."""
    degree, lib = kernel
    x = rng.uniform(-87.0, 88.0, N).astype(np.float32)
    x[:8] = [0.0, -0.0, -87.0, 88.0, 1e-30, -1e-30, 0.34657359, -0.34657359]
    vec, one = np.empty_like(x), np.empty_like(x)
    lib(x, vec, one)
    expected = np.exp(x.astype(np.float64))
    for got in (vec, one):
        units = np.abs(got - expected) / np.spacing(expected.astype(np.float32)).astype(np.float64)
        assert units.max() <= 2.0, (degree, x[units.argmax()], got[units.argmax()], expected[units.argmax()])
    np.testing.assert_array_equal(vec, one)


def test_unknown_degree_is_a_named_error():
    with pytest.raises(InternalError, match="degree 5 has no coefficients"):
        exp_expr(Var("x", "float32"), 5)


class _Count:
    """A renderer that only counts the steps and operations exp_steps asks for."""

    def __init__(self):
        self.binds, self.consts = [], 0

    def const(self, value):
        self.consts += 1
        return 1.0

    def bind(self, name, value):
        self.binds.append(name)
        return 1.0

    def scale(self, p, n, t):
        return p


def test_steps_are_the_same_for_every_renderer():
    """Four bound steps (the rounding add, n, r, the polynomial), one constant per coefficient
    plus the five of the range reduction (log2 e, the rounding constant twice, ln 2 in two parts), whatever the degree."""
    for degree, coefficients in COEFFICIENTS.items():
        count = _Count()
        exp_steps(1.0, degree, count)
        assert count.binds == ["et", "en", "er", "ep"]
        assert count.consts == len(coefficients) + 5
