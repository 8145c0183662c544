"""schedule_conv: the default schedule of a kernel whose reductions are all convolutions.

Each convolution block (one, or a residual block's main and shortcut convolutions fused with
their sum) gets the direct-convolution recipe (refcomp.loops.recipes.conv: a register
tile of output channels x a vector of output columns, weights packed per call); the function's
other stages (the padded copy of the input, an epilogue such as bias + relu) keep their own loop
nests and get the generic treatment `rest` gives them (parallel rows, vector columns).  A
convolution the recipe cannot schedule (symbolic width, another dtype, a step the checks
reject) returns None, and the caller falls back to its generic schedule; the debug log says why.
"""
from __future__ import annotations

import logging
from typing import Callable

from ...ast.functor import collect
from ...ast.stmt import Block
from ...errors import RefcompError

log = logging.getLogger("refcomp.graph.schedule_conv")


def schedule_conv(sch, rest: Callable):
    """sch (a Schedule, changed in place) with its convolution blocks on the conv recipe and
    `rest(sch, rv, block, loops)` applied to every other block, or None when the function has a
    reduction that is not a convolution or a convolution the recipe does not take."""
    from ...loops import recipes

    func = sch.func
    found = recipes.find_convs(func)
    if not found:
        return None
    convs = {shape.block for shape in found}
    others = [b.name for b in collect(func.body, Block) if b.name != "root" and b.name not in convs]
    try:
        for shape in found:
            sch = recipes.conv_fp32(sch, shape.block)
    except RefcompError as exc:
        log.debug("schedule_conv: %s keeps the generic schedule: %s", func.name, exc)
        return None
    inputs = {block.reads[shape.x_index].buffer for block in collect(func.body, Block)
              for shape in found if block.name == shape.block}
    for name in others:
        try:
            rv = sch.get_block(name)
            loops = sch.get_loops(rv)
        except RefcompError:
            continue
        if not loops:
            continue
        if _into_write_back(sch, rv):
            continue
        padded = _padded_copy(sch, rv, inputs)
        if padded is not None:
            sch = padded
        else:
            rest(sch, rv, sch.get(rv), loops)
    for block in collect(sch.func.body, Block):
        if block.name.endswith("_global") and block.name not in others:  # the packed weights
            _parallel_outer(sch, block.name)
    return sch


def _into_write_back(sch, rv) -> bool:
    """Inline an epilogue (bias, activation, residual sum) into the stage that writes a tile of
    the convolution's output back from its registers (`reverse_compute_inline`), when that stage
    produces what the epilogue reads: the output is then written once, with the epilogue applied,
    instead of written, read back and written again.  False (nothing changed) when the
    primitive refuses (a GEMM tile or direct form writes the output from the reduction itself)."""
    block = sch.get(rv)
    if any(iv.kind != "spatial" for iv in block.iter_vars):
        return False
    try:
        producers = sch.get_producers(rv)
        if not any(sch.get(p).name.endswith("_local") for p in producers):
            return False
        sch.reverse_compute_inline(rv)
    except RefcompError as exc:
        log.debug("schedule_conv: epilogue %s stays a stage of its own: %s", block.name, exc)
        return False
    return True


def _padded_copy(sch, rv, inputs: set):
    """Schedule the stage that writes a convolution's (padded) input, if rv is one: the image
    planes (the loops but the last two) fused and parallel, each row vectorized whole (vectors of
    columns, the edges of the padding in the scalar tail), so the boundary tests run per row and
    not per element of a fused index: a new schedule, or None (sch unchanged) for any other block."""
    block = sch.get(rv)
    loops = sch.get_loops(rv)
    if len(block.writes) != 1 or block.writes[0].buffer not in inputs or block.init is not None \
            or any(iv.kind != "spatial" for iv in block.iter_vars) or len(loops) < 3 \
            or len(loops) != len(block.iter_vars):
        return None
    attempt = sch.copy()
    try:
        rv = attempt.get_block(block.name)
        *planes, _, column = attempt.get_loops(rv)
        attempt.parallel(attempt.fuse(*planes) if len(planes) > 1 else planes[0])
        attempt.vectorize(column)
    except RefcompError as exc:
        log.debug("schedule_conv: the padded copy %s keeps the generic schedule: %s", block.name, exc)
        return None
    return attempt


def _parallel_outer(sch, name: str) -> None:
    try:
        loops = sch.get_loops(sch.get_block(name))
        if loops and sch.get(loops[0]).kind == "serial":
            sch.parallel(loops[0])
    except RefcompError:
        pass
