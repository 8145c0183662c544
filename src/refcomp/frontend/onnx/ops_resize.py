"""ONNX Resize as one matmul per resized axis with a constant interpolation matrix.

Every Resize mode is separable and linear in the data: output position y along an axis is a
weighted sum of input positions.  `axis_weights` builds that (in, out) matrix with numpy at import,
following the ONNX definition: the coordinate transformation maps y to a source coordinate x, the
mode gives the kernel (nearest: one tap chosen by nearest_mode; linear: 2 taps; cubic: 4 taps with
coefficient A; antialias widens linear and cubic kernels by 1/scale when downsampling), taps
outside the input clamp to the edge or, with exclude_outside, drop out and the rest renormalize.
tf_crop_and_resize positions outside the crop box take extrapolation_value instead.
"""
from __future__ import annotations

import math

import numpy as np

from ...ast.graph import Constant
from ...graph import op
from ...graph.shape_facts import const_value
from .importer import MAX_CONSTANT_ELEMENTS, converter
from .ops_resize_runtime import resize_runtime

MAX_WEIGHT_COLUMNS = 1 << 14  # longer output axes get their weights from graph ops, not a Python loop


def _source(mode, y, scale, n_in, n_out_int, roi):
    """Source coordinates of output positions y (float64), and the extrapolated ones (or None)."""
    n_out = scale * n_in
    if mode == "align_corners":
        return (np.zeros_like(y) if n_out == 1 else y * (n_in - 1) / (n_out - 1)), None
    if mode == "asymmetric":
        return y / scale, None
    if mode == "tf_crop_and_resize":
        start, end = roi
        x = np.full_like(y, (end - start) * (n_in - 1) / 2) if n_out == 1 else \
            y * (end - start) * (n_in - 1) / (n_out - 1)
        x = x + start * (n_in - 1)
        return x, (x < 0) | (x > n_in - 1)
    if mode == "pytorch_half_pixel":
        return (np.full_like(y, -0.5) if n_out == 1 else (y + 0.5) / scale - 0.5), None
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5, None
    if mode == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out_int / n_out)
        return offset + (y + 0.5) / scale - 0.5, None
    raise ValueError(mode)


def _nearest(ratio, nearest_mode):
    if ratio == 1:  # an exact source position
        return np.array([0.0, 1.0])
    choose_right = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
                    "floor": False, "ceil": True}[nearest_mode]
    return np.array([0.0, 1.0]) if choose_right else np.array([1.0, 0.0])


def _cubic(ratio, a):
    return np.array([_cubic_tap(ratio + 1, a), _cubic_tap(ratio, a), _cubic_tap(1 - ratio, a),
                     _cubic_tap(2 - ratio, a)])


def _antialiased(ratio, scale, kind, a):
    """The kernel stretched by 1/scale (scale < 1), normalized to sum 1."""
    scale = min(scale, 1.0)
    if kind == "linear":
        start = int(np.floor(-1 / scale) + 1)
        taps = np.arange(start, start + 2 - 2 * start)
        weights = np.clip(1 - np.abs((taps - ratio) * scale), 0, 1)
    else:
        start = int(np.floor(-2 / scale) + 1)
        taps = np.arange(start, 2 - start)
        weights = np.array([_cubic_tap(scale * (t - ratio), a) for t in taps])
    return weights / weights.sum()


def _cubic_tap(t, a):
    """The cubic convolution kernel with coefficient a at distance t."""
    t = abs(t)
    if t <= 1:
        return (a + 2) * t ** 3 - (a + 3) * t ** 2 + 1
    if t < 2:
        return a * t ** 3 - 5 * a * t ** 2 + 8 * a * t - 4 * a
    return 0.0


def axis_weights(n_in, n_out, scale, mode, coordinate_mode, nearest_mode="round_prefer_floor", cubic_a=-0.75,
                 exclude_outside=False, antialias=False, roi=(0.0, 1.0)):
    """(W, extrapolated): W is the (n_in, n_out) float64 matrix of one axis' resize; extrapolated the
    output positions that take the extrapolation value (tf_crop_and_resize), or None."""
    y = np.arange(n_out, dtype=np.float64)
    x, extrapolated = _source(coordinate_mode, y, scale, n_in, n_out, roi)
    weights = np.zeros((n_in, n_out))
    for j in range(n_out):
        floor = math.floor(x[j])
        ratio = 1.0 if x[j] == floor else x[j] - floor
        if mode == "nearest":
            taps = _nearest(ratio, nearest_mode)
        elif antialias:
            taps = _antialiased(ratio, scale, mode, cubic_a)
        elif mode == "linear":
            taps = np.array([1 - ratio, ratio])
        else:
            taps = _cubic(ratio, cubic_a)
        n = len(taps)
        # the n input positions nearest x, ties to the smaller one (positions past the ends clamp)
        pad = math.ceil(n / 2)
        shifted = x[j] + pad
        base = math.floor(shifted)
        frac = shifted - base
        if n % 2 == 0:
            start = base + (-(n // 2) if frac == 0 else -(n // 2) + 1)
        else:
            start = base + (-((n - 1) // 2) if frac <= 0.5 else -((n - 1) // 2) + 1)
        positions = np.arange(start, start + n) - pad
        if exclude_outside:
            taps = np.where((positions < 0) | (positions >= n_in), 0.0, taps)
            total = taps.sum()
            taps = taps / (total if total != 0 else 1.0)
        for p, w in zip(np.clip(positions, 0, n_in - 1), taps):
            weights[p, j] += w
    return weights, extrapolated


def _text(value, default):
    value = value if value is not None else default
    return value.decode() if isinstance(value, bytes) else value


def _empty(ctx, value) -> bool:
    """Whether an optional operand is given as a tensor with no entries (meaning: not given)."""
    shape = ctx.info(value).shape
    return shape is not None and any(const_value(d) == 0 for d in shape)


@converter("Resize")
def _resize(ctx, node, inputs, attrs):
    x = inputs[0]
    shape = [const_value(d) for d in ctx.static_shape(x)]
    if None in shape:
        ctx.fail("Resize needs static input dims (the interpolation weights are built at import)")
    ndim = len(shape)

    def given(k):
        value = inputs[k] if len(inputs) > k else None
        return None if value is None or _empty(ctx, value) else value

    operands = [None, given(1), None] if ctx.opset < 11 else [given(1), given(2), given(3)]
    mode = _text(attrs.get("mode"), "nearest")
    coordinate_mode = _text(attrs.get("coordinate_transformation_mode"),
                            "asymmetric" if ctx.opset < 11 else "half_pixel")
    nearest_mode = _text(attrs.get("nearest_mode"), "floor" if ctx.opset < 11 else "round_prefer_floor")
    policy = _text(attrs.get("keep_aspect_ratio_policy"), "stretch")
    if mode not in ("nearest", "linear", "cubic"):
        ctx.fail(f"mode {mode} is not supported")
    axes = [a % ndim for a in attrs.get("axes", range(ndim))]
    if coordinate_mode != "tf_crop_and_resize":
        operands[0] = None  # the roi matters only when cropping
    if any(v is not None and not isinstance(v, Constant) for v in operands):
        if operands[1] is None and operands[2] is None:
            ctx.fail("Resize needs scales or sizes")
        return resize_runtime(ctx, x, shape, axes, *operands, attrs, mode, coordinate_mode, nearest_mode, policy)
    roi, scales, sizes = (None if v is None else np.asarray(v.array).reshape(-1) for v in operands)
    full_roi = [0.0] * ndim + [1.0] * ndim
    if roi is not None:
        for k, a in enumerate(axes):
            full_roi[a], full_roi[a + ndim] = float(roi[k]), float(roi[k + len(axes)])
    scale = [1.0] * ndim
    out = list(shape)
    if sizes is not None:
        for k, a in enumerate(axes):
            out[a] = int(sizes[k])
            scale[a] = out[a] / shape[a]
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            common = pick(scale[a] for a in axes)
            for a in axes:
                scale[a] = common
                out[a] = int(common * shape[a] + 0.5)
    elif scales is not None:
        for k, a in enumerate(axes):
            scale[a] = float(scales[k])
            out[a] = int(scale[a] * shape[a])
    else:
        ctx.fail("Resize needs scales or sizes")
    count = int(np.prod(out, dtype=object))
    if min(out) < 0 or count > MAX_CONSTANT_ELEMENTS:
        ctx.fail(f"the output of shape {tuple(out)} ({count} elements) is larger than the "
                 f"{MAX_CONSTANT_ELEMENTS} elements allowed")
    if max(out[a] for a in axes) > MAX_WEIGHT_COLUMNS:  # weights built by graph ops, folded where small
        return resize_runtime(ctx, x, shape, axes, *operands, attrs, mode, coordinate_mode, nearest_mode, policy)
    dtype = ctx.info(x).dtype
    y = x if dtype.is_float else ctx.emit(op.astype(x, "float32"))
    fdtype = ctx.info(y).dtype.numpy()
    for a in axes:
        crop = (full_roi[a], full_roi[a + ndim])
        if math.isclose(scale[a], 1.0) and out[a] == shape[a] and (coordinate_mode != "tf_crop_and_resize" or (
                math.isclose(crop[0], 0.0) and math.isclose(crop[1], 1.0))):
            continue  # identity along this axis
        weights, extrapolated = axis_weights(
            shape[a], out[a], scale[a], mode, coordinate_mode, nearest_mode, attrs.get("cubic_coeff_a", -0.75),
            bool(attrs.get("exclude_outside", 0)), bool(attrs.get("antialias", 0)), crop)
        order = [k for k in range(ndim) if k != a] + [a]
        moved = ctx.emit(op.permute_dims(y, tuple(order))) if a != ndim - 1 else y
        moved = ctx.emit(op.matmul(moved, Constant(weights.astype(fdtype))))
        if extrapolated is not None and extrapolated.any():
            fill = Constant(np.asarray(attrs.get("extrapolation_value", 0.0), fdtype))
            moved = ctx.emit(op.where(Constant(extrapolated), fill, moved))
        y = ctx.emit(op.permute_dims(moved, tuple(int(i) for i in np.argsort(order)))) if a != ndim - 1 else moved
    if not dtype.is_float:
        info = np.iinfo(dtype.numpy())
        y = ctx.emit(op.astype(op.clip(op.round(y), float(info.min), float(info.max)), dtype))
    return y
