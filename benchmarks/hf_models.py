"""Hugging Face architectures with random weights, exported by torch's ONNX exporter.

One place for the model definitions that the whole-model benchmark (benchmarks/models.py) and the
frontend tests (tests/frontend/test_onnx_models.py) build: small configurations of transformers'
own model code, weights from a fixed seed, exported with a dynamic batch (and sequence) dimension.
torch, transformers and onnxscript are optional extras: `missing()` names the first one absent.

    path = export(image_model("resnet", **RESNET18_HALF_96), "resnet.onnx", image_size=96)
"""
from __future__ import annotations

import importlib.util

VOCAB = 100

# ResNet-18's layout (basic blocks, depths 2-2-2-2) at half its widths.
RESNET18_HALF = dict(embedding_size=32, hidden_sizes=[32, 64, 128, 256], depths=[2, 2, 2, 2], layer_type="basic")
# MobileNetV2 with every width halved.
MOBILENET_V2_HALF = dict(depth_multiplier=0.5)
# A ViT of two layers, hidden 128, 4 heads, patches of 8 pixels.
VIT_SMALL = dict(patch_size=8, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512)
# BERT's layout with two layers, hidden 128, 4 heads.
BERT_SMALL = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512,
                  max_position_embeddings=128)
# GPT-2's layout with two layers, hidden 128, 4 heads.
GPT2_SMALL = dict(n_embd=128, n_layer=2, n_head=4, n_positions=128)


def missing() -> str | None:
    """The first optional package the exports need that is not installed, else None."""
    for name in ("torch", "transformers", "onnxscript", "onnx"):
        if importlib.util.find_spec(name) is None:
            return name
    return None


def text_model(kind: str, **config):
    """A randomly initialised llama, gpt2 or bert model (tiny widths unless config says otherwise)."""
    import torch
    import transformers as t

    torch.manual_seed(0)
    if kind == "llama":  # RoPE, grouped-query attention, RMSNorm, SwiGLU
        base = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
        model = t.LlamaForCausalLM(t.LlamaConfig(**{**base, **config}))
    elif kind == "gpt2":
        base = dict(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64)
        model = t.GPT2LMHeadModel(t.GPT2Config(**{**base, **config}))
    elif kind == "bert":
        base = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=64, max_position_embeddings=64)
        model = t.BertModel(t.BertConfig(**{**base, **config}))
    else:
        raise ValueError(f"text_model: unknown kind {kind!r} (llama, gpt2, bert)")
    model.config.use_cache = False
    return model.eval()


def image_model(kind: str, image_size: int, **config):
    """A randomly initialised vit, resnet or mobilenet_v2 model for square images of image_size."""
    import torch
    import transformers as t

    torch.manual_seed(0)
    if kind == "vit":
        base = dict(image_size=image_size, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
                    num_attention_heads=4, intermediate_size=64)
        model = t.ViTModel(t.ViTConfig(**{**base, **config}))
    elif kind == "resnet":
        base = dict(num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic")
        model = t.ResNetModel(t.ResNetConfig(**{**base, **config}))
    elif kind == "mobilenet_v2":
        base = dict(num_channels=3, image_size=image_size, depth_multiplier=0.25)
        model = t.MobileNetV2Model(t.MobileNetV2Config(**{**base, **config}))
    else:
        raise ValueError(f"image_model: unknown kind {kind!r} (vit, resnet, mobilenet_v2)")
    return model.eval()


def export(model, path, *, image_size: int | None = None, max_seq: int = 32) -> str:
    """Export model's first output to ONNX at path with input "x" and output "y": images
    (2, 3, image_size, image_size) with a dynamic batch when image_size is given, else token ids
    (2, 5) with dynamic batch and sequence (up to max_seq)."""
    import torch

    text = image_size is None

    class FirstOutput(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            out = self.model(input_ids=x) if text else self.model(pixel_values=x)
            return out[0]

    torch.manual_seed(0)
    if text:
        example = torch.randint(0, VOCAB, (2, 5))
        dims = {0: torch.export.Dim("batch", min=1, max=16), 1: torch.export.Dim("seq", min=2, max=max_seq)}
    else:
        example = torch.randn(2, 3, image_size, image_size)
        dims = {0: torch.export.Dim("batch", min=1, max=16)}
    with torch.no_grad():
        torch.onnx.export(FirstOutput().eval(), (example,), str(path), dynamo=True, dynamic_shapes={"x": dims},
                          input_names=["x"], output_names=["y"], verbose=False)
    return str(path)
