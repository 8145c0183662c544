"""StructInfo of the graph IR: what is known statically about a value (shape, dtype, kind).

Every field may be partly known: a tensor may know its full symbolic shape, only its rank, only
its dtype, or nothing.  Unknown is explicit (`shape=None`, `ndim=-1`, `dtype=None`), never a
wildcard dimension, so relations between dims (the same `n` in two tensors) are never lost.
Shape dimensions are int64 loop-level expressions over `SizeVar`s.
"""
from __future__ import annotations

from typing import Any, Iterable

from .dtype import DataType, dtype as to_dtype, int64
from .expr import IntImm, PrimExpr, Var, convert
from .node import Node, node, set_field


class StructInfo(Node):
    """Base of the struct-info lattice; ObjectStructInfo is its top."""

    __slots__ = ()

    def __str__(self) -> str:
        from .graph_script import format_struct_info

        return format_struct_info(self)

    __repr__ = __str__


def as_dim(value: Any) -> PrimExpr:
    """A shape dimension as an int64 expression (Python ints become int64 constants)."""
    if isinstance(value, bool):
        raise TypeError(f"a shape dimension must be an integer, got {value!r}")
    if isinstance(value, int):
        return IntImm(value, int64)
    value = convert(value)
    if not value.dtype.is_integer:
        raise TypeError(f"a shape dimension must be an integer expression, got {value.dtype}")
    if value.dtype != int64:
        value = IntImm(value.value, int64) if isinstance(value, IntImm) else value.astype(int64)
    return value


def _dims(values: Iterable[Any]) -> tuple[PrimExpr, ...]:
    return tuple(as_dim(v) for v in values)


@node
class ObjectStructInfo(StructInfo):
    """Any value at all: the top of the lattice."""


@node
class PrimStructInfo(StructInfo):
    """A scalar of `dtype`, optionally with its (symbolic) value known."""

    dtype: DataType
    value: PrimExpr | None = None

    def __post_init__(self) -> None:
        set_field(self, "dtype", to_dtype(self.dtype))
        if self.value is not None:
            set_field(self, "value", convert(self.value))


@node
class ShapeStructInfo(StructInfo):
    """A first-class shape value: its dims when known, else only its length (ndim, -1 = unknown)."""

    values: tuple[PrimExpr, ...] | None = None
    ndim: int = -1

    def __post_init__(self) -> None:
        if self.values is not None:
            set_field(self, "values", _dims(self.values))
            if self.ndim not in (-1, len(self.values)):
                raise ValueError(f"ShapeStructInfo: ndim {self.ndim} but {len(self.values)} values")
            set_field(self, "ndim", len(self.values))
        elif not isinstance(self.ndim, int) or self.ndim < -1:
            raise ValueError(f"ShapeStructInfo: ndim must be an int >= -1, got {self.ndim!r}")


@node
class TensorStructInfo(StructInfo):
    """A tensor: symbolic shape (or None), dtype (or None = unknown), rank (-1 = unknown)."""

    shape: tuple[PrimExpr, ...] | None = None
    dtype: DataType | None = None
    ndim: int = -1

    def __post_init__(self) -> None:
        if self.dtype is not None:
            set_field(self, "dtype", to_dtype(self.dtype))
        if self.shape is not None:
            if isinstance(self.shape, (int, PrimExpr)):
                set_field(self, "shape", (self.shape,))
            set_field(self, "shape", _dims(self.shape))
            if self.ndim not in (-1, len(self.shape)):
                raise ValueError(f"TensorStructInfo: ndim {self.ndim} but shape has {len(self.shape)} dims")
            set_field(self, "ndim", len(self.shape))
        elif not isinstance(self.ndim, int) or self.ndim < -1:
            raise ValueError(f"TensorStructInfo: ndim must be an int >= -1, got {self.ndim!r}")

    @property
    def static_shape(self) -> tuple[int, ...] | None:
        """The shape as Python ints when every dim is a constant, else None."""
        if self.shape is None or not all(isinstance(d, IntImm) for d in self.shape):
            return None
        return tuple(d.value for d in self.shape)


@node
class TupleStructInfo(StructInfo):
    """A tuple whose fields have the given infos."""

    fields: tuple[StructInfo, ...]

    def __post_init__(self) -> None:
        set_field(self, "fields", tuple(self.fields))
        for f in self.fields:
            if not isinstance(f, StructInfo):
                raise TypeError(f"TupleStructInfo field must be a StructInfo, got {f!r}")


@node
class FuncStructInfo(StructInfo):
    """A callable: parameter infos and return info (params None = opaque, any arguments)."""

    params: tuple[StructInfo, ...] | None
    ret: StructInfo
    purity: bool = True

    def __post_init__(self) -> None:
        if self.params is not None:
            set_field(self, "params", tuple(self.params))


# ----------------------------------------------------------------------------- small analyses

def shape_vars(info: StructInfo) -> list[Var]:
    """Symbolic variables mentioned anywhere in info, in first-seen order."""
    from .functor import free_vars

    seen: dict[Var, None] = {}
    for expr in _prim_exprs(info):
        for v in free_vars(expr):
            seen.setdefault(v, None)
    return list(seen)


def definable_vars(info: StructInfo) -> list[Var]:
    """Vars that info *defines* when matched: those appearing as a bare dimension (not `n + 1`)."""
    seen: dict[Var, None] = {}
    for expr in _bare_dims(info):
        seen.setdefault(expr, None)
    return list(seen)


def _bare_dims(info: StructInfo) -> Iterable[Var]:
    if isinstance(info, TensorStructInfo) and info.shape is not None:
        yield from (d for d in info.shape if isinstance(d, Var))
    elif isinstance(info, ShapeStructInfo) and info.values is not None:
        yield from (d for d in info.values if isinstance(d, Var))
    elif isinstance(info, PrimStructInfo) and isinstance(info.value, Var):
        yield info.value
    elif isinstance(info, TupleStructInfo):
        for f in info.fields:
            yield from _bare_dims(f)


def _prim_exprs(info: StructInfo) -> Iterable[PrimExpr]:
    if isinstance(info, TensorStructInfo) and info.shape is not None:
        yield from info.shape
    elif isinstance(info, ShapeStructInfo) and info.values is not None:
        yield from info.values
    elif isinstance(info, PrimStructInfo) and info.value is not None:
        yield info.value
    elif isinstance(info, TupleStructInfo):
        for f in info.fields:
            yield from _prim_exprs(f)
    elif isinstance(info, FuncStructInfo):
        for p in info.params or ():
            yield from _prim_exprs(p)
        yield from _prim_exprs(info.ret)


def erase_to_well_defined(info: StructInfo, defined: Iterable[Var]) -> StructInfo:
    """Coarsen info so it names only vars in `defined`: dims that mention others are forgotten.

    A tensor keeps its rank and dtype when its shape cannot stay; a prim value drops its value.
    """
    from .functor import free_vars

    known = set(defined)

    def ok(expr: PrimExpr) -> bool:
        return all(v in known for v in free_vars(expr))

    if isinstance(info, TensorStructInfo) and info.shape is not None:
        if all(ok(d) for d in info.shape):
            return info
        return TensorStructInfo(None, info.dtype, info.ndim)
    if isinstance(info, ShapeStructInfo) and info.values is not None:
        return info if all(ok(d) for d in info.values) else ShapeStructInfo(None, info.ndim)
    if isinstance(info, PrimStructInfo) and info.value is not None:
        return info if ok(info.value) else PrimStructInfo(info.dtype)
    if isinstance(info, TupleStructInfo):
        fields = tuple(erase_to_well_defined(f, known) for f in info.fields)
        return info if all(a is b for a, b in zip(fields, info.fields)) else TupleStructInfo(fields)
    if isinstance(info, FuncStructInfo):
        return info
    return info


def tensor(shape: Iterable[Any] | None = None, dtype: "DataType | str | None" = "float32",
           ndim: int = -1) -> TensorStructInfo:
    """Shorthand: `tensor((n, 4), "float32")`."""
    return TensorStructInfo(None if shape is None else tuple(shape), dtype, ndim)
