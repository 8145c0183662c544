"""The batched A @ B^T rule: on the CPU's fp32 register tile (B packed into its panels) where one
fits, else B packed into lane panels; checked against numpy (and the lane-panel form against the
interpreter) over odd, prime and unit shapes."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import refcomp
from refcomp import te
from refcomp.ast import Block
from refcomp.graph.passes import default_schedule as ds
from refcomp.loops.defaults import schedule_batched_matmul_bt, transposed_operand
from refcomp.loops.interpreter import interpret
from refcomp.loops.primitives.tree import walk
from refcomp.loops.recipes.matmul import FP32_INTRINS
from refcomp.loops.schedule import Schedule

DIMS = st.sampled_from([1, 2, 3, 7, 8, 13, 17, 32])


def _bmm(batch, m, n, k, transposed=True):
    a = te.placeholder((batch, m, k), "float32", "A")
    b = te.placeholder((batch, n, k) if transposed else (batch, k, n), "float32", "B")
    r = te.reduce_axis((0, k), "k")
    if transposed:
        c = te.compute((batch, m, n), lambda h, i, j: te.sum(a[h, i, r] * b[h, j, r], axis=r), name="C")
    else:
        c = te.compute((batch, m, n), lambda h, i, j: te.sum(a[h, i, r] * b[h, r, j], axis=r), name="C")
    return te.create_prim_func([a, b, c])


@settings(max_examples=6, deadline=None)
@given(batch=st.sampled_from([1, 2, 3]), m=DIMS, n=DIMS, k=DIMS, seed=st.integers(0, 2**31 - 1))
def test_bmm_bt_rule_matches_numpy_and_interpreter(batch, m, n, k, seed):
    func = _bmm(batch, m, n, k)
    assert transposed_operand(func) is not None
    scheduled = ds.schedule_kernel(func)
    assert any(isinstance(s, Block) and s.name.startswith("B_global") for s in walk(scheduled.body))
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((batch, m, k)).astype(np.float32)
    b = rng.standard_normal((batch, n, k)).astype(np.float32)
    expected = a @ b.transpose(0, 2, 1)
    c = rng.standard_normal((batch, m, n)).astype(np.float32)  # the kernel zeroes C itself
    refcomp.build(scheduled)(a, b, c)
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5)
    if _tiles(scheduled):  # the interpreter runs no tile intrinsic: check the lane-panel form there
        scheduled = schedule_batched_matmul_bt(Schedule(func), tile=False).func
    interpreted = np.empty_like(c)
    interpret(scheduled, a, b, interpreted)
    np.testing.assert_allclose(interpreted, expected, rtol=1e-5, atol=1e-5)


def test_untransposed_bmm_is_left_to_the_generic_schedule():
    assert transposed_operand(_bmm(2, 8, 8, 8, transposed=False)) is None


def _bmm2(b0, b1, m, n, k):
    """Two batch dims: C[g, h, i, j] = sum_r A[g, h, i, r] * B[g, h, j, r]."""
    a = te.placeholder((b0, b1, m, k), "float32", "A")
    b = te.placeholder((b0, b1, n, k), "float32", "B")
    r = te.reduce_axis((0, k), "k")
    c = te.compute((b0, b1, m, n), lambda g, h, i, j: te.sum(a[g, h, i, r] * b[g, h, j, r], axis=r), name="C")
    return te.create_prim_func([a, b, c])


def _tiles(func) -> list[str]:
    return [s.annotations["tensorized"] for s in walk(func.body)
            if isinstance(s, Block) and "tensorized" in s.annotations]


def _parallel_inside_tiles(func) -> bool:
    from refcomp.ast import For

    return any(isinstance(s, Block) and s.annotations.get("tensorized", "").startswith("x86.")
               and any(isinstance(f, For) and f.kind == "parallel" for part in (s.body, s.init) if part is not None
                       for f in walk(part))
               for s in walk(func.body))


def _fp32_tile_available() -> bool:
    from refcomp.loops.intrin import get
    from refcomp.loops.recipes.matmul import FP32_INTRINS

    return any(get(name).available() for name in FP32_INTRINS)


# the fixture's CPU feature override holds for every drawn example alike
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.sampled_from([1, 2, 3]), m=st.integers(1, 40), n=st.sampled_from([32, 64, 96]),
       k=st.integers(1, 40), seed=st.integers(0, 2**31 - 1))
def test_bmm_bt_default_runs_on_the_register_tile(vector_isa, batch, m, n, k, seed):
    """N a multiple of the tile width: each MR x NR tile of C is one call of the CPU's fp32 tile
    (B packed into its panels); odd row counts end in a partial tile, any K is taken whole."""
    if not _fp32_tile_available():
        pytest.skip("no fp32 tile intrinsic on this CPU")
    scheduled = ds.schedule_kernel(_bmm(batch, m, n, k))
    tiles = _tiles(scheduled)
    assert any(name in FP32_INTRINS for name in tiles)  # the matmul recipe's fp32 tiles
    assert not _parallel_inside_tiles(scheduled)
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((batch, m, k)).astype(np.float32)
    b = rng.standard_normal((batch, n, k)).astype(np.float32)
    c = np.full((batch, m, n), 7.0, dtype=np.float32)
    refcomp.build(scheduled)(a, b, c)
    np.testing.assert_allclose(c, a @ b.transpose(0, 2, 1), rtol=1e-4, atol=1e-4 * np.sqrt(k))


@pytest.mark.parametrize("dims", [(2, 3, 13, 32, 17), (1, 1, 8, 64, 64), (3, 2, 1, 32, 5)])
def test_bmm_bt_tile_with_two_batch_dims(vector_isa, dims):
    if not _fp32_tile_available():
        pytest.skip("no fp32 tile intrinsic on this CPU")
    b0, b1, m, n, k = dims
    scheduled = ds.schedule_kernel(_bmm2(*dims))
    assert _tiles(scheduled) and not _parallel_inside_tiles(scheduled)
    rng = np.random.default_rng()
    a = rng.standard_normal((b0, b1, m, k)).astype(np.float32)
    b = rng.standard_normal((b0, b1, n, k)).astype(np.float32)
    c = np.full((b0, b1, m, n), 7.0, dtype=np.float32)
    refcomp.build(scheduled)(a, b, c)
    np.testing.assert_allclose(c, a @ np.swapaxes(b, -1, -2), rtol=1e-4, atol=1e-4 * np.sqrt(k))


def test_a_width_no_tile_divides_keeps_the_lane_panels():
    scheduled = ds.schedule_kernel(_bmm(3, 7, 100, 9))
    assert not _tiles(scheduled)
    assert any(isinstance(s, Block) and s.name == "B_global" for s in walk(scheduled.body))


def test_the_matmul_recipe_tile_init_opens_no_parallel_region():
    from refcomp import workloads

    if not _fp32_tile_available():
        pytest.skip("no fp32 tile intrinsic on this CPU")
    scheduled = ds.schedule_kernel(workloads.matmul(128, 128, 128))
    assert _tiles(scheduled) and not _parallel_inside_tiles(scheduled)
