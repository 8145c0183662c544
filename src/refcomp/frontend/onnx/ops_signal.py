"""ONNX signal ops: DFT and STFT as matmuls with constant cosine/sine matrices, and MelWeightMatrix
computed at import (its inputs are sizes and frequencies); with an axis, length, frame step or
MelWeightMatrix input known only at run time, ops_signal_runtime computes them by graph ops.

A DFT of length L along an axis: the axis is moved last, cropped or zero padded to L, and
multiplied by cos(2 pi k n / L) and sin(2 pi k n / L) (built in float64, stored in the signal's
dtype).  ONNX stores complex values as a trailing axis of (real, imaginary); a real signal has a
trailing axis of 1.  The inverse of a one-sided spectrum (irfft) weights each bin by its mirror
image: 1 for the DC and Nyquist bins, 2 for the others.
"""
from __future__ import annotations

import numpy as np

from ...ast.graph import Constant
from ...graph import op
from ...graph.shape_facts import const_value
from .importer import converter


def _int_input(ctx, inputs, k, what):
    if len(inputs) <= k or inputs[k] is None:
        return None
    return int(np.asarray(ctx.constant(inputs[k], what)).reshape(-1)[0])


def _fit(ctx, v, length):
    """v cropped or zero padded along its last axis to length."""
    n = const_value(ctx.static_shape(v)[-1])
    last = ctx.info(v).ndim - 1
    if n > length:
        return ctx.emit(op.strided_slice(v, [last], [0], [length]))
    if n < length:
        width = [(0, 0)] * last + [(0, length - n)]
        return ctx.emit(op.pad(v, tuple(width)))
    return v


def dft_last_axis(ctx, real, imag, length, inverse=False, onesided=False):
    """(real, imag) of the DFT of length `length` along the last axis; imag may be None (a real signal).
    For inverse and onesided, the result is real and imag is returned as None."""
    dtype = ctx.info(real).dtype.numpy()
    if inverse and onesided:
        bins = length // 2 + 1
        real, imag = _fit(ctx, real, bins), (_fit(ctx, imag, bins) if imag is not None else None)
        k = np.arange(bins).reshape(-1, 1)
        n = np.arange(length).reshape(1, -1)
        weight = np.where((k == 0) | ((length % 2 == 0) & (k == length // 2)), 1.0, 2.0) / length
        angle = 2 * np.pi * k * n / length
        out = ctx.emit(op.matmul(real, Constant((weight * np.cos(angle)).astype(dtype))))
        if imag is not None:
            out = ctx.emit(op.subtract(out, op.matmul(imag, Constant((weight * np.sin(angle)).astype(dtype)))))
        return out, None
    real = _fit(ctx, real, length)
    imag = _fit(ctx, imag, length) if imag is not None else None
    bins = length // 2 + 1 if onesided else length
    n = np.arange(length).reshape(-1, 1)
    k = np.arange(bins).reshape(1, -1)
    angle = 2 * np.pi * n * k / length
    scale = 1.0 / length if inverse else 1.0
    sign = 1.0 if inverse else -1.0  # the exponent's sign
    cos = Constant((scale * np.cos(angle)).astype(dtype))
    sin = Constant((scale * sign * np.sin(angle)).astype(dtype))
    # (a + ib)(cos + i s) = (a cos - b s) + i (a s + b cos), with s = sign * sin
    out_re = ctx.emit(op.matmul(real, cos))
    out_im = ctx.emit(op.matmul(real, sin))
    if imag is not None:
        out_re = ctx.emit(op.subtract(out_re, op.matmul(imag, sin)))
        out_im = ctx.emit(op.add(out_im, op.matmul(imag, cos)))
    return out_re, out_im


def _split_complex(ctx, x):
    """(real, imag or None) of an ONNX complex-as-trailing-axis tensor, trailing axis removed."""
    last = ctx.info(x).ndim - 1
    parts = const_value(ctx.static_shape(x)[-1])
    if parts not in (1, 2):
        ctx.fail(f"the last axis holds real or (real, imaginary) values, got size {parts}")
    real = ctx.emit(op.squeeze(op.strided_slice(x, [last], [0], [1]), (last,)))
    if parts == 1:
        return real, None
    return real, ctx.emit(op.squeeze(op.strided_slice(x, [last], [1], [2]), (last,)))


def _join_complex(ctx, real, imag):
    parts = [ctx.emit(op.expand_dims(real, (ctx.info(real).ndim,)))]
    if imag is not None:
        parts.append(ctx.emit(op.expand_dims(imag, (ctx.info(imag).ndim,))))
    return parts[0] if len(parts) == 1 else ctx.emit(op.concat(*parts, axis=-1))


def _runtime(inputs, k) -> bool:
    """Whether input k is given and not known at import (read at run time)."""
    return len(inputs) > k and inputs[k] is not None and not isinstance(inputs[k], Constant)


def _given(ctx, inputs, k, what):
    """Input k: None when absent, an int when constant, else the tensor (read at run time)."""
    return inputs[k] if _runtime(inputs, k) else _int_input(ctx, inputs, k, what)


@converter("DFT")
def _dft(ctx, node, inputs, attrs):
    x = inputs[0]
    ndim = ctx.info(x).ndim
    if _runtime(inputs, 1) or (ctx.opset >= 20 and _runtime(inputs, 2)):
        from .ops_signal_runtime import dft_runtime

        axis = _given(ctx, inputs, 2, "axis") if ctx.opset >= 20 else attrs.get("axis", 1)
        axis = -2 if axis is None else axis
        if isinstance(axis, int) and axis % ndim == ndim - 1:
            ctx.fail("the DFT axis cannot be the trailing (real, imaginary) axis")
        inverse, onesided = bool(attrs.get("inverse", 0)), bool(attrs.get("onesided", 0))
        axis = axis % ndim if isinstance(axis, int) else axis
        if const_value(ctx.static_shape(x)[-1]) not in (1, 2):
            ctx.fail("the last axis holds real or (real, imaginary) values")
        return dft_runtime(ctx, x, axis, _given(ctx, inputs, 1, "dft_length"), inverse, onesided,
                           _split_complex, _join_complex)
    if ctx.opset >= 20:
        axis = _int_input(ctx, inputs, 2, "axis")
        axis = -2 if axis is None else axis
    else:
        axis = attrs.get("axis", 1)
    axis = axis % ndim
    if axis == ndim - 1:
        ctx.fail("the DFT axis cannot be the trailing (real, imaginary) axis")
    inverse, onesided = bool(attrs.get("inverse", 0)), bool(attrs.get("onesided", 0))
    real, imag = _split_complex(ctx, x)
    signal_ndim = ndim - 1
    n = const_value(ctx.static_shape(x)[axis])
    length = _int_input(ctx, inputs, 1, "dft_length")
    if length is None:
        length = 2 * (n - 1) if inverse and onesided else n
    order = [k for k in range(signal_ndim) if k != axis] + [axis]
    back = tuple(int(i) for i in np.argsort(order))
    if axis != signal_ndim - 1:
        real = ctx.emit(op.permute_dims(real, tuple(order)))
        imag = ctx.emit(op.permute_dims(imag, tuple(order))) if imag is not None else None
    out_re, out_im = dft_last_axis(ctx, real, imag, length, inverse, onesided)
    if axis != signal_ndim - 1:
        out_re = ctx.emit(op.permute_dims(out_re, back))
        out_im = ctx.emit(op.permute_dims(out_im, back)) if out_im is not None else None
    if out_im is None and not (inverse and onesided):
        out_im = ctx.emit(op.multiply(out_re, Constant(np.zeros((), ctx.info(out_re).dtype.numpy()))))
    return _join_complex(ctx, out_re, out_im)


@converter("STFT")
def _stft(ctx, node, inputs, attrs):
    x = inputs[0]
    if _runtime(inputs, 1) or _runtime(inputs, 3):
        from .ops_signal_runtime import stft_runtime

        window = inputs[2] if len(inputs) > 2 else None
        real, imag = _split_complex(ctx, x)
        out_re, out_im = stft_runtime(ctx, real, imag, _given(ctx, inputs, 1, "frame_step"), window,
                                      _given(ctx, inputs, 3, "frame_length"), bool(attrs.get("onesided", 1)))
        return _join_complex(ctx, out_re, out_im)
    step = _int_input(ctx, inputs, 1, "frame_step")
    window = inputs[2] if len(inputs) > 2 else None
    frame_length = _int_input(ctx, inputs, 3, "frame_length")
    batch, signal_len, _ = (const_value(d) for d in ctx.static_shape(x))
    width = const_value(ctx.static_shape(window)[0]) if window is not None else None
    if frame_length is None:
        frame_length = width if width is not None else signal_len
    if width is None:
        width = frame_length
    frames = 1 + (signal_len - frame_length) // step
    real, imag = _split_complex(ctx, x)
    # frame f holds samples f*step .. f*step + width - 1 (zeros past the end)
    starts = np.arange(frames).reshape(-1, 1) * step + np.arange(width).reshape(1, -1)
    inside = starts < signal_len
    index = Constant(np.where(inside, starts, 0).astype(np.int64))
    dtype = ctx.info(real).dtype.numpy()
    keep = Constant(inside.astype(dtype))

    def framed(v):
        f = ctx.emit(op.multiply(op.take(v, index, axis=1), keep))
        return ctx.emit(op.multiply(f, window)) if window is not None else f

    real = framed(real)
    imag = framed(imag) if imag is not None else None
    onesided = bool(attrs.get("onesided", 1))
    out_re, out_im = dft_last_axis(ctx, real, imag, frame_length, False, onesided)
    return _join_complex(ctx, out_re, out_im)


@converter("MelWeightMatrix")
def _mel_weight_matrix(ctx, node, inputs, attrs):
    from .importer import _onnx_dtype

    if any(_runtime(inputs, k) for k in range(5)):
        from .ops_signal_runtime import mel_weight_matrix_runtime

        dtype = _onnx_dtype(attrs["output_datatype"]) if "output_datatype" in attrs else np.dtype(np.float32)
        return mel_weight_matrix_runtime(ctx, [ctx.tensor(v) for v in inputs], str(dtype))
    bins_mel = _int_input(ctx, inputs, 0, "num_mel_bins")
    dft_length = _int_input(ctx, inputs, 1, "dft_length")
    rate = _int_input(ctx, inputs, 2, "sample_rate")
    low, high = (float(np.asarray(ctx.constant(inputs[k], "the edge frequencies")).reshape(-1)[0]) for k in (3, 4))
    spectrogram_bins = dft_length // 2 + 1
    # num_mel_bins + 2 edges, spaced evenly in mel (the step divides by the edge count, as ONNX does)
    mel = lambda f: 2595 * np.log10(1 + f / 700)  # noqa: E731
    step = (mel(high) - mel(low)) / (bins_mel + 2)
    edges_mel = np.arange(bins_mel + 2) * step + mel(low)
    edges_hz = 700 * (np.power(10, edges_mel / 2595) - 1)
    edges = ((dft_length + 1) * edges_hz // rate).astype(int)
    weights = np.zeros((spectrogram_bins, bins_mel))
    for m in range(bins_mel):
        left, center, right = edges[m], edges[m + 1], edges[m + 2]
        if center == left:
            weights[center, m] = 1
        else:
            for j in range(left, center + 1):
                weights[j, m] = (j - left) / (center - left)
        for j in range(center, right):
            weights[j, m] = (right - j) / (right - center)
    dtype = _onnx_dtype(attrs["output_datatype"]) if "output_datatype" in attrs else np.dtype(np.float32)
    return Constant(weights.astype(dtype))
