"""Argument checks of compiled kernels: every wrong argument is a clear ArgumentError, never a crash."""
import numpy as np
import pytest

import refcomp
from refcomp import te
from refcomp.ast import Buffer, BufferStore, Cast, For, PrimFunc, SizeVar, Var

_LIBS = {}


def scaled_copy():
    """B[i, j] = A[i, j] * alpha + k for A: (n, 4), B: (n, 4); alpha float32, k int32 scalars."""
    if "scaled" not in _LIBS:
        n = te.var("n")
        A = te.placeholder((n, 4), "float32", "A")
        alpha = te.var("alpha", "float32")
        k = te.var("k", "int32")
        B = te.compute((n, 4), lambda i, j: A[i, j] * alpha + k.astype("float32"), name="B")
        _LIBS["scaled"] = refcomp.build(te.create_prim_func([A, alpha, k, B]))
    return _LIBS["scaled"]


def test_good_call_runs(rng):
    lib = scaled_copy()
    a = rng.standard_normal((7, 4)).astype(np.float32)
    b = np.zeros((7, 4), np.float32)
    lib(a, 2.0, 3, b)
    np.testing.assert_allclose(b, a * 2 + 3, rtol=1e-6)


def test_shape_mismatch_names_symbolic_form():
    lib = scaled_copy()
    a = np.ones((7, 4), np.float32)
    with pytest.raises(refcomp.ArgumentError) as info:
        lib(a, 1.0, 1, np.zeros((7, 5), np.float32))
    assert "B: expected shape (n, 4) = (7, 4) with n = 7 bound from A.shape[0], got (7, 5)" in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("bad, pattern", [
    (lambda a, b: (a, 1.0, 1), "expected 4 arguments"),
    (lambda a, b: (a, 1.0, 1, b, b), "expected 4 arguments"),
    (lambda a, b: (a.astype(np.float64), 1.0, 1, b), "A: expected dtype float32, got float64"),
    (lambda a, b: (a[:, None], 1.0, 1, b), "A: expected 2 dimensions"),
    (lambda a, b: (np.asfortranarray(np.ones((4, 4), np.float32)), 1.0, 1, b[:4]), "C-contiguous"),
    (lambda a, b: (a.tolist(), 1.0, 1, b), "expected a numpy array"),
    (lambda a, b: (a, "x", 1, b), "alpha: expected a number"),
    (lambda a, b: (a, 1.0, 1.5, b), "k: expected an integer"),
    (lambda a, b: (a, 1.0, 2**40, b), "does not fit in int32"),
    (lambda a, b: (a, 1.0, True, b), "k: expected an integer"),
    (lambda a, b: (a, 1.0, 1, a), "overlap"),
    (lambda a, b: (b[::2], 1.0, 1, b[1::2]), "C-contiguous"),
])
def test_wrong_arguments(bad, pattern):
    lib = scaled_copy()
    a = np.ones((6, 4), np.float32)
    b = np.zeros((6, 4), np.float32)
    with pytest.raises(refcomp.ArgumentError, match=pattern):
        lib(*bad(a, b))


def test_read_only_output_rejected():
    lib = scaled_copy()
    b = np.zeros((3, 4), np.float32)
    b.setflags(write=False)
    with pytest.raises(refcomp.ArgumentError, match="read-only"):
        lib(np.ones((3, 4), np.float32), 1.0, 1, b)


def test_overlapping_views_rejected():
    lib = scaled_copy()
    storage = np.zeros((8, 4), np.float32)
    with pytest.raises(refcomp.ArgumentError, match="overlap"):
        lib(storage[:6], 1.0, 1, storage[2:])


def test_keyword_arguments():
    lib = scaled_copy()
    a = np.ones((2, 4), np.float32)
    b = np.zeros((2, 4), np.float32)
    lib(a, B=b, alpha=1.0, k=2)
    np.testing.assert_array_equal(b, 3.0)
    with pytest.raises(refcomp.ArgumentError, match="unexpected argument 'C'"):
        lib(a, 1.0, 1, C=b)


def test_expression_dims_bind_and_check():
    n = SizeVar("n", "int32")
    A = Buffer("A", (n * 2,), "float32")
    B = Buffer("B", (n,), "float32")
    i = Var("i", "int32")
    func = PrimFunc((A, B), For(i, 0, n, "serial", BufferStore(B, A[i * 2], (i,))), "evens")
    lib = refcomp.build(func, bounds="off")
    a = np.arange(10, dtype=np.float32)
    b = np.zeros(5, np.float32)
    lib(a, b)
    np.testing.assert_array_equal(b, a[::2])
    with pytest.raises(refcomp.ArgumentError, match=r"A: expected shape \(n \* 2,\) = \(10,\) with n = 5"):
        lib(np.zeros(9, np.float32), np.zeros(5, np.float32))
    only_expr = PrimFunc((A,), For(i, 0, n, "serial", BufferStore(A, Cast("float32", i), (i,))), "exprdim")
    lib2 = refcomp.build(only_expr, bounds="off")
    a = np.zeros(6, np.float32)
    lib2(a)
    np.testing.assert_array_equal(a[:3], [0, 1, 2])
    with pytest.raises(refcomp.ArgumentError, match="cannot bind n"):
        lib2(np.zeros(7, np.float32))


def test_alignment_promise_is_checked():
    n = SizeVar("n", "int32")
    A = Buffer("A", (n,), "float32", align=64)
    i = Var("i", "int32")
    func = PrimFunc((A,), For(i, 0, n, "serial", BufferStore(A, A[i] + 1.0, (i,))), "aligned")
    lib = refcomp.build(func, bounds="off")
    assert "__builtin_assume_aligned(A, 64)" in lib.source
    raw = np.zeros(64 + 16, np.float32)
    offset = (-raw.ctypes.data % 64) // 4
    good = raw[offset:offset + 16]
    lib(good)
    np.testing.assert_array_equal(good, 1.0)
    with pytest.raises(refcomp.ArgumentError, match="64-byte alignment"):
        lib(raw[offset + 1:offset + 9])


def test_bfloat16_takes_uint16_bits():
    n = SizeVar("n", "int32")
    A = Buffer("A", (n,), "bfloat16")
    i = Var("i", "int32")
    lib = refcomp.build(PrimFunc((A,), For(i, 0, n, "serial", BufferStore(A, A[i] * 2.0, (i,))), "bf"),
                        bounds="off")
    with pytest.raises(refcomp.ArgumentError, match="uint16 bit patterns"):
        lib(np.zeros(4, np.float32))
    bits = (np.array([1.5, -3.0, 0.0, 7.0], np.float32).view(np.uint32) >> 16).astype(np.uint16)
    lib(bits)
    back = (bits.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(back, [3.0, -6.0, 0.0, 14.0])


def test_size_var_seen_twice_must_agree():
    n = SizeVar("n", "int32")
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    i = Var("i", "int32")
    lib = refcomp.build(PrimFunc((A, B), For(i, 0, n, "serial", BufferStore(B, A[i], (i,))), "copy"))
    with pytest.raises(refcomp.ArgumentError, match=r"B: expected shape \(n,\) = \(3,\) with n = 3 bound from A"):
        lib(np.zeros(3, np.float32), np.zeros(4, np.float32))


def test_empty_arrays_are_fine():
    lib = scaled_copy()
    lib(np.zeros((0, 4), np.float32), 1.0, 1, np.zeros((0, 4), np.float32))


def test_misaligned_elements_rejected():
    lib = scaled_copy()
    raw = np.zeros(4 * 4 * 4 + 1, np.uint8)
    odd = raw[1:].view(np.float32).reshape(4, 4)
    assert not odd.flags.aligned
    with pytest.raises(refcomp.ArgumentError, match="not aligned"):
        lib(odd, 1.0, 1, np.zeros((4, 4), np.float32))
