"""Large-language-model decoding on refcomp: a Llama-architecture model, its KV caches, sampling and
MagicDec self-speculative decoding.

`protocol.py` fixes the contract between the model and the decoders: a `CausalLM` appends tokens to a
`KVCache` and returns logits; the decoders (autoregressive and speculative) only speak that contract.
"""
from .protocol import CausalLM, KVCache, LlamaConfig, StreamingBudget

__all__ = ["CausalLM", "KVCache", "LlamaConfig", "StreamingBudget"]
