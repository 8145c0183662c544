"""Hugging Face Llama checkpoints: a directory with `config.json` and `model.safetensors` (or shards
listed in `model.safetensors.index.json`), read and written without any dependency.

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON mapping each tensor
name to `{"dtype", "shape", "data_offsets": [begin, end]}` (offsets into the bytes after the header;
an optional `"__metadata__"` entry of strings), then the raw little-endian tensor bytes.  F32, F16
and BF16 tensors are read and returned as float32; every tensor a Llama model needs is checked for
presence and shape against the config and for finite values, and each problem is a `CheckpointError` naming the tensor.
"""
from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Mapping

import numpy as np

from .protocol import CheckpointError, LlamaConfig

SAFETENSORS = "model.safetensors"
SHARD_INDEX = "model.safetensors.index.json"
CONFIG = "config.json"
# The largest header a reader accepts: guards against a corrupt length word allocating gigabytes.
MAX_HEADER_BYTES = 100 * 1024 * 1024

_DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2")}
_SAVE_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}


def expected_shapes(config: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor a Llama checkpoint must hold, by its Hugging Face name, with its shape."""
    h, d, v, i = config.hidden_size, config.dim_head, config.vocab_size, config.intermediate_size
    hq, hkv = config.num_attention_heads * d, config.num_key_value_heads * d
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    for layer in range(config.num_hidden_layers):
        p = f"model.layers.{layer}."
        shapes.update({
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (hq, h), p + "self_attn.k_proj.weight": (hkv, h),
            p + "self_attn.v_proj.weight": (hkv, h), p + "self_attn.o_proj.weight": (h, hq),
            p + "mlp.gate_proj.weight": (i, h), p + "mlp.up_proj.weight": (i, h),
            p + "mlp.down_proj.weight": (h, i),
        })
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (v, h)
    return shapes


def _ignorable(name: str, config: LlamaConfig) -> bool:
    """Tensors some exporters add that carry nothing the model needs."""
    return name.endswith("rotary_emb.inv_freq") or (config.tie_word_embeddings and name == "lm_head.weight")


def check_weights(config: LlamaConfig, weights: Mapping[str, np.ndarray], where: str = "checkpoint") -> dict[str, np.ndarray]:
    """The weights a model of `config` needs, as C-contiguous float32, after checking each one's presence,
    shape and values (finite: a NaN or inf weight would make every logit NaN, and greedy decoding
    would then emit arbitrary tokens)."""
    shapes = expected_shapes(config)
    missing = [name for name in shapes if name not in weights]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise CheckpointError(f"{where}: missing tensor {missing[0]}{more}")
    unknown = sorted(name for name in weights if name not in shapes and not _ignorable(name, config))
    if unknown:
        raise CheckpointError(f"{where}: unexpected tensor {unknown[0]} for a LlamaForCausalLM of this config")
    out: dict[str, np.ndarray] = {}
    for name, shape in shapes.items():
        array = np.asarray(weights[name])
        if tuple(array.shape) != shape:
            raise CheckpointError(f"{where}: tensor {name} has shape {tuple(array.shape)}, expected {shape}")
        if array.dtype.kind != "f":
            raise CheckpointError(f"{where}: tensor {name} has dtype {array.dtype}, expected a float type")
        out[name] = np.ascontiguousarray(array, dtype=np.float32)
        if not np.isfinite(out[name]).all():
            bad = np.flatnonzero(~np.isfinite(out[name]))
            raise CheckpointError(f"{where}: tensor {name} holds {bad.size} non-finite value(s) (NaN or inf), "
                                  f"the first at flat index {int(bad[0])}: the model would compute NaN")
    if config.tie_word_embeddings and "lm_head.weight" in weights:
        head = np.asarray(weights["lm_head.weight"])
        if tuple(head.shape) != shapes["model.embed_tokens.weight"]:
            raise CheckpointError(f"{where}: tensor lm_head.weight has shape {tuple(head.shape)}, "
                                  f"expected {shapes['model.embed_tokens.weight']}")
    return out


# ----------------------------------------------------------------------------- safetensors

def read_safetensors(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Every tensor of one safetensors file, as float32 arrays (F32, F16 and BF16 only)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise CheckpointError(f"{path.name}: cannot read ({err.strerror or err})") from None
    if len(data) < 8:
        raise CheckpointError(f"{path.name}: truncated: {len(data)} bytes, shorter than the 8-byte header length")
    (header_len,) = struct.unpack("<Q", data[:8])
    if header_len > MAX_HEADER_BYTES or 8 + header_len > len(data):
        raise CheckpointError(f"{path.name}: truncated or corrupt: the header claims {header_len} bytes "
                              f"but the file has {len(data) - 8} after the length")
    try:
        header = json.loads(data[8:8 + header_len].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path.name}: header is not valid JSON ({err})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path.name}: header is not a JSON object")
    body = memoryview(data)[8 + header_len:]
    tensors: dict[str, np.ndarray] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        tensors[name] = _tensor(path.name, name, entry, body)
    return tensors


def _tensor(file: str, name: str, entry: object, body: memoryview) -> np.ndarray:
    if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= entry.keys():
        raise CheckpointError(f"{file}: tensor {name}: header entry needs dtype, shape and data_offsets")
    dtype_name, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if dtype_name not in _DTYPES:
        raise CheckpointError(f"{file}: tensor {name} has dtype {dtype_name!r}; only F32, F16 and BF16 are read")
    if (not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape)
            or not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(o, int) and o >= 0 for o in offsets)):
        raise CheckpointError(f"{file}: tensor {name}: malformed shape {shape!r} or data_offsets {offsets!r}")
    dtype = _DTYPES[dtype_name]
    begin, end = offsets
    count = int(np.prod(shape, dtype=np.int64))
    if end - begin != count * dtype.itemsize:
        raise CheckpointError(f"{file}: tensor {name}: data_offsets span {end - begin} bytes but shape {shape} "
                              f"of {dtype_name} needs {count * dtype.itemsize}")
    if end > len(body):
        raise CheckpointError(f"{file}: truncated: tensor {name} ends at byte {end} of the data "
                              f"but only {len(body)} bytes are present")
    raw = np.frombuffer(body[begin:end], dtype=dtype).reshape(shape)
    if dtype_name == "BF16":
        return (raw.astype(np.uint32) << 16).view(np.float32)
    return raw.astype(np.float32)


def write_safetensors(path: str | os.PathLike, tensors: Mapping[str, np.ndarray], dtype: str = "float32") -> None:
    """Write tensors to one safetensors file, each stored as dtype (float32, float16 or bfloat16)."""
    if dtype not in _SAVE_DTYPES:
        raise CheckpointError(f"save_checkpoint: dtype must be one of {sorted(_SAVE_DTYPES)}, got {dtype!r}")
    code = _SAVE_DTYPES[dtype]
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    chunks: list[bytes] = []
    offset = 0
    for name in sorted(tensors):
        raw = _encode(np.asarray(tensors[name], dtype=np.float32), dtype)
        header[name] = {"dtype": code, "shape": list(np.shape(tensors[name])),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in chunks:
            f.write(raw)


def _encode(array: np.ndarray, dtype: str) -> bytes:
    array = np.ascontiguousarray(array)
    if dtype == "float32":
        return array.astype("<f4").tobytes()
    if dtype == "float16":
        return array.astype("<f2").tobytes()
    bits = array.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even
    nan = np.isnan(array)
    out = np.where(nan, 0x7FC0, rounded).astype("<u2")
    return out.tobytes()


# ----------------------------------------------------------------------------- directories

def read_config(directory: str | os.PathLike) -> LlamaConfig:
    """The LlamaConfig of a checkpoint directory's config.json."""
    path = Path(directory) / CONFIG
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read config.json ({err.strerror or err})") from None
    try:
        mapping = json.loads(text)
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{path}: config.json is not valid JSON ({err})") from None
    if not isinstance(mapping, dict):
        raise CheckpointError(f"{path}: config.json is not a JSON object")
    return LlamaConfig.from_hf(mapping)


def checkpoint_config(path: str | os.PathLike) -> LlamaConfig:
    """The LlamaConfig of a checkpoint directory, without reading its weights: what a caller checks
    its arguments against (a prompt against the context) before the slower load."""
    directory = Path(path)
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: not a checkpoint directory (config.json + model.safetensors)")
    return read_config(directory)


def load_checkpoint(path: str | os.PathLike) -> tuple[LlamaConfig, dict[str, np.ndarray]]:
    """(config, weights) of a Hugging Face Llama checkpoint directory; weights float32, by HF name."""
    directory = Path(path)
    config = checkpoint_config(directory)
    tensors: dict[str, np.ndarray] = {}
    if (directory / SAFETENSORS).exists():
        tensors = read_safetensors(directory / SAFETENSORS)
    elif (directory / SHARD_INDEX).exists():
        tensors = _read_shards(directory)
    else:
        raise CheckpointError(f"{directory}: no {SAFETENSORS} or {SHARD_INDEX}")
    return config, check_weights(config, tensors, where=str(directory))


def _read_shards(directory: Path) -> dict[str, np.ndarray]:
    try:
        index = json.loads((directory / SHARD_INDEX).read_text(encoding="utf-8"))
        weight_map = index["weight_map"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as err:
        raise CheckpointError(f"{directory / SHARD_INDEX}: unreadable shard index ({err})") from None
    if not isinstance(weight_map, dict):
        raise CheckpointError(f"{directory / SHARD_INDEX}: weight_map is not a JSON object")
    tensors: dict[str, np.ndarray] = {}
    for shard in sorted(set(weight_map.values())):
        if not isinstance(shard, str) or "/" in shard or "\\" in shard or shard.startswith("."):
            raise CheckpointError(f"{directory / SHARD_INDEX}: bad shard file name {shard!r}")
        found = read_safetensors(directory / shard)
        for name in found:
            if weight_map.get(name) == shard:
                tensors[name] = found[name]
    for name, shard in weight_map.items():
        if name not in tensors:
            raise CheckpointError(f"{directory}: tensor {name} is listed in {SHARD_INDEX} but missing from {shard}")
    return tensors


def save_checkpoint(path: str | os.PathLike, config: LlamaConfig, weights: Mapping[str, np.ndarray],
                    dtype: str = "float32") -> None:
    """Write config.json and model.safetensors (tensors stored as dtype) into directory `path`."""
    checked = check_weights(config, weights, where="save_checkpoint")
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / CONFIG).write_text(json.dumps(config.to_hf(), indent=2) + "\n", encoding="utf-8")
    write_safetensors(directory / SAFETENSORS, checked, dtype)
