"""GCN and GraphSAGE layers in the graph IR against scipy: through the operator sparse.spmm_csr
(the graph compiles to one C function) and through the VM extern; a broken adjacency is rejected
before any product is computed."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import refcomp
from refcomp.ast import SizeVar
from refcomp.graph import BlockBuilder, Var, op, tensor
from refcomp.errors import RuntimeFailure
from refcomp.sparse import SparseFormatError
from refcomp.sparse.graph_layers import SPMM_OP, gcn_layer, sage_layer, spmm_graph_func
from refcomp.shape import verify_in_bounds


def _two_layer_model(kind, extern=False):
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
            h = bb.emit(op.relu(gcn_layer(bb, indptr, indices, values, x, w1, extern=extern)))
            out = gcn_layer(bb, indptr, indices, values, h, w2, extern=extern)
        else:
            h = bb.emit(op.relu(sage_layer(bb, indptr, indices, values, x, s1, w1, extern=extern)))
            out = sage_layer(bb, indptr, indices, values, h, s2, w2, extern=extern)
        bb.emit_func_output(out)
    ex = refcomp.graph.build(bb.get(), target="c")
    assert (ex.executors["main"] == "compiled") != extern, ex.executors["main"]
    return refcomp.runtime.VirtualMachine(ex)


def _adjacency(rng, nodes, density):
    a = sp.random(nodes, nodes, density, format="csr", dtype=np.float32, random_state=rng)
    a.data[:] = rng.uniform(0.1, 1.0, a.nnz)
    if nodes:
        a = (a + sp.csr_matrix(([1.0], ([0], [nodes - 1])), shape=(nodes, nodes), dtype=np.float32)).tocsr()
    a.sort_indices()
    return a


VMS = {}


@settings(deadline=None, max_examples=20)
@given(st.sampled_from(["gcn", "sage"]), st.booleans(), st.integers(1, 20), st.sampled_from([0.0, 0.2, 0.7]),
       st.integers(0, 2**32 - 1))
def test_layers_match_scipy(kind, extern, nodes, density, seed):
    vm = VMS.setdefault((kind, extern), _two_layer_model(kind, extern))
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


def test_a_broken_adjacency_is_rejected_by_the_extern():
    """A wrong index, and an indptr of the wrong length, fail before any kernel runs."""
    vm = VMS.setdefault(("gcn", True), _two_layer_model("gcn", True))
    rng = np.random.default_rng(1)
    A = _adjacency(rng, 5, 0.5)
    indices = A.indices.astype(np.int32)
    indices[0] = 99
    args = [rng.standard_normal(s).astype(np.float32) for s in ((5, 6), (6, 8), (8, 3), (6, 8), (8, 3))]
    with pytest.raises(SparseFormatError, match=r"j.indices\[0\]: index 99 is outside \[0, 5\)"):
        vm["main"](A.indptr.astype(np.int32), indices, A.data, *args)
    with pytest.raises(SparseFormatError, match=r"j.indptr: expected 6 entries, got 5"):
        vm["main"](A.indptr[:-1].astype(np.int32), A.indices.astype(np.int32), A.data, *args)


@pytest.mark.parametrize("kind", ["gcn", "sage"])
def test_a_broken_adjacency_is_rejected_by_the_compiled_graph(kind):
    vm = VMS.setdefault((kind, False), _two_layer_model(kind))
    rng = np.random.default_rng(1)
    A = _adjacency(rng, 5, 0.5)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((5, 6), (6, 8), (8, 3), (6, 8), (8, 3))]
    good = (A.indptr.astype(np.int32), A.indices.astype(np.int32), A.data)
    broken = {
        "an entry of indices is outside": (good[0], np.where(np.arange(A.nnz) == 0, 99, good[1]).astype(np.int32)),
        "indptr decreases": (np.array([0, 3, 1, 4, 5, A.nnz], np.int32), good[1]),
        "indptr does not start at 0": (np.array([1, 2, 3, 4, 5, A.nnz], np.int32), good[1]),
        "indptr's last entry is not the number of indices": (np.array([0, 1, 2, 3, 4, A.nnz - 1], np.int32), good[1]),
    }
    for message, (indptr, indices) in broken.items():
        with pytest.raises(RuntimeFailure, match=message):
            vm["main"](indptr, indices, good[2], *args)
    with pytest.raises(refcomp.errors.RefcompError):
        vm["main"](good[0][:-1].copy(), good[1], good[2], *args)  # 5 pointers for 5 rows


@pytest.mark.parametrize("width", [None, 3, 32, 128])
def test_the_operator_kernel_checks_then_is_proved(width):
    func = spmm_graph_func("float32", width)
    verify_in_bounds(func)
    text = refcomp.ast.printer.script(func)
    assert "indptr does not start at 0" in text and "indptr decreases" in text
    assert ("acc" in text) == (width is not None)  # the row tile for a constant width
    assert SPMM_OP in refcomp.graph.op.registry.names()
