"""Linear algebra: matmul (batched, broadcasting, numpy semantics), dense and linear."""
from __future__ import annotations

import numpy as np

from ...ast import expr as tir
from ...ast.graph_struct_info import TensorStructInfo
from ...errors import IRError
from ..infer import broadcast_shapes
from ._common import make_call, same_dtype, te
from .registry import register


def matmul(a, b, out_dtype=None):
    """Matrix product with numpy's rules: 1-d operands are promoted, batch dims broadcast."""
    return make_call("matmul", a, b, out_dtype=out_dtype)


def _matmul_infer(call, ctx):
    a, b = ctx.tensor(0, "lhs"), ctx.tensor(1, "rhs")
    dtype = same_dtype(ctx, a, b)
    if ctx.attr("out_dtype", None) is not None:
        from ...ast.dtype import dtype as to_dtype

        dtype = to_dtype(ctx.attr("out_dtype"))
    if a.ndim == 0 or b.ndim == 0:
        ctx.fail("operands must have at least one dimension", kind=IRError)
    if a.shape is None or b.shape is None:
        if a.ndim == -1 or b.ndim == -1:
            return TensorStructInfo(None, dtype, -1)
        ndim = max(a.ndim, b.ndim) - (a.ndim == 1) - (b.ndim == 1)
        ndim = max(ndim, 0) if not (a.ndim == 1 and b.ndim == 1) else 0
        return TensorStructInfo(None, dtype, ndim)
    sa = a.shape if a.ndim > 1 else (tir.IntImm(1, "int64"),) + a.shape
    sb = b.shape if b.ndim > 1 else b.shape + (tir.IntImm(1, "int64"),)
    ctx.require_equal(sa[-1], sb[-2], "reduction lengths of the two operands agree",
                      hint="matmul(a, b) needs a.shape[-1] == b.shape[-2]")
    batch = broadcast_shapes(ctx, [sa[:-2], sb[:-2]]) if len(sa) > 2 or len(sb) > 2 else ()
    out = tuple(batch)
    if a.ndim > 1:
        out += (sa[-2],)
    if b.ndim > 1:
        out += (sb[-1],)
    return TensorStructInfo(out, dtype)


def _matmul_te(a, b, out_dtype=None):
    te_ = te()
    sa, sb = tuple(a.shape), tuple(b.shape)
    a_vec, b_vec = len(sa) == 1, len(sb) == 1
    k_extent = sa[-1]
    batch_a, batch_b = (sa[:-2] if not a_vec else ()), (sb[:-2] if not b_vec else ())
    nb = max(len(batch_a), len(batch_b))
    batch = []
    for j in range(nb):
        da = batch_a[j - nb + len(batch_a)] if j - nb + len(batch_a) >= 0 else None
        db = batch_b[j - nb + len(batch_b)] if j - nb + len(batch_b) >= 0 else None
        batch.append(db if da is None or (isinstance(da, tir.IntImm) and da.value == 1 and db is not None) else da)
    out_shape = tuple(batch) + ((sa[-2],) if not a_vec else ()) + ((sb[-1],) if not b_vec else ())
    k = te_.reduce_axis(k_extent, name="k")
    dtype = out_dtype or str(a.dtype)

    def index_batch(idx, bshape):
        off = nb - len(bshape)
        return tuple(tir.IntImm(0, idx[off + j].dtype) if isinstance(d, tir.IntImm) and d.value == 1
                     else idx[off + j] for j, d in enumerate(bshape))

    def body(*idx):
        bi = idx[:nb]
        rest = idx[nb:]
        ai = index_batch(bi, batch_a) + ((rest[0],) if not a_vec else ()) + (k.var,)
        bj = index_batch(bi, batch_b) + (k.var,) + ((rest[-1],) if not b_vec else ())
        return te_.sum(a[ai].astype(dtype) * b[bj].astype(dtype), axis=k)

    return te_.compute(out_shape, body, name="matmul")


def _matmul_reference(a, b, out_dtype=None):
    out = np.matmul(a, b)
    return out.astype(out_dtype) if out_dtype else out


register("matmul", infer=_matmul_infer, reference=_matmul_reference, legalize=_matmul_te,
         pattern="out_fusable", doc="numpy matmul")


def dense(x, weight):
    """x @ weight.T: x (..., k), weight (m, k) -> (..., m)."""
    return make_call("dense", x, weight)


def _dense_infer(call, ctx):
    x, w = ctx.tensor(0, "data"), ctx.tensor(1, "weight")
    dtype = same_dtype(ctx, x, w)
    if w.ndim not in (-1, 2):
        ctx.fail(f"weight must be 2-d, got {w.ndim}-d", kind=IRError)
    if x.shape is None or w.shape is None:
        return TensorStructInfo(None, dtype, x.ndim)
    ctx.require_equal(x.shape[-1], w.shape[1], "the input feature size equals the weight's",
                      hint="dense(x, w) needs x.shape[-1] == w.shape[1]")
    return TensorStructInfo(x.shape[:-1] + (w.shape[0],), dtype)


def _dense_te(x, w):
    te_ = te()
    k = te_.reduce_axis(x.shape[-1], name="k")
    out_shape = tuple(x.shape[:-1]) + (w.shape[0],)
    return te_.compute(out_shape, lambda *i: te_.sum(x[i[:-1] + (k.var,)] * w[i[-1], k.var], axis=k),
                       name="dense")


register("dense", infer=_dense_infer, reference=lambda x, w: np.matmul(x, w.T), legalize=_dense_te,
         pattern="out_fusable", doc="x @ w.T")


def linear(x, weight, bias):
    """x @ weight.T + bias (bias of shape (m,))."""
    return make_call("linear", x, weight, bias)


def _linear_infer(call, ctx):
    info = _dense_infer(call, ctx)
    b = ctx.tensor(2, "bias")
    same_dtype(ctx, info, b) if info.dtype is not None else None
    if b.shape is not None and info.shape is not None:
        if len(b.shape) != 1:
            ctx.fail(f"bias must be 1-d, got {b}", kind=IRError)
        ctx.require_equal(b.shape[0], info.shape[-1], "the bias length equals the output features")
    return info


def _linear_te(x, w, b):
    te_ = te()
    k = te_.reduce_axis(x.shape[-1], name="k")
    out_shape = tuple(x.shape[:-1]) + (w.shape[0],)
    mm = te_.compute(out_shape, lambda *i: te_.sum(x[i[:-1] + (k.var,)] * w[i[-1], k.var], axis=k),
                     name="dense")
    return te_.compute(out_shape, lambda *i: mm[i] + b[i[-1]], name="linear")


register("linear", infer=_linear_infer, reference=lambda x, w, b: np.matmul(x, w.T) + b,
         legalize=_linear_te, pattern="out_fusable", doc="x @ w.T + b")
