"""Printing of expressions, regions and attribute values in the script format (TVMScript style)."""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping

from . import expr as E
from .buffer import Buffer, BufferRegion
from .node import Node
from .script_common import Namer, SIMPLE_INTRINSICS, default_call_dtype

OPEN_MARK, CLOSE_MARK = "\x01", "\x02"  # wrap the text of the marked node; removed at the end

# Python operator precedence, higher binds tighter.
PREC_OR, PREC_AND, PREC_NOT, PREC_CMP, PREC_ADD, PREC_MUL, PREC_UNARY, PREC_ATOM = 1, 2, 3, 4, 9, 10, 11, 12

_INFIX = {
    E.Add: ("+", PREC_ADD), E.Sub: ("-", PREC_ADD), E.Mul: ("*", PREC_MUL), E.Div: ("/", PREC_MUL),
    E.FloorDiv: ("//", PREC_MUL), E.FloorMod: ("%", PREC_MUL),
    E.EQ: ("==", PREC_CMP), E.NE: ("!=", PREC_CMP), E.LT: ("<", PREC_CMP), E.LE: ("<=", PREC_CMP),
    E.GT: (">", PREC_CMP), E.GE: (">=", PREC_CMP), E.And: ("and", PREC_AND), E.Or: ("or", PREC_OR),
}
_FUNCTION_FORM = {E.Min: "T.min", E.Max: "T.max", E.TruncDiv: "T.truncdiv", E.TruncMod: "T.truncmod"}


def quote(text: str) -> str:
    """A double-quoted, ASCII-only Python string literal for text (it reads back to exactly text)."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 32 <= code < 127:
            out.append(ch)
        elif code < 256:
            out.append(f"\\x{code:02x}")
        elif code < 65536:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return '"' + "".join(out) + '"'



def float_literal(value: float) -> str:
    """A Python literal text for a float, quoting the non-finite ones (`"inf"`, `"nan"`)."""
    if math.isnan(value):
        return '"nan"'
    if math.isinf(value):
        return '"inf"' if value > 0 else '"-inf"'
    return repr(value)


class ExprPrinter:
    """Turns expressions into Python-syntax text; names come from a shared Namer."""

    def __init__(self, namer: Namer, mark: Any = None) -> None:
        self.namer = namer
        self.mark = mark
        self.define_var: Callable[[E.Var], str] = namer.name

    def expr(self, node: Any, prec: int = 0) -> str:
        """The text of node, parenthesised if it binds looser than `prec` requires."""
        text, own = self._expr(node)
        if own < prec:
            text = f"({text})"
        if node is self.mark and self.mark is not None:
            text = OPEN_MARK + text + CLOSE_MARK
        return text

    def _expr(self, node: Any) -> tuple[str, int]:
        kind = type(node)
        if kind in _INFIX:
            symbol, prec = _INFIX[kind]
            if prec == PREC_CMP:  # never chain comparisons: a < b < c means something else
                return f"{self.expr(node.a, prec + 1)} {symbol} {self.expr(node.b, prec + 1)}", prec
            return f"{self.expr(node.a, prec)} {symbol} {self.expr(node.b, prec + 1)}", prec
        if kind in _FUNCTION_FORM:
            return f"{_FUNCTION_FORM[kind]}({self.expr(node.a)}, {self.expr(node.b)})", PREC_ATOM
        if isinstance(node, E.Var):
            return self.namer.name(node), PREC_ATOM
        if kind is E.IntImm:
            return self.int_literal(node)
        if kind is E.FloatImm:
            return f"T.{node.dtype}({float_literal(node.value)})", PREC_ATOM
        if kind is E.StringImm:
            return quote(node.value), PREC_ATOM
        if kind is E.Not:
            return f"not {self.expr(node.a, PREC_NOT)}", PREC_NOT
        if kind is E.Select:
            args = ", ".join(self.expr(x) for x in (node.condition, node.true_value, node.false_value))
            return f"T.Select({args})", PREC_ATOM
        if kind is E.Cast:
            return f'T.Cast("{node.dtype}", {self.expr(node.value)})', PREC_ATOM
        if kind is E.BufferLoad:
            return f"{self.buffer_name(node.buffer)}[{self.indices(node.indices)}]", PREC_ATOM
        if kind is E.Ramp:
            return f"T.Ramp({self.expr(node.base)}, {self.expr(node.stride)}, {node.lanes})", PREC_ATOM
        if kind is E.Broadcast:
            return f"T.Broadcast({self.expr(node.value)}, {node.lanes})", PREC_ATOM
        if kind is E.Let:
            value = self.expr(node.value)
            name = self.define_var(node.var)
            return f"T.Let({name} := {value}, {self.expr(node.body)})", PREC_ATOM
        if kind is E.Call:
            return self.call(node), PREC_ATOM
        if kind is BufferRegion:
            return self.region(node), PREC_ATOM
        if kind is E.Range:
            return f"T.Range({self.expr(node.min)}, {self.end(node.min, node.extent)})", PREC_ATOM
        if isinstance(node, (int, float)) and not isinstance(node, bool):  # a field left unconverted
            return repr(node), (PREC_UNARY if node < 0 else PREC_ATOM)
        raise TypeError(f"the script printer cannot print a {type(node).__name__} as an expression")

    def int_literal(self, node: E.IntImm) -> tuple[str, int]:
        if node.dtype.name == "bool" and node.dtype.lanes == 1:
            return ("True" if node.value else "False"), PREC_ATOM
        if node.dtype.name == "int32" and node.dtype.lanes == 1:
            return str(node.value), (PREC_UNARY if node.value < 0 else PREC_ATOM)
        return f"T.{node.dtype}({node.value})", PREC_ATOM

    def call(self, node: E.Call) -> str:
        args = node.args
        if node.op in SIMPLE_INTRINSICS and default_call_dtype(node.op, args) == node.dtype:
            return f"T.{node.op}({', '.join(self.expr(a) for a in args)})"
        if node.op == "call_extern" and args and isinstance(args[0], E.StringImm):
            rest = "".join(", " + self.expr(a) for a in args)
            return f'T.call_extern("{node.dtype}"{rest})'
        if node.op == "reinterpret" and len(args) == 1:
            return f'T.reinterpret("{node.dtype}", {self.expr(args[0])})'
        rest = "".join(", " + self.expr(a) for a in args)
        return f'T.call_intrin("{node.dtype}", {quote(node.op)}{rest})'

    def indices(self, indices: tuple) -> str:
        if not indices:
            return "()"
        return ", ".join(self.expr(i) for i in indices)

    def buffer_name(self, buffer: Buffer) -> str:
        text = self.namer.name(buffer)
        return OPEN_MARK + text + CLOSE_MARK if buffer is self.mark else text

    def end(self, begin: E.PrimExpr, extent: E.PrimExpr) -> str:
        """Text of the exclusive end of [begin, begin + extent), inverted by script_common.extent_of."""
        if isinstance(begin, E.IntImm) and begin.value == 0:
            return self.expr(extent)
        if isinstance(begin, E.IntImm) and isinstance(extent, E.IntImm) and begin.dtype == extent.dtype:
            total = begin.value + extent.value
            if begin.dtype.min_value() <= total <= begin.dtype.max_value():
                return self.int_literal(E.IntImm(total, begin.dtype))[0]
        return f"{self.expr(begin, PREC_ADD)} + {self.expr(extent, PREC_ADD + 1)}"

    def begin_end(self, begin: E.PrimExpr, extent: E.PrimExpr) -> str:
        """`extent` when the range starts at a zero of its own dtype, else `begin, end`."""
        if _is_zero_like(begin, extent):
            return self.expr(extent)
        return f"{self.expr(begin)}, {self.end(begin, extent)}"

    def region(self, region: BufferRegion) -> str:
        parts = []
        for r in region.region:
            if isinstance(r.extent, E.IntImm) and r.extent.value == 1 and r.extent.dtype == r.min.dtype:
                part = self.expr(r.min)
            else:
                part = f"{self.expr(r.min)}:{self.end(r.min, r.extent)}"
            parts.append(OPEN_MARK + part + CLOSE_MARK if r is self.mark else part)
        text = f"{self.buffer_name(region.buffer)}[{', '.join(parts) if parts else '()'}]"
        return OPEN_MARK + text + CLOSE_MARK if region is self.mark else text

    def value(self, value: Any) -> str:
        """An attribute or annotation value: Python literals as such, IR expressions with explicit dtypes."""
        if isinstance(value, str):
            return quote(value)
        if value is None or isinstance(value, bool):
            return repr(value)
        if isinstance(value, int):
            return repr(value)
        if isinstance(value, float):
            return repr(value) if math.isfinite(value) else f"float({float_literal(value)})"
        if isinstance(value, tuple):
            inner = ", ".join(self.value(v) for v in value)
            return f"({inner},)" if len(value) == 1 else f"({inner})"
        if isinstance(value, list):
            return "[" + ", ".join(self.value(v) for v in value) + "]"
        if isinstance(value, Mapping):
            return "{" + ", ".join(f"{self.value(k)}: {self.value(v)}" for k, v in value.items()) + "}"
        if isinstance(value, E.IntImm):
            if value.dtype.name in ("int32", "bool") and value.dtype.lanes == 1:
                return f"T.{value.dtype}({value.value})"
            return self.expr(value)
        if isinstance(value, Buffer):
            return self.buffer_name(value)
        if isinstance(value, Node):
            return self.expr(value)
        raise TypeError(f"the script printer cannot print the attribute value {value!r}")


def _is_zero_like(begin: E.PrimExpr, extent: E.PrimExpr) -> bool:
    return isinstance(begin, E.IntImm) and begin.value == 0 and begin.dtype == extent.dtype
