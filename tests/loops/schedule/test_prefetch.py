"""prefetch: a cache hint at the start of each iteration of a loop; the values are unchanged."""
import numpy as np
import pytest

import refcomp
from refcomp import te
from refcomp.ast.parser import from_source
from refcomp.ast.structural import assert_structural_equal
from refcomp.loops.schedule import Schedule

from .helpers import assert_rejected, assert_script, check_numbers, check_replay


def _rows(n=7, m=33):
    A = te.placeholder((n, m), "float32", "A")
    B = te.compute((n, m), lambda i, j: A[i, j] * 2.0, name="B")
    return te.create_prim_func([A, B])


def _prefetched(func):
    sch = Schedule(func)
    _, j = sch.get_loops(sch.get_block("B"))
    sch.prefetch(j, "A", lambda i, j: (i + 1, j))
    sch.prefetch(j, "B", lambda i, j: (i, j), write=True)
    return sch


def test_prefetch_before_after(rng):
    before = _rows()
    sch = _prefetched(before)
    assert_script(sch.func, '''
        @T.prim_func
        def main(A: T.Buffer((7, 33), "float32"), B: T.Buffer((7, 33), "float32")):
            with T.block("root"):
                T.reads()
                T.writes()
                for i, j in T.grid(7, 33):
                    T.evaluate(T.prefetch(B[T.min(T.max(i, 0), 6), T.min(T.max(j, 0), 32)], 1))
                    T.evaluate(T.prefetch(A[T.min(T.max(i + 1, 0), 6), T.min(T.max(j, 0), 32)], 0))
                    with T.block("B"):
                        v_i, v_j = T.axis.remap("SS", [i, j])
                        T.reads(A[v_i, v_j])
                        T.writes(B[v_i, v_j])
                        B[v_i, v_j] = A[v_i, v_j] * T.float32(2.0)
    ''')
    check_numbers(before, sch.func, rng, reference=lambda a, b: {1: a * 2})
    check_replay(sch, before)
    assert_structural_equal(from_source(sch.func.script()), sch.func)


def test_prefetch_is_a_gcc_builtin_in_c_with_the_next_row_clamped():
    source = refcomp.build(_prefetched(_rows()).func).source
    assert "__builtin_prefetch(&B[((i * 33) + j)], 1, 3);" in source
    assert "__builtin_prefetch(&A[((rc_min_i32((i + 1), 6) * 33) + j)], 0, 3);" in source


def test_prefetch_over_symbolic_rows_is_proved_in_bounds(rng):
    """Each index is clamped into its dim, so the hint needs no run-time check: the kernel
    builds with every access proved, and the last row prefetches itself."""
    n = te.size_var("n")
    func = _rows(n, 16)
    sch = _prefetched(func)
    kernel = refcomp.build(sch.func, bounds="prove")
    for rows in (1, 2, 5):
        a = rng.standard_normal((rows, 16)).astype(np.float32)
        out = np.empty_like(a)
        kernel(a, out)
        np.testing.assert_array_equal(out, a * 2)


def test_prefetch_preconditions():
    sch = Schedule(_rows())
    _, j = sch.get_loops(sch.get_block("B"))
    assert_rejected(sch, lambda: sch.prefetch(j, "C", lambda i, j: (i, j)), "no parameter or buffer .* named 'C'")
    assert_rejected(sch, lambda: sch.prefetch(j, "A", lambda j: (j, j)), "takes 1 vars, but 2 loops enclose j")
    assert_rejected(sch, lambda: sch.prefetch(j, "A", lambda i, j: (i,)), "gives 1 indices for A, which has 2 dims")
    assert_rejected(sch, lambda: sch.prefetch(j, "A", lambda i, j: (i, j), write=1), "write: expected a bool")


@pytest.mark.parametrize("write", [False, True])
def test_prefetch_is_ignored_by_the_cuda_emitter(write):
    from refcomp.emit_cuda.codegen import emit_cuda
    from refcomp.emit_cuda.prepare import prepare

    A = te.placeholder((64, 32), "float32", "A")
    B = te.compute((64, 32), lambda i, j: A[i, j] + 1.0, name="B")
    sch = Schedule(te.create_prim_func([A, B]))
    i, j = sch.get_loops(sch.get_block("B"))
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    sch.prefetch(j, "A", lambda i, j: (i + 1, j), write=write)
    module = emit_cuda(prepare(sch.func), [])
    assert "__global__" in module.source and "prefetch" not in module.source
