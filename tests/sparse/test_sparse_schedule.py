"""The scheduled CSR SpMM: the row tile of stage III (lower_stage3(row_tile=...)), the dense
primitives on its loops (vectorize_row_tile) and the row partition by stored entries
(partition_rows, row_parts), prefetch of the gathered rows (prefetch_gathered_rows); before/after
programs and numbers against scipy."""
from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

from refcomp import sparse
from refcomp.ast import For, PrimFunc
from refcomp.ast.printer import script
from refcomp.driver import build
from refcomp.loops.interpreter import interpret
from refcomp.loops.primitives.tree import walk
from refcomp.shape import verify_in_bounds
from refcomp.errors import ArgumentError, ShapeError
from refcomp.sparse.kernels import row_tile_lanes, run_spmm_csr_rows, spmm_csr_scheduled, spmm_iteration
from refcomp.sparse.lower import lower_stage3
from refcomp.sparse.schedule import (
    partition_rows, prefetch_gathered_rows, row_parts, select_rows, split_gathered_rows, vectorize_row_tile,
)

from sparse_strategies import sparse_matrices

TOL = {np.float32: dict(rtol=1e-5, atol=1e-5), np.float64: dict(rtol=1e-12, atol=1e-12)}


def _loops(func: PrimFunc) -> list[For]:
    return [s for s in walk(func.body) if isinstance(s, For)]


def test_row_tile_keeps_the_row_in_a_local_buffer():
    before = lower_stage3(spmm_iteration("float32", 128))
    after = lower_stage3(spmm_iteration("float32", 128), row_tile=64)
    assert "acc" not in script(before)
    text = script(after)
    assert 'acc = T.allocate((64,), "float32", "local")' in text
    assert "for f_o in range(2):" in text
    assert "acc[f_u] = acc[f_u] + A[j] * B[J_indices[j], f_o * 64 + f_u]" in text
    assert "C[i, f_o * 64 + f_w] = acc[f_w]" in text
    verify_in_bounds(after)


def test_row_tile_does_not_apply_where_it_does_not_divide_or_the_width_is_symbolic():
    plain = script(lower_stage3(spmm_iteration("float32", 96)))
    assert script(lower_stage3(spmm_iteration("float32", 96), row_tile=64)) == plain
    plain = script(lower_stage3(spmm_iteration("float32", None)))
    assert script(lower_stage3(spmm_iteration("float32", None), row_tile=64)) == plain
    with pytest.raises(sparse.SparseIterationError, match="row_tile must be a positive int"):
        lower_stage3(spmm_iteration("float32", 32), row_tile=0)


def test_a_width_the_row_tile_does_not_divide_takes_a_narrower_tile_or_the_plain_loop():
    """spmm_csr_scheduled's row tile: the native tile where it divides the width, else the widest
    multiple of the lanes below it that does (48 float64 on AVX2's 32-element tile: 24), else the
    plain row loop (the hot-row and streaming forms need a tile: a clear error)."""
    from refcomp.sparse.kernels import _row_tile_for

    assert _row_tile_for(48, 32, 4) == 24 and _row_tile_for(48, 64, 8) == 64 and _row_tile_for(256, 64, 8) == 64
    assert _row_tile_for(192, 128, 16) == 96 and _row_tile_for(130, 64, 8) is None
    rng = np.random.default_rng(5)
    A = _skewed(rng, 40, 30, np.float32)
    B = rng.uniform(-1.0, 1.0, (30, 130)).astype(np.float32)
    out = np.zeros((40, 130), np.float32)
    build(spmm_csr_scheduled("float32", 130), bounds="prove")(row_parts(A.indptr, 3), A.indptr, A.indices, A.data,
                                                             B, out)
    np.testing.assert_allclose(out, A @ B, **TOL[np.float32])
    with pytest.raises(sparse.SparseScheduleError, match="no row tile"):
        spmm_csr_scheduled("float32", 130, stream=True)


def test_vectorize_row_tile_splits_vectorizes_and_unrolls():
    func = vectorize_row_tile(lower_stage3(spmm_iteration("float32", 64), row_tile=64), 16)
    kinds = {loop.loop_var.name: loop.kind for loop in _loops(func)}
    for name in ("f_z", "f_u", "f_w"):
        assert kinds[f"{name}_0"] == "unrolled" and kinds[f"{name}_1"] == "vectorized"
    narrow = vectorize_row_tile(lower_stage3(spmm_iteration("float32", 8), row_tile=64), 16)
    assert {loop.loop_var.name: loop.kind for loop in _loops(narrow)}["f_u"] == "vectorized"
    with pytest.raises(sparse.SparseScheduleError, match="no row-tile loop"):
        vectorize_row_tile(lower_stage3(spmm_iteration("float32", 64)), 16)
    with pytest.raises(sparse.SparseScheduleError, match="lanes must be a positive int"):
        vectorize_row_tile(lower_stage3(spmm_iteration("float32", 64), row_tile=64), 0)


def test_partition_rows_before_after():
    before = lower_stage3(spmm_iteration("float32", 32))
    after = partition_rows(before)
    assert [p.name for p in after.params] == ["parts"] + [p.name for p in before.params]
    text = script(after)
    assert "for t in T.parallel(p" in text
    assert "T.assume(parts[t] >= 0 and parts[t] <= parts[t + 1] and parts[t + 1] <= m)" in text
    assert "for i in range(parts[t], parts[t] + (parts[t + 1] - parts[t])):" in text
    verify_in_bounds(after)
    with pytest.raises(sparse.SparseScheduleError, match="already has a parameter named 'parts'"):
        partition_rows(after)
    serial = before.with_(body=before.body.with_(kind="serial"))
    with pytest.raises(sparse.SparseScheduleError, match="one parallel row loop"):
        partition_rows(serial)


def test_select_rows_before_after():
    before = lower_stage3(spmm_iteration("float32", 32))
    after = select_rows(before)
    assert [p.name for p in after.params] == ["rows"] + [p.name for p in before.params]
    text = script(after)
    assert "for q in T.parallel(r" in text and "i: T.int32 = rows[q]" in text
    assert "T.assume(i >= 0 and i < m)" in text
    verify_in_bounds(after)
    with pytest.raises(sparse.SparseScheduleError, match="already has a parameter named 'rows'"):
        select_rows(after)


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("width", [16, 128])
def test_row_list_kernel_touches_only_its_rows(accumulate, width):
    rng = np.random.default_rng(width + accumulate)
    A = _skewed(rng, 200, 150, np.float32)
    B = rng.uniform(-1.0, 1.0, (150, width)).astype(np.float32)
    out = rng.uniform(-1.0, 1.0, (200, width)).astype(np.float32)
    rows = rng.permutation(200)[:77].astype(np.int32)
    expected = out.copy()
    expected[rows] = (A @ B)[rows] + (out[rows] if accumulate else 0)
    run_spmm_csr_rows("float32", width, rows, A.indptr, A.indices, A.data, B, out, accumulate)
    np.testing.assert_allclose(out, expected, **TOL[np.float32])
    with pytest.raises(ArgumentError, match="width 20 has no kernel"):
        run_spmm_csr_rows("float32", 20, rows, A.indptr, A.indices, A.data, B[:, :20].copy(), out[:, :20].copy())


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("width, slots", [(32, 1), (128, 4), (256, 8)])
def test_ell_row_tile_matches_numpy(accumulate, width, slots):
    rng = np.random.default_rng(slots)
    rows = rng.permutation(50)[:30].astype(np.int32)
    indices = rng.integers(0, 40, (30, slots)).astype(np.int32)
    data = rng.uniform(-1.0, 1.0, (30, slots)).astype(np.float32)
    B = rng.uniform(-1.0, 1.0, (40, width)).astype(np.float32)
    out = rng.uniform(-1.0, 1.0, (50, width)).astype(np.float32)
    expected = out.copy()
    expected[rows] = np.einsum("rs,rsf->rf", data, B[indices]) + (out[rows] if accumulate else 0)
    tile, lanes = row_tile_lanes("float32")
    func = sparse.spmm_ell_func("float32", width, accumulate, slots, row_tile=tile)
    assert "acc" in script(func)
    verify_in_bounds(func)
    build(vectorize_row_tile(func, lanes), bounds="prove")(rows, indices, data, B, out)
    np.testing.assert_allclose(out, expected, **TOL[np.float32])


@given(st.lists(st.integers(0, 40), min_size=0, max_size=60), st.integers(1, 300))
def test_row_parts_balance_the_stored_entries(lengths, count):
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    parts = row_parts(indptr, count)
    rows = len(lengths)
    assert parts.dtype == np.int32 and parts[0] == 0 and parts[-1] == rows
    assert np.all(np.diff(parts) >= 0) and parts.size - 1 == max(1, min(count, rows))
    if rows:
        cost = indptr + np.arange(rows + 1)  # a row costs its entries plus one
        share = cost[-1] / (parts.size - 1)
        # a part holds at most its share plus one row more
        per_part = cost[parts[1:]] - cost[parts[:-1]]
        assert np.all(per_part <= share + max(lengths) + 2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", [8, 24, 48, 128, 256])
@pytest.mark.parametrize("accumulate", [False, True])
def test_scheduled_kernel_matches_scipy(dtype, width, accumulate):
    rng = np.random.default_rng(width)
    A = _skewed(rng, 300, 200, dtype)
    B = rng.uniform(-1.0, 1.0, (200, width)).astype(dtype)
    out = rng.uniform(-1.0, 1.0, (300, width)).astype(dtype)
    expected = A @ B + (out if accumulate else 0)
    kernel = build(spmm_csr_scheduled(np.dtype(dtype).name, width, accumulate), bounds="prove")
    for count in (1, 7, 1000):
        got = out.copy()
        kernel(row_parts(A.indptr, count), A.indptr, A.indices, A.data, B, got)
        np.testing.assert_allclose(got, expected, **TOL[dtype])


def test_scheduled_kernel_interprets_like_scipy():
    rng = np.random.default_rng(3)
    A = _skewed(rng, 20, 15, np.float32)
    B = rng.uniform(-1.0, 1.0, (15, 32)).astype(np.float32)
    out = np.empty((20, 32), np.float32)
    interpret(spmm_csr_scheduled("float32", 32), row_parts(A.indptr, 4), A.indptr, A.indices, A.data, B, out)
    np.testing.assert_allclose(out, A @ B, **TOL[np.float32])


@settings(max_examples=40, deadline=None)
@given(sparse_matrices(max_dim=40), st.sampled_from([16, 32, 128, 256, 20]), st.integers(0, 2**32 - 1))
def test_spmm_matches_scipy(A, width, seed):
    B = np.random.default_rng(seed).uniform(-1.0, 1.0, (A.shape[1], width)).astype(np.float32)
    np.testing.assert_allclose(sparse.spmm(sparse.from_scipy(A), B), A @ B, **TOL[np.float32])


def test_row_tile_fits_the_vector_registers():
    tile, lanes = row_tile_lanes("float32")
    assert tile == 8 * lanes and lanes in (4, 8, 16)
    assert row_tile_lanes("float64") == (tile // 2, lanes // 2)


def _skewed(rng, m, k, dtype):
    """Power-law-like rows: a dense row, empty rows, a few long ones, the rest short."""
    lengths = np.minimum(rng.zipf(1.6, m), k)
    lengths[rng.integers(m)] = k
    lengths[rng.integers(m, size=m // 10)] = 0
    rows = np.repeat(np.arange(m), lengths)
    cols = np.concatenate([rng.choice(k, n, replace=False) for n in lengths]).astype(np.int64)
    A = sp.csr_matrix((rng.uniform(0.5, 1.5, rows.size), (rows, cols)), shape=(m, k), dtype=dtype)
    A.sort_indices()
    A.indptr, A.indices = A.indptr.astype(np.int32), A.indices.astype(np.int32)
    return A


def test_scheduled_kernels_compile_as_strict_c99():
    """-std=c99 -pedantic -Wall -Wextra -Werror: the sizes that only the assumptions mention
    (the row loop runs over parts[]) are declared but unused, and must not warn."""
    from refcomp.sparse.graph_layers import spmm_graph_func

    tile, lanes = row_tile_lanes("float32")
    for func in (spmm_csr_scheduled("float32", 128), sparse.kernels.spmm_csr_rows_scheduled("float64", 32, True),
                 vectorize_row_tile(sparse.spmm_ell_func("float32", 64, True, 4, row_tile=tile), lanes),
                 spmm_graph_func("float32", 32)):
        build(func, target="c -std=c99", bounds="prove")


@pytest.mark.parametrize("rows, empty", [(700, False), (5, False), (300, True), (0, True)])
def test_partition_computed_in_the_kernel_matches_scipy(rows, empty):
    """partition_rows(func, indptr=...): the kernel finds its own row runs (binary searches of
    indptr[r] + r), for more rows than runs, fewer, and a matrix without entries."""
    rng = np.random.default_rng(rows)
    A = _skewed(rng, max(rows, 1), 60, np.float32)[:rows] if rows else sp.csr_matrix((0, 60), dtype=np.float32)
    if empty:
        A = sp.csr_matrix((rows, 60), dtype=np.float32)
    A.indptr, A.indices = A.indptr.astype(np.int32), A.indices.astype(np.int32)
    func = lower_stage3(spmm_iteration("float32", 16))
    func = partition_rows(func, indptr=func.params[0], count=64)
    assert [p.name for p in func.params][0] == "J_indptr"
    verify_in_bounds(func)
    B = rng.uniform(-1.0, 1.0, (60, 16)).astype(np.float32)
    out = np.full((rows, 16), 7.0, np.float32)
    build(func, bounds="prove")(A.indptr, A.indices, A.data, B, out)
    np.testing.assert_allclose(out, A @ B, **TOL[np.float32])
    if rows == 5:
        interpreted = np.full((rows, 16), 7.0, np.float32)
        interpret(func, A.indptr, A.indices, A.data, B, interpreted)
        np.testing.assert_allclose(interpreted, A @ B, **TOL[np.float32])


def test_partition_rows_preconditions():
    func = lower_stage3(spmm_iteration("float32", 16))
    with pytest.raises(sparse.SparseScheduleError, match="count must be a positive int"):
        partition_rows(func, indptr=func.params[0], count=0)
    with pytest.raises(sparse.SparseScheduleError, match=r"indptr must be a parameter of shape \(m \+ 1,\)"):
        partition_rows(func, indptr=func.params[1])


@pytest.mark.parametrize("dtype, width, lines", [("float32", 128, 8), ("float64", 32, 4), ("float32", 8, 1)])
def test_prefetch_gathered_rows_before_after(dtype, width, lines):
    lanes = 16 if dtype == "float32" else 8
    before = vectorize_row_tile(lower_stage3(spmm_iteration(dtype, width), row_tile=width), lanes)
    after = prefetch_gathered_rows(before, "B", 5)
    old, new = script(before), script(after)
    assert "prefetch" not in old
    assert "with T.LetStmt(T.min(j, nnz - 1 - 5) + 5) as q:" in new
    assert "T.evaluate(T.assume(J_indices[q] >= 0 and T.Cast(\"int64\", J_indices[q]) < k))" in new
    step = 64 // np.dtype(dtype).itemsize
    assert [line.strip() for line in new.splitlines() if "prefetch" in line] == \
        [f"T.evaluate(T.prefetch(B[J_indices[q], {col}], 0))" for col in range(0, width, step)][:lines]
    added = [line for line in new.splitlines() if "prefetch" in line or " q" in line or "[q]" in line]
    assert [line for line in new.splitlines() if line not in added] == old.splitlines()  # nothing else changed
    verify_in_bounds(after)
    stripped = _without_inserted_assumption(after)
    with pytest.raises(ShapeError):  # the prefetched element is proved from the format invariant
        verify_in_bounds(stripped)


def _without_inserted_assumption(func: PrimFunc) -> PrimFunc:
    from refcomp.ast import Evaluate, LetStmt, Mutator, seq
    from refcomp.ast.stmt import SeqStmt

    class Strip(Mutator):
        def visit_LetStmt(self, stmt: LetStmt):
            body = stmt.body
            if isinstance(body, SeqStmt):
                kept = [s for s in body.stmts if not (isinstance(s, Evaluate) and s.value.op == "assume")]
                return stmt.with_(body=seq(*kept))
            return stmt

    return func.with_(body=Strip().visit(func.body))


@pytest.mark.parametrize("distance", [1, 3, 1000])
@pytest.mark.parametrize("shape", ["skewed", "empty", "one"])
def test_prefetched_kernel_matches_scipy(distance, shape):
    """Prefetches further ahead than the matrix has entries, a matrix without entries, one entry."""
    rng = np.random.default_rng(distance)
    A = _skewed(rng, 200, 90, np.float32)
    if shape == "empty":
        A = sp.csr_matrix((200, 90), dtype=np.float32)
    elif shape == "one":
        A = sp.csr_matrix((np.ones(1, np.float32), ([7], [89])), shape=(200, 90))
    A.indptr, A.indices = A.indptr.astype(np.int32), A.indices.astype(np.int32)
    B = rng.uniform(-1.0, 1.0, (90, 32)).astype(np.float32)
    func = partition_rows(prefetch_gathered_rows(vectorize_row_tile(
        lower_stage3(spmm_iteration("float32", 32), row_tile=32), 16), "B", distance))
    out = np.full((200, 32), 7.0, np.float32)
    build(func, bounds="prove")(row_parts(A.indptr), A.indptr, A.indices, A.data, B, out)
    np.testing.assert_allclose(out, A @ B, **TOL[np.float32])
    if distance == 3:
        interpreted = np.full((200, 32), 7.0, np.float32)
        interpret(func, row_parts(A.indptr, 5), A.indptr, A.indices, A.data, B, interpreted)
        np.testing.assert_allclose(interpreted, A @ B, **TOL[np.float32])


@settings(max_examples=30, deadline=None)
@given(sparse_matrices(max_dim=40), st.sampled_from([16, 32]), st.sampled_from([np.float32, np.float64]),
       st.integers(0, 2**32 - 1))
def test_spmm_with_prefetch_matches_scipy(A, width, dtype, seed):
    A = A.astype(dtype)
    A.indptr, A.indices = A.indptr.astype(np.int32), A.indices.astype(np.int32)
    B = np.random.default_rng(seed).uniform(-1.0, 1.0, (A.shape[1], width)).astype(dtype)
    out = np.empty((A.shape[0], width), dtype)
    kernel = _prefetching_kernel(np.dtype(dtype).name, width)
    kernel(row_parts(A.indptr), A.indptr, A.indices, A.data, B, out)
    np.testing.assert_allclose(out, A @ B, **TOL[dtype])


_PREFETCHING: dict = {}


def _prefetching_kernel(dtype: str, width: int):
    key = (dtype, width)
    if key not in _PREFETCHING:
        _PREFETCHING[key] = build(spmm_csr_scheduled(dtype, width, prefetch=True), bounds="prove")
    return _PREFETCHING[key]


def test_prefetch_gathered_rows_preconditions():
    func = vectorize_row_tile(lower_stage3(spmm_iteration("float32", 32), row_tile=32), 16)
    for bad in (0, -1, True, 2.0):
        with pytest.raises(sparse.SparseScheduleError, match="distance must be a positive int"):
            prefetch_gathered_rows(func, "B", bad)
    with pytest.raises(sparse.SparseScheduleError, match="no 2-D parameter named 'Z'"):
        prefetch_gathered_rows(func, "Z")
    with pytest.raises(sparse.SparseScheduleError, match="rows of B must have a constant length"):
        prefetch_gathered_rows(lower_stage3(spmm_iteration("float32", None)), "B")
    with pytest.raises(sparse.SparseScheduleError, match=r"one serial loop j reading C\[X\[j\], ...\], found 0"):
        prefetch_gathered_rows(func, "C")  # C is written by row, not gathered
    with pytest.raises(sparse.SparseScheduleError, match="found 0"):
        prefetch_gathered_rows(sparse.spmm_ell_func("float32", 32), "B")  # a 2-D index array


def test_prefetch_emits_gcc_prefetches_and_compiles_strictly():
    lib = build(prefetch_gathered_rows(spmm_csr_scheduled("float64", 32, prefetch=False), "B", 8),
                target="c -std=c99", bounds="prove")
    assert lib.source.count("__builtin_prefetch(&B[") == 4


@pytest.mark.parametrize("lines", [1, 2, 100])
def test_prefetch_gathered_rows_leading_lines(lines):
    """With `lines`, only the row's first lines are prefetched; a second call adds a second distance."""
    before = vectorize_row_tile(lower_stage3(spmm_iteration("float32", 128), row_tile=128), 16)
    far = prefetch_gathered_rows(before, "B", 32, lines)
    text = script(far)
    assert [line.strip() for line in text.splitlines() if "T.prefetch" in line] == \
        [f"T.evaluate(T.prefetch(B[J_indices[q], {col}], 0))" for col in range(0, 128, 16)][:lines]
    both = prefetch_gathered_rows(far, "B", 8)
    text = script(both)
    assert "T.min(j, nnz - 1 - 8) + 8" in text and "T.min(j, nnz - 1 - 32) + 32" in text
    assert text.count("T.prefetch(") == min(lines, 8) + 8
    verify_in_bounds(both)
    rng = np.random.default_rng(lines)
    A = _skewed(rng, 120, 70, np.float32)
    A.indptr, A.indices = A.indptr.astype(np.int32), A.indices.astype(np.int32)
    B = rng.uniform(-1.0, 1.0, (70, 128)).astype(np.float32)
    out = np.full((120, 128), 7.0, np.float32)
    build(partition_rows(both), bounds="prove")(row_parts(A.indptr), A.indptr, A.indices, A.data, B, out)
    np.testing.assert_allclose(out, A @ B, **TOL[np.float32])
    for bad in (0, -2, True, 1.5):
        with pytest.raises(sparse.SparseScheduleError, match="lines must be None or a positive int"):
            prefetch_gathered_rows(before, "B", 4, bad)


def test_stream_output_rows_before_after():
    from refcomp.emit_c.codegen import NONTEMPORAL
    from refcomp.sparse.schedule import stream_output_rows

    before = spmm_csr_scheduled("float32", 32)
    after = stream_output_rows(before)
    (c_before,), (c_after,) = ([p for p in f.params if p.name == "C"] for f in (before, after))
    assert c_before.align == 0 and c_after.align == 64
    rows_before, rows_after = (next(s for s in _loops(f) if s.loop_var.name == "i") for f in (before, after))
    assert NONTEMPORAL not in (rows_before.annotations or {}) and rows_after.annotations[NONTEMPORAL] is True
    old, new = script(before).splitlines(), script(after).splitlines()
    assert len(old) == len(new) and sum(a != b for a, b in zip(old, new)) == 2  # the C parameter, the row loop
    verify_in_bounds(after)
    lib = build(after, bounds="prove")
    # one vector store of C (16 lanes with AVX-512, 8 with AVX2), streamed, and the fence after it
    assert len(re.findall(r"rc_vstream_float32x(?:8|16)\(&C\[", lib.source)) == 1
    assert "__builtin_ia32_sfence();" in lib.source
    rng = np.random.default_rng(3)
    A = _skewed(rng, 150, 60, np.float32)
    A.indptr, A.indices = A.indptr.astype(np.int32), A.indices.astype(np.int32)
    B = rng.uniform(-1.0, 1.0, (60, 32)).astype(np.float32)
    out = sparse.kernels.aligned_empty((150, 32), np.float32)
    out[...] = 7.0
    lib(row_parts(A.indptr), A.indptr, A.indices, A.data, B, out)
    np.testing.assert_allclose(out, A @ B, **TOL[np.float32])


def test_stream_output_rows_preconditions():
    from refcomp.sparse.schedule import stream_output_rows

    func = spmm_csr_scheduled("float32", 32)
    with pytest.raises(sparse.SparseScheduleError, match="no 2-D parameter named 'Z'"):
        stream_output_rows(func, "Z")
    with pytest.raises(sparse.SparseScheduleError, match="rows of C must be whole cache lines"):
        stream_output_rows(spmm_csr_scheduled("float32", 8))  # 32-byte rows
    with pytest.raises(sparse.SparseScheduleError, match="rows of C must be whole cache lines"):
        stream_output_rows(spmm_csr_scheduled("float32", None))
    with pytest.raises(sparse.SparseScheduleError, match="parallel loop over parts"):
        stream_output_rows(PrimFunc(func.params, func.body.body, "bare"))
    with pytest.raises(sparse.SparseScheduleError, match="one serial row loop"):
        stream_output_rows(vectorize_row_tile(lower_stage3(spmm_iteration("float32", 32), row_tile=32), 16))


def test_streams_only_large_aligned_outputs_of_whole_lines():
    from refcomp.sparse import kernels

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernels, "STREAM_MIN_BYTES", 1 << 12)
        aligned = kernels.aligned_empty((64, 32), np.float32)
        assert kernels.streams(aligned)
        raw = np.empty(64 * 32 + 4, np.float32)
        start = 1 if raw.ctypes.data % 64 == 0 else 0
        assert not kernels.streams(raw[start: start + 64 * 32].reshape(64, 32))  # not on a cache line
        assert not kernels.streams(kernels.aligned_empty((8, 32), np.float32))  # 1 KiB: too small
        assert not kernels.streams(kernels.aligned_empty((256, 5), np.float32))  # rows not whole lines
        assert not kernels.streams(kernels.aligned_empty((64, 64), np.float32)[:, :32])  # not contiguous
    assert not kernels.streams(kernels.aligned_empty((64, 32), np.float32))  # the real threshold: 48 MiB


def test_split_gathered_rows_before_after():
    before = prefetch_gathered_rows(vectorize_row_tile(lower_stage3(spmm_iteration("float32", 32), row_tile=32), 16),
                                    "B", 4)
    after = split_gathered_rows(before)
    old, new = script(before), script(after)
    assert [p.name for p in after.params] == ["J_indptr", "J_indices", "A", "B_hot", "B", "C"]
    assert "B_hot" not in old and 'B_hot: T.Buffer((h, 32), "float32")' in new
    assert 'T.evaluate(T.assume(J_indices[j] >= 0 and T.Cast("int64", J_indices[j]) < k + h))' in new
    assert 'T.evaluate(T.assume(J_indices[q] >= 0 and T.Cast("int64", J_indices[q]) < k + h))' in new
    assert new.count('if T.Cast("int64", J_indices[q]) < h:') == 1   # the row's prefetches: one branch
    assert new.count('if T.Cast("int64", J_indices[j]) < h:') == 1   # the update
    assert "T.prefetch(B_hot[J_indices[q], 16], 0)" in new
    assert 'T.prefetch(B[T.Cast("int64", J_indices[q]) - h, 16], 0)' in new
    assert 'B[T.Cast("int64", J_indices[j]) - h, f_u_0 * 16 + f_u_1]' in new
    assert "B_hot[J_indices[j], f_u_0 * 16 + f_u_1]" in new
    verify_in_bounds(after)
    with pytest.raises(ShapeError):  # the widened assumptions are what proves the cold reads
        verify_in_bounds(split_gathered_rows(vectorize_row_tile(_without_row_facts(
            lower_stage3(spmm_iteration("float32", 32), row_tile=32)), 16)))


def _without_row_facts(func: PrimFunc) -> PrimFunc:
    from refcomp.ast import Evaluate, Mutator, seq

    class Strip(Mutator):
        def visit_SeqStmt(self, stmt):
            kept = [self.visit(s) for s in stmt.stmts
                    if not (isinstance(s, Evaluate) and s.value.op == "assume" and "J_indices" in script(s))]
            return seq(*kept)
    return func.with_(body=Strip().visit(func.body))


def test_split_gathered_rows_preconditions():
    func = vectorize_row_tile(lower_stage3(spmm_iteration("float32", 32), row_tile=32), 16)
    with pytest.raises(sparse.SparseScheduleError, match="no 2-D parameter named 'Z'"):
        split_gathered_rows(func, "Z")
    with pytest.raises(sparse.SparseScheduleError, match="a parameter named 'A' exists already"):
        split_gathered_rows(func, "B", "A")
    with pytest.raises(sparse.SparseScheduleError, match=r"one serial loop j reading C\[X\[j\], ...\], found 0"):
        split_gathered_rows(func, "C")
    with pytest.raises(sparse.SparseScheduleError, match="found 0"):
        split_gathered_rows(sparse.spmm_ell_func("float32", 32), "B")  # a 2-D index array


@pytest.mark.parametrize("hot_count", [0, 1, 7, 90])
@pytest.mark.parametrize("shape", ["skewed", "empty", "one"])
def test_split_kernel_matches_scipy(hot_count, shape):
    """Any set of hot columns (none, all), renumbered and packed: the product of A; the interpreter agrees."""
    from refcomp.sparse.kernels import hot_labels, relabeled
    rng = np.random.default_rng(hot_count)
    A = _skewed(rng, 200, 90, np.float32)
    if shape == "empty":
        A = sp.csr_matrix((200, 90), dtype=np.float32)
    elif shape == "one":
        A = sp.csr_matrix((np.ones(1, np.float32), ([7], [89])), shape=(200, 90))
    A.indptr, A.indices = A.indptr.astype(np.int32), A.indices.astype(np.int32)
    hot = np.sort(rng.choice(90, hot_count, replace=False)).astype(np.int32)
    indices, data = relabeled(hot_labels(hot, 90), A.indptr, A.indices, A.data)
    B = rng.uniform(-1.0, 1.0, (90, 32)).astype(np.float32)
    B_hot = np.ascontiguousarray(B[hot])
    func = spmm_csr_scheduled("float32", 32, prefetch=True, hot=True)
    out = np.full((200, 32), 7.0, np.float32)
    build(func, bounds="prove")(row_parts(A.indptr), A.indptr, indices, data, B_hot, B, out)
    np.testing.assert_allclose(out, A @ B, **TOL[np.float32])
    if hot_count == 7:
        interpreted = np.full((200, 32), 7.0, np.float32)
        interpret(func, row_parts(A.indptr, 5), A.indptr, indices, data, B_hot, B, interpreted)
        np.testing.assert_allclose(interpreted, A @ B, **TOL[np.float32])


def test_split_kernel_compiles_strictly():
    lib = build(spmm_csr_scheduled("float64", 32, prefetch=True, hot=True), target="c -std=c99", bounds="prove")
    assert "B_hot" in lib.source
