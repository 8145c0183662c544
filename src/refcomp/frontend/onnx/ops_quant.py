"""ONNX linear quantization: QuantizeLinear, DequantizeLinear (to and from int8/uint8/int16/
uint16, int4/uint4/int2/uint2 and the float8/float4 types), MatMulInteger, ConvInteger,
QLinearMatMul, QLinearConv.

Scales and zero points are per tensor, per axis (1-d) or, from opset 21, per block along the axis.
Integer quantization rounds half to even (nearbyint), adds the zero point, then saturates to the
output type's range (int4: [-8, 7] ...).  Float8/float4 quantization rounds x / scale + zero
point to the type (half to even), saturating unless `saturate` is 0 (float4 always saturates).
Integer products accumulate in int32, as the ONNX definitions do.
"""
from __future__ import annotations


from ...ast.dtype import dtype as to_dtype
from ...graph import op
from .element_types import convert
from .importer import converter
from .ops_nn import emit_conv


def _length(ctx, value):
    from ...graph.shape_facts import const_value

    return const_value(ctx.static_shape(value)[0])


def _per_axis(ctx, value, x, axis, block):
    """A scale or zero point shaped to broadcast against x (scalar, 1-d along axis, or blocked)."""
    if value is None:
        return None
    info, ndim = ctx.info(value), ctx.info(x).ndim
    axis = axis % ndim if ndim else 0
    if info.ndim == 0 or (info.ndim == 1 and _length(ctx, value) == 1 and not block):
        return value if info.ndim == 0 else ctx.emit(op.reshape(value, ()))
    if block:
        value = ctx.emit(op.repeat(value, block, axis=axis))
        from ...graph.shape_facts import const_value

        length = const_value(ctx.static_shape(x)[axis])
        if length is None:
            ctx.fail("blocked quantization needs a static dim along the axis")
        return ctx.emit(op.strided_slice(value, [axis], [0], [length]))
    shape = [1] * ndim
    shape[axis] = -1
    return ctx.emit(op.reshape(value, tuple(shape)))


def _quantize(ctx, scaled, zero_point, dtype, saturate=True):
    """round(scaled) + zero point, saturated to dtype and cast (scaled is a float tensor); for a
    float8/float4 dtype, scaled + zero point rounded to it."""
    dtype = to_dtype(dtype)
    ftype = ctx.info(scaled).dtype
    if dtype.is_minifloat:
        if zero_point is not None:
            scaled = ctx.emit(op.add(scaled, convert(ctx, zero_point, ftype)))
        return convert(ctx, scaled, dtype, saturate=saturate)
    q = ctx.emit(op.round(scaled))
    if zero_point is not None:
        q = ctx.emit(op.add(q, convert(ctx, zero_point, ftype)))
    q = ctx.emit(op.clip(q, float(dtype.min_value()), float(dtype.max_value())))
    return convert(ctx, q, dtype)


_QUANTIZED = "int8, uint8, int16, uint16, int4, uint4, int2, uint2 and the float8/float4 types"


def _quantized_dtype(ctx, dtype):
    """dtype, when values can be quantized to it."""
    dtype = to_dtype(dtype)
    if not ((dtype.is_integer and dtype.bits <= 16) or (dtype.is_minifloat and dtype.name != "float8_e8m0fnu")):
        ctx.fail(f"quantization to {dtype} is not supported ({_QUANTIZED} are)")
    return dtype


def _integer_dtype(ctx, elem_type):
    from .importer import _onnx_dtype

    return _quantized_dtype(ctx, _onnx_dtype(elem_type))


@converter("QuantizeLinear")
def _quantize_linear(ctx, node, inputs, attrs):
    x, scale = inputs[0], inputs[1]
    zero_point = inputs[2] if len(inputs) > 2 else None
    axis, block = attrs.get("axis", 1), attrs.get("block_size", 0)
    if zero_point is not None:
        dtype = _quantized_dtype(ctx, ctx.info(zero_point).dtype)
    else:
        dtype = _integer_dtype(ctx, attrs.get("output_dtype", 0) or 2)  # uint8 by default
    if attrs.get("precision", 0):
        ctx.fail("the precision attribute is not supported")
    scale = _per_axis(ctx, scale, x, axis, block)
    zero_point = _per_axis(ctx, zero_point, x, axis, block)
    if ctx.info(scale).dtype != ctx.info(x).dtype:
        scale = ctx.emit(op.astype(scale, ctx.info(x).dtype))
    return _quantize(ctx, ctx.emit(op.divide(x, scale)), zero_point, dtype, bool(attrs.get("saturate", 1)))


@converter("DequantizeLinear")
def _dequantize_linear(ctx, node, inputs, attrs):
    x, scale = inputs[0], inputs[1]
    zero_point = inputs[2] if len(inputs) > 2 else None
    axis, block = attrs.get("axis", 1), attrs.get("block_size", 0)
    scale = _per_axis(ctx, scale, x, axis, block)
    zero_point = _per_axis(ctx, zero_point, x, axis, block)
    value = convert(ctx, x, "float32")
    if zero_point is not None:
        value = ctx.emit(op.subtract(value, convert(ctx, zero_point, "float32")))
    out_dtype = ctx.info(scale).dtype
    if attrs.get("output_dtype", 0):
        from .importer import _onnx_dtype

        out_dtype = str(_onnx_dtype(attrs["output_dtype"]))
    y = ctx.emit(op.multiply(value, op.astype(scale, "float32") if ctx.info(scale).dtype != "float32" else scale))
    return y if str(out_dtype) == "float32" else ctx.emit(op.astype(y, out_dtype))


def _centered(ctx, x, zero_point, per_row_axis=None):
    """x - zero point in int32 (a 1-d zero point of several entries applies along per_row_axis)."""
    value = ctx.emit(op.astype(x, "int32"))
    if zero_point is None:
        return value
    zp = ctx.emit(op.astype(zero_point, "int32"))
    zinfo = ctx.info(zp)
    if per_row_axis is not None and zinfo.ndim == 1 and _length(ctx, zp) != 1:
        shape = [1] * ctx.info(x).ndim
        shape[per_row_axis] = -1
        zp = ctx.emit(op.reshape(zp, tuple(shape)))
    return ctx.emit(op.subtract(value, zp))


@converter("MatMulInteger")
def _matmul_integer(ctx, node, inputs, attrs):
    a, b = inputs[0], inputs[1]
    a_zp = inputs[2] if len(inputs) > 2 else None
    b_zp = inputs[3] if len(inputs) > 3 else None
    a = _centered(ctx, a, a_zp, per_row_axis=ctx.info(a).ndim - 2 if ctx.info(a).ndim >= 2 else None)
    b = _centered(ctx, b, b_zp)
    return ctx.emit(op.matmul(a, b))


def _conv_int32(ctx, x, w, attrs):
    return emit_conv(ctx, x, w, attrs, what="integer convolution")


@converter("ConvInteger")
def _conv_integer(ctx, node, inputs, attrs):
    x, w = inputs[0], inputs[1]
    x_zp = inputs[2] if len(inputs) > 2 else None
    w_zp = inputs[3] if len(inputs) > 3 else None
    return _conv_int32(ctx, _centered(ctx, x, x_zp), _centered(ctx, w, w_zp, per_row_axis=0), attrs)


def _requantize(ctx, acc, factor, y_zp, dtype):
    """acc (int32) * factor, plus the output zero point, rounded and saturated to dtype (in float64,
    where an int32 accumulator is exact)."""
    scaled = ctx.emit(op.multiply(op.astype(acc, "float64"), op.astype(factor, "float64")))
    return _quantize(ctx, scaled, y_zp, dtype)


@converter("QLinearMatMul")
def _qlinear_matmul(ctx, node, inputs, attrs):
    a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp = inputs
    acc = ctx.emit(op.matmul(_centered(ctx, a, a_zp), _centered(ctx, b, b_zp)))
    factor = ctx.emit(op.divide(op.multiply(a_scale, b_scale), y_scale))  # in the scales' own type
    dtype = ctx.info(y_zp if y_zp is not None else a).dtype
    return _requantize(ctx, acc, factor, y_zp, dtype)


@converter("QLinearConv")
def _qlinear_conv(ctx, node, inputs, attrs):
    x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp = inputs[:8]
    bias = inputs[8] if len(inputs) > 8 else None
    acc = _conv_int32(ctx, _centered(ctx, x, x_zp), _centered(ctx, w, w_zp, per_row_axis=0), attrs)
    nd = ctx.info(x).ndim - 2
    if bias is not None:
        acc = ctx.emit(op.add(acc, op.reshape(op.astype(bias, "int32"), (-1,) + (1,) * nd)))
    if ctx.info(w_scale).ndim == 1 and _length(ctx, w_scale) != 1:
        w_scale = ctx.emit(op.reshape(w_scale, (-1,) + (1,) * nd))
    factor = ctx.emit(op.divide(op.multiply(x_scale, w_scale), y_scale))
    dtype = ctx.info(y_zp if y_zp is not None else x).dtype
    return _requantize(ctx, acc, factor, y_zp, dtype)

