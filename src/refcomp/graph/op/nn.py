"""Neural-network operators: convolutions, pooling, softmax, normalizations."""
from __future__ import annotations

import numpy as np

from ...ast import expr as tir
from ...ast.exp_poly import FLOAT32_DEGREE, exp_expr
from ...ast.expr import as_int
from ...ast.graph_struct_info import TensorStructInfo, as_dim
from ...errors import IRError
from ..shape_facts import product, simplify
from ._common import call_intrin, make_call, same_dtype, te
from .registry import register


def _tuple(value, n):
    if isinstance(value, int):
        return (value,) * n
    value = tuple(int(v) for v in value)
    return value * n if len(value) == 1 else value


def _out_len(n, k, stride, pad_lo, pad_hi, dilation):
    """(n + pads - dilation*(k-1) - 1) // stride + 1."""
    effective = as_dim(dilation) * (as_dim(k) - as_dim(1)) + as_dim(1)
    return simplify(tir.FloorDiv(as_dim(n) + as_dim(pad_lo + pad_hi) - effective, as_dim(stride)) + as_dim(1))


# ----------------------------------------------------------------------------- convolution

def conv2d(data, weight, strides=1, padding=0, dilation=1, groups=1):
    """NCHW x OIHW convolution; padding is an int, (h, w) or (top, left, bottom, right)."""
    return make_call("conv2d", data, weight, strides=_tuple(strides, 2), padding=_pads(padding, 2),
                     dilation=_tuple(dilation, 2), groups=int(groups))


def conv1d(data, weight, strides=1, padding=0, dilation=1, groups=1):
    """NCW x OIW convolution."""
    return make_call("conv1d", data, weight, strides=_tuple(strides, 1), padding=_pads(padding, 1),
                     dilation=_tuple(dilation, 1), groups=int(groups))


def _pads(padding, n):
    p = _tuple(padding, n)
    return p + p if len(p) == n else p


def _conv_infer(nd):
    def infer(call, ctx):
        x, w = ctx.tensor(0, "data"), ctx.tensor(1, "weight")
        dtype = same_dtype(ctx, x, w)
        groups = ctx.attr("groups", 1)
        if x.ndim not in (-1, nd + 2) or w.ndim not in (-1, nd + 2):
            ctx.fail(f"data and weight must be {nd + 2}-d, got {x.ndim}-d and {w.ndim}-d", kind=IRError)
        if x.shape is None or w.shape is None:
            return TensorStructInfo(None, dtype, nd + 2)
        strides, pads, dil = ctx.attr("strides"), ctx.attr("padding"), ctx.attr("dilation")
        ctx.require_equal(x.shape[1], simplify(w.shape[1] * as_dim(groups)),
                          "input channels equal weight in-channels times groups")
        if groups > 1:
            ctx.require(tir.EQ(tir.FloorMod(w.shape[0], as_dim(groups)), as_dim(0)),
                        "output channels divisible by groups")
        spatial = tuple(_out_len(x.shape[2 + k], w.shape[2 + k], strides[k], pads[k], pads[k + nd], dil[k])
                        for k in range(nd))
        return TensorStructInfo((x.shape[0], w.shape[0]) + spatial, dtype)

    return infer


def _conv_te(nd):
    def compute(x, w, strides, padding, dilation, groups=1):
        te_ = te()
        pad_lo, pad_hi = padding[:nd], padding[nd:]
        if any(padding):
            shape = tuple(x.shape[:2]) + tuple(simplify(as_dim(x.shape[2 + k]) + as_dim(pad_lo[k] + pad_hi[k]))
                                               for k in range(nd))

            def pad_body(*i):
                conds, src = [], list(i[:2])
                for k in range(nd):
                    j = i[2 + k] - tir.const(pad_lo[k], i[2 + k].dtype)
                    conds.append(tir.And(tir.GE(j, tir.const(0, j.dtype)), tir.LT(j, x.shape[2 + k].astype(j.dtype))))
                    src.append(j)
                cond = conds[0]
                for c in conds[1:]:
                    cond = tir.And(cond, c)
                load = x[tuple(src)]
                return tir.Call("if_then_else", (cond, load, tir.const(0.0, x.dtype)), x.dtype)

            xp = te_.compute(shape, pad_body, name="pad")
        else:
            xp = x
        out_ch = w.shape[0]
        in_per_group = w.shape[1]
        out_per_group = simplify(tir.FloorDiv(as_dim(out_ch), as_dim(groups)))
        spatial = tuple(_out_len(x.shape[2 + k], w.shape[2 + k], strides[k], pad_lo[k], pad_hi[k], dilation[k])
                        for k in range(nd))
        rc = te_.reduce_axis(in_per_group, name="rc")
        rk = [te_.reduce_axis(w.shape[2 + k], name=f"r{k}") for k in range(nd)]

        def body(*idx):
            n, o, sp = idx[0], idx[1], idx[2:]
            g = o // out_per_group.astype(o.dtype) if groups > 1 else None
            c = rc.var + g * in_per_group.astype(o.dtype) if groups > 1 else rc.var
            src = [n, c] + [sp[k] * tir.const(strides[k], sp[k].dtype) + rk[k].var * tir.const(dilation[k], sp[k].dtype)
                            for k in range(nd)]
            return te_.sum(xp[tuple(src)] * w[(o, rc.var) + tuple(r.var for r in rk)], axis=[rc] + rk)

        return te_.compute((x.shape[0], out_ch) + spatial, body, name=f"conv{nd}d")

    return compute


def _np_conv(x, w, strides, padding, dilation, groups=1):
    nd = x.ndim - 2
    pads = [(0, 0), (0, 0)] + [(padding[k], padding[k + nd]) for k in range(nd)]
    xp = np.pad(x, pads)
    n, c = x.shape[:2]
    o = w.shape[0]
    cg, og = c // groups, o // groups
    spatial = [(xp.shape[2 + k] - dilation[k] * (w.shape[2 + k] - 1) - 1) // strides[k] + 1 for k in range(nd)]
    out = np.zeros((n, o, *spatial), dtype=np.float64)
    for g in range(groups):
        xg = xp[:, g * cg:(g + 1) * cg].astype(np.float64)
        wg = w[g * og:(g + 1) * og].astype(np.float64)
        for kidx in np.ndindex(*w.shape[2:]):
            sl = [slice(None), slice(None)] + [
                slice(kidx[k] * dilation[k], kidx[k] * dilation[k] + strides[k] * (spatial[k] - 1) + 1, strides[k])
                for k in range(nd)]
            patch = xg[tuple(sl)]
            out[:, g * og:(g + 1) * og] += np.einsum("nc...,oc->no...", patch, wg[(slice(None), slice(None)) + kidx])
    return out.astype(x.dtype)


for _nd in (1, 2):
    register(f"conv{_nd}d", infer=_conv_infer(_nd), reference=_np_conv, legalize=_conv_te(_nd),
             pattern="out_fusable", doc=f"{_nd}-d convolution, channels first")


def conv2d_transpose(data, weight, strides=1, padding=0, output_padding=0, dilation=1, groups=1):
    """Transposed 2-d convolution: data NCHW, weight (C_in, C_out/groups, kh, kw)."""
    return make_call("conv2d_transpose", data, weight, strides=_tuple(strides, 2), padding=_pads(padding, 2),
                     output_padding=_tuple(output_padding, 2), dilation=_tuple(dilation, 2), groups=int(groups))


def _convt_len(n, k, s, plo, phi, op, d):
    return simplify((as_dim(n) - as_dim(1)) * as_dim(s) - as_dim(plo + phi) + as_dim(d) * (as_dim(k) - as_dim(1))
                    + as_dim(op) + as_dim(1))


def _convt_infer(call, ctx):
    x, w = ctx.tensor(0, "data"), ctx.tensor(1, "weight")
    dtype = same_dtype(ctx, x, w)
    if x.shape is None or w.shape is None:
        return TensorStructInfo(None, dtype, 4)
    groups = ctx.attr("groups", 1)
    ctx.require_equal(x.shape[1], w.shape[0], "input channels equal the weight's first dim")
    s, p, op, d = ctx.attr("strides"), ctx.attr("padding"), ctx.attr("output_padding"), ctx.attr("dilation")
    spatial = tuple(_convt_len(x.shape[2 + k], w.shape[2 + k], s[k], p[k], p[k + 2], op[k], d[k]) for k in range(2))
    return TensorStructInfo((x.shape[0], simplify(w.shape[1] * as_dim(groups))) + spatial, dtype)


def _convt_te(x, w, strides, padding, output_padding, dilation, groups=1):
    """out[n, o, y, x] = sum over c, ky, kx where (y + p - ky*d) is a multiple of s of data * weight."""
    te_ = te()
    spatial = tuple(_convt_len(x.shape[2 + k], w.shape[2 + k], strides[k], padding[k], padding[k + 2],
                               output_padding[k], dilation[k]) for k in range(2))
    cin_g = simplify(tir.FloorDiv(as_dim(x.shape[1]), as_dim(groups)))
    cout_g = w.shape[1]
    rc = te_.reduce_axis(cin_g, name="rc")
    ry, rx = te_.reduce_axis(w.shape[2], name="ry"), te_.reduce_axis(w.shape[3], name="rx")

    def body(n, o, oy, ox):
        g = o // cout_g.astype(o.dtype)
        c = g * cin_g.astype(o.dtype) + rc.var
        conds, src = [], []
        for k, (pos, r) in enumerate(((oy, ry.var), (ox, rx.var))):
            t = pos + tir.const(padding[k], pos.dtype) - r * tir.const(dilation[k], pos.dtype)
            sk = tir.const(strides[k], pos.dtype)
            conds.append(tir.And(tir.And(tir.GE(t, tir.const(0, t.dtype)), tir.EQ(t % sk, tir.const(0, t.dtype))),
                                 tir.LT(t // sk, x.shape[2 + k].astype(t.dtype))))
            src.append(t // sk)
        cond = tir.And(conds[0], conds[1])
        load = x[(n, c, src[0], src[1])]
        value = tir.Call("if_then_else", (cond, load, tir.const(0.0, x.dtype)), x.dtype)
        return te_.sum(value * w[(c, o - g * cout_g.astype(o.dtype), ry.var, rx.var)], axis=[rc, ry, rx])

    return te_.compute((x.shape[0], simplify(as_dim(cout_g) * as_dim(groups))) + spatial, body, name="conv2d_transpose")


def _np_convt(x, w, strides, padding, output_padding, dilation, groups=1):
    n, cin, h, wd = x.shape
    cout_g = w.shape[1]
    kh, kw = w.shape[2:]
    full = [(h - 1) * strides[0] + dilation[0] * (kh - 1) + 1 + output_padding[0],
            (wd - 1) * strides[1] + dilation[1] * (kw - 1) + 1 + output_padding[1]]
    out = np.zeros((n, cout_g * groups, full[0], full[1]), dtype=np.float64)
    cin_g = cin // groups
    for g in range(groups):
        for i in range(h):
            for j in range(wd):
                for ky in range(kh):
                    for kx in range(kw):
                        y, xx = i * strides[0] + ky * dilation[0], j * strides[1] + kx * dilation[1]
                        out[:, g * cout_g:(g + 1) * cout_g, y, xx] += np.einsum(
                            "nc,co->no", x[:, g * cin_g:(g + 1) * cin_g, i, j], w[g * cin_g:(g + 1) * cin_g, :, ky, kx])
    h_out = (h - 1) * strides[0] - padding[0] - padding[2] + dilation[0] * (kh - 1) + output_padding[0] + 1
    w_out = (wd - 1) * strides[1] - padding[1] - padding[3] + dilation[1] * (kw - 1) + output_padding[1] + 1
    return out[:, :, padding[0]:padding[0] + h_out, padding[1]:padding[1] + w_out].astype(x.dtype)


register("conv2d_transpose", infer=_convt_infer, reference=_np_convt, legalize=_convt_te, pattern="out_fusable",
         doc="transposed 2-d convolution")


# ----------------------------------------------------------------------------- pooling

def max_pool2d(data, pool_size, strides=None, padding=0, dilation=1, ceil_mode=False):
    """2-d max pooling over NCHW (padding never wins)."""
    return _pool("max_pool2d", data, pool_size, strides, padding, dilation, ceil_mode, True)


def avg_pool2d(data, pool_size, strides=None, padding=0, dilation=1, ceil_mode=False, count_include_pad=False):
    """2-d average pooling over NCHW."""
    return _pool("avg_pool2d", data, pool_size, strides, padding, dilation, ceil_mode, count_include_pad)


def _pool(name, data, pool_size, strides, padding, dilation, ceil_mode, count_include_pad):
    size = _tuple(pool_size, 2)
    return make_call(name, data, pool_size=size, strides=_tuple(strides if strides is not None else size, 2),
                     padding=_pads(padding, 2), dilation=_tuple(dilation, 2), ceil_mode=bool(ceil_mode),
                     count_include_pad=bool(count_include_pad))


def _pool_len(n, k, s, plo, phi, d, ceil_mode):
    eff = as_dim(d * (k - 1) + 1)
    num = as_dim(n) + as_dim(plo + phi) - eff
    if ceil_mode:
        out = tir.FloorDiv(num + as_dim(s - 1), as_dim(s)) + as_dim(1)
        # the last window must start inside the input or left padding (PyTorch/ONNX rule)
        out = tir.Select(tir.GE((out - as_dim(1)) * as_dim(s), as_dim(n) + as_dim(plo)), out - as_dim(1), out)
        return simplify(out)
    return simplify(tir.FloorDiv(num, as_dim(s)) + as_dim(1))


def pool_infer(ndim: int, layout: str):
    """The shape rule of a 2-d pooling over data of `ndim` dims laid out as `layout` (its H and W
    at axes 2 and 3, any axes after them kept: NCHW, or NCHW<L>c's lanes)."""
    def infer(call, ctx):
        x = ctx.tensor(0)
        if x.ndim not in (-1, ndim):
            ctx.fail(f"expects {layout} ({ndim}-d), got {x.ndim}-d", kind=IRError)
        if x.shape is None:
            return TensorStructInfo(None, x.dtype, ndim)
        k, s, p, d = ctx.attr("pool_size"), ctx.attr("strides"), ctx.attr("padding"), ctx.attr("dilation")
        c = ctx.attr("ceil_mode", False)
        spatial = tuple(_pool_len(x.shape[2 + j], k[j], s[j], p[j], p[j + 2], d[j], c) for j in range(2))
        return TensorStructInfo(tuple(x.shape[:2]) + spatial + tuple(x.shape[4:]), x.dtype)
    return infer


_pool_infer = pool_infer(4, "NCHW")


def _padded_max_pool(x, out, pool_size, strides, padding, dilation, ry, rx, fill):
    """Max pooling over a padded copy of x (the padding holds the dtype's lowest value, which no
    window's max can return unless the window is all padding, as the inline form's if_then_else
    does): the window loop then reads without a bounds test per element.  Static spatial sizes
    only; the copy is large enough for every window (ceil_mode's last window included).  With
    windows overlapping in y the copy is the column maxima of each output row instead (below)."""
    te_ = te()
    extents = []
    for j in range(2):
        size = as_int(x.shape[2 + j])
        last = (as_int(out[j]) - 1) * strides[j] + (pool_size[j] - 1) * dilation[j] + 1
        extents.append(max(size + padding[j] + padding[j + 2], last))
    index_dtype = x.shape[2].dtype
    top, left = tir.const(padding[0], index_dtype), tir.const(padding[1], index_dtype)

    def pad(n, c, y, x_):
        inside = tir.And(tir.And(tir.GE(y, top), tir.LT(y, top + x.shape[2].astype(y.dtype))),
                         tir.And(tir.GE(x_, left), tir.LT(x_, left + x.shape[3].astype(x_.dtype))))
        return tir.Call("if_then_else", (inside, x[(n, c, y - top, x_ - left)], fill), x.dtype)

    if pool_size[0] > strides[0] and pool_size[1] > 1:
        # windows overlapping in y: first, for each output row and padded column, the max of the
        # window's pool_size[0] rows there, read from x with the bounds test (an elementwise max
        # of contiguous rows: no accumulator, no gather; the padded copy's border is made here),
        # then the max over each window's columns of those: the stride's gather runs over output
        # rows only (3 x 3 stride 2: half the rows of the padded plane), and no padded plane is
        # written and read back
        def column_max(n, c, oy, x_):
            value = None
            for k in range(pool_size[0]):
                at = oy * tir.const(strides[0], oy.dtype) + tir.const(k * dilation[0], oy.dtype)
                term = pad(n, c, at, x_)
                value = term if value is None else tir.Max(value, term)
            return value

        columns = te_.compute(tuple(x.shape[:2]) + (out[0], tir.const(extents[1], index_dtype)), column_max,
                              name="pool_columns")

        def row_max(n, c, oy, ox):
            at = ox * tir.const(strides[1], ox.dtype) + rx.var * tir.const(dilation[1], ox.dtype)
            return te_.max(columns[(n, c, oy, at)], axis=[rx])

        return te_.compute(tuple(x.shape[:2]) + tuple(out), row_max, name="pool")

    padded = te_.compute(tuple(x.shape[:2]) + tuple(tir.const(e, index_dtype) for e in extents), pad, name="pad")

    def body(n, c, oy, ox):
        at = [o * tir.const(strides[j], o.dtype) + r * tir.const(dilation[j], o.dtype)
              for j, (o, r) in enumerate(((oy, ry.var), (ox, rx.var)))]
        return te_.max(padded[(n, c, at[0], at[1])], axis=[ry, rx])

    return te_.compute(tuple(x.shape[:2]) + tuple(out), body, name="pool")


def pool_window(te_, x, pool_size, strides, padding, dilation, ceil_mode):
    """A 2-d pooling's output lengths (H and W at axes 2 and 3 of x) and its two window axes."""
    out = tuple(_pool_len(x.shape[2 + j], pool_size[j], strides[j], padding[j], padding[j + 2], dilation[j],
                          ceil_mode) for j in range(2))
    return out, te_.reduce_axis(pool_size[0], name="ry"), te_.reduce_axis(pool_size[1], name="rx")


def _pool_te(is_max):
    def compute(x, pool_size, strides, padding, dilation, ceil_mode=False, count_include_pad=False):
        te_ = te()
        out, ry, rx = pool_window(te_, x, pool_size, strides, padding, dilation, ceil_mode)

        def window(oy, ox):
            pos = []
            conds = []
            for j, (o, r) in enumerate(((oy, ry.var), (ox, rx.var))):
                t = o * tir.const(strides[j], o.dtype) + r * tir.const(dilation[j], o.dtype) - tir.const(padding[j], o.dtype)
                conds.append(tir.And(tir.GE(t, tir.const(0, t.dtype)), tir.LT(t, x.shape[2 + j].astype(t.dtype))))
                pos.append(t)
            return pos, tir.And(conds[0], conds[1])

        fill = te_.min_value(x.dtype) if is_max else tir.const(0, x.dtype)
        if is_max and any(padding) and all(as_int(d) is not None for d in (*x.shape[2:], *out)):
            return _padded_max_pool(x, out, pool_size, strides, padding, dilation, ry, rx, fill)

        def body(n, c, oy, ox):
            pos, cond = window(oy, ox)
            value = tir.Call("if_then_else", (cond, x[(n, c, pos[0], pos[1])], fill), x.dtype)
            return (te_.max if is_max else te_.sum)(value, axis=[ry, rx])

        red = te_.compute(tuple(x.shape[:2]) + out, body, name="pool")
        if is_max:
            return red
        cy, cx = te_.reduce_axis(pool_size[0], name="cy"), te_.reduce_axis(pool_size[1], name="cx")

        def count_body(oy, ox):
            conds = []
            for j, (o, r) in enumerate(((oy, cy.var), (ox, cx.var))):
                t = o * tir.const(strides[j], o.dtype) + r * tir.const(dilation[j], o.dtype) - tir.const(padding[j], o.dtype)
                hi = (x.shape[2 + j] + as_dim(padding[j + 2])) if count_include_pad else x.shape[2 + j]
                lo = -padding[j] if count_include_pad else 0
                conds.append(tir.And(tir.GE(t, tir.const(lo, t.dtype)), tir.LT(t, hi.astype(t.dtype))))
            one = tir.Select(tir.And(conds[0], conds[1]), tir.const(1.0, x.dtype), tir.const(0.0, x.dtype))
            return te_.sum(one, axis=[cy, cx])

        counts = te_.compute(out, count_body, name="pool_count")
        return te_.compute(red.shape, lambda n, c, oy, ox: red[n, c, oy, ox] / tir.Max(
            counts[oy, ox], tir.const(1.0, x.dtype)), name="avg_pool")

    return compute


def _np_pool(is_max):
    def reference(x, pool_size, strides, padding, dilation, ceil_mode=False, count_include_pad=False):
        n, c, h, w = x.shape
        out = [int(const_int(_pool_len(h if j == 0 else w, pool_size[j], strides[j], padding[j], padding[j + 2],
                                       dilation[j], ceil_mode))) for j in range(2)]
        result = np.zeros((n, c, *out), dtype=x.dtype)
        for oy in range(out[0]):
            for ox in range(out[1]):
                ys = [oy * strides[0] + k * dilation[0] - padding[0] for k in range(pool_size[0])]
                xs = [ox * strides[1] + k * dilation[1] - padding[1] for k in range(pool_size[1])]
                vy = [y for y in ys if 0 <= y < h]
                vx = [v for v in xs if 0 <= v < w]
                if not vy or not vx:
                    result[:, :, oy, ox] = -np.inf if is_max else 0
                    continue
                patch = x[:, :, vy][:, :, :, vx]
                if is_max:
                    result[:, :, oy, ox] = patch.max(axis=(2, 3))
                else:
                    if count_include_pad:
                        cy = sum(1 for y in ys if -padding[0] <= y < h + padding[2])
                        cx = sum(1 for v in xs if -padding[1] <= v < w + padding[3])
                        count = cy * cx
                    else:
                        count = len(vy) * len(vx)
                    result[:, :, oy, ox] = patch.sum(axis=(2, 3)) / count
        return result

    return reference


def const_int(e):
    from ..shape_facts import const_value

    return const_value(e)


register("max_pool2d", infer=_pool_infer, reference=_np_pool(True), legalize=_pool_te(True), pattern="out_fusable",
         doc="2-d max pooling")
register("avg_pool2d", infer=_pool_infer, reference=_np_pool(False), legalize=_pool_te(False),
         pattern="out_fusable", doc="2-d average pooling")


def _global_pool_infer(call, ctx):
    x = ctx.tensor(0)
    if x.shape is None:
        return TensorStructInfo(None, x.dtype, x.ndim)
    if x.ndim < 3:
        ctx.fail(f"expects (N, C, spatial...), got {x.ndim}-d", kind=IRError)
    return TensorStructInfo(tuple(x.shape[:2]) + (1,) * (x.ndim - 2), x.dtype)


def _global_pool_te(is_max):
    def compute(x):
        from .reduce import _mean_finalize, _reduce_compute

        axes = tuple(range(2, len(x.shape)))
        if is_max:
            return _reduce_compute(x, axes, True, te().max, "global_max_pool")
        return _reduce_compute(x, axes, True, te().sum, "global_avg_pool", _mean_finalize)

    return compute


register("global_avg_pool", infer=_global_pool_infer,
         reference=lambda x: x.mean(axis=tuple(range(2, x.ndim)), keepdims=True).astype(x.dtype),
         legalize=_global_pool_te(False), pattern="reduction", doc="mean over spatial dims")
register("global_max_pool", infer=_global_pool_infer,
         reference=lambda x: x.max(axis=tuple(range(2, x.ndim)), keepdims=True),
         legalize=_global_pool_te(True), pattern="reduction", doc="max over spatial dims")


def global_avg_pool(x):
    """Mean over all spatial dims, keeping them as 1."""
    return make_call("global_avg_pool", x)


def global_max_pool(x):
    """Max over all spatial dims, keeping them as 1."""
    return make_call("global_max_pool", x)


# ----------------------------------------------------------------------------- softmax

def softmax(x, axis=-1):
    """exp(x - max) / sum(exp(x - max)) along axis."""
    return make_call("softmax", x, axis=int(axis))


def log_softmax(x, axis=-1):
    """x - max - log(sum(exp(x - max))) along axis."""
    return make_call("log_softmax", x, axis=int(axis))


def _softmax_infer(call, ctx):
    x = ctx.tensor(0)
    if x.dtype is not None and not x.dtype.is_float:
        ctx.fail(f"expects a float tensor, got {x.dtype}", kind=IRError)
    if x.ndim != -1:
        ctx.axis(ctx.attr("axis", -1), x.ndim)
    return x


def _softmax_te(log):
    def compute(x, axis=-1):
        from ..shape_facts import const_value
        from .reduce import _reduce_compute

        te_ = te()
        a = axis % len(x.shape)
        n = x.shape[a]
        if not log and a == len(x.shape) - 1 and (const_value(n) is None or const_value(n) >= _LANES):
            return _row_softmax(x)
        m = _reduce_compute(x, (a,), True, te_.max, "max")

        def at(i):
            return tuple(tir.IntImm(0, i[k].dtype) if k == a else i[k] for k in range(len(i)))

        e = te_.compute(x.shape, lambda *i: call_intrin("exp", x[i] - m[at(i)]), name="exp")
        s = _reduce_compute(e, (a,), True, te_.sum, "sum")
        if log:
            return te_.compute(x.shape, lambda *i: x[i] - m[at(i)] - call_intrin("log", s[at(i)]), name="log_softmax")
        return te_.compute(x.shape, lambda *i: e[i] / s[at(i)], name="softmax")

    return compute


# Lanes of the partial row reductions of _lane_row_reduce: one AVX-512 register of float32 (two
# AVX2 ones), and four of them for rows of at least _WIDE_ROW elements, so a row's reduction runs
# as four independent vector chains (a single chain waits on each add's latency: 256 dependent
# steps for a row of 4096).  A symbolic row length keeps 16: a short row would otherwise go
# wholly through the scalar tail.
_LANES = 16
_WIDE_LANES = 64
_WIDE_ROW = 256


def _row_lanes(n) -> int:
    from ..shape_facts import const_value

    size = const_value(n)
    return _WIDE_LANES if size is not None and size >= _WIDE_ROW else _LANES


def _max_lanes(n) -> int:
    """Lanes of a row max's partials: _row_lanes, at most four of this CPU's vector registers.  A
    NaN-propagating vector max is three instructions (max, unordered compare, blend) and a mask
    register per chain; eight AVX2 chains with their masks outgrow the sixteen registers and spill
    in the loop (a 4096 x 4096 softmax measured 10% faster on Zen 3 with four chains than eight)."""
    from ...loops.intrin import cpu

    return min(_row_lanes(n), 4 * cpu.vector_lanes(32))


def _row_softmax(x):
    """softmax over the last axis, its row max and sum reduced by _lane_row_reduce.

    For a row of known length, exp is computed once per element, into a stage of the input's
    shape that the sum and the output both read (the row rule moves it under the row loop and
    keeps one row of it, in cache).  A symbolic row length computes exp again for the output:
    compute_at takes regions of constant extent only, so such a stage would stay a pass of its
    own over a whole-tensor buffer.  The output multiplies by the reciprocal of the row sum
    (one division per row, not per element)."""
    from ..shape_facts import const_value

    lead, n = tuple(x.shape[:-1]), x.shape[-1]
    zero = tir.IntImm(0, n.dtype)
    low = tir.const(float("-inf"), x.dtype)
    one = tir.const(1.0, x.dtype)
    m = _lane_row_reduce(lambda row, j: x[row + (j,)], lead, n, te().max, low, "max", _max_lanes(n))
    if const_value(n) is None:
        def exp_at(row, j):
            return _exp_of_nonpositive(x[row + (j,)] - m[row + (zero,)])
    else:
        e = te().compute(x.shape, lambda *i: _exp_of_nonpositive(x[i] - m[i[:-1] + (zero,)]), name="exp")

        def exp_at(row, j):
            return e[row + (j,)]
    s = _lane_row_reduce(exp_at, lead, n, te().sum, tir.const(0.0, x.dtype), "sum")
    return te().compute(x.shape, lambda *i: exp_at(i[:-1], i[-1]) * (one / s[i[:-1] + (zero,)]), name="softmax")


def _lane_row_reduce(value, lead: tuple, n, combine, identity, name: str, lanes: int | None = None):
    """combine(value(row, j) for j < n) for each row, as a (*lead, 1) tensor, in L partials (L =
    lanes, by default _row_lanes(n): 16, or 64 for a long row of known length).

    Lane l of a row's partial takes the elements l, l + L, ... of the row's full chunks of L, so
    that reduction runs as a vector loop (a plain row reduction is one serial chain); a final
    reduction combines the L partials and the last n % L elements.  Every load is in bounds:
    the partials read only full chunks, and when n is not a known multiple of L the final stage
    reads them (and the tail) under if_then_else, which evaluates only the branch taken (a row
    shorter than L has no partials)."""
    from ..shape_facts import const_value

    te_ = te()
    count = _row_lanes(n) if lanes is None else lanes
    lanes = tir.IntImm(count, n.dtype)
    full = te_.floordiv(n, lanes) * lanes
    c = te_.reduce_axis(te_.floordiv(n, lanes), name="c")
    partial = te_.compute(lead + (lanes,), lambda *i: combine(value(i[:-1], c.var * lanes + i[-1]), axis=c),
                          name=f"{name}_partial")
    size = const_value(n)
    if size is not None and size % count == 0:
        t = te_.reduce_axis(lanes, name="t")
        return te_.compute(lead + (1,), lambda *i: combine(partial[i[:-1] + (t.var,)], axis=t), name=name)
    t = te_.reduce_axis(n - full + lanes, name="t")

    def final(*i):
        row = i[:-1]
        from_partial = te_.if_then_else(n >= lanes, partial[row + (t.var,)], identity)
        return combine(te_.if_then_else(t.var < lanes, from_partial, value(row, full + t.var - lanes)), axis=t)

    return te_.compute(lead + (1,), final, name=name)


# float32 exp(v) for v below this is under 1.7e-38 (the edge of the normal range) and is taken as 0.
_EXP_FLUSH_BELOW = -87.0


def _exp_of_nonpositive(v):
    """exp(v) for v = x - max(x) <= 0.  For float32, arguments below _EXP_FLUSH_BELOW give 0 and
    are clamped first: a masked score (-1e9) is then an ordinary argument, and dropping terms
    under 1.7e-38 next to a row sum of at least 1 changes no float32 sum; a NaN stays NaN (max
    propagates it, the comparison is false).  The clamp is a max with a constant, one MAXPS on
    x86, where a compare and a select took three instructions.  The float32 exponential is computed inline, refcomp.ast.exp_poly's
    steps as IR (the polynomial of FLOAT32_DEGREE): the clamped argument keeps 2^n a normal
    number (n in [-126, 0]), so one exponent factor scales it, where the general exp clamps
    again and scales twice to reach the subnormals (measured 6-18% faster on a 4096 x 4096
    softmax on AVX2); every target and the interpreter compute the same operations."""
    if str(v.dtype) != "float32":
        return call_intrin("exp", v)
    edge = tir.const(_EXP_FLUSH_BELOW, v.dtype)
    clamped = tir.Var("ex", "float32")
    exp = tir.Let(clamped, tir.Max(v, edge), exp_expr(clamped, FLOAT32_DEGREE))
    return tir.Select(v < edge, tir.const(0.0, v.dtype), exp)


def _np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def _np_log_softmax(x, axis=-1):
    s = x - x.max(axis=axis, keepdims=True)
    return (s - np.log(np.exp(s).sum(axis=axis, keepdims=True))).astype(x.dtype)


register("softmax", infer=_softmax_infer, reference=_np_softmax, legalize=_softmax_te(False), pattern="reduction",
         doc="softmax")
register("log_softmax", infer=_softmax_infer, reference=_np_log_softmax, legalize=_softmax_te(True),
         pattern="reduction", doc="log-softmax")


# ----------------------------------------------------------------------------- normalizations

def layer_norm(x, gamma, beta, axes=(-1,), epsilon=1e-5):
    """(x - mean) / sqrt(var + eps) * gamma + beta over the trailing `axes`."""
    return make_call("layer_norm", x, gamma, beta, axes=tuple(axes), epsilon=float(epsilon))


def rms_norm(x, weight, axes=(-1,), epsilon=1e-5):
    """x / sqrt(mean(x^2) + eps) * weight over `axes`."""
    return make_call("rms_norm", x, weight, axes=tuple(axes), epsilon=float(epsilon))


def _norm_infer(n_params):
    def infer(call, ctx):
        x = ctx.tensor(0)
        params = [ctx.tensor(k + 1) for k in range(n_params)]
        dtype = same_dtype(ctx, x, *params)
        if x.dtype is not None and not x.dtype.is_float:
            ctx.fail(f"expects a float tensor, got {x.dtype}", kind=IRError)
        if x.shape is not None:
            axes = [ctx.axis(a, x.ndim) for a in ctx.attr("axes")]
            for p in params:
                if p.shape is not None:
                    if len(p.shape) != len(axes):
                        ctx.fail(f"a scale/shift of {p} for {len(axes)} normalized axes", kind=IRError)
                    for d, a in zip(p.shape, axes):
                        ctx.require_equal(d, x.shape[a], f"parameter dim matches axis {a}")
        return TensorStructInfo(x.shape, dtype, x.ndim)

    return infer


def _norm_te(rms):
    def compute(x, *params, axes=(-1,), epsilon=1e-5):
        from ..shape_facts import const_value
        from .reduce import _mean_finalize, _reduce_compute

        te_ = te()
        ndim = len(x.shape)
        ax = tuple(sorted(a % ndim for a in axes))

        def at(i):
            return tuple(tir.IntImm(0, i[k].dtype) if k in ax else i[k] for k in range(ndim))

        def pidx(i):
            return tuple(i[a] for a in ax)

        eps = tir.const(epsilon, x.dtype)
        n = x.shape[-1]
        if not rms and ax == (ndim - 1,) and (const_value(n) is None or const_value(n) >= _LANES):
            return _row_layer_norm(x, *params, eps)
        if rms:
            sq = te_.compute(x.shape, lambda *i: x[i] * x[i], name="square")
            ms = _reduce_compute(sq, ax, True, te_.sum, "mean_square", _mean_finalize)
            (w,) = params
            return te_.compute(x.shape, lambda *i: x[i] * call_intrin("rsqrt", ms[at(i)] + eps) * w[pidx(i)],
                               name="rms_norm")
        mean = _reduce_compute(x, ax, True, te_.sum, "mean", _mean_finalize)
        cs = te_.compute(x.shape, lambda *i: (x[i] - mean[at(i)]) * (x[i] - mean[at(i)]), name="centered_square")
        var = _reduce_compute(cs, ax, True, te_.sum, "var", _mean_finalize)
        gamma, beta = params
        return te_.compute(x.shape, lambda *i: (x[i] - mean[at(i)]) * call_intrin("rsqrt", var[at(i)] + eps)
                           * gamma[pidx(i)] + beta[pidx(i)], name="layer_norm")

    return compute


def _row_layer_norm(x, gamma, beta, eps):
    """layer_norm over the last axis, its row sums reduced by _lane_row_reduce (vector loops)."""
    te_ = te()
    lead, n = tuple(x.shape[:-1]), x.shape[-1]
    zero = tir.IntImm(0, n.dtype)
    count = tir.Cast(x.dtype, n)
    total = _lane_row_reduce(lambda row, j: x[row + (j,)], lead, n, te_.sum, tir.const(0.0, x.dtype), "mean")

    def centered(row, j):
        return x[row + (j,)] - total[row + (zero,)] / count

    squares = _lane_row_reduce(lambda row, j: centered(row, j) * centered(row, j), lead, n, te_.sum,
                               tir.const(0.0, x.dtype), "var")
    return te_.compute(x.shape, lambda *i: centered(i[:-1], i[-1]) * call_intrin("rsqrt", squares[i[:-1] + (zero,)]
                                                                                  / count + eps)
                       * gamma[(i[-1],)] + beta[(i[-1],)], name="layer_norm")


def _np_layer_norm(x, gamma, beta, axes=(-1,), epsilon=1e-5):
    ax = tuple(a % x.ndim for a in axes)
    mean = x.mean(axis=ax, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=ax, keepdims=True)
    shape = [x.shape[k] if k in ax else 1 for k in range(x.ndim)]
    return ((x - mean) / np.sqrt(var + epsilon) * gamma.reshape(shape) + beta.reshape(shape)).astype(x.dtype)


def _np_rms_norm(x, w, axes=(-1,), epsilon=1e-5):
    ax = tuple(a % x.ndim for a in axes)
    shape = [x.shape[k] if k in ax else 1 for k in range(x.ndim)]
    return (x / np.sqrt((x * x).mean(axis=ax, keepdims=True) + epsilon) * w.reshape(shape)).astype(x.dtype)


register("layer_norm", infer=_norm_infer(2), reference=_np_layer_norm, legalize=_norm_te(False),
         pattern="reduction", doc="layer normalization")
register("rms_norm", infer=_norm_infer(1), reference=_np_rms_norm, legalize=_norm_te(True), pattern="reduction",
         doc="RMS normalization")


def group_norm(x, gamma, beta, num_groups, epsilon=1e-5):
    """Normalize (N, C, ...) over groups of C/num_groups channels and the spatial dims; gamma/beta (C,)."""
    return make_call("group_norm", x, gamma, beta, num_groups=int(num_groups), epsilon=float(epsilon))


def _group_norm_infer(call, ctx):
    x, g, b = ctx.tensor(0), ctx.tensor(1), ctx.tensor(2)
    dtype = same_dtype(ctx, x, g, b)
    groups = ctx.attr("num_groups")
    if x.shape is not None:
        if x.ndim < 2:
            ctx.fail("expects (N, C, ...)", kind=IRError)
        ctx.require(tir.EQ(tir.FloorMod(x.shape[1], as_dim(groups)), as_dim(0)), "channels divisible by num_groups")
        for p in (g, b):
            if p.shape is not None:
                ctx.require_equal(p.shape[0], x.shape[1], "scale/shift length equals channels")
    return TensorStructInfo(x.shape, dtype, x.ndim)


def _group_norm_te(x, gamma, beta, num_groups, epsilon=1e-5):
    te_ = te()
    ndim = len(x.shape)
    cg = simplify(tir.FloorDiv(as_dim(x.shape[1]), as_dim(num_groups)))
    rc = te_.reduce_axis(cg, name="rc")
    rs = [te_.reduce_axis(x.shape[k], name=f"rs{k}") for k in range(2, ndim)]
    count = product([cg] + list(x.shape[2:]))

    def group_sum(src, name):
        return te_.compute((x.shape[0], num_groups), lambda n, g: te_.sum(
            src[(n, g * cg.astype(g.dtype) + rc.var) + tuple(r.var for r in rs)], axis=[rc] + rs), name=name)

    s = group_sum(x, "group_sum")
    mean = te_.compute(s.shape, lambda n, g: s[n, g] / count.astype(x.dtype), name="group_mean")
    cs = te_.compute(x.shape, lambda *i: _sq(x[i] - mean[i[0], i[1] // cg.astype(i[1].dtype)]), name="centered_square")
    v = group_sum(cs, "group_var_sum")
    eps = tir.const(epsilon, x.dtype)
    return te_.compute(x.shape, lambda *i: (x[i] - mean[i[0], i[1] // cg.astype(i[1].dtype)]) * call_intrin(
        "rsqrt", v[i[0], i[1] // cg.astype(i[1].dtype)] / count.astype(x.dtype) + eps) * gamma[i[1]] + beta[i[1]],
        name="group_norm")


def _sq(v):
    return v * v


def _np_group_norm(x, gamma, beta, num_groups, epsilon=1e-5):
    n, c = x.shape[:2]
    xg = x.reshape(n, num_groups, -1)
    mean = xg.mean(axis=2, keepdims=True)
    var = xg.var(axis=2, keepdims=True)
    y = ((xg - mean) / np.sqrt(var + epsilon)).reshape(x.shape)
    shape = [1, c] + [1] * (x.ndim - 2)
    return (y * gamma.reshape(shape) + beta.reshape(shape)).astype(x.dtype)


register("group_norm", infer=_group_norm_infer, reference=_np_group_norm, legalize=_group_norm_te,
         pattern="reduction", doc="group normalization")


def batch_norm(x, gamma, beta, mean, var, axis=1, epsilon=1e-5):
    """Inference-mode batch norm: (x - mean) / sqrt(var + eps) * gamma + beta along channel `axis`."""
    return make_call("batch_norm", x, gamma, beta, mean, var, axis=int(axis), epsilon=float(epsilon))


def _batch_norm_infer(call, ctx):
    x = ctx.tensor(0)
    params = [ctx.tensor(k) for k in range(1, 5)]
    dtype = same_dtype(ctx, x, *params)
    if x.shape is not None:
        a = ctx.axis(ctx.attr("axis", 1), x.ndim)
        for p in params:
            if p.shape is not None:
                if len(p.shape) != 1:
                    ctx.fail(f"parameters must be 1-d, got {p}", kind=IRError)
                ctx.require_equal(p.shape[0], x.shape[a], "parameter length equals channels")
    return TensorStructInfo(x.shape, dtype, x.ndim)


def _batch_norm_te(x, gamma, beta, mean, var, axis=1, epsilon=1e-5):
    a = axis % len(x.shape)
    eps = tir.const(epsilon, x.dtype)
    return te().compute(x.shape, lambda *i: (x[i] - mean[i[a]]) * call_intrin("rsqrt", var[i[a]] + eps)
                        * gamma[i[a]] + beta[i[a]], name="batch_norm")


def _np_batch_norm(x, gamma, beta, mean, var, axis=1, epsilon=1e-5):
    shape = [1] * x.ndim
    shape[axis % x.ndim] = -1
    r = lambda v: v.reshape(shape)  # noqa: E731
    return ((x - r(mean)) / np.sqrt(r(var) + epsilon) * r(gamma) + r(beta)).astype(x.dtype)


register("batch_norm", infer=_batch_norm_infer, reference=_np_batch_norm, legalize=_batch_norm_te,
         pattern="broadcast", doc="inference batch normalization")
