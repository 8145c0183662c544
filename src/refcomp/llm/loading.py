"""Finding and loading a model for the decoders: the shipped byte-level model by default, run by
the compiled model (refcomp.llm.model) or, on request, by the numpy ReferenceLlama."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .checkpoint import load_checkpoint
from .protocol import CausalLM

#: The byte-level Llama trained by benchmarks/llm_train.py and shipped with the package.
DEFAULT_MODEL = Path(__file__).resolve().parent / "data" / "byte-llama"


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

    config, weights = load_checkpoint(path)
    return ReferenceLlama(config, weights), "reference"
