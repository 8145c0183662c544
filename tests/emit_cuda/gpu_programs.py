"""GPU-scheduled test programs built with te + Schedule, shared by the CUDA tests."""
from __future__ import annotations

import os
import shutil

import pytest

import refcomp
from refcomp import te, workloads
from refcomp.loops import gpu_recipes


def check_on_the_gpu(func, rng) -> None:
    """func built for CUDA and run on the device (skipped without one) on random arrays; its last
    buffer compared with the checked GPU simulation of the same program."""
    import numpy as np

    from refcomp.emit_cuda.simulate import run_checked

    lib = refcomp.build(func, target="cuda")
    if not lib.device_available():
        pytest.skip("no CUDA device")
    arrays = [rng.standard_normal([int(d) for d in b.shape]).astype("float32") for b in func.buffers]
    expected = [a.copy() for a in arrays]
    run_checked(func, *expected)
    lib(*arrays)
    np.testing.assert_allclose(arrays[-1], expected[-1], rtol=1e-4, atol=1e-5)


needs_nvcc = pytest.mark.skipif(
    shutil.which("nvcc") is None and not os.path.exists("/usr/local/cuda/bin/nvcc") and "NVCC" not in os.environ,
    reason="nvcc is not installed")


def elementwise(threads: int = 64, symbolic: bool = True):
    """B = exp(A) * 2 over n (or 300) elements, one element per thread."""
    sch = refcomp.Schedule(workloads.exp_scale(te.var("n") if symbolic else 300))
    gpu_recipes.schedule_elementwise(sch, "B", threads=threads)
    return sch.func


def reversed_tiles(threads: int = 64, rows: int = 4):
    """B[r, c] = A[r, threads - 1 - c], row r of A staged through shared memory by block r.

    Thread c reads the element thread threads-1-c loaded: correct only with a barrier between.
    """
    A = te.placeholder((rows, threads), "float32", name="A")
    B = te.compute((rows, threads), lambda r, c: A[r, threads - 1 - c], name="B")
    sch = refcomp.Schedule(te.create_prim_func([A, B]))
    block = sch.get_block("B")
    r, c = sch.get_loops(block)
    sch.bind(r, "blockIdx.x")
    sch.bind(c, "threadIdx.x")
    shared = sch.cache_read(block, 0, "shared")
    sch.compute_at(shared, r)
    sch.bind(sch.get_loops(shared)[-1], "threadIdx.x")
    return sch.func


softmax_func = workloads.softmax
layer_norm_func = workloads.layer_norm
matmul_func = workloads.matmul
