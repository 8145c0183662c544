"""Row reductions (softmax, layer norm, RMS norm, mean/variance, argmax): every stage per row.

A legalized row reduction is a chain of stages over the same leading "row" axes: partial
reductions into a few lanes, their final combine, and a last spatial stage that writes the
output row from the input row and the per-row results.  Scheduled stage by stage, each stage is
its own pass over the whole input (softmax: max, sum of exp, output: three reads of a tensor that
does not fit any cache).  This rule moves every earlier stage under the output stage's row loop
(compute_at, which proves each move covers what the consumer reads), so one thread makes one
pass: the row is read from memory once and the later stages find it in L1/L2.  The row loop
(the leading loops fused when there are several) is the one parallel loop; the loops inside are
left to the vectorizer.

Applies when: the last block is spatial, every other block writes a buffer that is not a
parameter, at least one block reduces, and the output has a leading (row) axis.
"""
from __future__ import annotations

from ...ast.expr import as_int
from ...ast.function import PrimFunc
from ...ast.functor import collect
from ...ast.stmt import Block
from ...ast.structural import structural_equal
from ...errors import RefcompError
from ..schedule import LoopRV, Schedule


def _stages(func: PrimFunc) -> list[Block]:
    return [b for b in collect(func.body, Block) if b.name != "root"]


def is_row_reduction(func: PrimFunc) -> bool:
    """True for a chain of stages ending in a spatial output stage with reductions before it,
    every earlier stage writing a per-row buffer: its leading dims are the output's row dims (a
    column reduction, whose result every row reads whole, is not one: moved under the row loop
    it would be computed again for every row)."""
    blocks = _stages(func)
    if len(blocks) < 2:
        return False
    last = blocks[-1]
    if any(iv.kind != "spatial" for iv in last.iter_vars) or len(last.iter_vars) < 2 or len(last.writes) != 1:
        return False
    if not any(iv.kind == "reduce" for b in blocks[:-1] for iv in b.iter_vars):
        return False
    if any(iv.kind not in ("spatial", "reduce") for b in blocks for iv in b.iter_vars):
        return False
    params = {id(p) for p in func.params}
    row_dims = last.writes[0].buffer.shape[:len(last.iter_vars) - 1]
    for block in blocks[:-1]:
        if not block.writes:
            return False
        for write in block.writes:
            buffer = write.buffer
            if id(buffer) in params or len(buffer.shape) < len(row_dims):
                return False
            if not all(structural_equal(a, b) for a, b in zip(buffer.shape, row_dims)):
                return False
    return True


def row_reduction_loop(sch: Schedule) -> LoopRV | None:
    """The loop over rows of the output stage, once every earlier stage is under it; None when
    the function is not a row reduction (nothing changed).  Raises the refusing primitive's
    RefcompError when a stage cannot be moved (the caller keeps its own copy of the schedule)."""
    if not is_row_reduction(sch.func):
        return None
    output = _stages(sch.func)[-1].name
    for block in _stages(sch.func)[:-1]:
        _lane_partials(sch, block)
    blocks = _stages(sch.func)
    out = sch.get_block(output)
    loops = sch.get_loops(out)
    if len(loops) != len(blocks[-1].iter_vars):
        return None  # a unit loop folded away (one row): nothing to gather under a row loop
    rows = loops[:len(blocks[-1].iter_vars) - 1]
    row = rows[-1]
    if len(rows) > 1:
        try:
            row = sch.fuse(*rows)  # one parallel loop over all rows (a batch of 1 still splits)
        except RefcompError:
            pass  # (symbolic dims the prover cannot split back): stages go under the last row loop
    # Each stage the primitive refuses stays where it is (its own pass over the rows) and so do the
    # stages that feed only it; the rule fails (and the caller falls back) when none could move.
    refusal = None
    moved = 0
    for block in reversed(blocks[:-1]):
        try:
            sch.compute_at(sch.get_block(block.name), row)
            moved += 1
        except RefcompError as err:
            refusal = refusal or err
    if refusal is not None and moved == 0:
        raise refusal
    return row


def _lane_partials(sch: Schedule, block: Block) -> None:
    """Reduce a plain row reduction (spatial iters, then one reduce iter over a contiguous run) in
    as many partials as a vector register holds: the reduce loop is split by the lanes and the
    lanes factored out (rfactor), so the partial stage's lane loop, spatial, is vectorized; a
    serial chain of scalar adds cannot be (float addition does not reassociate).  Skipped when the
    extent is symbolic or not a multiple of twice the lanes, or rfactor refuses."""
    from ..intrin import cpu

    kinds = [iv.kind for iv in block.iter_vars]
    if kinds.count("reduce") != 1 or kinds[-1] != "reduce" or not block.writes:
        return
    extent = as_int(block.iter_vars[-1].dom.extent)
    bits = block.writes[0].buffer.dtype.bits
    lanes = (512 if cpu.has("avx512f") else 256) // max(bits, 8)
    if extent is None or lanes < 2 or extent % lanes or extent < 2 * lanes:
        return
    rv = sch.get_block(block.name)
    loops = sch.get_loops(rv)
    if len(loops) != len(kinds):
        return
    try:
        trial = sch.copy()
        _, inner = trial.split(trial.get_loops(trial.get_block(block.name))[-1], [None, lanes])
        trial.rfactor(inner, len(kinds) - 1)
    except RefcompError:
        return
    sch.split(loops[-1], [None, lanes])
    sch.rfactor(sch.get_loops(rv)[-1], len(kinds) - 1)


def schedule_row_reduction(sch: Schedule) -> LoopRV | None:
    """row_reduction_loop, with that loop made parallel (the one parallel loop of the kernel)."""
    row = row_reduction_loop(sch)
    if row is not None:
        sch.parallel(row)
    return row
