"""Structural keys of expressions: hashable tuples equal exactly when two expressions are the same tree.

Variables (wrapped in VarRef) and buffers stay themselves inside a key and compare by identity, so
two loops both named `i` give different keys.  Keys let the simplifier merge like terms and let caches recognise
a query asked again with freshly built (but identical) expression objects.
"""
from __future__ import annotations

from typing import Any

from ..ast.expr import (
    Broadcast, BufferLoad, Call, Cast, FloatImm, IntImm, Let, Not, PrimExpr, Ramp, Select,
    StringImm, Var,
)

# Keyed by the expression object itself (identity hash); the dict keeps the object alive, so an id
# is never reused while its entry exists.  Cleared wholesale when it grows large.
_CACHE: dict[PrimExpr, Any] = {}
_CACHE_LIMIT = 200_000


class VarRef:
    """A variable inside a key: equal only to a reference to the very same variable.

    (A Var itself cannot sit in a tuple that is compared, since `==` on expressions builds IR.)
    """

    __slots__ = ("var",)

    def __init__(self, var: Var) -> None:
        self.var = var

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VarRef) and other.var is self.var

    def __hash__(self) -> int:
        return id(self.var)

    def __repr__(self) -> str:
        return f"VarRef({self.var.name})"


def expr_key(expr: PrimExpr) -> Any:
    """The structural key of expr (see module docstring)."""
    cached = _CACHE.get(expr)
    if cached is not None:
        return cached
    key = _build(expr)
    if len(_CACHE) >= _CACHE_LIMIT:
        _CACHE.clear()
    _CACHE[expr] = key
    return key


def _build(expr: PrimExpr) -> Any:
    if isinstance(expr, Var):
        return VarRef(expr)
    if isinstance(expr, IntImm):
        return ("int", expr.value, expr.dtype)
    if isinstance(expr, FloatImm):
        return ("float", expr.value, expr.dtype)
    if isinstance(expr, StringImm):
        return ("str", expr.value)
    if isinstance(expr, Not):
        return ("Not", expr_key(expr.a))
    if isinstance(expr, Select):
        return ("Select", expr_key(expr.condition), expr_key(expr.true_value), expr_key(expr.false_value))
    if isinstance(expr, Cast):
        return ("Cast", expr.dtype, expr_key(expr.value))
    if isinstance(expr, BufferLoad):
        return ("Load", expr.buffer, tuple(expr_key(i) for i in expr.indices))
    if isinstance(expr, Call):
        return ("Call", expr.op, expr.dtype, tuple(expr_key(a) for a in expr.args))
    if isinstance(expr, Ramp):
        return ("Ramp", expr_key(expr.base), expr_key(expr.stride), expr.lanes)
    if isinstance(expr, Broadcast):
        return ("Broadcast", expr_key(expr.value), expr.lanes)
    if isinstance(expr, Let):
        return ("Let", VarRef(expr.var), expr_key(expr.value), expr_key(expr.body))
    a = getattr(expr, "a", None)
    b = getattr(expr, "b", None)
    if a is not None and b is not None:
        return (type(expr).__name__, expr_key(a), expr_key(b))
    return ("opaque", VarRef(expr))  # an unknown node kind: only equal to itself
