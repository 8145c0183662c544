"""GCN and GraphSAGE layers in the graph IR, on a CSR adjacency given as three graph tensors.

The aggregation `A @ H` is a `call_dps_packed` of the extern `refcomp.sparse.spmm_csr`, which this
module registers with the VM: it validates the CSR arrays (SparseFormatError naming the array and
position, before any kernel runs) and runs the proved CSR SpMM kernel.  The dense transforms are
ordinary graph `matmul`s, so they are legalised, fused and scheduled like any other.

    gcn_layer(bb, indptr, indices, values, x, w)            A @ (x @ w)
    sage_layer(bb, indptr, indices, values, x, w_self, w_neigh)
                                                            x @ w_self + (A @ x) @ w_neigh

(For GCN pass the normalised adjacency D^-1/2 (A + I) D^-1/2; for GraphSAGE's mean aggregator
the values 1 / degree.)  Graphs with these layers run on the VM (the extern is a Python callable).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..ast.graph_struct_info import TensorStructInfo
from ..errors import ArgumentError
from ..graph import op
from ..runtime.vm import register_extern
from .formats import csr
from .kernels import _dtype_name, run_spmm_csr

SPMM_EXTERN = "refcomp.sparse.spmm_csr"


def _spmm_extern(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray, dense: np.ndarray,
                 out: np.ndarray) -> None:
    """out = CSR(indptr, indices, values) @ dense, the CSR arrays validated first."""
    rows, cols = out.shape[0], dense.shape[0]
    matrix = csr(np.ascontiguousarray(indptr), np.ascontiguousarray(indices), np.ascontiguousarray(values),
                 (rows, cols))
    if dense.dtype != matrix.dtype:
        raise ArgumentError(f"{SPMM_EXTERN}: the features are {dense.dtype}, the adjacency values {matrix.dtype}")
    run_spmm_csr(_dtype_name(matrix.dtype), dense.shape[1], matrix.indptr["j"], matrix.indices["j"], matrix.data,
                 np.ascontiguousarray(dense), out)


register_extern(SPMM_EXTERN, _spmm_extern)


def _info(expr: Any) -> TensorStructInfo:
    info = getattr(expr, "struct_info", None)
    if not isinstance(info, TensorStructInfo) or info.shape is None or len(info.shape) != 2:
        raise ArgumentError(f"sparse graph layers: expected a 2-D tensor of known shape, got {info}")
    return info


def aggregate(bb: Any, indptr: Any, indices: Any, values: Any, h: Any) -> Any:
    """Emit A @ h for the square CSR adjacency A (as many rows as h) and return its var."""
    info = _info(h)
    out = TensorStructInfo((info.shape[0], info.shape[1]), info.dtype)
    return bb.emit(op.call_dps_packed(SPMM_EXTERN, (indptr, indices, values, h), out))


def gcn_layer(bb: Any, indptr: Any, indices: Any, values: Any, x: Any, weight: Any) -> Any:
    """Emit A @ (x @ weight): transform first, so the sparse product runs on the narrower side
    when weight narrows the features."""
    return aggregate(bb, indptr, indices, values, bb.emit(op.matmul(x, weight)))


def sage_layer(bb: Any, indptr: Any, indices: Any, values: Any, x: Any, w_self: Any, w_neigh: Any) -> Any:
    """Emit x @ w_self + (A @ x) @ w_neigh (GraphSAGE; A's values weigh the neighbours)."""
    neighbours = aggregate(bb, indptr, indices, values, x)
    return bb.emit(op.add(bb.emit(op.matmul(x, w_self)), bb.emit(op.matmul(neighbours, w_neigh))))
