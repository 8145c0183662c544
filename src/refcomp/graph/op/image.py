"""Image operators: resize2d (nearest and linear) over NCHW."""
from __future__ import annotations

import numpy as np

from ...ast import expr as tir
from ...ast.graph_struct_info import TensorStructInfo, as_dim
from ...errors import IRError
from ._common import call_intrin, make_call, te
from .registry import register

COORD_MODES = ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def resize2d(x, size, method="nearest", coordinate_transformation_mode="half_pixel",
             nearest_mode="round_prefer_floor"):
    """Resize the last two dims of NCHW x to size (out_h, out_w) by nearest or bilinear sampling."""
    return make_call("resize2d", x, size=tuple(size), method=method,
                     coordinate_transformation_mode=coordinate_transformation_mode, nearest_mode=nearest_mode)


def _resize_infer(call, ctx):
    x = ctx.tensor(0)
    if ctx.attr("method", "nearest") not in ("nearest", "linear"):
        ctx.fail(f"method must be nearest or linear, got {ctx.attr('method')!r}", kind=IRError)
    if ctx.attr("coordinate_transformation_mode", "half_pixel") not in COORD_MODES:
        ctx.fail(f"unknown coordinate_transformation_mode; expected one of {COORD_MODES}", kind=IRError)
    if ctx.attr("nearest_mode", "round_prefer_floor") not in NEAREST_MODES:
        ctx.fail(f"unknown nearest_mode; expected one of {NEAREST_MODES}", kind=IRError)
    if x.ndim not in (-1, 4):
        ctx.fail(f"expects NCHW, got {x.ndim}-d", kind=IRError)
    if x.dtype is not None and not x.dtype.is_float:
        ctx.fail(f"expects a float tensor, got {x.dtype}", kind=IRError)
    if x.shape is None:
        return TensorStructInfo(None, x.dtype, 4)
    out_h, out_w = ctx.attr("size")
    return TensorStructInfo((x.shape[0], x.shape[1], out_h, out_w), x.dtype)


def _source_coord(o, in_len, out_len, mode, dtype):
    """The input coordinate (float) sampled by output position o."""
    of = o.astype(dtype)
    n_in, n_out = as_dim(in_len).astype(dtype), as_dim(out_len).astype(dtype)
    half, one = tir.const(0.5, dtype), tir.const(1.0, dtype)
    if mode == "align_corners":
        return tir.Select(tir.GT(n_out, one), of * (n_in - one) / (n_out - one), tir.const(0.0, dtype))
    if mode == "asymmetric":
        return of * n_in / n_out
    value = (of + half) * n_in / n_out - half
    if mode == "pytorch_half_pixel":
        return tir.Select(tir.GT(n_out, one), value, tir.const(0.0, dtype))
    return value


def _nearest(c, mode):
    half = tir.const(0.5, c.dtype)
    if mode == "floor":
        return call_intrin("floor", c)
    if mode == "ceil":
        return call_intrin("ceil", c)
    if mode == "round_prefer_ceil":
        return call_intrin("floor", c + half)
    return call_intrin("ceil", c - half)


def _clampi(v, n):
    return tir.Max(tir.IntImm(0, "int64"), tir.Min(v, as_dim(n) - tir.IntImm(1, "int64")))


def _resize_te(x, size, method="nearest", coordinate_transformation_mode="half_pixel",
               nearest_mode="round_prefer_floor"):
    out_h, out_w = size
    h, w = x.shape[2], x.shape[3]
    dt = x.dtype
    mode = coordinate_transformation_mode

    def body(n, c, oy, ox):
        cy = _source_coord(oy, h, out_h, mode, dt)
        cx = _source_coord(ox, w, out_w, mode, dt)
        if method == "nearest":
            iy = _clampi(_nearest(cy, nearest_mode).astype("int64"), h)
            ix = _clampi(_nearest(cx, nearest_mode).astype("int64"), w)
            return x[n, c, iy.astype(oy.dtype), ix.astype(ox.dtype)]
        cy = tir.Max(cy, tir.const(0.0, dt)) if mode != "asymmetric" else cy
        cx = tir.Max(cx, tir.const(0.0, dt)) if mode != "asymmetric" else cx
        y0f, x0f = call_intrin("floor", cy), call_intrin("floor", cx)
        fy, fx = cy - y0f, cx - x0f
        y0, x0 = _clampi(y0f.astype("int64"), h), _clampi(x0f.astype("int64"), w)
        y1, x1 = _clampi(y0f.astype("int64") + tir.IntImm(1, "int64"), h), _clampi(
            x0f.astype("int64") + tir.IntImm(1, "int64"), w)
        one = tir.const(1.0, dt)

        def at(yy, xx):
            return x[n, c, yy.astype(oy.dtype), xx.astype(ox.dtype)]

        top = at(y0, x0) * (one - fx) + at(y0, x1) * fx
        bottom = at(y1, x0) * (one - fx) + at(y1, x1) * fx
        return top * (one - fy) + bottom * fy

    return te().compute((x.shape[0], x.shape[1], as_dim(out_h), as_dim(out_w)), body, name="resize2d")


def _np_source(o, n_in, n_out, mode):
    o = o.astype(np.float64)
    if mode == "align_corners":
        return o * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros_like(o)
    if mode == "asymmetric":
        return o * n_in / n_out
    value = (o + 0.5) * n_in / n_out - 0.5
    if mode == "pytorch_half_pixel" and n_out <= 1:
        return np.zeros_like(o)
    return value


def _np_resize(x, size, method="nearest", coordinate_transformation_mode="half_pixel",
               nearest_mode="round_prefer_floor"):
    n, c, h, w = x.shape
    oh, ow = (int(s) for s in size)
    cy = _np_source(np.arange(oh), h, oh, coordinate_transformation_mode)
    cx = _np_source(np.arange(ow), w, ow, coordinate_transformation_mode)
    if method == "nearest":
        rounders = {"floor": np.floor, "ceil": np.ceil, "round_prefer_ceil": lambda v: np.floor(v + 0.5),
                    "round_prefer_floor": lambda v: np.ceil(v - 0.5)}
        r = rounders[nearest_mode]
        iy = np.clip(r(cy).astype(np.int64), 0, h - 1)
        ix = np.clip(r(cx).astype(np.int64), 0, w - 1)
        return x[:, :, iy][:, :, :, ix]
    if coordinate_transformation_mode != "asymmetric":
        cy, cx = np.maximum(cy, 0), np.maximum(cx, 0)
    y0, x0 = np.floor(cy), np.floor(cx)
    fy, fx = (cy - y0)[:, None], (cx - x0)[None, :]
    y0i, x0i = np.clip(y0.astype(np.int64), 0, h - 1), np.clip(x0.astype(np.int64), 0, w - 1)
    y1i, x1i = np.clip(y0.astype(np.int64) + 1, 0, h - 1), np.clip(x0.astype(np.int64) + 1, 0, w - 1)
    xd = x.astype(np.float64)
    top = xd[:, :, y0i][:, :, :, x0i] * (1 - fx) + xd[:, :, y0i][:, :, :, x1i] * fx
    bottom = xd[:, :, y1i][:, :, :, x0i] * (1 - fx) + xd[:, :, y1i][:, :, :, x1i] * fx
    return (top * (1 - fy) + bottom * fy).astype(x.dtype)


register("resize2d", infer=_resize_infer, reference=_np_resize, legalize=_resize_te, pattern="injective",
         doc="2-d resize, nearest or bilinear")
