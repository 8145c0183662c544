"""The tile transpose intrinsics (a tile of positions x 16 channels to channels x positions, in
registers) and the convolution tile written back through them.

Each is compiled to C and compared with numpy on fresh random data; the intrinsic needs AVX-512
and the tests skip without it.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import refcomp
from refcomp import te
from refcomp.ast import Block
from refcomp.graph.op.nn import _conv_te, _np_conv
from refcomp.graph.passes.default_schedule import schedule_kernel
from refcomp.loops import recipes
from refcomp.loops.primitives.tree import walk
from refcomp.loops.recipes.transpose import tile_transpose_intrin, tile_transpose_name
from refcomp.loops.schedule import Schedule

LANES = 16


def _needs_avx512():
    if not tile_transpose_intrin(1, 2, LANES).available():
        pytest.skip("this CPU has no AVX-512")


def _tensorized_with(func) -> set[str]:
    return {s.annotations["tensorized"] for s in walk(func.body) if isinstance(s, Block) and "tensorized" in s.annotations}


def test_shapes_outside_the_family_have_no_intrinsic():
    assert tile_transpose_intrin(1, 1, LANES) is None  # one position: nothing to transpose
    assert tile_transpose_intrin(3, 6, LANES) is None  # 18 positions: more than the lanes
    assert tile_transpose_intrin(1, 4, 8) is None  # no 8-lane form
    assert tile_transpose_intrin(2, 1, LANES) is None  # rows of one column
    assert tile_transpose_name(2, 6, LANES) == "x86.avx512.transpose_tile_f32_2x6x16"
    assert tile_transpose_name(1, 12, LANES) == "x86.avx512.transpose_tile_f32_12x16"


@pytest.mark.parametrize("rows,columns,channels", [(1, 2, 16), (1, 12, 32), (1, 16, 16), (2, 6, 32), (3, 3, 48),
                                                   (4, 4, 16), (5, 3, 16), (1, 7, 16)])
def test_transpose_tile_matches_numpy(rng, rows, columns, channels):
    """T[o, y, x] = A[y, x, o] over int64 dims, tensorized per vector of 16 channels: the kernel
    equals numpy's transpose, and the tile's addresses carry no narrowing cast."""
    _needs_avx512()
    i64 = lambda v: te.const(v, "int64")  # noqa: E731
    if rows == 1:
        a = te.placeholder((i64(columns), i64(channels)), "float32", "A")
        t = te.compute((i64(channels), i64(columns)), lambda o, x: a[x, o], name="T")
    else:
        a = te.placeholder((i64(rows), i64(columns), i64(channels)), "float32", "A")
        t = te.compute((i64(channels), i64(rows), i64(columns)), lambda o, y, x: a[y, x, o], name="T")
    sch = Schedule(te.create_prim_func([a, t]))
    block = sch.get_block("T")
    o, *positions = sch.get_loops(block)
    o_outer, o_inner = sch.split(o, [None, LANES])
    sch.reorder(o_outer, *positions, o_inner)
    sch.tensorize(positions[0], tile_transpose_name(rows, columns, LANES))
    assert _tensorized_with(sch.func) == {tile_transpose_name(rows, columns, LANES)}
    lib = refcomp.build(sch.func)
    assert "(int32_t)" not in lib.source.split("refcomp_transpose_tile_f32x16(", 2)[-1]
    x = rng.standard_normal(tuple(int(d.value) for d in a.shape)).astype(np.float32)
    out = rng.standard_normal(tuple(int(d.value) for d in t.shape)).astype(np.float32)
    lib(x, out)
    np.testing.assert_array_equal(out, np.moveaxis(x, -1, 0))


def _conv(n, c, h, w, o, k, stride=1, pad=0):
    dim = lambda v: te.const(v, "int64")  # noqa: E731
    x = te.placeholder((dim(n), dim(c), dim(h), dim(w)), "float32", "X")
    wt = te.placeholder((dim(o), dim(c), dim(k), dim(k)), "float32", "W")
    y = _conv_te(2)(x, wt, (stride, stride), (pad,) * 4, (1, 1), 1)
    return te.create_prim_func([x, wt, y])


@pytest.mark.parametrize("n,c,h,w,o,k,stride,pad,form", [
    (2, 48, 6, 6, 32, 1, 1, 0, "2x6x16"),     # whole rows: two rows of six, one transpose
    (1, 16, 3, 3, 48, 1, 1, 0, "3x3x16"),     # all nine pixels
    (2, 24, 24, 24, 32, 1, 1, 0, "12x16"),    # runs of twelve columns of one row
    (1, 8, 13, 13, 16, 3, 1, 1, "13x16"),     # a prime width, 3 x 3 over 8 channels
    (1, 32, 9, 9, 16, 3, 2, 1, "5x16"),       # stride 2: five columns
])
def test_convolution_tile_written_back_transposed(rng, n, c, h, w, o, k, stride, pad, form):
    """The channel-vector tile written back through the tile transpose (short reductions included:
    with the transpose they take that tile first), equal to numpy."""
    _needs_avx512()
    func = _conv(n, c, h, w, o, k, stride, pad)
    sch = recipes.conv_fp32(func, channel_rows=False)
    assert f"x86.avx512.transpose_tile_f32_{form}" in _tensorized_with(sch.func)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((o, c, k, k)).astype(np.float32)
    expected = _np_conv(x, wt, (stride, stride), (pad,) * 4, (1, 1), 1)
    out = rng.standard_normal(expected.shape).astype(np.float32)
    lib = refcomp.build(sch.func, target="c -Werror")  # the helper passes -Wall -Wextra too
    # both tiles stay per-thread stack arrays of one tile (the transpose is a relocatable call:
    # its strides are address distances), not whole-output buffers allocated per tile
    assert re.search(r"float \w+_local_local\[\d+\]", lib.source) and re.search(r"float \w+_local\[\d+\]", lib.source)
    lib(x, wt, out)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
    # the same schedule without the transpose computes the same values
    plain = recipes.conv_fp32(func, transpose_tile=False, channel_rows=False)
    assert not any("transpose_tile" in name for name in _tensorized_with(plain.func))
    again = np.empty_like(out)
    refcomp.build(plain.func)(x, wt, again)
    np.testing.assert_allclose(again, out, rtol=1e-5, atol=1e-5)


def test_default_schedule_with_an_epilogue_matches_numpy(rng):
    """conv + bias + ReLU as the graph level fuses it: the epilogue runs in the transposed
    tile's write-back."""
    _needs_avx512()
    dim = lambda v: te.const(v, "int64")  # noqa: E731
    x = te.placeholder((dim(2), dim(32), dim(6), dim(6)), "float32", "X")
    wt = te.placeholder((dim(64), dim(32), dim(1), dim(1)), "float32", "W")
    bias = te.placeholder((dim(64),), "float32", "B")
    y = _conv_te(2)(x, wt, (1, 1), (0,) * 4, (1, 1), 1)
    out = te.compute(y.shape, lambda i, j, p, q: te.max(y[i, j, p, q] + bias[j], te.const(0.0, "float32")),
                     name="relu")
    func = schedule_kernel(te.create_prim_func([x, wt, bias, out]))
    assert any("transpose_tile" in name for name in _tensorized_with(func))
    xs = rng.standard_normal((2, 32, 6, 6)).astype(np.float32)
    ws = rng.standard_normal((64, 32, 1, 1)).astype(np.float32)
    bs = rng.standard_normal(64).astype(np.float32)
    got = rng.standard_normal((2, 64, 6, 6)).astype(np.float32)
    refcomp.build(func)(xs, ws, bs, got)
    expected = np.maximum(_np_conv(xs, ws, (1, 1), (0,) * 4, (1, 1), 1) + bs[None, :, None, None], 0)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("channels,width,plane_stride", [(16, 1, 1), (16, 5, 5), (32, 8, 8), (48, 13, 13),
                                                          (16, 16, 16), (32, 24, 24), (16, 7, 9)])
def test_channel_vectors_match_numpy(rng, channels, width, plane_stride):
    """T[x, c // 16, c % 16] = A[c, x] (a row of each channel plane turned into one vector of
    channels per column), tensorized per run of the widest divisor of the width up to 16 columns,
    planes plane_stride apart: the kernel equals numpy's transpose; without AVX-512 there is no
    such intrinsic."""
    from refcomp.loops.recipes.transpose import channel_vectors_intrin, channel_vectors_name

    assert channel_vectors_intrin(0, LANES) is None and channel_vectors_intrin(17, LANES) is None
    assert channel_vectors_intrin(4, 8) is None
    _needs_avx512()
    i64 = lambda v: te.const(v, "int64")  # noqa: E731
    a = te.placeholder((i64(channels), i64(plane_stride)), "float32", "A")
    t = te.compute((i64(channels), i64(width)), lambda c, x: a[c, x], name="T")
    sch = Schedule(te.create_prim_func([a, t]))
    block = sch.get_block("T")
    sch.transform_layout(block, ("write", 0), lambda c, x: (x, c // LANES, c % LANES))
    c, x = sch.get_loops(block)
    chunk = max(d for d in range(1, min(width, LANES) + 1) if width % d == 0)
    cb, c = sch.split(c, [None, LANES])
    x_outer, x_inner = sch.split(x, [None, chunk])
    sch.reorder(cb, x_outer, c, x_inner)
    sch.tensorize(c, channel_vectors_name(chunk, LANES))
    assert _tensorized_with(sch.func) == {channel_vectors_name(chunk, LANES)}
    data = rng.standard_normal((channels, plane_stride)).astype(np.float32)
    out = rng.standard_normal((width, channels // LANES, LANES)).astype(np.float32)
    refcomp.build(sch.func)(data, out)
    np.testing.assert_array_equal(out.reshape(width, channels), data[:, :width].T)


def test_two_address_taking_intrinsics_keep_both_relocatable_calls():
    """A depthwise kernel on the channel-vector form uses two transposes that take their operands
    by address (the input's channel vectors and the tile's write-back): the function lists both
    as relocatable, so compaction shrinks the stack tiles of each."""
    _needs_avx512()
    dim = lambda v: te.const(v, "int64")  # noqa: E731
    x = te.placeholder((dim(2), dim(32), dim(3), dim(3)), "float32", "X")
    wt = te.placeholder((dim(32), dim(1), dim(3), dim(3)), "float32", "W")
    y = _conv_te(2)(x, wt, (1, 1), (1,) * 4, (1, 1), 32)
    sch = recipes.conv_fp32(te.create_prim_func([x, wt, y]))
    calls = set(sch.func.attrs.get("relocatable_calls", ()))
    assert {"refcomp_channel_vectors_f32x16", "refcomp_transpose_tile_f32x16"} <= calls
