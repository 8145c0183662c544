"""GCN and GraphSAGE layers in the graph IR, run by the VM, against scipy; a broken adjacency is
rejected before any kernel runs."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import refcomp
from refcomp.ast import SizeVar
from refcomp.graph import BlockBuilder, Var, op, tensor
from refcomp.sparse import SparseFormatError
from refcomp.sparse.graph_layers import gcn_layer, sage_layer


def _two_layer_model(kind):
    n, nnz, rows = SizeVar("n", "int64"), SizeVar("nnz", "int64"), SizeVar("rows", "int64")
    indptr = Var("indptr", tensor((rows,), "int32"))  # n + 1 entries: the extern checks it
    indices = Var("indices", tensor((nnz,), "int32"))
    values = Var("values", tensor((nnz,), "float32"))
    x = Var("x", tensor((n, 6), "float32"))
    w1, w2 = Var("w1", tensor((6, 8), "float32")), Var("w2", tensor((8, 3), "float32"))
    s1, s2 = Var("s1", tensor((6, 8), "float32")), Var("s2", tensor((8, 3), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [indptr, indices, values, x, w1, w2, s1, s2]):
        if kind == "gcn":
            h = bb.emit(op.relu(gcn_layer(bb, indptr, indices, values, x, w1)))
            out = gcn_layer(bb, indptr, indices, values, h, w2)
        else:
            h = bb.emit(op.relu(sage_layer(bb, indptr, indices, values, x, s1, w1)))
            out = sage_layer(bb, indptr, indices, values, h, s2, w2)
        bb.emit_func_output(out)
    return refcomp.runtime.VirtualMachine(refcomp.graph.build(bb.get(), target="c"))


def _adjacency(rng, nodes, density):
    a = sp.random(nodes, nodes, density, format="csr", dtype=np.float32, random_state=rng)
    a.data[:] = rng.uniform(0.1, 1.0, a.nnz)
    if nodes:
        a = (a + sp.csr_matrix(([1.0], ([0], [nodes - 1])), shape=(nodes, nodes), dtype=np.float32)).tocsr()
    a.sort_indices()
    return a


VMS = {}


@settings(deadline=None, max_examples=15)
@given(st.sampled_from(["gcn", "sage"]), st.integers(1, 20), st.sampled_from([0.0, 0.2, 0.7]),
       st.integers(0, 2**32 - 1))
def test_layers_match_scipy(kind, nodes, density, seed):
    vm = VMS.setdefault(kind, _two_layer_model(kind))
    rng = np.random.default_rng(seed)
    A = _adjacency(rng, nodes, density)
    x = rng.standard_normal((nodes, 6)).astype(np.float32)
    w1, s1 = (rng.standard_normal((6, 8)).astype(np.float32) for _ in range(2))
    w2, s2 = (rng.standard_normal((8, 3)).astype(np.float32) for _ in range(2))
    def model(A, x, w1, w2, s1, s2, relu):
        if kind == "gcn":
            return A @ (relu(A @ (x @ w1)) @ w2)
        h = relu(x @ s1 + (A @ x) @ w1)
        return h @ s2 + (A @ h) @ w2

    f64 = [a.astype(np.float64) for a in (x, w1, w2, s1, s2)]
    expected = model(A.astype(np.float64), *f64, lambda v: np.maximum(v, 0))
    bound = model(abs(A), *[np.abs(a) for a in f64], lambda v: v)  # what rounding scales with
    got = vm["main"](A.indptr.astype(np.int32), A.indices.astype(np.int32), A.data, x, w1, w2, s1, s2)
    assert np.all(np.abs(got - expected) <= 1e-5 * bound + 1e-6)


def test_a_broken_adjacency_is_rejected():
    """A wrong index, and an indptr of the wrong length, fail before any kernel runs."""
    vm = VMS.setdefault("gcn", _two_layer_model("gcn"))
    rng = np.random.default_rng(1)
    A = _adjacency(rng, 5, 0.5)
    indices = A.indices.astype(np.int32)
    indices[0] = 99
    args = [rng.standard_normal(s).astype(np.float32) for s in ((5, 6), (6, 8), (8, 3), (6, 8), (8, 3))]
    with pytest.raises(SparseFormatError, match=r"j.indices\[0\]: index 99 is outside \[0, 5\)"):
        vm["main"](A.indptr.astype(np.int32), indices, A.data, *args)
    with pytest.raises(SparseFormatError, match=r"j.indptr: expected 6 entries, got 5"):
        vm["main"](A.indptr[:-1].astype(np.int32), A.indices.astype(np.int32), A.data, *args)
