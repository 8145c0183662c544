"""ONNX neural-network ops: MatMul, Gemm, Conv, ConvTranspose, pooling, softmax, normalizations."""
from __future__ import annotations

import numpy as np

from ...ast.graph import Constant
from ...graph import op
from ...graph.shape_facts import const_value
from .importer import converter
from .ops_resize_runtime import resize_runtime


@converter("MatMul")
def _matmul(ctx, node, inputs, attrs):
    return ctx.emit(op.matmul(*inputs))


@converter("Gemm")
def _gemm(ctx, node, inputs, attrs):
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    if attrs.get("transA", 0):
        a = ctx.emit(op.permute_dims(a))
    if attrs.get("transB", 0):
        b = ctx.emit(op.permute_dims(b))
    dtype = ctx.info(a).dtype.numpy()
    y = ctx.emit(op.matmul(a, b))
    alpha, beta = attrs.get("alpha", 1.0), attrs.get("beta", 1.0)
    if alpha != 1.0:
        y = ctx.emit(op.multiply(y, Constant(np.asarray(alpha, dtype))))
    if c is not None:
        if beta != 1.0:
            c = ctx.emit(op.multiply(c, Constant(np.asarray(beta, dtype))))
        y = ctx.emit(op.add(y, c))
    return y


def _auto_pad(ctx, attrs, spatial, kernel, strides, dilations):
    pads = list(attrs.get("pads", [0] * (2 * len(spatial))))
    mode = attrs.get("auto_pad", b"NOTSET")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * len(spatial))
        for k, n in enumerate(spatial):
            n = const_value(n)
            if n is None:
                ctx.fail("auto_pad SAME needs static spatial dims")
            out = -(-n // strides[k])
            total = max((out - 1) * strides[k] + (kernel[k] - 1) * dilations[k] + 1 - n, 0)
            small, big = total // 2, total - total // 2
            pads[k], pads[k + len(spatial)] = (small, big) if mode == "SAME_UPPER" else (big, small)
    elif mode == "VALID":
        pads = [0] * (2 * len(spatial))
    return pads


def emit_conv(ctx, x, w, attrs, what: str = "convolution"):
    """x conv w (1-d or 2-d) with the node's strides, dilations, pads/auto_pad and group, no bias."""
    nd = ctx.info(x).ndim - 2
    if nd not in (1, 2):
        ctx.fail(f"{nd}-d {what} is not supported")
    kernel = [const_value(d) for d in ctx.static_shape(w)[2:]]
    strides = list(attrs.get("strides", [1] * nd))
    dilations = list(attrs.get("dilations", [1] * nd))
    pads = _auto_pad(ctx, attrs, ctx.static_shape(x)[2:], kernel, strides, dilations)
    fn = op.conv2d if nd == 2 else op.conv1d
    return ctx.emit(fn(x, w, strides=strides, padding=pads, dilation=dilations, groups=attrs.get("group", 1)))


@converter("Conv")
def _conv(ctx, node, inputs, attrs):
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    nd = ctx.info(x).ndim - 2
    y = emit_conv(ctx, x, w, attrs)
    if b is not None:
        y = ctx.emit(op.add(y, op.reshape(b, (-1,) + (1,) * nd)))
    return y


@converter("ConvTranspose")
def _conv_transpose(ctx, node, inputs, attrs):
    from .ops_scatter import conv_transpose_nd

    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    nd = ctx.info(x).ndim - 2
    strides = list(attrs.get("strides", [1] * nd))
    dilations = list(attrs.get("dilations", [1] * nd))
    kernel = [const_value(d) for d in ctx.static_shape(w)[2:]]
    out_pad = list(attrs.get("output_padding", [0] * nd))
    pads = list(attrs.get("pads", [0] * (2 * nd)))
    spatial = [const_value(d) for d in ctx.static_shape(x)[2:]]
    mode = attrs.get("auto_pad", b"NOTSET")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if "output_shape" in attrs or mode in ("SAME_UPPER", "SAME_LOWER"):
        target = list(attrs["output_shape"])[-nd:] if "output_shape" in attrs else [s * st for s, st in
                                                                                    zip(spatial, strides)]
        for k in range(nd):
            total = strides[k] * (spatial[k] - 1) + out_pad[k] + (kernel[k] - 1) * dilations[k] + 1 - target[k]
            if total < 0:
                out_pad[k] -= total
                total = 0
            small, big = total // 2, total - total // 2
            pads[k], pads[k + nd] = (big, small) if mode != "SAME_UPPER" and "output_shape" not in attrs or \
                mode == "SAME_LOWER" else (small, big)
    groups = attrs.get("group", 1)
    if nd == 2:
        y = ctx.emit(op.conv2d_transpose(x, w, strides=strides, padding=pads, output_padding=out_pad,
                                         dilation=dilations, groups=groups))
    else:
        y = conv_transpose_nd(ctx, x, w, strides, pads, dilations, out_pad, groups)
    if b is not None:
        y = ctx.emit(op.add(y, op.reshape(b, (-1,) + (1,) * nd)))
    return y


def _pool_attrs(ctx, x, attrs, kernel):
    nd = len(kernel)
    strides = list(attrs.get("strides", [1] * nd))
    dilations = list(attrs.get("dilations", [1] * nd))
    pads = _auto_pad(ctx, attrs, ctx.static_shape(x)[2:], kernel, strides, dilations)
    return strides, dilations, pads


def pool_nd(ctx, x, kind, kernel, strides, pads, dilations, ceil=False, include_pad=False):
    """1-, 2- or 3-d max/avg pooling through the 2-d operators.

    1-d pools an (N, C, 1, L) view.  3-d pools (H, W) of an (N, C*D, H, W) view, then D of an
    (N, C, D, H'*W') view: a window is a product of per-axis ranges, so the max is the max of
    per-axis maxes and the average (padding counted or not) the average of per-axis averages.
    """
    nd = len(kernel)

    def pool2d(v, k, s, p, d):
        if kind == "max":
            return ctx.emit(op.max_pool2d(v, k, s, p, d, ceil))
        return ctx.emit(op.avg_pool2d(v, k, s, p, d, ceil, include_pad))

    if nd == 2:
        return pool2d(x, kernel, strides, pads, dilations)
    shape = [const_value(d) for d in ctx.static_shape(x)]
    if None in shape:
        ctx.fail(f"{nd}-d pooling needs static dims")
    if nd == 1:
        y = pool2d(ctx.emit(op.expand_dims(x, (2,))), [1, kernel[0]], [1, strides[0]], [0, pads[0], 0, pads[1]],
                   [1, dilations[0]])
        return ctx.emit(op.squeeze(y, (2,)))
    if nd != 3:
        ctx.fail(f"{nd}-d pooling is not supported")
    n, c, depth, h, w = shape
    y = pool2d(ctx.emit(op.reshape(x, (n, c * depth, h, w))), kernel[1:], strides[1:],
               [pads[1], pads[2], pads[4], pads[5]], dilations[1:])
    oh, ow = (const_value(d) for d in ctx.static_shape(y)[2:])
    y = pool2d(ctx.emit(op.reshape(y, (n, c, depth, oh * ow))), [kernel[0], 1], [strides[0], 1],
               [pads[0], 0, pads[3], 0], [dilations[0], 1])
    od = const_value(ctx.static_shape(y)[2])
    return ctx.emit(op.reshape(y, (n, c, od, oh, ow)))


@converter("MaxPool", "AveragePool")
def _pool(ctx, node, inputs, attrs):
    x = inputs[0]
    kernel = list(attrs["kernel_shape"])
    strides, dilations, pads = _pool_attrs(ctx, x, attrs, kernel)
    ceil = bool(attrs.get("ceil_mode", 0))
    if node.op_type == "MaxPool":
        if len(node.output) > 1 and node.output[1]:
            return _max_pool_with_indices(ctx, x, kernel, strides, pads, dilations, ceil, attrs)
        return pool_nd(ctx, x, "max", kernel, strides, pads, dilations, ceil)
    return pool_nd(ctx, x, "avg", kernel, strides, pads, dilations, ceil, bool(attrs.get("count_include_pad", 0)))


def _max_pool_with_indices(ctx, x, kernel, strides, pads, dilations, ceil, attrs):
    """2-d MaxPool with its Indices output: every window offset as a strided slice of the
    (-inf padded) input, stacked; the max and its first position over that axis."""
    if len(kernel) != 2 or ceil:
        ctx.fail("MaxPool with an Indices output is supported for 2-d pooling without ceil_mode")
    n, c, h, w = (const_value(d) for d in ctx.static_shape(x))
    dtype = ctx.info(x).dtype.numpy()
    low = float(np.finfo(dtype).min) if dtype.kind == "f" else float(np.iinfo(dtype).min)
    padded = ctx.emit(op.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])), low))
    out = [(size + pads[k] + pads[k + 2] - dilations[k] * (kernel[k] - 1) - 1) // strides[k] + 1
           for k, size in enumerate((h, w))]
    windows, offsets = [], []
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            y0, x0 = i * dilations[0], j * dilations[1]
            piece = ctx.emit(op.strided_slice(padded, [2, 3], [y0, x0],
                                              [y0 + (out[0] - 1) * strides[0] + 1, x0 + (out[1] - 1) * strides[1] + 1],
                                              strides))
            windows.append(ctx.emit(op.expand_dims(piece, (4,))))
            offsets.append((y0, x0))
    stack = ctx.emit(op.concat(*windows, axis=4))
    values = ctx.emit(op.max(stack, axis=(4,)))
    which = ctx.emit(op.argmax(stack, axis=4))
    # the input row/column of each window offset at each output position, as constants
    oy = np.arange(out[0]).reshape(-1, 1, 1) * strides[0] - pads[0]
    ox = np.arange(out[1]).reshape(1, -1, 1) * strides[1] - pads[1]
    rows = oy + np.array([o[0] for o in offsets]).reshape(1, 1, -1)
    cols = ox + np.array([o[1] for o in offsets]).reshape(1, 1, -1)
    column_major = attrs.get("storage_order", 0) == 1
    flat = (cols * h + rows) if column_major else (rows * w + cols)
    base = (np.arange(n * c).reshape(n, c, 1, 1) * h * w)
    table = Constant(np.broadcast_to(flat, (n, c) + flat.shape).astype(np.int64))
    picked = ctx.emit(op.gather_elements(table, ctx.emit(op.expand_dims(which, (4,))), axis=4))
    picked = ctx.emit(op.squeeze(picked, (4,)))
    return [values, ctx.emit(op.add(picked, Constant(base.astype(np.int64))))]


@converter("LpPool")
def _lp_pool(ctx, node, inputs, attrs):
    x = inputs[0]
    kernel = list(attrs["kernel_shape"])
    strides, dilations, pads = _pool_attrs(ctx, x, attrs, kernel)
    if attrs.get("ceil_mode", 0):
        ctx.fail("LpPool with ceil_mode is not supported")
    p = attrs.get("p", 2)
    dtype = ctx.info(x).dtype.numpy()
    c = lambda v: Constant(np.asarray(v, dtype))  # noqa: E731
    powered = ctx.emit(op.multiply(x, x) if p == 2 else op.power(op.abs(x), c(p)))
    # a window sum: the average with padding counted, times the window size
    mean = pool_nd(ctx, powered, "avg", kernel, strides, pads, dilations, False, True)
    total = ctx.emit(op.multiply(mean, c(float(np.prod(kernel)))))
    return ctx.emit(op.sqrt(total) if p == 2 else op.power(total, c(1.0 / p)))


@converter("LRN")
def _lrn(ctx, node, inputs, attrs):
    x = inputs[0]
    size = attrs["size"]
    alpha, beta, bias = attrs.get("alpha", 1e-4), attrs.get("beta", 0.75), attrs.get("bias", 1.0)
    shape = [const_value(d) for d in ctx.static_shape(x)]
    if None in shape or len(shape) < 3:
        ctx.fail("LRN needs static dims and a rank of at least 3")
    n, channels = shape[0], shape[1]
    rest = int(np.prod(shape[2:]))
    dtype = ctx.info(x).dtype.numpy()
    c = lambda v: Constant(np.asarray(v, dtype))  # noqa: E731
    square = ctx.emit(op.reshape(op.multiply(x, x), (n, 1, channels, rest)))
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    mean = ctx.emit(op.avg_pool2d(square, [size, 1], [1, 1], [before, 0, after, 0], [1, 1], False, True))
    scale = ctx.emit(op.power(op.add(c(bias), op.multiply(c(alpha), mean)), c(beta)))
    return ctx.emit(op.divide(x, op.reshape(scale, tuple(shape))))


@converter("Upsample")
def _upsample(ctx, node, inputs, attrs):
    x = inputs[0]
    mode = attrs.get("mode", b"nearest")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if len(inputs) > 1 and not isinstance(inputs[1], Constant):  # scales read at run time
        shape = [const_value(d) for d in ctx.static_shape(x)]
        if None in shape or mode not in ("nearest", "linear", "bilinear"):
            ctx.fail("Upsample with run-time scales needs static input dims and mode nearest or linear")
        return resize_runtime(ctx, x, shape, list(range(len(shape))), None, inputs[1], None, {},
                              "nearest" if mode == "nearest" else "linear", "asymmetric", "floor", "stretch")
    scales = [float(v) for v in np.asarray(ctx.constant(inputs[1], "scales")).reshape(-1)] if len(inputs) > 1 \
        else list(attrs["scales"])
    shape = [const_value(d) for d in ctx.static_shape(x)]
    if len(shape) != 4 or scales[:2] != [1.0, 1.0] or None in shape:
        ctx.fail("Upsample is supported on static NCHW inputs scaling H and W only")
    size = (int(np.floor(shape[2] * scales[2])), int(np.floor(shape[3] * scales[3])))
    if mode == "nearest":
        return ctx.emit(op.resize2d(x, size, "nearest", "asymmetric", "floor"))
    if mode in ("linear", "bilinear"):
        return ctx.emit(op.resize2d(x, size, "linear", "asymmetric"))
    ctx.fail(f"Upsample mode {mode} is not supported")


@converter("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(ctx, node, inputs, attrs):
    fn = op.global_avg_pool if node.op_type == "GlobalAveragePool" else op.global_max_pool
    return ctx.emit(fn(inputs[0]))


@converter("Softmax", "LogSoftmax")
def _softmax(ctx, node, inputs, attrs):
    x = inputs[0]
    fn = op.softmax if node.op_type == "Softmax" else op.log_softmax
    if ctx.opset >= 13:
        return ctx.emit(fn(x, axis=attrs.get("axis", -1)))
    # before opset 13: softmax over the flattened trailing dims from axis on
    shape = ctx.static_shape(x)
    axis = attrs.get("axis", 1) % len(shape)
    from ...graph.shape_facts import product

    flat = ctx.emit(op.reshape(x, (product(shape[:axis]), product(shape[axis:]))))
    return ctx.emit(op.reshape(fn(flat, axis=1), tuple(shape)))


@converter("LayerNormalization")
def _layer_norm(ctx, node, inputs, attrs):
    x, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
    ndim = ctx.info(x).ndim
    axis = attrs.get("axis", -1) % ndim
    axes = tuple(range(axis, ndim))
    eps = attrs.get("epsilon", 1e-5)
    shape = ctx.static_shape(x)[axis:]
    scale = ctx.emit(op.broadcast_to(scale, shape)) if ctx.info(scale).ndim != len(axes) or any(
        const_value(a) != const_value(b) for a, b in zip(ctx.static_shape(scale), shape)) else scale
    if bias is None:
        bias = Constant(np.zeros([const_value(d) for d in shape], ctx.info(x).dtype.numpy()))
    elif ctx.info(bias).ndim != len(axes):
        bias = ctx.emit(op.broadcast_to(bias, shape))
    y = ctx.emit(op.layer_norm(x, scale, bias, axes=axes, epsilon=eps))
    if len(node.output) == 1:
        return y
    # the optional Mean and InvStdDev outputs, reduced axes kept as 1
    mean = ctx.emit(op.mean(x, axis=axes, keepdims=True))
    var = ctx.emit(op.variance(x, axis=axes, keepdims=True))
    dtype = ctx.info(x).dtype.numpy()
    inv = ctx.emit(op.rsqrt(op.add(var, Constant(np.asarray(eps, dtype)))))
    return [y, mean, inv]


@converter("RMSNormalization")
def _rms_norm(ctx, node, inputs, attrs):
    x, scale = inputs[0], inputs[1]
    ndim = ctx.info(x).ndim
    axis = attrs.get("axis", -1) % ndim
    axes = tuple(range(axis, ndim))
    shape = ctx.static_shape(x)[axis:]
    if ctx.info(scale).ndim != len(axes) or any(
            const_value(a) != const_value(b) for a, b in zip(ctx.static_shape(scale), shape)):
        scale = ctx.emit(op.broadcast_to(scale, shape))
    return ctx.emit(op.rms_norm(x, scale, axes=axes, epsilon=attrs.get("epsilon", 1e-5)))


@converter("BatchNormalization")
def _batch_norm(ctx, node, inputs, attrs):
    x, scale, bias, mean, var = inputs[:5]
    eps = attrs.get("epsilon", 1e-5)
    if attrs.get("training_mode", 0):
        return _batch_norm_training(ctx, x, scale, bias, mean, var, eps, attrs.get("momentum", 0.9))
    if len([o for o in node.output if o]) > 1:
        ctx.fail("the running statistics outputs need training_mode=1")
    return ctx.emit(op.batch_norm(x, scale, bias, mean, var, axis=1, epsilon=eps))


def _batch_norm_training(ctx, x, scale, bias, mean, var, eps, momentum):
    """Normalize by the batch's own statistics; also return the updated running mean and variance."""
    ndim = ctx.info(x).ndim
    axes = (0,) + tuple(range(2, ndim))
    dtype = ctx.info(x).dtype.numpy()
    c = lambda v: Constant(np.asarray(v, dtype))  # noqa: E731
    per_channel = (-1,) + (1,) * (ndim - 2)
    batch_mean = ctx.emit(op.mean(x, axis=axes))
    batch_var = ctx.emit(op.variance(x, axis=axes))
    inv = ctx.emit(op.rsqrt(op.add(batch_var, c(eps))))
    centered = ctx.emit(op.subtract(x, op.reshape(batch_mean, per_channel)))
    y = ctx.emit(op.add(op.multiply(op.multiply(centered, op.reshape(inv, per_channel)),
                                    op.reshape(scale, per_channel)), op.reshape(bias, per_channel)))
    running_mean = ctx.emit(op.add(op.multiply(mean, c(momentum)), op.multiply(batch_mean, c(1 - momentum))))
    running_var = ctx.emit(op.add(op.multiply(var, c(momentum)), op.multiply(batch_var, c(1 - momentum))))
    return [y, running_mean, running_var]


@converter("InstanceNormalization")
def _instance_norm(ctx, node, inputs, attrs):
    x, scale, bias = inputs
    channels = const_value(ctx.static_shape(x)[1])
    return ctx.emit(op.group_norm(x, scale, bias, channels, attrs.get("epsilon", 1e-5)))


@converter("GroupNormalization")
def _group_norm(ctx, node, inputs, attrs):
    x, scale, bias = inputs
    groups = attrs["num_groups"]
    channels = const_value(ctx.static_shape(x)[1])
    if ctx.info(scale).shape is not None and const_value(ctx.static_shape(scale)[0]) != channels:
        # opset 18 gives one scale per group: repeat it per channel
        per = channels // groups
        scale = ctx.emit(op.repeat(scale, per, axis=0))
        bias = ctx.emit(op.repeat(bias, per, axis=0))
    return ctx.emit(op.group_norm(x, scale, bias, groups, attrs.get("epsilon", 1e-5)))


@converter("MeanVarianceNormalization")
def _mvn(ctx, node, inputs, attrs):
    x = inputs[0]
    axes = tuple(attrs.get("axes", [0, 2, 3]))
    dtype = ctx.info(x).dtype.numpy()
    mean = ctx.emit(op.mean(x, axis=axes, keepdims=True))
    centered = ctx.emit(op.subtract(x, mean))
    var = ctx.emit(op.mean(op.multiply(centered, centered), axis=axes, keepdims=True))
    return ctx.emit(op.divide(centered, op.add(op.sqrt(var), Constant(np.asarray(1e-9, dtype)))))


@converter("LpNormalization")
def _lp_norm(ctx, node, inputs, attrs):
    x = inputs[0]
    axis = attrs.get("axis", -1)
    p = attrs.get("p", 2)
    norm = op.l2_norm(x, axis=(axis,), keepdims=True) if p == 2 else op.l1_norm(x, axis=(axis,), keepdims=True)
    norm = ctx.emit(norm)
    dtype = ctx.info(x).dtype.numpy()
    zero, one = Constant(np.zeros((), dtype)), Constant(np.ones((), dtype))
    # an all-zero slice stays zero (0 / 0 would be NaN)
    return ctx.emit(op.divide(x, op.where(op.equal(norm, zero), one, norm)))
