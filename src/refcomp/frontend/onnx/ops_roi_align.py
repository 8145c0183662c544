"""ONNX RoiAlign with a fixed sampling_ratio: bilinear samples on a G x G grid per output bin,
averaged (or maxed), for run-time boxes and batch indices.

Sample rows and columns are separable: per box, row coordinates (R, OH, G) and column
coordinates (R, OW, G) give corner positions and weights; the four corners of every
(row, column) pair are gathered from X laid out as (N*H*W, C).  A sample more than one pixel
outside the map weighs 0; coordinates past the last row/column clamp to it, as ONNX defines.
"""
from __future__ import annotations

import numpy as np

from ...ast.graph import Constant
from ...graph import op
from ...graph.shape_facts import const_value
from .importer import converter


def _axis(ctx, start, size, bins, grid, length, dtype):
    """(low, high, fraction, valid) of the sample coordinates along one axis, each (R, bins, grid)."""
    c = lambda v: Constant(np.asarray(v, dtype))  # noqa: E731
    step = ctx.emit(op.divide(size, c(float(bins))))  # (R, 1, 1)
    offsets = Constant((np.arange(bins).reshape(1, -1, 1) + (np.arange(grid).reshape(1, 1, -1) + 0.5) / grid)
                       .astype(dtype))
    coord = ctx.emit(op.add(start, op.multiply(offsets, step)))
    valid = ctx.emit(op.logical_and(op.greater_equal(coord, c(-1.0)), op.less_equal(coord, c(float(length)))))
    coord = ctx.emit(op.maximum(coord, c(0.0)))
    low = ctx.emit(op.floor(coord))
    last = c(float(length - 1))
    at_end = ctx.emit(op.greater_equal(low, last))
    low = ctx.emit(op.where(at_end, last, low))
    high = ctx.emit(op.where(at_end, last, op.add(low, c(1.0))))
    coord = ctx.emit(op.where(at_end, last, coord))
    frac = ctx.emit(op.subtract(coord, low))
    as_index = lambda v: ctx.emit(op.astype(v, "int64"))  # noqa: E731
    return as_index(low), as_index(high), frac, valid


@converter("RoiAlign")
def _roi_align(ctx, node, inputs, attrs):
    x, rois, batch_index = inputs
    n, channels, height, width = (const_value(d) for d in ctx.static_shape(x))
    count = const_value(ctx.static_shape(rois)[0])
    if None in (n, channels, height, width, count):
        ctx.fail("RoiAlign needs static dims")
    grid = attrs.get("sampling_ratio", 0)
    if grid <= 0:
        ctx.fail("sampling_ratio 0 (a grid sized by each box) is not supported; give a positive sampling_ratio")
    out_h, out_w = attrs.get("output_height", 1), attrs.get("output_width", 1)
    mode = attrs.get("mode", b"avg")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    transform = attrs.get("coordinate_transformation_mode", b"half_pixel")
    half_pixel = (transform.decode() if isinstance(transform, bytes) else transform) == "half_pixel"
    dtype = ctx.info(x).dtype.numpy()
    c = lambda v: Constant(np.asarray(v, dtype))  # noqa: E731
    boxes = ctx.emit(op.subtract(op.multiply(rois, c(attrs.get("spatial_scale", 1.0))),
                                 c(0.5 if half_pixel else 0.0)))

    def column(k):
        return ctx.emit(op.reshape(op.strided_slice(boxes, [1], [k], [k + 1]), (count, 1, 1)))

    x0, y0, x1, y1 = (column(k) for k in range(4))
    box_w, box_h = ctx.emit(op.subtract(x1, x0)), ctx.emit(op.subtract(y1, y0))
    if not half_pixel:  # degenerate boxes count as 1 x 1
        box_w, box_h = ctx.emit(op.maximum(box_w, c(1.0))), ctx.emit(op.maximum(box_h, c(1.0)))
    ylo, yhi, ly, vy = _axis(ctx, y0, box_h, out_h, grid, height, dtype)
    xlo, xhi, lx, vx = _axis(ctx, x0, box_w, out_w, grid, width, dtype)
    # (R, OH, G, OW, G) views
    row = lambda v: ctx.emit(op.reshape(v, (count, out_h, grid, 1, 1)))  # noqa: E731
    col = lambda v: ctx.emit(op.reshape(v, (count, 1, 1, out_w, grid)))  # noqa: E731
    base = ctx.emit(op.reshape(op.multiply(op.astype(batch_index, "int64"),
                                           Constant(np.asarray(height * width, np.int64))), (count, 1, 1, 1, 1)))
    valid = ctx.emit(op.astype(op.logical_and(row(vy), col(vx)), str(dtype)))
    one = c(1.0)
    hy, hx = ctx.emit(op.subtract(one, ly)), ctx.emit(op.subtract(one, lx))
    table = ctx.emit(op.reshape(op.permute_dims(x, (0, 2, 3, 1)), (n * height * width, channels)))
    w_const = Constant(np.asarray(width, np.int64))
    corners = []
    for yi, wy in ((ylo, hy), (yhi, ly)):
        for xi, wx in ((xlo, hx), (xhi, lx)):
            where = ctx.emit(op.add(base, op.add(op.multiply(row(yi), w_const), col(xi))))
            value = ctx.emit(op.take(table, where, axis=0))  # (R, OH, G, OW, G, C)
            weight = ctx.emit(op.multiply(op.multiply(row(wy), col(wx)), valid))
            corners.append(ctx.emit(op.multiply(value, op.expand_dims(weight, (5,)))))
    if mode == "avg":
        total = corners[0]
        for other in corners[1:]:
            total = ctx.emit(op.add(total, other))
        pooled = ctx.emit(op.mean(total, axis=(2, 4)))
    elif mode == "max":
        best = corners[0]
        for other in corners[1:]:
            best = ctx.emit(op.maximum(best, other))
        pooled = ctx.emit(op.max(best, axis=(2, 4)))
    else:
        ctx.fail(f"mode {mode} is not supported")
    return ctx.emit(op.permute_dims(pooled, (0, 3, 1, 2)))
