"""Shape and layout ATen ops: views, permutes, slicing, concatenation, splitting, padding."""
from __future__ import annotations

from ...ast import expr as tir
from ...ast.graph_struct_info import as_dim
from ...graph import op
from ...graph.shape_facts import const_value, prove, simplify
from .importer import converter, multi

BIG = 2 ** 62


def axis_of(ctx, axis: int, ndim: int) -> int:
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        ctx.fail(f"dim {axis} is out of range for a {ndim}-d tensor")
    return axis % max(ndim, 1)


def _reshape_to(ctx, x, shape):
    dims = [ctx.dim(d) for d in shape]
    return ctx.emit(op.reshape(x, dims))


@converter("aten.view.default", "aten.reshape.default", "aten._unsafe_view.default", "aten.view_copy.default")
def _view(ctx, node, args, kwargs):
    # torch resolved -1 while tracing; its recorded result shape is exact
    return _reshape_to(ctx, args[0], ctx.out_shape())


@converter("aten.flatten.using_ints", "aten.unflatten.int", "aten.view_as.default", "aten.reshape_as.default")
def _flatten(ctx, node, args, kwargs):
    return _reshape_to(ctx, args[0], ctx.out_shape())


@converter("aten.permute.default", "aten.permute_copy.default")
def _permute(ctx, node, args, kwargs):
    ndim = ctx.ndim(args[0])
    return ctx.emit(op.permute_dims(args[0], [axis_of(ctx, a, ndim) for a in args[1]]))


@converter("aten.transpose.int", "aten.swapaxes.default")
def _transpose(ctx, node, args, kwargs):
    x = args[0]
    ndim = ctx.ndim(x)
    if ndim < 2:
        return x
    a, b = axis_of(ctx, args[1], ndim), axis_of(ctx, args[2], ndim)
    perm = list(range(ndim))
    perm[a], perm[b] = perm[b], perm[a]
    return ctx.emit(op.permute_dims(x, perm))


@converter("aten.t.default", "aten.numpy_T.default")
def _t(ctx, node, args, kwargs):
    x = args[0]
    ndim = ctx.ndim(x)
    return x if ndim < 2 else ctx.emit(op.permute_dims(x, list(reversed(range(ndim)))))


@converter("aten.movedim.int")
def _movedim(ctx, node, args, kwargs):
    x = args[0]
    ndim = ctx.ndim(x)
    src, dst = axis_of(ctx, args[1], ndim), axis_of(ctx, args[2], ndim)
    perm = [k for k in range(ndim) if k != src]
    perm.insert(dst, src)
    return ctx.emit(op.permute_dims(x, perm))


@converter("aten.unsqueeze.default", "aten.unsqueeze_copy.default")
def _unsqueeze(ctx, node, args, kwargs):
    ndim = ctx.ndim(args[0]) + 1
    return ctx.emit(op.expand_dims(args[0], axis_of(ctx, args[1], ndim)))


@converter("aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default", "aten.squeeze_copy.dims")
def _squeeze(ctx, node, args, kwargs):
    x = args[0]
    shape = ctx.shape(x)
    if len(args) > 1:
        dims = args[1] if isinstance(args[1], (list, tuple)) else [args[1]]
        axes = [axis_of(ctx, d, len(shape)) for d in dims]
    else:
        axes = list(range(len(shape)))
    axes = [a for a in axes if const_value(shape[a]) == 1] if shape else []
    if not axes:
        return x
    return ctx.emit(op.squeeze(x, axes))


@converter("aten.expand.default", "aten.expand_copy.default", "aten.expand_as.default", "aten.broadcast_to.default")
def _expand(ctx, node, args, kwargs):
    x = args[0]
    target = ctx.out_shape()
    if tuple(ctx.shape(x)) == tuple(as_dim(d) for d in target):
        return x
    return ctx.emit(op.broadcast_to(x, target))


@converter("aten.contiguous.default", "aten.clone.default", "aten.alias.default", "aten.detach.default",
           "aten.lift_fresh_copy.default", "aten.dropout.default", "aten.feature_dropout.default",
           "aten.alpha_dropout.default", "aten.alias_copy.default", "aten.detach_copy.default")
def _identity(ctx, node, args, kwargs):
    if "dropout" in str(node.target) and (kwargs.get("train", args[2] if len(args) > 2 else False)):
        ctx.fail("training-mode dropout is not supported; export the model in eval mode")
    return args[0]


@converter("aten.native_dropout.default")
def _native_dropout(ctx, node, args, kwargs):
    if args[2]:
        ctx.fail("training-mode dropout is not supported; export the model in eval mode")
    return [args[0], ctx.emit(op.full_like(args[0], 1.0, dtype="bool"))]


# ----------------------------------------------------------------------------- slicing

def _static_or_big(ctx, value, dim):
    """A slice bound as an int, with an end at or past a symbolic dim's length read as "to the end"."""
    if value is None:
        return None
    bound = ctx.dim(value)
    if isinstance(bound, int):
        return bound
    if prove(tir.GE(as_dim(bound), as_dim(dim))).proved:
        return BIG
    return bound


def slice_axis(ctx, x, axis: int, start, end, step: int = 1):
    """x[start:end:step] along axis; symbolic bounds go through a gather of an index range."""
    shape = ctx.shape(x)
    dim = shape[axis]
    start = 0 if start is None else _static_or_big(ctx, start, dim)
    end = BIG if end is None else _static_or_big(ctx, end, dim)
    if isinstance(start, int) and isinstance(end, int):
        if start == 0 and end >= BIG and step == 1:
            return x
        return ctx.emit(op.strided_slice(x, [axis], [start], [min(end, BIG)], [step]))
    if step != 1:
        ctx.fail("a slice with symbolic bounds needs step 1")
    lo = as_dim(start) if not isinstance(start, int) or start >= 0 else simplify(as_dim(dim) + start)
    hi = as_dim(dim) if isinstance(end, int) and end >= BIG else (
        as_dim(end) if not isinstance(end, int) or end >= 0 else simplify(as_dim(dim) + end))
    hi = simplify(tir.Min(hi, as_dim(dim)))
    from .ops_create import index_range

    indices = index_range(ctx, lo, hi)
    return ctx.emit(op.take(x, indices, axis=axis))


@converter("aten.slice.Tensor", "aten.slice_copy.Tensor")
def _slice(ctx, node, args, kwargs):
    x = args[0]
    ndim = ctx.ndim(x)
    dim = axis_of(ctx, args[1] if len(args) > 1 else kwargs.get("dim", 0), ndim)
    start = args[2] if len(args) > 2 else kwargs.get("start")
    end = args[3] if len(args) > 3 else kwargs.get("end")
    step = args[4] if len(args) > 4 else kwargs.get("step", 1)
    return slice_axis(ctx, x, dim, start, end, int(step))


@converter("aten.narrow.default")
def _narrow(ctx, node, args, kwargs):
    x, dim, start, length = args
    axis = axis_of(ctx, dim, ctx.ndim(x))
    start = ctx.dim(start)
    end = simplify(as_dim(start) + as_dim(ctx.dim(length)))
    return slice_axis(ctx, x, axis, start, const_value(end) if const_value(end) is not None else end)


@converter("aten.select.int", "aten.select_copy.int")
def _select(ctx, node, args, kwargs):
    x, dim, index = args
    shape = ctx.shape(x)
    axis = axis_of(ctx, dim, len(shape))
    index = ctx.dim(index)
    if isinstance(index, int) and index < 0:
        n = const_value(shape[axis])
        index = n + index if n is not None else simplify(as_dim(shape[axis]) + index)
    if isinstance(index, int):
        picked = ctx.scalar(index, "int64")
    else:
        from .symbolic import as_tensor

        picked = as_tensor(ctx, index)
    return ctx.emit(op.take(x, picked, axis=axis))


@converter("aten.cat.default", "aten.concat.default", "aten.concatenate.default")
def _cat(ctx, node, args, kwargs):
    tensors = [t for t in args[0] if not (ctx.shape(t) == (as_dim(0),) and len(args[0]) > 1)]
    dtype = ctx.out_dtype()
    tensors = [ctx.tensor(t, dtype) for t in tensors]
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    axis = axis_of(ctx, dim, ctx.ndim(tensors[0]))
    if len(tensors) == 1:
        return tensors[0]
    return ctx.emit(op.concat(tensors, axis=axis))


@converter("aten.stack.default")
def _stack(ctx, node, args, kwargs):
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    dtype = ctx.out_dtype()
    axis = axis_of(ctx, dim, ctx.ndim(args[0][0]) + 1)
    parts = [ctx.emit(op.expand_dims(ctx.tensor(t, dtype), axis)) for t in args[0]]
    return parts[0] if len(parts) == 1 else ctx.emit(op.concat(parts, axis=axis))


def _split_at(ctx, x, axis, sizes):
    bounds, start = [], 0
    for s in sizes[:-1]:
        start += s
        bounds.append(start)
    if not bounds:
        return [x]
    return multi(ctx, ctx.emit(op.split(x, bounds, axis=axis)), len(sizes))


def _lengths(ctx, x, axis, size):
    n = const_value(as_dim(ctx.shape(x)[axis]))
    if n is None:
        ctx.fail("splitting a symbolic dim is not supported")
    return [min(size, n - k) for k in range(0, n, size)] or [0]


@converter("aten.split.Tensor", "aten.split_copy.Tensor")
def _split(ctx, node, args, kwargs):
    x, size = args[0], args[1]
    axis = axis_of(ctx, args[2] if len(args) > 2 else kwargs.get("dim", 0), ctx.ndim(x))
    if isinstance(size, (list, tuple)):
        return _split_at(ctx, x, axis, [int(s) for s in size])
    return _split_at(ctx, x, axis, _lengths(ctx, x, axis, int(size)))


@converter("aten.split_with_sizes.default", "aten.split_with_sizes_copy.default")
def _split_sizes(ctx, node, args, kwargs):
    x = args[0]
    axis = axis_of(ctx, args[2] if len(args) > 2 else kwargs.get("dim", 0), ctx.ndim(x))
    return _split_at(ctx, x, axis, [int(ctx.dim(s)) for s in args[1]])


@converter("aten.chunk.default")
def _chunk(ctx, node, args, kwargs):
    x, chunks = args[0], int(args[1])
    axis = axis_of(ctx, args[2] if len(args) > 2 else kwargs.get("dim", 0), ctx.ndim(x))
    n = const_value(as_dim(ctx.shape(x)[axis]))
    if n is None:
        ctx.fail("chunking a symbolic dim is not supported")
    size = -(-n // chunks)
    return _split_at(ctx, x, axis, _lengths(ctx, x, axis, max(size, 1)))


@converter("aten.unbind.int", "aten.unbind_copy.int")
def _unbind(ctx, node, args, kwargs):
    x = args[0]
    axis = axis_of(ctx, args[1] if len(args) > 1 else kwargs.get("dim", 0), ctx.ndim(x))
    n = const_value(as_dim(ctx.shape(x)[axis]))
    if n is None:
        ctx.fail("unbinding a symbolic dim is not supported")
    return [ctx.emit(op.squeeze(p, [axis])) for p in _split_at(ctx, x, axis, [1] * n)]


@converter("aten.flip.default")
def _flip(ctx, node, args, kwargs):
    x = args[0]
    ndim = ctx.ndim(x)
    for a in args[1]:
        x = ctx.emit(op.flip(x, axis_of(ctx, a, ndim)))
    return x


@converter("aten.roll.default")
def _roll(ctx, node, args, kwargs):
    x = args[0]
    shifts = args[1] if isinstance(args[1], (list, tuple)) else [args[1]]
    dims = args[2] if len(args) > 2 else kwargs.get("dims", [])
    dims = dims if isinstance(dims, (list, tuple)) else [dims]
    if not dims:
        shape = ctx.shape(x)
        flat = ctx.emit(op.reshape(x, [-1]))
        rolled = _roll_axis(ctx, flat, 0, shifts[0])
        return ctx.emit(op.reshape(rolled, list(shape)))
    for shift, dim in zip(shifts, dims):
        x = _roll_axis(ctx, x, axis_of(ctx, dim, ctx.ndim(x)), shift)
    return x


def _roll_axis(ctx, x, axis, shift):
    n = const_value(as_dim(ctx.shape(x)[axis]))
    if n is None:
        ctx.fail("rolling a symbolic dim is not supported")
    if n == 0 or shift % n == 0:
        return x
    k = shift % n
    head = ctx.emit(op.strided_slice(x, [axis], [n - k], [n], [1]))
    tail = ctx.emit(op.strided_slice(x, [axis], [0], [n - k], [1]))
    return ctx.emit(op.concat([head, tail], axis=axis))


@converter("aten.repeat.default")
def _repeat(ctx, node, args, kwargs):
    x, repeats = args[0], [int(r) for r in args[1]]
    ndim = ctx.ndim(x)
    if len(repeats) > ndim:
        x = ctx.emit(op.reshape(x, [1] * (len(repeats) - ndim) + list(ctx.shape(x))))
    return ctx.emit(op.tile(x, repeats))


@converter("aten.tile.default")
def _tile(ctx, node, args, kwargs):
    x, repeats = args[0], [int(r) for r in args[1]]
    ndim = ctx.ndim(x)
    repeats = [1] * (ndim - len(repeats)) + repeats
    return _repeat(ctx, node, [x, repeats], {})


@converter("aten.repeat_interleave.self_int")
def _repeat_interleave(ctx, node, args, kwargs):
    x, repeats = args[0], int(args[1])
    dim = args[2] if len(args) > 2 else kwargs.get("dim")
    if dim is None:
        return ctx.emit(op.repeat(ctx.emit(op.reshape(x, [-1])), repeats, axis=0))
    return ctx.emit(op.repeat(x, repeats, axis=axis_of(ctx, dim, ctx.ndim(x))))


@converter("aten.constant_pad_nd.default", "aten.pad.default")
def _pad(ctx, node, args, kwargs):
    x, pads = args[0], [int(p) for p in args[1]]
    mode = args[2] if "aten.pad" in str(node.target) and len(args) > 2 else kwargs.get("mode", "constant")
    value = args[3] if "aten.pad" in str(node.target) and len(args) > 3 else (
        args[2] if "constant_pad" in str(node.target) and len(args) > 2 else kwargs.get("value", 0.0))
    ndim = ctx.ndim(x)
    width = [[0, 0] for _ in range(ndim)]
    for k in range(len(pads) // 2):
        width[ndim - 1 - k] = [pads[2 * k], pads[2 * k + 1]]
    if any(p < 0 for w in width for p in w):
        ctx.fail("negative padding is not supported")
    mode = {"replicate": "edge"}.get(mode, mode)
    if mode not in ("constant", "reflect", "edge"):
        ctx.fail(f"pad mode {mode!r} is not supported")
    return ctx.emit(op.pad(x, width, float(value or 0.0), mode))


@converter("aten.reflection_pad1d.default", "aten.reflection_pad2d.default", "aten.replication_pad1d.default",
           "aten.replication_pad2d.default")
def _pad_modes(ctx, node, args, kwargs):
    mode = "reflect" if "reflection" in str(node.target) else "replicate"
    return _pad(ctx, node, [args[0], args[1]], {"mode": mode})
