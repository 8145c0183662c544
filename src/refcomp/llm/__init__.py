"""Large-language-model decoding on refcomp: a Llama-architecture model, its KV caches, sampling and
MagicDec self-speculative decoding.

`protocol.py` fixes the contract between the model and the decoders: a `CausalLM` appends tokens to a
`KVCache` and returns logits; the decoders (autoregressive and speculative) only speak that contract.
"""
from .protocol import CausalLM, KVCache, LlamaConfig, StreamingBudget

from .generate import GenerationResult, generate
from .loading import DEFAULT_MODEL, load_model
from .reference import ReferenceLlama
from .sampling import SamplingParams
from .speculative import SpeculativeConfig, speculative_generate

__all__ = ["CausalLM", "KVCache", "LlamaConfig", "StreamingBudget"]
__all__ += ["DEFAULT_MODEL", "GenerationResult", "ReferenceLlama", "SamplingParams", "SpeculativeConfig",
            "generate", "load_model", "speculative_generate"]
