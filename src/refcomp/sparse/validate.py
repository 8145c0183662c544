"""The invariants of a sparse format, checked once per input array before any kernel runs.

For every axis with an indptr: a 1-D int32 array of (parent positions + 1) entries, starting at 0,
non-decreasing, ending at the number of positions of the axis (the length of its indices, or of
the data).  For every axis with indices: a 1-D int32 array whose entries lie in [0, dimension),
strictly increasing within one parent position where the axis says `sorted`.  The data holds one
value per position of the innermost axis.  These are exactly the facts the SpMM/SDDMM kernels give
the prover (`kernels.py`), so a matrix that passes here cannot make a kernel read out of bounds.

A broken array raises SparseFormatError naming the format, the array and the first bad position.
"""
from __future__ import annotations

import numpy as np

from ..errors import ArgumentError

INDEX_DTYPE = np.dtype(np.int32)
VALUE_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


class SparseFormatError(ArgumentError):
    """A sparse array breaks an invariant of its format; `array` and `position` say where."""

    def __init__(self, message: str, array: str = "", position: int | None = None) -> None:
        super().__init__(message)
        self.array = array
        self.position = position


def _fail(fmt: str, array: str, position: int | None, what: str) -> None:
    where = f"{array}[{position}]" if position is not None else array
    raise SparseFormatError(f"{fmt}: {where}: {what}", array, position)


def check_index_array(fmt: str, name: str, arr: object, length: int | None) -> np.ndarray:
    """arr as a 1-D int32 array of `length` entries (None: any), else SparseFormatError."""
    if not isinstance(arr, np.ndarray):
        _fail(fmt, name, None, f"expected a numpy array, got {type(arr).__name__}")
    if arr.dtype != INDEX_DTYPE:
        _fail(fmt, name, None, f"expected dtype int32, got {arr.dtype}")
    if arr.ndim != 1:
        _fail(fmt, name, None, f"expected a 1-D array, got shape {arr.shape}")
    if length is not None and arr.shape[0] != length:
        _fail(fmt, name, None, f"expected {length} entries, got {arr.shape[0]}")
    return arr


def check_indptr(fmt: str, name: str, indptr: np.ndarray, parents: int, total: int | None) -> int:
    """Validate indptr over `parents` positions; returns its last entry (the positions it spans).
    total, when known, is what the last entry must be (the length of indices or data)."""
    check_index_array(fmt, name, indptr, parents + 1)
    if indptr[0] != 0:
        _fail(fmt, name, 0, f"must be 0, got {int(indptr[0])}")
    drops = np.flatnonzero(np.diff(indptr.astype(np.int64)) < 0)
    if drops.size:
        p = int(drops[0])
        _fail(fmt, name, p + 1, f"indptr must be non-decreasing, got {int(indptr[p])} then {int(indptr[p + 1])}")
    last = int(indptr[-1])
    if total is not None and last != total:
        _fail(fmt, name, parents, f"must equal the number of stored entries {total} (nnz mismatch), got {last}")
    return last


def check_indices(fmt: str, name: str, indices: np.ndarray, dimension: int,
                  segments: np.ndarray | None, sorted_: bool) -> None:
    """indices within [0, dimension); strictly increasing inside each segment when sorted_.
    segments is the indptr that cuts indices into parent positions (None: one segment per
    `len(indices) // parents` fixed-size run, given as an indptr too)."""
    bad = np.flatnonzero((indices < 0) | (indices >= dimension))
    if bad.size:
        p = int(bad[0])
        _fail(fmt, name, p, f"index {int(indices[p])} is outside [0, {dimension})")
    if sorted_ and segments is not None and indices.size > 1:
        steps = np.diff(indices.astype(np.int64)) <= 0
        starts = np.zeros(indices.size, dtype=bool)
        inner = segments[1:-1]
        starts[inner[(inner > 0) & (inner < indices.size)]] = True
        broken = np.flatnonzero(steps & ~starts[1:])
        if broken.size:
            p = int(broken[0]) + 1
            _fail(fmt, name, p, f"indices must be strictly increasing within a row, got "
                                f"{int(indices[p - 1])} then {int(indices[p])}")


def check_values(fmt: str, name: str, data: object, shape: tuple[int, ...]) -> np.ndarray:
    if not isinstance(data, np.ndarray):
        _fail(fmt, name, None, f"expected a numpy array, got {type(data).__name__}")
    if data.dtype not in VALUE_DTYPES:
        _fail(fmt, name, None, f"expected dtype float32 or float64, got {data.dtype}")
    if data.shape != shape:
        _fail(fmt, name, None, f"expected shape {shape}, got {data.shape}")
    return data
