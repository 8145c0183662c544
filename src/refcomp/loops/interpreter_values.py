"""Scalar semantics of the IR for the reference interpreter: rounding, casts, division, math.

Values are Python ints (every integer dtype, kept inside the dtype's range by wrap-around),
Python floats (every float dtype; a float32/float16/bfloat16 value is a double holding exactly a
value of that type) and Python bools.  The rules (spec/ir.md states them normatively):

* Integer +, -, *, abs and casts between integer types wrap around modulo 2**bits (two's
  complement).  floordiv/floormod round toward -inf; truncdiv/truncmod toward zero; a zero
  divisor is a RuntimeFailure "integer division by zero" (the rule of refcomp.shape.evaluate).
  floordiv(INT_MIN, -1) wraps to INT_MIN (and floormod gives 0).
* Float +, -, *, / and sqrt are IEEE-754 in the operand type with round-to-nearest-even: the
  exact result is computed in double and rounded once to the type (double has enough bits for
  that to equal direct rounding for float32, float16 and bfloat16).  Division by zero gives
  +-inf or NaN.  Math functions are evaluated in double and rounded to the type; domain errors
  give what C gives (log(0) = -inf, sqrt(-1) = NaN, exp(1000) = inf).
* min/max on floats: NaN if either operand is NaN; otherwise min(a, b) = a if a < b else b and
  max(a, b) = a if a > b else b (so max(-0.0, 0.0) = 0.0).
* float -> integer casts truncate toward zero and saturate: NaN -> 0, values beyond the range
  (including +-inf) -> the type's min or max.  integer -> float rounds to nearest even.
  float -> float rounds to nearest even (overflow -> inf).  Conversion to bfloat16 rounds to
  float32 first, then to bfloat16 (round to nearest even on the dropped 16 bits; NaN stays NaN).
  x -> bool is x != 0 (NaN -> True); bool -> number is 0 or 1.
* round() rounds half away from zero (C's round); nearbyint() rounds half to even.
"""
from __future__ import annotations

import math
import struct
from array import array

import numpy as np

from ..ast.dtype import DataType

_F32 = struct.Struct("<f")
_F16 = struct.Struct("<e")
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")
NAN = math.nan
INF = math.inf


# ----------------------------------------------------------------------------- float rounding

FLOAT32_MAX = 3.4028234663852886e38
# Doubles at or beyond this magnitude round to infinity in float32 (FLT_MAX plus half an ulp).
_FLOAT32_OVERFLOW = 3.4028235677973366e38


def round_f32(x: float) -> float:
    """x rounded to the nearest float32 (ties to even; overflow gives inf)."""
    if -FLOAT32_MAX <= x <= FLOAT32_MAX:
        return _F32.unpack(_F32.pack(x))[0]
    return round_f32_outside(x)


def round_f32_outside(x: float) -> float:
    """round_f32 for NaN and magnitudes beyond FLT_MAX (struct refuses to pack those)."""
    if x != x or x in (INF, -INF):
        return x
    if abs(x) < _FLOAT32_OVERFLOW:
        return math.copysign(FLOAT32_MAX, x)
    return math.copysign(INF, x)


def round_f16(x: float) -> float:
    """x rounded to the nearest float16 (ties to even; overflow gives inf)."""
    try:
        return _F16.unpack(_F16.pack(x))[0]
    except OverflowError:
        return math.copysign(INF, x)


def bf16_bits(x: float) -> int:
    """The bfloat16 bit pattern nearest to x (rounded to float32 first, then ties to even)."""
    bits = _U32.unpack(_F32.pack(x))[0]
    if (bits & 0x7F800000) == 0x7F800000 and (bits & 0x007FFFFF):
        return ((bits >> 16) & 0x8000) | 0x7FC0  # a quiet NaN with x's sign
    bits += 0x7FFF + ((bits >> 16) & 1)
    return (bits >> 16) & 0xFFFF


def bf16_value(bits: int) -> float:
    """The value of a bfloat16 bit pattern."""
    return _F32.unpack(_U32.pack((int(bits) & 0xFFFF) << 16))[0]


def round_bf16(x: float) -> float:
    """x rounded to the nearest bfloat16 value."""
    return bf16_value(bf16_bits(x))


def float_rounder(t: DataType):
    """The function rounding a double to float dtype t (None for float64: nothing to do)."""
    return {"float64": None, "float32": round_f32, "float16": round_f16, "bfloat16": round_bf16}[t.name]


# ----------------------------------------------------------------------------- integers

def int_range(t: DataType) -> tuple[int, int]:
    """The smallest and largest value of integer dtype t."""
    if t.kind == "int":
        return -(1 << (t.bits - 1)), (1 << (t.bits - 1)) - 1
    return 0, (1 << t.bits) - 1


def wrapper(t: DataType):
    """The function wrapping an unbounded int into integer dtype t (two's complement)."""
    bits = t.bits
    mask = (1 << bits) - 1
    if t.kind == "uint":
        return lambda x: x & mask
    half = 1 << (bits - 1)
    return lambda x: ((x + half) & mask) - half


def float_to_int(x: float, low: int, high: int) -> int:
    """Truncate toward zero, saturating at [low, high]; NaN gives 0."""
    if x != x:
        return 0
    if x <= low:
        return low
    if x >= high:
        return high
    return int(x)


def _round_int_bits(x: int, mantissa: int) -> int:
    """x rounded (ties to even) to an integer with at most `mantissa` significant bits."""
    magnitude = -x if x < 0 else x
    extra = magnitude.bit_length() - mantissa
    if extra <= 0:
        return x
    kept, rest = magnitude >> extra, magnitude & ((1 << extra) - 1)
    half = 1 << (extra - 1)
    if rest > half or (rest == half and kept & 1):
        kept += 1
    rounded = kept << extra
    return -rounded if x < 0 else rounded


def int_to_float(x: int, t: DataType) -> float:
    """Integer x converted to float dtype t, rounding once to nearest even."""
    if t.name == "float64":
        return float(x)
    if -(1 << 53) <= x <= (1 << 53):
        exact = float(x)
    else:  # beyond 2**53 float() itself would round; round to 24 bits first (exact in float)
        exact = float(_round_int_bits(x, 24))
    if t.name == "float32":
        return round_f32(exact)
    if t.name == "float16":
        return round_f16(exact)
    return round_bf16(round_f32(exact))


# ----------------------------------------------------------------------------- division
# Integer floordiv/floormod/truncdiv/truncmod and float division are refcomp.shape.evaluate's
# (the one evaluator): the interpreter reports its ZeroDivisionFailure at the dividing node.


def float_min(a: float, b: float) -> float:
    """min with NaN propagation."""
    if a < b:
        return a
    if b <= a:
        return b
    return NAN


def float_max(a: float, b: float) -> float:
    """max with NaN propagation."""
    if a > b:
        return a
    if b >= a:
        return b
    return NAN


# ----------------------------------------------------------------------------- math in double

def _with_c_special_cases(python_fn, numpy_fn):
    """python_fn, except that domain/overflow errors give C's answer (via numpy's double version)."""

    def evaluate(*args: float) -> float:
        try:
            return float(python_fn(*args))
        except (ValueError, OverflowError, ZeroDivisionError):
            with np.errstate(all="ignore"):
                return float(numpy_fn(*(np.float64(a) for a in args)))

    return evaluate


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def _round_half_away(x: float) -> float:
    t = float(math.trunc(x))
    if abs(x - t) >= 0.5:
        t += math.copysign(1.0, x)
    return t


def _np_round_half_away(x):
    return np.trunc(x + np.copysign(0.5, x)) if np.isfinite(x) else x


def _rsqrt(x: float) -> float:
    return 1.0 / math.sqrt(x)


_MATH = {
    "exp": (math.exp, np.exp), "exp2": (lambda x: math.pow(2.0, x), np.exp2),
    "log": (math.log, np.log), "log2": (math.log2, np.log2), "log10": (math.log10, np.log10),
    "log1p": (math.log1p, np.log1p), "expm1": (math.expm1, np.expm1), "sqrt": (math.sqrt, np.sqrt),
    "rsqrt": (_rsqrt, lambda x: 1.0 / np.sqrt(x)), "sin": (math.sin, np.sin),
    "cos": (math.cos, np.cos), "tan": (math.tan, np.tan), "asin": (math.asin, np.arcsin),
    "acos": (math.acos, np.arccos), "atan": (math.atan, np.arctan), "sinh": (math.sinh, np.sinh),
    "cosh": (math.cosh, np.cosh), "tanh": (math.tanh, np.tanh), "asinh": (math.asinh, np.arcsinh),
    "acosh": (math.acosh, np.arccosh), "atanh": (math.atanh, np.arctanh),
    "sigmoid": (_sigmoid, lambda x: 1.0 / (1.0 + np.exp(-x))), "erf": (math.erf, None),
    "floor": (math.floor, np.floor), "ceil": (math.ceil, np.ceil), "trunc": (math.trunc, np.trunc),
    "round": (_round_half_away, _np_round_half_away), "nearbyint": (round, np.rint),
    "pow": (math.pow, np.power), "atan2": (math.atan2, np.arctan2), "fmod": (math.fmod, np.fmod),
    "hypot": (math.hypot, np.hypot), "copysign": (math.copysign, np.copysign),
}

MATH_DOUBLE = {name: _with_c_special_cases(fn, np_fn if np_fn is not None else fn)
               for name, (fn, np_fn) in _MATH.items()}
# math.erf never fails; the others fall back to numpy only on errors.
MATH_DOUBLE["fabs"] = abs


# ----------------------------------------------------------------------------- buffer storage

# Buffers of these dtypes live in an array.array (copied in and out of numpy as raw bytes);
# bfloat16 buffers hold their values as float32 (every bfloat16 value is one).  float16 and bool
# buffers are Python lists.  Storing a double into a float32 array rounds it to nearest even.
_TYPECODES = {"int8": "b", "uint8": "B", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I",
              "int64": "q", "uint64": "Q", "float32": "f", "float64": "d", "bfloat16": "f"}
_NUMPY_OF_CODE = {"b": "int8", "B": "uint8", "h": "int16", "H": "uint16", "i": "int32", "I": "uint32",
                  "q": "int64", "Q": "uint64", "f": "float32", "d": "float64"}
TYPECODES = {name: code for name, code in _TYPECODES.items()
             if array(code).itemsize == np.dtype(_NUMPY_OF_CODE[code]).itemsize}


def to_storage(values: np.ndarray, t: DataType):
    """The flat, row-major storage of a numpy array of dtype t."""
    code = TYPECODES.get(t.name)
    if t.name == "bfloat16":
        floats = (np.ascontiguousarray(values).astype(np.uint32) << np.uint32(16)).view(np.float32)
        return array("f", floats.tobytes()) if code else floats.ravel().tolist()
    if code is None:
        return values.ravel().tolist()
    return array(code, np.ascontiguousarray(values).tobytes())


def from_storage(data, t: DataType) -> np.ndarray:
    """The flat numpy array (dtype t's storage dtype) of a buffer's storage."""
    if t.name == "bfloat16":
        floats = np.frombuffer(data, np.float32) if isinstance(data, array) else np.array(data, np.float32)
        return (floats.view(np.uint32) >> np.uint32(16)).astype(np.uint16)
    if isinstance(data, array):
        return np.frombuffer(data, t.numpy())
    return np.array(data, dtype=t.numpy())


def new_storage(t: DataType, count: int, fill):
    """Fresh storage of count elements of dtype t, every one `fill`."""
    code = TYPECODES.get(t.name)
    return array(code, [fill]) * count if code else [fill] * count
