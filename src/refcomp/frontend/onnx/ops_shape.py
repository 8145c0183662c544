"""ONNX shape and indexing ops: Reshape, Transpose, (Un)Squeeze, Flatten, Concat, Split, Slice, Expand,
Tile, Shape, Size, Gather*, ScatterElements, Pad, Constant*, Range, EyeLike, Trilu, CumSum, TopK, OneHot."""
from __future__ import annotations

import numpy as np

from ...ast.graph import Constant, PrimValue, ShapeExpr
from ...graph import op
from ...graph.shape_facts import const_value
from . import ops_dynamic, shape_values
from .importer import MAX_CONSTANT_ELEMENTS, MAX_FOLD_ELEMENTS, converter


def _ints(ctx, value, what):
    return [int(v) for v in np.asarray(ctx.constant(value, what)).reshape(-1)]


def _shape_operand(ctx, value, what):
    """A shape operand's entries: ints, or dim expressions where it was computed from symbolic dims."""
    dims = shape_values.dims_of(value)
    if dims is None:
        return _ints(ctx, value, what)
    return dims


def _axes(ctx, inputs, attrs, index=1, key="axes"):
    if len(inputs) > index and inputs[index] is not None:
        return _ints(ctx, inputs[index], key)
    value = attrs.get(key)
    return None if value is None else [int(a) for a in value]


def _dims(ctx, x):
    return list(ctx.static_shape(x))


@converter("Reshape", shape_values=True)
def _reshape(ctx, node, inputs, attrs):
    x, shape = inputs
    if not isinstance(shape, Constant) and not shape_values.is_symbolic(shape):
        return ops_dynamic.reshape_runtime(ctx, x, shape, bool(attrs.get("allowzero", 0)))
    target = _shape_operand(ctx, shape, "the target shape")
    if shape_values.is_symbolic(x):
        result = shape_values.reshape(x, target)
        if result is not None:
            return result
        x = ctx.tensor(x)
    dims = _dims(ctx, x)
    allowzero = attrs.get("allowzero", 0)
    out = [dims[k] if (isinstance(t, int) and t == 0 and not allowzero) else t for k, t in enumerate(target)]
    return ctx.emit(op.reshape(x, tuple(out)))


def _is_runtime_tensor(value) -> bool:
    """value is a tensor whose entries are known only at run time (not a constant, not a shape value)."""
    return value is not None and not isinstance(value, Constant) and not shape_values.is_symbolic(value)


def _runtime_axes(inputs) -> bool:
    return len(inputs) > 1 and inputs[1] is not None and not isinstance(inputs[1], Constant) \
        and not shape_values.is_symbolic(inputs[1]) and not shape_values.is_symbolic(inputs[0])


@converter("Transpose")
def _transpose(ctx, node, inputs, attrs):
    perm = attrs.get("perm")
    return ctx.emit(op.permute_dims(inputs[0], None if perm is None else tuple(perm)))


@converter("Squeeze", shape_values=True)
def _squeeze(ctx, node, inputs, attrs):
    if _runtime_axes(inputs):
        return ops_dynamic.squeeze_runtime(ctx, inputs[0], inputs[1])
    axes = _axes(ctx, inputs, attrs)
    if isinstance(inputs[0], ShapeExpr) and len(inputs[0].values) == 1 and axes in (None, [0], [-1]):
        return shape_values.make(list(inputs[0].values), True)
    x = ctx.tensor(inputs[0])
    if ctx.info(x).shape is not None:
        if axes is None:
            axes = ops_dynamic.squeezed_axes(ctx, x)
        else:
            x = ops_dynamic.with_unit_dims(ctx, x, axes)
    return ctx.emit(op.squeeze(x, None if axes is None else tuple(axes)))


@converter("Unsqueeze", shape_values=True)
def _unsqueeze(ctx, node, inputs, attrs):
    if _runtime_axes(inputs):
        return ops_dynamic.unsqueeze_runtime(ctx, inputs[0], inputs[1])
    axes = tuple(_axes(ctx, inputs, attrs))
    if isinstance(inputs[0], PrimValue) and axes in ((0,), (-1,)):  # a symbolic scalar becomes a 1-entry shape
        return shape_values.make(shape_values.entries(inputs[0])[0], False)
    return ctx.emit(op.expand_dims(ctx.tensor(inputs[0]), axes))


@converter("Flatten")
def _flatten(ctx, node, inputs, attrs):
    x = inputs[0]
    ndim = ctx.info(x).ndim
    axis = attrs.get("axis", 1)
    axis = axis + ndim if axis < 0 else axis
    dims = _dims(ctx, x)
    from ...graph.shape_facts import product

    return ctx.emit(op.reshape(x, (product(dims[:axis]), product(dims[axis:]))))


@converter("Concat", shape_values=True)
def _concat(ctx, node, inputs, attrs):
    parts = [i for i in inputs if i is not None]
    if any(shape_values.is_symbolic(p) for p in parts):
        joined = shape_values.concat(parts)
        if joined is not None:
            return joined
        parts = [ctx.tensor(p) for p in parts]
    return ctx.emit(op.concat(*parts, axis=attrs["axis"]))


@converter("Split")
def _split(ctx, node, inputs, attrs):
    x = inputs[0]
    axis = attrs.get("axis", 0)
    if _runtime_axes(inputs):
        return ops_dynamic.split_runtime(ctx, x, inputs[1], axis, len(node.output))
    sizes = _axes(ctx, inputs, attrs, 1, "split")
    count = len(node.output)
    length = const_value(_dims(ctx, x)[axis])
    if sizes is None:
        if "num_outputs" in attrs:
            count = attrs["num_outputs"]
        if length is None:
            sections = count
        elif length % count == 0:
            sections = count
        else:  # opset 18: the last chunk is smaller
            chunk = -(-length // count)
            sizes = [chunk] * (count - 1) + [length - chunk * (count - 1)]
            sections = None
    if sizes is not None:
        points = list(np.cumsum(sizes)[:-1])
        result = ctx.emit(op.split(x, tuple(int(p) for p in points), axis=axis))
    else:
        result = ctx.emit(op.split(x, sections, axis=axis))
    return result


@converter("Slice", shape_values=True)
def _slice(ctx, node, inputs, attrs):
    x = inputs[0]
    if isinstance(x, ShapeExpr):
        result = _slice_shape(ctx, x, inputs, attrs)
        if result is not None:
            return result
    x = ctx.tensor(x)
    if ctx.opset < 10:
        starts, ends, axes = attrs["starts"], attrs["ends"], attrs.get("axes")
        steps = None
    elif any(_is_runtime_tensor(v) for v in inputs[1:]):
        operands = [None if v is None else ctx.tensor(v) for v in inputs[1:5]] + [None] * (5 - len(inputs))
        return ops_dynamic.slice_runtime(ctx, x, *operands)
    else:
        starts = _shape_operand(ctx, inputs[1], "starts")
        ends = _shape_operand(ctx, inputs[2], "ends")
        axes = _ints(ctx, inputs[3], "axes") if len(inputs) > 3 and inputs[3] is not None else None
        steps = _ints(ctx, inputs[4], "steps") if len(inputs) > 4 and inputs[4] is not None else None
    ndim = ctx.info(x).ndim
    axes = list(range(len(starts))) if axes is None else [a % ndim for a in axes]
    steps = steps or [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        ctx.fail("starts, ends, axes and steps must have the same length")
    big = 2 ** 62
    ends = [(min(e, big) if e > 0 else max(e, -big)) if isinstance(e, int) else e for e in ends]
    starts = [max(min(s, big), -big) if isinstance(s, int) else s for s in starts]
    if any(not isinstance(v, int) for v in starts + ends) and any(s <= 0 for s in steps):
        ctx.fail("a slice with symbolic starts or ends needs positive steps")
    return ctx.emit(op.strided_slice(x, axes, starts, ends, steps))


def _slice_shape(ctx, x, inputs, attrs):
    if ctx.opset < 10:
        starts, ends = list(attrs["starts"]), list(attrs["ends"])
        steps = [1]
    else:
        if not all(isinstance(v, Constant) for v in inputs[1:] if v is not None):
            return None  # symbolic bounds: slice the entries as a tensor
        starts, ends = _ints(ctx, inputs[1], "starts"), _ints(ctx, inputs[2], "ends")
        steps = _ints(ctx, inputs[4], "steps") if len(inputs) > 4 and inputs[4] is not None else [1]
    if len(starts) != 1 or len(ends) != 1 or len(steps) != 1:
        ctx.fail("a symbolic shape value is 1-d: Slice takes one axis")
    if steps[0] == 0:
        ctx.fail("Slice steps must not be 0")
    return shape_values.slice_(x, starts[0], ends[0], steps[0])


@converter("Expand", shape_values=True)
def _expand(ctx, node, inputs, attrs):
    x, shape = inputs
    if not isinstance(shape, Constant) and not shape_values.is_symbolic(shape):
        return ops_dynamic.expand_runtime(ctx, x, shape)
    target = _shape_operand(ctx, shape, "the target shape")
    x = ctx.tensor(x)
    dims = _dims(ctx, x)
    ndim = max(len(dims), len(target))
    dims = [1] * (ndim - len(dims)) + dims
    target = [1] * (ndim - len(target)) + target
    out = [d if (isinstance(t, int) and t == 1) else t for d, t in zip(dims, target)]
    return ctx.emit(op.broadcast_to(_assume_dims(ctx, x, dims, out), tuple(out)))


def _assume_dims(ctx, x, dims, out):
    """x, match_cast to the output dims where its own dim is symbolic, not 1, and not provably the
    target (a sliced `min(seq, 64)` expanded to `seq`): the run time checks the two agree, as the
    exporter assumed when it recorded the Expand."""
    ndim = ctx.info(x).ndim
    return assume_dims(ctx, x, out[len(out) - ndim:])


def assume_dims(ctx, x, wanted):
    """x with each symbolic dim that the prover shows can differ from the symbolic dim `wanted`
    there match_cast to it, so the run time checks they agree; x itself when nothing differs.
    Dims the prover cannot compare are left to the op's own rule (a run-time broadcast check)."""
    from ...ast.graph_struct_info import TensorStructInfo, as_dim
    from ...graph.shape_facts import decide_equal

    dims = list(ctx.static_shape(x))
    assumed, changed = [], False
    for d, t in zip(dims, wanted):
        if t is not None and const_value(as_dim(d)) is None and const_value(as_dim(t)) is None \
                and decide_equal(as_dim(d), as_dim(t)).disproved:
            assumed.append(t)
            changed = True
        else:
            assumed.append(d)
    if not changed:
        return x
    return ctx.bb.match_cast(x, TensorStructInfo(tuple(assumed), ctx.info(x).dtype))


def unify_broadcast(ctx, values):
    """Operands of a broadcasting op whose symbolic dims on one axis can differ, cast (checked at
    run time) to the simplest of them: `seq` and `min(seq, 64)` become `seq`."""
    from ...ast.graph_struct_info import as_dim

    tensors = [v for v in values if v is not None and ctx.info(v).shape is not None]
    if len(tensors) < 2:
        return values
    ndim = max(ctx.info(v).ndim for v in tensors)
    chosen = [None] * ndim
    for v in tensors:
        shape = ctx.info(v).shape
        for k, d in enumerate(shape):
            axis = ndim - len(shape) + k
            if const_value(as_dim(d)) is None and (chosen[axis] is None or len(str(d)) < len(str(chosen[axis]))):
                chosen[axis] = d
    out = []
    for v in values:
        if v is None or ctx.info(v).shape is None:
            out.append(v)
            continue
        n = ctx.info(v).ndim
        out.append(assume_dims(ctx, v, chosen[ndim - n:]))
    return out


@converter("Tile", shape_values=True)
def _tile(ctx, node, inputs, attrs):
    if _is_runtime_tensor(inputs[1]):
        return ops_dynamic.tile_runtime(ctx, ctx.tensor(inputs[0]), inputs[1])
    repeats = _shape_operand(ctx, inputs[1], "repeats")
    if any(isinstance(r, int) and r < 0 for r in repeats):
        ctx.fail(f"Tile repeats must not be negative, got {repeats}")
    return ctx.emit(op.tile(ctx.tensor(inputs[0]), tuple(repeats)))


@converter("Shape", shape_values=True)
def _shape(ctx, node, inputs, attrs):
    start, end = attrs.get("start", 0), attrs.get("end", None)
    return shape_values.make(_value_dims(ctx, inputs[0])[start:end], False)


@converter("Size", shape_values=True)
def _size(ctx, node, inputs, attrs):
    from ...graph.shape_facts import product

    return shape_values.make([product(_value_dims(ctx, inputs[0]))], True)


def _value_dims(ctx, x):
    """The dims of a tensor or of a shape value (a ShapeExpr of k entries is 1-d, a PrimValue 0-d)."""
    if isinstance(x, ShapeExpr):
        return [len(x.values)]
    if isinstance(x, PrimValue):
        return []
    return _dims(ctx, x)


@converter("Constant")
def _constant(ctx, node, inputs, attrs):
    from .importer import tensor_array

    if "value" in attrs:
        return Constant(tensor_array(attrs["value"], ctx.fail))
    for key, dtype in (("value_float", np.float32), ("value_int", np.int64)):
        if key in attrs:
            return Constant(np.asarray(attrs[key], dtype))
    for key, dtype in (("value_floats", np.float32), ("value_ints", np.int64)):
        if key in attrs:
            return Constant(np.asarray(list(attrs[key]), dtype))
    ctx.fail("Constant without a supported value attribute")


@converter("ConstantOfShape", shape_values=True)
def _constant_of_shape(ctx, node, inputs, attrs):
    from onnx import numpy_helper

    value = numpy_helper.to_array(attrs["value"]).reshape(-1)[0] if "value" in attrs else np.float32(0)
    if not isinstance(inputs[0], Constant) and not shape_values.is_symbolic(inputs[0]):
        return ops_dynamic.constant_of_shape_runtime(ctx, inputs[0], float(value), str(np.asarray(value).dtype))
    shape = _shape_operand(ctx, inputs[0], "the shape")
    if all(isinstance(d, int) for d in shape):
        if any(d < 0 for d in shape):
            ctx.fail(f"the shape {tuple(shape)} has a negative dim")
        count = int(np.prod(shape, dtype=object)) if shape else 1
        _check_size(ctx, count, "ConstantOfShape")
        if count > MAX_FOLD_ELEMENTS:
            return ctx.emit(op.full(tuple(shape), float(value), str(np.asarray(value).dtype)))
        return Constant(np.full(shape, value, dtype=np.asarray(value).dtype))
    return ctx.emit(op.full(tuple(shape), float(value), str(np.asarray(value).dtype)))


@converter("Range", shape_values=True)
def _range(ctx, node, inputs, attrs):
    if len(inputs) != 3 or any(v is None for v in inputs):
        ctx.fail("Range takes start, limit and delta")
    if any(shape_values.is_symbolic(v) for v in inputs) and not any(_is_runtime_tensor(v) for v in inputs):
        return _symbolic_range(ctx, inputs)
    if not all(isinstance(v, Constant) for v in inputs):
        return ops_dynamic.range_runtime(ctx, *(ctx.tensor(v) for v in inputs))
    start, limit, delta = (np.asarray(ctx.constant(v, "Range bounds")) for v in inputs)
    if start.size != 1 or limit.size != 1 or delta.size != 1:
        ctx.fail("Range bounds must be scalars")
    start, limit, delta = (v.reshape(()) for v in (start, limit, delta))
    if delta == 0:
        ctx.fail("Range delta must not be 0")
    count = max(int(np.ceil((limit - start) / delta)), 0)  # the ONNX definition, not numpy's float rounding
    _check_size(ctx, count, "Range")
    if count > MAX_FOLD_ELEMENTS:
        return ctx.emit(op.arange(start.item(), limit.item(), delta.item(), str(start.dtype)))
    return Constant((start + np.arange(count, dtype=start.dtype) * delta).astype(start.dtype))


def _symbolic_range(ctx, inputs):
    """Range over integer bounds where start or limit is symbolic: an arange whose length is an
    expression over the size vars (delta must be a nonzero constant)."""
    bounds = []
    for value, what in zip(inputs, ("start", "limit", "delta")):
        got = shape_values.entries(value)
        if got is None or len(got[0]) != 1:
            ctx.fail(f"Range {what} must be an integer scalar")
        bounds.append(got[0][0])
    delta = const_value(bounds[2])
    if delta is None or delta == 0:
        ctx.fail("Range with a symbolic bound needs a nonzero constant delta")
    dtype = "int64"
    for value in inputs:
        if isinstance(value, Constant):
            dtype = str(np.asarray(value.array).dtype)
    return ctx.emit(op.arange(bounds[0], bounds[1], delta, dtype))


def _check_size(ctx, count: int, what: str) -> None:
    if count > MAX_CONSTANT_ELEMENTS:
        ctx.fail(f"{what} would make a constant of {count} elements (more than {MAX_CONSTANT_ELEMENTS})")


@converter("EyeLike")
def _eye_like(ctx, node, inputs, attrs):
    from .importer import _onnx_dtype

    n, m = (const_value(d) if const_value(d) is not None else d for d in _dims(ctx, inputs[0]))
    dtype = _onnx_dtype(attrs["dtype"]) if "dtype" in attrs else ctx.info(inputs[0]).dtype.numpy()
    return ctx.emit(op.eye(n, m, attrs.get("k", 0), str(dtype)))


@converter("Trilu", shape_values=True)
def _trilu(ctx, node, inputs, attrs):
    x = ctx.tensor(inputs[0])
    k = inputs[1] if len(inputs) > 1 and inputs[1] is not None else Constant(np.asarray(0, np.int64))
    upper = attrs.get("upper", 1)
    if isinstance(k, Constant):
        fn = op.triu if upper else op.tril
        return ctx.emit(fn(x, int(np.asarray(k.array).reshape(-1)[0])))
    # a run-time k: keep x where (column - row) is >= k (upper) or <= k (lower)
    k = ctx.tensor(k)
    rows, cols = _dims(ctx, x)[-2:]
    column = ctx.emit(op.reshape(op.arange(0, cols), (1, cols)))
    row = ctx.emit(op.reshape(op.arange(0, rows), (rows, 1)))
    offset = ctx.emit(op.subtract(column, row))
    k = ctx.emit(op.reshape(op.astype(k, "int64") if ctx.info(k).dtype != "int64" else k, ()))
    keep = ctx.emit(op.greater_equal(offset, k) if upper else op.less_equal(offset, k))
    zero = Constant(np.zeros((), ctx.info(x).dtype.numpy()))
    return ctx.emit(op.where(keep, x, zero))


@converter("CumSum")
def _cumsum(ctx, node, inputs, attrs):
    if not isinstance(inputs[1], Constant):
        return ops_dynamic.cumulative_runtime_axis(ctx, op.cumsum, inputs[0], inputs[1],
                                                   exclusive=bool(attrs.get("exclusive", 0)),
                                                   reverse=bool(attrs.get("reverse", 0)))
    axis = _ints(ctx, inputs[1], "axis")[0]
    return ctx.emit(op.cumsum(inputs[0], axis=axis, exclusive=bool(attrs.get("exclusive", 0)),
                              reverse=bool(attrs.get("reverse", 0))))


@converter("CumProd")
def _cumprod(ctx, node, inputs, attrs):
    if not isinstance(inputs[1], Constant):
        return ops_dynamic.cumulative_runtime_axis(ctx, op.cumprod, inputs[0], inputs[1],
                                                   exclusive=bool(attrs.get("exclusive", 0)),
                                                   reverse=bool(attrs.get("reverse", 0)))
    axis = _ints(ctx, inputs[1], "axis")[0]
    return ctx.emit(op.cumprod(inputs[0], axis=axis, exclusive=bool(attrs.get("exclusive", 0)),
                               reverse=bool(attrs.get("reverse", 0))))


@converter("Gather", shape_values=True)
def _gather(ctx, node, inputs, attrs):
    if shape_values.is_symbolic(inputs[0]):
        picked = shape_values.gather(inputs[0], inputs[1]) if attrs.get("axis", 0) in (0, -1) else None
        if picked is not None:
            return picked
    return ctx.emit(op.take(ctx.tensor(inputs[0]), ctx.tensor(inputs[1]), axis=attrs.get("axis", 0)))


@converter("GatherElements")
def _gather_elements(ctx, node, inputs, attrs):
    return ctx.emit(op.gather_elements(inputs[0], inputs[1], axis=attrs.get("axis", 0)))


@converter("GatherND")
def _gather_nd(ctx, node, inputs, attrs):
    return ctx.emit(op.gather_nd(inputs[0], inputs[1], batch_dims=attrs.get("batch_dims", 0)))


@converter("ScatterElements")
def _scatter_elements(ctx, node, inputs, attrs):
    reduction = attrs.get("reduction", b"none")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    return ctx.emit(op.scatter_elements(*inputs, axis=attrs.get("axis", 0), reduction=reduction))


@converter("Pad")
def _pad(ctx, node, inputs, attrs):
    x = inputs[0]
    ndim = ctx.info(x).ndim
    mode = attrs.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if ctx.opset < 11:
        pads, value = list(attrs["pads"]), attrs.get("value", 0.0)
        axes = list(range(ndim))
    elif not isinstance(inputs[1], Constant) and mode in ("constant", "edge", "reflect", "wrap"):
        return ops_dynamic.pad_runtime(ctx, x, inputs[1], inputs[2] if len(inputs) > 2 else None,
                                       inputs[3] if len(inputs) > 3 else None, mode)
    else:
        pads = _ints(ctx, inputs[1], "pads")
        value = np.asarray(ctx.constant(inputs[2], "the pad value")).reshape(-1)[0] \
            if len(inputs) > 2 and inputs[2] is not None else 0.0
        axes = _ints(ctx, inputs[3], "axes") if len(inputs) > 3 and inputs[3] is not None else list(range(ndim))
    axes = [a % ndim for a in axes]
    width = [[0, 0] for _ in range(ndim)]
    for k, a in enumerate(axes):
        width[a] = [pads[k], pads[k + len(axes)]]
    if any(v < 0 for w in width for v in w):  # negative pads crop first
        dims = _dims(ctx, x)
        crops = [(a, -w[0] if w[0] < 0 else 0, -w[1] if w[1] < 0 else 0) for a, w in enumerate(width) if min(w) < 0]
        x = ctx.emit(op.strided_slice(x, [a for a, _, _ in crops], [lo for _, lo, _ in crops],
                                      [dims[a] - hi for a, _, hi in crops]))
        width = [[max(v, 0) for v in w] for w in width]
    if mode == "wrap":
        return _wrap_pad(ctx, x, width)
    if mode not in ("constant", "edge", "reflect"):
        ctx.fail(f"pad mode {mode} is not supported")
    return ctx.emit(op.pad(x, tuple(tuple(w) for w in width), float(value), mode))


def _wrap_pad(ctx, x, width):
    """Pad by repeating the tensor cyclically: each side is a slice from the opposite end."""
    for axis, (before, after) in enumerate(width):
        if not before and not after:
            continue
        n = const_value(_dims(ctx, x)[axis])
        if n is None or before > n or after > n:
            ctx.fail("wrap padding needs a static dim at least as long as the pad")
        parts = []
        if before:
            parts.append(ctx.emit(op.strided_slice(x, [axis], [n - before], [n])))
        parts.append(x)
        if after:
            parts.append(ctx.emit(op.strided_slice(x, [axis], [0], [after])))
        x = ctx.emit(op.concat(*parts, axis=axis))
    return x


@converter("TopK")
def _topk(ctx, node, inputs, attrs):
    if not isinstance(inputs[1], Constant) and attrs.get("sorted", 1):
        return ops_dynamic.topk_runtime(ctx, inputs[0], inputs[1], attrs.get("axis", -1), bool(attrs.get("largest", 1)))
    k = _ints(ctx, inputs[1], "k")[0]
    if not attrs.get("sorted", 1):
        ctx.fail("unsorted TopK is not supported")
    result = ctx.emit(op.topk(inputs[0], k, axis=attrs.get("axis", -1), largest=bool(attrs.get("largest", 1))))
    return result


@converter("OneHot")
def _one_hot(ctx, node, inputs, attrs):
    indices, depth, values = inputs
    if not isinstance(depth, Constant):
        return ops_dynamic.one_hot_runtime(ctx, indices, depth, values, attrs.get("axis", -1))
    depth = int(np.asarray(ctx.constant(depth, "depth")).reshape(-1)[0])
    off, on = (np.asarray(ctx.constant(values, "values")).reshape(-1)).tolist()
    dtype = ctx.info(values).dtype
    if not ctx.info(indices).dtype.is_integer:
        indices = ctx.emit(op.astype(indices, "int64"))
    return ctx.emit(op.one_hot(indices, depth, on, off, axis=attrs.get("axis", -1), dtype=dtype))


_ = Constant


@converter("Scatter")
def _scatter(ctx, node, inputs, attrs):
    return ctx.emit(op.scatter_elements(*inputs, axis=attrs.get("axis", 0)))


@converter("DepthToSpace", "SpaceToDepth")
def _depth_space(ctx, node, inputs, attrs):
    x = inputs[0]
    n, c, h, w = (const_value(d) for d in ctx.static_shape(x))
    b = attrs["blocksize"]
    if node.op_type == "SpaceToDepth":
        y = ctx.emit(op.reshape(x, (n, c, h // b, b, w // b, b)))
        y = ctx.emit(op.permute_dims(y, (0, 3, 5, 1, 2, 4)))
        return ctx.emit(op.reshape(y, (n, c * b * b, h // b, w // b)))
    mode = attrs.get("mode", b"DCR")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode == "DCR":
        y = ctx.emit(op.reshape(x, (n, b, b, c // (b * b), h, w)))
        y = ctx.emit(op.permute_dims(y, (0, 3, 4, 1, 5, 2)))
    else:
        y = ctx.emit(op.reshape(x, (n, c // (b * b), b, b, h, w)))
        y = ctx.emit(op.permute_dims(y, (0, 1, 4, 2, 5, 3)))
    return ctx.emit(op.reshape(y, (n, c // (b * b), h * b, w * b)))


@converter("Hardmax")
def _hardmax(ctx, node, inputs, attrs):
    x = inputs[0]
    ndim = ctx.info(x).ndim
    axis = attrs.get("axis", -1) % ndim
    depth = const_value(ctx.static_shape(x)[axis])
    idx = ctx.emit(op.argmax(x, axis=axis, keepdims=False))
    return ctx.emit(op.one_hot(idx, depth, 1.0, 0.0, axis=axis, dtype=ctx.info(x).dtype))
