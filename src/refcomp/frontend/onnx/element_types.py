"""Conversions between ONNX element types, the storage-only ones included.

ONNX's Cast/CastLike (and the quantization ops) between any two of: bool, the integers, the IEEE
floats and bfloat16 (R.astype), the sub-byte integers int4/uint4/int2/uint2 (R.astype, which wraps
to the narrow width) and the minifloats float8_e4m3fn/e4m3fnuz/e5m2/e5m2fnuz/e8m0fnu and
float4_e2m1fn (R.minifloat_encode / R.minifloat_decode: round half to even, `saturate` as ONNX
defines it, e8m0's `round_mode`).  A minifloat decodes to float32 exactly; an integer source of a
minifloat goes through float64, so it is rounded once.
"""
from __future__ import annotations

from ...ast.dtype import DataType, dtype as to_dtype
from ...graph import op


def convert(ctx, x, target, saturate: bool = True, round_mode: str = "up"):
    """x converted to the element type target (a DataType, a name or a numpy dtype)."""
    target = to_dtype(target)
    source = ctx.info(x).dtype
    if source is None:
        ctx.fail("the input's element type must be known")
    if source == target:
        return x
    if source.is_string or target.is_string:
        from .ops_strings import convert_string

        return convert_string(ctx, x, source, target)
    if source.is_minifloat:
        through = target if target.is_float else DataType("float32")
        x = ctx.emit(op.minifloat_decode(x, source, through))
        if through == target:
            return x
        source = through
    if target.is_minifloat:
        if not (source.is_float and source.name != "bfloat16"):
            wide = "float32" if source.is_float or source.is_bool or source.bits <= 16 else "float64"
            x = ctx.emit(op.astype(x, wide))
        return ctx.emit(op.minifloat_encode(x, target, saturate, round_mode))
    return ctx.emit(op.astype(x, target))
