"""Turning logits into tokens: greedy, temperature, top-k and top-p (nucleus) sampling, batched.

`SamplingParams.distribution(logits)` gives, per row, the probabilities the next token is drawn
from (float64, rows sum to 1): greedy is the one-hot of the arg-max (lowest index among ties);
otherwise softmax(logits / temperature), restricted to the `top_k` most likely tokens, then to the
smallest set of most likely tokens whose mass reaches `top_p`, renormalised.  `draw(probs, rng)`
draws one token per row by inverting the cumulative distribution at one uniform number per row, so a
seeded `np.random.Generator` gives the same tokens on every run.  Speculative decoding compares the
draft's and the target's distributions from the same `SamplingParams`, which is what makes its
output distribution the target's.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ArgumentError


@dataclass(frozen=True)
class SamplingParams:
    """temperature 0 means greedy; top_k 0 means no top-k cut; top_p 1.0 means no nucleus cut."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if not np.isfinite(self.temperature) or self.temperature < 0:
            raise ArgumentError(f"sampling: temperature must be >= 0 (0: greedy), got {self.temperature!r}")
        if not isinstance(self.top_k, (int, np.integer)) or isinstance(self.top_k, bool) or self.top_k < 0:
            raise ArgumentError(f"sampling: top_k must be an integer >= 0 (0: off), got {self.top_k!r}")
        if not (0.0 < self.top_p <= 1.0):
            raise ArgumentError(f"sampling: top_p must lie in (0, 1], got {self.top_p!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def distribution(self, logits: np.ndarray) -> np.ndarray:
        """(..., V) logits -> (..., V) float64 probabilities (see the module doc)."""
        logits = np.asarray(logits, dtype=np.float64)
        if logits.ndim == 0 or logits.shape[-1] == 0:
            raise ArgumentError(f"sampling: logits must have a vocabulary axis, got shape {logits.shape}")
        if np.isnan(logits).any():
            # argmax would pick the first NaN and a softmax would be all NaN: no token to draw
            row = tuple(int(i) for i in np.argwhere(np.isnan(logits))[0][:-1])
            raise ArgumentError(f"sampling: the logits of row {row} hold NaN; the model's output is not a "
                                f"distribution (a NaN or inf weight or activation)")
        if self.greedy:
            probs = np.zeros_like(logits)
            np.put_along_axis(probs, np.argmax(logits, axis=-1)[..., None], 1.0, axis=-1)
            return probs
        z = logits / self.temperature
        z = z - z.max(axis=-1, keepdims=True)
        probs = np.exp(z)
        probs /= probs.sum(axis=-1, keepdims=True)
        vocab = probs.shape[-1]
        if (self.top_k and self.top_k < vocab) or self.top_p < 1.0:
            # descending by probability; ties keep the lower token id first (stable sort of -p)
            order = np.argsort(-probs, axis=-1, kind="stable")
            sorted_p = np.take_along_axis(probs, order, axis=-1)
            keep = np.ones_like(sorted_p, dtype=bool)
            if self.top_k and self.top_k < vocab:
                keep[..., self.top_k:] = False
            if self.top_p < 1.0:
                kept_p = np.where(keep, sorted_p, 0.0)
                before = np.cumsum(kept_p, axis=-1) - kept_p     # mass of the tokens ranked above
                keep &= before < self.top_p * kept_p.sum(axis=-1, keepdims=True)
            mask = np.zeros_like(keep)
            np.put_along_axis(mask, order, keep, axis=-1)
            probs = np.where(mask, probs, 0.0)
            probs /= probs.sum(axis=-1, keepdims=True)
        return probs


def draw(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One token per row of (..., V) probabilities, int64 (...): the inverse CDF at a uniform draw."""
    probs = np.asarray(probs, dtype=np.float64)
    cdf = np.cumsum(probs, axis=-1)
    u = rng.random(probs.shape[:-1])[..., None] * cdf[..., -1:]
    token = np.sum(cdf <= u, axis=-1)
    # never land on a zero-probability token through rounding at the top end
    token = np.minimum(token, probs.shape[-1] - 1)
    bad = np.take_along_axis(probs, token[..., None], axis=-1)[..., 0] <= 0
    if np.any(bad):
        token = np.where(bad, _last_positive(probs), token)
    return token.astype(np.int64)


def _last_positive(probs: np.ndarray) -> np.ndarray:
    positive = probs > 0
    return probs.shape[-1] - 1 - np.argmax(positive[..., ::-1], axis=-1)


def sample(logits: np.ndarray, params: SamplingParams, rng: np.random.Generator | None = None) -> np.ndarray:
    """The next token of each row of (..., V) logits; greedy needs no generator."""
    if params.greedy:
        return np.argmax(np.asarray(logits), axis=-1).astype(np.int64)
    if rng is None:
        raise ArgumentError("sampling: a np.random.Generator is needed when temperature > 0")
    return draw(params.distribution(logits), rng)
