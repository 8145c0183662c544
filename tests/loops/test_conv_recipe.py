"""The direct-convolution recipe and the default schedule it gives convolution kernels.

Every case is compiled to C and compared with numpy on fresh random data: odd sizes, size 1,
primes, strides, padding, dilation, groups and depthwise; a kernel the recipe cannot take
(a symbolic width) keeps the generic schedule and still computes the convolution.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import refcomp
from refcomp import ScheduleError, te
from refcomp.ast import Block, For, SizeVar, as_int
from refcomp.graph.op.nn import _conv_te, _np_conv
from refcomp.graph.passes.default_schedule import schedule_kernel
from refcomp.loops import intrin, recipes
from refcomp.loops.recipes import conv_tiles
import refcomp.loops.recipes.common  # noqa: F401
import refcomp.loops.recipes.conv  # noqa: F401
import refcomp.loops.recipes.matmul  # noqa: F401
from refcomp.loops.interpreter import interpret
from refcomp.loops.primitives.tree import walk


def _conv(n, c, h, w, o, kh, kw, stride=1, pad=0, dilation=1, groups=1, index_dtype="int64"):
    """The PrimFunc conv2d legalizes to (the graph level builds it with int64 dims)."""
    dim = (lambda v: te.const(v, index_dtype) if isinstance(v, int) else v)
    x = te.placeholder((dim(n), dim(c), dim(h), dim(w)), "float32", "X")
    wt = te.placeholder((dim(o), dim(c // groups), dim(kh), dim(kw)), "float32", "W")
    y = _conv_te(2)(x, wt, (stride, stride), (pad, pad, pad, pad), (dilation, dilation), groups)
    return te.create_prim_func([x, wt, y])


def _conv1d(n, c, w, o, k, stride=1, pad=0):
    x = te.placeholder((n, c, w), "float32", "X")
    wt = te.placeholder((o, c, k), "float32", "W")
    y = _conv_te(1)(x, wt, (stride,), (pad, pad), (1,), 1)
    return te.create_prim_func([x, wt, y])


def _run(func, x, w, out_shape, rng):
    out = rng.standard_normal(out_shape).astype(np.float32)  # the kernel must overwrite all of it
    refcomp.build(func)(x, w, out)
    return out


def _check(func, rng, x_shape, w_shape, strides, padding, dilation, groups):
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    expected = _np_conv(x, w, strides, padding, dilation, groups)
    np.testing.assert_allclose(_run(func, x, w, expected.shape, rng), expected, rtol=1e-4, atol=1e-4)


def _tensorized_with(func) -> set[str]:
    return {s.annotations["tensorized"] for s in walk(func.body) if isinstance(s, Block) and "tensorized" in s.annotations}


def _interpretable(func):
    """The default schedule of func without the tile transpose, a C helper the interpreter does
    not run (the compiled kernels, checked against numpy, have it)."""
    return recipes.conv_fp32(func, transpose_tile=False)


def _kinds(func) -> set[str]:
    return {s.kind for s in walk(func.body) if isinstance(s, For)}


def test_recognises_a_convolution_by_its_structure():
    found = recipes.find_conv(_conv(1, 3, 7, 7, 5, 3, 3, pad=1))
    assert found is not None and found.spatial_dims == 2 and found.out_width == 7
    assert recipes.find_conv(_conv1d(1, 3, 9, 4, 3)).spatial_dims == 1
    a = te.placeholder((8, 8), "float32", "A")
    b = te.placeholder((8, 8), "float32", "B")
    k = te.reduce_axis((0, 8), "k")
    matmul = te.compute((8, 8), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    assert recipes.find_conv(te.create_prim_func([a, b, matmul])) is None


def test_a_matmul_is_not_a_convolution():
    a = te.placeholder((4, 4), "float32", "A")
    b = te.placeholder((4, 4), "float32", "B")
    k = te.reduce_axis((0, 4), "k")
    c = te.compute((4, 4), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    with pytest.raises(ScheduleError, match="conv_fp32: the function has no single convolution block"):
        recipes.conv_fp32(te.create_prim_func([a, b, c]))


def test_recipe_vectorizes_and_tiles(rng):
    sch = recipes.conv_fp32(_conv(2, 8, 9, 16, 12, 3, 3, pad=1), gemm_tile=False)
    kinds = _kinds(sch.func)
    assert {"vectorized", "unrolled", "parallel"} <= kinds
    assert any(b.name == "W_global" for b in walk(sch.func.body) if isinstance(b, Block))  # packed weights
    _check(sch.func, rng, (2, 8, 9, 16), (12, 8, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1)


@pytest.mark.parametrize("c,o,w,k,pad,dilation", [
    (8, 12, 16, 3, 1, 1),   # MR divides the output channels
    (5, 10, 32, 3, 1, 1),   # a partial tile of output channels, a prime channel count
    (3, 7, 16, 3, 2, 2),    # dilated
    (4, 6, 16, 1, 0, 1),    # 1x1
    (3, 16, 24, 3, 1, 1),   # 8 divides the width, 16 does not: the one-vector tile
    (2, 5, 8, 3, 1, 1),     # ... with a partial tile of channels
])
def test_gemm_tile_path(rng, c, o, w, k, pad, dilation):
    """An output width the GEMM tile's NR divides, read at unit stride: the channel reduction runs
    in the micro-kernel, once per window position (the channel-vector and channel-rows tiles,
    which a short reduction takes first where they apply, set aside)."""
    tiles = [name for name in recipes.matmul.FP32_INTRINS + recipes.conv.NARROW_FP32_INTRINS
             if intrin.get(name).available() and w % recipes.common.tile_of(name)[1] == 0]
    if not tiles:
        pytest.skip("no fp32 GEMM tile here whose NR divides the width")
    sch = recipes.conv_fp32(_conv(2, c, 5, w, o, k, k, 1, pad, dilation), channel_vector=False, channel_rows=False)
    used = _tensorized_with(sch.func)
    assert len(used) == 1 and used <= set(tiles)
    mr = recipes.common.tile_of(next(iter(used)))[0]
    assert o % mr == 0 or all(o % recipes.common.tile_of(t)[0] for t in tiles)  # a whole tile when one fits
    _check(sch.func, rng, (2, c, 5, w), (o, c, k, k), (1, 1), (pad,) * 4, (dilation, dilation), 1)


def test_stride_two_keeps_the_direct_schedule():
    sch = recipes.conv_fp32(_conv(1, 4, 9, 32, 6, 3, 3, stride=2, pad=1))
    assert not _tensorized_with(sch.func) and "vectorized" in _kinds(sch.func)


def test_symbolic_width_falls_back_to_the_generic_schedule(rng):
    width = SizeVar("w", "int64")
    func = _conv(1, 3, 5, width, 4, 3, 3, pad=1)
    with pytest.raises(ScheduleError, match="symbolic output width"):
        recipes.conv_fp32(func)
    scheduled = schedule_kernel(func)
    assert not any(b.name == "W_global" for b in walk(scheduled.body) if isinstance(b, Block))
    x = rng.standard_normal((1, 3, 5, 11)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    expected = _np_conv(x, w, (1, 1), (1, 1, 1, 1), (1, 1))
    out = np.empty(expected.shape, np.float32)
    refcomp.build(scheduled)(x, w, out)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_default_schedule_matches_the_interpreter(rng):
    func = _conv(1, 3, 5, 6, 4, 3, 3, stride=1, pad=1)
    scheduled = schedule_kernel(func)
    assert "W_global" in {b.name for b in walk(scheduled.body) if isinstance(b, Block)}
    x = rng.standard_normal((1, 3, 5, 6)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    before, after = np.zeros((1, 4, 5, 6), np.float32), np.zeros((1, 4, 5, 6), np.float32)
    interpret(func, x, w, before)
    interpret(scheduled, x, w, after)
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(after, _np_conv(x, w, (1, 1), (1, 1, 1, 1), (1, 1)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n,c,h,w,o,k,stride,pad,dilation,groups", [
    (2, 16, 14, 14, 32, 3, 1, 1, 1, 1),    # a ResNet stage at half size
    (1, 3, 17, 17, 8, 7, 2, 3, 1, 1),      # the stem: 7x7, stride 2
    (1, 8, 8, 8, 16, 1, 1, 0, 1, 1),       # 1x1
    (1, 8, 10, 10, 8, 3, 1, 1, 1, 8),      # depthwise
    (1, 6, 9, 9, 9, 3, 2, 1, 1, 3),        # grouped, stride 2
    (1, 5, 13, 11, 7, 3, 1, 2, 2, 1),      # dilated, prime sizes
    (2, 7, 6, 32, 13, 3, 1, 1, 1, 1),      # GEMM tile, partial channel tile
    (1, 3, 4, 16, 5, 1, 1, 0, 1, 1),       # GEMM tile, 1x1
    (1, 1, 1, 1, 1, 1, 1, 0, 1, 1),        # all ones
])
def test_default_schedule_matches_numpy(rng, n, c, h, w, o, k, stride, pad, dilation, groups):
    func = schedule_kernel(_conv(n, c, h, w, o, k, k, stride, pad, dilation, groups))
    _check(func, rng, (n, c, h, w), (o, c // groups, k, k), (stride, stride), (pad,) * 4, (dilation, dilation),
           groups)


def test_conv1d_matches_numpy(rng):
    func = schedule_kernel(_conv1d(2, 5, 19, 6, 3, stride=1, pad=1))
    assert "vectorized" in _kinds(func)
    x = rng.standard_normal((2, 5, 19)).astype(np.float32)
    w = rng.standard_normal((6, 5, 3)).astype(np.float32)
    expected = _np_conv(x, w, (1,), (1, 1), (1,))
    np.testing.assert_allclose(_run(func, x, w, expected.shape, rng), expected, rtol=1e-4, atol=1e-4)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_shapes_match_numpy(rng, data):
    groups = data.draw(st.sampled_from([1, 1, 2, 3]), label="groups")
    per_group = data.draw(st.sampled_from([1, 2, 3, 5]), label="channels per group")
    out_per_group = data.draw(st.sampled_from([1, 2, 3, 7]), label="outputs per group")
    k = data.draw(st.integers(1, 3), label="k")
    stride = data.draw(st.integers(1, 2), label="stride")
    pad = data.draw(st.integers(0, k - 1), label="pad")
    h = data.draw(st.integers(k, 13), label="h")
    w = data.draw(st.integers(k, 19), label="w")
    n = data.draw(st.integers(1, 2), label="n")
    c, o = groups * per_group, groups * out_per_group
    func = schedule_kernel(_conv(n, c, h, w, o, k, k, stride, pad, 1, groups))
    _check(func, rng, (n, c, h, w), (o, per_group, k, k), (stride, stride), (pad,) * 4, (1, 1), groups)


def _local_tile(func) -> bool:
    """Whether the convolution accumulates into a "local" tile (the channel-vector form)."""
    return any(b.scope == "local" for s in walk(func.body) if isinstance(s, Block) for b in s.alloc_buffers)


@pytest.mark.parametrize("n,c,h,w,o,k,stride,pad", [
    (2, 5, 6, 6, 16, 3, 1, 1),     # a narrow output: 6 columns
    (1, 3, 3, 3, 8, 3, 1, 1),      # 3 x 3
    (1, 7, 13, 13, 8, 1, 2, 0),    # 1x1, stride 2, prime sizes
    (2, 3, 17, 17, 16, 7, 2, 3),   # the stem: 7x7 stride 2
    (1, 1, 1, 1, 8, 1, 1, 0),      # one pixel, one channel
    (1, 2, 11, 11, 24, 3, 1, 1),   # a prime width
])
def test_channel_vector_tile(rng, n, c, h, w, o, k, stride, pad):
    """Output channels a multiple of the vector and a width it does not divide (or a strided
    read): the output channels run in vectors, a row of columns in registers."""
    lanes = recipes.conv.native_lanes()
    func = _conv(n, c, h, w, o, k, k, stride, pad)
    sch = recipes.conv_fp32(func)
    out_width = (w + 2 * pad - k) // stride + 1
    if recipes.conv.channel_lanes(o, lanes) and (out_width % 8 or stride > 1):  # no GEMM tile fits
        assert _local_tile(sch.func) and {"vectorized", "parallel"} <= _kinds(sch.func)
    _check(sch.func, rng, (n, c, h, w), (o, c, k, k), (stride, stride), (pad,) * 4, (1, 1), 1)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((o, c, k, k)).astype(np.float32)
    before = np.zeros((n, o, out_width, out_width), np.float32)
    after = np.ones_like(before)
    interpret(func, x, wt, before)
    interpret(_interpretable(func).func, x, wt, after)
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-4)


def test_channel_vector_tile_conv1d(rng):
    func = _conv1d(2, 3, 13, 16, 3, stride=2, pad=1)
    sch = recipes.conv_fp32(func)
    x = rng.standard_normal((2, 3, 13)).astype(np.float32)
    w = rng.standard_normal((16, 3, 3)).astype(np.float32)
    expected = _np_conv(x, w, (2,), (1, 1), (1,))
    np.testing.assert_allclose(_run(sch.func, x, w, expected.shape, rng), expected, rtol=1e-4, atol=1e-4)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_channel_vector_random_shapes_match_numpy(rng, data):
    lanes = recipes.conv.native_lanes()
    o = lanes * data.draw(st.integers(1, 3), label="channel vectors")
    c = data.draw(st.sampled_from([1, 2, 3, 5, 7]), label="c")
    k = data.draw(st.sampled_from([1, 3]), label="k")
    stride = data.draw(st.integers(1, 2), label="stride")
    pad = data.draw(st.integers(0, k - 1), label="pad")
    h = data.draw(st.integers(k, 11), label="h")
    w = data.draw(st.integers(k, 13), label="w")
    func = schedule_kernel(_conv(1, c, h, w, o, k, k, stride, pad))
    _check(func, rng, (1, c, h, w), (o, c, k, k), (stride, stride), (pad,) * 4, (1, 1), 1)



@pytest.mark.parametrize("n,c,h,w,o,k,stride,pad", [
    (2, 64, 9, 9, 32, 3, 1, 1),     # a 3x3 over 64 channels: the register tile, 9 columns
    (1, 7, 17, 17, 24, 3, 2, 1),    # 24 channels: half-width vectors with AVX-512; stride 2, primes
    (1, 96, 5, 5, 16, 1, 1, 0),     # a 1x1 over 96 channels
    (1, 64, 6, 6, 8, 1, 2, 0),      # a strided 1x1, 8 channels
    (2, 1, 1, 1, 16, 1, 1, 0),      # one pixel, one channel
    (1, 3, 29, 29, 16, 7, 2, 3),    # the stem: 7x7 stride 2, 15 columns
    (2, 32, 3, 3, 32, 3, 1, 1),     # 3 x 3 outputs: the tile takes all 9 pixels (rows fused)
    (1, 16, 6, 6, 16, 3, 1, 1),     # 6 x 6 outputs: three rows per tile with AVX-512
])
def test_channel_vector_tile_on_both_widths(rng, vector_isa, n, c, h, w, o, k, stride, pad):
    """The channel-vector tile (local accumulators, weights packed per vector of channels) on
    AVX-512 and AVX2 widths: it is the form taken, the interpreter agrees with the unscheduled
    function and the compiled kernel with numpy."""
    native = recipes.conv.native_lanes()
    assert native == (8 if vector_isa == "avx2" else native)
    func = _conv(n, c, h, w, o, k, k, stride, pad)
    sch = recipes.conv_fp32(func)
    assert recipes.conv.channel_lanes(o, native) and _local_tile(sch.func)
    out_width = (w + 2 * pad - k) // stride + 1
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((o, c, k, k)).astype(np.float32)
    if n * c * o * out_width * out_width * k * k <= 200_000:
        before = np.zeros((n, o, out_width, out_width), np.float32)
        after = np.ones_like(before)
        interpret(func, x, wt, before)
        interpret(_interpretable(func).func, x, wt, after)
        np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-4)
    _check(sch.func, rng, (n, c, h, w), (o, c, k, k), (stride, stride), (pad,) * 4, (1, 1), 1)


def _packed_weight_shape(func) -> tuple:
    """The shape of the convolution's packed weights (the "_global" buffer the recipe allocates)."""
    found = [b for s in walk(func.body) if isinstance(s, Block) for b in s.alloc_buffers if b.name.endswith("_global")]
    assert len(found) == 1
    return tuple(as_int(d) for d in found[0].shape)


@pytest.mark.parametrize("n,c,h,w,o,k,stride,pad", [
    (2, 16, 7, 9, 32, 3, 1, 1),     # a 3x3: the window inside the channel loop
    (1, 5, 13, 11, 16, 5, 2, 2),    # 5x5 stride 2, prime sizes
    (1, 24, 4, 6, 16, 1, 1, 0),     # a 1x1: the channel loop alone
    (1, 3, 16, 24, 16, 8, 8, 0),    # an 8x8 patch embedding (64 positions): the window outside
])
def test_channel_vector_window_inside_the_channel_loop(rng, vector_isa, n, c, h, w, o, k, stride, pad):
    """A kernel window of 2 to 49 positions runs inside the channel loop, unrolled, on weights
    packed Wp[o // L, c, r0, r1, o % L] (a 1 x 1 or a larger window keeps Wp[o // L, r0, r1, c,
    o % L]); before == after in the interpreter and the compiled kernel agrees with numpy, on
    both vector widths."""
    lanes = recipes.conv.channel_lanes(o, recipes.conv.native_lanes())
    func = _conv(n, c, h, w, o, k, k, stride, pad)
    sch = recipes.conv_fp32(func)
    assert _local_tile(sch.func)
    inside = 1 < k * k <= 49
    expected = (o // lanes, c, k, k, lanes) if inside else (o // lanes, k, k, c, lanes)
    assert _packed_weight_shape(sch.func) == expected
    if inside:
        unrolled = [s for s in walk(sch.func.body) if isinstance(s, For) and s.kind == "unrolled"
                    and as_int(s.extent) == k]
        assert len(unrolled) >= 2  # both window loops (the tile's columns may have k too)
    out_width = (w + 2 * pad - k) // stride + 1
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((o, c, k, k)).astype(np.float32)
    before = np.zeros((n, o, (h + 2 * pad - k) // stride + 1, out_width), np.float32)
    after = np.ones_like(before)
    interpret(func, x, wt, before)
    interpret(_interpretable(func).func, x, wt, after)
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-4)
    _check(sch.func, rng, (n, c, h, w), (o, c, k, k), (stride, stride), (pad,) * 4, (1, 1), 1)


@pytest.mark.parametrize("size,expected", [
    (3, (1, 9)),     # a 3 x 3 output: one tile of its 9 pixels (whole rows)
    (7, (1, 7)),     # 7 columns (two vectors of channels left one accumulator each)
    (14, (1, 7)),
    (28, (1, 7)),
    (56, (1, 8)),
    (48, (1, 8)),
])
def test_avx2_window_inner_tile_is_one_vector_of_channels(rng, vector_isa, size, expected):
    """With AVX2 (8 lanes, 16 registers) a 3 x 3 convolution's channel-vector tile takes one
    vector of output channels and up to 9 output pixels (conv_tiles._CHANNEL_VECTORS); the
    tile the recipe builds agrees with numpy."""
    native = recipes.conv.native_lanes()
    if native != 8:
        pytest.skip("the AVX2 tile choice: 8-lane vectors")
    func = _conv(1, 8, size, size, 32, 3, 3, 1, 1)
    shape = recipes.conv.conv_shape(_conv_block(func), "test")
    _, mv, preferred, xb = conv_tiles.recipe_channel_vector_tile(_conv_block(func), shape, 8, native)
    tile = conv_tiles.whole_rows_tile(size, size, preferred) or xb
    assert (mv, tile) == expected
    if size <= 14:
        _check(recipes.conv_fp32(func).func, rng, (1, 8, size, size), (32, 8, 3, 3), (1, 1), (1,) * 4, (1, 1), 1)


def _conv_block(func):
    name = recipes.conv.find_conv(func).block
    return next(s for s in walk(func.body) if isinstance(s, Block) and s.name == name)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_channel_vector_tile_random_shapes_on_both_widths(rng, vector_isa, data):
    """Random shapes the channel-vector tile takes first (a reduction of 64 or more, output channels
    a multiple of 8): odd and prime sizes, size 1, stride 2, padding, dilation, batch 1 and 2."""
    o = 8 * data.draw(st.integers(1, 5), label="channel octets")
    k = data.draw(st.sampled_from([1, 3]), label="k")
    c = data.draw(st.sampled_from([64, 67, 96] if k == 1 else [8, 11, 16]), label="c")
    stride = data.draw(st.integers(1, 2), label="stride")
    dilation = data.draw(st.integers(1, 2), label="dilation") if k == 3 else 1
    pad = data.draw(st.integers(0, k - 1), label="pad")
    span = dilation * (k - 1) + 1
    h = data.draw(st.integers(max(span - 2 * pad, 1), 9), label="h")
    w = data.draw(st.integers(max(span - 2 * pad, 1), 31), label="w")
    n = data.draw(st.integers(1, 2), label="n")
    func = _conv(n, c, h, w, o, k, k, stride, pad, dilation)
    scheduled = schedule_kernel(func)
    assert _local_tile(scheduled)
    _check(scheduled, rng, (n, c, h, w), (o, c, k, k), (stride, stride), (pad,) * 4, (dilation, dilation), 1)


@pytest.mark.parametrize("blocks,k,pad,batches", [
    (8, 3, 1, (1, 2, 3)),   # 8 channel blocks: parallel over them, the next block's weights prefetched
    (9, 1, 0, (2,)),        # a 1 x 1 (the window outside the channel loop), an odd block count
    (4, 3, 1, (2,)),        # few blocks: the rows are the parallel loop, no next-block hint
])
@pytest.mark.parametrize("hints", [True, False])
def test_channel_vector_prefetches_the_next_blocks_weights(rng, vector_isa, monkeypatch, hints, blocks, k, pad,
                                                           batches):
    """With the channel blocks the parallel loop and the batch inside them, each step also
    prefetches the next block's weights, spread over two images ((c + n C) / 2: batch 2 reads
    each line once; other batches clamp or leave part of it to the hardware); with few blocks
    only the tile's own lines. Prefetch hints change no value: numpy agrees for batch 1, 2, 3
    through a symbolic batch, on both vector widths.  (The hints are made where
    conv_tiles.weight_hints says, AVX-512 CPUs; forced on and off here.)"""
    monkeypatch.setattr(conv_tiles, "weight_hints", lambda: hints)
    native = recipes.conv.native_lanes()
    mv = conv_tiles._CHANNEL_VECTORS.get((native, k > 1), 2)  # vectors of output channels per block
    o = blocks * mv * native
    c, h = (8, 5) if k == 3 else (64, 3)
    func = _conv(SizeVar("batch", "int64"), c, h, h, o, k, k, 1, pad)
    sch = recipes.conv_fp32(func)
    source = refcomp.build(sch.func).source
    assert source.count("__builtin_prefetch(") == ((2 * mv if blocks >= 8 else mv) if hints else 0)
    for n in batches:
        _check(sch.func, rng, (n, c, h, h), (o, c, k, k), (1, 1), (pad,) * 4, (1, 1), 1)


def _depthwise(n, c, h, w, k, stride=1, pad=0, dilation=1):
    return _conv(n, c, h, w, c, k, k, stride, pad, dilation, groups=c)


@pytest.mark.parametrize("n,c,h,w,k,stride,pad,dilation", [
    (2, 5, 8, 8, 3, 1, 1, 1),       # one vector of 8 columns per row
    (1, 3, 11, 32, 3, 1, 1, 1),     # a whole native vector (or two) per row
    (1, 4, 9, 23, 3, 2, 1, 1),      # stride 2: 12 columns, read at stride 2
    (2, 3, 7, 12, 3, 1, 2, 2),      # dilated
    (1, 2, 5, 4, 5, 1, 2, 1),       # 5x5, 4 columns
    (1, 2, 1, 4, 1, 1, 0, 1),       # one row, 1x1
    (1, 3, 5, 7, 3, 1, 1, 1),       # 7 columns: the row is the vector (4 + 2 + 1 lanes)
    (1, 3, 6, 2, 3, 1, 1, 1),       # 2 columns: the direct form
    (1, 2, 9, 37, 3, 2, 1, 1),      # 19 columns at stride 2: the direct form (or, with AVX2, too)
    (1, 3, 6, 24, 3, 1, 1, 1),      # 24 columns: one vector of 16 + 8 with AVX-512 (8 + 8 + 8 with AVX2)
    (2, 2, 7, 48, 3, 2, 1, 1),      # 48 -> 24 columns at stride 2
    (1, 2, 5, 12, 3, 1, 1, 1),      # 12 columns: one vector of 8 + 4 with AVX2
])
def test_depthwise_row_tile(rng, vector_isa, n, c, h, w, k, stride, pad, dilation):
    """Depthwise: a row of output columns in local vector accumulators over the kernel window,
    where a vector of at least 4 lanes divides the output width or the row is at most one native
    vector of 3 or more columns; the interpreter and numpy agree."""
    func = _depthwise(n, c, h, w, k, stride, pad, dilation)
    sch = recipes.conv_fp32(func)
    out_h = (h + 2 * pad - dilation * (k - 1) - 1) // stride + 1
    out_w = (w + 2 * pad - dilation * (k - 1) - 1) // stride + 1
    native = recipes.conv.native_lanes()
    assert _local_tile(sch.func) == (out_w % 4 == 0 or 2 < out_w <= native)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    before = np.zeros((n, c, out_h, out_w), np.float32)
    after = np.ones_like(before)
    interpret(func, x, wt, before)
    interpret(sch.func, x, wt, after)
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-4)
    _check(sch.func, rng, (n, c, h, w), (c, 1, k, k), (stride, stride), (pad,) * 4, (dilation, dilation), c)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_depthwise_random_shapes_on_both_widths(rng, vector_isa, data):
    """The default schedule of depthwise kernels (padded copy + row tile or direct form) on random
    shapes: odd and prime sizes, size 1, stride 2, padding, batch 1 and 2."""
    c = data.draw(st.sampled_from([1, 2, 3, 7, 16]), label="c")
    k = data.draw(st.sampled_from([1, 3, 5]), label="k")
    stride = data.draw(st.integers(1, 2), label="stride")
    pad = data.draw(st.integers(0, k // 2), label="pad")
    h = data.draw(st.integers(max(k - 2 * pad, 1), 9), label="h")
    w = data.draw(st.integers(max(k - 2 * pad, 1), 67), label="w")
    n = data.draw(st.integers(1, 2), label="n")
    func = schedule_kernel(_depthwise(n, c, h, w, k, stride, pad))
    _check(func, rng, (n, c, h, w), (c, 1, k, k), (stride, stride), (pad,) * 4, (1, 1), c)


def _channel_copies(func) -> bool:
    """Whether func reads its input in vectors of channels (a 5-d copy Xc[n, c // L, y, x, c % L])."""
    return any(isinstance(s, Block) and any(len(w.buffer.shape) == 5 for w in s.writes) for s in walk(func.body))


@pytest.mark.parametrize("n,c,h,w,k,stride,pad", [
    (2, 32, 3, 3, 3, 1, 1),         # a MobileNet's last stage: 3 x 3 planes, two channel vectors
    (1, 48, 6, 6, 3, 1, 1),         # 6 x 6, three channel vectors
    (2, 16, 6, 6, 3, 2, 1),         # stride 2: 6 x 6 to 3 x 3
    (1, 16, 7, 5, 3, 1, 0),         # no padding: the input planes copied themselves, odd sizes
    (1, 16, 1, 1, 1, 1, 0),         # one pixel, 1 x 1
    (2, 16, 5, 7, 5, 2, 2),         # 5 x 5, stride 2, prime sizes
    (1, 32, 2, 1, 3, 1, 1),         # one column
])
def test_depthwise_channel_vectors(rng, vector_isa, n, c, h, w, k, stride, pad):
    """Depthwise with output rows of at most half a native vector: the channels in vectors (the
    input planes transposed per channel block, the padded copy made from them in that layout)
    where the CPU has the transpose (AVX-512), else the row tile or direct form (AVX2); numpy
    agrees with the compiled kernel, the interpreter with the form's loops (the copies untransposed)."""
    func = _depthwise(n, c, h, w, k, stride, pad)
    native = recipes.conv.native_lanes()
    out_h, out_w = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    sch = recipes.conv_fp32(func)
    assert _channel_copies(sch.func) == (vector_isa != "avx2" and native == 16)
    if vector_isa != "avx2" and native == 16:
        assert any(name.startswith("x86.avx512.channel_vectors") for name in _tensorized_with(sch.func))
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    before = np.zeros((n, c, out_h, out_w), np.float32)
    after = np.ones_like(before)
    interpret(func, x, wt, before)
    loops_only = recipes.conv_fp32(func, parallel=False, transpose_tile=False)
    interpret(loops_only.func, x, wt, after)
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-4)
    _check(sch.func, rng, (n, c, h, w), (c, 1, k, k), (stride, stride), (pad,) * 4, (1, 1), c)
    _check(schedule_kernel(func), rng, (n, c, h, w), (c, 1, k, k), (stride, stride), (pad,) * 4, (1, 1), c)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_depthwise_channel_vectors_random_shapes(rng, data):
    """The default schedule of depthwise kernels with narrow outputs on random shapes (channels a
    multiple of 8 or 16, odd and prime sizes, size 1, stride 1 and 2, padding 0 to 2, batch 1
    and 2) against numpy."""
    c = data.draw(st.sampled_from([8, 16, 32, 48]), label="c")
    k = data.draw(st.sampled_from([1, 3, 5]), label="k")
    stride = data.draw(st.integers(1, 2), label="stride")
    pad = data.draw(st.integers(0, k // 2), label="pad")
    h = data.draw(st.integers(max(k - 2 * pad, 1), 9), label="h")
    w = data.draw(st.integers(max(k - 2 * pad, 1), 13), label="w")
    n = data.draw(st.integers(1, 2), label="n")
    func = schedule_kernel(_depthwise(n, c, h, w, k, stride, pad))
    _check(func, rng, (n, c, h, w), (c, 1, k, k), (stride, stride), (pad,) * 4, (1, 1), c)


def _rows_tile(func) -> bool:
    """Whether the convolution accumulates rows of output columns for several channels in a local
    tile written straight to the output (no transpose, no packed weights)."""
    blocks = [s for s in walk(func.body) if isinstance(s, Block)]
    return _local_tile(func) and not _tensorized_with(func) and not any(
        any(w.buffer.name.endswith("_global") for w in b.writes) for b in blocks)


@pytest.mark.parametrize("n,c,h,w,o,k,stride,pad", [
    (2, 8, 5, 48, 48, 1, 1, 0),     # a MobileNet's 1x1 expansion: three native vectors per row
    (1, 16, 3, 24, 96, 1, 1, 0),    # 24 columns: the whole row one vector (16 + 8 with AVX-512)
    (2, 3, 9, 33, 16, 3, 2, 1),     # the stem: 3 x 3 x 3, stride 2, 17 columns (no such tile: other forms)
    (1, 3, 7, 32, 7, 3, 1, 1),      # 7 output channels: tiles of 7
    (1, 5, 4, 16, 13, 3, 1, 1),     # a prime channel count, 45 terms
    (2, 1, 1, 16, 1, 1, 1, 0),      # one channel, one row
    (1, 7, 6, 64, 32, 1, 1, 0),     # four vectors per row: tiles of two
])
def test_channel_rows_tile(rng, vector_isa, n, c, h, w, o, k, stride, pad):
    """Short reductions (fewer than 64 terms) on rows a native vector divides, or of one to two
    native vectors in halves: OB output channels x a row of vectors in a local tile, written to
    the output's rows; the interpreter agrees with the unscheduled function and the compiled
    kernel with numpy, on AVX-512 and AVX2 widths."""
    native = recipes.conv.native_lanes()
    func = _conv(n, c, h, w, o, k, k, stride, pad)
    out_w = (w + 2 * pad - k) // stride + 1
    takes = out_w % native == 0 or (native < out_w < 2 * native and out_w % (native // 2) == 0)
    sch = recipes.conv_fp32(func)
    assert _rows_tile(sch.func) == takes
    out_h = (h + 2 * pad - k) // stride + 1
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((o, c, k, k)).astype(np.float32)
    before = np.zeros((n, o, out_h, out_w), np.float32)
    after = np.ones_like(before)
    interpret(func, x, wt, before)
    interpret(recipes.conv_fp32(func, transpose_tile=False).func, x, wt, after)
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-4)
    _check(sch.func, rng, (n, c, h, w), (o, c, k, k), (stride, stride), (pad,) * 4, (1, 1), 1)
    _check(schedule_kernel(func), rng, (n, c, h, w), (o, c, k, k), (stride, stride), (pad,) * 4, (1, 1), 1)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_short_reductions_random_shapes(rng, data):
    """The default schedule of convolutions with short reductions (1x1 over 1-16 channels, 3 x 3
    over 1-7) at random shapes: output widths around one and two vectors, odd channel counts,
    stride 2, padding, batch 1 and 2; the numbers are numpy's."""
    k = data.draw(st.sampled_from([1, 3]), label="k")
    c = data.draw(st.integers(1, 16 if k == 1 else 7), label="c")
    o = data.draw(st.sampled_from([1, 5, 8, 13, 16, 48]), label="o")
    stride = data.draw(st.integers(1, 2), label="stride")
    pad = data.draw(st.integers(0, k // 2), label="pad")
    w = data.draw(st.sampled_from([8, 12, 16, 23, 24, 32, 48, 49]), label="w")
    h = data.draw(st.integers(max(k - 2 * pad, 1), 5), label="h")
    n = data.draw(st.integers(1, 2), label="n")
    func = schedule_kernel(_conv(n, c, h, w, o, k, k, stride, pad))
    _check(func, rng, (n, c, h, w), (o, c, k, k), (stride, stride), (pad,) * 4, (1, 1), 1)
