"""SpMM and SDDMM over CSR (and ELL buckets, BSR) lowered to refcomp's loop IR (stage III).

CSR SpMM and SDDMM are written as stage I iterations (`spmm_iteration`, `sddmm_iteration`) and
lowered by `lower.py`; the ELL bucket and BSR kernels are written in the loop IR directly.  The
kernels are plain loop nests over flat position arrays.  Every indirect access reads an
index array; the facts that make it safe are stated with `assume(...)` right where the loaded
values come into scope, and they are exactly the format invariants `validate.py` checks once per
input array:

    for i in parallel(m):
        assume(0 <= indptr[i] <= indptr[i + 1] <= nnz)     # indptr non-decreasing, ends at nnz
        for j in range(indptr[i], indptr[i + 1]):
            assume(0 <= indices[j] < k)                      # indices within the dimension
            ... B[indices[j], f] ...

so `refcomp.build` proves every access in bounds from them (bounds="prove"), and a matrix that
would break one is rejected before the kernel runs.
"""
from __future__ import annotations

import functools
import threading
from typing import Any

import numpy as np

from ..ast import Allocate, Buffer, Call, FloatImm, Evaluate, For, IntImm, PrimFunc, SizeVar, Var, seq
from ..ast.stmt import BufferStore
from ..driver import build
from ..emit_c.codegen import OMP_SCHEDULE
from ..emit_c.toolchain import native_vector_bytes
from ..errors import ArgumentError
from .formats import SparseMatrix
from .iteration import SparseIteration, SparseScheduleError, SpBuffer, sp_axis, sp_iter
from .lower import lower_stage3
from .iteration import sparse_fuse, sparse_reorder
from .schedule import (
    GPU_POSITION_THREADS, bind_positions_to_gpu, bind_rows_to_gpu, partition_rows, prefetch_gathered_rows, row_parts,
    select_rows, split_gathered_rows, stream_output_rows, vectorize_row_tile,
)
from .validate import VALUE_DTYPES


# Row lengths of power-law graphs vary by orders of magnitude: hand rows out in dynamic chunks.
ROWS_DYNAMIC = {OMP_SCHEDULE: "dynamic"}


def _width(width: int | None) -> Any:
    """The feature width: a size variable, or a constant that lets gcc unroll and vectorise fully."""
    if width is None:
        return SizeVar("n")
    if not isinstance(width, int) or width < 1:
        raise ArgumentError(f"sparse kernels: width must be a positive int or None, got {width!r}")
    return IntImm(width)


def _assume(condition: Any) -> Evaluate:
    return Evaluate(Call("assume", (condition,), "bool"))


def _zero(dtype: str) -> FloatImm:
    return FloatImm(0.0, dtype)


def _dtype_name(dtype: Any) -> str:
    dtype = np.dtype(dtype)
    if dtype not in VALUE_DTYPES:
        raise ArgumentError(f"sparse kernels: values must be float32 or float64, got {dtype}")
    return str(dtype)


def spmm_iteration(dtype: str = "float32", width: int | None = None, accumulate: bool = False) -> SparseIteration:
    """Stage I of CSR SpMM: C[i, f] += A[i, j] * B[j, f] over (I, J, F) "SRS" (accumulate: C is
    not set to 0 first).  B's rows are counted in int64 (`k`): the offset of a gathered row,
    `indices[j] * n`, is then computed in 64 bits and folds into the loads' addresses (the int32
    product, sign-extended per load, cost 11-12% at width 32)."""
    m, k, n, nnz = SizeVar("m"), SizeVar("k", "int64"), _width(width), SizeVar("nnz")
    I, F, K = sp_axis("I", "dense_fixed", m), sp_axis("F", "dense_fixed", n), sp_axis("K", "dense_fixed", k)
    J = sp_axis("J", "sparse_variable", k, parent=I, nnz=nnz)
    A, B, C = SpBuffer("A", (I, J), dtype), SpBuffer("B", (K, F), dtype), SpBuffer("C", (I, F), dtype)
    return sp_iter(f"spmm_csr_{dtype}", [(I, "S"), (J, "R"), (F, "S")], C,
                   lambda i, j, f: ((i, f), A[i, j] * B[j, f]), [A, B, C], init=not accumulate)


def spmm_csr_func(dtype: str = "float32", width: int | None = None, accumulate: bool = False) -> PrimFunc:
    """C[m, n] = A[m, k] @ B[k, n] (accumulate: C += A @ B) with A in CSR (indptr, indices, data):
    stage III of spmm_iteration."""
    return lower_stage3(spmm_iteration(dtype, width, accumulate))


# The row tile of the scheduled CSR SpMM, in vector registers: 8 of the 32 (AVX-512) or 16 (AVX2)
# the CPU has, so that the tile's sums, the broadcast value and B's loads fit without spilling.
ROW_TILE_VECTORS = 8


def row_tile_lanes(dtype: str) -> tuple[int, int]:
    """(row tile, lanes): the elements of dtype in one native vector register, and ROW_TILE_VECTORS
    such registers."""
    lanes = max(1, native_vector_bytes() // np.dtype(dtype).itemsize)
    return ROW_TILE_VECTORS * lanes, lanes


# Gathered rows of at least this many bytes are prefetched ahead (`prefetch_gathered_rows`), by
# PREFETCH_PLAN: (distance in entries, leading lines or None for the whole row) per call.  A CSR
# SpMM gathering 512-byte rows from a B far larger than L2 is bound by the misses one core keeps in
# flight (the L1 line fill buffers: 16, at about 60-80 ns each).  The first two lines of the row
# 32 entries ahead start the rows early (the hardware's stream prefetcher takes the rest of the
# row into L2 without a fill buffer), the whole row 8 entries ahead brings it into L1.  Measured
# with one thread (CPU time, f128, 2-core AVX-512 Xeon, shared): against the whole row 16 ahead,
# 1.06-1.08x on R-MAT 2^18 and 1.06-1.10x on BA 100k; that against no prefetch, +1-13%.  At 128
# bytes (32 float32) with B on cache lines prefetches gave nothing or a loss, and are not made.
PREFETCH_MIN_ROW_BYTES = 512
PREFETCH_PLAN: tuple[tuple[int, int | None], ...] = ((32, 2), (8, None))


def _prefetched(func: PrimFunc, dtype: str, width: int | None, prefetch: bool | None) -> PrimFunc:
    """func with B's rows prefetched ahead where `prefetch` says (None: by PREFETCH_MIN_ROW_BYTES),
    as PREFETCH_PLAN says."""
    if prefetch is None:
        prefetch = width is not None and width * np.dtype(dtype).itemsize >= PREFETCH_MIN_ROW_BYTES
    if not prefetch:
        return func
    for distance, lines in PREFETCH_PLAN:
        func = prefetch_gathered_rows(func, "B", distance, lines)
    return func


def _row_tile_for(width: int, tile: int, lanes: int) -> int | None:
    """The row tile for a width: `tile` (or the whole width below it) where that divides the
    width, else the widest multiple of the vector lanes below it that does (48 float64 with AVX2's
    tile of 32: 24), None where none does (the plain row loop)."""
    if width % min(width, tile) == 0:
        return tile
    return next((t for t in range(tile - tile % lanes, 0, -lanes) if width % t == 0), None)


def spmm_csr_scheduled(dtype: str = "float32", width: int | None = None, accumulate: bool = False,
                       prefetch: bool | None = None, stream: bool = False, hot: bool = False) -> PrimFunc:
    """The CSR SpMM that `spmm` runs: stage III with the output row in a tile of vector registers
    (`lower_stage3(row_tile=...)`, then split / vectorize / unroll of the tile loops), B's rows
    prefetched ahead when they are long (`prefetch` None: PREFETCH_MIN_ROW_BYTES and more; a
    constant width only) and the rows partitioned by stored entries (`partition_rows`: the kernel
    takes `parts` first, see `row_parts`).  A width that is not a constant keeps the plain row
    loop body.  stream: the output rows written with streaming stores (`stream_output_rows`; C
    must then start on a cache line).  hot: the rows gathered from `B_hot` (a packed copy of the
    frequently gathered rows) or B by the renumbered index (`split_gathered_rows`, `hot_labels`;
    the kernel takes B_hot before B)."""
    it = spmm_iteration(dtype, width, accumulate)
    if width is None:
        return partition_rows(lower_stage3(it))
    tile, lanes = row_tile_lanes(dtype)
    tile = _row_tile_for(width, tile, lanes)
    if tile is None:
        if hot or stream:
            raise SparseScheduleError(f"spmm_csr_scheduled: width {width} has no row tile of {lanes}-lane vectors "
                                      "for the hot-row or streaming form")
        return partition_rows(lower_stage3(it))
    func = _prefetched(vectorize_row_tile(lower_stage3(it, row_tile=tile), lanes), dtype, width, prefetch)
    func = partition_rows(split_gathered_rows(func) if hot else func)
    return stream_output_rows(func) if stream else func



def spmm_csr_gpu(dtype: str = "float32", width: int = 128, accumulate: bool = False,
                 threads: int | None = None, rows_per_block: int | None = None) -> PrimFunc:
    """The CSR SpMM for a GPU (`refcomp.build(..., target="cuda")`): spmm_iteration ordered
    I, F, J (`sparse_reorder`: each output element's sum over the row's entries innermost, in a
    local register), lowered to stage III, then `bind_rows_to_gpu`: a block per row, a thread per
    column of the output row (per `threads`-th column where the width is longer), several rows a
    block (threadIdx.y) where the width is narrow.  Neighbouring threads read neighbouring elements
    of each gathered row of B, so the loads coalesce.  width: a positive int (the feature axis
    must have a constant extent to be bound)."""
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ArgumentError(f"spmm_csr_gpu: width must be a positive int, got {width!r}")
    it = sparse_reorder(spmm_iteration(_dtype_name(dtype), width, accumulate), ["I", "F", "J"])
    return bind_rows_to_gpu(lower_stage3(it), threads, rows_per_block)

def run_spmm_csr_rows(dtype: str, width: int, rows: np.ndarray, indptr: np.ndarray, indices: np.ndarray,
                      data: np.ndarray, B: np.ndarray, out: np.ndarray, accumulate: bool = False,
                      parts: np.ndarray | None = None, stream: bool = False) -> None:
    """out[rows] (+)= CSR(indptr, indices, data)[rows] @ B (rows distinct, checked by the caller),
    for a width in SPECIALISED_WIDTHS (else an ArgumentError).  parts: `row_list_parts(indptr,
    rows)`, computed here when not given.  stream: with streaming stores where `streams(out)`."""
    if width not in SPECIALISED_WIDTHS:
        raise ArgumentError(f"spmm over a row list: width {width} has no kernel (one of {SPECIALISED_WIDTHS})")
    kind = ("spmm_csr_rows_acc" if accumulate else "spmm_csr_rows") + ("_stream" if stream and streams(out) else "")
    compiled(kind, dtype, width)(parts if parts is not None else row_list_parts(indptr, rows),
                                 rows, indptr, indices, data, B, out)


# Outputs of at least this many bytes are written with streaming stores (`stream_output_rows`) by
# the kernels that write each output row once: no line is read before it is written, and the
# output does not push the gathered rows of B out of the caches.  Measured with one thread (CPU
# time): CSR f128 1.06-1.15x on R-MAT 2^18 (128 MiB of output), 1.05-1.10x on BA 100k (51 MiB);
# f32 on R-MAT (32 MiB) 0.96x, on BA (13 MiB) 0.96x.
STREAM_MIN_BYTES = 48 << 20


def streams(out: np.ndarray) -> bool:
    """Whether a kernel writing out whole rows once should use streaming stores: out starts on a
    cache line, its rows are whole lines of a specialised width, and it has STREAM_MIN_BYTES."""
    return (out.ndim == 2 and out.nbytes >= STREAM_MIN_BYTES and out.ctypes.data % CACHE_LINE == 0
            and out.shape[1] in SPECIALISED_WIDTHS and (out.shape[1] * out.itemsize) % CACHE_LINE == 0
            and out.flags.c_contiguous)


def row_list_parts(indptr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """`row_parts` over the listed rows: runs of the list holding about the same number of entries."""
    lengths = indptr[rows + 1] - indptr[rows]
    return row_parts(np.concatenate(([0], np.cumsum(lengths, dtype=np.int64))))


# Staging of the dense operand whose rows SpMM gathers (see `stage_rows`).
CACHE_LINE = 64
STAGE_MIN_BYTES = 1 << 20   # a smaller B stays in L2, where a row over three lines costs little
STAGE_MIN_REUSE = 4         # stored entries per row of B: below this the copy costs what it saves
STAGE_MAX_ROW_BYTES = 256   # a row of L whole lines spans L + 1 misaligned: past 4 lines, too little
STAGE_MAX_BYTES = 1 << 28   # the buffer is kept for the next call: no more than this
_stage = threading.local()


def copy_rows_func(dtype: str, width: int | None = None) -> PrimFunc:
    """D[r, f] = S[r, f], the rows in parallel (the copy `stage_rows` makes)."""
    k, n = SizeVar("k"), _width(width)
    S, D = Buffer("S", (k, n), dtype), Buffer("D", (k, n), dtype)
    r, f = Var("r"), Var("f")
    body = For(r, IntImm(0), k, "parallel", For(f, IntImm(0), n, "serial", BufferStore(D, S[r, f], (r, f))))
    return PrimFunc((S, D), body, f"copy_rows_{dtype}")


def gather_rows_func(dtype: str, width: int | None = None) -> PrimFunc:
    """D[r, f] = S[order[r], f], the rows in parallel (B copied in the matrix's column order, or its
    hot rows packed, for a relabeled SpMM); order's entries are rows of S (the caller's invariant,
    assumed here as the format invariants are)."""
    k, rows, n = SizeVar("k", "int64"), SizeVar("r", "int64"), _width(width)
    S, D, order = Buffer("S", (k, n), dtype), Buffer("D", (rows, n), dtype), Buffer("order", (rows,), "int32")
    r, f = Var("r", "int64"), Var("f")
    row = order[r]
    body = For(r, IntImm(0, "int64"), rows, "parallel", seq(
        _assume((row >= 0) & (row < k)),
        For(f, IntImm(0), n, "serial", BufferStore(D, S[row, f], (r, f)))))
    return PrimFunc((order, S, D), body, f"gather_rows_{dtype}")


def aligned_empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised C-contiguous array that starts on a cache line (for an operand whose rows a
    kernel gathers, written by its producer in place: no `stage_rows` copy later)."""
    dtype = np.dtype(dtype)
    size = int(np.prod(shape)) * dtype.itemsize
    backing = np.empty(size + CACHE_LINE, np.uint8)
    start = (-backing.ctypes.data) % CACHE_LINE
    return backing[start: start + size].view(dtype).reshape(shape)


def scratch_empty(name: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised C-contiguous array on a cache line for a temporary that one call makes and
    drops (RGCN's summed neighbours), from a buffer kept per thread and per `name` (of the largest
    size asked): a large fresh array costs its page faults on every call (100 MB: about 6 ms).
    The next request under the same name on the same thread reuses the memory."""
    dtype = np.dtype(dtype)
    size = int(np.prod(shape)) * dtype.itemsize
    kept = _stage.__dict__.setdefault("scratch", {})
    backing = kept.get(name)
    if backing is None or backing.size < size + CACHE_LINE:
        backing = kept[name] = np.empty(size + CACHE_LINE, np.uint8)
    start = (-backing.ctypes.data) % CACHE_LINE
    return backing[start: start + size].view(dtype).reshape(shape)


# Columns relabeled by degree where the copy is made anyway (see `column_order`): the hot rows of B
# that half of L2 would hold, and how many times more 4 KiB pages they span than they would packed.
RELABEL_HOT_BYTES = 1 << 20
RELABEL_MIN_SPREAD = 4


def hot_columns(indices: np.ndarray, k: int, row_bytes: int) -> np.ndarray | None:
    """The RELABEL_HOT_BYTES / row_bytes columns that hold the most stored entries (ties: the lower
    column), in increasing order (int32), where they are scattered over B: they span at least
    RELABEL_MIN_SPREAD times the 4 KiB pages they would fill packed together; else None.  R-MAT's
    frequent columns (few one bits in their number) are spread over all of B; a Barabasi-Albert
    graph's (its oldest nodes) lie near its start already."""
    if k == 0 or row_bytes <= 0:
        return None
    hot = most_used_columns(indices, k, _hot_count(k, row_bytes))
    pages = np.unique(hot.astype(np.int64) * row_bytes // 4096).size
    if pages < RELABEL_MIN_SPREAD * -(-hot.size * row_bytes // 4096):
        return None
    return hot.astype(np.int32)


def _hot_count(k: int, row_bytes: int) -> int:
    return max(1, min(k, RELABEL_HOT_BYTES // row_bytes))


def column_order(indices: np.ndarray, k: int, row_bytes: int) -> np.ndarray | None:
    """The columns with the `hot_columns` first, then the others, each group in increasing column
    order (int32), or None where `hot_columns` is None.  An SpMM gathering from B copied in this
    order (row r of the copy is row order[r] of B; apart from the hot rows the copy reads B in
    order, as the plain one does) finds the frequently gathered rows side by side."""
    hot = hot_columns(indices, k, row_bytes)
    return None if hot is None else hot_first(hot, k).astype(np.int32)


def most_used_columns(indices: np.ndarray, k: int, count: int) -> np.ndarray:
    """The `count` of k columns that hold the most stored entries (ties: the lower column), in
    increasing order."""
    return np.sort(np.argsort(-np.bincount(indices, minlength=k), kind="stable")[:count])


def hot_first(hot: np.ndarray, k: int) -> np.ndarray:
    """The k columns with `hot` (increasing) first, then the others in increasing order (int64)."""
    cold = np.ones(k, dtype=bool)
    cold[hot] = False
    return np.concatenate([hot, np.flatnonzero(cold)]).astype(np.int64)


def order_labels(order: np.ndarray) -> np.ndarray:
    """The new number of each column for B copied in `order` (column order[r] becomes r)."""
    label = np.empty(order.size, dtype=np.int64)
    label[order] = np.arange(order.size)
    return label


def hot_labels(hot: np.ndarray, k: int) -> np.ndarray:
    """The new number of each column for `split_gathered_rows`: hot column hot[r] becomes r, any
    other column c becomes len(hot) + c (row c of B itself)."""
    label = np.arange(k, dtype=np.int64) + hot.size
    label[hot] = np.arange(hot.size)
    return label


def relabeled(label: np.ndarray, indptr: np.ndarray, indices: np.ndarray,
              data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(indices, data) of the same CSR matrix with column c numbered label[c] (`order_labels`,
    `hot_labels`), each row's entries sorted by their new column (read-only): a row then walks its
    packed frequent rows first and the others upwards.  Measured on R-MAT 2^18 at width 32 (one
    thread, CPU time, the kernel alone, B copied in `column_order`): 1.2x with the rows sorted
    (every column by degree 1.25x), 1.04x with the entries in their old order; the entries sorted
    by column degree with B as it was 1.03x; B in a random order 0.97x."""
    if label.size and int(label.max()) > np.iinfo(np.int32).max:
        raise ArgumentError(f"spmm: {int(label.max())} columns after renumbering do not fit int32 indices")
    rows = np.repeat(np.arange(indptr.size - 1, dtype=np.int64), np.diff(indptr))
    sort = np.argsort(rows * (int(label.max()) + 1 if label.size else 1) + label[indices], kind="stable")
    new_indices, new_data = label[indices][sort].astype(np.int32), data[sort]
    new_indices.flags.writeable = False
    new_data.flags.writeable = False
    return new_indices, new_data


def stage_rows(B: np.ndarray, nnz: int, force: bool = False, order: np.ndarray | None = None) -> np.ndarray:
    """B, or a copy of it whose rows start on cache-line boundaries, for an SpMM that gathers `nnz`
    rows of it.  A gathered row of 32 float32 (128 bytes) spans two cache lines when B starts on a
    line boundary and three when it does not (numpy aligns to 16 bytes), and the random gathers
    are paid per line: the copy is made when B does not start on a line, its rows are whole lines
    of at most STAGE_MAX_ROW_BYTES, it has STAGE_MIN_BYTES to STAGE_MAX_BYTES and each row is read
    STAGE_MIN_REUSE times on average (`force`: whenever B is misaligned and its rows are whole
    lines).  The copy goes to a buffer kept per thread for the next call (one, of the largest size
    seen), by a parallel kernel.  B: 2-D and C-contiguous (else it is returned as it is).  order
    (a permutation of B's rows, int32, e.g. `column_order`): where the copy is made, its row r is
    B's row order[r] (`gather_rows_func`); the caller knows it was by the result not being B."""
    if B.ndim != 2 or not B.flags.c_contiguous or B.size == 0:
        return B
    row_bytes = B.shape[1] * B.itemsize
    if B.ctypes.data % CACHE_LINE == 0 or row_bytes % CACHE_LINE:
        return B
    if not force and (B.nbytes < STAGE_MIN_BYTES or B.nbytes > STAGE_MAX_BYTES or row_bytes > STAGE_MAX_ROW_BYTES
                      or nnz < STAGE_MIN_REUSE * B.shape[0]):
        return B
    backing = getattr(_stage, "backing", None)
    if backing is None or backing.size < B.nbytes + CACHE_LINE:
        backing = _stage.backing = np.empty(B.nbytes + CACHE_LINE, np.uint8)
    start = (-backing.ctypes.data) % CACHE_LINE
    staged = backing[start: start + B.nbytes].view(B.dtype).reshape(B.shape)
    if order is not None:
        if order.shape != (B.shape[0],) or order.dtype != np.int32:
            raise ArgumentError(f"stage_rows: order must be {B.shape[0]} int32 rows, got {order.dtype} {order.shape}")
        compiled("gather_rows", str(B.dtype), B.shape[1])(order, B, staged)
    else:
        compiled("copy_rows", str(B.dtype), B.shape[1])(B, staged)
    return staged


def run_spmm_csr(dtype: str, width: int, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray,
                 B: np.ndarray, out: np.ndarray, accumulate: bool = False, parts: np.ndarray | None = None,
                 stream: bool = False, hot: np.ndarray | None = None) -> None:
    """out (+)= CSR(indptr, indices, data) @ B with the scheduled kernel (arrays validated by the
    caller); parts: `row_parts(indptr)`, computed here when not given; stream: with streaming
    stores where `streams(out)`; hot: the packed hot rows of B for indices renumbered by
    `hot_labels` (a width in SPECIALISED_WIDTHS)."""
    kind = ("spmm_csr_acc" if accumulate else "spmm_csr") + ("_hot" if hot is not None else "") + \
        ("_stream" if stream and streams(out) else "")
    parts = row_parts(indptr) if parts is None else parts
    if hot is None:
        compiled(kind, dtype, width)(parts, indptr, indices, data, B, out)
    else:
        compiled(kind, dtype, width)(parts, indptr, indices, data, hot, B, out)


def spmm_ell_func(dtype: str = "float32", width: int | None = None, accumulate: bool = False,
                  slots: int | None = None, row_tile: int | None = None) -> PrimFunc:
    """C[rows[r], :] = sum_s data[r, s] * B[indices[r, s], :] for the r rows of one ELL bucket
    (accumulate: += instead of =; the rows must be distinct either way).  slots: the bucket's
    width as a constant (the slot loop then has a fixed trip count), or None for any.  row_tile
    (a constant width only): each row's sums in a local tile of that many elements, stored once
    per row, as `lower_stage3(row_tile=...)` does for CSR (`vectorize_row_tile` applies)."""
    m, k, n, r = SizeVar("m"), SizeVar("k"), _width(width), SizeVar("r")
    w = SizeVar("w") if slots is None else IntImm(slots)
    rows = Buffer("rows", (r,), "int32")
    indices = Buffer("indices", (r, w), "int32")
    data = Buffer("data", (r, w), dtype)
    B, C = Buffer("B", (k, n), dtype), Buffer("C", (m, n), dtype)
    i, s, f, f0 = Var("i"), Var("s"), Var("f"), Var("f0")
    row, col = rows[i], indices[i, s]
    name = f"spmm_ell{'' if slots is None else slots}_{dtype}" + ("_acc" if accumulate else "")
    tile = 0
    if row_tile is not None and width is not None:
        tile = min(width, row_tile) if width % min(width, row_tile) == 0 else 0
    if tile:
        body = _ell_row_tile(dtype, tile, width, row, col, data[i, s], B, C, accumulate, (s, w))
        name += f"_t{tile}"
    else:
        update = BufferStore(C, C[row, f] + data[i, s] * B[col, f], (row, f))
        loop = For(s, IntImm(0), w, "serial", seq(_assume((col >= 0) & (col < k)), For(f, IntImm(0), n, "serial", update)))
        zero = None if accumulate else For(f0, IntImm(0), n, "serial", BufferStore(C, _zero(dtype), (row, f0)))
        body = seq(zero, loop)
    body = For(i, IntImm(0), r, "parallel", annotations=ROWS_DYNAMIC, body=seq(_assume((row >= 0) & (row < m)), body))
    return PrimFunc((rows, indices, data, B, C), body, name)


def _ell_row_tile(dtype: str, tile: int, width: int, row: Any, col: Any, value: Any, B: Buffer, C: Buffer,
                  accumulate: bool, slot_loop: tuple[Var, Any]) -> Any:
    """One ELL row in tiles of `tile` elements: acc = 0 (or C's row), the slots added, C's row
    stored once (the loop shapes `vectorize_row_tile` looks for)."""
    acc = Buffer("acc", (tile,), dtype, scope="local")
    outer = Var("f_o", "int32") if width > tile else None
    fz, fu, fw = Var("f_z", "int32"), Var("f_u", "int32"), Var("f_w", "int32")

    def column(lane: Var) -> Any:
        return lane if outer is None else outer * tile + lane
    start = C[row, column(fz)] if accumulate else _zero(dtype)
    k = B.shape[0]
    update = For(fu, IntImm(0), IntImm(tile), "serial", BufferStore(acc, acc[fu] + value * B[col, column(fu)], (fu,)))
    body = Allocate(acc, seq(
        For(fz, IntImm(0), IntImm(tile), "serial", BufferStore(acc, start, (fz,))),
        For(slot_loop[0], IntImm(0), slot_loop[1], "serial", seq(_assume((col >= 0) & (col < k)), update)),
        For(fw, IntImm(0), IntImm(tile), "serial", BufferStore(C, acc[fw], (row, column(fw))))))
    return body if outer is None else For(outer, IntImm(0), IntImm(width // tile), "serial", body)


def spmm_csr_rows_scheduled(dtype: str, width: int, accumulate: bool, stream: bool = False) -> PrimFunc:
    """CSR SpMM over a list of rows (`select_rows`): C[rows[q], :] (+)= A[rows[q], :] @ B, the other
    rows untouched; the rows partitioned by stored entries and tiled as in spmm_csr_scheduled (the
    kernel takes parts, rows, then the CSR arrays); stream: streaming stores to C."""
    tile, lanes = row_tile_lanes(dtype)
    func = lower_stage3(spmm_iteration(dtype, width, accumulate), row_tile=tile)
    func = partition_rows(select_rows(_prefetched(vectorize_row_tile(func, lanes), dtype, width, None)))
    return stream_output_rows(func) if stream else func


def spmm_bsr_func(dtype: str = "float32", block: tuple[int, int] = (2, 2), width: int | None = None) -> PrimFunc:
    """C[mb, R, n] = A @ B[kb, Cb, n] for BSR A with R x Cb blocks (the dense operands viewed by block)."""
    r, c = block
    if not all(isinstance(v, int) and v >= 1 for v in block):
        raise ArgumentError(f"spmm_bsr_func: block must be two positive ints, got {block!r}")
    mb, kb, n, nnzb = SizeVar("mb"), SizeVar("kb"), _width(width), SizeVar("nnzb")
    indptr = Buffer("indptr", (mb + 1,), "int32")
    indices = Buffer("indices", (nnzb,), "int32")
    data = Buffer("data", (nnzb, r, c), dtype)
    B, C = Buffer("B", (kb, c, n), dtype), Buffer("C", (mb, r, n), dtype)
    io, p, ii, ji, f, i0, f0 = (Var(name) for name in ("io", "p", "ii", "ji", "f", "i0", "f0"))
    lo, hi, col = indptr[io], indptr[io + 1], indices[p]
    update = BufferStore(C, C[io, ii, f] + data[p, ii, ji] * B[col, ji, f], (io, ii, f))
    block_loops = For(ii, IntImm(0), IntImm(r), "serial", For(ji, IntImm(0), IntImm(c), "serial",
                                                              For(f, IntImm(0), n, "serial", update)))
    blocks = For(p, lo, hi - lo, "serial", seq(_assume((col >= 0) & (col < kb)), block_loops))
    zero = For(i0, IntImm(0), IntImm(r), "serial",
               For(f0, IntImm(0), n, "serial", BufferStore(C, _zero(dtype), (io, i0, f0))))
    body = For(io, IntImm(0), mb, "parallel", annotations=ROWS_DYNAMIC, body=seq(
        _assume((lo >= 0) & (lo <= hi) & (hi <= nnzb)), zero, blocks))
    return PrimFunc((indptr, indices, data, B, C), body, f"spmm_bsr{r}x{c}_{dtype}")


def sddmm_iteration(dtype: str = "float32", width: int | None = None) -> SparseIteration:
    """Stage I of SDDMM: out[i, j] += A[i, j] * X[i, f] * Y[j, f] over (I, J, F) "SSR"."""
    m, k, n, nnz = SizeVar("m"), SizeVar("k"), _width(width), SizeVar("nnz")
    I, F, K = sp_axis("I", "dense_fixed", m), sp_axis("F", "dense_fixed", n), sp_axis("K", "dense_fixed", k)
    J = sp_axis("J", "sparse_variable", k, parent=I, nnz=nnz)
    A, X, Y = SpBuffer("A", (I, J), dtype), SpBuffer("X", (I, F), dtype), SpBuffer("Y", (K, F), dtype)
    out = SpBuffer("out", (I, J), dtype)
    return sp_iter(f"sddmm_csr_{dtype}", [(I, "S"), (J, "S"), (F, "R")], out,
                   lambda i, j, f: ((i, j), A[i, j] * X[i, f] * Y[j, f]), [A, X, Y, out])


def sddmm_func(dtype: str = "float32", width: int | None = None) -> PrimFunc:
    """out[p] = data[p] * dot(X[i, :], Y[indices[p], :]) for each stored entry p = (i, j) of CSR A:
    stage III of sddmm_iteration."""
    return lower_stage3(sddmm_iteration(dtype, width))



def sddmm_gpu(dtype: str = "float32", width: int | None = None, threads: int = GPU_POSITION_THREADS) -> PrimFunc:
    """The SDDMM for a GPU (`refcomp.build(..., target="cuda")`): sddmm_iteration with the row and
    entry axes fused (`sparse_fuse`: one loop over the stored positions, the row of each found by
    binary search in indptr), lowered to stage III, then `bind_positions_to_gpu`: a thread per
    stored entry, `threads` to a block, so blocks are balanced by entries whatever the row
    lengths.  Each thread computes its entry's whole dot product."""
    it = sparse_fuse(sddmm_iteration(_dtype_name(dtype), width), ["I", "J"])
    return bind_positions_to_gpu(lower_stage3(it), threads)

# Feature widths that get a kernel of their own (constant trip count); others use the general one.
SPECIALISED_WIDTHS = (16, 32, 64, 128, 256)
SPECIALISED_SLOTS = (1, 2, 4, 8, 16, 32)


@functools.lru_cache(maxsize=None)
def _built(kind: str, dtype: str, width: int | None, block: tuple[int, int] | None, slots: int | None) -> Any:
    if kind == "spmm_bsr":
        return build(spmm_bsr_func(dtype, block, width), bounds="prove")
    if kind in ("spmm_ell", "spmm_ell_acc"):
        func = spmm_ell_func(dtype, width, accumulate=kind == "spmm_ell_acc", slots=slots,
                             row_tile=None if width is None else row_tile_lanes(dtype)[0])
        if width is not None:
            func = vectorize_row_tile(func, row_tile_lanes(dtype)[1])
        return build(func, bounds="prove")
    stream = kind.endswith("_stream")
    if kind.startswith("spmm_csr_rows"):
        return build(spmm_csr_rows_scheduled(dtype, width, accumulate="_acc" in kind, stream=stream), bounds="prove")
    if kind.startswith("spmm_csr"):
        return build(spmm_csr_scheduled(dtype, width, accumulate="_acc" in kind, stream=stream, hot="_hot" in kind),
                     bounds="prove")
    if kind == "copy_rows":
        return build(copy_rows_func(dtype, width), bounds="prove")
    if kind == "gather_rows":
        return build(gather_rows_func(dtype, width), bounds="prove")
    make = {"spmm_ell": spmm_ell_func, "sddmm": sddmm_func}[kind]
    return build(make(dtype, width), bounds="prove")


def compiled(kind: str, dtype: str, width: int | None = None, block: tuple[int, int] | None = None,
             slots: int | None = None) -> Any:
    """The built kernel (proved in bounds) for kind in spmm_csr / spmm_ell / spmm_bsr / sddmm /
    copy_rows (and spmm_csr_acc / spmm_ell_acc, which add to the output; the CSR SpMM kernels are
    `spmm_csr_scheduled`'s and take the row partition first, see `run_spmm_csr`); ELL buckets of a width in
    SPECIALISED_SLOTS get a kernel with that many slots fixed."""
    return _built(kind, dtype, width if width in SPECIALISED_WIDTHS else None, block,
                  slots if slots in SPECIALISED_SLOTS else None)


def _dense(name: str, array: Any, rows: int, dtype: np.dtype) -> np.ndarray:
    if not isinstance(array, np.ndarray) or array.ndim != 2:
        raise ArgumentError(f"{name}: expected a 2-D numpy array, got {getattr(array, 'shape', type(array).__name__)}")
    if array.shape[0] != rows:
        raise ArgumentError(f"{name}: expected {rows} rows, got {array.shape[0]}")
    if array.dtype != dtype:
        raise ArgumentError(f"{name}: expected dtype {dtype} (the sparse matrix's), got {array.dtype}")
    return np.ascontiguousarray(array)


def _require_csr(A: Any, what: str) -> SparseMatrix:
    if not isinstance(A, SparseMatrix) or A.format != "csr":
        raise ArgumentError(f"{what}: expected a CSR SparseMatrix, got "
                            f"{getattr(A, 'format', type(A).__name__)}")
    return A


def _gpu_target(what: str, target: Any) -> str | None:
    """None for the CPU ("c"), the target string for a GPU (one starting with "cuda"), else an
    ArgumentError."""
    if target == "c":
        return None
    if isinstance(target, str) and target.split(" ", 1)[0] == "cuda":
        return target
    raise ArgumentError(f"{what}: target must be 'c' or a CUDA target ('cuda ...'), got {target!r}")


@functools.lru_cache(maxsize=None)
def _built_gpu(kind: str, dtype: str, width: int | None, target: str) -> Any:
    func = sddmm_gpu(dtype, width) if kind == "sddmm" else spmm_csr_gpu(dtype, width, accumulate=kind == "spmm_acc")
    return build(func, target=target, bounds="prove")


def spmm(A: SparseMatrix, B: np.ndarray, out: np.ndarray | None = None, target: str = "c") -> np.ndarray:
    """A @ B for CSR, BSR or ELL A (validated when it was built) and a dense B of A's value type.
    target "cuda" (a CUDA target string): CSR A only, `spmm_csr_gpu` for B's width, built by nvcc
    (cached per width) and run on the GPU, the arrays copied there and `out` back."""
    gpu = _gpu_target("spmm", target)
    if gpu is not None:
        A = _require_csr(A, "spmm")
        B = _dense("spmm: B", B, A.shape[1], A.dtype)
        out = _output("spmm", out, (A.shape[0], B.shape[1]), A.dtype)
        _built_gpu("spmm", _dtype_name(A.dtype), int(B.shape[1]), gpu)(A.indptr["j"], A.indices["j"], A.data, B, out)
        return out
    if isinstance(A, SparseMatrix) and A.format == "bsr":
        return _spmm_bsr(A, B, out)
    if isinstance(A, SparseMatrix) and A.format == "ell":
        return _spmm_ell(A, B, out)
    A = _require_csr(A, "spmm")
    m, k = A.shape
    B = _dense("spmm: B", B, k, A.dtype)
    out = _output("spmm", out, (m, B.shape[1]), A.dtype)
    width, row_bytes = B.shape[1], B.shape[1] * B.itemsize
    order = A.derived(f"column_order_{row_bytes}", lambda: column_order(A.indices["j"], k, row_bytes))
    staged = stage_rows(B, A.data.size, order=order)
    indices, data, hot_rows = A.indices["j"], A.data, None
    if order is not None and staged is not B:  # B copied in the matrix's column order
        indices, data = A.derived(f"relabeled_{row_bytes}",
                                  lambda: relabeled(order_labels(order), A.indptr["j"], A.indices["j"], A.data))
    elif order is not None and width in SPECIALISED_WIDTHS and B.nbytes >= STAGE_MIN_BYTES and \
            A.data.size >= STAGE_MIN_REUSE * k:
        # B as it is, its hot rows (the first of `order`) packed into a small copy (split_gathered_rows)
        hot = order[: _hot_count(k, row_bytes)]
        indices, data = A.derived(f"hot_relabeled_{row_bytes}",
                                  lambda: relabeled(hot_labels(hot, k), A.indptr["j"], A.indices["j"], A.data))
        hot_rows = scratch_empty("hot_rows", (hot.size, width), B.dtype)
        compiled("gather_rows", str(B.dtype), width)(hot, B, hot_rows)
    parts = A.derived("row_parts", lambda: row_parts(A.indptr["j"]))
    run_spmm_csr(_dtype_name(A.dtype), width, A.indptr["j"], indices, data, staged, out, parts=parts,
                 stream=True, hot=hot_rows)
    return out


def _output(what: str, out: Any, shape: tuple[int, int], dtype: np.dtype) -> np.ndarray:
    if out is None:
        return aligned_empty(shape, dtype)  # whole rows on whole cache lines where they can be
    if not isinstance(out, np.ndarray) or out.shape != shape or out.dtype != dtype or not out.flags.c_contiguous:
        raise ArgumentError(f"{what}: out must be a C-contiguous {dtype} array of shape {shape}, got "
                            f"{getattr(out, 'dtype', type(out).__name__)} {getattr(out, 'shape', '')}")
    return out


def _spmm_ell(A: SparseMatrix, B: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    m, k = A.shape
    B = _dense("spmm: B", B, k, A.dtype)
    out = _output("spmm", out, (m, B.shape[1]), A.dtype)
    rows = np.arange(m, dtype=np.int32)
    compiled("spmm_ell", _dtype_name(A.dtype), B.shape[1])(rows, A.indices["j"].reshape(A.data.shape), A.data, B, out)
    return out


def _spmm_bsr(A: SparseMatrix, B: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    m, k = A.shape
    B = _dense("spmm: B", B, k, A.dtype)
    width = B.shape[1]
    out = _output("spmm", out, (m, width), A.dtype)
    _, r, c = A.data.shape
    kernel = compiled("spmm_bsr", _dtype_name(A.dtype), width, (r, c))
    kernel(A.indptr["jo"], A.indices["jo"], A.data, B.reshape(k // c, c, width), out.reshape(m // r, r, width))
    return out


def sddmm(A: SparseMatrix, X: np.ndarray, Y: np.ndarray, target: str = "c") -> np.ndarray:
    """The values A * (X @ Y.T) at A's stored positions (CSR A, its value order).  target "cuda"
    (a CUDA target string): `sddmm_gpu` for the width, built by nvcc and run on the GPU."""
    gpu = _gpu_target("sddmm", target)
    A = _require_csr(A, "sddmm")
    m, k = A.shape
    X = _dense("sddmm: X", X, m, A.dtype)
    Y = _dense("sddmm: Y", Y, k, A.dtype)
    if X.shape[1] != Y.shape[1]:
        raise ArgumentError(f"sddmm: X and Y need the same width, got {X.shape[1]} and {Y.shape[1]}")
    out = np.empty(A.data.shape, dtype=A.dtype)
    if gpu is not None:
        _built_gpu("sddmm", _dtype_name(A.dtype), int(X.shape[1]), gpu)(A.indptr["j"], A.indices["j"], A.data, X, Y, out)
        return out
    Y = stage_rows(Y, A.data.size)  # the rows of Y are the gathered ones
    compiled("sddmm", _dtype_name(A.dtype), X.shape[1])(A.indptr["j"], A.indices["j"], A.data, X, Y, out)
    return out
