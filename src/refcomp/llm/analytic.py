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

While decoding, what is known is each live sequence b's acceptance by position in the round,
a[b, j], and the tokens r_b it still needs; a full round emits omega_b = 1 + sum_i prod_{j<=i} a[b, j]
of them (`omega_by_position`) and sequence b takes part in max(1, r_b / omega_b) rounds, so

    speedup_remaining = sum_b r_b / sum_b max(1, r_b / omega_b) / (gamma * T_D / T_T + T_V / T_T)

Each speedup is the tokens a sequence gains per round over the round's cost in target steps,
`round_cost` (the one denominator of them all).  `choose` picks (gamma, K) with the best prediction
from given step times and acceptance rates, by the Omega formula, `speedup_batch` (`tokens`) or
`speedup_remaining` (`remaining`); a best prediction below 1 is a `Choice` that is `declined`.  It is
the one ranking: `refcomp.llm.speculative.magicdec_generate` measures the times and acceptance on
its own first rounds and while it decodes, and ranks its choices (K, gamma, plain steps; the ceiling
of any gamma, alpha = 1) with `choose`.
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


def round_cost(gamma: int, t_target: float, t_draft: float, t_verify: float) -> float:
    """A round's cost in target steps, gamma * T_D / T_T + T_V / T_T: every speedup's denominator."""
    if min(t_target, t_draft, t_verify) <= 0:
        raise ArgumentError(f"analytic: step times must be positive, got {t_target}, {t_draft}, {t_verify}")
    return gamma * t_draft / t_target + t_verify / t_target


def predicted_speedup(gamma: int, alpha: float, t_target: float, t_draft: float, t_verify: float) -> float:
    """Omega(gamma, alpha) / (gamma * T_D / T_T + T_V / T_T)."""
    cost = round_cost(gamma, t_target, t_draft, t_verify)
    return omega(gamma, alpha) / cost


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
    its sequences): sum_b r_b / sum_b max(1, r_b / omega_b) / round_cost, omega_b from
    `omega_by_position` of row b (one round at least per sequence, however few tokens it needs)."""
    alphas, remaining = np.asarray(alphas, np.float64), np.asarray(remaining, np.float64)
    if alphas.ndim != 2 or remaining.shape != alphas.shape[:1] or (remaining <= 0).any():
        raise ArgumentError(f"analytic: need alphas (sequences, gamma) and positive remaining tokens (sequences,), "
                            f"got shapes {alphas.shape}, {remaining.shape}")
    cost = round_cost(alphas.shape[1], t_step, t_draft, t_verify)
    rounds = np.maximum(1.0, remaining / omega_by_position(alphas))
    return float(remaining.sum() / rounds.sum() / cost)


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
    cost = round_cost(gamma, t_target, t_draft, t_verify)
    return tokens / expected_rounds(gamma, alphas, tokens) / cost


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
    cost = round_cost(gamma, t_target, t_draft, t_verify)
    return tokens / expected_sequence_rounds(gamma, alphas, tokens) / cost


@dataclass(frozen=True)
class StepTimes:
    """Seconds per forward at one batch and context: target (one decode step), verify (by gamma: the
    forward of gamma + 1 tokens and what a round does after it), draft (one draft forward over a
    streaming cache, by budget K); `draft_by_round` (by (gamma, K), where measured in rounds of that
    gamma) the mean draft forward of such a round, which `choose` prefers to `draft`.  A gamma whose
    verify was not measured gets one from the nearest measured gamma (`verify_at`)."""

    target: float
    verify: Mapping[int, float]
    draft: Mapping[int, float]
    draft_by_round: Mapping[tuple[int, int], float] = field(default_factory=dict)

    def draft_at(self, gamma: int, budget: int) -> float:
        return self.draft_by_round.get((gamma, budget), self.draft[budget])

    def verify_at(self, gamma: int) -> float:
        """T_V(gamma): measured, or from the nearest measured gamma m (the first measured of two as
        near), a step plus gamma / m of what m's verify costs beyond a step (what a verify costs
        beyond a step grows with its drafts); a step where none is measured."""
        if gamma in self.verify or not self.verify:
            return self.verify.get(gamma, self.target)
        m = min(self.verify, key=lambda g: abs(g - gamma))
        return self.target + max(0.0, self.verify[m] - self.target) * gamma / m


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


def choose(times: StepTimes, alphas: Mapping[int, float | Sequence[float] | np.ndarray], *, batch: int = 1,
           tokens: int | None = None, remaining: Sequence[int] | np.ndarray | None = None,
           gammas: Iterable[int] | None = None) -> Choice:
    """The (gamma, K) with the largest predicted speedup over `gammas` (default: those with a measured
    verify; the others' verify from `StepTimes.verify_at`) and the budgets with both a draft time and
    alphas[K]; the first of equal predictions, budgets in `times.draft`'s order, then gammas in order.

    alphas[K]: one float (every sequence's), one per sequence, or (with `remaining`) a (sequences,
    positions) array of each sequence's acceptance by position in the round (gamma's first gamma
    columns).  The prediction: with `remaining` (each live sequence's tokens still needed, all > 0),
    `predicted_remaining_speedup`, the per-sequence alphas repeated over the positions; with `tokens`
    (per sequence), `predicted_batch_speedup` for `batch` sequences; else `predicted_speedup` with the
    mean alpha.  `Choice.alpha` is the mean of the chosen budget's alphas."""
    if tokens is not None and remaining is not None:
        raise ArgumentError("analytic: choose takes tokens or remaining, not both")
    if remaining is not None:
        remaining = np.asarray(remaining, np.float64)
        if remaining.ndim != 1 or remaining.size == 0:
            raise ArgumentError(f"analytic: remaining must be one count per live sequence, got shape {remaining.shape}")
        batch = remaining.size
    order = list(times.verify) if gammas is None else [int(g) for g in gammas]
    if not order or min(order) < 1:
        raise ArgumentError(f"analytic: choose needs gammas >= 1, got {order}")
    best: Choice | None = None
    for k in times.draft:
        if k not in alphas:
            continue
        given = np.asarray(alphas[k], np.float64)
        if given.ndim == 2 and (remaining is None or given.shape[0] != batch or given.shape[1] < max(order)):
            raise ArgumentError(f"analytic: alphas by position (shape {given.shape}) need `remaining` for each of "
                                f"their sequences and a column for each position up to the largest gamma")
        per_sequence = np.atleast_1d(given) if given.ndim < 2 else given
        if per_sequence.ndim == 1 and per_sequence.size == 1:
            per_sequence = np.full(batch, float(per_sequence[0]))
        mean = float(per_sequence.mean())
        for g in order:
            t_draft, t_verify = times.draft_at(g, k), times.verify_at(g)
            if remaining is not None:
                by_position = per_sequence[:, :g] if per_sequence.ndim == 2 else np.repeat(per_sequence[:, None], g, 1)
                s = predicted_remaining_speedup(by_position, remaining, times.target, t_draft, t_verify)
            elif tokens is not None:
                s = predicted_batch_speedup(g, per_sequence, tokens, times.target, t_draft, t_verify)
            else:
                s = predicted_speedup(g, mean, times.target, t_draft, t_verify)
            if best is None or s > best.predicted:
                best = Choice(g, k, mean, s)
    if best is None:
        raise ArgumentError("analytic: no budget has both a draft time and an acceptance rate")
    return best
