"""Shape manipulation: reshape, permute_dims, expand_dims, squeeze, flatten, concat, split,
strided_slice, broadcast_to, tile, repeat, flip, pad."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...ast import expr as tir
from ...ast.graph_struct_info import TensorStructInfo, TupleStructInfo, as_dim
from ...errors import IRError
from ..shape_facts import const_value, product, simplify
from ._common import make_call, same_dtype, te
from .registry import register

BIG = 2 ** 62  # an `end` at least this large means "to the end of the axis"


def _unflatten(flat: tir.PrimExpr, shape: Sequence[tir.PrimExpr]) -> tuple:
    """Row-major multi-index of a flat offset."""
    idx = []
    for d in reversed(tuple(shape)[1:]):
        d = d.astype(flat.dtype)
        idx.append(flat % d)
        flat = flat // d
    idx.append(flat)
    return tuple(reversed(idx)) if shape else ()


def _flatten_index(idx: Sequence[tir.PrimExpr], shape: Sequence[tir.PrimExpr]) -> tir.PrimExpr:
    flat = None
    for i, d in zip(idx, shape):
        i = i.astype("int64")
        flat = i if flat is None else flat * d.astype("int64") + i
    return flat if flat is not None else tir.IntImm(0, "int64")


# ----------------------------------------------------------------------------- reshape

def reshape(x, shape):
    """Same elements in row-major order under a new shape (one dim may be -1)."""
    return make_call("reshape", x, shape=tuple(shape))


def _reshape_infer(call, ctx):
    x = ctx.tensor(0)
    target = [as_dim(d) for d in ctx.attr("shape")]
    minus = [k for k, d in enumerate(target) if const_value(d) == -1]
    if len(minus) > 1:
        ctx.fail("at most one dimension may be -1", kind=IRError)
    if x.shape is None:
        if minus:
            return TensorStructInfo(None, x.dtype, len(target))
        return TensorStructInfo(tuple(target), x.dtype)
    old = product(x.shape)
    if minus:
        old, rest = _cancel_common_factors(x.shape, [d for k, d in enumerate(target) if k != minus[0]])
        ctx.require(tir.EQ(tir.FloorMod(old, rest), as_dim(0)) if const_value(rest) != 0 else as_dim(0) == 1,
                    f"the element count {old} is divisible by {rest} (to infer the -1 dim)")
        target[minus[0]] = simplify(tir.FloorDiv(old, rest)) if const_value(rest) != 1 else old
        return TensorStructInfo(tuple(target), x.dtype)  # the count is kept once the division is exact
    ctx.require_equal(old, product(target), "reshape keeps the element count",
                      hint="the product of the new shape must equal the product of the old one")
    return TensorStructInfo(tuple(target), x.dtype)


def _reshape_te(x, shape):
    out_shape = _resolved_shape(x.shape, shape)
    return te().compute(out_shape, lambda *i: x[_unflatten(_flatten_index(i, out_shape), x.shape)],
                        name="reshape")


def _resolved_shape(old_shape, shape):
    target = [as_dim(d) for d in shape]
    for k, d in enumerate(target):
        if const_value(d) == -1:
            old, rest = _cancel_common_factors(old_shape, [t for j, t in enumerate(target) if j != k])
            target[k] = simplify(tir.FloorDiv(old, rest)) if const_value(rest) != 1 else old
    return tuple(target)


def _cancel_common_factors(old_shape, other_dims) -> tuple:
    """(element count, product of the other dims) with the symbolic factors they share taken
    out of both: `(batch, seq, 128)` to `(batch, seq, -1, 32)` infers 128 // 32 = 4, not
    `batch * seq * 128 // (batch * seq * 32)` (which no simplifier may cancel, batch * seq
    being possibly 0; when it is, the tensor is empty and any -1 dim holds its 0 elements)."""
    from ...ast.structural import structural_equal

    def factors(dims):
        out = []
        for d in dims:
            stack = [as_dim(d)]
            while stack:
                e = stack.pop()
                if isinstance(e, tir.Mul):
                    stack += [e.a, e.b]
                else:
                    out.append(e)
        return out

    old, rest = factors(old_shape), factors(other_dims)
    for f in list(rest):
        if const_value(f) is not None:
            continue
        k = next((k for k, g in enumerate(old) if structural_equal(g, f, map_free_vars=False)), None)
        if k is not None:
            del old[k]
            rest.remove(f)
    return product(old), product(rest)


register("reshape", infer=_reshape_infer, reference=lambda x, shape: x.reshape(tuple(int(d) for d in shape)),
         legalize=_reshape_te, pattern="injective", doc="reshape")


# ----------------------------------------------------------------------------- permute, expand, squeeze, flatten

def permute_dims(x, axes=None):
    """Transpose: output dim k is input dim axes[k] (reversed when None)."""
    return make_call("permute_dims", x, axes=None if axes is None else tuple(axes))


def _perm(ctx, ndim, axes):
    if axes is None:
        return tuple(reversed(range(ndim)))
    perm = tuple(ctx.axis(a, ndim) for a in axes)
    if sorted(perm) != list(range(ndim)):
        ctx.fail(f"axes {axes} is not a permutation of {ndim} dims", kind=IRError)
    return perm


def _permute_infer(call, ctx):
    x = ctx.tensor(0)
    if x.shape is None:
        return x
    perm = _perm(ctx, x.ndim, ctx.attr("axes", None))
    return TensorStructInfo(tuple(x.shape[p] for p in perm), x.dtype)


def _permute_te(x, axes=None):
    ndim = len(x.shape)
    perm = tuple(reversed(range(ndim))) if axes is None else tuple(a % ndim for a in axes)
    inverse = [perm.index(k) for k in range(ndim)]
    return te().compute(tuple(x.shape[p] for p in perm), lambda *i: x[tuple(i[inverse[k]] for k in range(ndim))],
                        name="transpose")


register("permute_dims", infer=_permute_infer, reference=lambda x, axes=None: np.transpose(x, axes),
         legalize=_permute_te, pattern="injective", doc="transpose")


def expand_dims(x, axis):
    """Insert size-1 dims at the given output positions."""
    return make_call("expand_dims", x, axis=(axis,) if isinstance(axis, int) else tuple(axis))


def _expand_positions(ndim_in, axis):
    out_ndim = ndim_in + len(axis)
    return sorted(a % out_ndim for a in axis), out_ndim


def _expand_infer(call, ctx):
    x = ctx.tensor(0)
    axis = ctx.attr("axis")
    if x.ndim == -1:
        return TensorStructInfo(None, x.dtype, -1)
    out_ndim = x.ndim + len(axis)
    for a in axis:
        ctx.axis(a, out_ndim)
    positions, _ = _expand_positions(x.ndim, axis)
    if x.shape is None:
        return TensorStructInfo(None, x.dtype, out_ndim)
    it = iter(x.shape)
    return TensorStructInfo(tuple(1 if k in positions else next(it) for k in range(out_ndim)), x.dtype)


def _expand_te(x, axis):
    positions, out_ndim = _expand_positions(len(x.shape), axis)
    it = iter(x.shape)
    shape = tuple(1 if k in positions else next(it) for k in range(out_ndim))
    keep = [k for k in range(out_ndim) if k not in positions]
    return te().compute(shape, lambda *i: x[tuple(i[k] for k in keep)], name="expand_dims")


register("expand_dims", infer=_expand_infer, reference=lambda x, axis: np.expand_dims(x, tuple(axis)),
         legalize=_expand_te, pattern="injective", doc="insert unit dims")


def squeeze(x, axis=None):
    """Remove size-1 dims (the given ones, or every static 1 when None)."""
    return make_call("squeeze", x, axis=None if axis is None else ((axis,) if isinstance(axis, int) else tuple(axis)))


def _squeeze_axes(ctx, info, axis):
    if axis is None:
        return tuple(k for k, d in enumerate(info.shape) if const_value(d) == 1)
    axes = tuple(sorted({ctx.axis(a, info.ndim) for a in axis}))
    for a in axes:
        ctx.require_equal(info.shape[a], as_dim(1), f"squeezed axis {a} has length 1")
    return axes


def _squeeze_infer(call, ctx):
    x = ctx.tensor(0)
    axis = ctx.attr("axis", None)
    if x.shape is None or (axis is None and any(const_value(d) is None for d in x.shape)):
        # Without axes, a symbolic dim might be 1 at run time and vanish: the rank is unknown.
        return TensorStructInfo(None, x.dtype, -1 if axis is None or x.ndim == -1 else x.ndim - len(set(axis)))
    axes = _squeeze_axes(ctx, x, ctx.attr("axis", None))
    return TensorStructInfo(tuple(d for k, d in enumerate(x.shape) if k not in axes), x.dtype)


def _squeeze_te(x, axis=None):
    ndim = len(x.shape)
    axes = (tuple(k for k, d in enumerate(x.shape) if const_value(d) == 1) if axis is None
            else tuple(sorted({a % ndim for a in axis})))
    keep = [k for k in range(ndim) if k not in axes]

    def body(*i):
        src = []
        for k in range(ndim):
            src.append(i[keep.index(k)] if k in keep else tir.IntImm(0, "int64"))
        return x[tuple(src)]

    return te().compute(tuple(x.shape[k] for k in keep), body, name="squeeze")


register("squeeze", infer=_squeeze_infer,
         reference=lambda x, axis=None: np.squeeze(x, axis=None if axis is None else tuple(axis)),
         legalize=_squeeze_te, pattern="injective", doc="remove unit dims")


def flatten(x, start_dim=0, end_dim=-1):
    """Merge dims start_dim..end_dim into one (torch's flatten)."""
    return make_call("flatten", x, start_dim=int(start_dim), end_dim=int(end_dim))


def _flatten_shape(shape, start, end):
    ndim = len(shape)
    if ndim == 0:
        return (as_dim(1),)
    s, e = start % ndim, end % ndim
    return tuple(shape[:s]) + (product(shape[s:e + 1]),) + tuple(shape[e + 1:])


def _flatten_infer(call, ctx):
    x = ctx.tensor(0)
    start, end = ctx.attr("start_dim", 0), ctx.attr("end_dim", -1)
    if x.shape is None:
        return TensorStructInfo(None, x.dtype, -1)
    if x.ndim:
        s, e = ctx.axis(start, x.ndim, "start_dim"), ctx.axis(end, x.ndim, "end_dim")
        if s > e:
            ctx.fail(f"start_dim {start} comes after end_dim {end}", kind=IRError)
    return TensorStructInfo(_flatten_shape(x.shape, start, end), x.dtype)


def _flatten_te(x, start_dim=0, end_dim=-1):
    shape = _flatten_shape(x.shape, start_dim, end_dim)
    return te().compute(shape, lambda *i: x[_unflatten(_flatten_index(i, shape), x.shape)] if x.shape else x[()],
                        name="flatten")


def _np_flatten(x, start_dim=0, end_dim=-1):
    if x.ndim == 0:
        return x.reshape(1)
    s, e = start_dim % x.ndim, end_dim % x.ndim
    return x.reshape(x.shape[:s] + (-1,) + x.shape[e + 1:]) if x.size else x.reshape(
        x.shape[:s] + (int(np.prod(x.shape[s:e + 1])),) + x.shape[e + 1:])


register("flatten", infer=_flatten_infer, reference=_np_flatten, legalize=_flatten_te, pattern="injective",
         doc="merge a range of dims")


# ----------------------------------------------------------------------------- concat, split

def concat(*tensors: Any, axis: int = 0):
    """Join tensors along axis: concat(a, b, axis=1) or concat([a, b], axis=1)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    return make_call("concat", *tensors, axis=int(axis))


def _concat_infer(call, ctx):
    infos = [ctx.tensor(k) for k in range(len(call.args))]
    if not infos:
        ctx.fail("needs at least one tensor", kind=IRError)
    dtype = same_dtype(ctx, *infos)
    if any(i.shape is None for i in infos):
        return TensorStructInfo(None, dtype, max(i.ndim for i in infos))
    ndim = infos[0].ndim
    if any(i.ndim != ndim for i in infos):
        ctx.fail(f"tensors have different ranks: {[i.ndim for i in infos]}", kind=IRError)
    axis = ctx.axis(ctx.attr("axis", 0), ndim)
    out = list(infos[0].shape)
    for i in infos[1:]:
        for k in range(ndim):
            if k != axis:
                ctx.require_equal(out[k], i.shape[k], f"non-concatenated dim {k} agrees")
    out[axis] = simplify(_sum_dims([i.shape[axis] for i in infos]))
    return TensorStructInfo(tuple(out), dtype)


def _sum_dims(dims):
    total = None
    for d in dims:
        total = d if total is None else total + d
    return total


def _concat_te(*tensors, axis=0):
    ndim = len(tensors[0].shape)
    a = axis % ndim
    offsets = [as_dim(0)]
    for t in tensors:
        offsets.append(simplify(offsets[-1] + as_dim(t.shape[a])))
    shape = list(tensors[0].shape)
    shape[a] = offsets[-1]

    def body(*i):
        pos = i[a].astype("int64")
        value = None
        for k in reversed(range(len(tensors))):
            src = list(i)
            src[a] = (pos - offsets[k]).astype(i[a].dtype)
            load = tensors[k][tuple(src)]
            # Only the taken branch is evaluated, so no load leaves its tensor.
            value = load if value is None else tir.Call(
                "if_then_else", (tir.LT(pos, offsets[k + 1]), load, value), load.dtype)
        return value

    return te().compute(tuple(shape), body, name="concat")


register("concat", infer=_concat_infer, reference=lambda *xs, axis=0: np.concatenate(xs, axis=axis),
         legalize=_concat_te, pattern="injective", doc="join along an axis")


def split(x, indices_or_sections, axis: int = 0):
    """Split along axis into n equal sections (an int) or at the given indices (a tuple)."""
    value = indices_or_sections if isinstance(indices_or_sections, int) else tuple(indices_or_sections)
    return make_call("split", x, indices_or_sections=value, axis=int(axis))


def _split_bounds(ctx, length, spec):
    if isinstance(spec, int):
        if ctx is not None:
            ctx.require(tir.EQ(tir.FloorMod(as_dim(length), as_dim(spec)), as_dim(0)),
                        f"the axis length {length} is divisible into {spec} sections")
        size = simplify(tir.FloorDiv(as_dim(length), as_dim(spec)))
        return [(simplify(size * k) if k else as_dim(0), simplify(size * (k + 1))) for k in range(spec)]
    points = [as_dim(0)] + [as_dim(p) for p in spec] + [as_dim(length)]
    return [(points[k], points[k + 1]) for k in range(len(points) - 1)]


def _split_infer(call, ctx):
    x = ctx.tensor(0)
    spec = ctx.attr("indices_or_sections")
    count = spec if isinstance(spec, int) else len(spec) + 1
    if x.shape is None:
        return TupleStructInfo(tuple(TensorStructInfo(None, x.dtype, x.ndim) for _ in range(count)))
    axis = ctx.axis(ctx.attr("axis", 0), x.ndim)
    fields = []
    for lo, hi in _split_bounds(ctx, x.shape[axis], spec):
        shape = list(x.shape)
        shape[axis] = simplify(hi - lo)
        fields.append(TensorStructInfo(tuple(shape), x.dtype))
    return TupleStructInfo(tuple(fields))


def _split_te(x, indices_or_sections, axis=0):
    a = axis % len(x.shape)
    outs = []
    for k, (lo, hi) in enumerate(_split_bounds(None, x.shape[a], indices_or_sections)):
        shape = list(x.shape)
        shape[a] = simplify(hi - lo)

        def body(*i, lo=lo):
            src = list(i)
            src[a] = i[a] + lo.astype(i[a].dtype)
            return x[tuple(src)]

        outs.append(te().compute(tuple(shape), body, name=f"split{k}"))
    return outs


def _np_split(x, indices_or_sections, axis=0):
    return tuple(np.split(x, indices_or_sections if isinstance(indices_or_sections, int)
                          else list(indices_or_sections), axis=axis))


register("split", infer=_split_infer, reference=_np_split, legalize=_split_te, pattern="injective",
         doc="split into a tuple")


# ----------------------------------------------------------------------------- strided_slice

def strided_slice(x, axes, begin, end, strides=None):
    """x[begin:end:stride] on the given axes (numpy slice semantics; ends clamp).  begin and end may
    be integer expressions over size vars whose sign is provable (`seq`, `seq + 1`, `-seq`)."""
    strides = tuple(strides) if strides is not None else (1,) * len(axes)
    return make_call("strided_slice", x, axes=tuple(axes), begin=tuple(_slice_bound(b) for b in begin),
                     end=tuple(_slice_bound(e) for e in end), strides=strides)


def _slice_bound(value):
    """An int where the bound is one, else its int64 expression."""
    if isinstance(value, tir.PrimExpr):
        value = simplify(value.astype("int64") if value.dtype != "int64" else value)
        known = const_value(value)
        return value if known is None else known
    return int(value)


def _sign(value) -> int:
    """1 where a slice bound is provably >= 0, -1 where provably < 0; an IRError otherwise."""
    if isinstance(value, int):
        return 1 if value >= 0 else -1
    from ..shape_facts import prove

    if prove(tir.GE(value, as_dim(0))).proved:
        return 1
    if prove(tir.LT(value, as_dim(0))).proved:
        return -1
    raise IRError(f"strided_slice: the sign of the bound {value} is not known at compile time")


def _slice_dim(dim, b, e, s):
    """(start, length) of slice(b, e, s) over a dim; symbolic dims or bounds need s > 0."""
    n = const_value(dim)
    symbolic = isinstance(b, tir.PrimExpr) or isinstance(e, tir.PrimExpr)
    if n is not None and not symbolic:
        r = range(*slice(b, e if e < BIG else None, s).indices(n))
        return as_dim(r.start if len(r) else 0), as_dim(len(r))
    if s <= 0:
        raise IRError(f"strided_slice: a negative stride needs a static dim and bounds, got {dim}")
    begin_sign, end_sign = _sign(b), _sign(e)
    start = tir.Min(as_dim(b), as_dim(dim)) if begin_sign > 0 else tir.Max(as_dim(dim) + as_dim(b), as_dim(0))
    if isinstance(e, int) and e >= BIG:
        stop = as_dim(dim)
    elif end_sign > 0:
        stop = tir.Min(as_dim(e), as_dim(dim))
    else:
        stop = tir.Max(as_dim(dim) + as_dim(e), as_dim(0))
    length = tir.Max(tir.FloorDiv(stop - start + as_dim(s - 1), as_dim(s)), as_dim(0))
    return simplify(start), simplify(length)


def _slice_infer(call, ctx):
    x = ctx.tensor(0)
    axes, begin, end = ctx.attr("axes"), ctx.attr("begin"), ctx.attr("end")
    strides = ctx.attr("strides", (1,) * len(axes))
    if not len(axes) == len(begin) == len(end) == len(strides):
        ctx.fail("axes, begin, end and strides must have one entry per axis", kind=IRError)
    if any(s == 0 for s in strides):
        ctx.fail("a stride of 0 is not allowed", kind=IRError)
    if x.shape is None:
        return x
    shape = list(x.shape)
    for a, b, e, s in zip(axes, begin, end, strides):
        k = ctx.axis(a, x.ndim)
        try:
            shape[k] = _slice_dim(x.shape[k], b, e, s)[1]
        except IRError as exc:
            ctx.fail(str(exc), kind=IRError)
    return TensorStructInfo(tuple(shape), x.dtype)


def _slice_te(x, axes, begin, end, strides=None):
    strides = strides or (1,) * len(axes)
    ndim = len(x.shape)
    plan = {a % ndim: (_slice_dim(x.shape[a % ndim], b, e, s), s) for a, b, e, s in zip(axes, begin, end, strides)}
    shape = [plan[k][0][1] if k in plan else d for k, d in enumerate(x.shape)]

    def body(*i):
        src = list(i)
        for k, ((start, _), s) in plan.items():
            src[k] = (start.astype(i[k].dtype) + i[k] * tir.const(s, i[k].dtype))
        return x[tuple(src)]

    return te().compute(tuple(shape), body, name="strided_slice")


def _np_slice(x, axes, begin, end, strides=None):
    strides = strides or (1,) * len(axes)
    index = [slice(None)] * x.ndim
    for a, b, e, s in zip(axes, begin, end, strides):
        index[a] = slice(int(b), None if e >= BIG else int(e), s)
    return x[tuple(index)]


register("strided_slice", infer=_slice_infer, reference=_np_slice, legalize=_slice_te, pattern="injective",
         doc="numpy basic slicing")


# ----------------------------------------------------------------------------- broadcast_to, tile, repeat, flip

def broadcast_to(x, shape):
    """x broadcast to shape (numpy rules)."""
    return make_call("broadcast_to", x, shape=tuple(shape))


def _broadcast_to_infer(call, ctx):
    x = ctx.tensor(0)
    target = tuple(as_dim(d) for d in ctx.attr("shape"))
    if x.shape is not None:
        if x.ndim > len(target):
            ctx.fail(f"cannot broadcast a {x.ndim}-d tensor to {len(target)} dims", kind=IRError)
        for k, d in enumerate(x.shape):
            t = target[len(target) - x.ndim + k]
            if const_value(d) != 1:
                ctx.require_equal(d, t, f"dim {k} is 1 or equals the target")
    return TensorStructInfo(target, x.dtype)


def _broadcast_to_te(x, shape):
    from ._common import broadcast_index

    target = tuple(as_dim(d) for d in shape)
    return te().compute(target, lambda *i: x[broadcast_index(i, len(target), x.shape)] if x.shape else x[()],
                        name="broadcast_to")


register("broadcast_to", infer=_broadcast_to_infer,
         reference=lambda x, shape: np.broadcast_to(x, tuple(int(d) for d in shape)).copy(),
         legalize=_broadcast_to_te, pattern="broadcast", doc="broadcast to a shape")


def tile(x, repeats):
    """Repeat the whole tensor `repeats[k]` times along each dim (numpy.tile); a count may be an
    integer expression over size vars."""
    return make_call("tile", x, repeats=tuple(repeats))


def _tile_shape(shape, repeats):
    ndim = max(len(shape), len(repeats))
    shape = (as_dim(1),) * (ndim - len(shape)) + tuple(shape)
    reps = (1,) * (ndim - len(repeats)) + tuple(repeats)
    return tuple(simplify(as_dim(d) * as_dim(r)) if const_value(as_dim(r)) != 1 else as_dim(d)
                 for d, r in zip(shape, reps)), shape


def _tile_infer(call, ctx):
    x = ctx.tensor(0)
    if x.shape is None:
        return TensorStructInfo(None, x.dtype, -1)
    return TensorStructInfo(_tile_shape(x.shape, ctx.attr("repeats"))[0], x.dtype)


def _tile_te(x, repeats):
    out, padded = _tile_shape(x.shape, repeats)
    lead = len(out) - len(x.shape)
    return te().compute(out, lambda *i: x[tuple(i[lead + k] % padded[lead + k].astype(i[lead + k].dtype)
                                                 for k in range(len(x.shape)))], name="tile")


register("tile", infer=_tile_infer, reference=lambda x, repeats: np.tile(x, repeats), legalize=_tile_te,
         pattern="injective", doc="numpy.tile")


def repeat(x, repeats: int, axis: int | None = None):
    """Repeat each element `repeats` times along axis (flattened when None; numpy.repeat)."""
    return make_call("repeat", x, repeats=int(repeats), axis=axis)


def _repeat_infer(call, ctx):
    x = ctx.tensor(0)
    r, axis = ctx.attr("repeats"), ctx.attr("axis", None)
    if x.shape is None:
        return TensorStructInfo(None, x.dtype, 1 if axis is None else x.ndim)
    if axis is None:
        return TensorStructInfo((simplify(product(x.shape) * as_dim(r)),), x.dtype)
    k = ctx.axis(axis, x.ndim)
    shape = list(x.shape)
    shape[k] = simplify(shape[k] * as_dim(r))
    return TensorStructInfo(tuple(shape), x.dtype)


def _repeat_te(x, repeats, axis=None):
    if axis is None:
        flat_shape = (product(x.shape),)
        x = te().compute(flat_shape, lambda f: x[_unflatten(f, x.shape)], name="flat")
        axis = 0
    k = axis % len(x.shape)
    shape = list(x.shape)
    shape[k] = simplify(as_dim(shape[k]) * as_dim(repeats))

    def body(*i):
        src = list(i)
        src[k] = i[k] // tir.const(repeats, i[k].dtype)
        return x[tuple(src)]

    return te().compute(tuple(shape), body, name="repeat")


register("repeat", infer=_repeat_infer, reference=lambda x, repeats, axis=None: np.repeat(x, repeats, axis),
         legalize=_repeat_te, pattern="injective", doc="numpy.repeat")


def flip(x, axis):
    """Reverse the order of elements along the given axes."""
    return make_call("flip", x, axis=(axis,) if isinstance(axis, int) else tuple(axis))


def _flip_infer(call, ctx):
    x = ctx.tensor(0)
    if x.ndim != -1:
        for a in ctx.attr("axis"):
            ctx.axis(a, x.ndim)
    return x


def _flip_te(x, axis):
    ndim = len(x.shape)
    axes = {a % ndim for a in axis}
    return te().compute(x.shape, lambda *i: x[tuple(
        (x.shape[k].astype(i[k].dtype) - tir.const(1, i[k].dtype) - i[k]) if k in axes else i[k]
        for k in range(ndim))], name="flip")


register("flip", infer=_flip_infer, reference=lambda x, axis: np.flip(x, tuple(axis)).copy(), legalize=_flip_te,
         pattern="injective", doc="reverse along axes")


# ----------------------------------------------------------------------------- pad

def pad(x, pad_width, pad_value: float = 0.0, mode: str = "constant"):
    """Pad with ((before, after), ...) per dim; mode "constant", "edge" or "reflect"."""
    return make_call("pad", x, pad_width=tuple(tuple(int(v) for v in p) for p in pad_width),
                     pad_value=float(pad_value), mode=mode)


def _pad_infer(call, ctx):
    x = ctx.tensor(0)
    widths = ctx.attr("pad_width")
    mode = ctx.attr("mode", "constant")
    if mode not in ("constant", "edge", "reflect"):
        ctx.fail(f"unknown pad mode {mode!r}; expected constant, edge or reflect", kind=IRError)
    if x.ndim != -1 and len(widths) != x.ndim:
        ctx.fail(f"pad_width has {len(widths)} entries for a {x.ndim}-d tensor", kind=IRError)
    if any(b < 0 or a < 0 for b, a in widths):
        ctx.fail("negative pad widths are not supported; use strided_slice", kind=IRError)
    if x.shape is None:
        return x
    return TensorStructInfo(tuple(simplify(d + as_dim(b + a)) if b + a else d for d, (b, a) in zip(x.shape, widths)),
                            x.dtype)


def _pad_te(x, pad_width, pad_value=0.0, mode="constant"):
    shape = tuple(simplify(as_dim(d) + as_dim(b + a)) if b + a else d for d, (b, a) in zip(x.shape, pad_width))

    def body(*i):
        src, inside = [], []
        for k, (b, _a) in enumerate(pad_width):
            n = x.shape[k].astype(i[k].dtype)
            j = i[k] - tir.const(b, i[k].dtype)
            if mode == "constant":
                if b or _a:
                    inside.append(tir.And(tir.GE(j, tir.const(0, j.dtype)), tir.LT(j, n)))
                src.append(j)
            elif mode == "edge":
                src.append(tir.Max(tir.const(0, j.dtype), tir.Min(j, n - tir.const(1, j.dtype))))
            else:  # reflect: -j, and 2(n-1) - j past the end
                j = tir.Select(tir.LT(j, tir.const(0, j.dtype)), -j, j)
                src.append(tir.Select(tir.GE(j, n), tir.const(2, j.dtype) * (n - tir.const(1, j.dtype)) - j, j))
        load = x[tuple(src)]
        if mode != "constant" or not inside:
            return load
        cond = inside[0]
        for c in inside[1:]:
            cond = tir.And(cond, c)
        return tir.Call("if_then_else", (cond, load, tir.const(pad_value, x.dtype)), load.dtype)

    return te().compute(shape, body, name="pad")


def _np_pad(x, pad_width, pad_value=0.0, mode="constant"):
    if mode == "constant":
        return np.pad(x, pad_width, mode="constant", constant_values=np.asarray(pad_value).astype(x.dtype))
    return np.pad(x, pad_width, mode=mode)


register("pad", infer=_pad_infer, reference=_np_pad, legalize=_pad_te, pattern="injective", doc="pad")
