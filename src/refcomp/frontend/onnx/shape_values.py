"""Shape tensors with symbolic entries, evaluated at import.

`Shape` of a tensor whose dims are size vars cannot be a Constant; it becomes a `ShapeExpr` (a
1-d int64 value) and a scalar taken from it a `PrimValue`.  The integer ops exporters put between
`Shape` and its consumers (Gather, Slice, Concat, (Un)Squeeze, Cast, Add/Sub/Mul/Div/Mod) are
evaluated on the entries, so `Shape -> Gather -> Concat -> Reshape` with a dynamic batch size
imports to a reshape whose target mentions the batch size var.  Int Constants take part as
literal entries.  A symbolic shape value used as tensor data is rejected by name.
"""
from __future__ import annotations

import numpy as np

from ...ast import expr as tir
from ...ast.graph import Constant, PrimValue, ShapeExpr
from ...graph.shape_facts import const_value
from ...graph.shape_facts import simplify


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
}


def binary(op_type: str, a, b):
    """The element-wise integer op on two shape values (a scalar broadcasts), or None."""
    ea, eb = entries(a), entries(b)
    if ea is None or eb is None or op_type not in BINARY:
        return None
    (va, sa), (vb, sb) = ea, eb
    if len(va) != len(vb) and not (sa or sb or len(va) == 1 or len(vb) == 1):
        return None
    n = max(len(va), len(vb))
    va = va * n if len(va) == 1 else va
    vb = vb * n if len(vb) == 1 else vb
    fn = BINARY[op_type]
    return make([fn(x, y) for x, y in zip(va, vb)], sa and sb)


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
