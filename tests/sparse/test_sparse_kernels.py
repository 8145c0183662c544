"""SpMM, SDDMM and hyb SpMM: proved in bounds from the format invariants, equal to scipy."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from refcomp import sparse
from refcomp.sparse import kernels
from refcomp.ast import Evaluate, PrimFunc
from refcomp.errors import ArgumentError, ShapeError
from refcomp.loops.interpreter import interpret
from refcomp.shape import verify_in_bounds

from sparse_strategies import sparse_matrices

TOL = {np.float32: dict(rtol=1e-5, atol=1e-5), np.float64: dict(rtol=1e-12, atol=1e-12)}


def _dense(rng, rows, cols, dtype):
    return rng.uniform(-1.0, 1.0, (rows, cols)).astype(dtype)


@pytest.mark.parametrize("make", [sparse.spmm_csr_func, sparse.spmm_ell_func, sparse.sddmm_func])
@pytest.mark.parametrize("width", [None, 32])
def test_kernels_are_proved_from_the_invariants(make, width):
    verify_in_bounds(make("float32", width))


@pytest.mark.parametrize("block", [(1, 1), (2, 3), (4, 4)])
def test_bsr_kernel_is_proved(block):
    verify_in_bounds(sparse.spmm_bsr_func("float32", block))
    with pytest.raises(ShapeError):
        verify_in_bounds(_without_assumptions(sparse.spmm_bsr_func("float32", block)))


@given(sparse_matrices(block=(2, 3)), st.sampled_from([1, 5, 16]), st.integers(0, 2**32 - 1))
def test_bsr_spmm_matches_scipy(A, width, seed):
    B = _dense(np.random.default_rng(seed), A.shape[1], width, np.float32)
    out = sparse.spmm(sparse.from_scipy(A, "bsr", block=(2, 3)), B)
    np.testing.assert_allclose(out, A @ B, **TOL[np.float32])


def _without_assumptions(func: PrimFunc) -> PrimFunc:
    from refcomp.ast import seq
    from refcomp.ast.stmt import SeqStmt

    def strip(stmt):
        if isinstance(stmt, SeqStmt):
            kept = [strip(s) for s in stmt.stmts
                    if not (isinstance(s, Evaluate) and getattr(s.value, "op", None) == "assume")]
            return seq(*kept)
        if hasattr(stmt, "body"):
            return stmt.with_(body=strip(stmt.body))
        return stmt

    return func.with_(body=strip(func.body))


@pytest.mark.parametrize("make", [sparse.spmm_csr_func, sparse.spmm_ell_func, sparse.sddmm_func])
def test_without_the_invariants_the_proof_fails(make):
    with pytest.raises(ShapeError):
        verify_in_bounds(_without_assumptions(make("float32")))


@given(sparse_matrices(), st.sampled_from([1, 3, 9, 16, 32]), st.sampled_from([np.float32, np.float64]), st.integers(0, 2**32 - 1))
def test_spmm_matches_scipy(A, width, dtype, seed):
    A = A.astype(dtype)
    B = _dense(np.random.default_rng(seed), A.shape[1], width, dtype)
    out = sparse.spmm(sparse.from_scipy(A), B)
    np.testing.assert_allclose(out, A @ B, **TOL[dtype])


def _misaligned(array: np.ndarray, offset: int) -> np.ndarray:
    """A copy of array whose data starts `offset` bytes past a cache-line boundary."""
    backing = np.empty(array.nbytes + 128, np.uint8)
    start = (-backing.ctypes.data) % 64 + offset
    view = backing[start: start + array.nbytes].view(array.dtype).reshape(array.shape)
    view[...] = array
    return view


@given(sparse_matrices(), st.sampled_from([16, 32, 128]), st.sampled_from([np.float32, np.float64]),
       st.sampled_from([0, 8, 16, 48]), st.integers(0, 2**32 - 1))
def test_spmm_with_b_staged_on_cache_lines_matches_scipy(A, width, dtype, offset, seed):
    A = A.astype(dtype)
    B = _misaligned(_dense(np.random.default_rng(seed), A.shape[1], width, dtype), offset)
    staged = kernels.stage_rows(B, A.nnz, force=True)
    assert staged.ctypes.data % 64 == 0 or B.size == 0  # an empty B is left as it is
    np.testing.assert_array_equal(staged, B)
    with pytest.MonkeyPatch.context() as patch:  # every B large enough and read often enough
        patch.setattr(kernels, "STAGE_MIN_BYTES", 0)
        patch.setattr(kernels, "STAGE_MIN_REUSE", 0)
        patch.setattr(kernels, "STAGE_MAX_ROW_BYTES", 1 << 20)
        np.testing.assert_allclose(sparse.spmm(sparse.from_scipy(A), B), A @ B, **TOL[dtype])
        H = sparse.format_decompose(sparse.from_scipy(A), 4, split_long_rows=True)
        np.testing.assert_allclose(sparse.spmm_hyb(H, B), A @ B, **TOL[dtype])
        X = _dense(np.random.default_rng(seed + 1), A.shape[0], width, dtype)
        rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
        np.testing.assert_allclose(sparse.sddmm(sparse.from_scipy(A), X, B),
                                   A.data * np.einsum("pf,pf->p", X[rows], B[A.indices]), **TOL[dtype])


def test_stage_rows_copies_only_where_it_pays():
    rng = np.random.default_rng(3)
    big = _misaligned(_dense(rng, 8192, 32, np.float32), 16)  # 1 MiB, rows of two cache lines
    assert kernels.stage_rows(big, 4 * 8192) is not big
    assert kernels.stage_rows(big, 4 * 8192 - 1) is big          # each row read less than 4 times
    aligned = _misaligned(big, 0)
    assert kernels.stage_rows(aligned, 10**6) is aligned          # already on cache lines
    odd = _misaligned(_dense(rng, 8192, 40, np.float32), 16)      # rows of 160 bytes: not whole lines
    assert kernels.stage_rows(odd, 10**6) is odd
    wide = _misaligned(_dense(rng, 8192, 128, np.float32), 16)    # 8 lines a row: a ninth costs little
    assert kernels.stage_rows(wide, 10**6) is wide
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernels, "STAGE_MAX_BYTES", (1 << 20) - 1)
        assert kernels.stage_rows(big, 10**6) is big               # too large to keep a copy of
    empty = _misaligned(np.zeros((100, 0), np.float32), 16)
    assert kernels.stage_rows(empty, 10**6, force=True) is empty
    small = _misaligned(_dense(rng, 100, 32, np.float32), 16)
    assert kernels.stage_rows(small, 10**6) is small               # stays in L2 anyway


def _assert_product(out, A, B, dtype):
    """out equals A @ B up to rounding in any order of the sums: within 1e-5 (float32) or 1e-12
    (float64) of |A| @ |B| per element."""
    scale = abs(A).astype(np.float64) @ np.abs(B).astype(np.float64)
    tol = 1e-5 if np.dtype(dtype) == np.float32 else 1e-12
    assert out.shape == (A.shape[0], B.shape[1])
    assert np.all(np.abs(out - A.astype(np.float64) @ B.astype(np.float64)) <= tol * scale + tol)


@settings(max_examples=40)
@given(sparse_matrices(), st.sampled_from([16, 32, 64]), st.sampled_from([np.float32, np.float64]),
       st.sampled_from([64, 256, 1 << 20]), st.integers(0, 2**32 - 1))
def test_spmm_with_b_staged_in_column_order_matches_scipy(A, width, dtype, hot_bytes, seed):
    """Every staged B copied in the hot-first column order (any spread, any number of hot rows):
    the relabeled, re-sorted entries give A @ B (empty rows, a dense row and nnz 0 included)."""
    A = A.astype(dtype)
    B = _misaligned(_dense(np.random.default_rng(seed), A.shape[1], width, dtype), 16)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernels, "STAGE_MIN_BYTES", 0)
        patch.setattr(kernels, "STAGE_MIN_REUSE", 0)
        patch.setattr(kernels, "STAGE_MAX_ROW_BYTES", 1 << 20)
        patch.setattr(kernels, "RELABEL_MIN_SPREAD", 0)
        patch.setattr(kernels, "RELABEL_HOT_BYTES", hot_bytes)
        M = sparse.from_scipy(A)
        out = sparse.spmm(M, B)
        assert (f"relabeled_{B.shape[1] * B.itemsize}" in M._derived) == (B.size > 0)
        _assert_product(out, A, B, dtype)
        np.testing.assert_array_equal(sparse.spmm(M, B), out)  # the kept arrays, again


@settings(max_examples=40)
@given(sparse_matrices(), st.sampled_from([16, 32, 128]), st.sampled_from([np.float32, np.float64]),
       st.sampled_from([64, 512, 1 << 20]), st.integers(0, 2**32 - 1))
def test_spmm_with_hot_rows_packed_matches_scipy(A, width, dtype, hot_bytes, seed):
    """B on cache lines (not copied), its hot rows packed into a small copy and the others read in
    place (`split_gathered_rows`): A @ B (empty rows, a dense row and nnz 0 included)."""
    A = A.astype(dtype)
    B = _misaligned(_dense(np.random.default_rng(seed), A.shape[1], width, dtype), 0)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernels, "STAGE_MIN_BYTES", 0)
        patch.setattr(kernels, "STAGE_MIN_REUSE", 0)
        patch.setattr(kernels, "RELABEL_MIN_SPREAD", 0)
        patch.setattr(kernels, "RELABEL_HOT_BYTES", hot_bytes)
        M = sparse.from_scipy(A)
        out = sparse.spmm(M, B)
        assert (f"hot_relabeled_{B.shape[1] * B.itemsize}" in M._derived) == (A.shape[1] > 0)
        _assert_product(out, A, B, dtype)


def test_column_order_only_where_the_frequent_columns_are_scattered(monkeypatch):
    import scipy.sparse as sp
    monkeypatch.setattr(kernels, "RELABEL_HOT_BYTES", 256 * 128)  # 256 hot rows of 128 bytes
    rng = np.random.default_rng(5)
    k, rows = 1 << 14, 4096
    # 256 frequent columns, every 64th (8 KiB of 32-float rows apart): scattered over B
    cols = np.concatenate([rng.integers(0, k // 64, rows * 8) * 64, rng.integers(0, k, rows // 2)])
    A = sp.csr_matrix((np.ones(cols.size, np.float32), (rng.integers(0, rows, cols.size), cols)), shape=(rows, k))
    A.sum_duplicates()
    order = kernels.column_order(A.indices, k, 128)
    assert order is not None and order.dtype == np.int32
    assert np.array_equal(np.sort(order), np.arange(k))               # a permutation
    assert np.array_equal(order[:256], np.arange(0, k, 64))           # the frequent ones first
    assert np.all(np.diff(order[256:]) > 0)                           # the rest in increasing order
    packed = sp.csr_matrix((A.data.copy(), A.indices // 64, A.indptr.copy()), shape=(rows, k))  # side by side
    packed.sum_duplicates()
    assert kernels.column_order(packed.indices, k, 128) is None
    assert kernels.column_order(np.zeros(0, np.int32), 0, 128) is None
    indices, data = kernels.relabeled(kernels.order_labels(order), A.indptr.astype(np.int32), A.indices, A.data)
    B = rng.uniform(-1, 1, (k, 8))
    again = sp.csr_matrix((data, indices, A.indptr), shape=A.shape)
    assert again.has_sorted_indices and not indices.flags.writeable
    np.testing.assert_allclose(again @ B[order], A @ B, rtol=1e-12, atol=1e-12)
    with pytest.raises(ArgumentError, match="do not fit int32 indices"):
        kernels.relabeled(np.array([2**31], np.int64), np.array([0, 1], np.int32), np.zeros(1, np.int32),
                          np.ones(1, np.float32))


def test_stage_rows_in_an_order_gathers_the_rows():
    rng = np.random.default_rng(4)
    B = _misaligned(_dense(rng, 300, 32, np.float32), 16)
    order = rng.permutation(300).astype(np.int32)
    staged = kernels.stage_rows(B, 0, force=True, order=order)
    assert staged.ctypes.data % 64 == 0
    np.testing.assert_array_equal(staged, B[order])
    with pytest.raises(ArgumentError, match="order must be 300 int32 rows"):
        kernels.stage_rows(B, 0, force=True, order=order[:-1])
    with pytest.raises(ArgumentError, match="order must be 300 int32 rows"):
        kernels.stage_rows(B, 0, force=True, order=order.astype(np.int64))
    verify_in_bounds(kernels.gather_rows_func("float32", 32))


@given(sparse_matrices(), st.sampled_from([1, 16]), st.integers(0, 2**32 - 1))
def test_ell_spmm_matches_scipy(A, width, seed):
    B = _dense(np.random.default_rng(seed), A.shape[1], width, np.float32)
    np.testing.assert_allclose(sparse.spmm(sparse.from_scipy(A, "ell"), B), A @ B, **TOL[np.float32])


@given(sparse_matrices(), st.sampled_from([1, 5, 16, 32, 128]), st.sampled_from([1, 2, 4, 32]),
       st.integers(0, 2**32 - 1))
def test_hyb_spmm_matches_scipy(A, width, max_width, seed):
    H = sparse.format_decompose(sparse.from_scipy(A), max_width)
    np.testing.assert_array_equal(H.to_scipy().toarray(), A.toarray())
    B = _dense(np.random.default_rng(seed), A.shape[1], width, np.float32)
    np.testing.assert_allclose(sparse.spmm_hyb(H, B), A @ B, **TOL[np.float32])


@given(sparse_matrices(), st.sampled_from([1, 7, 16]), st.integers(0, 2**32 - 1))
def test_sddmm_matches_numpy(A, width, seed):
    rng = np.random.default_rng(seed)
    X, Y = _dense(rng, A.shape[0], width, np.float32), _dense(rng, A.shape[1], width, np.float32)
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    expected = A.data * np.einsum("pf,pf->p", X[rows], Y[A.indices])
    np.testing.assert_allclose(sparse.sddmm(sparse.from_scipy(A), X, Y), expected, **TOL[np.float32])


def test_interpreter_agrees_with_compiled_spmm():
    rng = np.random.default_rng(7)
    import scipy.sparse as sp

    A = sp.random(9, 7, 0.3, format="csr", dtype=np.float32, random_state=rng)
    A.data[:] = rng.uniform(0.5, 1.5, A.nnz)
    B = _dense(rng, 7, 3, np.float32)
    M = sparse.from_scipy(A)
    out = np.full((9, 3), 5.0, np.float32)
    interpret(sparse.spmm_csr_func("float32"), M.indptr["j"].copy(), M.indices["j"].copy(), M.data.copy(), B, out)
    np.testing.assert_allclose(out, sparse.spmm(M, B), rtol=1e-6, atol=1e-6)


def test_hyb_puts_each_row_in_one_part():
    import scipy.sparse as sp

    lengths = [0, 1, 2, 3, 5, 8, 40]
    rows = [np.sort(np.random.default_rng(r).choice(64, n, replace=False)) for r, n in enumerate(lengths)]
    indptr = np.concatenate(([0], np.cumsum(lengths)))
    A = sp.csr_matrix((np.ones(indptr[-1], np.float32), np.concatenate(rows), indptr), shape=(7, 64))
    H = sparse.format_decompose(sparse.from_scipy(A), max_width=8)
    assert [(b.width, list(b.rows)) for b in H.buckets] == [(1, [1]), (2, [2]), (4, [3]), (8, [4, 5])]
    assert np.diff(H.rest.indptr["j"]).tolist() == [0, 0, 0, 0, 0, 0, 40]


@given(sparse_matrices(), st.sampled_from([1, 5, 16, 64]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 3, 20]),
       st.booleans(), st.integers(0, 2**32 - 1))
def test_hyb_partitions_and_split_rows_match_scipy(A, width, max_width, parts, split, seed):
    H = sparse.format_decompose(sparse.from_scipy(A), max_width, column_parts=parts, split_long_rows=split)
    assert len(H.parts) == parts
    np.testing.assert_array_equal(H.to_scipy().toarray(), A.toarray())
    B = _dense(np.random.default_rng(seed), A.shape[1], width, np.float32)
    out = np.full((A.shape[0], width), 7.0, np.float32)
    np.testing.assert_allclose(sparse.spmm_hyb(H, B, out), A @ B, rtol=1e-5, atol=1e-4)  # parts sum in another order


def test_split_rows_cut_long_rows_into_chunks():
    import scipy.sparse as sp

    A = sp.csr_matrix(np.vstack([np.ones(10), np.zeros(10), np.eye(10)[3] * 2]).astype(np.float32))
    H = sparse.format_decompose(sparse.from_scipy(A), max_width=4, split_long_rows=True)
    part = H.parts[0]
    assert part.rest.data.size == 0 and [(b.width, list(b.rows)) for b in part.buckets] == [(1, [2])]
    assert part.split.chunks.data.shape == (3, 4)  # 4 + 4 + 2 entries of row 0
    assert part.split.gather.indptr["j"].tolist() == [0, 3, 3, 3]
    two = sparse.format_decompose(sparse.from_scipy(A), max_width=4, column_parts=2)
    assert [p.columns for p in two.parts] == [(0, 5), (5, 10)]


@pytest.mark.parametrize("kwargs, message", [
    (dict(max_width=3), "power of two"), (dict(column_parts=0), "column_parts"),
    (dict(column_parts=True), "column_parts")])
def test_format_decompose_preconditions(kwargs, message):
    import scipy.sparse as sp

    from refcomp.errors import ArgumentError

    with pytest.raises(ArgumentError, match=message):
        sparse.format_decompose(sparse.from_scipy(sp.eye(4, format="csr", dtype=np.float32)), **kwargs)


@settings(deadline=None, max_examples=10)
@given(sparse_matrices(), st.integers(0, 2**32 - 1))
def test_choose_format_keeps_a_checked_candidate(A, seed):
    choice = sparse.choose_format(sparse.from_scipy(A), 16, repeat=1)
    assert [p for p, _ in choice.seconds] == list(sparse.hyb.DEFAULT_CANDIDATES)
    assert choice.params in sparse.hyb.DEFAULT_CANDIDATES
    B = _dense(np.random.default_rng(seed), A.shape[1], 16, np.float32)
    np.testing.assert_allclose(choice.spmm(B), A @ B, rtol=1e-5, atol=1e-4)


def test_choose_format_preconditions():
    import scipy.sparse as sp

    from refcomp.errors import ArgumentError

    M = sparse.from_scipy(sp.eye(3, format="csr", dtype=np.float32))
    with pytest.raises(ArgumentError, match="positive width"):
        sparse.choose_format(M, 0)
    with pytest.raises(ArgumentError, match="power of two"):
        sparse.choose_format(M, 4, candidates=[dict(max_width=3)])


def test_spmm_partitions_a_matrix_once():
    import scipy.sparse as sp

    from refcomp.sparse.schedule import row_parts

    rng = np.random.default_rng(11)
    A = sp.random(50, 40, 0.2, format="csr", dtype=np.float32, random_state=11)
    M = sparse.from_scipy(A)
    calls = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernels, "row_parts", lambda indptr: calls.append(1) or row_parts(indptr))
        for _ in range(3):
            B = _dense(rng, 40, 32, np.float32)
            np.testing.assert_allclose(sparse.spmm(M, B), A @ B, **TOL[np.float32])
    assert len(calls) == 1


@pytest.mark.parametrize("shape, dtype", [((7, 3, 5), np.float32), ((100, 32), np.float64), ((0, 4), np.float32)])
def test_aligned_empty_starts_on_a_cache_line(shape, dtype):
    array = kernels.aligned_empty(shape, dtype)
    assert array.shape == shape and array.dtype == dtype and array.flags.c_contiguous
    assert array.ctypes.data % 64 == 0 or array.size == 0
    array[...] = 1.5  # writable, and exactly its own size
    assert array.sum() == 1.5 * array.size


@settings(deadline=None)
@given(sparse_matrices(max_dim=20), st.sampled_from([5, 16, 32, 128]), st.sampled_from([0, 1, 4]),
       st.sampled_from([1, 2, 3]), st.floats(0.0, 1.0), st.booleans(), st.integers(0, 2**32 - 1))
def test_hyb_hot_columns_match_scipy(A, width, max_width, parts, hot_share, stream, seed):
    """The most frequent columns as a partition of their own, first (with streaming stores for the
    output when `stream`: the threshold lowered to 0), every other partition and bucket setting."""
    n = A.shape[1]
    hot = int(round(hot_share * n))
    H = sparse.format_decompose(sparse.from_scipy(A), max_width, column_parts=parts, hot_columns=hot)
    assert len(H.parts) == parts + (0 < hot < n)
    assert (H.order is None) == (hot == 0)
    if H.order is not None:
        assert sorted(H.order.tolist()) == list(range(n))
    np.testing.assert_array_equal(H.to_scipy().toarray(), A.toarray())
    B = _dense(np.random.default_rng(seed), n, width, np.float32)
    with pytest.MonkeyPatch.context() as patch:
        if stream:
            patch.setattr(kernels, "STREAM_MIN_BYTES", 0)
        np.testing.assert_allclose(sparse.spmm_hyb(H, B), A @ B, rtol=1e-5, atol=1e-4)
        out = np.full((A.shape[0], width), 7.0, np.float32)  # maybe not on a cache line: no streaming then
        np.testing.assert_allclose(sparse.spmm_hyb(H, B, out), A @ B, rtol=1e-5, atol=1e-4)


def test_hot_columns_come_first_by_their_entries():
    import scipy.sparse as sp

    # column entries: 0 -> 1, 1 -> 3, 2 -> 0, 3 -> 3, 4 -> 2
    dense = np.array([[1, 1, 0, 1, 0], [0, 1, 0, 1, 1], [0, 1, 0, 1, 1]], np.float32)
    M = sparse.from_scipy(sp.csr_matrix(dense))
    H = sparse.format_decompose(M, max_width=0, hot_columns=2)
    assert H.order.tolist() == [1, 3, 0, 2, 4]
    assert [p.columns for p in H.parts] == [(0, 2), (2, 5)]
    hot, cold = H.parts
    assert not hot.buckets and np.diff(hot.rest.indptr["j"]).tolist() == [2, 2, 2]
    assert sorted(set(hot.rest.indices["j"].tolist())) == [1, 3]
    assert cold.rest.indices["j"].tolist() == [0, 4, 4]
    three = sparse.format_decompose(M, max_width=0, hot_columns=3, column_parts=2)
    assert three.order.tolist() == [1, 3, 4, 0, 2] and [p.columns for p in three.parts] == [(0, 3), (3, 4), (4, 5)]
    assert "columns reordered" in repr(three)
    everything = sparse.format_decompose(M, hot_columns=5)
    assert len(everything.parts) == 1 and everything.order.tolist() == [0, 1, 2, 3, 4]  # one group: column order


@pytest.mark.parametrize("kwargs, message", [
    (dict(hot_columns=-1), "hot_columns must be an int in"), (dict(hot_columns=5), "hot_columns must be an int in"),
    (dict(hot_columns=True), "hot_columns must be an int in"), (dict(max_width=-2), "0 or a power of two"),
    (dict(max_width=0, split_long_rows=True), "split_long_rows needs a max_width")])
def test_format_decompose_hot_columns_preconditions(kwargs, message):
    import scipy.sparse as sp

    from refcomp.errors import ArgumentError

    with pytest.raises(ArgumentError, match=message):
        sparse.format_decompose(sparse.from_scipy(sp.eye(4, format="csr", dtype=np.float32)), **kwargs)


@pytest.mark.parametrize("order, message", [
    (np.array([0, 1, 1, 3], np.int32), "order must list each of the 4 columns once"),
    (np.array([0, 1, 2], np.int32), "expected 4 entries, got 3"),
    (np.array([0, 1, 2, 4], np.int32), r"order\[3\]"), (np.array([0, 1, 2, 3], np.int64), "int32")])
def test_hyb_rejects_a_broken_column_order(order, message):
    import scipy.sparse as sp

    from refcomp.sparse.hyb import Hyb

    H = sparse.format_decompose(sparse.from_scipy(sp.eye(4, format="csr", dtype=np.float32)), hot_columns=2)
    with pytest.raises(sparse.SparseFormatError, match=message) as caught:
        Hyb(H.shape, H.parts, order)
    assert caught.value.array == "order"


@settings(deadline=None, max_examples=30)
@given(sparse_matrices(max_dim=30), st.sampled_from([16, 32, 128]), st.integers(0, 2**32 - 1))
def test_csr_spmm_with_streaming_stores_matches_scipy(A, width, seed):
    B = _dense(np.random.default_rng(seed), A.shape[1], width, np.float32)
    M = sparse.from_scipy(A)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernels, "STREAM_MIN_BYTES", 0)
        np.testing.assert_allclose(sparse.spmm(M, B), A @ B, **TOL[np.float32])
        out = np.full((A.shape[0] + 1, width), 7.0, np.float32)[1:]  # 4 * width bytes past a maybe-aligned start
        np.testing.assert_allclose(sparse.spmm(M, B, out), A @ B, **TOL[np.float32])


def test_scratch_empty_is_on_a_cache_line_and_reused_per_name():
    a = kernels.scratch_empty("test_a", (100, 48), np.float32)
    assert a.shape == (100, 48) and a.dtype == np.float32 and a.flags.c_contiguous and a.ctypes.data % 64 == 0
    a[...] = 3.0
    smaller = kernels.scratch_empty("test_a", (10, 8), np.float64)  # the same memory, viewed anew
    assert smaller.ctypes.data % 64 == 0 and smaller.shape == (10, 8)
    assert np.shares_memory(a, smaller)
    other = kernels.scratch_empty("test_b", (100, 48), np.float32)
    assert not np.shares_memory(a, other)
    larger = kernels.scratch_empty("test_a", (400, 48), np.float32)  # grows: a new buffer
    assert larger.shape == (400, 48) and larger.ctypes.data % 64 == 0
    assert kernels.scratch_empty("test_a", (0, 5), np.float32).size == 0
