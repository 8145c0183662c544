"""Large-language-model decoding on refcomp: a Llama-architecture model, its KV caches, sampling and
MagicDec self-speculative decoding.

`protocol.py` fixes the contract between the model and the decoders: a `CausalLM` appends tokens to a
`KVCache` and returns logits; the decoders (autoregressive and speculative) only speak that contract.
"""
from ..lazy import lazy_exports
from .protocol import CausalLM, CheckpointError, KVCache, LlamaConfig, StreamingBudget

# the model side: Hugging Face checkpoints, the paged KV cache, the compiled model (loaded on first
# use: it brings in the graph compiler)
from .cache import PagedKVCache
from .checkpoint import load_checkpoint, save_checkpoint
# the decoding side: sampling, generate, MagicDec speculative decoding, the numpy reference model
from .generate import GenerationResult, generate
from .loading import DEFAULT_MODEL, load_model
from .reference import ReferenceLlama
from .sampling import SamplingParams
from .speculative import SpeculativeConfig, magicdec_generate, speculative_generate

_MODEL_EXPORTS = {"CompiledLlama": ("refcomp.llm.model", "CompiledLlama"),
                  "load_llama": ("refcomp.llm.model", "load_llama")}
__getattr__, __dir__ = lazy_exports(__name__, _MODEL_EXPORTS)

__all__ = ["CausalLM", "CheckpointError", "KVCache", "LlamaConfig", "StreamingBudget",
           "PagedKVCache", "load_checkpoint", "save_checkpoint", "CompiledLlama", "load_llama",
           "DEFAULT_MODEL", "GenerationResult", "ReferenceLlama", "SamplingParams", "SpeculativeConfig",
           "generate", "load_model", "magicdec_generate", "speculative_generate"]
