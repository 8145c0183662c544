"""refcomp.build end to end: te programs compiled to C agree with numpy and the interpreter.

Each program is built once per target (its dims are symbolic); hypothesis then picks shapes and
fresh random values.  numpy == interpreter == compiled C, within dtype tolerances.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import refcomp
from refcomp import te

TARGETS = ["c", "c -std=c99"]
TOL = {"float32": dict(rtol=2e-5, atol=2e-5), "float64": dict(rtol=1e-12, atol=1e-12),
       "float16": dict(rtol=2e-2, atol=2e-2)}


def _elementwise(dtype):
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), dtype, "A")
    b = te.placeholder((m,), dtype, "b")
    C = te.compute((n, m), lambda i, j: te.exp(A[i, j]) * b[j] + te.max(A[i, j], b[j]), name="C")
    ref = lambda a, bb: np.exp(a) * bb + np.maximum(a, bb)  # noqa: E731
    return te.create_prim_func([A, b, C]), ref, [("n", "m"), ("m",)], ("n", "m")


def _row_softmax(dtype):
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), dtype, "A")
    k = te.reduce_axis(m, "k")
    peak = te.compute((n,), lambda i: te.max(A[i, k], axis=k), name="peak")
    E = te.compute((n, m), lambda i, j: te.exp(A[i, j] - peak[i]), name="E")
    k2 = te.reduce_axis(m, "k2")
    total = te.compute((n,), lambda i: te.sum(E[i, k2], axis=k2), name="total")
    S = te.compute((n, m), lambda i, j: E[i, j] / total[i], name="S")

    def ref(a):
        e = np.exp(a - a.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)
    return te.create_prim_func([A, S]), ref, [("n", "m")], ("n", "m")


def _matmul(dtype):
    n, m, kk = te.var("n"), te.var("m"), te.var("kk")
    A = te.placeholder((n, kk), dtype, "A")
    B = te.placeholder((kk, m), dtype, "B")
    k = te.reduce_axis(kk, "k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C]), lambda a, b: a @ b, [("n", "kk"), ("kk", "m")], ("n", "m")


def _conv2d(dtype):
    n, h, w = te.var("n"), te.var("h"), te.var("w")
    X = te.placeholder((n, 2, h + 2, w + 2), dtype, "X")
    W = te.placeholder((3, 2, 3, 3), dtype, "W")
    c, r, s = te.reduce_axis(2, "c"), te.reduce_axis(3, "r"), te.reduce_axis(3, "s")
    Y = te.compute((n, 3, h, w), lambda b, o, y, x: te.sum(X[b, c, y + r, x + s] * W[o, c, r, s],
                                                           axis=[c, r, s]), name="Y")

    def ref(x, wt):
        out = np.zeros((x.shape[0], 3, x.shape[2] - 2, x.shape[3] - 2), x.dtype)
        for rr in range(3):
            for ss in range(3):
                patch = x[:, :, rr:rr + out.shape[2], ss:ss + out.shape[3]]
                out += np.einsum("bchw,oc->bohw", patch, wt[:, :, rr, ss])
        return out
    return te.create_prim_func([X, W, Y]), ref, [("n", 2, "h+2", "w+2"), (3, 2, 3, 3)], ("n", 3, "h", "w")


def _maxpool_transpose(dtype):
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n * 2, m * 2), dtype, "A")
    r, s = te.reduce_axis(2, "r"), te.reduce_axis(2, "s")
    P = te.compute((m, n), lambda j, i: te.max(A[i * 2 + r, j * 2 + s], axis=[r, s]), name="P")

    def ref(a):
        blocks = a.reshape(a.shape[0] // 2, 2, a.shape[1] // 2, 2).max(axis=(1, 3))
        return blocks.T
    return te.create_prim_func([A, P]), ref, [("2n", "2m")], ("m", "n")


def _integer_mix(dtype):
    n = te.var("n")
    A = te.placeholder((n,), dtype, "A")
    B = te.placeholder((n,), dtype, "B")
    C = te.compute((n,), lambda i: te.floordiv(A[i], B[i]) * 3 + te.floormod(A[i], B[i]) - te.abs(A[i]),
                   name="C")
    ref = lambda a, b: (np.floor_divide(a, b) * 3 + np.mod(a, b) - np.abs(a)).astype(a.dtype)  # noqa: E731
    return te.create_prim_func([A, B, C]), ref, [("n",), ("n",)], ("n",)


PROGRAMS = {
    "elementwise_f32": (_elementwise, "float32"), "elementwise_f64": (_elementwise, "float64"),
    "elementwise_f16": (_elementwise, "float16"), "softmax_f32": (_row_softmax, "float32"),
    "matmul_f32": (_matmul, "float32"), "matmul_f64": (_matmul, "float64"),
    "conv2d_f32": (_conv2d, "float32"), "maxpool_transpose_f32": (_maxpool_transpose, "float32"),
    "integer_i32": (_integer_mix, "int32"), "integer_i8": (_integer_mix, "int8"),
}
_BUILT = {}


def _get(name, target):
    key = (name, target)
    if key not in _BUILT:
        maker, dtype = PROGRAMS[name]
        func, ref, in_shapes, out_shape = maker(dtype)
        _BUILT[key] = (func, refcomp.build(func, target=target), ref, in_shapes, out_shape, dtype)
    return _BUILT[key]


def _dims(spec, env):
    out = []
    for d in spec:
        if isinstance(d, int):
            out.append(d)
        elif d.startswith("2"):
            out.append(2 * env[d[1:]])
        elif "+" in d:
            var, extra = d.split("+")
            out.append(env[var] + int(extra))
        else:
            out.append(env[d])
    return tuple(out)


def _random(shape, dtype, rng):
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        data = rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)
        return data
    return (rng.standard_normal(shape) * 2).astype(dtype)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
@settings(max_examples=6)
@given(sizes=st.fixed_dictionaries({v: st.integers(1, 6) for v in ("n", "m", "kk", "h", "w")}),
       seed=st.integers(0, 2**32 - 1))
def test_compiled_matches_numpy_and_interpreter(name, target, sizes, seed):
    func, lib, ref, in_shapes, out_shape, dtype = _get(name, target)
    rng = np.random.default_rng(seed)
    inputs = [_random(_dims(s, sizes), dtype, rng) for s in in_shapes]
    if name.startswith("integer"):
        inputs[1][inputs[1] == 0] = 1  # the IR makes x // 0 an error; keep divisors nonzero
        inputs[0][inputs[0] == np.iinfo(dtype).min] = 0
    out = np.full(_dims(out_shape, sizes), 7, dtype)
    lib(*inputs, out)
    interp = np.full_like(out, 3)
    refcomp.interpret(func, *inputs, interp)
    with np.errstate(all="ignore"):
        want = ref(*[x.astype(np.float64) if x.dtype.kind == "f" else x for x in inputs])
    if np.dtype(dtype).kind in "iu":
        np.testing.assert_array_equal(out, want)
        np.testing.assert_array_equal(out, interp)
    else:
        np.testing.assert_allclose(out.astype(np.float64), want, **TOL[dtype])
        np.testing.assert_allclose(out.astype(np.float64), interp.astype(np.float64), **TOL[dtype])


def test_build_rejects_non_functions():
    with pytest.raises(refcomp.BuildError, match="expected a PrimFunc"):
        refcomp.build("not a function")
    func = _elementwise("float32")[0]
    with pytest.raises(refcomp.BuildError, match="bounds must be one of"):
        refcomp.build(func, bounds="maybe")


def test_library_exposes_source_func_and_time(rng):
    func, lib, *_ = _get("matmul_f32", "c")
    assert lib.func is func and "refcomp_main" in lib.source and "Python.h" not in lib.source
    a = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal((3, 5)).astype(np.float32)
    assert lib.time(a, b, np.zeros((4, 5), np.float32), number=2, repeat=1) > 0


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32", "uint64", "int16", "int64", "bool"])
@pytest.mark.parametrize("target", ["c -std=c99", "c -Werror"])
def test_integer_and_bool_dtypes_match_interpreter(dtype, target, rng):
    n = te.var("n")
    A, B = te.placeholder((n,), dtype, "A"), te.placeholder((n,), dtype, "B")
    if dtype == "bool":
        C = te.compute((n,), lambda i: te.if_then_else(A[i] == B[i], A[i], B[i]), name="C")
    else:
        C = te.compute((n,), lambda i: te.if_then_else(
            A[i] >= B[i], A[i] * B[i] - B[i], te.max(A[i], B[i]) // (B[i] + 1) + A[i] % (B[i] + 1)), name="C")
    func = te.create_prim_func([A, B, C])
    lib = refcomp.build(func, target=target)
    if dtype == "bool":
        a, b = rng.integers(0, 2, 64).astype(bool), rng.integers(0, 2, 64).astype(bool)
    else:
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, 64, endpoint=True, dtype=dtype)
        b = rng.integers(info.min, info.max, 64, endpoint=True, dtype=dtype)
        b[b == info.max] = 0  # b + 1 must not wrap to a zero divisor
    out, want = np.zeros(64, dtype), np.zeros(64, dtype)
    lib(a, b, out)
    refcomp.interpret(func, a, b, want)
    np.testing.assert_array_equal(out, want)


def _shifted_copy():
    from refcomp.ast import Buffer, BufferStore, For, PrimFunc, SizeVar, Var
    n = SizeVar("n", "int32")
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    i = Var("i", "int32")
    return PrimFunc((A, B), For(i, 0, n, "serial", BufferStore(B, A[i + 1], (i,))), "shifted")


def test_bounds_prove_rejects_an_out_of_bounds_read():
    with pytest.raises(refcomp.ShapeError, match="out of bounds"):
        refcomp.build(_shifted_copy(), bounds="prove")


def test_bounds_runtime_turns_it_into_a_runtime_failure():
    lib = refcomp.build(_shifted_copy(), bounds="runtime")
    with pytest.raises(refcomp.RuntimeFailure, match="out of bounds"):
        lib(np.zeros(4, np.float32), np.zeros(4, np.float32))
