"""The interpreter on nests deeper than one Python function can hold (20 nested loops, 100 levels
of indentation): the generated code continues in module-level functions, with the same results."""
import numpy as np
import pytest

import refcomp
from refcomp import IRError
from refcomp.ast import Buffer, BufferStore, For, IfThenElse, LetStmt, PrimFunc, SizeVar, Stmt, Var
from refcomp.loops.interpreter import python_source, scalar_only
from refcomp.loops.schedule import Schedule
from refcomp.workloads import matmul


def _counting_nest(depth, guarded):
    """depth loops over A (n, 2, 2, 2): the first four loops walk A, the rest run once.

    Every fourth level binds a let that only the innermost store reads and, when guarded, every
    level sits under an `if`: the innermost code reads locals bound all along the nest.
    """
    n = SizeVar("n")
    A = Buffer("A", (n, 2, 2, 2), "int32")
    loop_vars = [Var(f"i{k}") for k in range(depth)]
    lets = {k: Var(f"t{k}") for k in range(0, depth, 4)}
    total = lets[0]
    for k in list(lets)[1:]:
        total = total + lets[k]
    index = tuple(loop_vars[:4])
    body = BufferStore(A, A[index] * 3 + total, index)
    for k in reversed(range(depth)):
        extent = (n if k == 0 else 2) if k < 4 else 1
        v = loop_vars[k]
        inner = LetStmt(lets[k], v + k, body) if k in lets else body
        if guarded:
            inner = IfThenElse(v >= 0, inner)
        body = For(v, 0, extent, "serial", inner)
    return PrimFunc((A,), body), sum(lets)


@pytest.mark.parametrize("depth, guarded", [(25, False), (25, True), (60, True), (105, False)])
def test_deep_nests_run_and_agree_with_numpy(rng, depth, guarded):
    func, let_offsets = _counting_nest(depth, guarded)
    a = rng.integers(-1000, 1000, (3, 2, 2, 2), dtype=np.int32)
    i0, i1, i2, i3 = np.indices(a.shape)
    expected = a * 3 + i0 + let_offsets  # of the loop vars, only i0 is in a let
    for scalar in (False, True):
        got = a.copy()
        if scalar:
            with scalar_only():
                refcomp.interpret(func, got)
        else:
            refcomp.interpret(func, got)
        np.testing.assert_array_equal(got, expected)
    source = python_source(func)
    assert "_part(" in source  # the nest was continued in module-level functions
    assert max(len(line) - len(line.lstrip()) for line in source.split("\n")) < 100 * 4


def test_deeply_tiled_blockized_matmul(rng):
    """A matmul with every axis split six ways (18 loops), then blockized at two levels."""
    sch = Schedule(matmul(64, 64, 64))
    i, j, k = sch.get_loops(sch.get_block("C"))
    i_parts = sch.split(i, [2, 2, 2, 2, 2, 2])
    j_parts = sch.split(j, [2, 2, 2, 2, 2, 2])
    k_parts = sch.split(k, [2, 2, 2, 2, 2, 2])
    order = [part for level in zip(i_parts, j_parts, k_parts) for part in level]
    sch.reorder(*order)
    sch.blockize(order[12])  # the innermost 2x2x2 tile becomes block C_o
    outer_loops = sch.get_loops(sch.get_block("C_o"))
    sch.blockize(outer_loops[6])  # and the 4x4x4 tiles of those, block C_o_o (with its own init)
    func = sch.func
    assert _loop_depth(func.body) == 18
    a = rng.standard_normal((64, 64)).astype(np.float32)
    b = rng.standard_normal((64, 64)).astype(np.float32)
    c = rng.standard_normal((64, 64)).astype(np.float32)  # garbage: the inits must overwrite it
    refcomp.interpret(func, a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)
    assert "_part(" in python_source(func)


def _loop_depth(stmt):
    """The most loops nested around any statement of stmt."""
    deepest = 0

    def walk(node, depth):
        nonlocal deepest
        depth += isinstance(node, For)
        deepest = max(deepest, depth)
        for child in (getattr(node, f) for f in node.fields()):
            for item in child if isinstance(child, tuple) else (child,):
                if isinstance(item, Stmt):
                    walk(item, depth)

    walk(stmt, 0)
    return deepest


def test_a_nest_too_deep_to_compile_is_a_named_error():
    func, _ = _counting_nest(400, guarded=False)
    with pytest.raises(IRError, match="nest too deeply"):
        refcomp.interpret(func, np.zeros((1, 2, 2, 2), np.int32))
