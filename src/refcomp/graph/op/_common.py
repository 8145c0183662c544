"""Helpers shared by the operator families: building calls, common shape rules, te glue."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ...ast import expr as tir
from ...ast.dtype import DataType, dtype as to_dtype
from ...ast.graph import Call, Constant, Expr, Op, PrimValue, const
from ...ast.graph_struct_info import TensorStructInfo
from ...errors import IRError
from ..infer import InferContext, broadcast_shapes


def as_expr(value: Any) -> Expr:
    """A graph argument: Exprs pass through, numbers and arrays become Constants."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, (bool, int, float, np.ndarray, np.generic, list)):
        return const(value)
    raise TypeError(f"cannot use {value!r} ({type(value).__name__}) as a graph value")


def make_call(name: str, *args: Any, **attrs: Any) -> Call:
    """Call(Op(name), args, attrs) with Python values converted; attrs with value None are dropped."""
    return Call(Op(name), tuple(as_expr(a) for a in args), {k: _freeze(v) for k, v in attrs.items()
                                                             if v is not None})


def _freeze(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, DataType):
        return str(value)
    return value


# ----------------------------------------------------------------------------- shape rules

def same_dtype(ctx: InferContext, *infos: TensorStructInfo) -> DataType | None:
    """The common dtype of tensors (None if any is unknown); differing known dtypes are an error."""
    known = {str(i.dtype) for i in infos if i.dtype is not None}
    if len(known) > 1:
        ctx.fail(f"operand dtypes differ: {', '.join(sorted(known))}", kind=IRError,
                 hint="cast one side with R.astype")
    if any(i.dtype is None for i in infos):
        return None
    return infos[0].dtype


def infer_broadcast(ctx: InferContext, infos: Sequence[TensorStructInfo], dtype: DataType | None) -> TensorStructInfo:
    """Numpy broadcasting of several tensors' shapes."""
    if any(i.shape is None for i in infos):
        ndim = -1 if any(i.ndim == -1 for i in infos) else max(i.ndim for i in infos)
        return TensorStructInfo(None, dtype, ndim)
    return TensorStructInfo(broadcast_shapes(ctx, [i.shape for i in infos]), dtype)


# ----------------------------------------------------------------------------- te glue

def te():
    """refcomp.te, imported on first use (legalization only)."""
    from ... import te as te_module

    return te_module


def call_intrin(name: str, *args: tir.PrimExpr) -> tir.PrimExpr:
    """A math intrinsic call with the dtype of its first argument."""
    return tir.Call(name, tuple(args), args[0].dtype)


def fconst(value: float, like: tir.PrimExpr) -> tir.PrimExpr:
    """A constant of the dtype of `like`."""
    return tir.const(value, like.dtype)


def broadcast_index(indices: Sequence[tir.PrimExpr], out_ndim: int, shape: Sequence[tir.PrimExpr]) -> tuple:
    """Indices into a broadcast operand: trailing alignment, size-1 dims read index 0."""
    offset = out_ndim - len(shape)
    result = []
    for k, d in enumerate(shape):
        result.append(tir.IntImm(0, indices[offset + k].dtype) if _is_one(d) else indices[offset + k])
    return tuple(result)


def _is_one(d: tir.PrimExpr) -> bool:
    return isinstance(d, tir.IntImm) and d.value == 1


def erf_np(x: np.ndarray) -> np.ndarray:
    """The error function element-wise, in x's dtype."""
    try:
        from scipy.special import erf

        return erf(x).astype(x.dtype)
    except ImportError:  # pragma: no cover - scipy is optional
        return np.vectorize(math.erf, otypes=[x.dtype])(x)


def np_dtype(value: Any) -> np.dtype:
    return to_dtype(value).numpy()


def prim(value: Any) -> PrimValue:
    return value if isinstance(value, PrimValue) else PrimValue(tir.convert(value))


def is_constant(e: Expr) -> bool:
    return isinstance(e, Constant)
