"""Vector helpers computed lane by lane, and how a crash of gcc itself is reported.

gcc 12 -O3 with AVX-512 crashed (internal compiler error in store_constructor) on float -> int64
vector conversions of 8 or more lanes, and of 4 lanes feeding a compare-and-select inside a loop
(the index wrap-around of DeformConv's gathers), while the conversion helper filled the result
vector element by element.  The helpers now fill plain arrays; these kernels must build and
match numpy on every CPU.
"""
import os
import stat

import numpy as np
import pytest

import refcomp
from refcomp.ast import (
    Broadcast, Buffer, BufferStore, Call, Cast, For, IntImm, PrimFunc, Ramp, Select, SeqStmt, SizeVar, Var, max_,
    min_,
)
from refcomp.emit_c import c_options
from refcomp.emit_c.toolchain import compiler_version, compile_shared

INT64_MIN, INT64_MAX = -2**63, 2**63 - 1
TABLE = 9  # entries of the table the wrapped index reads


def _int64(value: int, lanes: int):
    return Broadcast(IntImm(value, "int64"), lanes)


def _wrapped_index(A, i, lanes):
    """int64(A[i*lanes : +lanes]), plus TABLE where negative (a Python-style wrap-around)."""
    ramp = Ramp(i * lanes, IntImm(1), lanes)
    index = Cast(f"int64x{lanes}", A[ramp])
    return ramp, Select(index < _int64(0, lanes), index + _int64(TABLE, lanes), index)


def _saturating_int64(a: np.ndarray) -> np.ndarray:
    """spec/ir.md's float -> int64 conversion: toward zero, saturating, NaN -> 0."""
    out = []
    for x in a.astype(np.float64):
        if np.isnan(x):
            out.append(0)
        elif x >= 2.0**63:
            out.append(INT64_MAX)
        elif x <= -2.0**63:
            out.append(INT64_MIN)
        else:
            out.append(int(x))
    return np.array(out, dtype=np.int64)


def _float_inputs(rng, size):
    a = (rng.standard_normal(size) * 6).astype(np.float32)
    a[:5] = [np.nan, np.inf, -np.inf, 3e19, -3e19]
    rng.shuffle(a)
    return a


@pytest.mark.parametrize("lanes", [4, 8, 16])
@pytest.mark.parametrize("kind", ["serial", "parallel"])
def test_float_to_int64_then_compare_and_select(lanes, kind, rng):
    n = SizeVar("n", "int32")
    A, B = Buffer("A", (n * lanes,), "float32"), Buffer("B", (n * lanes,), "int64")
    i = Var("i", "int32")
    ramp, wrapped = _wrapped_index(A, i, lanes)
    func = PrimFunc((A, B), For(i, 0, n, kind, BufferStore(B, wrapped, (ramp,))), f"wrap_{kind}_{lanes}")
    lib = refcomp.build(func, target="c -Werror", bounds="off")
    a = _float_inputs(rng, 4 * lanes)
    out = np.zeros(4 * lanes, np.int64)
    lib(a, out)
    index = _saturating_int64(a)
    np.testing.assert_array_equal(out, np.where(index < 0, index + TABLE, index))


@pytest.mark.parametrize("lanes", [8, 16])
def test_plain_float_to_int64_vector_cast(lanes, rng):
    """gcc 12 crashed on this conversion alone (8 and 16 lanes)."""
    n = SizeVar("n", "int32")
    A, B = Buffer("A", (n * lanes,), "float32"), Buffer("B", (n * lanes,), "int64")
    i = Var("i", "int32")
    ramp = Ramp(i * lanes, IntImm(1), lanes)
    func = PrimFunc((A, B), For(i, 0, n, "serial", BufferStore(B, Cast(f"int64x{lanes}", A[ramp]), (ramp,))),
                    f"to_int64_{lanes}")
    lib = refcomp.build(func, target="c -Werror", bounds="off")
    a = _float_inputs(rng, 4 * lanes)
    out = np.zeros(4 * lanes, np.int64)
    lib(a, out)
    np.testing.assert_array_equal(out, _saturating_int64(a))


@pytest.mark.parametrize("lanes", [4, 8])
def test_wrapped_clamped_gather(lanes, rng):
    """The DeformConv construct: gather a table at clamp(wrap(int64(x)), 0, TABLE - 1)."""
    n = SizeVar("n", "int32")
    A, B = Buffer("A", (n * lanes,), "float32"), Buffer("B", (n * lanes,), "float32")
    T = Buffer("T", (TABLE,), "float32")
    i = Var("i", "int32")
    ramp, wrapped = _wrapped_index(A, i, lanes)
    clamped = max_(_int64(0, lanes), min_(wrapped, _int64(TABLE - 1, lanes)))
    func = PrimFunc((A, T, B), For(i, 0, n, "parallel", BufferStore(B, T[clamped], (ramp,))), f"gather_{lanes}")
    lib = refcomp.build(func, target="c -Werror", bounds="off")
    a, table = _float_inputs(rng, 4 * lanes), rng.standard_normal(TABLE).astype(np.float32)
    out = np.zeros(4 * lanes, np.float32)
    lib(a, table, out)
    index = _saturating_int64(a)
    np.testing.assert_array_equal(out, table[np.clip(np.where(index < 0, index + TABLE, index), 0, TABLE - 1)])


def test_lane_by_lane_helpers_never_assign_vector_elements(rng):
    """Casts, isnan, gathers, half rounding and scalar math per lane all go through arrays."""
    n = SizeVar("n", "int32")
    A, H = Buffer("A", (n * 8,), "float32"), Buffer("H", (n * 8,), "float16")
    B, M = Buffer("B", (n * 8,), "int32"), Buffer("M", (n * 8,), "bool")
    i = Var("i", "int32")
    ramp = Ramp(i * 8, IntImm(1), 8)
    body = [BufferStore(B, Cast("int32x8", A[ramp]), (ramp,)),
            BufferStore(M, Call("isnan", (A[ramp],), "boolx8"), (ramp,)),
            BufferStore(H, Cast("float16x8", Call("erf", (A[ramp],), "float32x8")), (ramp,)),
            BufferStore(A, A[Cast("int32x8", B[ramp])], (ramp,))]
    func = PrimFunc((A, H, B, M), For(i, 0, n, "serial", SeqStmt(tuple(body))), "lanes_mix")
    lib = refcomp.build(func, target="c -Werror", bounds="off")
    assert "r[l] =" not in lib.source and "z[l] =" in lib.source
    a = rng.uniform(0, 16, 16).astype(np.float32)  # valid gather positions after the int cast
    a[rng.integers(16)] = np.nan  # and NaN converts to 0
    h, b, m = np.zeros(16, np.float16), np.zeros(16, np.int32), np.zeros(16, bool)
    want = [x.copy() for x in (a, h, b, m)]
    lib(a, h, b, m)
    refcomp.interpret(func, *want, n=2)
    for got, expected in zip((a, h, b, m), want):
        np.testing.assert_array_equal(got, expected)
    assert m.sum() == 1 and b[m].tolist() == [0]


def test_a_crashing_compiler_is_named_in_the_build_error(tmp_path, monkeypatch):
    fake = tmp_path / "crashing-cc"
    fake.write_text("#!/bin/sh\n"
                    "if [ \"$1\" = --version ]; then echo 'fake-cc 1.0'; exit 0; fi\n"
                    "echo 'kernel.c:1:1: internal compiler error: in store_constructor' >&2\n"
                    "exit 4\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("CC", str(fake))
    monkeypatch.setenv("REFCOMP_CACHE_DIR", str(tmp_path / "cache"))
    try:
        with pytest.raises(refcomp.BuildError) as info:
            compile_shared("int f(void) { return 1; }\n", c_options("c"))
    finally:
        compiler_version.cache_clear()
    first_line = str(info.value).splitlines()[0]
    assert "internal compiler error" in first_line
    assert "c -std=c99" in info.value.hint
    assert os.listdir(tmp_path / "cache" / os.listdir(tmp_path / "cache")[0]) == []


@pytest.mark.parametrize("dtype,lanes", [("float32", 4), ("float32", 8), ("float32", 16), ("float64", 4),
                                         ("float64", 8)])
def test_vector_isnan_is_one_compare(dtype, lanes, rng):
    """isnan of a float vector is `v != v` (true for NaN only: not for inf, -inf, subnormals or
    zeros), converted to the mask's lanes: no lane loop."""
    n = SizeVar("n", "int32")
    A, M = Buffer("A", (n * lanes,), dtype), Buffer("M", (n * lanes,), "bool")
    i = Var("i", "int32")
    ramp = Ramp(i * lanes, IntImm(1), lanes)
    body = BufferStore(M, Call("isnan", (A[ramp],), f"boolx{lanes}"), (ramp,))
    func = PrimFunc((A, M), For(i, 0, n, "serial", body), f"isnan_{dtype}_{lanes}")
    lib = refcomp.build(func, target="c -Werror", bounds="off")
    helper = lib.source[lib.source.index(f"rc_visnan_{dtype[0]}"):]
    assert "__builtin_convertvector(v != v" in helper.split("}")[0]
    special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, np.finfo(dtype).tiny / 4, 1.0], dtype)
    a = rng.standard_normal(3 * lanes).astype(dtype)
    a[rng.choice(a.size, special.size, replace=False)] = special
    m = np.zeros(a.size, bool)
    lib(a, m)
    np.testing.assert_array_equal(m, np.isnan(a))
