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


def chi2_threshold(df: int) -> float:
    """The chi-square quantile a correct sampler exceeds with probability 1e-6 (the Wilson-Hilferty
    approximation, a few percent above the exact quantile for small df)."""
    z = 4.753424  # standard normal upper 1e-6 point
    return df * (1 - 2 / (9 * df) + z * np.sqrt(2 / (9 * df))) ** 3


def chi2_statistic(counts: np.ndarray, probs: np.ndarray) -> tuple[float, int]:
    """Pearson's statistic of observed counts against probabilities, and its degrees of freedom;
    cells of probability 0 must be empty (else the statistic is infinite)."""
    n = counts.sum()
    support = probs > 0
    if counts[~support].any():
        return float("inf"), int(support.sum()) - 1
    expected = n * probs[support]
    return float(((counts[support] - expected) ** 2 / expected).sum()), int(support.sum()) - 1


def write_checkpoint(directory, config: LlamaConfig, weights: dict, dtype=np.float16, config_json=None) -> None:
    """A Hugging Face checkpoint directory (config.json + model.safetensors) written with numpy only."""
    import json
    import struct
    from pathlib import Path

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config_json if config_json is not None else config.to_hf()))
    code = {np.dtype(np.float16): "F16", np.dtype(np.float32): "F32"}[np.dtype(dtype)]
    header, blobs, offset = {}, [], 0
    for name, array in weights.items():
        blob = np.ascontiguousarray(array, dtype=dtype).astype(np.dtype(dtype).newbyteorder("<")).tobytes()
        header[name] = {"dtype": code, "shape": list(np.shape(array)), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    (directory / "model.safetensors").write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))


class CostClock:
    """A clock that advances only when `model` runs a forward, by a cost per sequence in the forward:
    `full(tokens)` on a full cache, `draft(call)` on a streaming one (call: the draft forwards so far),
    so that a decoding's timing-based choices are the same on every run and machine."""

    def __init__(self, model, full=lambda tokens: 1.0 + 0.2 * (tokens - 1), draft=lambda call: 0.1) -> None:
        self.now, self.calls = 0.0, 0
        forward = model.forward

        def timed(tokens, cache):
            rows, width = np.shape(tokens)
            if cache.streaming is None:
                cost = full(width)
            else:
                cost = draft(self.calls)
                self.calls += 1
            self.now += rows * cost
            return forward(tokens, cache)

        model.forward = timed

    def __call__(self) -> float:
        return self.now
