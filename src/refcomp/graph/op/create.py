"""Tensor creation: full/zeros/ones (and their _like forms), arange, shape_to_tensor, eye, tril/triu."""
from __future__ import annotations

import numpy as np

from ...ast import expr as tir
from ...ast.dtype import dtype as to_dtype
from ...ast.graph_struct_info import TensorStructInfo, as_dim
from ...errors import IRError
from ..shape_facts import const_value, simplify
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
    """numpy.arange; start and stop may be integer expressions over size vars (step a nonzero constant)."""
    if stop is None:
        start, stop = 0, start
    return make_call("arange", start=_bound(start), stop=_bound(stop), step=step, dtype=str(to_dtype(dtype)))


def _bound(value):
    """A bound as a Python number where it is one, else an int64 expression."""
    if isinstance(value, tir.PrimExpr):
        value = simplify(value.astype("int64") if value.dtype != "int64" else value)
        known = const_value(value)
        return value if known is None else known
    return value


def _arange_len(start, stop, step):
    """The element count max(ceil((stop - start) / step), 0); an expression when a bound is symbolic."""
    import math

    if isinstance(start, tir.PrimExpr) or isinstance(stop, tir.PrimExpr):
        if not isinstance(step, int) or isinstance(step, bool):
            raise IRError(f"arange: a symbolic bound needs an integer step, got {step!r}")
        if isinstance(start, float) or isinstance(stop, float):
            raise IRError("arange: a symbolic bound needs integer bounds")
        span = as_dim(stop) - as_dim(start) if step > 0 else as_dim(start) - as_dim(stop)
        size = abs(step)
        count = span if size == 1 else tir.FloorDiv(span + as_dim(size - 1), as_dim(size))
        return simplify(tir.Max(count, as_dim(0)))
    return max(int(math.ceil((stop - start) / step)), 0)


def _arange_infer(call, ctx):
    start, stop, step = ctx.attr("start"), ctx.attr("stop"), ctx.attr("step", 1)
    if step == 0:
        ctx.fail("step must not be 0", kind=IRError)
    try:
        length = _arange_len(start, stop, step)
    except IRError as exc:
        ctx.fail(str(exc), kind=IRError)
    return TensorStructInfo((length,), to_dtype(ctx.attr("dtype")))


def _arange_te(start, stop, step=1, dtype="int64"):
    t = to_dtype(dtype)
    n = _arange_len(start, stop, step)
    if t.is_float:
        first = as_dim(start).astype(t) if isinstance(start, tir.PrimExpr) else tir.const(float(start), t)
        return te().compute((n,), lambda i: first + i.astype(t) * tir.const(float(step), t), name="arange")
    first = as_dim(start) if isinstance(start, tir.PrimExpr) else tir.const(int(start), "int64")
    return te().compute((n,), lambda i: (first + i.astype("int64") * tir.const(int(step), "int64")).astype(t),
                        name="arange")


def _arange_np(start, stop, step=1, dtype="int64"):
    return (start + np.arange(_arange_len(start, stop, step)) * step).astype(to_dtype(dtype).numpy())


register("arange", infer=_arange_infer, reference=_arange_np, legalize=_arange_te, pattern="injective",
         doc="evenly spaced values")


def shape_to_tensor(values, scalar=False):
    """The int64 tensor holding integer expressions over size vars: 1-d with one entry per value, or
    0-d for a single scalar.  A shape value (ShapeExpr, PrimValue) used as tensor data becomes this."""
    values = tuple(_bound(as_dim(v)) for v in values)
    if scalar and len(values) != 1:
        raise IRError(f"shape_to_tensor: a scalar takes exactly one value, got {len(values)}")
    return make_call("shape_to_tensor", values=values, scalar=bool(scalar))


def _shape_to_tensor_infer(call, ctx):
    values = [as_dim(v) for v in ctx.attr("values")]
    if any(not v.dtype.is_integer for v in values):
        ctx.fail("values must be integer expressions", kind=IRError)
    return TensorStructInfo(() if ctx.attr("scalar", False) else (len(values),), to_dtype("int64"))


def _shape_to_tensor_te(values, scalar=False):
    entries = [as_dim(v) for v in values]
    if scalar:
        return te().compute((), lambda: entries[0], name="shape_to_tensor")

    def body(i):
        result = entries[-1]
        for k in range(len(entries) - 2, -1, -1):
            result = tir.Select(tir.EQ(i.astype("int64"), tir.IntImm(k, "int64")), entries[k], result)
        return result

    return te().compute((len(entries),), body, name="shape_to_tensor")


def _shape_to_tensor_np(values, scalar=False):
    array = np.asarray([int(v) for v in values], np.int64)
    return array.reshape(()) if scalar else array


register("shape_to_tensor", infer=_shape_to_tensor_infer, reference=_shape_to_tensor_np,
         legalize=_shape_to_tensor_te, pattern="injective", doc="symbolic integers as an int64 tensor")


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
