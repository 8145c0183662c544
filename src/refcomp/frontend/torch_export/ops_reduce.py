"""Reduction ATen ops: sum/mean/amax/amin/prod, var/std, argmax, any/all, max/min with indices, scans, softmax."""
from __future__ import annotations

import numpy as np

from ...ast.graph_struct_info import as_dim
from ...graph import op
from ...graph.shape_facts import const_value
from .importer import converter
from .ops_shape import axis_of


def _axes(ctx, x, dims):
    ndim = ctx.ndim(x)
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return None
    dims = dims if isinstance(dims, (list, tuple)) else [dims]
    return sorted({axis_of(ctx, d, ndim) for d in dims})


def _reduce(name, float_result=False):
    def convert(ctx, node, args, kwargs):
        x = args[0]
        dims = args[1] if len(args) > 1 else kwargs.get("dim")
        keepdim = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
        dtype = ctx.out_dtype()
        if name in ("sum", "prod") and ctx.dtype(x) == "bool" or float_result or "dtype" in kwargs:
            x = ctx.tensor(x, dtype)
        if ctx.ndim(x) == 0:
            return x
        return ctx.cast(ctx.emit(getattr(op, name)(x, axis=_axes(ctx, x, dims), keepdims=keepdim)), dtype)
    return convert


converter("aten.sum.dim_IntList", "aten.sum.default")(_reduce("sum"))
converter("aten.mean.dim", "aten.mean.default")(_reduce("mean", float_result=True))
converter("aten.amax.default")(_reduce("max"))
converter("aten.amin.default")(_reduce("min"))
converter("aten.max.default")(_reduce("max"))
converter("aten.min.default")(_reduce("min"))
converter("aten.logsumexp.default")(_reduce("logsumexp", float_result=True))


@converter("aten.prod.dim_int", "aten.prod.default")
def _prod(ctx, node, args, kwargs):
    x = args[0]
    dim = args[1] if len(args) > 1 and not isinstance(args[1], str) else kwargs.get("dim")
    keepdim = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
    x = ctx.tensor(x, ctx.out_dtype())
    if ctx.ndim(x) == 0:
        return x
    return ctx.emit(op.prod(x, axis=_axes(ctx, x, dim), keepdims=keepdim))


def _bool_reduce(is_any):
    def convert(ctx, node, args, kwargs):
        x = args[0]
        dims = args[1] if len(args) > 1 else kwargs.get("dim")
        keepdim = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
        flags = ctx.tensor(x, "bool")
        if ctx.ndim(flags) == 0:
            return flags
        as_int = ctx.cast(flags, "int32")
        fn = op.max if is_any else op.min
        return ctx.cast(ctx.emit(fn(as_int, axis=_axes(ctx, x, dims), keepdims=keepdim)), "bool")
    return convert


converter("aten.any.dim", "aten.any.dims", "aten.any.default")(_bool_reduce(True))
converter("aten.all.dim", "aten.all.dims", "aten.all.default")(_bool_reduce(False))


def _correction_keepdim(node, args, kwargs):
    """(correction, keepdim) of var/std/var_mean: the .dim overloads take unbiased and keepdim by
    position, the .correction ones by keyword (correction None meaning 1)."""
    if str(node.target).endswith(".dim"):
        unbiased = args[2] if len(args) > 2 else kwargs.get("unbiased", True)
        return (1 if unbiased else 0), bool(args[3] if len(args) > 3 else kwargs.get("keepdim", False))
    correction = kwargs.get("correction")
    return (1 if correction is None else correction), bool(kwargs.get("keepdim", False))


def _variance(sqrt):
    def convert(ctx, node, args, kwargs):
        x = args[0]
        dims = args[1] if len(args) > 1 else kwargs.get("dim")
        correction, keepdim = _correction_keepdim(node, args, kwargs)
        axes = _axes(ctx, x, dims)
        var = ctx.emit(op.variance(x, axis=axes, keepdims=keepdim))
        if correction:  # the population variance scaled by n / (n - correction)
            shape, count = ctx.shape(x), 1
            for a in (axes if axes is not None else range(len(shape))):
                n = const_value(as_dim(shape[a]))
                if n is None:
                    ctx.fail("a corrected variance over a symbolic dim is not supported")
                count *= n
            var = ctx.emit(op.multiply(var, ctx.scalar(count / max(count - correction, 0) if count > correction
                                                       else np.inf, ctx.dtype(x))))
        return ctx.emit(op.sqrt(var)) if sqrt else var
    return convert


converter("aten.var.correction", "aten.var.dim")(_variance(False))
converter("aten.std.correction", "aten.std.dim")(_variance(True))


@converter("aten.var_mean.correction", "aten.var_mean.dim")
def _var_mean(ctx, node, args, kwargs):
    x = args[0]
    dims = args[1] if len(args) > 1 else kwargs.get("dim")
    var = _variance(False)(ctx, node, args, kwargs)
    keepdim = _correction_keepdim(node, args, kwargs)[1]
    mean = ctx.emit(op.mean(x, axis=_axes(ctx, x, dims), keepdims=keepdim))
    return [var, mean]


def _arg(name):
    def convert(ctx, node, args, kwargs):
        x = args[0]
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        keepdim = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
        if dim is None:
            result = ctx.emit(getattr(op, name)(ctx.emit(op.reshape(x, [-1])), axis=0, keepdims=False))
            if keepdim:
                result = ctx.emit(op.reshape(result, [1] * ctx.ndim(x)))
            return result
        return ctx.emit(getattr(op, name)(x, axis=axis_of(ctx, dim, ctx.ndim(x)), keepdims=keepdim))
    return convert


converter("aten.argmax.default")(_arg("argmax"))
converter("aten.argmin.default")(_arg("argmin"))


def _extreme_with_index(is_max):
    def convert(ctx, node, args, kwargs):
        x, dim = args[0], args[1]
        keepdim = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
        axis = axis_of(ctx, dim, ctx.ndim(x))
        values = ctx.emit((op.max if is_max else op.min)(x, axis=[axis], keepdims=keepdim))
        indices = ctx.emit((op.argmax if is_max else op.argmin)(x, axis=axis, keepdims=keepdim))
        return [values, indices]
    return convert


converter("aten.max.dim")(_extreme_with_index(True))
converter("aten.min.dim")(_extreme_with_index(False))


def _scan(name):
    def convert(ctx, node, args, kwargs):
        x = ctx.tensor(args[0], ctx.out_dtype())
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        if ctx.ndim(x) == 0:
            return x
        return ctx.emit(getattr(op, name)(x, axis=axis_of(ctx, dim, ctx.ndim(x))))
    return convert


converter("aten.cumsum.default")(_scan("cumsum"))
converter("aten.cumprod.default")(_scan("cumprod"))


def _softmax(log):
    def convert(ctx, node, args, kwargs):
        x = ctx.tensor(args[0], ctx.out_dtype())
        axis = axis_of(ctx, args[1], ctx.ndim(x))
        if ctx.ndim(x) == 0:
            return ctx.emit(op.full_like(x, 0.0 if log else 1.0))
        return ctx.emit((op.log_softmax if log else op.softmax)(x, axis=axis))
    return convert


converter("aten.softmax.int", "aten._softmax.default", "aten._safe_softmax.default")(_softmax(False))
converter("aten.log_softmax.int", "aten._log_softmax.default")(_softmax(True))


@converter("aten.topk.default")
def _topk(ctx, node, args, kwargs):
    x, k = args[0], int(args[1])
    dim = args[2] if len(args) > 2 else kwargs.get("dim", -1)
    largest = bool(args[3] if len(args) > 3 else kwargs.get("largest", True))
    from .importer import multi

    result = ctx.emit(op.topk(x, k, axis=axis_of(ctx, dim, ctx.ndim(x)), largest=largest))
    return multi(ctx, result, 2)


@converter("aten.linalg_vector_norm.default", "aten.norm.ScalarOpt_dim")
def _vector_norm(ctx, node, args, kwargs):
    x = ctx.tensor(args[0], ctx.out_dtype())
    order = args[1] if len(args) > 1 else kwargs.get("ord", 2)
    dims = args[2] if len(args) > 2 else kwargs.get("dim")
    keepdim = bool(args[3] if len(args) > 3 else kwargs.get("keepdim", False))
    axes = _axes(ctx, x, dims)
    if order == 2:
        return ctx.emit(op.l2_norm(x, axis=axes, keepdims=keepdim))
    if order == 1:
        return ctx.emit(op.l1_norm(x, axis=axes, keepdims=keepdim))
    if order in (float("inf"), float("-inf")):
        fn = op.max if order > 0 else op.min
        return ctx.emit(fn(op.abs(x), axis=axes, keepdims=keepdim))
    ctx.fail(f"vector norm of order {order} is not supported")
