"""format_decompose: CSR -> hyb, column partitions of power-of-two ELL buckets, a CSR rest, and
long rows split into chunks.

Power-law graphs have a few very long rows and many short ones.  One CSR loop handles both badly:
short rows leave the inner loop's trip count unknown and tiny.  The hyb format puts every row of
length L (0 < L <= max_width) into the ELL bucket of width 2^ceil(log2 L) (padded with value 0 at
column 0), where the slot loop has a fixed trip count, and keeps rows longer than max_width in a
CSR rest -- or, split, as chunks of max_width entries (ELL rows of their own, any number of them
per matrix row, so one long row is spread over many threads) that a CSR gather of ones sums back
into their rows.  Column partitions do this for each range of columns separately, so that the
rows of B one partition reads stay in cache.  Within a partition every row lands in exactly one
kind, so the kernels of one kind write disjoint rows and run their rows in parallel.

SpMM over hyb writes each row of the output whole, from sums held in vector registers: in the
first partition every row is set exactly once (rows without entries there are zeroed by the rest
kernel's row list); later partitions add into the rows they hold.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ..errors import ArgumentError
from .formats import SparseMatrix, csr, ell, to_scipy
from .kernels import (
    SPECIALISED_WIDTHS, _built_gpu, _dense, _dtype_name, _gpu_target, _output, _require_csr, compiled,
    row_list_parts, run_spmm_csr,
    aligned_empty, hot_first, most_used_columns, run_spmm_csr_rows, stage_rows,
)
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
class Split:
    """Long rows cut into chunks of `chunks.width` entries: `chunks` holds one chunk per row (ELL,
    padded with value 0), `gather` (CSR, values 1) sums the chunks of each matrix row, so the
    part's product is gather @ (chunks @ B): the chunks are independent units of work."""

    chunks: SparseMatrix
    gather: SparseMatrix

    @property
    def width(self) -> int:
        return self.chunks.data.shape[1]


@dataclass(frozen=True, eq=False)
class HybPart:
    """The entries of columns [lo, hi): ELL buckets, a CSR rest and (optionally) split long rows,
    each row of the matrix held by at most one of them."""

    columns: tuple[int, int]
    buckets: tuple[Bucket, ...]
    rest: SparseMatrix
    split: Split | None = None

    @cached_property
    def rest_rows(self) -> np.ndarray:
        """The rows the CSR rest holds entries of."""
        return np.flatnonzero(np.diff(self.rest.indptr["j"]) > 0).astype(INDEX_DTYPE)

    @cached_property
    def split_rows(self) -> np.ndarray:
        """The rows cut into chunks."""
        if self.split is None:
            return np.zeros(0, dtype=INDEX_DTYPE)
        return np.flatnonzero(np.diff(self.split.gather.indptr["j"]) > 0).astype(INDEX_DTYPE)

    @cached_property
    def rest_plan(self) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """(rows, parts) of the rest kernel's row list: in the first partition (the rest's rows
        and the unheld ones, which it zeroes), in any later one (the rest's rows only)."""
        ptr = self.rest.indptr["j"]
        first = np.sort(np.concatenate([self.rest_rows, self.unheld_rows]))  # the output written in order
        return (first, row_list_parts(ptr, first)), (self.rest_rows, row_list_parts(ptr, self.rest_rows))

    @cached_property
    def split_parts(self) -> np.ndarray:
        """The row-list partition of the split rows' gather."""
        return row_list_parts(self.split.gather.indptr["j"], self.split_rows)

    @cached_property
    def unheld_rows(self) -> np.ndarray:
        """The rows with no entry in this partition's columns."""
        held = np.zeros(self.rest.shape[0], dtype=bool)
        for rows in [b.rows for b in self.buckets] + [self.rest_rows, self.split_rows]:
            held[rows] = True
        return np.flatnonzero(~held).astype(INDEX_DTYPE)


@dataclass(frozen=True, eq=False)
class Hyb:
    """A matrix decomposed by column partitions; each partition into ELL buckets (disjoint row
    sets), a CSR rest and split long rows.  `order` (None: the columns in their own order) lists
    the columns in the order the partitions' ranges count them: part p holds the columns
    order[lo:hi] of its range [lo, hi)."""

    shape: tuple[int, int]
    parts: tuple[HybPart, ...]
    order: np.ndarray | None = None

    def __post_init__(self) -> None:
        m, n = self.shape
        if self.order is not None:
            order = check_index_array("hyb", "order", self.order, n)
            bad = np.flatnonzero((order < 0) | (order >= n))
            if bad.size:
                p = int(bad[0])
                raise SparseFormatError(f"hyb: order[{p}]: column {int(order[p])} is outside [0, {n})", "order", p)
            if n and np.bincount(order, minlength=n).max() != 1:
                raise SparseFormatError(f"hyb: order must list each of the {n} columns once", "order")
            order = np.array(order, copy=True)
            order.flags.writeable = False
            object.__setattr__(self, "order", order)
        edge = 0
        for number, part in enumerate(self.parts):
            where = f"part{number}"
            lo, hi = part.columns
            if lo != edge or hi < lo or hi > n:
                raise SparseFormatError(f"hyb: {where}: columns [{lo}, {hi}) do not continue the partition at "
                                        f"{edge} within {n}", f"{where}.columns")
            edge = hi
            if part.rest.format != "csr" or part.rest.shape != self.shape:
                raise SparseFormatError(f"hyb: {where}: the rest must be CSR of shape {self.shape}, got "
                                        f"{part.rest.format} {part.rest.shape}", f"{where}.rest")
            _check_rows(part.buckets, m)
            held = np.zeros(m, dtype=np.int64)
            for bucket in part.buckets:
                held[bucket.rows] += 1
            held += np.diff(part.rest.indptr["j"]) > 0
            if part.split is not None:
                gather, chunks = part.split.gather, part.split.chunks
                if gather.format != "csr" or gather.shape != (m, chunks.shape[0]) or chunks.format != "ell" \
                        or chunks.shape[1] != n:
                    raise SparseFormatError(f"hyb: {where}: split must be CSR ({m}, chunks) over ELL (chunks, {n})",
                                            f"{where}.split")
                held += np.diff(gather.indptr["j"]) > 0
            if (held > 1).any():
                raise SparseFormatError(f"hyb: {where}: row {int(np.argmax(held > 1))} is held by two kinds",
                                        f"{where}.rest")
        if edge != n:
            raise SparseFormatError(f"hyb: the column partitions end at {edge}, not {n}", "parts")

    @property
    def buckets(self) -> tuple[Bucket, ...]:
        return tuple(b for part in self.parts for b in part.buckets)

    @property
    def rest(self) -> SparseMatrix:
        if len(self.parts) != 1:
            raise ArgumentError("hyb: .rest is defined for one column partition; use .parts")
        return self.parts[0].rest

    def to_scipy(self) -> Any:
        import scipy.sparse as sp

        out = sp.csr_matrix(self.shape, dtype=self.parts[0].rest.dtype)
        for part in self.parts:
            out = out + to_scipy(part.rest)
            for bucket in part.buckets:
                piece = to_scipy(bucket.ell).tocoo()
                out = out + sp.coo_matrix((piece.data, (bucket.rows[piece.row], piece.col)), shape=self.shape).tocsr()
            if part.split is not None:
                out = out + to_scipy(part.split.gather) @ to_scipy(part.split.chunks)
        out.sum_duplicates()
        out.eliminate_zeros()
        return out

    def __repr__(self) -> str:
        parts = []
        for part in self.parts:
            widths = ", ".join(f"{b.width}x{b.rows.size}" for b in part.buckets)
            split = f", split {part.split.chunks.shape[0]} chunks" if part.split is not None else ""
            parts.append(f"[{part.columns[0]}, {part.columns[1]}): buckets [{widths}], rest nnz="
                         f"{part.rest.data.size}{split}")
        reordered = "" if self.order is None else ", columns reordered"
        return f"Hyb(shape={self.shape}{reordered}, " + "; ".join(parts) + ")"


def format_decompose(A: SparseMatrix, max_width: int = 32, column_parts: int = 1,
                     split_long_rows: bool = False, hot_columns: int = 0) -> Hyb:
    """CSR A -> hyb: `column_parts` column partitions of equal width; in each, rows of length
    0 < L <= max_width go to the ELL bucket of width 2^ceil(log2 L), and longer rows to a CSR
    rest, or, with split_long_rows, into chunks of max_width entries summed back per row.
    hot_columns > 0: the columns reordered by their number of entries (`Hyb.order`: the
    hot_columns most frequent first, ties by column, each group in column order) and those
    columns made a partition of their own, first; the column partitions cut the other columns.

    max_width 0: no ELL buckets, every row of a partition in its CSR rest.

    Requires CSR A, max_width 0 or a power of two, 1 <= column_parts, 0 <= hot_columns <= the
    column count (ArgumentError)."""
    A = _require_csr(A, "format_decompose")
    if not isinstance(max_width, int) or isinstance(max_width, bool) or max_width < 0 or max_width & (max_width - 1):
        raise ArgumentError(f"format_decompose: max_width must be 0 or a power of two, got {max_width!r}")
    if not isinstance(column_parts, int) or isinstance(column_parts, bool) or column_parts < 1:
        raise ArgumentError(f"format_decompose: column_parts must be a positive int, got {column_parts!r}")
    if split_long_rows and not max_width:
        raise ArgumentError("format_decompose: split_long_rows needs a max_width (the chunk length), got 0")
    m, n = A.shape
    if not isinstance(hot_columns, int) or isinstance(hot_columns, bool) or not 0 <= hot_columns <= n:
        raise ArgumentError(f"format_decompose: hot_columns must be an int in [0, {n}], got {hot_columns!r}")
    indptr, indices, data = A.indptr["j"].astype(np.int64), A.indices["j"], A.data
    order = None
    where = indices  # each entry's column position in the order
    edges = [0]
    if hot_columns:
        order = hot_first_order(A, hot_columns)
        position = np.empty(n, dtype=np.int64)
        position[order] = np.arange(n)
        where = position[indices]
        edges = [0, hot_columns] if hot_columns < n else [0]
    start = edges[-1]
    step = -(-(n - start) // column_parts) if n > start else 0
    edges += [min(start + p * step, n) for p in range(1, column_parts)] + [n]
    rows = np.repeat(np.arange(m), np.diff(indptr))
    parts = []
    for lo, hi in zip(edges, edges[1:]):
        keep = (where >= lo) & (where < hi)
        lengths = np.bincount(rows[keep], minlength=m).astype(np.int64)
        ptr = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        parts.append(_part((lo, hi), ptr, np.ascontiguousarray(indices[keep]), np.ascontiguousarray(data[keep]),
                           lengths, (m, n), max_width, split_long_rows))
    return Hyb((m, n), tuple(parts), None if order is None else order.astype(INDEX_DTYPE))


def hot_first_order(A: SparseMatrix, hot_columns: int) -> np.ndarray:
    """The columns of CSR A with the hot_columns holding the most entries first (ties: the lower
    column), then the others; each group in increasing column order."""
    n = A.shape[1]
    return hot_first(most_used_columns(A.indices["j"], n, hot_columns), n)


def _part(columns, indptr, indices, data, lengths, shape, max_width, split) -> HybPart:
    m, n = shape
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
    chunks = None
    if split and long_rows.any():
        chunks = _split(np.flatnonzero(long_rows), max_width, indptr, indices, data, lengths, (m, n))
        long_rows = np.zeros(m, dtype=bool)
    rest_lengths = np.where(long_rows, lengths, 0)
    rest_ptr = np.concatenate(([0], np.cumsum(rest_lengths))).astype(INDEX_DTYPE)
    take = np.repeat(long_rows, lengths)
    rest = csr(rest_ptr, np.ascontiguousarray(indices[take]), np.ascontiguousarray(data[take]), (m, n))
    return HybPart(columns, tuple(buckets), rest, chunks)


def _split(rows, width, indptr, indices, data, lengths, shape) -> Split:
    """Each long row as chunks of `width` consecutive entries (the last padded)."""
    m, n = shape
    per_row = -(-lengths[rows] // width)
    total = int(per_row.sum())
    owner = np.repeat(rows, per_row)
    nth = np.arange(total) - np.repeat(np.cumsum(per_row) - per_row, per_row)  # chunk number within its row
    first = np.repeat(indptr[rows], per_row) + nth * width
    slot = np.arange(width)
    take = first[:, None] + slot
    valid = take < indptr[owner + 1][:, None]
    take = np.where(valid, take, 0)
    cols = np.where(valid, indices[take], 0).astype(INDEX_DTYPE)
    vals = np.where(valid, data[take], 0).astype(data.dtype)
    chunks = ell(np.ascontiguousarray(cols), np.ascontiguousarray(vals), (total, n))
    counts = np.zeros(m, dtype=np.int64)
    counts[rows] = per_row
    gptr = np.concatenate(([0], np.cumsum(counts))).astype(INDEX_DTYPE)
    gather = csr(gptr, np.arange(total, dtype=INDEX_DTYPE), np.ones(total, dtype=data.dtype), (m, total))
    return Split(chunks, gather)


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


def spmm_hyb(H: Hyb, B: np.ndarray, out: np.ndarray | None = None, target: str = "c") -> np.ndarray:
    """H @ B.  Each kernel writes whole rows from sums kept in registers: in the first column
    partition every row is set once (by its bucket, the rest, its split chunks' gather, or, for a
    row with no entry there, to 0 by the rest kernel's row list); later partitions add into the
    rows they hold.  Split rows are gather @ (chunks @ B).  target "cuda" (a CUDA target string):
    the launches of `hyb_gpu_launches`, each `spmm_csr_gpu` on the GPU."""
    gpu = _gpu_target("spmm_hyb", target)
    if not isinstance(H, Hyb):
        raise ArgumentError(f"spmm_hyb: expected a Hyb, got {type(H).__name__}")
    m, k = H.shape
    dtype = H.parts[0].rest.dtype
    B = _dense("spmm_hyb: B", B, k, dtype)
    width = B.shape[1]
    out = _output("spmm_hyb", out, (m, width), dtype)
    name = _dtype_name(dtype)
    if gpu is not None:
        for accumulate, arrays in hyb_gpu_launches(H, B, out):
            _built_gpu("spmm_acc" if accumulate else "spmm", name, width, gpu)(*arrays)
        return out
    B = stage_rows(B, sum(part.rest.data.size + sum(b.ell.data.size for b in part.buckets) +
                          (0 if part.split is None else part.split.chunks.data.size) for part in H.parts))
    if width not in SPECIALISED_WIDTHS:
        return _spmm_hyb_general(H, B, out, name)
    for number, part in enumerate(H.parts):
        add = number > 0
        for bucket in part.buckets:
            slots = bucket.ell.indices["j"].reshape(bucket.ell.data.shape)
            compiled("spmm_ell_acc" if add else "spmm_ell", name, width, slots=bucket.width)(
                bucket.rows, slots, bucket.ell.data, B, out)
        rest = part.rest
        rows, parts = part.rest_plan[1 if add else 0]
        if rows.size:
            run_spmm_csr_rows(name, width, rows, rest.indptr["j"], rest.indices["j"], rest.data, B, out,
                              accumulate=add, parts=parts, stream=not add)
        if part.split is not None:
            partial = _split_partial(part.split, B, name, width)
            gather = part.split.gather
            run_spmm_csr_rows(name, width, part.split_rows, gather.indptr["j"], gather.indices["j"], gather.data,
                              partial, out, accumulate=add, parts=part.split_parts)
    return out



def hyb_gpu_launches(H: Hyb, B: np.ndarray, out: np.ndarray) -> list[tuple[bool, tuple[np.ndarray, ...]]]:
    """H @ B into out as a list of CSR SpMM launches `(accumulate, (indptr, indices, data, B', C))`
    for `spmm_csr_gpu` (run in order; each C is out or a temporary a later launch reads as its B').
    Per partition: its CSR rest over every row (the first partition's sets each row, 0 where the
    rest holds nothing; later ones add); each ELL bucket as a CSR of its rows into a temporary,
    added into its rows of out by a selection matrix (one entry of value 1 per row); split rows'
    chunks (ELL read as CSR) into a temporary, added by the gather.  So the long rows of a
    power-law graph become many short rows, each one block's work.  Requires B and out as
    `spmm_hyb` checks them."""
    m, width = out.shape
    launches: list[tuple[bool, tuple[np.ndarray, ...]]] = []
    for number, part in enumerate(H.parts):
        rest = part.rest
        launches.append((number > 0, (rest.indptr["j"], rest.indices["j"], rest.data, B, out)))
        for bucket in part.buckets:
            partial = aligned_empty((bucket.rows.size, width), out.dtype)
            launches.append((False, _ell_as_csr(bucket.ell) + (B, partial)))
            launches.append((True, _selection(bucket.rows, m, out.dtype) + (partial, out)))
        if part.split is not None:
            chunks, gather = part.split.chunks, part.split.gather
            partial = aligned_empty((chunks.data.shape[0], width), out.dtype)
            launches.append((False, _ell_as_csr(chunks) + (B, partial)))
            launches.append((True, (gather.indptr["j"], gather.indices["j"], gather.data, partial, out)))
    return launches


def _ell_as_csr(ell: SparseMatrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The CSR arrays of ELL `ell` (every row its slots, the padding's zeros included)."""
    rows, slots = ell.data.shape
    if rows * slots > np.iinfo(INDEX_DTYPE).max:
        raise ArgumentError(f"spmm_hyb: an ELL block of {rows} x {slots} slots is too large for int32 positions")
    indptr = (np.arange(rows + 1, dtype=np.int64) * slots).astype(INDEX_DTYPE)
    return indptr, np.ascontiguousarray(ell.indices["j"].reshape(-1)), np.ascontiguousarray(ell.data.reshape(-1))


def _selection(rows: np.ndarray, m: int, dtype: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The CSR arrays of the m x len(rows) matrix with a 1 at (rows[r], r): out += it @ partial
    adds partial's row r into out's row rows[r] (rows distinct)."""
    counts = np.zeros(m, dtype=np.int64)
    counts[rows] = 1
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(INDEX_DTYPE)
    return indptr, np.argsort(rows, kind="stable").astype(INDEX_DTYPE), np.ones(rows.size, dtype=dtype)

def _split_partial(split: Split, B: np.ndarray, name: str, width: int) -> np.ndarray:
    """chunks @ B: one row of partial sums per chunk (on cache lines: the gather reads them by row)."""
    chunks = split.chunks
    partial = aligned_empty((chunks.shape[0], width), B.dtype)
    every = np.arange(chunks.shape[0], dtype=INDEX_DTYPE)
    compiled("spmm_ell", name, width, slots=split.width)(
        every, chunks.indices["j"].reshape(chunks.data.shape), chunks.data, B, partial)
    return partial


def _spmm_hyb_general(H: Hyb, B: np.ndarray, out: np.ndarray, name: str) -> np.ndarray:
    """spmm_hyb for a width without kernels of its own: the first partition's CSR rest sets every
    row (0 where it holds nothing), every other kernel adds into its rows."""
    width = B.shape[1]
    for number, part in enumerate(H.parts):
        rest = part.rest
        run_spmm_csr(name, width, rest.indptr["j"], rest.indices["j"], rest.data, B, out, accumulate=number > 0)
        for bucket in part.buckets:
            slots = bucket.ell.indices["j"].reshape(bucket.ell.data.shape)
            compiled("spmm_ell_acc", name, width, slots=bucket.width)(bucket.rows, slots, bucket.ell.data, B, out)
        if part.split is not None:
            partial = _split_partial(part.split, B, name, width)
            gather = part.split.gather
            run_spmm_csr(name, width, gather.indptr["j"], gather.indices["j"], gather.data, partial, out, accumulate=True)
    return out


# ----------------------------------------------------------------------------- format search
DEFAULT_CANDIDATES = (
    None,  # plain CSR
    dict(max_width=0, hot_columns=3072),  # the rows of B that 1.5 MiB holds at 512 bytes a row, first
    dict(max_width=8), dict(max_width=32), dict(max_width=32, column_parts=2), dict(max_width=32, column_parts=4),
    dict(max_width=32, split_long_rows=True),
)


@dataclass(frozen=True, eq=False)
class FormatChoice:
    """The result of `choose_format`: the fastest candidate's parameters (None: CSR), its matrix,
    and the best seconds per SpMM of every candidate, in the order tried."""

    params: dict | None
    matrix: Any
    seconds: tuple[tuple[dict | None, float], ...]

    def spmm(self, B: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        from .kernels import spmm

        return spmm(self.matrix, B, out) if self.params is None else spmm_hyb(self.matrix, B, out)


def choose_format(A: SparseMatrix, width: int, candidates=DEFAULT_CANDIDATES, repeat: int = 3,
                  seed: int = 0) -> FormatChoice:
    """Measure SpMM with a random dense operand of `width` columns for each candidate format (None:
    CSR; a dict: the parameters of format_decompose) and keep the fastest.  Every candidate's
    result is checked against CSR's before it is timed (an InternalError if one differs).
    `refcomp.sparse.tune_format` searches the parameters instead of a fixed list."""
    from .kernels import spmm

    A = _require_csr(A, "choose_format")
    if not isinstance(width, int) or width < 1 or not candidates:
        raise ArgumentError(f"choose_format: expected a positive width and candidates, got {width!r}, {candidates!r}")
    rng = np.random.default_rng(seed)
    B = rng.uniform(-1.0, 1.0, (A.shape[1], width)).astype(A.dtype)
    expected = spmm(A, B)
    tried: list[tuple[dict | None, float, Any]] = []
    for params in candidates:
        seconds, matrix = measure_format(A, B, expected, params, repeat, "choose_format")
        tried.append((params, seconds, matrix))
    params, _, matrix = min(tried, key=lambda t: t[1])
    return FormatChoice(params, matrix, tuple((p, s) for p, s, _ in tried))


def measure_format(A: SparseMatrix, B: np.ndarray, expected: np.ndarray, params: dict | None, repeat: int,
                   what: str) -> tuple[float, Any]:
    """(best seconds of `repeat` SpMMs, the matrix) for CSR A in the format params describes (None:
    CSR itself; a dict: format_decompose's parameters), after checking its product against
    `expected`, CSR's product A @ B (an InternalError when it differs)."""
    import time

    from ..errors import InternalError
    from .kernels import spmm

    if params is not None and params.get("hot_columns", 0) > A.shape[1]:
        params = dict(params, hot_columns=A.shape[1])  # every column (a fixed candidate on a small matrix)
    matrix = A if params is None else format_decompose(A, **params)
    out = np.empty_like(expected)
    run = (lambda: spmm(A, B, out)) if params is None else (lambda: spmm_hyb(matrix, B, out))
    run()
    tolerance = 1e-4 if A.dtype == np.float32 else 1e-10
    scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
    if not np.allclose(out, expected, rtol=tolerance, atol=tolerance * scale):
        raise InternalError(f"{what}: {params} gives a different product than CSR")
    best = float("inf")
    for _ in range(max(1, repeat)):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best, matrix
