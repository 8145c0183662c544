"""Indexing operators: take, embedding, gather_elements, gather_nd, scatter_elements, one_hot, topk.

Indices are wrapped like numpy (negative counts from the end) and then clamped into the axis, so a
bad index never reads outside memory; the numpy references raise on such input instead.
"""
from __future__ import annotations

import numpy as np

from ...ast import expr as tir
from ...ast.dtype import dtype as to_dtype
from ...ast.graph_struct_info import TensorStructInfo, TupleStructInfo, as_dim
from ...errors import IRError
from ._common import make_call, te
from .registry import register


def _safe_index(raw: tir.PrimExpr, extent: tir.PrimExpr, like: tir.PrimExpr) -> tir.PrimExpr:
    """A numpy-style index (negative from the end) clamped into [0, extent) in the dtype of `like`."""
    raw = raw.astype("int64")
    n = as_dim(extent)
    wrapped = tir.Select(tir.LT(raw, as_dim(0)), raw + n, raw)
    clamped = tir.Max(as_dim(0), tir.Min(wrapped, n - as_dim(1)))
    return clamped.astype(like.dtype)


def _int_indices(ctx, info, what="indices"):
    if info.dtype is not None and not info.dtype.is_integer:
        ctx.fail(f"{what} must be integers, got {info.dtype}", kind=IRError)


# ----------------------------------------------------------------------------- take / embedding

def take(x, indices, axis=0):
    """numpy.take along one axis: x.shape[:axis] + indices.shape + x.shape[axis+1:]."""
    return make_call("take", x, indices, axis=int(axis))


def _take_infer(call, ctx):
    x, idx = ctx.tensor(0), ctx.tensor(1, "indices")
    _int_indices(ctx, idx)
    if x.shape is None or idx.shape is None:
        return TensorStructInfo(None, x.dtype, -1 if x.ndim == -1 or idx.ndim == -1 else x.ndim - 1 + idx.ndim)
    a = ctx.axis(ctx.attr("axis", 0), x.ndim)
    return TensorStructInfo(tuple(x.shape[:a]) + tuple(idx.shape) + tuple(x.shape[a + 1:]), x.dtype)


def _take_te(x, indices, axis=0):
    a = axis % len(x.shape)
    m = len(indices.shape)
    shape = tuple(x.shape[:a]) + tuple(indices.shape) + tuple(x.shape[a + 1:])

    def body(*i):
        pos = indices[tuple(i[a:a + m])] if m else indices[()]
        src = tuple(i[:a]) + (_safe_index(pos, x.shape[a], i[0] if i else as_dim(0)),) + tuple(i[a + m:])
        return x[src]

    return te().compute(shape, body, name="take")


register("take", infer=_take_infer, reference=lambda x, indices, axis=0: np.take(x, indices, axis=axis),
         legalize=_take_te, pattern="injective", doc="numpy.take")


def embedding(weight, ids):
    """Rows of weight (vocab, hidden) selected by integer ids: ids.shape + (hidden,)."""
    return make_call("embedding", weight, ids)


register("embedding", infer=_take_infer, reference=lambda w, ids: np.take(w, ids, axis=0),
         legalize=lambda w, ids: _take_te(w, ids, 0), pattern="injective", doc="embedding lookup")


# ----------------------------------------------------------------------------- gather_elements, gather_nd

def gather_elements(x, indices, axis=0):
    """out[i] = x[i with axis coordinate replaced by indices[i]] (ONNX GatherElements)."""
    return make_call("gather_elements", x, indices, axis=int(axis))


def _gather_elements_infer(call, ctx):
    x, idx = ctx.tensor(0), ctx.tensor(1, "indices")
    _int_indices(ctx, idx)
    if x.ndim != -1 and idx.ndim != -1:
        if x.ndim != idx.ndim:
            ctx.fail(f"data and indices must have the same rank, got {x.ndim} and {idx.ndim}", kind=IRError)
        ctx.axis(ctx.attr("axis", 0), x.ndim)
    return TensorStructInfo(idx.shape, x.dtype, idx.ndim)


def _gather_elements_te(x, indices, axis=0):
    a = axis % len(x.shape)
    extent = as_dim(x.shape[a])

    def body(*i):
        value = x[tuple(_safe_index(indices[i], extent, i[k]) if k == a else i[k] for k in range(len(i)))]
        # An empty axis has no element to clamp to: the output (only reachable with invalid
        # indices) is zero there instead of a read outside x.
        return te().if_then_else(tir.GT(extent, as_dim(0)), value, tir.const(0, x.dtype))

    return te().compute(indices.shape, body, name="gather")


register("gather_elements", infer=_gather_elements_infer,
         reference=lambda x, indices, axis=0: np.take_along_axis(x, np.where(indices < 0, indices + x.shape[axis],
                                                                             indices), axis=axis),
         legalize=_gather_elements_te, pattern="injective", doc="ONNX GatherElements")


def gather_nd(x, indices, batch_dims=0):
    """out[i...] = x[indices[i..., :]] (ONNX GatherND, batch_dims 0)."""
    return make_call("gather_nd", x, indices, batch_dims=int(batch_dims))


def _gather_nd_infer(call, ctx):
    x, idx = ctx.tensor(0), ctx.tensor(1, "indices")
    _int_indices(ctx, idx)
    b = ctx.attr("batch_dims", 0)
    if x.shape is None or idx.shape is None:
        return TensorStructInfo(None, x.dtype, -1)
    from ..shape_facts import const_value

    m = const_value(idx.shape[-1])
    if m is None:
        ctx.fail("the last dim of indices must be static", kind=IRError)
    if b < 0 or b >= len(idx.shape) or b + m > x.ndim:
        ctx.fail(f"indices address {m} dims after {b} batch dims of a {x.ndim}-d tensor", kind=IRError)
    for k in range(b):
        ctx.require_equal(x.shape[k], idx.shape[k], f"batch dim {k} of data and indices agree")
    return TensorStructInfo(tuple(idx.shape[:-1]) + tuple(x.shape[b + m:]), x.dtype)


def _gather_nd_te(x, indices, batch_dims=0):
    from ..shape_facts import const_value

    b = batch_dims
    m = const_value(indices.shape[-1])
    q = len(indices.shape) - 1
    shape = tuple(indices.shape[:-1]) + tuple(x.shape[b + m:])

    def body(*i):
        lead = tuple(i[:q])
        src = tuple(_safe_index(indices[lead + (tir.IntImm(j, "int64"),)], x.shape[b + j], i[0] if i else as_dim(0))
                    for j in range(m))
        return x[tuple(i[:b]) + src + tuple(i[q:])]

    return te().compute(shape, body, name="gather_nd")


def _np_gather_nd(x, indices, batch_dims=0):
    if batch_dims:
        return np.stack([_np_gather_nd(x[k], indices[k], batch_dims - 1) for k in range(x.shape[0])])
    m = indices.shape[-1]
    flat = indices.reshape(-1, m)
    out = np.stack([x[tuple(row)] for row in flat]) if len(flat) else np.zeros((0,) + x.shape[m:], x.dtype)
    return out.reshape(indices.shape[:-1] + x.shape[m:])


register("gather_nd", infer=_gather_nd_infer, reference=_np_gather_nd, legalize=_gather_nd_te,
         pattern="injective", doc="ONNX GatherND")


# ----------------------------------------------------------------------------- scatter_elements

def scatter_elements(data, indices, updates, axis=0, reduction="none"):
    """data with data[.., indices[i], ..] = updates[i] along axis (reduction "none", "add", "mul", "max", "min")."""
    return make_call("scatter_elements", data, indices, updates, axis=int(axis), reduction=reduction)


def _scatter_infer(call, ctx):
    d, idx, upd = ctx.tensor(0), ctx.tensor(1, "indices"), ctx.tensor(2, "updates")
    _int_indices(ctx, idx)
    if ctx.attr("reduction", "none") not in ("none", "add", "mul", "max", "min"):
        ctx.fail(f"unknown reduction {ctx.attr('reduction')!r}", kind=IRError)
    if idx.shape is not None and upd.shape is not None:
        for k, (a, b) in enumerate(zip(idx.shape, upd.shape)):
            ctx.require_equal(a, b, f"indices and updates agree in dim {k}")
    return d


def _scatter_te(data, indices, updates, axis=0, reduction="none"):
    """Each output element looks for updates aimed at it along the axis (last one wins for "none")."""
    te_ = te()
    ndim = len(data.shape)
    a = axis % ndim
    k = te_.reduce_axis(indices.shape[a], name="k")

    def hits(i):
        inside = [tir.LT(i[j], indices.shape[j].astype(i[j].dtype)) for j in range(ndim) if j != a]
        src = tuple(k.var if j == a else tir.Min(i[j], indices.shape[j].astype(i[j].dtype) - tir.const(1, i[j].dtype))
                    for j in range(ndim))
        cond = tir.EQ(_safe_index(indices[src], data.shape[a], i[a]), i[a])
        for c in inside:
            cond = tir.And(cond, c)
        return cond, src

    count = te_.compute(data.shape, lambda *i: te_.sum(tir.Select(hits(i)[0], tir.const(1, "int32"),
                                                                  tir.const(0, "int32")), axis=k), name="hits")
    if reduction == "none":
        last = te_.compute(data.shape, lambda *i: te_.max(tir.Select(
            hits(i)[0], k.var.astype("int64"), tir.IntImm(-1, "int64")), axis=k), name="last_hit")

        def body(*i):
            src = tuple(tir.Max(last[i], tir.IntImm(0, "int64")).astype(i[j].dtype) if j == a else
                        tir.Min(i[j], indices.shape[j].astype(i[j].dtype) - tir.const(1, i[j].dtype))
                        for j in range(ndim))
            return tir.Call("if_then_else", (tir.GT(count[i], tir.const(0, "int32")), updates[src], data[i]),
                            data.dtype)

        return te_.compute(data.shape, body, name="scatter")
    reducer = {"add": te_.sum, "mul": te_.prod, "max": te_.max, "min": te_.min}[reduction]
    identity = {"add": 0, "mul": 1}.get(reduction)

    def combined(*i):
        cond, src = hits(i)
        fill = tir.const(identity, data.dtype) if identity is not None else (
            te_.min_value(data.dtype) if reduction == "max" else te_.max_value(data.dtype))
        return reducer(tir.Select(cond, updates[src], fill), axis=k)

    acc = te_.compute(data.shape, combined, name="scatter_acc")
    merge = {"add": lambda x, y: x + y, "mul": lambda x, y: x * y, "max": tir.Max, "min": tir.Min}[reduction]
    return te_.compute(data.shape, lambda *i: tir.Select(tir.GT(count[i], tir.const(0, "int32")),
                                                         merge(data[i], acc[i]), data[i]), name="scatter")


def _np_scatter(data, indices, updates, axis=0, reduction="none"):
    out = data.copy()
    indices = np.where(indices < 0, indices + data.shape[axis], indices)
    for pos in np.ndindex(*indices.shape):
        target = list(pos)
        target[axis] = indices[pos]
        target = tuple(target)
        if reduction == "none":
            out[target] = updates[pos]
        elif reduction == "add":
            out[target] += updates[pos]
        elif reduction == "mul":
            out[target] *= updates[pos]
        elif reduction == "max":
            out[target] = max(out[target], updates[pos])
        else:
            out[target] = min(out[target], updates[pos])
    return out


register("scatter_elements", infer=_scatter_infer, reference=_np_scatter, legalize=_scatter_te, pattern="opaque",
         doc="ONNX ScatterElements")


# ----------------------------------------------------------------------------- one_hot

def one_hot(indices, depth: int, on_value=1.0, off_value=0.0, axis=-1, dtype="float32"):
    """A new axis of length depth holding on_value at each index, off_value elsewhere."""
    return make_call("one_hot", indices, depth=int(depth), on_value=float(on_value), off_value=float(off_value),
                     axis=int(axis), dtype=str(to_dtype(dtype)))


def _one_hot_infer(call, ctx):
    idx = ctx.tensor(0, "indices")
    _int_indices(ctx, idx)
    dtype = to_dtype(ctx.attr("dtype", "float32"))
    if idx.shape is None:
        return TensorStructInfo(None, dtype, -1 if idx.ndim == -1 else idx.ndim + 1)
    a = ctx.axis(ctx.attr("axis", -1), idx.ndim + 1)
    shape = list(idx.shape)
    shape.insert(a, as_dim(ctx.attr("depth")))
    return TensorStructInfo(tuple(shape), dtype)


def _one_hot_te(indices, depth, on_value=1.0, off_value=0.0, axis=-1, dtype="float32"):
    ndim = len(indices.shape) + 1
    a = axis % ndim
    shape = list(indices.shape)
    shape.insert(a, as_dim(depth))

    def body(*i):
        src = tuple(i[k] for k in range(ndim) if k != a)
        raw = indices[src].astype("int64")
        wrapped = tir.Select(tir.LT(raw, as_dim(0)), raw + as_dim(depth), raw)
        return tir.Select(tir.EQ(wrapped, i[a].astype("int64")), tir.const(on_value, dtype), tir.const(off_value, dtype))

    return te().compute(tuple(shape), body, name="one_hot")


def _np_one_hot(indices, depth, on_value=1.0, off_value=0.0, axis=-1, dtype="float32"):
    idx = np.where(indices < 0, indices + depth, indices)
    eye = (np.arange(depth) == idx[..., None])
    out = np.where(eye, on_value, off_value).astype(to_dtype(dtype).numpy())
    return np.moveaxis(out, -1, axis % (indices.ndim + 1))


register("one_hot", infer=_one_hot_infer, reference=_np_one_hot, legalize=_one_hot_te, pattern="injective",
         doc="one-hot encoding")


# ----------------------------------------------------------------------------- topk

def topk(x, k: int, axis=-1, largest=True):
    """(values, indices) of the k largest (or smallest) along axis, sorted, ties to the lower index."""
    return make_call("topk", x, k=int(k), axis=int(axis), largest=bool(largest))


def _topk_infer(call, ctx):
    x = ctx.tensor(0)
    k = ctx.attr("k")
    if x.shape is None:
        return TupleStructInfo((TensorStructInfo(None, x.dtype, x.ndim), TensorStructInfo(None, "int64", x.ndim)))
    a = ctx.axis(ctx.attr("axis", -1), x.ndim)
    ctx.require(tir.LE(as_dim(k), x.shape[a]), f"k = {k} is at most the axis length")
    shape = list(x.shape)
    shape[a] = as_dim(k)
    return TupleStructInfo((TensorStructInfo(tuple(shape), x.dtype), TensorStructInfo(tuple(shape), "int64")))


def _topk_te(x, k, axis=-1, largest=True):
    """By rank: rank(e) = #elements before e in the order; output slot j holds the element of rank j."""
    te_ = te()
    ndim = len(x.shape)
    a = axis % ndim
    r = te_.reduce_axis(x.shape[a], name="r")

    def at(i, pos):
        return tuple(pos if j == a else i[j] for j in range(ndim))

    def rank_body(*i):
        other, mine = x[at(i, r.var)], x[i]
        ahead = tir.GT(other, mine) if largest else tir.LT(other, mine)
        tie = tir.And(tir.EQ(other, mine), tir.LT(r.var, i[a]))
        return te_.sum(tir.Select(tir.Or(ahead, tie), tir.IntImm(1, "int64"), tir.IntImm(0, "int64")), axis=r)

    rank = te_.compute(x.shape, rank_body, name="rank")
    shape = list(x.shape)
    shape[a] = as_dim(k)
    s = te_.reduce_axis(x.shape[a], name="s")

    def index_body(*i):
        hit = tir.EQ(rank[at(i, s.var)], i[a].astype("int64"))
        return te_.sum(tir.Select(hit, s.var.astype("int64"), tir.IntImm(0, "int64")), axis=s)

    indices = te_.compute(tuple(shape), index_body, name="topk_indices")
    values = te_.compute(tuple(shape), lambda *i: x[at(i, indices[i].astype(i[a].dtype))], name="topk_values")
    return [values, indices]


def _np_topk(x, k, axis=-1, largest=True):
    key = -x if largest else x
    order = np.argsort(key, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)


register("topk", infer=_topk_infer, reference=_np_topk, legalize=_topk_te, pattern="opaque", doc="top-k")
