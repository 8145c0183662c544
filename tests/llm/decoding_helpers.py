"""Small models for the decoding tests: random Llama configs and weights, optionally from transformers."""
from __future__ import annotations

import numpy as np

from refcomp.llm.protocol import LlamaConfig
from refcomp.llm.reference import ReferenceLlama, random_weights


def tiny_config(vocab: int = 32, hidden: int = 32, layers: int = 2, heads: int = 4, kv_heads: int = 2,
                inter: int = 48, tie: bool = False, max_pos: int = 512) -> LlamaConfig:
    return LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                       num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=max_pos,
                       rms_norm_eps=1e-5, tie_word_embeddings=tie)


def tiny_model(seed: int = 0, dtype=np.float64, scale: float = 0.6, **kw) -> ReferenceLlama:
    config = tiny_config(**kw)
    return ReferenceLlama(config, random_weights(config, seed=seed, scale=scale), dtype=dtype)


def hf_model(config: LlamaConfig, seed: int):
    """A random transformers LlamaForCausalLM of `config` and its weights as a numpy dict (HF names)."""
    import torch
    from transformers import LlamaConfig as HFConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    hf = {k: v for k, v in config.to_hf().items() if k not in ("architectures",)}
    model = LlamaForCausalLM(HFConfig(**hf)).eval()
    with torch.no_grad():  # non-trivial norms so the test sees their weights
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.add_(0.1 * torch.randn_like(p))
    weights = {name: t.detach().numpy().copy() for name, t in model.state_dict().items()}
    return model, weights
