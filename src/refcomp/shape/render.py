"""A compact infix rendering of expressions for shape diagnostics: `A[i*32 + j]`, `n % 4 == 0`.

The full IR printer lives in refcomp.ast.printer; messages about one index or condition read better
in the short form a user would write, and must not depend on the printer being able to print a
whole function.
"""
from __future__ import annotations

from ..ast.expr import (
    Add, And, BinaryOp, Broadcast, BufferLoad, Call, Cast, CompareOp, FloatImm, FloorDiv, FloorMod,
    IntImm, Let, Max, Min, Mul, Not, Or, PrimExpr, Ramp, Select, StringImm, Sub, TruncDiv, TruncMod,
    Var,
)

_PRECEDENCE = {Or: 1, And: 2, Not: 3, Add: 5, Sub: 5, Mul: 6, FloorDiv: 6, FloorMod: 6}
_COMPARE = 4
_ATOM = 10


def render(expr: PrimExpr) -> str:
    """expr as short infix text."""
    return _render(expr)[0]


def _render(expr: PrimExpr) -> tuple[str, int]:
    kind = type(expr)
    if isinstance(expr, Var):
        return expr.name, _ATOM
    if kind is IntImm:
        if expr.dtype.is_bool:
            return ("True" if expr.value else "False"), _ATOM
        return str(expr.value), (_ATOM if expr.value >= 0 else 5)
    if kind is FloatImm:
        return repr(expr.value), _ATOM
    if kind is StringImm:
        return repr(expr.value), _ATOM
    if kind is BufferLoad:
        return f"{expr.buffer.name}[{', '.join(render(i) for i in expr.indices)}]", _ATOM
    if kind in (Min, Max, TruncDiv, TruncMod):
        return f"{kind.__name__.lower()}({render(expr.a)}, {render(expr.b)})", _ATOM
    if isinstance(expr, CompareOp):
        return f"{_wrap(expr.a, _COMPARE + 1)} {expr.symbol} {_wrap(expr.b, _COMPARE + 1)}", _COMPARE
    if kind in _PRECEDENCE and isinstance(expr, BinaryOp):
        level = _PRECEDENCE[kind]
        symbol = {Add: " + ", Sub: " - ", Mul: "*", FloorDiv: " // ", FloorMod: " % ",
                  And: " and ", Or: " or "}[kind]
        # left-associative: the right operand needs parentheses at equal precedence
        return f"{_wrap(expr.a, level)}{symbol}{_wrap(expr.b, level + 1)}", level
    if kind is Not:
        return f"not {_wrap(expr.a, 3)}", 3
    if kind is Select:
        return f"select({render(expr.condition)}, {render(expr.true_value)}, {render(expr.false_value)})", _ATOM
    if kind is Cast:
        return f"{expr.dtype}({render(expr.value)})", _ATOM
    if kind is Call:
        return f"{expr.op}({', '.join(render(a) for a in expr.args)})", _ATOM
    if kind is Ramp:
        return f"ramp({render(expr.base)}, {render(expr.stride)}, {expr.lanes})", _ATOM
    if kind is Broadcast:
        return f"broadcast({render(expr.value)}, {expr.lanes})", _ATOM
    if kind is Let:
        return f"(let {expr.var.name} = {render(expr.value)} in {render(expr.body)})", _ATOM
    if isinstance(expr, BinaryOp):
        return f"{kind.__name__}({render(expr.a)}, {render(expr.b)})", _ATOM
    return f"<{kind.__name__}>", _ATOM


def _wrap(expr: PrimExpr, needed: int) -> str:
    text, level = _render(expr)
    return text if level >= needed else f"({text})"
