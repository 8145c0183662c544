"""ONNX ops whose output length depends on the data: NonZero, Unique, NonMaxSuppression.

Each computes its output length as a tensor, reads it when the program runs and binds it to a
fresh size var (runtime_values), the Relax way: the ops after it are typed with that var.  The
entries are then gathered by index tensors of that length: "the position of the (k+1)-th true
flag" is the number of positions whose running count of true flags is at most k (`nth_true`),
a comparison of every position with every output slot, so no op needs a data-dependent loop.
"""
from __future__ import annotations

import numpy as np

from ...ast.graph import Constant
from ...graph import op
from ...graph.shape_facts import const_value, product
from .importer import converter
from .ops_dynamic import runtime_arange
from .runtime_values import runtime_sizes


def _i64(v: int) -> Constant:
    return Constant(np.asarray(v, np.int64))


def _static_length(ctx, value, what: str) -> int:
    n = const_value(product(ctx.static_shape(value)))
    if n is None:
        ctx.fail(f"{what} needs an input of static shape")
    return n


def count_of(ctx, flags, what: str):
    """The number of true entries of a 1-d int64 0/1 tensor, bound to a fresh size var."""
    (length,) = runtime_sizes(ctx, ctx.emit(op.sum(flags, axis=None, keepdims=True)), what)
    return length


def nth_true(ctx, flags, n: int, length):
    """For k in 0..length-1, the position of the (k+1)-th true entry of the 1-d 0/1 tensor flags."""
    running = ctx.emit(op.reshape(ctx.emit(op.cumsum(flags, axis=0)), (1, n)))
    slots = ctx.emit(op.reshape(runtime_arange(ctx, length), (length, 1)))
    before = ctx.emit(op.astype(ctx.emit(op.less_equal(running, slots)), "int64"))
    return ctx.emit(op.sum(before, axis=(1,), keepdims=False))


@converter("NonZero")
def _nonzero(ctx, node, inputs, attrs):
    x = inputs[0]
    dims = [const_value(d) for d in ctx.static_shape(x)]
    if None in dims:
        ctx.fail("NonZero needs an input of static shape")
    n = int(np.prod(dims, dtype=np.int64))
    flat = ctx.emit(op.reshape(x, (n,)))
    zero = Constant(np.zeros((), ctx.info(x).dtype.numpy()))
    flags = ctx.emit(op.astype(ctx.emit(op.not_equal(flat, zero)), "int64"))
    length = count_of(ctx, flags, "nonzero")
    position = nth_true(ctx, flags, n, length)
    if not dims:  # a scalar: one row of no coordinates
        return ctx.emit(op.reshape(ctx.emit(op.multiply(position, _i64(0))), (0, length)))
    rows = []
    stride = n
    for d in dims:
        stride //= max(d, 1)
        coordinate = ctx.emit(op.floor_mod(ctx.emit(op.floor_divide(position, _i64(max(stride, 1)))), _i64(max(d, 1))))
        rows.append(ctx.emit(op.reshape(coordinate, (1, length))))
    return rows[0] if len(rows) == 1 else ctx.emit(op.concat(*rows, axis=0))


def _slices(ctx, x, axis):
    """x as (n, m): n slices along axis (or n elements when axis is None), each flattened."""
    dims = [const_value(d) for d in ctx.static_shape(x)]
    if None in dims:
        ctx.fail("Unique needs an input of static shape")
    if axis is None:
        n = int(np.prod(dims, dtype=np.int64))
        return ctx.emit(op.reshape(x, (n, 1))), n, 1, dims
    axis %= len(dims)
    order = [axis] + [j for j in range(len(dims)) if j != axis]
    moved = ctx.emit(op.permute_dims(x, tuple(order))) if axis else x
    n = dims[axis]
    m = int(np.prod([d for j, d in enumerate(dims) if j != axis], dtype=np.int64))
    return ctx.emit(op.reshape(moved, (n, m))), n, m, dims


@converter("Unique")
def _unique(ctx, node, inputs, attrs):
    """Unique elements (or slices along axis): values, first indices, inverse indices, counts.

    equal[i, j] says slices i and j are equal; first[i] is the first j equal to i.  Sorted, a
    slice's rank is the number of distinct slices lexicographically smaller than it; unsorted,
    the number of distinct slices first seen before it.  Output slot k holds the first
    occurrence of rank k.
    """
    x = inputs[0]
    axis = attrs.get("axis")
    sorted_ = bool(attrs.get("sorted", 1))
    rows, n, m, dims = _slices(ctx, x, axis)
    a = ctx.emit(op.reshape(rows, (n, 1, m)))
    b = ctx.emit(op.reshape(rows, (1, n, m)))
    differ = ctx.emit(op.astype(ctx.emit(op.not_equal(a, b)), "int64"))
    equal = ctx.emit(op.equal(ctx.emit(op.sum(differ, axis=(2,), keepdims=False)), _i64(0)))
    first = ctx.emit(op.argmax(ctx.emit(op.astype(equal, "int64")), axis=1, keepdims=False))
    index = runtime_arange(ctx, n)
    is_first = ctx.emit(op.astype(ctx.emit(op.equal(first, index)), "int64"))
    length = count_of(ctx, is_first, "unique")
    if sorted_:
        # i < j lexicographically: at the first position where they differ, i's entry is smaller
        undecided = ctx.emit(op.equal(ctx.emit(op.cumsum(differ, axis=2, exclusive=True)), _i64(0)))
        smaller = ctx.emit(op.logical_and(undecided, ctx.emit(op.less(a, b))))
        less = ctx.emit(op.astype(ctx.emit(op.greater(ctx.emit(op.sum(ctx.emit(op.astype(smaller, "int64")),
                                                                         axis=(2,), keepdims=False)),
                                                      _i64(0))), "int64"))
        # rank[i] = the number of first occurrences j whose slice is smaller than slice i
        rank = ctx.emit(op.sum(ctx.emit(op.multiply(less, ctx.emit(op.reshape(is_first, (n, 1))))),
                               axis=(0,), keepdims=False))
    else:
        seen = ctx.emit(op.subtract(ctx.emit(op.cumsum(is_first, axis=0)), _i64(1)))
        rank = ctx.emit(op.take(seen, first, axis=0))
    slots = ctx.emit(op.reshape(runtime_arange(ctx, length), (length, 1)))
    holds = ctx.emit(op.astype(ctx.emit(op.equal(ctx.emit(op.reshape(rank, (1, n))), slots)), "int64"))
    counts = ctx.emit(op.sum(holds, axis=(1,), keepdims=False))
    firsts = ctx.emit(op.multiply(holds, ctx.emit(op.reshape(is_first, (1, n)))))
    indices = ctx.emit(op.sum(ctx.emit(op.multiply(firsts, ctx.emit(op.reshape(index, (1, n))))),
                              axis=(1,), keepdims=False))
    if axis is None:
        values = ctx.emit(op.take(ctx.emit(op.reshape(x, (n,))), indices, axis=0))
    else:
        values = ctx.emit(op.take(x, indices, axis=axis % len(dims)))
    return [values, indices, rank, counts]


MAX_NMS_BOXES = 128  # the greedy selection is unrolled once per box


def _box_edges(ctx, boxes, center_point_box: int):
    """(x_min, x_max, y_min, y_max) of each box, each (B, N)."""
    def coord(k):
        return ctx.emit(op.take(boxes, _i64(k), axis=2))

    if center_point_box:
        half = Constant(np.asarray(2, ctx.info(boxes).dtype.numpy()))
        x, y, w, h = (coord(k) for k in range(4))
        w2, h2 = ctx.emit(op.divide(w, half)), ctx.emit(op.divide(h, half))
        return (ctx.emit(op.subtract(x, w2)), ctx.emit(op.add(x, w2)),
                ctx.emit(op.subtract(y, h2)), ctx.emit(op.add(y, h2)))
    y1, x1, y2, x2 = (coord(k) for k in range(4))
    return (ctx.emit(op.minimum(x1, x2)), ctx.emit(op.maximum(x1, x2)),
            ctx.emit(op.minimum(y1, y2)), ctx.emit(op.maximum(y1, y2)))


def _suppresses(ctx, boxes, center_point_box: int, iou_threshold):
    """(B, N, N): box j suppresses box k (their intersection over union exceeds the threshold)."""
    e = lambda call: ctx.emit(call)  # noqa: E731
    x0, x1, y0, y1 = _box_edges(ctx, boxes, center_point_box)
    rows = [e(op.expand_dims(v, (2,))) for v in (x0, x1, y0, y1)]
    cols = [e(op.expand_dims(v, (1,))) for v in (x0, x1, y0, y1)]
    ix0, ix1 = e(op.maximum(rows[0], cols[0])), e(op.minimum(rows[1], cols[1]))
    iy0, iy1 = e(op.maximum(rows[2], cols[2])), e(op.minimum(rows[3], cols[3]))
    inter = e(op.multiply(e(op.subtract(ix1, ix0)), e(op.subtract(iy1, iy0))))
    area = e(op.multiply(e(op.subtract(x1, x0)), e(op.subtract(y1, y0))))
    area_j, area_k = e(op.expand_dims(area, (2,))), e(op.expand_dims(area, (1,)))
    union = e(op.subtract(e(op.add(area_j, area_k)), inter))
    zero = Constant(np.zeros((), ctx.info(boxes).dtype.numpy()))
    overlap = e(op.logical_and(e(op.greater(ix1, ix0)), e(op.greater(iy1, iy0))))
    for v in (inter, area_j, area_k, union):
        overlap = e(op.logical_and(overlap, e(op.greater(v, zero))))
    safe_union = e(op.where(overlap, union, Constant(np.ones((), ctx.info(boxes).dtype.numpy()))))
    return e(op.logical_and(overlap, e(op.greater(e(op.divide(inter, safe_union)), iou_threshold))))


def _optional_scalar(ctx, inputs, k, dtype):
    """Input k as a scalar of dtype, or None when absent or empty."""
    value = inputs[k] if len(inputs) > k else None
    if value is None or const_value(product(ctx.static_shape(value))) == 0:
        return None
    return ctx.emit(op.astype(ctx.emit(op.reshape(value, ())), dtype))


@converter("NonMaxSuppression")
def _non_max_suppression(ctx, node, inputs, attrs):
    """Greedy NMS per batch and class, selected boxes listed by batch, class, then score.

    Box k is selected when its score passes the threshold and no selected box ranked before it
    (higher score, or equal score and lower index) suppresses it.  Iterating that rule from
    "every valid box" fixes one more rank per step, so as many steps as boxes give the greedy
    result; the first max_output_boxes_per_class selected of each class are kept.
    """
    boxes, scores = inputs[0], inputs[1]
    b_dims = [const_value(d) for d in ctx.static_shape(boxes)]
    s_dims = [const_value(d) for d in ctx.static_shape(scores)]
    if None in b_dims or None in s_dims or len(b_dims) != 3 or len(s_dims) != 3:
        ctx.fail("NonMaxSuppression needs boxes (B, N, 4) and scores (B, C, N) of static shape")
    batches, n, _ = b_dims
    classes = s_dims[1]
    if n > MAX_NMS_BOXES:
        ctx.fail(f"NonMaxSuppression of more than {MAX_NMS_BOXES} boxes is not supported")
    fdtype = str(ctx.info(boxes).dtype)
    limit = _optional_scalar(ctx, inputs, 2, "int64")
    limit = _i64(0) if limit is None else ctx.emit(op.maximum(limit, _i64(0)))
    iou = _optional_scalar(ctx, inputs, 3, fdtype)
    iou = Constant(np.zeros((), ctx.info(boxes).dtype.numpy())) if iou is None else iou
    threshold = _optional_scalar(ctx, inputs, 4, str(ctx.info(scores).dtype))
    e = lambda call: ctx.emit(call)  # noqa: E731

    suppress = e(op.expand_dims(_suppresses(ctx, boxes, int(attrs.get("center_point_box", 0)), iou), (1,)))
    s_j, s_k = e(op.expand_dims(scores, (3,))), e(op.expand_dims(scores, (2,)))
    lower = Constant(np.arange(n).reshape(n, 1) < np.arange(n).reshape(1, n))
    before = e(op.logical_or(e(op.greater(s_j, s_k)), e(op.logical_and(e(op.equal(s_j, s_k)), lower))))
    blocks = e(op.astype(e(op.logical_and(before, suppress)), "int64"))  # (B, C, N, N): j blocks k
    valid = Constant(np.ones((batches, classes, n), np.int64)) if threshold is None else \
        e(op.astype(e(op.greater(scores, threshold)), "int64"))
    selected = valid
    for _ in range(n):
        hit = e(op.sum(e(op.multiply(blocks, e(op.expand_dims(selected, (3,))))), axis=(2,), keepdims=False))
        selected = e(op.multiply(valid, e(op.astype(e(op.equal(hit, _i64(0))), "int64"))))
    ahead = e(op.astype(before, "int64"))
    rank = e(op.sum(e(op.multiply(ahead, e(op.expand_dims(selected, (3,))))), axis=(2,), keepdims=False))
    keep = e(op.multiply(selected, e(op.astype(e(op.less(rank, limit)), "int64"))))  # (B, C, N)
    total = batches * classes * n
    per_class = e(op.sum(keep, axis=(2,), keepdims=True))
    offset = e(op.reshape(e(op.cumsum(e(op.reshape(per_class, (batches * classes,))), axis=0, exclusive=True)),
                          (batches, classes, 1)))
    slot = e(op.reshape(e(op.add(offset, rank)), (1, total)))
    flat_keep = e(op.reshape(keep, (1, total)))
    length = count_of(ctx, e(op.reshape(keep, (total,))), "nms")
    wanted = e(op.reshape(runtime_arange(ctx, length), (length, 1)))
    hits = e(op.multiply(flat_keep, e(op.astype(e(op.equal(slot, wanted)), "int64"))))
    where = e(op.sum(e(op.multiply(hits, Constant(np.arange(total, dtype=np.int64).reshape(1, total)))),
                     axis=(1,), keepdims=False))
    parts = [e(op.floor_divide(where, _i64(classes * n))),
             e(op.floor_mod(e(op.floor_divide(where, _i64(n))), _i64(classes))),
             e(op.floor_mod(where, _i64(n)))]
    return e(op.concat(*(e(op.reshape(p, (length, 1))) for p in parts), axis=1))
