"""blockize: before/after pairs in the script format, numeric checks (interpreter and C), and the
preconditions (perfect nest, divisible bindings)."""
from __future__ import annotations

import numpy as np
import pytest

import refcomp
from refcomp import ScheduleError, te
from refcomp.ast import assert_structural_equal
from refcomp.loops.schedule import Schedule

AFTER_ELEMENTWISE = '''
@T.prim_func
def main(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):
    with T.block("root"):
        T.reads()
        T.writes()
        for i_0 in range(8):
            with T.block("B_o"):
                v_i_o = T.axis.spatial(8, i_0)
                T.reads(A[v_i_o * 16:v_i_o * 16 + 16])
                T.writes(B[v_i_o * 16:v_i_o * 16 + 16])
                for i_1 in range(16):
                    with T.block("B"):
                        v_i = T.axis.spatial(128, v_i_o * 16 + i_1)
                        T.reads(A[v_i])
                        T.writes(B[v_i])
                        B[v_i] = A[v_i] * T.float32(2.0)
'''


def _elementwise(n=128):
    a = te.placeholder((n,), "float32", "A")
    b = te.compute((n,), lambda i: a[i] * 2.0, name="B")
    return te.create_prim_func([a, b])


def _matmul(m, n, k):
    a = te.placeholder((m, k), "float32", "A")
    b = te.placeholder((k, n), "float32", "B")
    r = te.reduce_axis((0, k), "k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return te.create_prim_func([a, b, c])


def test_blockize_elementwise_tile_matches_script():
    sch = Schedule(_elementwise())
    (i,) = sch.get_loops(sch.get_block("B"))
    _, i1 = sch.split(i, [None, 16])
    outer = sch.blockize(i1)
    assert sch.get(outer).name == "B_o"
    assert_structural_equal(sch.func, refcomp.from_source(AFTER_ELEMENTWISE))


def test_blockize_keeps_the_numbers(rng):
    func = _matmul(24, 32, 16)
    sch = Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, [None, 8])
    sch.reorder(i0, j0, i1, j1, k)
    sch.blockize(i1)
    a = rng.standard_normal((24, 16)).astype(np.float32)
    b = rng.standard_normal((16, 32)).astype(np.float32)
    for candidate in (sch.func,):
        c = rng.standard_normal((24, 32)).astype(np.float32)  # overwritten by the init
        refcomp.interpret(candidate, a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
        c2 = np.zeros_like(c)
        refcomp.build(candidate)(a, b, c2)
        np.testing.assert_allclose(c2, a @ b, rtol=1e-5, atol=1e-5)


def test_blockize_reduction_tile_regions_and_kinds():
    sch = Schedule(_matmul(16, 16, 32))
    i, j, k = sch.get_loops(sch.get_block("C"))
    k0, k1 = sch.split(k, [None, 8])
    sch.reorder(k0, i, j, k1)
    outer = sch.get(sch.blockize(k1))
    kinds = [iv.kind for iv in outer.iter_vars]
    assert kinds == ["spatial", "spatial", "reduce"]
    # the outer reduce iter covers k0 with extent 32 / 8
    assert outer.iter_vars[2].dom.extent.value == 4
    a_region = next(r for r in outer.reads if r.buffer.name == "A")
    assert a_region.region[1].extent.value == 8


def test_blockize_partial_tile_keeps_its_predicate(rng):
    sch = Schedule(_elementwise(100))
    (i,) = sch.get_loops(sch.get_block("B"))
    _, i1 = sch.split(i, [None, 16])
    sch.blockize(i1)
    where = next(line for line in sch.func.script().splitlines() if "T.where" in line)
    assert "v_i_o * 16" in where and "i_1" in where and "< 100" in where and "i_0" not in where
    a = rng.standard_normal(100).astype(np.float32)
    b = np.zeros(100, np.float32)
    refcomp.interpret(sch.func, a, b)
    np.testing.assert_array_equal(b, a * 2)


def test_blockize_partial_tile_over_a_product_of_sizes(rng):
    """`i_0 * 16 + i_1 < batch * seq`: the bound is not affine, so only the left side is rewritten
    over the outer iter var (before, the predicate kept the outer loop var i_0 inside the outer
    block); the interpreter gives the numbers for batch * seq = 3 * 7 rows."""
    from refcomp.ast import SizeVar

    batch, seq = SizeVar("batch", "int32"), SizeVar("seq", "int32")
    a = te.placeholder((batch * seq,), "float32", "A")
    b = te.compute((batch * seq,), lambda i: a[i] * 2.0, name="B")
    sch = Schedule(te.create_prim_func([a, b]))
    (i,) = sch.get_loops(sch.get_block("B"))
    _, i1 = sch.split(i, [None, 16])
    sch.blockize(i1)
    where = next(line for line in sch.func.script().splitlines() if "T.where" in line)
    assert "v_i_o * 16" in where and "i_1" in where and "batch * seq" in where and "i_0" not in where
    x = rng.standard_normal(21).astype(np.float32)
    y = np.zeros(21, np.float32)
    refcomp.interpret(sch.func, x, y, batch=3, seq=7)
    np.testing.assert_array_equal(y, x * 2)


def test_blockize_rejects_a_binding_that_does_not_divide():
    sch = Schedule(_matmul(8, 8, 8))
    i, j, k = sch.get_loops(sch.get_block("C"))
    fused = sch.fuse(i, j)
    f0, f1 = sch.split(fused, [None, 3])  # 3 does not split rows from columns
    before = sch.func
    with pytest.raises(ScheduleError) as info:
        sch.blockize(f1)
    assert "does not divide" in str(info.value)
    assert sch.func is before


def test_blockize_rejects_a_nest_with_two_blocks():
    a = te.placeholder((16,), "float32", "A")
    b = te.compute((16,), lambda i: a[i] + 1.0, name="B")
    c = te.compute((16,), lambda i: b[i] * 2.0, name="C")
    sch = Schedule(te.create_prim_func([a, c]))
    (i,) = sch.get_loops(sch.get_block("C"))
    sch.compute_at(sch.get_block("B"), i)
    with pytest.raises(ScheduleError, match="exactly one block"):
        sch.blockize(sch.get_loops(sch.get_block("C"))[0])


def test_blockize_rejects_block_lists():
    sch = Schedule(_elementwise())
    with pytest.raises(ScheduleError, match="only a loop target"):
        sch.blockize([sch.get_block("B")])


def test_blockize_trace_replays():
    func = _elementwise()
    sch = Schedule(func)
    (i,) = sch.get_loops(sch.get_block("B"))
    _, i1 = sch.split(i, [None, 32])
    sch.blockize(i1)
    replayed = Schedule.from_trace(func, sch.trace.to_json())
    assert_structural_equal(replayed.func, sch.func)
