"""Hugging Face models exported by torch's default ONNX exporter with dynamic batch (and sequence):
imported once, built once, run at several sizes, each output within 1e-4 relative of onnxruntime.

The models are small configs with random weights from a fixed seed (benchmarks/hf_models.py, shared
with the whole-model benchmark); each is exported once per run.
"""
import importlib.util
import pathlib
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

import refcomp  # noqa: E402
from refcomp.frontend import from_onnx  # noqa: E402

TEXT_SIZES = [(1, 3), (2, 7), (3, 16)]
IMAGE_BATCHES = [1, 2, 3]
IMAGE_SIZES = {"vit": 16, "resnet": 32, "mobilenet_v2": 32}


def _hf_models():
    path = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "hf_models.py"
    if not path.exists():
        pytest.skip("benchmarks/hf_models.py is not in this checkout")
    spec = importlib.util.spec_from_file_location("benchmark_hf_models", path)
    module = importlib.util.module_from_spec(spec)
    saved_path = list(sys.path)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved_path
    return module


def _export(tmp_path_factory, kind, text):
    hf = _hf_models()
    path = tmp_path_factory.mktemp(kind) / f"{kind}.onnx"
    if text:
        return hf.export(hf.text_model(kind), path)
    size = IMAGE_SIZES[kind]
    return hf.export(hf.image_model(kind, size), path, image_size=size)


def _check(path, inputs):
    mod = from_onnx(path)
    run = refcomp.runtime.VirtualMachine(refcomp.graph.build(mod, target="c"))["main"]
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for x in inputs:
        expected = session.run(None, {"x": x})[0]
        got = np.asarray(run(x))
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()))


@pytest.mark.parametrize("kind", [pytest.param("llama", marks=pytest.mark.slow), "gpt2", "bert"])
def test_text_model_at_several_batch_and_sequence_sizes(tmp_path_factory, kind):
    path = _export(tmp_path_factory, kind, text=True)
    rng = np.random.default_rng(7)
    _check(path, [rng.integers(0, 100, size).astype(np.int64) for size in TEXT_SIZES])


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["vit", "resnet", "mobilenet_v2"])
def test_vision_model_at_several_batch_sizes(tmp_path_factory, kind):
    path = _export(tmp_path_factory, kind, text=False)
    rng = np.random.default_rng(7)
    size = IMAGE_SIZES[kind]
    _check(path, [rng.standard_normal((b, 3, size, size)).astype(np.float32) for b in IMAGE_BATCHES])
