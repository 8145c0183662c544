"""ONNX GridSample (2-d and 3-d; nearest, linear, cubic; zeros, border, reflection padding) as
element-wise coordinate arithmetic and one gather per interpolation tap.

Per spatial axis the normalized grid coordinate becomes a pixel coordinate (align_corners decides
whether -1/1 are the corner pixels' centres or their outer edges); out-of-range coordinates are
clamped or reflected by padding_mode; the kernel's taps are integer positions with weights.  Taps
of all axes combine into flat positions of (N, C, prod(spatial)), read with gather_elements and
summed with the product of their weights.  Taps outside the input weigh 0 with zeros padding and
are clamped or reflected otherwise.
"""
from __future__ import annotations

import itertools

import numpy as np

from ...ast.graph import Constant
from ...graph import op
from ...graph.shape_facts import const_value
from .importer import converter

CUBIC_A = -0.75


class _Axis:
    """Element-wise helpers in one float dtype."""

    def __init__(self, ctx, dtype):
        self.ctx, self.dtype = ctx, dtype

    def c(self, value):
        return Constant(np.asarray(value, self.dtype))

    def e(self, call):
        return self.ctx.emit(call)

    def reflect(self, v, low, high):
        """v folded back into [low, high] by reflecting at the nearer border, repeatedly."""
        span = high - low
        below, above = self.e(op.subtract(self.c(low), v)), self.e(op.subtract(v, self.c(high)))

        def fold(distance, near, far):
            turns = self.e(op.floor(op.divide(distance, self.c(span))))
            rest = self.e(op.subtract(distance, op.multiply(turns, self.c(span))))
            even = self.e(op.equal(op.floor_mod(turns, self.c(2.0)), self.c(0.0)))
            toward = self.e(op.add(self.c(near), rest)) if near == low else self.e(op.subtract(self.c(near), rest))
            away = self.e(op.subtract(self.c(far), rest)) if far == high else self.e(op.add(self.c(far), rest))
            return self.e(op.where(even, toward, away))

        low_side = fold(below, low, high)
        high_side = fold(above, high, low)
        return self.e(op.where(op.less(v, self.c(low)), low_side,
                               op.where(op.greater(v, self.c(high)), high_side, v)))

    def cubic(self, t):
        """The four cubic weights for a tap offset t in [0, 1)."""
        a = CUBIC_A

        def near(x):  # |x| <= 1
            return self.e(op.add(op.multiply(op.multiply(op.subtract(op.multiply(self.c(a + 2), x), self.c(a + 3)),
                                                         x), x), self.c(1.0)))

        def far(x):  # 1 < |x| < 2
            inner = op.add(op.multiply(op.subtract(op.multiply(self.c(a), x), self.c(5 * a)), x), self.c(8 * a))
            return self.e(op.subtract(op.multiply(inner, x), self.c(4 * a)))

        one, two = self.c(1.0), self.c(2.0)
        return [far(self.e(op.add(t, one))), near(t), near(self.e(op.subtract(one, t))),
                far(self.e(op.subtract(two, t)))]


@converter("GridSample")
def _grid_sample(ctx, node, inputs, attrs):
    x, grid = inputs
    dims = [const_value(d) for d in ctx.static_shape(x)]
    gdims = [const_value(d) for d in ctx.static_shape(grid)]
    if None in dims or None in gdims:
        ctx.fail("GridSample needs static dims")
    n, channels, spatial = dims[0], dims[1], dims[2:]
    nd = len(spatial)
    out = gdims[1:-1]
    mode = attrs.get("mode", b"linear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode.decode() if isinstance(mode, bytes) else mode,
                                                          mode.decode() if isinstance(mode, bytes) else mode)
    padding = attrs.get("padding_mode", b"zeros")
    padding = padding.decode() if isinstance(padding, bytes) else padding
    align = bool(attrs.get("align_corners", 0))
    if mode not in ("nearest", "linear", "cubic") or padding not in ("zeros", "border", "reflection"):
        ctx.fail(f"mode {mode} / padding_mode {padding} is not supported")
    dtype = ctx.info(x).dtype.numpy()
    h = _Axis(ctx, dtype)
    axis_taps = []
    for i, size in enumerate(spatial):
        component = nd - 1 - i  # the grid lists coordinates innermost axis first
        g = ctx.emit(op.squeeze(op.strided_slice(grid, [nd + 1], [component], [component + 1]), (nd + 1,)))
        if align:
            v = h.e(op.multiply(op.add(g, h.c(1.0)), h.c((size - 1) / 2.0)))
            low, high = 0.0, size - 1.0
        else:
            v = h.e(op.divide(op.subtract(op.multiply(op.add(g, h.c(1.0)), h.c(float(size))), h.c(1.0)), h.c(2.0)))
            low, high = -0.5, size - 0.5
        if mode == "nearest":
            v = h.e(op.round(v))  # half to even
        if padding == "border":
            v = h.e(op.clip(v, 0.0, size - 1.0))
        elif padding == "reflection":
            v = h.reflect(v, low, high)
        if mode == "nearest":
            taps = [(v, None)]
        else:
            base = h.e(op.floor(v))
            t = h.e(op.subtract(v, base))
            if mode == "linear":
                taps = [(base, h.e(op.subtract(h.c(1.0), t))), (h.e(op.add(base, h.c(1.0))), t)]
            else:
                weights = h.cubic(t)
                taps = [(h.e(op.add(base, h.c(float(k)))), w) for k, w in zip((-1, 0, 1, 2), weights)]
        axis_taps.append([_fetch(ctx, h, p, w, size, padding, low, high) for p, w in taps])
    strides = [int(np.prod(spatial[i + 1:])) for i in range(nd)]
    flat_x = ctx.emit(op.reshape(x, (n, channels, int(np.prod(spatial)))))
    points = int(np.prod(out))
    total = None
    for combo in itertools.product(*axis_taps):
        index, weight = None, None
        for (position, w), stride in zip(combo, strides):
            term = position if stride == 1 else ctx.emit(op.multiply(position, Constant(np.asarray(stride, np.int64))))
            index = term if index is None else ctx.emit(op.add(index, term))
            weight = w if weight is None else (weight if w is None else ctx.emit(op.multiply(weight, w)))
        index = ctx.emit(op.broadcast_to(op.reshape(index, (n, 1, points)), (n, channels, points)))
        value = ctx.emit(op.gather_elements(flat_x, index, axis=2))
        if weight is not None:
            value = ctx.emit(op.multiply(value, op.reshape(weight, (n, 1, points))))
        total = value if total is None else ctx.emit(op.add(total, value))
    return ctx.emit(op.reshape(total, (n, channels) + tuple(out)))


def _fetch(ctx, h, position, weight, size, padding, low, high):
    """(int64 index into the axis, weight or None) for a tap at a float integer position."""
    if padding == "zeros":
        inside = h.e(op.logical_and(op.greater_equal(position, h.c(0.0)), op.less(position, h.c(float(size)))))
        mask = h.e(op.astype(inside, str(h.dtype)))
        weight = mask if weight is None else h.e(op.multiply(weight, mask))
        position = h.e(op.clip(position, 0.0, size - 1.0))
    elif padding == "border":
        position = h.e(op.clip(position, 0.0, size - 1.0))
    else:
        position = h.e(op.clip(h.reflect(position, low, high), 0.0, size - 1.0))
    index = h.e(op.astype(h.e(op.trunc(position)), "int64"))
    return index, weight
