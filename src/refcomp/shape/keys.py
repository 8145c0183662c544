"""Structural keys of expressions: hashable tuples equal exactly when two expressions are the same tree.

This is the one structural key of the project: the simplifier merges like terms with it, the prover
and the Z3 bridge recognise a query asked again with freshly built (but identical) expression
objects, and the loop passes group equal indices and conditions by it.

Variables and buffers stay themselves inside a key (wrapped in `VarRef`) and compare by identity, so
two loops both named `i` give different keys.  A call with side effects is equal only to itself:
two evaluations of it need not give the same value.  Float constants are keyed by their `repr`, so
`0.0` and `-0.0` differ and a NaN equals the same NaN.  A tuple of expressions has the tuple of
their keys.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..ast.buffer import Buffer
from ..ast.dtype import DataType
from ..ast.expr import (
    BinaryOp, Broadcast, BufferLoad, Call, Cast, FloatImm, IntImm, Let, Not, PrimExpr, Ramp, Select,
    StringImm, Var,
)
from ..ast.intrinsics import is_pure_call
from ..ast.node import Node

# Keyed by the expression object itself (identity hash); the dict keeps the object alive, so an id
# is never reused while its entry exists.  Cleared wholesale when it grows large.
_CACHE: dict[PrimExpr, Any] = {}
_CACHE_LIMIT = 200_000


class VarRef:
    """A variable (or buffer, or opaque node) inside a key: equal only to a reference to the same object.

    (A Var itself cannot sit in a tuple that is compared, since `==` on expressions builds IR.)
    """

    __slots__ = ("var",)

    def __init__(self, var: Any) -> None:
        self.var = var

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VarRef) and other.var is self.var

    def __hash__(self) -> int:
        return id(self.var)

    def __repr__(self) -> str:
        return f"VarRef({getattr(self.var, 'name', type(self.var).__name__)})"


def expr_key(expr: Any) -> Any:
    """The structural key of an expression, or of a tuple of expressions (see module docstring)."""
    if type(expr) is tuple:
        return tuple(expr_key(item) for item in expr)
    cached = _CACHE.get(expr)
    if cached is not None:
        return cached
    key = _build(expr)
    if len(_CACHE) >= _CACHE_LIMIT:
        _CACHE.clear()
    _CACHE[expr] = key
    return key


def same_expr(a: PrimExpr, b: PrimExpr) -> bool:
    """True when a and b are the same expression tree (variables and buffers compared by identity)."""
    return a is b or expr_key(a) == expr_key(b)


def _build(expr: PrimExpr) -> Any:
    if isinstance(expr, Var):
        return VarRef(expr)
    kind = type(expr)
    if kind is IntImm:
        return ("int", expr.value, expr.dtype)
    if kind is FloatImm:
        return ("float", repr(expr.value), expr.dtype)
    if kind is StringImm:
        return ("str", expr.value)
    if isinstance(expr, BinaryOp):
        return (kind.__name__, expr_key(expr.a), expr_key(expr.b))
    if kind is Not:
        return ("Not", expr_key(expr.a))
    if kind is Select:
        return ("Select", expr_key(expr.condition), expr_key(expr.true_value), expr_key(expr.false_value))
    if kind is Cast:
        return ("Cast", expr.dtype, expr_key(expr.value))
    if kind is BufferLoad:
        return ("Load", VarRef(expr.buffer), tuple(expr_key(i) for i in expr.indices))
    if kind is Call:
        if not is_pure_call(expr.op):
            return ("opaque", VarRef(expr))
        return ("Call", expr.op, expr.dtype, tuple(_field_key(a) for a in expr.args))
    if kind is Ramp:
        return ("Ramp", expr_key(expr.base), expr_key(expr.stride), expr.lanes)
    if kind is Broadcast:
        return ("Broadcast", expr_key(expr.value), expr.lanes)
    if kind is Let:
        return ("Let", VarRef(expr.var), expr_key(expr.value), expr_key(expr.body))
    if isinstance(expr, Node):  # any other node kind: its type and every field
        return (kind.__name__,) + tuple(_field_key(getattr(expr, f.name)) for f in dataclasses.fields(expr))
    return ("opaque", VarRef(expr))


def _field_key(value: Any) -> Any:
    if isinstance(value, PrimExpr):
        return expr_key(value)
    if isinstance(value, (Buffer, Node)):
        return VarRef(value)
    if isinstance(value, tuple):
        return tuple(_field_key(item) for item in value)
    if isinstance(value, (int, str, float, bool, DataType)) or value is None:
        return value
    return VarRef(value)
