"""Buffers: named, typed, shaped regions of memory, compared by identity."""
from __future__ import annotations

from typing import Any, Sequence

from .dtype import DataType, dtype as to_dtype
from .expr import IntImm, PrimExpr, Range, convert
from .node import Node, node, set_field

SCOPES = ("global", "shared", "shared.dyn", "local", "warp", "wmma.matrix_a", "wmma.matrix_b",
          "wmma.accumulator", "amx.tile", "global.packed")


@node
class Buffer(Node):
    """A multi-dimensional array: shape (symbolic dims allowed), dtype, memory scope and layout.

    `strides == ()` means compact row-major.  `align` is the byte alignment the data pointer is
    promised to have (0: only the natural alignment of the element type).
    """

    name: str
    shape: tuple[PrimExpr, ...]
    dtype: DataType = DataType("float32")
    scope: str = "global"
    strides: tuple[PrimExpr, ...] = ()
    elem_offset: PrimExpr = None  # type: ignore[assignment]
    align: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"Buffer name must be a non-empty str, got {self.name!r}")
        if isinstance(self.shape, (int, PrimExpr)):
            set_field(self, "shape", (self.shape,))
        set_field(self, "shape", tuple(_index(d, "shape", self.name) for d in self.shape))
        set_field(self, "strides", tuple(_index(s, "stride", self.name) for s in self.strides))
        set_field(self, "dtype", to_dtype(self.dtype))
        if self.dtype.is_storage_only:
            raise ValueError(f"buffer {self.name}: {self.dtype} is a graph-level element type; a loop-level "
                             f"buffer holds it as {self.dtype.storage if not self.dtype.is_string else 'nothing'}"
                             + (" (its storage type)" if not self.dtype.is_string else " (strings never reach kernels)"))
        if self.elem_offset is None:
            set_field(self, "elem_offset", IntImm(0, "int32"))
        if self.strides and len(self.strides) != len(self.shape):
            raise ValueError(f"buffer {self.name}: {len(self.strides)} strides for {len(self.shape)} dims")
        if not isinstance(self.scope, str) or not self.scope:
            raise TypeError(f"buffer {self.name}: scope must be a non-empty str, got {self.scope!r}")
        if not isinstance(self.align, int) or self.align < 0 or (self.align & (self.align - 1)):
            raise ValueError(f"buffer {self.name}: align must be 0 or a power of two, got {self.align!r}")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, indices: Any):
        from .expr import BufferLoad

        if not isinstance(indices, tuple):
            indices = (indices,)
        return BufferLoad(self, tuple(convert(i) for i in indices))

    def vload(self, indices: Sequence[Any]):
        from .expr import BufferLoad

        return BufferLoad(self, tuple(convert(i) for i in indices))

    def full_region(self) -> "BufferRegion":
        return BufferRegion(self, tuple(Range.from_extent(d) for d in self.shape))


def _index(value: Any, what: str, name: str) -> PrimExpr:
    value = convert(value)
    if not value.dtype.is_integer:
        raise TypeError(f"buffer {name}: {what} must be an integer, got {value.dtype}")
    return value


@node
class BufferRegion(Node):
    """A rectangular part of a buffer: one Range per dimension."""

    buffer: Buffer
    region: tuple[Range, ...]

    def __post_init__(self) -> None:
        set_field(self, "region", tuple(self.region))
        if len(self.region) != len(self.buffer.shape):
            raise ValueError(
                f"region of {self.buffer.name} has {len(self.region)} ranges for {len(self.buffer.shape)} dims"
            )


def decl_buffer(shape: Any, dtype: "DataType | str" = "float32", name: str = "buffer", **kwargs: Any) -> Buffer:
    """Declare a buffer (TVM's name): `decl_buffer((n, 4), "float32", "A")`."""
    if isinstance(shape, (int, PrimExpr)):
        shape = (shape,)
    return Buffer(name, tuple(shape), to_dtype(dtype), **kwargs)
