"""Convolution blocks recognised by their structure (conv_shape, see refcomp.loops.recipes.conv),
and the vector and block sizes that the recipe's forms share."""
from __future__ import annotations

from dataclasses import dataclass

from ...ast import Add, Block, BufferLoad, BufferStore, Cast, Mul, PrimFunc, Var, as_int, post_order_visit
from ...ast.functor import collect
from ...errors import ScheduleError


@dataclass(frozen=True)
class ConvShape:
    """What conv_shape found: the block, its dimension count and the positions of X and W in its reads."""

    block: str
    spatial_dims: int  # 1 or 2
    x_index: int
    w_index: int
    out_channels: int | None
    out_width: int | None


def conv_shape(block: Block, recipe: str = "conv") -> ConvShape:
    """Recognise out[n, o, sp...] = out[...] + X[n, c.., sp * s + r * d...] * W[o, c, r...]."""
    kinds = [iv.kind for iv in block.iter_vars]
    nd = kinds.count("reduce") - 1
    if nd not in (1, 2) or kinds != ["spatial"] * (2 + nd) + ["reduce"] * (1 + nd):
        raise ScheduleError(f"{recipe}: block {block.name!r} is not a convolution (iters S, S, S.., R, R..); "
                            f"its iters are {kinds}", spot=block)
    store = block.body
    if not isinstance(store, BufferStore) or not isinstance(store.value, Add):
        raise ScheduleError(f"{recipe}: block {block.name!r} is not one multiply-accumulate store", spot=block)
    out_vars = [iv.var for iv in block.iter_vars[:2 + nd]]
    c_var, *r_vars = [iv.var for iv in block.iter_vars[2 + nd:]]
    if len(store.indices) != 2 + nd or any(i is not v for i, v in zip(store.indices, out_vars)):
        raise ScheduleError(f"{recipe}: block {block.name!r} does not store out[n, o, spatial...]", spot=block)
    acc, product = store.value.a, store.value.b
    if not (isinstance(acc, BufferLoad) and acc.buffer is store.buffer and isinstance(product, Mul)):
        raise ScheduleError(f"{recipe}: block {block.name!r} does not accumulate a product", spot=block)
    loads = [side.value if isinstance(side, Cast) else side for side in (product.a, product.b)]
    if not all(isinstance(load, BufferLoad) for load in loads):
        raise ScheduleError(f"{recipe}: block {block.name!r} multiplies something other than two loads", spot=block)
    weight = next((l for l in loads if len(l.indices) == 2 + nd and l.indices[0] is out_vars[1]
                   and l.indices[1] is c_var and all(i is r for i, r in zip(l.indices[2:], r_vars))), None)
    data = next((l for l in loads if l is not weight), None)
    if weight is None or data is None or len(data.indices) != 2 + nd or data.indices[0] is not out_vars[0]:
        raise ScheduleError(f"{recipe}: block {block.name!r} does not read X[n, c, ...] and W[o, c, r...]",
                            spot=block)
    for k in range(nd):
        used = _vars_in(data.indices[2 + k])
        if not used or not used <= {out_vars[2 + k], r_vars[k]} or c_var in _vars_in(data.indices[2 + k]):
            raise ScheduleError(f"{recipe}: block {block.name!r}: X's spatial index {k} is not "
                                f"out * stride + window * dilation", spot=block)
    if c_var not in _vars_in(data.indices[1]) or _vars_in(data.indices[1]) - {c_var, out_vars[1]}:
        raise ScheduleError(f"{recipe}: block {block.name!r}: X's channel index does not follow c", spot=block)
    buffers = [r.buffer for r in block.reads]
    if data.buffer not in buffers or weight.buffer not in buffers or data.buffer is weight.buffer:
        raise ScheduleError(f"{recipe}: block {block.name!r} does not declare its reads of X and W", spot=block)
    return ConvShape(block.name, nd, buffers.index(data.buffer), buffers.index(weight.buffer),
                     as_int(block.iter_vars[1].dom.extent), as_int(block.iter_vars[1 + nd].dom.extent))


def _vars_in(expr) -> set:
    found: set = set()
    post_order_visit(expr, lambda node: found.add(node) if isinstance(node, Var) else None)
    return found


def find_conv(func: PrimFunc) -> ConvShape | None:
    """The convolution block of func when it has exactly one reduction and that is a convolution."""
    blocks = [b for b in collect(func.body, Block) if b.name != "root"]
    reductions = [b for b in blocks if any(iv.kind == "reduce" for iv in b.iter_vars)]
    if len(reductions) != 1:
        return None
    try:
        return conv_shape(reductions[0])
    except ScheduleError:
        return None


def find_convs(func: PrimFunc) -> list[ConvShape]:
    """The convolution blocks of func when every reduction in it is a convolution (a residual
    block's main and shortcut convolutions fused into one kernel), else []."""
    blocks = [b for b in collect(func.body, Block) if b.name != "root"]
    reductions = [b for b in blocks if any(iv.kind == "reduce" for iv in b.iter_vars)]
    try:
        return [conv_shape(block) for block in reductions]
    except ScheduleError:
        return []


def native_lanes(bits: int = 32) -> int:
    """Lanes of the widest vector register this CPU has (64 bytes with AVX-512, else 32)."""
    from ..intrin import cpu

    return cpu.vector_lanes(bits)


def vector_width(width: int, native: int) -> int:
    """V: the vector that divides_row gives for the output width; else the native lanes (the
    vector loop then gets a predicated tail), or the whole row when it is narrower."""
    return divides_row(width, native) or (native if width >= native else max(1, width))


def divides_row(width: int, native: int) -> int | None:
    """A vector that divides a row of `width` columns, or None: the whole row when it is between
    one and two native vectors and a multiple of half of one (24 columns with AVX-512: 16 + 8,
    measured 52 -> 43 us per depthwise layer); else the native lanes, halved while they do not
    divide the width, down to 8; a row of 3 up to native columns that only 4 lanes divide is
    itself the vector (12 columns with AVX-512: 8 + 4, not three vectors of 4); else 4 lanes
    when they divide it."""
    if native < width < 2 * native and width % (native // 2) == 0:
        return width
    lanes = native
    while lanes >= 4:
        if width % lanes == 0:
            if lanes < 8 and 2 < width <= native:
                return width
            return lanes
        lanes //= 2
    return None


def channel_block(channels: int, preferred: int) -> int:
    """OB: the largest divisor of the output channel count up to `preferred`."""
    for candidate in range(min(preferred, channels), 0, -1):
        if channels % candidate == 0:
            return candidate
    return 1


def _transposes_tiles(lanes: int) -> bool:
    """Whether the channel-vector tile of `lanes` channels is written back through a transpose in
    registers on this CPU (_transposed_tile)."""
    from .transpose import tile_transpose_intrin

    intrin = tile_transpose_intrin(1, 2, lanes)
    return intrin is not None and intrin.available()


def channel_lanes(channels: int, native: int) -> int | None:
    """L of the channel-vector tile: the native vector, or half of it (at least 8 lanes: a
    MobileNet's 24 or 40 channels with AVX-512), that divides the output channels; else None."""
    for lanes in (native, native // 2):
        if lanes >= 8 and channels % lanes == 0:
            return lanes
    return None


# Channel blocks from which the direct form's parallel loop is the channel blocks alone (see there).
_UNFUSED_CHANNEL_BLOCKS = 8


def _data_load(block: Block, shape: ConvShape) -> BufferLoad:
    loads = [node for node in collect(block.body, BufferLoad) if node.buffer is block.reads[shape.x_index].buffer]
    return loads[0]


def _window_positions(block: Block, nd: int) -> int:
    """The kernel window's positions (the product of the window iters' extents; 0 when symbolic)."""
    positions = 1
    for iv in block.iter_vars[3 + nd:]:
        positions *= as_int(iv.dom.extent) or 0
    return positions


@dataclass(frozen=True)
class BlockedConvShape:
    """What blocked_conv_shape found: a convolution over the channel-blocked layout NCHW{L}c
    (spec/graph.md, "Layouts"), dense (its channel reduction one iter c, read as X[.., c // L,
    .., c % L]) or depthwise (no channel reduction)."""

    block: str
    x_index: int
    w_index: int
    depthwise: bool
    out_blocks: int | None
    out_width: int | None
    lanes: int | None
    spatial_dims: int = 2


def blocked_conv_shape(block: Block, recipe: str = "conv") -> BlockedConvShape:
    """Recognise out[n, ob, y, x, oi] (+)= X[n, f(c), y * s + r0 * d, x * s + r1 * d, g(c)] *
    W[ob, c, r0, r1, oi] (iters S x 5, R x 3; f and g read c only), or the same over plain NCHW
    data X[n, f(c), .., ..] (a stem's few channels), or, depthwise, out[n, cb, y, x, ci] (+)=
    X[n, cb, .., .., ci] * W[cb, 0, r0, r1, ci] (iters S x 5, R x 2)."""
    kinds = [iv.kind for iv in block.iter_vars]
    if kinds not in (["spatial"] * 5 + ["reduce"] * 3, ["spatial"] * 5 + ["reduce"] * 2):
        raise ScheduleError(f"{recipe}: block {block.name!r} is not a blocked convolution (iters S x 5, R x 2 or 3); "
                            f"its iters are {kinds}", spot=block)
    depthwise = len(kinds) == 7
    store = block.body
    if not isinstance(store, BufferStore) or not isinstance(store.value, Add):
        raise ScheduleError(f"{recipe}: block {block.name!r} is not one multiply-accumulate store", spot=block)
    n, o, y, x, lane = [iv.var for iv in block.iter_vars[:5]]
    reduce_vars = [iv.var for iv in block.iter_vars[5:]]
    c = None if depthwise else reduce_vars[0]
    r0, r1 = reduce_vars[-2:]
    if len(store.indices) != 5 or any(i is not v for i, v in zip(store.indices, (n, o, y, x, lane))):
        raise ScheduleError(f"{recipe}: block {block.name!r} does not store out[n, o // L, y, x, o % L]", spot=block)
    acc, product = store.value.a, store.value.b
    if not (isinstance(acc, BufferLoad) and acc.buffer is store.buffer and isinstance(product, Mul)):
        raise ScheduleError(f"{recipe}: block {block.name!r} does not accumulate a product", spot=block)
    loads = [side.value if isinstance(side, Cast) else side for side in (product.a, product.b)]
    if not all(isinstance(load, BufferLoad) and len(load.indices) in (4, 5) for load in loads):
        raise ScheduleError(f"{recipe}: block {block.name!r} multiplies something other than two 5-d (or NCHW) loads",
                            spot=block)

    def is_weight(load) -> bool:
        i = load.indices
        second = (as_int(i[1]) == 0) if depthwise else (i[1] is c)
        return len(i) == 5 and i[0] is o and second and i[2] is r0 and i[3] is r1 and i[4] is lane

    weight = next((load for load in loads if is_weight(load)), None)
    data = next((load for load in loads if load is not weight), None)
    if weight is None or data is None or data.indices[0] is not n:
        raise ScheduleError(f"{recipe}: block {block.name!r} does not read X[n, .., .., .., ..] and "
                            f"W[o // L, c, r0, r1, o % L]", spot=block)
    for k, (out_var, r_var) in enumerate(((y, r0), (x, r1))):
        used = _vars_in(data.indices[2 + k])
        if not used or not used <= {out_var, r_var}:
            raise ScheduleError(f"{recipe}: block {block.name!r}: X's spatial index {k} is not "
                                f"out * stride + window * dilation", spot=block)
    if len(data.indices) == 4:  # plain NCHW data, dense only
        channels_ok = not depthwise and _vars_in(data.indices[1]) == {c}
    elif depthwise:
        channels_ok = data.indices[1] is o and data.indices[4] is lane
    else:
        # (one channel block: c // L simplified to 0 and c % L to c)
        channels_ok = _vars_in(data.indices[1]) <= {c} and _vars_in(data.indices[4]) == {c}
    if not channels_ok:
        raise ScheduleError(f"{recipe}: block {block.name!r}: X's channel indices do not follow "
                            f"{'the output channel' if depthwise else 'c'}", spot=block)
    buffers = [r.buffer for r in block.reads]
    if data.buffer not in buffers or weight.buffer not in buffers or data.buffer is weight.buffer:
        raise ScheduleError(f"{recipe}: block {block.name!r} does not declare its reads of X and W", spot=block)
    return BlockedConvShape(block.name, buffers.index(data.buffer), buffers.index(weight.buffer), depthwise,
                            as_int(block.iter_vars[1].dom.extent), as_int(block.iter_vars[3].dom.extent),
                            as_int(block.iter_vars[4].dom.extent))


def find_blocked_convs(func: PrimFunc) -> list[BlockedConvShape]:
    """The blocked convolution blocks of func when every reduction in it is one, else []."""
    blocks = [b for b in collect(func.body, Block) if b.name != "root"]
    reductions = [b for b in blocks if any(iv.kind == "reduce" for iv in b.iter_vars)]
    try:
        return [blocked_conv_shape(block) for block in reductions]
    except ScheduleError:
        return []
