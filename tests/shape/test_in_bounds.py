"""Proven-in-bounds kernels: tiling with predicates, off-by-ones, padding, assumptions, vectors."""
from __future__ import annotations

import pytest

import refcomp
from refcomp import te
from refcomp.ast import (
    Buffer, BufferLoad, BufferStore, Call, Evaluate, For, IfThenElse, IntImm, PrimFunc, Ramp, SizeVar,
    Var, select, seq,
)
from refcomp.errors import ShapeError
from refcomp.shape import check_accesses, evaluate, verify_in_bounds


def _split_kernel():
    n = te.size_var("n")
    A = te.placeholder((n,), "float32", "A")
    B = te.compute((n,), lambda i: A[i] * 2, name="B")
    sch = refcomp.Schedule(te.create_prim_func([A, B]))
    (loop,) = sch.get_loops(sch.get_block("B"))
    sch.split(loop, [None, 32])
    return sch.mod["main"]


def _flat_tiled(guarded: bool):
    """for io in ceil(n/32): for ii in 32: [if io*32 + ii < n:] B[io*32 + ii] = A[io*32 + ii]."""
    n = SizeVar("n")
    A, B = Buffer("A", (n,)), Buffer("B", (n,))
    io, ii = Var("io"), Var("ii")
    index = io * 32 + ii
    store = BufferStore(B, BufferLoad(A, (index,)), (index,))
    body = IfThenElse(index < n, store) if guarded else store
    loops = For(io, IntImm(0), (n + 31) // 32, "serial", For(ii, IntImm(0), IntImm(32), "serial", body))
    return PrimFunc((A, B), loops, "tiled"), (n, io, ii)


def test_imperfect_split_is_proved_through_its_predicate():
    func = _split_kernel()
    obligations = check_accesses(func)
    assert {ob.kind for ob in obligations} >= {"load", "store", "binding"}
    assert all(ob.proved for ob in obligations), [ob.message for ob in obligations if not ob.proved]
    verify_in_bounds(func)


def test_guarded_flat_tiling_is_proved():
    func, _ = _flat_tiled(guarded=True)
    verify_in_bounds(func)


def test_unguarded_tiling_is_rejected_with_a_real_counterexample():
    func, (n, io, ii) = _flat_tiled(guarded=False)
    with pytest.raises(ShapeError) as info:
        verify_in_bounds(func)
    err = info.value
    cex = err.counterexample
    assert set(cex) == {"n", "io", "ii"}
    index = cex["io"] * 32 + cex["ii"]
    assert index >= cex["n"] and 0 <= cex["ii"] < 32 and 0 <= cex["io"] < (cex["n"] + 31) // 32
    assert "may be out of bounds in dim 0 of" in err.message
    assert f"reads row {index} of {cex['n']}" in err.message or f"writes row {index} of {cex['n']}" in err.message
    assert isinstance(err.spot, (BufferLoad, BufferStore))


def test_off_by_one_names_access_buffer_dim_and_counterexample():
    n = te.size_var("n")
    A = te.placeholder((n,), "float32", "A")
    B = te.compute((n,), lambda i: A[i + 1], name="B")
    func = te.create_prim_func([A, B])
    with pytest.raises(ShapeError) as info:
        verify_in_bounds(func)
    err = info.value
    assert "load from A[v_i + 1]" in err.message and "dim 0 of A" in err.message
    cex = err.counterexample
    assert cex["v_i"] + 1 >= cex["n"]  # the values really read past the end
    assert f"reads row {cex['v_i'] + 1} of {cex['n']}" in err.message
    assert err.ir is func and isinstance(err.spot, BufferLoad)


def test_off_by_one_store_on_lower_side():
    n = SizeVar("n")
    A = Buffer("A", (n,))
    i = Var("i")
    func = PrimFunc((A,), For(i, IntImm(0), n, "serial", BufferStore(A, te.const(1.0), (i - 1,))), "shift")
    with pytest.raises(ShapeError, match=r"store to A\[i - 1\].*n = \d+, i = 0: A\[i - 1\] writes row -1 of"):
        verify_in_bounds(func)


def test_conv_with_padding_is_proved():
    n, m = te.size_var("n"), te.size_var("m")
    A = te.placeholder((n, m), "float32", "A")
    W = te.placeholder((3, 3), "float32", "W")
    ki, kj = te.reduce_axis(3, "ki"), te.reduce_axis(3, "kj")

    def padded(i, j):
        inside = te.all(i >= 0, i < n, j >= 0, j < m)
        return te.if_then_else(inside, A[i, j], te.const(0.0))

    C = te.compute((n, m), lambda i, j: te.sum(padded(i + ki - 1, j + kj - 1) * W[ki, kj], axis=[ki, kj]), name="C")
    func = te.create_prim_func([A, W, C])
    obligations = check_accesses(func)
    assert any(ob.buffer is not None and ob.buffer.name == "A" for ob in obligations)
    verify_in_bounds(func)


def test_eager_select_does_not_protect_its_branches():
    """select evaluates both sides, so a padded read through select is out of bounds."""
    n = te.size_var("n")
    A = te.placeholder((n,), "float32", "A")
    B = te.compute((n,), lambda i: select(i >= 1, A[i - 1], te.const(0.0)), name="B")
    with pytest.raises(ShapeError, match=r"A\[v_i - 1\].*reads row -1"):
        verify_in_bounds(te.create_prim_func([A, B]))


def _prefix_copy(with_assume: bool):
    n, m = SizeVar("n"), SizeVar("m")
    A, B = Buffer("A", (n,)), Buffer("B", (m,))
    i = Var("i")
    loop = For(i, IntImm(0), m, "serial", BufferStore(B, BufferLoad(A, (i,)), (i,)))
    body = seq(Evaluate(Call("assume", (m <= n,), "bool")), loop) if with_assume else loop
    return PrimFunc((A, B), body, "prefix")


def test_assume_call_is_a_fact_for_later_statements():
    verify_in_bounds(_prefix_copy(with_assume=True))
    with pytest.raises(ShapeError) as info:
        verify_in_bounds(_prefix_copy(with_assume=False))
    cex = info.value.counterexample
    assert cex["i"] >= cex["n"]


def _blocked_by_four(assumptions):
    n = SizeVar("n")
    A = Buffer("A", (n,))
    i, j = Var("i"), Var("j")
    store = BufferStore(A, te.const(0.0), (i * 4 + j,))
    loops = For(i, IntImm(0), (n + 3) // 4, "serial", For(j, IntImm(0), IntImm(4), "serial", store))
    attrs = {"assumptions": assumptions(n)} if assumptions else None
    return PrimFunc((A,), loops, "by4", attrs)


def test_function_assumption_attr_is_used():
    verify_in_bounds(_blocked_by_four(lambda n: (n % 4 == 0,)))
    with pytest.raises(ShapeError) as info:
        verify_in_bounds(_blocked_by_four(None))
    cex = info.value.counterexample
    assert cex["n"] % 4 != 0 and cex["i"] * 4 + cex["j"] >= cex["n"]


def _vector_copy(extent):
    n = SizeVar("n")
    A, B = Buffer("A", (n,)), Buffer("B", (n,))
    i = Var("i")
    ramp = Ramp(i * 4, IntImm(1), 4)
    body = For(i, IntImm(0), extent(n), "serial", BufferStore(B, BufferLoad(A, (ramp,)), (ramp,)))
    return PrimFunc((A, B), body, "vcopy")


def test_vector_ramp_checks_first_and_last_lane():
    verify_in_bounds(_vector_copy(lambda n: n // 4))
    with pytest.raises(ShapeError) as info:
        verify_in_bounds(_vector_copy(lambda n: (n + 3) // 4))
    cex = info.value.counterexample
    assert cex["i"] * 4 + 3 >= cex["n"]


def test_indirect_index_needs_a_fact():
    n = SizeVar("n")
    A, idx, B = Buffer("A", (n,)), Buffer("idx", (n,), "int32"), Buffer("B", (n,))
    i = Var("i")
    gather = BufferStore(B, BufferLoad(A, (BufferLoad(idx, (i,)),)), (i,))
    func = PrimFunc((A, idx, B), For(i, IntImm(0), n, "serial", gather), "gather")
    with pytest.raises(ShapeError, match=r"load from A\[idx\[i\]\]"):
        verify_in_bounds(func)
    j = idx[i]
    guarded = For(i, IntImm(0), n, "serial", IfThenElse((j >= 0) & (j < n), gather))
    verify_in_bounds(PrimFunc((A, idx, B), guarded, "gather_guarded"))


def test_lowered_split_kernel_is_proved():
    from refcomp.loops.lower import lower

    lowered = lower(_split_kernel())
    verify_in_bounds(lowered)
    assert check_accesses(lowered)


def _checked_then_overwritten(overwrite: bool):
    """if 0 <= idx[0] < n: [idx[0] = 100;] A[idx[0]] = 0  -- the check goes stale after the store."""
    n = SizeVar("n")
    A, idx = Buffer("A", (n,)), Buffer("idx", (1,), "int32")
    first = BufferLoad(idx, (IntImm(0),))
    use = BufferStore(A, te.const(0.0), (first,))
    body = seq(BufferStore(idx, IntImm(100), (IntImm(0),)), use) if overwrite else use
    return PrimFunc((A, idx), IfThenElse((first >= 0) & (first < n), body), "stale")


def test_a_fact_about_a_buffer_is_dropped_where_the_buffer_is_written():
    verify_in_bounds(_checked_then_overwritten(overwrite=False))
    with pytest.raises(ShapeError, match=r"store to A\[idx\[0\]\]"):
        verify_in_bounds(_checked_then_overwritten(overwrite=True))


def test_two_dim_message_names_the_column():
    n, m = te.size_var("n"), te.size_var("m")
    A = te.placeholder((n, m), "float32", "A")
    B = te.compute((n, m), lambda i, j: A[i, j + 1], name="B")
    with pytest.raises(ShapeError) as info:
        verify_in_bounds(te.create_prim_func([A, B]))
    cex = info.value.counterexample
    assert "dim 1 of A (shape (n, m))" in info.value.message
    assert f"reads column {cex['v_j'] + 1} of {cex['m']}" in info.value.message


def test_int64_extent_with_int32_index_is_compared_without_narrowing():
    n = SizeVar("n", "int64")
    A = Buffer("A", (n,))
    i = Var("i")
    # i < n held as int64; narrowing n to int32 would let a huge n wrap to a small extent
    loop = For(i, IntImm(0), IntImm(1000), "serial",
               IfThenElse(i.astype("int64") < n, BufferStore(A, te.const(0.0), (i,))))
    verify_in_bounds(PrimFunc((A,), loop, "mixed"))
    unguarded = For(i, IntImm(0), IntImm(1000), "serial", BufferStore(A, te.const(0.0), (i,)))
    with pytest.raises(ShapeError) as info:
        verify_in_bounds(PrimFunc((A,), unguarded, "mixed_bad"))
    assert info.value.counterexample["i"] >= info.value.counterexample["n"]


def _common_kernels():
    n, m, c = te.size_var("n"), te.size_var("m"), te.size_var("c")
    A = te.placeholder((2 * n + 1,), "float32", "A")
    k = te.reduce_axis(3, "k")
    X = te.placeholder((n, m), "float32", "X")
    Y = te.placeholder((n * m,), "float32", "Y")
    Z = te.placeholder((n, c * 4), "float32", "Z")
    W = te.placeholder((n + 2, m + 2), "float32", "W")
    kh, kw = te.reduce_axis(3, "kh"), te.reduce_axis(3, "kw")
    yield "maxpool_stride2", [A, te.compute((n,), lambda i: te.max(A[i * 2 + k], axis=k), name="P")]
    yield "transpose", [X, te.compute((m, n), lambda i, j: X[j, i], name="T")]
    yield "flatten", [X, te.compute((n * m,), lambda f: X[f // m, f % m], name="R")]
    yield "unflatten", [Y, te.compute((n, m), lambda i, j: Y[i * m + j], name="R")]
    yield "split_channels", [Z, te.compute((n, c, 4), lambda i, j, l: Z[i, j * 4 + l], name="S")]
    yield "conv_valid", [W, te.compute((n, m), lambda i, j: te.sum(W[i + kh, j + kw], axis=[kh, kw]), name="C")]


@pytest.mark.parametrize("name, tensors", list(_common_kernels()), ids=lambda v: v if isinstance(v, str) else "")
def test_common_symbolic_kernels_are_proved(name, tensors):
    verify_in_bounds(te.create_prim_func(tensors, name=name))
