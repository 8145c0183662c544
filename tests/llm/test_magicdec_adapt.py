"""magicdec_generate adapts while it decodes: it plans on its own first tokens (the prompts fed
once), switches gamma and plain steps from running estimates, and stays lossless across switches.
The timings are those of a CostClock: the same choices on every run and machine."""
from __future__ import annotations

import numpy as np
import pytest

from decoding_helpers import CostClock, chi2_statistic, chi2_threshold, tiny_model
from refcomp.errors import ArgumentError
from refcomp.llm.generate import generate
from refcomp.llm.sampling import SamplingParams
from refcomp.llm.speculative import AR, AdaptConfig, magicdec_generate

FLIPPING = AdaptConfig(every=1, hysteresis=0.0, probe_every=2, time_weight=1.0)


def flipping_draft(period: int):
    """Draft forwards cheap (0.05 of a step) for `period` forwards, then dear (3 steps), and so on."""
    return lambda call: 0.05 if (call // period) % 2 == 0 else 3.0


def modes_after_pilot(result) -> list[int]:
    return [label for label, _ in result.extra["schedule"]]


@pytest.mark.parametrize("seed", range(4))
def test_greedy_output_is_the_targets_across_switches(seed):
    rng = np.random.default_rng(500 + seed)
    model = tiny_model(seed=seed, vocab=32, scale=1.5)
    for batch in (1, 4):
        prompts = [rng.integers(0, 32, size=int(rng.integers(3, 30))) for _ in range(batch)]
        expected = generate(model, prompts, 40).tokens
        clock = CostClock(model, draft=flipping_draft(12))
        got = magicdec_generate(model, prompts, 40, budgets=(3, 400), gammas=(1, 2, 4), pilot_rounds=1,
                                adapt=FLIPPING, clock=clock)
        assert got.tokens == expected, (seed, batch)
        modes = modes_after_pilot(got)
        assert got.extra["switches"] >= 1 and AR in modes and any(m != AR for m in modes), got.extra["schedule"]
        assert got.extra["K"] == 400 and set(got.extra["gammas_used"]) <= {1, 2, 4}


def test_a_useless_draft_means_plain_steps():
    """K = 2 on a random model: the draft rarely agrees, and plain steps are chosen (no probe: none
    after the pilot); the tokens are the target's."""
    rng = np.random.default_rng(3)
    model = tiny_model(seed=11, vocab=32, scale=1.5)
    prompts = [rng.integers(0, 32, size=20) for _ in range(3)]
    got = magicdec_generate(model, prompts, 30, budgets=(2,), gammas=(1, 3), pilot_rounds=2,
                            adapt=AdaptConfig(probe_every=0), clock=CostClock(model, draft=lambda call: 0.3))
    assert got.extra["declined"] and got.extra["alpha_pilot"] < 0.6
    assert modes_after_pilot(got) == [AR] and got.extra["switches"] == 0
    assert got.extra["plan_schedule"] == [("pilot", 1), (3, 2), ("pilot", 2)]          # no sweep: declined at the pilot
    assert got.tokens == generate(model, prompts, 30).tokens


@pytest.mark.parametrize("seed", range(3))
def test_a_dear_draft_declines_after_one_pilot_round_and_is_not_probed(seed):
    """A draft forward dearer than a plain step: (gamma + 1) T_T / (gamma T_D + T_V) < 1 for every
    gamma, so no acceptance could pay; the pilot stops after the smallest budget's round and its
    plain steps (no other budget, no sweep), and no probe round follows however long the decode."""
    rng = np.random.default_rng(70 + seed)
    model = tiny_model(seed=seed, vocab=32, scale=1.5)
    prompts = [rng.integers(0, 32, size=int(rng.integers(5, 25))) for _ in range(int(rng.integers(1, 5)))]
    got = magicdec_generate(model, prompts, 40, budgets=(4, 16, 400), gammas=(1, 2, 3, 4), adapt=AdaptConfig(probe_every=2),
                            clock=CostClock(model, draft=lambda call: 1.1))
    assert got.extra["declined"] and "at most" in got.extra["reason"] and got.extra["predicted"] < 1.0
    assert got.extra["plan_schedule"] == [("pilot", 1), (3, 1), ("pilot", 2)] and got.extra["K"] == 4
    assert list(got.extra["alpha_pilot_by_K"]) == [4]
    assert modes_after_pilot(got) == [AR] and got.extra["switches"] == 0
    assert got.tokens == generate(model, prompts, 40).tokens


def test_probing_resumes_when_steps_grow_dear():
    """Declined at once (the draft as dear as a step), then the target's steps grow dearer (as a
    long context's would): the bound rises above 1, a probe round runs, and the run speculates;
    the tokens stay the target's."""
    rng = np.random.default_rng(9)
    model = tiny_model(seed=5, vocab=32, scale=1.5)
    prompts = [rng.integers(0, 32, size=12) for _ in range(2)]
    full_calls = [0]

    def full(tokens: int) -> float:       # a step's cost grows fourfold after the first 20 full forwards
        full_calls[0] += 1
        return (1.0 + 0.2 * (tokens - 1)) * (1.0 if full_calls[0] <= 20 else 4.0)

    got = magicdec_generate(model, prompts, 60, budgets=(400,), gammas=(1, 3), adapt=AdaptConfig(probe_every=4),
                            clock=CostClock(model, full=full, draft=lambda call: 1.2))
    assert got.extra["declined"] and "at most" in got.extra["reason"]
    schedule = got.extra["schedule"]
    assert schedule[0][0] == AR and schedule[0][1] > 8, schedule            # the first two probes skipped
    assert any(m != AR for m, _ in schedule) and got.extra["switches"] >= 1, schedule
    assert got.tokens == generate(model, prompts, 60).tokens


class Souring:
    """The model, whose draft (streaming-cache) forwards return scrambled logits after `after`
    forwards of any kind: the draft turns useless mid-run."""

    def __init__(self, model, after: int) -> None:
        self.config, self.new_cache, self._model, self.after, self.calls = model.config, model.new_cache, model, after, 0

    def forward(self, tokens, cache):
        self.calls += 1
        logits = self._model.forward(tokens, cache)
        if cache.streaming is not None and self.calls > self.after:
            return np.roll(logits, 7, axis=-1)
        return logits


def test_replanning_leaves_speculation_when_the_draft_turns_useless():
    rng = np.random.default_rng(8)
    model = tiny_model(seed=2, vocab=32, scale=1.5)
    prompts = [rng.integers(0, 32, size=12) for _ in range(4)]
    souring = Souring(model, after=30)
    got = magicdec_generate(souring, prompts, 60, budgets=(400,), gammas=(2, 3), pilot_rounds=1,
                            adapt=AdaptConfig(every=2, probe_every=0), clock=CostClock(souring))
    schedule = got.extra["schedule"]
    assert not got.extra["declined"] and schedule[-1][0] == AR and schedule[-1][1] >= 10, schedule
    assert got.tokens == generate(model, prompts, 60).tokens


def test_the_prompts_are_fed_once():
    widths: list[tuple[bool, int]] = []
    model = tiny_model(seed=4, vocab=32, scale=1.5)
    forward = model.forward

    def recorded(tokens, cache):
        widths.append((cache.streaming is not None, np.shape(tokens)[1]))
        return forward(tokens, cache)

    model.forward = recorded
    prompts = [np.arange(17) % 32, (np.arange(17) * 5) % 32]
    got = magicdec_generate(model, prompts, 20, budgets=(4, 8), gammas=(1, 2))
    assert widths.count((False, 17)) == 1 and not any(w > 3 for s, w in widths if (s, w) != (False, 17))
    assert all(w == 1 for s, w in widths if s)                  # every draft forward: one token
    assert got.extra["plan_schedule"][:3] == [("pilot", 1), (2, 1), ("pilot", 2)] and got.extra["plan_seconds"] > 0


def exact_law(model, prompt: np.ndarray, params: SamplingParams, tokens: int) -> np.ndarray:
    """P(t_1 .. t_n | prompt) under the target's sampling distribution, shape (V,) * n: every
    continuation of n - 1 tokens in one batched forward."""
    v = model.config.vocab_size
    heads = np.stack(np.meshgrid(*[np.arange(v)] * (tokens - 1), indexing="ij"), -1).reshape(-1, tokens - 1)
    seqs = np.concatenate([np.broadcast_to(prompt, (len(heads), len(prompt))), heads], axis=1)
    cache = model.new_cache(len(seqs), seqs.shape[1])
    p = params.distribution(model.forward(seqs, cache)[:, len(prompt) - 1:])   # (V^(n-1), n, V)
    assert np.allclose(p.sum(axis=-1), 1.0)
    law = np.ones(len(heads))
    for i in range(tokens - 1):
        law = law * p[np.arange(len(heads)), i, heads[:, i]]
    return (law[:, None] * p[:, -1]).reshape((v,) * tokens)


@pytest.mark.parametrize("params", [SamplingParams(temperature=1.0), SamplingParams(0.8, top_k=3, top_p=0.95)])
def test_sampled_output_has_the_target_distribution_across_switches(params):
    """A plain pilot step, a pilot round, two plain steps, a sweep round and plain steps again (the
    draft turns dear), each sequence at its own token when the mode changes: the pairs (t2, t3) ..
    (t7, t8) follow the target's law (a vocabulary of 4: the exact law of 8 tokens)."""
    model = tiny_model(seed=3, vocab=4, scale=0.8, layers=1)
    prompt = np.random.default_rng(5).integers(0, 4, size=10)
    n, v, tokens = 6000, 4, 8
    clock = CostClock(model, draft=lambda call: 0.05 if call < 3 else 3.0)
    result = magicdec_generate(model, [prompt] * n, tokens, budgets=(3,), gammas=(1, 2), params=params, seed=21,
                               adapt=AdaptConfig(every=1, probe_every=0, time_weight=1.0), clock=clock)
    modes = [label for label, _ in result.extra["plan_schedule"] + result.extra["schedule"]]
    assert modes == ["pilot", 2, "pilot", 1, AR], modes
    assert 0.05 < result.extra["alpha"] < 0.98
    law = exact_law(model, prompt, params, tokens)
    out = result.as_array()
    for i in range(1, tokens - 1):
        pair = law.sum(axis=tuple(a for a in range(tokens) if a not in (i, i + 1))).reshape(-1)
        counts = np.bincount(out[:, i] * v + out[:, i + 1], minlength=v * v)
        stat, df = chi2_statistic(counts, pair)
        assert stat < chi2_threshold(df), i


def test_bad_arguments_are_named():
    model = tiny_model(seed=1, vocab=16)
    for kwargs, message in [({"every": 0}, "every must be a positive integer"),
                            ({"every": 2.5}, "every must be a positive integer"),
                            ({"probe_every": -1}, "probe_every must be a non-negative integer"),
                            ({"step_every": 1.0}, "step_every must be a non-negative integer"),
                            ({"hysteresis": 1.0}, r"hysteresis must be a number in \[0.0, 1.0\)"),
                            ({"hysteresis": -0.1}, "hysteresis must be"),
                            ({"decay": 0.0}, r"decay must be a number in \(0.0, 1.0\]"),
                            ({"decay": float("nan")}, "decay must be"),
                            ({"time_weight": 1.5}, "time_weight must be"),
                            ({"prior_weight": -1.0}, "prior_weight must be a finite number >= 0"),
                            ({"prior_weight": "8"}, "prior_weight must be")]:
        with pytest.raises(ArgumentError, match="magicdec adapt: " + message):
            AdaptConfig(**kwargs)
    with pytest.raises(ArgumentError, match="pilot_rounds must be a positive integer, got 0"):
        magicdec_generate(model, [[1, 2]], 4, pilot_rounds=0)
    with pytest.raises(ArgumentError, match="adapt must be an AdaptConfig or None, got dict"):
        magicdec_generate(model, [[1, 2]], 4, adapt={"every": 2})
    with pytest.raises(ArgumentError, match="need gammas >= 1 and budgets >= 2"):
        magicdec_generate(model, [[1, 2]], 4, gammas=(0, 2))
    with pytest.raises(ArgumentError, match="need gammas >= 1 and budgets >= 2"):
        magicdec_generate(model, [[1, 2]], 4, budgets=(1.5,))
    with pytest.raises(ArgumentError, match="prompt 0 is empty"):
        magicdec_generate(model, [[]], 4)


def test_without_adapt_the_first_choice_stays():
    rng = np.random.default_rng(12)
    model = tiny_model(seed=6, vocab=32, scale=1.5)
    prompts = [rng.integers(0, 32, size=15) for _ in range(3)]
    got = magicdec_generate(model, prompts, 40, budgets=(400,), gammas=(1, 3), adapt=None,
                            clock=CostClock(model, draft=flipping_draft(6)))
    assert [label for label, _ in got.extra["schedule"]] == [got.extra["gamma"]] and got.extra["switches"] == 0
    assert got.tokens == generate(model, prompts, 40).tokens


def test_the_controller_ranks_with_the_analytic_choice():
    """The decoder's re-planning ranks gammas with `analytic.choose` (one formula): its running
    acceptance by position and times (a verify not timed: scaled from the nearest), the tokens the
    live sequences still need; its ceiling is the choice at alpha = 1."""
    from refcomp.llm import analytic
    from refcomp.llm.speculative import _Controller

    rng = np.random.default_rng(9)
    control = _Controller(4, [1, 2, 3, 5], 128, rng.uniform(0.5, 0.95, 4), AdaptConfig(), 1.0,
                          {1: 0.3, 3: 0.2}, {1: 1.1, 3: 1.4})
    for _ in range(6):
        control.observe(np.arange(4), 3, rng.integers(0, 4, size=4))
    rows, remaining = np.array([0, 2, 3]), np.array([7, 40, 1])
    times = analytic.StepTimes(1.0, {1: 1.1, 3: 1.4}, {128: 0.2}, {(1, 128): 0.3, (3, 128): 0.2})
    ranked = [(analytic.predicted_remaining_speedup(control.alphas(rows, g), remaining, 1.0, times.draft_at(g, 128),
                                                    times.verify_at(g)), g) for g in (1, 2, 3, 5)]
    best = next((g, s) for s, g in ranked if s == max(s for s, _ in ranked))
    assert control.best(rows, remaining) == best
    assert control.predict(rows, remaining, 5) == ranked[-1][0]
    bound = max(((g + 1) / analytic.round_cost(g, 1.0, times.draft_at(g, 128), times.verify_at(g)), g)
                for g in (1, 2, 3, 5))
    assert control.ceiling()[1] == pytest.approx(bound[0]) and control.ceiling()[0] == bound[1]
    assert control.predict(rows, np.zeros(3, np.int64), 3) == 1.0     # nothing left to gain
