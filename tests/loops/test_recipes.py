"""Schedule recipes, each checked numerically at small sizes (odd and symbolic rows included).

AMX and VNNI recipes are built to C and compiled everywhere; they run only where the CPU has them.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import refcomp
from refcomp import ScheduleError, te
from refcomp.emit_c import c_options, compile_shared, emit
from refcomp.loops import intrin, recipes
from refcomp.loops.lower import lower
from refcomp.loops.primitives.tree import walk
from refcomp.ast import Allocate, Block, For, as_int, collect
from refcomp.loops.passes.compact_buffers import compact_local_buffers
from refcomp.loops.passes.lower_blocks import lower_blocks

SMALL = recipes.Tiling(mc=24, nc=32, kc=32)
TRANSPOSE = "x86.avx512.transpose_f32_32x16"


def _matmul(m, n, k, in_dtype="float32", acc="float32"):
    a = te.placeholder((m, k), in_dtype, "A")
    b = te.placeholder((k, n), in_dtype, "B")
    r = te.reduce_axis((0, k), "k")
    if in_dtype == acc:
        c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    else:
        c = te.compute((m, n), lambda i, j: te.sum(a[i, r].astype(acc) * b[r, j].astype(acc), axis=r), name="C")
    return te.create_prim_func([a, b, c])


def _linear(m, n, k, index_dtype="int32"):
    """C = A @ W^T with the weight stored W[j, k] (N, K), as a `linear` layer keeps it; dims are
    int64 when the graph level builds the kernel."""
    if index_dtype == "int64":
        m = m if not isinstance(m, int) else te.const(m, "int64")
        n, k = te.const(n, "int64"), te.const(k, "int64")
    a = te.placeholder((m, k), "float32", "A")
    w = te.placeholder((n, k), "float32", "W")
    r = te.reduce_axis((te.const(0, index_dtype), k), "k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * w[j, r], axis=r), name="C")
    return te.create_prim_func([a, w, c])


def _tensorized_with(func) -> set[str]:
    return {s.annotations["tensorized"] for s in walk(func.body) if isinstance(s, Block) and "tensorized" in s.annotations}


def _bf16(x):
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _value(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


@pytest.mark.parametrize("m,n,k", [(37, 32, 48), (48, 64, 96), (5, 16, 16)])
def test_fp32_recipe_matches_numpy(rng, m, n, k):
    sch = recipes.matmul_fp32(_matmul(m, n, k), tiling=SMALL)
    assert _tensorized_with(sch.func) <= {"x86.avx2.sgemm_6x16", "x86.avx2.sgemm_6x16_panel", "x86.avx512.sgemm_12x32",
                                          "x86.avx512.sgemm_6x64_unrolled"}
    assert _tensorized_with(sch.func)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = rng.standard_normal((m, n)).astype(np.float32)  # the recipe zeroes C itself
    refcomp.build(sch.func)(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("m,n,by_rows", [(100, None, True), (40, 64, False), (100, 64, False)])
@pytest.mark.parametrize("pack_a", [False, True])
def test_fp32_recipe_parallel_loop(rng, monkeypatch, m, n, by_rows, pack_a):
    """With 2 threads: N / NC = 2 column blocks run in parallel, each packing its own B blocks
    inside the parallel loop; 3 column blocks (N three tiles wide, None) and 5 row blocks (of 24
    rows) make the row-block loop outermost and parallel, after one parallel packing of B.  Both
    hand out their blocks dynamically, and all compute the matmul."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    k = 96
    if n is None:
        n = 3 * (32 if intrin.get("x86.avx512.sgemm_8x32").available() else 16)
    sch = recipes.matmul_fp32(_matmul(m, n, k), tiling=SMALL, pack_a=pack_a)
    loops = [s for s in walk(sch.func.body) if isinstance(s, For) and s.kind == "parallel"]
    compute = [s for s in loops if any(isinstance(b, Block) and "tensorized" in b.annotations for b in walk(s))]
    assert len(compute) == 1
    assert compute[0].loop_var.name.startswith("i" if by_rows else "j")
    assert compute[0].annotations.get("omp_schedule") == "dynamic"
    packs_b_inside = any(isinstance(b, Block) and b.name == "B_local" for b in walk(compute[0]))
    assert packs_b_inside != by_rows
    # a block packed inside the parallel loop is a "local" buffer: each thread's KC x NC block,
    # reused from one block to the next, not a slice of a buffer as large as B
    assert any(isinstance(b, Block) and b.name == "B_global" for b in walk(sch.func.body)) == by_rows
    if not by_rows:  # one KC x NC block per iteration of the parallel loop, in NR-wide panels
        nr = 32 if intrin.get("x86.avx512.sgemm_8x32").available() else 16
        lowered = compact_local_buffers(lower_blocks(sch.func))
        (block,) = [a for a in collect(lowered.body, Allocate) if a.buffer.name == "B_local"]
        shape = tuple(as_int(d) for d in block.buffer.shape)
        assert shape[:2] == (1, 1) and shape[3:] == (SMALL.kc, nr) and shape[2] * nr <= SMALL.nc
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = rng.standard_normal((m, n)).astype(np.float32)
    refcomp.build(sch.func)(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("name", ["x86.avx2.sgemm_6x16", "x86.avx512.sgemm_12x32", "x86.avx512.sgemm_14x32"])
@pytest.mark.parametrize("m,n,k", [(37, 32, 48), (48, 64, 96), (5, 32, 16), (1, 32, 7)])
@pytest.mark.parametrize("threads", ["1", "2"])
def test_fp32_recipe_packs_a_into_row_panels(rng, monkeypatch, name, m, n, k, threads):
    """pack_a="panels": A packed into MR-row panels (rows past M zero) and read by the tile's
    panel form; any M, including fewer rows than one panel."""
    monkeypatch.setenv("OMP_NUM_THREADS", threads)
    sch = recipes.matmul_fp32(_matmul(m, n, k), intrin=name, tiling=SMALL, pack_a="panels")
    assert _tensorized_with(sch.func) == {name + "_panel"}
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = rng.standard_normal((m, n)).astype(np.float32)
    if intrin.get(name).available():
        refcomp.build(sch.func)(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-4)


def test_fp32_recipe_panels_need_a_panel_form():
    with pytest.raises(ScheduleError, match="panel form"):
        recipes.matmul_fp32(_matmul(32, 64, 32), intrin="x86.avx512.sgemm_8x32", tiling=SMALL, pack_a="panels")


def test_fp32_recipe_symbolic_rows(rng):
    m = te.size_var("m")
    sch = recipes.matmul_fp32(_matmul(m, 32, 64), tiling=SMALL)
    lib = refcomp.build(sch.func)  # every access proved in bounds for every m
    for rows in (1, 6, 7, 31, 49):
        a = rng.standard_normal((rows, 64)).astype(np.float32)
        b = rng.standard_normal((64, 32)).astype(np.float32)
        c = np.zeros((rows, 32), np.float32)
        lib(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("m,n,k", [(37, 64, 48), (8, 32, 32), (5, 16, 16), (21, 64, 32)])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_fp32_recipe_reads_w_transposed(rng, m, n, k, index_dtype):
    """B stored as W[j, k]: the packing copy reads W transposed into the same k-major panels."""
    sch = recipes.matmul_fp32(_linear(m, n, k, index_dtype), tiling=SMALL)
    tiles = _tensorized_with(sch.func)
    assert tiles & {"x86.avx2.sgemm_6x16", "x86.avx512.sgemm_12x32"}
    # a pack of all of W (before the parallel loop) goes through the register transpose where the
    # CPU has it, the 32-wide panels allow it and the k slab (24 of 48, 32, 16) is a multiple of
    # 16; a per-thread block (inside the parallel loop, a "local" buffer) through its relocatable
    # form (test_fp32_recipe_per_thread_w_block_packs_in_registers)
    wide = "x86.avx512.sgemm_12x32" in tiles
    per_thread = any(isinstance(b, Block) and b.name.startswith("W_local") for b in walk(sch.func.body))
    assert (TRANSPOSE in tiles) == (wide and n % 32 == 0 and k in (32, 16) and not per_thread)
    packs = [b for b in walk(sch.func.body) if isinstance(b, Block) and b.name.startswith(("W_global", "W_local"))]
    assert packs and packs[0].writes[0].buffer.shape[-1].value in (16, 32)  # NR-wide panels
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    c = rng.standard_normal((m, n)).astype(np.float32)
    refcomp.build(sch.func)(a, w, c)
    np.testing.assert_allclose(c, a @ w.T, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("m,by_rows", [(100, True), (40, False)])
def test_fp32_recipe_reads_w_transposed_in_either_parallel_mode(rng, monkeypatch, m, by_rows):
    """W packed once in a parallel pass (row blocks in parallel) or per column block inside the
    parallel loop: both compute A @ W^T."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    k = 96
    n = 2 * (32 if intrin.get("x86.avx512.sgemm_8x32").available() else 16)
    if by_rows:
        n = 3 * n // 2
    sch = recipes.matmul_fp32(_linear(m, n, k), tiling=SMALL)
    compute = [s for s in walk(sch.func.body) if isinstance(s, For) and s.kind == "parallel"
               and any(isinstance(b, Block) and "sgemm" in b.annotations.get("tensorized", "") for b in walk(s))]
    assert len(compute) == 1 and compute[0].loop_var.name.startswith("i" if by_rows else "j")
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    refcomp.build(sch.func)(a, w, c)
    np.testing.assert_allclose(c, a @ w.T, rtol=1e-5, atol=1e-4)


def test_fp32_recipe_reads_w_transposed_with_symbolic_rows(rng):
    sch = recipes.matmul_fp32(_linear(te.size_var("m"), 32, 64), tiling=SMALL)
    lib = refcomp.build(sch.func)  # every access proved in bounds for every m
    for rows in (1, 7, 49):
        a = rng.standard_normal((rows, 64)).astype(np.float32)
        w = rng.standard_normal((32, 64)).astype(np.float32)
        c = np.zeros((rows, 32), np.float32)
        lib(a, w, c)
        np.testing.assert_allclose(c, a @ w.T, rtol=1e-5, atol=1e-4)


def test_int8_recipe_reads_w_transposed_exactly(rng):
    """The grouped (pairs / quads) panels pack from W[j, k] as well."""
    m, n, k = 20, 64, 64
    a = te.placeholder((m, k), "int8", "A")
    w = te.placeholder((n, k), "int8", "W")
    r = te.reduce_axis((0, k), "k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r].astype("int32") * w[j, r].astype("int32"), axis=r), name="C")
    sch = recipes.matmul_int8(te.create_prim_func([a, w, c]), tiling=recipes.Tiling(mc=24, nc=32, kc=32))
    x = rng.integers(-128, 128, (m, k), dtype=np.int8)
    y = rng.integers(-128, 128, (n, k), dtype=np.int8)
    out = np.zeros((m, n), np.int32)
    refcomp.build(sch.func)(x, y, out)
    np.testing.assert_array_equal(out, x.astype(np.int32) @ y.T.astype(np.int32))


def test_fp32_recipe_symbolic_rows_take_their_own_row_block(rng, monkeypatch):
    """mc_symbolic sets the row block when M is symbolic (and only then); with three column
    blocks for two threads, threads take those row blocks."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    n = 3 * (32 if intrin.get("x86.avx512.sgemm_8x32").available() else 16)
    tiling = recipes.Tiling(mc=48, nc=32, kc=32, mc_symbolic=24)  # multiples of both tile heights
    symbolic = recipes.matmul_fp32(_matmul(te.size_var("m"), n, 64), tiling=tiling).func
    assert "T.parallel((m + 23) // 24" in symbolic.script()
    plain = recipes.matmul_fp32(_matmul(te.size_var("m"), n, 64), tiling=recipes.Tiling(mc=48, nc=32, kc=32))
    assert "T.parallel((m + 47) // 48" in plain.func.script()
    a = rng.standard_normal((37, 64)).astype(np.float32)
    b = rng.standard_normal((64, n)).astype(np.float32)
    c = np.zeros((37, n), np.float32)
    refcomp.build(symbolic)(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("transposed", [False, True])
def test_fp32_recipe_symbolic_rows_outside_the_parallel_column_loop(rng, monkeypatch, transposed):
    """Symbolic M, mc_symbolic given, column blocks balanced over 2 threads: the row blocks run
    serially around the parallel column loop, each thread packing its own blocks of B inside."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    nr = 32 if intrin.get("x86.avx512.sgemm_8x32").available() else 16
    n, k = 2 * nr, 64
    func = _linear(te.size_var("m"), n, k) if transposed else _matmul(te.size_var("m"), n, k)
    sch = recipes.matmul_fp32(func, tiling=recipes.Tiling(mc=24, nc=nr, kc=32, mc_symbolic=24))
    parallel = [s for s in walk(sch.func.body) if isinstance(s, For) and s.kind == "parallel"]
    assert len(parallel) == 1 and parallel[0].loop_var.name.startswith("j")
    rows = next(s for s in walk(sch.func.body) if isinstance(s, For) and s.loop_var.name.startswith("i"))
    assert rows.kind == "serial" and any(s is parallel[0] for s in walk(rows))
    assert any(isinstance(b, Block) and b.name.startswith(("B_", "W_")) for b in walk(parallel[0]))
    lib = refcomp.build(sch.func)
    for m in (1, 23, 50):
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((n, k) if transposed else (k, n)).astype(np.float32)
        c = rng.standard_normal((m, n)).astype(np.float32)
        lib(a, b, c)
        np.testing.assert_allclose(c, a @ (b.T if transposed else b), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("nc,kc", [(32, 32), (64, 64), (64, 128)])
def test_fp32_recipe_per_thread_w_block_packs_in_registers(rng, monkeypatch, index_dtype, nc, kc):
    """W[j, k] packed block by block inside the parallel column loop (symbolic rows, as the graph
    builds a linear layer) goes through the relocatable register transpose, and the C target still
    shrinks the per-thread buffer to one NC x KC block (its leading block indices 1 long)."""
    if not intrin.get(TRANSPOSE).available() or not intrin.get("x86.avx512.sgemm_12x32").available():
        pytest.skip("needs the AVX-512 register transpose and tile")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    n, k = 256, 128  # four column blocks of 64 for two threads: NC as given
    sch = recipes.matmul_fp32(_linear(te.size_var("m"), n, k, index_dtype),
                              tiling=recipes.Tiling(mc=24, nc=nc, kc=kc, mc_symbolic=24))
    tiles = _tensorized_with(sch.func)
    assert "x86.avx512.transpose_f32_32x16_at" in tiles and TRANSPOSE not in tiles
    (pack,) = [a for a in collect(compact_local_buffers(lower_blocks(sch.func)).body, Allocate)
               if a.buffer.scope == "local"]
    assert tuple(as_int(d) for d in pack.buffer.shape) == (1, 1, nc // 32, kc, 32)
    lib = refcomp.build(sch.func)
    for m in (1, 23, 50):
        a = rng.standard_normal((m, k)).astype(np.float32)
        w = rng.standard_normal((n, k)).astype(np.float32)
        c = rng.standard_normal((m, n)).astype(np.float32)
        lib(a, w, c)
        np.testing.assert_allclose(c, a @ w.T, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("k", [40, 36])
def test_fp32_recipe_16_wide_panels_of_w_pack_by_the_avx2_transpose(rng, vector_isa, monkeypatch, k):
    """W[j, k] into 16-wide panels (the 6 x 16 tile: N = 48, a multiple of 16 and not of 32, on
    either vector width) is packed eight k-rows at a time by two 8 x 8 transposes in registers
    when the k extent of the copy is a multiple of 8 (else the gather copy), rows constant or
    symbolic, one and two threads."""
    n = 48
    for threads in ("1", "2"):
        monkeypatch.setenv("OMP_NUM_THREADS", threads)
        for m in (1, 13, 50, te.size_var("m")):
            sch = recipes.matmul_fp32(_linear(m, n, k), tiling=recipes.Tiling(mc=24, nc=16, kc=k))
            tiles = _tensorized_with(sch.func)
            assert tiles & {"x86.avx2.sgemm_6x16", "x86.avx2.sgemm_6x16_panel"}
            assert ("x86.avx2.transpose_f32_16x8_at" in tiles) == (k % 8 == 0)
            lib = refcomp.build(sch.func)
            for rows in ((m,) if isinstance(m, int) else (1, 7, 31)):
                a = rng.standard_normal((rows, k)).astype(np.float32)
                w = rng.standard_normal((n, k)).astype(np.float32)
                c = rng.standard_normal((rows, n)).astype(np.float32)
                lib(a, w, c)
                np.testing.assert_allclose(c, a @ w.T, rtol=1e-4, atol=1e-4)


def test_recipe_rejects_a_into_its_own_transpose():
    a = te.placeholder((32, 32), "float32", "A")
    r = te.reduce_axis((0, 32), "k")
    c = te.compute((32, 32), lambda i, j: te.sum(a[i, r] * a[j, r], axis=r), name="C")
    func = te.create_prim_func([a, c])
    with pytest.raises(ScheduleError, match="both A and W"):
        recipes.matmul_fp32(func, tiling=SMALL)


def test_fp32_recipe_on_w_transposed_replays_from_its_trace():
    func = _linear(24, 64, 32)
    sch = recipes.matmul_fp32(func, tiling=SMALL)
    replayed = refcomp.Schedule.from_trace(func, sch.trace.to_json())
    refcomp.ast.assert_structural_equal(replayed.func, sch.func)


def test_fp32_recipe_replays_from_its_trace():
    func = _matmul(24, 32, 64)
    sch = recipes.matmul_fp32(func, tiling=SMALL)
    replayed = refcomp.Schedule.from_trace(func, sch.trace.to_json())
    refcomp.ast.assert_structural_equal(replayed.func, sch.func)


def test_int8_recipe_is_exact(rng):
    sch = recipes.matmul_int8(_matmul(29, 32, 64, "int8", "int32"), tiling=SMALL)
    a = rng.integers(-128, 128, (29, 64), dtype=np.int8)
    b = rng.integers(-128, 128, (64, 32), dtype=np.int8)
    c = np.zeros((29, 32), np.int32)
    refcomp.build(sch.func)(a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


@pytest.mark.parametrize("m,n", [(40, 64), (100, 96)])
def test_low_precision_recipes_pack_b_in_either_parallel_mode(rng, monkeypatch, m, n):
    """B packed in pairs / quads inside the parallel column loop (N = 64: two blocks for two
    threads) or once before the row-block loop (N = 96): int8 exact, bf16 to fp32 rounding."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    k = 96
    sch = recipes.matmul_int8(_matmul(m, n, k, "int8", "int32"), tiling=SMALL)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    c = np.zeros((m, n), np.int32)
    refcomp.build(sch.func)(a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))
    sch = recipes.matmul_bf16(_matmul(m, n, k, "bfloat16", "float32"), tiling=SMALL)
    x, y = _bf16(rng.standard_normal((m, k))), _bf16(rng.standard_normal((k, n)))
    z = np.zeros((m, n), np.float32)
    refcomp.build(sch.func)(x, y, z)
    np.testing.assert_allclose(z, _value(x) @ _value(y), rtol=1e-4, atol=1e-4 * np.sqrt(k))


def test_bf16_recipe_matches_numpy(rng):
    sch = recipes.matmul_bf16(_matmul(30, 32, 64, "bfloat16", "float32"), tiling=SMALL)
    a, b = _bf16(rng.standard_normal((30, 64))), _bf16(rng.standard_normal((64, 32)))
    c = np.zeros((30, 32), np.float32)
    refcomp.build(sch.func)(a, b, c)
    # bf16 products are exact in fp32; only the accumulation rounds
    np.testing.assert_allclose(c, _value(a) @ _value(b), rtol=1e-4, atol=1e-4)


@pytest.mark.amx
@pytest.mark.skipif(not intrin.get("x86.avx512bf16.bf16gemm_8x32").available(), reason="CPU lacks AVX512-BF16")
@pytest.mark.parametrize("m,n,k", [(30, 32, 64), (64, 64, 128), (7, 96, 34), (1, 32, 2)])
def test_avx512_bf16_recipe_matches_numpy(rng, m, n, k):
    """The default bf16 recipe on an AVX512-BF16 CPU: whole and partial row tiles, odd k pairs."""
    sch = recipes.matmul_bf16(_matmul(m, n, k, "bfloat16", "float32"), tiling=SMALL)
    if not intrin.get("x86.amx.bf16gemm_32x32").available():
        assert _tensorized_with(sch.func) == {"x86.avx512bf16.bf16gemm_8x32"}
    a, b = _bf16(rng.standard_normal((m, k))), _bf16(rng.standard_normal((k, n)))
    c = rng.standard_normal((m, n)).astype(np.float32)  # the recipe zeroes C itself
    refcomp.build(sch.func)(a, b, c)
    np.testing.assert_allclose(c, _value(a) @ _value(b), rtol=1e-4, atol=1e-4 * np.sqrt(k))


def _gelu_te(x):
    return 0.5 * x * (1.0 + te.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


def _gelu_np(x):
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


def _matmul_bias_gelu_func(m: int, n: int, k: int):
    """D = gelu(A @ B + bias), C the product's block."""
    a = te.placeholder((m, k), "float32", "A")
    b = te.placeholder((k, n), "float32", "B")
    bias = te.placeholder((n,), "float32", "bias")
    r = te.reduce_axis((0, k), "k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    d = te.compute((m, n), lambda i, j: _gelu_te(c[i, j] + bias[j]), name="D")
    return te.create_prim_func([a, b, bias, d])


def _check_matmul_bias_gelu(sch, m: int, n: int, k: int, rng) -> None:
    x = rng.standard_normal((m, k)).astype(np.float32)
    y = rng.standard_normal((k, n)).astype(np.float32)
    z = rng.standard_normal(n).astype(np.float32)
    out = np.zeros((m, n), np.float32)
    refcomp.build(sch.func)(x, y, z, out)
    np.testing.assert_allclose(out, _gelu_np(x.astype(np.float64) @ y + z), rtol=1e-4, atol=1e-4)


def test_fused_matmul_bias_gelu(rng):
    m, n, k = 30, 64, 48
    sch = recipes.matmul_bias_gelu(_matmul_bias_gelu_func(m, n, k), tiling=SMALL)
    # the epilogue sits inside the parallel block loop, after the matmul of each block
    text = sch.func.script()
    assert text.index('T.block("C_o")') < text.index('T.block("D")')
    _check_matmul_bias_gelu(sch, m, n, k, rng)


@pytest.mark.parametrize("epilogue", ["gelu", "residual"])
def test_fused_linear_epilogue_in_the_tile(rng, epilogue):
    """X @ W^T with W (N, K) and the epilogue moved into the parallel block loop; rows symbolic and
    not a multiple of the tile height."""
    m, n, k = te.size_var("m"), 64, 48
    x = te.placeholder((m, k), "float32", "X")
    w = te.placeholder((n, k), "float32", "W")
    bias = te.placeholder((n,), "float32", "bias")
    res = te.placeholder((m, n), "float32", "R")
    r = te.reduce_axis((0, k), "k")
    c = te.compute((m, n), lambda i, j: te.sum(x[i, r] * w[j, r], axis=r), name="C")
    if epilogue == "gelu":
        d = te.compute((m, n), lambda i, j: _gelu_te(c[i, j] + bias[j]), name="D")
        params = [x, w, bias, d]
    else:
        d = te.compute((m, n), lambda i, j: c[i, j] + bias[j] + res[i, j], name="D")
        params = [x, w, bias, res, d]
    sch = recipes.matmul_bias_gelu(te.create_prim_func(params), tiling=SMALL)
    text = sch.func.script()
    assert text.index('T.block("C_o")') < text.index('T.block("D")')
    lib = refcomp.build(sch.func)
    for rows in (30, 5):
        xv = rng.standard_normal((rows, k)).astype(np.float32)
        wv = rng.standard_normal((n, k)).astype(np.float32)
        bv = rng.standard_normal(n).astype(np.float32)
        rv = rng.standard_normal((rows, n)).astype(np.float32)
        out = np.zeros((rows, n), np.float32)
        product = xv.astype(np.float64) @ wv.T.astype(np.float64) + bv
        if epilogue == "gelu":
            lib(xv, wv, bv, out)
            expected = _gelu_np(product)
        else:
            lib(xv, wv, bv, rv, out)
            expected = product + rv
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name,in_dtype,acc", [
    ("x86.amx.bf16gemm_32x32", "bfloat16", "float32"),
    ("x86.amx.i8gemm_32x32", "int8", "int32"),
    ("x86.vnni.i8gemm_8x32", "int8", "int32"),
    ("x86.avx512.sgemm_8x32", "float32", "float32"),
    ("x86.avx512.sgemm_12x32", "float32", "float32"),
    ("x86.avx512.sgemm_14x32", "float32", "float32"),
    ("x86.avx512bf16.bf16gemm_8x32", "bfloat16", "float32"),
])
def test_wide_isa_recipes_compile_everywhere(name, in_dtype, acc, tmp_path, monkeypatch):
    monkeypatch.setenv("REFCOMP_CACHE_DIR", str(tmp_path))
    func = _matmul(64, 64, 128, in_dtype, acc)
    recipe = {"bfloat16": recipes.matmul_bf16, "int8": recipes.matmul_int8}.get(in_dtype, recipes.matmul_fp32)
    sch = recipe(func, intrin=name, tiling=recipes.Tiling(mc=32, nc=64, kc=128) if "amx" in name else SMALL)
    assert _tensorized_with(sch.func) == {name}
    if intrin.get(name).func_attrs.get("needs_amx"):
        assert sch.func.attrs["needs_amx"] is True
    target = c_options("c")
    module = emit(lower(sch.func), target.emit_options())
    assert compile_shared(module.source, target).exists()


@pytest.mark.amx
@pytest.mark.skipif(not intrin.get("x86.amx.bf16gemm_32x32").available(), reason="CPU lacks AMX")
def test_amx_bf16_recipe_runs(rng):
    sch = recipes.matmul_bf16(_matmul(64, 64, 128, "bfloat16", "float32"), intrin="x86.amx.bf16gemm_32x32",
                              tiling=recipes.Tiling(mc=32, nc=64, kc=128))
    a, b = _bf16(rng.standard_normal((64, 128))), _bf16(rng.standard_normal((128, 64)))
    c = np.zeros((64, 64), np.float32)
    refcomp.build(sch.func)(a, b, c)
    np.testing.assert_allclose(c, _value(a) @ _value(b), rtol=1e-3, atol=1e-3)


@pytest.mark.amx
@pytest.mark.skipif(not intrin.get("x86.amx.i8gemm_32x32").available(), reason="CPU lacks AMX")
def test_amx_int8_recipe_runs(rng):
    sch = recipes.matmul_int8(_matmul(64, 64, 128, "int8", "int32"), intrin="x86.amx.i8gemm_32x32",
                              tiling=recipes.Tiling(mc=32, nc=64, kc=128))
    a = rng.integers(-128, 128, (64, 128), dtype=np.int8)
    b = rng.integers(-128, 128, (128, 64), dtype=np.int8)
    c = np.zeros((64, 64), np.int32)
    refcomp.build(sch.func)(a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


def test_recipe_rejects_n_not_a_tile_multiple():
    with pytest.raises(ScheduleError, match="not a multiple of the tile width"):
        recipes.matmul_fp32(_matmul(12, 20, 16), intrin="x86.avx2.sgemm_6x16", tiling=SMALL)


def test_recipe_rejects_a_block_that_is_not_a_matmul():
    a = te.placeholder((16, 16), "float32", "A")
    b = te.compute((16, 16), lambda i, j: a[i, j] + 1.0, name="C")
    with pytest.raises(ScheduleError, match="is not a matmul"):
        recipes.matmul_fp32(te.create_prim_func([a, b]))


@pytest.fixture
def cache_sizes(monkeypatch):
    """Sets the caches the recipes size their blocks from (REFCOMP_CACHE_SIZES, l1 and l2 bytes)
    for the test; cpu.cache_sizes is re-read after, so no other test sees them."""
    from refcomp.loops.intrin import cpu

    def set_sizes(l1: int, l2: int) -> None:
        monkeypatch.setenv("REFCOMP_CACHE_SIZES", f"{l1},{l2}")
        cpu.cache_sizes.cache_clear()

    yield set_sizes
    monkeypatch.delenv("REFCOMP_CACHE_SIZES", raising=False)
    cpu.cache_sizes.cache_clear()


@pytest.mark.parametrize("l2,intrin_name,n,nc", [
    (2 << 20, "x86.avx512.sgemm_12x32", 512, 128), (64 << 20, "x86.avx512.sgemm_12x32", 512, 512),
    (2 << 20, "x86.avx512.sgemm_12x32", 1024, 256), (2 << 20, "x86.avx512.sgemm_12x32", 4096, 512)])
def test_fp32_default_tiling_sizes_the_b_block_from_l2(cache_sizes, l2, intrin_name, n, nc):
    """The KC x NC block of B a thread packs takes at most a quarter of L2 unless that makes more
    than four column blocks, at least four tiles wide and at most 512 columns; a tiling the
    caller gives is kept."""
    from refcomp.loops.intrin import cpu
    from refcomp.loops.recipes.matmul import _fp32_tiling

    cache_sizes(48 << 10, l2)
    assert cpu.cache_sizes() == (48 << 10, l2)
    tiling = _fp32_tiling(intrin_name, recipes.Tiling(), n, 1024)
    assert (tiling.kc, tiling.nc) == (1024, nc)
    assert _fp32_tiling(intrin_name, SMALL, n, 1024) is SMALL


@pytest.mark.parametrize("l2,n,k,kc,nc", [
    (2 << 20, 2048, 2048, 1024, 256), (2 << 20, 1024, 1024, 1024, 256), (2 << 20, 512, 512, 512, 512),
    (512 << 10, 256, 1024, 1024, 64), (1 << 20, 2048, 768, 768, 160), (2 << 20, 64, 1031, 1031, 240),
    (2 << 20, 2048, 1026, 513, 496), (2 << 20, 2048, 4104, 684, 368)])
def test_avx2_tile_takes_its_own_blocks(cache_sizes, l2, n, k, kc, nc):
    """The AVX2 tile's KC is the largest divisor of K up to 1024 (whole K where that divisor is
    less than half of 1024: a prime K), its KC x NC block of B takes at most half of L2 (at least
    four tiles wide, at most 512 columns); a tiling the caller gives is kept."""
    from refcomp.loops.recipes.matmul import _fp32_tiling

    cache_sizes(32 << 10, l2)
    tiling = _fp32_tiling("x86.avx2.sgemm_6x16", recipes.Tiling(), n, k)
    assert (tiling.kc, tiling.nc, tiling.mc) == (kc, nc, 96)
    assert _fp32_tiling("x86.avx2.sgemm_6x16", SMALL, n, k) is SMALL
    # a constant M whose A fits in half of L2 keeps these blocks (A read in place) ...
    rows = max(1, l2 // 2 // (4 * k))
    assert _fp32_tiling("x86.avx2.sgemm_6x16", recipes.Tiling(), n, k, rows) == tiling
    # ... one row more takes the panel blocks: 48 rows by 512 columns, the same KC
    panels = _fp32_tiling("x86.avx2.sgemm_6x16", recipes.Tiling(), n, k, rows + 1)
    assert (panels.kc, panels.nc, panels.mc) == (kc, 512, 48)


@pytest.mark.parametrize("shape", [(1, 16, 1), (7, 32, 13), (37, 48, 96), (50, 64, 1031), (101, 96, 200)])
@pytest.mark.parametrize("tiling", [None, SMALL])
def test_avx2_tile_orders_its_loops_by_how_a_is_read(rng, vector_isa, monkeypatch, cache_sizes, shape, tiling):
    """Under the AVX2 feature set the fp32 recipe runs each column block's row tiles outside its
    panels where it reads A in place (a tile's rows of A stay in L1 while it sweeps the panels),
    and the panels outside the row tiles where A, past half of L2 with threads over column
    blocks, is packed into 6-row panels (each panel of B read by the row block's tiles); with
    SMALL's slabs of at most 32 the tile's early-C form accumulates over several k slabs (C added
    after each slab's K loop).  The built kernel and the interpreter agree with numpy on fresh
    random data: odd, prime and unit sizes, one and two threads."""
    m, n, k = shape
    cache_sizes(32 << 10, 64 << 10)  # KC x NC blocks of B of at most 32 KiB; A past 32 KiB in panels
    for threads in ("1", "2"):
        monkeypatch.setenv("OMP_NUM_THREADS", threads)
        func = _matmul(m, n, k)
        sch = recipes.matmul_fp32(func, **({} if tiling is None else {"tiling": tiling}))
        if vector_isa == "avx2":
            tiles = _tensorized_with(sch.func)
            loops = [s.loop_var.name for s in walk(sch.func.body) if isinstance(s, For)]
            if threads == "1" and m * k * 4 > 32 << 10:
                assert tiles == {"x86.avx2.sgemm_6x16_panel"}
            if tiles == {"x86.avx2.sgemm_6x16"}:
                assert loops.index("i_1") < loops.index("j_1")  # row tiles outside the panels
            else:
                assert tiles == {"x86.avx2.sgemm_6x16_panel"}
                assert loops.index("j_1") < loops.index("i_1")  # panels outside the row tiles
        _check_fp32_product(rng, refcomp.build(sch.func), func, m, n, k, transposed=False)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(m=st.integers(1, 40), panels=st.integers(1, 5), k=st.integers(1, 70), small=st.booleans(),
       transposed=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_avx2_tile_recipe_over_shapes(vector_isa, m, panels, k, small, transposed, seed):
    """The default fp32 recipe (AVX2's tile and blocks under the AVX2 feature set) over random
    shapes: any row count from 1, N any multiple of 16, any K from 1 (primes included), the
    default tiling or small slabs, B or W (N, K); the built kernel and the interpreter agree with
    numpy on fresh random data."""
    n = 16 * panels
    rng = np.random.default_rng(seed)
    func = _linear(m, n, k) if transposed else _matmul(m, n, k)
    sch = recipes.matmul_fp32(func, **({"tiling": SMALL} if small else {}))
    if vector_isa == "avx2":
        assert "x86.avx2.sgemm_6x16" in _tensorized_with(sch.func)
    _check_fp32_product(rng, refcomp.build(sch.func), func, m, n, k, transposed)


@pytest.mark.parametrize("transposed", [False, True])
def test_avx2_tile_symbolic_rows_in_blocks_around_the_column_loop(rng, vector_isa, monkeypatch, cache_sizes,
                                                                  transposed):
    """A symbolic M on the AVX2 tile's default tiling: row blocks of 516 rows run serially around
    the parallel column loop (2 threads, each packing its own blocks of B or W), the row tiles
    outside the panels; checked against numpy and the interpreter over odd row counts, and on one
    thread too."""
    n, k = 64, 200
    cache_sizes(32 << 10, 64 << 10)
    for threads in ("1", "2"):
        monkeypatch.setenv("OMP_NUM_THREADS", threads)
        func = _linear(te.size_var("m"), n, k) if transposed else _matmul(te.size_var("m"), n, k)
        sch = recipes.matmul_fp32(func)
        if vector_isa == "avx2" and threads == "2":
            parallel = [s for s in walk(sch.func.body) if isinstance(s, For) and s.kind == "parallel"]
            assert len(parallel) == 1 and parallel[0].loop_var.name.startswith("j")
            loops = [s.loop_var.name for s in walk(parallel[0]) if isinstance(s, For)]
            assert loops.index("i_1") < loops.index("j_1")  # row tiles outside the panels
        lib = refcomp.build(sch.func)
        for m in (1, 7, 37):
            _check_fp32_product(rng, lib, func, m, n, k, transposed)


def test_cache_sizes_are_read_at_run_time():
    from refcomp.loops.intrin import cpu

    l1, l2 = cpu.cache_sizes()
    assert 4 << 10 <= l1 <= l2


@pytest.mark.parametrize("name", ["x86.avx512.sgemm_12x32", "x86.avx512.sgemm_14x32", "x86.avx512.sgemm_8x32",
                                  "x86.avx2.sgemm_6x16"])
@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("transposed", [False, True])
def test_fp32_recipe_on_every_tile_matches_numpy(rng, monkeypatch, name, threads, transposed):
    """Each fp32 tile under the recipe's default tiling (blocks from the caches), on one and two
    threads (per-thread blocks of B, or B packed once), B or W (N, K), odd and symbolic row
    counts: every partial tile height of the 14-, 12-, 8- and 6-row tiles comes up."""
    if not intrin.get(name).available():
        pytest.skip(f"CPU lacks {intrin.get(name).cpu_features}")
    monkeypatch.setenv("OMP_NUM_THREADS", threads)
    n, k = 96, 200
    for m in (1, 5, 7, 11, 37, 250):
        func = _linear(m, n, k) if transposed else _matmul(m, n, k)
        sch = recipes.matmul_fp32(func, intrin=name)
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((n, k) if transposed else (k, n)).astype(np.float32)
        c = rng.standard_normal((m, n)).astype(np.float32)
        refcomp.build(sch.func)(a, b, c)
        np.testing.assert_allclose(c, a @ (b.T if transposed else b), rtol=1e-4, atol=1e-3)
    func = _linear(te.size_var("m"), n, k) if transposed else _matmul(te.size_var("m"), n, k)
    lib = refcomp.build(recipes.matmul_fp32(func, intrin=name).func)
    for m in (1, 13, 50):
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((n, k) if transposed else (k, n)).astype(np.float32)
        c = np.zeros((m, n), np.float32)
        lib(a, b, c)
        np.testing.assert_allclose(c, a @ (b.T if transposed else b), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("transposed", [False, True])
def test_fp32_recipe_default_tile_on_both_widths(rng, vector_isa, monkeypatch, transposed):
    """matmul_fp32 with no intrinsic named takes the widest tile the (possibly overridden) CPU
    features allow: AVX-512's 12x32 natively, AVX2's 6x16 under the AVX2 override; each tile's
    init form takes the first k slab (K = 96 in slabs of 32: init form, then accumulation), the
    rows odd or symbolic, on 1 and 2 threads."""
    for threads in ("1", "2"):
        monkeypatch.setenv("OMP_NUM_THREADS", threads)
        n, k = 64, 96
        for m in (1, 13, 50):
            func = _linear(m, n, k) if transposed else _matmul(m, n, k)
            sch = recipes.matmul_fp32(func, tiling=SMALL)
            tiles = _tensorized_with(sch.func)
            if vector_isa == "avx2":  # W[j, k] packed into the 16-wide panels by the AVX2 transpose
                assert tiles == {"x86.avx2.sgemm_6x16"} | ({"x86.avx2.transpose_f32_16x8_at"} if transposed else set())
            a = rng.standard_normal((m, k)).astype(np.float32)
            b = rng.standard_normal((n, k) if transposed else (k, n)).astype(np.float32)
            c = rng.standard_normal((m, n)).astype(np.float32)
            refcomp.build(sch.func)(a, b, c)
            np.testing.assert_allclose(c, a @ (b.T if transposed else b), rtol=1e-4, atol=1e-4)
        func = _linear(te.size_var("m"), n, k) if transposed else _matmul(te.size_var("m"), n, k)
        lib = refcomp.build(recipes.matmul_fp32(func, tiling=SMALL).func)
        assert re.search(r"refcomp_sgemm_\w+_init\(\(", lib.source)  # a call of an init form
        for m in (7, 30):
            a = rng.standard_normal((m, k)).astype(np.float32)
            b = rng.standard_normal((n, k) if transposed else (k, n)).astype(np.float32)
            c = rng.standard_normal((m, n)).astype(np.float32)
            lib(a, b, c)
            np.testing.assert_allclose(c, a @ (b.T if transposed else b), rtol=1e-4, atol=1e-4)


def _check_fp32_product(rng, lib, func, rows, n, k, transposed):
    """The built kernel and the interpreter on fresh random A (rows, k), B (k, n) or W (n, k) and a
    random C, both against float64 numpy."""
    a = rng.standard_normal((rows, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if transposed else (k, n)).astype(np.float32)
    c = rng.standard_normal((rows, n)).astype(np.float32)
    interpreted = np.zeros_like(c)
    lib(a, b, c)
    refcomp.interpret(func, a, b, interpreted)
    expected = a.astype(np.float64) @ (b.T if transposed else b).astype(np.float64)
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(interpreted, expected, rtol=1e-5, atol=1e-4)


@pytest.fixture
def small_l2(cache_sizes):
    """An L2 of 32 KiB: the stream form's rule then takes the small constant B of a test as one
    too big to stay cached between calls."""
    cache_sizes(32 << 10, 32 << 10)


def _avx2_tiles(vector_isa: str) -> bool:
    """Whether the recipe runs the AVX2 tiles: the feature override, or a CPU without AVX-512."""
    return vector_isa == "avx2" or not intrin.get("x86.avx512.sgemm_12x32").available()


@pytest.mark.parametrize("transposed", [False, True])
def test_fp32_recipe_streams_a_constant_b_with_symbolic_rows(rng, vector_isa, monkeypatch, small_l2, transposed):
    """A B every caller passes as a constant (attr constant_params: the graph's pre-packed
    weights): the tile's stream form reads A from MR-row panels, packed for a symbolic M too (the
    last panel zero-padded by a fill over its missing rows), on the tile of either vector width,
    on 1 and 2 threads, checked against numpy and the interpreter over odd row counts."""
    from refcomp.loops.intrin import x86

    n, k = 64, 96  # under small_l2, B (24 KiB) counts as too big to stay cached

    for threads in ("1", "2"):
        monkeypatch.setenv("OMP_NUM_THREADS", threads)
        func = _linear(te.size_var("m"), n, k) if transposed else _matmul(te.size_var("m"), n, k)
        func = func.with_(attrs={**func.attrs, "constant_params": (1,)})
        sch = recipes.matmul_fp32(func, tiling=recipes.Tiling(mc=24, nc=32, kc=32, mc_symbolic=24))
        tiles = {t for t in _tensorized_with(sch.func) if "sgemm" in t}
        panel = "x86.avx2.sgemm_6x16_panel" if _avx2_tiles(vector_isa) else "x86.avx512.sgemm_12x32_panel"
        assert tiles == {x86.stream_form(panel)} and x86.stream_form(panel).endswith("_stream_panel")
        assert any(b.name.endswith("_pad") for b in walk(sch.func.body) if isinstance(b, Block))
        lib = refcomp.build(sch.func)
        assert "_stream_init((" in lib.source  # the first k slab by the stream form's init form
        for m in (1, 7, 13, 30):
            _check_fp32_product(rng, lib, func, m, n, k, transposed)


def test_fp32_recipe_streams_b_only_where_a_row_block_fits_l2(monkeypatch, cache_sizes):
    """The stream form and A's panels where A's row block (at most 512 rows, by the whole K) fits
    in L2 and B (over half of L2) does not; A read in place by the plain tile where the block does
    not fit, where B is small, or where B is not a constant."""
    if not intrin.get("x86.avx512.sgemm_12x32").available():
        pytest.skip("needs the AVX-512 tile")
    cache_sizes(48 << 10, 2 << 20)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    _check_stream_choices()


def _check_stream_choices():
    def tiles(m, k, constant=True, n=1024):
        func = _linear(m, n, k, "int64")
        if constant:
            func = func.with_(attrs={**func.attrs, "constant_params": (1,)})
        sch = recipes.matmul_fp32(func, intrin="x86.avx512.sgemm_12x32")
        return {t for t in _tensorized_with(sch.func) if "sgemm" in t}

    m = te.size_var("m", "int64")
    assert tiles(m, 1024) == {"x86.avx512.sgemm_12x32_stream_panel"}  # 512 x 1024 floats: 2 MiB
    assert tiles(m, 2048) == {"x86.avx512.sgemm_12x32"}
    assert tiles(96, 4096) == {"x86.avx512.sgemm_12x32_stream_panel"}  # 96 x 4096 floats: 1.5 MiB
    assert tiles(m, 1024, constant=False) == {"x86.avx512.sgemm_12x32"}
    assert tiles(m, 1024, n=64) == {"x86.avx512.sgemm_12x32"}  # B 256 KiB: stays in L2 between calls


@pytest.mark.parametrize("name,mc", [("x86.avx512.sgemm_12x32", 516), ("x86.avx512.sgemm_14x32", 518),
                                     ("x86.avx512.sgemm_8x32", 512), ("x86.avx2.sgemm_6x16", 516)])
def test_fp32_symbolic_row_block_holds_512_rows(name, mc):
    """A symbolic M is taken in blocks of 512 rows rounded up to the tile height (the AVX-512
    tiles and the AVX2 6 x 16 tile), so that 512 rows are one block."""
    from refcomp.loops.recipes.matmul import _fp32_tiling

    assert _fp32_tiling(name, recipes.Tiling(), 1024, 1024).mc_symbolic == mc


@pytest.mark.parametrize("constant", [False, True])
@pytest.mark.parametrize("transposed", [False, True])
def test_fp32_recipe_wide_tile_matches_numpy_and_interpreter(rng, vector_isa, monkeypatch, small_l2, constant,
                                                            transposed):
    """With no intrinsic named, an AVX-512 CPU runs N a multiple of 64 (at least 256) on the 6x64
    tile where K <= 1024 or B is a constant (then from A panels, by its stream form); B, or W
    (N, K) when constant (packed on every call it keeps the 12x32 tile); odd and symbolic row
    counts give partial tiles, K in slabs (init form, then accumulation), 5 tiles across;
    1 and 2 threads, against numpy and the interpreter.  N = 288 (not a
    multiple of 64) keeps the 12x32 tile; under AVX2 the 6x16 tile runs."""
    from refcomp.loops.intrin import x86

    wide = constant or not transposed  # W packed on every call: the 12x32 tile (register transpose)
    n, k = 320, 40
    for threads in ("1", "2"):
        monkeypatch.setenv("OMP_NUM_THREADS", threads)
        for m in (1, 7, te.size_var("m")):
            func = _linear(m, n, k) if transposed else _matmul(m, n, k)
            if constant:
                func = func.with_(attrs={**func.attrs, "constant_params": (1,)})
            sch = recipes.matmul_fp32(func, tiling=recipes.Tiling(mc=24, nc=128, kc=16, mc_symbolic=24))
            tiles = {t for t in _tensorized_with(sch.func) if "sgemm" in t}
            if _avx2_tiles(vector_isa):
                assert {x86.plain_form(t) for t in tiles} <= {"x86.avx2.sgemm_6x16", "x86.avx2.sgemm_6x16_panel"}
            elif not wide:
                assert tiles == {"x86.avx512.sgemm_12x32"}
            else:
                assert {x86.plain_form(t).removesuffix("_panel") for t in tiles} <= {
                    "x86.avx512.sgemm_6x64", "x86.avx512.sgemm_6x64_unrolled"} and tiles
                if constant:
                    assert tiles == {"x86.avx512.sgemm_6x64_stream_panel"}
                else:  # B packed on every call: the unrolled form
                    assert {t.removesuffix("_panel") for t in tiles} == {"x86.avx512.sgemm_6x64_unrolled"}
            lib = refcomp.build(sch.func)
            for rows in ((1, 7, 13) if isinstance(m, te.SizeVar) else (m,)):
                _check_fp32_product(rng, lib, func, rows, n, k, transposed)
    if not _avx2_tiles(vector_isa):
        narrow = recipes.matmul_fp32(_matmul(7, 288, k))
        assert _tensorized_with(narrow.func) == {"x86.avx512.sgemm_12x32"}


def test_fp32_wide_tile_takes_its_own_blocks():
    """The 6x64 tile's default blocks: KC at most 1024, NC at most 256, MC 48; a symbolic M in
    512-row blocks rounded up to 6 rows (516)."""
    from refcomp.loops.recipes.matmul import _fp32_tiling

    assert _fp32_tiling("x86.avx512.sgemm_6x64", recipes.Tiling(), 2048, 2048) == recipes.Tiling(
        mc=48, nc=256, kc=1024, mc_symbolic=516)
    assert _fp32_tiling("x86.avx512.sgemm_6x64_panel", recipes.Tiling(), 4096, 4096).kc == 1024


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("m,n", [(1, 64), (7, 128), (13, 256)])
def test_fp32_recipe_with_k_one(vector_isa, m, n, transposed):
    """K = 1 (an outer product): the copy packing W sits in a block loop with no k loop of its own
    (compute_at makes no loop of extent one); the recipe still schedules it, checked against numpy
    and the interpreter."""
    func = _linear(m, n, 1) if transposed else _matmul(m, n, 1)
    sch = recipes.matmul_fp32(func)
    _check_fp32_product(np.random.default_rng(m), refcomp.build(sch.func), func, m, n, 1, transposed)


@pytest.mark.parametrize("kc", [48, 16])
def test_the_epilogue_runs_one_loop_inside_the_block_where_c_is_final(rng, kc):
    """With the whole K in one slab, D goes under the loop just inside the parallel block loop
    (each panel or row block of C is finished while in cache); with K in slabs that loop is the
    slab loop, where C is not final, so D stays under the parallel loop.  Values equal numpy's."""
    m, n, k = 30, 64, 48
    sch = recipes.matmul_bias_gelu(_matmul_bias_gelu_func(m, n, k), tiling=recipes.Tiling(mc=24, nc=32, kc=kc))
    c_loops = [sch.get(l) for l in sch.get_loops(sch.get_block("C_o"))]
    d_loops = [sch.get(l) for l in sch.get_loops(sch.get_block("D"))]
    position = next(p for p, loop in enumerate(c_loops) if loop.kind == "parallel")
    names = lambda loops: [loop.loop_var.name for loop in loops]  # noqa: E731
    assert names(d_loops)[position] == names(c_loops)[position]
    shares_next = names(d_loops)[position + 1] == names(c_loops)[position + 1]
    assert shares_next == (kc == k)
    _check_matmul_bias_gelu(sch, m, n, k, rng)
