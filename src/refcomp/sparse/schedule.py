"""Schedules of stage III sparse kernels: the row partition by stored entries, row lists, prefetch of
gathered rows, and the dense primitives (split, vectorize, unroll) on the loops of a row tile.

`partition_rows` is a sparse transformation of stage III (the partition's boundaries are data,
computed from the matrix by `row_parts`); the rest is the loop IR's own schedule primitives
applied to the loops `lower_stage3(..., row_tile=...)` produces.
"""
from __future__ import annotations

import numpy as np

from ..ast import (
    Allocate, Buffer, BufferLoad, Call, Cast, Evaluate, For, IfThenElse, IntImm, LetStmt, PrimFunc, SizeVar, Var,
    While, floordiv, max_, min_, seq,
)
from ..ast.dtype import int64
from ..shape import Analyzer
from ..ast.stmt import BufferStore
from ..ast import collect
from ..ast.functor import Mutator, substitute
from ..ast.stmt import SeqStmt
from ..ast.structural import structural_equal
from ..emit_c.codegen import NONTEMPORAL, OMP_SCHEDULE
from ..loops.primitives.kinds import MAX_THREADS_PER_BLOCK, bind, unannotate, unroll, vectorize
from ..loops.primitives.legality import check_no_loop_carried_dependence, const_int
from ..loops.primitives.loop import reorder, split
from ..loops.primitives.tree import replace_in_func, walk
from .iteration import SparseScheduleError

# Parts per partition of the rows: enough that dynamic scheduling evens out what the split of a
# single long row cannot, few enough that a part's bookkeeping is nothing next to its work.
ROW_PARTS = 256


def partition_rows(func: PrimFunc, indptr: Buffer | None = None, count: int = ROW_PARTS) -> PrimFunc:
    """The parallel row loop split at data-dependent boundaries: a new first parameter
    `parts[p + 1]` (non-decreasing from 0 to m, see `row_parts`), a parallel loop over the p parts
    and, inside it, the rows of one part.  With `indptr` (a parameter of m + 1 entries) the kernel
    computes `count` parts itself, as `row_parts` would, before the parallel loop (`parts` is then
    a local array, not a parameter).

    Requires: the function body is a parallel loop from 0 over a size variable (stage III of an
    iteration whose outer axis is spatial and dense); indptr, if given, a parameter of shape
    (m + 1,); count a positive int.

    Before: `for i in parallel(m): body`; after:
    `for t in parallel(p): assume(0 <= parts[t] <= parts[t + 1] <= m); for i in range(parts[t],
    parts[t + 1]): body`.
    """
    loop = _row_loop(func, "partition_rows", "parts")
    m = loop.extent
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise SparseScheduleError(f"partition_rows: count must be a positive int, got {count!r}")
    if indptr is not None and (not any(p is indptr for p in func.params) or len(indptr.shape) != 1
                               or not _same(indptr.shape[0], m + 1)):
        raise SparseScheduleError(f"partition_rows: {func.name}: indptr must be a parameter of shape (m + 1,), the "
                                  f"row loop's extent plus one")
    extent = SizeVar("p") if indptr is None else IntImm(count)
    parts = Buffer("parts", (extent + 1,), "int32", scope="global" if indptr is None else "local")
    t = Var("t", "int32")
    lo, hi = parts[t], parts[t + 1]
    rows = For(loop.loop_var, lo, hi - lo, "serial", loop.body)
    fact = Evaluate(Call("assume", ((lo >= 0) & (lo <= hi) & (hi <= m),), "bool"))
    body = For(t, IntImm(0), extent, "parallel", seq(fact, rows), annotations={OMP_SCHEDULE: "dynamic"})
    if indptr is None:
        return PrimFunc((parts,) + tuple(func.params), body, func.name)
    return func.with_(body=Allocate(parts, seq(_compute_parts(parts, indptr, m, count), body)))


def _same(a, b) -> bool:
    return a is b or Analyzer().can_prove(a == b)


def _compute_parts(parts: Buffer, indptr: Buffer, m, count: int):
    """parts[t] = the first row r with indptr[r] + r >= t * (indptr[m] + m) / count (a row costs
    its entries plus one, as in `row_parts`), by a binary search per boundary; int64 arithmetic."""
    lo, hi = Buffer("lo", (1,), "int32", scope="local"), Buffer("hi", (1,), "int32", scope="local")
    t, mid = Var("t0", "int32"), Var("mid", "int32")
    total = Cast(int64, indptr[m]) + Cast(int64, m)
    target = floordiv(Cast(int64, t) * total, IntImm(count, int64))
    cost = Cast(int64, indptr[max_(min_(mid, m), 0)]) + Cast(int64, mid)
    step = LetStmt(mid, floordiv(lo[0] + hi[0], 2), IfThenElse(
        cost < target, BufferStore(lo, mid + 1, (0,)), BufferStore(hi, mid, (0,))))
    search = seq(BufferStore(lo, IntImm(0), (0,)), BufferStore(hi, m, (0,)), While(lo[0] < hi[0], step),
                 BufferStore(parts, max_(min_(lo[0], m), 0), (t,)))
    return Allocate(lo, Allocate(hi, For(t, IntImm(0), IntImm(count + 1), "serial", search)))


def select_rows(func: PrimFunc) -> PrimFunc:
    """The parallel row loop run over a list of rows: a new first parameter `rows[r]` (distinct
    rows of [0, m), which the caller guarantees: the hyb format checks its row lists), and the
    loop over its r entries binding the old row variable to `rows[q]`.

    Requires: what partition_rows requires.

    Before: `for i in parallel(m): body`; after:
    `for q in parallel(r): i = rows[q]; assume(0 <= i < m); body`.
    """
    loop = _row_loop(func, "select_rows", "rows")
    m, count = loop.extent, SizeVar("r")
    rows = Buffer("rows", (count,), "int32")
    q = Var("q", "int32")
    fact = Evaluate(Call("assume", ((loop.loop_var >= 0) & (loop.loop_var < m),), "bool"))
    body = For(q, IntImm(0), count, "parallel", LetStmt(loop.loop_var, rows[q], seq(fact, loop.body)),
               annotations=loop.annotations)
    return PrimFunc((rows,) + tuple(func.params), body, func.name)


def _row_loop(func: PrimFunc, primitive: str, param: str) -> For:
    """The function's parallel row loop from 0 over a size variable, or a SparseScheduleError."""
    loop = func.body
    if not isinstance(loop, For) or loop.kind != "parallel":
        raise SparseScheduleError(f"{primitive}: {func.name}: the body must be one parallel row loop, got "
                                  f"{type(loop).__name__}{'' if not isinstance(loop, For) else ' ' + loop.kind}")
    if const_int(loop.min) != 0 or not isinstance(loop.extent, SizeVar):
        raise SparseScheduleError(f"{primitive}: {func.name}: the row loop {loop.loop_var.name} must run from 0 "
                                  f"over a size variable")
    if any(p.name == param for p in func.params):
        raise SparseScheduleError(f"{primitive}: {func.name} already has a parameter named {param!r}")
    return loop


def row_parts(indptr: np.ndarray, count: int = ROW_PARTS) -> np.ndarray:
    """Boundaries of `count` runs of consecutive rows of about the same work, a row costing its
    stored entries plus one (its output row is written even when it is empty; a run is empty where
    one row holds more than a run's share): int32, from 0 to the row count, non-decreasing."""
    rows = indptr.size - 1
    count = max(1, min(int(count), rows))
    cost = np.asarray(indptr, dtype=np.int64) + np.arange(rows + 1)
    targets = np.linspace(0, int(cost[-1]), count + 1)
    parts = np.searchsorted(cost, targets, side="left").astype(np.int32)
    parts[0], parts[-1] = 0, rows
    return np.minimum(parts, rows)


def vectorize_row_tile(func: PrimFunc, lanes: int) -> PrimFunc:
    """Each row-tile loop of `in_row_tile` (the stores to and of its local `acc`) split into
    vectors of `lanes` elements: the inner part vectorized, the outer part unrolled, so that the
    tile's sums stay in vector registers.  A tile narrower than lanes is vectorized whole.

    Requires: lanes a positive int; the function has row-tile loops (else a SparseScheduleError).
    """
    if isinstance(lanes, bool) or not isinstance(lanes, int) or lanes < 1:
        raise SparseScheduleError(f"vectorize_row_tile: lanes must be a positive int, got {lanes!r}")
    targets = [s.loop_var for s in walk(func.body) if _is_tile_loop(s)]
    if not targets:
        raise SparseScheduleError(f"vectorize_row_tile: {func.name} has no row-tile loop (lower with row_tile)")
    for var in targets:
        loop = next(s for s in walk(func.body) if isinstance(s, For) and s.loop_var is var)
        extent = const_int(loop.extent)
        if extent <= lanes or extent % lanes:
            func, _ = vectorize(func, loop)
            continue
        func, (outer, inner) = split(func, loop, [None, lanes])
        func, _ = vectorize(func, inner)
        outer = next(s for s in walk(func.body) if isinstance(s, For) and s.loop_var is outer.loop_var)
        func, _ = unroll(func, outer)
    return func


def _is_tile_loop(stmt) -> bool:
    """A serial loop of constant extent whose body is one store to, or of, a local buffer at the
    loop's index (the loops `in_row_tile` writes)."""
    if not (isinstance(stmt, For) and stmt.kind == "serial" and const_int(stmt.extent) is not None
            and const_int(stmt.min) == 0 and isinstance(stmt.body, BufferStore)):
        return False
    store, var = stmt.body, stmt.loop_var
    if store.buffer.scope == "local":
        return tuple(store.indices) == (var,)
    return isinstance(store.value, BufferLoad) and store.value.buffer.scope == "local" and \
        tuple(store.value.indices) == (var,)


# Bytes the prefetches of one gathered row are apart: one per cache line.
CACHE_LINE_BYTES = 64


def prefetch_gathered_rows(func: PrimFunc, buffer: str = "B", distance: int = 16,
                           lines: int | None = None) -> PrimFunc:
    """The row of `buffer` that the entry `distance` positions ahead will gather, prefetched (one
    `prefetch` per 64-byte line of the row) at the top of the loop over positions; with `lines`,
    only the row's first `lines` lines (the hardware's stream prefetcher then fetches the rest of
    the row when it is read: a far first-lines prefetch and a near whole-row one are two calls).

    Requires: distance a positive int; lines None or a positive int; `buffer` a 2-D parameter whose rows have a constant length;
    exactly one serial loop `j` whose body reads `buffer[X[j], ...]` with `X` a 1-D int parameter
    (the positions' index array, of length nnz).  Else a SparseScheduleError.

    Before: `for j in range(lo, hi): body` (body reads B[X[j], f]); after:
    `for j in range(lo, hi): q = min(j, nnz - 1 - d) + d; assume(0 <= X[q] < k);
    prefetch(B[X[q], 0], 0); prefetch(B[X[q], 64 / itemsize], 0); ...; body`.  q is min(j + d, nnz - 1)
    without overflow, inside [0, nnz) whenever j is; the assumption is the format invariant
    `validate.py` checks for every entry of X, so the prover proves the prefetched element in
    bounds as it does the gathered one.  The values computed do not change.
    """
    where = f"prefetch_gathered_rows: {func.name}"
    if isinstance(distance, bool) or not isinstance(distance, int) or distance < 1:
        raise SparseScheduleError(f"prefetch_gathered_rows: distance must be a positive int, got {distance!r}")
    if lines is not None and (isinstance(lines, bool) or not isinstance(lines, int) or lines < 1):
        raise SparseScheduleError(f"prefetch_gathered_rows: lines must be None or a positive int, got {lines!r}")
    target = next((p for p in func.params if p.name == buffer), None)
    if target is None or len(target.shape) != 2:
        raise SparseScheduleError(f"{where}: no 2-D parameter named {buffer!r}")
    width = const_int(target.shape[1])
    if width is None or width < 1:
        raise SparseScheduleError(f"{where}: the rows of {buffer} must have a constant length, got "
                                  f"{target.shape[1]}")
    loop, index = _gathered_row_loop(func, target, buffer, where)
    j, nnz, rows = loop.loop_var, index.shape[0], target.shape[0]
    q = Var("q", j.dtype)
    step = max(1, CACHE_LINE_BYTES // target.dtype.bits * 8)
    fetches = [Evaluate(Call("prefetch", (target[index[q], IntImm(col, "int32")], IntImm(0, "int32")), "int32"))
               for col in range(0, width, step)][:lines]
    fact = Evaluate(Call("assume", ((index[q] >= 0) & (index[q] < rows),), "bool"))
    ahead = LetStmt(q, min_(j, nnz - 1 - distance) + distance, seq(fact, *fetches))
    return replace_in_func(func, {id(loop): loop.with_(body=seq(ahead, loop.body))})


def stream_output_rows(func: PrimFunc, buffer: str = "C") -> PrimFunc:
    """The stores to `buffer` written as streaming (non-temporal) stores, which go to memory
    without reading the line first or keeping it in the caches: for an output of whole rows,
    written once, too large to be read again from cache.  The loop of one partition's rows is
    annotated `nontemporal_store` (the C emitter streams its aligned vector stores and fences them
    with an sfence after the loop, in the thread that made them) and `buffer` promises 64-byte
    alignment (`align=64`): the caller must pass it on a cache line (`aligned_empty`).

    Requires: `buffer` a 2-D parameter whose rows are a constant number of whole cache lines; the
    body a parallel loop over parts (`partition_rows`) whose one serial loop inside holds every
    store to `buffer`.  Else a SparseScheduleError.

    Before: `for t in parallel(p): for i in range(parts[t], parts[t + 1]): ... C[i, f] = acc[f]`;
    after: the same, the `i` loop annotated, `C` declared with align=64.  The values computed do
    not change.
    """
    where = f"stream_output_rows: {func.name}"
    target = next((p for p in func.params if isinstance(p, Buffer) and p.name == buffer), None)
    if target is None or len(target.shape) != 2:
        raise SparseScheduleError(f"{where}: no 2-D parameter named {buffer!r}")
    width = const_int(target.shape[1])
    if width is None or width * target.dtype.bits % (8 * CACHE_LINE_BYTES):
        raise SparseScheduleError(f"{where}: the rows of {buffer} must be whole cache lines of a constant length, got "
                                  f"{target.shape[1]} x {target.dtype}")
    outer = func.body
    if not (isinstance(outer, For) and outer.kind == "parallel"):
        raise SparseScheduleError(f"{where}: the body must be the parallel loop over parts (partition_rows)")
    inner = [s for s in (outer.body.stmts if hasattr(outer.body, "stmts") else (outer.body,))
             if isinstance(s, For) and s.kind == "serial"]
    stores = [s for s in walk(func.body) if isinstance(s, BufferStore) and s.buffer is target]
    if len(inner) != 1 or not stores or \
            len([s for s in walk(inner[0]) if isinstance(s, BufferStore) and s.buffer is target]) != len(stores):
        raise SparseScheduleError(f"{where}: expected one serial row loop inside the parallel loop holding every "
                                  f"store to {buffer}")
    loop = inner[0]
    annotated = dict(loop.annotations or {})
    annotated[NONTEMPORAL] = True
    func = replace_in_func(func, {id(loop): loop.with_(annotations=annotated)})
    swap = Mutator()
    swap.buffer_map[target] = target.with_(align=CACHE_LINE_BYTES)
    return func.with_(params=swap.visit(tuple(func.params)), body=swap.visit(func.body))


def _stmts(stmt) -> tuple:
    return tuple(stmt.stmts) if isinstance(stmt, SeqStmt) else (stmt,)


def _gathered_row_loop(func, target, buffer: str, where: str):
    """(loop, X): the one serial loop j whose body reads target[X[j], ...] with X a 1-D integer
    parameter (a gathered row), or a SparseScheduleError."""
    params = {id(p) for p in func.params}
    sites = []
    for loop in walk(func.body):
        if isinstance(loop, For) and loop.kind == "serial":
            for load in _loads_of(loop.body, target):
                row = load.indices[0]
                if (isinstance(row, BufferLoad) and id(row.buffer) in params and len(row.buffer.shape) == 1
                        and row.buffer.dtype.is_integer and len(row.indices) == 1 and row.indices[0] is loop.loop_var):
                    sites.append((loop, row.buffer))
                    break
    if len(sites) != 1:
        raise SparseScheduleError(f"{where}: expected one serial loop j reading {buffer}[X[j], ...], found {len(sites)}")
    return sites[0]


def _loads_of(stmt, buffer: Buffer) -> list[BufferLoad]:
    from ..ast import collect

    return [load for load in collect(stmt, BufferLoad) if load.buffer is buffer]


def split_gathered_rows(func: PrimFunc, buffer: str = "B", hot: str = "B_hot") -> PrimFunc:
    """The gathered rows read from two buffers chosen by the index: a new parameter `hot` of
    `h` rows (a new int64 size) before `buffer`; an index `c < h` reads row `c` of `hot`, an
    index `c >= h` row `c - h` of `buffer`.  For a matrix whose columns are renumbered so that
    the frequently gathered rows, copied side by side into `hot`, are `0 .. h - 1` and every
    other column `c` is `h + c` (`kernels.hot_labels`): one pass over the entries with the hot
    rows packed and the others gathered where they are, no copy of all of B.

    Requires: `buffer` a 2-D parameter; no parameter named `hot`; exactly one serial loop `j`
    whose body reads `buffer[X[j], ...]` with `X` a 1-D int parameter (as for
    `prefetch_gathered_rows`); every read of `buffer` in that loop's body, prefetches included,
    has the form `buffer[X[e], col]` (the row index a load of X) and lies in a statement directly
    in the body (or in the body of a LetStmt directly in it).  Else a SparseScheduleError.

    Before: `for j in ...: assume(0 <= X[j] < k); for f: acc[f] += A[j] * B[X[j], f]`; after:
    `for j in ...: assume(0 <= X[j] < k + h); if X[j] < h: for f: acc[f] += A[j] * B_hot[X[j], f]
    else: for f: acc[f] += A[j] * B[X[j] - h, f]`: each statement reading B in both forms, and
    each assumption on X's entries widened to the `k + h` values they may now take (the index
    array's invariant, checked by whoever renumbers it).  The values computed do not change for
    `B_hot[c] = B[order[c]]` with the matching renumbering.
    """
    where = f"split_gathered_rows: {func.name}"
    target = next((p for p in func.params if isinstance(p, Buffer) and p.name == buffer), None)
    if target is None or len(target.shape) != 2:
        raise SparseScheduleError(f"{where}: no 2-D parameter named {buffer!r}")
    if any(getattr(p, "name", None) == hot for p in func.params):
        raise SparseScheduleError(f"{where}: a parameter named {hot!r} exists already")
    loop, index = _gathered_row_loop(func, target, buffer, where)
    rows, h = target.shape[0], SizeVar("h", int64)
    if not isinstance(rows, Var):
        raise SparseScheduleError(f"{where}: the rows of {buffer} must be counted by a size variable, got {rows}")
    hot_buffer = Buffer(hot, (h, target.shape[1]), target.dtype)

    class _Rows(Mutator):
        """buffer[X[e], c] as hot_buffer[X[e], c] (hot) or buffer[X[e] - h, c]."""

        def __init__(self, in_hot: bool) -> None:
            super().__init__()
            self.in_hot = in_hot

        def visit_BufferLoad(self, load: BufferLoad):
            if load.buffer is not target:
                return self.generic_visit(load)
            row = load.indices[0]
            if self.in_hot:
                return BufferLoad(hot_buffer, (row,) + tuple(load.indices[1:]))
            return BufferLoad(target, (Cast(int64, row) - h,) + tuple(load.indices[1:]))

    def row_of(stmt) -> BufferLoad | None:
        loads = _loads_of(stmt, target)
        if not loads:
            return None
        first = loads[0].indices[0]
        if any(not (isinstance(load.indices[0], BufferLoad) and load.indices[0].buffer is index
                    and structural_equal(load.indices[0], first)) for load in loads):
            raise SparseScheduleError(f"{where}: the reads of {buffer} in one statement must all be at one row "
                                      f"{index.name}[e]")
        return first

    def widen_facts(stmt):
        if isinstance(stmt, Evaluate) and isinstance(stmt.value, Call) and stmt.value.op == "assume" and \
                any(load.buffer is index for load in collect(stmt, BufferLoad)):
            return substitute(stmt, {rows: rows + h})
        return stmt

    def rewrite(stmts):
        out, run, run_row = [], [], None  # a run of consecutive statements reading one row: one branch

        def close():
            if run:
                block = seq(*run)
                out.append(IfThenElse(Cast(int64, run_row) < h, _Rows(True).visit(block), _Rows(False).visit(block)))
                run.clear()
        for stmt in stmts:
            if isinstance(stmt, LetStmt):
                close()
                out.append(stmt.with_(body=seq(*rewrite(_stmts(stmt.body)))))
                continue
            stmt = widen_facts(stmt)
            row = row_of(stmt)
            if row is None or (run and not structural_equal(row, run_row)):
                close()
            if row is None:
                out.append(stmt)
            else:
                run.append(stmt)
                run_row = row
        close()
        return out

    body = seq(*rewrite(_stmts(loop.body)))
    func = replace_in_func(func, {id(loop): loop.with_(body=body)})
    position = next(i for i, p in enumerate(func.params) if p is target)
    new_params = tuple(func.params[:position]) + (hot_buffer,) + tuple(func.params[position:])
    return func.with_(params=new_params)


# Threads of one GPU block for the feature axis when none are asked for: a feature axis up to this
# long gets a thread per column; a longer one is split so that each thread sums several columns.
GPU_ROW_THREADS = 256
# Threads a block should have at least: a narrow feature axis gets several rows a block.
GPU_BLOCK_MIN_THREADS = 128


def bind_rows_to_gpu(func: PrimFunc, threads: int | None = None, rows_per_block: int | None = None) -> PrimFunc:
    """A row-major stage III for a GPU: the row loop bound to blockIdx.x (a block per row) and
    the feature loop directly inside it to threadIdx.x (a thread per output column).  A feature
    axis longer than `threads` is split first, `f = f_0 * threads + f_1`, with f_1 bound and f_0 a
    serial loop inside each thread, so that neighbouring threads still read neighbouring elements
    of each gathered row.  The row loop loses its OpenMP schedule annotation.  With
    `rows_per_block` R > 1, a block holds R rows, one per threadIdx.y: row `i = b * R + r` for
    block b and r in [0, R), the body under `if i < m` (a narrow feature axis then still fills
    a block: by default R = GPU_BLOCK_MIN_THREADS // threads, at least 1).

    Requires: the body is one loop over the rows, from 0 over a size variable, whose body is one
    loop of constant extent (the feature axis: `sparse_reorder(it, ["I", "F", "J"])` of SpMM puts
    it there); threads a positive int of at most 1024 that divides the feature extent (default:
    the extent, or its largest divisor up to GPU_ROW_THREADS where it is longer); rows_per_block a positive int with
    threads * rows_per_block at most 1024; the binds' own legality (rows independent).  A
    SparseScheduleError (or the bind's ScheduleError) otherwise.

    Before (SpMM, width 64, I F J):
        for i in T.parallel(m):
            for f in range(64):
                acc[0] = 0; for j in ...: acc[0] += A[j] * B[J_indices[j], f]; C[i, f] = acc[0]
    `bind_rows_to_gpu(func, threads=32, rows_per_block=1)` after:
        for i in T.thread_binding(m, thread="blockIdx.x"):
            for f_1 in T.thread_binding(32, thread="threadIdx.x"):
                for f_0 in range(2):
                    acc[0] = 0; for j in ...: acc[0] += A[j] * B[J_indices[j], f_0 * 32 + f_1]; ...
    """
    rows = func.body
    if not isinstance(rows, For) or rows.kind not in ("parallel", "serial") or const_int(rows.min) != 0 \
            or not isinstance(rows.extent, SizeVar):
        raise SparseScheduleError(f"bind_rows_to_gpu: {func.name}: the body must be one row loop from 0 over a "
                                  "size variable (stage III of a sparse iteration)")
    feature = rows.body
    width = const_int(feature.extent) if isinstance(feature, For) else None
    if not isinstance(feature, For) or feature.kind != "serial" or const_int(feature.min) != 0 or width is None:
        raise SparseScheduleError(f"bind_rows_to_gpu: {func.name}: the row loop's body must be one serial loop "
                                  "of constant extent (the feature axis; order the iteration I, F, J with "
                                  "sparse_reorder)")
    if threads is None:
        threads = max(d for d in range(1, min(width, GPU_ROW_THREADS) + 1) if width % d == 0)
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= MAX_THREADS_PER_BLOCK:
        raise SparseScheduleError(f"bind_rows_to_gpu: threads must be an int from 1 to {MAX_THREADS_PER_BLOCK}, "
                                  f"got {threads!r}")
    if width % threads:
        raise SparseScheduleError(f"bind_rows_to_gpu: threads {threads} must divide the feature extent {width}")
    if rows_per_block is None:
        rows_per_block = max(1, GPU_BLOCK_MIN_THREADS // threads)
    if isinstance(rows_per_block, bool) or not isinstance(rows_per_block, int) or rows_per_block < 1 or \
            rows_per_block * threads > MAX_THREADS_PER_BLOCK:
        raise SparseScheduleError(f"bind_rows_to_gpu: rows_per_block must be a positive int with threads * "
                                  f"rows_per_block at most {MAX_THREADS_PER_BLOCK}, got {rows_per_block!r} "
                                  f"(threads {threads})")
    if OMP_SCHEDULE in rows.annotations:
        func, _ = unannotate(func, rows, OMP_SCHEDULE)
    func, _ = bind(func, func.body, "blockIdx.x")
    feature = func.body.body
    if threads < width:
        func, (outer, inner) = split(func, feature, [None, threads])
        func, _ = reorder(func, [_loop(func, inner.loop_var), _loop(func, outer.loop_var)])
        feature = _loop(func, inner.loop_var)
    func, _ = bind(func, feature, "threadIdx.x")
    return _rows_per_block(func, rows_per_block) if rows_per_block > 1 else func


def _rows_per_block(func: PrimFunc, count: int) -> PrimFunc:
    """func (rows bound to blockIdx.x, the threadIdx.x loop directly inside) with `count` rows a
    block: `for b in blockIdx.x(ceil(m / count)): for r in threadIdx.y(count): for t in
    threadIdx.x(...): if b * count + r < m: i = b * count + r; <the body>`."""
    rows = func.body
    lanes = rows.body
    row, m = rows.loop_var, rows.extent
    block, slot = Var("b", row.dtype), Var("r", row.dtype)
    index = block * IntImm(count, row.dtype) + slot
    guarded = IfThenElse(index < m, LetStmt(row, index, lanes.body))
    inner = For(slot, IntImm(0, row.dtype), IntImm(count, row.dtype), "thread_binding", lanes.with_(body=guarded),
                thread_binding="threadIdx.y")
    blocks = floordiv(m + IntImm(count - 1, m.dtype), IntImm(count, m.dtype))
    return func.with_(body=For(block, IntImm(0, row.dtype), blocks, "thread_binding", inner, thread_binding="blockIdx.x"))


def _loop(func: PrimFunc, var: Var) -> For:
    """The loop of func over var."""
    return next(s for s in walk(func.body) if isinstance(s, For) and s.loop_var is var)


# Threads of one GPU block when each thread takes one stored entry (bind_positions_to_gpu).
GPU_POSITION_THREADS = 128


def bind_positions_to_gpu(func: PrimFunc, threads: int = GPU_POSITION_THREADS) -> PrimFunc:
    """A stage III over stored positions (`sparse_fuse` of the row and entry axes: one loop over
    the nnz positions, each finding its row by binary search) for a GPU: position
    `p = b * threads + t` for block b (blockIdx.x, ceil(extent / threads) blocks) and thread t
    (threadIdx.x), the body under `if p < extent`, so the blocks are balanced by stored entries
    whatever the row lengths.

    Requires: the body is that loop (parallel or serial, from 0), or an `if` without `else` whose
    body is it (the lowering's `if m > 0`); its iterations independent (the loop primitives'
    check); threads an int from 1 to 1024.  A SparseScheduleError (or the check's ScheduleError)
    otherwise.

    Before (SDDMM, I and J fused):
        if m > 0:
            for i_j in T.parallel(nnz):
                row = <binary search of i_j in J_indptr>; out[i_j] = A[i_j] * dot(X[row], Y[J_indices[i_j]])
    `bind_positions_to_gpu(func, threads=128)` after:
        if m > 0:
            for b in T.thread_binding((nnz + 127) // 128, thread="blockIdx.x"):
                for t in T.thread_binding(128, thread="threadIdx.x"):
                    if b * 128 + t < nnz:
                        i_j = b * 128 + t
                        <the same body>
    """
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= MAX_THREADS_PER_BLOCK:
        raise SparseScheduleError(f"bind_positions_to_gpu: threads must be an int from 1 to {MAX_THREADS_PER_BLOCK}, "
                                  f"got {threads!r}")
    guard = func.body if isinstance(func.body, IfThenElse) and func.body.else_case is None else None
    loop = guard.then_case if guard is not None else func.body
    if not isinstance(loop, For) or loop.kind not in ("parallel", "serial") or const_int(loop.min) != 0:
        raise SparseScheduleError(f"bind_positions_to_gpu: {func.name}: the body must be one loop over the stored "
                                  "positions from 0 (or one under an if), as sparse_fuse of the row and entry "
                                  "axes lowers")
    check_no_loop_carried_dependence(func, loop, "bind_positions_to_gpu")
    var, extent = loop.loop_var, loop.extent
    block, thread = Var("b", var.dtype), Var("t", var.dtype)
    position = block * IntImm(threads, var.dtype) + thread
    body = IfThenElse(position < extent, LetStmt(var, position, loop.body))
    inner = For(thread, IntImm(0, var.dtype), IntImm(threads, var.dtype), "thread_binding", body,
                thread_binding="threadIdx.x")
    blocks = floordiv(extent + IntImm(threads - 1, extent.dtype), IntImm(threads, extent.dtype))
    outer = For(block, IntImm(0, var.dtype), blocks, "thread_binding", inner, thread_binding="blockIdx.x")
    return func.with_(body=guard.with_(then_case=outer) if guard is not None else outer)
