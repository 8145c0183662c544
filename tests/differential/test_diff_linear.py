"""numpy == interpreter == C for matmul, conv2d (stride, padding), pooling and index maps."""
import functools

import numpy as np
import pytest
from hypothesis import given, strategies as st

from diff_strategies import ALL_DTYPES, INT_DTYPES, dims, seeds
from refcomp import te
from refcomp.testing import as_float, check, random_array

# (input dtype, accumulator dtype): narrow types accumulate in a wider one through casts
MATMUL_TYPES = [("float32", "float32"), ("float64", "float64"), ("float16", "float16"),
                ("float16", "float32"), ("bfloat16", "float32"), ("int8", "int32"), ("uint8", "uint32"),
                ("int32", "int32"), ("int64", "int64")]


@functools.lru_cache(maxsize=None)
def matmul_program(dtype, acc):
    n, m, l = te.var("n"), te.var("m"), te.var("l")
    A = te.placeholder((n, l), dtype, "A")
    B = te.placeholder((l, m), dtype, "B")
    k = te.reduce_axis(l, "k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k].astype(acc) * B[k, j].astype(acc), axis=k), name="C")
    return te.create_prim_func([A, B, C], name=f"matmul_{dtype}_{acc}")


@pytest.mark.parametrize("dtype,acc", MATMUL_TYPES)
@given(n=dims(1, 5), m=dims(1, 5), l=dims(1, 9), seed=seeds)
def test_matmul(dtype, acc, n, m, l, seed):
    rng = np.random.default_rng(seed)
    a, b = random_array(rng, (n, l), dtype), random_array(rng, (l, m), dtype)
    if dtype in INT_DTYPES:
        # exact products and sums, wrapped into the accumulator (object ints: no overflow in numpy)
        exact = a.astype(object) @ b.astype(object)
        bits = np.iinfo(acc).bits
        wrapped = [(int(v) % (1 << bits)) for v in exact.ravel()]
        expected = np.array(wrapped, dtype=object).astype(np.uint64).astype(acc).reshape(n, m)
        magnitude = None
    else:
        fa, fb = as_float(a, dtype), as_float(b, dtype)
        expected, magnitude = fa @ fb, np.abs(fa) @ np.abs(fb)
    check(matmul_program(dtype, acc), [a, b], [np.empty((n, m), acc)], [expected], dtype=acc,
          terms=l + 1, magnitude=[magnitude], seed=seed)


CONV_CONFIGS = [(1, 0), (1, 1), (2, 1), (2, 0)]  # (stride, padding) with a 3x3 kernel


@functools.lru_cache(maxsize=None)
def conv2d_program(dtype, stride, pad):
    """NCHW conv2d with a zero-padded input stage (if_then_else) and a 3x3 kernel."""
    batch, chan, h, w, feat = (te.var(v) for v in ("batch", "chan", "h", "w", "feat"))
    X = te.placeholder((batch, chan, h, w), dtype, "X")
    W = te.placeholder((feat, chan, 3, 3), dtype, "W")
    P = te.compute((batch, chan, h + 2 * pad, w + 2 * pad), lambda b, c, y, x: te.if_then_else(
        te.all(y >= pad, y < h + pad, x >= pad, x < w + pad), X[b, c, y - pad, x - pad], te.const(0, dtype)),
        name="padded")
    oh, ow = (h + 2 * pad - 3) // stride + 1, (w + 2 * pad - 3) // stride + 1
    rc, ry, rx = te.reduce_axis(chan, "rc"), te.reduce_axis(3, "ry"), te.reduce_axis(3, "rx")
    acc = "float32" if dtype in ("float16", "bfloat16") else dtype
    Y = te.compute((batch, feat, oh, ow), lambda b, f, y, x: te.sum(
        P[b, rc, y * stride + ry, x * stride + rx].astype(acc) * W[f, rc, ry, rx].astype(acc), axis=[rc, ry, rx]),
        name="Y")
    return te.create_prim_func([X, W, Y], name=f"conv2d_{dtype}_s{stride}_p{pad}"), acc


def conv2d_reference(x, w, stride, pad):
    n, c, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - 3) // stride + 1, (wd + 2 * pad - 3) // stride + 1
    out = np.zeros((n, w.shape[0], oh, ow), dtype=x.dtype)
    for y in range(oh):
        for z in range(ow):
            patch = xp[:, :, y * stride:y * stride + 3, z * stride:z * stride + 3]
            out[:, :, y, z] = np.einsum("ncij,fcij->nf", patch, w)
    return out


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32"])
@given(config=st.sampled_from(CONV_CONFIGS), batch=dims(1, 2), chan=dims(1, 3), h=dims(3, 7), w=dims(3, 7),
       feat=dims(1, 3), seed=seeds)
def test_conv2d(dtype, config, batch, chan, h, w, feat, seed):
    stride, pad = config
    rng = np.random.default_rng(seed)
    small = dtype in INT_DTYPES
    x = random_array(rng, (batch, chan, h, w), dtype, low=-100 if small else None, high=100 if small else None)
    k = random_array(rng, (feat, chan, 3, 3), dtype, low=-100 if small else None, high=100 if small else None)
    func, acc = conv2d_program(dtype, stride, pad)
    if small:
        expected = conv2d_reference(x.astype(np.int64), k.astype(np.int64), stride, pad)
        magnitude = None
    else:
        fx, fk = as_float(x, dtype), as_float(k, dtype)
        expected = conv2d_reference(fx, fk, stride, pad)
        magnitude = conv2d_reference(np.abs(fx), np.abs(fk), stride, pad)
    check(func, [x, k], [np.empty(expected.shape, acc)], [expected], dtype=acc, terms=chan * 9 + 1,
          magnitude=[magnitude], seed=seed)


@functools.lru_cache(maxsize=None)
def pooling_program(dtype):
    """2x2/stride-2 max pooling and 3x3/stride-1 average pooling with zero padding 1 (count 9)."""
    c, h, w = te.var("c"), te.var("h"), te.var("w")
    X = te.placeholder((c, h, w), dtype, "X")
    ry, rx = te.reduce_axis(2, "ry"), te.reduce_axis(2, "rx")
    MaxPool = te.compute((c, h // 2, w // 2), lambda ch, y, x: te.max(X[ch, y * 2 + ry, x * 2 + rx], axis=[ry, rx]),
                         name="maxpool")
    sy, sx = te.reduce_axis((-1, 2), "sy"), te.reduce_axis((-1, 2), "sx")
    Sum = te.compute((c, h, w), lambda ch, y, x: te.sum(X[ch, y + sy, x + sx], axis=[sy, sx],
                     where=te.all(y + sy >= 0, y + sy < h, x + sx >= 0, x + sx < w)), name="window_sum")
    Avg = te.compute((c, h, w), lambda ch, y, x: Sum[ch, y, x] / 9.0, name="avgpool")
    return te.create_prim_func([X, MaxPool, Avg], name=f"pooling_{dtype}")


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
@given(c=dims(1, 3), h=dims(1, 7), w=dims(1, 7), seed=seeds)
def test_pooling(dtype, c, h, w, seed):
    rng = np.random.default_rng(seed)
    x = random_array(rng, (c, h, w), dtype)
    f = as_float(x, dtype)
    hh, ww = h // 2, w // 2
    maxpool = f[:, :hh * 2, :ww * 2].reshape(c, hh, 2, ww, 2).max((2, 4))
    padded = np.pad(f, ((0, 0), (1, 1), (1, 1)))
    window = sum(padded[:, dy:dy + h, dx:dx + w] for dy in range(3) for dx in range(3))
    magnitude = sum(np.abs(padded)[:, dy:dy + h, dx:dx + w] for dy in range(3) for dx in range(3)) / 9
    check(pooling_program(dtype), [x], [np.empty((c, hh, ww), x.dtype), np.empty((c, h, w), x.dtype)],
          [maxpool, window / 9], dtype=dtype, terms=10, magnitude=[None, magnitude], seed=seed)


@functools.lru_cache(maxsize=None)
def index_map_program(dtype):
    """Transpose, reshape (n, m) -> (n*m,) -> (m, n) via floordiv/floormod, and a 3-d permutation."""
    n, m, p = te.var("n"), te.var("m"), te.var("p")
    A = te.placeholder((n, m), dtype, "A")
    T3 = te.placeholder((n, m, p), dtype, "T3")
    At = te.compute((m, n), lambda i, j: A[j, i], name="transposed")
    flat = te.compute((n * m,), lambda i: A[i // m, i % m], name="flat")
    back = te.compute((m, n), lambda i, j: flat[(i * n + j)], name="reshaped")
    perm = te.compute((p, n, m), lambda a, b, c: T3[b, c, a], name="permuted")
    rev = te.compute((n, m), lambda i, j: A[n - 1 - i, (j + 1) % m], name="rolled")
    return te.create_prim_func([A, T3, At, back, perm, rev], name=f"index_maps_{dtype}")


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@given(n=dims(1, 5), m=dims(1, 5), p=dims(1, 4), seed=seeds)
def test_index_maps(dtype, n, m, p, seed):
    rng = np.random.default_rng(seed)
    a, t3 = random_array(rng, (n, m), dtype), random_array(rng, (n, m, p), dtype)
    expected = [a.T, a.reshape(m, n), t3.transpose(2, 0, 1), np.roll(a[::-1], -1, axis=1)]
    outputs = [np.empty(e.shape, a.dtype) for e in expected]
    if dtype not in INT_DTYPES:
        expected = [as_float(e, dtype) for e in expected]
    check(index_map_program(dtype), [a, t3], outputs, expected, dtype=dtype, terms=0, seed=seed)
