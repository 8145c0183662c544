"""GPU-scheduled test programs built with te + Schedule, shared by the CUDA tests."""
from __future__ import annotations

import os
import shutil

import pytest

import refcomp
from refcomp import te, workloads
from refcomp.loops import gpu_recipes


needs_nvcc = pytest.mark.skipif(
    shutil.which("nvcc") is None and not os.path.exists("/usr/local/cuda/bin/nvcc") and "NVCC" not in os.environ,
    reason="nvcc is not installed")


def elementwise(threads: int = 64, symbolic: bool = True):
    """B = exp(A) * 2 over n (or 300) elements, one element per thread."""
    sch = refcomp.Schedule(workloads.exp_scale(te.var("n") if symbolic else 300))
    gpu_recipes.schedule_elementwise(sch, "B", threads=threads)
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



softmax_func = workloads.softmax
layer_norm_func = workloads.layer_norm
matmul_func = workloads.matmul
