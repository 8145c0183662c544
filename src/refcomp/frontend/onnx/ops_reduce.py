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
    name = REDUCE[node.op_type]
    if name == "log_sum":
        return ctx.emit(op.log(op.sum(x, axis=axis, keepdims=keepdims)))
    if name == "mean" and not ctx.info(x).dtype.is_float:
        ctx.fail("ReduceMean of integers is not supported")
    return ctx.emit(getattr(op, name)(x, axis=axis, keepdims=keepdims))


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
