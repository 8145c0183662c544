"""DFT and STFT whose axis, lengths or frame step are read at run time.

The DFT matrices are computed by graph ops when the program runs, over run-time lengths: entry
(p, k) of the forward matrix is cos / sin of 2 pi (p k mod L) / L, the product reduced mod L in
int64 so the angle stays exact; rows p >= L (input positions a length L crops away) are 0, and
positions the input lacks (zero padding) simply contribute nothing.  The inverse of a one-sided
spectrum weighs bin k by 1 (DC, Nyquist) or 2 and drops bins past L // 2.  A DFT along a run-time
axis sees the signal as (before, n, after) around that axis (sizes that are Select expressions of
the axis), multiplies, and is reshaped back with the axis' length replaced (checked_reshape).
"""
from __future__ import annotations

import math

import numpy as np

from ...ast import expr as tir
from ...ast.graph import Constant
from ...ast.graph_struct_info import as_dim
from ...graph import op
from .ops_dynamic import checked_reshape, i64, split_at_runtime_axis
from .runtime_values import bind_sizes, require, runtime_sizes


def _scalar(ctx, value):
    """An int64 0-d tensor holding integer expression `value`."""
    return ctx.emit(op.shape_to_tensor((value,), scalar=True))


def _f64(value) -> Constant:
    return Constant(np.asarray(value, np.float64))


def dft_matrices(ctx, n_in, length, bins, dtype: str, inverse: bool, onesided: bool):
    """(cos, sin) matrices (n_in, bins) in dtype for a DFT of run-time length `length` over n_in
    input positions: out_re = re @ cos - im @ sin and out_im = re @ sin + im @ cos (forward and
    full inverse), or out = re @ cos - im @ sin (inverse of a one-sided spectrum, bins = length)."""
    e = ctx.emit
    rows = e(op.arange(n_in, dtype="int64"))
    cols = e(op.arange(bins, dtype="int64"))
    size = _scalar(ctx, length)
    turns = e(op.floor_mod(op.multiply(op.expand_dims(rows, (1,)), op.expand_dims(cols, (0,))), size))
    size_f = e(op.astype(size, "float64"))
    angle = e(op.divide(op.multiply(op.astype(turns, "float64"), _f64(2 * math.pi)), size_f))
    if inverse and onesided:
        half = e(op.floor_divide(size, Constant(np.asarray(2, np.int64))))
        keep = e(op.less_equal(rows, half))
        edge = e(op.logical_or(op.equal(rows, Constant(np.asarray(0, np.int64))),
                               op.logical_and(op.equal(op.multiply(half, Constant(np.asarray(2, np.int64))), size),
                                              op.equal(rows, half))))
        weight = e(op.divide(op.where(edge, _f64(1.0), _f64(2.0)), size_f))
        weight = e(op.expand_dims(op.where(keep, weight, _f64(0.0)), (1,)))
        cos = e(op.multiply(op.cos(angle), weight))
        sin = e(op.multiply(op.sin(angle), weight))
    else:
        keep = e(op.expand_dims(op.less(rows, size), (1,)))
        scale = e(op.divide(_f64(1.0), size_f)) if inverse else _f64(1.0)
        sign = _f64(1.0) if inverse else _f64(-1.0)
        cos = e(op.where(keep, op.multiply(op.cos(angle), scale), _f64(0.0)))
        sin = e(op.where(keep, op.multiply(op.multiply(op.sin(angle), scale), sign), _f64(0.0)))
    return e(op.astype(cos, dtype)), e(op.astype(sin, dtype))


def _apply(ctx, real, imag, cos, sin, inverse: bool, onesided: bool):
    """The matrices applied along the last axis of real (and imag, or None)."""
    e = ctx.emit
    if inverse and onesided:
        out = e(op.matmul(real, cos))
        if imag is not None:
            out = e(op.subtract(out, op.matmul(imag, sin)))
        return out, None
    out_re, out_im = e(op.matmul(real, cos)), e(op.matmul(real, sin))
    if imag is not None:
        out_re = e(op.subtract(out_re, op.matmul(imag, sin)))
        out_im = e(op.add(out_im, op.matmul(imag, cos)))
    return out_re, out_im


def _lengths(n, length, inverse: bool, onesided: bool):
    """(L, output bins) as expressions: L given or from n; a forward one-sided DFT keeps L // 2 + 1."""
    if length is None:
        length = i64(2) * (n - i64(1)) if inverse and onesided else n
    if onesided and not inverse:
        return length, tir.FloorDiv(length, i64(2)) + i64(1)
    return length, length


def dft_runtime(ctx, x, axis_value, length_value, inverse: bool, onesided: bool, split, join):
    """The DFT of x (ONNX complex layout: a trailing axis of 1 or 2 parts) along axis `axis_value`
    (an int, or an int tensor read at run time) of length `length_value` (None, an int or a
    tensor), in that layout; split / join take the trailing axis apart and put it back."""
    shape = [as_dim(d) for d in ctx.static_shape(x)]
    dims, parts = shape[:-1], shape[-1]
    rank = len(dims)
    if isinstance(axis_value, int):
        axis = i64(axis_value % rank)
    else:
        if str(ctx.info(axis_value).dtype) != "int64":
            axis_value = ctx.emit(op.astype(axis_value, "int64"))
        wrapped = ctx.emit(op.add(axis_value, Constant(np.asarray(rank + 1, np.int64))))
        zero = Constant(np.asarray(0, np.int64))
        axis_value = ctx.emit(op.where(op.less(axis_value, zero), wrapped, axis_value))
        (axis,) = runtime_sizes(ctx, axis_value, "axis")
        require(ctx, axis < i64(rank), "the DFT axis is not the trailing complex axis")
    before, n, after = split_at_runtime_axis(dims, axis)
    x = checked_reshape(ctx, x, [before, n, after, parts], "dft_dim")
    n = ctx.info(x).shape[1]
    if length_value is None or isinstance(length_value, int):
        given = None if length_value is None else i64(length_value)
    else:
        (given,) = runtime_sizes(ctx, length_value, "dft_length")
    length, bins = bind_sizes(ctx, _lengths(as_dim(n), given, inverse, onesided), "dft_length")
    real, imag = split(ctx, ctx.emit(op.permute_dims(x, (0, 2, 1, 3))))
    cos, sin = dft_matrices(ctx, n, length, bins, str(ctx.info(real).dtype), inverse, onesided)
    out_re, out_im = _apply(ctx, real, imag, cos, sin, inverse, onesided)
    if out_im is None and not (inverse and onesided):
        out_im = ctx.emit(op.multiply(out_re, Constant(np.zeros((), ctx.info(out_re).dtype.numpy()))))
    y = ctx.emit(op.permute_dims(join(ctx, out_re, out_im), (0, 2, 1, 3)))
    out_dims = [tir.Select(tir.EQ(axis, i64(j)), as_dim(bins), d) for j, d in enumerate(dims)]
    return checked_reshape(ctx, y, out_dims + [as_dim(ctx.info(y).shape[-1])], "dft_out")


def stft_runtime(ctx, real, imag, step_value, window, length_value, onesided: bool):
    """(real, imag) of the STFT of signal (batch, n) parts with a run-time frame step and/or frame
    length: frame f holds samples f * step + w (zeros past the end), times the window."""
    e = ctx.emit
    batch, n = (as_dim(d) for d in ctx.static_shape(real))
    if isinstance(step_value, int):
        step = i64(step_value)
    else:
        (step,) = runtime_sizes(ctx, step_value, "frame_step")
        require(ctx, step > i64(0), "the frame step is positive")
    width = None if window is None else as_dim(ctx.static_shape(window)[0])
    if length_value is None:
        length = width
    elif isinstance(length_value, int):
        length = i64(length_value)
    else:
        (length,) = runtime_sizes(ctx, length_value, "frame_length")
    if width is None:
        width = length
    else:
        require(ctx, tir.EQ(length, width), "the frame length is the window length")
    require(ctx, tir.all_(length > i64(0), length <= n), "the frame length is in 1 .. signal length")
    frames, width, length, bins = bind_sizes(
        ctx, [tir.FloorDiv(n - length, step) + i64(1), width, length,
              tir.FloorDiv(length, i64(2)) + i64(1) if onesided else length], "stft")
    starts = e(op.multiply(op.arange(frames, dtype="int64"), _scalar(ctx, step)))
    index = e(op.add(op.expand_dims(starts, (1,)), op.expand_dims(op.arange(width, dtype="int64"), (0,))))
    size = _scalar(ctx, n)
    inside = e(op.less(index, size))
    index = e(op.where(inside, index, Constant(np.asarray(0, np.int64))))
    dtype = ctx.info(real).dtype.numpy()
    keep = e(op.astype(inside, str(ctx.info(real).dtype)))

    def framed(v):
        f = e(op.multiply(op.take(v, index, axis=1), keep))
        return e(op.multiply(f, window)) if window is not None else f

    real = framed(real)
    imag = framed(imag) if imag is not None else None
    cos, sin = dft_matrices(ctx, width, length, bins, str(np.dtype(dtype)), False, False)
    return _apply(ctx, real, imag, cos, sin, False, False)


def mel_weight_matrix_runtime(ctx, inputs, out_dtype: str):
    """MelWeightMatrix of run-time sizes and edges: (dft_length // 2 + 1, num_mel_bins) triangles
    between num_mel_bins + 2 edges spaced evenly in mel (the mel ends in the edges' float type, the
    rest in float64, as ONNX's reference computes), each edge floored to a spectrogram bin."""
    e = ctx.emit
    (bins,) = runtime_sizes(ctx, inputs[0], "num_mel_bins")
    (length,) = runtime_sizes(ctx, inputs[1], "dft_length")
    (spectrogram,) = bind_sizes(ctx, [tir.FloorDiv(length, i64(2)) + i64(1)], "mel_rows")
    low, high = inputs[3], inputs[4]
    fdtype = str(ctx.info(low).dtype)

    def mel(f):
        one = Constant(np.asarray(1, ctx.info(f).dtype.numpy()))
        scale = Constant(np.asarray(700, ctx.info(f).dtype.numpy()))
        factor = Constant(np.asarray(2595, ctx.info(f).dtype.numpy()))
        return e(op.astype(op.multiply(factor, op.log10(op.add(one, op.divide(f, scale)))), "float64"))

    if str(ctx.info(high).dtype) != fdtype:
        high = e(op.astype(high, fdtype))
    low_mel, high_mel = mel(low), mel(high)
    edges_count = _scalar(ctx, bins + i64(2))
    step = e(op.divide(op.subtract(high_mel, low_mel), op.astype(edges_count, "float64")))
    edges = e(op.add(op.multiply(op.astype(op.arange(bins + i64(2), dtype="int64"), "float64"), step), low_mel))
    hertz = e(op.multiply(_f64(700.0), op.subtract(op.power(_f64(10.0), op.divide(edges, _f64(2595.0))), _f64(1.0))))
    numerator = e(op.multiply(op.astype(op.add(_scalar(ctx, length), Constant(np.asarray(1, np.int64))), "float64"),
                              hertz))
    edges = e(op.astype(op.floor(op.divide(numerator, op.astype(inputs[2], "float64"))), "int64"))
    m = e(op.arange(bins, dtype="int64"))
    left, center, right = (e(op.expand_dims(op.take(edges, op.add(m, Constant(np.asarray(k, np.int64))), axis=0), (0,)))
                           for k in range(3))
    j = e(op.expand_dims(op.arange(spectrogram, dtype="int64"), (1,)))
    as_f = lambda v: e(op.astype(v, "float64"))  # noqa: E731
    rise = e(op.subtract(center, left))
    rise_safe = e(op.where(op.equal(rise, Constant(np.asarray(0, np.int64))), Constant(np.asarray(1, np.int64)), rise))
    up = e(op.logical_and(op.greater_equal(j, left), op.less_equal(j, center)))
    up_value = e(op.divide(as_f(op.subtract(j, left)), as_f(rise_safe)))
    up_value = e(op.where(op.equal(rise, Constant(np.asarray(0, np.int64))), _f64(1.0), up_value))
    down = e(op.logical_and(op.greater_equal(j, center), op.less(j, right)))
    fall = e(op.maximum(op.subtract(right, center), Constant(np.asarray(1, np.int64))))
    down_value = e(op.divide(as_f(op.subtract(right, j)), as_f(fall)))
    weights = e(op.where(down, down_value, op.where(up, up_value, _f64(0.0))))
    return e(op.astype(weights, out_dtype))
