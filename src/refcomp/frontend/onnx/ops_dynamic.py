"""Converters for shape operands read at run time: Reshape, Expand, Tile and ConstantOfShape
targets, (Un)Squeeze axes, CumSum/CumProd's axis, Split sizes, TopK's k, OneHot's depth, Pad's
pads, Slice bounds, Range bounds, Compress's condition.

Each reads the operand into vars bound when the program runs (runtime_values), derives the
output dims as expressions over them and, where the element count cannot be seen to agree for
every value, checks it at run time: the data, flattened, is matched against the product of the
new dims before the reshape (`checked_reshape`).  An output axis of run-time length is gathered
from index tensors of that length (`runtime_arange`).
"""
from __future__ import annotations

import numpy as np

from ...ast import expr as tir
from ...ast.graph import Constant
from ...ast.graph_struct_info import TensorStructInfo, as_dim
from ...graph import op
from ...graph.shape_facts import const_value, product
from .runtime_values import bind_sizes, require, runtime_ints, runtime_sizes


def i64(v: int):
    return tir.IntImm(v, "int64")


def prod_i64(values):
    out = i64(1)
    for v in values:
        out = out * v
    return out


def checked_reshape(ctx, x, dims, what: str):
    """x reshaped to dims (expressions over run-time vars), the element count checked at run time."""
    sizes = bind_sizes(ctx, dims, what)
    info = ctx.info(x)
    flat = ctx.emit(op.reshape(x, (product(info.shape),)))
    count = prod_i64(as_dim(s) for s in sizes)
    matched = ctx.bb.match_cast(flat, TensorStructInfo((count,), info.dtype))
    return ctx.emit(op.reshape(matched, tuple(sizes)))


def _normalized_sizes(ctx, value, rank: int, what: str):
    """A run-time axes tensor made non-negative and read into size vars (each checked < rank)."""
    if str(ctx.info(value).dtype) != "int64":
        value = ctx.emit(op.astype(value, "int64"))
    zero = Constant(np.asarray(0, np.int64))
    wrapped = ctx.emit(op.add(value, Constant(np.asarray(rank, np.int64))))
    value = ctx.emit(op.where(ctx.emit(op.less(value, zero)), wrapped, value))
    axes = runtime_sizes(ctx, value, what)
    valid = [a < i64(rank) for a in axes] + [tir.NE(p, q) for k, p in enumerate(axes) for q in axes[k + 1:]]
    if valid:
        require(ctx, tir.all_(*valid), what)
    return axes


def reshape_runtime(ctx, x, shape_value, allowzero: bool):
    """ONNX Reshape to a run-time target (0 copies the input dim unless allowzero, -1 is inferred)."""
    dims = [as_dim(d) for d in ctx.static_shape(x)]
    target = runtime_ints(ctx, shape_value, "shape")
    total = product(dims)
    given = []
    for k, t in enumerate(target):
        given.append(tir.Select(tir.EQ(t, i64(0)), dims[k], t) if k < len(dims) and not allowzero else t)
    known = prod_i64(tir.Select(tir.EQ(g, i64(-1)), i64(1), g) for g in given)
    out = [tir.Select(tir.EQ(g, i64(-1)), tir.FloorDiv(as_dim(total), tir.Max(known, i64(1))), g) for g in given]
    return checked_reshape(ctx, x, out, "reshape_dim")


def unsqueeze_runtime(ctx, x, axes_value):
    dims = [as_dim(d) for d in ctx.static_shape(x)]
    from ...graph.shape_facts import const_value

    info = ctx.info(axes_value)
    k = const_value(info.shape[0]) if info.ndim == 1 else 1
    if k is None:
        ctx.fail("the number of axes must be known when the model is imported")
    rank = len(dims) + k
    axes = _normalized_sizes(ctx, axes_value, rank, "axis")
    unit = [tir.any_(*(tir.EQ(a, i64(j)) for a in axes)) for j in range(rank)]
    out = []
    for j in range(rank):
        before = sum((tir.Select(u, i64(0), i64(1)) for u in unit[:j]), i64(0))
        source = sum((tir.Select(tir.EQ(before, i64(m)), d, i64(0)) for m, d in enumerate(dims)), i64(0))
        out.append(tir.Select(unit[j], i64(1), source))
    return checked_reshape(ctx, x, out, "unsqueeze_dim")


def squeeze_runtime(ctx, x, axes_value):
    dims = [as_dim(d) for d in ctx.static_shape(x)]
    r = len(dims)
    axes = _normalized_sizes(ctx, axes_value, r, "axis")
    gone = [tir.any_(*(tir.EQ(a, i64(j)) for a in axes)) for j in range(r)]
    require(ctx, tir.all_(*(tir.Or(tir.Not(g), tir.EQ(d, i64(1))) for g, d in zip(gone, dims))),
            "squeezed dims are 1")
    out = []
    for t in range(r - len(axes)):
        picked = []
        for j in range(r):
            before = sum((tir.Select(g, i64(0), i64(1)) for g in gone[:j]), i64(0))
            picked.append(tir.Select(tir.all_(tir.Not(gone[j]), tir.EQ(before, i64(t))), dims[j], i64(0)))
        out.append(sum(picked[1:], picked[0]) if picked else i64(1))
    return checked_reshape(ctx, x, out, "squeeze_dim")


def squeezed_axes(ctx, x) -> list[int]:
    """The axes Squeeze without axes removes from x of known rank: its literal 1 dims.  A symbolic
    dim is taken to stay (the rank is fixed at import), and that it is not 1 is checked at run time."""
    dims = ctx.static_shape(x)
    symbolic = [as_dim(d) for d in dims if const_value(d) is None]
    if symbolic:
        require(ctx, tir.all_(*(tir.NE(d, i64(1)) for d in symbolic)),
                "Squeeze without axes: a symbolic dim kept is not 1")
    return [k for k, d in enumerate(dims) if const_value(d) == 1]


def with_unit_dims(ctx, x, axes):
    """x with its dims at `axes` known to be 1: where one is symbolic, x is matched at run time
    against the shape with 1 there (a dim that is not 1 then is an error, not a wrong answer)."""
    info = ctx.info(x)
    dims = list(info.shape)
    picked = {a % len(dims) for a in axes if -len(dims) <= a < len(dims)}
    if all(const_value(dims[a]) is not None for a in picked):
        return x
    for a in picked:
        dims[a] = 1
    return ctx.bb.match_cast(x, TensorStructInfo(tuple(dims), info.dtype))


def split_at_runtime_axis(dims, axis):
    """(before, n, after): the products of dims before, at and after `axis`, an index known only at
    run time, so that a tensor of shape dims reshapes to (before, n, after) around that axis."""
    before = prod_i64(tir.Select(i64(j) < axis, d, i64(1)) for j, d in enumerate(dims))
    n = prod_i64(tir.Select(tir.EQ(axis, i64(j)), d, i64(1)) for j, d in enumerate(dims))
    after = prod_i64(tir.Select(axis < i64(j), d, i64(1)) for j, d in enumerate(dims))
    return before, n, after


def cumulative_runtime_axis(ctx, fn, x, axis_value, **attrs):
    """cumsum/cumprod along an axis read at run time: x seen as (before, n, after) around that axis."""
    dims = [as_dim(d) for d in ctx.static_shape(x)]
    (axis,) = _normalized_sizes(ctx, axis_value, len(dims), "axis")
    before, n, after = split_at_runtime_axis(dims, axis)
    y = ctx.emit(fn(ctx.emit(op.reshape(x, (before, n, after))), axis=1, **attrs))
    return ctx.emit(op.reshape(y, tuple(dims)))


def runtime_arange(ctx, length):
    """The int64 tensor 0, 1, ..., length - 1 for a length known only at run time (a size var)."""
    ones = ctx.emit(op.full((length,), 1, "int64"))
    return ctx.emit(op.subtract(ctx.emit(op.cumsum(ones, axis=0)), Constant(np.asarray(1, np.int64))))


def topk_runtime(ctx, x, k_value, axis: int, largest: bool):
    """TopK with k read at run time: every entry sorted along the axis, then the first k kept."""
    dims = ctx.static_shape(x)
    axis = axis % len(dims)
    (k,) = runtime_sizes(ctx, k_value, "k")
    require(ctx, k <= as_dim(dims[axis]), "k is at most the axis length")
    from ...graph.shape_facts import const_value

    n = const_value(dims[axis])
    if n is None:
        ctx.fail("TopK with a run-time k needs a static axis length")
    both = ctx.emit(op.topk(x, n, axis=axis, largest=largest))
    first = runtime_arange(ctx, k)
    from ...ast.graph import TupleGetItem

    return [ctx.emit(op.take(ctx.emit(TupleGetItem(both, j)), first, axis=axis)) for j in range(2)]


def split_runtime(ctx, x, split_value, axis: int, count: int):
    """Split with the part sizes read at run time (checked to add up to the axis length)."""
    dims = ctx.static_shape(x)
    axis = axis % len(dims)
    if str(ctx.info(split_value).dtype) != "int64":
        split_value = ctx.emit(op.astype(split_value, "int64"))
    sizes = runtime_sizes(ctx, split_value, "split")
    if len(sizes) != count:
        ctx.fail(f"split has {len(sizes)} entries for {count} outputs")
    require(ctx, tir.EQ(sum(sizes[1:], as_dim(sizes[0])), as_dim(dims[axis])), "the parts add up to the axis length")
    offsets = ctx.emit(op.cumsum(split_value, axis=0, exclusive=True))
    parts = []
    for j, size in enumerate(sizes):
        start = ctx.emit(op.take(offsets, Constant(np.asarray(j, np.int64)), axis=0))
        parts.append(ctx.emit(op.take(x, ctx.emit(op.add(runtime_arange(ctx, size), start)), axis=axis)))
    return parts


def one_hot_runtime(ctx, indices, depth_value, values, axis: int):
    """OneHot with depth read at run time: indices compared with 0..depth-1 (negative ones count
    from the end)."""
    depth_value = ctx.emit(op.reshape(ctx.emit(op.astype(depth_value, "int64")), ()))
    (depth,) = runtime_sizes(ctx, depth_value, "depth")
    rank = ctx.info(indices).ndim + 1
    axis = axis % rank
    indices = ctx.emit(op.astype(indices, "int64"))
    zero = Constant(np.asarray(0, np.int64))
    indices = ctx.emit(op.where(ctx.emit(op.less(indices, zero)), ctx.emit(op.add(indices, depth_value)), indices))
    shape = [1] * rank
    shape[axis] = depth
    classes = ctx.emit(op.reshape(runtime_arange(ctx, depth), tuple(shape)))
    hit = ctx.emit(op.equal(ctx.emit(op.expand_dims(indices, (axis,))), classes))
    off = ctx.emit(op.take(values, Constant(np.asarray(0, np.int64)), axis=0))
    on = ctx.emit(op.take(values, Constant(np.asarray(1, np.int64)), axis=0))
    return ctx.emit(op.where(hit, on, off))


def _scalar(v: int):
    return Constant(np.asarray(v, np.int64))


def pad_runtime(ctx, x, pads_value, value, axes_value, mode: str):
    """Pad with pads (and possibly axes and the pad value) read at run time.

    Each padded axis j gets length L_j = d_j + begin_j + end_j (bound at run time; a negative
    length is an error) and is gathered from source indices arange(L_j) - begin_j mapped into
    [0, d_j) by the mode: clamped (edge), reflected, wrapped, or clamped and masked (constant).
    """
    dims = [as_dim(d) for d in ctx.static_shape(x)]
    r = len(dims)
    dtype = ctx.info(x).dtype
    if str(ctx.info(pads_value).dtype) != "int64":
        pads_value = ctx.emit(op.astype(pads_value, "int64"))
    pads = runtime_ints(ctx, pads_value, "pad")
    k = len(pads) // 2
    if axes_value is None:
        axes_value = Constant(np.arange(r, dtype=np.int64))
    from ...graph.shape_facts import const_value

    n_axes = const_value(ctx.info(axes_value).shape[0])
    if n_axes != k or len(pads) % 2:
        ctx.fail(f"pads has {len(pads)} entries for {n_axes} axes")
    if isinstance(axes_value, Constant):
        axis_of = [i64(int(a) % r) for a in np.asarray(axes_value.array).reshape(-1)]
    else:
        axis_of = _normalized_sizes(ctx, axes_value, r, "axis")
    normal_axes = ctx.emit(op.floor_mod(ctx.emit(op.astype(axes_value, "int64")), _scalar(r)))
    y, mask = x, None
    for j in range(r):
        begin = sum((tir.Select(tir.EQ(a, i64(j)), p, i64(0)) for a, p in zip(axis_of, pads[:k])), i64(0))
        end = sum((tir.Select(tir.EQ(a, i64(j)), p, i64(0)) for a, p in zip(axis_of, pads[k:])), i64(0))
        (length,) = bind_sizes(ctx, [dims[j] + begin + end], "pad_dim")
        here = ctx.emit(op.equal(normal_axes, _scalar(j)))
        begin_t = ctx.emit(op.sum(ctx.emit(op.where(here, ctx.emit(op.take(pads_value, Constant(np.arange(k)), axis=0)),
                                                    _scalar(0))), axis=None, keepdims=False))
        index = ctx.emit(op.subtract(runtime_arange(ctx, length), begin_t))
        if not isinstance(dims[j], tir.IntImm):
            ctx.fail("Pad with run-time pads needs static input dims")
        d = _scalar(dims[j].value)
        last = _scalar(dims[j].value - 1)
        clamped = ctx.emit(op.minimum(ctx.emit(op.maximum(index, _scalar(0))), last))
        if mode == "wrap":
            source = ctx.emit(op.floor_mod(index, d))
        elif mode == "reflect" and dims[j].value > 1:
            period = _scalar(2 * (dims[j].value - 1))
            m = ctx.emit(op.floor_mod(index, period))
            source = ctx.emit(op.where(ctx.emit(op.greater(m, last)), ctx.emit(op.subtract(period, m)), m))
        else:
            source = clamped
        y = ctx.emit(op.take(y, source, axis=j))
        if mode == "constant":
            inside = ctx.emit(op.logical_and(ctx.emit(op.greater_equal(index, _scalar(0))),
                                             ctx.emit(op.less(index, d))))
            shape = [1] * r
            shape[j] = length
            inside = ctx.emit(op.reshape(inside, tuple(shape)))
            mask = inside if mask is None else ctx.emit(op.logical_and(mask, inside))
    if mode == "constant" and mask is not None:
        if value is None:
            fill = Constant(np.zeros((), dtype.numpy()))
        else:
            fill = ctx.emit(op.reshape(value, ()))
            if ctx.info(fill).dtype != dtype:
                fill = ctx.emit(op.astype(fill, dtype))
        y = ctx.emit(op.where(mask, y, fill))
    return y


def expand_runtime(ctx, x, shape_value):
    """Expand to a target shape read at run time (bidirectional broadcast; checked at run time)."""
    from ...graph.shape_facts import const_value

    dims = [const_value(d) for d in ctx.static_shape(x)]
    if None in dims:
        ctx.fail("Expand to a run-time shape needs static input dims")
    target = runtime_ints(ctx, shape_value, "expand")
    ndim = max(len(dims), len(target))
    dims = [1] * (ndim - len(dims)) + dims
    target = [i64(1)] * (ndim - len(target)) + target
    fits = [tir.Or(tir.EQ(t, i64(1)), tir.EQ(t, i64(d))) for d, t in zip(dims, target) if d != 1]
    if fits:
        require(ctx, tir.all_(*fits), "the target shape broadcasts with the input")
    out = bind_sizes(ctx, [t if d == 1 else i64(d) for d, t in zip(dims, target)], "expand_dim")
    return ctx.emit(op.broadcast_to(ctx.emit(op.reshape(x, tuple(dims))), tuple(out)))


def tile_runtime(ctx, x, repeats_value):
    """Tile with repeats read at run time: axis j of length d_j * repeats_j gathers index i mod d_j."""
    from ...graph.shape_facts import const_value

    dims = [const_value(d) for d in ctx.static_shape(x)]
    if None in dims:
        ctx.fail("Tile with run-time repeats needs static input dims")
    repeats = runtime_ints(ctx, repeats_value, "repeats")
    if len(repeats) != len(dims):
        ctx.fail(f"repeats has {len(repeats)} entries for a {len(dims)}-d input")
    y = x
    for j, (d, rep) in enumerate(zip(dims, repeats)):
        (length,) = bind_sizes(ctx, [i64(d) * rep], "tile_dim")
        y = ctx.emit(op.take(y, ctx.emit(op.floor_mod(runtime_arange(ctx, length), _scalar(max(d, 1)))), axis=j))
    return y


def range_runtime(ctx, start, limit, delta):
    """Range with bounds read at run time: max(ceil((limit - start) / delta), 0) entries."""
    dtype = ctx.info(start).dtype
    as_f64 = [ctx.emit(op.reshape(ctx.emit(op.astype(v, "float64")), ())) for v in (start, limit, delta)]
    count = ctx.emit(op.ceil(ctx.emit(op.divide(ctx.emit(op.subtract(as_f64[1], as_f64[0])), as_f64[2]))))
    count = ctx.emit(op.astype(ctx.emit(op.maximum(count, Constant(np.asarray(0.0)))), "int64"))
    (length,) = runtime_sizes(ctx, count, "range")
    steps = ctx.emit(op.astype(runtime_arange(ctx, length), str(dtype)))
    first, step = (ctx.emit(op.reshape(v, ())) for v in (start, delta))
    return ctx.emit(op.add(first, ctx.emit(op.multiply(steps, step))))


def _ints_or_vars(ctx, value, what: str):
    """A constant's entries as int64 literals, a run-time tensor's as vars bound at run time."""
    if isinstance(value, Constant):
        return [i64(int(v)) for v in np.asarray(value.array).reshape(-1)]
    if str(ctx.info(value).dtype) != "int64":
        value = ctx.emit(op.astype(value, "int64"))
    return runtime_ints(ctx, value, what)


def slice_runtime(ctx, x, starts, ends, axes, steps):
    """Slice with starts, ends, axes or steps read at run time.

    Bounds clamp as Python slices do (the reference the ONNX tests are made with).  Per input
    axis j (of static or symbolic length) the step, clamped start and length are expressions over the run-time vars
    (an axis not named keeps its full range); the length is bound to a size var and the axis
    gathered at start + step * arange(length), start and step taken from a shape value made
    into a tensor.
    """
    dims = [as_dim(d) for d in ctx.static_shape(x)]
    r = len(dims)
    begin = _ints_or_vars(ctx, starts, "start")
    end = _ints_or_vars(ctx, ends, "end")
    k = len(begin)
    axis = _ints_or_vars(ctx, axes, "slice_axis") if axes is not None else [i64(j) for j in range(k)]
    step = _ints_or_vars(ctx, steps, "step") if steps is not None else [i64(1)] * k
    if not len(end) == len(axis) == len(step) == k:
        ctx.fail("starts, ends, axes and steps must have one entry per sliced axis")
    axis = [tir.Select(a < i64(0), a + i64(r), a) for a in axis]
    checks = [tir.all_(a >= i64(0), a < i64(r)) for a in axis] + [tir.NE(s, i64(0)) for s in step]
    checks += [tir.NE(p, q) for i, p in enumerate(axis) for q in axis[i + 1:]]
    require(ctx, tir.all_(*checks), "slice axes in range and distinct, steps nonzero")
    firsts, strides, lengths = [], [], []
    for j, d in enumerate(dims):
        named = [tir.EQ(a, i64(j)) for a in axis]
        pick = lambda values, default: sum((tir.Select(c, v, i64(0)) for c, v in zip(named, values)),  # noqa: E731
                                           tir.Select(tir.any_(*named), i64(0), default))
        s = pick(step, i64(1))
        b = pick(begin, i64(0))
        e = pick(end, d)
        n = d
        b = tir.Select(b < i64(0), b + n, b)
        e = tir.Select(e < i64(0), e + n, e)
        forward = s > i64(0)
        b = tir.Select(forward, tir.Min(tir.Max(b, i64(0)), n), tir.Min(tir.Max(b, i64(-1)), n - i64(1)))
        e = tir.Select(forward, tir.Min(tir.Max(e, i64(0)), n), tir.Min(tir.Max(e, i64(-1)), n - i64(1)))
        length = tir.Select(forward, tir.FloorDiv(e - b + s - i64(1), tir.Max(s, i64(1))),
                            tir.FloorDiv(b - e - s - i64(1), tir.Max(-s, i64(1))))
        firsts.append(b)
        strides.append(s)
        lengths.append(tir.Max(length, i64(0)))
    sizes = bind_sizes(ctx, lengths, "slice_dim")

    first_t = ctx.emit(op.shape_to_tensor(tuple(firsts)))
    stride_t = ctx.emit(op.shape_to_tensor(tuple(strides)))
    y = x
    for j, size in enumerate(sizes):
        at = _scalar(j)
        index = ctx.emit(op.add(ctx.emit(op.take(first_t, at, axis=0)),
                                ctx.emit(op.multiply(ctx.emit(op.take(stride_t, at, axis=0)),
                                                     runtime_arange(ctx, size)))))
        y = ctx.emit(op.take(y, index, axis=j))
    return y


def constant_of_shape_runtime(ctx, shape_value, value, dtype: str):
    """ConstantOfShape of a shape read at run time (each entry bound to a size var)."""
    if str(ctx.info(shape_value).dtype) != "int64":
        shape_value = ctx.emit(op.astype(shape_value, "int64"))
    return ctx.emit(op.full(tuple(runtime_sizes(ctx, shape_value, "dim")), value, dtype))


def compress_runtime(ctx, x, condition, axis):
    """Compress with a run-time condition: the output length (the number of true entries) is
    bound to a size var; entry j gathers the position of the (j+1)-th true entry, counted as the
    number of positions whose running true-count is at most j."""
    if axis is None:
        x = ctx.emit(op.reshape(x, (product(ctx.info(x).shape),)))
        axis = 0
    zero = Constant(np.zeros((), ctx.info(condition).dtype.numpy()))
    flags = ctx.emit(op.astype(ctx.emit(op.not_equal(condition, zero)), "int64"))
    if ctx.info(flags).ndim != 1:
        ctx.fail("the condition must be 1-d")
    count = ctx.emit(op.sum(flags, axis=None, keepdims=True))
    (length,) = runtime_sizes(ctx, count, "compress")
    from ...graph.shape_facts import const_value

    extent = const_value(ctx.info(x).shape[axis % ctx.info(x).ndim])
    n = const_value(ctx.info(flags).shape[0])
    if extent is None or n is None:
        ctx.fail("Compress with a run-time condition needs static lengths")
    require(ctx, length <= i64(min(n, extent)), "the condition selects positions inside the axis")
    running = ctx.emit(op.reshape(ctx.emit(op.cumsum(flags, axis=0)), (1, n)))
    wanted = ctx.emit(op.reshape(runtime_arange(ctx, length), (length, 1)))
    index = ctx.emit(op.sum(ctx.emit(op.astype(ctx.emit(op.less_equal(running, wanted)), "int64")),
                            axis=(1,), keepdims=False))
    return ctx.emit(op.take(x, index, axis=axis))
