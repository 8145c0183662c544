"""The paged KV cache: fixed-size pages from one pool, a page table per sequence, full or streaming.

Storage per layer (P = page size, H = key/value heads, D = head_dim), float32, float16 or
bfloat16 (`dtype`; numpy holds bfloat16 as its uint16 bit patterns):

    k_pool[layer]   (pages, H, D, P)   a page's keys transposed, so attention's score loop runs
                                       along P contiguous keys (refcomp.llm.attention);
                    (pages, H, D/2, P, 2)  bfloat16: in pairs along D, as vdpbf16ps takes them
    v_pool[layer]   (pages, H, P, D)
                    (pages, H, P/2, D, 2)  bfloat16: in pairs along the keys, as tdpbf16ps takes the
                                       values of a weights x values product
    table           (batch, M) int32   page of slot s of sequence b: table[b, s // P] (-1: none)

Every page comes from the pool allocated when the cache is made (`pages`, by default enough for
every sequence to reach its full size); a sequence takes a page from the free list when it first
writes into it, and a rollback returns the pages it no longer needs.  Nothing else is allocated
while decoding.  A pool that runs out is a `RuntimeFailure`.

A full cache stores position p in slot p.  A streaming cache (StreamingLLM, MagicDec's draft)
keeps `sinks` slots for the first positions and a ring of `window + slack` slots for the rest:
position p >= sinks lives in slot sinks + (p - sinks) % ring.  Attention reads the sinks and the
last `window` positions; the `slack` extra slots keep the positions a rollback of up to
`slack` + 1 tokens must see again.  A rollback deeper than that is an `ArgumentError`.

`extend_from(source, upto)` appends entries copied from a full cache of the same model (slot by
slot, only those a streaming cache keeps).  `draft_view(budget)` reads a full cache as a streaming
one of that budget without copying (`DraftView`): MagicDec's draft.
`keep_sequences(rows)` drops the other sequences and returns their pages: a batch shrinks as its
sequences finish.
"""
from __future__ import annotations

import numpy as np

from ..errors import ArgumentError, RuntimeFailure
from .protocol import LlamaConfig, StreamingBudget, TargetView, check_sequence_rows, kept_rows_positions

DEFAULT_PAGE_SIZE = 128
# element types of the pages: float16 and bfloat16 halve the bytes; attention converts to float32
# as it loads (bfloat16: its scores multiply bfloat16 numbers, refcomp.llm.attention)
KV_DTYPES = ("float32", "float16", "bfloat16")


def storage_dtype(dtype: str) -> np.dtype:
    """The numpy dtype of pages of `dtype` (bfloat16 as uint16 bit patterns)."""
    return np.dtype(np.uint16) if dtype == "bfloat16" else np.dtype(dtype)


def key_page_shape(heads: int, dim: int, page_size: int, dtype: str) -> tuple[int, ...]:
    """The shape of one page of keys: (H, D, P), or (H, D/2, P, 2) for bfloat16."""
    return (heads, dim // 2, page_size, 2) if dtype == "bfloat16" else (heads, dim, page_size)


def value_page_shape(heads: int, dim: int, page_size: int, dtype: str) -> tuple[int, ...]:
    """The shape of one page of values: (H, P, D), or (H, P/2, D, 2) for bfloat16."""
    return (heads, page_size // 2, dim, 2) if dtype == "bfloat16" else (heads, page_size, dim)


# The window of a full cache: every position is visible.
UNBOUNDED = 1 << 62


class PagedKVCache:
    """Keys and values of every layer for `batch` sequences of up to `max_tokens` positions each."""

    def __init__(self, config: LlamaConfig, batch: int, max_tokens: int, *,
                 streaming: StreamingBudget | None = None, page_size: int = DEFAULT_PAGE_SIZE,
                 pages: int | None = None, dtype: str = "float32") -> None:
        if dtype not in KV_DTYPES:
            raise ArgumentError(f"KV cache: dtype must be one of {KV_DTYPES}, got {dtype!r}")
        for name, value in (("batch", batch), ("max_tokens", max_tokens), ("page_size", page_size)):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise ArgumentError(f"KV cache: {name} must be a positive integer, got {value!r}")
        self.config = config
        self.max_tokens = int(max_tokens)
        self.page_size = int(page_size)
        self.streaming = streaming
        if streaming is None:
            self.sinks, self.window = 0, UNBOUNDED
            slots = self.max_tokens
        else:
            if streaming.sinks < 0 or streaming.window < 1 or streaming.slack < 0:
                raise ArgumentError(f"KV cache: streaming budget needs sinks >= 0, window >= 1 and slack >= 0, "
                                    f"got {streaming}")
            self.sinks, self.window = int(streaming.sinks), int(streaming.window)
            slots = self.sinks + self.window + int(streaming.slack)
        self.pages_per_sequence = -(-slots // self.page_size)
        # A full cache's ring is its whole table (slot = position); a streaming one's is window + slack.
        self.ring = (self.pages_per_sequence * self.page_size if streaming is None
                     else self.window + int(streaming.slack))
        total = batch * self.pages_per_sequence if pages is None else pages
        if not isinstance(total, (int, np.integer)) or isinstance(total, bool) or total < 1:
            raise ArgumentError(f"KV cache: pages must be a positive integer, got {pages!r}")
        layers, heads, dim = config.num_hidden_layers, config.num_key_value_heads, config.dim_head
        # np.zeros maps fresh pages lazily: resident memory grows with the pages written.
        if dtype == "bfloat16" and dim % 2:
            raise ArgumentError(f"KV cache: bfloat16 pages hold keys in pairs along head_dim, which must be even, "
                                f"got {dim}")
        if dtype == "bfloat16" and self.page_size % 2:
            raise ArgumentError(f"KV cache: bfloat16 pages hold values in pairs along the keys, so page_size must "
                                f"be even, got {self.page_size}")
        self.dtype = dtype
        store = storage_dtype(dtype)
        self.k_pool = np.zeros((layers, int(total)) + key_page_shape(heads, dim, self.page_size, dtype), store)
        self.v_pool = np.zeros((layers, int(total)) + value_page_shape(heads, dim, self.page_size, dtype), store)
        self.table = np.full((batch, self.pages_per_sequence), -1, np.int32)
        self._free = list(range(int(total) - 1, -1, -1))
        self._lengths = np.zeros(batch, np.int64)
        self._high = np.zeros(batch, np.int64)      # the longest each sequence has been
        self._oldest = np.zeros(batch, np.int64)    # its oldest non-sink position still in the ring

    # ------------------------------------------------------------------ the KVCache protocol

    @property
    def batch(self) -> int:
        return self.table.shape[0]

    def lengths(self) -> np.ndarray:
        return self._lengths.copy()

    def nbytes_per_token(self) -> int:
        c = self.config
        return 2 * c.num_hidden_layers * c.num_key_value_heads * c.dim_head * self.k_pool.itemsize

    def rollback(self, keep: np.ndarray) -> None:
        keep = np.asarray(keep)
        if keep.shape != (self.batch,) or keep.dtype.kind not in "iu":
            raise ArgumentError(f"KV cache rollback: keep must be integers of shape ({self.batch},), "
                                f"got {keep.dtype} {keep.shape}")
        keep = keep.astype(np.int64)
        bad = np.flatnonzero((keep < 0) | (keep > self._lengths))
        if bad.size:
            b = int(bad[0])
            raise ArgumentError(f"KV cache rollback: sequence {b} has {self._lengths[b]} tokens, "
                                f"cannot keep {keep[b]}")
        if self.streaming is not None:
            needed = np.maximum(self.sinks, keep + 1 - self.window)
            lost = np.flatnonzero(self._oldest > needed)
            if lost.size:
                b = int(lost[0])
                raise ArgumentError(
                    f"KV cache rollback: sequence {b} back to {keep[b]} tokens needs position {needed[b]}, "
                    f"already overwritten in the streaming ring (slack {self.streaming.slack} allows "
                    f"rolling back {self.streaming.slack + 1} tokens past the longest length)")
        self._lengths = keep
        for b in range(self.batch):
            if self._high[b] <= self.sinks + self.ring:  # never wrapped: slots are positions
                self._release(b, -(-int(keep[b]) // self.page_size))

    def extend_from(self, source: "PagedKVCache", upto: np.ndarray) -> None:
        """Append to sequence b the keys and values `source` (a full cache of the same model and
        page layout) holds at positions lengths()[b] .. upto[b] - 1, copied instead of computed (a
        streaming copy of a full cache; MagicDec's draft reads the full cache in place instead,
        `draft_view`).  A streaming cache copies only the positions it keeps (the sinks and the
        last ring's worth)."""
        if not isinstance(source, PagedKVCache) or source.streaming is not None:
            raise ArgumentError("KV cache extend_from: the source must be a full PagedKVCache")
        if (source.config != self.config or source.page_size != self.page_size or source.dtype != self.dtype
                or source.batch != self.batch):
            raise ArgumentError("KV cache extend_from: the source was made for a different model, page size, "
                                "KV dtype or batch")
        upto = np.asarray(upto)
        if upto.shape != (self.batch,) or upto.dtype.kind not in "iu":
            raise ArgumentError(f"KV cache extend_from: upto must be integers of shape ({self.batch},), "
                                f"got {upto.dtype} {upto.shape}")
        upto = upto.astype(np.int64)
        bad = np.flatnonzero((upto < self._lengths) | (upto > source._lengths))
        if bad.size:
            b = int(bad[0])
            raise ArgumentError(f"KV cache extend_from: sequence {b} holds {self._lengths[b]} tokens and its "
                                f"source {source._lengths[b]}; cannot extend it to {upto[b]}")
        count = upto - self._lengths
        self.reserve(count)
        # (sequence, position) pairs to copy: a streaming cache keeps sinks and the last `ring` positions
        ring = None if self.streaming is None else self.ring
        rows, pos = kept_rows_positions(self._lengths, upto, self.sinks, ring)
        if rows.size:
            src_slot, dst_slot = source.slot_of(pos), self.slot_of(pos)
            src = (source.table[rows, src_slot // self.page_size], src_slot % self.page_size)
            dst = (self.table[rows, dst_slot // self.page_size], dst_slot % self.page_size)
            # keys (layers, pages, H, D, P) or (.., H, D/2, P, 2); values (layers, pages, H, P, D)
            # or (.., H, P/2, D, 2)
            whole = slice(None)
            if self.dtype == "bfloat16":
                self.k_pool[whole, dst[0], whole, whole, dst[1], whole] = source.k_pool[whole, src[0], whole, whole,
                                                                                         src[1], whole]
                self.v_pool[whole, dst[0], whole, dst[1] // 2, whole, dst[1] % 2] = \
                    source.v_pool[whole, src[0], whole, src[1] // 2, whole, src[1] % 2]
            else:
                self.k_pool[whole, dst[0], whole, whole, dst[1]] = source.k_pool[whole, src[0], whole, whole, src[1]]
                self.v_pool[:, dst[0], :, dst[1], :] = source.v_pool[:, src[0], :, src[1], :]
        self.commit(count)

    def keep_sequences(self, rows: np.ndarray) -> None:
        """Keep only sequences `rows` (increasing indices), in that order, and return every page
        of the others to the pool: a batch shrinks as its sequences finish."""
        rows = check_sequence_rows(rows, self.batch, "KV cache keep_sequences")
        for b in sorted(set(range(self.batch)) - set(rows.tolist())):
            self._release(b, 0)
        self.table = np.ascontiguousarray(self.table[rows])
        self._lengths, self._high, self._oldest = self._lengths[rows], self._high[rows], self._oldest[rows]

    def draft_view(self, budget: StreamingBudget) -> "DraftView":
        """MagicDec's draft over this full cache's own pages (`DraftView`): attention through it
        sees the sinks and the last `budget.window` positions, as a streaming cache of that budget
        would; appending through it appends to this cache."""
        return DraftView(self, budget)

    def slot_of(self, positions: np.ndarray) -> np.ndarray:
        """The slot each position lives in (a full cache: the position itself)."""
        positions = np.asarray(positions, np.int64)
        if self.streaming is None:
            return positions
        return np.where(positions < self.sinks, positions, self.sinks + (positions - self.sinks) % self.ring)

    # ------------------------------------------------------------------ for the model

    def nbytes(self) -> int:
        """Bytes of the whole planned pool and page table (what the cache may ever occupy)."""
        return self.k_pool.nbytes + self.v_pool.nbytes + self.table.nbytes

    @staticmethod
    def planned_nbytes(config: LlamaConfig, batch: int, max_tokens: int, *,
                       streaming: StreamingBudget | None = None, page_size: int = DEFAULT_PAGE_SIZE,
                       dtype: str = "float32") -> int:
        """`nbytes()` of the cache these arguments make, without making it."""
        slots = max_tokens if streaming is None else streaming.sinks + streaming.window + streaming.slack
        pages = -(-slots // page_size)
        per_page = (2 * config.num_hidden_layers * config.num_key_value_heads * config.dim_head * page_size
                    * storage_dtype(dtype).itemsize)
        return batch * pages * per_page + batch * pages * 4

    def pages_in_use(self) -> int:
        return int((self.table >= 0).sum())

    @property
    def free_pages(self) -> int:
        return len(self._free)

    def reserve(self, count: int | np.ndarray) -> np.ndarray:
        """Make room for `count` more tokens in every sequence (or count[b] in sequence b); the start
        positions (int32, (batch,)).

        The lengths change only when `commit` is called, after the kernels have run."""
        new = self._lengths + count
        over = np.flatnonzero(new > self.max_tokens)
        if over.size:
            b = int(over[0])
            raise ArgumentError(f"KV cache: sequence {b} would hold {new[b]} tokens, more than the cache's "
                                f"max_tokens {self.max_tokens} (the context)")
        used = np.minimum(new, self.sinks + self.ring)
        # the pages of the slots already used are in the table (rollback frees only pages past them)
        held = np.minimum(self._lengths, self.sinks + self.ring) // self.page_size
        for b in np.flatnonzero(-(-used // self.page_size) > held):
            for page in range(int(held[b]), -(-int(used[b]) // self.page_size)):
                if self.table[b, page] < 0:
                    if not self._free:
                        raise RuntimeFailure(
                            f"KV cache: out of pages ({self.k_pool.shape[1]} pages of {self.page_size} tokens) "
                            f"while sequence {b} grows to {new[b]} tokens")
                    self.table[b, page] = self._free.pop()
        return self._lengths.astype(np.int32)

    def commit(self, count: int | np.ndarray) -> None:
        """Record that `count` tokens (or count[b]) were appended to every sequence (after `reserve`)."""
        self._lengths = self._lengths + count
        self._high = np.maximum(self._high, self._lengths)
        if self.streaming is not None:
            self._oldest = np.maximum(self._oldest, self._lengths - self.ring)

    def kernel_scalars(self) -> tuple[int, int, int]:
        """(sinks, ring, window) as the attention kernel takes them."""
        return self.sinks, self.ring, self.window

    def _release(self, b: int, keep_pages: int) -> None:
        for page in range(keep_pages, self.pages_per_sequence):
            if self.table[b, page] >= 0:
                self._free.append(int(self.table[b, page]))
                self.table[b, page] = -1


class DraftView(TargetView):
    """A full `PagedKVCache` read as a streaming one: MagicDec's draft without a cache of its own.

    Its attention sees, per query, the first `budget.sinks` positions and the last
    `budget.window` (`kernel_scalars`), over the target's pages, where every position is in its own
    slot; the budget's slack is not needed (nothing is overwritten).  It holds no entries and no
    lengths of its own: `reserve`, `commit`, `rollback` and `keep_sequences` act on the target
    (the last two, and `extend_from`, are `TargetView`'s),
    so the tokens a draft forward appends through the view are the target's last ones, and
    rolling the target back drops them (the verify then writes the target's own entries there).
    `extend_from` has nothing to copy: the view already holds every entry its target holds."""

    def __init__(self, target: PagedKVCache, budget: StreamingBudget) -> None:
        if not isinstance(target, PagedKVCache) or target.streaming is not None:
            raise ArgumentError("KV cache draft_view: the target must be a full PagedKVCache")
        self.check_budget(budget, "KV cache draft_view")
        self.target = target
        self.streaming = budget
        self.sinks, self.window = int(budget.sinks), int(budget.window)

    # the target's storage and layout (read at each use: keep_sequences replaces the table)
    config = property(lambda self: self.target.config)
    page_size = property(lambda self: self.target.page_size)
    dtype = property(lambda self: self.target.dtype)
    max_tokens = property(lambda self: self.target.max_tokens)
    k_pool = property(lambda self: self.target.k_pool)
    v_pool = property(lambda self: self.target.v_pool)
    table = property(lambda self: self.target.table)
    batch = property(lambda self: self.target.batch)

    def lengths(self) -> np.ndarray:
        return self.target.lengths()

    def nbytes_per_token(self) -> int:
        return self.target.nbytes_per_token()

    def reserve(self, count: int | np.ndarray) -> np.ndarray:
        return self.target.reserve(count)

    def commit(self, count: int | np.ndarray) -> None:
        self.target.commit(count)

    def kernel_scalars(self) -> tuple[int, int, int]:
        """(sinks, ring, window) as the attention kernel takes them: the target's ring (slot =
        position), the budget's sinks and window."""
        return self.sinks, self.target.ring, self.window
