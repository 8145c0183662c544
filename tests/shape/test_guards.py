"""Runtime guards for unproved accesses, preconditions, and shape relations."""
from __future__ import annotations

import numpy as np
import pytest

import refcomp
from refcomp.ast import (
    AssertStmt, Buffer, BufferLoad, BufferStore, Call, For, IntImm, PrimFunc, SizeVar, Var, collect,
)
from refcomp.errors import RuntimeFailure
from refcomp.shape import (
    check_accesses, insert_runtime_guards, runtime_preconditions, shape_relations, verify_in_bounds,
)


def _tiled_copy():
    n = SizeVar("n")
    A, B = Buffer("A", (n,)), Buffer("B", (n,))
    io, ii = Var("io"), Var("ii")
    index = io * 32 + ii
    store = BufferStore(B, BufferLoad(A, (index,)) + IntImm(1, "int32").astype("float32"), (index,))
    loops = For(io, IntImm(0), (n + 31) // 32, "serial", For(ii, IntImm(0), IntImm(32), "serial", store))
    return PrimFunc((A, B), loops, "tiled")


def test_guards_wrap_exactly_the_unproved_accesses():
    func = _tiled_copy()
    guarded = insert_runtime_guards(func)
    asserts = collect(guarded.body, AssertStmt)
    assert len(asserts) == 1  # the load from A and the store to B share one index: one guard
    assert "io*32 + ii" in asserts[0].message
    assert all("out of bounds in dim 0" in a.message for a in asserts)
    # the guard conditions make every access provable: the guarded kernel verifies
    verify_in_bounds(guarded)


def test_proved_function_is_returned_unchanged():
    n = SizeVar("n")
    A = Buffer("A", (n,))
    i = Var("i")
    func = PrimFunc((A,), For(i, IntImm(0), n, "serial", BufferStore(A, BufferLoad(A, (i,)), (i,))), "ok")
    assert insert_runtime_guards(func) is func


def test_guard_fires_in_the_interpreter_instead_of_reading_past_the_end(rng):
    guarded = insert_runtime_guards(_tiled_copy())
    n = int(rng.integers(33, 63))  # not a multiple of 32: the last tile overruns
    a = rng.standard_normal(n).astype("float32")
    b = np.zeros(n, "float32")
    with pytest.raises(RuntimeFailure):
        refcomp.interpret(guarded, a, b)
    # a multiple of 32 is safe: the guard never fires and the values are right
    a = rng.standard_normal(64).astype("float32")
    b = np.zeros(64, "float32")
    refcomp.interpret(guarded, a, b)
    np.testing.assert_allclose(b, a + 1, rtol=1e-6)


def test_guard_of_a_lazy_branch_only_applies_when_taken(rng):
    n = SizeVar("n")
    A, B = Buffer("A", (n,)), Buffer("B", (n,))
    i = Var("i")
    shifted = Call("if_then_else", (i + 1 < n + 1, BufferLoad(A, (i + 1,)), refcomp.te.const(0.0)), "float32")
    func = PrimFunc((A, B), For(i, IntImm(0), n, "serial", BufferStore(B, shifted, (i,))), "shift")
    guarded = insert_runtime_guards(func)
    (guard,) = collect(guarded.body, AssertStmt)
    assert isinstance(guard.condition, Call) and guard.condition.op == "if_then_else"
    a = rng.standard_normal(5).astype("float32")
    with pytest.raises(RuntimeFailure):
        refcomp.interpret(guarded, a, np.zeros(5, "float32"))


def test_runtime_preconditions_come_from_assumptions():
    n = SizeVar("n")
    A = Buffer("A", (n,))
    i = Var("i")
    body = For(i, IntImm(0), n, "serial", BufferStore(A, BufferLoad(A, (i,)), (i,)))
    func = PrimFunc((A,), body, "f", {"assumptions": (n % 4 == 0,)})
    ((cond, message),) = runtime_preconditions(func)
    assert "n % 4 == 0" in message
    assert refcomp.shape.evaluate(cond, {n: 8}) and not refcomp.shape.evaluate(cond, {n: 6})
    assert runtime_preconditions(func.with_(attrs={})) == []


def test_shape_relations_bind_first_dims_and_check_the_rest():
    n, m = SizeVar("n"), SizeVar("m")
    A, B, C = Buffer("A", (n, m)), Buffer("B", (m, n)), Buffer("C", (n * 2,))
    i = Var("i")
    func = PrimFunc((A, B, C), For(i, IntImm(0), n, "serial", BufferStore(C, BufferLoad(A, (i, 0)), (i,))), "rel")
    relations, unbound = shape_relations(func)
    assert [r.describe() for r in relations] == [
        "n = A.shape[0]", "m = A.shape[1]", "B.shape[0] must equal m", "B.shape[1] must equal n",
        "C.shape[0] must equal n*2",
    ]
    assert unbound == []
    k = SizeVar("k")
    _, unbound = shape_relations(PrimFunc((Buffer("D", (k + 1,)),), func.body, "g"))
    assert unbound == [k]


def test_build_with_runtime_bounds_returns_an_error_instead_of_overrunning(rng):
    """End to end through gcc: bounds="prove" refuses the kernel, bounds="runtime" guards it."""
    from refcomp.errors import ShapeError

    func = _tiled_copy()
    with pytest.raises(ShapeError, match=r"A\[io\*32 \+ ii\] reads row"):
        refcomp.build(func, bounds="prove")
    lib = refcomp.build(func, bounds="runtime")
    a = rng.standard_normal(64).astype("float32")
    b = np.zeros(64, "float32")
    lib(a, b)
    np.testing.assert_allclose(b, a + 1, rtol=1e-6)
    n = int(rng.integers(33, 63))
    with pytest.raises(RuntimeFailure, match="out of bounds in dim 0 of A"):
        lib(rng.standard_normal(n).astype("float32"), np.zeros(n, "float32"))
