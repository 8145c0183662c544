"""The convolution recipe's register-tile forms (see refcomp.loops.recipes.conv): the
channel-vector tile (with its transposed write-back and packed, prefetched weights), the
depthwise forms (rows of output columns; small maps in vectors of channels, their input planes
turned around), and the channel-rows tile for short reductions.  Each takes a Schedule and the
block's ConvShape and returns the Schedule, or raises ScheduleError."""
from __future__ import annotations

import logging

from ...ast import as_int
from ...errors import ScheduleError
from ..schedule import Schedule
from .conv_match import (_UNFUSED_CHANNEL_BLOCKS, ConvShape, _transposes_tiles, _window_positions, channel_block,
                         divides_row, native_lanes)

log = logging.getLogger("refcomp.loops.recipes.conv")


# Output columns per channel-vector tile, by the native lanes: as many accumulators of one vector of
# output channels as leave registers for the weight vector and the input broadcast (16 ymm with
# AVX2, 32 zmm with AVX-512, also when the tile's vectors are half as wide).
_COLUMN_TILE = {8: 12, 16: 24}


# Kernel windows of this many positions or more run inside the channel loop of the channel-vector
# tile (see _conv_channel_vector); smaller ones (a 1 x 1) outside it.  So do windows of at most
# _WINDOW_INNER_MAX_POSITIONS: the window is unrolled there, and larger ones measured slower and
# slow to build (one AVX-512 core, weights per call: an 8 x 8 patch embedding 85 -> 91 us, a
# 16 x 16 one 615 -> 679 us and 1.3 -> 13.7 s to build; a 7 x 7 stem 342 -> 307-335 us).
_WINDOW_INNER_MIN_POSITIONS = 2


_WINDOW_INNER_MAX_POSITIONS = 49


# A dense blocked convolution unrolls its whole window up to this many positions, a larger one its
# last window loop only: its tile's input broadcasts overlap from one window column to the next
# (XB columns at stride s, (XB - 1) s + KW values a window row), and gcc keeps them live across the
# unrolled row, spilling the accumulators.  A 7 x 7 stem at stride 2 (3 -> 32 channels, 96 x 96,
# batch 2, Zen 3) ran 1.84x the NCHW kernel's time whole, on par with the last loop only; a 3 x 3
# the same either way.  A depthwise tile loads vectors, not broadcasts: its 5 x 5 window stays
# whole (5% faster).
_BROADCAST_WINDOW_MAX_POSITIONS = 9


# The same with the window inside the channel loop, unrolled (AVX-512: 20 accumulators, 16 and 24
# measured slower on 3 x 3 layers of 6 x 6 and 3 x 3 pixels, and 24 spills on 24 x 24; AVX2: 9 of
# one vector, see _CHANNEL_VECTORS: 12 on a 48-wide row ran 3.3-3.9 against 2.4 ms for 8, and 9
# makes a 3 x 3 output one tile of its 9 pixels, 256 channels 0.52 -> 0.26 ms against 3 columns).
_COLUMN_TILE_WINDOW_INNER = {8: 9, 16: 20}


# Vectors of output channels per channel-vector tile (when they divide the channels), by the
# native lanes and whether the window runs inside the channel loop.  With AVX2 and the window
# inside, one vector: each window position then feeds XB accumulators from one weight load and
# broadcasts that neighbouring positions share, where two vectors keep twice the weights and the
# broadcasts of a wider window row live in 16 ymm registers and gcc spills.  Measured on a Zen 3
# core pair (2 threads, batch 2, weights per call, A/B in one process), ResNet-18's 3 x 3 layers,
# (MV, XB) = (2, 6 or fewer) -> (1, 8 or fewer; 9 since): 64 x 56 3.7 -> 2.9-3.0 ms, 128 x 28 4.5 -> 3.3,
# 256 x 14 6.7 -> 3.3-3.6, 512 x 7 11.2 -> 3.7-4.3 (XB 7 instead of 1), 64 x 48 (XB 12 or 8 of
# one vector) 3.9 -> 2.4; the 1 x 1 (window outside) kept two vectors (0.40 against 0.41-0.45 ms).
_CHANNEL_VECTORS = {(8, True): 1}


def column_tile(width: int, preferred: int) -> int:
    """XB: the divisor of the output width up to `preferred` that leaves the fewest tiles (the
    largest), so the tile has no remainder."""
    return channel_block(width, preferred)


def whole_rows_tile(width: int, height: int | None, preferred: int) -> int | None:
    """The pixels of a tile of whole output rows (a narrow output: each weight vector loaded then
    feeds more pixels), where the columns alone fall short of `preferred` and a divisor of the
    output's pixels up to it is a larger multiple of the width; None otherwise."""
    xb = column_tile(width, preferred)
    if height is None or xb >= preferred:
        return None
    pixels = column_tile(height * width, preferred)
    return pixels if pixels > xb and pixels % width == 0 else None


def channel_vector_tiles(shape: ConvShape, lanes: int, native: int) -> list[tuple[int, int]]:
    """The (MV, XB) tiles of the channel-vector form that fit shape: MV in 1, 2, 4 with MV * L
    dividing the output channels, XB a divisor of the output width, and the MV x XB accumulators
    with the MV weight vectors and the input broadcast in the vector registers (32 with AVX-512,
    16 without)."""
    registers = 32 if native >= 16 else 16
    channels, width = shape.out_channels or 0, shape.out_width or 0
    return [(mv, xb) for mv in (1, 2, 4) if channels % (mv * lanes) == 0
            for xb in range(1, width + 1) if width % xb == 0 and mv * xb + mv + 1 <= registers]


def recipe_channel_vector_tile(block, shape: ConvShape, lanes: int, native: int,
                               depthwise: bool = False) -> tuple[bool, int, int, int]:
    """(window inside the channel loop, MV, the preferred XB, XB) of the recipe's channel-vector
    tile for a convolution block (before the whole-rows tile of a narrow output)."""
    window_inner = not depthwise and \
        _WINDOW_INNER_MIN_POSITIONS <= _window_positions(block, shape.spatial_dims) <= _WINDOW_INNER_MAX_POSITIONS
    vectors = _CHANNEL_VECTORS.get((native, window_inner), 2)
    mv = vectors if shape.out_channels % (vectors * lanes) == 0 else 1
    preferred = (_COLUMN_TILE_WINDOW_INNER if window_inner else _COLUMN_TILE).get(native, 12) // mv
    return window_inner, mv, preferred, column_tile(shape.out_width, preferred)


def _conv_channel_vector(sch: Schedule, rv, shape: ConvShape, lanes: int, native: int, parallel: bool,
                         transpose_tile: bool = True, depthwise: bool = False,
                         choice: tuple[int, int, bool] | None = None) -> Schedule:
    """The output channels in vectors of L, a row of XB output columns in registers (MLAS's direct
    NCHWc kernel, on NCHW tensors): the block accumulates into a "local" tile acc[x % XB, o % L]
    per (n, o // L, y, x // XB), which lowering turns into a stack array of each thread that the C
    compiler keeps in XB vector registers, written back to the output in NCHW order once the whole
    reduction is done.  With a kernel window of more than one position, the weights are packed as
    Wp[o // L, c, r..., o % L] and the window runs inside the channel loop, unrolled, so each step
    of the reduction loads one weight vector and broadcasts one input element per column:

        for n, o // L parallel, y, x // XB:
          acc[0:XB, 0:L] = 0
          for c, r0 (unrolled), r1 (unrolled):
            for x % XB (unrolled):  acc[x % XB, 0:L] += X[n, c, y*s + r0, x*s + r1] * Wp[o // L, c, r0, r1, 0:L]
          out[n, o : o + L, y, x : x + XB] = acc^T

    The window positions of one channel read the same few rows of one input plane (in L1 from one
    position to the next; neighbouring positions even read the same elements, whose broadcasts
    the C compiler then shares), where a window outside the channel loop made a tile's every step
    read another plane (measured, one thread, AVX-512: 3 x 3 layers of 56 x 56 to 14 x 14 pixels
    from 120 to 152-159 GFLOP/s, 57% -> 72% of the FMA peak).  The tile then holds fewer
    accumulators (_COLUMN_TILE_WINDOW_INNER): the unrolled window keeps more values live.  A 1 x 1
    convolution keeps Wp[o // L, c, o % L] and the tile of _COLUMN_TILE.

    choice = (MV, XB, rows_parallel) replaces the choices below (MV, XB, the whole-rows tile and the
    parallel loop) by the caller's: XB output columns of one row, the rows parallel when
    rows_parallel is set (a 1-D convolution has none: its channel blocks), else the channel blocks.
    """
    if choice is not None:
        if tuple(choice[:2]) not in channel_vector_tiles(shape, lanes, native):
            raise ScheduleError(f"conv_fp32: channel-vector tile {tuple(choice[:2])} does not fit (MV x XB of "
                                f"{channel_vector_tiles(shape, lanes, native)})")
        if depthwise:
            raise ScheduleError("conv_fp32: a depthwise convolution takes no channel-vector tile choice")
    nd = shape.spatial_dims
    # (a depthwise tile keeps its window outside: its channel loop is one step)
    window_inner, mv, preferred, xb = recipe_channel_vector_tile(sch.get(rv), shape, lanes, native, depthwise)
    tile = sch.cache_write(rv, 0, "local")
    packed = sch.cache_read(rv, shape.w_index, "global")
    if window_inner:
        sch.transform_layout(packed, ("write", 0), lambda o, c, *r: (o // lanes, c, *r, o % lanes))
    elif nd == 2:
        sch.transform_layout(packed, ("write", 0), lambda o, c, r0, r1: (o // lanes, r0, r1, c, o % lanes))
    else:
        sch.transform_layout(packed, ("write", 0), lambda o, c, r0: (o // lanes, r0, c, o % lanes))
    _pack_in_write_order(sch, packed, lanes, window_inner)
    loops = sch.get_loops(rv)
    n, o, *spatial = loops[:2 + nd]
    reduce_loops = loops[2 + nd:]
    rows, x = spatial[:-1], spatial[-1]
    # MV vectors of output channels per tile where the channels allow: each broadcast input
    # element then feeds MV multiply-adds, and the loads per multiply-add drop (the two load
    # ports, not the two FMA units, bound a one-vector tile)
    if choice is not None:
        mv, xb, preferred = choice[0], choice[1], choice[1]  # (preferred = XB: no whole-rows tile)
    o_outer, o_mid, o_inner = sch.split(o, [None, mv, lanes])
    # a narrow output (a ResNet's 6 x 6 or 3 x 3 stages): the tile takes whole rows, so each
    # weight vector loaded feeds more output pixels
    height = as_int(sch.get(rows[-1]).extent) if rows else None
    fused = False
    pixels = whole_rows_tile(shape.out_width, height, preferred)
    if pixels is not None:
        x, rows, xb, fused = sch.fuse(rows[-1], x), rows[:-1], pixels, True
    x_outer, x_inner = sch.split(x, [None, xb])
    channel, *window = reduce_loops
    # the channel loop innermost of the reduction (a 1 x 1, or the window inside it, unrolled): the
    # accumulators stay at one address for its whole run, so the C compiler keeps them in
    # registers across it
    reduction = [channel, *window] if window_inner else [*window, channel]
    # the channel blocks parallel, unfused: a fused (n, o // L) index would be split back by floor
    # divisions whose sign fix-ups the C compiler cannot drop inside a parallel loop; the batch
    # inside them, so a block's packed weights serve every image while they are in cache (a 1x1
    # over 160 channels to 1280 at 3 x 3 streams 800 KB of weights per pass) and a call is one
    # parallel region, not one per image
    # few channel blocks (a stem's 16 or 32 channels are one or two): the rows outside them are
    # the parallel loop instead, the batch inside it (one parallel region per call, not one per
    # image; a fused (n, y) index split back by floor divisions in the tile's addresses cost 30-60%)
    few = shape.out_channels // (mv * lanes) < _UNFUSED_CHANNEL_BLOCKS and bool(rows) and not depthwise
    if choice is not None:
        few = bool(choice[2]) and bool(rows)
    if few:
        sch.reorder(rows[0], n, o_outer, *rows[1:], x_outer, *reduction, x_inner, o_mid, o_inner)
    else:
        sch.reorder(o_outer, n, *rows, x_outer, *reduction, x_inner, o_mid, o_inner)
    # channels last in the tile: each column's L channels one vector (compaction then keeps the
    # XB x L part one (n, o // L, y, x // XB) step uses)
    layout = (lambda n, o, y, x: (n, y, x, o)) if nd == 2 else (lambda n, o, x: (n, x, o))
    transposed = _transposed_tile(sch, rv, tile, x_outer, lanes, layout, fused) if transpose_tile else None
    if transposed is not None:
        sch = transposed  # handles stay valid in a copy
    else:
        sch.reverse_compute_at(tile, x_outer)
        sch.transform_layout(rv, ("write", 0), layout)
    if depthwise:
        _channel_vector_input(sch, rv, shape, lanes, n, transpose_tile)
    sch.decompose_reduction(rv, reduction[0])
    sch.vectorize(o_inner)
    _unroll_tile(sch, window if window_inner else (), x_inner, xb, o_mid, mv)
    _vectorize_write_back(sch, tile, xb, native, fused, transposed is not None)
    if not depthwise and weight_hints():
        _prefetch_weights(sch, rv, packed, o_outer, channel, window, mv, window_inner, None if few else n)
    if parallel:
        # one channel block and no rows outside the tile (a MobileNet projection to 16 or 32
        # channels at 12 x 12 or 6 x 6): the images are the parallel loop, else a lone block
        # would leave every thread but one idle
        single = not few and shape.out_channels // (mv * lanes) == 1
        sch.parallel(rows[0] if few else (n if single else o_outer))
    return sch


def _channel_vector_input(sch: Schedule, rv, shape: ConvShape, lanes: int, at, transpose: bool = True) -> None:
    """A depthwise convolution's input read in vectors of channels, made at loop `at` (one image
    of one channel block): the tile's input planes copied into Xc[n, c // L, y, x, c % L]
    (cache_read + transform_layout), each run of up to L columns of each row turned around by
    the channel-vectors transpose (L loads, the 16 x 16 network, one store per column), so that
    each multiply-add of the tile loads one vector of L channels at one input position (NCHW
    holds them a plane apart).  Where an earlier stage of the function pads the input, that
    stage is what the tile reads: it is moved to `at` too and made in the same layout, from the
    copy of the unpadded planes, a vector of channels per position (its bounds test, which
    does not depend on the channel, once per vector).  Without `transpose` the copies stay
    loops (for the reference interpreter, which does not run the C helper; the recipe then
    needs parallel=False: the parallel check does not see through their channel blocks)."""
    nd = shape.spatial_dims
    data = sch.get(rv).reads[shape.x_index].buffer
    producer = next((p for p in sch.get_producers(rv) if data in {w.buffer for w in sch.get(p).writes}), None)
    if producer is None:
        copy = sch.cache_read(rv, shape.x_index, "global")
        sch.compute_at(copy, at, preserve_unit_loops=True)
        _turn_around(sch, copy, lanes, nd, transpose)
        return
    pad = sch.get(producer)
    if len(pad.writes) != 1 or len(pad.reads) != 1 or pad.init is not None \
            or any(iv.kind != "spatial" for iv in pad.iter_vars):
        raise ScheduleError("conv_fp32: the depthwise input's producer is not a padded copy")
    sch.compute_at(producer, at, preserve_unit_loops=True)
    sch.transform_layout(producer, ("write", 0), _channels_last(lanes, nd))
    copy = sch.cache_read(producer, 0, "global")
    sch.compute_at(copy, sch.get_loops(producer)[-(nd + 2)], preserve_unit_loops=True)
    _turn_around(sch, copy, lanes, nd, transpose)
    o, *positions = sch.get_loops(producer)[-(nd + 1):]
    _on_stack(sch, producer, [o, *positions])
    o_outer, o_inner = sch.split(o, [None, lanes])
    sch.reorder(o_outer, *positions, o_inner)
    sch.vectorize(o_inner)
    # one block per vector of channels: its write region is then one point of the channel blocks
    # (the parallel check relaxes no floor division of the lane loop with the outer loops)
    sch.blockize(o_inner)


# The largest input block (elements) of the depthwise channel-vector form kept on each thread's
# stack (32 KB: it stays in L1 between its copy and the tile's reads).
_STACK_BLOCK = 8192


def _on_stack(sch: Schedule, stage, loops) -> None:
    """The buffer the placed stage writes made "local" when what one iteration of the loops
    around it writes (the product of `loops`' extents) is at most _STACK_BLOCK elements:
    compaction then keeps that block alone, a stack array of each thread, instead of a buffer
    of the whole input."""
    points = 1
    for loop in loops:
        extent = as_int(sch.get(loop).extent)
        if extent is None:
            return
        points *= extent
    if points <= _STACK_BLOCK:
        sch.set_scope(stage, 0, "local")


def _channels_last(lanes: int, nd: int):
    if nd == 2:
        return lambda n, c, y, x: (n, c // lanes, y, x, c % lanes)
    return lambda n, c, x: (n, c // lanes, x, c % lanes)


def _turn_around(sch: Schedule, copy, lanes: int, nd: int, transpose: bool) -> None:
    """The copy (placed) written as Xc[n, c // L, y, x, c % L] and tensorized by the
    channel-vectors transpose of the widest run of columns (at most L) that divides the row (the
    transposed copy's write region is then one channel block, which the parallel check needs)."""
    from .transpose import channel_vectors_intrin

    sch.transform_layout(copy, ("write", 0), _channels_last(lanes, nd))
    o, *rows, x = sch.get_loops(copy)[-(nd + 1):]
    _on_stack(sch, copy, [o, *rows, x])
    columns = as_int(sch.get(x).extent)
    if columns is None:
        raise ScheduleError("conv_fp32: the depthwise input has a symbolic width")
    chunk = max(d for d in range(1, min(columns, lanes) + 1) if columns % d == 0)
    intrin = channel_vectors_intrin(chunk, lanes)
    if not transpose:
        intrin = None
    elif intrin is None or not intrin.available():
        raise ScheduleError(f"conv_fp32: no channel-vector transpose of {lanes} lanes on this CPU")
    o_outer, o_inner = sch.split(o, [None, lanes])
    x_outer, x_inner = sch.split(x, [None, chunk])
    sch.reorder(o_outer, *rows, x_outer, o_inner, x_inner)
    if intrin is not None:
        sch.tensorize(o_inner, intrin.name)


# How many steps of the channel loop ahead the tile's weight vectors are prefetched (16 steps of a
# 12 x 32 tile are about 200 cycles of multiply-adds: a load from L3 on a large server part).
_WEIGHT_PREFETCH_DISTANCE = 16


# The same with the window inside the channel loop, in channels (a window's worth of steps each:
# 9 of a 3 x 3).  Measured on ResNet-18 at half width, one AVX-512 core, whole model called
# repeatedly (its 11 MB of weights come from L3 on every call): 6 channels 2.67-2.76 ms, 2 channels
# 2.68-2.97, no hint 2.88-2.95; the same on hot kernels.
_WEIGHT_PREFETCH_CHANNELS = 6


# With the channel blocks the parallel loop and the batch inside them, a block's weights come
# from L3 in its first image and from L2 in the others, so the first image waits on memory and
# the others leave it idle.  Each step therefore also prefetches the NEXT block's weights, spread
# over this many images (line (c + n * C) // S in image n): memory streams the next block while
# the core computes on this one.  Measured on ResNet-18 at half width (batch 2, its 256-channel
# 3 x 3 layers 2.4 MB of weights each), whole model, AVX-512 server part, A/B in one process:
# 2 threads 1.76-1.85 -> 1.66 ms, 1 thread (CPU time) 2.66 -> 2.56 ms.  0 turns the hint off.
_NEXT_BLOCK_IMAGES = 2


def weight_hints() -> bool:
    """Whether the register tiles hint their weights ahead (_prefetch_weights,
    _prefetch_blocked_weights): on AVX-512 CPUs, where they were measured to help (server parts
    whose L3 feeds the weights slower than the tile eats them).  On a Zen 3 (AVX2) the same hints
    cost time: whole models, batch 2, 2 threads, A/B in one process, the ResNet-18 at half width
    4.06 -> 3.73 ms and the MobileNetV2 1.51 -> 1.41 ms (medians) without them; a blocked 3 x 3
    over 256 channels at 14 x 14 alone 0.60x the time, a 1 x 1 from 160 to 1280 channels at
    3 x 3 0.68x: the hints' index arithmetic per step, where the hardware prefetcher keeps up."""
    from ..intrin import cpu

    return cpu.has("avx512f")


def _prefetch_weights(sch: Schedule, rv, packed, o_outer, channel, window, mv: int,
                      window_inner: bool = False, batch=None) -> None:
    """Hint the packed weight vectors _WEIGHT_PREFETCH_DISTANCE steps of the channel loop ahead
    (`prefetch`, one cache line per vector of channels): a layer whose weights exceed L2 (ResNet-18's
    256-channel 3 x 3 layers, 2.4 MB) streams them from L3 on every call, and its tile spends
    few cycles per line; measured on an AVX-512 server part, 2 threads, in a model run: 170-187 ->
    141-166 us per layer.  With the window inside the channel loop (Wp[o // L, c, r.., 0]), the
    hint sits in the innermost window loop and names the same position
    _WEIGHT_PREFETCH_CHANNELS channels ahead.  When `batch` (the batch loop) is directly inside
    o_outer (the channel blocks outermost), each step also hints the next block's line
    (c + n * C) // _NEXT_BLOCK_IMAGES, the block index and the line clamped by `prefetch`."""
    from ..primitives.index_map import IndexMap

    loops = sch.get_loops(rv)
    nodes = [sch.get(loop) for loop in loops]
    at_channel = nodes.index(sch.get(channel))
    at_o = nodes.index(sch.get(o_outer))
    at_window = [nodes.index(sch.get(w)) for w in window]
    at_n = nodes.index(sch.get(batch)) if batch is not None else None
    depth = max([at_channel, *at_window]) + 1 if window_inner else at_channel + 1
    name = sch.get(packed).writes[0].buffer.name
    for m in range(mv):
        if window_inner:
            def ahead(*v, m=m):  # Wp[o // L, c + channels ahead, r.., 0]
                return (v[at_o] * mv + m, v[at_channel] + _WEIGHT_PREFETCH_CHANNELS, *(v[p] for p in at_window), 0)
        else:
            def ahead(*v, m=m):  # Wp[o // L, r.., c + distance, 0]
                return (v[at_o] * mv + m, *(v[p] for p in at_window), v[at_channel] + _WEIGHT_PREFETCH_DISTANCE, 0)
        sch.prefetch(loops[depth - 1], name, IndexMap.from_callable(ahead, depth))
    if batch is None or not _NEXT_BLOCK_IMAGES:
        return
    if at_n != at_o + 1:
        return
    channels = as_int(sch.get(channel).extent)
    if channels is None:
        return
    for m in range(mv):
        if window_inner:
            def following(*v, m=m):  # Wp[o // L + MV, (c + n * C) // S, r.., 0]
                return ((v[at_o] + 1) * mv + m, (v[at_channel] + v[at_n] * channels) // _NEXT_BLOCK_IMAGES,
                        *(v[p] for p in at_window), 0)
        else:
            def following(*v, m=m):  # Wp[o // L + MV, r.., (c + n * C) // S, 0]
                return ((v[at_o] + 1) * mv + m, *(v[p] for p in at_window),
                        (v[at_channel] + v[at_n] * channels) // _NEXT_BLOCK_IMAGES, 0)
        sch.prefetch(loops[depth - 1], name, IndexMap.from_callable(following, depth))


def _transposed_tile(sch: Schedule, rv, tile, x_outer, lanes: int, layout, whole_rows: bool) -> Schedule | None:
    """The tile copied, transposed in registers, from acc[.., XB, MV * L] (channels last, as the
    reduction accumulates it) into a second stack tile accT[MV * L, .., XB] in the output's order
    (cache_read of what the write-back reads, both placed at the tile loop by reverse_compute_at,
    the copy tensorized by a tile transpose per vector of channels and, with whole_rows (the tile's
    positions consecutive in both), all its positions at once when they are at most L, else runs
    of at most L columns of one row): the write-back then reads each channel's columns contiguously, as the output
    holds them, instead of gathering them at the tile's row stride (which cost as much as the
    whole reduction of a 1x1 convolution over 48 channels).  The tile gets `layout` (channels
    last), the copy keeps the output's.  A new schedule, or None (sch unchanged) when the CPU has
    no such transpose or a step is refused."""
    from .transpose import tile_transpose_intrin

    if not _transposes_tiles(lanes):
        return None
    attempt = sch.copy()
    try:
        copy = attempt.cache_read(tile, 0, "local")
        attempt.reverse_compute_at(copy, x_outer)
        attempt.reverse_compute_at(tile, x_outer)
        attempt.transform_layout(rv, ("write", 0), layout)
        loops = attempt.get_loops(copy)
        outer = attempt.get(x_outer)
        # the copy's own loops, inside the tile loop: channels, rows (of a tile of whole rows), columns
        inside = loops[next(i for i, loop in enumerate(loops) if attempt.get(loop) is outer) + 1:]
        if len(inside) < 2:  # one column: nothing to transpose
            return None
        o, *rows, x = inside
        columns = as_int(attempt.get(x).extent)
        tile_rows = as_int(attempt.get(rows[0]).extent) if rows else 1
        o_outer, o_inner = attempt.split(o, [None, lanes])
        intrin = tile_transpose_intrin(tile_rows, columns, lanes) if rows and whole_rows else None
        if intrin is not None:
            attempt.reorder(o_outer, rows[0], x, o_inner)
            transposed = rows[0]
        else:
            chunk = max((d for d in range(2, min(columns, lanes) + 1) if columns % d == 0), default=None)
            intrin = tile_transpose_intrin(1, chunk, lanes) if chunk is not None else None
            if intrin is None:
                return None
            x_outer, transposed = attempt.split(x, [None, chunk])
            attempt.reorder(o_outer, *rows, x_outer, transposed, o_inner)
        attempt.tensorize(transposed, intrin.name)
    except ScheduleError as exc:
        log.debug("conv_fp32: the tile is written back untransposed: %s", exc)
        return None
    return attempt


def _vectorize_write_back(sch: Schedule, tile, xb: int, native: int, whole_rows: bool, transposed: bool) -> None:
    """The tile's write-back out[n, o, y, x : x + XB] = acc[0 : XB, o] a vector of output columns
    at a time (contiguous in the output; each lane of the tile read at the stride of a column,
    MV * L): the epilogue inlined into it later (bias, clip, residual sum) then runs on vectors,
    not one element at a time.  The columns' loop (with whole_rows, the tile's rows and columns
    fused: whole rows are contiguous in the output too) is split by the widest power of two of at least
    4 lanes, up to the native vector, dividing XB, or vectorized whole when XB is 3 up to the
    native lanes (lowered as the powers of two it is made of); else left as it is.  A transposed
    tile (read contiguously too) takes the whole XB as one vector up to the native lanes."""
    lanes = xb if transposed and 2 < xb <= native else _row_lanes(xb, native)
    if lanes is None:
        return
    loops = sch.get_loops(tile)
    # a tile of whole rows: its rows and columns one loop (contiguous in the output too)
    column = sch.fuse(*loops[-2:]) if whole_rows and len(loops) >= 2 else loops[-1]
    if lanes < xb:
        _, column = sch.split(column, [None, lanes])
    sch.vectorize(column)


# Accumulator vectors of one depthwise row tile (of the 16 ymm / 32 zmm registers, the rest hold
# the input vectors and the weight broadcasts).
_ROW_VECTORS = 12


def row_lanes(width: int, native: int | None = None) -> int | None:
    """The vector for a row of `width` elements (see _row_lanes; native: this CPU's by default)."""
    return _row_lanes(width, native_lanes() if native is None else native)


def _row_lanes(width: int, native: int) -> int | None:
    """The vector of the depthwise row tile: the whole row when it is between one and two native
    vectors and a multiple of half of one (24 columns with AVX-512: two registers, 16 + 8, for
    three of 8 lanes); else the widest power of two of at least 8 lanes, up to the native vector,
    that divides the output width; else the width itself when it is 3 up to the native vector
    (12 columns: 8 + 4 lanes, 96 channels at 12 x 12, 20 -> 16 us); else 4 lanes when they divide
    it; else None."""
    # a narrow row no such vector divides (14, 7, 6 or 3 columns): the whole row is the vector
    # (lowering runs it as vectors of the powers of two it is made of, 14 = 8 + 4 + 2)
    return divides_row(width, native) or (width if 2 < width <= native else None)


def _conv_depthwise_rows(sch: Schedule, rv, shape: ConvShape, lanes: int, parallel: bool) -> Schedule:
    """A depthwise convolution (one input channel per group) a row at a time: up to _ROW_VECTORS
    vectors of output columns accumulate in a "local" tile (registers) over the kernel window,
    each window position one input vector (a gather at stride 2) times the broadcast weight, and
    the tile is stored to the output once:

        for n, o parallel, y, x // (XV * V):
          acc[0:XV * V] = 0
          for r0, r1:
            for xv (unrolled), x % V (vectorized):  acc[xv * V + x] += X[n, o, y*s + r0*d, (x..)*s + r1*d] * W[o, 0, r0, r1]
          out[n, o, y, x : x + XV * V] = acc
    """
    nd = shape.spatial_dims
    loops = sch.get_loops(rv)
    n, o, *spatial = loops[:2 + nd]
    reduce_loops = loops[2 + nd:]
    rows, x = spatial[:-1], spatial[-1]
    vectors = channel_block(shape.out_width // lanes, _ROW_VECTORS)
    x_outer, x_vec, x_lane = sch.split(x, [None, vectors, lanes])
    # a narrow row (a few vectors): the tile takes several output rows, so the window's
    # multiply-adds run on independent accumulators (one row of three vectors leaves each
    # accumulator a chain of 9 dependent multiply-adds per output)
    height = as_int(sch.get(rows[-1]).extent) if rows else None
    # a vector of lanes no power of two is lowered as the powers of two it is made of (24 = 16 + 8,
    # 12 = 8 + 4): one register each in the tile's budget
    pieces = vectors * bin(lanes).count("1")
    tile_rows = channel_block(height, _ROW_VECTORS // pieces) if height is not None and pieces < _ROW_VECTORS else 1
    if tile_rows > 1:
        y_outer, y_inner = sch.split(rows[-1], [None, tile_rows])
        rows = [*rows[:-1], y_outer]
        sch.reorder(o, n, *rows, x_outer, *reduce_loops, y_inner, x_vec, x_lane)
    else:
        y_inner = None
        sch.reorder(o, n, *rows, x_outer, *reduce_loops, x_vec, x_lane)
    # the batch inside the parallel channels: one parallel region per call (see _conv_channel_vector)
    tile = sch.cache_write(rv, 0, "local")
    sch.reverse_compute_at(tile, x_outer)
    sch.decompose_reduction(rv, reduce_loops[0])
    sch.vectorize(x_lane)
    if vectors > 1:
        sch.unroll(x_vec)
    if y_inner is not None:
        sch.unroll(y_inner)
    # the write-back: the tile's columns in vectors (rows of the output, contiguous)
    _, lane = sch.split(sch.get_loops(tile)[-1], [None, lanes])
    sch.vectorize(lane)
    if parallel:
        sch.parallel(o)
    return sch


# Accumulator vectors of one channel-rows tile (OB channels x the pieces of the row's vectors).
_ROWS_TILE_VECTORS = {8: 10, 16: 18}


def _channel_rows_tile(shape: ConvShape, native: int) -> tuple[int, int, int] | None:
    """(lanes, vectors, OB) of the channel-rows tile for this output width, or None: vectors of
    the native width when it divides the row (up to 3 of them), else the whole row as one vector
    when it is between one and two native vectors and a multiple of half of one (24 columns with
    AVX-512, lowered as 16 + 8); OB the largest divisor of the output channels that keeps the
    accumulators within _ROWS_TILE_VECTORS."""
    width = shape.out_width
    if width % native == 0:
        lanes, vectors = native, channel_block(width // native, 3)
        pieces = vectors
    elif native < width < 2 * native and width % (native // 2) == 0:
        lanes, vectors, pieces = width, 1, 2
    else:
        return None
    ob = channel_block(shape.out_channels, max(1, _ROWS_TILE_VECTORS.get(native, 10) // pieces))
    return lanes, vectors, ob


def _conv_channel_rows(sch: Schedule, rv, shape: ConvShape, lanes: int, vectors: int, ob: int,
                       parallel: bool) -> Schedule:
    """A convolution with a short reduction (fewer than 64 terms: a 1x1 over a few channels, a
    stem over 3) a row of output columns at a time for OB output channels: OB x XV vectors of
    output columns accumulate in a "local" tile (registers), each input vector loaded once per
    reduction step and multiplied by OB broadcast weights (read in place), and the tile is
    stored to the output rows once (no transpose: the rows are the output's own; the channel-vector
    tile spends as much on its write-back as on a reduction this short):

        for o // OB parallel, n, y, x // (XV * V):
          acc[0:OB, 0:XV * V] = 0
          for c, r..:
            for o % OB (unrolled), xv (unrolled), x % V (vectorized):
              acc[o, xv * V + x] += X[n, c, y*s + r0*d, (x..)*s + r1*d] * W[o, c, r0, r1]
          out[n, o : o + OB, y, x : x + XV * V] = acc
    """
    nd = shape.spatial_dims
    loops = sch.get_loops(rv)
    n, o, *spatial = loops[:2 + nd]
    reduce_loops = loops[2 + nd:]
    rows, x = spatial[:-1], spatial[-1]
    x_outer, x_vec, x_lane = sch.split(x, [None, vectors, lanes])
    o_outer, o_inner = sch.split(o, [None, ob])
    sch.reorder(o_outer, n, *rows, x_outer, *reduce_loops, o_inner, x_vec, x_lane)
    tile = sch.cache_write(rv, 0, "local")
    sch.reverse_compute_at(tile, x_outer)
    sch.decompose_reduction(rv, reduce_loops[0])
    sch.vectorize(x_lane)
    sch.unroll(o_inner)
    if vectors > 1:
        sch.unroll(x_vec)
    _, lane = sch.split(sch.get_loops(tile)[-1], [None, lanes])
    sch.vectorize(lane)
    if parallel:
        sch.parallel(o_outer)
    return sch


def _pack_in_write_order(sch: Schedule, packed, lanes: int, window_inner: bool = False) -> None:
    """The packing stage Wp[o // L, r..., c, o % L] = W[o, c, r...] (window_inner: Wp[o // L, c,
    r..., o % L]) in the packed buffer's order, o % L innermost: each step writes one contiguous
    vector of L weights (in W's order it writes one element per cache line, and the weights of a
    wide layer are packed on every call when they are not a constant)."""
    o, c, *window = sch.get_loops(packed)
    o_outer, o_inner = sch.split(o, [None, lanes])
    if window_inner:
        sch.reorder(o_outer, c, *window, o_inner)
    else:
        sch.reorder(o_outer, *window, c, o_inner)


# Accumulator vectors of the blocked convolution's tile (MV x XB), by the native lanes: what is
# left of the 16 ymm / 32 zmm registers after the MV weight vectors and the input broadcast (the
# window unrolled inside keeps a few more values live, as in _COLUMN_TILE_WINDOW_INNER).
_BLOCKED_TILE = {8: 12, 16: 20}


def _blocked_tile(out_blocks: int, width: int, height: int | None, depthwise: bool, native: int):
    """(MV, XB, whole_rows) of the blocked tile: MV vectors of output channels (1 or 2 dividing
    the channel blocks; 1 when depthwise) x XB output columns (a divisor of the width, or whole
    rows of the output when they fit better) within _BLOCKED_TILE accumulators, the one with the
    most multiply-adds per load."""
    budget = _BLOCKED_TILE.get(native, 12)
    best = None
    for mv in ((1,) if depthwise else (1, 2)):
        if out_blocks % mv:
            continue
        preferred = budget // mv
        pixels = whole_rows_tile(width, height, preferred)
        xb, rows = (pixels, True) if pixels is not None else (column_tile(width, preferred), False)
        # multiply-adds per load (XB input broadcasts and MV weight vectors per reduction step)
        score = mv * xb / (mv + xb)
        if best is None or score > best[0]:
            best = (score, mv, xb, rows)
    return best[1:]


def conv_blocked_fp32(sch: Schedule, block: str, parallel: bool = True) -> Schedule:
    """A float32 convolution over the channel-blocked layout (conv_match.blocked_conv_shape) on
    the channel-vector register tile, reading and writing whole vectors of channels: MV vectors
    of L output channels x XB output columns accumulate in a "local" tile (registers) and are
    stored once per tile, each a contiguous vector of the output (no transpose, no input copy):

        for o // (MV L) parallel, n, y, x // XB:          (the rows parallel when few blocks)
          acc[0:MV, 0:XB, 0:L] = 0
          for c, r0 (unrolled), r1 (unrolled):           (depthwise: r0, r1 only)
            for x % XB (unrolled), m (unrolled):
              acc[m, x, 0:L] += X[n, c // L, y*s + r0*d, x*s + r1*d, c % L] * W[o, c, r0, r1, 0:L]
                                (depthwise: X[n, o, .., .., 0:L] * W[o, 0, r0, r1, 0:L])
          out[n, o, y, x : x + XB, 0:L] = acc

    The weights are read in place (a constant is packed once, at build time, by the layout
    pass).  Raises ScheduleError when the block is not such a convolution."""
    from .conv_match import blocked_conv_shape

    rv = sch.get_block(block)
    node = sch.get(rv)
    shape = blocked_conv_shape(node, "conv_blocked_fp32")
    if not node.writes or str(node.writes[0].buffer.dtype) != "float32":
        raise ScheduleError(f"conv_blocked_fp32: block {block!r} does not write float32")
    if shape.out_width is None or shape.out_blocks is None or shape.lanes is None:
        raise ScheduleError(f"conv_blocked_fp32: block {block!r} has a symbolic width, channel count or lane count")
    loops = sch.get_loops(rv)
    if len(loops) != len(node.iter_vars):
        raise ScheduleError(f"conv_blocked_fp32: block {block!r} is already scheduled ({len(loops)} loops)")
    native = native_lanes()
    n, o, y, x, lane = loops[:5]
    reduce_loops = loops[5:]
    window = reduce_loops[-2:]
    height = as_int(sch.get(y).extent)
    mv, xb, whole_rows = _blocked_tile(shape.out_blocks, shape.out_width, height, shape.depthwise, native)
    o_outer, o_mid = sch.split(o, [None, mv])
    rows = [y]
    if whole_rows:
        x, rows = sch.fuse(y, x), []
    x_outer, x_inner = sch.split(x, [None, xb])
    if not shape.depthwise and as_int(sch.get(reduce_loops[0]).extent) is not None \
            and as_int(sch.get(reduce_loops[0]).extent) % shape.lanes == 0:
        # the channels as (block, lane): X[n, c // L, .., c % L] then takes no division per step
        reduce_loops = [*sch.split(reduce_loops[0], [None, shape.lanes]), *reduce_loops[1:]]
    # (a depthwise convolution keeps its channel blocks outermost: its padded input is then made
    # one block at a time inside them, schedule_conv's per-plane copy)
    few = shape.out_blocks // mv < _UNFUSED_CHANNEL_BLOCKS and bool(rows) and not shape.depthwise
    if few:
        sch.reorder(*rows, n, o_outer, x_outer, *reduce_loops, x_inner, o_mid, lane)
    else:
        sch.reorder(o_outer, n, *rows, x_outer, *reduce_loops, x_inner, o_mid, lane)
    tile = sch.cache_write(rv, 0, "local")
    sch.reverse_compute_at(tile, x_outer)
    sch.decompose_reduction(rv, reduce_loops[0])
    sch.vectorize(lane)
    positions = (as_int(node.iter_vars[-2].dom.extent) or 0) * (as_int(node.iter_vars[-1].dom.extent) or 0)
    unrolled = window if 0 < positions <= _WINDOW_INNER_MAX_POSITIONS else ()
    if not shape.depthwise and positions > _BROADCAST_WINDOW_MAX_POSITIONS:
        unrolled = unrolled[-1:]
    _unroll_tile(sch, unrolled, x_inner, xb, o_mid, mv)
    # the write-back: one vector of L channels per output position, contiguous in the output
    sch.vectorize(sch.get_loops(tile)[-1])
    if not shape.depthwise and weight_hints():
        _prefetch_blocked_weights(sch, rv, node.reads[shape.w_index].buffer.name, o_outer, reduce_loops, mv)
    if parallel:
        sch.parallel(rows[0] if few else o_outer)
    return sch


def _prefetch_blocked_weights(sch: Schedule, rv, name: str, o_outer, reduce_loops, mv: int) -> None:
    """Hint, at each window position, the weight line of the same position _WEIGHT_PREFETCH_CHANNELS
    input channels ahead (W[o, c + ahead, r0, r1, 0], one cache line per vector of L), as
    _prefetch_weights does for the NCHW tile: a wide layer's weights (ResNet-18's 256-channel
    3 x 3 layers, 2.4 MB) come from L3 on every call."""
    from ..primitives.index_map import IndexMap

    loops = sch.get_loops(rv)
    nodes = [sch.get(loop) for loop in loops]
    at = [nodes.index(sch.get(loop)) for loop in reduce_loops]
    at_o = nodes.index(sch.get(o_outer))
    depth = max(at) + 1
    split = len(reduce_loops) == 4  # (c // L, c % L, r0, r1)
    lanes = as_int(sch.get(reduce_loops[1]).extent) if split else 1
    for m in range(mv):
        def ahead(*v, m=m):
            channel = (v[at[0]] * lanes + v[at[1]]) if split else v[at[0]]
            return (v[at_o] * mv + m, channel + _WEIGHT_PREFETCH_CHANNELS, v[at[-2]], v[at[-1]], 0)

        sch.prefetch(loops[depth - 1], name, IndexMap.from_callable(ahead, depth))
    # the next channel block's weights too, spread over _NEXT_BLOCK_IMAGES images, when the batch
    # loop is directly inside the channel blocks (as _prefetch_weights does)
    at_n = at_o + 1
    channels = as_int(sch.get(reduce_loops[0]).extent)
    if not _NEXT_BLOCK_IMAGES or channels is None or at_n >= len(nodes) or nodes[at_n].loop_var.name != "n":
        return
    channels *= lanes
    for m in range(mv):
        def following(*v, m=m):
            channel = (v[at[0]] * lanes + v[at[1]]) if split else v[at[0]]
            return ((v[at_o] + 1) * mv + m, (channel + v[at_n] * channels) // _NEXT_BLOCK_IMAGES,
                    v[at[-2]], v[at[-1]], 0)

        sch.prefetch(loops[depth - 1], name, IndexMap.from_callable(following, depth))


def _unroll_tile(sch: Schedule, window, x_inner, xb: int, o_mid, mv: int) -> None:
    """A register tile's loops unrolled: the window positions given, the XB output columns and the
    MV vectors of output channels (where more than one)."""
    for position in window:
        sch.unroll(position)
    if xb > 1:
        sch.unroll(x_inner)
    if mv > 1:
        sch.unroll(o_mid)
