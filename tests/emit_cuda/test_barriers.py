"""Barrier placement: needed barriers present, needless ones absent, divergent ones refused."""
import pytest

import refcomp
from refcomp import BuildError
from refcomp.ast import Buffer, BufferStore, For, IfThenElse, PrimFunc, Var, collect, seq
from refcomp.ast import Call
from refcomp.emit_cuda.barriers import barrier, plan_barriers, thread_signature
from refcomp.emit_cuda.prepare import prepare
from refcomp.loops import gpu_recipes
from refcomp import workloads


def _barriers(stmt):
    return sum(1 for c in collect(stmt, Call) if c.op == "tvm_storage_sync")


def _func(body, *buffers):
    return PrimFunc(tuple(buffers), body)


def test_thread_signature_recognises_private_indices():
    tx, ty, k = Var("tx"), Var("ty"), Var("k")
    threads = {tx: 32, ty: 4}
    assert thread_signature(tx + ty * 32, threads) is not None
    assert thread_signature(k * 128 + tx + ty * 32, threads) is not None  # other terms: multiples of 128
    assert thread_signature(k + tx + ty * 32, threads) is None  # k shifts by one: threads can meet
    assert thread_signature(tx + ty * 16, threads) is None  # not injective
    assert thread_signature(tx, threads) is None  # ty missing: threads (tx, 0) and (tx, 1) meet


def test_a_constant_offset_is_part_of_the_signature():
    """Thread t reading S[t + 8] meets thread t + 8 writing S[t + 8]: not the same signature."""
    tx = Var("tx")
    threads = {tx: 16}
    assert thread_signature(tx + 8, threads) != thread_signature(tx, threads)
    assert thread_signature(tx + 16, threads) == thread_signature(tx, threads)  # a whole span apart
    assert thread_signature(tx * tx, threads) is None  # not linear
    S = Buffer("S", (32,), scope="shared")
    O = Buffer("O", (32,))
    body = seq(BufferStore(S, O[tx], (tx,)), IfThenElse(tx < 8, BufferStore(S, S[tx] + S[tx + 8], (tx,))))
    assert _barriers(plan_barriers(_func(body, O), (tx,), body, threads)) == 1


def test_private_accesses_need_no_barrier_and_shared_ones_do():
    tx = Var("tx")
    S = Buffer("S", (32,), scope="shared")
    O = Buffer("O", (32,))
    private = seq(BufferStore(S, O[tx], (tx,)), BufferStore(O, S[tx] * 2.0, (tx,)))
    crossed = seq(BufferStore(S, O[tx], (tx,)), BufferStore(O, S[31 - tx] * 2.0, (tx,)))
    extents = {tx: 32}
    assert _barriers(plan_barriers(_func(private, O), (tx,), private, extents)) == 0
    assert _barriers(plan_barriers(_func(crossed, O), (tx,), crossed, extents)) == 1


def test_a_loop_that_conflicts_with_what_came_before_gets_one_barrier_before_it():
    tx, k = Var("tx"), Var("k")
    S = Buffer("S", (32,), scope="shared")
    O = Buffer("O", (32, 8))
    body = seq(BufferStore(S, O[tx, 0], (tx,)),
               For(k, 0, 8, "serial", BufferStore(O, S[(tx + k) % 32], (tx, k))))
    planned = plan_barriers(_func(body, O), (tx,), body, {tx: 32})
    assert _barriers(planned) == 1
    assert _barriers(planned.stmts[-1].body) == 0  # not inside the loop


def test_loop_carried_conflict_ends_the_body_with_a_barrier():
    tx, k = Var("tx"), Var("k")
    S = Buffer("S", (32,), scope="shared")
    O = Buffer("O", (32, 8))
    body = For(k, 0, 8, "serial", seq(BufferStore(S, O[tx, k], (tx,)),
                                      BufferStore(O, S[31 - tx], (tx, k))))
    planned = plan_barriers(_func(body, O), (tx,), body, {tx: 32})
    # write S -> barrier -> read S; the next iteration's write must wait for this iteration's reads
    assert _barriers(planned.body) == 2


def test_a_barrier_inside_divergent_code_is_refused():
    tx = Var("tx")
    O = Buffer("O", (32,))
    body = IfThenElse(tx < 16, seq(barrier(), BufferStore(O, 1.0, (tx,))))
    with pytest.raises(BuildError, match="barrier inside divergent control flow"):
        plan_barriers(_func(body, O), (tx,), body, {tx: 32})


@pytest.mark.parametrize("threads,expected", [(64, 4), (32, 2)])
def test_fused_softmax_has_exactly_the_barriers_between_its_stages(threads, expected):
    sch = refcomp.Schedule(workloads.softmax(4, 128))
    gpu_recipes.schedule_softmax(sch, threads=threads)
    prepared = prepare(sch.func)
    # 64 threads: partial max | combine max (thread 0) | exp + partial sum | combine sum | divide;
    # 32 threads (one warp): the combines are warp shuffles, which need no barrier before them.
    assert _barriers(prepared.body) == expected
