"""Conversions between floats and the minifloat element types (float8_e4m3fn, float8_e4m3fnuz,
float8_e5m2, float8_e5m2fnuz, float8_e8m0fnu, float4_e2m1fn), exact to the bit.

A minifloat tensor is stored as its bit patterns, one per uint8 (spec/graph.md, "Element types").
`minifloat_encode(x, dtype)` rounds a float16/float32/float64 tensor to the nearest minifloat, ties
to even, and `minifloat_decode(x, dtype)` gives each bit pattern's value as a float.  One
description of the algorithm (`_encode`, `_decode`) runs on two backends: loop-level expressions
(the kernels refcomp generates: integer arithmetic on the float's bits, no tables) and numpy
(the reference, used for constant folding).

Rounding: a magnitude `a` with binary exponent `e` (a in [2^e, 2^(e+1))) is scaled by
2^(M - max(e, emin)) and rounded to an integer q half to even (nearbyint); the code is then
`(max(e, emin) - emin) * 2^M + q`, which carries into the exponent when q reaches 2^(M+1) and
covers the subnormals (e < emin) with the same formula.  A code above the largest finite one
overflows: with `saturate` it becomes the largest finite value of the sign, without it NaN
(e4m3fn, the fnuz types) or infinity (e5m2), as ONNX's Cast specifies; float4_e2m1fn always
saturates.  NaN stays NaN (sign kept where the format has a signed NaN); the fnuz types have no
negative zero.  float8_e8m0fnu (a bare exponent, 2^(code - 127)) follows ONNX's own conversion:
the float32 exponent field, rounded up, down or to nearest by `round_mode`.  A float64 source
is rounded from float64 directly; float16 goes through float32 exactly.
"""
from __future__ import annotations

import numpy as np

from ...ast import expr as tir
from ...ast.dtype import MINIFLOAT_FORMATS, DataType, dtype as to_dtype, storage_array, typed_array
from ...ast.graph_struct_info import TensorStructInfo
from ...errors import IRError
from ._common import make_call, te
from .registry import register

ROUND_MODES = ("up", "down", "nearest")


def minifloat_encode(x, dtype, saturate: bool = True, round_mode: str = "up"):
    """x (a float tensor) rounded to the minifloat `dtype`, half to even.

    saturate: an out-of-range value becomes the largest finite value (else NaN or infinity, by
    format).  round_mode applies to float8_e8m0fnu only ("up", "down" or "nearest", as ONNX's).
    """
    return make_call("minifloat_encode", x, dtype=str(to_dtype(dtype)), saturate=bool(saturate),
                     round_mode=str(round_mode))


def minifloat_decode(x, source, dtype="float32"):
    """The value of each element of x, a tensor of the minifloat type `source`, as a float of
    `dtype` (the kernel sees only the bits, so the call names the format)."""
    return make_call("minifloat_decode", x, source=str(to_dtype(source)), dtype=str(to_dtype(dtype)))


def _float_target(ctx, name: str) -> DataType:
    target = to_dtype(ctx.attr(name))
    if not target.is_float:
        ctx.fail(f"{name} must be a float type (float16, bfloat16, float32, float64), got {target}", kind=IRError)
    return target


def _encode_infer(call, ctx):
    x = ctx.tensor(0)
    target = to_dtype(ctx.attr("dtype"))
    if not target.is_minifloat:
        ctx.fail(f"dtype must be a minifloat type ({', '.join(MINIFLOAT_FORMATS)}), got {target}", kind=IRError)
    if x.dtype is not None and not (x.dtype.is_float and x.dtype.name != "bfloat16"):
        ctx.fail(f"expects a float16, float32 or float64 tensor, got {x.dtype}", kind=IRError,
                 hint="cast it to float32 first")
    if ctx.attr("round_mode") not in ROUND_MODES:
        ctx.fail(f"round_mode must be one of {ROUND_MODES}, got {ctx.attr('round_mode')!r}", kind=IRError)
    return TensorStructInfo(x.shape, target, x.ndim)


def _decode_infer(call, ctx):
    x = ctx.tensor(0)
    source = to_dtype(ctx.attr("source"))
    if not source.is_minifloat:
        ctx.fail(f"source must be a minifloat type ({', '.join(MINIFLOAT_FORMATS)}), got {source}", kind=IRError)
    if x.dtype is not None and x.dtype != source:
        ctx.fail(f"expects a {source} tensor, got {x.dtype}", kind=IRError)
    return TensorStructInfo(x.shape, _float_target(ctx, "dtype"), x.ndim)


# ----------------------------------------------------------------------------- the two backends

class _Loops:
    """Loop-level expressions (int64 integer arithmetic, float32/float64 values)."""

    @staticmethod
    def select(cond, a, b):
        like = a.dtype if isinstance(a, tir.PrimExpr) else b.dtype if isinstance(b, tir.PrimExpr) else "int64"
        a, b = (v if isinstance(v, tir.PrimExpr) else tir.const(v, like) for v in (a, b))
        return tir.Select(cond, a, b)

    @staticmethod
    def maximum(a, b):
        return tir.max_(a, b)

    @staticmethod
    def rint(f):
        return tir.Call("nearbyint", (f,), f.dtype)

    @staticmethod
    def int64(value):
        return value.astype("int64") if isinstance(value, tir.PrimExpr) else tir.const(value, "int64")

    @staticmethod
    def cast(value, dtype: str):
        return value.astype(dtype)

    @staticmethod
    def sign_and_magnitude(f):
        """(sign bit, bits of |f|) of a float32/float64 value, both int64."""
        width = f.dtype.bits
        bits = te().reinterpret(f, f"uint{width}")
        top = 1 << (width - 1)
        sign = (bits // tir.const(top, bits.dtype)).astype("int64")
        return sign, (bits % tir.const(top, bits.dtype)).astype("int64")

    @staticmethod
    def from_bits(bits, width: int):
        """The float of `width` bits whose pattern is the int64 `bits` (non-negative)."""
        return te().reinterpret(bits.astype(f"uint{width}"), f"float{width}")


class _Numpy:
    """numpy arrays: the reference."""

    @staticmethod
    def select(cond, a, b):
        return np.where(cond, a, b)

    @staticmethod
    def maximum(a, b):
        return np.maximum(a, b)

    @staticmethod
    def rint(f):
        return np.rint(f)

    @staticmethod
    def int64(value):
        return np.asarray(value, np.int64)

    @staticmethod
    def cast(value, dtype: str):
        with np.errstate(all="ignore"):
            return np.asarray(value).astype(dtype)

    @staticmethod
    def sign_and_magnitude(f):
        width = f.dtype.itemsize * 8
        bits = f.view(f"uint{width}")
        top = np.uint64(1) << np.uint64(width - 1)
        sign = (bits.astype(np.uint64) >> np.uint64(width - 1)).astype(np.int64)
        return sign, (bits.astype(np.uint64) & (top - np.uint64(1))).astype(np.int64)

    @staticmethod
    def from_bits(bits, width: int):
        return np.asarray(bits).astype(f"uint{width}").view(f"float{width}")


# ----------------------------------------------------------------------------- the algorithm

_SOURCE = {32: (23, 127), 64: (52, 1023)}  # float width -> (mantissa bits, exponent bias)


def _limits(name: str) -> tuple[int, int]:
    """(largest finite code, code of an overflow without saturation) of a minifloat."""
    return {
        "float8_e4m3fn": (0x7E, 0x7F), "float8_e4m3fnuz": (0x7F, 0x80),
        "float8_e5m2": (0x7B, 0x7C), "float8_e5m2fnuz": (0x7F, 0x80),
        "float4_e2m1fn": (0x7, 0x7),
    }[name]


def _encode(b, f, name: str, saturate: bool, round_mode: str):
    """Codes (int64) of the float32/float64 values f in the minifloat `name`."""
    if name == "float8_e8m0fnu":
        return _encode_e8m0(b, f if _width(f) == 32 else b.cast(f, "float32"), saturate, round_mode)
    width = _width(f)
    src_mant, src_bias = _SOURCE[width]
    exp_bits, mant_bits, bias = MINIFLOAT_FORMATS[name]
    sign, mag = b.sign_and_magnitude(f)
    inf_bits = ((1 << (width - 1 - src_mant)) - 1) << src_mant
    emin = 1 - bias
    e = b.maximum(mag // (1 << src_mant) - src_bias, emin)  # the exponent, subnormals at emin
    scale = b.from_bits((mant_bits - e + src_bias) * (1 << src_mant), width)  # 2^(M - e), exact
    q = b.int64(b.cast(b.rint(b.from_bits(mag, width) * scale), "int64"))
    code = (e - emin) * (1 << mant_bits) + q
    largest, overflow = _limits(name)
    top = 1 << (exp_bits + mant_bits)  # the sign bit
    fnuz = name.endswith("fnuz")
    if name == "float4_e2m1fn":
        saturate = True
    signed = sign * top
    finite = code + (signed if not fnuz else b.select(code == 0, 0 * sign, signed))
    too_big = (code > largest) | (mag == inf_bits)
    big = largest + signed if saturate else (overflow if fnuz else overflow + signed)
    if name == "float4_e2m1fn":
        nan = (1 - sign) * top  # no NaN: ml_dtypes (ONNX's reference) gives a zero of the other sign
    elif fnuz:
        nan = 0 * sign + 0x80
    else:
        nan = (0x7F if name == "float8_e4m3fn" else 0x7E) + signed
    return b.select(mag > inf_bits, nan, b.select(too_big, big, finite))


def _encode_e8m0(b, f, saturate: bool, round_mode: str):
    """ONNX's float32 -> float8_e8m0fnu: the exponent field, rounded by round_mode."""
    _, mag = b.sign_and_magnitude(f)
    exponent = mag // (1 << 23)
    fraction = mag % (1 << 23)
    special = exponent == 0xFF
    if round_mode == "up":
        up = fraction > 0
    elif round_mode == "nearest":
        guard = (fraction // (1 << 22)) == 1
        rest = (fraction % (1 << 22)) > 0
        up = guard & (rest | (exponent > 0))
    else:
        up = None
    if up is not None:
        if saturate:
            up = up & (exponent != 0xFE)
        exponent = exponent + b.select(up, 1 + 0 * exponent, 0 * exponent)
    return b.select(special, 0xFF + 0 * exponent, exponent % 256)


def _decode(b, code, name: str):
    """The float32 values of the int64 minifloat codes."""
    if name == "float8_e8m0fnu":
        value = b.from_bits(code * (1 << 23), 32)
        tiny = b.from_bits(b.int64(1 << 22), 32)  # code 0 is 2^-127, a float32 subnormal
        nan = b.from_bits(b.int64(0x7FC00000), 32)
        return b.select(code == 0xFF, nan, b.select(code == 0, tiny, value))
    exp_bits, mant_bits, bias = MINIFLOAT_FORMATS[name]
    top = 1 << (exp_bits + mant_bits)
    sign, rest = code // top, code % top
    e, m = rest // (1 << mant_bits), rest % (1 << mant_bits)
    sub = b.cast(m, "float32") * float(2.0 ** (1 - bias - mant_bits))
    normal = b.from_bits((e - bias + 127) * (1 << 23) + m * (1 << (23 - mant_bits)), 32)
    mag = b.select(e == 0, sub, normal)
    value = b.select(sign == 1, mag * -1.0, mag)  # (0 - x would lose the sign of -0)
    nan = b.from_bits(b.int64(0x7FC00000), 32)
    if name == "float8_e4m3fn":
        return b.select(rest == 0x7F, nan, value)
    if name.endswith("fnuz"):
        return b.select(code == 0x80, nan, value)
    if name == "float8_e5m2":
        inf = b.from_bits(b.int64(0x7F800000), 32)
        special = b.select(m == 0, b.select(sign == 1, inf * -1.0, inf), nan)
        return b.select(e == 31, special, value)
    return value


def _width(f) -> int:
    return f.dtype.bits if isinstance(f, tir.PrimExpr) else f.dtype.itemsize * 8


# ----------------------------------------------------------------------------- registration

def _encode_scalar(v, name, saturate, round_mode):
    f = v.astype("float32") if v.dtype.bits == 16 else v
    return _encode(_Loops, f, name, saturate, round_mode).astype("uint8")


def _decode_scalar(v, name, target):
    value = _decode(_Loops, v.astype("int64"), name)
    return value.astype(target)


def _encode_te(x, dtype, saturate=True, round_mode="up"):
    return te().compute(x.shape, lambda *i: _encode_scalar(x[i], dtype, saturate, round_mode),
                        name="minifloat_encode")


def _decode_te(x, source, dtype):
    return te().compute(x.shape, lambda *i: _decode_scalar(x[i], source, dtype), name="minifloat_decode")


def _encode_reference(x, dtype, saturate=True, round_mode="up"):
    f = np.asarray(x)
    f = f.astype(np.float32) if f.dtype.itemsize == 2 else f
    with np.errstate(all="ignore"):
        codes = _encode(_Numpy, f, dtype, saturate, round_mode)
    return typed_array(np.asarray(codes).astype(np.uint8), dtype)


def _decode_reference(x, source: str, dtype="float32"):
    """numpy: the values of the minifloat array x (ml_dtypes-typed or its uint8 bits) of type source."""
    codes = storage_array(np.asarray(x)).astype(np.int64)
    with np.errstate(all="ignore"):
        return np.asarray(_decode(_Numpy, codes, source)).astype(to_dtype(dtype).numpy())


register("minifloat_encode", infer=_encode_infer, reference=_encode_reference, legalize=_encode_te,
         pattern="elementwise", doc="round floats to a float8/float4 type (half to even)")
register("minifloat_decode", infer=_decode_infer, reference=_decode_reference, legalize=_decode_te,
         pattern="elementwise", doc="the float values of float8/float4 bit patterns")
