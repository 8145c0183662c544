"""GCN and GraphSAGE layers in the graph IR, on a CSR adjacency given as three graph tensors.

The aggregation `A @ H` is the graph operator `sparse.spmm_csr` (registered here): its shape rule
takes the features' shape (the kernel's argument checks ask for `n + 1` pointers and as many
values as indices when it is called), its numpy reference validates the CSR
arrays and multiplies, and it legalizes to a `call_tir` of the CSR SpMM kernel (stage III with
the row tile for a constant width) preceded, in the same kernel, by the format checks: indptr
starts at 0, never decreases, ends at nnz; every index within [0, n).  So a graph with these
layers compiles to one C function, and a broken adjacency fails with a RuntimeFailure naming the
broken invariant before any product is computed.  `aggregate(..., extern=True)` instead emits a
`call_dps_packed` of the extern `refcomp.sparse.spmm_csr` (registered with the VM), which
validates in Python (SparseFormatError naming the array and position) and runs the same kernel
with the row partition.  The dense transforms are ordinary graph `matmul`s, so they are
legalised, fused and scheduled like any other.

    gcn_layer(bb, indptr, indices, values, x, w)            A @ (x @ w)
    sage_layer(bb, indptr, indices, values, x, w_self, w_neigh)
                                                            x @ w_self + (A @ x) @ w_neigh

(For GCN pass the normalised adjacency D^-1/2 (A + I) D^-1/2; for GraphSAGE's mean aggregator
the values 1 / degree.)
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..ast import AssertStmt, Evaluate, For, IntImm, PrimFunc, seq
from ..ast.graph_struct_info import TensorStructInfo
from ..errors import ArgumentError, IRError
from ..graph import op
from ..graph.op._common import make_call
from ..graph.op.registry import REGISTRY, register
from ..runtime.vm import register_extern
from .formats import csr, to_scipy
from .kernels import SPECIALISED_WIDTHS, _dtype_name, row_tile_lanes, run_spmm_csr, spmm_iteration, stage_rows
from .lower import lower_stage3
from .schedule import partition_rows, vectorize_row_tile

SPMM_EXTERN = "refcomp.sparse.spmm_csr"
SPMM_OP = "sparse.spmm_csr"


def _spmm_extern(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray, dense: np.ndarray,
                 out: np.ndarray) -> None:
    """out = CSR(indptr, indices, values) @ dense, the CSR arrays validated first."""
    rows, cols = out.shape[0], dense.shape[0]
    matrix = csr(np.ascontiguousarray(indptr), np.ascontiguousarray(indices), np.ascontiguousarray(values),
                 (rows, cols))
    if dense.dtype != matrix.dtype:
        raise ArgumentError(f"{SPMM_EXTERN}: the features are {dense.dtype}, the adjacency values {matrix.dtype}")
    dense = stage_rows(np.ascontiguousarray(dense), matrix.data.size)
    run_spmm_csr(_dtype_name(matrix.dtype), dense.shape[1], matrix.indptr["j"], matrix.indices["j"], matrix.data,
                 dense, out)


register_extern(SPMM_EXTERN, _spmm_extern)


def _info(expr: Any) -> TensorStructInfo:
    info = getattr(expr, "struct_info", None)
    if not isinstance(info, TensorStructInfo) or info.shape is None or len(info.shape) != 2:
        raise ArgumentError(f"sparse graph layers: expected a 2-D tensor of known shape, got {info}")
    return info


def aggregate(bb: Any, indptr: Any, indices: Any, values: Any, h: Any, extern: bool = False) -> Any:
    """Emit A @ h for the square CSR adjacency A (as many rows as h) and return its var: the
    operator sparse.spmm_csr, or with extern=True a call of the VM extern."""
    info = _info(h)
    if not extern:
        return bb.emit(make_call(SPMM_OP, indptr, indices, values, h))
    out = TensorStructInfo((info.shape[0], info.shape[1]), info.dtype)
    return bb.emit(op.call_dps_packed(SPMM_EXTERN, (indptr, indices, values, h), out))


# ----------------------------------------------------------------------------- the operator
def _spmm_infer(call: Any, ctx: Any) -> TensorStructInfo:
    indptr, indices, values, h = (ctx.tensor(k, what) for k, what in
                                  enumerate(("indptr", "indices", "values", "features")))
    for info, what in ((indptr, "indptr"), (indices, "indices"), (values, "values")):
        if info.ndim != 1:
            ctx.fail(f"{what} must be 1-D, got {info.ndim}-D", kind=IRError)
    for info, what in ((indptr, "indptr"), (indices, "indices")):
        if info.dtype is not None and str(info.dtype) != "int32":
            ctx.fail(f"{what} must be int32, got {info.dtype}", kind=IRError)
    if h.ndim != 2:
        ctx.fail(f"the features must be 2-D, got {h.ndim}-D", kind=IRError)
    if values.dtype is not None and h.dtype is not None and str(values.dtype) != str(h.dtype):
        ctx.fail(f"the values are {values.dtype}, the features {h.dtype}", kind=IRError)
    if h.dtype is not None and str(h.dtype) not in ("float32", "float64"):
        ctx.fail(f"the features must be float32 or float64, got {h.dtype}", kind=IRError)
    # indptr's length (rows + 1) and the values' (one per index) are checked when the kernel is
    # called: its buffers share those dims
    return TensorStructInfo(h.shape, h.dtype, 2)


def _spmm_reference(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray, h: np.ndarray) -> np.ndarray:
    """A @ h, the CSR arrays validated first (SparseFormatError naming the array and position)."""
    rows = np.asarray(h).shape[0]
    matrix = csr(np.ascontiguousarray(indptr), np.ascontiguousarray(indices), np.ascontiguousarray(values),
                 (rows, rows))
    return np.asarray(to_scipy(matrix) @ h, dtype=h.dtype)


def spmm_graph_func(dtype: str, width: int | None) -> PrimFunc:
    """The kernel sparse.spmm_csr legalizes to: the format checks, then the CSR SpMM (stage III
    of spmm_iteration; a constant width gets the row tile and vectorize_row_tile).  The checks are
    exactly the invariants stage III assumes, so no array can make the product read outside it."""
    it = spmm_iteration(dtype, width)
    if width is None:
        func = lower_stage3(it)
    else:
        tile, lanes = row_tile_lanes(dtype)
        func = vectorize_row_tile(lower_stage3(it, row_tile=tile), lanes)
    indptr, indices = func.params[0], func.params[1]
    func = partition_rows(func, indptr=indptr)
    m, nnz, k = indptr.shape[0] - 1, indices.shape[0], func.params[3].shape[0]
    i, p = (var for var in (_int_var("i"), _int_var("p")))
    ordered = For(i, IntImm(0), m, "serial", AssertStmt(
        indptr[i] <= indptr[i + 1], f"{SPMM_OP}: indptr decreases (it must not)", Evaluate(IntImm(0))))
    inside = For(p, IntImm(0), nnz, "serial", AssertStmt(
        (indices[p] >= 0) & (indices[p] < k), f"{SPMM_OP}: an entry of indices is outside [0, rows)",
        Evaluate(IntImm(0))))
    ends = AssertStmt(indptr[m] == nnz, f"{SPMM_OP}: indptr's last entry is not the number of indices",
                      seq(ordered, inside, func.body))
    body = AssertStmt(indptr[0] == 0, f"{SPMM_OP}: indptr does not start at 0", ends)
    return func.with_(body=body, name=f"sparse_spmm_csr_{dtype}")


def _int_var(name: str) -> Any:
    from ..ast import Var

    return Var(name, "int32")


def _spmm_legalize(bb: Any, call: Any) -> Any:
    from ..graph.op.base import call_tir

    h = call.args[3].struct_info
    width = h.shape[1].value if isinstance(h.shape[1], IntImm) else None
    func = spmm_graph_func(str(h.dtype), width if width in SPECIALISED_WIDTHS else None)
    gvar = bb.add_func(func, func.name)
    out = TensorStructInfo(h.shape, h.dtype, 2)
    return call_tir(gvar, list(call.args), out).with_(struct_info=out)


if SPMM_OP not in REGISTRY:
    register(SPMM_OP, infer=_spmm_infer, reference=_spmm_reference, legalize_call=_spmm_legalize, pattern="opaque",
             doc="A @ h for a square CSR adjacency (indptr, indices, values) and dense features h")


def gcn_layer(bb: Any, indptr: Any, indices: Any, values: Any, x: Any, weight: Any, extern: bool = False) -> Any:
    """Emit A @ (x @ weight): transform first, so the sparse product runs on the narrower side
    when weight narrows the features (extern: the aggregation through the VM extern)."""
    return aggregate(bb, indptr, indices, values, bb.emit(op.matmul(x, weight)), extern)


def sage_layer(bb: Any, indptr: Any, indices: Any, values: Any, x: Any, w_self: Any, w_neigh: Any,
               extern: bool = False) -> Any:
    """Emit x @ w_self + (A @ x) @ w_neigh (GraphSAGE; A's values weigh the neighbours)."""
    neighbours = aggregate(bb, indptr, indices, values, x, extern)
    return bb.emit(op.add(bb.emit(op.matmul(x, w_self)), bb.emit(op.matmul(neighbours, w_neigh))))
