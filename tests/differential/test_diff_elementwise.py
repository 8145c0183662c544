"""numpy == interpreter == C for element-wise and broadcast ops, casts and math, in every dtype."""
import functools

import numpy as np
import pytest
from hypothesis import given, strategies as st

from diff_strategies import ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES, dims, seeds
from refcomp import te
from refcomp.testing import as_float, check, random_array


@functools.lru_cache(maxsize=None)
def binary_program(dtype):
    """A (n, m) op B (m,) for every binary op defined on dtype, one output each."""
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), dtype, "A")
    B = te.placeholder((m,), dtype, "B")
    ops = binary_ops(dtype)
    outs = [te.compute((n, m), lambda i, j, f=f: f(A[i, j], B[j]), name=name) for name, (f, _) in ops.items()]
    return te.create_prim_func([A, B] + outs, name=f"binary_{dtype}")


def binary_ops(dtype):
    ops = {
        "add": (lambda x, y: x + y, np.add),
        "sub": (lambda x, y: x - y, np.subtract),
        "mul": (lambda x, y: x * y, np.multiply),
        "maximum": (lambda x, y: te.max(x, y), np.maximum),
        "minimum": (lambda x, y: te.min(x, y), np.minimum),
    }
    if dtype in INT_DTYPES:
        ops["floordiv"] = (lambda x, y: x // y, np.floor_divide)
        ops["floormod"] = (lambda x, y: x % y, np.mod)
    else:
        ops["div"] = (lambda x, y: x / y, np.divide)
    return ops


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@given(n=dims(), m=dims(1, 9), seed=seeds)
def test_binary_broadcast(dtype, n, m, seed):
    rng = np.random.default_rng(seed)
    a = random_array(rng, (n, m), dtype)
    if dtype in INT_DTYPES:
        b = random_array(rng, (m,), dtype)
        # divisors: nonzero, and not -1 (INT_MIN // -1 is the one overflowing case, tested elsewhere)
        b = np.where((b == 0) | (b == -1 if dtype.startswith("int") else b == 0), np.asarray(3, dtype), b)
        with np.errstate(over="ignore"):
            expected = [ref(a, b[None, :]) for _, ref in binary_ops(dtype).values()]
    else:
        b = random_array(rng, (m,), dtype, nonzero=True)
        fa, fb = as_float(a, dtype), as_float(b, dtype)
        expected = [ref(fa, fb[None, :]) for _, ref in binary_ops(dtype).values()]
    outputs = [np.empty((n, m), a.dtype) for _ in expected]
    check(binary_program(dtype), [a, b], outputs, expected, dtype=dtype, seed=seed)


UNARY = {
    # name: (te function, numpy reference on float64, input range)
    "exp": (te.exp, np.exp, (-4, 4)),
    "log": (te.log, np.log, (0.05, 8)),
    "sqrt": (te.sqrt, np.sqrt, (0, 8)),
    "rsqrt": (te.rsqrt, lambda x: 1 / np.sqrt(x), (0.05, 8)),
    "tanh": (te.tanh, np.tanh, (-4, 4)),
    "sigmoid": (te.sigmoid, lambda x: 1 / (1 + np.exp(-x)), (-6, 6)),
    "erf": (te.erf, None, (-3, 3)),
    "sin": (te.sin, np.sin, (-4, 4)),
    "abs": (te.abs, np.abs, (-4, 4)),
    "floor": (te.floor, np.floor, (-4, 4)),
    "ceil": (te.ceil, np.ceil, (-4, 4)),
    "round": (te.round, lambda x: np.where(np.abs(x - np.trunc(x)) >= 0.5, np.trunc(x) + np.sign(x), np.trunc(x)), (-4, 4)),
    "log1p": (te.log1p, np.log1p, (0, 4)),
}


def _erf(x):
    import math

    return np.vectorize(math.erf)(x)


@functools.lru_cache(maxsize=None)
def unary_program(dtype):
    n = te.var("n")
    ins = [te.placeholder((n,), dtype, f"X_{name}") for name in UNARY]
    # output names avoid C's math function names (the C backend does not rename those yet)
    outs = [te.compute((n,), lambda i, X=X, f=f: f(X[i]), name=f"y_{name}") for X, (name, (f, _, _)) in zip(ins, UNARY.items())]
    return te.create_prim_func(ins + outs, name=f"unary_{dtype}")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@given(n=dims(1, 12), seed=seeds)
def test_unary_math(dtype, n, seed):
    rng = np.random.default_rng(seed)
    inputs, expected = [], []
    for name, (_, ref, (low, high)) in UNARY.items():
        x = random_array(rng, (n,), dtype, low=low, high=high)
        inputs.append(x)
        expected.append((ref or _erf)(as_float(x, dtype)))
    outputs = [np.empty((n,), inputs[0].dtype) for _ in UNARY]
    # math functions: a few ulp in the dtype (C's float functions are not correctly rounded)
    check(unary_program(dtype), inputs, outputs, expected, dtype=dtype, terms=4, seed=seed)


def cast_reference(x, src, dst):
    """numpy reference of the IR's casts (float -> int truncates and saturates; NaN -> 0)."""
    if src in FLOAT_DTYPES and dst in INT_DTYPES:
        info = np.iinfo(dst)
        v = np.trunc(as_float(x, src))
        v = np.where(np.isnan(v), 0, np.clip(v, float(info.min), float(info.max)))
        out = np.array([min(max(int(t), int(info.min)), int(info.max)) for t in v.ravel()], dtype=object)
        return out.astype(dst).reshape(x.shape)
    if src in FLOAT_DTYPES and dst in FLOAT_DTYPES:
        return as_float(x, src)  # compared with a tolerance of one rounding in dst
    if src in INT_DTYPES and dst in FLOAT_DTYPES:
        return x.astype(np.float64)
    return x.astype(dst)  # int -> int wraps in numpy too


CAST_PAIRS = [(s, d) for s in ALL_DTYPES for d in ALL_DTYPES if s != d]


@functools.lru_cache(maxsize=None)
def cast_program(src):
    n = te.var("n")
    X = te.placeholder((n,), src, "X")
    outs = [te.compute((n,), lambda i, d=d: X[i].astype(d), name=f"to_{d}") for d in ALL_DTYPES if d != src]
    return te.create_prim_func([X] + outs, name=f"cast_from_{src}")


@pytest.mark.parametrize("src", ALL_DTYPES)
@given(n=dims(1, 10), seed=seeds, wide=st.booleans())
def test_casts(src, n, seed, wide):
    rng = np.random.default_rng(seed)
    if src in FLOAT_DTYPES:
        limit = 1e6 if wide else 300.0  # wide: saturating float -> int casts
        limit = min(limit, 60000.0) if src == "float16" else limit
        x = random_array(rng, (n,), src, low=-limit, high=limit)
    else:
        x = random_array(rng, (n,), src)
    targets = [d for d in ALL_DTYPES if d != src]
    expected = [cast_reference(x, src, d) for d in targets]
    outputs = [np.empty((n,), np.uint16 if d == "bfloat16" else d) for d in targets]
    # int -> float and float -> float round once in the target
    check(cast_program(src), [x], outputs, expected, dtype=targets, terms=0, seed=seed)


@functools.lru_cache(maxsize=None)
def fused_program(dtype):
    """A fused expression mixing Python constants, select and if_then_else."""
    n = te.var("n")
    A = te.placeholder((n,), dtype, "A")
    B = te.placeholder((n,), dtype, "B")
    C = te.compute((n,), lambda i: te.if_then_else(A[i] > B[i], A[i] * 0.5 - B[i], te.select(A[i] < 0.0, -A[i], B[i] + 1.0)), name="C")
    return te.create_prim_func([A, B, C], name=f"fused_{dtype}")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@given(n=dims(1, 16), seed=seeds)
def test_fused_select_and_constants(dtype, n, seed):
    rng = np.random.default_rng(seed)
    a, b = random_array(rng, (n,), dtype), random_array(rng, (n,), dtype)
    fa, fb = as_float(a, dtype), as_float(b, dtype)
    # two roundings on the first branch (the product by 0.5 is exact)
    expected = np.where(fa > fb, fa * 0.5 - fb, np.where(fa < 0, -fa, fb + 1.0))
    check(fused_program(dtype), [a, b], [np.empty((n,), a.dtype)], [expected], dtype=dtype, terms=1, seed=seed)
