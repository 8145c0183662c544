"""ReferenceLlama: against transformers' LlamaForCausalLM, and its caches' own laws (chunking, ragged
lengths, rollback, streaming attention sets)."""
from __future__ import annotations

import numpy as np
import pytest

from decoding_helpers import hf_model, tiny_config, tiny_model
from refcomp.errors import RefcompError
from refcomp.llm.protocol import CausalLM, CheckpointError, KVCache, StreamingBudget
from refcomp.llm.reference import ReferenceLlama, random_weights

# The reference runs in float64 and returns float32: two float64 results a few units of 1e-16 apart
# (other chunk sizes, other summation orders in BLAS) may round to neighbouring float32 values.
ONE_FLOAT32_UNIT = dict(rtol=2.0 ** -22, atol=1e-12)


def torch_or_skip():
    pytest.importorskip("transformers")
    return pytest.importorskip("torch")


@pytest.mark.parametrize("tie", [False, True])
def test_matches_transformers_prefill_and_decode(tie, rng):
    torch = torch_or_skip()
    config = tiny_config(vocab=64, hidden=64, layers=2, heads=4, kv_heads=2, inter=96, tie=tie)
    hf, weights = hf_model(config, seed=int(rng.integers(1 << 30)))
    model = ReferenceLlama(config, weights)
    assert isinstance(model, CausalLM)
    tokens = rng.integers(0, config.vocab_size, size=(3, 20))
    with torch.no_grad():
        expected = hf(input_ids=torch.from_numpy(tokens)).logits.numpy()
    cache = model.new_cache(3, 64)
    assert isinstance(cache, KVCache)
    got = np.concatenate([model.forward(tokens[:, :13], cache)] +
                         [model.forward(tokens[:, i:i + 1], cache) for i in range(13, 20)], axis=1)
    assert got.dtype == np.float32 and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=2e-4, atol=2e-4)
    assert cache.lengths().tolist() == [20, 20, 20]


def test_matches_transformers_at_large_positions(rng):
    """Absolute rotary positions far from 0 (the rotation angles are computed in float64)."""
    torch = torch_or_skip()
    config = tiny_config(vocab=32, hidden=32, layers=1, heads=2, kv_heads=1, inter=48, max_pos=2048)
    hf, weights = hf_model(config, seed=int(rng.integers(1 << 30)))
    model = ReferenceLlama(config, weights)
    tokens = rng.integers(0, 32, size=(1, 1100))
    with torch.no_grad():
        expected = hf(input_ids=torch.from_numpy(tokens)).logits.numpy()
    got = model.forward(tokens, model.new_cache(1, 1100))
    np.testing.assert_allclose(got[:, -50:], expected[:, -50:], rtol=1e-3, atol=1e-3)


def test_chunking_and_ragged_lengths(rng):
    model = tiny_model(seed=int(rng.integers(1 << 30)))
    tokens = rng.integers(0, 32, size=(2, 30))
    whole = model.forward(tokens, model.new_cache(2, 40))
    # sequence 0 and 1 individually, with a different number of tokens appended first
    for b in range(2):
        cache = model.new_cache(1, 40)
        parts = [model.forward(tokens[b:b + 1, s:s + 7], cache) for s in range(0, 30, 7)]
        np.testing.assert_allclose(np.concatenate(parts, axis=1)[0], whole[b], **ONE_FLOAT32_UNIT)
    # ragged: roll sequence 1 back and re-append; its logits equal a fresh run
    cache = model.new_cache(2, 40)
    model.forward(tokens[:, :20], cache)
    cache.rollback(np.array([20, 12]))
    assert cache.lengths().tolist() == [20, 12]
    out = model.forward(np.stack([tokens[0, 20:25], tokens[1, 12:17]]), cache)
    np.testing.assert_allclose(out[0], whole[0, 20:25], **ONE_FLOAT32_UNIT)
    np.testing.assert_allclose(out[1], whole[1, 12:17], **ONE_FLOAT32_UNIT)


def streaming_oracle(model: ReferenceLlama, tokens: np.ndarray, budget: StreamingBudget) -> np.ndarray:
    """Logits of a StreamingLLM model computed one query at a time from a full cache: query q sees
    the keys at j <= q with j < sinks or j > q - window."""
    full = model.new_cache(tokens.shape[0], tokens.shape[1])
    full.mask_start = lambda start: 0
    full.visible = lambda key_pos, query_pos: (
        (key_pos[:, None, :] >= 0) & (key_pos[:, None, :] <= query_pos[:, :, None])
        & ((key_pos[:, None, :] < budget.sinks) | (key_pos[:, None, :] > query_pos[:, :, None] - budget.window)))
    return model.forward(tokens, full)


@pytest.mark.parametrize("sinks,window,slack", [(2, 5, 0), (0, 3, 2), (4, 6, 3)])
def test_streaming_cache_attends_sinks_and_window(sinks, window, slack, rng):
    model = tiny_model(seed=int(rng.integers(1 << 30)))
    budget = StreamingBudget(sinks, window, slack)
    tokens = rng.integers(0, 32, size=(2, 40))
    expected = streaming_oracle(model, tokens, budget)
    for step in (1, 3, 40):
        cache = model.new_cache(2, 64, streaming=budget)
        got = np.concatenate([model.forward(tokens[:, s:s + step], cache) for s in range(0, 40, step)], axis=1)
        np.testing.assert_allclose(got, expected, **ONE_FLOAT32_UNIT)
        assert cache.lengths().tolist() == [40, 40]
    # the streaming cache differs from the full model once tokens leave the window
    full = model.forward(tokens, model.new_cache(2, 64))
    assert not np.allclose(full[:, -1], expected[:, -1])


def test_streaming_rollback_within_slack_is_exact(rng):
    model = tiny_model(seed=int(rng.integers(1 << 30)))
    budget = StreamingBudget(sinks=2, window=4, slack=3)
    tokens = rng.integers(0, 32, size=(2, 30))
    other = rng.integers(0, 32, size=(2, 3))
    other[1, 0] = tokens[1, 20]                       # sequence 1 keeps its first new token
    expected = streaming_oracle(model, tokens, budget)
    cache = model.new_cache(2, 64, streaming=budget)
    model.forward(tokens[:, :20], cache)
    model.forward(other, cache)                       # 3 wrong tokens ...
    cache.rollback(np.array([20, 21]))                # ... undone (3 and 2 of them)
    out = model.forward(np.array([[tokens[0, 20]], [tokens[1, 21]]]), cache)
    np.testing.assert_allclose(out[0, 0], expected[0, 20], **ONE_FLOAT32_UNIT)
    np.testing.assert_allclose(out[1, 0], expected[1, 21], **ONE_FLOAT32_UNIT)
    with pytest.raises(ValueError, match="slack"):
        cache.rollback(cache.lengths() - 4)


def test_nbytes_per_token():
    model = tiny_model(dtype=np.float32, layers=3, heads=4, kv_heads=2, hidden=32)
    assert model.new_cache(1, 8).nbytes_per_token() == 2 * 3 * 2 * 8 * 4


def test_bad_weights_and_inputs():
    config = tiny_config()
    weights = random_weights(config)
    missing = dict(weights)
    del missing["model.layers.1.mlp.up_proj.weight"]
    with pytest.raises(CheckpointError, match="missing tensor 'model.layers.1.mlp.up_proj.weight'"):
        ReferenceLlama(config, missing)
    bad = dict(weights)
    bad["model.layers.0.self_attn.k_proj.weight"] = np.zeros((3, 3), np.float32)
    with pytest.raises(CheckpointError, match=r"'model.layers.0.self_attn.k_proj.weight' has shape \(3, 3\)"):
        ReferenceLlama(config, bad)
    extra = dict(weights, **{"model.layers.7.mlp.up_proj.weight": np.zeros(1)})
    with pytest.raises(CheckpointError, match="unexpected tensor"):
        ReferenceLlama(config, extra)
    model = ReferenceLlama(config, weights)
    cache = model.new_cache(2, 8)
    with pytest.raises(ValueError, match="exceeds the cache's max_tokens 8"):
        model.forward(np.zeros((2, 9), np.int64), cache)
    with pytest.raises(ValueError, match=r"must lie in \[0, 32\)"):
        model.forward(np.full((2, 1), 40), cache)
    with pytest.raises(ValueError, match="shape"):
        model.forward(np.zeros((3, 1), np.int64), cache)
    with pytest.raises(ValueError, match="exceeds the model's context"):
        model.new_cache(1, 10_000)
    assert issubclass(CheckpointError, RefcompError)


def test_streaming_cache_extended_from_the_full_one_and_shrunk(rng):
    """extend_from: a streaming cache given the full cache's entries attends as the full model does
    over sinks + window; keep_sequences keeps the chosen rows; both refuse bad arguments."""
    model = tiny_model(seed=int(rng.integers(1 << 30)))
    tokens = rng.integers(0, 32, size=(3, 30))
    full = model.new_cache(3, 40)
    model.forward(tokens, full)
    wide = model.new_cache(3, 40, streaming=StreamingBudget(sinks=2, window=40, slack=2))
    wide.extend_from(full, full.lengths())
    nxt = rng.integers(0, 32, size=(3, 1))
    np.testing.assert_array_equal(model.forward(nxt, wide), model.forward(nxt, full))   # window past the context
    narrow = model.new_cache(3, 40, streaming=StreamingBudget(sinks=2, window=5, slack=2))
    narrow.extend_from(full, np.array([20, 25, 31]))
    assert narrow.lengths().tolist() == [20, 25, 31]
    kept = narrow.positions[narrow.positions >= 0]
    assert sorted(narrow.positions[2][narrow.positions[2] >= 0].tolist()) == [0, 1, 24, 25, 26, 27, 28, 29, 30]
    assert kept.size == 3 * 9
    narrow.keep_sequences(np.array([0, 2]))
    assert narrow.batch == 2 and narrow.lengths().tolist() == [20, 31]
    with pytest.raises(RefcompError, match="increasing indices"):
        narrow.keep_sequences(np.array([1, 1]))
    with pytest.raises(RefcompError, match="source must be a full ReferenceCache"):
        full.extend_from(narrow, np.array([31, 31, 31]))
    with pytest.raises(RefcompError, match="cannot extend lengths"):
        wide.extend_from(full, np.array([32, 31, 31]))


def test_draft_view_attends_as_the_extended_streaming_cache(rng):
    """draft_view: the full cache read as a streaming one gives the logits of a streaming cache
    given the full cache's entries, appends to the full cache, and refuses what it cannot be."""
    model = tiny_model(seed=int(rng.integers(1 << 30)))
    tokens = rng.integers(0, 32, size=(3, 26))
    budget = StreamingBudget(sinks=2, window=5, slack=6)
    full = model.new_cache(3, 40)
    model.forward(tokens[:, :20], full)
    copied = model.new_cache(3, 40, streaming=budget)
    copied.extend_from(full, full.lengths())
    view = full.draft_view(budget)
    for t in range(20, 26):
        np.testing.assert_allclose(model.forward(tokens[:, t:t + 1], view),
                                   model.forward(tokens[:, t:t + 1], copied), rtol=1e-12, atol=1e-12)
    assert full.lengths().tolist() == [26, 26, 26] and isinstance(view, KVCache)
    view.rollback(np.array([20, 21, 22]))
    assert full.lengths().tolist() == [20, 21, 22]
    with pytest.raises(RefcompError, match="the target must be a full ReferenceCache"):
        copied.draft_view(budget)
    with pytest.raises(RefcompError, match="holds exactly its target's entries"):
        view.extend_from(model.new_cache(3, 40), np.array([0, 0, 0]))
