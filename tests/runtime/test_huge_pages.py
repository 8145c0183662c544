"""Large constants of a compiled graph function live in 2 MiB-aligned memory advised for huge pages."""
from __future__ import annotations

import mmap

import numpy as np
import pytest

from refcomp.runtime import graph_function
from refcomp.runtime.graph_function import huge_page_array


@pytest.mark.parametrize("shape,dtype", [((1024, 1024), np.float32), ((3, 700_001), np.int8), ((4096, 129), np.float64)])
def test_a_large_constant_is_copied_to_aligned_memory(rng, shape, dtype):
    array = (rng.standard_normal(shape) * 100).astype(dtype)
    copy = huge_page_array(array)
    np.testing.assert_array_equal(copy, array)
    assert copy.dtype == array.dtype and copy.shape == array.shape and copy.flags.c_contiguous
    if hasattr(mmap, "MADV_HUGEPAGE"):
        assert copy.__array_interface__["data"][0] % (2 << 20) == 0
        assert not np.shares_memory(copy, array)
        array[...] = 0  # an independent copy
        assert np.any(copy != 0)


def test_a_small_or_strided_constant(rng, monkeypatch):
    small = rng.standard_normal((100, 100)).astype(np.float32)
    assert huge_page_array(small) is small
    strided = rng.standard_normal((2048, 1024)).astype(np.float32)[:, ::2]  # 4 MiB of data, not contiguous
    copy = huge_page_array(strided)
    np.testing.assert_array_equal(copy, strided)
    assert copy.flags.c_contiguous
    monkeypatch.setattr(graph_function, "HUGE_PAGES", False)
    large = np.ascontiguousarray(strided)
    assert huge_page_array(large) is large
