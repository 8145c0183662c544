"""The fp32 matmul recipe's thread split: how many tasks a call is cut into, and that every split
computes the product (rows constant, symbolic, 1 or prime; B a constant or not; B or W (N, K))."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import refcomp
from refcomp import te
from refcomp.ast import Block, For, as_int
from refcomp.loops import recipes
from refcomp.loops.intrin import cpu, get as get_intrin
from refcomp.loops.primitives.tree import walk
from refcomp.loops.recipes import matmul as recipe
from refcomp.loops.recipes.common import tile_of
from refcomp.shape import evaluate

SMALL = recipes.Tiling(mc=24, nc=64, kc=32, mc_symbolic=24)
# the LLM's products (K, N): qkv, o, gate + up, down
LLM_PRODUCTS = [(256, 384), (256, 256), (256, 1376), (688, 256)]


def _product(m, n, k, *, transposed=False, constant=False, epilogue=False):
    a = te.placeholder((m, k), "float32", "A")
    b = te.placeholder((n, k) if transposed else (k, n), "float32", "W" if transposed else "B")
    r = te.reduce_axis((0, k), "k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * (b[j, r] if transposed else b[r, j]), axis=r), name="C")
    out = te.compute((m, n), lambda i, j: c[i, j] * 0.5 + 1.0, name="D") if epilogue else c
    func = te.create_prim_func([a, b, out])
    return func.with_(attrs={**func.attrs, "constant_params": (1,)}) if constant else func


def _task_loop(func) -> For:
    """The parallel loop around the tensorized tiles (the tasks the threads share)."""
    loops = [s for s in walk(func.body) if isinstance(s, For) and s.kind == "parallel"
             and any(isinstance(b, Block) and "tensorized" in b.annotations for b in walk(s))]
    assert len(loops) == 1
    return loops[0]


def _tasks(func, m, rows: int) -> int:
    """Iterations of the task loop in a call of `rows` rows."""
    extent = _task_loop(func).extent
    return int(evaluate(extent, {m: rows})) if not isinstance(m, int) else as_int(extent)


def _tile(func) -> tuple[int, int]:
    (name,) = {s.annotations["tensorized"] for s in walk(func.body)
               if isinstance(s, Block) and "sgemm" in str(s.annotations.get("tensorized", ""))}
    mr, nr, _ = tile_of(name.replace("_panel", ""))
    return mr, nr


def _check(rng, lib, rows, n, k, transposed, epilogue):
    a = rng.standard_normal((rows, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if transposed else (k, n)).astype(np.float32)
    out = rng.standard_normal((rows, n)).astype(np.float32)  # the kernel writes every element
    lib(a, b, out)
    expected = a.astype(np.float64) @ (b.T if transposed else b).astype(np.float64)
    np.testing.assert_allclose(out, expected * 0.5 + 1.0 if epilogue else expected, rtol=1e-4, atol=1e-3)


PRIMES = [2, 3, 5, 7, 13, 31, 37, 61]


@settings(max_examples=14, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.sampled_from([None, 1] + PRIMES), panels=st.integers(1, 9), k=st.integers(1, 70),
       constant=st.booleans(), transposed=st.booleans(), epilogue=st.booleans(), small=st.booleans(),
       threads=st.sampled_from(["1", "2"]))
def test_every_split_matches_numpy(rng, monkeypatch, rows, panels, k, constant, transposed, epilogue, small,
                                   threads):
    """Any M (symbolic, 1, primes), N (panels of the tile), K, on 1 and 2 threads, every call
    worth splitting (SPLIT_MIN_FLOPS 0, so that small products take the grid): the kernel against
    numpy; with B a constant on 2 threads, a call (of a constant M, or of at least SMALL_CALL_ROWS
    rows of a symbolic one) has 2 x threads tasks or as many as its tiles."""
    monkeypatch.setenv("OMP_NUM_THREADS", threads)
    monkeypatch.setattr(recipe, "SPLIT_MIN_FLOPS", 0)
    nr = 32 if get_intrin("x86.avx512.sgemm_12x32").available() else 16
    n = panels * nr
    m = te.size_var("m") if rows is None else rows
    func = _product(m, n, k, transposed=transposed, constant=constant, epilogue=epilogue)
    tiling = SMALL if small else recipes.Tiling()
    if epilogue:
        sch = recipes.matmul_bias_gelu(func, "C", "D", tiling=tiling)
    else:
        sch = recipes.matmul_fp32(func, tiling=tiling)
    lib = refcomp.build(sch.func)
    mr, nr = _tile(sch.func)
    for call in ([1, 7, 32, 61] if rows is None else [rows]):
        _check(rng, lib, call, n, k, transposed, epilogue)
        # a symbolic M's row block is sized for calls of SMALL_CALL_ROWS rows (_grid_blocks): a
        # smaller call may get fewer tasks than its tiles (7 rows by 2 panels: 2 tasks of 4 tiles)
        if constant and threads == "2" and (rows is not None or call >= recipe.SMALL_CALL_ROWS):
            possible = -(-min(call, recipe.SMALL_CALL_ROWS) // mr) * (n // nr)
            assert _tasks(sch.func, m, call) >= min(4, possible), (call, sch.func.script())


@pytest.mark.parametrize("k,n", LLM_PRODUCTS)
def test_symbolic_rows_small_n_product_runs_as_several_tasks(monkeypatch, vector_isa, k, n):
    """The LLM's dense products (rows b * t symbolic, weights constant) on 2 threads, AVX-512 and
    AVX2 tiles: a call of 32 rows is at least 4 tasks for the threads (one row block of 516 rows
    used to be one task wherever the column blocks did not balance), and a large call more."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    m = te.size_var("m")
    func = recipes.matmul_fp32(_product(m, n, k, constant=True)).func
    assert _tasks(func, m, 32) >= 4
    assert _tasks(func, m, 2048) >= _tasks(func, m, 32)
    assert _task_loop(func).annotations.get("omp_schedule") == "dynamic"


def test_symbolic_rows_grid_matches_numpy(rng, monkeypatch):
    """gate + up (K 256, N 1376 = 43 panels of 32: no balanced column blocks) with its rows
    symbolic and the weight constant: the (row block x column block) grid, one fused parallel loop,
    computes the product for any row count."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    if not get_intrin("x86.avx512.sgemm_12x32").available():
        pytest.skip("N = 1376 is 43 panels of the 12x32 tile")
    m, k, n = te.size_var("m"), 256, 1376
    func = recipes.matmul_fp32(_product(m, n, k, constant=True)).func
    loop = _task_loop(func)
    assert "fused" in loop.loop_var.name and _tasks(func, m, 32) == 43
    lib = refcomp.build(func)
    for rows in (1, 32, 97, 520):
        _check(rng, lib, rows, n, k, False, False)


def test_grid_replays_from_its_trace(monkeypatch):
    """The grid is made of schedule primitives (split, reorder, fuse, parallel): its trace replays
    to the same function, as the tuner's GraphDefault needs."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    func = _product(te.size_var("m"), 1376, 256, constant=True)
    sch = recipes.matmul_fp32(func)
    assert "fused" in _task_loop(sch.func).loop_var.name
    replayed = refcomp.Schedule.from_trace(func, sch.trace.to_json())
    refcomp.ast.assert_structural_equal(replayed.func, sch.func)


@pytest.mark.parametrize("m,n,k,by", [(1024, 1024, 1024, "j"), (2048, 2048, 2048, "j"),
                                      (None, 4096, 1024, "j"), (None, 1024, 4096, "j")])
def test_large_products_keep_their_split(monkeypatch, vector_isa, cache_sizes_2m, m, n, k, by):
    """Products with enough column blocks for the threads keep the column split (each thread's
    blocks of B in its own cache): the matmul benchmark's squares, the graph benchmark's mlp."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    rows = te.size_var("m") if m is None else m
    for constant in (False, True):
        func = recipes.matmul_fp32(_product(rows, n, k, constant=constant)).func
        loop = _task_loop(func)
        assert loop.loop_var.name.startswith(by + "_") and "fused" not in loop.loop_var.name


def test_tiny_products_are_left_alone(monkeypatch):
    """A call below SPLIT_MIN_FLOPS keeps the split it had (no grid of tiny tasks)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    func = recipes.matmul_fp32(_product(5, 64, 16, constant=True), tiling=SMALL).func
    assert "fused" not in _task_loop(func).loop_var.name


@pytest.fixture
def cache_sizes_2m(monkeypatch):
    """An L2 of 2 MiB (the machines the benchmarks' figures come from), re-read after the test."""
    monkeypatch.setenv("REFCOMP_CACHE_SIZES", f"{48 << 10},{2 << 20}")
    cpu.cache_sizes.cache_clear()
    yield
    monkeypatch.delenv("REFCOMP_CACHE_SIZES", raising=False)
    cpu.cache_sizes.cache_clear()
