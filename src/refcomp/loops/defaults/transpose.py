"""Transposes and layout copies: the two loops a transposed read crosses, cache-blocked.

A spatial stage out[..., a, ..., b] = f(in[..., b, ..., a]) walks `in` down a column when the
loops run in the output's order: each element of the innermost loop comes from another row, a
cache line (and, for long rows, a page) per element.  Tiling the two loops (T x T, outer tile
loops first) keeps a T x T block of the input in L1 while it is written out: each input line
fetched is used T / (line / element) times before it leaves.  The tiles are made by split and
reorder, so a tile edge that does not divide the extent is guarded; the loops inside the tiles
are then vectorized and the outer ones made parallel by the generic per-block treatment.

Applies when: the function has one block, spatial, whose store indices are its iter vars in
order, and one of its loads reads the innermost iter var at an earlier position than another
iter var it reads last (a transposed read), both loops of constant extent at least MIN_EXTENT.
"""
from __future__ import annotations

from ...ast import expr as tir
from ...ast.expr import as_int
from ...ast.function import PrimFunc
from ...ast.functor import collect
from ...ast.stmt import Block, BufferStore
from ..schedule import Schedule

# The tile edge: 32 float32 are two cache lines per tile row, and a 32 x 32 tile (4 KiB) of the
# input stays in a 32 KiB L1 next to the output tile it is written to.
TILE = 32

# Both loops must be at least this long: in a small transpose (a head's 64 x 128 K^T in a
# transformer block) the tiles' guards and fused indices cost about what the blocking saves
# (measured 5-10% slower on one Zen 3 thread, within the noise of a loaded machine).
MIN_EXTENT = 4 * TILE


def transposed_pair(func: PrimFunc):
    """(block, outer var, inner var) of the transposed read the rule would block, else None:
    the inner var is the store's last index, the outer one is the load's last index."""
    blocks = [b for b in collect(func.body, Block) if b.name != "root"]
    if len(blocks) != 1:
        return None
    block = blocks[0]
    if any(iv.kind != "spatial" for iv in block.iter_vars) or len(block.iter_vars) < 2:
        return None
    stores = collect(block.body, BufferStore)
    spatial = [iv.var for iv in block.iter_vars]
    if len(stores) != 1 or len(stores[0].indices) != len(spatial) or \
            not all(index is var for index, var in zip(stores[0].indices, spatial)):
        return None
    inner = spatial[-1]
    for load in collect(stores[0].value, tir.BufferLoad):
        indices = list(load.indices)
        if not indices or not all(isinstance(i, tir.Var) for i in indices):
            continue
        last = indices[-1]
        if last is inner or not any(last is v for v in spatial):
            continue
        if any(i is inner for i in indices[:-1]):
            extents = {id(iv.var): as_int(iv.dom.extent) for iv in block.iter_vars}
            if all((extents[id(v)] or 0) >= MIN_EXTENT for v in (last, inner)):
                return block, last, inner
    return None


def schedule_transpose(sch: Schedule) -> Schedule | None:
    """A new schedule with the loops of the transposed pair tiled TILE x TILE, the tile loops
    outside; None when the function is not a transpose."""
    found = transposed_pair(sch.func)
    if found is None:
        return None
    sch = sch.copy()
    block, outer_var, inner_var = found
    rv = sch.get_block(block.name)
    loops = sch.get_loops(rv)
    if len(loops) != len(block.iter_vars):
        return None
    position = {id(iv.var): k for k, iv in enumerate(block.iter_vars)}
    a, b = loops[position[id(outer_var)]], loops[position[id(inner_var)]]
    a_outer, a_inner = sch.split(a, [None, TILE])
    b_outer, b_inner = sch.split(b, [None, TILE])
    tiled = {id(sch.get(loop).loop_var) for loop in (a_outer, a_inner, b_outer, b_inner)}
    rest = [loop for loop in sch.get_loops(rv) if id(sch.get(loop).loop_var) not in tiled]
    sch.reorder(*rest, a_outer, b_outer, a_inner, b_inner)
    return sch
