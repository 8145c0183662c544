"""Splitting vector code wider than the machine's registers: same numbers, narrower vectors."""
import numpy as np
import pytest

from refcomp.ast import (
    Broadcast, Buffer, BufferStore, Call, FloatImm, For, IntImm, LetStmt, PrimFunc, Ramp, Select,
    SizeVar, Var, max_,
)
from refcomp.emit_c import EmitOptions, emit
from refcomp.emit_c.legalize import split_wide_vectors
from refcomp.emit_c.toolchain import c_options, compile_shared, mvec_functions
from refcomp.runtime.library import Library


def _kernel(dtype="float32", lanes=16):
    n = SizeVar("n", "int32")
    A, B, C = (Buffer(name, (n * lanes,), dtype) for name in "ABC")
    i = Var("i", "int32")
    ramp = Ramp(i * lanes, IntImm(1), lanes)
    vt = f"{dtype}x{lanes}"
    e = Var("e", vt)
    a, b = A[ramp], B[ramp]
    value = Select(a > b, Call("exp", (a,), vt), max_(e, b * Broadcast(FloatImm(2.0, dtype), lanes)))
    body = For(i, 0, n, "serial", LetStmt(e, a - b, BufferStore(C, value, (ramp,))))
    return PrimFunc((A, B, C), body, f"wide_{dtype}_{lanes}")


def _build(func, vector_bytes):
    options = EmitOptions(vectors=True, openmp=True, mvec_functions=mvec_functions(), vector_bytes=vector_bytes)
    module = emit(func, options)
    target = c_options("c")
    return Library(module, compile_shared(module.source, target), func, func, target)


def test_wide_store_becomes_register_wide_pieces():
    split = split_wide_vectors(_kernel(), 32)
    source = emit(split, EmitOptions()).source
    assert "rc_f32x16" not in source.split("/* wide_float32_16")[1]
    assert source.count("rc_vstore_float32x8(&C[") == 2


def test_store_reading_its_own_buffer_stays_whole():
    n = SizeVar("n", "int32")
    A = Buffer("A", (n * 16 + 1,), "float32")
    i = Var("i", "int32")
    body = For(i, 0, n, "serial", BufferStore(A, A[Ramp(i * 16, IntImm(1), 16)], (Ramp(i * 16 + 1, IntImm(1), 16),)))
    func = PrimFunc((A,), body, "shift")
    assert split_wide_vectors(func, 32) is func
    lib = _build(func, 32)
    a = np.arange(17, dtype=np.float32)
    lib(a)
    np.testing.assert_array_equal(a, np.concatenate([[0], np.arange(16)]))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("vector_bytes", [0, 16, 32])
def test_split_kernels_match_numpy(dtype, vector_bytes, rng):
    lib = _build(_kernel(dtype), vector_bytes)
    a = rng.standard_normal(48).astype(dtype)
    b = rng.standard_normal(48).astype(dtype)
    a[:3] = [np.nan, 1.0, -np.inf]
    c = np.zeros_like(a)
    lib(a, b, c)
    with np.errstate(invalid="ignore"):
        want = np.where(a > b, np.exp(a), np.maximum(a - b, b * 2))
    np.testing.assert_allclose(c, want, rtol=1e-6 if dtype == "float32" else 1e-14)


def _exp_kernel(lanes=16):
    """C[i] = e^(A[i] - B[i]) by the inline exponential (a chain of Lets), vectorized by `lanes`."""
    from refcomp.ast.exp_poly import exp_expr
    from refcomp.loops.vectorize import vectorize

    n = SizeVar("n", "int32")
    A, B, C = (Buffer(name, (n * lanes,), "float32") for name in "ABC")
    i, lane = Var("i", "int32"), Var("lane", "int32")
    x = max_(A[i * lanes + lane] - B[i * lanes + lane], FloatImm(-80.0, "float32"))
    inner = For(lane, 0, lanes, "vectorized", BufferStore(C, exp_expr(x, 6), (i * lanes + lane,)))
    return vectorize(PrimFunc((A, B, C), For(i, 0, n, "serial", inner), "wide_exp"), vector_bytes=4 * lanes)


def test_split_lets_stay_bound_once_per_piece(rng):
    """A vector Let split into pieces binds each piece once: substituted, every use of a step
    would repeat the steps before it (the inline exponential grew to kilobytes a store)."""
    split = split_wide_vectors(_exp_kernel(), 32)
    source = emit(split, EmitOptions(vectors=True)).source.split("/* wide_exp")[1]
    assert source.count("rc_vstore_float32x8(&C[") == 2
    assert "rc_f32x16" not in source
    assert source.count("0x1.71547652b82fep+0") == 2      # log2(e): once in each piece's first step
    lib = _build(_exp_kernel(), 32)
    a, b = (rng.uniform(-40, 40, 64).astype(np.float32) for _ in range(2))
    c = np.zeros_like(a)
    lib(a, b, c)
    np.testing.assert_allclose(c, np.exp(np.maximum(a - b, -80).astype(np.float64)), rtol=2e-6)
