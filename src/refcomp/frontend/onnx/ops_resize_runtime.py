"""ONNX Resize whose scales, sizes or roi are read at run time.

The output length of each resized axis is computed when the program runs and bound to a fresh
size var (runtime_values); the interpolation matrix of the axis is then computed by graph ops
over that length, the same weights ops_resize.axis_weights builds at import:

- the source coordinate x of each output position y follows the coordinate transformation mode;
- nearest gathers the input position that nearest_mode rounds x to (clamped to the edges);
- linear and cubic weigh every input position p by the kernel at distance p - x (stretched by
  1/scale when antialiasing a downsample, then normalized).  The positions are taken over a
  static window wider than any kernel's support, [-K, n_in + K); positions outside the input
  fold onto the edge, or with exclude_outside drop out before the weights are renormalized.

tf_crop_and_resize positions whose source lies outside the input take extrapolation_value.
"""
from __future__ import annotations

import numpy as np

from ...ast.graph import Constant
from ...graph import op
from .runtime_values import runtime_sizes


def _f64(value) -> Constant:
    return Constant(np.asarray(value, np.float64))


class _Builder:
    """Shorthands for emitting float64 tensor arithmetic."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx

    def __getattr__(self, name):
        fn = getattr(op, name)
        return lambda *args, **kw: self.ctx.emit(fn(*args, **kw))

    def entry(self, value, k: int):
        """Entry k of a 1-d tensor as a float64 scalar."""
        picked = self.take(value, Constant(np.asarray(k, np.int64)), axis=0)
        return self.astype(picked, "float64")


def _output_lengths(b: _Builder, shape, axes, scales, sizes, policy: str):
    """Per resized axis: (float64 scale, int64 length tensor)."""
    result = {}
    if sizes is not None:
        ratios = [b.divide(b.entry(sizes, k), _f64(shape[a])) for k, a in enumerate(axes)]
        if policy != "stretch":
            pick = b.minimum if policy == "not_larger" else b.maximum
            common = ratios[0]
            for r in ratios[1:]:
                common = pick(common, r)
            for a in axes:
                length = b.floor(b.add(b.multiply(common, _f64(shape[a])), _f64(0.5)))
                result[a] = (common, b.astype(length, "int64"))
            return result
        for k, a in enumerate(axes):
            result[a] = (ratios[k], b.astype(b.entry(sizes, k), "int64"))
        return result
    for k, a in enumerate(axes):
        scale = b.entry(scales, k)
        result[a] = (scale, b.astype(b.floor(b.multiply(scale, _f64(shape[a]))), "int64"))
    return result


def _source(b: _Builder, mode: str, y, scale, n_in: int, n_out_int, roi):
    """Source coordinates of output positions y (float64 tensor), and the extrapolation mask or None."""
    n_out = b.multiply(scale, _f64(n_in))
    single = b.equal(n_out, _f64(1.0))
    if mode == "align_corners":
        stretched = b.divide(b.multiply(y, _f64(n_in - 1)), b.subtract(n_out, _f64(1.0)))
        return b.where(single, _f64(0.0), stretched), None
    if mode == "asymmetric":
        return b.divide(y, scale), None
    half = b.subtract(b.divide(b.add(y, _f64(0.5)), scale), _f64(0.5))
    if mode == "tf_crop_and_resize":
        start, end = roi
        width = b.multiply(b.subtract(end, start), _f64(n_in - 1))
        x = b.where(single, b.divide(width, _f64(2.0)), b.divide(b.multiply(y, width), b.subtract(n_out, _f64(1.0))))
        x = b.add(x, b.multiply(start, _f64(n_in - 1)))
        outside = b.logical_or(b.less(x, _f64(0.0)), b.greater(x, _f64(n_in - 1)))
        return x, outside
    if mode == "pytorch_half_pixel":
        return b.where(single, _f64(-0.5), half), None
    if mode == "half_pixel":
        return half, None
    if mode == "half_pixel_symmetric":
        offset = b.multiply(_f64(n_in / 2), b.subtract(_f64(1.0), b.divide(n_out_int, n_out)))
        return b.add(offset, half), None
    raise ValueError(f"coordinate_transformation_mode {mode} is not supported")


def _nearest_index(b: _Builder, x, nearest_mode: str, n_in: int):
    """The input position each source coordinate rounds to, clamped into the input."""
    floor = b.floor(x)
    frac = b.subtract(x, floor)
    if nearest_mode == "round_prefer_floor":
        right = b.greater(frac, _f64(0.5))
    elif nearest_mode == "round_prefer_ceil":
        right = b.greater_equal(frac, _f64(0.5))
    elif nearest_mode == "floor":
        right = None
    elif nearest_mode == "ceil":
        right = b.not_equal(frac, _f64(0.0))
    else:
        raise ValueError(f"nearest_mode {nearest_mode} is not supported")
    index = floor if right is None else b.add(floor, b.where(right, _f64(1.0), _f64(0.0)))
    index = b.minimum(b.maximum(index, _f64(0.0)), _f64(n_in - 1))
    return b.astype(index, "int64")


def _cubic(b: _Builder, t, a: float):
    """The cubic convolution kernel with coefficient a at distances |t|."""
    t = b.abs(t)
    t2 = b.multiply(t, t)
    t3 = b.multiply(t2, t)
    near = b.add(b.subtract(b.multiply(_f64(a + 2), t3), b.multiply(_f64(a + 3), t2)), _f64(1.0))
    far = b.subtract(b.add(b.subtract(b.multiply(_f64(a), t3), b.multiply(_f64(5 * a), t2)),
                           b.multiply(_f64(8 * a), t)), _f64(4 * a))
    return b.where(b.less_equal(t, _f64(1.0)), near, b.where(b.less(t, _f64(2.0)), far, _f64(0.0)))


def _weights(b: _Builder, x, mode: str, scale, n_in: int, cubic_a: float, exclude_outside: bool, antialias: bool):
    """The (n_in, n_out) float64 interpolation matrix for source coordinates x (shape (n_out,))."""
    reach = 2 * n_in + 4 if antialias else 3  # kernel support: 2 / min(scale, 1) <= 2 * n_in when n_out >= 1
    positions = np.arange(-reach, n_in + reach, dtype=np.float64)
    distance = b.subtract(Constant(positions.reshape(-1, 1)), b.expand_dims(x, (0,)))
    if antialias:
        distance = b.multiply(distance, b.minimum(scale, _f64(1.0)))
    if mode == "linear":
        w = b.maximum(b.subtract(_f64(1.0), b.abs(distance)), _f64(0.0))
    else:
        w = _cubic(b, distance, cubic_a)
    inside = (positions >= 0) & (positions < n_in)
    if exclude_outside:
        w = b.multiply(w, Constant(inside.astype(np.float64).reshape(-1, 1)))
    if antialias or exclude_outside:
        total = b.sum(w, axis=(0,), keepdims=True)
        total = b.where(b.equal(total, _f64(0.0)), _f64(1.0), total)
        w = b.divide(w, total)
    fold = np.zeros((n_in, positions.size))
    fold[np.clip(positions.astype(np.int64), 0, n_in - 1), np.arange(positions.size)] = 1.0
    return b.matmul(Constant(fold), w)


def resize_runtime(ctx, x, shape, axes, roi, scales, sizes, attrs, mode, coordinate_mode, nearest_mode, policy):
    """Resize of x (static shape) along axes with scales/sizes/roi tensors read at run time."""
    b = _Builder(ctx)
    ndim = len(shape)
    lengths = _output_lengths(b, shape, axes, scales, sizes, policy)
    dtype = ctx.info(x).dtype
    y = x if dtype.is_float else b.astype(x, "float32")
    fdtype = str(ctx.info(y).dtype)
    cubic_a = float(attrs.get("cubic_coeff_a", -0.75))
    for k, a in enumerate(axes):
        scale, count = lengths[a]
        (n_out,) = runtime_sizes(ctx, count, "resize")
        n_in = shape[a]
        positions = b.astype(b.cumsum(b.full((n_out,), 1, "int64"), axis=0), "float64")
        out_pos = b.subtract(positions, _f64(1.0))
        crop = None
        if coordinate_mode == "tf_crop_and_resize":
            crop = (_f64(0.0), _f64(1.0)) if roi is None else (b.entry(roi, k), b.entry(roi, k + len(axes)))
        source, extrapolated = _source(b, coordinate_mode, out_pos, scale, n_in, b.astype(count, "float64"), crop)
        if mode == "nearest":
            y = b.take(y, _nearest_index(b, source, nearest_mode, n_in), axis=a)
        else:
            weights = _weights(b, source, mode, scale, n_in, cubic_a, bool(attrs.get("exclude_outside", 0)),
                               bool(attrs.get("antialias", 0)))
            order = [j for j in range(ndim) if j != a] + [a]
            moved = b.permute_dims(y, tuple(order)) if a != ndim - 1 else y
            moved = b.matmul(moved, b.astype(weights, fdtype))
            y = b.permute_dims(moved, tuple(int(i) for i in np.argsort(order))) if a != ndim - 1 else moved
        if extrapolated is not None:
            shape_1 = [1] * ndim
            shape_1[a] = n_out
            fill = Constant(np.asarray(attrs.get("extrapolation_value", 0.0), ctx.info(y).dtype.numpy()))
            y = b.where(b.reshape(extrapolated, tuple(shape_1)), fill, y)
    if not dtype.is_float:
        info = np.iinfo(dtype.numpy())
        y = b.astype(b.clip(b.round(y), float(info.min), float(info.max)), str(dtype))
    return y
