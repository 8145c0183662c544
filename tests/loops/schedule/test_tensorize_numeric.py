"""Tensorized programs compiled by gcc and run on fresh random data, against numpy.

Hypothesis picks the tile counts, the k split and the values; every intrinsic this CPU can run is
checked (the others are compiled only, in tests/loops/intrin/test_kernels.py)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import refcomp
from refcomp.loops import intrin
from refcomp.loops.intrin import x86
from refcomp.loops.primitives.tensorize import tensorize

from .tensorize_programs import tile_loop, tiled_matmul_update

AVX2_TILES = {
    "x86.avx2.sgemm_6x16": ("float32", "float32", "float32", "rows"),
    "x86.avx2.bf16gemm_6x16": ("bfloat16", "bfloat16", "float32", "rows"),
    "x86.avx2.i8gemm_6x16": ("int8", "int8", "int32", "pairs"),
    "x86.avx512.sgemm_8x32": ("float32", "float32", "float32", "rows"),
    "x86.vnni.i8gemm_8x32": ("int8", "int8", "int32", "quads"),
}


def _params():
    out = []
    for name in AVX2_TILES:
        info = intrin.get(name)
        marks = [pytest.mark.skipif(not info.available(), reason=f"CPU lacks {info.cpu_features}")]
        if "avx512f" in info.cpu_features:
            marks.append(pytest.mark.amx)
        out.append(pytest.param(name, marks=marks))
    return out


def _bf16(x):
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _value(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _pack(b, layout, nr):
    k, n = b.shape
    if layout == "rows":
        return b
    group = {"pairs": 2, "quads": 4}[layout]
    return np.ascontiguousarray(b.reshape(k // group, group, n).transpose(0, 2, 1))


@pytest.mark.parametrize("name", _params())
@given(m=st.integers(1, 20), n_tiles=st.integers(1, 2), k_groups=st.integers(1, 6), split_k=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
@settings(max_examples=5)
def test_tensorized_tile_matches_numpy(name, m, n_tiles, k_groups, split_k, seed):
    rng = np.random.default_rng(seed)
    a_t, b_t, c_t, layout = AVX2_TILES[name]
    mr, nr, k_multiple = x86.tile_shape(name)
    n = n_tiles * nr
    k = 2 * k_groups * k_multiple if split_k else k_groups * k_multiple
    kc = k // 2 if split_k else None
    func = tiled_matmul_update(m, n, k, mr, nr, kc, a_dtype=a_t, b_dtype=b_t, acc_dtype=c_t, b_layout=layout)
    func, _ = tensorize(func, tile_loop(func, "ii"), name)
    if a_t == "int8":
        a = rng.integers(-128, 128, (m, k), dtype=np.int8)
        b = rng.integers(-128, 128, (k, n), dtype=np.int8)
        c = rng.integers(-1000, 1000, (m, n), dtype=np.int32)
        expected = c + a.astype(np.int32) @ b.astype(np.int32)
    elif a_t == "bfloat16":
        a, b = _bf16(rng.standard_normal((m, k))), _bf16(rng.standard_normal((k, n)))
        c = rng.standard_normal((m, n)).astype(np.float32)
        expected = c + _value(a) @ _value(b)
    else:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        c = rng.standard_normal((m, n)).astype(np.float32)
        expected = c.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)
    refcomp.build(func)(a, _pack(b, layout, nr), c)  # bounds proved by the default build
    if a_t == "int8":
        np.testing.assert_array_equal(c, expected)
    else:
        np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-4 * k)


@pytest.mark.parametrize("decompose,split_k", [(True, False), (False, False), (False, True)])
def test_te_matmul_through_schedule_matches_numpy_and_interpreter(rng, decompose, split_k):
    """decompose_reduction first, or let blockize move the init into the tile block."""
    from refcomp import te
    from refcomp.loops.schedule import Schedule

    m, n, k = 13, 32, 24
    a_t = te.placeholder((m, k), "float32", "A")
    b_t = te.placeholder((k, n), "float32", "B")
    r = te.reduce_axis((0, k), "k")
    c_t = te.compute((m, n), lambda i, j: te.sum(a_t[i, r] * b_t[r, j], axis=r), name="C")
    func = te.create_prim_func([a_t, b_t, c_t])
    sch = Schedule(func)
    blk = sch.get_block("C")
    i, j, kk = sch.get_loops(blk)
    i0, i1 = sch.split(i, [None, 6])
    j0, j1 = sch.split(j, [None, 16])
    if split_k:
        k0, k1 = sch.split(kk, [None, 8])
        sch.reorder(i0, j0, k0, i1, j1, k1)
    else:
        sch.reorder(i0, j0, i1, j1, kk)
    if decompose:
        sch.decompose_reduction(blk, i1)
    untensorized = sch.func
    sch.tensorize(i1, "x86.avx2.sgemm_6x16")
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c_interp = rng.standard_normal((m, n)).astype(np.float32)
    refcomp.interpret(untensorized, a, b, c_interp)
    c = rng.standard_normal((m, n)).astype(np.float32)
    refcomp.build(sch.func)(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(c, c_interp, rtol=1e-5, atol=1e-4)


@pytest.mark.skipif(not intrin.get("x86.avx2.sgemm_6x16").available(), reason="CPU lacks AVX2/FMA")
def test_int64_shapes_pack_and_tensorize(rng):
    """A matmul with int64 dims (as the graph level builds them): cache_read + transform_layout of
    B into column panels, then the tile intrinsic (described in int32) over int64 loops."""
    from refcomp import te
    from refcomp.ast import IntImm
    from refcomp.loops.schedule import Schedule

    m, n, k = (IntImm(v, "int64") for v in (13, 32, 24))
    a_t = te.placeholder((m, k), "float32", "A")
    b_t = te.placeholder((k, n), "float32", "B")
    r = te.reduce_axis((IntImm(0, "int64"), k), "k")
    c_t = te.compute((m, n), lambda i, j: te.sum(a_t[i, r] * b_t[r, j], axis=r), name="C")
    func = te.create_prim_func([a_t, b_t, c_t])
    sch = Schedule(func)
    blk = sch.get_block("C")
    packed = sch.cache_read(blk, 1, "global")
    sch.transform_layout(packed, ("write", 0), lambda kk, jj: (jj // 16, kk, jj % 16))
    i, j, kk = sch.get_loops(blk)
    i0, i1 = sch.split(i, [None, 6])
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder(i0, j0, i1, j1, kk)
    sch.decompose_reduction(blk, i1)
    untensorized = sch.func
    sch.tensorize(i1, "x86.avx2.sgemm_6x16")
    a = rng.standard_normal((13, 24)).astype(np.float32)
    b = rng.standard_normal((24, 32)).astype(np.float32)
    c_interp = rng.standard_normal((13, 32)).astype(np.float32)
    refcomp.interpret(untensorized, a, b, c_interp)
    c = rng.standard_normal((13, 32)).astype(np.float32)
    refcomp.build(sch.func)(a, b, c)
    np.testing.assert_allclose(c_interp, a @ b, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-4)


@pytest.mark.skipif(not intrin.get("x86.avx2.sgemm_6x16").available(), reason="CPU lacks AVX2/FMA")
def test_matmul_recipe_on_int64_shapes(rng):
    """The fp32 matmul recipe (B packed with transform_layout, tensorized tiles, parallel loops)
    on a PrimFunc whose dims are int64, as the graph level builds them."""
    from refcomp import te
    from refcomp.ast import IntImm
    from refcomp.loops.recipes import matmul_fp32

    m, n, k = (IntImm(v, "int64") for v in (40, 64, 48))
    a_t = te.placeholder((m, k), "float32", "A")
    b_t = te.placeholder((k, n), "float32", "B")
    r = te.reduce_axis((IntImm(0, "int64"), k), "k")
    c_t = te.compute((m, n), lambda i, j: te.sum(a_t[i, r] * b_t[r, j], axis=r), name="C")
    sch = matmul_fp32(te.create_prim_func([a_t, b_t, c_t]))
    a = rng.standard_normal((40, 48)).astype(np.float32)
    b = rng.standard_normal((48, 64)).astype(np.float32)
    c = rng.standard_normal((40, 64)).astype(np.float32)
    refcomp.build(sch.func)(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-4)


@pytest.mark.skipif(not intrin.get("x86.avx2.sgemm_6x16").available(), reason="CPU lacks AVX2 + FMA")
@given(batches=st.integers(1, 3), k=st.integers(1, 9), row_tiles=st.integers(1, 2), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=3, deadline=None)
def test_tile_with_fixed_iters_and_dims_between(batches, k, row_tiles, seed):
    """C[i, b, j] += A[i, q] * B[b, q, j] for each b: the batch iter b is fixed in the (i, j, q)
    tile and sits between C's matched dims, so the tile is C[i, j] with b in its origin."""
    from refcomp import te
    from refcomp.loops.schedule import Schedule

    m, n = 6 * row_tiles, 16
    a = te.placeholder((m, k), "float32", "A")
    b = te.placeholder((batches, k, n), "float32", "B")
    q = te.reduce_axis((0, k), "q")
    c = te.compute((m, batches, n), lambda i, t, j: te.sum(a[i, q] * b[t, q, j], axis=q), name="C")
    sch = Schedule(te.create_prim_func([a, b, c]))
    i, t, j, q_loop = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, [None, 6])
    sch.reorder(t, i0, i1, j, q_loop)
    sch.tensorize(i1, "x86.avx2.sgemm_6x16")
    assert "refcomp_sgemm_avx2_6x16" in sch.func.script()
    rng = np.random.default_rng(seed)
    av = rng.standard_normal((m, k)).astype(np.float32)
    bv = rng.standard_normal((batches, k, n)).astype(np.float32)
    out = rng.standard_normal((m, batches, n)).astype(np.float32)
    refcomp.build(sch.func)(av, bv, out)
    np.testing.assert_allclose(out, np.einsum("iq,tqj->itj", av, bv), rtol=1e-5, atol=1e-4)


@pytest.mark.skipif(not intrin.get("x86.avx2.sgemm_6x16").available(), reason="CPU lacks AVX2/FMA")
@pytest.mark.parametrize("init_value", [0.0, 1.5])
@pytest.mark.parametrize("kc", [None, 8])
def test_tile_init_folded_or_kept_matches_numpy(rng, init_value, kc):
    """C = init + A @ B with the init in the tile block: a zero init is folded into the kernel's
    init form (the first k slab writes C without reading it), any other value is kept; C starts
    as noise either way, M = 13 leaves a partial tile, K = 24 is one slab or three."""
    from refcomp.ast import Block, BlockRealize, BufferStore
    from refcomp.loops.primitives.tree import replace_in_func, walk

    m, n, k = 13, 32, 24
    func = tiled_matmul_update(m, n, k, 6, 16, kc)
    update = next(s for s in walk(func.body) if isinstance(s, Block) and s.name == "C")
    vi, vj, _ = (iv.var for iv in update.iter_vars)
    realize = next(s for s in walk(func.body) if isinstance(s, BlockRealize) and s.block is update)
    func = replace_in_func(func, {id(realize): realize.with_(
        block=update.with_(init=BufferStore(func.params[2], init_value, (vi, vj))))})
    out, _ = tensorize(func, tile_loop(func, "ii"), "x86.avx2.sgemm_6x16")
    folded = any(isinstance(s, Block) and s.name == "C_o" and s.init is None for s in walk(out.body))
    assert folded == (init_value == 0.0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = rng.standard_normal((m, n)).astype(np.float32)
    refcomp.build(out)(a, b, c)
    np.testing.assert_allclose(c, init_value + a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)


@pytest.mark.skipif(not intrin.get("x86.avx2.sgemm_6x16").available(), reason="CPU lacks AVX2/FMA")
@given(m=st.integers(1, 25), kc=st.sampled_from([None, 4, 8, 12]), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=8, deadline=None)
def test_folded_init_any_rows_and_slabs(m, kc, seed):
    """The folded init over random row counts (partial last tiles, tiles past the edge) and slab
    counts: C (noise on entry) ends as A @ B."""
    from refcomp.ast import Block, BlockRealize, BufferStore
    from refcomp.loops.primitives.tree import replace_in_func, walk

    rng = np.random.default_rng(seed)
    n, k = 32, 24
    func = tiled_matmul_update(m, n, k, 6, 16, kc)
    update = next(s for s in walk(func.body) if isinstance(s, Block) and s.name == "C")
    vi, vj, _ = (iv.var for iv in update.iter_vars)
    realize = next(s for s in walk(func.body) if isinstance(s, BlockRealize) and s.block is update)
    func = replace_in_func(func, {id(realize): realize.with_(
        block=update.with_(init=BufferStore(func.params[2], 0.0, (vi, vj))))})
    out, _ = tensorize(func, tile_loop(func, "ii"), "x86.avx2.sgemm_6x16")
    assert all(s.init is None for s in walk(out.body) if isinstance(s, Block) and s.name == "C_o")
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = rng.standard_normal((m, n)).astype(np.float32)
    refcomp.build(out)(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)
