"""Scalar data types of the IR, named as numpy names them."""
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
        """IEEE float or bfloat16."""
        return self.kind in ("float", "bfloat")

    def with_lanes(self, lanes: int) -> "DataType":
        return DataType(self.name, lanes)

    @property
    def element(self) -> "DataType":
        return self if self.lanes == 1 else DataType(self.name)

    def numpy(self) -> np.dtype:
        """The numpy dtype that stores this type (bfloat16 is stored as its uint16 bit pattern)."""
        if self.name == "bfloat16":
            return np.dtype("uint16")
        if self.name == "handle":
            raise ValueError("handle has no numpy dtype")
        return np.dtype(self.name)

    def min_value(self) -> int | float:
        if self.is_bool:
            return 0
        if self.is_integer:
            return int(np.iinfo(self.numpy()).min)
        return -float("inf")

    def max_value(self) -> int | float:
        if self.is_bool:
            return 1
        if self.is_integer:
            return int(np.iinfo(self.numpy()).max)
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
        name = np.dtype(value).name
    except TypeError as exc:
        raise ValueError(f"unknown dtype {value!r}") from exc
    return dtype(name)


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
