"""Graph-level IR (Relax style): values, calls, bindings, blocks and functions.

A graph function is in A-normal form: a `SeqExpr` of binding blocks whose bindings name every
intermediate value, then a result expression.  `DataflowBlock`s hold only pure calls and bind
`DataflowVar`s, which are invisible outside the block; values leave through plain `Var`s.
Every expression carries its `struct_info` (filled by the BlockBuilder / normalize pass).
Operators are called by name (`Op("matmul")`); their rules live in `refcomp.graph.op`.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from .dtype import dtype as to_dtype
from .expr import PrimExpr, convert
from .graph_struct_info import (
    FuncStructInfo, ObjectStructInfo, PrimStructInfo, ShapeStructInfo, StructInfo, TensorStructInfo,
    TupleStructInfo, as_dim,
)
from .node import Node, freeze_mapping, node, set_field


class Expr(Node):
    """A graph-level expression; `struct_info` is None until the expression is normalized."""

    __slots__ = ()
    struct_info: StructInfo | None

    def __str__(self) -> str:
        from .graph_script import format_expr

        return format_expr(self)

    __repr__ = __str__


@node
class ArrayData:
    """The payload of a Constant: a read-only numpy array, equal to another of same dtype/shape/values."""

    array: np.ndarray

    def __post_init__(self) -> None:
        array = np.array(self.array, copy=True, order="C")  # kernels read constants as C-ordered buffers
        array.setflags(write=False)
        set_field(self, "array", array)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ArrayData):
            return NotImplemented
        a, b = self.array, other.array
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()

    __hash__ = object.__hash__


# ----------------------------------------------------------------------------- leaves

@node
class Var(Expr):
    """A named value: a function parameter or the target of a binding (visible after its block)."""

    name: str
    struct_info: StructInfo | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"graph Var name must be a non-empty str, got {self.name!r}")
        if self.struct_info is not None and not isinstance(self.struct_info, StructInfo):
            raise TypeError(f"Var {self.name}: struct_info must be a StructInfo, got {self.struct_info!r}")


@node
class DataflowVar(Var):
    """A value bound inside a DataflowBlock; not visible outside that block."""


@node
class Constant(Expr):
    """A constant tensor (its struct info is the array's static shape and dtype)."""

    data: ArrayData
    struct_info: StructInfo | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.data, ArrayData):
            set_field(self, "data", ArrayData(np.asarray(self.data)))
        array = self.data.array
        set_field(self, "struct_info", TensorStructInfo(array.shape, to_dtype(array.dtype)))

    @property
    def array(self) -> np.ndarray:
        return self.data.array


@node
class ShapeExpr(Expr):
    """A first-class shape value, e.g. (n, 4)."""

    values: tuple[PrimExpr, ...]
    struct_info: StructInfo | None = None

    def __post_init__(self) -> None:
        set_field(self, "values", tuple(as_dim(v) for v in self.values))
        set_field(self, "struct_info", ShapeStructInfo(self.values))


@node
class PrimValue(Expr):
    """A first-class scalar, possibly symbolic (`n * 4`)."""

    value: PrimExpr
    struct_info: StructInfo | None = None

    def __post_init__(self) -> None:
        set_field(self, "value", convert(self.value))
        set_field(self, "struct_info", PrimStructInfo(self.value.dtype, self.value))


@node
class StringImm(Expr):
    """A string literal passed as an argument."""

    value: str
    struct_info: StructInfo | None = None

    def __post_init__(self) -> None:
        set_field(self, "struct_info", ObjectStructInfo())


@node
class Op(Node):
    """An operator referred to by name; its rules are in refcomp.graph.op's registry."""

    name: str

    def __str__(self) -> str:
        return f"R.{self.name}"

    __repr__ = __str__


@node
class GlobalVar(Expr):
    """The name of a function (graph or PrimFunc) in the enclosing IRModule."""

    name: str
    struct_info: StructInfo | None = None


@node
class ExternFunc(Expr):
    """An external function looked up by symbol at run time (a registered Python callable or C symbol)."""

    symbol: str
    struct_info: StructInfo | None = None

    def __post_init__(self) -> None:
        if self.struct_info is None:
            set_field(self, "struct_info", FuncStructInfo(None, ObjectStructInfo(), purity=False))


# ----------------------------------------------------------------------------- compound values

@node
class Call(Expr):
    """A call of an operator, a module function (GlobalVar), an ExternFunc or a function value.

    `attrs` are the operator's typed attributes (axis, keepdims, ...); `sinfo_args` carries the
    declared result info of opaque callees (call_tir, call_dps_packed).
    """

    op: Node
    args: tuple[Expr, ...]
    attrs: Mapping[str, Any] = None  # type: ignore[assignment]
    sinfo_args: tuple[StructInfo, ...] = ()
    struct_info: StructInfo | None = None

    def __post_init__(self) -> None:
        if isinstance(self.op, str):
            set_field(self, "op", Op(self.op))
        set_field(self, "args", tuple(self.args))
        set_field(self, "attrs", freeze_mapping(self.attrs))
        set_field(self, "sinfo_args", tuple(self.sinfo_args))
        if not isinstance(self.op, (Op, GlobalVar, ExternFunc, Var)):
            raise TypeError(f"Call op must be an Op, GlobalVar, ExternFunc or Var, got {self.op!r}")
        for a in self.args:
            if not isinstance(a, Expr):
                raise TypeError(f"argument of {self.op} must be a graph Expr, got {a!r}")

    @property
    def op_name(self) -> str | None:
        """The operator name when the callee is an Op, else None."""
        return self.op.name if isinstance(self.op, Op) else None


@node
class Tuple(Expr):
    """A tuple of values."""

    fields: tuple[Expr, ...]
    struct_info: StructInfo | None = None

    def __post_init__(self) -> None:
        set_field(self, "fields", tuple(self.fields))
        if self.struct_info is None and all(f.struct_info is not None for f in self.fields):
            set_field(self, "struct_info", TupleStructInfo(tuple(f.struct_info for f in self.fields)))


@node
class TupleGetItem(Expr):
    """Field `index` of a tuple value."""

    tuple_value: Expr
    index: int
    struct_info: StructInfo | None = None


# ----------------------------------------------------------------------------- bindings and scopes

class Binding(Node):
    """A binding of a var in a block."""

    __slots__ = ()
    var: Var


@node
class VarBinding(Binding):
    """var = value."""

    var: Var
    value: Expr


@node
class MatchCast(Binding):
    """var = value, checked at run time to match `struct_info`; first bare uses of size vars define them."""

    var: Var
    value: Expr
    struct_info: StructInfo


@node
class BindingBlock(Node):
    """Bindings run in order; may contain impure calls and control flow."""

    bindings: tuple[Binding, ...]

    def __post_init__(self) -> None:
        set_field(self, "bindings", tuple(self.bindings))


@node
class DataflowBlock(BindingBlock):
    """A side-effect-free block of bindings: the region where graph rewrites are safe."""


@node
class SeqExpr(Expr):
    """Blocks of bindings, then the result `body`."""

    blocks: tuple[BindingBlock, ...]
    body: Expr
    struct_info: StructInfo | None = None

    def __post_init__(self) -> None:
        set_field(self, "blocks", tuple(self.blocks))
        if self.struct_info is None and self.body.struct_info is not None:
            set_field(self, "struct_info", self.body.struct_info)


@node
class If(Expr):
    """Branch on a scalar bool (a PrimValue or a 0-d bool tensor); both branches are SeqExprs."""

    cond: Expr
    true_branch: SeqExpr
    false_branch: SeqExpr
    struct_info: StructInfo | None = None


@node
class Function(Expr):
    """A graph function: parameters, a SeqExpr body, the declared return info and attributes.

    attrs used: `global_symbol`, `num_input`, `primitive` (a fused group), `tir_var_upper_bound`
    (a mapping from size-var name to its upper bound, for memory planning).
    """

    params: tuple[Var, ...]
    body: SeqExpr
    ret_struct_info: StructInfo | None = None
    is_pure: bool = True
    attrs: Mapping[str, Any] = None  # type: ignore[assignment]
    struct_info: StructInfo | None = None

    def __post_init__(self) -> None:
        set_field(self, "params", tuple(self.params))
        set_field(self, "attrs", freeze_mapping(self.attrs))
        for p in self.params:
            if not isinstance(p, Var) or p.struct_info is None:
                raise TypeError(f"Function parameter must be an annotated graph Var, got {p!r}")
        if self.ret_struct_info is None:
            set_field(self, "ret_struct_info", self.body.struct_info or ObjectStructInfo())
        set_field(self, "struct_info", FuncStructInfo(
            tuple(p.struct_info for p in self.params), self.ret_struct_info, self.is_pure))

    def with_attr(self, key: str, value: Any) -> "Function":
        attrs = dict(self.attrs)
        attrs[key] = value
        return self.with_(attrs=freeze_mapping(attrs))


def const(value: Any, dtype: str | None = None) -> Constant:
    """A Constant from a Python number, list or numpy array."""
    array = np.asarray(value, dtype=dtype) if dtype is not None else np.asarray(value)
    if array.dtype == np.float64 and dtype is None and not isinstance(value, np.ndarray):
        array = array.astype(np.float32)
    return Constant(ArrayData(array))


__all__ = [
    "ArrayData", "Binding", "BindingBlock", "Call", "Constant", "DataflowBlock", "DataflowVar", "Expr",
    "ExternFunc", "FuncStructInfo", "Function", "GlobalVar", "If", "MatchCast", "ObjectStructInfo", "Op",
    "PrimStructInfo", "PrimValue", "SeqExpr", "ShapeExpr", "ShapeStructInfo", "StringImm", "StructInfo",
    "TensorStructInfo", "Tuple", "TupleGetItem", "TupleStructInfo", "Var", "VarBinding", "const",
]
