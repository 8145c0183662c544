"""Scalar data types of the IR, named as numpy (and ml_dtypes) names them.

Besides the types kernels compute in, the graph level has storage-only element types that models
carry (spec/graph.md, "Element types"): the sub-byte integers int4/uint4/int2/uint2, stored one
value per byte, sign-extended in an int8 (uint4/uint2 in a uint8); the minifloats (float8 in its
five ONNX variants, float4_e2m1fn), stored as their bit patterns in a uint8; and `string`, stored
as a numpy object array of Python str.  Kernels see a minifloat only as its storage type; the
conversion ops compute on the bits.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_KINDS = {
    "bool": ("bool", 1),
    "int8": ("int", 8), "int16": ("int", 16), "int32": ("int", 32), "int64": ("int", 64),
    "uint8": ("uint", 8), "uint16": ("uint", 16), "uint32": ("uint", 32), "uint64": ("uint", 64),
    "float16": ("float", 16), "bfloat16": ("bfloat", 16),
    "float32": ("float", 32), "float64": ("float", 64),
    "handle": ("handle", 64),
    "int4": ("int", 4), "uint4": ("uint", 4), "int2": ("int", 2), "uint2": ("uint", 2),
    "float8_e4m3fn": ("minifloat", 8), "float8_e4m3fnuz": ("minifloat", 8),
    "float8_e5m2": ("minifloat", 8), "float8_e5m2fnuz": ("minifloat", 8),
    "float8_e8m0fnu": ("minifloat", 8), "float4_e2m1fn": ("minifloat", 4),
    "string": ("string", 0),
}

# (exponent bits, mantissa bits, exponent bias) of each minifloat
MINIFLOAT_FORMATS = {
    "float8_e4m3fn": (4, 3, 7), "float8_e4m3fnuz": (4, 3, 8),
    "float8_e5m2": (5, 2, 15), "float8_e5m2fnuz": (5, 2, 16),
    "float8_e8m0fnu": (8, 0, 127), "float4_e2m1fn": (2, 1, 1),
}

DTYPE_NAMES = tuple(name for name in _KINDS if name != "handle")


@dataclass(frozen=True, slots=True)
class DataType:
    """A scalar (lanes == 1) or short-vector element type, e.g. float32 or float32x16."""

    name: str
    lanes: int = 1

    def __post_init__(self) -> None:
        if self.name not in _KINDS:
            raise ValueError(f"unknown dtype {self.name!r}; expected one of {', '.join(_KINDS)}")
        if not isinstance(self.lanes, int) or self.lanes < 1:
            raise ValueError(f"dtype lanes must be a positive int, got {self.lanes!r}")

    @property
    def kind(self) -> str:
        return _KINDS[self.name][0]

    @property
    def bits(self) -> int:
        return _KINDS[self.name][1]

    @property
    def bytes(self) -> int:
        if self.is_storage_only:
            return self.numpy().itemsize
        return 1 if self.name == "bool" else self.bits // 8

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def is_int(self) -> bool:
        return self.kind == "int"

    @property
    def is_uint(self) -> bool:
        return self.kind == "uint"

    @property
    def is_integer(self) -> bool:
        """Signed or unsigned integer (bool excluded)."""
        return self.kind in ("int", "uint")

    @property
    def is_float(self) -> bool:
        """IEEE float or bfloat16 (the minifloats are not: nothing computes in them)."""
        return self.kind in ("float", "bfloat")

    @property
    def is_minifloat(self) -> bool:
        """A float8 or float4 type, stored as its bit pattern in a uint8."""
        return self.kind == "minifloat"

    @property
    def is_sub_byte_int(self) -> bool:
        """int4, uint4, int2 or uint2, stored one value per byte."""
        return self.kind in ("int", "uint") and self.bits < 8

    @property
    def is_string(self) -> bool:
        return self.kind == "string"

    @property
    def is_storage_only(self) -> bool:
        """A type kernels never compute in: a minifloat, a sub-byte integer or string."""
        return self.kind in ("minifloat", "string") or self.is_sub_byte_int

    @property
    def storage(self) -> "DataType":
        """The type kernels see for this element type (uint8 for a minifloat, int8/uint8 for a
        sub-byte integer; itself for every other type)."""
        if self.is_minifloat:
            return DataType("uint8", self.lanes)
        if self.is_sub_byte_int:
            return DataType("int8" if self.is_int else "uint8", self.lanes)
        return self

    def with_lanes(self, lanes: int) -> "DataType":
        return DataType(self.name, lanes)

    @property
    def element(self) -> "DataType":
        return self if self.lanes == 1 else DataType(self.name)

    def numpy(self) -> np.dtype:
        """The numpy dtype that stores this type (bfloat16 is stored as its uint16 bit pattern,
        a minifloat as its uint8 bit pattern, a sub-byte integer in an int8/uint8, string as object)."""
        if self.name == "bfloat16":
            return np.dtype("uint16")
        if self.name == "handle":
            raise ValueError("handle has no numpy dtype")
        if self.is_string:
            return np.dtype(object)
        return np.dtype(self.storage.name)

    def min_value(self) -> int | float:
        if self.is_bool or self.is_uint:
            return 0
        if self.is_int:
            return -(1 << (self.bits - 1))
        return -float("inf")

    def max_value(self) -> int | float:
        if self.is_bool:
            return 1
        if self.is_int:
            return (1 << (self.bits - 1)) - 1
        if self.is_uint:
            return (1 << self.bits) - 1
        return float("inf")

    def wrap(self, value: int) -> int:
        """value reduced into this integer type's range, as two's-complement hardware does."""
        if self.is_bool:
            return int(value != 0)
        bits = self.bits
        value &= (1 << bits) - 1
        if self.is_int and value >= 1 << (bits - 1):
            value -= 1 << bits
        return value

    def __str__(self) -> str:
        return self.name if self.lanes == 1 else f"{self.name}x{self.lanes}"

    def __repr__(self) -> str:
        return f"DataType({str(self)!r})"


def dtype(value: "DataType | str | np.dtype | type") -> DataType:
    """Normalise a dtype given as DataType, a name ('float32', 'float32x8'), or a numpy dtype."""
    if isinstance(value, DataType):
        return value
    if isinstance(value, str):
        name = value
        if name == "bfloat16" or name in _KINDS:
            return DataType(name)
        if "x" in name:
            base, _, lanes = name.rpartition("x")
            if base in _KINDS and lanes.isdigit():
                return DataType(base, int(lanes))
        raise ValueError(f"unknown dtype {value!r}; expected one of {', '.join(DTYPE_NAMES)}")
    try:
        np_dtype = np.dtype(value)
    except TypeError as exc:
        raise ValueError(f"unknown dtype {value!r}") from exc
    if np_dtype.kind in "OUS":  # str and bytes arrays are string tensors
        return DataType("string")
    return dtype(np_dtype.name)


def storage_array(array: np.ndarray) -> np.ndarray:
    """The array in the runtime's storage form for its element type: an ml_dtypes minifloat array
    as its uint8 bit patterns, an ml_dtypes int4/uint4/int2/uint2 array as int8/uint8 values, a
    numpy str/bytes array as an object array of str; any other array unchanged."""
    kind, name = array.dtype.kind, array.dtype.name
    if kind in "US":
        return np.vectorize(_as_str, otypes=[object])(array) if array.size else array.astype(object)
    if name in _KINDS and name not in ("bfloat16", "string") and DataType(name).is_storage_only:
        t = DataType(name)
        return array.view(np.uint8) if t.is_minifloat else array.astype(t.numpy())
    return array


def typed_array(array: np.ndarray, name: str) -> np.ndarray:
    """The storage-form array as an array of ml_dtypes' type `name` where ml_dtypes is installed
    (so a constant keeps its element type), else unchanged."""
    t = dtype(name)
    if not t.is_storage_only or t.is_string:
        return array
    try:
        target = np.dtype(_ml_dtypes_type(name))
    except (ImportError, AttributeError, TypeError):
        return array
    return array.view(target) if t.is_minifloat else array.astype(target)


def _ml_dtypes_type(name: str):
    import ml_dtypes

    return getattr(ml_dtypes, name)


def _as_str(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


bool_ = DataType("bool")
int8 = DataType("int8")
int16 = DataType("int16")
int32 = DataType("int32")
int64 = DataType("int64")
uint8 = DataType("uint8")
uint16 = DataType("uint16")
uint32 = DataType("uint32")
uint64 = DataType("uint64")
float16 = DataType("float16")
bfloat16 = DataType("bfloat16")
float32 = DataType("float32")
float64 = DataType("float64")
handle = DataType("handle")
string = DataType("string")
