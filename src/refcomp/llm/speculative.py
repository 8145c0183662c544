"""MagicDec self-speculative decoding: the model drafts for itself through a StreamingLLM cache.

The draft is the target model itself reading a streaming KV cache (sink tokens + a recent window,
budget K = sinks + window), so a draft step reads K cached tokens instead of the whole context; at
large batch and long context, where decoding is bound by reading the KV cache, drafting is cheap.
Each round, per sequence (all sequences of the batch in step):

1. the draft proposes gamma tokens d_1..d_gamma, one forward each, with distributions q_1..q_gamma;
2. the target (full cache) scores [t, d_1..d_gamma] in ONE forward of gamma + 1 tokens, giving
   p_1..p_{gamma+1} (t: the last token emitted, not yet in the caches);
3. d_i is accepted with probability min(1, p_i(d_i) / q_i(d_i)) (greedy: exactly when
   d_i = argmax p_i) until the first rejection; at a rejection at i the emitted token is drawn
   from norm(max(0, p_i - q_i)) (greedy: argmax p_i); when all gamma are accepted a bonus token is
   drawn from p_{gamma+1};
4. both caches roll back to the accepted tokens: each sequence advances by its own 1 + n tokens.

Every emitted token then has exactly the target's distribution (Leviathan et al.; Chen et al.), so
greedy speculative output equals greedy autoregressive output token for token.

The draft reads the target's own keys and values: after the prompts are fed to the target, the
draft cache (streaming) takes the target cache's entries it keeps (`extend_from`), and after every
verification it drops the entries it wrote while drafting and takes the target's entries of the
accepted tokens instead.  So both caches hold the same positions at the start of a round, every
draft forward carries one token, and no draft forward is spent catching up on the last accepted
draft token (whose entry only the verify computed).  The draft is then MagicDec's: the target's
cache restricted to sinks + window, the draft's own entries living only within a round.

A sequence that has its tokens leaves the batch (`keep_sequences` on both caches): the rounds after
it run on the others only, so the batch does not pay draft and verify rows for finished sequences.

`plan` measures step times and acceptance rates on the prompts the way a run meets them and
chooses gamma and K (refcomp.llm.analytic); `magicdec_generate` decodes with the plan's choice, or
autoregressively where the plan predicts no speedup (it declines).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import ArgumentError
from . import analytic
from .generate import Clock, GenerationResult, Prefill, TokenCallback, check_prompts, clip_callback, generate, make_rng
from .protocol import CausalLM, KVCache, StreamingBudget
from .sampling import SamplingParams, draw


@dataclass(frozen=True)
class SpeculativeConfig:
    """gamma draft tokens per round; the draft's streaming cache keeps `sinks` + `window` tokens."""

    gamma: int = 4
    sinks: int = 16
    window: int = 240

    def __post_init__(self) -> None:
        if not isinstance(self.gamma, (int, np.integer)) or self.gamma < 1:
            raise ArgumentError(f"speculative: gamma must be a positive integer, got {self.gamma!r}")
        if self.sinks < 0 or self.window < 1:
            raise ArgumentError(f"speculative: need sinks >= 0 and window >= 1, got {self.sinks}, {self.window}")

    @property
    def budget(self) -> int:
        """K: the draft's KV budget in tokens."""
        return self.sinks + self.window

    def streaming(self) -> StreamingBudget:
        # gamma + 1: a finished sequence, frozen in its place, undoes a whole round's gamma + 1 draft tokens
        return StreamingBudget(sinks=self.sinks, window=self.window, slack=self.gamma + 1)

    @classmethod
    def with_budget(cls, gamma: int, budget: int, sinks: int = 16) -> "SpeculativeConfig":
        """A budget K split into min(sinks, K // 4) sink tokens and a window of the rest."""
        if budget < 2:
            raise ArgumentError(f"speculative: the draft budget K must be at least 2 tokens, got {budget}")
        sinks = min(sinks, budget // 4)
        return cls(gamma=gamma, sinks=sinks, window=budget - sinks)


def _acceptance_probability(p_tok: np.ndarray, q_tok: np.ndarray) -> np.ndarray:
    """min(1, p/q) for a drafted token (q > 0: it was drawn from q)."""
    return np.minimum(1.0, p_tok / np.maximum(q_tok, np.finfo(np.float64).tiny))


def verify(p: np.ndarray, q: np.ndarray, drafts: np.ndarray, params: SamplingParams,
           rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The acceptance step.  p: (B, gamma+1, V) target distributions, q: (B, gamma, V) draft
    distributions, drafts: (B, gamma) drafted tokens.  Returns (accepted count n (B,), the token
    emitted after the accepted drafts (B,))."""
    b, gamma = drafts.shape
    rows = np.arange(b)
    p_draft = np.take_along_axis(p[:, :gamma], drafts[..., None], axis=-1)[..., 0]
    if params.greedy:
        ok = drafts == np.argmax(p[:, :gamma], axis=-1)
    else:
        q_draft = np.take_along_axis(q, drafts[..., None], axis=-1)[..., 0]
        ok = rng.random((b, gamma)) < _acceptance_probability(p_draft, q_draft)
    # n = index of the first rejection (gamma if none)
    n = np.where(ok.all(axis=1), gamma, np.argmin(ok, axis=1))
    target = p[rows, n]                                     # p_{n+1}: bonus or corrected distribution
    if params.greedy:
        return n, np.argmax(target, axis=-1).astype(np.int64)
    rejected = n < gamma
    residual = target.copy()
    if np.any(rejected):
        diff = np.maximum(0.0, target[rejected] - q[rows[rejected], n[rejected]])
        mass = diff.sum(axis=-1, keepdims=True)
        residual[rejected] = np.where(mass > 0, diff / np.where(mass > 0, mass, 1.0), target[rejected])
    return n, draw(residual, rng)


def _draft(model: CausalLM, draft_cache: KVCache, pending: np.ndarray, gamma: int, params: SamplingParams,
           rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A round's drafting: gamma one-token forwards from `pending`; (drafts (B, gamma), q (B, gamma, V))."""
    batch = len(pending)
    drafts = np.empty((batch, gamma), np.int64)
    q = np.empty((batch, gamma, model.config.vocab_size))
    fed = pending
    for i in range(gamma):
        logits = model.forward(fed[:, None], draft_cache)[:, -1]
        q[:, i] = params.distribution(logits)
        drafts[:, i] = fed = draw(q[:, i], rng)
    return drafts, q


def _verify_and_settle(model: CausalLM, target_cache: KVCache, draft_cache: KVCache, pending: np.ndarray,
                       drafts: np.ndarray, q: np.ndarray, length: np.ndarray, params: SamplingParams,
                       rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A round's verification and rollbacks: (accepted n per sequence, emitted token).  Both caches
    end holding length + 1 + n tokens, the draft's the target's entries."""
    p = params.distribution(model.forward(np.concatenate([pending[:, None], drafts], axis=1), target_cache))
    n, emitted = verify(p, q, drafts, params, rng)
    target_cache.rollback(length + 1 + n)
    draft_cache.rollback(length)
    draft_cache.extend_from(target_cache, length + 1 + n)
    return n, emitted


def speculative_generate(model: CausalLM, prompts: Sequence[Sequence[int]] | np.ndarray, max_new_tokens: int, *,
                         spec: SpeculativeConfig | None = None, params: SamplingParams | None = None,
                         seed: int | np.random.Generator | None = 0,
                         on_tokens: TokenCallback | None = None, clock: Clock = time.perf_counter) -> GenerationResult:
    """MagicDec decoding of a batch of prompts (see the module doc); the model's caches must offer
    `extend_from` and `keep_sequences` (both of refcomp's do); `clock` times it, as `generate`'s.
    The result's `extra` holds the acceptance statistics (`alpha`, `accepted`, `rounds`,
    `row_rounds`, `alpha_by_sequence`) and the draft/verify times."""
    spec = spec or SpeculativeConfig()
    params = params or SamplingParams()
    config = model.config
    gamma = spec.gamma
    # a sequence still decoding holds at most prompt + max_new_tokens - 2 tokens before a round,
    # which appends gamma + 1: the caches need gamma positions past the prompt and the new tokens
    extra = gamma
    prompts = check_prompts(prompts, max_new_tokens, config.max_position_embeddings, config.vocab_size,
                            extra=extra)
    rng = make_rng(seed)
    batch = len(prompts)
    capacity = max(len(p) for p in prompts) + max_new_tokens + extra
    target_cache = model.new_cache(batch, capacity)
    draft_cache = model.new_cache(batch, capacity, streaming=spec.streaming())
    clipped = clip_callback(on_tokens, max_new_tokens, batch)

    start = clock()
    prefill = Prefill([(model, target_cache)], prompts, params, rng)
    pending = prefill.run(clipped)
    out = prefill.emitted
    length = target_cache.lengths()                        # tokens in both caches; pending is next
    draft_cache.extend_from(target_cache, length)
    prefill_seconds = clock() - start
    before = sum(min(len(t), max_new_tokens) for t in out)

    rounds = row_rounds = 0
    accepted_by = np.zeros(batch, np.int64)   # per sequence: drafts accepted, drafts judged
    trials_by = np.zeros(batch, np.int64)
    draft_seconds = verify_seconds = 0.0
    live = np.arange(batch)                   # the sequences still in the caches, in their order
    start = clock()
    while True:
        going = np.array([len(out[b]) < max_new_tokens for b in live])
        if not going.all():
            if not going.any():
                break
            # finished sequences leave the batch: a round costs only the sequences still decoding
            keep = np.flatnonzero(going)
            target_cache.keep_sequences(keep)
            draft_cache.keep_sequences(keep)
            live, pending, length = live[keep], pending[keep], length[keep]
        t0 = clock()
        drafts, q = _draft(model, draft_cache, pending, gamma, params, rng)
        t1 = clock()
        n, emitted = _verify_and_settle(model, target_cache, draft_cache, pending, drafts, q, length, params, rng)
        t2 = clock()
        draft_seconds += t1 - t0
        verify_seconds += t2 - t1

        new_tokens: list[list[int]] = [[] for _ in range(batch)]
        for i, b in enumerate(live):
            new_tokens[b] = [int(x) for x in drafts[i, :n[i]]] + [int(emitted[i])]
            out[b].extend(new_tokens[b])
        accepted_by[live] += n
        trials_by[live] += n + (n < gamma)
        pending = emitted
        length = length + 1 + n
        rounds += 1
        row_rounds += len(live)
        if clipped is not None:
            clipped(new_tokens)
    decode_seconds = clock() - start
    accepted, trials = int(accepted_by.sum()), int(trials_by.sum())
    alpha_by = [float(a / t) if t else float("nan") for a, t in zip(accepted_by, trials_by)]
    extra = {"rounds": rounds, "accepted": accepted, "alpha": accepted / trials if trials else float("nan"),
             "alpha_by_sequence": alpha_by, "row_rounds": row_rounds,
             "gamma": gamma, "K": spec.budget, "draft_seconds": draft_seconds, "verify_seconds": verify_seconds}
    return GenerationResult([t[:max_new_tokens] for t in out], prefill_seconds, decode_seconds, rounds,
                            decoded=sum(min(len(t), max_new_tokens) for t in out) - before, extra=extra)


@dataclass(frozen=True)
class Plan:
    """What `plan` measured and chose: step times, per budget K the acceptance rate of each
    sequence, the choice (perhaps `declined`), and the seconds the measuring took."""

    choice: analytic.Choice
    times: analytic.StepTimes
    alphas: dict[int, np.ndarray]
    seconds: float


def plan(model: CausalLM, prompts: Sequence[Sequence[int]] | np.ndarray, max_new_tokens: int, *,
         budgets: Sequence[int] = (64, 128, 256, 512), gammas: Sequence[int] = (1, 2, 3, 4, 5, 6),
         params: SamplingParams | None = None, pilot_steps: int = 32, repeats: int = 3,
         seed: int | np.random.Generator | None = 0, clock: Clock = time.perf_counter) -> Plan:
    """Choose gamma and K for decoding `prompts` from measurements on those prompts, the way a run
    meets them: the prompts are fed to a full cache, each draft cache takes its entries
    (`extend_from`); the target then decodes `pilot_steps` tokens, and each draft predicts every one
    of them from the same tokens, taking the target's entries after each step as in a round, which
    gives each sequence's acceptance rate per K (greedy: the draft's arg-max is the target's;
    otherwise sum_x min(p, q)); last, `repeats` rounds of every (gamma, K) (the drafting, then the
    verify forward with the sampling and rollbacks after it, each rolled back), each after a timed
    decode step, the fastest of each kept (`clock`: as `generate`'s).  `analytic.choose` ranks
    (gamma, K) by `predicted_batch_speedup` for max_new_tokens - 1 tokens a sequence; the choice is
    `declined` below 1."""
    params = params or SamplingParams()
    gammas = sorted({int(g) for g in gammas})
    budgets = sorted({int(k) for k in budgets})
    if not gammas or gammas[0] < 1 or not budgets or budgets[0] < 2:
        raise ArgumentError(f"speculative plan: need gammas >= 1 and budgets >= 2, got {gammas}, {budgets}")
    if not isinstance(pilot_steps, int) or pilot_steps < 1 or not isinstance(repeats, int) or repeats < 1:
        raise ArgumentError(f"speculative plan: pilot_steps and repeats must be positive integers, "
                            f"got {pilot_steps!r}, {repeats!r}")
    config = model.config
    extra = gammas[-1] + 1
    prompts = check_prompts(prompts, max_new_tokens, config.max_position_embeddings, config.vocab_size,
                            extra=extra)
    rng = make_rng(seed)
    batch = len(prompts)
    start = clock()
    capacity = max(len(p) for p in prompts) + max_new_tokens + extra
    steps = min(pilot_steps, max_new_tokens)   # and room for a round of gammas[-1] + 1 tokens after them
    target = model.new_cache(batch, capacity)
    pending = Prefill([(model, target)], prompts, params, rng).run()
    length = target.lengths()
    drafts = {}
    for k in budgets:
        drafts[k] = model.new_cache(batch, capacity,
                                    streaming=SpeculativeConfig.with_budget(gammas[-1], k).streaming())
        drafts[k].extend_from(target, length)

    agree: dict[int, list[np.ndarray]] = {k: [] for k in budgets}
    for _ in range(steps):
        p = params.distribution(model.forward(pending[:, None], target)[:, -1])
        for k, cache in drafts.items():
            q = params.distribution(model.forward(pending[:, None], cache)[:, -1])
            agree[k].append(np.minimum(p, q).sum(axis=-1))
            cache.rollback(length)
            cache.extend_from(target, length + 1)
        pending = draw(p, rng)
        length = length + 1
    alphas = {k: np.mean(rows, axis=0) for k, rows in agree.items()}

    target_times: list[float] = []
    verify_times: dict[int, list[float]] = {g: [] for g in gammas}
    draft_times: dict[tuple[int, int], list[float]] = {(g, k): [] for g in gammas for k in budgets}
    for _ in range(repeats):
        for g in gammas:
            for k, cache in drafts.items():
                # a decode step, then the round: each preceded by a forward over the full cache, as in a run
                t0 = clock()
                draw(params.distribution(model.forward(pending[:, None], target)[:, -1]), rng)
                target_times.append(clock() - t0)
                target.rollback(length)
                t0 = clock()
                tokens, q = _draft(model, cache, pending, g, params, rng)
                t1 = clock()
                _verify_and_settle(model, target, cache, pending, tokens, q, length, params, rng)
                t2 = clock()
                draft_times[g, k].append((t1 - t0) / g)
                verify_times[g].append(t2 - t1)
                target.rollback(length)
                cache.rollback(length)
    by_round = {key: min(v) for key, v in draft_times.items()}
    times = analytic.StepTimes(target=min(target_times), verify={g: min(v) for g, v in verify_times.items()},
                               draft={k: by_round[gammas[0], k] for k in budgets}, draft_by_round=by_round)
    choice = analytic.choose(times, alphas, batch=batch, tokens=max(1, max_new_tokens - 1))
    return Plan(choice, times, alphas, clock() - start)


def magicdec_generate(model: CausalLM, prompts: Sequence[Sequence[int]] | np.ndarray, max_new_tokens: int, *,
                      budgets: Sequence[int] = (64, 128, 256, 512), gammas: Sequence[int] = (1, 2, 3, 4, 5, 6),
                      params: SamplingParams | None = None, seed: int | np.random.Generator | None = 0,
                      on_tokens: TokenCallback | None = None, clock: Clock = time.perf_counter) -> GenerationResult:
    """`plan`, then speculative decoding with the chosen gamma and K, or plain autoregressive
    decoding (`generate`) where the plan declines to speculate.  The result's `extra` says which
    (`declined`, `reason`, `predicted`, `plan_seconds`; a speculative run's statistics besides).
    The choice rests on measured times, so with sampling a fixed seed gives the same tokens only
    for the same choice (greedy output is the target's whatever the choice)."""
    params = params or SamplingParams()
    planned = plan(model, prompts, max_new_tokens, budgets=budgets, gammas=gammas, params=params, seed=seed,
                   clock=clock)
    choice = planned.choice
    if choice.declined:
        result = generate(model, prompts, max_new_tokens, params=params, seed=seed, on_tokens=on_tokens, clock=clock)
    else:
        result = speculative_generate(model, prompts, max_new_tokens, params=params, seed=seed, on_tokens=on_tokens,
                                      clock=clock, spec=SpeculativeConfig.with_budget(choice.gamma, choice.budget))
    result.extra.update(declined=choice.declined, reason=choice.reason(), predicted=choice.predicted,
                        plan_seconds=planned.seconds)
    return result
