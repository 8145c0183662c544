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


def test_huge_page_bytes_and_a_compiled_function_with_a_large_arena(rng):
    from refcomp.runtime.graph_function import huge_page_bytes

    assert huge_page_bytes(1000) is None
    raw = huge_page_bytes(3 << 20)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        assert raw.size == 3 << 20 and raw.__array_interface__["data"][0] % (2 << 20) == 0
        raw[...] = 7
    # a graph whose intermediates need an arena of several MiB: same result with and without
    import refcomp
    from refcomp.graph import BlockBuilder, Var, op, tensor

    x = Var("x", tensor((512, 1024)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(op.exp(x))
            z = bb.emit(op.add(y, x))
            out = bb.emit_output(op.multiply(z, y))
        bb.emit_func_output(out)
    ex = refcomp.graph.build(bb.get(), target="c", fuse=False)
    compiled = ex.compiled.get("main")
    if compiled is None:
        pytest.skip("the graph function did not compile to C here")
    xv = rng.standard_normal((512, 1024)).astype(np.float32)
    expected = (np.exp(xv) + xv) * np.exp(xv)
    np.testing.assert_allclose(compiled(xv), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(compiled(xv), expected, rtol=1e-5, atol=1e-5)  # the arena reused
    if hasattr(mmap, "MADV_HUGEPAGE") and compiled.arena_bytes(xv) >= 2 << 20:
        assert compiled._arena.__array_interface__["data"][0] % (2 << 20) == 0


@pytest.mark.parametrize("shape,dtype", [((688, 256), np.float32), ((4, 688, 64), np.float32), ((), np.float64),
                                         ((0, 3), np.float32), ((37, 5), np.int8), ((1024, 1024), np.float32)])
def test_every_constant_sits_at_a_cache_line(rng, shape, dtype):
    """A compiled graph function keeps each constant at a 64-byte boundary (a pre-packed weight's
    vector loads then never span two lines), a copy only where numpy's memory was not aligned."""
    from refcomp.runtime.graph_function import aligned_constant

    base = (rng.standard_normal(int(np.prod(shape)) + 16) * 100).astype(dtype)
    for offset in (0, 1, 4, 16):  # misaligned views of the same data
        array = base[offset:offset + int(np.prod(shape))].reshape(shape)
        kept = aligned_constant(array)
        np.testing.assert_array_equal(kept, array)
        assert kept.dtype == array.dtype and kept.shape == array.shape and kept.flags.c_contiguous
        assert kept.__array_interface__["data"][0] % 64 == 0 or kept.nbytes == 0
        if array.__array_interface__["data"][0] % 64 == 0 and array.nbytes < (2 << 20):
            assert np.shares_memory(kept, array) or kept.nbytes == 0  # no copy


def test_vm_constants_sit_at_a_cache_line(rng):
    """The VM's constants are placed as the compiled function's are (aligned_constant)."""
    from refcomp.ast.graph import Constant
    from refcomp.graph import BlockBuilder, Var, op, tensor
    from refcomp.graph import build
    from refcomp.runtime import vm as V

    weight = rng.standard_normal(100_000).astype(np.float32)[1:].reshape(3, 33333)  # 4 bytes into numpy's memory
    bb = BlockBuilder()
    x = Var("x", tensor((3, 33333)))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(op.add(x, Constant(weight)))
        bb.emit_func_output(out)
    ex = build(bb.get(), executor="vm")
    loads = [inst for f in ex.functions.values() for inst in f.code if isinstance(inst, V.LoadConst)]
    assert loads and all(inst.value.__array_interface__["data"][0] % 64 == 0 for inst in loads)
    np.testing.assert_array_equal(loads[0].value, weight)
    xv = rng.standard_normal((3, 33333)).astype(np.float32)
    np.testing.assert_array_equal(V.VirtualMachine(ex)["main"](xv), xv + weight)
