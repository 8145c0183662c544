"""The paged KV cache: pages taken as sequences grow, returned on rollback, exhaustion and misuse errors."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from refcomp.errors import ArgumentError, RuntimeFailure
from refcomp.llm.cache import PagedKVCache
from refcomp.llm.protocol import KVCache, LlamaConfig, StreamingBudget, kept_rows_positions

CONFIG = LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=3,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096)


def grow(cache, count):
    start = cache.reserve(count)
    cache.commit(count)
    return start


def test_is_a_kv_cache_and_counts_bytes():
    cache = PagedKVCache(CONFIG, batch=2, max_tokens=40, page_size=8)
    assert isinstance(cache, KVCache)
    assert cache.nbytes_per_token() == 2 * 3 * 2 * 4 * 4  # k and v, layers, kv heads, head_dim, float32
    assert cache.pages_per_sequence == 5 and cache.free_pages == 10
    assert cache.nbytes() == PagedKVCache.planned_nbytes(CONFIG, 2, 40, page_size=8)
    assert cache.nbytes() == 10 * 8 * cache.nbytes_per_token() + cache.table.nbytes


def test_planned_bytes_at_batch_64_and_8k():
    bench = LlamaConfig(vocab_size=256, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=8192)
    per_token = 2 * 4 * 2 * 32 * 4
    planned = PagedKVCache.planned_nbytes(bench, 64, 8192, page_size=64)
    assert planned == 64 * 8192 * per_token + 64 * 128 * 4  # 1 GiB of pages and the page table
    budget = StreamingBudget(sinks=4, window=252, slack=8)
    assert PagedKVCache.planned_nbytes(bench, 64, 8192, streaming=budget, page_size=64) == 64 * 5 * 64 * per_token + 64 * 5 * 4


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_sixteen_bit_pages(dtype):
    """float16 and bfloat16 pages: half the bytes; bfloat16 as uint16 bit patterns, keys in pairs along D,
    values in pairs along the keys."""
    cache = PagedKVCache(CONFIG, batch=2, max_tokens=40, page_size=8, dtype=dtype)
    assert cache.nbytes_per_token() == 2 * 3 * 2 * 4 * 2
    assert cache.nbytes() == PagedKVCache.planned_nbytes(CONFIG, 2, 40, page_size=8, dtype=dtype)
    keys = (3, 10, 2, 2, 8, 2) if dtype == "bfloat16" else (3, 10, 2, 4, 8)
    values = (3, 10, 2, 4, 4, 2) if dtype == "bfloat16" else (3, 10, 2, 8, 4)
    assert cache.k_pool.shape == keys and cache.v_pool.shape == values
    assert cache.k_pool.dtype == (np.uint16 if dtype == "bfloat16" else np.float16)
    odd = LlamaConfig(vocab_size=40, hidden_size=12, intermediate_size=24, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    with pytest.raises(ArgumentError, match="head_dim, which must be even, got 3"):
        PagedKVCache(odd, batch=1, max_tokens=8, dtype="bfloat16")
    with pytest.raises(ArgumentError, match="page_size must be even, got 7"):
        PagedKVCache(CONFIG, batch=1, max_tokens=8, page_size=7, dtype="bfloat16")
    with pytest.raises(ArgumentError, match="dtype must be one of"):
        PagedKVCache(CONFIG, batch=1, max_tokens=8, dtype="int8")


def test_pages_are_taken_as_sequences_grow_and_returned_on_rollback():
    cache = PagedKVCache(CONFIG, batch=2, max_tokens=40, page_size=8)
    assert cache.pages_in_use() == 0
    np.testing.assert_array_equal(grow(cache, 3), [0, 0])
    assert cache.pages_in_use() == 2 and cache.free_pages == 8
    np.testing.assert_array_equal(grow(cache, 6), [3, 3])
    np.testing.assert_array_equal(cache.lengths(), [9, 9])
    assert cache.pages_in_use() == 4
    first = cache.table[:, 0].copy()
    cache.rollback(np.array([9, 2]))
    np.testing.assert_array_equal(cache.lengths(), [9, 2])
    assert cache.pages_in_use() == 3 and cache.table[1, 1] == -1
    np.testing.assert_array_equal(cache.table[:, 0], first)  # kept pages stay where they were
    grow(cache, 1)
    assert set(cache.table[cache.table >= 0].tolist()) == set(range(10)) - set(cache._free)
    assert len(set(cache.table[cache.table >= 0].tolist())) == cache.pages_in_use()  # no page shared


def test_lengths_is_a_copy():
    cache = PagedKVCache(CONFIG, batch=1, max_tokens=8)
    cache.lengths()[0] = 5
    assert cache.lengths()[0] == 0


def test_exhausted_pool_is_a_runtime_failure():
    cache = PagedKVCache(CONFIG, batch=2, max_tokens=32, page_size=8, pages=5)
    grow(cache, 16)  # 2 pages each
    with pytest.raises(RuntimeFailure, match=r"out of pages \(5 pages of 8 tokens\) while sequence 1"):
        grow(cache, 8)
    cache.rollback(np.array([16, 8]))
    assert cache.free_pages >= 1


def test_context_overflow_and_bad_rollback():
    cache = PagedKVCache(CONFIG, batch=2, max_tokens=10)
    grow(cache, 6)
    with pytest.raises(ArgumentError, match="sequence 0 would hold 11 tokens, more than the cache's max_tokens 10"):
        cache.reserve(5)
    np.testing.assert_array_equal(cache.lengths(), [6, 6])
    with pytest.raises(ArgumentError, match="sequence 1 has 6 tokens, cannot keep 7"):
        cache.rollback(np.array([6, 7]))
    with pytest.raises(ArgumentError, match="cannot keep -1"):
        cache.rollback(np.array([-1, 0]))
    with pytest.raises(ArgumentError, match=r"keep must be integers of shape \(2,\)"):
        cache.rollback(np.array([1.0, 2.0]))
    with pytest.raises(ArgumentError, match="batch must be a positive integer"):
        PagedKVCache(CONFIG, batch=0, max_tokens=10)


def test_streaming_cache_keeps_a_fixed_number_of_pages():
    budget = StreamingBudget(sinks=2, window=10, slack=4)
    cache = PagedKVCache(CONFIG, batch=1, max_tokens=1000, streaming=budget, page_size=4)
    assert cache.pages_per_sequence == 4 and cache.ring == 14
    for _ in range(50):
        grow(cache, 7)
    assert cache.lengths()[0] == 350 and cache.pages_in_use() == 4
    assert cache.nbytes() == 4 * 4 * cache.nbytes_per_token() + cache.table.nbytes


def test_streaming_rollback_within_slack_only():
    budget = StreamingBudget(sinks=2, window=10, slack=3)
    cache = PagedKVCache(CONFIG, batch=2, max_tokens=1000, streaming=budget, page_size=4)
    grow(cache, 40)
    # keep 37: the next query (position 37) reads positions 28..36, the ring holds 27..39
    cache.rollback(np.array([37, 40]))
    grow(cache, 3)
    cache.rollback(np.array([36, 43]))
    with pytest.raises(ArgumentError, match="sequence 0 back to 35 tokens needs position 26, already overwritten"):
        cache.rollback(np.array([35, 43]))
    # a short sequence has not wrapped the ring: any rollback is fine
    short = PagedKVCache(CONFIG, batch=1, max_tokens=1000, streaming=budget, page_size=4)
    grow(short, 9)
    short.rollback(np.array([0]))
    assert short.pages_in_use() == 0


@pytest.mark.parametrize("streaming", [None, StreamingBudget(sinks=3, window=10, slack=4)])
def test_every_used_slot_has_a_page_after_any_grow_and_rollback(streaming):
    """reserve only looks at pages past the slots already used: after random grows and rollbacks
    (ragged per sequence) every used slot's page is still in the table, and pages stay distinct."""
    rng = np.random.default_rng(3)
    cache = PagedKVCache(CONFIG, batch=3, max_tokens=60, page_size=8, streaming=streaming)
    for _ in range(40):
        lengths = cache.lengths()
        if rng.random() < 0.4 and lengths.max() > 0:
            keep = lengths - rng.integers(0, 3, size=3)
            keep = np.maximum(keep, 0 if streaming is None else lengths - 4)
            cache.rollback(np.maximum(keep, 0))
        elif lengths.max() + 4 <= 60:
            grow(cache, int(rng.integers(1, 5)))
        used = np.minimum(cache.lengths(), cache.sinks + cache.ring)
        for b in range(3):
            assert (cache.table[b, :-(-int(used[b]) // 8)] >= 0).all()
        held = cache.table[cache.table >= 0]
        assert len(set(held.tolist())) == held.size


def _filled(cache, rng, count):
    """Grow every sequence by `count` tokens and write fresh random numbers into every page."""
    grow(cache, count)
    for pool in (cache.k_pool, cache.v_pool):
        if pool.dtype == np.uint16:
            pool[...] = rng.integers(0, 1 << 15, size=pool.shape, dtype=np.uint16)
        else:
            pool[...] = rng.standard_normal(pool.shape).astype(pool.dtype)


def _entry(cache, b, position):
    """(keys (layers, H, D[, pair]), values (layers, H, D)) of position `position` of sequence b
    (bfloat16 values are in pairs along the keys)."""
    slot = int(cache.slot_of(np.array([position]))[0])
    page, offset = cache.table[b, slot // cache.page_size], slot % cache.page_size
    keys = cache.k_pool[:, page, :, :, offset]
    if cache.dtype == "bfloat16":
        return keys, cache.v_pool[:, page, :, offset // 2, :, offset % 2]
    return keys, cache.v_pool[:, page, :, offset, :]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("seed", range(3))
def test_extend_from_copies_the_entries_a_streaming_cache_keeps(dtype, seed):
    """A streaming cache extended from a full one, ragged per sequence and in several steps (the
    first a whole prompt), holds the source's entry at every position it keeps."""
    rng = np.random.default_rng(seed)
    budget = StreamingBudget(sinks=3, window=10, slack=4)
    source = PagedKVCache(CONFIG, batch=3, max_tokens=200, page_size=8, dtype=dtype)
    _filled(source, rng, 150)
    draft = PagedKVCache(CONFIG, batch=3, max_tokens=200, page_size=8, streaming=budget, dtype=dtype)
    upto = rng.integers(1, 60, size=3)
    while True:
        draft.extend_from(source, upto)
        np.testing.assert_array_equal(draft.lengths(), upto)
        for b in range(3):
            kept = [p for p in range(int(upto[b])) if p < 3 or p >= upto[b] - draft.window]
            for p in kept:
                for mine, theirs in zip(_entry(draft, b, p), _entry(source, b, p)):
                    np.testing.assert_array_equal(mine, theirs)
        if upto.max() >= 150:
            break
        upto = np.minimum(150, upto + rng.integers(0, 6, size=3))
    # a rollback within the slack then an extension restores the same entries
    draft.rollback(upto - 4)
    draft.extend_from(source, upto - 1)
    for p in range(int(upto[0]) - 1 - draft.window, int(upto[0]) - 1):
        np.testing.assert_array_equal(_entry(draft, 0, p)[1], _entry(source, 0, p)[1])


def test_extend_from_a_full_cache_and_its_errors():
    rng = np.random.default_rng(5)
    source = PagedKVCache(CONFIG, batch=2, max_tokens=40, page_size=8)
    _filled(source, rng, 20)
    full = PagedKVCache(CONFIG, batch=2, max_tokens=40, page_size=8)
    full.extend_from(source, np.array([20, 7]))
    for b, length in ((0, 20), (1, 7)):
        for p in range(length):
            np.testing.assert_array_equal(_entry(full, b, p)[0], _entry(source, b, p)[0])
    assert full.pages_in_use() == 3 + 1
    with pytest.raises(ArgumentError, match="sequence 0 holds 20 tokens and its source 20; cannot extend it to 21"):
        full.extend_from(source, np.array([21, 7]))
    with pytest.raises(ArgumentError, match="cannot extend it to 3"):
        full.extend_from(source, np.array([20, 3]))
    with pytest.raises(ArgumentError, match="source must be a full PagedKVCache"):
        source.extend_from(PagedKVCache(CONFIG, 2, 40, page_size=8, streaming=StreamingBudget(1, 4, 1)), [0, 0])
    with pytest.raises(ArgumentError, match="different model, page size, KV dtype or batch"):
        full.extend_from(PagedKVCache(CONFIG, 2, 40, page_size=8, dtype="float16"), np.array([20, 7]))


@pytest.mark.parametrize("streaming", [None, StreamingBudget(sinks=2, window=6, slack=2)])
def test_keep_sequences_shrinks_the_batch_and_frees_the_rest(streaming):
    rng = np.random.default_rng(11)
    cache = PagedKVCache(CONFIG, batch=4, max_tokens=40, page_size=4, streaming=streaming)
    _filled(cache, rng, 5)
    grow(cache, 7)
    cache.rollback(np.array([12, 9, 11, 10]))
    before = {b: [_entry(cache, b, p)[1].copy() for p in range(8, 9)] for b in range(4)}
    in_use = [int((cache.table[b] >= 0).sum()) for b in range(4)]
    cache.keep_sequences(np.array([1, 3]))
    assert cache.batch == 2 and cache.lengths().tolist() == [9, 10] and cache.table.flags.c_contiguous
    assert cache.pages_in_use() == in_use[1] + in_use[3]
    assert cache.free_pages == cache.k_pool.shape[1] - cache.pages_in_use()
    for new, old in ((0, 1), (1, 3)):
        np.testing.assert_array_equal(_entry(cache, new, 8)[1], before[old][0])
    grow(cache, 3)                       # the kept sequences go on growing from the freed pool
    with pytest.raises(ArgumentError, match="rows must be increasing indices into the batch of 2"):
        cache.keep_sequences(np.array([1, 0]))
    with pytest.raises(ArgumentError, match="at least one"):
        cache.keep_sequences(np.array([], np.int64))
    with pytest.raises(ArgumentError, match="increasing indices"):
        cache.keep_sequences(np.array([2]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 12)), min_size=1, max_size=6),
       st.integers(0, 5), st.one_of(st.none(), st.integers(1, 16)))
def test_kept_rows_positions_is_the_per_sequence_rule(spans, sinks, ring):
    """The batch form equals, sequence by sequence, the positions start .. upto - 1 that are sinks
    or among the last `ring`."""
    starts = np.array([a for a, _ in spans])
    uptos = starts + np.array([n for _, n in spans])
    rows, positions = kept_rows_positions(starts, uptos, sinks, ring)
    expected = [(b, p) for b, (a, n) in enumerate(spans) for p in range(a, a + n)
                if ring is None or p < sinks or p >= a + n - ring]
    assert list(zip(rows.tolist(), positions.tolist())) == expected
