"""Shape tensors with symbolic entries, evaluated at import.

`Shape` of a tensor whose dims are size vars cannot be a Constant; it becomes a `ShapeExpr` (a
1-d int64 value) and a scalar taken from it a `PrimValue`.  The integer ops exporters put between
`Shape` and its consumers (Gather, Slice, Concat, (Un)Squeeze, Reshape, Cast, Add/Sub/Mul/Div/Mod,
Max/Min, comparisons and Where) are evaluated on the entries, so `Shape -> Gather -> Concat ->
Reshape` with a dynamic batch size imports to a reshape whose target mentions the batch size var,
and `Range(0, seq)` to an `arange` of length `seq`.  Int Constants take part as literal entries.
A shape value used as tensor data (a float Cast, a comparison with a tensor) becomes an int64
tensor computed from the size vars (`shape_to_tensor`).
"""
from __future__ import annotations

import numpy as np

from ...ast import expr as tir
from ...ast.graph import Constant, PrimValue, ShapeExpr
from ...graph import op
from ...graph.shape_facts import const_value, prove, simplify


def is_symbolic(value) -> bool:
    return isinstance(value, (ShapeExpr, PrimValue))


def entries(value):
    """(list of int64 PrimExprs, is_scalar) of a shape value or an integer Constant of rank <= 1;
    None for anything else."""
    if isinstance(value, ShapeExpr):
        return list(value.values), False
    if isinstance(value, PrimValue):
        return [_i64(value.value)], True
    if isinstance(value, Constant):
        array = np.asarray(value.array)
        if array.dtype.kind in "iu" and array.ndim <= 1:
            return [tir.IntImm(int(v), "int64") for v in array.reshape(-1)], array.ndim == 0
    return None


def _i64(e):
    return e if str(e.dtype) == "int64" else tir.Cast("int64", e)


def make(values, scalar: bool):
    """A Constant when every entry is a literal, else a ShapeExpr (or PrimValue for a scalar)."""
    values = [simplify(v) for v in values]
    literal = [const_value(v) for v in values]
    if None not in literal:
        array = np.asarray(literal, np.int64)
        return Constant(array.reshape(()) if scalar else array)
    if scalar:
        return PrimValue(values[0])
    return ShapeExpr(tuple(values))


def dims_of(value):
    """The entries of a shape operand as reshape/broadcast dims (ints where literal), or None."""
    got = entries(value)
    if got is None:
        return None
    out = []
    for v in got[0]:
        c = const_value(v)
        out.append(c if c is not None else v)
    return out


BINARY = {
    "Add": lambda a, b: a + b,
    "Sub": lambda a, b: a - b,
    "Mul": lambda a, b: a * b,
    "Div": lambda a, b: tir.FloorDiv(a, b),  # dims are >= 0, where truncation and floor agree
    "Mod": lambda a, b: tir.FloorMod(a, b),
    "Max": lambda a, b: tir.Max(a, b),
    "Min": lambda a, b: tir.Min(a, b),
}
COMPARE = {
    "Equal": tir.EQ, "Less": tir.LT, "LessOrEqual": tir.LE, "Greater": tir.GT, "GreaterOrEqual": tir.GE,
}


def binary(op_type: str, a, b):
    """The element-wise integer op on two shape values (a scalar broadcasts), or None."""
    ea, eb = entries(a), entries(b)
    if ea is None or eb is None or op_type not in BINARY:
        return None
    got = _broadcast(ea, eb)
    if got is None:
        return None
    va, vb, scalar = got
    if op_type in ("Div", "Mod") and not all(_nonnegative(x) and _positive(y) for x, y in zip(va, vb)):
        return None  # ONNX truncates toward zero; floor division agrees only on these signs
    fn = BINARY[op_type]
    return make([fn(x, y) for x, y in zip(va, vb)], scalar)


def _nonnegative(e) -> bool:
    return prove(tir.GE(e, tir.IntImm(0, "int64"))).proved


def _positive(e) -> bool:
    return prove(tir.GT(e, tir.IntImm(0, "int64"))).proved


def gather(data, indices):
    """data[indices] along axis 0 for a 1-d shape value and constant indices, or None."""
    ed = entries(data)
    if ed is None or not isinstance(indices, Constant):
        return None
    values, _ = ed
    idx = np.asarray(indices.array)
    if idx.ndim > 1:
        return None
    picked = [values[int(i)] for i in idx.reshape(-1)]
    return make(picked, idx.ndim == 0)


def concat(parts):
    got = [entries(p) for p in parts]
    if any(g is None or g[1] for g in got):
        return None
    return make([v for g in got for v in g[0]], False)


def slice_(value, start: int, end: int, step: int):
    got = entries(value)
    if got is None or got[1]:
        return None
    return make(got[0][slice(start, end, step)], False)


def as_tensor(ctx, value):
    """A shape value as an int64 tensor (computed from the size vars at run time); others unchanged."""
    if isinstance(value, ShapeExpr):
        return ctx.emit(op.shape_to_tensor(value.values))
    if isinstance(value, PrimValue):
        if not value.value.dtype.is_integer:
            ctx.fail(f"a symbolic scalar of type {value.value.dtype} cannot be used as tensor data")
        return ctx.emit(op.shape_to_tensor([_i64(value.value)], scalar=True))
    return value


def _broadcast(ea, eb):
    (va, sa), (vb, sb) = ea, eb
    if len(va) != len(vb) and not (sa or sb or len(va) == 1 or len(vb) == 1):
        return None
    n = max(len(va), len(vb))
    return (va * n if len(va) == 1 else va), (vb * n if len(vb) == 1 else vb), sa and sb


def compare(op_type: str, a, b):
    """A comparison of shape values decided for every value of the size vars: a bool Constant, or
    None where some entry is not decided at import time (or an operand is not a shape value)."""
    ea, eb = entries(a), entries(b)
    if ea is None or eb is None or op_type not in COMPARE:
        return None
    got = _broadcast(ea, eb)
    if got is None:
        return None
    va, vb, scalar = got
    decided = []
    for x, y in zip(va, vb):
        cond = COMPARE[op_type](x, y)
        if prove(cond).proved:
            decided.append(True)
        elif prove(tir.Not(cond)).proved:
            decided.append(False)
        else:
            return None
    array = np.asarray(decided, bool)
    return Constant(array.reshape(()) if scalar else array)


def where(cond, a, b):
    """Where over shape values with a condition known at import time, or None."""
    if not isinstance(cond, Constant) or np.asarray(cond.array).dtype != bool:
        return None
    ea, eb = entries(a), entries(b)
    if ea is None or eb is None:
        return None
    picks = np.asarray(cond.array)
    got = _broadcast(ea, eb)
    if got is None or picks.ndim > 1:
        return None
    va, vb, scalar = got
    n = max(len(va), picks.size)
    if picks.size not in (1, n) or len(va) not in (1, n):
        return None
    va, vb, picks = va * (n // len(va)), vb * (n // len(vb)), np.broadcast_to(picks.reshape(-1), (n,))
    return make([x if p else y for x, y, p in zip(va, vb, picks)], scalar and cond.array.ndim == 0)


def reshape(value, target):
    """A shape value reshaped to a 0-d or 1-d target (ints; one -1 allowed), or None."""
    got = entries(value)
    if got is None or len(target) > 1 or any(not isinstance(t, int) for t in target):
        return None
    values, _ = got
    if not target:
        return make(values, True) if len(values) == 1 else None
    if target[0] not in (-1, 0, len(values)):
        return None
    return make(values, False)
