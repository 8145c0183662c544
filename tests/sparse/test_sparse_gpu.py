"""Sparse kernels for a GPU: bind_rows_to_gpu on stage III of SpMM (a block per row, a thread per
output column), spmm_csr_gpu; before/after programs, the checked GPU simulation against scipy,
nvcc compiles, and a run on a GPU where there is one."""
from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import refcomp
from refcomp import sparse
from refcomp.ast import For, PrimFunc
from refcomp.ast.printer import script
from refcomp.emit_cuda.simulate import run_checked
from refcomp.errors import ArgumentError, ScheduleError
from refcomp.loops.primitives.tree import walk
from refcomp.shape import verify_in_bounds
from refcomp.sparse.kernels import spmm_iteration
from refcomp.sparse.lower import lower_stage3
from refcomp.sparse.schedule import bind_positions_to_gpu, bind_rows_to_gpu

from sparse_strategies import sparse_matrices

needs_nvcc = pytest.mark.skipif(
    shutil.which("nvcc") is None and not os.path.exists("/usr/local/cuda/bin/nvcc") and "NVCC" not in os.environ,
    reason="nvcc is not installed")


def _loops(func: PrimFunc) -> list[For]:
    return [s for s in walk(func.body) if isinstance(s, For)]


def _ifj(width: int, dtype: str = "float32", accumulate: bool = False) -> PrimFunc:
    return lower_stage3(sparse.sparse_reorder(spmm_iteration(dtype, width, accumulate), ["I", "F", "J"]))


def _arrays(A: sp.csr_matrix, width: int, rng, dtype=np.float32):
    B = rng.uniform(-1.0, 1.0, (A.shape[1], width)).astype(dtype)
    C = rng.uniform(-1.0, 1.0, (A.shape[0], width)).astype(dtype)  # garbage: every element must be set
    return A.indptr.astype(np.int32), A.indices.astype(np.int32), A.data.astype(dtype), B, C


def test_bind_rows_to_gpu_before_after():
    before = _ifj(64)
    text = script(before)
    assert "T.parallel(m" in text and "for f in range(64)" in text and "thread_binding" not in text
    after = bind_rows_to_gpu(before, threads=32, rows_per_block=1)
    text = script(after)
    assert 'for i in T.thread_binding(m, thread="blockIdx.x"):' in text
    assert 'for f_1 in T.thread_binding(32, thread="threadIdx.x"):' in text
    assert "for f_0 in range(2):" in text and "B[J_indices[j], f_0 * 32 + f_1]" in text
    assert "omp_schedule" not in text
    rows, threads, columns = _loops(after)[:3]
    assert (rows.thread_binding, threads.thread_binding, columns.kind) == ("blockIdx.x", "threadIdx.x", "serial")
    # the default: a thread per column up to GPU_ROW_THREADS
    whole = bind_rows_to_gpu(before)
    assert 'for f in T.thread_binding(64, thread="threadIdx.x"):' in script(whole)
    assert 'T.thread_binding(256, thread="threadIdx.x")' in script(bind_rows_to_gpu(_ifj(512)))
    assert 'T.thread_binding(160, thread="threadIdx.x")' in script(bind_rows_to_gpu(_ifj(320)))  # a divisor


def test_rows_per_block_before_after(rng):
    before = _ifj(16)
    after = bind_rows_to_gpu(before, rows_per_block=3)
    text = script(after)
    assert 'for b in T.thread_binding((m + 2) // 3, thread="blockIdx.x"):' in text
    assert 'for r in T.thread_binding(3, thread="threadIdx.y"):' in text
    assert 'for f in T.thread_binding(16, thread="threadIdx.x"):' in text
    assert "if b * 3 + r < m:" in text and "i: T.int32 = b * 3 + r" in text
    # the default fills a block of GPU_BLOCK_MIN_THREADS (128) threads: 8 rows of 16
    assert 'T.thread_binding(8, thread="threadIdx.y")' in script(bind_rows_to_gpu(before))
    assert "threadIdx.y" not in script(bind_rows_to_gpu(_ifj(128)))
    from refcomp.loops.interpreter import interpret

    for m in (1, 3, 7):  # fewer rows than a block, a whole block, a partial last block
        A = sp.random(m, 5, density=0.5, format="csr", random_state=int(rng.integers(1 << 31)), dtype=np.float32)
        indptr, indices, data, B, C = _arrays(A, 16, rng)
        expected = C.copy()
        interpret(before, indptr, indices, data, B, expected)
        run_checked(after, indptr, indices, data, B, C)
        np.testing.assert_allclose(C, expected, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-5)
    verify_in_bounds(after)


def test_bind_rows_to_gpu_numbers_match_before(rng):
    A = sp.random(9, 11, density=0.3, format="csr", random_state=int(rng.integers(1 << 31)), dtype=np.float32)
    A.data += np.float32(0.5)
    for threads in (None, 16, 64):
        func = bind_rows_to_gpu(_ifj(64), threads=threads)
        indptr, indices, data, B, C = _arrays(A, 64, rng)
        expected = C.copy()
        from refcomp.loops.interpreter import interpret

        interpret(_ifj(64), indptr, indices, data, B, expected)  # before, in the interpreter
        run_checked(func, indptr, indices, data, B, C)  # after, in the GPU simulation
        np.testing.assert_allclose(C, expected, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(A=sparse_matrices(max_dim=12), width=st.sampled_from([1, 8, 32, 48]), threads=st.sampled_from([None, 8]),
       rows=st.sampled_from([None, 1, 2, 5]), seed=st.integers(0, 2**32 - 1))
def test_spmm_csr_gpu_simulated_matches_scipy(A, width, threads, rows, seed):
    if threads is not None and width % threads:
        threads = None
    rng = np.random.default_rng(seed)
    indptr, indices, data, B, C = _arrays(A, width, rng)
    func = sparse.spmm_csr_gpu("float32", width, threads=threads, rows_per_block=rows)
    run_checked(func, indptr, indices, data, B, C)
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_spmm_csr_gpu_accumulates_and_float64(dtype, rng):
    A = sp.random(6, 7, density=0.4, format="csr", random_state=int(rng.integers(1 << 31)), dtype=dtype)
    indptr, indices, data, B, C = _arrays(A, 16, rng, dtype)
    start = C.copy()
    run_checked(sparse.spmm_csr_gpu(np.dtype(dtype).name, 16, accumulate=True), indptr, indices, data, B, C)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(C, start + A @ B, **tol)


def test_spmm_csr_gpu_accesses_are_proved_in_bounds():
    verify_in_bounds(sparse.spmm_csr_gpu("float32", 64, threads=32))


def test_bind_rows_to_gpu_refuses_other_shapes():
    # I, J, F: the feature loop is not directly inside the row loop
    with pytest.raises(sparse.SparseScheduleError, match="one serial loop of constant extent"):
        bind_rows_to_gpu(lower_stage3(spmm_iteration("float32", 64)))
    with pytest.raises(sparse.SparseScheduleError, match="constant extent"):
        bind_rows_to_gpu(_ifj(None))
    with pytest.raises(sparse.SparseScheduleError, match="must divide the feature extent 64"):
        bind_rows_to_gpu(_ifj(64), threads=24)
    for bad in (0, 2048, True, 8.0):
        with pytest.raises(sparse.SparseScheduleError, match="threads must be an int from 1 to 1024"):
            bind_rows_to_gpu(_ifj(64), threads=bad)
    for bad in (0, True, 17, 2.0):
        with pytest.raises(sparse.SparseScheduleError, match="rows_per_block must be a positive int"):
            bind_rows_to_gpu(_ifj(64), rows_per_block=bad)
    already = bind_rows_to_gpu(_ifj(64))
    with pytest.raises(sparse.SparseScheduleError, match="one row loop"):
        bind_rows_to_gpu(already)
    with pytest.raises(ArgumentError, match="width must be a positive int"):
        sparse.spmm_csr_gpu("float32", None)
    with pytest.raises(ArgumentError, match="values must be float32 or float64"):
        sparse.spmm_csr_gpu("int32", 8)
    assert issubclass(sparse.SparseScheduleError, ScheduleError)


@needs_nvcc
@pytest.mark.parametrize("dtype,width,threads,accumulate", [
    ("float32", 32, None, False), ("float32", 128, 32, True), ("float64", 16, None, False)])
def test_spmm_csr_gpu_compiles_with_nvcc(dtype, width, threads, accumulate):
    func = sparse.spmm_csr_gpu(dtype, width, threads=threads, accumulate=accumulate)
    lib = refcomp.build(func, target="cuda", bounds="prove")
    assert lib.path.exists()
    assert "__global__" in lib.source and "blockIdx.x" in lib.source and "threadIdx.x" in lib.source


@pytest.mark.gpu
@needs_nvcc
def test_spmm_csr_gpu_on_the_gpu(rng):
    lib = refcomp.build(sparse.spmm_csr_gpu("float32", 128, threads=64), target="cuda")
    if not lib.device_available():
        pytest.skip("no CUDA device")
    A = sp.random(300, 200, density=0.05, format="csr", random_state=int(rng.integers(1 << 31)), dtype=np.float32)
    A = sp.vstack([A, sp.csr_matrix(np.ones((1, 200), np.float32))], format="csr")  # a dense row
    indptr, indices, data, B, C = _arrays(A, 128, rng)
    lib(indptr, indices, data, B, C)
    np.testing.assert_allclose(C, A @ B, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------- SDDMM
def _fused_sddmm(width, dtype: str = "float32") -> PrimFunc:
    return lower_stage3(sparse.sparse_fuse(sparse.sddmm_iteration(dtype, width), ["I", "J"]))


def _sddmm_arrays(A: sp.csr_matrix, width: int, rng, dtype=np.float32):
    X = rng.uniform(-1.0, 1.0, (A.shape[0], width)).astype(dtype)
    Y = rng.uniform(-1.0, 1.0, (A.shape[1], width)).astype(dtype)
    out = rng.uniform(-1.0, 1.0, A.nnz).astype(dtype)  # garbage: every entry must be set
    return A.indptr.astype(np.int32), A.indices.astype(np.int32), A.data.astype(dtype), X, Y, out


def _sddmm_reference(A: sp.csr_matrix, X, Y):
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    return A.data * np.einsum("pf,pf->p", X[rows].astype(np.float64), Y[A.indices].astype(np.float64))


def test_bind_positions_to_gpu_before_after(rng):
    before = _fused_sddmm(32)
    text = script(before)
    assert "for i_j in T.parallel(nnz" in text and "thread_binding" not in text
    after = bind_positions_to_gpu(before, threads=8)
    text = script(after)
    assert 'for b in T.thread_binding((nnz + 7) // 8, thread="blockIdx.x"):' in text
    assert 'for t in T.thread_binding(8, thread="threadIdx.x"):' in text
    assert "if b * 8 + t < nnz:" in text and "i_j: T.int32 = b * 8 + t" in text
    assert text.index("if m > 0:") < text.index("T.thread_binding(")
    A = sp.random(7, 9, density=0.3, format="csr", random_state=int(rng.integers(1 << 31)), dtype=np.float32)
    arrays = _sddmm_arrays(A, 32, rng)
    expected = [a.copy() for a in arrays]
    from refcomp.loops.interpreter import interpret

    interpret(before, *expected)
    run_checked(after, *arrays)
    np.testing.assert_allclose(arrays[-1], expected[-1], rtol=1e-6, atol=1e-6)


@settings(max_examples=25, deadline=None)
@given(A=sparse_matrices(max_dim=12), width=st.sampled_from([None, 1, 8, 32]), threads=st.sampled_from([1, 4, 32]),
       seed=st.integers(0, 2**32 - 1))
def test_sddmm_gpu_simulated_matches_numpy(A, width, threads, seed):
    rng = np.random.default_rng(seed)
    arrays = _sddmm_arrays(A, width or 5, rng)
    run_checked(sparse.sddmm_gpu("float32", width, threads=threads), *arrays)
    np.testing.assert_allclose(arrays[-1], _sddmm_reference(A, arrays[3], arrays[4]), rtol=1e-5, atol=1e-5)


def test_sddmm_gpu_float64_and_proofs(rng):
    A = sp.random(6, 8, density=0.5, format="csr", random_state=int(rng.integers(1 << 31)), dtype=np.float64)
    arrays = _sddmm_arrays(A, 16, rng, np.float64)
    func = sparse.sddmm_gpu("float64", 16, threads=4)
    verify_in_bounds(func)
    run_checked(func, *arrays)
    np.testing.assert_allclose(arrays[-1], _sddmm_reference(A, arrays[3], arrays[4]), rtol=1e-12, atol=1e-12)


def test_bind_positions_to_gpu_refuses_other_shapes():
    with pytest.raises(sparse.SparseScheduleError, match="one loop over the stored positions"):
        bind_positions_to_gpu(bind_positions_to_gpu(_fused_sddmm(8)))
    for bad in (0, 1025, False, "32"):
        with pytest.raises(sparse.SparseScheduleError, match="threads must be an int from 1 to 1024"):
            bind_positions_to_gpu(_fused_sddmm(8), threads=bad)
    with pytest.raises(ArgumentError, match="values must be float32 or float64"):
        sparse.sddmm_gpu("float16", 8)


@needs_nvcc
@pytest.mark.parametrize("dtype,width", [("float32", 64), ("float64", None)])
def test_sddmm_gpu_compiles_with_nvcc(dtype, width):
    lib = refcomp.build(sparse.sddmm_gpu(dtype, width), target="cuda", bounds="prove")
    assert lib.path.exists() and "__global__" in lib.source and "__launch_bounds__(128)" in lib.source


@pytest.mark.gpu
@needs_nvcc
def test_sddmm_gpu_on_the_gpu(rng):
    lib = refcomp.build(sparse.sddmm_gpu("float32", 64), target="cuda")
    if not lib.device_available():
        pytest.skip("no CUDA device")
    A = sp.random(300, 200, density=0.05, format="csr", random_state=int(rng.integers(1 << 31)), dtype=np.float32)
    A = sp.vstack([A, sp.csr_matrix(np.ones((1, 200), np.float32))], format="csr")  # a dense row
    arrays = _sddmm_arrays(A, 64, rng)
    lib(*arrays)
    np.testing.assert_allclose(arrays[-1], _sddmm_reference(A, arrays[3], arrays[4]), rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------- spmm / sddmm on a GPU
def test_gpu_target_errors_come_before_any_build(rng):
    A = sparse.from_scipy(sp.random(5, 6, density=0.5, format="csr", random_state=3, dtype=np.float32))
    with pytest.raises(ArgumentError, match="target must be 'c' or a CUDA target"):
        sparse.spmm(A, np.ones((6, 8), np.float32), target="metal")
    with pytest.raises(ArgumentError, match="spmm: B"):
        sparse.spmm(A, np.ones((7, 8), np.float32), target="cuda")
    with pytest.raises(ArgumentError, match="expected a CSR SparseMatrix"):
        sparse.spmm(sp.random(5, 6, format="csr"), np.ones((6, 8), np.float32), target="cuda")
    with pytest.raises(ArgumentError, match="same width"):
        sparse.sddmm(A, np.ones((5, 8), np.float32), np.ones((6, 4), np.float32), target="cuda")
    with pytest.raises(sparse.SparseFormatError, match="indptr"):
        sparse.csr(np.array([0, 2, 1]), np.array([0, 1]), np.ones(2, np.float32), (2, 3))


@needs_nvcc
def test_gpu_target_without_a_device_is_a_clear_error(rng):
    from refcomp.errors import RuntimeFailure
    from refcomp.runtime.cuda_library import cuda_device_count

    if cuda_device_count() > 0:
        pytest.skip("a GPU is present")
    A = sparse.from_scipy(sp.random(5, 6, density=0.5, format="csr", random_state=3, dtype=np.float32))
    with pytest.raises(RuntimeFailure, match="no CUDA device"):
        sparse.spmm(A, np.ones((6, 32), np.float32), target="cuda")
    with pytest.raises(RuntimeFailure, match="no CUDA device"):
        sparse.sddmm(A, np.ones((5, 32), np.float32), np.ones((6, 32), np.float32), target="cuda")


@pytest.mark.gpu
@needs_nvcc
def test_spmm_and_sddmm_with_the_cuda_target(rng):
    from refcomp.runtime.cuda_library import cuda_device_count

    if cuda_device_count() == 0:
        pytest.skip("no CUDA device")
    S = sp.random(500, 400, density=0.02, format="csr", random_state=int(rng.integers(1 << 31)), dtype=np.float32)
    S = sp.vstack([S, sp.csr_matrix((1, 400), dtype=np.float32), sp.csr_matrix(np.ones((1, 400), np.float32))],
                  format="csr")  # an empty row and a dense one
    A = sparse.from_scipy(S)
    B = rng.uniform(-1.0, 1.0, (400, 128)).astype(np.float32)
    np.testing.assert_allclose(sparse.spmm(A, B, target="cuda"), S @ B, rtol=1e-4, atol=1e-4)
    X = rng.uniform(-1.0, 1.0, (502, 64)).astype(np.float32)
    Y = rng.uniform(-1.0, 1.0, (400, 64)).astype(np.float32)
    np.testing.assert_allclose(sparse.sddmm(A, X, Y, target="cuda"), _sddmm_reference(S, X, Y), rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------- hyb on a GPU
def _simulate_hyb(H, B, dtype=np.float32):
    from refcomp.sparse.hyb import hyb_gpu_launches

    out = np.full((H.shape[0], B.shape[1]), np.nan, dtype=dtype)  # every element must be set
    for accumulate, arrays in hyb_gpu_launches(H, B, out):
        # the simulation writes every array back; the matrix's own arrays are read-only
        arrays = [a if a.flags.writeable else a.copy() for a in arrays]
        run_checked(sparse.spmm_csr_gpu(np.dtype(dtype).name, B.shape[1], accumulate=accumulate), *arrays)
    return out


@settings(max_examples=12, deadline=None)
@given(A=sparse_matrices(max_dim=10), params=st.sampled_from([
    dict(max_width=2), dict(max_width=4, split_long_rows=True), dict(max_width=0, hot_columns=3),
    dict(max_width=2, column_parts=2, split_long_rows=True)]), seed=st.integers(0, 2**32 - 1))
def test_hyb_gpu_launches_simulated_match_scipy(A, params, seed):
    if params.get("hot_columns", 0) > A.shape[1]:
        params = dict(params, hot_columns=A.shape[1])
    rng = np.random.default_rng(seed)
    H = sparse.format_decompose(sparse.from_scipy(A), **params)
    B = rng.uniform(-1.0, 1.0, (A.shape[1], 8)).astype(np.float32)
    np.testing.assert_allclose(_simulate_hyb(H, B), A @ B, rtol=1e-5, atol=1e-5)


def test_hyb_gpu_launches_split_a_long_row(rng):
    dense_row = sp.csr_matrix(rng.uniform(0.5, 1.5, (1, 40)).astype(np.float32))
    A = sp.vstack([sp.random(9, 40, density=0.1, format="csr", random_state=int(rng.integers(1 << 31)),
                             dtype=np.float32), dense_row, sp.csr_matrix((2, 40), dtype=np.float32)], format="csr")
    H = sparse.format_decompose(sparse.from_scipy(A), max_width=4, split_long_rows=True)
    from refcomp.sparse.hyb import hyb_gpu_launches

    B = rng.uniform(-1.0, 1.0, (40, 16)).astype(np.float32)
    out = np.empty((12, 16), np.float32)
    lengths = [int(np.diff(arrays[0]).max(initial=0)) for _, arrays in hyb_gpu_launches(H, B, out)]
    assert max(lengths) <= 10  # the 40-entry row is ten chunks of 4, each its own row of work
    np.testing.assert_allclose(_simulate_hyb(H, B), A @ B, rtol=1e-5, atol=1e-5)


def test_spmm_hyb_gpu_target_checks_first(rng):
    A = sparse.from_scipy(sp.random(5, 6, density=0.5, format="csr", random_state=3, dtype=np.float32))
    H = sparse.format_decompose(A, max_width=2)
    with pytest.raises(ArgumentError, match="target must be 'c' or a CUDA target"):
        sparse.spmm_hyb(H, np.ones((6, 8), np.float32), target="opencl")
    with pytest.raises(ArgumentError, match="spmm_hyb: B"):
        sparse.spmm_hyb(H, np.ones((5, 8), np.float32), target="cuda")
    with pytest.raises(ArgumentError, match="expected a Hyb"):
        sparse.spmm_hyb(A, np.ones((6, 8), np.float32), target="cuda")


@pytest.mark.gpu
@needs_nvcc
def test_spmm_hyb_with_the_cuda_target(rng):
    from refcomp.runtime.cuda_library import cuda_device_count

    if cuda_device_count() == 0:
        pytest.skip("no CUDA device")
    S = sp.random(400, 300, density=0.03, format="csr", random_state=int(rng.integers(1 << 31)), dtype=np.float32)
    S = sp.vstack([S, sp.csr_matrix(np.ones((1, 300), np.float32))], format="csr")
    H = sparse.format_decompose(sparse.from_scipy(S), max_width=8, split_long_rows=True)
    B = rng.uniform(-1.0, 1.0, (300, 64)).astype(np.float32)
    np.testing.assert_allclose(sparse.spmm_hyb(H, B, target="cuda"), S @ B, rtol=1e-4, atol=1e-4)
