"""Autoregressive generation: batched and ragged equals one sequence at a time equals recomputing
from scratch; streaming callback; errors; the byte tokenizer."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from decoding_helpers import tiny_model
from refcomp.errors import ArgumentError
from refcomp.llm import tokenizer
from refcomp.llm.generate import generate
from refcomp.llm.sampling import SamplingParams


def greedy_from_scratch(model, prompt, n):
    """Greedy decoding without reusing a cache: the whole sequence is run again for each token."""
    seq = list(map(int, prompt))
    for _ in range(n):
        logits = model.forward(np.array([seq]), model.new_cache(1, len(seq)))
        seq.append(int(np.argmax(logits[0, -1])))
    return seq[len(prompt):]


def test_batched_ragged_greedy_equals_single_and_from_scratch(rng):
    model = tiny_model(seed=int(rng.integers(1 << 30)), vocab=32, scale=1.5)
    prompts = [rng.integers(0, 32, size=n) for n in (7, 1, 15)]
    batched = generate(model, prompts, 12)
    assert batched.as_array().shape == (3, 12)
    for b, prompt in enumerate(prompts):
        assert generate(model, [prompt], 12).tokens[0] == batched.tokens[b]
        assert greedy_from_scratch(model, prompt, 12) == batched.tokens[b]
    assert batched.decoded > 0 and batched.tokens_per_second > 0


def test_sampling_is_seeded_and_callback_streams(rng):
    model = tiny_model(seed=int(rng.integers(1 << 30)), vocab=32)
    prompts = [[3, 1, 4], [1, 5, 9, 2, 6]]
    params = SamplingParams(temperature=1.0, top_k=10)
    seen: list[list[int]] = [[], []]

    def on_tokens(new):
        for b, toks in enumerate(new):
            seen[b].extend(toks)

    a = generate(model, prompts, 10, params=params, seed=5, on_tokens=on_tokens)
    b = generate(model, prompts, 10, params=params, seed=5)
    assert a.tokens == b.tokens == seen
    c = generate(model, prompts, 10, params=params, seed=6)
    assert c.tokens != a.tokens


def test_errors_name_the_problem():
    model = tiny_model(max_pos=32)
    with pytest.raises(ArgumentError, match="prompt 0 is empty"):
        generate(model, [[]], 4)
    with pytest.raises(ArgumentError, match="prompt 1 has 30 tokens; with 4 new tokens it exceeds the "
                                            "model's context of 32 tokens"):
        generate(model, [[1], [2] * 30], 4)
    with pytest.raises(ArgumentError, match="no prompts"):
        generate(model, [], 4)
    with pytest.raises(ArgumentError, match="max_new_tokens"):
        generate(model, [[1]], 0)
    with pytest.raises(ArgumentError, match=r"outside \[0, 32\)"):
        generate(model, [[1, 99]], 2)


@given(st.text(max_size=40))
def test_tokenizer_round_trip(text):
    tokens = tokenizer.encode(text)
    assert tokens.dtype == np.int64 and tokenizer.decode(tokens) == text
    decoder = tokenizer.StreamDecoder()
    assert "".join(decoder.feed([t]) for t in tokens) + decoder.flush() == text


def test_tokenizer_errors():
    with pytest.raises(ArgumentError, match="256"):
        tokenizer.decode([300])
    assert tokenizer.decode([0xff, 0x41]) == "\ufffdA"
