"""The four kinds of sparse axis (SparseTIR's vocabulary) and what each one stores.

An axis iterates the coordinates of one dimension of a tensor, nested in its parent axis:

- dense_fixed(n):        every coordinate 0..n-1, for every parent position.  Stores nothing.
- dense_variable(n):     coordinates 0..len-1 where len varies by parent position (ragged);
                         stores `indptr` (parent positions + 1, non-decreasing, from 0 to the total).
- sparse_fixed(n, k):    exactly k coordinates per parent position, chosen from 0..n-1 (ELL);
                         stores `indices` (parent positions * k, each in [0, n)).
- sparse_variable(n):    a varying number of coordinates per parent position (CSR row's columns);
                         stores `indptr` and `indices`.

`position` counts the stored entries of an axis; for a root axis the parent has one position.
"""
from __future__ import annotations

from dataclasses import dataclass

KINDS = ("dense_fixed", "dense_variable", "sparse_fixed", "sparse_variable")


@dataclass(frozen=True, slots=True)
class Axis:
    """One axis of a sparse format: its kind, its dimension (coordinates in [0, length)), and,
    for sparse_fixed, the number of coordinates per parent position; `sorted` says whether the
    coordinates of one parent position are strictly increasing."""

    name: str
    kind: str
    length: int
    per_row: int | None = None
    sorted: bool = True

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"axis {self.name}: kind must be one of {KINDS}, got {self.kind!r}")
        if not isinstance(self.length, int) or self.length < 0:
            raise ValueError(f"axis {self.name}: length must be a non-negative int, got {self.length!r}")
        if (self.kind == "sparse_fixed") != (self.per_row is not None):
            raise ValueError(f"axis {self.name}: per_row goes with sparse_fixed axes only")
        if self.per_row is not None and self.per_row < 0:
            raise ValueError(f"axis {self.name}: per_row must be >= 0, got {self.per_row}")

    @property
    def has_indptr(self) -> bool:
        return self.kind in ("dense_variable", "sparse_variable")

    @property
    def has_indices(self) -> bool:
        return self.kind in ("sparse_fixed", "sparse_variable")


def dense_fixed(name: str, length: int) -> Axis:
    return Axis(name, "dense_fixed", length)


def dense_variable(name: str, length: int) -> Axis:
    return Axis(name, "dense_variable", length)


def sparse_fixed(name: str, length: int, per_row: int, sorted: bool = True) -> Axis:
    return Axis(name, "sparse_fixed", length, per_row, sorted)


def sparse_variable(name: str, length: int, sorted: bool = True) -> Axis:
    return Axis(name, "sparse_variable", length, None, sorted)
