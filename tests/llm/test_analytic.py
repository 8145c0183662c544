"""The MagicDec speedup model: Omega against simulation, the prediction's algebra, the choice (and when it
declines)."""
from __future__ import annotations

import numpy as np
import pytest

from refcomp.errors import ArgumentError
from refcomp.llm import analytic
from refcomp.llm.sampling import SamplingParams


@pytest.mark.parametrize("gamma,alpha", [(1, 0.3), (4, 0.8), (6, 0.5), (3, 0.0)])
def test_omega_is_the_expected_tokens_per_round(gamma, alpha):
    rng = np.random.default_rng(gamma * 100 + int(alpha * 10))
    accepts = rng.random((200_000, gamma)) < alpha
    n = np.where(accepts.all(axis=1), gamma, np.argmin(accepts, axis=1))
    assert abs((n + 1).mean() - analytic.omega(gamma, alpha)) < 0.02
    assert analytic.omega(gamma, 1.0) == gamma + 1


def test_prediction_and_choice():
    # a KV-bound regime: verification costs one step, drafting a tenth of one
    assert analytic.predicted_speedup(4, 0.8, 1.0, 0.1, 1.0) == pytest.approx(analytic.omega(4, 0.8) / 1.4)
    times = analytic.StepTimes(target=1.0, verify={1: 1.0, 3: 1.1, 6: 1.5}, draft={64: 0.05, 256: 0.2})
    choice = analytic.choose(times, {64: 0.5, 256: 0.9})
    best = max((analytic.predicted_speedup(g, a, 1.0, times.draft[k], times.verify[g]), g, k)
               for g in (1, 3, 6) for k, a in ((64, 0.5), (256, 0.9)))
    assert (choice.predicted, choice.gamma, choice.budget) == best
    with pytest.raises(ArgumentError):
        analytic.omega(2, 1.5)
    with pytest.raises(ArgumentError):
        analytic.choose(times, {})


def test_acceptance_rate(rng):
    logits = rng.standard_normal((5, 16))
    other = logits.copy()
    other[:2] = rng.standard_normal((2, 16))
    greedy = analytic.acceptance_rate(logits, other, SamplingParams())
    assert greedy == np.mean(np.argmax(logits, -1) == np.argmax(other, -1))
    assert analytic.acceptance_rate(logits, logits, SamplingParams(temperature=1.0)) == pytest.approx(1.0)


def test_choice_takes_per_sequence_alphas_round_draft_times_and_declines():
    times = analytic.StepTimes(target=1.0, verify={1: 1.3, 2: 1.6}, draft={64: 0.2},
                               draft_by_round={(1, 64): 0.4, (2, 64): 0.3})
    alphas = [0.9, 0.5, 0.7]
    choice = analytic.choose(times, {64: alphas}, batch=3, tokens=20)
    expected = max((analytic.predicted_batch_speedup(g, alphas, 20, 1.0, times.draft_at(g, 64), times.verify[g]), g)
                   for g in (1, 2))
    assert (choice.predicted, choice.gamma) == expected and choice.alpha == pytest.approx(0.7)
    assert times.draft_at(1, 64) == 0.4 and times.draft_at(3, 64) == 0.2
    assert choice.declined and "declined" in choice.reason() and f"{choice.predicted:.2f}" in choice.reason()
    cheap = analytic.StepTimes(target=1.0, verify={3: 1.1}, draft={64: 0.05})
    kept = analytic.choose(cheap, {64: 0.9})
    assert not kept.declined and kept.reason().startswith("speculating")


def _simulated_rounds(rng, gamma, alphas, tokens, batches):
    """Monte-Carlo lockstep batches: rounds until every sequence has `tokens` tokens."""
    alphas = np.asarray(alphas)
    have = np.zeros((batches, len(alphas)), np.int64)
    rounds = np.zeros(batches, np.int64)
    while (have < tokens).any():
        running = (have < tokens).any(axis=1)
        accepts = rng.random((batches, len(alphas), gamma)) < alphas[None, :, None]
        n = np.where(accepts.all(axis=2), gamma, np.argmin(accepts, axis=2))
        have = np.where(running[:, None], have + n + 1, have)
        rounds += running
    return rounds.mean()


@pytest.mark.parametrize("gamma,alphas,tokens", [
    (3, [0.9], 63), (2, [0.7] * 8, 40), (4, [0.95, 0.6, 0.8, 0.9, 0.85], 30), (1, [0.5] * 3, 7)])
def test_expected_rounds_of_a_lockstep_batch_match_simulation(gamma, alphas, tokens):
    rng = np.random.default_rng(len(alphas) * 1000 + tokens)
    simulated = _simulated_rounds(rng, gamma, alphas, tokens, 20_000)
    assert analytic.expected_rounds(gamma, alphas, tokens) == pytest.approx(simulated, rel=0.01)


def _simulated_sequence_rounds(rng, gamma, alphas, tokens, batches):
    """Monte-Carlo: the rounds each sequence takes part in until it has `tokens` tokens, averaged."""
    alphas = np.asarray(alphas)
    have = np.zeros((batches, len(alphas)), np.int64)
    taken = np.zeros((batches, len(alphas)), np.int64)
    while (have < tokens).any():
        going = have < tokens
        accepts = rng.random((batches, len(alphas), gamma)) < alphas[None, :, None]
        n = np.where(accepts.all(axis=2), gamma, np.argmin(accepts, axis=2))
        have = np.where(going, have + n + 1, have)
        taken += going
    return taken.mean()


@pytest.mark.parametrize("gamma,alphas,tokens", [(2, [0.7] * 8, 40), (4, [0.95, 0.6, 0.8, 0.9, 0.85], 30)])
def test_sequence_rounds_of_a_shrinking_batch_match_simulation(gamma, alphas, tokens):
    rng = np.random.default_rng(len(alphas) * 77 + tokens)
    simulated = _simulated_sequence_rounds(rng, gamma, alphas, tokens, 20_000)
    assert analytic.expected_sequence_rounds(gamma, alphas, tokens) == pytest.approx(simulated, rel=0.01)
    assert analytic.expected_sequence_rounds(gamma, alphas, tokens) < analytic.expected_rounds(gamma, alphas, tokens)
    with pytest.raises(ArgumentError, match="at least one sequence"):
        analytic.expected_sequence_rounds(gamma, [], tokens)
    with pytest.raises(ArgumentError, match="tokens must be a positive integer"):
        analytic.predicted_batch_speedup(gamma, alphas, 0, 1.0, 0.1, 1.0)


def test_lockstep_rounds_grow_with_the_batch():
    one = analytic.expected_rounds(3, 0.9, 63)
    # a batch of one: N / Omega but for the last round's overshoot
    assert 63 / analytic.omega(3, 0.9) <= one < 63 / analytic.omega(3, 0.9) + 1
    rounds = [analytic.expected_rounds(3, [0.9] * b, 63) for b in (1, 8, 32, 64)]
    assert rounds == sorted(rounds) and rounds[-1] > 1.15 * one
    assert analytic.expected_rounds(3, 1.0, 64) == 16.0 and analytic.expected_rounds(3, 0.0, 10) == 10.0
    lockstep = analytic.predicted_lockstep_speedup(3, [0.9] * 32, 63, 1.0, 0.1, 1.3)
    assert lockstep == pytest.approx(63 / rounds[2] / 1.6)
    assert lockstep < analytic.predicted_speedup(3, 0.9, 1.0, 0.1, 1.3)
    times = analytic.StepTimes(target=1.0, verify={1: 1.0, 3: 1.3}, draft={64: 0.1})
    choice = analytic.choose(times, {64: 0.9}, batch=32, tokens=63)
    assert choice.predicted == pytest.approx(max(
        analytic.predicted_batch_speedup(g, [0.9] * 32, 63, 1.0, 0.1, times.verify[g]) for g in (1, 3)))
    # sequences that leave when done: each takes its own rounds, between N / Omega and the lockstep
    each = analytic.expected_sequence_rounds(3, [0.9] * 32, 63)
    assert each == pytest.approx(one) and analytic.predicted_batch_speedup(3, [0.9] * 32, 63, 1.0, 0.1, 1.3) \
        == pytest.approx(63 / one / 1.6)
    with pytest.raises(ArgumentError, match="alpha in"):
        analytic.expected_rounds(3, [0.5, 1.5], 10)
    with pytest.raises(ArgumentError, match="at least one sequence"):
        analytic.expected_rounds(3, [], 10)


def test_omega_by_position_and_the_remaining_speedup(rng):
    a = rng.uniform(0, 1, size=(5, 4))
    # against the definition: expected tokens = sum_k k P(k), P from the per-position acceptance
    for row in a:
        p = [np.prod(row[:k - 1]) * (1 - row[k - 1]) for k in range(1, 5)] + [np.prod(row)]
        assert np.isclose(analytic.omega_by_position(row), sum(k * pk for k, pk in zip(range(1, 6), p)))
    assert np.isclose(analytic.omega_by_position(np.full(3, 0.7)), analytic.omega(3, 0.7))
    remaining = rng.integers(1, 50, size=5)
    got = analytic.predicted_remaining_speedup(a, remaining, 1.0, 0.2, 1.5)
    rounds = np.maximum(1, remaining / analytic.omega_by_position(a))
    assert np.isclose(got, remaining.sum() / (rounds.sum() * (4 * 0.2 + 1.5)))
    with pytest.raises(ArgumentError, match="alphas by position must be in"):
        analytic.omega_by_position(np.array([0.5, 1.5]))
    with pytest.raises(ArgumentError, match="positive remaining tokens"):
        analytic.predicted_remaining_speedup(a, np.zeros(5), 1.0, 0.2, 1.5)
    with pytest.raises(ArgumentError, match="step times must be positive"):
        analytic.predicted_remaining_speedup(a, remaining, 1.0, 0.0, 1.5)


def test_every_speedup_is_tokens_per_round_over_the_round_cost():
    """One denominator: gamma T_D / T_T + T_V / T_T (`round_cost`) in each prediction."""
    cost = analytic.round_cost(3, 2.0, 0.25, 2.6)
    assert cost == pytest.approx(3 * 0.125 + 1.3)
    assert analytic.predicted_speedup(3, 0.8, 2.0, 0.25, 2.6) == pytest.approx(analytic.omega(3, 0.8) / cost)
    assert analytic.predicted_batch_speedup(3, [0.8, 0.6], 20, 2.0, 0.25, 2.6) == pytest.approx(
        20 / analytic.expected_sequence_rounds(3, [0.8, 0.6], 20) / cost)
    # many tokens still needed and one alpha per sequence: the Omega formula
    many = analytic.predicted_remaining_speedup(np.full((4, 3), 0.8), np.full(4, 10**9), 2.0, 0.25, 2.6)
    assert many == pytest.approx(analytic.predicted_speedup(3, 0.8, 2.0, 0.25, 2.6))
    with pytest.raises(ArgumentError, match="step times must be positive"):
        analytic.round_cost(3, 1.0, -0.1, 1.0)


def test_verify_of_an_unmeasured_gamma_scales_from_the_nearest_measured():
    times = analytic.StepTimes(target=1.0, verify={2: 1.4, 6: 2.2}, draft={64: 0.1})
    assert times.verify_at(2) == 1.4 and times.verify_at(6) == 2.2
    assert times.verify_at(3) == pytest.approx(1.0 + 0.4 * 3 / 2)    # nearest measured: 2
    assert times.verify_at(5) == pytest.approx(1.0 + 1.2 * 5 / 6)    # nearest measured: 6
    assert analytic.StepTimes(target=1.0, verify={}, draft={64: 0.1}).verify_at(4) == 1.0
    assert analytic.StepTimes(target=1.0, verify={2: 0.9}, draft={64: 0.1}).verify_at(4) == 1.0  # never below a step


def test_choice_over_the_tokens_still_needed(rng):
    """`remaining`: each (gamma, K) by `predicted_remaining_speedup`, with alphas by position (the
    first gamma columns) or one per sequence (repeated over the positions); the gammas asked for,
    verifies not measured from `verify_at`; the first best wins."""
    times = analytic.StepTimes(target=1.0, verify={2: 1.2}, draft={64: 0.1, 128: 0.15},
                               draft_by_round={(1, 64): 0.2})
    by_position = {64: rng.uniform(0.3, 1.0, size=(3, 4)), 128: rng.uniform(0.3, 1.0, size=(3, 4))}
    remaining = np.array([5, 30, 17])
    choice = analytic.choose(times, by_position, remaining=remaining, gammas=[1, 2, 3, 4])
    ranked = [(analytic.predicted_remaining_speedup(by_position[k][:, :g], remaining, 1.0, times.draft_at(g, k),
                                                    times.verify_at(g)), g, k) for k in (64, 128) for g in (1, 2, 3, 4)]
    first_best = next(r for r in ranked if r[0] == max(s for s, _, _ in ranked))
    assert (choice.predicted, choice.gamma, choice.budget) == first_best
    per_sequence = [0.9, 0.5, 0.7]
    one = analytic.choose(times, {64: per_sequence}, remaining=remaining, gammas=[3])
    assert one.predicted == pytest.approx(analytic.predicted_remaining_speedup(
        np.repeat(np.array(per_sequence)[:, None], 3, 1), remaining, 1.0, 0.1, times.verify_at(3)))
    # alpha 1: the ceiling (gamma + 1) / round cost
    ceiling = analytic.choose(times, {64: 1.0}, gammas=[1, 2, 3])
    assert ceiling.predicted == pytest.approx(max((g + 1) / analytic.round_cost(g, 1.0, times.draft_at(g, 64),
                                                                                   times.verify_at(g)) for g in (1, 2, 3)))
    with pytest.raises(ArgumentError, match="alphas by position"):
        analytic.choose(times, by_position, gammas=[2])               # by position without `remaining`
    with pytest.raises(ArgumentError, match="alphas by position"):
        analytic.choose(times, by_position, remaining=remaining, gammas=[5])   # 4 positions only
    with pytest.raises(ArgumentError, match="tokens or remaining"):
        analytic.choose(times, {64: 0.9}, tokens=10, remaining=remaining)
    with pytest.raises(ArgumentError, match="positive remaining tokens"):
        analytic.choose(times, {64: 0.9}, remaining=[3, 0, 2], gammas=[2])
    with pytest.raises(ArgumentError, match="gammas >= 1"):
        analytic.choose(times, {64: 0.9}, gammas=[0, 2])
