"""Operators built on the sparse stages: block-sparse attention over BSR, and RGCN.

Block-sparse attention (one head): with the block pattern of a BSR matrix M (L x L, R x C blocks),

    out = softmax(mask_M(Q K^T / sqrt(d))) V

where entries outside M's stored blocks are -inf (they get weight 0); a row with no stored block
comes out 0.  Three kernels: the scores at the stored blocks are a stage I SDDMM over the BSR axes
(`bsr_sddmm_iteration`), a row-wise softmax over the stored entries of each row
(`block_softmax_func`), and the BSR SpMM of the probabilities with V.

RGCN (relational graph convolution, one layer, no self term):

    out[i, :] = sum_r sum_{j in N_r(i)} A_r[i, j] * (X @ W_r)[j, :]

The relations' adjacency matrices are stored as one composition of axes (I: dense_fixed nodes,
Rel: dense_fixed relations below I, J: sparse_variable neighbours below Rel), so one kernel visits
row i once for all relations rather than one SpMM per relation: either summing the neighbours of
every relation first (the arrays read as one CSR matrix of nodes * R rows, then one dense product
with the weights stacked; `rgcn_aggregate_first`, where d_in <= d_out) or applying the weights
first and summing over all relations of a row (`rgcn_iteration`).
"""
from __future__ import annotations

import functools
import math
from typing import Any, Sequence

import numpy as np

from ..ast import Allocate, Buffer, BufferStore, Call, FloatImm, For, IntImm, PrimFunc, SizeVar, Var, max_, seq
from ..driver import build
from ..errors import ArgumentError
from .formats import SparseMatrix
from .iteration import SparseIteration, SpBuffer, sp_axis, sp_iter
from .kernels import (
    SPECIALISED_WIDTHS, ROWS_DYNAMIC, _assume, _dense, _dtype_name, _width, aligned_empty, compiled, row_tile_lanes,
    scratch_empty,
)
from .lower import lower_stage3
from .schedule import partition_rows, row_parts, vectorize_row_tile
from .validate import INDEX_DTYPE, SparseFormatError

LOWEST = {"float32": -3.4028234663852886e38, "float64": -1.7976931348623157e308}


# ----------------------------------------------------------------------------- block-sparse attention
def bsr_sddmm_iteration(dtype: str = "float32", block: tuple[int, int] = (16, 16),
                        width: int | None = None) -> SparseIteration:
    """S[io, jo, ii, ji] = sum_f Q[io, ii, f] * K[jo, ji, f] at the stored blocks of a BSR pattern
    (Q viewed as (L/R, R, d), K as (L/C, C, d))."""
    r, c = block
    mb, kb, d, nnzb = SizeVar("mb"), SizeVar("kb"), _width(width), SizeVar("nnzb")
    IO, KB = sp_axis("IO", "dense_fixed", mb), sp_axis("KB", "dense_fixed", kb)
    JO = sp_axis("JO", "sparse_variable", kb, parent=IO, nnz=nnzb)
    II, JI, F = (sp_axis(name, "dense_fixed", IntImm(v) if isinstance(v, int) else v)
                 for name, v in (("II", r), ("JI", c), ("F", d)))
    Q, K = SpBuffer("Q", (IO, II, F), dtype), SpBuffer("K", (KB, JI, F), dtype)
    S = SpBuffer("S", (IO, JO, II, JI), dtype)
    return sp_iter(f"bsr_sddmm{r}x{c}_{dtype}", [(IO, "S"), (JO, "S"), (II, "S"), (JI, "S"), (F, "R")], S,
                   lambda io, jo, ii, ji, f: ((io, jo, ii, ji), Q[io, ii, f] * K[jo, ji, f]), [Q, K, S])


def block_softmax_func(dtype: str = "float32", block: tuple[int, int] = (16, 16)) -> PrimFunc:
    """In place, for each row (io, ii) of a BSR matrix S (nnzb, R, C): the softmax of its stored
    entries (a row with none stays empty)."""
    r, c = block
    mb, nnzb = SizeVar("mb"), SizeVar("nnzb")
    indptr = Buffer("indptr", (mb + 1,), "int32")
    S = Buffer("S", (nnzb, r, c), dtype)
    top, total = Buffer("top", (1,), dtype, scope="local"), Buffer("total", (1,), dtype, scope="local")
    io, ii = Var("io"), Var("ii")
    lo, hi = indptr[io], indptr[io + 1]

    def entries(name: str, body_of) -> For:
        p, ji = Var(f"p_{name}"), Var(f"ji_{name}")
        return For(p, lo, hi - lo, "serial", For(ji, IntImm(0), IntImm(c), "serial", body_of(p, ji)))

    find_max = entries("max", lambda p, ji: BufferStore(top, max_(top[0], S[p, ii, ji]), (0,)))
    exponent = entries("exp", lambda p, ji: seq(
        BufferStore(S, Call("exp", (S[p, ii, ji] - top[0],), dtype), (p, ii, ji)),
        BufferStore(total, total[0] + S[p, ii, ji], (0,))))
    scale = entries("div", lambda p, ji: BufferStore(S, S[p, ii, ji] / total[0], (p, ii, ji)))
    row = Allocate(top, Allocate(total, seq(
        BufferStore(top, FloatImm(LOWEST[dtype], dtype), (0,)), find_max,
        BufferStore(total, FloatImm(0.0, dtype), (0,)), exponent, scale)))
    body = For(io, IntImm(0), mb, "parallel", annotations=ROWS_DYNAMIC, body=seq(
        _assume((lo >= 0) & (lo <= hi) & (hi <= nnzb)), For(ii, IntImm(0), IntImm(r), "serial", row)))
    return PrimFunc((indptr, S), body, f"block_softmax{r}x{c}_{dtype}")


@functools.lru_cache(maxsize=None)
def _attention_kernels(dtype: str, block: tuple[int, int], width: int | None) -> tuple[Any, Any]:
    return (build(lower_stage3(bsr_sddmm_iteration(dtype, block, width)), bounds="prove"),
            build(block_softmax_func(dtype, block), bounds="prove"))


def block_sparse_attention(pattern: SparseMatrix, Q: np.ndarray, K: np.ndarray, V: np.ndarray) -> np.ndarray:
    """softmax(Q K^T / sqrt(d), restricted to the stored blocks of BSR `pattern`) @ V; rows with no
    stored block are 0.  Q and K are (L, d), V is (L, dv), of the pattern's value type."""
    if not isinstance(pattern, SparseMatrix) or pattern.format != "bsr":
        raise ArgumentError(f"block_sparse_attention: expected a BSR pattern, got "
                            f"{getattr(pattern, 'format', type(pattern).__name__)}")
    m, k = pattern.shape
    _, r, c = pattern.data.shape
    dtype = pattern.dtype
    Q = _dense("block_sparse_attention: Q", Q, m, dtype)
    K = _dense("block_sparse_attention: K", K, k, dtype)
    V = _dense("block_sparse_attention: V", V, k, dtype)
    if Q.shape[1] != K.shape[1]:
        raise ArgumentError(f"block_sparse_attention: Q and K need the same width, got {Q.shape[1]} and {K.shape[1]}")
    d, dv = Q.shape[1], V.shape[1]
    name = _dtype_name(dtype)
    sddmm, softmax = _attention_kernels(name, (r, c), d if d in (16, 32, 64, 128, 256) else None)
    indptr, indices = pattern.indptr["jo"], pattern.indices["jo"]
    scores = np.empty(pattern.data.shape, dtype=dtype)
    scaled = np.ascontiguousarray(Q * dtype.type(1.0 / math.sqrt(d)) if d else Q)
    sddmm(indptr, indices, scaled.reshape(m // r, r, d), K.reshape(k // c, c, d), scores)
    softmax(indptr, scores)
    out = np.empty((m, dv), dtype=dtype)
    compiled("spmm_bsr", name, dv, (r, c))(indptr, indices, scores, V.reshape(k // c, c, dv),
                                           out.reshape(m // r, r, dv))
    return out


# ----------------------------------------------------------------------------- RGCN
def rgcn_iteration(dtype: str = "float32", width: int | None = None) -> SparseIteration:
    """out[i, f] += A[i, r, j] * Y[j, r, f] over (I, Rel, J, F) "SRRS": all relations of row i in
    one visit (Y[:, r] = X @ W_r: one matrix product of X with the relations' weights side by side)."""
    m, rels, k, n, nnz = SizeVar("m"), SizeVar("rels"), SizeVar("k"), _width(width), SizeVar("nnz")
    I, F = sp_axis("I", "dense_fixed", m), sp_axis("F", "dense_fixed", n)
    Rel = sp_axis("Rel", "dense_fixed", rels, parent=I)
    J = sp_axis("J", "sparse_variable", k, parent=Rel, nnz=nnz)
    RY, K = sp_axis("RY", "dense_fixed", rels), sp_axis("K", "dense_fixed", k)
    A, Y, out = SpBuffer("A", (I, Rel, J), dtype), SpBuffer("Y", (K, RY, F), dtype), SpBuffer("out", (I, F), dtype)
    return sp_iter(f"rgcn_{dtype}", [(I, "S"), (Rel, "R"), (J, "R"), (F, "S")], out,
                   lambda i, r, j, f: ((i, f), A[i, r, j] * Y[j, r, f]), [A, Y, out])


class RelationalGraph:
    """The adjacency matrices of R relations over the same nodes, stored as (I, Rel, J): row
    i * R + r of `indptr` holds the neighbours of node i under relation r (sorted)."""

    def __init__(self, matrices: Sequence[Any]) -> None:
        import scipy.sparse as sp

        if not matrices:
            raise SparseFormatError("rgcn: expected at least one relation")
        mats = [sp.csr_matrix(a) for a in matrices]
        shape = mats[0].shape
        if any(a.shape != shape for a in mats):
            raise SparseFormatError(f"rgcn: every relation needs the shape {shape}, got {[a.shape for a in mats]}")
        dtype = np.result_type(*[a.dtype for a in mats])
        if dtype not in (np.float32, np.float64):
            raise SparseFormatError(f"rgcn: values must be float32 or float64, got {dtype}", "data")
        rels = len(mats)
        coo = [a.tocoo() for a in mats]
        rows = np.concatenate([c.row.astype(np.int64) * rels + r for r, c in enumerate(coo)])
        cols = np.concatenate([c.col for c in coo])
        vals = np.concatenate([c.data for c in coo]).astype(dtype)
        stacked = sp.csr_matrix((vals, (rows, cols)), shape=(shape[0] * rels, shape[1]))
        stacked.sum_duplicates()
        stacked.sort_indices()
        self.shape, self.relations = (int(shape[0]), int(shape[1])), rels
        self.indptr = stacked.indptr.astype(INDEX_DTYPE)
        self.indices = stacked.indices.astype(INDEX_DTYPE)
        self.data = stacked.data.astype(dtype)
        for arr in (self.indptr, self.indices, self.data):
            arr.flags.writeable = False

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @functools.cached_property
    def stacked(self) -> SparseMatrix:
        """The relations stacked by row as one validated CSR matrix of shape (nodes * R, nodes):
        row i * R + r holds the neighbours of node i under relation r."""
        from .formats import csr

        return csr(self.indptr, self.indices, self.data, (self.shape[0] * self.relations, self.shape[1]))


@functools.lru_cache(maxsize=None)
def _rgcn_kernel(dtype: str, width: int | None) -> Any:
    """Stage III of rgcn_iteration, scheduled like the CSR SpMM: the output row in a register tile
    (a constant width), the nodes partitioned by entries (the kernel takes `parts` first)."""
    it = rgcn_iteration(dtype, width)
    if width is None:
        return build(partition_rows(lower_stage3(it)), bounds="prove")
    tile, lanes = row_tile_lanes(dtype)
    return build(partition_rows(vectorize_row_tile(lower_stage3(it, row_tile=tile), lanes)), bounds="prove")


def rgcn(graph: RelationalGraph, X: np.ndarray, W: np.ndarray) -> np.ndarray:
    """sum_r A_r @ (X @ W[r]): X (nodes, d_in), W (R, d_in, d_out).  With d_in <= d_out the
    neighbours are summed first (`rgcn_aggregate_first`: one SpMM of the stacked relations with X,
    then one dense product with the weights stacked); else the weights are applied first and one
    fused sparse kernel sums over all relations of a row (`rgcn_iteration`)."""
    X, W = _rgcn_operands("rgcn", graph, X, W)
    if X.shape[1] <= W.shape[2]:
        return rgcn_aggregate_first(graph, X, W)
    (m, k), rels, width = graph.shape, graph.relations, W.shape[2]
    side_by_side = np.ascontiguousarray(W.transpose(1, 0, 2)).reshape(X.shape[1], rels * width)
    Y = aligned_empty((k, rels * width), graph.dtype)  # its gathered rows on cache lines
    _matmul(X, side_by_side, Y)
    Y = Y.reshape(k, rels, width)  # Y[j, r] = X[j] @ W[r]
    out = np.empty((m, width), dtype=graph.dtype)
    kernel = _rgcn_kernel(_dtype_name(graph.dtype), width if width in SPECIALISED_WIDTHS else None)
    kernel(row_parts(graph.indptr[::rels]), graph.indptr, graph.indices, graph.data, Y, out)
    return out


def rgcn_aggregate_first(graph: RelationalGraph, X: np.ndarray, W: np.ndarray) -> np.ndarray:
    """rgcn with the neighbours summed before the weights are applied: Z[i, r] = sum_j A_r[i, j]
    X[j] is one CSR SpMM of the relations stacked by row (row i * R + r of the graph's arrays, the
    (I, Rel, J) composition read as one (nodes * R, nodes) CSR matrix), and out = Z @ W stacked
    ((nodes, R * d_in) @ (R * d_in, d_out), one dense product).  The same products as applying
    the weights first; the SpMM gathers rows of X (d_in wide, from a table R times smaller than
    X @ W of every relation), which pays where d_in <= d_out (`rgcn` chooses).  Arguments as rgcn's."""
    from .kernels import spmm

    X, W = _rgcn_operands("rgcn_aggregate_first", graph, X, W)
    m, rels = graph.shape[0], graph.relations
    d_in, width = X.shape[1], W.shape[2]
    Z = scratch_empty("rgcn_sums", (m * rels, d_in), graph.dtype)
    spmm(graph.stacked, X, Z)
    out = np.empty((m, width), dtype=graph.dtype)
    _matmul(Z.reshape(m, rels * d_in), np.ascontiguousarray(W.reshape(rels * d_in, width)), out)
    return out


def _rgcn_operands(what: str, graph: Any, X: Any, W: Any) -> tuple[np.ndarray, np.ndarray]:
    """(X, W) checked against the graph (ArgumentError): X (nodes, d_in) and W (R, d_in, d_out), both
    of the graph's value type; C-contiguous copies where they were not."""
    if not isinstance(graph, RelationalGraph):
        raise ArgumentError(f"{what}: expected a RelationalGraph, got {type(graph).__name__}")
    X = _dense(f"{what}: X", X, graph.shape[1], graph.dtype)
    if not isinstance(W, np.ndarray) or W.ndim != 3 or W.shape[:2] != (graph.relations, X.shape[1]) \
            or W.dtype != graph.dtype:
        raise ArgumentError(f"{what}: W must be a {graph.dtype} array of shape ({graph.relations}, {X.shape[1]}, "
                            f"d_out), got {getattr(W, 'dtype', type(W).__name__)} {getattr(W, 'shape', '')}")
    return X, np.ascontiguousarray(W)


def _matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """out = a @ b: float32 through OpenBLAS with its workers asleep (`shared_sgemm`: they would spin on
    the cores the sparse kernel after or before wants), else numpy."""
    from ..runtime.blas import shared_sgemm

    if not shared_sgemm(a, b, out):
        np.matmul(a, b, out=out)
