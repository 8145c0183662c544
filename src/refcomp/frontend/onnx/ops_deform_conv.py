"""ONNX DeformConv (2-d): bilinear samples at kernel positions moved by run-time offsets (and
scaled by an optional mask), then the convolution as one matmul per group.

Kernel tap k = (kh, kw) of output (i, j) reads X at row -pad_top + stride*i + dilation*kh +
offset and the like for columns; a bilinear sample's corners outside the image weigh 0.  The
samples of all taps form columns (N, C * K, OH * OW), so the convolution is W (OC, C/g * K) times
the columns of each group.
"""
from __future__ import annotations

import numpy as np

from ...ast.graph import Constant
from ...graph import op
from ...graph.shape_facts import const_value
from .importer import converter


def _static(ctx, v):
    dims = [const_value(d) for d in ctx.static_shape(v)]
    if None in dims:
        ctx.fail("DeformConv needs static dims")
    return dims


@converter("DeformConv")
def _deform_conv(ctx, node, inputs, attrs):
    inputs = list(inputs) + [None] * (5 - len(inputs))
    x, w, offset, bias, mask = inputs[:5]
    n, channels, height, width = _static(ctx, x)
    out_channels, _, kh, kw = _static(ctx, w)
    if len(_static(ctx, x)) != 4:
        ctx.fail("only 2-d DeformConv is supported")
    oh, ow = _static(ctx, offset)[2:]
    strides = list(attrs.get("strides", [1, 1]))
    dilations = list(attrs.get("dilations", [1, 1]))
    pads = list(attrs.get("pads", [0, 0, 0, 0]))
    groups, offset_groups = attrs.get("group", 1), attrs.get("offset_group", 1)
    taps, points = kh * kw, oh * ow
    dtype = ctx.info(x).dtype.numpy()
    c = lambda v: Constant(np.asarray(v, dtype))  # noqa: E731
    # the undeformed sampling positions, (K, OH, OW) per axis
    rows = (np.arange(kh).reshape(kh, 1, 1, 1) * dilations[0] + np.arange(oh).reshape(1, 1, oh, 1) * strides[0]
            - pads[0]) + np.zeros((1, kw, 1, ow))
    cols = (np.arange(kw).reshape(1, kw, 1, 1) * dilations[1] + np.arange(ow).reshape(1, 1, 1, ow) * strides[1]
            - pads[1]) + np.zeros((kh, 1, oh, 1))
    offsets = ctx.emit(op.reshape(offset, (n, offset_groups, taps, 2, points)))
    if mask is not None:
        mask = ctx.emit(op.reshape(mask, (n, offset_groups, taps * points)))
    per_group = channels // offset_groups
    # X as rows of channels, (N*H*W, C): one `take` per corner reads every channel of a sample
    table = ctx.emit(op.reshape(op.permute_dims(x, (0, 2, 3, 1)), (n * height * width, channels)))
    image_base = Constant((np.arange(n) * height * width).reshape(n, 1).astype(np.int64))
    sampled = []
    for g in range(offset_groups):
        def along(axis, base):
            shift = ctx.emit(op.reshape(op.strided_slice(offsets, [1, 3], [g, axis], [g + 1, axis + 1]),
                                        (n, taps * points)))
            return ctx.emit(op.add(shift, Constant(base.reshape(1, -1).astype(dtype))))

        y, xx = along(0, rows), along(1, cols)
        y0, x0 = ctx.emit(op.floor(y)), ctx.emit(op.floor(xx))
        fy, fx = ctx.emit(op.subtract(y, y0)), ctx.emit(op.subtract(xx, x0))
        block = ctx.emit(op.strided_slice(table, [1], [g * per_group], [(g + 1) * per_group]))
        total = None
        for dy, wy in ((0.0, ctx.emit(op.subtract(c(1.0), fy))), (1.0, fy)):
            for dx, wx in ((0.0, ctx.emit(op.subtract(c(1.0), fx))), (1.0, fx)):
                r, q = ctx.emit(op.add(y0, c(dy))), ctx.emit(op.add(x0, c(dx)))
                inside = ctx.emit(op.logical_and(
                    op.logical_and(op.greater_equal(r, c(0.0)), op.less(r, c(float(height)))),
                    op.logical_and(op.greater_equal(q, c(0.0)), op.less(q, c(float(width))))))
                weight = ctx.emit(op.multiply(op.multiply(wy, wx), op.astype(inside, str(dtype))))
                if mask is not None:
                    weight = ctx.emit(op.multiply(weight, op.squeeze(
                        op.strided_slice(mask, [1], [g], [g + 1]), (1,))))
                r = ctx.emit(op.clip(r, 0.0, height - 1.0))
                q = ctx.emit(op.clip(q, 0.0, width - 1.0))
                r, q = ctx.emit(op.astype(r, "int64")), ctx.emit(op.astype(q, "int64"))
                flat = ctx.emit(op.add(op.add(op.multiply(r, Constant(np.asarray(width, np.int64))), q), image_base))
                value = ctx.emit(op.multiply(op.take(block, flat, axis=0),  # (N, K * P, C / offset groups)
                                             op.expand_dims(weight, (2,))))
                total = value if total is None else ctx.emit(op.add(total, value))
        sampled.append(total)
    samples = sampled[0] if offset_groups == 1 else ctx.emit(op.concat(*sampled, axis=2))
    samples = ctx.emit(op.permute_dims(samples, (0, 2, 1)))  # (N, C, K * P)
    columns = ctx.emit(op.reshape(samples, (n, channels * taps, points)))
    in_g, out_g = channels // groups, out_channels // groups
    outs = []
    for g in range(groups):
        wg = ctx.emit(op.reshape(op.strided_slice(w, [0], [g * out_g], [(g + 1) * out_g]), (out_g, in_g * taps)))
        cg = ctx.emit(op.strided_slice(columns, [1], [g * in_g * taps], [(g + 1) * in_g * taps]))
        outs.append(ctx.emit(op.matmul(wg, cg)))
    y = outs[0] if groups == 1 else ctx.emit(op.concat(*outs, axis=1))
    if bias is not None:
        y = ctx.emit(op.add(y, op.reshape(bias, (-1, 1))))
    return ctx.emit(op.reshape(y, (n, out_channels, oh, ow)))
