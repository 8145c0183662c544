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
4. the cache rolls back to the accepted tokens: each sequence advances by its own 1 + n tokens.

Every emitted token then has exactly the target's distribution (Leviathan et al.; Chen et al.), so
greedy speculative output equals greedy autoregressive output token for token.

The draft reads the target's own keys and values in place: its cache is the target's read as a
streaming one (`draft_view`: attention sees the sinks and the last `window` positions), so it
needs no copies.  Its forwards append the drafts' entries to the target; the round rolls the
target back to the round's start before the verify, which writes the target's own entries of
the round's tokens over them, and then to the accepted tokens.  So the draft sees the target's
entries of every position before the round, every draft forward carries one token, and no draft
forward is spent catching up on the last accepted draft token (whose entry only the verify
computed).  The draft is then MagicDec's: the target's cache restricted to sinks + window, the
draft's own entries living only within a round.

A sequence that has its tokens leaves the batch (`keep_sequences` on the target, which its views
read): the rounds after it run on the others only, so the batch does not pay draft and verify rows
for finished sequences.

`magicdec_generate` chooses gamma and K on the decode itself (ranked by `analytic.choose`): it
feeds the prompts once, plans on its own first rounds (`_plan`: one per budget K, then one per
gamma; declining after the first when no gamma could pay even with every draft accepted), fixes K,
and re-plans while it decodes: running estimates of each sequence's acceptance by position in the
round and of the step times re-rank the gammas and plain autoregressive steps every few rounds,
with hysteresis (`AdaptConfig`).  Lossless across switches: each round or step emits tokens with the target's law
whatever the mode it was chosen in.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import ArgumentError
from . import analytic
from .generate import Clock, GenerationResult, Prefill, TokenCallback, check_prompts, clip_callback, make_rng
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


def _verify_and_settle(model: CausalLM, target_cache: KVCache, pending: np.ndarray,
                       drafts: np.ndarray, q: np.ndarray, length: np.ndarray, params: SamplingParams,
                       rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A round's verification and rollbacks: (accepted n per sequence, emitted token).  The target
    drops the drafts' entries first (its draft view appended them) and ends holding length + 1 + n
    tokens, all its own entries."""
    target_cache.rollback(length)
    p = params.distribution(model.forward(np.concatenate([pending[:, None], drafts], axis=1), target_cache))
    n, emitted = verify(p, q, drafts, params, rng)
    target_cache.rollback(length + 1 + n)
    return n, emitted


def speculative_generate(model: CausalLM, prompts: Sequence[Sequence[int]] | np.ndarray, max_new_tokens: int, *,
                         spec: SpeculativeConfig | None = None, params: SamplingParams | None = None,
                         seed: int | np.random.Generator | None = 0,
                         on_tokens: TokenCallback | None = None, clock: Clock = time.perf_counter) -> GenerationResult:
    """MagicDec decoding of a batch of prompts (see the module doc); the model's caches must offer
    `draft_view` and `keep_sequences` (both of refcomp's do); `clock` times it, as `generate`'s.
    The result's `extra` holds the acceptance statistics (`alpha`, `accepted`, `rounds`,
    `row_rounds`, `alpha_by_sequence`) and the draft/verify times."""
    spec = spec or SpeculativeConfig()
    params = params or SamplingParams()
    config = model.config
    gamma = spec.gamma
    # a sequence still decoding holds at most prompt + max_new_tokens - 2 tokens before a round,
    # which appends gamma + 1: the caches need gamma positions past the prompt and the new tokens
    prompts = check_prompts(prompts, max_new_tokens, config.max_position_embeddings, config.vocab_size,
                            extra=gamma)
    run = _Decoding(model, prompts, max_new_tokens, [spec.budget], gamma, params, make_rng(seed), clock, on_tokens,
                    sinks=spec.sinks, window=spec.window)
    start = clock()
    while run.leave():
        run.round(gamma, spec.budget)
    return run.result(clock() - start, {"gamma": gamma, "K": spec.budget})


# --- adapting while decoding ----------------------------------------------------------------------

AR = 0   # the mode label of plain autoregressive steps (a gamma is >= 1)


@dataclass(frozen=True)
class AdaptConfig:
    """How `magicdec_generate` re-plans while it decodes (spec/llm.md, "Adapting while decoding").

    every: rounds (or autoregressive steps) between re-plans; hysteresis: a switch needs a
    prediction this fraction better (to another gamma: than the current gamma's; to speculation:
    above 1 + hysteresis; to plain steps: below 1 - hysteresis); decay: the weight an acceptance
    count keeps per round of its sequence (older rounds count less); prior_weight: the judged drafts
    the pilot's alpha counts for; probe_every: plain steps between probe rounds once speculation has
    stopped (0: never probe, plain steps to the end); step_every: rounds between reference plain
    steps while speculating (T_T's running mean; 0: never); time_weight: the weight of a new
    measurement in the running mean of a step time."""

    every: int = 4
    hysteresis: float = 0.05
    decay: float = 0.9
    prior_weight: float = 8.0
    probe_every: int = 32
    step_every: int = 16
    time_weight: float = 0.25

    def __post_init__(self) -> None:
        def bad(name: str, need: str) -> None:
            raise ArgumentError(f"magicdec adapt: {name} must be {need}, got {getattr(self, name)!r}")

        for name in ("every", "probe_every", "step_every"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < (name == "every"):
                bad(name, "a positive integer" if name == "every" else "a non-negative integer")
        for name, lo, hi, lo_open in (("hysteresis", 0.0, 1.0, False), ("decay", 0.0, 1.0, True),
                                      ("time_weight", 0.0, 1.0, True)):
            value = getattr(self, name)
            if (not isinstance(value, (int, float, np.floating)) or isinstance(value, bool) or not np.isfinite(value)
                    or value > hi or value < lo or (lo_open and value == lo) or (name == "hysteresis" and value == hi)):
                bad(name, f"a number in {'(' if lo_open else '['}{lo}, {hi}{')' if name == 'hysteresis' else ']'}")
        if (not isinstance(self.prior_weight, (int, float, np.floating)) or isinstance(self.prior_weight, bool)
                or not np.isfinite(self.prior_weight) or self.prior_weight < 0):
            bad("prior_weight", "a finite number >= 0")


class _Decoding:
    """The state of one speculative (or mixed) decoding of a batch: the target cache, one draft view
    of it per budget K (`draft_view`: no entries of its own), each live sequence's pending token and
    length, the tokens emitted, and what each mode (AR or a gamma) cost and accepted.  `step` is one
    autoregressive step, `round` one speculative round."""

    def __init__(self, model: CausalLM, prompts: list[np.ndarray], max_new_tokens: int, budgets: Sequence[int],
                 gamma_max: int, params: SamplingParams, rng: np.random.Generator, clock: Clock,
                 on_tokens: TokenCallback | None, sinks: int | None = None, window: int | None = None) -> None:
        self.model, self.params, self.rng, self.clock = model, params, rng, clock
        self.max_new_tokens, self.gamma_max = max_new_tokens, gamma_max
        batch = len(prompts)
        self.batch = batch
        capacity = max(len(p) for p in prompts) + max_new_tokens + gamma_max
        self.target = model.new_cache(batch, capacity)
        self.drafts: dict[int, KVCache] = {}
        for k in budgets:
            spec = (SpeculativeConfig(gamma_max, sinks, window) if sinks is not None and window is not None
                    else SpeculativeConfig.with_budget(gamma_max, k))
            self.drafts[spec.budget] = self.target.draft_view(spec.streaming())
        self.clipped = clip_callback(on_tokens, max_new_tokens, batch)
        start = clock()
        prefill = Prefill([(model, self.target)], prompts, params, rng)
        self.pending = prefill.run(self.clipped)
        self.out = prefill.emitted
        self.length = self.target.lengths()           # tokens in the cache; pending is next
        self.prefill_seconds = clock() - start
        self.before = sum(min(len(t), max_new_tokens) for t in self.out)
        self.live = np.arange(batch)                  # the sequences still in the caches, in their order
        self.accepted_by = np.zeros(batch, np.int64)  # per sequence: drafts accepted, drafts judged
        self.trials_by = np.zeros(batch, np.int64)
        self.rounds = self.row_rounds = self.steps = 0
        self.draft_seconds = self.verify_seconds = self.step_seconds = 0.0
        self.schedule: list[list] = []                # [label, rounds or steps] in order
        self.modes: dict = {}                         # label -> what that mode cost and accepted

    def remaining(self) -> np.ndarray:
        return np.array([self.max_new_tokens - len(self.out[b]) for b in self.live], np.int64)

    def leave(self) -> bool:
        """Finished sequences leave the batch (every cache keeps the others); False when none is left."""
        going = self.remaining() > 0
        if not going.all():
            if not going.any():
                return False
            keep = np.flatnonzero(going)
            self.target.keep_sequences(keep)          # (the drafts are views of it)
            self.live, self.pending, self.length = self.live[keep], self.pending[keep], self.length[keep]
        return True

    def _mode(self, label, gamma: int = 0) -> dict:
        if not self.schedule or self.schedule[-1][0] != label:
            self.schedule.append([label, 0])
        self.schedule[-1][1] += 1
        return self.modes.setdefault(label, {"rows": 0, "tokens": 0, "seconds": 0.0, "draft_seconds": 0.0,
                                             "verify_seconds": 0.0, "accepted": np.zeros(max(gamma, 1)),
                                             "judged": np.zeros(max(gamma, 1))})

    def _emit(self, new_by_row: list[list[int]]) -> int:
        new_tokens: list[list[int]] = [[] for _ in range(self.batch)]
        for i, b in enumerate(self.live):
            new_tokens[b] = new_by_row[i]
            self.out[b].extend(new_by_row[i])
        if self.clipped is not None:
            self.clipped(new_tokens)
        return sum(len(t) for t in new_by_row)

    def step(self, label=AR) -> float:
        """One autoregressive step of the live sequences (the drafts are not touched); its seconds."""
        t0 = self.clock()
        p = self.params.distribution(self.model.forward(self.pending[:, None], self.target)[:, -1])
        self.pending = draw(p, self.rng)
        self.length = self.length + 1
        tokens = self._emit([[int(t)] for t in self.pending])
        seconds = self.clock() - t0
        mode = self._mode(label)
        mode["rows"] += len(self.live)
        mode["tokens"] += tokens
        mode["seconds"] += seconds
        self.steps += 1
        self.step_seconds += seconds
        return seconds

    def round(self, gamma: int, budget: int) -> tuple[np.ndarray, float, float]:
        """One speculative round at gamma with the draft of budget K; (accepted per row, draft
        seconds, verify seconds: the verify forward, sampling, acceptance and every cache's settling)."""
        draft_cache = self.drafts[budget]
        t0 = self.clock()
        drafts, q = _draft(self.model, draft_cache, self.pending, gamma, self.params, self.rng)
        t1 = self.clock()
        n, emitted = _verify_and_settle(self.model, self.target, self.pending, drafts, q, self.length,
                                        self.params, self.rng)
        t2 = self.clock()
        tokens = self._emit([[int(x) for x in drafts[i, :n[i]]] + [int(emitted[i])] for i in range(len(self.live))])
        self.accepted_by[self.live] += n
        self.trials_by[self.live] += n + (n < gamma)
        mode = self._mode(gamma, gamma)
        mode["rows"] += len(self.live)
        mode["tokens"] += tokens
        mode["seconds"] += t2 - t0
        mode["draft_seconds"] += t1 - t0
        mode["verify_seconds"] += t2 - t1
        position = np.arange(gamma)
        mode["accepted"] += (position[None] < n[:, None]).sum(axis=0)
        mode["judged"] += (position[None] <= n[:, None]).sum(axis=0)
        self.pending = emitted
        self.length = self.length + 1 + n
        self.rounds += 1
        self.row_rounds += len(self.live)
        self.draft_seconds += t1 - t0
        self.verify_seconds += t2 - t1
        return n, t1 - t0, t2 - t1

    def result(self, decode_seconds: float, extra: dict) -> GenerationResult:
        accepted, trials = int(self.accepted_by.sum()), int(self.trials_by.sum())
        alpha_by = [float(a / t) if t else float("nan") for a, t in zip(self.accepted_by, self.trials_by)]
        modes = {str(label): {key: (value.tolist() if isinstance(value, np.ndarray) else value)
                              for key, value in mode.items()} for label, mode in self.modes.items()}
        extra = {"rounds": self.rounds, "accepted": accepted, "alpha": accepted / trials if trials else float("nan"),
                 "alpha_by_sequence": alpha_by, "row_rounds": self.row_rounds, "steps": self.steps,
                 "draft_seconds": self.draft_seconds, "verify_seconds": self.verify_seconds,
                 "step_seconds": self.step_seconds, "schedule": [tuple(s) for s in self.schedule],
                 "modes": modes, **extra}
        max_new = self.max_new_tokens
        return GenerationResult([t[:max_new] for t in self.out], self.prefill_seconds, decode_seconds,
                                self.rounds + self.steps,
                                decoded=sum(min(len(t), max_new) for t in self.out) - self.before, extra=extra)


class _Controller:
    """Running estimates of `magicdec_generate` at its budget K, and the re-planning rule.

    Acceptance: per sequence b and position j of a round (the j-th draft, judged only when the
    drafts before it were kept), counts acc[b, j] of kept drafts and judged[b, j] of judged ones,
    multiplied by `decay` at each round of b.  alpha_b = (sum_j acc + w0 * pilot_b) / (sum_j judged
    + w0) with w0 = prior_weight, and the conditional acceptance at j is shrunk towards it:
    a[b, j] = (acc[b, j] + W * alpha_b) / (judged[b, j] + W), W = POSITION_WEIGHT.  Times, per
    sequence in the step (a round's rows shrink as sequences finish): one plain step, one draft
    forward and one verify (with its settling) by gamma, running means with weight `time_weight`.
    The gammas are ranked by `analytic.choose` over the tokens the live sequences still need, with
    those a[b, j] and `times()` (a verify not yet timed: `StepTimes.verify_at`).
    """

    POSITION_WEIGHT = 4.0

    def __init__(self, batch: int, gammas: list[int], budget: int, prior: np.ndarray, adapt: AdaptConfig,
                 t_step: float, t_draft: dict[int, float], t_verify: dict[int, float]) -> None:
        self.gammas, self.budget, self.adapt = gammas, budget, adapt
        self.prior = np.asarray(prior, np.float64)
        self.acc = np.zeros((batch, gammas[-1]))
        self.judged = np.zeros((batch, gammas[-1]))
        self.t_step, self.t_draft, self.t_verify = t_step, dict(t_draft), dict(t_verify)

    def observe(self, rows: np.ndarray, gamma: int, n: np.ndarray) -> None:
        self.acc[rows] *= self.adapt.decay
        self.judged[rows] *= self.adapt.decay
        position = np.arange(gamma)[None]
        self.acc[rows, :gamma] += position < n[:, None]
        self.judged[rows, :gamma] += position <= n[:, None]

    def timed(self, kind: str, seconds: float, gamma: int = 0) -> None:
        w = self.adapt.time_weight
        if kind == "step":
            self.t_step = (1 - w) * self.t_step + w * seconds
        else:
            table = self.t_draft if kind == "draft" else self.t_verify
            table[gamma] = (1 - w) * table[gamma] + w * seconds if gamma in table else seconds

    def alphas(self, rows: np.ndarray, gamma: int) -> np.ndarray:
        """(rows, gamma): the estimated acceptance of each row's j-th draft given the ones before."""
        w0 = self.adapt.prior_weight
        judged = self.judged[rows].sum(axis=1) + w0
        pooled = np.where(judged > 0, (self.acc[rows].sum(axis=1) + w0 * self.prior[rows]) / np.maximum(judged, 1e-300),
                          self.prior[rows])
        w = self.POSITION_WEIGHT
        return (self.acc[rows, :gamma] + w * pooled[:, None]) / (self.judged[rows, :gamma] + w)

    def times(self) -> analytic.StepTimes:
        """The running times as the analytic model takes them: a gamma's draft forward where one was
        timed, else the cheapest timed one."""
        return analytic.StepTimes(self.t_step, dict(self.t_verify), {self.budget: min(self.t_draft.values())},
                                  {(g, self.budget): t for g, t in self.t_draft.items()})

    def choose(self, rows: np.ndarray, remaining: np.ndarray, gammas: Sequence[int] | None = None) -> analytic.Choice:
        """`analytic.choose` over `gammas` (default all) for the tokens the live sequences `rows`
        still need; a prediction of 1 (nothing to gain) when none needs any."""
        gammas = list(gammas or self.gammas)
        going = remaining > 0
        if not going.any():
            return analytic.Choice(gammas[0], self.budget, float("nan"), 1.0)
        return analytic.choose(self.times(), {self.budget: self.alphas(rows[going], max(gammas))},
                               remaining=remaining[going], gammas=gammas)

    def predict(self, rows: np.ndarray, remaining: np.ndarray, gamma: int) -> float:
        return self.choose(rows, remaining, [gamma]).predicted

    def best(self, rows: np.ndarray, remaining: np.ndarray) -> tuple[int, float]:
        choice = self.choose(rows, remaining)
        return choice.gamma, choice.predicted

    def ceiling(self) -> tuple[int, float]:
        """(gamma, bound): the largest speedup any gamma could give with every draft accepted
        (`analytic.choose` at alpha = 1: (gamma + 1) / round cost); no prediction exceeds it (a
        sequence gains at most gamma + 1 tokens a round), and it needs no acceptance."""
        choice = analytic.choose(self.times(), {self.budget: 1.0}, gammas=self.gammas)
        return choice.gamma, choice.predicted

    def decide(self, mode: int, rows: np.ndarray, remaining: np.ndarray) -> int:
        """The mode for the next rounds, with hysteresis (AdaptConfig)."""
        h = self.adapt.hysteresis
        if mode == AR and self.ceiling()[1] <= 1.0 + h:
            return AR           # no gamma could pass the threshold, whatever the acceptance
        gamma, speedup = self.best(rows, remaining)
        if mode == AR:
            return gamma if speedup > 1.0 + h else AR
        if speedup < 1.0 - h:
            return AR
        if gamma != mode and speedup > self.predict(rows, remaining, mode) * (1.0 + h):
            return gamma
        return mode


def _choices(gammas: Sequence[int], budgets: Sequence[int], where: str) -> tuple[list[int], list[int]]:
    try:
        gs, ks = sorted({int(g) for g in gammas}), sorted({int(k) for k in budgets})
        exact = all(int(x) == x for x in (*gammas, *budgets))
    except (TypeError, ValueError):
        gs, ks, exact = [], [], False
    if not exact or not gs or gs[0] < 1 or not ks or ks[0] < 2:
        raise ArgumentError(f"{where}: need gammas >= 1 and budgets >= 2 (integers, at least one each), "
                            f"got {list(gammas)!r}, {list(budgets)!r}")
    return gs, ks


@dataclass(frozen=True)
class _Plan:
    """What the pilot chose: the first choice (declined or not) and why, the controller that goes on
    re-planning, each measured budget's acceptance per sequence, the pilot's modes and its seconds."""

    choice: analytic.Choice
    reason: str
    control: _Controller
    alphas: dict[int, np.ndarray]
    schedule: list[tuple]
    seconds: float


def _plan(run: _Decoding, gammas: list[int], budgets: list[int], settings: AdaptConfig, pilot_rounds: int,
          start: float) -> _Plan | None:
    """The planning of `magicdec_generate` on the decode's first tokens (all of them output); None
    when every sequence had its tokens first.  A plain step; `pilot_rounds` rounds of the pilot
    gamma (the largest gamma <= 3) with the smallest budget's draft; two plain steps (T_T).  If no
    gamma could pay even with every draft accepted (`_Controller.ceiling`: a draft over a larger
    budget costs no less), it declines there.  Otherwise the other budgets' pilot rounds, a
    provisional K (the best at the pilot gamma), the sweep (one round of every other gamma with it,
    unless no gamma is predicted above 1), and K fixed by the predictions with the measured times."""
    batch, clock = run.batch, run.clock
    pilot_gamma = max([g for g in gammas if g <= 3] or gammas[:1])
    kept = {k: np.zeros(batch) for k in budgets}
    judged = {k: np.zeros(batch) for k in budgets}
    t_probe: dict[int, list[float]] = {}
    pilot_verify: list[float] = []
    observed: list[tuple[int, np.ndarray, int, np.ndarray]] = []

    def plain_step() -> float | None:
        if not run.leave():
            return None
        rows = run.live.copy()
        return run.step("pilot") / len(rows)

    def pilot(k: int) -> bool:
        """`pilot_rounds` rounds of the pilot gamma with budget k's draft; False if none is left."""
        for _ in range(pilot_rounds):
            if not run.leave():
                return False
            rows = run.live.copy()
            n, t_draft, t_verify = run.round(pilot_gamma, k)
            kept[k][rows] += n
            judged[k][rows] += np.minimum(n + 1, pilot_gamma)
            t_probe.setdefault(k, []).append(t_draft / pilot_gamma / len(rows))
            pilot_verify.append(t_verify / len(rows))
            observed.append((k, rows, pilot_gamma, n))
        return True

    def alpha(k: int) -> np.ndarray:
        # per sequence, shrunk towards the batch's rate for that K (a round judges 1 .. gamma drafts)
        pooled = kept[k].sum() / max(judged[k].sum(), 1.0)
        return (kept[k] + 2.0 * pooled) / (judged[k] + 2.0)

    def controller(k: int, t_draft: dict[int, float], t_verify: dict[int, float]) -> _Controller:
        return _Controller(batch, gammas, k, alpha(k), settings, t_step, t_draft, t_verify)

    first = plain_step()
    if first is None or not pilot(budgets[0]):
        return None
    # T_T from two plain steps after the round: the first steps after the prefill meet cold caches
    # (B = 8, S = 1K, one thread: 4.9, 3.6, 3.0, 2.5 ms for the first four, then 2.2-2.4)
    steps = [plain_step(), plain_step()]
    if None in steps or not run.leave():
        return None
    t_step = min(steps)
    verify = {pilot_gamma: float(np.mean(pilot_verify))}
    cheapest = controller(budgets[0], {g: float(np.mean(t_probe[budgets[0]])) for g in gammas}, verify)
    gamma, bound = cheapest.ceiling()
    if bound < 1.0:
        # declined at once: the other budgets' rounds and the sweep could only cost
        budget, predicted, control = budgets[0], bound, cheapest
        reason = (f"declined: autoregressive decoding is predicted faster (best predicted speedup at most "
                  f"{bound:.2f}, every draft accepted, at gamma {gamma}, K {budget}: the draft is too dear)")
    else:
        for k in budgets[1:]:
            if not pilot(k):
                return None
        if not run.leave():
            return None
        t_draft_k = {k: float(np.mean(v)) for k, v in t_probe.items()}
        verify = {pilot_gamma: float(np.mean(pilot_verify))}
        # a provisional K, the best at the pilot gamma (all measured); declined where no gamma is
        # predicted above 1 with the verifies not yet timed scaled from the pilot gamma's
        rows, remaining = run.live, run.remaining()
        provisional = analytic.choose(analytic.StepTimes(t_step, verify, t_draft_k), {k: alpha(k)[rows] for k in budgets},
                                      remaining=remaining, gammas=[pilot_gamma]).budget
        measured_draft = {pilot_gamma: t_draft_k[provisional]}
        gamma, predicted = controller(provisional, {g: t_draft_k[provisional] for g in gammas},
                                      verify).best(rows, remaining)
        budget = provisional
        if predicted >= 1.0:
            # the sweep: one round of each other gamma with the provisional K
            for g in gammas:
                if g == pilot_gamma:
                    continue
                if not run.leave():
                    return None
                rows = run.live.copy()
                n, t_draft, t_verify = run.round(g, provisional)
                measured_draft[g], verify[g] = t_draft / g / len(rows), t_verify / len(rows)
                observed.append((provisional, rows, g, n))
            if not run.leave():
                return None
            # K fixed from here: draft forwards scale with K as the pilot's did
            scale = {k: t_draft_k[k] / t_draft_k[provisional] for k in budgets}
            swept = analytic.StepTimes(t_step, verify, {k: min(measured_draft.values()) * scale[k] for k in budgets},
                                       {(g, k): t * scale[k] for k in budgets for g, t in measured_draft.items()})
            best = analytic.choose(swept, {k: alpha(k)[run.live] for k in budgets}, remaining=run.remaining(),
                                   gammas=gammas)
            budget, gamma, predicted = best.budget, best.gamma, best.predicted
        scale = t_draft_k[budget] / t_draft_k[provisional]
        control = controller(budget, {g: measured_draft.get(g, measured_draft[pilot_gamma]) * scale
                                      for g in gammas}, verify)
        reason = ""
    run.drafts = {budget: run.drafts[budget]}
    for k, rows, g, n in observed:
        if k == budget:
            control.observe(rows, g, n)
    choice = analytic.Choice(gamma, budget, float(alpha(budget).mean()), predicted)
    schedule = [tuple(e) for e in run.schedule]
    run.schedule = []
    return _Plan(choice, reason or choice.reason(), control, {k: alpha(k) for k in t_probe}, schedule,
                 clock() - start)


#: The draft lengths magicdec_generate chooses among unless told otherwise.
MAGICDEC_GAMMAS = (1, 2, 3, 4, 5, 6)


def schedule_text(schedule: Sequence[Sequence[int | str]]) -> str:
    """A magicdec_generate schedule ([(label, count), ...], its extra's "schedule" or
    "plan_schedule") as "pilotx1 3x2 plainx5": a gamma's rounds, plain steps ("pilot": the pilot's
    plain steps)."""
    return " ".join(f"{'plain' if label == 0 else label}x{count}" for label, count in schedule)


def magicdec_generate(model: CausalLM, prompts: Sequence[Sequence[int]] | np.ndarray, max_new_tokens: int, *,
                      budgets: Sequence[int] = (64, 128, 256, 512), gammas: Sequence[int] = MAGICDEC_GAMMAS,
                      params: SamplingParams | None = None, seed: int | np.random.Generator | None = 0,
                      on_tokens: TokenCallback | None = None, clock: Clock = time.perf_counter,
                      pilot_rounds: int = 1, adapt: AdaptConfig | None = AdaptConfig()) -> GenerationResult:
    """MagicDec decoding that plans on its own first tokens and re-plans while it runs (spec/llm.md,
    "Adapting while decoding").  The prompts are fed once, to the target; every budget's draft takes
    the target's entries.  The pilot (`_plan`): a plain step, `pilot_rounds` rounds of the pilot
    gamma (the largest gamma <= 3) with the smallest budget's draft, two plain steps (T_T); declined
    there when no gamma could pay even with every draft accepted; otherwise the pilot rounds of the
    other budgets (each sequence's acceptance per K, the draft times), then one round of every
    other gamma (timing the verify of each); K is then fixed and the others' caches dropped, and
    decoding goes on with the predicted best gamma, or plain steps where no gamma is predicted
    above 1 (declined).  With `adapt` (None: keep the first choice), every `adapt.every` rounds the
    running estimates re-rank the gammas and plain steps, with hysteresis; a probe round is skipped
    while no gamma could pay.  Every token emitted has the target's distribution whatever the
    switches (greedy: the autoregressive tokens).  The result's `extra` has `declined`, `reason`,
    `predicted`, `plan_seconds` (the pilot and sweep, counted in the decode time), `gamma` (the
    first choice), `K`, `alpha_pilot` (the chosen K's mean), `alpha_pilot_by_K` (per measured
    budget, per sequence), `plan_schedule` and `schedule` (before and after the choice: [mode,
    rounds or steps], "pilot" the plain step, 0 plain steps, else gamma), `switches`,
    `gammas_used` and `modes` (per mode: rows, tokens, seconds, acceptance by position)."""
    params = params or SamplingParams()
    gammas, budgets = _choices(gammas, budgets, "magicdec")
    if not isinstance(pilot_rounds, (int, np.integer)) or isinstance(pilot_rounds, bool) or pilot_rounds < 1:
        raise ArgumentError(f"magicdec: pilot_rounds must be a positive integer, got {pilot_rounds!r}")
    if adapt is not None and not isinstance(adapt, AdaptConfig):
        raise ArgumentError(f"magicdec: adapt must be an AdaptConfig or None, got {type(adapt).__name__}")
    config = model.config
    prompts = check_prompts(prompts, max_new_tokens, config.max_position_embeddings, config.vocab_size,
                            extra=gammas[-1])
    run = _Decoding(model, prompts, max_new_tokens, budgets, gammas[-1], params, make_rng(seed), clock, on_tokens)
    start = clock()
    plan = _plan(run, gammas, budgets, adapt or AdaptConfig(), int(pilot_rounds), start)
    if plan is None:   # every sequence had its tokens before the plan was made
        plan_schedule, run.schedule = [tuple(e) for e in run.schedule], []
        return run.result(clock() - start, {"declined": True, "reason": "every sequence had its tokens while planning",
                                            "predicted": float("nan"), "plan_seconds": clock() - start, "gamma": 0,
                                            "K": budgets[0], "alpha_pilot": float("nan"), "alpha_pilot_by_K": {},
                                            "switches": 0, "plan_schedule": plan_schedule,
                                            "gammas_used": sorted({label for label, _ in plan_schedule
                                                                   if label not in ("pilot", AR)})})
    choice, control, budget = plan.choice, plan.control, plan.choice.budget
    mode = AR if choice.declined else choice.gamma
    since = plain = switches = rounds = 0
    while run.leave():
        rows = run.live.copy()
        probe = mode == AR and adapt is not None and adapt.probe_every and plain >= adapt.probe_every
        if probe and control.ceiling()[1] <= 1.0 + adapt.hysteresis:
            probe, plain = False, 0     # no round could pay whatever it accepted: no probe until the times change
        if mode == AR and not probe:
            control.timed("step", run.step() / len(rows))
            plain += 1
            since += 1
            if adapt is None or since < adapt.every:
                continue
        elif mode != AR and adapt is not None and adapt.step_every and rounds >= adapt.step_every:
            # a reference step: T_T is otherwise measured only while plain steps run
            control.timed("step", run.step() / len(rows))
            rounds = 0
            continue
        else:
            g = mode if mode != AR else control.best(rows, run.remaining())[0]
            rounds += 1
            n, t_draft, t_verify = run.round(g, budget)
            control.observe(rows, g, n)
            control.timed("draft", t_draft / g / len(rows), g)
            control.timed("verify", t_verify / len(rows), g)
            plain = 0
            since += 1
            if adapt is None or (mode != AR and since < adapt.every):
                continue
        since = 0
        if run.leave():
            new = control.decide(mode, run.live, run.remaining())
            switches += new != mode
            mode = new
    gammas_used = sorted({label for label, _ in plan.schedule + run.schedule if label not in ("pilot", AR)})
    return run.result(clock() - start, {"declined": choice.declined, "reason": plan.reason,
                                        "predicted": choice.predicted, "plan_seconds": plan.seconds,
                                        "gamma": choice.gamma, "K": budget, "alpha_pilot": choice.alpha,
                                        "alpha_pilot_by_K": {k: a.tolist() for k, a in plan.alphas.items()},
                                        "switches": switches, "gammas_used": gammas_used,
                                        "plan_schedule": plan.schedule})
