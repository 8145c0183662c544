"""Batched matmul with the second operand transposed (Q K^T): that operand packed into panels,
the product on the CPU's fp32 register tile where one fits.

C[..., i, j] += A[..., i, k] * B[..., j, k] reads B down a column when the generic schedule puts
k outside j and vectorizes j (so that C's row and B's row stream): each lane of B is another row.

With a tile intrinsic of `refcomp.loops.recipes.matmul` (FP32_INTRINS: AVX-512 8 x 32, AVX2
6 x 16) that this CPU runs and that tiles the shape (N a multiple of its width NR, K of its k
multiple; rows need not divide, the last tile is partial), the product runs as the matmul
recipe runs a `linear` layer's A @ W^T: B is copied into NR-wide panels Bp[..., j // NR, k, j % NR]
(the recipe's transposed copy: 32 x 16 blocks transposed in registers where the CPU has
AVX-512), the batch loops with the MR-row blocks are fused and run in parallel (dynamically),
and each MR x NR tile of C is one call of the tile intrinsic over the whole of K:

    for b, i0 in parallel:  for j0:  C[b, i0*MR : +MR, j0*NR : +NR] = tile(A[b, i0*MR.., :], Bp[b, j0])

(the generic schedule kept C's row in memory and loaded and stored it for every k: three memory
operations per multiply-add.)  Otherwise B is copied into lane panels Bp[..., j // L, k, j % L]
(L the vector lanes; a row count L does not divide is padded with zeros), so that the generic
loop nest reads L contiguous values of Bp per k; the copy and the product then get the generic
treatment (k outside j, j vectorized, the leading loops parallel).

Applies when: the function has one block, a float multiply-accumulate C[.., i, j] += A * B with
its spatial iters then one reduce iter k, at least one leading (batch) iter, and B read at
[..., j, k] with j the innermost spatial iter; B of constant shape.
"""
from __future__ import annotations

from ...ast import expr as tir
from ...ast.expr import as_int
from ...ast.function import PrimFunc
from ...ast.functor import collect
from ...ast.stmt import Block, BufferStore
from ...errors import ScheduleError
from ..schedule import Schedule


def transposed_operand(func: PrimFunc):
    """(block, index of B among the block's reads) for a batched A @ B^T, else None."""
    blocks = [b for b in collect(func.body, Block) if b.name != "root"]
    if len(blocks) != 1:
        return None
    block = blocks[0]
    kinds = [iv.kind for iv in block.iter_vars]
    if len(kinds) < 4 or kinds[-1] != "reduce" or any(k != "spatial" for k in kinds[:-1]):
        return None
    stores = collect(block.body, BufferStore)
    if len(stores) != 1 or not str(stores[0].buffer.dtype).startswith("float"):
        return None
    value = stores[0].value
    if not (isinstance(value, tir.Add) and isinstance(value.b, tir.Mul)):
        return None
    j, k = block.iter_vars[-2].var, block.iter_vars[-1].var
    for operand in (value.b.a, value.b.b):
        if not isinstance(operand, tir.BufferLoad):
            continue
        indices = list(operand.indices)
        if len(indices) >= 2 and indices[-1] is k and indices[-2] is j and \
                all(as_int(d) is not None for d in operand.buffer.shape):
            reads = [r.buffer for r in block.reads]
            if operand.buffer in reads:
                return block, reads.index(operand.buffer)
    return None


def schedule_batched_matmul_bt(sch: Schedule, lanes: int | None = None, tile: bool = True) -> Schedule | None:
    """A new schedule of a batched A @ B^T: on a register tile intrinsic (`tiled_batched_matmul_bt`)
    when tile is set and one fits, else with the transposed operand packed into lane panels
    (lanes: the vector register's, by default); None when the function is not a batched A @ B^T.
    12 x 384 x 384 x 64 (attention scores) on 2 AVX-512 threads: 1.26 ms tiled, 3.8 ms with lane
    panels, numpy (OpenBLAS) 1.9.  16 x 256 x 256 x 64 on one Zen 3 thread: 16.6 ms with lane
    panels against 74 for the generic schedule (OpenBLAS's batched sgemm: 3.6)."""
    from ..intrin import cpu

    found = transposed_operand(sch.func)
    if found is None:
        return None
    if tile:
        tiled = tiled_batched_matmul_bt(sch)
        if tiled is not None:
            return tiled
    block, b_index = found
    if lanes is None:
        lanes = cpu.vector_lanes(max(block.writes[0].buffer.dtype.bits, 8))
    sch = sch.copy()
    rv = sch.get_block(block.name)
    rows = as_int(block.reads[b_index].buffer.shape[-2])
    packed = sch.cache_read(rv, b_index, "global")
    sch.transform_layout(packed, ("write", 0), lambda *i: (*i[:-2], i[-2] // lanes, i[-1], i[-2] % lanes),
                         pad_value=0.0 if rows % lanes else None)
    return sch


def _tile_intrinsic(block: Block, b_index: int) -> str | None:
    """The first fp32 tile intrinsic of the matmul recipe that this CPU runs and that tiles block's
    (M, N, K) with B transposed; None when none does (or the block is not fp32)."""
    from ..recipes.matmul import FP32_INTRINS

    return next(iter(bt_tile_intrinsics(block, b_index, FP32_INTRINS)), None)


def bt_tile_intrinsics(block: Block, b_index: int, names) -> list[str]:
    """The fp32 tile intrinsics among names that this CPU runs and that tile block's (M, N, K)
    with B transposed, in the order given; [] when the block is not fp32 or not constant."""
    from ..recipes.common import MatmulShape, fits
    from ..intrin import get as get_intrin

    if any(str(r.buffer.dtype) != "float32" for r in block.reads) or str(block.writes[0].buffer.dtype) != "float32":
        return []
    if len(block.reads) != 2:
        return []
    m, n, k = (iv.dom.extent for iv in block.iter_vars[-3:])
    if any(as_int(e) is None for e in (m, n, k)):
        return []
    shape = MatmulShape(1 - b_index, b_index, m, n, k, True)
    return [name for name in names if get_intrin(name).available() and fits(name, shape)]


def tiled_batched_matmul_bt(sch: Schedule, intrin: str | None = None, columns_outer: bool = False,
                            parallel_blocks: bool = True) -> Schedule | None:
    """A new schedule of a batched A @ B^T on an fp32 register tile (the module docstring), or None
    when the function is not one or no tile intrinsic this CPU runs fits its shape.

    The tuner's choices (the defaults are the module docstring's): `intrin`, the tile (one of
    `bt_tile_intrinsics`; ScheduleError when it does not fit); `columns_outer`, the NR-wide column
    panels outside the MR-row blocks (each A block across the panels of B; default: each B panel
    across the row blocks); `parallel_blocks`: the batch loops fused with the outer block loop (the
    row blocks, or the column panels when columns_outer) run in parallel (default), else the batch
    loops alone (each thread a whole matrix: its B panels and A rows stay in its cache)."""
    from ..intrin import cpu
    from ..recipes.common import tile_of
    from ..recipes.matmul import _schedule_transposed_copy

    found = transposed_operand(sch.func)
    if found is None:
        return None
    block, b_index = found
    name = _tile_intrinsic(block, b_index)
    if name is None:
        return None
    if intrin is not None:
        try:
            tile_of(intrin)
        except KeyError:
            raise ScheduleError(f"tiled_batched_matmul_bt: {intrin!r} is not a matmul tile intrinsic") from None
        if not bt_tile_intrinsics(block, b_index, [intrin]):
            raise ScheduleError(f"tiled_batched_matmul_bt: the tile {intrin} does not fit this batched matmul "
                                f"(or this CPU does not run it)")
        name = intrin
    mr, nr, _ = tile_of(name)
    sch = sch.copy()
    rv = sch.get_block(block.name)
    packed = sch.cache_read(rv, b_index, "global")
    sch.transform_layout(packed, ("write", 0), lambda *i: (*i[:-2], i[-2] // nr, i[-1], i[-2] % nr))
    copy_loops = sch.get_loops(packed)
    batch = 1
    for iv in block.iter_vars[:-3]:
        batch *= as_int(iv.dom.extent)
    threads = cpu.openmp_threads()
    # the copy: batches over the threads when there are enough of them, else panels within each
    _schedule_transposed_copy(sch, packed, rv, batch < threads, nr, 1)
    if batch >= threads:
        leading = copy_loops[:-2]
        outer = sch.fuse(*leading) if len(leading) > 1 else leading[0]
        sch.parallel(outer)
    loops = sch.get_loops(rv)
    *leading, i, j, k = loops
    i0, i1 = sch.split(i, [None, mr])
    j0, j1 = sch.split(j, [None, nr])
    blocks = (j0, i0) if columns_outer else (i0, j0)
    sch.reorder(*leading, *blocks, i1, j1, k)
    sch.tensorize(i1, name)
    parallel = [*leading, blocks[0]] if parallel_blocks else leading
    outer = sch.fuse(*parallel) if len(parallel) > 1 else parallel[0]
    sch.parallel(outer)
    sch.annotate(outer, "omp_schedule", "dynamic")  # a descheduled thread no longer holds up the call
    return sch

