"""MagicDec self-speculative decoding is lossless: greedy output equals greedy autoregressive output
token for token, and sampled output has the target's distribution (chi-square, small vocabulary)."""
from __future__ import annotations

import numpy as np
import pytest

from decoding_helpers import CostClock, chi2_statistic, chi2_threshold, tiny_model
from refcomp.errors import ArgumentError
from refcomp.llm import speculative
from refcomp.llm.generate import generate
from refcomp.llm.sampling import SamplingParams
from refcomp.llm.speculative import SpeculativeConfig, speculative_generate, verify


@pytest.mark.parametrize("seed", range(4))
def test_greedy_speculative_equals_autoregressive(seed):
    rng = np.random.default_rng(1000 + seed)
    model = tiny_model(seed=seed, vocab=32, scale=1.5)
    for batch in (1, 3, 6):
        prompts = [rng.integers(0, 32, size=int(rng.integers(1, 25))) for _ in range(batch)]
        expected = generate(model, prompts, 24).tokens
        for gamma, sinks, window in ((1, 0, 2), (3, 1, 3), (5, 2, 6), (4, 4, 64)):
            got = speculative_generate(model, prompts, 24, spec=SpeculativeConfig(gamma, sinks, window))
            assert got.tokens == expected, (batch, gamma, sinks, window)
            assert 0.0 <= got.extra["alpha"] <= 1.0


@pytest.mark.parametrize("seed", range(3))
def test_sequences_that_finish_first_leave_the_batch(seed):
    """Equal prompt lengths, different acceptance, decoding to the context's last position: finished
    sequences leave the caches (the batch shrinks) while the others go on, and the tokens are the
    target's."""
    rng = np.random.default_rng(77 + seed)
    model = tiny_model(seed=5 + seed, vocab=32, scale=1.5, max_pos=64)
    prompts = [rng.integers(0, 32, size=20) for _ in range(8)]
    spec = SpeculativeConfig(gamma=4, sinks=1, window=3)
    got = speculative_generate(model, prompts, 64 - 20 - 4, spec=spec)
    assert got.tokens == generate(model, prompts, 64 - 20 - 4).tokens
    # every sequence takes part in a round until it has its tokens: fewer sequence-rounds than rounds x batch
    assert got.extra["rounds"] <= got.extra["row_rounds"] < 8 * got.extra["rounds"]
    with pytest.raises(ArgumentError, match="exceeds the model's context of 64"):
        speculative_generate(model, prompts, 64 - 20 - 3, spec=spec)


def test_draft_with_the_whole_context_accepts_everything(rng):
    model = tiny_model(seed=int(rng.integers(1 << 30)), vocab=32, scale=1.5)
    prompts = [rng.integers(0, 32, size=10) for _ in range(2)]
    got = speculative_generate(model, prompts, 20, spec=SpeculativeConfig(gamma=4, sinks=4, window=100))
    assert got.extra["alpha"] == 1.0 and got.extra["alpha_by_sequence"] == [1.0, 1.0]
    assert got.tokens == generate(model, prompts, 20).tokens


def exact_first_two(model, prompt: np.ndarray, params: SamplingParams) -> np.ndarray:
    """P(t1, t2 | prompt) under the target's sampling distribution, (V, V)."""
    v = model.config.vocab_size
    cache = model.new_cache(1, len(prompt) + 2)
    p1 = params.distribution(model.forward(prompt[None], cache)[0, -1])
    joint = np.zeros((v, v))
    for t1 in range(v):
        if p1[t1] > 0:
            c = model.new_cache(1, len(prompt) + 2)
            logits = model.forward(np.concatenate([prompt, [t1]])[None], c)[0, -1]
            joint[t1] = p1[t1] * params.distribution(logits)
    return joint


@pytest.mark.parametrize("params", [SamplingParams(temperature=1.0), SamplingParams(0.7, top_k=6, top_p=0.9)])
def test_sampled_output_has_the_target_distribution(params):
    model = tiny_model(seed=3, vocab=8, scale=0.6, layers=1)
    prompt = np.random.default_rng(5).integers(0, 8, size=12)
    n = 6000
    result = speculative_generate(model, [prompt] * n, 2, params=params, seed=11,
                                  spec=SpeculativeConfig(gamma=3, sinks=1, window=2))
    assert 0.05 < result.extra["alpha"] < 0.98          # the draft differs from the target
    pairs = result.as_array()
    counts = np.bincount(pairs[:, 0] * 8 + pairs[:, 1], minlength=64)
    stat, df = chi2_statistic(counts, exact_first_two(model, prompt, params).reshape(-1))
    assert stat < chi2_threshold(df)


# --- the acceptance rule alone, at a sample size that sees a 1% bias -------------------------------

V, GAMMA, N = 8, 2, 400_000


def fixed_distributions():
    rng = np.random.default_rng(42)
    p = rng.dirichlet(np.ones(V), size=GAMMA + 1)
    q = rng.dirichlet(np.ones(V) * 0.5, size=GAMMA)
    return p, q


def first_token_law(p1: np.ndarray, q1: np.ndarray, accept) -> np.ndarray:
    """The exact law of the first emitted token when a draft x ~ q1 is kept with probability accept(x),
    else replaced by a draw from norm(max(0, p1 - q1))."""
    a = accept(p1, q1)
    residual = np.maximum(0.0, p1 - q1)
    residual /= residual.sum()
    return q1 * a + (1.0 - (q1 * a).sum()) * residual


def run_verify(seed: int) -> np.ndarray:
    p, q = fixed_distributions()
    rng = np.random.default_rng(seed)
    drafts = np.stack([rng.choice(V, size=N, p=q[i]) for i in range(GAMMA)], axis=1)
    n, emitted = verify(np.broadcast_to(p, (N, GAMMA + 1, V)), np.broadcast_to(q, (N, GAMMA, V)), drafts,
                        SamplingParams(temperature=1.0), rng)
    return np.where(n > 0, drafts[:, 0], emitted)


def test_rejection_sampling_law():
    p, q = fixed_distributions()
    law = first_token_law(p[0], q[0], speculative._acceptance_probability)
    np.testing.assert_allclose(law, p[0], atol=1e-12)        # the rule is exact on paper ...
    counts = np.bincount(run_verify(seed=7), minlength=V)
    stat, df = chi2_statistic(counts, p[0])                 # ... and in the sampler
    assert stat < chi2_threshold(df)


def test_a_one_percent_bias_is_detected(monkeypatch):
    """A rule that also keeps a fraction eps of rejected drafts, eps set so that the output law is
    1% (total variation) away from the target: the same test must fail it."""
    p, q = fixed_distributions()
    exact = speculative._acceptance_probability

    def biased_by(eps):
        return lambda pt, qt: exact(pt, qt) + eps * (1.0 - exact(pt, qt))

    def tv(eps):
        return 0.5 * np.abs(first_token_law(p[0], q[0], biased_by(eps)) - p[0]).sum()

    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tv(mid) < 0.01 else (lo, mid)
    eps = hi
    assert abs(tv(eps) - 0.01) < 1e-9
    monkeypatch.setattr(speculative, "_acceptance_probability", biased_by(eps))
    counts = np.bincount(run_verify(seed=7), minlength=V)
    stat, df = chi2_statistic(counts, p[0])
    assert stat > chi2_threshold(df)


def test_same_seed_same_tokens():
    model = tiny_model(seed=2, vocab=16, scale=1.5)
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8]]
    params = SamplingParams(temperature=0.9, top_p=0.95)
    runs = [speculative_generate(model, prompts, 15, params=params, seed=3,
                                 spec=SpeculativeConfig(2, 1, 3)).tokens for _ in range(2)]
    assert runs[0] == runs[1]


def test_streaming_callback_and_errors():
    model = tiny_model(seed=4, vocab=16, max_pos=64)
    seen: list[list[int]] = [[], []]

    def on_tokens(new):
        for b, toks in enumerate(new):
            seen[b].extend(toks)

    result = speculative_generate(model, [[1, 2], [3]], 9, spec=SpeculativeConfig(3, 1, 2), on_tokens=on_tokens)
    assert seen == result.tokens and all(len(t) == 9 for t in seen)
    with pytest.raises(ArgumentError, match="prompt 1 is empty"):
        speculative_generate(model, [[1], []], 4)
    with pytest.raises(ArgumentError, match="exceeds the model's context of 64"):
        speculative_generate(model, [list(range(16)) * 3], 13, spec=SpeculativeConfig(gamma=4))
    with pytest.raises(ArgumentError, match="gamma"):
        SpeculativeConfig(gamma=0)


@pytest.mark.slow  # the first compiled model of a process builds its dense functions: about 45 s
@pytest.mark.parametrize("kv_dtype", ["float16", "bfloat16"])
def test_compiled_greedy_speculative_equals_autoregressive(kv_dtype):
    """The compiled shipped model, both decodings with the same 16-bit pages (bfloat16: scores on
    the AVX512_BF16 tile where the CPU has it): a verify pass sees the numbers the decode steps see."""
    import inspect
    import json

    from refcomp.llm import tokenizer
    from refcomp.llm.loading import DEFAULT_MODEL, load_model

    if not (DEFAULT_MODEL / "model.safetensors").is_file():
        pytest.skip("the shipped model is absent")
    model, kind = load_model(DEFAULT_MODEL, kv_dtype=kv_dtype)
    assert kind == "compiled" and model.kv_dtype == kv_dtype
    texts = [inspect.getsource(json.dumps), inspect.getsource(speculative_generate), inspect.getsource(verify)]
    prompts = [tokenizer.encode(t)[:length] for t, length in zip(texts, (90, 130, 70))]
    expected = generate(model, prompts, 40).tokens
    for gamma, sinks, window in ((2, 4, 28), (4, 2, 60)):
        got = speculative_generate(model, prompts, 40, spec=SpeculativeConfig(gamma, sinks, window))
        assert got.tokens == expected, (gamma, sinks, window)


def _pv_dot():
    """The dot with both attention products on a tile that applies here (shipped model's head_dim
    and the default pages), or None."""
    from refcomp.llm.attention import _pv_dot
    from refcomp.llm.cache import DEFAULT_PAGE_SIZE

    return _pv_dot(32, DEFAULT_PAGE_SIZE)


@pytest.mark.slow  # builds the compiled model's dense functions and its attention kernel
@pytest.mark.amx
@pytest.mark.skipif(_pv_dot() is None, reason="CPU lacks AMX-BF16 and AVX512_BF16")
def test_pv_greedy_speculative_equals_autoregressive_over_many_prompts():
    """bfloat16 pages with both attention products on a tile (AMX's or AVX512_BF16's) and bfloat16
    softmax weights (the default dot for bfloat16 pages where a tile applies; speculative_kv_dtype's
    pages with AMX): a verify pass reads every key through its pages in the chunks a decode step
    reads, so greedy speculative output is the autoregressive output token for token, over prompts
    of many lengths and sources, batch sizes 1 to 8, and drafts with short and long windows (the
    draft on the same kernel, streaming)."""
    import inspect
    import json

    from refcomp.llm import tokenizer
    from refcomp.llm.attention import default_dot
    from refcomp.llm.loading import DEFAULT_MODEL, load_model

    if not (DEFAULT_MODEL / "model.safetensors").is_file():
        pytest.skip("the shipped model is absent")
    model, _ = load_model(DEFAULT_MODEL, kv_dtype="bfloat16")
    assert default_dot("bfloat16", model.config.dim_head, model.page_size) == _pv_dot()
    sources = [json.dumps, json.loads, speculative_generate, verify, generate, inspect.getsource, np.pad,
               tokenizer.encode]
    texts = [inspect.getsource(f) for f in sources]
    rng = np.random.default_rng(7)
    for batch in (1, 3, 8):
        picks = rng.choice(len(texts), size=batch, replace=False)
        prompts = [tokenizer.encode(texts[i])[:int(rng.integers(20, 200))] for i in picks]
        expected = generate(model, prompts, 40).tokens
        for gamma, sinks, window in ((3, 4, 28), (5, 2, 100)):
            got = speculative_generate(model, prompts, 40, spec=SpeculativeConfig(gamma, sinks, window))
            assert got.tokens == expected, (batch, gamma, sinks, window)


def _recording(model, widths):
    """The model, its forward recording (streaming cache?, tokens per sequence) of every call."""
    forward = model.forward

    def recorded(tokens, cache):
        widths.append((cache.streaming is not None, np.shape(tokens)[1]))
        return forward(tokens, cache)

    model.forward = recorded
    return model


@pytest.mark.parametrize("gamma", [1, 3])
def test_every_draft_forward_carries_one_token(gamma):
    """The draft reads the target's entries (its draft view) after each verify: no two-token
    catch-up forward, whatever each sequence accepted (all, some or none), and the output is the
    target's."""
    rng = np.random.default_rng(40 + gamma)
    widths: list[tuple[bool, int]] = []
    model = _recording(tiny_model(seed=8, vocab=32, scale=1.5), widths)
    prompts = [rng.integers(0, 32, size=int(rng.integers(5, 15))) for _ in range(5)]
    got = speculative_generate(model, prompts, 30, spec=SpeculativeConfig(gamma, 1, 4))
    assert 0.0 < got.extra["alpha"] < 1.0
    drafted = [width for streaming, width in widths if streaming]
    assert drafted == [1] * (gamma * got.extra["rounds"])
    assert widths.count((False, gamma + 1)) == got.extra["rounds"]     # the prefill's widths are 1 and >= 5
    widths.clear()
    assert got.tokens == generate(model, prompts, 30).tokens


@pytest.mark.parametrize("seed", range(3))
def test_the_pilot_measures_each_budget_and_magicdec_generate_is_lossless(seed):
    """magicdec_generate's pilot (its one planner) measures each sequence's acceptance per K on the
    decode's first tokens: in [0, 1], and 1 for a budget past the context (the draft is the target)."""
    rng = np.random.default_rng(300 + seed)
    model = tiny_model(seed=seed, vocab=32, scale=1.5)
    batch = int(rng.integers(1, 6))
    prompts = [rng.integers(0, 32, size=int(rng.integers(8, 40))) for _ in range(batch)]
    expected = generate(model, prompts, 20).tokens
    got = speculative.magicdec_generate(model, prompts, 20, budgets=(4, 400), gammas=(1, 2), clock=CostClock(model))
    alphas = got.extra["alpha_pilot_by_K"]
    assert set(alphas) == {4, 400} and all(len(a) == batch for a in alphas.values())
    assert all(0 <= a <= 1 for a in alphas[4])
    np.testing.assert_array_equal(alphas[400], 1.0)
    assert got.extra["gamma"] in (1, 2) and got.extra["K"] in (4, 400) and isinstance(got.extra["declined"], bool)
    assert got.extra["plan_schedule"][:4] == [("pilot", 1), (2, 1), ("pilot", 2), (2, 1)]
    assert got.tokens == expected


def test_the_pilot_with_sampling_measures_acceptance_and_runs_reproducibly():
    model = tiny_model(seed=6, vocab=16, scale=1.0)
    prompts = [[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12]]
    params = SamplingParams(temperature=0.8, top_k=8)
    # the choices rest on the clock: a clock that repeats itself gives the same tokens for a seed
    runs = [speculative.magicdec_generate(model, prompts, 10, budgets=(3, 100), gammas=(1, 3), params=params, seed=9,
                                          clock=CostClock(model)) for _ in range(2)]
    alphas = runs[0].extra["alpha_pilot_by_K"]
    assert set(alphas) == {3, 100} and all(0 <= a <= 1 for a in alphas[3])
    np.testing.assert_allclose(alphas[100], 1.0)       # the whole context: p == q, every draft kept
    assert runs[0].tokens == runs[1].tokens and all(len(t) == 10 for t in runs[0].tokens)
