"""The MagicDec speedup model: measured step times and acceptance rate -> predicted speedup -> gamma, K.

One speculative round costs gamma draft steps and one verification of gamma + 1 tokens, and emits
Omega(gamma, alpha) = (1 - alpha^(gamma+1)) / (1 - alpha) tokens per sequence on average when each
drafted token is accepted with probability alpha.  Against one target step per token:

    speedup = Omega(gamma, alpha) / (gamma * T_D / T_T + T_V / T_T)

with T_T = T_target(B, S) the time of one autoregressive step at batch B and context S,
T_D = T_draft(B, K) one draft step over a streaming cache of budget K, and T_V = T_verify(B, S, gamma)
one forward of gamma + 1 tokens over the full cache.  At large B and S a step is bound by reading the
KV cache, so T_V stays near T_T while T_D (K << S) is much smaller: the speedup grows with B and S.

A batch decodes its rounds together, and its sequences need different numbers of rounds R_b for N
tokens each.  Had the finished sequences waited in the batch (lockstep), decoding would take
E[max_b R_b] rounds (`expected_rounds`), more than N / Omega when the sequences' luck differs:

    speedup_lockstep = N / E[max_b R_b] / (gamma * T_D / T_T + T_V / T_T)

The decoder instead lets a finished sequence leave, so sequence b takes part in R_b rounds; where a
round costs in proportion to the sequences in it (at large B and S a step is bound by each
sequence's KV bytes), the time is that of mean_b E[R_b] full rounds (`expected_sequence_rounds`):

    speedup_batch = N / mean_b E[R_b] / (gamma * T_D / T_T + T_V / T_T)

(B = 1 and large N give the first formula; a round's part that does not shrink with its sequences,
the weights' bytes, makes the real speedup a little lower.)

`choose` picks (gamma, K) with the best prediction from given step times and acceptance rates; a
best prediction below 1 is a `Choice` that is `declined`.  `refcomp.llm.speculative.magicdec_generate`
measures them on its own first rounds and ranks with `predicted_remaining_speedup`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np

from ..errors import ArgumentError
from .sampling import SamplingParams


def omega(gamma: int, alpha: float) -> float:
    """Expected tokens one round emits per sequence: 1 + alpha + ... + alpha^gamma."""
    if gamma < 0 or not 0.0 <= alpha <= 1.0:
        raise ArgumentError(f"analytic: need gamma >= 0 and alpha in [0, 1], got {gamma}, {alpha}")
    if alpha == 1.0:
        return float(gamma + 1)
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def predicted_speedup(gamma: int, alpha: float, t_target: float, t_draft: float, t_verify: float) -> float:
    """Omega(gamma, alpha) / (gamma * T_D / T_T + T_V / T_T)."""
    if min(t_target, t_draft, t_verify) <= 0:
        raise ArgumentError(f"analytic: step times must be positive, got {t_target}, {t_draft}, {t_verify}")
    return omega(gamma, alpha) / (gamma * t_draft / t_target + t_verify / t_target)


def omega_by_position(alphas: np.ndarray) -> np.ndarray:
    """Expected tokens a round emits when the i-th draft is kept with probability alphas[..., i]
    given the ones before it: 1 + sum_i prod_{j<=i} alphas[..., j] (the Omega formula with an
    acceptance per position; a constant alpha gives Omega(gamma, alpha)).  Shape (...,)."""
    alphas = np.asarray(alphas, np.float64)
    if alphas.ndim == 0 or alphas.shape[-1] < 1 or not ((alphas >= 0) & (alphas <= 1)).all():
        raise ArgumentError(f"analytic: alphas by position must be in [0, 1] with at least one position, "
                            f"got shape {alphas.shape}")
    return 1.0 + np.cumprod(alphas, axis=-1).sum(axis=-1)


def predicted_remaining_speedup(alphas: np.ndarray, remaining: np.ndarray, t_step: float, t_draft: float,
                                t_verify: float) -> float:
    """The speedup of rounds of gamma = alphas.shape[1] drafts over plain steps for the tokens the
    sequences still need (remaining[b] > 0), with per-sequence step times (a round's cost shrinks with
    its sequences): sum_b r_b T_T / (sum_b max(1, r_b / omega_b) (gamma T_D + T_V)), omega_b from
    `omega_by_position` of row b (one round at least per sequence, however few tokens it needs)."""
    alphas, remaining = np.asarray(alphas, np.float64), np.asarray(remaining, np.float64)
    if alphas.ndim != 2 or remaining.shape != alphas.shape[:1] or (remaining <= 0).any():
        raise ArgumentError(f"analytic: need alphas (sequences, gamma) and positive remaining tokens (sequences,), "
                            f"got shapes {alphas.shape}, {remaining.shape}")
    if min(t_step, t_draft, t_verify) <= 0:
        raise ArgumentError(f"analytic: step times must be positive, got {t_step}, {t_draft}, {t_verify}")
    rounds = np.maximum(1.0, remaining / omega_by_position(alphas))
    return float(remaining.sum() * t_step / (rounds.sum() * (alphas.shape[1] * t_draft + t_verify)))


def round_tokens(gamma: int, alpha: float) -> np.ndarray:
    """P(one round emits k tokens), k = 0 .. gamma + 1: the drafts up to the first rejection plus
    the corrected (or bonus) token, alpha^(k-1) (1 - alpha) for 1 <= k <= gamma, alpha^gamma for gamma + 1."""
    if gamma < 1 or not 0.0 <= alpha <= 1.0:
        raise ArgumentError(f"analytic: need gamma >= 1 and alpha in [0, 1], got {gamma}, {alpha}")
    p = np.zeros(gamma + 2)
    p[1:gamma + 1] = alpha ** np.arange(gamma) * (1.0 - alpha)
    p[gamma + 1] = alpha ** gamma
    return p


def rounds_cdf(gamma: int, alpha: float, tokens: int) -> np.ndarray:
    """P(R <= r) for r = 0 .. tokens, R the rounds one sequence needs to emit `tokens` tokens (each
    round emits at least one, so R <= tokens)."""
    if not isinstance(tokens, (int, np.integer)) or tokens < 0:
        raise ArgumentError(f"analytic: tokens must be a non-negative integer, got {tokens!r}")
    step = round_tokens(gamma, alpha)
    held = np.zeros(tokens + 1)   # P(tokens emitted so far = n), n capped at `tokens` (done)
    held[0] = 1.0
    cdf = np.empty(tokens + 1)
    cdf[0] = held[tokens]
    for r in range(1, tokens + 1):
        grown = np.convolve(held[:tokens], step)
        nxt = np.zeros(tokens + 1)
        nxt[:tokens] = grown[:tokens]
        nxt[tokens] = held[tokens] + grown[tokens:].sum()
        held = nxt
        cdf[r] = held[tokens]
    cdf[tokens] = 1.0
    return cdf


def expected_rounds(gamma: int, alphas: float | Iterable[float], tokens: int) -> float:
    """E[max_b R_b]: the rounds a batch in lockstep runs until every sequence b (drafts accepted
    independently with probability alphas[b]; one float: a batch of one) has emitted `tokens` tokens."""
    alphas = np.atleast_1d(np.asarray(list(alphas) if not np.isscalar(alphas) else alphas, np.float64))
    if alphas.size == 0:
        raise ArgumentError("analytic: expected_rounds needs at least one sequence's alpha")
    all_done = np.ones(tokens + 1)
    for alpha in alphas:
        all_done *= rounds_cdf(gamma, float(alpha), tokens)
    return float((1.0 - all_done).sum())


def predicted_lockstep_speedup(gamma: int, alphas: float | Iterable[float], tokens: int, t_target: float,
                               t_draft: float, t_verify: float) -> float:
    """tokens / E[max_b R_b] / (gamma * T_D / T_T + T_V / T_T): the batch's speedup over
    autoregressive decoding of `tokens` tokens per sequence (module doc)."""
    if not isinstance(tokens, (int, np.integer)) or isinstance(tokens, bool) or tokens < 1:
        raise ArgumentError(f"analytic: tokens must be a positive integer, got {tokens!r}")
    if min(t_target, t_draft, t_verify) <= 0:
        raise ArgumentError(f"analytic: step times must be positive, got {t_target}, {t_draft}, {t_verify}")
    return tokens / expected_rounds(gamma, alphas, tokens) / (gamma * t_draft / t_target + t_verify / t_target)


def expected_sequence_rounds(gamma: int, alphas: float | Iterable[float], tokens: int) -> float:
    """The mean over sequences b of E[R_b]: the rounds a sequence takes part in when it leaves the
    batch as soon as it has `tokens` tokens (refcomp.llm.speculative's decoding)."""
    alphas = np.atleast_1d(np.asarray(list(alphas) if not np.isscalar(alphas) else alphas, np.float64))
    if alphas.size == 0:
        raise ArgumentError("analytic: expected_sequence_rounds needs at least one sequence's alpha")
    return float(np.mean([(1.0 - rounds_cdf(gamma, float(a), tokens)).sum() for a in alphas]))


def predicted_batch_speedup(gamma: int, alphas: float | Iterable[float], tokens: int, t_target: float,
                            t_draft: float, t_verify: float) -> float:
    """tokens / mean_b E[R_b] / (gamma * T_D / T_T + T_V / T_T): the speedup of a batch whose
    sequences leave when they have their tokens, a round costing its share of the full batch's
    step times (T_D, T_V at the full batch; the module doc)."""
    if not isinstance(tokens, (int, np.integer)) or isinstance(tokens, bool) or tokens < 1:
        raise ArgumentError(f"analytic: tokens must be a positive integer, got {tokens!r}")
    if min(t_target, t_draft, t_verify) <= 0:
        raise ArgumentError(f"analytic: step times must be positive, got {t_target}, {t_draft}, {t_verify}")
    return tokens / expected_sequence_rounds(gamma, alphas, tokens) / (gamma * t_draft / t_target
                                                                        + t_verify / t_target)


@dataclass(frozen=True)
class StepTimes:
    """Seconds per forward at one batch and context: target (one decode step), verify (by gamma: the
    forward of gamma + 1 tokens and what a round does after it), draft (one draft forward over a
    streaming cache, by budget K); `draft_by_round` (by (gamma, K), where measured in rounds of that
    gamma) the mean draft forward of such a round, which `choose` prefers to `draft`."""

    target: float
    verify: Mapping[int, float]
    draft: Mapping[int, float]
    draft_by_round: Mapping[tuple[int, int], float] = field(default_factory=dict)

    def draft_at(self, gamma: int, budget: int) -> float:
        return self.draft_by_round.get((gamma, budget), self.draft[budget])


@dataclass(frozen=True)
class Choice:
    """The chosen gamma and K, the alpha and predicted speedup they were chosen with.  `declined`:
    the best prediction is below 1, so plain autoregressive decoding is the faster choice."""

    gamma: int
    budget: int
    alpha: float
    predicted: float

    @property
    def declined(self) -> bool:
        return self.predicted < 1.0

    def reason(self) -> str:
        verdict = "declined: autoregressive decoding is predicted faster" if self.declined else "speculating"
        return (f"{verdict} (best predicted speedup {self.predicted:.2f} at gamma {self.gamma}, K {self.budget}, "
                f"alpha {self.alpha:.3f})")


def acceptance_rate(target_logits: np.ndarray, draft_logits: np.ndarray, params: SamplingParams) -> float:
    """alpha from logits of the same tokens under the target and the draft, (..., V) each: the
    probability that a drafted token is accepted, E[sum_x min(p(x), q(x))] (greedy: argmax agreement)."""
    p, q = params.distribution(target_logits), params.distribution(draft_logits)
    return float(np.minimum(p, q).sum(axis=-1).mean())


def choose(times: StepTimes, alphas: Mapping[int, float | Sequence[float]], *, batch: int = 1,
           tokens: int | None = None) -> Choice:
    """The (gamma, K) with the largest predicted speedup over the measured gammas and budgets; with
    `tokens` (per sequence), `predicted_batch_speedup` for `batch` sequences, each of alpha alphas[K]
    (one float: every sequence's; a sequence of floats: one per sequence).  `Choice.alpha` is
    the mean of the chosen budget's alphas."""
    best: Choice | None = None
    for k in times.draft:
        if k not in alphas:
            continue
        per_sequence = np.atleast_1d(np.asarray(alphas[k], np.float64))
        if per_sequence.size == 1:
            per_sequence = np.full(batch, float(per_sequence[0]))
        mean = float(per_sequence.mean())
        for g, t_verify in times.verify.items():
            t_draft = times.draft_at(g, k)
            if tokens is None:
                s = predicted_speedup(g, mean, times.target, t_draft, t_verify)
            else:
                s = predicted_batch_speedup(g, per_sequence, tokens, times.target, t_draft, t_verify)
            if best is None or s > best.predicted:
                best = Choice(g, k, mean, s)
    if best is None:
        raise ArgumentError("analytic: no budget has both a draft time and an acceptance rate")
    return best
