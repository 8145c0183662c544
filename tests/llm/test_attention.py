"""The paged attention kernel against numpy: prefill and decode, full and streaming caches, ragged starts."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from refcomp.ast import Buffer, BufferStore, For, IntImm, PrimFunc, Var, seq
from refcomp.driver import build
from refcomp.llm.attention import PagedAttention, compiled_attention, softmax_exp
from refcomp.llm.cache import UNBOUNDED

from paged_attention_reference import attention, fill_pages, slot_of

GROUP, DIM, PAGE, HEADS = 2, 16, 32, 2  # pages of two 16-key blocks: full blocks and tails


@pytest.fixture(scope="module")
def kernel():
    """Built with bounds="prove": every access is proved in bounds, or the build fails."""
    return compiled_attention(GROUP, DIM, PAGE, HEADS)


def _case(seed, starts, steps, sinks, window, slack, streaming):
    rng = np.random.default_rng(seed)
    batch = len(starts)
    starts = np.array(starts, np.int32)
    longest = int(starts.max()) + steps
    if streaming:
        ring = window + slack
        slots = sinks + ring
    else:
        sinks, window, ring = 0, UNBOUNDED, -(-longest // PAGE) * PAGE
        slots = ring
    width = -(-slots // PAGE)
    pages = batch * width + 2
    table = rng.permutation(pages)[:batch * width].reshape(batch, width).astype(np.int32)
    history_k = rng.standard_normal((batch, longest, HEADS, DIM)).astype(np.float32)
    history_v = rng.standard_normal((batch, longest, HEADS, DIM)).astype(np.float32)
    k_pages, v_pages = fill_pages(history_k, history_v, starts, table, PAGE, sinks, ring, pages)
    q = rng.standard_normal((batch, steps, HEADS * GROUP, DIM)).astype(np.float32)
    k = rng.standard_normal((batch, steps, HEADS, DIM)).astype(np.float32)
    v = rng.standard_normal((batch, steps, HEADS, DIM)).astype(np.float32)
    return dict(q=q, k=k, v=v, k_pages=k_pages, v_pages=v_pages, table=table, start=starts,
                history_k=history_k, history_v=history_v, sinks=sinks, ring=ring, window=window)


def _run(kernel, c):
    out = np.full_like(c["q"], np.nan)
    kernel(c["q"], c["k"], c["v"], c["k_pages"], c["v_pages"], c["table"], c["start"], out,
           c["sinks"], c["ring"], c["window"])
    return out


def _check(c, out):
    # a streaming window longer than the positions behaves like a full cache in the reference
    window = min(c["window"], 1 << 40)
    expected = attention(c["q"], c["k"], c["v"], c["history_k"], c["history_v"], c["start"], c["sinks"], window)
    np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-5)
    batch, steps = c["q"].shape[:2]
    for b in range(batch):  # the call's keys and values were appended in their slots
        for t in range(max(0, steps - c["ring"]), steps):
            slot = slot_of(int(c["start"][b]) + t, c["sinks"], c["ring"])
            page, offset = c["table"][b, slot // PAGE], slot % PAGE
            np.testing.assert_array_equal(c["k_pages"][page, :, :, offset], c["k"][b, t])
            np.testing.assert_array_equal(c["v_pages"][page, :, offset, :], c["v"][b, t])


@settings(max_examples=15)
@given(seed=st.integers(0, 2**31), starts=st.lists(st.integers(0, 100), min_size=1, max_size=3),
       steps=st.integers(1, 6))
def test_full_cache_matches_numpy(kernel, seed, starts, steps):
    c = _case(seed, starts, steps, 0, 0, 0, streaming=False)
    _check(c, _run(kernel, c))


@settings(max_examples=15)
@given(seed=st.integers(0, 2**31), starts=st.lists(st.integers(0, 120), min_size=1, max_size=3),
       steps=st.integers(1, 20), sinks=st.integers(0, 20), window=st.integers(1, 40), slack=st.integers(0, 5))
def test_streaming_cache_matches_numpy(kernel, seed, starts, steps, sinks, window, slack):
    c = _case(seed, starts, steps, sinks, window, slack, streaming=True)
    _check(c, _run(kernel, c))


def test_repeated_calls_take_the_prepared_path(kernel):
    call = PagedAttention(GROUP, DIM, PAGE, HEADS)
    for seed in range(3):  # same shapes, fresh arrays each call
        c = _case(100 + seed, [5, 17], 1, 0, 0, 0, streaming=False)
        _check(c, _run(call, c))
    assert len(call._templates) == 1
    c = _case(7, [3, 30, 9], 4, 2, 6, 2, streaming=True)  # new shapes and scalars: checked again
    _check(c, _run(call, c))
    assert len(call._templates) == 2


@pytest.fixture(scope="module")
def exp_kernel():
    """softmax_exp over 4096 floats twice: in 16-lane vectors and one float at a time."""
    n = 4096
    x, vec, one = (Buffer(name, (IntImm(n, "int64"),), "float32") for name in ("x", "vec", "one"))
    i, j = Var("i", "int64"), Var("j", "int64")
    zero = IntImm(0, "int64")
    body = seq(For(i, zero, IntImm(n, "int64"), "vectorized", BufferStore(vec, softmax_exp(x[i]), (i,))),
               For(j, zero, IntImm(n, "int64"), "serial", BufferStore(one, softmax_exp(x[j]), (j,))))
    return build(PrimFunc((x, vec, one), body, "softmax_exp_check"))


@pytest.mark.parametrize("seed", range(3))
def test_softmax_exp_is_exp_within_two_units(exp_kernel, seed):
    """The kernel's inline exp of x - max (<= 0): e^max(x, -80) within 2 units in the last place
    of float32, in vector and in scalar code (the range's ends and exact zeros included)."""
    rng = np.random.default_rng(seed)
    x = -np.abs(rng.standard_normal(4096) * [0.1, 3.0, 30.0, 60.0][seed % 4]).astype(np.float32)
    x[:6] = [0.0, -0.0, -80.0, -80.5, -1e-30, -88.0]
    x[6:200] = -rng.uniform(0, 100, 194).astype(np.float32)
    vec, one = np.empty_like(x), np.empty_like(x)
    exp_kernel(x, vec, one)
    expected = np.exp(np.maximum(x.astype(np.float64), -80.0))
    for got in (vec, one):
        units = np.abs(got - expected) / np.spacing(expected.astype(np.float32)).astype(np.float64)
        assert units.max() <= 2.0, (x[units.argmax()], got[units.argmax()], expected[units.argmax()])


def test_nan_query_gives_nan_output(kernel):
    """A NaN in a query head makes that head's output NaN, not a silent number; the other
    queries' outputs are those of the same call without it, bit for bit."""
    c = _case(5, [40, 70], 3, 0, 0, 0, streaming=False)
    c["q"][1, 2, 0, 3] = np.nan
    out = _run(kernel, c)
    assert np.isnan(out[1, 2, 0]).all()
    keep = np.ones(out.shape[:3], bool)
    keep[1, 2] = False
    c2 = _case(5, [40, 70], 3, 0, 0, 0, streaming=False)
    c2["q"][1, 2] = 0.0
    np.testing.assert_allclose(out[keep], _run(kernel, c2)[keep], rtol=0, atol=0)


@pytest.mark.parametrize("steps", range(1, 9))
@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_verify_calls_cross_pages(kernel, steps, streaming, seed):
    """A verify call (T = 1..8 queries of one tile) on ragged starts whose call crosses a page
    boundary (and, streaming, the ring's end): every query sees exactly its own causal window."""
    starts = [PAGE - 3, 2 * PAGE - 1, PAGE + 5, 3 * PAGE - 4]
    c = _case(seed, starts, steps, 3, 2 * PAGE - 7, 4, streaming=streaming)
    _check(c, _run(kernel, c))


@pytest.mark.parametrize("steps", [9, 16, 17, 70])
def test_prefill_spans_several_tiles(kernel, steps):
    """A long call runs its queries in tiles of QUERY_TILE; the last tile is partial."""
    for streaming in (False, True):
        c = _case(steps, [0, 5, PAGE - 1], steps, 2, 20, 3, streaming=streaming)
        _check(c, _run(kernel, c))


@pytest.mark.parametrize("group, dim, page, heads", [
    (1, 8, 16, 3), (3, 48, 8, 2),
    # D = 32 runs in CI through the shipped model (test_generate); each shape is a build of its own
    pytest.param(4, 32, 64, 2, marks=pytest.mark.slow)])
@pytest.mark.parametrize("streaming", [False, True])
def test_other_shapes(group, dim, page, heads, streaming):
    """Other kernel shapes: one head per group, value blocks of 32 columns (D = 32, the shipped
    model's; -m slow), D not a multiple of 16, pages shorter than a score block; tiles of 1, 3, 8
    and 11 queries."""
    call = PagedAttention(group, dim, page, heads)
    rng = np.random.default_rng(group * dim)
    for steps in (1, 3, 8, 11):
        starts = np.array([0, 5, 2 * page - 1, 3 * page + 2], np.int32)
        batch, longest = len(starts), int(starts.max()) + steps
        if streaming:
            sinks, window = 2, page + 3
            ring = window + 2
        else:
            sinks, window, ring = 0, UNBOUNDED, -(-longest // page) * page
        width = -(-(sinks + ring) // page)
        pages = batch * width + 1
        table = rng.permutation(pages)[:batch * width].reshape(batch, width).astype(np.int32)
        history_k = rng.standard_normal((batch, longest, heads, dim)).astype(np.float32)
        history_v = rng.standard_normal((batch, longest, heads, dim)).astype(np.float32)
        k_pages, v_pages = fill_pages(history_k, history_v, starts, table, page, sinks, ring, pages)
        q = rng.standard_normal((batch, steps, heads * group, dim)).astype(np.float32)
        k = rng.standard_normal((batch, steps, heads, dim)).astype(np.float32)
        v = rng.standard_normal((batch, steps, heads, dim)).astype(np.float32)
        out = np.full_like(q, np.nan)
        call(q, k, v, k_pages, v_pages, table, starts, out, sinks, ring, window)
        expected = attention(q, k, v, history_k, history_v, starts, sinks, min(window, 1 << 40))
        np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-5)


@pytest.fixture(scope="module")
def kernel16():
    """The float16-page kernel, also built with every access proved in bounds."""
    return compiled_attention(GROUP, DIM, PAGE, HEADS, "float16")


def _half(c):
    """The case with float16 pages; the reference sees every key and value rounded to float16."""
    c = dict(c)
    c["k_pages"], c["v_pages"] = c["k_pages"].astype(np.float16), c["v_pages"].astype(np.float16)
    for name in ("history_k", "history_v"):
        c[name] = c[name].astype(np.float16).astype(np.float32)
    return c


def _check16(c, out):
    rounded = {name: c[name].astype(np.float16).astype(np.float32) for name in ("k", "v")}
    expected = attention(c["q"], rounded["k"], rounded["v"], c["history_k"], c["history_v"], c["start"],
                         c["sinks"], min(c["window"], 1 << 40))
    np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-5)
    batch, steps = c["q"].shape[:2]
    for b in range(batch):  # the call's keys and values were stored as float16 in their slots
        for t in range(max(0, steps - c["ring"]), steps):
            slot = slot_of(int(c["start"][b]) + t, c["sinks"], c["ring"])
            page, offset = c["table"][b, slot // PAGE], slot % PAGE
            np.testing.assert_array_equal(c["k_pages"][page, :, :, offset], c["k"][b, t].astype(np.float16))
            np.testing.assert_array_equal(c["v_pages"][page, :, offset, :], c["v"][b, t].astype(np.float16))


@settings(max_examples=10)
@given(seed=st.integers(0, 2**31), starts=st.lists(st.integers(0, 120), min_size=1, max_size=3),
       steps=st.integers(1, 12), streaming=st.booleans(), sinks=st.integers(0, 20), window=st.integers(1, 40),
       slack=st.integers(0, 5))
def test_float16_pages_match_numpy(kernel16, seed, starts, steps, streaming, sinks, window, slack):
    """float16 pages: the kernel computes in float32 on the rounded keys and values, its own
    call's included, and stores the new ones rounded."""
    c = _half(_case(seed, starts, steps, sinks, window, slack, streaming=streaming))
    _check16(c, _run(kernel16, c))


@pytest.mark.parametrize("steps", [1, 4, 8, 17])
def test_float16_verify_and_prefill(kernel16, steps):
    for streaming in (False, True):
        c = _half(_case(steps, [PAGE - 3, 2 * PAGE - 1, 5], steps, 3, 2 * PAGE - 7, 4, streaming=streaming))
        _check16(c, _run(kernel16, c))


@pytest.mark.parametrize("steps", [1, 2, 4])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_long_runs_prefetch_the_next_page(kernel, kernel16, dtype, steps):
    """Histories of more than PREFETCH_PAGES pages: each whole page prefetches the next one from its
    key loop (a page starting mid-way, or a last partial one, prefetches it at once); the float32
    pages of this shape take one line of keys and one of values per key, float16 and bfloat16
    pages half a line (the keys past the page's lines prefetch nothing).  Histories that start
    mid-page, end mid-page or on a page boundary, and a streaming ring of many pages."""
    from refcomp.llm.attention import PREFETCH_PAGES

    starts = [(PREFETCH_PAGES + 2) * PAGE + 7, (PREFETCH_PAGES + 5) * PAGE, (PREFETCH_PAGES + 3) * PAGE - 1]
    for streaming in (False, True):
        c = _case(40 + steps, starts, steps, 3, (PREFETCH_PAGES + 2) * PAGE + 5, 4, streaming=streaming)
        if dtype == "float32":
            _check(c, _run(kernel, c))
        elif dtype == "float16":
            c = _half(c)
            _check16(c, _run(kernel16, c))
        else:
            c = _brain(c)
            _check_bf16(c, _run(compiled_attention(GROUP, DIM, PAGE, HEADS, "bfloat16", "fp32"), c))


def test_float16_kernel_rejects_float32_pages(kernel16):
    from refcomp.errors import ArgumentError

    c = _case(0, [5], 1, 0, 0, 0, streaming=False)
    with pytest.raises(ArgumentError, match="k_pages: expected dtype float16"):
        _run(kernel16, c)
    with pytest.raises(ArgumentError, match="kv_dtype must be one of"):
        compiled_attention(GROUP, DIM, PAGE, HEADS, "int8")


# ---------------------------------------------------------------- bfloat16 pages

def _to_bf16(x):
    """float32 -> bfloat16 bit patterns, round to nearest even (finite inputs)."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _from_bf16(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _round_bf16(x):
    return _from_bf16(_to_bf16(x))


def _pair_keys(k_pages):
    """float32 key pages (N, H, D, P) -> bfloat16 bits in pairs along D, (N, H, D/2, P, 2)."""
    n, heads, dim, page = k_pages.shape
    return _to_bf16(np.nan_to_num(k_pages).reshape(n, heads, dim // 2, 2, page).transpose(0, 1, 2, 4, 3))


def _pair_values(v_pages):
    """float32 value pages (N, H, P, D) -> bfloat16 bits in pairs along the keys, (N, H, P/2, D, 2)."""
    n, heads, page, dim = v_pages.shape
    return _to_bf16(np.nan_to_num(v_pages).reshape(n, heads, page // 2, 2, dim).transpose(0, 1, 2, 4, 3))


def _stored_value(v_pages, page, offset):
    """The bfloat16 bits of the value in slot `offset` of `page`, (H, D)."""
    return v_pages[page, :, offset // 2, :, offset % 2]


def _brain(c):
    """The case with bfloat16 pages (keys in pairs along D); the reference sees every key and value
    rounded to bfloat16."""
    c = dict(c)
    c["k_pages"] = _pair_keys(c["k_pages"])
    c["v_pages"] = _pair_values(c["v_pages"])
    for name in ("history_k", "history_v"):
        c[name] = _round_bf16(c[name])
    return c


def _check_bf16(c, out):
    """Scores of bfloat16 numbers (the scaled query rounded too), accumulated in float32."""
    root = np.float32(np.sqrt(DIM))
    q = _round_bf16(c["q"] / root) * root  # DIM = 16: scaling by 1/4 and back is exact
    expected = attention(q, _round_bf16(c["k"]), _round_bf16(c["v"]), c["history_k"], c["history_v"], c["start"],
                         c["sinks"], min(c["window"], 1 << 40))
    np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-5)
    batch, steps = c["q"].shape[:2]
    for b in range(batch):  # the call's keys (in pairs) and values were stored as bfloat16
        for t in range(max(0, steps - c["ring"]), steps):
            slot = slot_of(int(c["start"][b]) + t, c["sinks"], c["ring"])
            page, offset = c["table"][b, slot // PAGE], slot % PAGE
            stored = c["k_pages"][page, :, :, offset, :].reshape(HEADS, DIM)
            np.testing.assert_array_equal(stored, _to_bf16(c["k"][b, t]))
            np.testing.assert_array_equal(_stored_value(c["v_pages"], page, offset), _to_bf16(c["v"][b, t]))


def _bf16_tile_available():
    from refcomp.loops import intrin
    from refcomp.llm.attention import BF16_TILE

    return intrin.get(BF16_TILE).available()


BF16_DOTS = [pytest.param("fp32", id="fp32-loops"),
             pytest.param("avx512bf16", id="avx512bf16", marks=[
                 pytest.mark.amx, pytest.mark.skipif(not _bf16_tile_available(), reason="CPU lacks AVX512_BF16")])]


@pytest.fixture(scope="module", params=BF16_DOTS)
def kernel_bf16(request):
    """The bfloat16-page kernel with either score arithmetic, built with every access proved in bounds."""
    return compiled_attention(GROUP, DIM, PAGE, HEADS, "bfloat16", request.param)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31), starts=st.lists(st.integers(0, 120), min_size=1, max_size=3),
       steps=st.integers(1, 12), streaming=st.booleans(), sinks=st.integers(0, 20), window=st.integers(1, 40),
       slack=st.integers(0, 5))
def test_bfloat16_pages_match_numpy(kernel_bf16, seed, starts, steps, streaming, sinks, window, slack):
    c = _brain(_case(seed, starts, steps, sinks, window, slack, streaming=streaming))
    _check_bf16(c, _run(kernel_bf16, c))


@pytest.mark.parametrize("steps", [1, 2, 4, 5, 8, 17])
def test_bfloat16_verify_and_prefill(kernel_bf16, steps):
    """Tiles of 2..16 state rows (one or two calls of the tile, a partial one), chunks that start
    mid-page (score blocks copied at the page's end) and the call's own keys."""
    for streaming in (False, True):
        c = _brain(_case(steps, [PAGE - 3, 2 * PAGE - 1, 5], steps, 3, 2 * PAGE - 7, 4, streaming=streaming))
        _check_bf16(c, _run(kernel_bf16, c))


def test_bfloat16_tile_and_loops_agree_on_scores():
    """The two score arithmetics differ only in the order of float32 additions."""
    if not _bf16_tile_available():
        pytest.skip("CPU lacks AVX512_BF16")
    c = _brain(_case(11, [40, 90], 4, 0, 0, 0, streaming=False))
    fresh = dict(c, k_pages=c["k_pages"].copy(), v_pages=c["v_pages"].copy())
    tiled = _run(compiled_attention(GROUP, DIM, PAGE, HEADS, "bfloat16", "avx512bf16"), fresh)
    loops = _run(compiled_attention(GROUP, DIM, PAGE, HEADS, "bfloat16", "fp32"), c)
    np.testing.assert_allclose(tiled, loops, rtol=1e-5, atol=1e-6)


def test_bfloat16_kernel_names_bad_arguments():
    from refcomp.errors import ArgumentError
    from refcomp.llm.attention import attention_func

    with pytest.raises(ArgumentError, match="dot must be one of"):
        attention_func(GROUP, DIM, PAGE, HEADS, "float16", "avx512bf16")
    with pytest.raises(ArgumentError, match="head_dim, which must be even"):
        attention_func(GROUP, 15, PAGE, HEADS, "bfloat16", "fp32")
    with pytest.raises(ArgumentError, match="multiple of 32 keys"):
        attention_func(GROUP, DIM, 48, HEADS, "bfloat16", "avx512bf16")
    kernel = compiled_attention(GROUP, DIM, PAGE, HEADS, "bfloat16", "fp32")
    c = _case(0, [5], 1, 0, 0, 0, streaming=False)
    with pytest.raises(ArgumentError, match="k_pages"):
        _run(kernel, c)  # float32 pages of the float32 layout


def _amx_available():
    from refcomp.loops import intrin
    from refcomp.llm.attention import AMX_TILE

    return intrin.get(AMX_TILE).available()


@pytest.mark.amx
@pytest.mark.skipif(not _amx_available(), reason="CPU lacks AMX-BF16")
@pytest.mark.parametrize("steps", [1, 3, 4, 5, 9, 17])
@pytest.mark.parametrize("streaming", [False, True])
def test_bfloat16_scores_on_amx_tiles(steps, streaming):
    """The AMX score tile (32 rows a call, one row of tiles up to 16 rows; D = 32, the shipped
    model's): tiles of 4 to 32 state rows, chunks from mid-page, the call's own keys."""
    group, dim, page, heads = 4, 32, 64, 2
    call = PagedAttention(group, dim, page, heads, "bfloat16", "amx")
    rng = np.random.default_rng(steps * 2 + streaming)
    starts = np.array([page - 3, 2 * page - 1, 5, 200], np.int32)
    batch, longest = len(starts), int(starts.max()) + steps
    if streaming:
        sinks, window = 3, page + 3
        ring = window + 4
    else:
        sinks, window, ring = 0, UNBOUNDED, -(-longest // page) * page
    width = -(-(sinks + ring) // page)
    pages = batch * width + 1
    table = rng.permutation(pages)[:batch * width].reshape(batch, width).astype(np.int32)
    history_k = _round_bf16(rng.standard_normal((batch, longest, heads, dim)).astype(np.float32))
    history_v = _round_bf16(rng.standard_normal((batch, longest, heads, dim)).astype(np.float32))
    k_pages, v_pages = fill_pages(history_k, history_v, starts, table, page, sinks, ring, pages)
    k_pages, v_pages = _pair_keys(k_pages), _pair_values(v_pages)
    q = rng.standard_normal((batch, steps, heads * group, dim)).astype(np.float32)
    k = rng.standard_normal((batch, steps, heads, dim)).astype(np.float32)
    v = rng.standard_normal((batch, steps, heads, dim)).astype(np.float32)
    out = np.full_like(q, np.nan)
    call(q, k, v, k_pages, v_pages, table, starts, out, sinks, ring, window)
    root = np.sqrt(np.float64(dim))
    # the kernel rounds q * float32(1 / sqrt(D)) to bfloat16; the reference divides by sqrt(D) in float64
    q_rounded = _round_bf16(q * np.float32(1.0 / root)).astype(np.float64) * root
    expected = attention(q_rounded, _round_bf16(k), _round_bf16(v), history_k, history_v, starts, sinks,
                         min(window, 1 << 40))
    np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-5)


# ------------------------- amx_pv and avx512bf16_pv: both products on a tile, bfloat16 weights

PV_GROUP, PV_DIM, PV_HEADS = 4, 32, 2  # the shipped model's heads (D a multiple of the tile's 32)


def _pv_case(rng, starts, steps, page, streaming, sinks=0, window=0, slack=0):
    """A case for the amx_pv kernel: bfloat16 pages (keys and values in pairs) holding a rounded
    history, float32 queries, keys and values of the call."""
    batch = len(starts)
    starts = np.array(starts, np.int32)
    longest = int(starts.max()) + steps
    if streaming:
        ring = window + slack
    else:
        sinks, window, ring = 0, UNBOUNDED, -(-longest // page) * page
    width = -(-(sinks + ring) // page)
    pages = batch * width + 1
    table = rng.permutation(pages)[:batch * width].reshape(batch, width).astype(np.int32)
    history_k = _round_bf16(rng.standard_normal((batch, longest, PV_HEADS, PV_DIM)).astype(np.float32))
    history_v = _round_bf16(rng.standard_normal((batch, longest, PV_HEADS, PV_DIM)).astype(np.float32))
    k_pages, v_pages = fill_pages(history_k, history_v, starts, table, page, sinks, ring, pages)
    q = (2 * rng.standard_normal((batch, steps, PV_HEADS * PV_GROUP, PV_DIM))).astype(np.float32)
    k = rng.standard_normal((batch, steps, PV_HEADS, PV_DIM)).astype(np.float32)
    v = rng.standard_normal((batch, steps, PV_HEADS, PV_DIM)).astype(np.float32)
    return dict(q=q, k=k, v=v, k_pages=_pair_keys(k_pages), v_pages=_pair_values(v_pages), table=table,
                start=starts, history_k=history_k, history_v=history_v, sinks=sinks, ring=ring, window=window)


def _pv_expected(c):
    root = np.sqrt(np.float64(PV_DIM))
    q = _round_bf16(c["q"] * np.float32(1.0 / root)).astype(np.float64) * root
    return attention(q, _round_bf16(c["k"]), _round_bf16(c["v"]), c["history_k"], c["history_v"], c["start"],
                     c["sinks"], min(c["window"], 1 << 40))


def _pv_kernel(page, dot):
    return compiled_attention(PV_GROUP, PV_DIM, page, PV_HEADS, "bfloat16", dot)


# the dots with both products on a tile: AMX's (32 rows a call) and AVX512_BF16's (8 rows a call)
PV_DOTS = [pytest.param("amx_pv", id="amx_pv", marks=[
               pytest.mark.amx, pytest.mark.skipif(not _amx_available(), reason="CPU lacks AMX-BF16")]),
           pytest.param("avx512bf16_pv", id="avx512bf16_pv", marks=[
               pytest.mark.amx, pytest.mark.skipif(not _bf16_tile_available(), reason="CPU lacks AVX512_BF16")])]





@pytest.mark.parametrize("dot", PV_DOTS)
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31), starts=st.lists(st.integers(0, 200), min_size=1, max_size=3),
       steps=st.integers(1, 12), page=st.sampled_from([32, 64]), streaming=st.booleans(),
       sinks=st.integers(0, 20), window=st.integers(1, 80), slack=st.integers(0, 12))
def test_pv_matches_numpy(dot, seed, starts, steps, page, streaming, sinks, window, slack):
    """Scores and weights x values on the tiles, the weights rounded to bfloat16 (relative error
    2^-9 each): within 1e-2 of float64 attention on the rounded inputs; the call's keys and values
    stored as bfloat16 in their slots.  Streaming rings shorter than the call and its window take
    the unaligned form (the call's keys from k and v)."""
    c = _pv_case(np.random.default_rng(seed), starts, steps, page, streaming, sinks, window, slack)
    out = _run(_pv_kernel(page, dot), c)
    np.testing.assert_allclose(out, _pv_expected(c), rtol=1e-2, atol=1e-2)
    for b in range(len(starts)):
        for t in range(max(0, steps - c["ring"]), steps):
            slot = slot_of(int(c["start"][b]) + t, c["sinks"], c["ring"])
            pg, offset = c["table"][b, slot // page], slot % page
            np.testing.assert_array_equal(c["k_pages"][pg, :, :, offset, :].reshape(PV_HEADS, PV_DIM),
                                          _to_bf16(c["k"][b, t]))
            np.testing.assert_array_equal(_stored_value(c["v_pages"], pg, offset), _to_bf16(c["v"][b, t]))


@pytest.mark.parametrize("dot", PV_DOTS)
@pytest.mark.parametrize("seed", range(12))
def test_pv_verify_equals_decode_steps_bitwise(dot, seed):
    """A verify of T tokens gives, bit for bit, what T decode steps give for the same positions:
    every query's chunks are its pages, whatever call it is in, and a tile's row depends only
    on that row (T up to 8 queries of 4 heads: up to 32 rows, one AMX call or four of AVX512_BF16)."""
    rng = np.random.default_rng(seed)
    page = (32, 64)[seed % 2]
    steps = int(rng.integers(2, 9))
    starts = rng.integers(0, 3 * page, size=int(rng.integers(1, 4))).tolist()
    c = _pv_case(rng, starts, steps, page, streaming=False)
    kernel = _pv_kernel(page, dot)
    verify = dict(c, k_pages=c["k_pages"].copy(), v_pages=c["v_pages"].copy())
    together = _run(kernel, verify)
    stepwise = np.empty_like(together)
    for t in range(steps):
        one = dict(c, q=c["q"][:, t:t + 1].copy(), k=c["k"][:, t:t + 1].copy(), v=c["v"][:, t:t + 1].copy(),
                   start=(c["start"] + t).astype(np.int32))
        stepwise[:, t:t + 1] = _run(kernel, one)
    assert np.array_equal(together, stepwise)
    assert np.array_equal(verify["k_pages"], c["k_pages"]) and np.array_equal(verify["v_pages"], c["v_pages"])


@pytest.mark.parametrize("dot", PV_DOTS)
@pytest.mark.parametrize("seed", range(8))
def test_pv_rows_do_not_depend_on_the_other_rows(dot, seed):
    """The same query beside different other queries in its tile (a 32-row call of both AMX
    products, 8-row calls of AVX512_BF16's) gives the same bits."""
    rng = np.random.default_rng(100 + seed)
    c = _pv_case(rng, rng.integers(0, 150, size=2).tolist(), 8, 64, streaming=False)
    kernel = _pv_kernel(64, dot)
    first = _run(kernel, dict(c, k_pages=c["k_pages"].copy(), v_pages=c["v_pages"].copy()))
    keep = rng.random(c["q"].shape[:3]) < 0.5
    other = np.where(keep[..., None], c["q"], 100 * rng.standard_normal(c["q"].shape).astype(np.float32))
    second = _run(kernel, dict(c, q=other))
    assert np.array_equal(first[keep], second[keep])


@pytest.mark.parametrize("dot", PV_DOTS)
def test_pv_names_bad_arguments(dot):
    from refcomp.errors import ArgumentError
    from refcomp.llm.attention import attention_func

    with pytest.raises(ArgumentError, match="dot must be one of"):
        attention_func(PV_GROUP, PV_DIM, 64, PV_HEADS, "float16", dot)
    with pytest.raises(ArgumentError, match="head_dim a multiple of 32, got 16"):
        attention_func(PV_GROUP, 16, 64, PV_HEADS, "bfloat16", dot)
    with pytest.raises(ArgumentError, match="multiple of 32 keys"):
        attention_func(PV_GROUP, PV_DIM, 48, PV_HEADS, "bfloat16", dot)
