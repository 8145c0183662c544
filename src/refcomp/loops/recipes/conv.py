"""Convolution recipe: the GEMM micro-kernel per window position, or a register tile of the block.

A convolution block is recognised by its structure, not by its name (conv_shape):

    out[n, o, y, x] (+)= X[n, c (+ g * C/G), y * s + r0 * d, x * s + r1 * d] * W[o, c, r0, r1]

with iters (S, S, S..., R, R...): batch, output channel, output spatial, then the input channel
and the kernel window.  Channels first (NCHW x OIHW), 1-d or 2-d, any stride, dilation and group
count (depthwise included: one input channel per group).  The input may be a padded copy made by
an earlier stage of the same function; that stage keeps its own loop nest (inlined, its bounds
test would run once per multiply-add).

conv_fp32 schedules it in one of its forms, with schedule primitives only (not grouped: a
reduction of fewer than 64 terms on the channel-rows tile where its rows fit (_conv_channel_rows),
then the channel-vector tile first when the reduction has 64 terms or more, else the GEMM tile
first; depthwise with output rows of at most half a native vector: the channel-vector tile on
input planes turned into vectors of channels (_channel_vector_input)):

GEMM tile (not grouped, unit stride along the output columns, an fp32 tile's NR divides the
output width): for each window position the block is a matmul out[o, x] += W[o, c] * X[c, x]
over the channels, so an MR x NR tile of it is tensorized with the matmul micro-kernel (the
window iters are fixed in the tile; tensorize takes out's and X's moving dims as the tile's):

    W packed once per call:      Wp[r0, r1, o, c]                (cache_read + transform_layout)
    for (n, o // MR) parallel, y, x // NR, r0, r1:
      out[MR, NR] (= 0 at the first window position) += Wp[r0, r1, MR, C] * X[n, C, y + r0, NR]

Channel vector (not grouped, the output channels a multiple of a vector of at least 8 lanes):
MV vectors of output channels x a row of XB output columns accumulate in a "local" tile, which
the C target turns into registers, written back once per tile (see _conv_channel_vector).

Depthwise rows (one input channel per group, a vector of at least 4 lanes dividing the output
width): a row of output columns in a "local" tile of vectors over the window (see
_conv_depthwise_rows).

Direct (otherwise: grouped, depthwise widths no vector divides, other widths):

    W packed once per call:      Wp[o // OB, c, r..., o % OB]
    for o // OB parallel, n, y, x // V:                          ((n, o // OB) fused when few)
      out[OB, V] = 0                                            (decompose_reduction)
      for c, r0, r1:                                            the reduction, outside the tile
        for o % OB (unrolled):                                  OB accumulators of V lanes,
          for x % V (vectorized):                               one input vector reused OB times
            out[n, o, y, x] += X[...] * Wp[...]

V is a native vector (8 fp32 lanes with AVX2, 16 with AVX-512) or the largest halving of it that
divides the output width (a predicated tail when none of at least 4 lanes does); OB output
channels share each input vector (1 when grouped).  The output width and channel count must be
constant.  The recipe returns the Schedule; the caller builds `sch.func`.

This module holds conv_fp32, the GEMM-tile and direct forms; the register-tile forms named above
are in conv_tiles, the block recognition and shared sizes in conv_match.
"""
from __future__ import annotations

import logging

from ...ast import Block, PrimFunc, as_int
from ...errors import ScheduleError
from ..schedule import Schedule
from .conv_match import (_UNFUSED_CHANNEL_BLOCKS, ConvShape, _data_load, _transposes_tiles, _vars_in,
                         channel_block, channel_lanes, conv_shape, find_conv, find_convs, native_lanes,
                         vector_width)
from .conv_tiles import (_channel_rows_tile, _conv_channel_rows, _conv_channel_vector, _conv_depthwise_rows,
                         _row_lanes, column_tile, row_lanes)

log = logging.getLogger("refcomp.loops.recipes.conv")


# Output channels per register tile: with one vector of output columns each, OB accumulators plus
# the input vector and a weight broadcast fit the 16 ymm registers of AVX2 (32 zmm with AVX-512).
_CHANNEL_BLOCK = {8: 6, 16: 12}


def conv_fp32(func_or_sch: PrimFunc | Schedule, block: str | None = None, *, parallel: bool = True,
              pack_weight: bool = True, gemm_tile: bool = True, channel_vector: bool = True,
              depthwise_rows: bool = True, transpose_tile: bool = True, depthwise_channels: bool = True,
              channel_rows: bool = True, channel_vector_tile: tuple[int, int, bool] | None = None) -> Schedule:
    """Schedule a float32 convolution block (see the module docstring): not grouped, on the
    channel-vector tile (unless channel_vector is False; its tile written back through a transpose
    in registers where the CPU has one, unless transpose_tile is False: the reference interpreter
    does not run that C helper) when a vector of at least 8 lanes divides the output channels, or on the fp32 GEMM tile (unless gemm_tile is False) when its NR divides
    the output width and the input is read at unit stride along it, the first of the two for a
    reduction of 64 terms or more, the second for a shorter one; depthwise, on the row tile
    (unless depthwise_rows is False) when a vector divides the output width; else on the direct
    register tile.  channel_vector_tile = (MV, XB, rows_parallel) asks for the channel-vector tile
    with MV vectors of output channels and XB output columns (MV * L divides the channels, XB the
    width), the output rows parallel when rows_parallel is set (else the channel blocks): only that
    form is tried (a ScheduleError when it does not apply); the tuner samples these.  Raises ScheduleError when the block
    is not a convolution or a step is not legal for it; a Schedule passed in may then hold the
    steps made before (pass a function, or a copy, to keep the original)."""
    sch = func_or_sch if isinstance(func_or_sch, Schedule) else Schedule(func_or_sch)
    if block is None:
        found = find_conv(sch.func)
        if found is None:
            raise ScheduleError("conv_fp32: the function has no single convolution block")
        block = found.block
    rv = sch.get_block(block)
    shape = conv_shape(sch.get(rv), "conv_fp32")
    node = sch.get(rv)
    if not node.writes or str(node.writes[0].buffer.dtype) != "float32":
        raise ScheduleError(f"conv_fp32: block {block!r} does not write float32")
    if shape.out_width is None or shape.out_channels is None:
        raise ScheduleError(f"conv_fp32: block {block!r} has a symbolic output width or channel count")
    nd = shape.spatial_dims
    native = native_lanes()
    lanes = vector_width(shape.out_width, native)
    grouped = _vars_in(_data_load(node, shape).indices[1]) - {node.iter_vars[2 + nd].var}
    ob = 1 if grouped else channel_block(shape.out_channels, _CHANNEL_BLOCK.get(native, 6))

    loops = sch.get_loops(rv)
    if len(loops) != len(node.iter_vars):
        raise ScheduleError(f"conv_fp32: block {block!r} is already scheduled ({len(loops)} loops)")
    cv_lanes = channel_lanes(shape.out_channels, native) if channel_vector and not grouped else None
    reduction = 1
    for iv in node.iter_vars[2 + nd:]:
        reduction *= as_int(iv.dom.extent) or 0
    # the channel-vector tile first where the reduction is long enough to hide its write-back
    # (a transpose of XB x L values per tile); short ones (a 1x1 over a few channels) on the GEMM
    # tile where it applies, unless the tile is transposed in registers (then the channel-vector
    # tile won on every 1x1 measured, over 8 input channels too)
    # (the transpose exists for the tile's own vector only: a half-width tile of 8 channels
    # with AVX-512 is written back by gathers, and a 1x1 over 16 channels to 8 then ran at half the
    # GEMM tile's speed, 34 against 16 us at 48 x 48)
    short = reduction < _CHANNEL_VECTOR_MIN_REDUCTION and not (
        transpose_tile and cv_lanes is not None and _transposes_tiles(cv_lanes))
    forms = ["gemm", "cv"] if short else ["cv", "gemm"]
    if channel_vector_tile is not None:
        if cv_lanes is None:
            raise ScheduleError(f"conv_fp32: block {block!r} has no channel-vector tile (grouped, or no vector of "
                                f"at least 8 lanes divides its {shape.out_channels} output channels)")
        return _conv_channel_vector(sch, rv, shape, cv_lanes, native, parallel, transpose_tile,
                                    choice=channel_vector_tile)
    rows_tile = _channel_rows_tile(shape, native) if channel_rows and not grouped \
        and reduction < _CHANNEL_VECTOR_MIN_REDUCTION else None
    if rows_tile is not None:
        attempt = sch.copy()
        try:
            return _conv_channel_rows(attempt, attempt.get_block(block), shape, *rows_tile, parallel)
        except ScheduleError as exc:
            log.debug("conv_fp32: %s: the channel-rows tile does not apply (%s)", block, exc)
    for form in forms:
        if form == "gemm" and gemm_tile and not grouped:
            tile = _gemm_tile_for(shape, node)
            if tile is not None:
                attempt = sch.copy()
                try:
                    return _conv_on_gemm_tile(attempt, attempt.get_block(block), shape, tile, parallel)
                except ScheduleError as exc:
                    log.debug("conv_fp32: %s: the GEMM tile does not apply (%s)", block, exc)
        if form == "cv" and cv_lanes is not None:
            attempt = sch.copy()
            try:
                return _conv_channel_vector(attempt, attempt.get_block(block), shape, cv_lanes, native, parallel,
                                            transpose_tile)
            except ScheduleError as exc:
                log.debug("conv_fp32: %s: the channel-vector tile does not apply (%s)", block, exc)
    depthwise = bool(grouped) and as_int(node.iter_vars[2 + nd].dom.extent) == 1
    # a depthwise convolution whose output rows are at most half a native vector (a MobileNet's
    # 6 x 6 and 3 x 3 stages): its channels in vectors (the row tile's vectors would be mostly
    # empty lanes); measured on AVX-512, one thread: 17 -> 12, 25 -> 17 and 25 -> 10 us per layer
    dv_lanes = channel_lanes(shape.out_channels, native) if depthwise and depthwise_channels \
        and 2 * shape.out_width <= native else None
    if dv_lanes is not None:
        attempt = sch.copy()
        try:
            return _conv_channel_vector(attempt, attempt.get_block(block), shape, dv_lanes, native, parallel,
                                        transpose_tile, depthwise=True)
        except ScheduleError as exc:
            log.debug("conv_fp32: %s: the depthwise channel-vector form does not apply (%s)", block, exc)
    row_lanes = _row_lanes(shape.out_width, native)
    if depthwise_rows and grouped and as_int(node.iter_vars[2 + nd].dom.extent) == 1 and row_lanes:
        attempt = sch.copy()
        try:
            return _conv_depthwise_rows(attempt, attempt.get_block(block), shape, row_lanes, parallel)
        except ScheduleError as exc:
            log.debug("conv_fp32: %s: the depthwise row tile does not apply (%s)", block, exc)
    n, o, *spatial = loops[:2 + nd]
    reduce_loops = loops[2 + nd:]
    rows, x = spatial[:-1], spatial[-1]
    o_outer, o_inner = sch.split(o, [None, ob])
    x_outer, x_inner = sch.split(x, [None, lanes])
    # With enough channel blocks to share out, they are the parallel loop on their own, outside
    # the batch: a fused (n, o // OB) index is split back by floor divisions whose sign fix-ups
    # the C compiler cannot drop inside a parallel loop, and the branches they leave keep the
    # accumulators in memory.  Few blocks (a narrow layer) fuse the batch in.
    unfused = shape.out_channels // ob >= _UNFUSED_CHANNEL_BLOCKS
    sch.reorder(*((o_outer, n) if unfused else (n, o_outer)), *rows, x_outer, *reduce_loops, o_inner, x_inner)
    if pack_weight and ob > 1:
        packed = sch.cache_read(rv, shape.w_index, "global")
        sch.transform_layout(packed, ("write", 0), _weight_panels(ob, nd))
    sch.decompose_reduction(rv, reduce_loops[0])
    sch.vectorize(x_inner)
    if ob > 1:
        sch.unroll(o_inner)
    if parallel:
        # n and the channel blocks only: with the rows fused in too, gcc recomputes the fused
        # index's floor divisions (their sign fix-ups) inside the window loops
        sch.parallel(o_outer if unfused else sch.fuse(n, o_outer))
    return sch


# The reduction length (input channels per group x window) from which the channel-vector tile is
# tried before the GEMM tile (measured: a 1x1 over 16 or 32 channels runs faster on the GEMM tile,
# a 3x3 over 16 or a 1x1 over 96 on the channel-vector tile).
_CHANNEL_VECTOR_MIN_REDUCTION = 64


# The GEMM tiles a convolution runs on (the matmul recipe's 12-row tile is not among them: no
# convolution has been measured on it), and tiles one vector wide, for output widths the wide
# tiles' NR does not divide (56, 24, 8).
CONV_FP32_INTRINS = ["x86.avx512.sgemm_8x32", "x86.avx2.sgemm_6x16"]
NARROW_FP32_INTRINS = ["x86.avx2.sgemm_8x8"]


def _gemm_tile_for(shape: ConvShape, block: Block) -> str | None:
    """The fp32 GEMM tile intrinsic whose MR x NR tile covers output channels x output columns
    exactly, when the input is read at unit stride along the output columns."""
    from ..intrin import get as get_intrin
    from .common import takes_partial_rows, tile_of

    nd = shape.spatial_dims
    x_var, r_var = block.iter_vars[1 + nd].var, block.iter_vars[-1].var
    if not _unit_stride(_data_load(block, shape).indices[-1], x_var, r_var):
        return None
    fitting = [name for name in CONV_FP32_INTRINS + NARROW_FP32_INTRINS
               if get_intrin(name).available() and shape.out_width % tile_of(name)[1] == 0]
    # a tile whose MR divides the output channels first: a partial tile runs row by row
    whole = [name for name in fitting if shape.out_channels % tile_of(name)[0] == 0]
    partial = [name for name in fitting if takes_partial_rows(name)]
    return (whole or partial or [None])[0]


def _unit_stride(index, x_var, r_var) -> bool:
    """Whether index is x + f(r): one step along the output columns moves one input column
    (checked at a few points; conv_shape has already found index to use only x and r)."""
    from ...shape import EvaluationError, evaluate

    try:
        for r in (0, 1, 2):
            base = evaluate(index, {x_var: 0, r_var: r})
            if any(evaluate(index, {x_var: x, r_var: r}) != base + x for x in (1, 2, 5)):
                return False
    except EvaluationError:
        return False
    return True


def _conv_on_gemm_tile(sch: Schedule, rv, shape: ConvShape, intrin: str, parallel: bool) -> Schedule:
    """out[o, x] += W[o, c] * X[c, x] for each (n, y, window position), on the MR x NR GEMM tile:
    the channel reduction runs inside the micro-kernel, the kernel window around it.  The
    weights are packed as Wp[r..., o, c], so the tile reads MR rows of C channels each."""
    from .common import tile_of

    mr, nr, _ = tile_of(intrin)
    nd = shape.spatial_dims
    loops = sch.get_loops(rv)
    n, o, *spatial = loops[:2 + nd]
    c, *window = loops[2 + nd:]
    rows, x = spatial[:-1], spatial[-1]
    o_outer, o_inner = sch.split(o, [None, mr])
    x_outer, x_inner = sch.split(x, [None, nr])
    sch.reorder(n, o_outer, *rows, x_outer, *window, o_inner, x_inner, c)
    packed = sch.cache_read(rv, shape.w_index, "global")
    if nd == 2:
        sch.transform_layout(packed, ("write", 0), lambda o, c, r0, r1: (r0, r1, o, c))
    else:
        sch.transform_layout(packed, ("write", 0), lambda o, c, r0: (r0, o, c))
    sch.tensorize(o_inner, intrin)
    if parallel:
        sch.parallel(sch.fuse(n, o_outer))
    return sch


def _weight_panels(ob: int, nd: int):
    if nd == 2:
        return lambda o, c, r0, r1: (o // ob, c, r0, r1, o % ob)
    return lambda o, c, r0: (o // ob, c, r0, o % ob)


__all__ = ["ConvShape", "row_lanes", "channel_block", "column_tile", "conv_fp32", "conv_shape", "find_conv", "find_convs", "vector_width"]
