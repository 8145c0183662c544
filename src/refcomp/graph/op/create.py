"""Tensor creation: full/zeros/ones (and their _like forms), arange, eye, tril/triu."""
from __future__ import annotations

import numpy as np

from ...ast import expr as tir
from ...ast.dtype import dtype as to_dtype
from ...ast.graph_struct_info import TensorStructInfo, as_dim
from ...errors import IRError
from ._common import make_call, te
from .registry import register


def _scalar(value, dtype):
    t = to_dtype(dtype)
    if t.is_bool:
        return tir.const(bool(value), t)
    return tir.const(float(value) if t.is_float else int(value), t)


def full(shape, fill_value, dtype="float32"):
    """A tensor of `shape` (symbolic dims allowed) filled with fill_value."""
    return make_call("full", shape=tuple(shape), fill_value=float(fill_value), dtype=str(to_dtype(dtype)))


def zeros(shape, dtype="float32"):
    """A tensor of zeros."""
    return full(shape, 0.0, dtype)


def ones(shape, dtype="float32"):
    """A tensor of ones."""
    return full(shape, 1.0, dtype)


register("full", infer=lambda call, ctx: TensorStructInfo(tuple(ctx.attr("shape")), to_dtype(ctx.attr("dtype"))),
         reference=lambda shape, fill_value, dtype: np.full(tuple(int(d) for d in shape), fill_value,
                                                            dtype=to_dtype(dtype).numpy()),
         legalize=lambda shape, fill_value, dtype: te().compute(tuple(as_dim(d) for d in shape),
                                                                lambda *i: _scalar(fill_value, dtype), name="full"),
         pattern="elementwise", doc="constant-filled tensor")


def full_like(x, fill_value, dtype=None):
    """A tensor shaped like x filled with fill_value (x's dtype unless given)."""
    return make_call("full_like", x, fill_value=float(fill_value), dtype=None if dtype is None else str(to_dtype(dtype)))


def zeros_like(x, dtype=None):
    """Zeros shaped like x."""
    return full_like(x, 0.0, dtype)


def ones_like(x, dtype=None):
    """Ones shaped like x."""
    return full_like(x, 1.0, dtype)


def _full_like_infer(call, ctx):
    x = ctx.tensor(0)
    dtype = ctx.attr("dtype", None)
    return TensorStructInfo(x.shape, to_dtype(dtype) if dtype else x.dtype, x.ndim)


register("full_like", infer=_full_like_infer,
         reference=lambda x, fill_value, dtype=None: np.full(x.shape, fill_value, dtype=to_dtype(dtype).numpy()
                                                             if dtype else x.dtype),
         legalize=lambda x, fill_value, dtype=None: te().compute(x.shape, lambda *i: _scalar(
             fill_value, dtype or x.dtype), name="full_like"),
         pattern="elementwise", doc="constant-filled tensor like another")


def arange(start, stop=None, step=1, dtype="int64"):
    """numpy.arange with constant bounds."""
    if stop is None:
        start, stop = 0, start
    return make_call("arange", start=start, stop=stop, step=step, dtype=str(to_dtype(dtype)))


def _arange_len(start, stop, step):
    import math

    return max(int(math.ceil((stop - start) / step)), 0)


def _arange_infer(call, ctx):
    start, stop, step = ctx.attr("start"), ctx.attr("stop"), ctx.attr("step", 1)
    if step == 0:
        ctx.fail("step must not be 0", kind=IRError)
    return TensorStructInfo((_arange_len(start, stop, step),), to_dtype(ctx.attr("dtype")))


def _arange_te(start, stop, step=1, dtype="int64"):
    t = to_dtype(dtype)
    n = _arange_len(start, stop, step)
    if t.is_float:
        return te().compute((n,), lambda i: tir.const(float(start), t) + i.astype(t) * tir.const(float(step), t),
                            name="arange")
    return te().compute((n,), lambda i: (tir.const(int(start), "int64") + i.astype("int64")
                                         * tir.const(int(step), "int64")).astype(t), name="arange")


register("arange", infer=_arange_infer,
         reference=lambda start, stop, step=1, dtype="int64": (
             start + np.arange(_arange_len(start, stop, step)) * step).astype(to_dtype(dtype).numpy()),
         legalize=_arange_te, pattern="injective", doc="evenly spaced values")


def eye(n, m=None, k=0, dtype="float32"):
    """Ones on diagonal k of an (n, m) matrix."""
    return make_call("eye", n=n, m=n if m is None else m, k=int(k), dtype=str(to_dtype(dtype)))


register("eye", infer=lambda call, ctx: TensorStructInfo((ctx.attr("n"), ctx.attr("m")), to_dtype(ctx.attr("dtype"))),
         reference=lambda n, m, k=0, dtype="float32": np.eye(int(n), int(m), k, dtype=to_dtype(dtype).numpy()),
         legalize=lambda n, m, k=0, dtype="float32": te().compute((as_dim(n), as_dim(m)), lambda i, j: tir.Select(
             tir.EQ(j.astype("int64") - i.astype("int64"), tir.IntImm(k, "int64")), _scalar(1, dtype), _scalar(0, dtype)),
             name="eye"),
         pattern="injective", doc="identity-like matrix")


def tril(x, k=0):
    """Keep elements on and below diagonal k of the last two dims, zero the rest."""
    return make_call("tril", x, k=int(k))


def triu(x, k=0):
    """Keep elements on and above diagonal k of the last two dims, zero the rest."""
    return make_call("triu", x, k=int(k))


def _tri_infer(call, ctx):
    x = ctx.tensor(0)
    if x.ndim != -1 and x.ndim < 2:
        ctx.fail(f"expects at least 2 dims, got {x.ndim}", kind=IRError)
    return x


def _tri_te(lower):
    def compute(x, k=0):
        def body(*i):
            diff = i[-1].astype("int64") - i[-2].astype("int64")
            keep = tir.LE(diff, tir.IntImm(k, "int64")) if lower else tir.GE(diff, tir.IntImm(k, "int64"))
            return tir.Select(keep, x[i], tir.const(0, x.dtype) if not x.dtype.is_bool else tir.const(False))

        return te().compute(x.shape, body, name="tril" if lower else "triu")

    return compute


register("tril", infer=_tri_infer, reference=lambda x, k=0: np.tril(x, k), legalize=_tri_te(True),
         pattern="injective", doc="lower triangle")
register("triu", infer=_tri_infer, reference=lambda x, k=0: np.triu(x, k), legalize=_tri_te(False),
         pattern="injective", doc="upper triangle")
