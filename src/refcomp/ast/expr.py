"""Scalar expressions of the loop-level IR.

Integer `//` and `%` on expressions mean *floor* division and modulo, as in Python; C's truncating
forms are the separate nodes `TruncDiv` and `TruncMod`.  `/` is only defined on floats.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from .dtype import DataType, bool_, dtype as to_dtype, float32, int32, int64
from .node import Node, node, set_field

if TYPE_CHECKING:
    from .buffer import Buffer


class PrimExpr(Node):
    """A scalar (or short-vector) expression with a dtype."""

    __slots__ = ()
    dtype: DataType

    # Operators build IR.  Python constants take the dtype of the other operand.
    def __add__(self, other): return _arith(Add, self, other)
    def __radd__(self, other): return _arith(Add, other, self)
    def __sub__(self, other): return _arith(Sub, self, other)
    def __rsub__(self, other): return _arith(Sub, other, self)
    def __mul__(self, other): return _arith(Mul, self, other)
    def __rmul__(self, other): return _arith(Mul, other, self)
    def __truediv__(self, other): return _arith(Div, self, other)
    def __rtruediv__(self, other): return _arith(Div, other, self)
    def __floordiv__(self, other): return _arith(FloorDiv, self, other)
    def __rfloordiv__(self, other): return _arith(FloorDiv, other, self)
    def __mod__(self, other): return _arith(FloorMod, self, other)
    def __rmod__(self, other): return _arith(FloorMod, other, self)
    def __neg__(self):
        zero = IntImm(0, self.dtype) if not self.dtype.is_float else FloatImm(0.0, self.dtype)
        return Sub(zero, self)
    def __lt__(self, other): return _compare(LT, self, other)
    def __le__(self, other): return _compare(LE, self, other)
    def __gt__(self, other): return _compare(GT, self, other)
    def __ge__(self, other): return _compare(GE, self, other)
    def __eq__(self, other): return _compare(EQ, self, other)  # type: ignore[override]
    def __ne__(self, other): return _compare(NE, self, other)  # type: ignore[override]
    def __and__(self, other): return And(_as_bool(self), _as_bool(convert(other)))
    def __rand__(self, other): return And(_as_bool(convert(other)), _as_bool(self))
    def __or__(self, other): return Or(_as_bool(self), _as_bool(convert(other)))
    def __ror__(self, other): return Or(_as_bool(convert(other)), _as_bool(self))
    def __invert__(self): return Not(_as_bool(self))

    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        raise TypeError(
            "a symbolic expression has no Python truth value; "
            "use refcomp.ast.structural_equal, or te.if_then_else inside a compute"
        )

    def astype(self, target: "DataType | str") -> "PrimExpr":
        target = to_dtype(target)
        return self if target == self.dtype else Cast(target, self)


# ----------------------------------------------------------------------------- leaves

@node
class IntImm(PrimExpr):
    """An integer (or bool) constant."""

    value: int
    dtype: DataType = int32

    def __post_init__(self) -> None:
        set_field(self, "dtype", to_dtype(self.dtype))
        if isinstance(self.value, bool):
            set_field(self, "value", int(self.value))
        if not isinstance(self.value, int):
            raise TypeError(f"IntImm value must be an int, got {self.value!r}")
        if not (self.dtype.is_integer or self.dtype.is_bool):
            raise TypeError(f"IntImm needs an integer or bool dtype, got {self.dtype}")
        low, high = self.dtype.min_value(), self.dtype.max_value()
        if not low <= self.value <= high:
            raise ValueError(f"IntImm {self.value} does not fit in {self.dtype}")


@node
class FloatImm(PrimExpr):
    """A floating-point constant (inf and nan allowed)."""

    value: float
    dtype: DataType = float32

    def __post_init__(self) -> None:
        set_field(self, "dtype", to_dtype(self.dtype))
        if isinstance(self.value, bool) or not isinstance(self.value, (int, float)):
            raise TypeError(f"FloatImm value must be a float, got {self.value!r}")
        set_field(self, "value", float(self.value))
        if not self.dtype.is_float:
            raise TypeError(f"FloatImm needs a float dtype, got {self.dtype}")


@node
class StringImm(PrimExpr):
    """A string constant; only appears as an argument of intrinsic calls."""

    value: str
    dtype: DataType = DataType("handle")


class _VarType(type):
    """Var's metaclass: a SizeVar is a Var to isinstance and issubclass without being a Python
    subclass of it.  Were it one, `i < n` (i a Var, n a SizeVar) would build GT(n, i): Python
    gives a right operand whose type subclasses the left one's the first try at a comparison,
    through the reflected method (n.__gt__(i)), whatever the classes define."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return type.__instancecheck__(cls, obj) or (cls is Var and type.__instancecheck__(SizeVar, obj))

    def __subclasscheck__(cls, sub: Any) -> bool:
        return type.__subclasscheck__(cls, sub) or (cls is Var and type.__subclasscheck__(SizeVar, sub))


def _check_var(var: Any) -> None:
    set_field(var, "dtype", to_dtype(var.dtype))
    if not isinstance(var.name, str) or not var.name:
        raise TypeError(f"{type(var).__name__} name must be a non-empty str, got {var.name!r}")


@node
class Var(PrimExpr, metaclass=_VarType):
    """A scalar variable: loop variable, iteration variable, let-bound name or parameter."""

    name: str
    dtype: DataType = int32

    def __post_init__(self) -> None:
        _check_var(self)


@node
class SizeVar(PrimExpr):
    """A variable known to be >= 0, used for symbolic shape dimensions.

    `isinstance(n, Var)` holds (see _VarType for why it is not a Python subclass of Var).
    """

    name: str
    dtype: DataType = int32

    def __post_init__(self) -> None:
        _check_var(self)


# ----------------------------------------------------------------------------- arithmetic

class BinaryOp(PrimExpr):
    """Two operands of one dtype; the result has that dtype."""

    __slots__ = ()
    a: PrimExpr
    b: PrimExpr
    symbol = "?"

    def _check_operands(self, *, integer_only: bool = False, float_only: bool = False) -> DataType:
        for operand in (self.a, self.b):
            if not isinstance(operand, PrimExpr):
                raise TypeError(f"{type(self).__name__} operand must be a PrimExpr, got {operand!r}")
        if self.a.dtype != self.b.dtype:
            raise TypeError(
                f"{type(self).__name__} operands have different dtypes {self.a.dtype} and {self.b.dtype}"
            )
        if integer_only and not self.a.dtype.element.is_integer:
            raise TypeError(f"{type(self).__name__} is only defined on integers, got {self.a.dtype}")
        if float_only and not self.a.dtype.element.is_float:
            raise TypeError(
                f"{type(self).__name__} is only defined on floats, got {self.a.dtype}; use // for floor division"
            )
        return self.a.dtype


def _arith_node(symbol: str, *, integer_only: bool = False, float_only: bool = False):
    def decorate(cls):
        cls.symbol = symbol

        def __post_init__(self) -> None:
            set_field(self, "dtype", self._check_operands(integer_only=integer_only, float_only=float_only))

        cls.__post_init__ = __post_init__
        return node(cls)

    return decorate


@_arith_node("+")
class Add(BinaryOp):
    """a + b (integers wrap around in their width)."""
    a: PrimExpr
    b: PrimExpr
    dtype: DataType = None  # type: ignore[assignment]


@_arith_node("-")
class Sub(BinaryOp):
    """a - b."""
    a: PrimExpr
    b: PrimExpr
    dtype: DataType = None  # type: ignore[assignment]


@_arith_node("*")
class Mul(BinaryOp):
    """a * b."""
    a: PrimExpr
    b: PrimExpr
    dtype: DataType = None  # type: ignore[assignment]


@_arith_node("/", float_only=True)
class Div(BinaryOp):
    """a / b on floats (IEEE division)."""
    a: PrimExpr
    b: PrimExpr
    dtype: DataType = None  # type: ignore[assignment]


@_arith_node("//", integer_only=True)
class FloorDiv(BinaryOp):
    """Integer division rounding toward negative infinity (Python's //)."""
    a: PrimExpr
    b: PrimExpr
    dtype: DataType = None  # type: ignore[assignment]


@_arith_node("%", integer_only=True)
class FloorMod(BinaryOp):
    """a - b * floordiv(a, b): the sign follows b (Python's %)."""
    a: PrimExpr
    b: PrimExpr
    dtype: DataType = None  # type: ignore[assignment]


@_arith_node("truncdiv", integer_only=True)
class TruncDiv(BinaryOp):
    """Integer division rounding toward zero (C's /)."""
    a: PrimExpr
    b: PrimExpr
    dtype: DataType = None  # type: ignore[assignment]


@_arith_node("truncmod", integer_only=True)
class TruncMod(BinaryOp):
    """a - b * truncdiv(a, b): the sign follows a (C's %)."""
    a: PrimExpr
    b: PrimExpr
    dtype: DataType = None  # type: ignore[assignment]


@_arith_node("min")
class Min(BinaryOp):
    """The smaller of a and b (for floats: NaN if either is NaN)."""
    a: PrimExpr
    b: PrimExpr
    dtype: DataType = None  # type: ignore[assignment]


@_arith_node("max")
class Max(BinaryOp):
    """The larger of a and b (for floats: NaN if either is NaN)."""
    a: PrimExpr
    b: PrimExpr
    dtype: DataType = None  # type: ignore[assignment]


# ----------------------------------------------------------------------------- comparisons, logic

class CompareOp(BinaryOp):
    """A comparison of two operands of one dtype; the result is bool."""

    __slots__ = ()

    def __bool__(self) -> bool:
        # Lets IR nodes sit in lists and dicts (`x in xs`): only identical operands, or equal
        # constants, are "equal" as Python values.
        if not isinstance(self, (EQ, NE)):
            return PrimExpr.__bool__(self)
        same = self.a is self.b or (
            isinstance(self.a, (IntImm, FloatImm)) and isinstance(self.b, (IntImm, FloatImm))
            and self.a.value == self.b.value and self.a.dtype == self.b.dtype
        )
        return same if isinstance(self, EQ) else not same


def _compare_node(symbol: str):
    def decorate(cls):
        cls.symbol = symbol

        def __post_init__(self) -> None:
            operand_type = self._check_operands()
            set_field(self, "dtype", bool_.with_lanes(operand_type.lanes))

        cls.__post_init__ = __post_init__
        return node(cls)

    return decorate


@_compare_node("==")
class EQ(CompareOp):
    """a == b."""
    a: PrimExpr
    b: PrimExpr
    dtype: DataType = None  # type: ignore[assignment]


@_compare_node("!=")
class NE(CompareOp):
    """a != b."""
    a: PrimExpr
    b: PrimExpr
    dtype: DataType = None  # type: ignore[assignment]


@_compare_node("<")
class LT(CompareOp):
    """a < b."""
    a: PrimExpr
    b: PrimExpr
    dtype: DataType = None  # type: ignore[assignment]


@_compare_node("<=")
class LE(CompareOp):
    """a <= b."""
    a: PrimExpr
    b: PrimExpr
    dtype: DataType = None  # type: ignore[assignment]


@_compare_node(">")
class GT(CompareOp):
    """a > b."""
    a: PrimExpr
    b: PrimExpr
    dtype: DataType = None  # type: ignore[assignment]


@_compare_node(">=")
class GE(CompareOp):
    """a >= b."""
    a: PrimExpr
    b: PrimExpr
    dtype: DataType = None  # type: ignore[assignment]


def _logic_post_init(self) -> None:
    set_field(self, "dtype", self._check_operands())
    if not self.dtype.element.is_bool:
        raise TypeError(f"{type(self).__name__} needs bool operands, got {self.dtype}")


@node
class And(BinaryOp):
    """Logical and of two bools (both sides are evaluated)."""
    a: PrimExpr
    b: PrimExpr
    dtype: DataType = None  # type: ignore[assignment]
    symbol = "and"
    __post_init__ = _logic_post_init


@node
class Or(BinaryOp):
    """Logical or of two bools (both sides are evaluated)."""
    a: PrimExpr
    b: PrimExpr
    dtype: DataType = None  # type: ignore[assignment]
    symbol = "or"
    __post_init__ = _logic_post_init


@node
class Not(PrimExpr):
    """Logical negation of a bool."""

    a: PrimExpr
    dtype: DataType = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if not isinstance(self.a, PrimExpr) or not self.a.dtype.element.is_bool:
            raise TypeError(f"Not needs a bool operand, got {self.a!r}")
        set_field(self, "dtype", self.a.dtype)


# ----------------------------------------------------------------------------- other expressions

@node
class Select(PrimExpr):
    """condition ? true_value : false_value, evaluating both values (use if_then_else for lazy)."""

    condition: PrimExpr
    true_value: PrimExpr
    false_value: PrimExpr
    dtype: DataType = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if not self.condition.dtype.element.is_bool:
            raise TypeError(f"Select condition must be bool, got {self.condition.dtype}")
        if self.true_value.dtype != self.false_value.dtype:
            raise TypeError(
                f"Select branches have different dtypes {self.true_value.dtype} and {self.false_value.dtype}"
            )
        set_field(self, "dtype", self.true_value.dtype)


@node
class Cast(PrimExpr):
    """Conversion of value to dtype with C semantics made exact in spec/ir.md."""

    dtype: DataType
    value: PrimExpr

    def __post_init__(self) -> None:
        set_field(self, "dtype", to_dtype(self.dtype))
        if not isinstance(self.value, PrimExpr):
            raise TypeError(f"Cast value must be a PrimExpr, got {self.value!r}")
        if self.dtype.lanes != self.value.dtype.lanes:
            raise TypeError(f"Cast from {self.value.dtype} to {self.dtype} changes the lane count")


@node
class BufferLoad(PrimExpr):
    """The element of buffer at indices (one index per dimension)."""

    buffer: "Buffer"
    indices: tuple[PrimExpr, ...]
    dtype: DataType = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        indices = tuple(convert(i) for i in self.indices)
        set_field(self, "indices", indices)
        if len(indices) != len(self.buffer.shape):
            raise ValueError(
                f"load from {self.buffer.name} has {len(indices)} indices for a {len(self.buffer.shape)}-d buffer"
            )
        for index in indices:
            if not index.dtype.element.is_integer:
                raise TypeError(f"index of {self.buffer.name} must be an integer, got {index.dtype}")
        lanes = max((i.dtype.lanes for i in indices), default=1)
        set_field(self, "dtype", self.buffer.dtype.with_lanes(lanes))


@node
class Ramp(PrimExpr):
    """The vector base, base + stride, ..., base + (lanes - 1) * stride."""

    base: PrimExpr
    stride: PrimExpr
    lanes: int
    dtype: DataType = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        set_field(self, "base", convert(self.base))
        set_field(self, "stride", convert(self.stride))
        if not isinstance(self.lanes, int) or self.lanes < 1:
            raise ValueError(f"Ramp lanes must be a positive int, got {self.lanes!r}")
        set_field(self, "dtype", self.base.dtype.with_lanes(self.lanes))


@node
class Broadcast(PrimExpr):
    """value repeated in every lane."""

    value: PrimExpr
    lanes: int
    dtype: DataType = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        set_field(self, "value", convert(self.value))
        if not isinstance(self.lanes, int) or self.lanes < 1:
            raise ValueError(f"Broadcast lanes must be a positive int, got {self.lanes!r}")
        set_field(self, "dtype", self.value.dtype.with_lanes(self.lanes))


@node
class Let(PrimExpr):
    """body with var bound to value."""

    var: Var
    value: PrimExpr
    body: PrimExpr
    dtype: DataType = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.var.dtype != self.value.dtype:
            raise TypeError(f"let {self.var.name}: value dtype {self.value.dtype} != var dtype {self.var.dtype}")
        set_field(self, "dtype", self.body.dtype)


@node
class Call(PrimExpr):
    """An intrinsic call by name (`exp`, `if_then_else`, `assume`, ...), see refcomp.ast.intrinsics."""

    op: str
    args: tuple[PrimExpr, ...]
    dtype: DataType

    def __post_init__(self) -> None:
        set_field(self, "dtype", to_dtype(self.dtype))
        set_field(self, "args", tuple(convert(a) for a in self.args))
        if not isinstance(self.op, str) or not self.op:
            raise TypeError(f"Call op must be a non-empty str, got {self.op!r}")


@node
class Range(Node):
    """The half-open integer interval [min, min + extent)."""

    min: PrimExpr
    extent: PrimExpr

    def __post_init__(self) -> None:
        set_field(self, "min", convert(self.min))
        set_field(self, "extent", convert(self.extent))
        for part in (self.min, self.extent):
            if not part.dtype.is_integer:
                raise TypeError(f"Range bounds must be integers, got {part.dtype}")

    @staticmethod
    def from_extent(extent: "PrimExpr | int") -> "Range":
        extent = convert(extent)
        return Range(IntImm(0, extent.dtype), extent)


# ----------------------------------------------------------------------------- construction helpers

def const(value: int | float | bool, dtype: "DataType | str | None" = None) -> PrimExpr:
    """A constant of the given dtype (default: int32 for ints, float32 for floats, bool for bools)."""
    if dtype is None:
        if isinstance(value, bool):
            return IntImm(int(value), bool_)
        if isinstance(value, int):
            return IntImm(value, int32 if -(2**31) <= value < 2**31 else int64)
        return FloatImm(float(value), float32)
    dtype = to_dtype(dtype)
    if dtype.is_float:
        return FloatImm(float(value), dtype)
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise ValueError(f"{value!r} is not an integer constant of {dtype}")
        value = int(value)
    return IntImm(int(value), dtype)


def convert(value: Any) -> PrimExpr:
    """Turn a Python number (or a PrimExpr) into a PrimExpr."""
    if isinstance(value, PrimExpr):
        return value
    if isinstance(value, (bool, int, float)):
        return const(value)
    import numpy as np

    if isinstance(value, np.generic):
        return const(value.item(), str(value.dtype))
    if hasattr(value, "as_expr"):  # te tensors' scalar views, reduce axes
        return value.as_expr()
    raise TypeError(f"cannot convert {value!r} ({type(value).__name__}) to an expression")


def _as_bool(value: PrimExpr) -> PrimExpr:
    if not value.dtype.element.is_bool:
        raise TypeError(f"expected a bool expression, got {value.dtype}")
    return value


def _promote(a: Any, b: Any) -> tuple[PrimExpr, PrimExpr]:
    """Bring two operands to one dtype: constants adopt the other side's type; ints widen; int+float -> float."""
    # Objects that stand for an expression (te reduce axes) take part as that expression.
    a = a.as_expr() if hasattr(a, "as_expr") else a
    b = b.as_expr() if hasattr(b, "as_expr") else b
    a_is_py = not isinstance(a, PrimExpr)
    b_is_py = not isinstance(b, PrimExpr)
    if a_is_py and not b_is_py:
        a = _constant_like(a, b.dtype)
    elif b_is_py and not a_is_py:
        b = _constant_like(b, a.dtype)
    a, b = convert(a), convert(b)
    if a.dtype == b.dtype:
        return a, b
    ta, tb = a.dtype, b.dtype
    if ta.lanes != tb.lanes:
        if ta.lanes == 1:
            a = Broadcast(a, tb.lanes)
        elif tb.lanes == 1:
            b = Broadcast(b, ta.lanes)
        ta, tb = a.dtype, b.dtype
        if ta == tb:
            return a, b
    target = _wider(ta.element, tb.element).with_lanes(max(ta.lanes, tb.lanes))
    return a.astype(target), b.astype(target)


def _wider(ta: DataType, tb: DataType) -> DataType:
    if ta.is_float != tb.is_float:
        return ta if ta.is_float else tb
    if ta.is_bool:
        return tb
    if tb.is_bool:
        return ta
    if ta.bits != tb.bits:
        return ta if ta.bits > tb.bits else tb
    if ta.is_float and tb.is_float:  # float16 vs bfloat16: neither holds the other
        return float32
    return ta if ta.is_int else tb


def _constant_like(value: Any, target: DataType) -> PrimExpr:
    element = target.element
    if isinstance(value, float) and not element.is_float:
        return const(value)  # an int expression with a float constant promotes to float
    if element.is_bool and not isinstance(value, bool):
        return const(value)
    return const(value, element) if target.lanes == 1 else Broadcast(const(value, element), target.lanes)


def _arith(cls, a: Any, b: Any) -> PrimExpr:
    a, b = _promote(a, b)
    return cls(a, b)


def _compare(cls, a: Any, b: Any) -> PrimExpr:
    a, b = _promote(a, b)
    return cls(a, b)


def floordiv(a: Any, b: Any) -> PrimExpr:
    return _arith(FloorDiv, a, b)


def floormod(a: Any, b: Any) -> PrimExpr:
    return _arith(FloorMod, a, b)


def truncdiv(a: Any, b: Any) -> PrimExpr:
    return _arith(TruncDiv, a, b)


def truncmod(a: Any, b: Any) -> PrimExpr:
    return _arith(TruncMod, a, b)


def min_(a: Any, b: Any) -> PrimExpr:
    return _arith(Min, a, b)


def max_(a: Any, b: Any) -> PrimExpr:
    return _arith(Max, a, b)


def select(condition: Any, true_value: Any, false_value: Any) -> PrimExpr:
    true_value, false_value = _promote(true_value, false_value)
    return Select(_as_bool(convert(condition)), true_value, false_value)


def all_(*conditions: Any) -> PrimExpr:
    """The conjunction of conditions (True for none)."""
    result: PrimExpr | None = None
    for condition in conditions:
        condition = _as_bool(convert(condition))
        result = condition if result is None else And(result, condition)
    return result if result is not None else const(True)


def any_(*conditions: Any) -> PrimExpr:
    """The disjunction of conditions (False for none)."""
    result: PrimExpr | None = None
    for condition in conditions:
        condition = _as_bool(convert(condition))
        result = condition if result is None else Or(result, condition)
    return result if result is not None else const(False)


def as_int(value: Any) -> int | None:
    """The Python int of a constant expression, else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, IntImm):
        return value.value
    return None


