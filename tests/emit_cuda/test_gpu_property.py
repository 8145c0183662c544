"""Random legal GPU schedules: simulated results match numpy, and nvcc compiles the code."""
import numpy as np
from hypothesis import given, settings, strategies as st

import refcomp
from refcomp import te, workloads
from refcomp.emit_cuda.simulate import run_checked
from refcomp.loops import gpu_recipes

from gpu_programs import needs_nvcc


@st.composite
def elementwise_schedules(draw):
    rows, cols = draw(st.integers(1, 9)), draw(st.integers(1, 40))
    A = te.placeholder((rows, cols), "float32", name="A")
    B = te.compute((rows, cols), lambda i, j: te.sigmoid(A[i, j]) * A[i, j] + 1.0, name="B")
    sch = refcomp.Schedule(te.create_prim_func([A, B]))
    i, j = sch.get_loops(sch.get_block("B"))
    if draw(st.booleans()):
        fused = sch.fuse(i, j)
        outer, inner = sch.split(fused, factors=[None, draw(st.sampled_from([1, 7, 32, 64]))])
        sch.bind(outer, "blockIdx.x")
        sch.bind(inner, "threadIdx.x")
    else:
        sch.bind(i, "blockIdx.y")
        j_outer, j_inner = sch.split(j, factors=[None, draw(st.sampled_from([4, 16, 33]))])
        sch.bind(j_outer, "blockIdx.x")
        sch.bind(j_inner, "threadIdx.x")
    return sch.func, (rows, cols)


@settings(max_examples=10, deadline=None)
@given(case=elementwise_schedules(), seed=st.integers(0, 2**31 - 1))
def test_random_elementwise_schedules(case, seed):
    func, shape = case
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape).astype("float32")
    b = rng.standard_normal(shape).astype("float32")
    run_checked(func, a, b)
    expected = a / (1 + np.exp(-a)) + 1
    np.testing.assert_allclose(b, expected, rtol=1e-5, atol=1e-6)


@st.composite
def matmul_schedules(draw):
    thread_m, thread_n = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2]))
    block_m, block_n = thread_m * draw(st.sampled_from([2, 4])), thread_n * draw(st.sampled_from([2, 4]))
    depth = draw(st.sampled_from([2, 4]))
    n = block_m * draw(st.integers(1, 2))
    m = block_n * draw(st.integers(1, 2))
    k = depth * draw(st.integers(1, 3))
    sch = refcomp.Schedule(workloads.matmul(n, m, k))
    gpu_recipes.schedule_matmul(sch, tile=(block_m, block_n, depth), thread_tile=(thread_m, thread_n))
    return sch.func, (n, m, k)


@settings(max_examples=6, deadline=None)
@given(case=matmul_schedules(), seed=st.integers(0, 2**31 - 1))
def test_random_matmul_tilings(case, seed):
    func, (n, m, k) = case
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, k)).astype("float32")
    b = rng.standard_normal((k, m)).astype("float32")
    c = rng.standard_normal((n, m)).astype("float32")
    run_checked(func, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


@needs_nvcc
@settings(max_examples=3, deadline=None)
@given(case=st.one_of(elementwise_schedules(), matmul_schedules()))
def test_random_schedules_compile_with_nvcc(case):
    func, _ = case
    lib = refcomp.build(func, target="cuda")
    assert lib.path.exists()
