"""GPU-scheduled test programs built with te + Schedule, shared by the CUDA tests."""
from __future__ import annotations

import refcomp
from refcomp import te


def elementwise(threads: int = 64, symbolic: bool = True):
    """B = exp(A) * 2 over n (or 300) elements, one element per thread."""
    n = te.var("n") if symbolic else 300
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: te.exp(A[i]) * 2.0, name="B")
    sch = refcomp.Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_block("B"))
    bx, tx = sch.split(i, factors=[None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return sch.func


def neighbour_sum(threads: int = 64, length: int = 256):
    """B[i] = A[i] + A[i + 1] with A staged through shared memory per block (needs a barrier)."""
    A = te.placeholder((length,), "float32", name="A")
    B = te.compute((length - 1,), lambda i: A[i] + A[i + 1], name="B")
    sch = refcomp.Schedule(te.create_prim_func([A, B]))
    block = sch.get_block("B")
    (i,) = sch.get_loops(block)
    bx, tx = sch.split(i, factors=[None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    shared = sch.cache_read(block, 0, "shared")
    sch.compute_at(shared, bx)
    _, inner = sch.split(sch.get_loops(shared)[-1], factors=[None, threads])
    sch.bind(inner, "threadIdx.x")
    return sch.func


def softmax_func(rows, cols):
    A = te.placeholder((rows, cols), "float32", name="A")
    k = te.reduce_axis((0, cols), name="k")
    M = te.compute((rows,), lambda i: te.max(A[i, k], axis=k), name="M")
    E = te.compute((rows, cols), lambda i, j: te.exp(A[i, j] - M[i]), name="E")
    k2 = te.reduce_axis((0, cols), name="k2")
    S = te.compute((rows,), lambda i: te.sum(E[i, k2], axis=k2), name="S")
    O = te.compute((rows, cols), lambda i, j: E[i, j] / S[i], name="O")
    return te.create_prim_func([A, O])


def layer_norm_func(rows, cols, eps=1e-5):
    A = te.placeholder((rows, cols), "float32", name="A")
    k = te.reduce_axis((0, cols), name="k")
    mean = te.compute((rows,), lambda i: te.sum(A[i, k] / float(cols), axis=k), name="mean")
    k2 = te.reduce_axis((0, cols), name="k2")
    var = te.compute((rows,), lambda i: te.sum((A[i, k2] - mean[i]) * (A[i, k2] - mean[i]) / float(cols),
                                               axis=k2), name="var")
    out = te.compute((rows, cols), lambda i, j: (A[i, j] - mean[i]) * te.rsqrt(var[i] + eps), name="out")
    return te.create_prim_func([A, out])


def matmul_func(n, m, k_extent, dtype="float32"):
    A = te.placeholder((n, k_extent), dtype, name="A")
    B = te.placeholder((k_extent, m), dtype, name="B")
    k = te.reduce_axis((0, k_extent), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])
