"""bind_repeated_math: a vector math call repeated in one stored value is computed once (a Let)."""
import numpy as np
import pytest

import refcomp
from refcomp.ast import (
    Broadcast,
    Buffer,
    BufferStore,
    Call,
    FloatImm,
    For,
    IntImm,
    Let,
    PrimFunc,
    Ramp,
    Select,
    SizeVar,
    Var,
    collect,
)
from refcomp.loops.lower import lower
from refcomp.loops.passes.bind_repeated_math import bind_repeated_math


def _softmax_like(lanes: int, dtype: str = "float32"):
    """B[i] = select(isnan(exp(A[i] - 1) / 4), 0, exp(A[i] - 1) / 4) + log(exp(A[i] - 1) / 4 + 2) * 0:
    the same exp three times, a log once."""
    n = SizeVar("n", "int32")
    A, B = Buffer("A", (n * lanes,), dtype), Buffer("B", (n * lanes,), dtype)
    i = Var("i", "int32")
    ramp = Ramp(i * lanes, IntImm(1), lanes) if lanes > 1 else i
    vt = f"{dtype}x{lanes}" if lanes > 1 else dtype

    def c(x):
        return Broadcast(FloatImm(x, dtype), lanes) if lanes > 1 else FloatImm(x, dtype)

    def p():
        return Call("exp", (A[ramp] - c(1.0),), vt) / c(4.0)

    value = Select(Call("isnan", (p(),), f"boolx{lanes}" if lanes > 1 else "bool"), c(0.0), p()) + Call("log", (p() + c(2.0),), vt) * c(0.0)
    return PrimFunc((A, B), For(i, 0, n, "serial", BufferStore(B, value, (ramp,))), f"repeat_{lanes}")


def _exps(node):
    return [e for e in collect(node, Call) if e.op == "exp"]


@pytest.mark.parametrize("lanes", [1, 4, 16])
def test_a_repeated_vector_exp_is_bound_once(lanes, rng):
    func = _softmax_like(lanes)
    assert len(_exps(func)) == 3
    after = bind_repeated_math(func)
    if lanes == 1:
        assert after is func or len(_exps(after)) == 3  # scalar code is left to the C compiler
    else:
        (let,) = collect(after, Let)
        assert len(_exps(after)) == 1 and let.value.op == "exp" and len(collect(after, Call)) >= 3
        assert bind_repeated_math(after) is after or len(_exps(bind_repeated_math(after))) == 1  # a fixed point
    # the pipeline runs it, and the compiled result equals numpy (NaN, infinities, overflow)
    assert len(_exps(lower(func))) == (3 if lanes == 1 else 1)
    lib = refcomp.build(func, target="c -Werror", bounds="off")
    a = (rng.standard_normal(4 * lanes) * 50).astype(np.float32)
    a[rng.choice(a.size, 3, replace=False)] = [np.nan, np.inf, -np.inf]
    out = np.zeros_like(a)
    lib(a, out)
    with np.errstate(all="ignore"):
        p = np.exp(a - np.float32(1)) / np.float32(4)
        want = np.where(np.isnan(p), np.float32(0), p) + np.log(p + np.float32(2)) * np.float32(0)
    # a few subnormal units of absolute slack: exp(a - 1) / 4 below FLT_MIN keeps few significant bits
    tiny = 8 * np.finfo(np.float32).smallest_subnormal
    np.testing.assert_allclose(out, want.astype(np.float32), rtol=2e-6, atol=tiny, equal_nan=True)
    strict = refcomp.build(func, target="c -std=c99", bounds="off")  # no statement expressions there
    out99 = np.zeros_like(a)
    strict(a, out99)
    np.testing.assert_allclose(out99, want.astype(np.float32), rtol=2e-6, atol=tiny, equal_nan=True)
