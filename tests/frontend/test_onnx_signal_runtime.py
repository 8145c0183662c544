"""DFT and STFT with the axis, the DFT length, the frame step or the frame length read at run time:
one compiled model, several operand values, each checked against numpy's FFT."""
import numpy as np
import pytest

import refcomp
from refcomp.errors import ArgumentError
from refcomp.frontend import from_onnx

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402


def _run(node, inputs, opset):
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return refcomp.runtime.VirtualMachine(refcomp.graph.build(from_onnx(model), target="c"))["main"]


def _vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def _complex(y):
    return y[..., 0] + 1j * y[..., 1]


@pytest.fixture(scope="module", params=[(0, 0), (0, 1), (1, 0)], ids=["forward", "rfft", "inverse"])
def dft(request):
    inverse, onesided = request.param
    node = helper.make_node("DFT", ["x", "length", "axis"], ["y"], inverse=inverse, onesided=onesided)
    parts = 2 if inverse else 1
    run = _run(node, [_vi("x", TensorProto.FLOAT, [2, 6, 5, parts]), _vi("length", TensorProto.INT64, []),
                      _vi("axis", TensorProto.INT64, [])], 20)
    return run, bool(inverse), bool(onesided), parts


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("axis", [0, 1, 2, -2, -3])
@pytest.mark.parametrize("length", [3, 6, 8])
def test_dft_with_run_time_axis_and_length(dft, axis, length, seed):
    run, inverse, onesided, parts = dft
    x = np.random.default_rng(seed).standard_normal((2, 6, 5, parts)).astype(np.float32)
    signal = x[..., 0] if parts == 1 else x[..., 0] + 1j * x[..., 1]
    a = axis if axis >= 0 else axis + 4  # negative axes count the trailing complex axis too
    if inverse:
        want = np.fft.ifft(signal, n=length, axis=a)
    elif onesided:
        want = np.fft.rfft(signal, n=length, axis=a)
    else:
        want = np.fft.fft(signal, n=length, axis=a)
    got = run(x, np.asarray(length, np.int64), np.asarray(axis, np.int64))
    assert got.shape == want.shape + (2,)
    np.testing.assert_allclose(_complex(got), want, rtol=1e-4, atol=1e-4)


def test_dft_on_the_complex_axis_is_refused(dft):
    run, _, _, parts = dft
    with pytest.raises(ArgumentError):
        run(np.ones((2, 6, 5, parts), np.float32), np.asarray(4, np.int64), np.asarray(3, np.int64))


@pytest.fixture(scope="module")
def stft():
    node = helper.make_node("STFT", ["x", "step", "", "length"], ["y"])
    return _run(node, [_vi("x", TensorProto.FLOAT, [2, 40, 1]), _vi("step", TensorProto.INT64, []),
                       _vi("length", TensorProto.INT64, [])], 17)


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("step,length", [(4, 8), (3, 10), (7, 7), (1, 40)])
def test_stft_with_run_time_step_and_frame_length(stft, step, length, seed):
    x = np.random.default_rng(seed).standard_normal((2, 40, 1)).astype(np.float32)
    frames = 1 + (40 - length) // step
    windows = np.stack([x[:, f * step:f * step + length, 0] for f in range(frames)], axis=1)
    want = np.fft.rfft(windows, axis=-1)
    got = stft(x, np.asarray(step, np.int64), np.asarray(length, np.int64))
    assert got.shape == want.shape + (2,)
    np.testing.assert_allclose(_complex(got), want, rtol=1e-4, atol=1e-4)


def test_stft_with_a_bad_step_or_length_is_refused(stft):
    x = np.ones((2, 40, 1), np.float32)
    for step, length in ((0, 8), (4, 41), (4, 0)):
        with pytest.raises(ArgumentError):
            stft(x, np.asarray(step, np.int64), np.asarray(length, np.int64))


@pytest.fixture(scope="module")
def mel_weight_matrix():
    node = helper.make_node("MelWeightMatrix", ["bins", "length", "rate", "low", "high"], ["y"])
    inputs = [_vi("bins", TensorProto.INT32, []), _vi("length", TensorProto.INT32, []),
              _vi("rate", TensorProto.INT32, []), _vi("low", TensorProto.FLOAT, []), _vi("high", TensorProto.FLOAT, [])]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    run = refcomp.runtime.VirtualMachine(refcomp.graph.build(from_onnx(model), target="c"))["main"]
    return run, model


@pytest.mark.parametrize("bins,length,rate,low,high", [
    (8, 16, 8192, 0.0, 4096.0), (5, 32, 16000, 20.0, 8000.0), (12, 64, 22050, 100.0, 6000.0), (3, 10, 1000, 0.0, 500.0)])
def test_mel_weight_matrix_of_run_time_sizes_matches_the_onnx_reference(mel_weight_matrix, bins, length, rate,
                                                                        low, high):
    from onnx.reference import ReferenceEvaluator

    run, model = mel_weight_matrix
    args = [np.asarray(bins, np.int32), np.asarray(length, np.int32), np.asarray(rate, np.int32),
            np.asarray(low, np.float32), np.asarray(high, np.float32)]
    (want,) = ReferenceEvaluator(model).run(None, dict(zip(["bins", "length", "rate", "low", "high"], args)))
    got = run(*args)
    assert got.shape == want.shape == (length // 2 + 1, bins) and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
