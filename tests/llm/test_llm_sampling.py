"""Sampling: greedy, temperature, top-k and top-p distributions against direct definitions; seeded draws."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from decoding_helpers import chi2_statistic, chi2_threshold
from refcomp.errors import ArgumentError
from refcomp.llm.sampling import SamplingParams, draw, sample


def brute_force(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """One row, written the long way: sort, cut, renormalise."""
    if params.greedy:
        out = np.zeros(len(logits))
        out[int(np.argmax(logits))] = 1.0
        return out
    p = np.exp((logits - logits.max()) / params.temperature)
    p /= p.sum()
    order = sorted(range(len(p)), key=lambda i: (-p[i], i))
    chosen = order[:params.top_k] if params.top_k else order
    mass_total = sum(p[i] for i in chosen)
    kept, mass = [], 0.0
    for i in chosen:
        if mass >= params.top_p * mass_total:
            break
        kept.append(i)
        mass += p[i]
    out = np.zeros(len(p))
    out[kept] = p[kept]
    return out / out.sum()


@given(seed=st.integers(0, 2**31), temperature=st.sampled_from([0.0, 0.3, 1.0, 2.5]),
       top_k=st.integers(0, 12), top_p=st.sampled_from([1.0, 0.95, 0.6, 0.1]))
def test_distribution_matches_definition(seed, temperature, top_k, top_p):
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal((3, 10)) * 3).astype(np.float32)
    params = SamplingParams(temperature, top_k, top_p)
    got = params.distribution(logits)
    for row in range(3):
        np.testing.assert_allclose(got[row], brute_force(logits[row].astype(np.float64), params), atol=1e-12)
    np.testing.assert_allclose(got.sum(axis=-1), 1.0)


def test_greedy_ties_pick_lowest_index():
    logits = np.array([[1.0, 3.0, 3.0, 0.0]])
    assert SamplingParams().distribution(logits).tolist() == [[0.0, 1.0, 0.0, 0.0]]
    assert sample(logits, SamplingParams()).tolist() == [1]


def test_draw_follows_the_distribution():
    rng = np.random.default_rng(20240601)
    probs = np.array([0.05, 0.0, 0.3, 0.15, 0.0, 0.5])
    n = 60_000
    tokens = draw(np.broadcast_to(probs, (n, 6)), rng)
    counts = np.bincount(tokens, minlength=6)
    assert counts[1] == counts[4] == 0
    stat, df = chi2_statistic(counts, probs)
    assert stat < chi2_threshold(df)


def test_same_seed_same_tokens(rng):
    logits = rng.standard_normal((8, 50))
    params = SamplingParams(temperature=0.8, top_k=20, top_p=0.9)
    a = sample(logits, params, np.random.default_rng(7))
    b = sample(logits, params, np.random.default_rng(7))
    assert a.tolist() == b.tolist()
    assert all(params.distribution(logits)[i, t] > 0 for i, t in enumerate(a))


def test_bad_parameters():
    with pytest.raises(ArgumentError, match="temperature"):
        SamplingParams(temperature=-1)
    with pytest.raises(ArgumentError, match="top_k"):
        SamplingParams(top_k=-2)
    with pytest.raises(ArgumentError, match="top_p"):
        SamplingParams(top_p=0.0)
    with pytest.raises(ArgumentError, match="Generator"):
        sample(np.zeros((1, 4)), SamplingParams(temperature=1.0))


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_nan_logits_are_refused(rng, temperature):
    """A NaN logit (a broken model) is named, not turned into token 0 by argmax."""
    logits = rng.standard_normal((3, 2, 20))
    logits[2, 1, int(rng.integers(20))] = np.nan
    with pytest.raises(ArgumentError, match=r"logits of row \(2, 1\) hold NaN"):
        SamplingParams(temperature=temperature).distribution(logits)
    logits[2, 1] = -np.inf
    logits[2, 1, 4] = 0.0                       # -inf logits mask tokens: still a distribution
    np.testing.assert_array_equal(SamplingParams(temperature=temperature).distribution(logits)[2, 1],
                                  np.eye(20)[4])
