"""Hugging Face models exported by torch's default ONNX exporter with dynamic batch (and sequence):
imported once, built once, run at several sizes, each output within 1e-4 relative of onnxruntime.

The models are small configs with random weights from a fixed seed; each is exported once per run.
"""
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


def _text_model(kind):
    t = transformers
    if kind == "llama":  # RoPE, grouped-query attention, RMSNorm, SwiGLU
        return t.LlamaForCausalLM(t.LlamaConfig(
            vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64))
    if kind == "gpt2":
        return t.GPT2LMHeadModel(t.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=4, n_positions=64))
    return t.BertModel(t.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                    intermediate_size=64, max_position_embeddings=64))


def _image_model(kind):
    t = transformers
    if kind == "vit":
        return t.ViTModel(t.ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=32,
                                      num_hidden_layers=2, num_attention_heads=4, intermediate_size=64))
    if kind == "resnet":
        return t.ResNetModel(t.ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16],
                                            depths=[1, 1], layer_type="basic"))
    return t.MobileNetV2Model(t.MobileNetV2Config(num_channels=3, image_size=32, depth_multiplier=0.25))


class _FirstOutput(torch.nn.Module):
    def __init__(self, model, text):
        super().__init__()
        self.model, self.text = model, text

    def forward(self, x):
        out = self.model(input_ids=x) if self.text else self.model(pixel_values=x)
        return out[0]


def _export(tmp_path_factory, kind, text):
    torch.manual_seed(0)
    model = _text_model(kind) if text else _image_model(kind)
    model.eval()
    if text:
        model.config.use_cache = False
        example = torch.randint(0, 100, (2, 5))
        dims = {0: torch.export.Dim("batch", min=1, max=16), 1: torch.export.Dim("seq", min=2, max=32)}
    else:
        size = 16 if kind == "vit" else 32
        example = torch.randn(2, 3, size, size)
        dims = {0: torch.export.Dim("batch", min=1, max=16)}
    path = tmp_path_factory.mktemp(kind) / f"{kind}.onnx"
    with torch.no_grad():
        torch.onnx.export(_FirstOutput(model, text).eval(), (example,), str(path), dynamo=True,
                          dynamic_shapes={"x": dims}, input_names=["x"], output_names=["y"], verbose=False)
    return str(path)


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
    size = 16 if kind == "vit" else 32
    _check(path, [rng.standard_normal((b, 3, size, size)).astype(np.float32) for b in IMAGE_BATCHES])
