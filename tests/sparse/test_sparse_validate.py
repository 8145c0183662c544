"""Broken sparse arrays are rejected before any kernel runs, naming the array and the position."""
from __future__ import annotations

import numpy as np
import pytest

from refcomp import sparse
from refcomp.errors import ArgumentError
from refcomp.sparse import SparseFormatError


def _parts():
    indptr = np.array([0, 2, 2, 5], dtype=np.int32)
    indices = np.array([0, 3, 1, 2, 3], dtype=np.int32)
    data = np.arange(1, 6, dtype=np.float32)
    return indptr, indices, data


def test_well_formed_csr_passes():
    A = sparse.csr(*_parts(), (3, 4))
    assert A.shape == (3, 4)


@pytest.mark.parametrize("change, array, position, message", [
    (lambda p, i, d: p.__setitem__(2, 1), "j.indptr", 2, "non-decreasing"),
    (lambda p, i, d: p.__setitem__(0, 1), "j.indptr", 0, "must be 0"),
    (lambda p, i, d: i.__setitem__(3, 4), "j.indices", 3, r"index 4 is outside \[0, 4\)"),
    (lambda p, i, d: i.__setitem__(1, -1), "j.indices", 1, "outside"),
    (lambda p, i, d: i.__setitem__(4, 1), "j.indices", 4, "strictly increasing"),
])
def test_broken_csr_names_array_and_position(change, array, position, message):
    indptr, indices, data = _parts()
    change(indptr, indices, data)
    with pytest.raises(SparseFormatError, match=message) as info:
        sparse.csr(indptr, indices, data, (3, 4))
    assert info.value.array == array and info.value.position == position
    assert isinstance(info.value, ArgumentError)
    assert f"{array}[{position}]" in str(info.value)


def test_nnz_mismatch():
    indptr, indices, data = _parts()
    indptr[-1] = 4
    with pytest.raises(SparseFormatError, match="nnz mismatch"):
        sparse.csr(indptr, indices, data, (3, 4))
    with pytest.raises(SparseFormatError, match="data: expected 5 values, got 4"):
        sparse.csr(*_parts()[:2], np.ones(4, np.float32), (3, 4))


@pytest.mark.parametrize("which, bad, message", [
    (0, np.array([0, 2, 2, 5], dtype=np.int64), "expected dtype int32, got int64"),
    (1, np.array([0, 3, 1, 2, 3], dtype=np.float32), "expected dtype int32, got float32"),
    (2, np.arange(5, dtype=np.int32), "expected dtype float32 or float64, got int32"),
    (0, [0, 2, 2, 5], "expected a numpy array, got list"),
    (0, np.array([0, 2, 5], dtype=np.int32), "expected 4 entries, got 3"),
])
def test_wrong_array_types(which, bad, message):
    parts = list(_parts())
    parts[which] = bad
    with pytest.raises(SparseFormatError, match=message):
        sparse.csr(*parts, (3, 4))


def test_unsorted_allowed_when_format_says_so():
    indptr, indices, data = _parts()
    indices[2:5] = [3, 1, 2]
    A = sparse.csr(indptr, indices, data, (3, 4), sorted=False)
    assert A.to_scipy()[2, 3] == 3


def test_ell_and_bsr_and_dcsr_checks():
    with pytest.raises(SparseFormatError, match=r"j.indices\[3\]: index 9"):
        sparse.ell(np.array([[0, 1], [2, 9]], dtype=np.int32), np.ones((2, 2), np.float32), (2, 4))
    with pytest.raises(SparseFormatError, match="does not tile"):
        sparse.bsr(np.array([0, 1], dtype=np.int32), np.array([0], dtype=np.int32),
                   np.ones((1, 2, 2), np.float32), (3, 4))
    with pytest.raises(SparseFormatError, match=r"i.indices\[1\]"):
        sparse.dcsr(np.array([2, 1], dtype=np.int32), np.array([0, 1, 2], dtype=np.int32),
                    np.array([0, 1], dtype=np.int32), np.ones(2, np.float32), (3, 4))


def test_kernel_inputs_are_checked_before_running():
    A = sparse.csr(*_parts(), (3, 4))
    with pytest.raises(ArgumentError, match="expected 4 rows, got 3"):
        sparse.spmm(A, np.ones((3, 2), np.float32))
    with pytest.raises(ArgumentError, match="expected dtype float32"):
        sparse.spmm(A, np.ones((4, 2), np.float64))
    with pytest.raises(ArgumentError, match="expected a CSR SparseMatrix"):
        sparse.spmm(sparse.from_scipy(A.to_scipy(), "dcsr"), np.ones((4, 2), np.float32))


def test_validated_arrays_cannot_change_afterwards():
    indptr, indices, data = _parts()
    A = sparse.csr(indptr, indices, data, (3, 4))
    indices[0] = 1000  # the caller's array; the matrix keeps its own checked copy
    assert A.indices["j"][0] == 0
    with pytest.raises(ValueError):
        A.indices["j"][0] = 1000


def test_hyb_rejects_rows_held_twice():
    import scipy.sparse as sp

    A = sp.csr_matrix(np.array([[1, 0], [0, 2], [3, 4]], dtype=np.float32))
    H = sparse.format_decompose(sparse.from_scipy(A), max_width=1)
    first = H.buckets[0]
    with pytest.raises(SparseFormatError, match=r"bucket1.rows\[0\]: row 0 is held twice"):
        sparse.Hyb(H.shape, (sparse.HybPart((0, 2), (first, first), H.rest),))


def test_hyb_rejects_a_row_in_two_kinds_and_broken_partitions():
    import scipy.sparse as sp

    A = sp.csr_matrix(np.array([[1, 0], [0, 2], [3, 4]], dtype=np.float32))
    H = sparse.format_decompose(sparse.from_scipy(A), max_width=1)
    full = sparse.format_decompose(sparse.from_scipy(A), max_width=4)
    with pytest.raises(SparseFormatError, match=r"part0: row 2 is held by two kinds"):
        sparse.Hyb(H.shape, (sparse.HybPart((0, 2), full.buckets, H.rest),))
    with pytest.raises(SparseFormatError, match=r"end at 1, not 2"):
        sparse.Hyb(H.shape, (sparse.HybPart((0, 1), H.buckets, H.rest),))
    with pytest.raises(SparseFormatError, match=r"do not continue"):
        sparse.Hyb(H.shape, (sparse.HybPart((1, 2), H.buckets, H.rest),))


def test_ell_indices_must_match_the_slots():
    with pytest.raises(SparseFormatError, match=r"j.indices: expected 4 entries, got 3"):
        sparse.ell(np.array([0, 1, 2], dtype=np.int32), np.ones((2, 2), np.float32), (2, 4))
