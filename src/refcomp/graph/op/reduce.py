"""Reductions with axis/keepdims (sum, mean, max, min, prod, variance, std, argmax, argmin, logsumexp,
l1/l2 norms) and the scans cumsum/cumprod."""
from __future__ import annotations

import numpy as np

from ...ast import expr as tir
from ...ast.dtype import dtype as to_dtype
from ...ast.graph_struct_info import TensorStructInfo
from ...errors import IRError
from ..shape_facts import product
from ._common import call_intrin, make_call, te
from .registry import register


def _axes_attr(axis) -> tuple[int, ...] | None:
    if axis is None:
        return None
    if isinstance(axis, int):
        return (axis,)
    return tuple(int(a) for a in axis)


def normalized_axes(ctx, ndim: int, axis) -> tuple[int, ...]:
    """The reduced axes, non-negative and sorted (all axes when None)."""
    if axis is None:
        return tuple(range(ndim))
    axes = sorted({ctx.axis(a, ndim) for a in axis})
    return tuple(axes)


def _reduce_infer(int_result: bool = False, float_only: bool = False):
    def infer(call, ctx):
        x = ctx.tensor(0)
        keepdims = bool(ctx.attr("keepdims", False))
        dtype = to_dtype("int64") if int_result else x.dtype
        if float_only and x.dtype is not None and not x.dtype.is_float:
            ctx.fail(f"expects a float tensor, got {x.dtype}", kind=IRError)
        if x.ndim == -1:
            return TensorStructInfo(None, dtype, -1)
        axes = normalized_axes(ctx, x.ndim, ctx.attr("axis", None))
        if x.shape is None:
            return TensorStructInfo(None, dtype, x.ndim if keepdims else x.ndim - len(axes))
        out = []
        for k, d in enumerate(x.shape):
            if k in axes:
                if keepdims:
                    out.append(1)
            else:
                out.append(d)
        return TensorStructInfo(tuple(out), dtype)

    return infer


def _reduce_compute(x, axis, keepdims, combine, name: str, finalize=None):
    """A te reduction of x over `axis` with te's reducer `combine` (te.sum/max/min/prod)."""
    ndim = len(x.shape)
    axes = tuple(range(ndim)) if axis is None else tuple(sorted({a % ndim for a in axis}))
    raxes = [te().reduce_axis(x.shape[a], name=f"k{a}") for a in axes]
    out_shape = []
    for k, d in enumerate(x.shape):
        if k in axes:
            if keepdims:
                out_shape.append(1)
        else:
            out_shape.append(d)

    def body(*idx):
        it = iter(idx)
        rit = iter(raxes)
        src = []
        for k in range(ndim):
            if k in axes:
                if keepdims:
                    next(it)
                src.append(next(rit).var)
            else:
                src.append(next(it))
        return combine(x[tuple(src)], axis=raxes) if raxes else x[tuple(src)]

    from ..shape_facts import const_value

    if any(const_value(x.shape[a]) == 0 for a in axes):
        # An empty reduction never runs its block (so never its init): write the identity instead.
        identity = combine.identity(x.dtype)
        red = te().compute(tuple(out_shape), lambda *i: identity, name=name)
    else:
        red = te().compute(tuple(out_shape), body, name=name)
    if finalize is None:
        return red
    count = product([x.shape[a] for a in axes])
    return te().compute(tuple(out_shape), lambda *i: finalize(red[i], count), name=name + "_final")


def _make(name: str, combine_name: str, finalize=None, reference=None, float_only=False):
    def compute(x, axis=None, keepdims=False):
        return _reduce_compute(x, axis, keepdims, getattr(te(), combine_name), name, finalize)

    register(name, infer=_reduce_infer(float_only=float_only), reference=reference, legalize=compute,
             pattern="reduction", doc=f"{name} over axes")

    def build(x, axis=None, keepdims=False):
        return make_call(name, x, axis=_axes_attr(axis), keepdims=bool(keepdims))

    build.__name__ = name
    build.__doc__ = f"{name} over `axis` (all axes when None), keeping reduced dims as 1 with keepdims."
    globals()[name] = build


def _np_reduce(fn):
    def reference(x, axis=None, keepdims=False):
        return np.asarray(fn(x, axis=axis, keepdims=keepdims)).astype(x.dtype)

    return reference


def _mean_finalize(v, count):
    return v / count.astype(v.dtype)


_make("sum", "sum", reference=_np_reduce(np.sum))
_make("max", "max", reference=_np_reduce(np.max))
_make("min", "min", reference=_np_reduce(np.min))
_make("prod", "prod", reference=_np_reduce(np.prod))
_make("mean", "sum", _mean_finalize, reference=_np_reduce(np.mean), float_only=True)


def _composite_reduce(name: str, pre, post, reference, float_only=True, doc=""):
    """A reduction sum(pre(x)) followed by post(sum, count) (variance, norms, logsumexp)."""
    def compute(x, axis=None, keepdims=False):
        if pre is None:
            src = x
        else:
            src = te().compute(x.shape, lambda *i: pre(x[i], x, i), name=name + "_pre")
        return _reduce_compute(src, axis, keepdims, te().sum, name, post)

    register(name, infer=_reduce_infer(float_only=float_only), reference=reference, legalize=compute,
             pattern="reduction", doc=doc or name)

    def build(x, axis=None, keepdims=False):
        return make_call(name, x, axis=_axes_attr(axis), keepdims=bool(keepdims))

    build.__name__ = name
    build.__doc__ = doc or name
    globals()[name] = build


_composite_reduce("l1_norm", lambda v, x, i: call_intrin("abs", v), None,
                  _np_reduce(lambda x, axis, keepdims: np.sum(np.abs(x), axis=axis, keepdims=keepdims)),
                  doc="sum of absolute values")
_composite_reduce("l2_norm", lambda v, x, i: v * v, lambda s, c: call_intrin("sqrt", s),
                  _np_reduce(lambda x, axis, keepdims: np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims))),
                  doc="square root of the sum of squares")
_composite_reduce("sum_square", lambda v, x, i: v * v, None,
                  _np_reduce(lambda x, axis, keepdims: np.sum(x * x, axis=axis, keepdims=keepdims)),
                  doc="sum of squares")


def _variance_compute(x, axis=None, keepdims=False, sqrt=False):
    mean_t = _reduce_compute(x, axis, True, te().sum, "mean", _mean_finalize)
    ndim = len(x.shape)
    axes = tuple(range(ndim)) if axis is None else tuple(sorted({a % ndim for a in axis}))

    def centered(*i):
        mi = tuple(tir.IntImm(0, i[k].dtype) if k in axes else i[k] for k in range(ndim))
        d = x[i] - mean_t[mi]
        return d * d

    sq = te().compute(x.shape, centered, name="centered_square")
    post = (lambda s, c: call_intrin("sqrt", s / c.astype(s.dtype))) if sqrt else _mean_finalize
    return _reduce_compute(sq, axis, keepdims, te().sum, "std" if sqrt else "variance", post)


for _name, _sqrt, _fn in (("variance", False, np.var), ("std", True, np.std)):
    register(_name, infer=_reduce_infer(float_only=True), reference=_np_reduce(_fn),
             legalize=(lambda s: lambda x, axis=None, keepdims=False: _variance_compute(x, axis, keepdims, s))(_sqrt),
             pattern="reduction", doc=f"population {_name}")

    def _build(x, axis=None, keepdims=False, _n=_name):
        return make_call(_n, x, axis=_axes_attr(axis), keepdims=bool(keepdims))

    _build.__name__ = _name
    _build.__doc__ = f"Population {_name} over axes."
    globals()[_name] = _build


def _logsumexp_compute(x, axis=None, keepdims=False):
    ndim = len(x.shape)
    axes = tuple(range(ndim)) if axis is None else tuple(sorted({a % ndim for a in axis}))
    m = _reduce_compute(x, axis, True, te().max, "lse_max")

    def shifted(*i):
        mi = tuple(tir.IntImm(0, i[k].dtype) if k in axes else i[k] for k in range(ndim))
        return call_intrin("exp", x[i] - m[mi])

    e = te().compute(x.shape, shifted, name="lse_exp")
    s = _reduce_compute(e, axis, True, te().sum, "lse_sum")
    out = te().compute(m.shape, lambda *i: call_intrin("log", s[i]) + m[i], name="logsumexp")
    if keepdims:
        return out
    keep = [k for k in range(ndim) if k not in axes]
    return te().compute(tuple(x.shape[k] for k in keep),
                        lambda *i: out[tuple(tir.IntImm(0, i[0].dtype if i else "int64") if k in axes
                                             else i[keep.index(k)] for k in range(ndim))],
                        name="logsumexp_squeeze")


def _np_logsumexp(x, axis=None, keepdims=False):
    m = np.max(x, axis=axis, keepdims=True)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    if not keepdims:
        out = np.squeeze(out, axis=axis) if axis is not None else out.reshape(())
    return out.astype(x.dtype)


register("logsumexp", infer=_reduce_infer(float_only=True), reference=_np_logsumexp,
         legalize=_logsumexp_compute, pattern="reduction", doc="log(sum(exp(x))) computed stably")


def logsumexp(x, axis=None, keepdims=False):
    """log(sum(exp(x))) over axes, computed with the max subtracted."""
    return make_call("logsumexp", x, axis=_axes_attr(axis), keepdims=bool(keepdims))


# ----------------------------------------------------------------------------- argmax / argmin

def _arg_infer(call, ctx):
    x = ctx.tensor(0)
    axis = ctx.attr("axis", None)
    keepdims = bool(ctx.attr("keepdims", False))
    if x.shape is None:
        return TensorStructInfo(None, "int64", -1)
    if axis is None:
        return TensorStructInfo((1,) * x.ndim if keepdims else (), "int64")
    a = ctx.axis(axis, x.ndim)
    out = [1 if k == a else d for k, d in enumerate(x.shape) if k != a or keepdims]
    return TensorStructInfo(tuple(out), "int64")


def _arg_compute(x, axis=None, keepdims=False, is_max=True):
    """argmax/argmin in two stages: the extreme value, then the smallest index holding it."""
    te_ = te()
    if axis is None:
        flat = te_.compute((product(x.shape),), lambda f: x[_unflatten(f, x.shape)], name="flat")
        result = _arg_compute(flat, 0, False, is_max)
        return _keep_all(result, len(x.shape)) if keepdims else result
    ndim = len(x.shape)
    a = axis % ndim
    extreme = _reduce_compute(x, (a,), True, te_.max if is_max else te_.min, "extreme")
    k = te_.reduce_axis(x.shape[a], name="k")
    n = x.shape[a].astype("int64")
    out_shape = [1 if j == a else d for j, d in enumerate(x.shape) if j != a or keepdims]

    def body(*idx):
        src = list(idx)
        if keepdims:
            src[a] = k.var
        else:
            src.insert(a, k.var)
        at = list(src)
        at[a] = tir.IntImm(0, k.var.dtype)
        hit = tir.EQ(x[tuple(src)], extreme[tuple(at)])
        return te_.min(tir.Select(hit, k.var.astype("int64"), n), axis=k)

    return te_.compute(tuple(out_shape), body, name="argreduce")


def _unflatten(f, shape):
    idx = []
    for d in reversed(shape[1:]):
        idx.append(f % d.astype(f.dtype))
        f = f // d.astype(f.dtype)
    idx.append(f)
    return tuple(reversed(idx))


def _keep_all(t, ndim):
    return te().compute((1,) * ndim, lambda *i: t[()], name="keepdims")


for _name, _is_max, _fn in (("argmax", True, np.argmax), ("argmin", False, np.argmin)):
    register(_name, infer=_arg_infer,
             reference=(lambda fn: lambda x, axis=None, keepdims=False: np.asarray(
                 fn(x, axis=axis, keepdims=keepdims)).astype(np.int64))(_fn),
             legalize=(lambda m: lambda x, axis=None, keepdims=False: _arg_compute(x, axis, keepdims, m))(_is_max),
             pattern="reduction", doc=f"index of the first {'largest' if _is_max else 'smallest'} value")

    def _build(x, axis=None, keepdims=False, _n=_name):
        return make_call(_n, x, axis=axis, keepdims=bool(keepdims))

    _build.__name__ = _name
    _build.__doc__ = f"{_name} along one axis (or over the flattened tensor when axis is None)."
    globals()[_name] = _build


# ----------------------------------------------------------------------------- scans

def _scan_infer(call, ctx):
    x = ctx.tensor(0)
    axis = ctx.attr("axis", None)
    if axis is None:
        if x.shape is None:
            return TensorStructInfo(None, x.dtype, 1)
        return TensorStructInfo((product(x.shape),), x.dtype)
    if x.ndim != -1:
        ctx.axis(axis, x.ndim)
    return x


def _scan_compute(x, axis=None, exclusive=False, reverse=False, is_sum=True):
    """Inclusive/exclusive prefix sums (or products) as a reduction over j <= i (quadratic, simple)."""
    te_ = te()
    if axis is None:
        x = te_.compute((product(x.shape),), lambda f: x[_unflatten(f, x.shape)], name="flat")
        axis = 0
    ndim = len(x.shape)
    a = axis % ndim
    n = x.shape[a]
    k = te_.reduce_axis(n, name="k")
    combine = te_.sum if is_sum else te_.prod

    def body(*idx):
        i = idx[a]
        src = list(idx)
        src[a] = k.var
        if reverse:
            cond = tir.GT(k.var, i) if exclusive else tir.GE(k.var, i)
        else:
            cond = tir.LT(k.var, i) if exclusive else tir.LE(k.var, i)
        one = tir.const(1 if not is_sum else 0, x.dtype)
        return combine(tir.Select(cond, x[tuple(src)], one), axis=k)

    return te_.compute(x.shape, body, name="cumsum" if is_sum else "cumprod")


def _np_scan(fn):
    def reference(x, axis=None, exclusive=False, reverse=False):
        if axis is None:
            x, axis = x.reshape(-1), 0
        data = np.flip(x, axis) if reverse else x
        out = fn(data, axis=axis, dtype=x.dtype)
        if exclusive:
            identity = 0 if fn is np.cumsum else 1
            pad = np.full_like(np.take(out, [0], axis=axis), identity)
            out = np.concatenate([pad, np.take(out, range(out.shape[axis] - 1), axis=axis)], axis=axis)
        return np.flip(out, axis) if reverse else out

    return reference


for _name, _is_sum, _fn in (("cumsum", True, np.cumsum), ("cumprod", False, np.cumprod)):
    register(_name, infer=_scan_infer, reference=_np_scan(_fn),
             legalize=(lambda s: lambda x, axis=None, exclusive=False, reverse=False: _scan_compute(
                 x, axis, exclusive, reverse, s))(_is_sum),
             pattern="opaque", doc=f"{_name} along an axis")

    def _build(x, axis=None, exclusive=False, reverse=False, _n=_name):
        return make_call(_n, x, axis=axis, exclusive=bool(exclusive), reverse=bool(reverse))

    _build.__name__ = _name
    _build.__doc__ = f"{_name} along `axis` (flattened when None), optionally exclusive or reversed."
    globals()[_name] = _build
