"""Small transformers models through torch.export and from_exported_program, equal to torch eager.

Each model is exported once with a symbolic batch (and sequence) size, imported and compiled once,
then run at three sizes.  Weights are random from a fixed seed; configs are tiny so CI stays fast.
MobileNetV2 compiles about a hundred distinct kernels, so it runs with `-m slow`.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import refcomp  # noqa: E402
from refcomp.frontend import from_exported_program  # noqa: E402

VOCAB = 64
SIZES = [(1, 2), (2, 5), (3, 9)]


class _Text(torch.nn.Module):
    def __init__(self, model, logits):
        super().__init__()
        self.model, self.logits = model, logits

    def forward(self, ids):
        out = self.model(input_ids=ids, use_cache=False) if self.logits else self.model(input_ids=ids)
        return out.logits if self.logits else out.last_hidden_state


class _Vision(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, pixels):
        return self.model(pixel_values=pixels).last_hidden_state


def _text_models():
    t = transformers
    return {
        "llama": lambda: _Text(t.LlamaForCausalLM(t.LlamaConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64)), True),
        "gpt2": lambda: _Text(t.GPT2LMHeadModel(t.GPT2Config(
            vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=4, n_positions=64, bos_token_id=0, eos_token_id=0)), True),
        "bert": lambda: _Text(t.BertModel(t.BertConfig(
            vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=64)), False),
    }


def _vision_models():
    t = transformers
    return {
        "vit": (lambda: _Vision(t.ViTModel(t.ViTConfig(
            hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64, image_size=16,
            patch_size=4), add_pooling_layer=False)), 16),
        "resnet": (lambda: _Vision(t.ResNetModel(t.ResNetConfig(
            embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic"))), 32),
        "mobilenet_v2": (lambda: _Vision(t.MobileNetV2Model(t.MobileNetV2Config(
            depth_multiplier=0.25, image_size=32))), 32),
    }


def _compile(model, example, dynamic):
    with torch.no_grad():
        ep = torch.export.export(model, (example,), dynamic_shapes=(dynamic,))
    mod = from_exported_program(ep)
    return refcomp.runtime.VirtualMachine(refcomp.graph.build(mod, target="c"))


def _check(vm, model, x):
    with torch.no_grad():
        expected = model(x).numpy()
    got = vm["main"](x.numpy())
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()))


@pytest.mark.parametrize("name", ["llama", "gpt2", "bert"])
def test_text_model_matches_torch_at_three_batch_and_sequence_sizes(name):
    torch.manual_seed(0)
    model = _text_models()[name]().eval()
    batch = torch.export.Dim("batch", min=1, max=8)
    seq = torch.export.Dim("seq", min=2, max=32)
    vm = _compile(model, torch.randint(0, VOCAB, (2, 4)), {0: batch, 1: seq})
    generator = torch.Generator().manual_seed(1)
    for b, s in SIZES:
        _check(vm, model, torch.randint(0, VOCAB, (b, s), generator=generator))


@pytest.mark.parametrize("name", ["vit", "resnet", pytest.param("mobilenet_v2", marks=pytest.mark.slow)])
def test_vision_model_matches_torch_at_three_batch_sizes(name):
    torch.manual_seed(0)
    make, size = _vision_models()[name]
    model = make().eval()
    batch = torch.export.Dim("batch", min=1, max=8)
    vm = _compile(model, torch.randn(2, 3, size, size), {0: batch})
    generator = torch.Generator().manual_seed(1)
    for b in (1, 2, 3):
        _check(vm, model, torch.randn(b, 3, size, size, generator=generator))
