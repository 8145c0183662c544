"""The interpreter's argument checks (refcomp.shape.arguments, shared with compiled kernels): count,
dtype, shape against symbolic bindings, scalars, aliasing."""
import numpy as np
import pytest

import refcomp
from refcomp import ArgumentError, te
from refcomp.ast import Buffer, BufferStore, For, PrimFunc, SizeVar, Var


def scaled_copy():
    n, m = te.var("n"), te.var("m")
    alpha = te.var("alpha", "float32")
    A = te.placeholder((n, m), "float32", "A")
    B = te.compute((n, m), lambda i, j: A[i, j] * alpha, name="B")
    return te.create_prim_func([A, B, alpha])


def test_scalars_by_position_or_name():
    func = scaled_copy()
    a = np.random.default_rng(0).random((3, 5)).astype(np.float32)
    b = np.empty_like(a)
    refcomp.interpret(func, a, b, 2.5)
    np.testing.assert_array_equal(b, a * np.float32(2.5))
    refcomp.interpret(func, a, b, alpha=-1.0)
    np.testing.assert_array_equal(b, -a)


def test_wrong_shape_names_parameter_and_binding():
    func = scaled_copy()
    a = np.zeros((3, 5), np.float32)
    with pytest.raises(ArgumentError, match=r"main: B: expected shape \(n, m\) = \(3, 5\) with n = 3 bound from A.shape\[0\], "
                       r"m = 5 bound from A.shape\[1\], got \(3, 4\)"):
        refcomp.interpret(func, a, np.zeros((3, 4), np.float32), 1.0)
    with pytest.raises(ArgumentError, match="B: expected 2 dimensions"):
        refcomp.interpret(func, a, np.zeros(15, np.float32).reshape(15, 1, 1), 1.0)


def test_wrong_dtype_count_and_kind():
    func = scaled_copy()
    a = np.zeros((3, 5), np.float32)
    with pytest.raises(ArgumentError, match="B: expected dtype float32, got float64"):
        refcomp.interpret(func, a, np.zeros((3, 5)), 1.0)
    with pytest.raises(ArgumentError, match="expected 3 arguments"):
        refcomp.interpret(func, a)
    with pytest.raises(ArgumentError, match="missing alpha"):
        refcomp.interpret(func, a, a.copy())
    with pytest.raises(ArgumentError, match="B: expected a numpy array"):
        refcomp.interpret(func, a, [[0.0] * 5] * 3, 1.0)
    with pytest.raises(ArgumentError, match="unexpected argument 'beta'; parameters are A, B, alpha"):
        refcomp.interpret(func, a, a.copy(), 1.0, beta=2)
    with pytest.raises(ArgumentError, match="alpha: expected a number"):
        refcomp.interpret(func, a, a.copy(), "x")
    assert issubclass(ArgumentError, ValueError)


def test_bfloat16_takes_uint16_bit_patterns():
    A = te.placeholder((4,), "bfloat16", "A")
    B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
    func = te.create_prim_func([A, B])
    with pytest.raises(ArgumentError, match="uint16 bit patterns"):
        refcomp.interpret(func, np.zeros(4, np.float32), np.zeros(4, np.uint16))
    a = np.array([0x3F80, 0x4040, 0xBF00, 0x7F80], np.uint16)  # 1, 3, -0.5, inf
    b = np.zeros(4, np.uint16)
    refcomp.interpret(func, a, b)
    np.testing.assert_array_equal(b, [0x4000, 0x40C0, 0xBF80, 0x7F80])


def test_overlapping_arrays_are_refused_but_the_same_array_is_shared():
    n = te.var("n")
    A = te.placeholder((n,), "float32", "A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    func = te.create_prim_func([A, B])
    x = np.arange(8, dtype=np.float32)
    with pytest.raises(ArgumentError, match="A and B overlap in memory"):
        refcomp.interpret(func, x[:4], x[2:6])
    refcomp.interpret(func, x, x)  # in place: each element read before it is written
    np.testing.assert_array_equal(x, np.arange(8) + 1)


def test_read_only_output_and_non_contiguous_inputs():
    n = te.var("n")
    A = te.placeholder((n, n), "float32", "A")
    B = te.compute((n, n), lambda i, j: A[j, i], name="B")
    func = te.create_prim_func([A, B])
    a = np.random.default_rng(3).random((4, 4)).astype(np.float32)
    b = np.empty((4, 4), np.float32)
    refcomp.interpret(func, a.T, b)  # a non-contiguous view is read logically
    np.testing.assert_array_equal(b, a)
    out = np.empty((4, 4), np.float32)
    out.flags.writeable = False
    with pytest.raises(ArgumentError, match="read-only"):
        refcomp.interpret(func, a, out)
    c = np.empty((8, 8), np.float32)[::2, ::2]  # strided output is written through
    refcomp.interpret(func, a, c)
    np.testing.assert_array_equal(c, a.T)


def test_consistent_symbolic_dims_and_explicit_size_vars():
    n = te.var("n")
    A = te.placeholder((n,), "int32", "A")
    B = te.placeholder((n,), "int32", "B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    func = te.create_prim_func([A, B, C])
    with pytest.raises(ArgumentError, match=r"B: expected shape \(n,\) = \(3,\) with n = 3 bound from A.shape\[0\], got \(4,\)"):
        refcomp.interpret(func, np.zeros(3, np.int32), np.zeros(4, np.int32), np.zeros(3, np.int32))
    with pytest.raises(ArgumentError, match=r"A: expected shape \(n,\) = \(5,\) with n = 5 bound from the argument n"):
        refcomp.interpret(func, np.zeros(3, np.int32), np.zeros(3, np.int32), np.zeros(3, np.int32), n=5)


def test_derived_dims_are_checked():
    n = SizeVar("n")
    A = Buffer("A", (n,), "float32")
    B = Buffer("B", (n * 2,), "float32")
    i = Var("i")
    func = PrimFunc((A, B), For(i, 0, n, "serial", BufferStore(B, A[i], (i * 2,))))
    refcomp.interpret(func, np.ones(3, np.float32), np.zeros(6, np.float32))
    with pytest.raises(ArgumentError, match=r"B: expected shape \(n \* 2,\) = \(6,\)"):
        refcomp.interpret(func, np.ones(3, np.float32), np.zeros(5, np.float32))
    C = Buffer("C", (n + 1,), "float32")
    only_derived = PrimFunc((C,), For(i, 0, n, "serial", BufferStore(C, C[i] + 1.0, (i,))))
    c = np.zeros(4, np.float32)
    refcomp.interpret(only_derived, c)  # n = 3 solved from the one affine dim n + 1
    np.testing.assert_array_equal(c, [1, 1, 1, 0])
    refcomp.interpret(only_derived, c, n=3)
    np.testing.assert_array_equal(c, [2, 2, 2, 0])
    with pytest.raises(ArgumentError, match=r"C: expected shape \(n \+ 1,\) = \(3,\)"):
        refcomp.interpret(only_derived, c, n=2)
    D = Buffer("D", (n * 2,), "float32")
    only_even = PrimFunc((D,), For(i, 0, n, "serial", BufferStore(D, D[i], (i,))))
    with pytest.raises(ArgumentError, match=r"D: cannot bind n in shape \(n \* 2\) from the arrays, got "
                                            r"shape \(5,\); pass n=\.\.\."):
        refcomp.interpret(only_even, np.zeros(5, np.float32))


def test_integer_scalars_are_range_checked():
    k = Var("k", "int8")
    A = Buffer("A", (4,), "int8")
    i = Var("i")
    func = PrimFunc((A, k), For(i, 0, 4, "serial", BufferStore(A, A[i] + k, (i,))))
    a = np.zeros(4, np.int8)
    refcomp.interpret(func, a, 5)
    np.testing.assert_array_equal(a, [5] * 4)
    with pytest.raises(ArgumentError, match="does not fit in int8"):
        refcomp.interpret(func, a, 300)
    with pytest.raises(ArgumentError, match="k: expected an integer"):
        refcomp.interpret(func, a, 1.5)
