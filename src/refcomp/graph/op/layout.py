"""Operators on the channel-blocked layout NCHW{L}c (spec/graph.md, "Layouts"): the layout
transform there and back, and the convolution and pooling that read and write it.

A tensor of NCHW shape (N, C, H, W) is held blocked as (N, ceil(C / L), H, W, L): element
[n, c, y, x] at [n, c // L, y, x, c % L], channels past C zero.  The way back cuts them off
(`channels` names C).  A blocked convolution's weights are "OIHW{L}o": (ceil(O / L), Ci, KH, KW, L)
with Ci = ceil(C / L) * L input channels (zero past C); a depthwise one's (ceil(C / L), 1, KH, KW,
L).  Its output channels past O are sums of zero weights: zero.  A blocked convolution may also
read plain NCHW data (a stem over an image's 3 channels, which blocks of L would pad mostly with
zeros) and write NCHW{L}c: its weights are then (ceil(O / L), C, KH, KW, L), the input channels
as they are.
"""
from __future__ import annotations

import numpy as np

from ...ast import expr as tir
from ...ast.expr import as_int
from ...ast.graph_struct_info import TensorStructInfo, as_dim
from ...errors import IRError
from ..shape_facts import simplify
from ._common import make_call, same_dtype, te
from .nn import _np_conv, _np_pool, _out_len, _pads, _pool, _tuple, pool_infer, pool_window
from .registry import register

LAYOUTS = ("NCHW", "NCHW{L}c")


def blocked_name(lanes: int) -> str:
    """The layout name of L-channel blocks ("NCHW8c")."""
    return f"NCHW{int(lanes)}c"


def parse_layout(name: str) -> int | None:
    """The block L of "NCHW{L}c" (None for "NCHW"); an IRError for any other name."""
    if name == "NCHW":
        return None
    if name.startswith("NCHW") and name.endswith("c") and name[4:-1].isdigit() and int(name[4:-1]) > 0:
        return int(name[4:-1])
    raise IRError(f"layout_transform: layout must be NCHW or NCHW<L>c (L a positive integer), got {name!r}")


def layout_transform(x, src: str = "NCHW", dst: str = "NCHW8c", channels: int | None = None):
    """x from layout src to dst: NCHW -> NCHW{L}c (channels padded with zeros to a multiple of L)
    or NCHW{L}c -> NCHW (channels: C of the NCHW tensor, at most the blocked channel count; the
    padding cut off)."""
    return make_call("layout_transform", x, src=src, dst=dst, channels=None if channels is None else int(channels))


def _directions(src: str, dst: str) -> tuple[int | None, int | None]:
    s, d = parse_layout(src), parse_layout(dst)
    if (s is None) == (d is None):
        raise IRError(f"layout_transform: converts between NCHW and NCHW<L>c, got {src} -> {dst}")
    return s, d


def _transform_infer(call, ctx):
    x = ctx.tensor(0, "data")
    try:
        src_lanes, dst_lanes = _directions(ctx.attr("src"), ctx.attr("dst"))
    except IRError as exc:
        ctx.fail(str(exc).split(": ", 1)[1], kind=IRError)
    if x.ndim not in (-1, 4 if dst_lanes else 5):
        ctx.fail(f"{ctx.attr('src')} data must be {4 if dst_lanes else 5}-d, got {x.ndim}-d", kind=IRError)
    if src_lanes is not None and x.shape is not None and as_int(x.shape[4]) != src_lanes:
        ctx.fail(f"NCHW{src_lanes}c data must have {src_lanes} lanes last, got shape {x.shape}", kind=IRError)
    if x.shape is None:
        return TensorStructInfo(None, x.dtype, 5 if dst_lanes else 4)
    if dst_lanes:
        blocks = simplify(tir.FloorDiv(as_dim(x.shape[1]) + as_dim(dst_lanes - 1), as_dim(dst_lanes)))
        return TensorStructInfo((x.shape[0], blocks, x.shape[2], x.shape[3], as_dim(dst_lanes)), x.dtype)
    channels = ctx.attr("channels", None)
    if channels is None:
        channels = simplify(as_dim(x.shape[1]) * as_dim(src_lanes))
    else:
        held = as_int(x.shape[1])
        if int(channels) <= 0 or (held is not None and int(channels) > held * src_lanes):
            ctx.fail(f"channels {channels} is not in 1..{held * src_lanes if held is not None else 'C'} "
                     f"(the blocked tensor's channels)", kind=IRError)
        channels = as_dim(int(channels))
    return TensorStructInfo((x.shape[0], channels, x.shape[2], x.shape[3]), x.dtype)


def _transform_te(x, src, dst, channels=None):
    te_ = te()
    src_lanes, dst_lanes = _directions(src, dst)
    if dst_lanes:
        lanes = dst_lanes
        c = as_dim(x.shape[1])
        blocks = simplify(tir.FloorDiv(c + as_dim(lanes - 1), as_dim(lanes)))
        exact = as_int(c) is not None and as_int(c) % lanes == 0

        def to_blocked(n, cb, y, x_, ci):
            channel = cb * tir.const(lanes, cb.dtype) + ci
            if exact:
                return x[(n, channel, y, x_)]
            inside = tir.LT(channel, c.astype(channel.dtype))
            return tir.Call("if_then_else", (inside, x[(n, channel, y, x_)], tir.const(0, x.dtype)), x.dtype)

        return te_.compute((x.shape[0], blocks, x.shape[2], x.shape[3], as_dim(lanes)), to_blocked,
                           name="to_blocked")
    lanes = src_lanes
    count = as_dim(int(channels)) if channels is not None else simplify(as_dim(x.shape[1]) * as_dim(lanes))

    def to_nchw(n, c, y, x_):
        return x[(n, c // tir.const(lanes, c.dtype), y, x_, c % tir.const(lanes, c.dtype))]

    return te_.compute((x.shape[0], count, x.shape[2], x.shape[3]), to_nchw, name="to_nchw")


def to_blocked(x: np.ndarray, lanes: int, axis: int = 1) -> np.ndarray:
    """numpy: x with axis split into blocks of `lanes` (zero-padded), the lanes moved last."""
    c = x.shape[axis]
    blocks = -(-c // lanes)
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, blocks * lanes - c)
    padded = np.pad(x, pad)
    shape = padded.shape[:axis] + (blocks, lanes) + padded.shape[axis + 1:]
    return np.moveaxis(padded.reshape(shape), axis + 1, -1).copy()


def from_blocked(x: np.ndarray, channels: int | None = None, axis: int = 1) -> np.ndarray:
    """numpy: the inverse of to_blocked (the first `channels` channels)."""
    lanes = x.shape[-1]
    moved = np.moveaxis(x, -1, axis + 1)
    shape = moved.shape[:axis] + (moved.shape[axis] * lanes,) + moved.shape[axis + 2:]
    out = moved.reshape(shape)
    if channels is not None:
        out = np.take(out, np.arange(channels), axis=axis)
    return np.ascontiguousarray(out)


def _np_transform(x, src, dst, channels=None):
    src_lanes, dst_lanes = _directions(src, dst)
    return to_blocked(x, dst_lanes) if dst_lanes else from_blocked(x, channels)


register("layout_transform", infer=_transform_infer, reference=_np_transform, legalize=_transform_te,
         pattern="injective", doc="NCHW <-> NCHW{L}c channel blocks")


# ----------------------------------------------------------------------------- blocked convolution

def conv2d_nchwc(data, weight, strides=1, padding=0, dilation=1, depthwise: bool = False):
    """Convolution of NCHW{L}c data by "OIHW{L}o" weights (module doc) into NCHW{L}c; depthwise:
    one input channel per output channel, weights (C / L, 1, KH, KW, L).  Dense, the data may be
    plain NCHW (4-d), the weights then (ceil(O / L), C, KH, KW, L)."""
    return make_call("conv2d_nchwc", data, weight, strides=_tuple(strides, 2), padding=_pads(padding, 2),
                     dilation=_tuple(dilation, 2), depthwise=bool(depthwise))


def _conv_nchwc_infer(call, ctx):
    x, w = ctx.tensor(0, "data"), ctx.tensor(1, "weight")
    dtype = same_dtype(ctx, x, w)
    depthwise = ctx.attr("depthwise", False)
    ranks = (-1, 5) if depthwise else (-1, 4, 5)
    if x.ndim not in ranks or w.ndim not in (-1, 5):
        ctx.fail(f"data must be 5-d (NCHW<L>c){'' if depthwise else ' or 4-d (NCHW)'} and weight 5-d (OIHW<L>o), "
                 f"got {x.ndim}-d and {w.ndim}-d", kind=IRError)
    if x.shape is None or w.shape is None:
        return TensorStructInfo(None, dtype, 5)
    lanes = as_int(w.shape[4])
    if lanes is None or (x.ndim == 5 and as_int(x.shape[4]) != lanes):
        ctx.fail(f"data and weight must have the same constant lane count last, got {x.shape[-1]} and {w.shape[4]}",
                 kind=IRError)
    strides, pads, dil = ctx.attr("strides"), ctx.attr("padding"), ctx.attr("dilation")
    if depthwise:
        ctx.require_equal(w.shape[0], x.shape[1], "depthwise: weight blocks equal data channel blocks")
        ctx.require_equal(w.shape[1], as_dim(1), "depthwise: one input channel per output channel")
    elif x.ndim == 4:
        ctx.require_equal(w.shape[1], x.shape[1], "weight in-channels equal the NCHW data's channels")
    else:
        ctx.require_equal(w.shape[1], simplify(as_dim(x.shape[1]) * as_dim(lanes)),
                          "weight in-channels equal the data's channel blocks times the lanes")
    spatial = tuple(_out_len(x.shape[2 + k], w.shape[2 + k], strides[k], pads[k], pads[k + 2], dil[k])
                    for k in range(2))
    return TensorStructInfo((x.shape[0], w.shape[0]) + spatial + (w.shape[4],), dtype)


def _padded_blocked(x, padding, name="pad"):
    """x (NCHW{L}c, or NCHW) with spatial zero padding (top, left, bottom, right), or x itself."""
    if not any(padding):
        return x
    te_ = te()
    shape = (x.shape[0], x.shape[1]) + tuple(simplify(as_dim(x.shape[2 + k]) + as_dim(padding[k] + padding[k + 2]))
                                             for k in range(2)) + tuple(x.shape[4:])

    def pad_body(*i):
        conds, src = [], []
        for k, v in enumerate(i[2:4]):
            j = v - tir.const(padding[k], v.dtype)
            conds.append(tir.And(tir.GE(j, tir.const(0, j.dtype)), tir.LT(j, x.shape[2 + k].astype(j.dtype))))
            src.append(j)
        return tir.Call("if_then_else", (tir.And(*conds), x[(i[0], i[1], *src, *i[4:])], tir.const(0.0, x.dtype)),
                        x.dtype)

    return te_.compute(shape, pad_body, name=name)


def _conv_nchwc_te(x, w, strides, padding, dilation, depthwise=False):
    te_ = te()
    xp = _padded_blocked(x, padding)
    lanes = as_int(w.shape[4])
    spatial = tuple(_out_len(x.shape[2 + k], w.shape[2 + k], strides[k], padding[k], padding[k + 2], dilation[k])
                    for k in range(2))
    rk = [te_.reduce_axis(w.shape[2 + k], name=f"r{k}") for k in range(2)]
    out_shape = (x.shape[0], w.shape[0]) + spatial + (w.shape[4],)

    def at(i, k):
        return i * tir.const(strides[k], i.dtype) + rk[k].var * tir.const(dilation[k], i.dtype)

    if depthwise:
        def body(n, cb, y, x_, ci):
            return te_.sum(xp[(n, cb, at(y, 0), at(x_, 1), ci)] * w[(cb, tir.const(0, cb.dtype), rk[0].var,
                                                                       rk[1].var, ci)], axis=rk)

        return te_.compute(out_shape, body, name="conv2d_nchwc")
    rc = te_.reduce_axis(w.shape[1], name="rc")

    def dense(n, ob, y, x_, oi):
        if len(x.shape) == 4:  # plain NCHW data: channel rc as it is
            data = xp[(n, rc.var, at(y, 0), at(x_, 1))]
        else:
            block, lane = rc.var // tir.const(lanes, rc.var.dtype), rc.var % tir.const(lanes, rc.var.dtype)
            data = xp[(n, block, at(y, 0), at(x_, 1), lane)]
        return te_.sum(data * w[(ob, rc.var, rk[0].var, rk[1].var, oi)], axis=[rc] + rk)

    return te_.compute(out_shape, dense, name="conv2d_nchwc")


def pack_conv_weight(w: np.ndarray, lanes: int, depthwise: bool = False, plain_input: bool = False) -> np.ndarray:
    """numpy: OIHW weights as "OIHW{L}o" (module doc): output channels in blocks of L (zero past
    O), input channels zero-padded to a multiple of L (not for depthwise, nor for a convolution
    reading plain NCHW data: plain_input)."""
    if not depthwise and not plain_input:
        c = w.shape[1]
        w = np.pad(w, [(0, 0), (0, -(-c // lanes) * lanes - c), (0, 0), (0, 0)])
    return to_blocked(w, lanes, axis=0)


def _np_conv_nchwc(x, w, strides, padding, dilation, depthwise=False):
    lanes = w.shape[4]
    data = x if x.ndim == 4 else from_blocked(x)
    weight = from_blocked(w, axis=0)
    groups = data.shape[1] if depthwise else 1
    return to_blocked(_np_conv(data, weight, strides, padding, dilation, groups), lanes)


register("conv2d_nchwc", infer=_conv_nchwc_infer, reference=_np_conv_nchwc, legalize=_conv_nchwc_te,
         pattern="out_fusable", doc="2-d convolution, NCHW{L}c (or NCHW) data, NCHW{L}c output, OIHW{L}o weights")


# ----------------------------------------------------------------------------- blocked pooling

def max_pool2d_nchwc(data, pool_size, strides=None, padding=0, dilation=1, ceil_mode=False):
    """max_pool2d over NCHW{L}c data."""
    return _pool("max_pool2d_nchwc", data, pool_size, strides, padding, dilation, ceil_mode, True)


def avg_pool2d_nchwc(data, pool_size, strides=None, padding=0, dilation=1, ceil_mode=False,
                     count_include_pad=False):
    """avg_pool2d over NCHW{L}c data."""
    return _pool("avg_pool2d_nchwc", data, pool_size, strides, padding, dilation, ceil_mode, count_include_pad)


_pool_nchwc_infer = pool_infer(5, "NCHW<L>c")


def _pool_nchwc_te(is_max):
    def compute(x, pool_size, strides, padding, dilation, ceil_mode=False, count_include_pad=False):
        te_ = te()
        out, ry, rx = pool_window(te_, x, pool_size, strides, padding, dilation, ceil_mode)
        fill = te_.min_value(x.dtype) if is_max else tir.const(0, x.dtype)

        def window(oy, ox, ay, ax, lo, hi):
            pos, conds = [], []
            for j, (o, r) in enumerate(((oy, ay), (ox, ax))):
                t = o * tir.const(strides[j], o.dtype) + r * tir.const(dilation[j], o.dtype) \
                    - tir.const(padding[j], o.dtype)
                conds.append(tir.And(tir.GE(t, tir.const(lo[j], t.dtype)), tir.LT(t, hi[j].astype(t.dtype))))
                pos.append(t)
            return pos, tir.And(conds[0], conds[1])

        size = (x.shape[2], x.shape[3])

        def body(n, cb, oy, ox, ci):
            pos, cond = window(oy, ox, ry.var, rx.var, (0, 0), size)
            value = tir.Call("if_then_else", (cond, x[(n, cb, pos[0], pos[1], ci)], fill), x.dtype)
            return (te_.max if is_max else te_.sum)(value, axis=[ry, rx])

        shape = tuple(x.shape[:2]) + out + (x.shape[4],)
        red = te_.compute(shape, body, name="pool")
        if is_max:
            return red
        cy, cx = te_.reduce_axis(pool_size[0], name="cy"), te_.reduce_axis(pool_size[1], name="cx")
        if count_include_pad:
            lo, hi = (-padding[0], -padding[1]), tuple(as_dim(size[j]) + as_dim(padding[j + 2]) for j in range(2))
        else:
            lo, hi = (0, 0), size

        def count_body(oy, ox):
            _, cond = window(oy, ox, cy.var, cx.var, lo, hi)
            return te_.sum(tir.Select(cond, tir.const(1.0, x.dtype), tir.const(0.0, x.dtype)), axis=[cy, cx])

        counts = te_.compute(out, count_body, name="pool_count")
        return te_.compute(shape, lambda n, cb, oy, ox, ci: red[n, cb, oy, ox, ci] / tir.Max(
            counts[oy, ox], tir.const(1.0, x.dtype)), name="avg_pool")

    return compute


def _np_pool_nchwc(is_max):
    nchw = _np_pool(is_max)

    def reference(x, **attrs):
        return to_blocked(nchw(from_blocked(x), **attrs), x.shape[4])

    return reference


register("max_pool2d_nchwc", infer=_pool_nchwc_infer, reference=_np_pool_nchwc(True),
         legalize=_pool_nchwc_te(True), pattern="out_fusable", doc="2-d max pooling over NCHW{L}c")
register("avg_pool2d_nchwc", infer=_pool_nchwc_infer, reference=_np_pool_nchwc(False),
         legalize=_pool_nchwc_te(False), pattern="out_fusable", doc="2-d average pooling over NCHW{L}c")


def global_avg_pool_nchwc(x):
    """The mean over H and W of NCHW{L}c data: (N, C / L, 1, 1, L)."""
    return make_call("global_avg_pool_nchwc", x)


def _global_nchwc_infer(call, ctx):
    x = ctx.tensor(0)
    if x.ndim not in (-1, 5):
        ctx.fail(f"expects NCHW<L>c (5-d), got {x.ndim}-d", kind=IRError)
    if x.shape is None:
        return TensorStructInfo(None, x.dtype, 5)
    return TensorStructInfo((x.shape[0], x.shape[1], as_dim(1), as_dim(1), x.shape[4]), x.dtype)


def _global_nchwc_te(x):
    from .reduce import _mean_finalize, _reduce_compute

    return _reduce_compute(x, (2, 3), True, te().sum, "global_avg_pool", _mean_finalize)


register("global_avg_pool_nchwc", infer=_global_nchwc_infer,
         reference=lambda x: x.mean(axis=(2, 3), keepdims=True).astype(x.dtype),
         legalize=_global_nchwc_te, pattern="reduction", doc="mean over H and W of NCHW{L}c")
