"""Finding and loading a model for the decoders: the shipped byte-level model by default, the
compiled model when refcomp.llm.model is available, the numpy ReferenceLlama otherwise."""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np

from .protocol import CausalLM, CheckpointError, LlamaConfig

#: The byte-level Llama trained by benchmarks/llm_train.py and shipped with the package.
DEFAULT_MODEL = Path(__file__).resolve().parent / "data" / "byte-llama"


def read_checkpoint(path: str | Path) -> tuple[LlamaConfig, dict[str, np.ndarray]]:
    """(config, weights) of a Hugging Face checkpoint directory, through refcomp.llm.checkpoint when
    the package has it, else through the small reader below (single-file or sharded safetensors)."""
    try:
        from .checkpoint import load_checkpoint  # type: ignore[import-not-found]
    except ImportError:
        return _read_hf_directory(Path(path))
    return load_checkpoint(path)


def load_model(path: str | Path | None = None, *, compiled: bool | None = None,
               **compile_options: Any) -> tuple[CausalLM, str]:
    """The model in `path` (default: the shipped byte-llama) and a word saying which implementation
    runs it: "compiled" (refcomp.llm.model.load_llama) or "reference" (numpy).  compiled=None picks
    the compiled model when it can be imported; True insists on it; False takes the reference."""
    path = Path(path) if path is not None else DEFAULT_MODEL
    if compiled is not False:
        try:
            from .model import load_llama  # type: ignore[import-not-found]
        except ImportError:
            if compiled:
                raise CheckpointError("the compiled Llama model (refcomp.llm.model) is not available") from None
        else:
            return load_llama(path, **compile_options), "compiled"
    from .reference import ReferenceLlama

    config, weights = read_checkpoint(path)
    return ReferenceLlama(config, weights), "reference"


_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64}


def _read_hf_directory(path: Path) -> tuple[LlamaConfig, dict[str, np.ndarray]]:
    if not path.is_dir():
        raise CheckpointError(f"checkpoint: {str(path)!r} is not a directory")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise CheckpointError(f"checkpoint: {str(path)!r} has no config.json")
    try:
        config = LlamaConfig.from_hf(json.loads(config_file.read_text()))
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"checkpoint: config.json is not valid JSON: {exc}") from None
    single, index = path / "model.safetensors", path / "model.safetensors.index.json"
    if single.is_file():
        files = [single]
    elif index.is_file():
        weight_map = json.loads(index.read_text()).get("weight_map", {})
        files = [path / name for name in sorted(set(weight_map.values()))]
    else:
        raise CheckpointError(f"checkpoint: {str(path)!r} has neither model.safetensors nor "
                              "model.safetensors.index.json")
    weights: dict[str, np.ndarray] = {}
    for file in files:
        weights.update(_read_safetensors(file))
    return config, weights


def _read_safetensors(file: Path) -> dict[str, np.ndarray]:
    """A safetensors file: 8-byte little-endian header length, JSON header, raw little-endian data."""
    data = file.read_bytes()
    if len(data) < 8:
        raise CheckpointError(f"checkpoint: {file.name} is too short to be a safetensors file")
    (size,) = struct.unpack("<Q", data[:8])
    try:
        header = json.loads(data[8:8 + size])
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise CheckpointError(f"checkpoint: {file.name} has an unreadable safetensors header") from None
    body = memoryview(data)[8 + size:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(info.get("dtype"))
        if dtype is None:
            raise CheckpointError(f"checkpoint: tensor {name!r} has unsupported dtype {info.get('dtype')!r}")
        begin, end = info["data_offsets"]
        array = np.frombuffer(body[begin:end], dtype=np.dtype(dtype).newbyteorder("<"))
        if info["dtype"] == "BF16":
            array = (array.astype(np.uint32) << 16).view(np.float32)
        shape = tuple(info["shape"])
        if array.size != int(np.prod(shape)):
            raise CheckpointError(f"checkpoint: tensor {name!r} holds {array.size} values, shape {shape} needs "
                                  f"{int(np.prod(shape))}")
        out[name] = array.reshape(shape)
    return out
