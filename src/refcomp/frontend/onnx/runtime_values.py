"""Operands known only at run time (axes, pads, k...) as symbolic values, the Relax way.

An operand that is a graph input, not a constant, is read when the program runs: its entries
become a shape value (`tensor_to_shape`) bound by `match_cast` to fresh int64 vars.  Sizes
derived from them (an output dim that depends on which axes are reduced) are expressions over
those vars, bound in turn to fresh size vars, so the kernels after them see plain size vars and
every relation the importer relies on is checked at run time (reshape's element count, a
matched shape value's literal entries).
"""
from __future__ import annotations

import itertools

import numpy as np

from ...ast import SizeVar
from ...ast import expr as tir
from ...ast.graph import Constant, ShapeExpr
from ...ast.graph_struct_info import ShapeStructInfo
from ...graph import op
from ...graph.shape_facts import const_value

_names = itertools.count()


def _fresh(stem: str) -> str:
    return f"{stem}_{next(_names)}"


def runtime_ints(ctx, value, what: str) -> list[tir.Var]:
    """The entries of integer tensor `value` (a scalar or a 1-d tensor of static length) as int64
    vars bound when the program runs."""
    return _bind(ctx, value, what, tir.Var)


def runtime_sizes(ctx, value, what: str) -> list[SizeVar]:
    """As runtime_ints, for entries that must be >= 0 (a negative one is an error at run time)."""
    return _bind(ctx, value, what, SizeVar)


def _bind(ctx, value, what: str, kind) -> list:
    if isinstance(value, Constant):  # known now: literal entries, nothing to read at run time
        return [tir.IntImm(int(v), "int64") for v in np.asarray(value.array).reshape(-1)]
    info = ctx.info(value)
    if info.dtype is None or not (info.dtype.is_integer or info.dtype.is_bool):
        ctx.fail(f"{what} must be an integer tensor, got {info.dtype}")
    if info.ndim == 0:
        value = ctx.emit(op.reshape(value, (1,)))
    elif info.ndim != 1:
        ctx.fail(f"{what} must be a scalar or a 1-d tensor, got {info}")
    length = const_value(ctx.info(value).shape[0])
    if length is None:
        ctx.fail(f"the length of {what} must be known when the model is imported")
    if str(info.dtype) != "int64":
        value = ctx.emit(op.astype(value, "int64"))
    variables = [kind(_fresh(what), "int64") for _ in range(length)]
    if variables:
        ctx.bb.match_cast(ctx.emit(op.tensor_to_shape(value)), ShapeStructInfo(tuple(variables)))
    return variables


def bind_sizes(ctx, values, what: str) -> list:
    """Size expressions (over run-time vars) bound to fresh size vars; literal ones stay ints."""
    literal = [const_value(v) for v in values]
    fresh = [SizeVar(_fresh(what), "int64") if c is None else c for c in literal]
    if any(c is None for c in literal):
        ctx.bb.match_cast(ShapeExpr(tuple(_i64(v) for v in values)),
                          ShapeStructInfo(tuple(_i64(v) for v in fresh)))
    return fresh


def require(ctx, condition, what: str) -> None:
    """A run-time check of a bool expression over run-time vars (a shape value matched against 1)."""
    one = tir.IntImm(1, "int64")
    hint = "check_" + "_".join("".join(c for c in word if c.isalnum()) for word in what.split())
    ctx.bb.match_cast(ShapeExpr((tir.Select(condition, one, tir.IntImm(0, "int64")),)),
                      ShapeStructInfo((one,)), name_hint=hint)


def _i64(v):
    if isinstance(v, int):
        return tir.IntImm(v, "int64")
    return v if str(v.dtype) == "int64" else tir.Cast("int64", v)
