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
    for name in others:
        try:
            rv = sch.get_block(name)
            loops = sch.get_loops(rv)
        except RefcompError:
            continue
        if loops:
            rest(sch, rv, sch.get(rv), loops)
    for block in collect(sch.func.body, Block):
        if block.name.endswith("_global") and block.name not in others:  # the packed weights
            _parallel_outer(sch, block.name)
    return sch


def _parallel_outer(sch, name: str) -> None:
    try:
        loops = sch.get_loops(sch.get_block(name))
        if loops and sch.get(loops[0]).kind == "serial":
            sch.parallel(loops[0])
    except RefcompError:
        pass
