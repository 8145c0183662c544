"""Sparse formats as chains of axes, with scipy.sparse conversion.

A SparseMatrix is a chain of axes (outermost first), the indptr / indices arrays of the axes that
store them, one value per position of the innermost axis, and a map from the logical dims (rows,
columns) to the axes whose coordinates make them up (mixed radix, outer axis first):

    CSR   (i: dense_fixed m) (j: sparse_variable n)                       rows = i, cols = j
    BSR   (io: dense_fixed m/R) (jo: sparse_variable n/C) (ii: dense_fixed R) (ji: dense_fixed C)
                                                                           rows = io*R+ii, cols = jo*C+ji
    ELL   (i: dense_fixed m) (j: sparse_fixed n, k per row)               padded with value 0
    DCSR  (i: sparse_variable m, one parent) (j: sparse_variable n)       only non-empty rows stored
    ragged(i: dense_fixed m) (j: dense_variable n)                        row i has a length of its own

`walk_positions` enumerates the coordinates of every stored value (the stage I iteration of the
format); validation and conversion to scipy are both built on it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from .axes import Axis, dense_fixed, dense_variable, sparse_fixed, sparse_variable
from .validate import (
    INDEX_DTYPE, SparseFormatError, check_index_array, check_indices, check_indptr, check_values,
)


@dataclass(frozen=True, eq=False)
class SparseMatrix:
    """A two-dimensional sparse matrix stored as a composition of axes."""

    format: str
    axes: tuple[Axis, ...]
    dims: tuple[tuple[str, ...], tuple[str, ...]]
    indptr: Mapping[str, np.ndarray] = field(default_factory=dict)
    indices: Mapping[str, np.ndarray] = field(default_factory=dict)
    data: np.ndarray = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        # The arrays are validated once, then trusted by every kernel: keep private read-only
        # copies so that a later write to the caller's arrays cannot break an invariant.
        object.__setattr__(self, "indptr", {k: _frozen(v) for k, v in self.indptr.items()})
        object.__setattr__(self, "indices", {k: _frozen(v) for k, v in self.indices.items()})
        object.__setattr__(self, "data", _frozen(self.data))

    @property
    def shape(self) -> tuple[int, int]:
        lengths = {axis.name: axis.length for axis in self.axes}
        return tuple(int(np.prod([lengths[a] for a in dim])) for dim in self.dims)  # type: ignore[return-value]

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    def derived(self, key: str, make: Any) -> Any:
        """make(), computed once per matrix and kept under key: a value that depends only on the
        matrix's arrays (read-only copies, so it cannot go stale), e.g. SpMM's row partition."""
        cache = self.__dict__.setdefault("_derived", {})
        if key not in cache:
            cache[key] = make()
        return cache[key]

    def axis(self, name: str) -> Axis:
        for axis in self.axes:
            if axis.name == name:
                return axis
        raise KeyError(name)

    def to_scipy(self) -> Any:
        return to_scipy(self)

    def __repr__(self) -> str:
        chain = " ".join(f"({a.name}: {a.kind} {a.length})" for a in self.axes)
        return f"SparseMatrix({self.format}, shape={self.shape}, {chain}, stored={self.data.size})"


def _frozen(array: Any) -> Any:
    if not isinstance(array, np.ndarray):
        return array  # validation reports it
    copy = np.array(array, copy=True, order="C")
    copy.flags.writeable = False
    return copy


def walk_positions(matrix: SparseMatrix, check: bool = False) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(positions of the innermost axis, coordinate of each axis at those positions), in storage
    order; with check=True every invariant is validated on the way (SparseFormatError)."""
    fmt = matrix.format
    positions = np.zeros(1, dtype=np.int64)
    coords: dict[str, np.ndarray] = {}
    for axis in matrix.axes:
        parents = positions.size
        if axis.kind == "dense_fixed":
            new = (positions[:, None] * axis.length + np.arange(axis.length)).ravel()
            coord = np.tile(np.arange(axis.length), parents)
            repeat = np.full(parents, axis.length)
        elif axis.kind == "sparse_fixed":
            k = axis.per_row or 0
            new = (positions[:, None] * k + np.arange(k)).ravel()
            idx = matrix.indices.get(axis.name)
            if check:
                check_index_array(fmt, f"{axis.name}.indices", idx, parents * k)
                segments = np.arange(0, idx.size + 1, max(k, 1)) if k else None
                check_indices(fmt, f"{axis.name}.indices", idx, axis.length, segments, axis.sorted)
            coord = idx[new].astype(np.int64)
            repeat = np.full(parents, k)
        else:
            ptr = matrix.indptr.get(axis.name)
            if check:
                _check_contiguous(fmt, axis, positions)
                idx = matrix.indices.get(axis.name)
                total = idx.size if axis.has_indices and isinstance(idx, np.ndarray) else None
                check_indptr(fmt, f"{axis.name}.indptr", ptr, parents, total)
                if axis.has_indices:
                    check_index_array(fmt, f"{axis.name}.indices", idx, None)
                    check_indices(fmt, f"{axis.name}.indices", idx, axis.length, ptr, axis.sorted)
            starts, ends = ptr[positions].astype(np.int64), ptr[positions + 1].astype(np.int64)
            repeat = ends - starts
            new = _ranges(starts, repeat)
            if axis.has_indices:
                coord = matrix.indices[axis.name][new].astype(np.int64)
            else:
                coord = new - np.repeat(starts, repeat)
                if check and coord.size and coord.max() >= axis.length:
                    p = int(np.argmax(coord >= axis.length))
                    raise SparseFormatError(f"{fmt}: {axis.name}.indptr: a row is longer than the "
                                            f"dimension {axis.length} (position {p})", f"{axis.name}.indptr", p)
        coords = {name: np.repeat(c, repeat) for name, c in coords.items()}
        coords[axis.name] = coord
        positions = new
    if check:
        check_values(fmt, "data", matrix.data, matrix.data.shape)
        if matrix.data.size != positions.size:
            raise SparseFormatError(f"{fmt}: data: expected {positions.size} values, got "
                                    f"{matrix.data.size}", "data")
    return positions, coords


def _check_contiguous(fmt: str, axis: Axis, positions: np.ndarray) -> None:
    """An indptr axis needs its parent positions to be 0..P-1 (no padding above it)."""
    if positions.size and int(positions[-1]) != positions.size - 1:
        raise SparseFormatError(f"{fmt}: axis {axis.name}: an indptr axis cannot sit below a padded axis",
                                f"{axis.name}.indptr")


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated ranges [start, start + length) as one int64 array."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    return np.arange(total, dtype=np.int64) + offsets


def validate(matrix: SparseMatrix) -> None:
    """Check every invariant of the matrix's arrays (SparseFormatError names array and position)."""
    walk_positions(matrix, check=True)


def logical_coordinates(matrix: SparseMatrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, cols, values) of every stored entry, padding included."""
    positions, coords = walk_positions(matrix)
    lengths = {axis.name: axis.length for axis in matrix.axes}
    out = []
    for dim in matrix.dims:
        value = np.zeros(positions.size, dtype=np.int64)
        for name in dim:
            value = value * lengths[name] + coords[name]
        out.append(value)
    return out[0], out[1], matrix.data.ravel()[positions]


def to_scipy(matrix: SparseMatrix) -> Any:
    """The matrix as scipy.sparse.csr_matrix (padding entries of value 0 are dropped)."""
    import scipy.sparse as sp

    rows, cols, values = logical_coordinates(matrix)
    keep = values != 0 if matrix.format in ("ell",) else np.ones(values.size, dtype=bool)
    out = sp.coo_matrix((values[keep], (rows[keep], cols[keep])), shape=matrix.shape).tocsr()
    out.sum_duplicates()
    return out


def to_torch(matrix: SparseMatrix) -> Any:
    """The matrix as a torch sparse CSR tensor (needs torch)."""
    try:
        import torch
    except ImportError as err:
        raise SparseFormatError("to_torch: torch is not installed") from err
    import warnings

    a = to_scipy(matrix)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch calls its sparse CSR support beta
        return torch.sparse_csr_tensor(torch.from_numpy(a.indptr.astype(np.int64)),
                                       torch.from_numpy(a.indices.astype(np.int64)),
                                       torch.from_numpy(a.data.copy()), size=a.shape)


# ----------------------------------------------------------------------------- constructors
def _index(arr: Any) -> np.ndarray:
    return np.ascontiguousarray(arr, dtype=INDEX_DTYPE)


def csr(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, shape: tuple[int, int],
        sorted: bool = True, check: bool = True) -> SparseMatrix:
    m, n = shape
    out = SparseMatrix("csr", (dense_fixed("i", m), sparse_variable("j", n, sorted)), (("i",), ("j",)),
                       {"j": indptr}, {"j": indices}, data)
    if check:
        validate(out)
    return out


def bsr(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, shape: tuple[int, int],
        check: bool = True) -> SparseMatrix:
    m, n = shape
    if not isinstance(data, np.ndarray) or data.ndim != 3:
        raise SparseFormatError(f"bsr: data: expected (blocks, R, C), got "
                                f"{getattr(data, 'shape', type(data).__name__)}", "data")
    _, r, c = data.shape
    if r == 0 or c == 0 or m % r or n % c:
        raise SparseFormatError(f"bsr: block {r}x{c} does not tile the shape {shape}", "data")
    axes = (dense_fixed("io", m // r), sparse_variable("jo", n // c), dense_fixed("ii", r), dense_fixed("ji", c))
    out = SparseMatrix("bsr", axes, (("io", "ii"), ("jo", "ji")), {"jo": indptr}, {"jo": indices}, data)
    if check:
        validate(out)
    return out


def ell(indices: np.ndarray, data: np.ndarray, shape: tuple[int, int], check: bool = True) -> SparseMatrix:
    """ELL: k stored entries per row (data and indices of shape (m, k), padding has value 0)."""
    m, n = shape
    if not isinstance(data, np.ndarray) or data.ndim != 2 or data.shape[0] != m:
        raise SparseFormatError(f"ell: data: expected shape ({m}, k), got "
                                f"{getattr(data, 'shape', type(data).__name__)}", "data")
    k = data.shape[1]
    flat = indices.reshape(-1) if isinstance(indices, np.ndarray) else indices
    out = SparseMatrix("ell", (dense_fixed("i", m), sparse_fixed("j", n, k, sorted=False)), (("i",), ("j",)),
                       {}, {"j": flat}, data)
    if check:
        validate(out)
    return out


def dcsr(row_indices: np.ndarray, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray,
         shape: tuple[int, int], check: bool = True) -> SparseMatrix:
    """Doubly compressed: only the rows in row_indices (sorted) are stored."""
    m, n = shape
    rows = row_indices.size if isinstance(row_indices, np.ndarray) else 0
    axes = (sparse_variable("i", m), sparse_variable("j", n))
    out = SparseMatrix("dcsr", axes, (("i",), ("j",)),
                       {"i": np.array([0, rows], dtype=INDEX_DTYPE), "j": indptr},
                       {"i": row_indices, "j": indices}, data)
    if check:
        validate(out)
    return out


def ragged(indptr: np.ndarray, data: np.ndarray, shape: tuple[int, int], check: bool = True) -> SparseMatrix:
    """Row i holds indptr[i+1] - indptr[i] leading values (columns 0, 1, ...)."""
    m, n = shape
    out = SparseMatrix("ragged", (dense_fixed("i", m), dense_variable("j", n)), (("i",), ("j",)),
                       {"j": indptr}, {}, data)
    if check:
        validate(out)
    return out


def from_scipy(matrix: Any, format: str = "csr", block: tuple[int, int] = (2, 2)) -> SparseMatrix:
    """A scipy.sparse matrix (or a torch sparse tensor) in the given format ("csr", "bsr", "ell", "dcsr")."""
    import scipy.sparse as sp

    if type(matrix).__module__.startswith("torch"):
        matrix = _scipy_from_torch(matrix)
    if not sp.issparse(matrix):
        raise SparseFormatError(f"from_scipy: expected a scipy.sparse matrix, got {type(matrix).__name__}")
    a = sp.csr_matrix(matrix)
    a.sum_duplicates()
    a.sort_indices()
    if a.dtype not in (np.float32, np.float64):
        raise SparseFormatError(f"from_scipy: values must be float32 or float64, got {a.dtype}", "data")
    shape = (int(a.shape[0]), int(a.shape[1]))
    if format == "csr":
        return csr(_index(a.indptr), _index(a.indices), a.data.copy(), shape)
    if format == "bsr":
        b = sp.bsr_matrix(a, blocksize=block)
        b.sort_indices()
        return bsr(_index(b.indptr), _index(b.indices), np.ascontiguousarray(b.data), shape)
    if format == "ell":
        lengths = np.diff(a.indptr)
        k = int(lengths.max()) if lengths.size else 0
        idx = np.zeros((shape[0], k), dtype=INDEX_DTYPE)
        val = np.zeros((shape[0], k), dtype=a.dtype)
        slot = np.arange(a.nnz) - np.repeat(a.indptr[:-1], lengths)
        rows = np.repeat(np.arange(shape[0]), lengths)
        idx[rows, slot] = a.indices
        val[rows, slot] = a.data
        return ell(idx, val, shape)
    if format == "dcsr":
        lengths = np.diff(a.indptr)
        rows = np.flatnonzero(lengths).astype(INDEX_DTYPE)
        ptr = np.concatenate(([0], np.cumsum(lengths[rows]))).astype(INDEX_DTYPE)
        return dcsr(rows, ptr, _index(a.indices), a.data.copy(), shape)
    raise SparseFormatError(f"from_scipy: unknown format {format!r} (csr, bsr, ell, dcsr)")


def _scipy_from_torch(tensor: Any) -> Any:
    import scipy.sparse as sp

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch calls its sparse CSR support beta
        t = tensor.detach().cpu().to_sparse_csr()
    return sp.csr_matrix((t.values().numpy(), t.col_indices().numpy(), t.crow_indices().numpy()),
                         shape=tuple(t.shape))
