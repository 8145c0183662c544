"""format_decompose: CSR -> hyb, power-of-two ELL buckets plus a CSR rest.

Power-law graphs have a few very long rows and many short ones.  One CSR loop handles both badly:
short rows leave the inner loop's trip count unknown and tiny.  The hyb format puts every row of
length L (0 < L <= max_width) into the ELL bucket of width 2^ceil(log2 L) (padded with value 0 at
column 0), where the slot loop has a fixed trip count, and keeps rows longer than max_width in a
CSR rest.  Every row lands in exactly one part, so the parts' kernels write disjoint rows.

SpMM over hyb runs the CSR rest first (it also zeroes the rows it does not hold, so empty rows come
out 0) and then each bucket, which assigns its own rows.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ArgumentError
from .formats import SparseMatrix, csr, ell, to_scipy
from .kernels import _dense, _dtype_name, _output, _require_csr, compiled
from .validate import INDEX_DTYPE, SparseFormatError, check_index_array


@dataclass(frozen=True, eq=False)
class Bucket:
    """The rows `rows` of the matrix as ELL of width `width`: `ell` holds (len(rows), width) slots."""

    rows: np.ndarray
    ell: SparseMatrix

    def __post_init__(self) -> None:
        rows = check_index_array("hyb", "bucket.rows", self.rows, self.ell.data.shape[0])
        rows = np.array(rows, copy=True)
        rows.flags.writeable = False
        object.__setattr__(self, "rows", rows)

    @property
    def width(self) -> int:
        return self.ell.data.shape[1]


@dataclass(frozen=True, eq=False)
class Hyb:
    """A matrix split into ELL buckets (disjoint row sets) and a CSR rest (all other rows)."""

    shape: tuple[int, int]
    buckets: tuple[Bucket, ...]
    rest: SparseMatrix

    def __post_init__(self) -> None:
        if self.rest.format != "csr" or self.rest.shape != self.shape:
            raise SparseFormatError(f"hyb: the rest must be CSR of shape {self.shape}, got "
                                    f"{self.rest.format} {self.rest.shape}", "rest")
        _check_rows(self.buckets, self.shape[0])
        held = np.concatenate([b.rows for b in self.buckets] + [np.zeros(0, np.int32)])
        if held.size and np.diff(self.rest.indptr["j"])[held].any():
            raise SparseFormatError("hyb: a bucket row also has entries in the rest", "rest")

    def to_scipy(self) -> Any:
        import scipy.sparse as sp

        out = to_scipy(self.rest)
        for bucket in self.buckets:
            part = to_scipy(bucket.ell).tocoo()
            rows = bucket.rows[part.row]
            out = out + sp.coo_matrix((part.data, (rows, part.col)), shape=self.shape).tocsr()
        out.sum_duplicates()
        return out

    def __repr__(self) -> str:
        widths = ", ".join(f"{b.width}x{b.rows.size}" for b in self.buckets)
        return f"Hyb(shape={self.shape}, buckets=[{widths}], rest nnz={self.rest.data.size})"


def format_decompose(A: SparseMatrix, max_width: int = 32) -> Hyb:
    """Split CSR A into power-of-two ELL buckets up to max_width and a CSR rest (long rows)."""
    A = _require_csr(A, "format_decompose")
    if not isinstance(max_width, int) or max_width < 1 or max_width & (max_width - 1):
        raise ArgumentError(f"format_decompose: max_width must be a positive power of two, got {max_width!r}")
    m, n = A.shape
    indptr, indices, data = A.indptr["j"], A.indices["j"], A.data
    lengths = np.diff(indptr.astype(np.int64))
    widths = np.zeros(m, dtype=np.int64)
    nonempty = lengths > 0
    widths[nonempty] = 1 << np.ceil(np.log2(lengths[nonempty])).astype(np.int64)
    buckets = []
    width = 1
    while width <= max_width:
        rows = np.flatnonzero(widths == width)
        if rows.size:
            buckets.append(_bucket(rows, width, indptr, indices, data, lengths, (m, n)))
        width *= 2
    long_rows = widths > max_width
    rest_lengths = np.where(long_rows, lengths, 0)
    rest_ptr = np.concatenate(([0], np.cumsum(rest_lengths))).astype(INDEX_DTYPE)
    take = np.repeat(long_rows, lengths)
    rest = csr(rest_ptr, np.ascontiguousarray(indices[take]), np.ascontiguousarray(data[take]), (m, n))
    return Hyb((m, n), tuple(buckets), rest)


def _bucket(rows, width, indptr, indices, data, lengths, shape) -> Bucket:
    r = rows.size
    slot = np.arange(width)
    take = indptr[rows][:, None].astype(np.int64) + slot
    valid = slot < lengths[rows][:, None]
    take = np.where(valid, take, 0)
    cols = np.where(valid, indices[take] if indices.size else 0, 0).astype(INDEX_DTYPE)
    vals = np.where(valid, data[take] if data.size else 0, 0).astype(data.dtype)
    local = ell(np.ascontiguousarray(cols), np.ascontiguousarray(vals), (r, shape[1]))
    return Bucket(rows.astype(INDEX_DTYPE), local)


def _check_rows(buckets: tuple[Bucket, ...], m: int) -> None:
    """Every bucket row lies in [0, m) and no row is in two places (the kernels assign rows in parallel)."""
    seen = np.zeros(m, dtype=bool)
    for number, bucket in enumerate(buckets):
        rows, name = bucket.rows, f"bucket{number}.rows"
        bad = np.flatnonzero((rows < 0) | (rows >= m))
        if bad.size:
            p = int(bad[0])
            raise SparseFormatError(f"hyb: {name}[{p}]: row {int(rows[p])} is outside [0, {m})", name, p)
        again = np.flatnonzero(seen[rows] | (np.bincount(rows, minlength=m)[rows] > 1))
        if again.size:
            p = int(again[0])
            raise SparseFormatError(f"hyb: {name}[{p}]: row {int(rows[p])} is held twice", name, p)
        seen[rows] = True


def spmm_hyb(H: Hyb, B: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """H @ B: the CSR rest first (zeroing every other row), then each bucket's rows."""
    if not isinstance(H, Hyb):
        raise ArgumentError(f"spmm_hyb: expected a Hyb, got {type(H).__name__}")
    m, k = H.shape
    dtype = H.rest.dtype
    B = _dense("spmm_hyb: B", B, k, dtype)
    out = _output("spmm_hyb", out, (m, B.shape[1]), dtype)
    name = _dtype_name(dtype)
    compiled("spmm_csr", name, B.shape[1])(H.rest.indptr["j"], H.rest.indices["j"], H.rest.data, B, out)
    for bucket in H.buckets:
        compiled("spmm_ell", name, B.shape[1])(bucket.rows, bucket.ell.indices["j"].reshape(bucket.ell.data.shape),
                                   bucket.ell.data, B, out)
    return out
