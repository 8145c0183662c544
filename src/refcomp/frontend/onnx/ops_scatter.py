"""ONNX ops that move elements to computed positions, written with gather_elements/scatter_elements:
ReverseSequence, Compress, ScatterND, MaxUnpool, TensorScatter, Col2Im, and ConvTranspose of any rank.

Positions that depend only on shapes and attributes are computed here with numpy and enter the
graph as constants; positions that depend on data (sequence lengths, scatter indices) are computed
by graph ops, so those inputs stay run-time values.
"""
from __future__ import annotations

import itertools

import numpy as np

from ...ast.graph import Constant
from ...graph import op
from ...graph.shape_facts import const_value
from .importer import converter


def _static(ctx, x, what):
    dims = [const_value(d) for d in ctx.static_shape(x)]
    if None in dims:
        ctx.fail(f"{what} needs static dims")
    return dims


def _i64(ctx, value):
    return value if ctx.info(value).dtype == "int64" else ctx.emit(op.astype(value, "int64"))


@converter("ReverseSequence")
def _reverse_sequence(ctx, node, inputs, attrs):
    x, lengths = inputs
    batch_axis, time_axis = attrs.get("batch_axis", 1), attrs.get("time_axis", 0)
    dims = _static(ctx, x, "ReverseSequence")
    ndim = len(dims)
    t_shape = [1] * ndim
    t_shape[time_axis] = dims[time_axis]
    b_shape = [1] * ndim
    b_shape[batch_axis] = dims[batch_axis]
    t = Constant(np.arange(dims[time_axis], dtype=np.int64).reshape(t_shape))
    n = ctx.emit(op.reshape(_i64(ctx, lengths), tuple(b_shape)))
    one = Constant(np.asarray(1, np.int64))
    # position t of a sequence of length n reads n-1-t while t < n, else stays
    source = ctx.emit(op.where(op.less(t, n), op.subtract(op.subtract(n, one), t), t))
    source = ctx.emit(op.broadcast_to(source, tuple(dims)))
    return ctx.emit(op.gather_elements(x, source, axis=time_axis))


@converter("Compress")
def _compress(ctx, node, inputs, attrs):
    x, condition = inputs
    if not isinstance(condition, Constant):
        from .ops_dynamic import compress_runtime

        return compress_runtime(ctx, x, condition, attrs.get("axis"))
    keep = np.nonzero(np.asarray(condition.array).reshape(-1))[0].astype(np.int64)
    axis = attrs.get("axis")
    if axis is None:
        x = ctx.emit(op.reshape(x, (-1,)))
        axis = 0
    return ctx.emit(op.take(x, Constant(keep), axis=axis))


@converter("ScatterND")
def _scatter_nd(ctx, node, inputs, attrs):
    data, indices, updates = inputs
    reduction = attrs.get("reduction", b"none")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    dims = _static(ctx, data, "ScatterND")
    idx_dims = _static(ctx, indices, "ScatterND")
    k = idx_dims[-1]
    count = int(np.prod(idx_dims[:-1]))
    rest = int(np.prod(dims[k:]))
    # each index tuple as one row number of data viewed as (prod(dims[:k]), prod(dims[k:]))
    idx = ctx.emit(op.reshape(_i64(ctx, indices), (count, k)))
    sizes = Constant(np.asarray(dims[:k], np.int64))
    zero = Constant(np.asarray(0, np.int64))
    idx = ctx.emit(op.where(op.less(idx, zero), op.add(idx, sizes), idx))
    strides = np.cumprod([1] + dims[1:k][::-1])[::-1].astype(np.int64)
    rows = ctx.emit(op.sum(op.multiply(idx, Constant(strides)), axis=(1,), keepdims=True))
    rows = ctx.emit(op.broadcast_to(rows, (count, rest)))
    flat = ctx.emit(op.reshape(data, (int(np.prod(dims[:k])), rest)))
    values = ctx.emit(op.reshape(updates, (count, rest)))
    out = ctx.emit(op.scatter_elements(flat, rows, values, axis=0, reduction=reduction))
    return ctx.emit(op.reshape(out, tuple(dims)))


@converter("MaxUnpool")
def _max_unpool(ctx, node, inputs, attrs):
    x, indices = inputs[0], inputs[1]
    dims = _static(ctx, x, "MaxUnpool")
    kernel = list(attrs["kernel_shape"])
    nd = len(kernel)
    strides = list(attrs.get("strides", [1] * nd))
    pads = list(attrs.get("pads", [0] * (2 * nd)))
    inferred = dims[:2] + [(dims[2 + k] - 1) * strides[k] - pads[k] - pads[k + nd] + kernel[k] for k in range(nd)]
    out_shape = inferred
    if len(inputs) > 2 and inputs[2] is not None and not isinstance(inputs[2], Constant):
        from .ops_scatter_runtime import max_unpool_runtime

        return max_unpool_runtime(ctx, x, _i64(ctx, indices), inputs[2], inferred)
    if len(inputs) > 2 and inputs[2] is not None:
        out_shape = [int(v) for v in np.asarray(ctx.constant(inputs[2], "output_shape")).reshape(-1)]
    if any(o < i for o, i in zip(out_shape, inferred)):
        ctx.fail(f"output_shape {out_shape} is smaller than the unpooled shape {inferred}")
    # the indices address the flattened unpooled shape, batch and channel included; a larger
    # output_shape holds it in its leading corner
    total = int(np.prod(inferred))
    flat = Constant(np.zeros((1, total), ctx.info(x).dtype.numpy()))
    where = ctx.emit(op.reshape(_i64(ctx, indices), (1, -1)))
    values = ctx.emit(op.reshape(x, (1, -1)))
    out = ctx.emit(op.reshape(op.scatter_elements(flat, where, values, axis=1), tuple(inferred)))
    if out_shape != inferred:
        out = ctx.emit(op.pad(out, tuple((0, o - i) for o, i in zip(out_shape, inferred))))
    return out


@converter("TensorScatter")
def _tensor_scatter(ctx, node, inputs, attrs):
    past, update = inputs[0], inputs[1]
    writes = inputs[2] if len(inputs) > 2 else None
    mode = attrs.get("mode", b"linear")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    dims = _static(ctx, update, "TensorScatter")
    ndim = len(dims)
    axis = attrs.get("axis", -2) % ndim
    max_len = const_value(ctx.static_shape(past)[axis])
    s_shape = [1] * ndim
    s_shape[axis] = dims[axis]
    position = Constant(np.arange(dims[axis], dtype=np.int64).reshape(s_shape))
    if writes is not None:
        start = ctx.emit(op.reshape(_i64(ctx, writes), (dims[0],) + (1,) * (ndim - 1)))
        position = ctx.emit(op.add(position, start))
    if mode == "circular":
        position = ctx.emit(op.floor_mod(position, Constant(np.asarray(max_len, np.int64))))
    elif mode != "linear":
        ctx.fail(f"unknown mode {mode!r}")
    position = ctx.emit(op.broadcast_to(position, tuple(dims)))
    return ctx.emit(op.scatter_elements(past, position, update, axis=axis))


def col2im_add(ctx, cols, channels, image, kernel, strides, pads, dilations, grid):
    """Sum column blocks into an image: cols is (N, channels * prod(kernel), prod(grid)), the value of
    kernel offset k at block position g; the result is (N, channels, *image) after cropping the pads.

    Where each (offset, position) lands is a constant; contributions that fall into the padding are
    dropped first, then scatter_elements adds the rest."""
    n = const_value(ctx.static_shape(cols)[0])
    nd = len(kernel)
    padded = [image[k] + pads[k] + pads[k + nd] for k in range(nd)]
    targets, sources = [], []
    blocks = int(np.prod(kernel))
    positions = int(np.prod(grid))
    for k_index, offset in enumerate(itertools.product(*[range(k) for k in kernel])):
        for g_index, pos in enumerate(itertools.product(*[range(g) for g in grid])):
            coord = [pos[a] * strides[a] + offset[a] * dilations[a] - pads[a] for a in range(nd)]
            if all(0 <= coord[a] < image[a] for a in range(nd)) and all(
                    pos[a] * strides[a] + offset[a] * dilations[a] < padded[a] for a in range(nd)):
                targets.append(int(np.ravel_multi_index(coord, image)))
                sources.append(k_index * positions + g_index)
    size = int(np.prod(image))
    per_channel = ctx.emit(op.reshape(cols, (n, channels, blocks * positions)))
    out = Constant(np.zeros((n, channels, size), ctx.info(cols).dtype.numpy()))
    if not sources:
        return ctx.emit(op.reshape(out, (n, channels) + tuple(image)))
    picked = ctx.emit(op.take(per_channel, Constant(np.asarray(sources, np.int64)), axis=2))
    where = Constant(np.broadcast_to(np.asarray(targets, np.int64), (n, channels, len(targets))).copy())
    summed = ctx.emit(op.scatter_elements(out, where, picked, axis=2, reduction="add"))
    return ctx.emit(op.reshape(summed, (n, channels) + tuple(image)))


@converter("Col2Im")
def _col2im(ctx, node, inputs, attrs):
    x = inputs[0]
    if not (isinstance(inputs[1], Constant) and isinstance(inputs[2], Constant)):
        from .ops_scatter_runtime import col2im_runtime

        return col2im_runtime(ctx, x, inputs[1], inputs[2], attrs)
    image = [int(v) for v in np.asarray(ctx.constant(inputs[1], "image_shape")).reshape(-1)]
    kernel = [int(v) for v in np.asarray(ctx.constant(inputs[2], "block_shape")).reshape(-1)]
    nd = len(kernel)
    strides = list(attrs.get("strides", [1] * nd))
    dilations = list(attrs.get("dilations", [1] * nd))
    pads = list(attrs.get("pads", [0] * (2 * nd)))
    n, ck, _ = _static(ctx, x, "Col2Im")
    grid = [(image[k] + pads[k] + pads[k + nd] - dilations[k] * (kernel[k] - 1) - 1) // strides[k] + 1
            for k in range(nd)]
    return col2im_add(ctx, x, ck // int(np.prod(kernel)), image, kernel, strides, pads, dilations, grid)


def conv_transpose_nd(ctx, x, w, strides, pads, dilations, out_pad, groups, out_spatial=None):
    """ConvTranspose of any rank: per group, columns = W^T X (a matmul), then col2im_add."""
    n, cin, *spatial = _static(ctx, x, "ConvTranspose")
    _, cout_g, *kernel = _static(ctx, w, "ConvTranspose")
    nd = len(kernel)
    image = out_spatial or [(spatial[k] - 1) * strides[k] - pads[k] - pads[k + nd] + dilations[k] * (kernel[k] - 1)
                            + 1 + out_pad[k] for k in range(nd)]
    # col2im crops the leading pads; trailing output_padding is handled by the larger image
    cin_g = cin // groups
    blocks = int(np.prod(kernel))
    outs = []
    for g in range(groups):
        xg = ctx.emit(op.reshape(ctx.emit(op.strided_slice(x, [1], [g * cin_g], [(g + 1) * cin_g])),
                                 (n, cin_g, int(np.prod(spatial)))))
        wg = ctx.emit(op.reshape(ctx.emit(op.strided_slice(w, [0], [g * cin_g], [(g + 1) * cin_g])),
                                 (cin_g, cout_g * blocks)))
        cols = ctx.emit(op.matmul(op.permute_dims(wg), xg))  # (n, cout_g * blocks, positions)
        outs.append(col2im_add(ctx, cols, cout_g, image, kernel, strides, pads, dilations, spatial))
    return outs[0] if groups == 1 else ctx.emit(op.concat(*outs, axis=1))
