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
