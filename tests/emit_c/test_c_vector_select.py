"""A float32x16 Select by a comparison (rc_vselect_<op>_f32x16: a mask register and a blend on
AVX-512, the lane mask and the bitwise select elsewhere) against numpy, NaN, infinities and
signed zeros included, for each of C's six comparisons."""
from __future__ import annotations

import numpy as np
import pytest

import refcomp
from refcomp.ast import Buffer, BufferStore, For, IntImm, PrimFunc, Ramp, Select, SizeVar, Var

LANES = 16
OPS = {"<": ("lt", np.less), "<=": ("le", np.less_equal), ">": ("gt", np.greater),
       ">=": ("ge", np.greater_equal), "==": ("eq", np.equal), "!=": ("ne", np.not_equal)}


def _select_kernel(op: str) -> PrimFunc:
    """D = select(A op B, A + A, C) over n vectors of 16 lanes."""
    n = SizeVar("n", "int32")
    A, B, C, D = (Buffer(name, (n * LANES,), "float32") for name in "ABCD")
    i = Var("i", "int32")
    ramp = Ramp(i * LANES, IntImm(1), LANES)
    a, b = A[ramp], B[ramp]
    cond = {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[op]
    body = For(i, 0, n, "serial", BufferStore(D, Select(cond, a + a, C[ramp]), (ramp,)))
    return PrimFunc((A, B, C, D), body, f"select_{OPS[op][0]}")


@pytest.mark.parametrize("op", sorted(OPS))
def test_select_by_comparison_matches_numpy(op, vector_isa, rng):
    from refcomp.emit_c import toolchain

    lib = refcomp.build(_select_kernel(op), target="c -Werror", bounds="off")
    one_register = toolchain.native_vector_bytes() == 64  # else legalized to narrower vectors
    assert (f"rc_vselect_{OPS[op][0]}_f32x16(" in lib.source) == one_register
    n = 64 * LANES
    a = rng.standard_normal(n).astype(np.float32)
    b = np.where(rng.random(n) < 0.3, a, rng.standard_normal(n).astype(np.float32))  # equal lanes too
    special = np.array([np.nan, 1.0, np.nan, np.inf, -np.inf, 0.0, -0.0, 0.0], np.float32)
    a[:8], b[:8] = special, np.array([1.0, np.nan, np.nan, np.inf, np.inf, -0.0, 0.0, 0.0], np.float32)
    c = rng.standard_normal(n).astype(np.float32)
    d = np.full_like(a, 12345.0)
    lib(a, b, c, d)
    with np.errstate(invalid="ignore"):
        want = np.where(OPS[op][1](a, b), a + a, c)
    np.testing.assert_array_equal(d, want)
