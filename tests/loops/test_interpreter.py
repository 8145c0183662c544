"""The reference interpreter's value semantics: wrap-around, division, casts, floats, NaN, laziness."""
import functools
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

import refcomp
from refcomp import RuntimeFailure, te
from refcomp.ast import (
    Buffer, BufferStore, Cast, For, PrimFunc, SizeVar, Var, const, floordiv, floormod, max_, min_,
    truncdiv, truncmod,
)
from refcomp.loops.interpreter_values import bf16_bits, bf16_value, int_to_float

INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


ADD, SUB, MUL, DIV = (lambda x, y: x + y), (lambda x, y: x - y), (lambda x, y: x * y), (lambda x, y: x / y)


@functools.lru_cache(maxsize=None)
def cast_to(target):
    return lambda x: Cast(target, x)


@functools.lru_cache(maxsize=None)
def elementwise(op, dtype_in, dtype_out=None, arity=2):
    """A PrimFunc out[i] = op(a[i], b[i]) over n elements, written with plain loops (built once per op)."""
    n = SizeVar("n")
    ins = [Buffer(name, (n,), dtype_in) for name in "ab"[:arity]]
    out = Buffer("out", (n,), dtype_out or dtype_in)
    i = Var("i")
    body = BufferStore(out, op(*(b[i] for b in ins)), (i,))
    return PrimFunc(tuple(ins) + (out,), For(i, 0, n, "serial", body))


def run(func, *arrays, out_dtype):
    out = np.empty(arrays[0].shape, out_dtype)
    refcomp.interpret(func, *arrays, out)
    return out


def int_arrays(dtype, size=16, nonzero=False):
    info = np.iinfo(dtype)
    values = st.integers(int(info.min), int(info.max))
    if nonzero:
        values = values.filter(lambda v: v != 0)
    return st.lists(values, min_size=size, max_size=size).map(lambda v: np.array(v, dtype))


@pytest.mark.parametrize("dtype", INT_DTYPES)
@given(data=st.data())
def test_integer_arithmetic_wraps_like_numpy(dtype, data):
    a, b = data.draw(int_arrays(dtype)), data.draw(int_arrays(dtype))
    with np.errstate(over="ignore"):
        for op, ref in [(ADD, np.add), (SUB, np.subtract), (MUL, np.multiply)]:
            got = run(elementwise(op, dtype), a, b, out_dtype=dtype)
            np.testing.assert_array_equal(got, ref(a, b))


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "uint32"])
@given(data=st.data())
def test_floor_and_trunc_division(dtype, data):
    a, b = data.draw(int_arrays(dtype)), data.draw(int_arrays(dtype, nonzero=True))
    wrap = lambda v: np.array([int(x) for x in v], dtype=object)
    A, B = wrap(a), wrap(b)
    bits = np.iinfo(dtype).bits

    def to_dtype(values):  # exact results wrapped into the dtype (only INT_MIN // -1 wraps)
        return np.array([int(v) % (1 << bits) for v in values], dtype=object).astype(np.uint64).astype(dtype)

    got = run(elementwise(floordiv, dtype), a, b, out_dtype=dtype)
    np.testing.assert_array_equal(got, to_dtype(A // B))
    got = run(elementwise(floormod, dtype), a, b, out_dtype=dtype)
    np.testing.assert_array_equal(got, to_dtype(A % B))
    trunc_q = [(abs(x) // abs(y)) * (1 if (x >= 0) == (y >= 0) else -1) for x, y in zip(A, B)]
    got = run(elementwise(truncdiv, dtype), a, b, out_dtype=dtype)
    np.testing.assert_array_equal(got, to_dtype(trunc_q))
    got = run(elementwise(truncmod, dtype), a, b, out_dtype=dtype)
    np.testing.assert_array_equal(got, to_dtype([x - y * q for x, y, q in zip(A, B, trunc_q)]))


def test_int_min_floordiv_minus_one_wraps():
    a = np.array([-128, 7], np.int8)
    b = np.array([-1, -2], np.int8)
    np.testing.assert_array_equal(run(elementwise(floordiv, "int8"), a, b, out_dtype="int8"), [-128, -4])
    np.testing.assert_array_equal(run(elementwise(floormod, "int8"), a, b, out_dtype="int8"), [0, -1])


@pytest.mark.parametrize("op", [floordiv, floormod, truncdiv, truncmod])
def test_integer_division_by_zero_is_a_runtime_failure(op):
    a = np.array([5, 6, 7], np.int32)
    b = np.array([1, 0, 2], np.int32)
    with pytest.raises(RuntimeFailure, match="division by zero"):
        run(elementwise(op, "int32"), a, b, out_dtype="int32")


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@given(data=st.data())
def test_float_arithmetic_is_ieee_in_the_dtype(dtype, data):
    # arbitrary bit patterns: subnormals, infinities and NaNs included
    bits = {"float16": "uint16", "float32": "uint32", "float64": "uint64"}[dtype]
    a = data.draw(int_arrays(bits, 12)).view(dtype)
    b = data.draw(int_arrays(bits, 12)).view(dtype)
    with np.errstate(all="ignore"):
        for op, ref in [(ADD, np.add), (SUB, np.subtract), (MUL, np.multiply), (DIV, np.divide)]:
            got = run(elementwise(op, dtype), a, b, out_dtype=dtype)
            np.testing.assert_array_equal(got, ref(a, b))  # exact, NaN == NaN


def test_min_max_propagate_nan():
    a = np.array([1.0, np.nan, 3.0, -np.inf], np.float32)
    b = np.array([np.nan, 2.0, 1.0, 0.0], np.float32)
    np.testing.assert_array_equal(run(elementwise(min_, "float32"), a, b, out_dtype="float32"), np.minimum(a, b))
    np.testing.assert_array_equal(run(elementwise(max_, "float32"), a, b, out_dtype="float32"), np.maximum(a, b))


def test_float_to_int_casts_truncate_and_saturate():
    a = np.array([2.7, -2.7, np.nan, np.inf, -np.inf, 1e10, -1e10, 127.9, -128.9, 0.5], np.float64)
    func = elementwise(cast_to("int8"), "float64", "int8", arity=1)
    np.testing.assert_array_equal(run(func, a, out_dtype="int8"), [2, -2, 0, 127, -128, 127, -128, 127, -128, 0])
    func = elementwise(cast_to("uint16"), "float64", "uint16", arity=1)
    np.testing.assert_array_equal(run(func, a, out_dtype="uint16"), [2, 0, 0, 65535, 0, 65535, 0, 127, 0, 0])


@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=8, max_size=8))
def test_int64_to_float32_rounds_once(values):
    a = np.array(values, np.int64)
    func = elementwise(cast_to("float32"), "int64", "float32", arity=1)
    got = run(func, a, out_dtype="float32")
    np.testing.assert_array_equal(got, a.astype(np.float32))  # numpy converts directly too


@given(st.lists(st.integers(-(2**31), 2**31 - 1), min_size=8, max_size=8))
def test_integer_narrowing_casts_wrap(values):
    a = np.array(values, np.int32)
    for target in ["int8", "uint8", "int16", "uint32"]:
        func = elementwise(cast_to(target), "int32", target, arity=1)
        np.testing.assert_array_equal(run(func, a, out_dtype=target), a.astype(target))


def bf16_from_float32_reference(x):
    """Round-to-nearest-even of float32 bits to their top 16 bits (NaN kept quiet)."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, np.float32))
    return np.where(nan, (((bits >> 16) & 0x8000) | 0x7FC0).astype(np.uint16), rounded)


@given(st.lists(st.floats(width=32, allow_nan=True), min_size=8, max_size=8))
def test_bfloat16_casts_round_to_nearest_even(values):
    a = np.array(values, np.float32)
    func = elementwise(cast_to("bfloat16"), "float32", "bfloat16", arity=1)
    got = run(func, a, out_dtype="uint16")
    np.testing.assert_array_equal(got, bf16_from_float32_reference(a))
    back = elementwise(cast_to("float32"), "bfloat16", "float32", arity=1)
    np.testing.assert_array_equal(run(back, got, out_dtype="float32"),
                                  (got.astype(np.uint32) << 16).view(np.float32))


def test_bf16_helpers():
    assert bf16_bits(1.0) == 0x3F80 and bf16_value(0x3F80) == 1.0
    assert bf16_bits(1.0 + 2**-8) == 0x3F80  # tie rounds to even
    assert bf16_bits(1.0 + 3 * 2**-8) == 0x3F82
    assert int_to_float(2**24 + 1, refcomp.ast.dtype("float32")) == 2**24


def test_bfloat16_arithmetic_rounds_each_operation():
    a = np.array([bf16_bits(x) for x in [1.0, 3.0, 100.0, -2.5]], np.uint16)
    b = np.array([bf16_bits(x) for x in [2**-8, 1 / 3, 0.3, 7.0]], np.uint16)
    got = run(elementwise(ADD, "bfloat16"), a, b, out_dtype="uint16")
    exact = [bf16_value(x) + bf16_value(y) for x, y in zip(a, b)]
    np.testing.assert_array_equal(got, bf16_from_float32_reference(np.array(exact, np.float32)))


def test_math_intrinsics_follow_c_special_cases():
    a = np.array([0.0, -1.0, 1000.0, np.nan, np.inf, 2.5, -2.5, 0.5], np.float32)
    with np.errstate(all="ignore"):
        for name, ref in [("log", np.log), ("sqrt", np.sqrt), ("exp", np.exp), ("floor", np.floor),
                          ("ceil", np.ceil), ("trunc", np.trunc), ("tanh", np.tanh)]:
            func = elementwise(getattr(te, name), "float32", arity=1)
            np.testing.assert_allclose(run(func, a, out_dtype="float32"), ref(a), rtol=1e-6)
    func = elementwise(te.round, "float32", arity=1)
    np.testing.assert_array_equal(run(func, a, out_dtype="float32"), [0, -1, 1000, np.nan, np.inf, 3, -3, 1])
    func = elementwise(te.sigmoid, "float32", arity=1)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(run(func, a, out_dtype="float32"), 1 / (1 + np.exp(-a.astype(np.float64))), rtol=1e-6)
    func = elementwise(te.power, "float32")
    b = np.array([-1.0, 0.5, 2.0, 1.0, 0.0, 2.0, 3.0, -1.0], np.float32)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(run(func, a, b, out_dtype="float32"), np.power(a, b), rtol=1e-6)


def test_if_then_else_evaluates_only_the_taken_branch():
    n = te.var("n")
    A = te.placeholder((n,), "int32", "A")
    # the untaken branches would read out of bounds or divide by zero
    B = te.compute((n,), lambda i: te.if_then_else(i > 0, A[i - 1], A[i]) +
                   te.if_then_else(A[i] == 0, 0, 100 // A[i]), name="B")
    func = te.create_prim_func([A, B])
    a = np.array([0, 5, -3, 7], np.int32)
    out = np.empty(4, np.int32)
    refcomp.interpret(func, a, out)
    expected = [a[0] + 0, a[0] + 20, a[1] + (100 // -3), a[2] + 14]
    np.testing.assert_array_equal(out, expected)


def test_select_evaluates_both_values():
    n = te.var("n")
    A = te.placeholder((n,), "int32", "A")
    B = te.compute((n,), lambda i: te.select(i > 0, A[i - 1], A[i]), name="B")
    with pytest.raises(RuntimeFailure, match=r"out of bounds"):
        refcomp.interpret(te.create_prim_func([A, B]), np.arange(3, dtype=np.int32), np.empty(3, np.int32))


def test_out_of_bounds_is_reported_with_the_index():
    n = SizeVar("n")
    A = Buffer("A", (n,), "float32")
    i = Var("i")
    func = PrimFunc((A,), For(i, 0, n + 1, "serial", BufferStore(A, const(1.0), (i,))))
    with pytest.raises(RuntimeFailure, match=r"store to A\[3\] is out of bounds of shape \(3,\)"):
        refcomp.interpret(func, np.zeros(3, np.float32))


def test_missing_init_shows_as_garbage():
    A = te.placeholder((3, 4), "float32", "A")
    k = te.reduce_axis(4, "k")
    S = te.compute((3,), lambda i: te.sum(A[i, k], axis=k), name="S")
    T = te.compute((3,), lambda i: S[i] * 1.0, name="T")
    func = te.create_prim_func([A, T])
    stripped = refcomp.ast.Mutator()
    from refcomp.ast import Block

    class DropInit(refcomp.ast.Mutator):
        def visit_Block(self, block):
            block = self.generic_visit(block)
            return block.with_(init=None) if block.init is not None else block

    a = np.random.default_rng(0).random((3, 4)).astype(np.float32) + 0.5
    out = np.empty(3, np.float32)
    refcomp.interpret(func, a, out)
    np.testing.assert_allclose(out, a.sum(1), rtol=1e-6)
    refcomp.interpret(DropInit().visit(func), a, out)
    assert np.isnan(out).all()
    del stripped, Block


def test_init_runs_when_all_reduce_vars_are_at_their_minimum():
    A = te.placeholder((2, 3, 4), "int32", "A")
    k = te.reduce_axis((1, 3), "k")
    r = te.reduce_axis(4, "r")
    S = te.compute((2,), lambda i: te.sum(A[i, k, r], axis=[k, r]), name="S")
    a = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    out = np.full(2, 999, np.int32)
    refcomp.interpret(te.create_prim_func([A, S]), a, out)
    np.testing.assert_array_equal(out, a[:, 1:3, :].sum((1, 2)))


def test_integer_overflow_in_reduction_wraps():
    A = te.placeholder((64,), "int8", "A")
    k = te.reduce_axis(64, "k")
    S = te.compute((1,), lambda i: te.sum(A[k], axis=k), name="S")
    a = np.full(64, 100, np.int8)
    out = np.zeros(1, np.int8)
    refcomp.interpret(te.create_prim_func([A, S]), a, out)
    assert out[0] == np.int8((6400 + 128) % 256 - 128)


def test_float16_python_constants_stay_float16():
    A = te.placeholder((4,), "float16", "A")
    B = te.compute((4,), lambda i: A[i] * 0.1 + 1.0, name="B")
    a = np.array([1.0, 2.0, 65504.0, -3.0], np.float16)
    out = np.empty(4, np.float16)
    refcomp.interpret(te.create_prim_func([A, B]), a, out)
    with np.errstate(over="ignore"):
        expected = a * np.float16(0.1) + np.float16(1.0)
    np.testing.assert_array_equal(out, expected)


def test_reinterpret_and_predicates():
    A = te.placeholder((3,), "float32", "A")
    B = te.compute((3,), lambda i: te.reinterpret(A[i], "int32"), name="B")
    C = te.compute((3,), lambda i: te.isnan(A[i]) | te.isinf(A[i]), name="C")
    a = np.array([1.0, np.nan, -np.inf], np.float32)
    b, c = np.empty(3, np.int32), np.empty(3, bool)
    refcomp.interpret(te.create_prim_func([A, B, C]), a, b, c)
    np.testing.assert_array_equal(b, a.view(np.int32))
    np.testing.assert_array_equal(c, [False, True, True])


def test_interpreter_is_reasonably_fast():
    """Not a timing assertion: measures and prints element updates per second (see report)."""
    import time

    n = te.var("n")
    A = te.placeholder((n, 64), "float32", "A")
    B = te.placeholder((n, 64), "float32", "B")
    C = te.compute((n, 64), lambda i, j: A[i, j] * B[i, j] + 1.0, name="C")
    func = te.create_prim_func([A, B, C])
    a = np.random.default_rng(1).random((512, 64)).astype(np.float32)
    c = np.empty_like(a)
    start = time.perf_counter()
    refcomp.interpret(func, a, a, c)
    rate = a.size / (time.perf_counter() - start)
    np.testing.assert_array_equal(c, a * a + np.float32(1.0))
    print(f"interpreter: {rate:.3g} element updates/s")
    assert math.isfinite(rate)
