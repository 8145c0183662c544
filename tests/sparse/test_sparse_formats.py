"""Formats as compositions of axes: round trips through scipy, the axes each format is made of."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, strategies as st

from refcomp import sparse
from refcomp.sparse.formats import walk_positions

from sparse_strategies import sparse_matrices


@given(sparse_matrices(), st.sampled_from(["csr", "ell", "dcsr"]))
def test_round_trip_through_scipy(A, fmt):
    M = sparse.from_scipy(A, fmt)
    back = sparse.to_scipy(M)
    assert back.shape == A.shape
    np.testing.assert_array_equal(back.toarray(), A.toarray())


@given(sparse_matrices(block=(2, 3)))
def test_bsr_round_trip(A):
    M = sparse.from_scipy(A, "bsr", block=(2, 3))
    assert M.data.shape[1:] == (2, 3)
    np.testing.assert_array_equal(sparse.to_scipy(M).toarray(), A.toarray())


def test_formats_are_chains_of_axes():
    A = sp.csr_matrix(np.array([[0, 1, 0, 2], [0, 0, 0, 0], [3, 0, 0, 4]], dtype=np.float32))
    kinds = {fmt: [a.kind for a in sparse.from_scipy(A, fmt, block=(1, 2)).axes]
             for fmt in ("csr", "bsr", "ell", "dcsr")}
    assert kinds == {
        "csr": ["dense_fixed", "sparse_variable"],
        "bsr": ["dense_fixed", "sparse_variable", "dense_fixed", "dense_fixed"],
        "ell": ["dense_fixed", "sparse_fixed"],
        "dcsr": ["sparse_variable", "sparse_variable"],
    }
    dcsr = sparse.from_scipy(A, "dcsr")
    np.testing.assert_array_equal(dcsr.indices["i"], [0, 2])  # the empty row is not stored


def test_ragged_rows_have_their_own_lengths():
    R = sparse.ragged(np.array([0, 2, 2, 5], dtype=np.int32),
                      np.arange(1, 6, dtype=np.float32), (3, 4))
    expected = np.array([[1, 2, 0, 0], [0, 0, 0, 0], [3, 4, 5, 0]], dtype=np.float32)
    np.testing.assert_array_equal(sparse.to_scipy(R).toarray(), expected)
    _, coords = walk_positions(R)
    np.testing.assert_array_equal(coords["j"], [0, 1, 0, 1, 2])


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_torch_sparse_converts():
    torch = pytest.importorskip("torch")
    dense = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]])
    M = sparse.from_scipy(dense.to_sparse_csr())
    np.testing.assert_array_equal(sparse.to_scipy(M).toarray(), dense.numpy())
    M = sparse.from_scipy(dense.to_sparse())
    np.testing.assert_array_equal(sparse.to_scipy(M).toarray(), dense.numpy())
    np.testing.assert_array_equal(sparse.to_torch(M).to_dense().numpy(), dense.numpy())


def test_axis_rejects_bad_definitions():
    with pytest.raises(ValueError, match="kind must be one of"):
        sparse.Axis("i", "dense", 3)
    with pytest.raises(ValueError, match="per_row goes with sparse_fixed"):
        sparse.Axis("i", "dense_fixed", 3, per_row=2)
