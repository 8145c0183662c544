"""Stage I (coordinates), stage II (positions, binary search) and stage III (loop IR) agree with
scipy/numpy; sparse_reorder and sparse_fuse keep the meaning; preconditions raise named errors."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

from refcomp import build
from refcomp.ast import SizeVar
from refcomp.ast.printer import script
from refcomp.ast.wellformed import verify_well_formed
from refcomp.loops.interpreter import interpret
from refcomp.shape import verify_in_bounds
from refcomp.sparse import iteration as S
from refcomp.sparse.validate import SparseFormatError
from refcomp.sparse.kernels import sddmm_iteration, spmm_iteration
from refcomp.sparse.lower import lower_stage2, lower_stage3

from sparse_strategies import sparse_matrices


def _csr_args(A):
    return [A.indptr.astype(np.int32), A.indices.astype(np.int32)]


def _run_all(it, args, out, scalars=None, **sizes):
    """(stage I, stage II, stage III interpreted) results, each from a copy of out."""
    results = []
    scalars = scalars or {}
    for run in (lambda o: S.run_stage1(it, *args, o, **sizes),
                lambda o: interpret(lower_stage2(it), *args, o, **scalars),
                lambda o: interpret(lower_stage3(it), *args, o, **scalars)):
        o = out.copy()
        run(o)
        results.append(o)
    return results


def _hadamard():
    m, k = SizeVar("m"), SizeVar("k")
    I = S.sp_axis("I", "dense_fixed", m)
    J = S.sp_axis("J", "sparse_variable", k, parent=I, nnz=SizeVar("nnz"))
    J2 = S.sp_axis("J2", "sparse_variable", k, parent=I, nnz=SizeVar("nnz2"))
    A, B, H = S.SpBuffer("A", (I, J)), S.SpBuffer("B", (I, J2)), S.SpBuffer("H", (I, J))
    return S.sp_iter("hadamard", [(I, "S"), (J, "S")], H, lambda i, j: ((i, j), A[i, j] * B[i, j]), [A, B, H])


def test_stage1_prints_the_iteration():
    text = S.script_stage1(spmm_iteration())
    assert "J = sparse_variable(I, k, nnz=nnz)" in text
    assert 'with sp_iter([I, J, F], "SRS") as [i, j, f]:' in text
    assert "C[i, f] += A[i, j] * B[j, f]" in text
    fused = S.script_stage1(S.sparse_fuse(sddmm_iteration(), ["I", "J"]))
    assert 'sp_iter([(I, J), F], "SSR")' in fused


@pytest.mark.parametrize("make", [
    lambda: spmm_iteration(), lambda: S.sparse_reorder(spmm_iteration(), ["I", "F", "J"]),
    lambda: sddmm_iteration(), lambda: S.sparse_fuse(sddmm_iteration(), ["I", "J"]),
    lambda: S.sparse_fuse(spmm_iteration(), ["I", "J"]), _hadamard])
def test_stage3_is_proved_and_well_formed(make):
    it = make()
    for func in (lower_stage2(it), lower_stage3(it)):
        verify_well_formed(func)
    verify_in_bounds(lower_stage3(it))


@settings(deadline=None, max_examples=25)
@given(sparse_matrices(), st.sampled_from([1, 3]), st.booleans(), st.booleans(), st.integers(0, 2**32 - 1))
def test_spmm_stages_match_scipy(A, width, reorder, fuse, seed):
    B = np.random.default_rng(seed).uniform(-1, 1, (A.shape[1], width)).astype(np.float32)
    it = spmm_iteration()
    if reorder:
        it = S.sparse_reorder(it, ["I", "F", "J"])
    if fuse and not reorder:
        it = S.sparse_fuse(it, ["I", "J"])
    out = np.full((A.shape[0], width), 7.0, np.float32)
    for got in _run_all(it, _csr_args(A) + [A.data, B], out):
        np.testing.assert_allclose(got, A @ B, rtol=1e-5, atol=1e-4)


@settings(deadline=None, max_examples=25)
@given(sparse_matrices(), st.sampled_from([1, 4]), st.booleans(), st.integers(0, 2**32 - 1))
def test_sddmm_stages_match_numpy(A, width, fuse, seed):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (A.shape[0], width)).astype(np.float32)
    Y = rng.uniform(-1, 1, (A.shape[1], width)).astype(np.float32)
    it = S.sparse_fuse(sddmm_iteration(), ["I", "J"]) if fuse else sddmm_iteration()
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    expected = A.data * np.einsum("pf,pf->p", X[rows], Y[A.indices])
    for got in _run_all(it, _csr_args(A) + [A.data, X, Y], np.full(A.nnz, 7.0, np.float32)):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)


@settings(deadline=None, max_examples=25)
@given(sparse_matrices(), st.integers(0, 2**32 - 1))
def test_binary_search_finds_the_other_structure(A, seed):
    rng = np.random.default_rng(seed)
    mask = rng.random(A.shape) < rng.choice([0.0, 0.3, 0.9])
    B = sp.csr_matrix(np.where(mask, rng.uniform(0.5, 2.0, A.shape), 0.0).astype(np.float32), shape=A.shape)
    B.sort_indices()
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    expected = np.asarray(A.multiply(B).todense())[rows, A.indices] if A.nnz else np.zeros(0, np.float32)
    args = _csr_args(A) + _csr_args(B) + [A.data, B.data]
    for got in _run_all(_hadamard(), args, np.full(A.nnz, 7.0, np.float32), k=A.shape[1]):
        np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_compiled_fused_sddmm_matches_numpy():
    rng = np.random.default_rng(3)
    A = sp.random(40, 30, 0.2, format="csr", dtype=np.float32, random_state=4)
    A.sort_indices()
    X, Y = rng.uniform(-1, 1, (40, 8)).astype(np.float32), rng.uniform(-1, 1, (30, 8)).astype(np.float32)
    kernel = build(lower_stage3(S.sparse_fuse(sddmm_iteration(), ["I", "J"])), bounds="prove")
    out = np.full(A.nnz, 7.0, np.float32)
    kernel(*_csr_args(A), A.data, X, Y, out)
    rows = np.repeat(np.arange(40), np.diff(A.indptr))
    np.testing.assert_allclose(out, A.data * np.einsum("pf,pf->p", X[rows], Y[A.indices]), rtol=1e-5, atol=1e-4)


def test_stage2_shows_the_search():
    text = script(lower_stage2(_hadamard()))
    assert "while lo[0] < hi[0]:" in text and "J2_indices[q] == J_indices[j]" in text
    assert "assume" not in text and "assume" in script(lower_stage3(_hadamard()))


def test_reorder_preconditions():
    it = spmm_iteration()
    with pytest.raises(S.SparseScheduleError, match="before its parent"):
        S.sparse_reorder(it, ["J", "I", "F"])
    with pytest.raises(S.SparseScheduleError, match="unknown axes"):
        S.sparse_reorder(it, ["I", "Q", "F"])
    with pytest.raises(S.SparseScheduleError, match="every loop once"):
        S.sparse_reorder(it, ["I", "F"])


def test_fuse_preconditions():
    it = spmm_iteration()
    with pytest.raises(S.SparseScheduleError, match="F is not a child of I"):
        S.sparse_fuse(S.sparse_reorder(it, ["I", "F", "J"]), ["I", "F"])
    with pytest.raises(S.SparseScheduleError, match="not adjacent"):
        S.sparse_fuse(S.sparse_reorder(it, ["I", "F", "J"]), ["I", "J"])
    with pytest.raises(S.SparseScheduleError, match="two or more"):
        S.sparse_fuse(it, ["I"])
    from refcomp.sparse.ops import rgcn_iteration

    with pytest.raises(S.SparseScheduleError, match="must start at a root axis"):
        S.sparse_fuse(rgcn_iteration(), ["Rel", "J"])
    assert len(S.sparse_fuse(rgcn_iteration(), ["I", "Rel", "J"]).loops) == 2


def test_iteration_rules():
    m, k = SizeVar("m"), SizeVar("k")
    I = S.sp_axis("I", "dense_fixed", m)
    J = S.sp_axis("J", "sparse_variable", k, parent=I, nnz=SizeVar("nnz"))
    J2 = S.sp_axis("J2", "sparse_variable", k, parent=I, nnz=SizeVar("nnz2"))
    A, B = S.SpBuffer("A", (I, J)), S.SpBuffer("B", (I, J2))
    with pytest.raises(S.SparseIterationError, match="must be the iteration variable of J2"):
        S.sp_iter("bad", [(I, "S"), (J, "S")], B, lambda i, j: ((i, j), A[i, j]), [A, B])
    with pytest.raises(S.SparseIterationError, match="spatial variables"):
        S.sp_iter("bad", [(I, "S"), (J, "S")], A, lambda i, j: ((i, i), A[i, j]), [A])
    with pytest.raises(S.SparseIterationError, match="must follow its parent"):
        S.SpBuffer("C", (J, I))
    with pytest.raises(S.SparseIterationError, match="not listed"):
        S.sp_iter("bad", [(I, "S"), (J, "S")], A, lambda i, j: ((i, j), B[i, j]), [A])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_constant_width_reduction_sums_in_lanes(dtype):
    """A constant-width innermost reduction is summed in partial sums: same values (within
    rounding) in the interpreter and compiled."""
    rng = np.random.default_rng(11)
    A = sp.random(30, 20, 0.3, format="csr", dtype=dtype, random_state=12)
    A.sort_indices()
    X, Y = rng.uniform(-1, 1, (30, 16)).astype(dtype), rng.uniform(-1, 1, (20, 16)).astype(dtype)
    func = lower_stage3(sddmm_iteration(np.dtype(dtype).name, 16))
    assert "acc = T.allocate((8,)" in script(func)
    rows = np.repeat(np.arange(30), np.diff(A.indptr))
    expected = A.data * np.einsum("pf,pf->p", X[rows], Y[A.indices])
    for run in (lambda *a: interpret(func, *a), build(func, bounds="prove")):
        out = np.full(A.nnz, 7.0, dtype)
        run(*_csr_args(A), A.data, X, Y, out)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-4)


def _spmm_over(kind):
    """Stage I SpMM C[row, f] += A[...] * B[col, f] over the axes of one format."""
    m, k, n = SizeVar("m"), SizeVar("k"), SizeVar("n")
    F, K, M = S.sp_axis("F", "dense_fixed", n), S.sp_axis("K", "dense_fixed", k), S.sp_axis("M", "dense_fixed", m)
    if kind == "bsr":
        IO, KB = S.sp_axis("IO", "dense_fixed", m), S.sp_axis("KB", "dense_fixed", k)
        JO = S.sp_axis("JO", "sparse_variable", k, parent=IO, nnz=SizeVar("nnzb"))
        II, JI = S.sp_axis("II", "dense_fixed", 2), S.sp_axis("JI", "dense_fixed", 3)
        A, B, C = S.SpBuffer("A", (IO, JO, II, JI)), S.SpBuffer("B", (KB, JI, F)), S.SpBuffer("C", (IO, II, F))
        return S.sp_iter("bsr", [(IO, "S"), (JO, "R"), (II, "S"), (JI, "R"), (F, "S")], C,
                         lambda io, jo, ii, ji, f: ((io, ii, f), A[io, jo, ii, ji] * B[jo, ji, f]), [A, B, C])
    if kind == "dcsr":
        I = S.sp_axis("I", "sparse_variable", m, nnz=SizeVar("r"))
    else:
        I = S.sp_axis("I", "dense_fixed", m)
    if kind == "ell":
        J = S.sp_axis("J", "sparse_fixed", k, parent=I, per_row=SizeVar("w"), sorted=False)
    elif kind == "ragged":
        J = S.sp_axis("J", "dense_variable", k, parent=I, nnz=SizeVar("nnz"))
    else:
        J = S.sp_axis("J", "sparse_variable", k, parent=I, nnz=SizeVar("nnz"))
    A, B, C = S.SpBuffer("A", (I, J)), S.SpBuffer("B", (K, F)), S.SpBuffer("C", (M, F))
    return S.sp_iter(kind, [(I, "S"), (J, "R"), (F, "S")], C, lambda i, j, f: ((i, f), A[i, j] * B[j, f]), [A, B, C])


def _format_args(kind, A):
    from refcomp import sparse

    if kind == "bsr":
        Mx = sparse.from_scipy(A, "bsr", block=(2, 3))
        return [Mx.indptr["jo"], Mx.indices["jo"], Mx.data], np.ones(A.shape[0], bool)
    if kind == "ragged":  # the leading columns of each row only
        lengths = np.diff(A.indptr)
        dense = np.zeros(A.shape, np.float32)
        for r, length in enumerate(lengths):
            dense[r, :length] = np.arange(1, length + 1)
        Mx = sparse.ragged(A.indptr.astype(np.int32), dense[np.arange(A.shape[1]) < lengths[:, None]], A.shape)
        return [Mx.indptr["j"], Mx.data], np.ones(A.shape[0], bool), dense
    Mx = sparse.from_scipy(A, kind)
    if kind == "dcsr":
        return [Mx.indptr["i"], Mx.indices["i"], Mx.indptr["j"], Mx.indices["j"], Mx.data], np.diff(A.indptr) > 0
    if kind == "ell":
        return [Mx.indices["j"], Mx.data.reshape(-1)], np.ones(A.shape[0], bool)
    return [Mx.indptr["j"], Mx.indices["j"], Mx.data], np.ones(A.shape[0], bool)


@settings(deadline=None, max_examples=50)
@given(st.sampled_from(["csr", "dcsr", "ell", "ragged", "bsr"]), st.data(), st.integers(0, 2**32 - 1))
def test_every_axis_kind_through_the_stages(kind, data, seed):
    A = data.draw(sparse_matrices(block=(2, 3) if kind == "bsr" else (1, 1)))
    packed = _format_args(kind, A)
    arrays, written = packed[0], packed[1]
    matrix = packed[2] if kind == "ragged" else A.toarray()
    B = np.random.default_rng(seed).uniform(-1, 1, (A.shape[1], 3)).astype(np.float32)
    expected = np.where(written[:, None], matrix @ B, 7.0)
    it = _spmm_over(kind)
    m, k = A.shape
    if kind == "bsr":
        B, shape = B.reshape(k // 3, 3, 3), (m // 2, 2, 3)
        expected = expected.reshape(shape)
    else:
        shape = (m, 3)
    sizes = {"k": k // 3 if kind == "bsr" else k}
    if kind == "ell":
        sizes.update(m=m, w=arrays[-1].size // max(m, 1))
    scalars = {"w": sizes["w"]} if kind == "ell" else {}
    for got in _run_all(it, arrays + [B], np.full(shape, 7.0, np.float32), scalars, **sizes):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)
    verify_in_bounds(lower_stage3(it))


def test_stage1_interpreter_rejects_broken_arrays():
    A = sp.random(5, 4, 0.5, format="csr", dtype=np.float32, random_state=3)
    B, out = np.ones((4, 2), np.float32), np.zeros((5, 2), np.float32)
    it = spmm_iteration()
    indices = A.indices.astype(np.int32)
    indices[1] = 9
    with pytest.raises(SparseFormatError, match=r"J.indices\[1\]: index 9 is outside \[0, 4\)"):
        S.run_stage1(it, A.indptr.astype(np.int32), indices, A.data, B, out)
    indptr = A.indptr.astype(np.int32)
    indptr[2], indptr[3] = indptr[3] + 1, indptr[2]
    with pytest.raises(SparseFormatError, match="non-decreasing"):
        S.run_stage1(it, indptr, A.indices.astype(np.int32), A.data, B, out)
    with pytest.raises(SparseFormatError, match="dtype int32"):
        S.run_stage1(it, A.indptr.astype(np.int64), A.indices.astype(np.int32), A.data, B, out)
    with pytest.raises(S.SparseIterationError, match="the size k is not known"):
        S.run_stage1(_hadamard(), *_csr_args(A), *_csr_args(A), A.data, A.data, A.data.copy())


def _masked_spmm():
    """C[i, f] += A[i, j] * B[i, j] * X[j, f]: (A .* B) @ X, B found by search in its own rows."""
    m, k, n = SizeVar("m"), SizeVar("k"), SizeVar("n")
    I, F, K = S.sp_axis("I", "dense_fixed", m), S.sp_axis("F", "dense_fixed", n), S.sp_axis("K", "dense_fixed", k)
    J = S.sp_axis("J", "sparse_variable", k, parent=I, nnz=SizeVar("nnz"))
    J2 = S.sp_axis("J2", "sparse_variable", k, parent=I, nnz=SizeVar("nnz2"))
    A, B, X, C = S.SpBuffer("A", (I, J)), S.SpBuffer("B", (I, J2)), S.SpBuffer("X", (K, F)), S.SpBuffer("C", (I, F))
    return S.sp_iter("masked_spmm", [(I, "S"), (J, "R"), (F, "S")], C,
                     lambda i, j, f: ((i, f), A[i, j] * B[i, j] * X[j, f]), [A, B, X, C])


@settings(deadline=None, max_examples=25)
@given(sparse_matrices(), st.sampled_from([0.0, 0.4, 1.0]), st.integers(0, 2**32 - 1))
def test_a_search_is_hoisted_out_of_the_loops_it_does_not_depend_on(A, density, seed):
    rng = np.random.default_rng(seed)
    mask = rng.random(A.shape) < density
    B = sp.csr_matrix(np.where(mask, rng.uniform(0.5, 2.0, A.shape), 0.0).astype(np.float32), shape=A.shape)
    X = rng.uniform(-1, 1, (A.shape[1], 3)).astype(np.float32)
    it = _masked_spmm()
    text = script(lower_stage2(it))
    assert text.index("while lo[0] < hi[0]") < text.index("for f in range(n)")
    expected = A.multiply(B).toarray() @ X
    args = _csr_args(A) + _csr_args(B) + [A.data, B.data, X]
    for got in _run_all(it, args, np.full((A.shape[0], 3), 7.0, np.float32)):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)
    verify_in_bounds(lower_stage3(it))


def test_compiled_searches_match_scipy():
    """Binary searches (a sparse-sparse product, a fused loop) compile clean and agree with scipy."""
    rng = np.random.default_rng(8)
    A = sp.random(60, 50, 0.2, format="csr", dtype=np.float32, random_state=9)
    B = sp.random(60, 50, 0.3, format="csr", dtype=np.float32, random_state=10)
    A.sort_indices()
    B.sort_indices()
    X = rng.uniform(-1, 1, (50, 4)).astype(np.float32)
    kernel = build(lower_stage3(_masked_spmm()), bounds="prove")
    out = np.full((60, 4), 7.0, np.float32)
    kernel(*_csr_args(A), *_csr_args(B), A.data, B.data, X, out)
    np.testing.assert_allclose(out, A.multiply(B).toarray() @ X, rtol=1e-5, atol=1e-4)
    fused = build(lower_stage3(S.sparse_fuse(spmm_iteration(), ["I", "J"])), bounds="prove")
    fused(*_csr_args(A), A.data, X, out)
    np.testing.assert_allclose(out, A @ X, rtol=1e-5, atol=1e-4)
