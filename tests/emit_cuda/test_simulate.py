"""CPU simulation of GPU-scheduled functions: lock-step phases, thread orders, races."""
import numpy as np
import pytest

from refcomp import BuildError
from refcomp.ast import BufferStore, For, collect
from refcomp.emit_cuda.prepare import prepare
from refcomp.emit_cuda.simulate import RaceDetected, run_checked, sequentialize

from gpu_programs import elementwise, reversed_tiles


@pytest.mark.parametrize("n", [1, 63, 64, 65, 300])
def test_elementwise_matches_numpy_for_every_size(n, rng):
    func = elementwise()
    a = rng.standard_normal(n).astype("float32")
    b = rng.standard_normal(n).astype("float32")
    run_checked(func, a, b)
    np.testing.assert_allclose(b, np.exp(a) * 2, rtol=2e-6)


def test_shared_memory_kernel_gets_a_barrier_and_matches(rng):
    func = reversed_tiles()
    prepared = prepare(func)
    assert "tvm_storage_sync" in prepared.script()
    a = rng.standard_normal((4, 64)).astype("float32")
    b = rng.standard_normal((4, 64)).astype("float32")
    run_checked(func, a, b)
    np.testing.assert_array_equal(b, a[:, ::-1])


def test_missing_barrier_is_caught(rng, monkeypatch):
    """With barrier placement switched off, the simulation shows the race."""
    import refcomp.emit_cuda.prepare as prep

    monkeypatch.setattr(prep, "plan_barriers", lambda func, threads, body, extents=None: body)
    func = reversed_tiles()
    a = rng.standard_normal((4, 64)).astype("float32")
    b = np.zeros((4, 64), "float32")
    with pytest.raises(RaceDetected, match="reads A_shared where another thread wrote"):
        run_checked(func, a, b)


def test_threads_writing_one_element_is_a_race(rng):
    """Every thread stores its own value to B[0]: the result depends on the order."""
    from refcomp.ast import Buffer, PrimFunc, Var

    A, B, t = Buffer("A", (64,)), Buffer("B", (1,)), Var("t")
    kernel = For(t, 0, 64, "thread_binding", BufferStore(B, A[t], (0,)), thread_binding="threadIdx.x")
    racy = PrimFunc((A, B), kernel)
    a = rng.standard_normal(64).astype("float32")
    b = np.zeros(1, "float32")
    with pytest.raises(RaceDetected, match="two threads write one element of B"):
        run_checked(racy, a, b)


def test_order_dependent_results_are_reported(rng):
    """A race the shadow checks cannot see (writes of vector lanes) still shows as a difference."""
    from refcomp.ast import Broadcast, Buffer, PrimFunc, Ramp, Var

    A, B, t = Buffer("A", (64,)), Buffer("B", (2,)), Var("t")
    store = BufferStore(B, Broadcast(A[t], 2), (Ramp(t * 0, 1, 2),))
    racy = PrimFunc((A, B), For(t, 0, 64, "thread_binding", store, thread_binding="threadIdx.x"))
    a = rng.standard_normal(64).astype("float32")
    b = np.zeros(2, "float32")
    with pytest.raises(RaceDetected, match="differ between thread orders"):
        run_checked(racy, a, b)


def test_sequentialized_code_has_no_thread_loops():
    prepared = prepare(reversed_tiles())
    flat = sequentialize(prepared)
    assert all(loop.kind != "thread_binding" for loop in collect(flat.body, For))


def test_unbound_loop_is_an_error_naming_the_store():
    from refcomp import te

    A = te.placeholder((8,), "float32", name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    func = te.create_prim_func([A, B])
    with pytest.raises(BuildError, match="store to B runs on the host"):
        prepare(func)
