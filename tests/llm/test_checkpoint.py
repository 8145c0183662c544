"""Hugging Face checkpoints: safetensors read and written without a dependency, every tensor checked."""
import json
import struct

import numpy as np
import pytest

from refcomp.llm.checkpoint import (
    expected_shapes, load_checkpoint, read_safetensors, save_checkpoint, write_safetensors,
)
from refcomp.llm.protocol import CheckpointError, LlamaConfig

CONFIG = LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)


def random_weights(rng, config=CONFIG):
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in expected_shapes(config).items()}


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_round_trip(tmp_path, rng, dtype):
    weights = random_weights(rng)
    save_checkpoint(tmp_path, CONFIG, weights, dtype=dtype)
    config, loaded = load_checkpoint(tmp_path)
    assert config == CONFIG
    assert loaded.keys() == weights.keys()
    for name, array in weights.items():
        assert loaded[name].dtype == np.float32 and loaded[name].shape == array.shape
        if dtype == "float32":
            np.testing.assert_array_equal(loaded[name], array)
        elif dtype == "float16":
            np.testing.assert_array_equal(loaded[name], array.astype(np.float16).astype(np.float32))
        else:  # bfloat16 keeps 8 significant bits, rounded to nearest
            np.testing.assert_allclose(loaded[name], array, rtol=2.0 ** -8, atol=0)


def test_bfloat16_rounds_to_nearest_even(tmp_path):
    values = np.array([1.0, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, -2.5, np.inf], np.float32)
    write_safetensors(tmp_path / "x.safetensors", {"x": values}, dtype="bfloat16")
    got = read_safetensors(tmp_path / "x.safetensors")["x"]
    np.testing.assert_array_equal(got, [1.0, 1.0, 1.0 + 2.0 ** -6, -2.5, np.inf])


def test_tied_checkpoint_needs_no_lm_head(tmp_path, rng):
    config = LlamaConfig(**{**CONFIG.__dict__, "tie_word_embeddings": True})
    weights = random_weights(rng, config)
    assert "lm_head.weight" not in weights
    save_checkpoint(tmp_path, config, weights)
    loaded_config, loaded = load_checkpoint(tmp_path)
    assert loaded_config.tie_word_embeddings and "lm_head.weight" not in loaded


def test_sharded_checkpoint(tmp_path, rng):
    weights = random_weights(rng)
    names = sorted(weights)
    shards = {"model-00001-of-00002.safetensors": names[:7], "model-00002-of-00002.safetensors": names[7:]}
    for file, members in shards.items():
        write_safetensors(tmp_path / file, {n: weights[n] for n in members})
    index = {"metadata": {}, "weight_map": {n: f for f, members in shards.items() for n in members}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    (tmp_path / "config.json").write_text(json.dumps(CONFIG.to_hf()))
    _, loaded = load_checkpoint(tmp_path)
    for name in names:
        np.testing.assert_array_equal(loaded[name], weights[name])


def test_files_agree_with_the_safetensors_package(tmp_path, rng):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    tensors = {"a": rng.standard_normal((3, 5)).astype(np.float32),
               "b": rng.standard_normal((7,)).astype(np.float16)}
    safetensors_numpy.save_file(tensors, str(tmp_path / "theirs.safetensors"))
    ours = read_safetensors(tmp_path / "theirs.safetensors")
    np.testing.assert_array_equal(ours["a"], tensors["a"])
    np.testing.assert_array_equal(ours["b"], tensors["b"].astype(np.float32))
    write_safetensors(tmp_path / "ours.safetensors", {"a": tensors["a"]}, dtype="float16")
    theirs = safetensors_numpy.load_file(str(tmp_path / "ours.safetensors"))
    np.testing.assert_array_equal(theirs["a"], tensors["a"].astype(np.float16))


def test_transformers_checkpoint_loads(tmp_path):
    from hf_llama_helpers import random_llama

    model, path = random_llama(tmp_path, hidden=32, layers=1, heads=4, kv_heads=2, vocab=50, intermediate=40)
    config, weights = load_checkpoint(path)
    assert config.hidden_size == 32 and config.num_key_value_heads == 2 and not config.tie_word_embeddings
    for name, tensor in model.state_dict().items():
        np.testing.assert_array_equal(weights[name], tensor.numpy())


# ----------------------------------------------------------------------------- bad input

def _saved(tmp_path, rng, **changes):
    weights = random_weights(rng)
    for name, value in changes.items():
        if value is None:
            del weights[name]
        else:
            weights[name] = value
    write_safetensors(tmp_path / "model.safetensors", weights)
    (tmp_path / "config.json").write_text(json.dumps(CONFIG.to_hf()))
    return tmp_path


def test_missing_tensor_is_named(tmp_path, rng):
    path = _saved(tmp_path, rng, **{"model.layers.1.mlp.up_proj.weight": None})
    with pytest.raises(CheckpointError, match=r"missing tensor model\.layers\.1\.mlp\.up_proj\.weight"):
        load_checkpoint(path)


def test_misshaped_tensor_is_named(tmp_path, rng):
    path = _saved(tmp_path, rng, **{"model.layers.0.self_attn.k_proj.weight": np.zeros((16, 16), np.float32)})
    with pytest.raises(CheckpointError, match=r"model\.layers\.0\.self_attn\.k_proj\.weight has shape "
                                              r"\(16, 16\), expected \(8, 16\)"):
        load_checkpoint(path)


def test_unexpected_tensor_is_named(tmp_path, rng):
    path = _saved(tmp_path, rng, **{"model.layers.2.mlp.up_proj.weight": np.zeros((24, 16), np.float32)})
    with pytest.raises(CheckpointError, match=r"unexpected tensor model\.layers\.2\.mlp\.up_proj\.weight"):
        load_checkpoint(path)


@pytest.mark.parametrize("config, message", [
    ({"architectures": ["MistralForCausalLM"], "model_type": "mistral"}, "unsupported architecture"),
    ({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}, "unsupported architecture"),
])
def test_unknown_architecture(tmp_path, rng, config, message):
    path = _saved(tmp_path, rng)
    (path / "config.json").write_text(json.dumps({**CONFIG.to_hf(), **config}))
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(path)


@pytest.mark.parametrize("setting, message", [
    ({"hidden_act": "gelu"}, "hidden_act 'gelu' is not supported"),
    ({"attention_bias": True}, "attention_bias is set"),
    ({"mlp_bias": True}, "mlp_bias is set"),
])
def test_options_the_model_does_not_compute_are_refused(tmp_path, rng, setting, message):
    """Same tensor names and shapes, another model: loading it would silently compute the wrong one."""
    path = _saved(tmp_path, rng)
    (path / "config.json").write_text(json.dumps({**CONFIG.to_hf(), **setting}))
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(path)
    (path / "config.json").write_text(json.dumps({**CONFIG.to_hf(), "hidden_act": "swish"}))
    assert load_checkpoint(path)[0] == CONFIG       # transformers' other name for silu


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_weight_is_named(tmp_path, rng, bad):
    weights = random_weights(rng)
    norm = weights["model.norm.weight"]
    spot = int(rng.integers(norm.size))
    norm[spot] = bad
    path = _saved(tmp_path, rng, **{"model.norm.weight": norm})
    with pytest.raises(CheckpointError, match=rf"tensor model\.norm\.weight holds 1 non-finite value\(s\) "
                                              rf"\(NaN or inf\), the first at flat index {spot}"):
        load_checkpoint(path)


def test_truncated_file(tmp_path, rng):
    path = _saved(tmp_path, rng)
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[:len(data) - 100])
    with pytest.raises(CheckpointError, match="truncated: tensor .* ends at byte"):
        load_checkpoint(path)
    (path / "model.safetensors").write_bytes(data[:20])
    with pytest.raises(CheckpointError, match="truncated or corrupt: the header claims"):
        load_checkpoint(path)
    (path / "model.safetensors").write_bytes(data[:5])
    with pytest.raises(CheckpointError, match="truncated: 5 bytes"):
        load_checkpoint(path)


def test_corrupt_header_and_dtype(tmp_path):
    file = tmp_path / "x.safetensors"
    text = b"{not json"
    file.write_bytes(struct.pack("<Q", len(text)) + text)
    with pytest.raises(CheckpointError, match="header is not valid JSON"):
        read_safetensors(file)
    header = json.dumps({"x": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}}).encode()
    file.write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))
    with pytest.raises(CheckpointError, match="tensor x has dtype 'I64'"):
        read_safetensors(file)
    header = json.dumps({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}).encode()
    file.write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))
    with pytest.raises(CheckpointError, match="data_offsets span 8 bytes but shape"):
        read_safetensors(file)


def test_missing_files(tmp_path, rng):
    with pytest.raises(CheckpointError, match="not a checkpoint directory"):
        load_checkpoint(tmp_path / "nowhere")
    with pytest.raises(CheckpointError, match="cannot read config.json"):
        load_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(CONFIG.to_hf()))
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        load_checkpoint(tmp_path)
