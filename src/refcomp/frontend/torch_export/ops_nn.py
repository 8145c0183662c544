"""Neural-network ATen ops: matrix products, convolution, pooling, normalizations, attention."""
from __future__ import annotations

import math

import numpy as np

from ...ast.graph import Constant
from ...ast.graph_struct_info import as_dim
from ...graph import op
from ...graph.shape_facts import const_value
from .importer import converter


def _get(args, kwargs, k, name, default=None):
    if len(args) > k:
        return args[k]
    return kwargs.get(name, default)


def _bias(ctx, y, bias, axis=-1):
    """y + bias along axis (a channel axis: bias reshaped to broadcast there)."""
    if bias is None:
        return y
    ndim = ctx.ndim(y)
    axis = axis % ndim
    if axis != ndim - 1:
        bias = ctx.emit(op.reshape(bias, [-1] + [1] * (ndim - 1 - axis)))
    return ctx.emit(op.add(y, bias))


# ----------------------------------------------------------------------------- matrix products

@converter("aten.linear.default")
def _linear(ctx, node, args, kwargs):
    x, w = args[0], args[1]
    b = _get(args, kwargs, 2, "bias")
    if ctx.ndim(w) == 1:
        y = ctx.emit(op.matmul(x, w))
        return _bias(ctx, y, b) if ctx.ndim(y) else ctx.emit(op.add(y, b))
    if b is not None:
        return ctx.emit(op.linear(x, w, b))
    return ctx.emit(op.dense(x, w))


@converter("aten.mm.default", "aten.bmm.default", "aten.matmul.default")
def _matmul(ctx, node, args, kwargs):
    return ctx.emit(op.matmul(args[0], args[1]))


@converter("aten.dot.default", "aten.mv.default", "aten.vdot.default")
def _dot(ctx, node, args, kwargs):
    return ctx.emit(op.matmul(args[0], args[1]))


@converter("aten.addmm.default", "aten.baddbmm.default", "aten.addbmm.default", "aten.addmv.default")
def _addmm(ctx, node, args, kwargs):
    c, a, b = args[0], args[1], args[2]
    beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
    dtype = ctx.out_dtype()
    product = ctx.emit(op.matmul(a, b))
    if str(node.target) == "aten.addbmm.default":  # summed over the batch
        product = ctx.emit(op.sum(product, axis=[0], keepdims=False))
    if alpha != 1:
        product = ctx.emit(op.multiply(product, ctx.scalar(alpha, dtype)))
    if beta == 0:
        return product
    if beta != 1:
        c = ctx.emit(op.multiply(c, ctx.scalar(beta, dtype)))
    return ctx.emit(op.add(c, product))


@converter("aten.outer.default", "aten.ger.default")
def _outer(ctx, node, args, kwargs):
    a = ctx.emit(op.expand_dims(args[0], 1))
    return ctx.emit(op.multiply(a, args[1]))


@converter("aten.einsum.default")
def _einsum(ctx, node, args, kwargs):
    """einsum for the forms that are one (batched) matrix product after permutes."""
    equation, operands = args[0].replace(" ", ""), list(args[1])
    if "..." in equation or "->" not in equation or len(operands) != 2:
        ctx.fail(f"einsum {equation!r} is not supported (two operands, explicit output, no ellipsis)")
    lhs, out = equation.split("->")
    sa, sb = lhs.split(",")
    batch = [c for c in out if c in sa and c in sb]
    free_a = [c for c in out if c in sa and c not in sb]
    free_b = [c for c in out if c in sb and c not in sa]
    contracted = [c for c in sa if c in sb and c not in out]
    if sorted(sa) != sorted(batch + free_a + contracted) or sorted(sb) != sorted(batch + free_b + contracted) \
            or len(set(sa)) != len(sa) or len(set(sb)) != len(sb):
        ctx.fail(f"einsum {equation!r} is not supported")
    a = ctx.emit(op.permute_dims(operands[0], [sa.index(c) for c in batch + free_a + contracted]))
    b = ctx.emit(op.permute_dims(operands[1], [sb.index(c) for c in batch + contracted + free_b]))
    sha, shb = ctx.shape(a), ctx.shape(b)
    nb, nfa, nc = len(batch), len(free_a), len(contracted)
    from ...graph.shape_facts import product

    a = ctx.emit(op.reshape(a, list(sha[:nb]) + [product(sha[nb:nb + nfa]), product(sha[nb + nfa:])]))
    b = ctx.emit(op.reshape(b, list(shb[:nb]) + [product(shb[nb:nb + nc]), product(shb[nb + nc:])]))
    y = ctx.emit(op.matmul(a, b))
    y = ctx.emit(op.reshape(y, list(sha[:nb + nfa]) + list(shb[nb + nc:])))
    order = batch + free_a + free_b
    perm = [order.index(c) for c in out]
    return y if perm == sorted(perm) else ctx.emit(op.permute_dims(y, perm))


# ----------------------------------------------------------------------------- convolution

def _conv(ctx, x, w, b, stride, padding, dilation, groups, transposed=False, output_padding=None):
    nd = ctx.ndim(x) - 2
    if nd not in (1, 2):
        ctx.fail(f"{nd}-d convolution is not supported (1-d and 2-d are)")
    def many(v):
        v = list(v) if isinstance(v, (list, tuple)) else [v]
        return [int(e) for e in (v * nd if len(v) == 1 else v)]
    stride, dilation = many(stride), many(dilation)
    if isinstance(padding, str):
        if padding == "valid":
            pads = [0] * (2 * nd)
        elif padding == "same":
            kernel = [const_value(as_dim(d)) for d in ctx.shape(w)[2:]]
            total = [dil * (k - 1) for dil, k in zip(dilation, kernel)]
            pads = [t // 2 for t in total] + [t - t // 2 for t in total]
        else:
            ctx.fail(f"padding {padding!r} is not supported")
    else:
        p = many(padding)
        pads = p + p
    if transposed:
        if nd != 2:
            ctx.fail("only 2-d transposed convolution is supported")
        y = ctx.emit(op.conv2d_transpose(x, w, strides=stride, padding=pads, output_padding=many(output_padding or 0),
                                         dilation=dilation, groups=int(groups)))
    else:
        fn = op.conv2d if nd == 2 else op.conv1d
        y = ctx.emit(fn(x, w, strides=stride, padding=pads, dilation=dilation, groups=int(groups)))
    return _bias(ctx, y, b, axis=1)


@converter("aten.conv2d.default", "aten.conv1d.default", "aten.conv2d.padding", "aten.conv1d.padding")
def _conv_nd(ctx, node, args, kwargs):
    x, w = args[0], args[1]
    return _conv(ctx, x, w, _get(args, kwargs, 2, "bias"), _get(args, kwargs, 3, "stride", 1),
                 _get(args, kwargs, 4, "padding", 0), _get(args, kwargs, 5, "dilation", 1),
                 _get(args, kwargs, 6, "groups", 1))


@converter("aten.convolution.default")
def _convolution(ctx, node, args, kwargs):
    x, w, b, stride, padding, dilation, transposed, output_padding, groups = args[:9]
    return _conv(ctx, x, w, b, stride, padding, dilation, groups, bool(transposed), output_padding)


@converter("aten.conv_transpose2d.input")
def _conv_transpose(ctx, node, args, kwargs):
    x, w = args[0], args[1]
    return _conv(ctx, x, w, _get(args, kwargs, 2, "bias"), _get(args, kwargs, 3, "stride", 1),
                 _get(args, kwargs, 4, "padding", 0), _get(args, kwargs, 7, "dilation", 1),
                 _get(args, kwargs, 6, "groups", 1), True, _get(args, kwargs, 5, "output_padding", 0))


# ----------------------------------------------------------------------------- pooling

def _pair(v, default=None):
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        return default
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return [int(e) for e in (v * 2 if len(v) == 1 else v)]


def _pool_input(ctx, x):
    """Pooling takes (N, C, H, W); a 3-d (C, H, W) input gets a batch dim of 1."""
    if ctx.ndim(x) == 3:
        return ctx.emit(op.expand_dims(x, 0)), True
    return x, False


@converter("aten.max_pool2d.default", "aten.max_pool2d_with_indices.default")
def _max_pool(ctx, node, args, kwargs):
    x, squeeze = _pool_input(ctx, args[0])
    kernel = _pair(_get(args, kwargs, 1, "kernel_size"))
    stride = _pair(_get(args, kwargs, 2, "stride"), kernel)
    padding = _pair(_get(args, kwargs, 3, "padding", 0))
    dilation = _pair(_get(args, kwargs, 4, "dilation", 1))
    ceil = bool(_get(args, kwargs, 5, "ceil_mode", False))
    y = ctx.emit(op.max_pool2d(x, kernel, stride, padding, dilation, ceil))
    y = ctx.emit(op.squeeze(y, [0])) if squeeze else y
    return [y, None] if "with_indices" in str(node.target) else y


@converter("aten.avg_pool2d.default")
def _avg_pool(ctx, node, args, kwargs):
    x, squeeze = _pool_input(ctx, args[0])
    kernel = _pair(_get(args, kwargs, 1, "kernel_size"))
    stride = _pair(_get(args, kwargs, 2, "stride"), kernel)
    padding = _pair(_get(args, kwargs, 3, "padding", 0))
    ceil = bool(_get(args, kwargs, 4, "ceil_mode", False))
    include_pad = bool(_get(args, kwargs, 5, "count_include_pad", True))
    if _get(args, kwargs, 6, "divisor_override") is not None:
        ctx.fail("avg_pool2d with divisor_override is not supported")
    y = ctx.emit(op.avg_pool2d(x, kernel, stride, padding, 1, ceil, include_pad))
    return ctx.emit(op.squeeze(y, [0])) if squeeze else y


@converter("aten.adaptive_avg_pool2d.default", "aten._adaptive_avg_pool2d.default",
           "aten.adaptive_max_pool2d.default")
def _adaptive_pool(ctx, node, args, kwargs):
    x, squeeze = _pool_input(ctx, args[0])
    is_max = "max" in str(node.target)
    out = _pair(args[1])
    spatial = [const_value(as_dim(d)) for d in ctx.shape(x)[2:]]
    if out == [1, 1]:
        y = ctx.emit(op.global_max_pool(x) if is_max else op.global_avg_pool(x))
    elif None not in spatial and all(s % o == 0 for s, o in zip(spatial, out)):
        kernel = [s // o for s, o in zip(spatial, out)]
        fn = op.max_pool2d if is_max else op.avg_pool2d
        y = ctx.emit(fn(x, kernel, kernel, 0))
    else:
        ctx.fail("adaptive pooling is supported to size 1 or to a divisor of a static input size")
    y = ctx.emit(op.squeeze(y, [0])) if squeeze else y
    return [y, None] if is_max else y


# ----------------------------------------------------------------------------- normalization

def _ones_or(ctx, value, length, dtype, fill):
    if value is not None:
        return value
    n = const_value(as_dim(length))
    if n is None:
        return ctx.emit(op.full((length,), float(fill), dtype))
    return Constant(np.full((n,), fill, dtype=np.dtype(dtype)))


@converter("aten.layer_norm.default", "aten.native_layer_norm.default")
def _layer_norm(ctx, node, args, kwargs):
    x, normalized = args[0], list(args[1])
    w, b = _get(args, kwargs, 2, "weight"), _get(args, kwargs, 3, "bias")
    eps = float(_get(args, kwargs, 4, "eps", 1e-5))
    ndim, k = ctx.ndim(x), len(normalized)
    axes = list(range(ndim - k, ndim))
    dtype = ctx.dtype(x)
    shape = ctx.shape(x)[ndim - k:]
    if k > 1:  # gamma/beta of the normalized shape: flattened to match one axis of the flattened input
        ctx.fail("layer_norm over more than one dim is not supported")
    w = _ones_or(ctx, w, shape[0], dtype, 1.0)
    b = _ones_or(ctx, b, shape[0], dtype, 0.0)
    y = ctx.emit(op.layer_norm(x, w, b, axes=axes, epsilon=eps))
    if "native" not in str(node.target):
        return y
    mean = ctx.emit(op.mean(x, axis=axes, keepdims=True))
    rstd = ctx.emit(op.rsqrt(op.add(op.variance(x, axis=axes, keepdims=True), ctx.scalar(eps, dtype))))
    return [y, mean, rstd]


@converter("aten.rms_norm.default")
def _rms_norm(ctx, node, args, kwargs):
    x, normalized = args[0], list(args[1])
    w = _get(args, kwargs, 2, "weight")
    eps = _get(args, kwargs, 3, "eps")
    dtype = ctx.dtype(x)
    eps = float(np.finfo(np.dtype(dtype)).eps) if eps is None else float(eps)
    ndim, k = ctx.ndim(x), len(normalized)
    if k > 1:
        ctx.fail("rms_norm over more than one dim is not supported")
    w = _ones_or(ctx, w, ctx.shape(x)[-1], dtype, 1.0)
    return ctx.emit(op.rms_norm(x, w, axes=[ndim - 1], epsilon=eps))


@converter("aten.group_norm.default")
def _group_norm(ctx, node, args, kwargs):
    x, groups = args[0], int(args[1])
    w, b = _get(args, kwargs, 2, "weight"), _get(args, kwargs, 3, "bias")
    eps = float(_get(args, kwargs, 4, "eps", 1e-5))
    dtype, channels = ctx.dtype(x), ctx.shape(x)[1]
    return ctx.emit(op.group_norm(x, _ones_or(ctx, w, channels, dtype, 1.0), _ones_or(ctx, b, channels, dtype, 0.0),
                                  groups, eps))


@converter("aten.native_group_norm.default")
def _native_group_norm(ctx, node, args, kwargs):
    x, w, b, groups, eps = args[0], args[1], args[2], int(args[6]), float(args[7])
    return [_group_norm(ctx, node, [x, groups, w, b, eps], {}), None, None]


def _batch_norm_core(ctx, x, w, b, mean, var, eps):
    dtype, channels = ctx.dtype(x), ctx.shape(x)[1]
    w, b = _ones_or(ctx, w, channels, dtype, 1.0), _ones_or(ctx, b, channels, dtype, 0.0)
    return ctx.emit(op.batch_norm(x, w, b, mean, var, axis=1, epsilon=float(eps)))


@converter("aten.batch_norm.default")
def _batch_norm(ctx, node, args, kwargs):
    x, w, b, mean, var, training, _momentum, eps = args[:8]
    if training or mean is None:
        ctx.fail("training-mode batch norm is not supported; export the model in eval mode")
    return _batch_norm_core(ctx, x, w, b, mean, var, eps)


@converter("aten._native_batch_norm_legit_no_training.default")
def _batch_norm_no_training(ctx, node, args, kwargs):
    x, w, b, mean, var, _momentum, eps = args[:7]
    return [_batch_norm_core(ctx, x, w, b, mean, var, eps), None, None]


@converter("aten.instance_norm.default")
def _instance_norm(ctx, node, args, kwargs):
    x, w, b = args[0], args[1], args[2]
    eps = float(args[7] if len(args) > 7 else 1e-5)
    channels = const_value(as_dim(ctx.shape(x)[1]))
    if channels is None:
        ctx.fail("instance norm needs a static channel count")
    return _group_norm(ctx, node, [x, channels, w, b, eps], {})


# ----------------------------------------------------------------------------- attention

@converter("aten.scaled_dot_product_attention.default")
def _sdpa(ctx, node, args, kwargs):
    """softmax(q @ k^T * scale + mask) @ v; a boolean mask keeps the positions that are True; a
    row with every position masked gives zeros, as torch's does."""
    q, k, v = args[0], args[1], args[2]
    mask = _get(args, kwargs, 3, "attn_mask")
    if float(_get(args, kwargs, 4, "dropout_p", 0.0) or 0.0) != 0.0:
        ctx.fail("attention dropout is not supported; export the model in eval mode")
    causal = bool(_get(args, kwargs, 5, "is_causal", False))
    scale = _get(args, kwargs, 6, "scale")
    gqa = bool(kwargs.get("enable_gqa", False))
    dtype = ctx.dtype(q)
    qs, ks = ctx.shape(q), ctx.shape(k)
    if gqa and ctx.ndim(q) >= 3:
        hq, hk = const_value(as_dim(qs[-3])), const_value(as_dim(ks[-3]))
        if hq is None or hk is None or hq % hk:
            ctx.fail("grouped-query attention needs static head counts that divide")
        if hq != hk:
            k = ctx.emit(op.repeat(k, hq // hk, axis=ctx.ndim(k) - 3))
            v = ctx.emit(op.repeat(v, hq // hk, axis=ctx.ndim(v) - 3))
    head = const_value(as_dim(qs[-1]))
    if scale is None:
        if head is None:
            ctx.fail("attention with a symbolic head size needs an explicit scale")
        scale = 1.0 / math.sqrt(head)
    nk = ctx.ndim(k)
    kt = ctx.emit(op.permute_dims(k, list(range(nk - 2)) + [nk - 1, nk - 2]))
    scores = ctx.emit(op.multiply(op.matmul(q, kt), ctx.scalar(scale, dtype)))
    neg_inf = ctx.scalar(-np.inf, dtype)
    if causal:
        rows, cols = qs[-2], ks[-2]
        from .ops_create import index_range

        i = ctx.emit(op.expand_dims(index_range(ctx, 0, rows), 1))
        j = index_range(ctx, 0, cols)
        keep = ctx.emit(op.less_equal(j, i))
        scores = ctx.emit(op.where(keep, scores, neg_inf))
    if mask is not None:
        if ctx.dtype(mask) == "bool":
            scores = ctx.emit(op.where(mask, scores, neg_inf))
        else:
            scores = ctx.emit(op.add(scores, ctx.tensor(mask, dtype)))
    probs = ctx.emit(op.softmax(scores, axis=-1))
    if causal or mask is not None:
        # a row every position of which is masked out: torch's attention gives zeros there (its
        # safe softmax), where a plain softmax of -inf everywhere is NaN
        probs = ctx.emit(op.where(op.isnan(probs), ctx.scalar(0.0, dtype), probs))
    return ctx.emit(op.matmul(probs, v))


# ----------------------------------------------------------------------------- resampling

@converter("aten.pixel_shuffle.default")
def _pixel_shuffle(ctx, node, args, kwargs):
    x, r = args[0], int(args[1])
    n, c, h, w = ctx.shape(x)
    c_out = ctx.out_shape()[1]
    y = ctx.emit(op.reshape(x, [n, c_out, r, r, h, w]))
    y = ctx.emit(op.permute_dims(y, [0, 1, 4, 2, 5, 3]))
    return ctx.emit(op.reshape(y, ctx.out_shape()))


@converter("aten.upsample_nearest2d.vec", "aten.upsample_nearest2d.default", "aten.upsample_bilinear2d.vec",
           "aten.upsample_bilinear2d.default")
def _upsample(ctx, node, args, kwargs):
    x = args[0]
    size = ctx.out_shape()[2:]
    if not all(isinstance(d, int) for d in size):
        ctx.fail("upsampling to a symbolic size is not supported")
    if "nearest" in str(node.target):
        return ctx.emit(op.resize2d(x, list(size), method="nearest", coordinate_transformation_mode="asymmetric",
                                    nearest_mode="floor"))
    align = bool(_get(args, kwargs, 2, "align_corners", False))
    mode = "align_corners" if align else "half_pixel"
    return ctx.emit(op.resize2d(x, list(size), method="linear", coordinate_transformation_mode=mode))
