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
