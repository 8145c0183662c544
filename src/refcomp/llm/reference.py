"""ReferenceLlama: a plain numpy Llama-architecture CausalLM, the oracle and the fallback model.

The computation is Hugging Face's LlamaForCausalLM written out in numpy: RMSNorm, rotary position
embeddings at absolute positions (the "rotate half" layout), grouped-query attention, a SwiGLU MLP
and a tied or untied head.  It runs in float32 by default, or in float64 (`dtype=np.float64`) when
tests need logits that do not depend on how many tokens one forward carries.

Caches (`ReferenceCache`) hold keys and values per layer as (batch, kv_heads, slots, head_dim) with
the position each slot holds (-1: empty).  A full cache puts position p in slot p.  A streaming
cache (StreamingLLM) keeps the first `sinks` positions in their own slots and the later ones in a
ring of `window + slack` slots; a query at position q attends to the keys at positions j <= q with
j < sinks or j > q - window, i.e. at most sinks + window keys, whatever the ring holds beyond that.
The `slack` slots keep the entries a rollback of up to `slack` tokens needs, so a streaming cache
rolled back by r <= slack tokens computes exactly what it computed before those tokens came.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ..errors import ArgumentError
from .protocol import CheckpointError, LlamaConfig, StreamingBudget, TargetView, check_sequence_rows, kept_rows_positions

#: Tokens one attention call processes at most, and the most attention scores (batch x heads x
#: tokens x keys) it holds at once; longer forwards are split (the same results, bounded memory).
CHUNK = 256
SCORES = 1 << 25


def hf_weight_shapes(config: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor a Hugging Face LlamaForCausalLM checkpoint holds, by name, with its shape."""
    h, d, inter = config.hidden_size, config.dim_head, config.intermediate_size
    q_out, kv_out = config.num_attention_heads * d, config.num_key_value_heads * d
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (config.vocab_size, h)}
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (q_out, h),
            p + "self_attn.k_proj.weight": (kv_out, h),
            p + "self_attn.v_proj.weight": (kv_out, h),
            p + "self_attn.o_proj.weight": (h, q_out),
            p + "post_attention_layernorm.weight": (h,),
            p + "mlp.gate_proj.weight": (inter, h),
            p + "mlp.up_proj.weight": (inter, h),
            p + "mlp.down_proj.weight": (h, inter),
        })
    shapes["model.norm.weight"] = (h,)
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, h)
    return shapes


def check_weights(config: LlamaConfig, weights: Mapping[str, np.ndarray]) -> None:
    """Raise CheckpointError naming the first missing, mis-shaped or unexpected tensor."""
    expected = hf_weight_shapes(config)
    for name, shape in expected.items():
        if name not in weights:
            raise CheckpointError(f"checkpoint: missing tensor {name!r} (expected shape {shape})")
        got = tuple(np.shape(weights[name]))
        if got != shape:
            raise CheckpointError(f"checkpoint: tensor {name!r} has shape {got}, expected {shape}")
    allowed_extra = {"lm_head.weight"}  # a tied checkpoint may still carry its head
    for name in weights:
        if name not in expected and name not in allowed_extra and not name.endswith("rotary_emb.inv_freq"):
            raise CheckpointError(f"checkpoint: unexpected tensor {name!r} for {config.num_hidden_layers} layers")
    if config.tie_word_embeddings and "lm_head.weight" in weights:
        got = tuple(np.shape(weights["lm_head.weight"]))
        if got != (config.vocab_size, config.hidden_size):
            raise CheckpointError(f"checkpoint: tensor 'lm_head.weight' has shape {got}, "
                                  f"expected {(config.vocab_size, config.hidden_size)}")


class ReferenceCache:
    """Keys and values of every layer for a batch of sequences; full or streaming (see the module doc)."""

    def __init__(self, config: LlamaConfig, batch: int, max_tokens: int,
                 streaming: StreamingBudget | None, dtype: np.dtype) -> None:
        if not isinstance(batch, int) or batch <= 0:
            raise ArgumentError(f"new_cache: batch must be a positive integer, got {batch!r}")
        if not isinstance(max_tokens, int) or max_tokens <= 0:
            raise ArgumentError(f"new_cache: max_tokens must be a positive integer, got {max_tokens!r}")
        if max_tokens > config.max_position_embeddings:
            raise ArgumentError(f"new_cache: max_tokens {max_tokens} exceeds the model's context "
                             f"(max_position_embeddings {config.max_position_embeddings})")
        if streaming is not None:
            if streaming.sinks < 0 or streaming.window <= 0 or streaming.slack < 0:
                raise ArgumentError(f"new_cache: streaming budget needs sinks >= 0, window > 0, slack >= 0, "
                                 f"got {streaming}")
        self.config = config
        self.max_tokens = max_tokens
        self.streaming = streaming
        self.dtype = np.dtype(dtype)
        if streaming is None:
            slots = max_tokens
        else:
            slots = min(max_tokens, streaming.sinks + streaming.window + streaming.slack)
        self.slots = slots
        shape = (batch, config.num_key_value_heads, slots, config.dim_head)
        self.keys = [np.zeros(shape, self.dtype) for _ in range(config.num_hidden_layers)]
        self.values = [np.zeros(shape, self.dtype) for _ in range(config.num_hidden_layers)]
        self.positions = np.full((batch, slots), -1, np.int64)
        self._lengths = np.zeros(batch, np.int64)

    @property
    def batch(self) -> int:
        return int(self._lengths.shape[0])

    def lengths(self) -> np.ndarray:
        return self._lengths.copy()

    def rollback(self, keep: np.ndarray) -> None:
        keep = np.asarray(keep, dtype=np.int64).reshape(-1)
        if keep.shape != (self.batch,):
            raise ArgumentError(f"rollback: keep must have one entry per sequence ({self.batch}), got {keep.shape}")
        if np.any(keep < 0) or np.any(keep > self._lengths):
            raise ArgumentError(f"rollback: keep {keep.tolist()} must lie in [0, lengths {self._lengths.tolist()}]")
        if self.streaming is not None:
            dropped = self._lengths - keep
            if np.any(dropped > self.streaming.slack):
                raise ArgumentError(f"rollback: a streaming cache can undo at most slack = {self.streaming.slack} "
                                 f"tokens, asked to undo {dropped.tolist()}")
        self.positions[self.positions >= keep[:, None]] = -1
        self._lengths = keep.copy()

    def nbytes_per_token(self) -> int:
        c = self.config
        return 2 * c.num_hidden_layers * c.num_key_value_heads * c.dim_head * self.dtype.itemsize

    def extend_from(self, source: "ReferenceCache", upto: np.ndarray) -> None:
        """Append to sequence b the keys and values the full cache `source` (same model) holds at
        positions lengths()[b] .. upto[b] - 1 (a streaming cache keeps only the ones it keeps)."""
        if not isinstance(source, ReferenceCache) or source.streaming is not None:
            raise ArgumentError("extend_from: the source must be a full ReferenceCache")
        if source.config != self.config or source.batch != self.batch:
            raise ArgumentError("extend_from: the source was made for a different model or batch")
        upto = np.asarray(upto)
        if upto.shape != (self.batch,) or not np.issubdtype(upto.dtype, np.integer):
            raise ArgumentError(f"extend_from: upto must be integers of shape ({self.batch},), got {upto.shape}")
        upto = upto.astype(np.int64)
        if np.any(upto < self._lengths) or np.any(upto > source._lengths) or np.any(upto > self.max_tokens):
            raise ArgumentError(f"extend_from: cannot extend lengths {self._lengths.tolist()} to {upto.tolist()} "
                                f"from a source holding {source._lengths.tolist()}")
        sinks = self.streaming.sinks if self.streaming is not None else 0
        ring = None if self.streaming is None else self.slots - sinks
        rows, pos = kept_rows_positions(self._lengths, upto, sinks, ring)
        dst, src = self.slot_of(pos), source.slot_of(pos)
        for li in range(self.config.num_hidden_layers):
            self.keys[li][rows, :, dst] = source.keys[li][rows, :, src]
            self.values[li][rows, :, dst] = source.values[li][rows, :, src]
        self.positions[rows, dst] = pos
        self._lengths = upto.copy()

    def keep_sequences(self, rows: np.ndarray) -> None:
        """Keep only sequences `rows` (increasing indices), in that order."""
        rows = check_sequence_rows(rows, self.batch, "keep_sequences")
        self.keys = [k[rows] for k in self.keys]
        self.values = [v[rows] for v in self.values]
        self.positions, self._lengths = self.positions[rows], self._lengths[rows]

    def draft_view(self, budget: StreamingBudget) -> "ReferenceDraftView":
        """This full cache read as a streaming one of `budget` (MagicDec's draft, no copies)."""
        return ReferenceDraftView(self, budget)

    @property
    def full_layout(self) -> bool:
        """Whether position p is stored in slot p (a full cache, or a draft view of one)."""
        return self.streaming is None

    def slot_of(self, pos: np.ndarray) -> np.ndarray:
        """The slot position(s) `pos` are stored in."""
        if self.streaming is None:
            return pos
        sinks = self.streaming.sinks
        ring = self.slots - sinks
        return np.where(pos < sinks, pos, sinks + (pos - sinks) % max(ring, 1))

    def mask_start(self, start: np.ndarray) -> int:
        """The first key slot attention must mask for queries appended at lengths `start`: in a full
        cache every key before the shortest sequence's length is visible to every new query."""
        return int(start.min()) if self.streaming is None else 0

    def visible(self, key_pos: np.ndarray, query_pos: np.ndarray) -> np.ndarray:
        """(B, T, S) bool: which keys (B, S) positions each query (B, T) attends to."""
        k = key_pos[:, None, :]
        q = query_pos[:, :, None]
        mask = (k >= 0) & (k <= q)
        if self.streaming is not None:
            mask &= (k < self.streaming.sinks) | (k > q - self.streaming.window)
        return mask


class ReferenceDraftView(TargetView, ReferenceCache):
    """A full ReferenceCache read as a streaming one (refcomp.llm.cache.DraftView's reference):
    the target's entries, lengths and layout, attention masked to the budget's sinks and window;
    appending, rolling back and keeping sequences act on the target."""

    def __init__(self, target: ReferenceCache, budget: StreamingBudget) -> None:   # (no super().__init__: no storage of its own)
        if not isinstance(target, ReferenceCache) or target.streaming is not None:
            raise ArgumentError("draft_view: the target must be a full ReferenceCache")
        self.check_budget(budget, "draft_view")
        self.target, self.budget = target, budget
        self.config, self.max_tokens, self.dtype, self.slots = target.config, target.max_tokens, target.dtype, target.slots
        self.streaming = budget   # how it attends; its layout is the target's (full_layout)

    full_layout = True

    def slot_of(self, pos: np.ndarray) -> np.ndarray:
        return pos

    keys = property(lambda self: self.target.keys)
    values = property(lambda self: self.target.values)
    positions = property(lambda self: self.target.positions)

    @property
    def _lengths(self) -> np.ndarray:
        return self.target._lengths

    @_lengths.setter
    def _lengths(self, value: np.ndarray) -> None:
        self.target._lengths = value

    def mask_start(self, start: np.ndarray) -> int:
        return 0   # the window hides keys before any sequence's length

    def visible(self, key_pos: np.ndarray, query_pos: np.ndarray) -> np.ndarray:
        k, q = key_pos[:, None, :], query_pos[:, :, None]
        return (k >= 0) & (k <= q) & ((k < self.budget.sinks) | (k > q - self.budget.window))


class ReferenceLlama:
    """A Llama-architecture CausalLM in numpy (see the module doc)."""

    def __init__(self, config: LlamaConfig, weights: Mapping[str, np.ndarray], *,
                 dtype: type | np.dtype = np.float32) -> None:
        if not isinstance(config, LlamaConfig):
            raise ArgumentError(f"ReferenceLlama: config must be a LlamaConfig, got {type(config).__name__}")
        check_weights(config, weights)
        self.config = config
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise ArgumentError(f"ReferenceLlama: dtype must be float32 or float64, got {self.dtype}")

        def get(name: str) -> np.ndarray:
            return np.ascontiguousarray(np.asarray(weights[name], dtype=self.dtype))

        def linear(name: str) -> np.ndarray:  # stored (out, in); kept as (in, out) for x @ w
            return np.ascontiguousarray(get(name).T)

        self.embed = get("model.embed_tokens.weight")
        self.layers = []
        for i in range(config.num_hidden_layers):
            p = f"model.layers.{i}."
            self.layers.append({
                "ln1": get(p + "input_layernorm.weight"),
                "qkv": np.concatenate([linear(p + "self_attn.q_proj.weight"), linear(p + "self_attn.k_proj.weight"),
                                       linear(p + "self_attn.v_proj.weight")], axis=1),
                "o": linear(p + "self_attn.o_proj.weight"),
                "ln2": get(p + "post_attention_layernorm.weight"),
                "gate_up": np.concatenate([linear(p + "mlp.gate_proj.weight"), linear(p + "mlp.up_proj.weight")],
                                          axis=1),
                "down": linear(p + "mlp.down_proj.weight"),
            })
        self.norm = get("model.norm.weight")
        head = "model.embed_tokens.weight" if config.tie_word_embeddings else "lm_head.weight"
        self.head = linear(head)
        d = config.dim_head
        self.inv_freq = 1.0 / (config.rope_theta ** (np.arange(0, d, 2, dtype=np.float64) / d))

    # -- CausalLM -------------------------------------------------------------------------------

    def new_cache(self, batch: int, max_tokens: int, *, streaming: StreamingBudget | None = None) -> ReferenceCache:
        return ReferenceCache(self.config, batch, max_tokens, streaming, self.dtype)

    def forward(self, tokens: np.ndarray, cache: ReferenceCache) -> np.ndarray:
        tokens = np.asarray(tokens)
        if tokens.ndim != 2 or tokens.shape[0] != cache.batch:
            raise ArgumentError(f"forward: tokens must have shape (batch={cache.batch}, T), got {tokens.shape}")
        if tokens.shape[1] == 0:
            raise ArgumentError("forward: no tokens to append (T = 0)")
        if not np.issubdtype(tokens.dtype, np.integer):
            raise ArgumentError(f"forward: tokens must be integers, got {tokens.dtype}")
        if tokens.min() < 0 or tokens.max() >= self.config.vocab_size:
            raise ArgumentError(f"forward: token ids must lie in [0, {self.config.vocab_size}), "
                             f"got {int(tokens.min())}..{int(tokens.max())}")
        end = cache.lengths() + tokens.shape[1]
        if end.max() > cache.max_tokens:
            raise ArgumentError(f"forward: appending {tokens.shape[1]} tokens to lengths {cache.lengths().tolist()} "
                             f"exceeds the cache's max_tokens {cache.max_tokens}")
        out, s, total = [], 0, tokens.shape[1]
        while s < total:
            span = int(cache.lengths().max()) + min(CHUNK, total - s)
            step = max(1, min(CHUNK, SCORES // (cache.batch * self.config.num_attention_heads * span)))
            out.append(self._forward_chunk(tokens[:, s:s + step].astype(np.int64), cache))
            s += step
        return (out[0] if len(out) == 1 else np.concatenate(out, axis=1)).astype(np.float32)

    # -- the computation ------------------------------------------------------------------------

    def _rms_norm(self, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        var = np.mean(x * x, axis=-1, keepdims=True)
        return x / np.sqrt(var + self.config.rms_norm_eps) * weight

    def _rope(self, x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        """x: (B, heads, T, D); cos/sin: (B, 1, T, D/2)."""
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

    def _forward_chunk(self, tokens: np.ndarray, cache: ReferenceCache) -> np.ndarray:
        c = self.config
        b, t = tokens.shape
        nh, nkv, d = c.num_attention_heads, c.num_key_value_heads, c.dim_head
        group = nh // nkv
        start = cache.lengths()
        qpos = start[:, None] + np.arange(t)[None, :]                      # (B, T)
        angles = qpos[:, None, :, None].astype(np.float64) * self.inv_freq  # (B, 1, T, D/2)
        cos, sin = np.cos(angles).astype(self.dtype), np.sin(angles).astype(self.dtype)
        qslots = cache.slot_of(qpos)
        rows = np.arange(b)[:, None]

        if cache.full_layout:
            # keys live in slots 0..max(end)-1; write the new ones first, then attend
            key_pos_all = None
            span = int((start + t).max())
        lo = cache.mask_start(start)
        x = self.embed[tokens.reshape(-1)]                                  # (B*T, H): 2-D products
        scale = 1.0 / np.sqrt(d)
        for li, layer in enumerate(self.layers):
            h = self._rms_norm(x, layer["ln1"])
            qkv = h @ layer["qkv"]
            q = qkv[..., :nh * d].reshape(b, t, nh, d).transpose(0, 2, 1, 3)
            k = qkv[..., nh * d:(nh + nkv) * d].reshape(b, t, nkv, d).transpose(0, 2, 1, 3)
            v = qkv[..., (nh + nkv) * d:].reshape(b, t, nkv, d).transpose(0, 2, 1, 3)
            q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
            kc, vc = cache.keys[li], cache.values[li]
            if cache.full_layout:
                kc[rows, :, qslots] = k.transpose(0, 2, 1, 3)
                vc[rows, :, qslots] = v.transpose(0, 2, 1, 3)
                if key_pos_all is None:
                    key_pos_all = np.where(np.arange(span)[None, :] < (start + t)[:, None],
                                           np.arange(span)[None, :], -1)
                keys, values, key_pos = kc[:, :, :span], vc[:, :, :span], key_pos_all
            else:
                keys = np.concatenate([kc, k], axis=2)
                values = np.concatenate([vc, v], axis=2)
                key_pos = np.concatenate([cache.positions, qpos], axis=1)
            qg = (q * scale).reshape(b, nkv, group * t, d)
            scores = qg @ keys.transpose(0, 1, 3, 2)                         # (B, KV, G*T, S)
            masked = scores.reshape(b, nkv, group, t, -1)[..., lo:]
            hidden = ~cache.visible(key_pos[:, lo:], qpos)                   # (B, T, S - lo)
            np.copyto(masked, -np.inf, where=hidden[:, None, None])
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            total = scores.sum(axis=-1, keepdims=True)
            attn = (scores @ values) / total                                 # (B, KV, G*T, D)
            attn = attn.reshape(b, nh, t, d).transpose(0, 2, 1, 3).reshape(b * t, nh * d)
            x = x + attn @ layer["o"]
            if not cache.full_layout:
                self._store_streaming(cache, li, k, v, qpos)
            h = self._rms_norm(x, layer["ln2"])
            gu = h @ layer["gate_up"]
            gate, up = gu[..., :c.intermediate_size], gu[..., c.intermediate_size:]
            x = x + (gate / (1.0 + np.exp(-gate)) * up) @ layer["down"]
        if not cache.full_layout:
            self._store_positions(cache, qpos)
        else:
            cache.positions[rows, qslots] = qpos
        cache._lengths = start + t
        return (self._rms_norm(x, self.norm) @ self.head).reshape(b, t, -1)

    @staticmethod
    def _kept(cache: ReferenceCache, qpos: np.ndarray) -> np.ndarray:
        """(B, T) bool: the new tokens a streaming cache keeps (sinks, or within the last ring slots)."""
        assert cache.streaming is not None
        ring = cache.slots - cache.streaming.sinks
        last = qpos[:, -1:]
        return (qpos < cache.streaming.sinks) | (qpos > last - ring)

    def _store_streaming(self, cache: ReferenceCache, li: int, k: np.ndarray, v: np.ndarray,
                         qpos: np.ndarray) -> None:
        kept = self._kept(cache, qpos)
        bi, ti = np.nonzero(kept)
        slots = cache.slot_of(qpos[bi, ti])
        cache.keys[li][bi, :, slots] = k[bi, :, ti]
        cache.values[li][bi, :, slots] = v[bi, :, ti]

    def _store_positions(self, cache: ReferenceCache, qpos: np.ndarray) -> None:
        kept = self._kept(cache, qpos)
        bi, ti = np.nonzero(kept)
        cache.positions[bi, cache.slot_of(qpos[bi, ti])] = qpos[bi, ti]


def random_weights(config: LlamaConfig, seed: int = 0, scale: float = 0.2) -> dict[str, np.ndarray]:
    """Random float32 weights of the right names and shapes (norm weights near 1), for tests."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in hf_weight_shapes(config).items():
        if len(shape) == 1:
            out[name] = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:
            out[name] = (scale * rng.standard_normal(shape) / np.sqrt(shape[-1]) * 4).astype(np.float32)
    return out
