"""torch's symbolic sizes as refcomp size expressions.

torch.export records every dynamic dim as a sympy expression over symbols (`s0`, `s1`), and every
SymInt node's value as such an expression.  Each symbol becomes one int64 size var; the expression
becomes a PrimExpr (floor division and modulo keep their floor meaning).
"""
from __future__ import annotations

import math
import operator

import numpy as np

from ...ast import SizeVar
from ...ast import expr as tir
from ...ast.graph_struct_info import as_dim
from ...graph.shape_facts import const_value, simplify

SCALAR_FUNCTIONS = frozenset({
    operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod, operator.neg, operator.truediv,
    operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge, math.ceil, math.floor,
})


def ranges(range_constraints) -> tuple[dict, dict]:
    """({symbol name: lower bound}, {symbol name: upper bound}) from ep.range_constraints (finite ones)."""
    lower, upper = {}, {}
    for sym, vr in dict(range_constraints).items():
        name = str(sym)
        lo, hi = vr.lower, vr.upper
        if _finite(lo):
            lower[name] = int(lo)
        if _finite(hi):
            upper[name] = int(hi)
    return lower, upper


def dim_names(ep) -> dict[str, str]:
    """{symbol name: the name of the torch Dim it stands for} for the program's dynamic dims.

    torch.export names its symbols s0, s77...; the Dim names the user gave (`Dim("batch")`) are
    kept by the shape environment under the dim's source (`L['x'].size()[0]`).  A name that is not
    a valid identifier, or that two symbols share, is left out (the symbol keeps its own name).
    """
    shape_env = None
    for node in ep.graph.nodes:
        value = node.meta.get("val") if node.op == "placeholder" else None
        for d in getattr(value, "shape", ()):
            shape_env = getattr(getattr(d, "node", None), "shape_env", None) or shape_env
    if shape_env is None:
        return {}
    debug = dict(getattr(shape_env, "source_name_to_debug_name", {}) or {})
    found: dict[str, str] = {}
    for sym, sources in dict(getattr(shape_env, "var_to_sources", {}) or {}).items():
        for source in sources:
            key = getattr(source, "name", None)
            name = debug.get(key() if callable(key) else key)
            if name and name.isidentifier():
                found[str(sym)] = name
                break
    taken = [n for n in found.values()]
    return {sym: name for sym, name in found.items() if taken.count(name) == 1 and name not in found}


def _finite(v) -> bool:
    try:
        return bool(getattr(v, "is_finite", True)) and abs(int(v)) < 2 ** 62
    except (TypeError, ValueError, OverflowError):
        return False


def to_prim(expr, size_vars: dict, fail) -> tir.PrimExpr:
    """A sympy integer expression as an int64 PrimExpr; symbols become (shared) size vars."""
    import sympy

    def go(e):
        if isinstance(e, sympy.Integer) or (e.is_number and e.is_integer):
            return as_dim(int(e))
        if isinstance(e, sympy.Symbol):
            name = str(e)
            return size_vars.setdefault(name, SizeVar(name, "int64"))
        head = type(e).__name__
        args = [go(a) for a in e.args] if head not in ("Pow",) else None
        if isinstance(e, sympy.Add):
            return _fold(operator.add, args)
        if isinstance(e, sympy.Mul):
            return _fold(operator.mul, args)
        if head == "Pow":
            base, exp = e.args
            if exp.is_Integer and int(exp) >= 0:
                return _fold(operator.mul, [go(base)] * int(exp)) if int(exp) else as_dim(1)
        if head == "FloorDiv" and args:
            return tir.FloorDiv(args[0], args[1])
        if head in ("Mod", "PythonMod") and args:
            return tir.FloorMod(args[0], args[1])
        if head in ("Max",) and args:
            return _fold(tir.Max, args)
        if head in ("Min",) and args:
            return _fold(tir.Min, args)
        if head == "CleanDiv" and args:
            return tir.FloorDiv(args[0], args[1])
        fail(f"the size expression {e} ({head}) is not supported")

    return simplify(go(expr))


def _fold(fn, args):
    out = args[0]
    for a in args[1:]:
        out = fn(out, a)
    return out


def to_dim(value, size_vars: dict, fail):
    """An int, SymInt or PrimExpr as a shape dim: a Python int where literal, else an int64 PrimExpr."""
    import torch

    if isinstance(value, bool):
        fail(f"expected an integer size, got {value!r}")
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, torch.SymInt):
        expr = value.node.expr
        if expr.is_number:
            return int(expr)
        return to_dim(to_prim(expr, size_vars, fail), size_vars, fail)
    if isinstance(value, tir.PrimExpr):
        c = const_value(value)
        return c if c is not None else value
    fail(f"expected an integer size, got {value!r} ({type(value).__name__})")


def scalar_value(ctx, val):
    """The value of a node that computes a Python scalar: an int, float, bool or size expression."""
    import torch

    if isinstance(val, torch.SymInt):
        return ctx.dim(val)
    if isinstance(val, (torch.SymBool, torch.SymFloat)):
        expr = val.node.expr
        if expr.is_number:
            return bool(expr) if isinstance(val, torch.SymBool) else float(expr)
        ctx.fail(f"symbolic {type(val).__name__} {expr} is not supported")
    if isinstance(val, (bool, int, float)):
        return val
    ctx.fail(f"scalar value {val!r} is not supported")


def as_tensor(ctx, value):
    """A non-negative size expression as a 0-d int64 tensor: the sum of that many ones."""
    from ...graph import op

    dim = ctx.dim(value)
    if isinstance(dim, int):
        return ctx.scalar(dim, "int64")
    ones = ctx.emit(op.full((dim,), 1, "int64"))
    return ctx.emit(op.sum(ones, axis=None, keepdims=False))
