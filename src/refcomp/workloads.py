"""Standard tensor programs written with refcomp.te, shared by recipes, tests, benchmarks and the demo.

Each function returns an unscheduled PrimFunc; block names are the tensor names given here
(softmax: M, E, S, O; layer norm: mean, var, out; matmul: C), which the schedule recipes expect.
"""
from __future__ import annotations

from . import te


def exp_scale(n, dtype: str = "float32"):
    """B = exp(A) * 2 over n elements (n may be a te.var)."""
    A = te.placeholder((n,), dtype, name="A")
    B = te.compute((n,), lambda i: te.exp(A[i]) * 2.0, name="B")
    return te.create_prim_func([A, B])


def softmax(rows, cols, dtype: str = "float32"):
    """Row softmax: M = max, E = exp(A - M), S = sum E, O = E / S."""
    A = te.placeholder((rows, cols), dtype, name="A")
    k = te.reduce_axis((0, cols), name="k")
    M = te.compute((rows,), lambda i: te.max(A[i, k], axis=k), name="M")
    E = te.compute((rows, cols), lambda i, j: te.exp(A[i, j] - M[i]), name="E")
    k2 = te.reduce_axis((0, cols), name="k2")
    S = te.compute((rows,), lambda i: te.sum(E[i, k2], axis=k2), name="S")
    O = te.compute((rows, cols), lambda i, j: E[i, j] / S[i], name="O")
    return te.create_prim_func([A, O])


def layer_norm(rows, cols, eps: float = 1e-5, dtype: str = "float32"):
    """Row layer norm without affine parameters: (A - mean) / sqrt(var + eps)."""
    A = te.placeholder((rows, cols), dtype, name="A")
    k = te.reduce_axis((0, cols), name="k")
    mean = te.compute((rows,), lambda i: te.sum(A[i, k] / float(cols), axis=k), name="mean")
    k2 = te.reduce_axis((0, cols), name="k2")
    var = te.compute((rows,), lambda i: te.sum((A[i, k2] - mean[i]) * (A[i, k2] - mean[i]) / float(cols),
                                               axis=k2), name="var")
    out = te.compute((rows, cols), lambda i, j: (A[i, j] - mean[i]) * te.rsqrt(var[i] + eps), name="out")
    return te.create_prim_func([A, out])


def matmul(n, m, k_extent, dtype: str = "float32"):
    """C[i, j] = sum_k A[i, k] * B[k, j]."""
    A = te.placeholder((n, k_extent), dtype, name="A")
    B = te.placeholder((k_extent, m), dtype, name="B")
    k = te.reduce_axis((0, k_extent), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])


def batch_matmul_bt(batch, n, m, k_extent, dtype: str = "float32"):
    """C[b, i, j] = sum_k A[b, i, k] * B[b, j, k]: a batched matmul with B transposed (Q @ K^T)."""
    A = te.placeholder((batch, n, k_extent), dtype, name="A")
    B = te.placeholder((batch, m, k_extent), dtype, name="B")
    k = te.reduce_axis((0, k_extent), name="k")
    C = te.compute((batch, n, m), lambda b, i, j: te.sum(A[b, i, k] * B[b, j, k], axis=k), name="C")
    return te.create_prim_func([A, B, C])


def conv2d_nchw(batch, channels, size, filters, kernel: int = 3, pad: int = 1, dtype: str = "float32"):
    """A stride-1 2-d convolution, NCHW input and OIHW weights, zero padding `pad` on each side:
    Pad (the padded input), then Y[n, f, y, x] = sum_{c, ky, kx} Pad[n, c, y + ky, x + kx] * W[f, c, ky, kx]."""
    X = te.placeholder((batch, channels, size, size), dtype, name="X")
    W = te.placeholder((filters, channels, kernel, kernel), dtype, name="W")
    padded = size + 2 * pad
    Pad = te.compute((batch, channels, padded, padded), lambda n, c, y, x: te.if_then_else(
        te.all(y >= pad, y < size + pad, x >= pad, x < size + pad), X[n, c, y - pad, x - pad], 0.0), name="Pad")
    out = padded - kernel + 1
    c = te.reduce_axis((0, channels), name="c")
    ky = te.reduce_axis((0, kernel), name="ky")
    kx = te.reduce_axis((0, kernel), name="kx")
    Y = te.compute((batch, filters, out, out), lambda n, f, y, x: te.sum(
        Pad[n, c, y + ky, x + kx] * W[f, c, ky, kx], axis=[c, ky, kx]), name="Y")
    return te.create_prim_func([X, W, Y])
