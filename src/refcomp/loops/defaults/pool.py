"""Pooling: a window reduction per output element, its accumulator in a register.

    out[n, c, y, x] = max/sum over (r0, r1) of f(X[n, c, y * s + r0 - p, x * s + r1 - p])

The generic schedule runs such a block with `out` in memory: every step of the window loads and
stores the output element (the C compiler cannot tell `out` from `X` inside a parallel loop), and
the bounds test of the padding runs per step.  This rule gives each output element a "local"
accumulator (`cache_write`) written back once after its window (`reverse_compute_at` at the
innermost spatial loop; lowering makes it a scalar of each thread, a register), its init split off
(`decompose_reduction`), and the leading spatial loops but the last two (batch and channels)
fused and parallel; the window loops stay innermost.

Max pooling with padding over static sizes legalizes to two blocks: a padded copy of the input
(the dtype's lowest value in the border) and the window over it.  The rule then also moves the
copy into the parallel plane loop (`compute_at`: each plane padded just before its windows read
it, in cache; a stack array of each thread, `set_scope` "local", up to 64 KB), its rows vector
loops, and the windows read without a bounds test.  Measured on ResNet-18's pool (3 x 3, stride 2,
padding 1, 32 x 48 x 48, batch 2, AVX-512): 119 -> 44 us on one thread, 23 us on two (the inline
padding test, per window position, had the vector loop split into branches).

When the windows overlap along y, max pooling with padding legalizes to two blocks instead: for
each output row and padded column, the max of the window's rows there read from the input with
the bounds test (`pool_columns`, an elementwise max of contiguous rows: spatial iters only, so the
rule treats it as the padded copy above: made per plane on the stack, its rows vector loops, the
vectorizer cutting them at the border columns), then the window over its columns.  ResNet-18's
pool as above, kernel alone, one thread: 35 us in three blocks (a padded copy, each padded row's
window maxima gathered at stride 2, their maxima over the window's rows), 23 us so.  The rule
still takes those three blocks (a padded copy, a window reduction over it along the rows, a
window reduction over those), each moved into the plane loop and vectorized.

The channel-blocked max pool (N, C/L, H, W, L) is one block whose window reads test the bounds
inline (no padded copy): the same rule makes (n, channel block, output rows) the parallel loop when the planes (n x channel
blocks) are known to be fewer than 8, else (n, channel block) with the rows a serial loop
inside (their index divided out of the fused loop at every window step took 2x: 303 against 132 us
for (2, 4, 56, 56, 16), 3 x 3, stride 2, padding 1, one thread, AVX-512; a symbolic row count
fused is a division by a variable, checked per lane, no vector loop at all); the L lanes are the
vector accumulator.

Applies when: the function has one block (or the padded copy and the window, or the padded copy
and the two windows); its iters are spatial then reduce (at least one
each, two or more spatial); it stores out[spatial iters in order] = combine(out[same], value),
with an init; `value` reads exactly one other buffer, at indices in which every reduce iter
appears together with a spatial iter (a window: `y * s + r`); and no loop is scheduled yet.  A
matmul or a row reduction reads a reduce iter alone in some index and is not taken.
"""
from __future__ import annotations

from ...ast import expr as tir
from ...ast.expr import as_int
from ...ast.function import PrimFunc
from ...ast.functor import collect, free_vars
from ...ast.stmt import Block, BufferStore
from ..schedule import Schedule


def window_reduction(func: PrimFunc) -> Block | None:
    """The pooling block of func (module doc), else None."""
    blocks = [b for b in collect(func.body, Block) if b.name != "root"]
    return blocks[0] if len(blocks) == 1 and is_window_block(blocks[0]) else None


def is_window_block(block: Block) -> bool:
    """Whether block is a window reduction (module doc: "Applies when", but for the block count)."""
    kinds = [iv.kind for iv in block.iter_vars]
    spatial = kinds.count("spatial")
    if spatial < 2 or spatial == len(kinds) or kinds != ["spatial"] * spatial + ["reduce"] * (len(kinds) - spatial):
        return False
    store = block.body
    if block.init is None or not isinstance(store, BufferStore):
        return False
    out_vars = [iv.var for iv in block.iter_vars[:spatial]]
    reduce_vars = {iv.var for iv in block.iter_vars[spatial:]}
    if len(store.indices) != spatial or any(i is not v for i, v in zip(store.indices, out_vars)):
        return False
    loads = [l for l in collect(store.value, tir.BufferLoad)]
    others = {l.buffer for l in loads if l.buffer is not store.buffer}
    if len(others) != 1 or not any(l.buffer is store.buffer for l in loads):
        return False
    for load in loads:
        if load.buffer is store.buffer:
            continue
        seen = set()
        for index in load.indices:
            used = set(free_vars(index))
            window = used & reduce_vars
            if window and not (used - reduce_vars):
                return False  # a reduce iter alone: a contraction or a row reduction, not a window
            seen |= window
        if seen != reduce_vars:
            return False
    return all(as_int(iv.dom.extent) is not None for iv in block.iter_vars[spatial:])


def padded_window_reduction(func: PrimFunc) -> tuple[Block, Block] | None:
    """(pad, pool) when func is a window reduction over a padded copy of its input made by the
    one other block (spatial iters only, writing the buffer the pool reads: max pooling's
    legalized form), else None."""
    blocks = [b for b in collect(func.body, Block) if b.name != "root"]
    if len(blocks) != 2 or not _pads_for(*blocks):
        return None
    return blocks[0], blocks[1]


def _pads_for(pad: Block, pool: Block) -> bool:
    """Whether pad is a copy (spatial iters only, one buffer written) that the window reduction
    pool reads."""
    if pad.init is not None or any(iv.kind != "spatial" for iv in pad.iter_vars) or len(pad.writes) != 1:
        return False
    return is_window_block(pool) and pad.writes[0].buffer in {r.buffer for r in pool.reads}


def padded_rows_window_reduction(func: PrimFunc) -> tuple[Block, Block, Block] | None:
    """(pad, rows, pool) when func is max pooling legalized in two windows over a padded copy:
    the copy (spatial iters only), a window reduction over it along the rows (`pool_rows`), and
    a window reduction over those along the columns, each reading the block before; else None."""
    blocks = [b for b in collect(func.body, Block) if b.name != "root"]
    if len(blocks) != 3:
        return None
    pad, rows, pool = blocks
    if not _pads_for(pad, rows) or not is_window_block(pool) or \
            rows.writes[0].buffer not in {r.buffer for r in pool.reads}:
        return None
    return pad, rows, pool


def _vectorize_window(sch: Schedule, block: Block, lanes: int | None) -> None:
    """A window reduction under the plane loop (its loops: spatial then reduce, the plane's left
    out): its last spatial loop split by lanes, the window loops moved between the two parts,
    its init before them and the lanes vectorized."""
    rv = sch.get_block(block.name)
    loops = sch.get_loops(rv)
    reduce = sum(1 for iv in block.iter_vars if iv.kind == "reduce")
    space, window = loops[:-reduce], loops[-reduce:]
    if not lanes:
        sch.decompose_reduction(rv, window[0])
        return
    outer, inner = sch.split(space[-1], [None, lanes])
    sch.reorder(outer, *window, inner)
    init = sch.decompose_reduction(rv, window[0])
    sch.vectorize(inner)
    sch.vectorize(sch.get_loops(init)[-1])


def schedule_pool(sch: Schedule) -> Schedule | None:
    """sch with its pooling block scheduled (module doc), or None when the rule does not apply."""
    chain = padded_rows_window_reduction(sch.func)
    padded = padded_window_reduction(sch.func) if chain is None else (chain[0], chain[2])
    block = padded[1] if padded is not None else window_reduction(sch.func)
    if block is None:
        return None
    sch = sch.copy()
    rv = sch.get_block(block.name)
    loops = sch.get_loops(rv)
    spatial = sum(1 for iv in block.iter_vars if iv.kind == "spatial")
    if len(loops) != len(block.iter_vars):
        return None
    space, window = loops[:spatial], loops[spatial:]
    width = as_int(block.iter_vars[spatial - 1].dom.extent)
    lanes = _lanes(width)
    accumulator = sch.cache_write(rv, 0, "local")
    if lanes:
        outer, inner = sch.split(space[-1], [None, lanes])
        sch.reorder(outer, *window, inner)
        sch.reverse_compute_at(accumulator, outer)
        sch.decompose_reduction(rv, window[0])
        sch.vectorize(inner)
        sch.vectorize(sch.get_loops(accumulator)[-1])
    else:
        sch.reverse_compute_at(accumulator, space[-1])
        sch.decompose_reduction(rv, window[0])
    planes = space[:-2] if spatial > 2 else space[:1]
    extents = [as_int(iv.dom.extent) for iv in block.iter_vars[:len(planes)]]
    while len(planes) > 2 and (None in extents[1:] or _enough_planes(extents[:-1])):
        # the blocked layout's output rows join the parallel loop only when the planes are few: their
        # index, divided out of the fused loop in every window step, took 2x (a symbolic extent: a
        # division by a variable, checked per lane, no vector loop at all)
        planes, extents = planes[:-1], extents[:-1]
    # the image planes (batch x channels) one parallel loop: a batch of 1 still fills the threads
    plane = sch.fuse(*planes) if len(planes) > 1 else planes[0]
    sch.parallel(plane)
    if chain is not None:
        # the rows' maxima of a plane made inside the plane loop, before the windows read them
        rows = sch.get_block(chain[1].name)
        sch.compute_at(rows, plane)
        if _plane_bytes(sch.get(rows)) <= _STACK_PLANE_BYTES:
            sch.set_scope(rows, 0, "local")
        _vectorize_window(sch, sch.get(rows), _lanes(as_int(chain[1].iter_vars[spatial - 1].dom.extent)))
    if padded is not None:
        # the padded plane made inside the parallel plane loop, just before the windows read it
        # (in cache; a stack array of each thread when small), its rows vector loops
        pad = sch.get_block(padded[0].name)
        sch.compute_at(pad, plane)
        if _plane_bytes(sch.get(pad)) <= _STACK_PLANE_BYTES:
            sch.set_scope(pad, 0, "local")
        sch.vectorize(sch.get_loops(pad)[-1])
    return sch


# Planes (batch x channel blocks) enough to share among threads without splitting their rows.
_MIN_PARALLEL_PLANES = 8


def _enough_planes(extents: list[int | None]) -> bool:
    """Whether the leading loops' extents make at least _MIN_PARALLEL_PLANES iterations (a
    symbolic batch is taken as enough)."""
    count = 1
    for extent in extents:
        if extent is None:
            return True
        count *= extent
    return count >= _MIN_PARALLEL_PLANES


# The largest padded plane kept on a thread's stack (a 112 x 112 input plus its border, float32).
_STACK_PLANE_BYTES = 64 * 1024


def _plane_bytes(block: Block) -> int:
    buffer = block.writes[0].buffer
    rows, columns = (as_int(d) for d in buffer.shape[-2:])
    if rows is None or columns is None:
        return _STACK_PLANE_BYTES + 1
    return rows * columns * buffer.dtype.bits // 8


def _lanes(width) -> int | None:
    from ..recipes.conv_match import native_lanes

    if width is None:
        return None
    lanes = native_lanes()
    while lanes >= 4:
        if width % lanes == 0:
            return lanes
        lanes //= 2
    return None


__all__ = ["is_window_block", "padded_rows_window_reduction", "padded_window_reduction", "schedule_pool",
           "window_reduction"]
