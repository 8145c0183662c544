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

from ...ast import as_int
from ...ast.functor import collect
from ...ast.stmt import Block
from ...errors import RefcompError

log = logging.getLogger("refcomp.graph.schedule_conv")


def schedule_conv(sch, rest: Callable, options: dict | None = None):
    """sch (a Schedule, changed in place) with its convolution blocks on the conv recipe and
    `rest(sch, rv, block, loops)` applied to every other block, or None when the function has a
    reduction that is not a convolution or a convolution the recipe does not take.  `options`
    go to the recipe (`conv_fp32`'s keywords, e.g. the tuner's channel_vector_tile)."""
    from ...loops import recipes

    func = sch.func
    found = recipes.find_convs(func)
    if not found:
        blocked = recipes.find_blocked_convs(func)
        return _schedule_blocked(sch, blocked, rest) if blocked and options is None else None
    convs = {shape.block for shape in found}
    others = [b.name for b in collect(func.body, Block) if b.name != "root" and b.name not in convs]
    try:
        for shape in found:
            sch = recipes.conv_fp32(sch, shape.block, **(options or {}))
    except RefcompError as exc:
        log.debug("schedule_conv: %s keeps the generic schedule: %s", func.name, exc)
        return None
    inputs = {block.reads[shape.x_index].buffer for block in collect(func.body, Block)
              for shape in found if block.name == shape.block}
    depthwise = {shape.block for shape in found for block in collect(func.body, Block)
                 if block.name == shape.block and _is_depthwise(block, shape)}
    sch = _schedule_other_stages(sch, others, inputs, depthwise, rest, epilogue_convs=convs)
    for block in collect(sch.func.body, Block):
        if block.name.endswith("_global") and block.name not in others:  # the packed weights
            _parallel_outer(sch, block.name)
    return sch


def _schedule_blocked(sch, found: list, rest: Callable):
    """schedule_conv for convolutions over the channel-blocked layout (recipes.conv_blocked_fp32):
    the other stages (the padded input, an epilogue) as for the NCHW forms, the epilogue inlined
    into the tile's write-back where it can be."""
    from ...loops import recipes

    convs = {shape.block for shape in found}
    others = [b.name for b in collect(sch.func.body, Block) if b.name != "root" and b.name not in convs]
    inputs = {block.reads[shape.x_index].buffer for block in collect(sch.func.body, Block)
              for shape in found if block.name == shape.block}
    depthwise = {shape.block for shape in found if shape.depthwise}
    try:
        for shape in found:
            sch = recipes.conv_blocked_fp32(sch, shape.block)
    except RefcompError as exc:
        log.debug("schedule_conv: %s keeps the generic schedule: %s", sch.func.name, exc)
        return None
    return _schedule_other_stages(sch, others, inputs, depthwise, rest)


def _schedule_other_stages(sch, others: list, inputs: set, depthwise: set, rest: Callable,
                           epilogue_convs: set | None = None):
    """The function's stages other than its convolutions, after the recipe: left where the recipe
    placed them (in a parallel loop) or where they became the tile's write-back; with
    epilogue_convs, an epilogue moved under its convolution's tile where it can be; a padded copy
    of a convolution's input made one plane (or block of channels) at a time, else whole; the rest
    get `rest`."""
    for name in others:
        try:
            rv = sch.get_block(name)
            loops = sch.get_loops(rv)
        except RefcompError:
            continue
        if not loops or any(sch.get(loop).kind == "parallel" for loop in loops):
            continue  # placed by the recipe (a depthwise input made per channel block)
        if _into_write_back(sch, rv):
            continue
        if epilogue_convs is not None:
            moved = _epilogue_at_tile(sch, rv, epilogue_convs)
            if moved is not None:
                sch = moved
                continue
        padded = _padded_copy_per_plane(sch, rv, inputs, depthwise)
        if padded is None:
            padded = _padded_copy(sch, rv, inputs)
        if padded is not None:
            sch = padded
        else:
            rest(sch, rv, sch.get(rv), loops)
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


def _epilogue_at_tile(sch, rv, convs: set):
    """Move an epilogue that reads a convolution's output (bias, activation, residual sum) under
    the innermost loop of the convolution's nest at which `reverse_compute_at` takes it (the GEMM
    tile and direct forms, which write the output from the reduction itself: the tile's values
    are then still in cache when the epilogue reads them), its innermost loop vectorized by the
    widest power of two dividing it (`row_lanes`): a new schedule, or None (sch unchanged) when
    the block is not such an epilogue or no loop takes it."""
    from ...loops import recipes

    block = sch.get(rv)
    if any(iv.kind != "spatial" for iv in block.iter_vars):
        return None
    try:
        producers = [sch.get(p).name for p in sch.get_producers(rv)]
    except RefcompError:
        return None
    conv = next((name for name in producers if name in convs or name.removesuffix("_o") in convs), None)
    if conv is None:
        return None
    for depth in range(len(sch.get_loops(sch.get_block(conv))) - 1, -1, -1):
        attempt = sch.copy()
        try:
            loop = attempt.get_loops(attempt.get_block(conv))[depth]
            if attempt.get(loop).kind not in ("serial", "parallel"):
                continue
            epilogue = attempt.get_block(block.name)
            attempt.reverse_compute_at(epilogue, loop)
            inner = attempt.get_loops(epilogue)[-1]
            extent = as_int(attempt.get(inner).extent)
            lanes = recipes.row_lanes(extent) if extent is not None else None
            if lanes is not None:
                if lanes < extent:
                    _, inner = attempt.split(inner, [None, lanes])
                attempt.vectorize(inner)
        except RefcompError as exc:
            log.debug("schedule_conv: epilogue %s not at depth %d of %s: %s", block.name, depth, conv, exc)
            continue
        return attempt
    return None


def _is_depthwise(block, shape) -> bool:
    """Whether the convolution block reads one input channel per output channel (its channel
    reduction of extent 1, X's channel index following the output channel)."""
    from ...ast import BufferLoad, as_int as _as_int
    from ...loops.recipes.conv_match import _vars_in

    nd = shape.spatial_dims
    out_channel, channel = block.iter_vars[1].var, block.iter_vars[2 + nd]
    if _as_int(channel.dom.extent) != 1:
        return False
    data = block.reads[shape.x_index].buffer
    loads = [l for l in collect(block.body, BufferLoad) if l.buffer is data]
    return bool(loads) and out_channel in _vars_in(loads[0].indices[1])


def _padded_copy_per_plane(sch, rv, inputs: set, convs: set):
    """A depthwise convolution's (one of `convs`) padded input made one plane at a time, inside the convolution's
    parallel channel loop or the batch loop inside it (`compute_at`): each channel's padded plane is written just before the
    tile reads it (in cache; no pass of its own over the whole tensor), each row one vector loop.
    The planes of different channels are disjoint, so the parallel loop stays legal.  A new
    schedule, or None (sch unchanged) when rv is not such a copy or a step is refused (a
    convolution mixing channels needs every input plane: its copy stays a pass of its own)."""
    block = sch.get(rv)
    if len(block.writes) != 1 or block.writes[0].buffer not in inputs or block.init is not None \
            or any(iv.kind != "spatial" for iv in block.iter_vars):
        return None
    for conv in convs:
        conv_rv = sch.get_block(conv)
        if block.writes[0].buffer not in {r.buffer for r in sch.get(conv_rv).reads}:
            # the convolution may read the padded input through its copy in vectors of channels
            # (the channel-vector form): the plane is then made where that copy is made
            feeding = {sch.get(p).name for p in sch.get_producers(conv_rv)}
            conv_rv = next((c for c in sch.get_consumers(rv) if sch.get(c).name in feeding), None)
            if conv_rv is None:
                continue
        conv_loops = sch.get_loops(conv_rv)
        parallel = next((i for i, l in enumerate(conv_loops) if sch.get(l).kind == "parallel"), None)
        if parallel is None:
            continue
        # at the parallel channel loop, or at the batch loop inside it (one plane of one image)
        for depth in (parallel + 1, parallel + 2):
            attempt = sch.copy()
            try:
                copy = attempt.get_block(block.name)
                attempt.compute_at(copy, attempt.get_loops(attempt.get_block(conv))[depth - 1])
                loops = attempt.get_loops(copy)
                if len(loops) - depth < 2:
                    continue
                attempt.vectorize(loops[-1])
                _plane_on_stack(attempt, copy, loops[depth:])
            except RefcompError as exc:
                log.debug("schedule_conv: the padded copy %s is not made per plane at depth %d: %s",
                          block.name, depth, exc)
                continue
            return attempt
    return None


# The largest padded plane (elements) kept on each thread's stack (16 KB per image plane: an
# L1-resident 64 x 64 plane; a larger one stays a buffer of the whole input).
_STACK_PLANE = 4096


def _plane_on_stack(sch, copy, plane_loops) -> None:
    """The padded input of a depthwise convolution, made one plane at a time, stored "local":
    compaction then keeps only the plane one iteration of the parallel loop writes and the
    tile reads, a stack array of each thread that stays in L1, instead of a buffer of the whole
    padded input (written and read back through L2 on every call, 0.9 MB at 48 x 48 x 48)."""
    points = 1
    for loop in plane_loops:
        extent = as_int(sch.get(loop).extent)
        if extent is None:
            return
        points *= extent
    if points > _STACK_PLANE:
        return
    try:
        sch.set_scope(copy, 0, "local")
    except RefcompError as exc:
        log.debug("schedule_conv: the padded plane stays global: %s", exc)


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
