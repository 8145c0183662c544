"""Indexing ATen ops: advanced indexing (index.Tensor), gather, index_select, embedding, scatter, diff, one_hot."""
from __future__ import annotations

from ...graph import op
from ...graph.shape_facts import product
from .importer import converter
from .ops_shape import axis_of, slice_axis


def wrapped(ctx, indices, dim):
    """Integer indices with negative ones counted from the end of a dim of length `dim` (as int64)."""
    idx = ctx.tensor(indices, "int64")
    from .symbolic import as_tensor

    dim = ctx.dim(dim)
    length = ctx.scalar(dim, "int64") if isinstance(dim, int) else as_tensor(ctx, dim)
    zero = ctx.scalar(0, "int64")
    return ctx.emit(op.where(op.less(idx, zero), op.add(idx, length), idx))


@converter("aten.index.Tensor")
def _index(ctx, node, args, kwargs):
    """x[i0, i1, ...] with leading index tensors (None keeps a dim); the indices broadcast together.

    Adjacent index tensors starting at dim 0 are folded into one index into x reshaped so those
    dims are one (a row-major linear index), then gathered with take.
    """
    x, indices = args[0], list(args[1])
    shape = ctx.shape(x)
    lead = 0
    while lead < len(indices) and indices[lead] is None:
        lead += 1
    used = [i for i in indices[lead:] if i is not None]
    if len(used) != len(indices) - lead:
        ctx.fail("index tensors separated by a full slice are not supported")
    for i in used:
        if ctx.dtype(i) == "bool":
            ctx.fail("boolean mask indexing has a data-dependent shape and is not supported")
    k = len(used)
    dims = shape[lead:lead + k]
    linear = None
    for i, d in zip(used, dims):
        idx = wrapped(ctx, i, d)
        linear = idx if linear is None else ctx.emit(op.add(op.multiply(linear, _length(ctx, d)), idx))
    collapsed = list(shape[:lead]) + [product(dims)] + list(shape[lead + k:])
    flat = ctx.emit(op.reshape(x, collapsed)) if k != 1 else x
    return ctx.emit(op.take(flat, linear, axis=lead))


def _length(ctx, d):
    from .symbolic import as_tensor

    dim = ctx.dim(d)
    return ctx.scalar(dim, "int64") if isinstance(dim, int) else as_tensor(ctx, dim)


@converter("aten.index_select.default")
def _index_select(ctx, node, args, kwargs):
    x, dim, index = args
    axis = axis_of(ctx, dim, ctx.ndim(x))
    return ctx.emit(op.take(x, wrapped(ctx, index, ctx.shape(x)[axis]), axis=axis))


@converter("aten.gather.default")
def _gather(ctx, node, args, kwargs):
    x, dim, index = args[0], args[1], args[2]
    axis = axis_of(ctx, dim, ctx.ndim(x))
    return ctx.emit(op.gather_elements(x, wrapped(ctx, index, ctx.shape(x)[axis]), axis=axis))


@converter("aten.take_along_dim.default")
def _take_along_dim(ctx, node, args, kwargs):
    x, index = args[0], args[1]
    dim = args[2] if len(args) > 2 else kwargs.get("dim")
    if dim is None:
        ctx.fail("take_along_dim without dim is not supported")
    return _gather(ctx, node, [x, dim, index], {})


@converter("aten.embedding.default")
def _embedding(ctx, node, args, kwargs):
    weight, ids = args[0], args[1]
    return ctx.emit(op.embedding(weight, ctx.tensor(ids, "int64")))


@converter("aten.scatter.src", "aten.scatter.value", "aten.scatter_add.default", "aten.scatter.reduce",
           "aten.scatter_reduce.two")
def _scatter(ctx, node, args, kwargs):
    x, dim, index, src = args[0], args[1], args[2], args[3]
    target = str(node.target)
    dtype = ctx.out_dtype()
    axis = axis_of(ctx, dim, ctx.ndim(x))
    if not hasattr(src, "struct_info"):
        src = ctx.emit(op.broadcast_to(ctx.scalar(src, dtype), list(ctx.shape(index))))
    reduction = "add" if "scatter_add" in target else "none"
    if "reduce" in target:
        mode = args[4] if len(args) > 4 else kwargs.get("reduce")
        reduction = {"sum": "add", "add": "add", "prod": "mul", "multiply": "mul", "amax": "max",
                     "amin": "min"}.get(mode)
        if reduction is None or not kwargs.get("include_self", True):
            ctx.fail(f"scatter reduction {mode!r} is not supported")
    idx = wrapped(ctx, index, ctx.shape(x)[axis])
    return ctx.emit(op.scatter_elements(x, idx, ctx.tensor(src, dtype), axis=axis, reduction=reduction))


@converter("aten.diff.default")
def _diff(ctx, node, args, kwargs):
    x = args[0]
    n = int(args[1] if len(args) > 1 else kwargs.get("n", 1))
    dim = args[2] if len(args) > 2 else kwargs.get("dim", -1)
    prepend = args[3] if len(args) > 3 else kwargs.get("prepend")
    append = args[4] if len(args) > 4 else kwargs.get("append")
    axis = axis_of(ctx, dim, ctx.ndim(x))
    parts = [p for p in (prepend, x, append) if p is not None]
    if len(parts) > 1:
        x = ctx.emit(op.concat([ctx.tensor(p, ctx.dtype(x)) for p in parts], axis=axis))
    for _ in range(n):
        later = slice_axis(ctx, x, axis, 1, None)
        earlier = slice_axis(ctx, x, axis, 0, -1)
        if ctx.dtype(x) == "bool":
            x = ctx.emit(op.logical_xor(later, earlier))
        else:
            x = ctx.emit(op.subtract(later, earlier))
    return x


@converter("aten.one_hot.default")
def _one_hot(ctx, node, args, kwargs):
    classes = int(args[1] if len(args) > 1 else kwargs.get("num_classes", -1))
    if classes < 0:
        ctx.fail("one_hot needs num_classes (it is data-dependent otherwise)")
    return ctx.emit(op.one_hot(ctx.tensor(args[0], "int64"), classes, 1, 0, -1, "int64"))

