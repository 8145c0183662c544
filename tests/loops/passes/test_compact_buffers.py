"""compact_local_buffers (the C target's lowering hook): a "local" cache stage computed at a loop
gets a stack tile of one iteration's size, inside that loop, and the kernel still computes the same
numbers; local buffers it cannot shrink keep their allocation."""
from __future__ import annotations

import numpy as np
import pytest

import refcomp
from refcomp import te
from refcomp.ast import Allocate, For, as_int, collect
from refcomp.driver import C_LOWERING
from refcomp.loops.lower import lower
from refcomp.loops.passes.compact_buffers import compact_local_buffers
from refcomp.loops.passes.lower_blocks import lower_blocks
from refcomp.loops.schedule import Schedule


def _matmul(m: int, n: int, k: int):
    a = te.placeholder((m, k), "float32", "A")
    b = te.placeholder((k, n), "float32", "B")
    r = te.reduce_axis((0, k), "r")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), "C")
    return te.create_prim_func([a, b, c])


def _tiled(m: int, n: int, k: int, tile: int = 4, parallel: bool = True):
    """C accumulated in a local tile of `tile` columns per (i, j // tile), written back there."""
    sch = Schedule(_matmul(m, n, k))
    rv = sch.get_block("C")
    i, j, r = sch.get_loops(rv)
    j0, j1 = sch.split(j, [None, tile])
    sch.reorder(i, j0, r, j1)
    local = sch.cache_write(rv, 0, "local")
    sch.reverse_compute_at(local, j0)
    if parallel:
        sch.parallel(i)
    return sch.func


def _allocations(func):
    return {a.buffer.name: a for a in collect(func.body, Allocate)}


def test_a_local_tile_moves_under_its_loops_and_shrinks_to_one_iteration():
    before = lower_blocks(_tiled(6, 12, 5))
    after = compact_local_buffers(before)
    (name,) = [n for n in _allocations(before) if "local" in n]
    assert [as_int(d) for d in _allocations(before)[name].buffer.shape] == [6, 12]
    tile = _allocations(after)[name]
    assert [as_int(d) for d in tile.buffer.shape] == [1, 4]
    # the allocation now stands inside the parallel loop: one tile per thread
    parallel = [f for f in collect(after.body, For) if f.kind == "parallel"]
    assert parallel and any(a is tile for a in collect(parallel[0].body, Allocate))


def test_global_buffers_and_unshrinkable_local_ones_are_left_alone():
    sch = Schedule(_matmul(4, 8, 3))
    sch.cache_write(sch.get_block("C"), 0, "local")  # written back after the whole matmul
    before = lower_blocks(sch.func)
    after = compact_local_buffers(before)
    assert [tuple(as_int(d) for d in a.buffer.shape) for a in collect(after.body, Allocate)] == [(4, 8)]
    assert compact_local_buffers(lower_blocks(_matmul(3, 3, 3))).body is not None


def test_the_c_target_runs_it():
    lowered = lower(_tiled(6, 12, 5), hooks=C_LOWERING)
    shapes = [tuple(as_int(d) for d in a.buffer.shape) for a in collect(lowered.body, Allocate)]
    assert shapes == [(4,)]  # flattened after compaction


@pytest.mark.parametrize("m,n,k,tile", [(6, 12, 5, 4), (1, 7, 1, 7), (13, 10, 17, 5), (3, 16, 2, 16)])
def test_compacted_kernels_match_numpy(rng, m, n, k, tile):
    func = _tiled(m, n, k, tile)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = rng.standard_normal((m, n)).astype(np.float32)  # overwritten
    refcomp.build(func)(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def _packed_under_slab(layout, m=12, n=32, k=64):
    """B packed per (column tile, k slab) into a "local" buffer read by a tensorized 6x16 tile
    through its address: the buffer escapes into the micro-kernel call."""
    sch = Schedule(_matmul(m, n, k))
    blk = sch.get_block("C")
    packed = sch.cache_read(blk, 1, "local")
    i, j, r = sch.get_loops(blk)
    i0, i1 = sch.split(i, [None, 6])
    j0, j1 = sch.split(j, [None, 16])
    r0, r1 = sch.split(r, [None, 32])
    sch.reorder(j0, r0, i0, i1, j1, r1)
    sch.compute_at(packed, r0)
    sch.transform_layout(packed, ("write", 0), layout)
    sch.tensorize(i1, "x86.avx2.sgemm_6x16")
    return sch.func


@pytest.mark.parametrize("layout,shape", [
    # panel index leads, then all of k: only the leading dimension (one panel here) shrinks; k keeps
    # its length, so the stride the kernel was given for it stays right
    (lambda kk, jj: (jj // 16, kk, jj % 16), (1, 64, 16)),
    # the slab index leads too: both leading dimensions shrink, the slab keeps its 32 rows
    (lambda kk, jj: (jj // 16, kk // 32, kk % 32, jj % 16), (1, 1, 32, 16)),
])
def test_an_address_taken_buffer_shrinks_only_in_leading_dimensions(rng, layout, shape):
    func = _packed_under_slab(layout)
    after = compact_local_buffers(lower_blocks(func))
    (tile,) = [a for a in collect(after.body, Allocate) if a.buffer.name == "B_local"]
    assert tuple(as_int(d) for d in tile.buffer.shape) == shape
    if refcomp.loops.intrin.get("x86.avx2.sgemm_6x16").available():
        a = rng.standard_normal((12, 64)).astype(np.float32)
        b = rng.standard_normal((64, 32)).astype(np.float32)
        c = np.zeros((12, 32), np.float32)
        refcomp.build(func)(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-4)


def test_a_buffer_written_only_through_its_address_keeps_its_shape(rng, monkeypatch):
    """W packed by the register-transpose micro-kernel (a call writes it) and read by the matmul
    tile: no plain store shows what the calls touch, so the buffer is not shrunk (it was once cut
    to the few elements its address expressions reach)."""
    from refcomp.loops import intrin, recipes

    if not intrin.get("x86.avx512.transpose_f32_32x16").available():
        pytest.skip("needs the AVX-512 register transpose")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # 3 column blocks, 5 row blocks: W packed before the row loop
    m, n, k = 100, 96, 96
    x = te.placeholder((m, k), "float32", "X")
    w = te.placeholder((n, k), "float32", "W")
    r = te.reduce_axis((0, k), "r")
    c = te.compute((m, n), lambda i, j: te.sum(x[i, r] * w[j, r], axis=r), "C")
    sch = recipes.matmul_fp32(te.create_prim_func([x, w, c]), tiling=recipes.Tiling(mc=24, nc=32, kc=32))
    assert any(b.annotations.get("tensorized") == "x86.avx512.transpose_f32_32x16"
               for b in collect(sch.func.body, refcomp.ast.Block))
    packs = [b for b in collect(sch.func.body, refcomp.ast.Block) if b.name.startswith("W_")]
    sch.set_scope(sch.get_block(packs[0].name), 0, "local")
    after = compact_local_buffers(lower_blocks(sch.func))
    (tile,) = [a for a in collect(after.body, Allocate) if a.buffer.scope == "local"]
    assert tuple(as_int(d) for d in tile.buffer.shape) == (3, 96, 32)  # all of W's panels
    xs = rng.standard_normal((m, k)).astype(np.float32)
    ws = rng.standard_normal((n, k)).astype(np.float32)
    out = np.zeros((m, n), np.float32)
    refcomp.build(sch.func)(xs, ws, out)
    np.testing.assert_allclose(out, xs @ ws.T, rtol=1e-5, atol=1e-4)


def test_a_buffer_filled_by_a_relocatable_call_shrinks_in_leading_dimensions(monkeypatch):
    """W's block packed per thread (inside the parallel column loop) by the relocatable register
    transpose: its leading block indices become 1 long (one NC x KC block); the same function
    without the relocatable mark keeps the buffer's whole shape (nothing shows what the call
    writes), so the rule fails closed."""
    from refcomp.loops import intrin, recipes

    if not intrin.get("x86.avx512.transpose_f32_32x16").available():
        pytest.skip("needs the AVX-512 register transpose")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    k, n = 64, 128
    x = te.placeholder((te.size_var("m"), k), "float32", "X")
    w = te.placeholder((n, k), "float32", "W")
    r = te.reduce_axis((0, k), "r")
    c = te.compute((x.shape[0], n), lambda i, j: te.sum(x[i, r] * w[j, r], axis=r), "C")
    tiling = recipes.Tiling(mc=24, nc=32, kc=32, mc_symbolic=24)
    func = recipes.matmul_fp32(te.create_prim_func([x, w, c]), tiling=tiling).func
    assert func.attrs["relocatable_calls"] == ("refcomp_transpose_f32_32x16_at",)

    def local_shape(f):
        (tile,) = [a for a in collect(compact_local_buffers(lower_blocks(f)).body, Allocate)
                   if a.buffer.scope == "local"]
        return tuple(as_int(d) for d in tile.buffer.shape)

    assert local_shape(func) == (1, 1, 1, 32, 32)
    unmarked = func.with_(attrs={key: v for key, v in func.attrs.items() if key != "relocatable_calls"})
    assert local_shape(unmarked) == (4, 2, 1, 32, 32)


@pytest.mark.parametrize("fuse", [False, True])
def test_an_accumulator_stays_above_its_reduction_loop(rng, fuse):
    """A local cache_write stage moved under the reduction loop (reverse_compute_at) accumulates
    across that loop's iterations: its allocation stays above the loop (one tile per iteration
    would start every step of the reduction from garbage); fused with the row loop, the row's
    init runs in one iteration of seven.  The kernel matches numpy either way."""
    a = te.placeholder((5, 7), "float32", "A")
    r = te.reduce_axis((0, 7), "r")
    b = te.compute((5,), lambda i: te.max(a[i, r], axis=r), "B")
    sch = Schedule(te.create_prim_func([a, b]))
    block = sch.get_block("B")
    local = sch.cache_write(block, 0, "local")
    i, k = sch.get_loops(block)
    sch.reverse_compute_at(local, k, preserve_unit_loops=False)
    if fuse:
        sch.fuse(*sch.get_loops(block))
    after = compact_local_buffers(lower_blocks(sch.func))
    (tile,) = [al for name, al in _allocations(after).items() if "local" in name]
    holders = [loop.loop_var.name for loop in collect(after.body, For)
               if any(tile is al for al in collect(loop.body, Allocate))]
    if fuse:   # the one loop is the reduction's: the accumulator of every row stands above it
        assert [as_int(d) for d in tile.buffer.shape] == [5] and holders == []
    else:      # one accumulator per row, inside the row loop and above the reduction loop
        assert [as_int(d) for d in tile.buffer.shape] == [1] and len(holders) == 1
    x = rng.standard_normal((5, 7)).astype(np.float32)
    out = np.empty(5, np.float32)
    refcomp.build(sch.func)(x, out)
    np.testing.assert_array_equal(out, x.max(axis=1))
