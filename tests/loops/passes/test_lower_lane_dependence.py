"""lanes_independent: when a loop may run as SIMD lanes (what a kept vectorized loop promises)."""
from refcomp.ast import (
    Allocate, Buffer, BufferStore, Call, Evaluate, For, IntImm, LetStmt, StringImm, Var, const, seq,
)
from refcomp.loops.passes.lane_dependence import lanes_independent

A, B = Buffer("A", (64,)), Buffer("B", (64,))
i, j = Var("i"), Var("j")


def loop(body, var=i):
    return For(var, 0, 8, "vectorized", body)


def test_elementwise_and_in_place_updates_are_independent():
    assert lanes_independent(loop(BufferStore(A, B[i * 2] + 1.0, (i,))))
    assert lanes_independent(loop(BufferStore(A, A[i * 4 + 3] * 2.0, (i * 4 + 3,))))
    # an inner loop that keeps each lane on its own element
    assert lanes_independent(loop(For(j, 0, 4, "serial", BufferStore(A, A[i] + B[j], (i,)))))


def test_same_element_for_every_lane_is_a_dependence():
    assert not lanes_independent(loop(BufferStore(A, A[0] + B[i], (IntImm(0, "int32"),))))
    assert not lanes_independent(loop(BufferStore(A, A[i * 0 + 5] + 1.0, (i * 0 + 5,))))


def test_neighbour_access_and_inner_moving_stores_are_dependences():
    assert not lanes_independent(loop(BufferStore(A, A[i + 1], (i,))))
    assert not lanes_independent(loop(For(j, 0, 4, "serial", BufferStore(A, const(1.0), (i + j,)))))
    assert not lanes_independent(loop(BufferStore(A, const(1.0), (i // 2,))))


def test_effects_are_not_simd_safe():
    hook = Evaluate(Call("call_extern", (StringImm("hook"), i), "int32"))
    assert not lanes_independent(loop(seq(hook, BufferStore(A, const(1.0), (i,)))))


def test_buffers_allocated_inside_are_private_to_a_lane():
    T = Buffer("T", (1,), scope="local")
    body = Allocate(T, seq(BufferStore(T, B[i], (IntImm(0, "int32"),)), BufferStore(A, T[0] * 2.0, (i,))))
    assert lanes_independent(loop(body))


def test_let_bound_index_is_not_analysed():
    x = Var("x")
    assert not lanes_independent(loop(LetStmt(x, i, BufferStore(A, const(1.0), (x,)))))


def test_inner_loop_moving_less_than_a_lane_stride_is_independent():
    assert lanes_independent(loop(For(j, 0, 4, "serial", BufferStore(A, B[j], (i * 4 + j,)))))
    assert not lanes_independent(loop(For(j, 0, 5, "serial", BufferStore(A, B[j], (i * 4 + j,)))))
