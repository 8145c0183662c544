"""Block-sparse attention over BSR against dense masked attention in numpy; RGCN against a
per-relation scipy loop; their stage I programs against their lowered stages."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

from refcomp import sparse
from refcomp.errors import ArgumentError
from refcomp.loops.interpreter import interpret
from refcomp.shape import verify_in_bounds
from refcomp.sparse import ops
from refcomp.sparse.iteration import run_stage1
from refcomp.sparse.lower import lower_stage2, lower_stage3


def _masked_attention(Q, K, V, allowed):
    """Dense attention in numpy with the entries outside `allowed` at -inf (an empty row gives 0)."""
    scores = np.where(allowed, (Q.astype(np.float64) @ K.T.astype(np.float64)) / np.sqrt(Q.shape[1]), -np.inf)
    top = scores.max(axis=1, keepdims=True, initial=-np.inf)
    weights = np.where(allowed, np.exp(scores - np.where(np.isfinite(top), top, 0.0)), 0.0)
    total = weights.sum(axis=1, keepdims=True)
    return np.where(total > 0, weights / np.where(total > 0, total, 1.0), 0.0) @ V.astype(np.float64)


@settings(deadline=None, max_examples=30)
@given(st.sampled_from([(1, 1), (2, 2), (4, 2)]), st.integers(0, 6), st.sampled_from([0.0, 0.1, 0.5, 1.0]),
       st.sampled_from([1, 8, 16]), st.integers(0, 2**32 - 1))
def test_block_sparse_attention_matches_dense_masked_attention(block, blocks, density, d, seed):
    rng = np.random.default_rng(seed)
    r, c = block
    L = blocks * r * c
    mask = rng.random((L // r, L // c)) < density if L else np.zeros((0, 0), bool)
    allowed = np.kron(mask, np.ones(block)) > 0 if L else np.zeros((0, 0), bool)
    pattern = sparse.from_scipy(sp.csr_matrix(allowed.astype(np.float32), shape=(L, L)), "bsr", block=block)
    Q, K, V = (rng.standard_normal((L, d)).astype(np.float32) for _ in range(3))
    out = ops.block_sparse_attention(pattern, Q, K, V)
    np.testing.assert_allclose(out, _masked_attention(Q, K, V, allowed), rtol=1e-4, atol=1e-4)


def test_attention_kernels_are_proved_and_stages_agree():
    verify_in_bounds(ops.block_softmax_func("float32", (2, 4)))
    it = ops.bsr_sddmm_iteration("float32", (2, 2))
    verify_in_bounds(lower_stage3(it))
    rng = np.random.default_rng(5)
    A = sp.random(8, 6, 0.4, format="csr", dtype=np.float32, random_state=6)
    B = sparse.from_scipy(A, "bsr", block=(2, 2))
    Q, K = rng.standard_normal((4, 2, 3)).astype(np.float32), rng.standard_normal((3, 2, 3)).astype(np.float32)
    args = [B.indptr["jo"], B.indices["jo"], Q, K]
    expected = np.einsum("ixf,jyf->ijxy", Q, K)
    rows = np.repeat(np.arange(4), np.diff(B.indptr["jo"]))
    for run in (lambda o: run_stage1(it, *args, o), lambda o: interpret(lower_stage2(it), *args, o)):
        out = np.full(B.data.shape, 7.0, np.float32)
        run(out)
        np.testing.assert_allclose(out, expected[rows, B.indices["jo"]], rtol=1e-5, atol=1e-5)


def test_attention_rejects_bad_operands():
    pattern = sparse.from_scipy(sp.eye(4, format="csr", dtype=np.float32), "bsr", block=(2, 2))
    Q = np.ones((4, 3), np.float32)
    with pytest.raises(ArgumentError, match="expected a BSR pattern"):
        ops.block_sparse_attention(sparse.from_scipy(sp.eye(4, format="csr", dtype=np.float32)), Q, Q, Q)
    with pytest.raises(ArgumentError, match="same width"):
        ops.block_sparse_attention(pattern, Q, np.ones((4, 2), np.float32), Q)
    with pytest.raises(ArgumentError, match="dtype float32"):
        ops.block_sparse_attention(pattern, Q, Q, Q.astype(np.float64))


def _relations(rng, nodes, count, density):
    out = []
    for _ in range(count):
        a = sp.random(nodes, nodes, density, format="csr", dtype=np.float32, random_state=rng)
        a.data[:] = rng.uniform(0.5, 1.5, a.nnz)
        out.append(a)
    return out


@settings(deadline=None, max_examples=30)
@given(st.integers(0, 12), st.integers(1, 4), st.sampled_from([0.0, 0.1, 0.5]), st.sampled_from([1, 6, 16, 64, 256]),
       st.integers(0, 2**32 - 1))
def test_rgcn_matches_a_per_relation_scipy_loop(nodes, count, density, width, seed):
    rng = np.random.default_rng(seed)
    mats = _relations(rng, nodes, count, density)
    if nodes:
        mats[0] = mats[0].tolil()
        mats[0][0, :] = 1.0  # one dense row
        mats[0] = mats[0].tocsr()
    X = rng.standard_normal((nodes, 5)).astype(np.float32)
    W = rng.standard_normal((count, 5, width)).astype(np.float32)
    expected = sum(a.astype(np.float64) @ (X.astype(np.float64) @ w) for a, w in zip(mats, W))
    bound = sum(abs(a) @ (np.abs(X) @ np.abs(w)) for a, w in zip(mats, W))  # what rounding scales with
    out = ops.rgcn(ops.RelationalGraph(mats), X, W)
    assert np.all(np.abs(out - expected) <= 1e-5 * bound + 1e-6)


@pytest.mark.parametrize("fuse", [False, True])
def test_rgcn_stages_agree_and_are_proved(fuse):
    from refcomp.sparse import sparse_fuse

    it = ops.rgcn_iteration()
    if fuse:  # one loop over every (node, relation, neighbour) entry
        it = sparse_fuse(it, ["I", "Rel", "J"])
    verify_in_bounds(lower_stage3(it))
    rng = np.random.default_rng(2)
    G = ops.RelationalGraph(_relations(rng, 9, 3, 0.3))
    Y = rng.standard_normal((9, 3, 4)).astype(np.float32)  # Y[j, r]
    expected = sum(a @ Y[:, r] for r, a in enumerate(_relations(np.random.default_rng(2), 9, 3, 0.3)))
    for run in (lambda o: run_stage1(it, G.indptr, G.indices, G.data, Y, o),
                lambda o: interpret(lower_stage2(it), G.indptr, G.indices, G.data, Y, o),
                lambda o: interpret(lower_stage3(it), G.indptr, G.indices, G.data, Y, o)):
        out = np.full((9, 4), 7.0, np.float32)
        run(out)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_rgcn_rejects_bad_operands():
    G = ops.RelationalGraph([sp.eye(3, format="csr", dtype=np.float32)] * 2)
    X = np.ones((3, 2), np.float32)
    with pytest.raises(ArgumentError, match=r"W must be a float32 array of shape \(2, 2, d_out\)"):
        ops.rgcn(G, X, np.ones((3, 2, 4), np.float32))
    with pytest.raises(ArgumentError, match=r"rgcn_aggregate_first: W must be a float32 array"):
        ops.rgcn_aggregate_first(G, X, np.ones((2, 2, 4), np.float64))
    with pytest.raises(ArgumentError, match=r"rgcn_aggregate_first: X: expected 3 rows, got 4"):
        ops.rgcn_aggregate_first(G, np.ones((4, 2), np.float32), np.ones((2, 2, 4), np.float32))
    with pytest.raises(ArgumentError, match="expected a RelationalGraph"):
        ops.rgcn_aggregate_first(sp.eye(3, format="csr"), X, np.ones((2, 2, 4), np.float32))
    with pytest.raises(sparse.SparseFormatError, match="every relation needs the shape"):
        ops.RelationalGraph([sp.eye(3, format="csr"), sp.eye(4, format="csr")])
    with pytest.raises(sparse.SparseFormatError, match="at least one relation"):
        ops.RelationalGraph([])


@settings(deadline=None, max_examples=30)
@given(st.integers(0, 40), st.integers(1, 4), st.sampled_from([0.0, 0.1, 0.5]), st.sampled_from([1, 8, 32, 64]),
       st.sampled_from([1, 16, 64]), st.sampled_from([np.float32, np.float64]), st.integers(0, 2**32 - 1))
def test_rgcn_both_orders_match_a_per_relation_scipy_loop(nodes, count, density, d_in, width, dtype, seed):
    """Neighbours summed first (d_in <= d_out) or the weights applied first: the same products."""
    rng = np.random.default_rng(seed)
    mats = [a.astype(dtype) for a in _relations(rng, nodes, count, density)]
    if nodes:
        mats[-1] = mats[-1].tolil()
        mats[-1][nodes - 1, :] = 1.0  # one dense row
        mats[-1] = mats[-1].tocsr()
    X = rng.standard_normal((nodes, d_in)).astype(dtype)
    W = rng.standard_normal((count, d_in, width)).astype(dtype)
    expected = sum(a.astype(np.float64) @ (X.astype(np.float64) @ w) for a, w in zip(mats, W))
    bound = sum(abs(a) @ (np.abs(X) @ np.abs(w)) for a, w in zip(mats, W))
    G = ops.RelationalGraph(mats)
    scale = 1e-5 if dtype == np.float32 else 1e-12
    for out in (ops.rgcn(G, X, W), ops.rgcn_aggregate_first(G, X, W)):
        assert out.shape == (nodes, width) and out.dtype == dtype
        assert np.all(np.abs(out - expected) <= scale * bound + scale)


def test_rgcn_on_a_graph_large_enough_to_share_the_product():
    """2000 nodes, 64 features: the dense product is split over OpenBLAS's thread count."""
    rng = np.random.default_rng(4)
    mats = _relations(rng, 2000, 3, 0.002)
    X = rng.standard_normal((2000, 64)).astype(np.float32)
    W = rng.standard_normal((3, 64, 64)).astype(np.float32)
    expected = sum(a.astype(np.float64) @ (X.astype(np.float64) @ w) for a, w in zip(mats, W))
    bound = sum(abs(a) @ (np.abs(X) @ np.abs(w)) for a, w in zip(mats, W))
    G = ops.RelationalGraph(mats)
    for _ in range(2):  # the second call reuses the kept buffer of neighbour sums
        out = ops.rgcn(G, X, W)
        assert np.all(np.abs(out - expected) <= 1e-5 * bound + 1e-6)
    assert G.stacked.shape == (6000, 2000)
