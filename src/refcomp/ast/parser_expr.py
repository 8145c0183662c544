"""Reading expressions, regions and literal values of the script format from Python `ast` nodes.

Nothing is ever evaluated by Python: each `ast` node is interpreted here, and only the constructs
of the script format are accepted.  Python constants stay Python values until they meet an IR
operand, whose dtype they then take (`i + 1` with an int64 `i` gives an int64 `1`); alone, ints
are int32 (int64 when too large) and floats float32, as in TVMScript.
"""
from __future__ import annotations

import ast
from types import MappingProxyType
from typing import Any, Callable

from . import expr as E
from .buffer import Buffer, BufferRegion
from .dtype import DataType, dtype as to_dtype
from .intrinsics import INTRINSICS
from .script_common import SIMPLE_INTRINSICS, default_call_dtype, extent_of

_BINARY = {ast.Add: E.Add, ast.Sub: E.Sub, ast.Mult: E.Mul, ast.Div: E.Div, ast.FloorDiv: E.FloorDiv,
           ast.Mod: E.FloorMod}
_COMPARE = {ast.Eq: E.EQ, ast.NotEq: E.NE, ast.Lt: E.LT, ast.LtE: E.LE, ast.Gt: E.GT, ast.GtE: E.GE}
_BINARY_FUNCTIONS = {"min": E.Min, "max": E.Max, "truncdiv": E.TruncDiv, "truncmod": E.TruncMod,
                     "floordiv": E.FloorDiv, "floormod": E.FloorMod}


class Scope:
    """Names visible at one point of the text; inner scopes see outer names and may shadow them."""

    def __init__(self, parent: "Scope | None" = None) -> None:
        self.parent = parent
        self.names: dict[str, Any] = {}

    def lookup(self, name: str) -> Any:
        scope: Scope | None = self
        while scope is not None:
            if name in scope.names:
                return scope.names[name]
            scope = scope.parent
        return None

    def define(self, name: str, value: Any) -> None:
        self.names[name] = value


def as_dtype(text: str) -> DataType | None:
    """The dtype spelled `text` (`float32`, `int64`, `float32x4`, `handle`), else None."""
    try:
        return to_dtype(text)
    except ValueError:
        return None


def to_expr(value: Any, like: DataType | None = None) -> E.PrimExpr:
    """A PrimExpr for a parsed value; Python numbers take dtype `like` when given."""
    if isinstance(value, E.PrimExpr):
        return value
    if isinstance(value, str):
        return E.StringImm(value)
    if isinstance(value, (bool, int, float)):
        if like is not None and not isinstance(value, bool) and (like.is_float or isinstance(value, int)):
            return E.const(value, like.element) if like.lanes == 1 else E.Broadcast(E.const(value, like.element), like.lanes)
        return E.const(value)
    raise TypeError(f"expected an expression, got {_describe(value)}")


def _describe(value: Any) -> str:
    if isinstance(value, Buffer):
        return f"the buffer {value.name}"
    return type(value).__name__


class ExprReader:
    """Interprets expression syntax; `fail(node, message)` must raise a ParseError."""

    def __init__(self, fail: Callable[[ast.AST, str], Exception], tir_names: set[str]) -> None:
        self.fail = fail
        self.tir_names = tir_names  # names the text uses for the tir namespace (usually just "T")
        self.scope = Scope()

    # ------------------------------------------------------------------ helpers
    def dotted(self, node: ast.AST) -> str | None:
        """`T.axis.remap` for that attribute chain (tir aliases normalised to `T`), else None."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        head = "T" if node.id in self.tir_names else node.id
        return ".".join([head] + parts[::-1])

    def expr(self, node: ast.AST, like: DataType | None = None) -> E.PrimExpr:
        value = self.value(node)
        try:
            return to_expr(value, like)
        except (TypeError, ValueError) as exc:
            raise self.fail(node, str(exc)) from None

    def int_value(self, node: ast.AST, what: str) -> int:
        value = self.value(node)
        if isinstance(value, E.IntImm):
            value = value.value
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.fail(node, f"{what} must be an integer constant")
        return value

    def string(self, node: ast.AST, what: str) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        raise self.fail(node, f"{what} must be a string literal")

    def dtype_arg(self, node: ast.AST) -> DataType:
        text = self.string(node, "dtype")
        found = as_dtype(text)
        if found is None:
            raise self.fail(node, f"unknown dtype {text!r}")
        return found

    # ------------------------------------------------------------------ values
    def value(self, node: ast.AST) -> Any:
        """The IR value (PrimExpr, Buffer) or Python constant an expression node stands for."""
        method = getattr(self, "value_" + type(node).__name__, None)
        if method is None:
            raise self.fail(node, f"{type(node).__name__} syntax is not part of the script format")
        try:
            return method(node)
        except (TypeError, ValueError) as exc:
            if getattr(exc, "kind", None) == "parse":
                raise
            raise self.fail(node, str(exc)) from None

    def value_Constant(self, node: ast.Constant) -> Any:
        if node.value is None or isinstance(node.value, (bytes, complex)) or node.value is Ellipsis:
            raise self.fail(node, f"the constant {node.value!r} has no meaning in the script format")
        return node.value

    def value_Name(self, node: ast.Name) -> Any:
        found = self.scope.lookup(node.id)
        if found is None:
            raise self.fail(node, f"undefined name {node.id!r}")
        return found

    def value_Tuple(self, node: ast.Tuple) -> tuple:
        return tuple(self.value(item) for item in node.elts)

    value_List = value_Tuple

    def value_BinOp(self, node: ast.BinOp) -> E.PrimExpr:
        cls = _BINARY.get(type(node.op))
        if cls is None:
            raise self.fail(node, f"the operator {type(node.op).__name__} is not part of the script format")
        a, b = self.value(node.left), self.value(node.right)
        if cls is E.Div and _is_integer(a) and _is_integer(b):
            raise self.fail(node, "`/` is only defined on floats; use // (floor) or T.truncdiv for integers")
        return binary(cls, a, b)

    def value_UnaryOp(self, node: ast.UnaryOp) -> Any:
        operand = self.value(node.operand)
        if isinstance(node.op, ast.USub):
            if isinstance(operand, (int, float)) and not isinstance(operand, bool):
                return -operand
            return -to_expr(operand)
        if isinstance(node.op, ast.UAdd):
            return operand
        if isinstance(node.op, ast.Not):
            return E.Not(to_expr(operand))
        raise self.fail(node, "the operator ~ is not part of the script format")

    def value_BoolOp(self, node: ast.BoolOp) -> E.PrimExpr:
        cls = E.And if isinstance(node.op, ast.And) else E.Or
        values = [to_expr(self.value(v)) for v in node.values]
        result = values[0]
        for item in values[1:]:
            result = cls(result, item)
        return result

    def value_Compare(self, node: ast.Compare) -> E.PrimExpr:
        left = self.value(node.left)
        result = None
        for op, right_node in zip(node.ops, node.comparators):
            cls = _COMPARE.get(type(op))
            if cls is None:
                raise self.fail(node, f"the comparison {type(op).__name__} is not part of the script format")
            right = self.value(right_node)
            term = binary(cls, left, right)
            result = term if result is None else E.And(result, term)
            left = right
        return result

    def value_IfExp(self, node: ast.IfExp) -> E.PrimExpr:
        return E.select(self.expr(node.test), self.value(node.body), self.value(node.orelse))

    def value_Subscript(self, node: ast.Subscript) -> E.PrimExpr:
        buffer = self.value(node.value)
        if not isinstance(buffer, Buffer):
            raise self.fail(node.value, f"only buffers can be indexed, not {_describe(buffer)}")
        items = _subscript_items(node)
        if any(isinstance(item, ast.Slice) for item in items):
            raise self.fail(node, "a slice is only allowed in a region (T.reads, T.writes, T.match_buffer)")
        indices = tuple(self.expr(item) for item in items)
        if len(indices) != buffer.ndim:
            raise self.fail(node, f"{buffer.name} has {buffer.ndim} dimensions, indexed with {len(indices)}")
        return E.BufferLoad(buffer, indices)

    def region(self, node: ast.AST) -> BufferRegion:
        """`A[i, 0:16]` (slices are begin:end) or a bare buffer meaning all of it."""
        if not isinstance(node, ast.Subscript):
            value = self.value(node)
            if isinstance(value, Buffer):
                return value.full_region()
            raise self.fail(node, f"expected a buffer region like A[i, 0:16], got {_describe(value)}")
        buffer = self.value(node.value)
        if not isinstance(buffer, Buffer):
            raise self.fail(node.value, f"only buffers have regions, not {_describe(buffer)}")
        items = _subscript_items(node)
        if len(items) != buffer.ndim:
            raise self.fail(node, f"{buffer.name} has {buffer.ndim} dimensions, the region gives {len(items)}")
        ranges = []
        for item, dim in zip(items, buffer.shape):
            if isinstance(item, ast.Slice):
                if item.step is not None:
                    raise self.fail(item, "a region slice has no step")
                begin = self.value(item.lower) if item.lower is not None else 0
                end = self.value(item.upper) if item.upper is not None else dim
                begin, end = promote_pair(begin, end)
                ranges.append(E.Range(begin, extent_of(begin, end)))
            else:
                point = self.expr(item)
                ranges.append(E.Range(point, E.IntImm(1, point.dtype)))
        return BufferRegion(buffer, tuple(ranges))

    def literal(self, node: ast.AST) -> Any:
        """An attribute value: Python literals stay Python values, anything else is an expression."""
        if isinstance(node, ast.Constant):
            return self.value_Constant(node)
        if isinstance(node, ast.Dict):
            if any(k is None for k in node.keys):
                raise self.fail(node, "** is not allowed in an attribute dict")
            # frozen, as IR attribute values are (nested mappings included)
            return MappingProxyType({self.literal(k): self.literal(v) for k, v in zip(node.keys, node.values)})
        if isinstance(node, ast.Tuple):
            return tuple(self.literal(v) for v in node.elts)
        if isinstance(node, ast.List):
            return [self.literal(v) for v in node.elts]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
            return self.value(node)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "float"
                and len(node.args) == 1 and isinstance(node.args[0], ast.Constant)):
            return float(node.args[0].value)
        return self.value(node)

    # ------------------------------------------------------------------ calls
    def value_Call(self, node: ast.Call) -> Any:
        name = self.dotted(node.func)
        if name is None or not name.startswith("T."):
            raise self.fail(node.func, f"unknown function {ast.unparse(node.func)}; only T.<...> calls are allowed")
        short = name[2:]
        handler = getattr(self, "call_" + short, None)
        if handler is not None:
            return handler(node)
        if short in _BINARY_FUNCTIONS:
            a, b = self.positional(node, 2, name)
            return binary(_BINARY_FUNCTIONS[short], self.value(a), self.value(b))
        dtype = as_dtype(short)
        if dtype is not None:
            return self.typed_constant(node, dtype, name)
        if short in SIMPLE_INTRINSICS or short in INTRINSICS:
            return self.intrinsic(node, short)
        raise self.fail(node.func, f"unknown function {name}")

    def positional(self, node: ast.Call, count: int, name: str, optional: int = 0) -> list[ast.AST]:
        if node.keywords:
            raise self.fail(node, f"{name} takes no keyword arguments")
        if not count <= len(node.args) <= count + optional:
            expected = f"{count}" if not optional else f"{count} to {count + optional}"
            raise self.fail(node, f"{name} takes {expected} arguments, got {len(node.args)}")
        return list(node.args)

    def typed_constant(self, node: ast.Call, dtype: DataType, name: str) -> E.PrimExpr:
        if not node.args:
            raise self.fail(node, f"{name}() declares a variable: write `n = {name}()` on its own line")
        (arg,) = self.positional(node, 1, name)
        value = self.value(arg)
        if isinstance(value, str) and dtype.is_float:
            try:
                value = float(value)
            except ValueError:
                raise self.fail(arg, f"{value!r} is not a float") from None
        if isinstance(value, (bool, int, float)):
            return E.const(value, dtype) if dtype.lanes == 1 else E.Broadcast(E.const(value, dtype.element), dtype.lanes)
        return to_expr(value).astype(dtype)

    def intrinsic(self, node: ast.Call, op: str) -> E.PrimExpr:
        args = tuple(self.expr(a) for a in self.positional(node, len(node.args), f"T.{op}"))
        info = INTRINSICS.get(op)
        if info is not None and info.arity >= 0 and info.arity != len(args):
            raise self.fail(node, f"T.{op} takes {info.arity} argument{'s' if info.arity != 1 else ''}, got {len(args)}")
        if op == "if_then_else":
            a, b = promote_pair(args[1], args[2])
            args = (args[0], a, b)
        dtype = default_call_dtype(op, args)
        if dtype is None:
            raise self.fail(node, f"T.{op} needs an explicit dtype: T.call_intrin(dtype, {op!r}, ...)")
        return E.Call(op, args, dtype)

    def call_Select(self, node: ast.Call) -> E.PrimExpr:
        c, a, b = self.positional(node, 3, "T.Select")
        return E.select(self.expr(c), self.value(a), self.value(b))

    call_select = call_Select

    def call_Cast(self, node: ast.Call) -> E.PrimExpr:
        dtype, value = self.positional(node, 2, "T.Cast")
        return E.Cast(self.dtype_arg(dtype), self.expr(value))

    def call_cast(self, node: ast.Call) -> E.PrimExpr:
        value, dtype = self.positional(node, 2, "T.cast")
        return E.Cast(self.dtype_arg(dtype), self.expr(value))

    def call_Ramp(self, node: ast.Call) -> E.PrimExpr:
        base, stride, lanes = self.positional(node, 3, "T.Ramp")
        base_value, stride_value = promote_pair(self.value(base), self.value(stride))
        return E.Ramp(base_value, stride_value, self.int_value(lanes, "lanes"))

    def call_Broadcast(self, node: ast.Call) -> E.PrimExpr:
        value, lanes = self.positional(node, 2, "T.Broadcast")
        return E.Broadcast(self.expr(value), self.int_value(lanes, "lanes"))

    def call_Let(self, node: ast.Call) -> E.PrimExpr:
        binding, body = self.positional(node, 2, "T.Let")
        if not isinstance(binding, ast.NamedExpr):
            raise self.fail(binding, "T.Let takes `name := value, body`")
        value = self.expr(binding.value)
        var = E.Var(binding.target.id, value.dtype)
        outer = self.scope
        self.scope = Scope(outer)
        self.scope.define(binding.target.id, var)
        try:
            return E.Let(var, value, self.expr(body))
        finally:
            self.scope = outer

    def call_call_intrin(self, node: ast.Call) -> E.PrimExpr:
        if len(node.args) < 2 or node.keywords:
            raise self.fail(node, "T.call_intrin takes (dtype, op, *args)")
        dtype = self.dtype_arg(node.args[0])
        op = self.string(node.args[1], "the intrinsic name")
        return E.Call(op, tuple(self.expr(a) for a in node.args[2:]), dtype)

    def call_call_extern(self, node: ast.Call) -> E.PrimExpr:
        if len(node.args) < 2 or node.keywords:
            raise self.fail(node, "T.call_extern takes (dtype, function_name, *args)")
        dtype = self.dtype_arg(node.args[0])
        return E.Call("call_extern", tuple(self.expr(a) for a in node.args[1:]), dtype)

    def call_reinterpret(self, node: ast.Call) -> E.PrimExpr:
        dtype, value = self.positional(node, 2, "T.reinterpret")
        return E.Call("reinterpret", (self.expr(value),), self.dtype_arg(dtype))

    def call_likely(self, node: ast.Call) -> E.PrimExpr:
        """TVM's branch-probability hint; it does not change the value, so it is dropped."""
        (arg,) = self.positional(node, 1, "T.likely")
        return self.expr(arg)

    def call_ceildiv(self, node: ast.Call) -> E.PrimExpr:
        a, b = self.positional(node, 2, "T.ceildiv")
        a_value, b_value = promote_pair(self.value(a), self.value(b))
        return E.FloorDiv(a_value + b_value - 1, b_value)

    def _limit(self, node: ast.Call, name: str, pick: Callable[[DataType], Any]) -> E.PrimExpr:
        (arg,) = self.positional(node, 1, name)
        dtype = self.dtype_arg(arg)
        return E.const(pick(dtype), dtype)

    def call_min_value(self, node: ast.Call) -> E.PrimExpr:
        return self._limit(node, "T.min_value", _lowest)

    def call_max_value(self, node: ast.Call) -> E.PrimExpr:
        return self._limit(node, "T.max_value", _highest)

    def call_infinity(self, node: ast.Call) -> E.PrimExpr:
        return self._limit(node, "T.infinity", lambda d: float("inf"))


def _lowest(dtype: DataType) -> Any:
    import numpy as np

    if dtype.is_float and dtype.name != "bfloat16":
        return float(np.finfo(dtype.numpy()).min)
    if dtype.name == "bfloat16":
        return -3.3895313892515355e38
    return dtype.min_value()


def _highest(dtype: DataType) -> Any:
    import numpy as np

    if dtype.is_float and dtype.name != "bfloat16":
        return float(np.finfo(dtype.numpy()).max)
    if dtype.name == "bfloat16":
        return 3.3895313892515355e38
    return dtype.max_value()


def _is_integer(value: Any) -> bool:
    if isinstance(value, E.PrimExpr):
        return value.dtype.element.is_integer
    return isinstance(value, int) and not isinstance(value, bool)


def _subscript_items(node: ast.Subscript) -> list[ast.AST]:
    index = node.slice
    if isinstance(index, ast.Tuple):
        return list(index.elts)
    return [index]


def promote_pair(a: Any, b: Any) -> tuple[E.PrimExpr, E.PrimExpr]:
    """Two operands brought to one dtype the way IR operators do (constants adopt the other side)."""
    if not isinstance(a, E.PrimExpr) and not isinstance(b, E.PrimExpr):
        a, b = E.convert(a), E.convert(b)
    return E._promote(a, b)


def binary(cls: type, a: Any, b: Any) -> E.PrimExpr:
    """cls(a, b) with Python constants typed as the other operand; no constant folding."""
    for operand in (a, b):
        if not isinstance(operand, (E.PrimExpr, bool, int, float)):
            raise TypeError(f"expected an expression operand, got {_describe(operand)}")
    a, b = promote_pair(a, b)
    return cls(a, b)
