"""ONNX neural-network ops: MatMul, Gemm, Conv, ConvTranspose, pooling, softmax, normalizations."""
from __future__ import annotations

import numpy as np

from ...ast.graph import Constant
from ...graph import op
from ...graph.shape_facts import const_value
from .importer import converter


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


@converter("Conv")
def _conv(ctx, node, inputs, attrs):
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    nd = ctx.info(x).ndim - 2
    if nd not in (1, 2):
        ctx.fail(f"{nd}-d convolution is not supported")
    kernel = [const_value(d) for d in ctx.static_shape(w)[2:]]
    strides = list(attrs.get("strides", [1] * nd))
    dilations = list(attrs.get("dilations", [1] * nd))
    pads = _auto_pad(ctx, attrs, ctx.static_shape(x)[2:], kernel, strides, dilations)
    fn = op.conv2d if nd == 2 else op.conv1d
    y = ctx.emit(fn(x, w, strides=strides, padding=pads, dilation=dilations, groups=attrs.get("group", 1)))
    if b is not None:
        y = ctx.emit(op.add(y, op.reshape(b, (-1,) + (1,) * nd)))
    return y


@converter("ConvTranspose")
def _conv_transpose(ctx, node, inputs, attrs):
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    if ctx.info(x).ndim != 4:
        ctx.fail("only 2-d ConvTranspose is supported")
    strides = list(attrs.get("strides", [1, 1]))
    dilations = list(attrs.get("dilations", [1, 1]))
    kernel = [const_value(d) for d in ctx.static_shape(w)[2:]]
    out_pad = list(attrs.get("output_padding", [0, 0]))
    pads = list(attrs.get("pads", [0, 0, 0, 0]))
    spatial = [const_value(d) for d in ctx.static_shape(x)[2:]]
    mode = attrs.get("auto_pad", b"NOTSET")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if "output_shape" in attrs or mode in ("SAME_UPPER", "SAME_LOWER"):
        target = list(attrs["output_shape"])[-2:] if "output_shape" in attrs else [s * st for s, st in
                                                                                   zip(spatial, strides)]
        for k in range(2):
            total = strides[k] * (spatial[k] - 1) + out_pad[k] + (kernel[k] - 1) * dilations[k] + 1 - target[k]
            if total < 0:
                out_pad[k] -= total
                total = 0
            small, big = total // 2, total - total // 2
            pads[k], pads[k + 2] = (big, small) if mode != "SAME_UPPER" and "output_shape" not in attrs or \
                mode == "SAME_LOWER" else (small, big)
    y = ctx.emit(op.conv2d_transpose(x, w, strides=strides, padding=pads, output_padding=out_pad,
                                     dilation=dilations, groups=attrs.get("group", 1)))
    if b is not None:
        y = ctx.emit(op.add(y, op.reshape(b, (-1, 1, 1))))
    return y


@converter("MaxPool", "AveragePool")
def _pool(ctx, node, inputs, attrs):
    x = inputs[0]
    if ctx.info(x).ndim != 4:
        ctx.fail("only 2-d pooling is supported")
    if len(node.output) > 1 and node.output[1]:
        ctx.fail("MaxPool with an Indices output is not supported")
    kernel = list(attrs["kernel_shape"])
    strides = list(attrs.get("strides", [1, 1]))
    dilations = list(attrs.get("dilations", [1, 1]))
    pads = _auto_pad(ctx, attrs, ctx.static_shape(x)[2:], kernel, strides, dilations)
    ceil = bool(attrs.get("ceil_mode", 0))
    if node.op_type == "MaxPool":
        return ctx.emit(op.max_pool2d(x, kernel, strides, pads, dilations, ceil))
    return ctx.emit(op.avg_pool2d(x, kernel, strides, pads, dilations, ceil,
                                  bool(attrs.get("count_include_pad", 0))))


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
    if attrs.get("training_mode", 0) or len([o for o in node.output if o]) > 1:
        ctx.fail("training-mode BatchNormalization is not supported")
    x, scale, bias, mean, var = inputs[:5]
    return ctx.emit(op.batch_norm(x, scale, bias, mean, var, axis=1, epsilon=attrs.get("epsilon", 1e-5)))


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
    return ctx.emit(op.divide(x, ctx.emit(norm)))
