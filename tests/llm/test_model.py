"""CompiledLlama against transformers' LlamaForCausalLM and a numpy reference: prefill, decode, ragged
lengths after rollback, streaming caches, bad input."""
import numpy as np
import pytest

from refcomp.errors import ArgumentError
from refcomp.llm.model import CompiledLlama, load_llama
from refcomp.llm.protocol import CausalLM, StreamingBudget

from hf_llama_helpers import hf_logits, random_llama
import numpy_llama

TOL = dict(rtol=1e-4, atol=1e-4)
PAGE = 8  # short pages: the test sequences cross several


@pytest.fixture(scope="module", params=["untied", "tied"])
def pair(request, tmp_path_factory):
    model, path = random_llama(tmp_path_factory.mktemp("llama"), tied=request.param == "tied",
                               seed=3 if request.param == "tied" else 0)
    # float32 pages: the logits agree with transformers to float32 rounding
    return model, load_llama(path, page_size=PAGE, kv_dtype="float32")


def test_is_a_causal_lm(pair):
    _, lm = pair
    assert isinstance(lm, CausalLM)
    assert lm.new_cache(2, 16).nbytes_per_token() == 2 * 2 * 2 * 16 * 4


@pytest.mark.parametrize("tied", [False, True])
def test_float16_cache_matches_transformers_to_half_precision(tmp_path, rng, tied):
    """The default cache at head_dim 16 (no AMX products) stores float16: half the bytes per token,
    logits within float16 rounding."""
    model, path = random_llama(tmp_path, tied=tied, seed=5)
    lm = load_llama(path, page_size=PAGE)
    cache = lm.new_cache(2, 64)
    assert cache.k_pool.dtype == np.float16 and cache.nbytes_per_token() == 2 * 2 * 2 * 16 * 2
    tokens = rng.integers(0, 300, (2, 13))
    expected, past = hf_logits(model, tokens)
    np.testing.assert_allclose(lm.forward(tokens, cache), expected, rtol=2e-2, atol=2e-2)
    for _ in range(3):
        step = rng.integers(0, 300, (2, 1))
        expected, past = hf_logits(model, step, past)
        np.testing.assert_allclose(lm.forward(step, cache), expected, rtol=2e-2, atol=2e-2)
    with pytest.raises(ArgumentError, match="kv_dtype must be one of"):
        load_llama(path, kv_dtype="int8")


@pytest.mark.parametrize("tied", [False, True])
def test_bfloat16_cache_matches_transformers_to_bfloat16_precision(tmp_path, rng, tied):
    """bfloat16 pages: half the bytes per token, keys in pairs along D, logits within bfloat16
    rounding of the keys, values and scaled queries (the scores' inputs on either arithmetic): 8 bits
    of mantissa against float16's 11, so 8 times the float16 test's tolerance."""
    model, path = random_llama(tmp_path, tied=tied, seed=7)
    lm = load_llama(path, page_size=PAGE, kv_dtype="bfloat16")
    cache = lm.new_cache(2, 64)
    assert cache.k_pool.dtype == np.uint16 and cache.k_pool.shape[2:] == (2, 8, PAGE, 2)
    assert cache.nbytes_per_token() == 2 * 2 * 2 * 16 * 2
    tokens = rng.integers(0, 300, (2, 13))
    expected, past = hf_logits(model, tokens)
    np.testing.assert_allclose(lm.forward(tokens, cache), expected, rtol=0.16, atol=0.16)
    for _ in range(3):
        step = rng.integers(0, 300, (2, 1))
        expected, past = hf_logits(model, step, past)
        np.testing.assert_allclose(lm.forward(step, cache), expected, rtol=0.16, atol=0.16)


def test_prefill_and_decode_match_transformers(pair, rng):
    model, lm = pair
    tokens = rng.integers(0, 300, (2, 11))
    cache = lm.new_cache(2, 64)
    expected, past = hf_logits(model, tokens)
    np.testing.assert_allclose(lm.forward(tokens, cache), expected, **TOL)
    for _ in range(5):
        step = rng.integers(0, 300, (2, 1))
        expected, past = hf_logits(model, step, past)
        got = lm.forward(step, cache)
        assert got.shape == (2, 1, 300) and got.dtype == np.float32
        np.testing.assert_allclose(got, expected, **TOL)
    np.testing.assert_array_equal(cache.lengths(), [16, 16])


def test_ragged_lengths_after_rollback(pair, rng):
    model, lm = pair
    prompt = rng.integers(0, 300, (3, 12))
    cache = lm.new_cache(3, 40)
    lm.forward(prompt, cache)
    keep = np.array([12, 7, 3])
    cache.rollback(keep)
    chunks = [rng.integers(0, 300, (3, 4)), rng.integers(0, 300, (3, 1)), rng.integers(0, 300, (3, 1))]
    got = np.concatenate([lm.forward(chunk, cache) for chunk in chunks], axis=1)
    np.testing.assert_array_equal(cache.lengths(), keep + 6)
    for b in range(3):
        sequence = np.concatenate([prompt[b, :keep[b]]] + [chunk[b] for chunk in chunks])[None]
        expected, _ = hf_logits(model, sequence)
        np.testing.assert_allclose(got[b], expected[0, -6:], **TOL)


def test_numpy_reference_agrees_with_transformers(pair, rng):
    model, lm = pair
    tokens = rng.integers(0, 300, 9)
    expected, _ = hf_logits(model, tokens[None])
    np.testing.assert_allclose(numpy_llama.logits(lm.config, _weights(lm, model), tokens), expected[0], **TOL)


def _weights(lm, model):
    return {name: tensor.numpy() for name, tensor in model.state_dict().items()}


@pytest.mark.parametrize("prompt_chunks", [(9,), (4, 5), (1,) * 3])
def test_streaming_cache_matches_numpy_reference(pair, rng, prompt_chunks):
    model, lm = pair
    budget = StreamingBudget(sinks=2, window=6, slack=3)
    steps = 10
    tokens = rng.integers(0, 300, (2, sum(prompt_chunks) + steps))
    cache = lm.new_cache(2, 64, streaming=budget)
    outputs, at = [], 0
    for size in list(prompt_chunks) + [1] * steps:
        outputs.append(lm.forward(tokens[:, at:at + size], cache))
        at += size
    got = np.concatenate(outputs, axis=1)
    weights = _weights(lm, model)
    for b in range(2):
        expected = numpy_llama.logits(lm.config, weights, tokens[b], sinks=2, window=6)
        np.testing.assert_allclose(got[b], expected, **TOL)
    assert cache.pages_in_use() == 2 * 2  # sinks + window + slack = 11 slots: two pages each


@pytest.mark.parametrize("sinks, window", [(2, 6), (0, 3), (4, 9)])
def test_draft_view_attends_as_a_streaming_cache(pair, rng, sinks, window):
    """A full cache's draft view attends as a streaming cache given the full cache's entries
    (extend_from) does: the same logits step after step; the view appends to the full cache,
    whose rollback drops what it appended."""
    _, lm = pair
    budget = StreamingBudget(sinks=sinks, window=window, slack=2)
    tokens = rng.integers(0, 300, (2, 21))
    full = lm.new_cache(2, 64)
    lm.forward(tokens[:, :15], full)
    copied = lm.new_cache(2, 64, streaming=budget)
    copied.extend_from(full, full.lengths())
    expected = np.concatenate([lm.forward(tokens[:, 15 + i:16 + i], copied) for i in range(6)], axis=1)
    view = full.draft_view(budget)
    got = np.concatenate([lm.forward(tokens[:, 15 + i:16 + i], view) for i in range(6)], axis=1)
    np.testing.assert_allclose(got, expected, **TOL)
    assert full.lengths().tolist() == [21, 21] and view.lengths().tolist() == [21, 21]
    # rolled back, the full cache forgets the view's entries: its own decode is the full model's
    reference = lm.new_cache(2, 64)
    want = lm.forward(tokens[:, :21], reference)[:, 15:]
    full.rollback(np.array([15, 15]))
    np.testing.assert_allclose(lm.forward(tokens[:, 15:21], full), want, **TOL)


def test_draft_view_refuses_what_it_cannot_be(pair):
    _, lm = pair
    with pytest.raises(ArgumentError, match="the target must be a full PagedKVCache"):
        lm.new_cache(1, 16, streaming=StreamingBudget(1, 4, 1)).draft_view(StreamingBudget(1, 4, 0))
    with pytest.raises(ArgumentError, match="window >= 1"):
        lm.new_cache(1, 16).draft_view(StreamingBudget(1, 0, 0))
    full = lm.new_cache(1, 16)
    view = full.draft_view(StreamingBudget(1, 4, 0))
    view.extend_from(full, full.lengths())   # nothing to take: it holds its target's entries
    with pytest.raises(ArgumentError, match="holds exactly its target's entries"):
        view.extend_from(lm.new_cache(1, 16), np.array([0]))


def test_streaming_rollback_within_slack_restores_the_state(pair, rng):
    _, lm = pair
    budget = StreamingBudget(sinks=1, window=5, slack=4)
    tokens = rng.integers(0, 300, (2, 30))
    cache = lm.new_cache(2, 64, streaming=budget)
    lm.forward(tokens[:, :20], cache)
    first = [lm.forward(tokens[:, 20 + i:21 + i], cache) for i in range(4)]
    lm.forward(rng.integers(0, 300, (2, 1)), cache)  # a rejected draft token
    cache.rollback(np.array([21, 20]))
    again = lm.forward(tokens[:, 21:24], cache)
    np.testing.assert_allclose(again[0], np.concatenate(first[1:4], axis=1)[0], **TOL)
    # sequence 1 went back to 20 tokens and continued differently: as if it never left
    fresh = lm.new_cache(1, 64, streaming=budget)
    lm.forward(tokens[1:, :20], fresh)
    expected = np.concatenate([lm.forward(tokens[1:, 21 + i:22 + i], fresh) for i in range(3)], axis=1)
    np.testing.assert_allclose(again[1], expected[0], **TOL)
    with pytest.raises(ArgumentError, match="already overwritten in the streaming ring"):
        cache.rollback(np.array([10, 10]))


def test_bad_input_is_named(pair):
    _, lm = pair
    cache = lm.new_cache(2, 8)
    with pytest.raises(ArgumentError, match="no tokens to append"):
        lm.forward(np.zeros((2, 0), np.int64), cache)
    with pytest.raises(ArgumentError, match="would hold 9 tokens, more than the cache's max_tokens 8"):
        lm.forward(np.zeros((2, 9), np.int64), cache)
    assert cache.lengths().tolist() == [0, 0] and cache.pages_in_use() == 0
    with pytest.raises(ArgumentError, match=r"token 300 at \(1, 2\) is outside the vocabulary"):
        lm.forward(np.array([[1, 2, 3], [4, 5, 300]]), cache)
    with pytest.raises(ArgumentError, match="3 sequences of tokens for a cache of batch 2"):
        lm.forward(np.zeros((3, 1), np.int64), cache)
    with pytest.raises(ArgumentError, match=r"tokens must be integers of shape \(batch, T\)"):
        lm.forward(np.zeros((2, 1), np.float32), cache)
    with pytest.raises(ArgumentError, match="exceeds the model's context"):
        lm.new_cache(1, 10_000)
    with pytest.raises(ArgumentError, match="CompiledLlama: config must be a LlamaConfig"):
        CompiledLlama({"hidden_size": 4}, {})


@pytest.mark.parametrize("streaming", [None, StreamingBudget(sinks=2, window=5, slack=1)])
def test_long_prompts_run_in_chunks(pair, rng, monkeypatch, streaming):
    _, lm = pair
    from refcomp.llm import model as model_module

    tokens = rng.integers(0, 300, (2, 23))
    whole = lm.forward(tokens, lm.new_cache(2, 32, streaming=streaming))
    monkeypatch.setattr(model_module, "CHUNK_ROWS", 7)  # 3 tokens per chunk at batch 2
    cache = lm.new_cache(2, 32, streaming=streaming)
    np.testing.assert_allclose(lm.forward(tokens, cache), whole, **TOL)
    np.testing.assert_array_equal(cache.lengths(), [23, 23])
