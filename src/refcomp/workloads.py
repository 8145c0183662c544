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
