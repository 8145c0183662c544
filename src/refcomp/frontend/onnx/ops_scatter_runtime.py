"""ONNX Col2Im whose image shape and block shape are read at run time.

The sizes become run-time vars (runtime_values); the channel count is the input's C * prod(block)
divided by prod(block) (checked when the input is reshaped), the block grid follows from the image,
pads, dilations and strides (its size checked against the input's block count).  Where each
(block offset, block position) lands in the image is computed by graph ops over index ranges of
run-time length; contributions that fall into the padding add 0 to position 0, and
scatter_elements adds the rest, as the constant-shape Col2Im does (ops_scatter.col2im_add).
"""
from __future__ import annotations

import numpy as np

from ...ast import expr as tir
from ...ast.graph import Constant
from ...ast.graph_struct_info import as_dim
from ...graph import op
from .ops_dynamic import checked_reshape, i64, prod_i64
from .runtime_values import require, runtime_sizes


def col2im_runtime(ctx, x, image_value, block_value, attrs):
    e = ctx.emit

    def scalar(value):
        return e(op.shape_to_tensor((value,), scalar=True))

    n, ck, blocks = (as_dim(d) for d in ctx.static_shape(x))
    image = runtime_sizes(ctx, image_value, "image_dim")
    kernel = runtime_sizes(ctx, block_value, "block_dim")
    nd = len(kernel)
    if len(image) != nd:
        ctx.fail(f"image_shape has {len(image)} entries, block_shape {nd}")
    strides = [int(v) for v in attrs.get("strides", [1] * nd)]
    dilations = [int(v) for v in attrs.get("dilations", [1] * nd)]
    pads = [int(v) for v in attrs.get("pads", [0] * (2 * nd))]
    require(ctx, tir.all_(*(k > i64(0) for k in kernel)), "block dims are positive")
    grid = [tir.FloorDiv(image[a] + i64(pads[a] + pads[a + nd]) - i64(dilations[a]) * (kernel[a] - i64(1))
                         - i64(1), i64(strides[a])) + i64(1) for a in range(nd)]
    require(ctx, tir.all_(tir.EQ(prod_i64(grid), blocks), *(g > i64(0) for g in grid)),
            "the block count is the number of block positions in the image")
    size = prod_i64(kernel)
    channels = tir.FloorDiv(ck, size)
    cols = checked_reshape(ctx, x, [n, channels, size * blocks], "col2im_dim")
    n, channels, count = ctx.info(cols).shape
    j = e(op.arange(count, dtype="int64"))
    offset_index = e(op.floor_divide(j, scalar(blocks)))
    position_index = e(op.floor_mod(j, scalar(blocks)))
    target = Constant(np.asarray(0, np.int64))
    valid = Constant(np.asarray(True))
    for a in range(nd):
        inner_k, inner_g = prod_i64(kernel[a + 1:]), prod_i64(grid[a + 1:])
        offset = e(op.floor_mod(op.floor_divide(offset_index, scalar(inner_k)), scalar(kernel[a])))
        position = e(op.floor_mod(op.floor_divide(position_index, scalar(inner_g)), scalar(grid[a])))
        coord = e(op.add(op.multiply(position, Constant(np.asarray(strides[a], np.int64))),
                         op.multiply(offset, Constant(np.asarray(dilations[a], np.int64)))))
        coord = e(op.subtract(coord, Constant(np.asarray(pads[a], np.int64))))
        valid = e(op.logical_and(valid, op.logical_and(op.greater_equal(coord, Constant(np.asarray(0, np.int64))),
                                                       op.less(coord, scalar(image[a])))))
        target = e(op.add(op.multiply(target, scalar(image[a])), coord))
    target = e(op.where(valid, target, Constant(np.asarray(0, np.int64))))
    dtype = ctx.info(x).dtype
    values = e(op.where(valid, cols, Constant(np.zeros((), dtype.numpy()))))
    pixels = prod_i64(image)
    out = e(op.full((n, channels, pixels), 0, str(dtype)))
    where = e(op.broadcast_to(target, (n, channels, count)))
    summed = e(op.scatter_elements(out, where, values, axis=2, reduction="add"))
    return e(op.reshape(summed, (n, channels) + tuple(image)))


def max_unpool_runtime(ctx, x, indices, shape_value, inferred):
    """MaxUnpool into an output_shape read at run time (each dim at least the unpooled one): the
    indices address the unpooled shape, whose values land in the output's leading corner."""
    e = ctx.emit
    dims = runtime_sizes(ctx, shape_value, "output_dim")
    if len(dims) != len(inferred):
        ctx.fail(f"output_shape has {len(dims)} entries, the input rank is {len(inferred)}")
    require(ctx, tir.all_(*(d >= i64(i) for d, i in zip(dims, inferred))),
            "output_shape is at least the unpooled shape")
    flat = e(op.reshape(indices, (-1,)))
    target = Constant(np.asarray(0, np.int64))
    for a, size in enumerate(inferred):
        inner = int(np.prod(inferred[a + 1:], dtype=np.int64))
        coord = e(op.floor_mod(op.floor_divide(flat, Constant(np.asarray(inner, np.int64))),
                               Constant(np.asarray(size, np.int64))))
        target = e(op.add(op.multiply(target, e(op.shape_to_tensor((dims[a],), scalar=True))), coord))
    total = prod_i64(dims)
    out = e(op.full((1, total), 0, str(ctx.info(x).dtype)))
    where = e(op.reshape(target, (1, -1)))
    values = e(op.reshape(x, (1, -1)))
    return e(op.reshape(op.scatter_elements(out, where, values, axis=1), tuple(dims)))
