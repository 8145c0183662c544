"""ONNX reductions: Reduce*, ArgMax/ArgMin (axes as attribute or, from opset 13/18, as an input)."""
from __future__ import annotations

import numpy as np

from ...ast.graph import Constant
from ...graph import op
from .importer import converter

REDUCE = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min", "ReduceProd": "prod",
          "ReduceL1": "l1_norm", "ReduceL2": "l2_norm", "ReduceSumSquare": "sum_square",
          "ReduceLogSumExp": "logsumexp", "ReduceLogSum": "log_sum"}


@converter(*REDUCE)
def _reduce(ctx, node, inputs, attrs):
    x = inputs[0]
    keepdims = bool(attrs.get("keepdims", 1))
    if len(inputs) > 1 and inputs[1] is not None and not isinstance(inputs[1], Constant):
        return _reduce_runtime_axes(ctx, node, x, inputs[1], keepdims, bool(attrs.get("noop_with_empty_axes", 0)))
    if len(inputs) > 1 and inputs[1] is not None:
        axes = [int(a) for a in np.asarray(ctx.constant(inputs[1], "axes")).reshape(-1)]
    else:
        axes = attrs.get("axes")
        axes = None if axes is None else list(axes)
    if axes is not None and not axes:
        axes = None
    if axes is None and attrs.get("noop_with_empty_axes", 0):
        return x
    ndim = ctx.info(x).ndim
    axis = None if axes is None else tuple(sorted(a % ndim for a in axes))
    return _reduce_call(ctx, node, x, axis, keepdims)


def _reduce_call(ctx, node, x, axis, keepdims):
    name = REDUCE[node.op_type]
    if name == "log_sum":
        return ctx.emit(op.log(op.sum(x, axis=axis, keepdims=keepdims)))
    if name == "mean" and not ctx.info(x).dtype.is_float:
        ctx.fail("ReduceMean of integers is not supported")
    return ctx.emit(getattr(op, name)(x, axis=axis, keepdims=keepdims))


def _reduce_runtime_axes(ctx, node, x, axes_value, keepdims: bool, noop: bool):
    """A reduction whose axes are a run-time tensor of static length k.

    The axes, made non-negative, are read at run time into size vars a_0..a_k-1 (checked: each
    below the rank, all distinct).  Each axis j splits into (kept extent, reduced extent): (1, d_j)
    when j is reduced, else (d_j, 1), expressions over the a_i.  x is reshaped to the interleaved
    extents (the same element count for every value of the a_i, which the prover sees) and
    reduced over every second axis: one reduction whatever the axes are.  Without keepdims the
    kept dims are gathered in order into r - k dims, the last one taking any surplus, so the
    element count again agrees for every a_i.
    """
    from ...ast import expr as tir
    from ...ast.graph_struct_info import as_dim
    from .runtime_values import require, runtime_sizes

    shape = [as_dim(d) for d in ctx.static_shape(x)]
    r = len(shape)
    empty = any(const_zero(d) for d in shape)
    axes_value = ctx.emit(op.astype(axes_value, "int64")) if str(ctx.info(axes_value).dtype) != "int64" \
        else axes_value
    rank = Constant(np.asarray(r, np.int64))
    zero = Constant(np.asarray(0, np.int64))
    normal = ctx.emit(op.where(ctx.emit(op.less(axes_value, zero)), ctx.emit(op.add(axes_value, rank)), axes_value))
    axes = runtime_sizes(ctx, normal, "axis")
    if not axes:
        return x if noop else _reduce_call(ctx, node, x, None, keepdims)
    i64 = lambda v: tir.IntImm(v, "int64")  # noqa: E731
    valid = [a < i64(r) for a in axes] + [tir.NE(p, q) for k, p in enumerate(axes) for q in axes[k + 1:]]
    require(ctx, tir.all_(*valid), "axes")
    if len(axes) >= r:  # every axis, in some order
        return _reduce_call(ctx, node, x, None, keepdims)
    reduced = [tir.any_(*(tir.EQ(a, i64(j)) for a in axes)) for j in range(r)]
    kept = [tir.Select(c, i64(1), d) for c, d in zip(reduced, shape)]
    extent = [tir.Select(c, d, i64(1)) for c, d in zip(reduced, shape)]
    split = [s for j in range(r) for s in (kept[j], extent[j])]
    if empty:  # every output element reduces nothing: the reduction's identity
        y = ctx.emit(op.full(kept, _identity(node.op_type, ctx.info(x).dtype), ctx.info(x).dtype))
    else:
        y = _reduce_call(ctx, node, ctx.emit(op.reshape(x, split)), tuple(range(1, 2 * r, 2)), False)
    if not keepdims:
        n_out = r - len(axes)
        position = [sum((tir.Select(c, i64(0), i64(1)) for c in reduced[:j]), i64(0)) for j in range(r)]

        def dim(t):
            at = (lambda p: tir.EQ(p, i64(t))) if t < n_out - 1 else (lambda p: p >= i64(t))
            factors = [tir.Select(tir.all_(tir.Not(reduced[j]), at(position[j])), shape[j], i64(1))
                       for j in range(r)]
            out = factors[0]
            for f in factors[1:]:
                out = out * f
            return out

        y = ctx.emit(op.reshape(y, [dim(t) for t in range(n_out)]))
    elif ctx.info(y).ndim != r:
        y = ctx.emit(op.reshape(y, kept))
    return y


def _identity(op_type: str, dtype):
    """The value of a reduction over no elements."""
    low, high = (-np.inf, np.inf) if dtype.is_float else (np.iinfo(dtype.numpy()).min, np.iinfo(dtype.numpy()).max)
    return {"ReduceMax": low, "ReduceMin": high, "ReduceProd": 1, "ReduceLogSumExp": -np.inf,
            "ReduceLogSum": -np.inf, "ReduceMean": np.nan}.get(op_type, 0)


def const_zero(d) -> bool:
    from ...graph.shape_facts import const_value

    return const_value(d) == 0


@converter("ArgMax", "ArgMin")
def _arg(ctx, node, inputs, attrs):
    x = inputs[0]
    axis = attrs.get("axis", 0)
    keepdims = bool(attrs.get("keepdims", 1))
    fn = op.argmax if node.op_type == "ArgMax" else op.argmin
    if attrs.get("select_last_index", 0):
        flipped = ctx.emit(op.flip(x, (axis,)))
        idx = ctx.emit(fn(flipped, axis=axis, keepdims=keepdims))
        n = ctx.static_shape(x)[axis % ctx.info(x).ndim]
        from ...graph.shape_facts import const_value

        last = Constant(np.asarray(const_value(n) - 1, np.int64))
        return ctx.emit(op.subtract(last, idx))
    return ctx.emit(fn(x, axis=axis, keepdims=keepdims))
