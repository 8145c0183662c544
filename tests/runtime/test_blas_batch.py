"""The VM's BLAS externs: batched operands (OpenBLAS's batched sgemm, or one call per entry), and
products shared over the VM's threads while a VM function runs (OpenBLAS one-threaded)."""
import contextlib

import numpy as np
import pytest

from refcomp.runtime import blas as B
from refcomp.runtime import vm as V

pytestmark = pytest.mark.skipif(not B.register_blas(), reason="numpy's OpenBLAS library was not found")


def extern(name):
    return V._EXTERNS[f"refcomp.blas.{name}"]


@pytest.mark.parametrize("shared", [False, True], ids=["openblas-threads", "vm-shared"])
@pytest.mark.parametrize("batch", [(5,), (2, 3), (1,), ()])
@pytest.mark.parametrize("m, k, n", [(33, 17, 9), (1, 64, 512), (16, 1, 3), (256, 64, 300), (300, 200, 100)])
def test_products_match_numpy(rng, batch, m, k, n, shared):
    a = rng.standard_normal(batch + (m, k)).astype("float32")
    b = rng.standard_normal(batch + (k, n)).astype("float32")
    bt = np.ascontiguousarray(np.swapaxes(b, -1, -2))
    want = a @ b
    session = V.call_session() if shared else contextlib.nullcontext()
    for name, rhs in (("sgemm_nn", b), ("sgemm_nt", bt)):
        out = np.full(batch + (m, n), np.nan, dtype="float32")
        with session:
            extern(name)(a, rhs, out)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * k)


def test_a_vm_session_runs_openblas_one_threaded_and_restores_it():
    shared = B.SHARED_BLAS
    if shared is None:
        pytest.skip("this OpenBLAS does not export its thread-count functions")
    before = shared._get()
    with V.call_session():
        assert shared._get() == 1 and shared.threads == max(before, 1)
        with V.call_session():  # a nested VM call keeps the session
            assert shared._get() == 1
        assert shared._get() == 1
    assert shared._get() == before and shared.threads == 1


@pytest.mark.parametrize("n, parts", [(512, 2), (300, 2), (3072, 3), (40, 2), (1, 4)])
def test_column_blocks_cover_the_columns_once(n, parts):
    blocks = B._column_blocks(n, parts)
    assert blocks[0][0] == 0 and blocks[-1][1] == n
    assert all(hi > lo for lo, hi in blocks) and all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
    assert all(lo % 16 == 0 for lo, _ in blocks)


def test_empty_inner_dim_gives_zeros_and_empty_batch_is_a_no_op():
    out = np.full((3, 4, 5), np.nan, dtype="float32")
    extern("sgemm_nn")(np.empty((3, 4, 0), "float32"), np.empty((3, 0, 5), "float32"), out)
    assert not out.any()
    flat = np.full((4, 5), np.nan, dtype="float32")
    extern("sgemm_nt")(np.empty((4, 0), "float32"), np.empty((5, 0), "float32"), flat)
    assert not flat.any()
    extern("sgemm_nt")(np.empty((0, 4, 2), "float32"), np.empty((0, 5, 2), "float32"), np.empty((0, 4, 5), "float32"))


def test_only_large_entries_are_batched():
    assert B._large_enough_to_batch(512, 64, 512) and B._large_enough_to_batch(300, 200, 100)
    assert not B._large_enough_to_batch(100, 100, 100) and not B._large_enough_to_batch(4, 10 ** 6, 1000)


def test_the_batched_sgemm_is_found_in_numpys_openblas():
    # numpy 2.x bundles an OpenBLAS that has it: the large shapes above took the batched path
    found = B._batch_sgemm(B.openblas_path())
    if found is None:
        pytest.skip("this OpenBLAS has no batched sgemm (the per-entry loop is used)")
    assert callable(found[1])


@pytest.mark.parametrize("m, k, n", [(2000, 64, 64), (33, 17, 9), (0, 5, 4), (7, 0, 3), (5, 4, 0), (4097, 130, 40)])
def test_shared_sgemm_matches_numpy_and_leaves_openblas_threads_as_they_were(rng, m, k, n):
    a = rng.standard_normal((m, k)).astype("float32")
    b = rng.standard_normal((k, n)).astype("float32")
    out = np.full((m, n), np.nan, dtype="float32")
    before = B.SHARED_BLAS._get() if B.SHARED_BLAS is not None else None
    assert B.shared_sgemm(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5 * max(k, 1))
    if before is not None:
        assert B.SHARED_BLAS._get() == before


def test_shared_sgemm_declines_other_operands(rng):
    a = rng.standard_normal((6, 4))
    out = np.zeros((6, 3))
    assert not B.shared_sgemm(a, rng.standard_normal((4, 3)), out)  # float64
    a32, b32 = a.astype("float32"), rng.standard_normal((4, 3)).astype("float32")
    assert not B.shared_sgemm(a32, b32, np.zeros((6, 4), "float32"))  # wrong out shape
    assert not B.shared_sgemm(np.asfortranarray(a32), b32, np.zeros((6, 3), "float32"))
    assert not B.shared_sgemm(a32, b32[:3], np.zeros((6, 3), "float32"))


def test_set_openblas_threads():
    if B.SHARED_BLAS is None:
        pytest.skip("this OpenBLAS does not export its thread-count functions")
    before = B.SHARED_BLAS._get()
    try:
        assert B.set_openblas_threads(1) and B.SHARED_BLAS._get() == 1
        assert B.set_openblas_threads(0) and B.SHARED_BLAS._get() == 1
    finally:
        B.SHARED_BLAS._set(before)
