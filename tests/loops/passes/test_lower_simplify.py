"""Pass simplify: index folding, branches decided by loop ranges, unit loops, assume, asserts."""
from refcomp.ast import (
    AssertStmt, Buffer, BufferStore, Call, Evaluate, For, IfThenElse, IntImm, PrimFunc, SizeVar, Var,
    assert_structural_equal, collect, const, seq,
)
from refcomp.loops.passes.flatten_buffers import flatten_buffers
from refcomp.loops.passes.lower_blocks import lower_blocks
from refcomp.loops.passes.simplify import is_noop, simplify

from lowering_programs import elementwise, matmul, split, with_kind
from numerics import check_same_results


def test_perfect_split_predicate_is_removed_and_index_folded():
    func = split(elementwise(n=16), "i", 4, guard=True)
    lowered = flatten_buffers(lower_blocks(func))
    assert collect(lowered, IfThenElse)  # the predicate i_o * 4 + i_i < 16 is there before
    result = simplify(lowered)
    assert not collect(result, IfThenElse)
    check_same_results(func, result)


def test_imperfect_split_predicate_is_kept():
    func = split(elementwise(n=10), "i", 4)
    result = simplify(flatten_buffers(lower_blocks(func)))
    (guard,) = collect(result, IfThenElse)
    check_same_results(func, result)


def test_symbolic_perfect_split_is_decided_by_the_analyzer():
    n = SizeVar("n")
    A = Buffer("A", (n * 4,))
    io, ii = Var("io"), Var("ii")
    body = For(io, 0, n, "serial", For(ii, 0, 4, "serial", IfThenElse(
        io * 4 + ii < n * 4, BufferStore(A, const(1.0), (io * 4 + ii,)))))
    func = PrimFunc((A,), body)
    assert not collect(simplify(func), IfThenElse)
    assert collect(simplify(func, use_analyzer=False), IfThenElse)  # the folder alone cannot


def test_unit_loops_disappear_but_thread_bound_ones_stay():
    A = Buffer("A", (4,))
    i, t, z = Var("i"), Var("t"), Var("z")
    body = For(t, 0, 1, "thread_binding", For(i, 0, 1, "serial", BufferStore(A, const(1.0), (i + 2,))),
               thread_binding="threadIdx.x")
    result = simplify(PrimFunc((A,), seq(body, For(z, 0, 0, "serial", BufferStore(A, const(2.0), (z,))))))
    expected = For(t, 0, 1, "thread_binding", BufferStore(A, const(1.0), (IntImm(2, "int32"),)),
                   thread_binding="threadIdx.x")
    assert_structural_equal(result.body, expected)


def test_assume_dropped_true_assert_dropped_false_assert_kept():
    A = Buffer("A", (4,))
    i = Var("i")
    store = BufferStore(A, const(1.0), (i,))
    body = For(i, 0, 4, "serial", seq(
        Evaluate(Call("assume", (i < 4,), "bool")),
        AssertStmt(i < 4, "in range", store),
        AssertStmt(i > 5, "never", store),
    ))
    result = simplify(PrimFunc((A,), body))
    loop = result.body
    assert isinstance(loop, For) and len(loop.body.stmts) == 2
    assert loop.body.stmts[0] is store
    assert isinstance(loop.body.stmts[1], AssertStmt)
    assert loop.body.stmts[1].condition.value == 0


def test_loop_kinds_survive_and_init_guard_stays():
    func = with_kind(with_kind(matmul(4, 5, 3), "i", "parallel"), "k", "unrolled")
    result = simplify(flatten_buffers(lower_blocks(func)))
    kinds = {loop.loop_var.name: loop.kind for loop in collect(result, For)}
    assert kinds == {"i": "parallel", "j": "serial", "k": "unrolled"}
    (guard,) = collect(result, IfThenElse)
    check_same_results(func, result)


def test_empty_body_loops_collapse_to_a_noop():
    A = Buffer("A", (4,))
    i = Var("i")
    body = For(i, 0, 4, "serial", IfThenElse(i > 10, BufferStore(A, const(1.0), (i,))))
    assert is_noop(simplify(PrimFunc((A,), body)).body)


def test_guard_repeated_inside_the_same_guard_is_removed():
    n = SizeVar("n")
    A = Buffer("A", (n,))
    i = Var("i")
    inner = IfThenElse(i < n, BufferStore(A, const(1.0), (i,)))
    outer = IfThenElse(i < n, inner, IfThenElse(i < n, BufferStore(A, const(2.0), (i,))))
    func = PrimFunc((A,), For(i, 0, n + 4, "serial", outer))
    result = simplify(func)
    (guard,) = collect(result, IfThenElse)  # the inner repeats are decided by the outer test
    assert isinstance(guard.then_case, BufferStore) and guard.else_case is None
    check_same_results(func, result, sizes={"n": 5})


def test_unit_loop_starting_at_a_load_reads_it_once():
    N, A = Buffer("N", (1,), "int32"), Buffer("A", (8,))
    i = Var("i")
    body = seq(BufferStore(N, const(7), (IntImm(0, "int32"),)), BufferStore(A, const(1.0), (i,)))
    func = PrimFunc((N, A), For(i, N[0], 1, "serial", body))
    result = simplify(func)
    assert not collect(result, For)
    import numpy as np
    from numerics import interpreter
    n, a = np.array([2], "int32"), np.zeros(8, "float32")
    interpreter()(result, n, a)
    assert a[2] == 1.0 and a.sum() == 1.0
