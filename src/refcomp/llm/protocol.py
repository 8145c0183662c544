"""The contract between a causal language model and the decoders that drive it.

A model appends tokens to a cache and returns their logits.  Positions are absolute: the token
appended at cache position p gets rotary position p, also in a streaming cache that has evicted
older entries.  Sequences of one batch may have different lengths (after per-sequence acceptance
in speculative decoding); `forward` appends T tokens to every sequence at its own length.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol, runtime_checkable

import numpy as np

from ..errors import ArgumentError, RefcompError


class CheckpointError(RefcompError):
    """A checkpoint or its config cannot be loaded: a missing or mis-shaped tensor, an unknown architecture."""


#: config.json's hidden_act values that name the SiLU the models compute (transformers maps both to it).
SUPPORTED_ACTIVATIONS = ("silu", "swish")


@dataclass(frozen=True)
class LlamaConfig:
    """The hyperparameters of a Llama-architecture model, named as in Hugging Face's `config.json`."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    max_position_embeddings: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False
    head_dim: int | None = None

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                     "num_attention_heads", "num_key_value_heads", "max_position_embeddings"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise CheckpointError(f"config: {name} must be a positive integer, got {value!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise CheckpointError(
                f"config: num_attention_heads ({self.num_attention_heads}) is not a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})")
        if self.head_dim is None:
            if self.hidden_size % self.num_attention_heads:
                raise CheckpointError(
                    f"config: hidden_size ({self.hidden_size}) is not a multiple of "
                    f"num_attention_heads ({self.num_attention_heads}) and no head_dim is given")
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)

    @property
    def dim_head(self) -> int:
        """head_dim, always set after construction."""
        assert self.head_dim is not None
        return self.head_dim

    @classmethod
    def from_hf(cls, config: Mapping[str, Any]) -> "LlamaConfig":
        """Read a Hugging Face `config.json` mapping; anything but a Llama architecture is refused, and so
        are the options the models do not compute (rope_scaling, another hidden_act, biases)."""
        architectures = config.get("architectures") or []
        model_type = config.get("model_type")
        if model_type != "llama" and "LlamaForCausalLM" not in architectures:
            raise CheckpointError(
                f"config.json: unsupported architecture {architectures or model_type!r}; "
                "refcomp.llm loads LlamaForCausalLM checkpoints (model_type 'llama')")
        if config.get("rope_scaling"):
            raise CheckpointError(f"config.json: rope_scaling {config['rope_scaling']!r} is not supported")
        # what the compiled and reference models compute: SiLU gating, no biases; anything else
        # would load (the weights have the same names and shapes) and silently compute another model
        if config.get("hidden_act", "silu") not in SUPPORTED_ACTIVATIONS:
            raise CheckpointError(f"config.json: hidden_act {config['hidden_act']!r} is not supported; "
                                  f"refcomp.llm computes the MLP with silu")
        for bias in ("attention_bias", "mlp_bias"):
            if config.get(bias):
                raise CheckpointError(f"config.json: {bias} is set; refcomp.llm's Llama has no bias terms")
        missing = [name for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                     "num_attention_heads") if name not in config]
        if missing:
            raise CheckpointError(f"config.json: missing {', '.join(missing)}")
        return cls(
            vocab_size=config["vocab_size"], hidden_size=config["hidden_size"],
            intermediate_size=config["intermediate_size"], num_hidden_layers=config["num_hidden_layers"],
            num_attention_heads=config["num_attention_heads"],
            num_key_value_heads=config.get("num_key_value_heads") or config["num_attention_heads"],
            max_position_embeddings=config.get("max_position_embeddings", 2048),
            rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
            rope_theta=float(config.get("rope_theta", 10000.0)),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            head_dim=config.get("head_dim"))

    def to_hf(self) -> dict[str, Any]:
        """The `config.json` mapping transformers' LlamaConfig reads."""
        return {
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "vocab_size": self.vocab_size, "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size, "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads, "num_key_value_heads": self.num_key_value_heads,
            "max_position_embeddings": self.max_position_embeddings, "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta, "tie_word_embeddings": self.tie_word_embeddings,
            "head_dim": self.dim_head, "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        }


@dataclass(frozen=True)
class StreamingBudget:
    """A StreamingLLM cache: the first `sinks` tokens plus the most recent `window` tokens.

    `slack` extra slots keep the entries a rollback of up to `slack` tokens must restore, so a
    draft that wrote gamma tokens and had some rejected returns exactly to its earlier state.
    """

    sinks: int
    window: int
    slack: int = 0

    @property
    def budget(self) -> int:
        """K: the tokens attention reads per step (sinks + window)."""
        return self.sinks + self.window


def kept_rows_positions(starts: np.ndarray, uptos: np.ndarray, sinks: int,
                        ring: int | None) -> tuple[np.ndarray, np.ndarray]:
    """The (sequence, position) pairs, sequence by sequence, of positions starts[b] .. uptos[b] - 1
    that a cache keeping the first `sinks` positions and the last `ring` holds (ring None: a full
    cache, all of them): what `extend_from` copies, for the whole batch at once."""
    starts, uptos = np.asarray(starts, np.int64), np.asarray(uptos, np.int64)
    count = np.maximum(uptos - starts, 0)
    rows = np.repeat(np.arange(count.size, dtype=np.int64), count)
    first = np.cumsum(count) - count
    positions = starts[rows] + (np.arange(rows.size, dtype=np.int64) - first[rows])
    if ring is not None:
        keep = (positions < sinks) | (positions >= uptos[rows] - ring)
        rows, positions = rows[keep], positions[keep]
    return rows, positions


def check_sequence_rows(rows: np.ndarray, batch: int, what: str) -> np.ndarray:
    """`rows` as strictly increasing int64 indices into a batch of `batch`, at least one (the
    sequences `keep_sequences` keeps); else an ArgumentError naming `what`."""
    rows = np.asarray(rows)
    if (rows.ndim != 1 or rows.size == 0 or rows.dtype.kind not in "iu" or rows.min() < 0 or rows.max() >= batch
            or np.any(np.diff(rows) <= 0)):
        raise ArgumentError(f"{what}: rows must be increasing indices into the batch of {batch}, "
                            f"at least one, got {rows.tolist()}")
    return rows.astype(np.int64)


class TargetView:
    """What both caches' draft views share (`draft_view`): a view holds no entries or lengths of
    its own, so rolling back and keeping sequences act on its `target`, and it can take no entries
    by copy (it already reads every entry the target holds)."""

    target: Any

    @staticmethod
    def check_budget(budget: Any, what: str) -> None:
        if not isinstance(budget, StreamingBudget) or budget.sinks < 0 or budget.window < 1:
            raise ArgumentError(f"{what}: the budget needs sinks >= 0 and window >= 1, got {budget!r}")

    def rollback(self, keep: np.ndarray) -> None:
        self.target.rollback(keep)

    def keep_sequences(self, rows: np.ndarray) -> None:
        self.target.keep_sequences(rows)

    def extend_from(self, source: Any, upto: np.ndarray) -> None:
        """Nothing to copy from the view's own target up to its length; anything else is refused."""
        upto = np.asarray(upto)
        if source is not self.target or upto.shape != (self.target.batch,) or np.any(upto != self.target.lengths()):
            raise ArgumentError("extend_from: a draft view holds exactly its target's entries; it cannot take "
                                "other entries")


@runtime_checkable
class KVCache(Protocol):
    """Keys and values of every layer for a batch of sequences."""

    @property
    def batch(self) -> int: ...

    def lengths(self) -> np.ndarray:
        """(batch,) int64: tokens appended so far per sequence (the next token's position)."""

    def rollback(self, keep: np.ndarray) -> None:
        """Forget, per sequence b, every token at position >= keep[b] (keep[b] <= lengths()[b])."""

    def nbytes_per_token(self) -> int:
        """Bytes of keys and values one token occupies over all layers."""

    def extend_from(self, source: "KVCache", upto: np.ndarray) -> None:
        """Append to sequence b the entries the full cache `source` (same model) holds at positions
        lengths()[b] .. upto[b] - 1 (a streaming cache keeps those it keeps), copied."""

    def keep_sequences(self, rows: np.ndarray) -> None:
        """Keep only sequences `rows` (increasing indices), in that order: the batch shrinks."""

    def draft_view(self, budget: StreamingBudget) -> "KVCache":
        """This full cache read as a streaming one of `budget` (attention sees the sinks and the
        last `budget.window` positions), sharing its entries and lengths: MagicDec's draft, which
        appends its drafts here; rolling this cache back drops them."""


@runtime_checkable
class CausalLM(Protocol):
    """A decoder-only language model over a KV cache."""

    config: LlamaConfig

    def new_cache(self, batch: int, max_tokens: int, *, streaming: StreamingBudget | None = None) -> KVCache:
        """An empty cache for `batch` sequences of up to `max_tokens` positions each (a full cache),
        or one that keeps only `streaming`'s sinks and window (positions still go up to max_tokens)."""

    def forward(self, tokens: np.ndarray, cache: KVCache) -> np.ndarray:
        """Append tokens (int64, (batch, T)) to every sequence at its current length and return the
        logits (float32, (batch, T, vocab_size)); position lengths()[b] + t for token t of sequence b."""
