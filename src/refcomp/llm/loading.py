"""Finding and loading a model for the decoders: the shipped byte-level model by default, run by
the compiled model (refcomp.llm.model) or, on request, by the numpy ReferenceLlama."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .checkpoint import load_checkpoint
from .protocol import CausalLM, LlamaConfig

#: The byte-level Llama trained by benchmarks/llm_train.py and shipped with the package.
DEFAULT_MODEL = Path(__file__).resolve().parent / "data" / "byte-llama"


def read_checkpoint(path: str | Path) -> tuple[LlamaConfig, dict[str, np.ndarray]]:
    """(config, float32 weights) of a Hugging Face checkpoint directory (refcomp.llm.checkpoint)."""
    return load_checkpoint(path)


def load_model(path: str | Path | None = None, *, compiled: bool = True,
               **compile_options: Any) -> tuple[CausalLM, str]:
    """The model in `path` (default: the shipped byte-llama) and a word saying which implementation
    runs it: "compiled" (refcomp.llm.model.load_llama, the default) or "reference" (numpy, with
    compiled=False).  compile_options go to CompiledLlama."""
    path = Path(path) if path is not None else DEFAULT_MODEL
    if compiled:
        from .model import load_llama

        return load_llama(path, **compile_options), "compiled"
    from .reference import ReferenceLlama

    config, weights = read_checkpoint(path)
    return ReferenceLlama(config, weights), "reference"
