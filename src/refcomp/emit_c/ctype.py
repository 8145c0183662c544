"""C spellings of IR dtypes and constants.

Storage and value types differ for three dtypes: bool is stored as uint8_t (numpy's layout) and
computed as `bool`; float16 and bfloat16 are stored as their uint16_t bit patterns and computed as
`float`, rounded back to 16 bits after every operation so results match the IR exactly.
"""
from __future__ import annotations

import math

from ..ast.dtype import DataType

_SCALAR = {
    "bool": "bool", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
    "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
    "float16": "float", "bfloat16": "float", "float32": "float", "float64": "double",
    "handle": "void*",
}
_STORAGE = dict(_SCALAR, bool="uint8_t", float16="uint16_t", bfloat16="uint16_t")
_SHORT = {
    "bool": "b8", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8",
    "uint16": "u16", "uint32": "u32", "uint64": "u64", "float16": "f32", "bfloat16": "f32",
    "float32": "f32", "float64": "f64",
}


def value_type(dtype: DataType) -> str:
    """The C type an expression of dtype (one lane) is computed in."""
    return _SCALAR[dtype.name]


def storage_type(dtype: DataType) -> str:
    """The C type of one buffer element of dtype."""
    return _STORAGE[dtype.name]


def is_half(dtype: DataType) -> bool:
    """float16 or bfloat16: stored as 16 bits, computed as float with rounding."""
    return dtype.name in ("float16", "bfloat16")


def half_to_float(dtype: DataType, text: str) -> str:
    """C text of a stored float16/bfloat16 element as float; other types unchanged."""
    if dtype.name == "float16":
        return f"rc_f16_to_float({text})"
    if dtype.name == "bfloat16":
        return f"rc_bf16_to_float({text})"
    return text


def float_to_half(dtype: DataType, text: str) -> str:
    """C text of a float rounded to stored float16/bfloat16 bits; other types unchanged."""
    if dtype.name == "float16":
        return f"rc_float_to_f16({text})"
    if dtype.name == "bfloat16":
        return f"rc_float_to_bf16({text})"
    return text


def short_name(dtype: DataType) -> str:
    """A short tag for helper names: f32, i64, b8 (float16/bfloat16 compute as f32)."""
    return _SHORT[dtype.name]


def vector_element_tag(dtype: DataType) -> str:
    return "i32" if dtype.is_bool else short_name(dtype.element)


def vector_element_ctype(dtype: DataType) -> str:
    return "int32_t" if dtype.is_bool else value_type(dtype.element)


def vector_bytes(dtype: DataType) -> int:
    element = 4 if dtype.is_bool or is_half(dtype) else dtype.element.bytes
    return element * dtype.lanes


def int_literal(value: int, dtype: DataType) -> str:
    """An integer constant of dtype; the most negative value is spelled so C never overflows."""
    if dtype.is_bool:
        return "true" if value else "false"
    ctype = value_type(dtype)
    if dtype.bits == 64:
        if dtype.is_uint:
            return f"UINT64_C({value})"
        if value == -(2**63):
            return "INT64_MIN"
        return f"INT64_C({value})"
    if value == -(2**31) and dtype.bits == 32 and dtype.is_int:
        return "INT32_MIN"
    if dtype.is_uint:
        return f"(({ctype}){value}u)"
    if dtype.bits == 32:
        return str(value) if value >= 0 else f"({value})"
    return f"(({ctype}){value})"


def float_literal(value: float, dtype: DataType) -> str:
    """A float constant written exactly (hex float for non-integers), with inf and nan as macros."""
    double = dtype.name == "float64"
    if math.isnan(value):
        return "(double)NAN" if double else "NAN"
    if math.isinf(value):
        sign = "-" if value < 0 else ""
        return f"({sign}(double)INFINITY)" if double else f"({sign}INFINITY)"
    if value == 0.0:
        text = "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    elif value == int(value) and abs(value) < 2**53:
        text = f"{int(value)}.0"
    else:
        text = value.hex()
    if not double:
        # float16/bfloat16/float32 constants: the value is rounded to the dtype by the caller's
        # rules when it was created; float32 is exact for any 16-bit float.
        text += "f"
    return f"({text})" if text.startswith("-") else text
