"""Tensor-creating ATen ops: arange (symbolic bounds too), full/zeros/ones and their _like/new_ forms, tril/triu."""
from __future__ import annotations

import numpy as np

from ...ast.graph_struct_info import as_dim
from ...graph import op
from ...graph.shape_facts import const_value, simplify
from .importer import converter


def index_range(ctx, lo, hi):
    """The int64 tensor [lo, lo+1, ..., hi-1] for size expressions lo <= hi."""
    lo_c, hi_c = const_value(as_dim(lo)), const_value(as_dim(hi))
    if lo_c is not None and hi_c is not None:
        return ctx.emit(op.arange(lo_c, max(hi_c, lo_c), 1, "int64"))
    length = simplify(as_dim(hi) - as_dim(lo))
    ones = ctx.emit(op.full((length,), 1, "int64"))
    counted = ctx.emit(op.cumsum(ones, axis=0))  # 1, 2, ..., length
    offset = lo_c - 1 if lo_c is not None else None
    if offset is not None:
        return ctx.emit(op.add(counted, ctx.scalar(offset, "int64"))) if offset else counted
    from .symbolic import as_tensor

    return ctx.emit(op.add(counted, op.subtract(as_tensor(ctx, lo), ctx.scalar(1, "int64"))))


def _arange(ctx, start, end, step):
    dtype = ctx.out_dtype()
    n = ctx.out_shape()[0]
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (start, end, step)):
        if np.dtype(dtype).kind == "f" or any(isinstance(v, float) for v in (start, end, step)):
            values = np.arange(n, dtype=np.float64) * step + start  # torch computes start + k * step
            from ...ast.graph import Constant

            return Constant(values.astype(np.dtype(dtype)))
        return ctx.emit(op.arange(int(start), int(end), int(step), dtype))
    if isinstance(step, (int, float)) and step == 1 and isinstance(start, int):
        idx = index_range(ctx, start, simplify(as_dim(start) + as_dim(n)))
        return ctx.cast(idx, dtype)
    k = ctx.cast(index_range(ctx, 0, n), dtype)
    return ctx.emit(op.add(ctx.tensor(start, dtype), op.multiply(k, ctx.tensor(step, dtype))))


@converter("aten.arange.default")
def _arange_end(ctx, node, args, kwargs):
    return _arange(ctx, 0, args[0], 1)


@converter("aten.arange.start")
def _arange_start(ctx, node, args, kwargs):
    return _arange(ctx, args[0], args[1], 1)


@converter("aten.arange.start_step")
def _arange_step(ctx, node, args, kwargs):
    return _arange(ctx, args[0], args[1], args[2] if len(args) > 2 else kwargs.get("step", 1))


def _fill(ctx, value, shape=None):
    dtype = ctx.out_dtype()
    shape = ctx.out_shape() if shape is None else shape
    if not isinstance(value, (bool, int, float)):
        from .symbolic import as_tensor

        return ctx.emit(op.broadcast_to(ctx.cast(as_tensor(ctx, value), dtype), shape))
    if not shape or all(isinstance(d, int) for d in shape):
        from ...ast.graph import Constant

        return Constant(np.full([int(d) for d in shape], value, dtype=np.dtype(dtype)))
    return ctx.emit(op.full(shape, float(value), dtype))


@converter("aten.full.default")
def _full(ctx, node, args, kwargs):
    return _fill(ctx, args[1])


@converter("aten.zeros.default", "aten.empty.memory_format", "aten.new_zeros.default", "aten.new_empty.default",
           "aten.zeros_like.default", "aten.empty_like.default")
def _zeros(ctx, node, args, kwargs):
    return _fill(ctx, 0)


@converter("aten.ones.default", "aten.new_ones.default", "aten.ones_like.default")
def _ones(ctx, node, args, kwargs):
    return _fill(ctx, 1)


@converter("aten.full_like.default", "aten.new_full.default")
def _full_like(ctx, node, args, kwargs):
    return _fill(ctx, args[2] if "new_full" in str(node.target) else args[1])


@converter("aten.scalar_tensor.default")
def _scalar_tensor(ctx, node, args, kwargs):
    return _fill(ctx, args[0], ())


@converter("aten.tril.default", "aten.triu.default")
def _tri(ctx, node, args, kwargs):
    k = int(args[1] if len(args) > 1 else kwargs.get("diagonal", 0))
    fn = op.tril if "tril" in str(node.target) else op.triu
    return ctx.emit(fn(args[0], k))


@converter("aten.eye.default", "aten.eye.m")
def _eye(ctx, node, args, kwargs):
    shape = ctx.out_shape()
    if not all(isinstance(d, int) for d in shape):
        ctx.fail("eye with symbolic sizes is not supported")
    from ...ast.graph import Constant

    return Constant(np.eye(shape[0], shape[1], dtype=np.dtype(ctx.out_dtype())))


@converter("aten._to_copy.default", "aten.to.dtype", "aten.to.dtype_layout", "aten.to.device", "aten.type_as.default",
           "aten.to.other", "aten._to_dim_order_copy.default")
def _to(ctx, node, args, kwargs):
    return ctx.cast(args[0], ctx.out_dtype())
