"""Well-formedness: each rule has programs that pass and programs that fail with a marked spot."""
import pytest

from refcomp import IRError
from refcomp.ast import (
    Allocate, Block, BlockRealize, Buffer, BufferRegion, BufferStore, FloatImm, For, IntImm,
    IRModule, IterVar, Let, LetStmt, MatchBufferRegion, Range, SizeVar, Var, seq,
)
from refcomp.ast.parser import from_source
from refcomp.ast.wellformed import is_well_formed, verify_well_formed
from script_helpers import GOOD, TRUE, func_of, rooted

def rule_error(func, rule):
    with pytest.raises(IRError) as info:
        verify_well_formed(func)
    text = str(info.value)
    assert f"({rule})" in text, text
    assert "-->" in text  # the spot is marked in the printed function
    return info.value


def test_good_programs_pass():
    f = from_source(GOOD)
    verify_well_formed(f)
    verify_well_formed(IRModule({"main": f}))
    assert is_well_formed(f)


def test_duplicate_block_names():
    f = from_source(GOOD.replace('T.block("out")', 'T.block("acc")'))
    error = rule_error(f, "unique block names")
    assert "'acc'" in error.message


def test_undefined_and_out_of_scope_vars():
    A = Buffer("A", (4,), "int32")
    i, j = Var("i"), Var("j")
    f = func_of(For(i, 0, 4, "serial", BufferStore(A, j, (i,))), (A,))
    error = rule_error(f, "defined before use")
    assert "variable j" in error.message and isinstance(error.spot, BufferStore)
    # a loop var used after its loop
    g = func_of(seq(For(i, 0, 4, "serial", BufferStore(A, 0, (i,))), BufferStore(A, 1, (i,))), (A,))
    rule_error(g, "defined before use")
    # a let var outside its body
    x = Var("x")
    h = func_of(seq(LetStmt(x, IntImm(1), BufferStore(A, x, (0,))), BufferStore(A, x, (1,))), (A,))
    rule_error(h, "defined before use")
    # a Let expression's var is visible in its body only
    ok = func_of(BufferStore(A, Let(x, IntImm(2), x * x), (0,)), (A,))
    verify_well_formed(ok)


def test_iter_vars_are_not_visible_in_their_own_bindings():
    A = Buffer("A", (4,), "int32")
    v = Var("v")
    block = Block("b", (IterVar(v, Range.from_extent(4)),), (), (BufferRegion(A, (Range(v, 1),)),),
                  BufferStore(A, 0, (v,)))
    f = func_of(rooted(BlockRealize((v,), TRUE, block)), (A,))
    rule_error(f, "defined before use")


def test_size_vars_of_params_and_scalar_params_are_defined():
    n = SizeVar("n")
    A = Buffer("A", (n,), "float32")
    i, m = Var("i"), Var("m")
    f = func_of(For(i, 0, n, "serial", BufferStore(A, FloatImm(1.0), (i % m,))), (A, m))
    verify_well_formed(f)
    other = Buffer("B", (SizeVar("q"),), "float32")
    g = func_of(Allocate(other, BufferStore(other, FloatImm(1.0), (0,))), (A,))
    rule_error(g, "defined before use")


def test_var_bound_twice():
    A = Buffer("A", (4,), "int32")
    i = Var("i")
    f = func_of(seq(For(i, 0, 4, "serial", BufferStore(A, 0, (i,))), For(i, 0, 4, "serial", BufferStore(A, 1, (i,)))), (A,))
    error = rule_error(f, "single binding")
    assert "i is bound twice" in error.message
    n = Var("n")
    g = func_of(For(n, 0, 4, "serial", BufferStore(A, 0, (n,))), (A, n))
    rule_error(g, "single binding")


def test_iteration_domains():
    A = Buffer("A", (4,), "int32")
    i = Var("i")
    f = func_of(For(i, 0, -3, "serial", BufferStore(A, 0, (i,))), (A,))
    rule_error(f, "iteration domain")
    v = Var("v")
    block = Block("b", (IterVar(v, Range(0, -1)),), (), (), BufferStore(A, 0, (v,)))
    g = func_of(rooted(BlockRealize((IntImm(0),), TRUE, block)), (A,))
    rule_error(g, "iteration domain")
    i64 = Var("i", "int64")
    h = func_of(For(i64, 0, 4, "serial", BufferStore(A, 0, (i64,))), (A,))
    rule_error(h, "loop types")


def test_block_bindings_types():
    A = Buffer("A", (4,), "int32")
    v = Var("v", "int64")
    i = Var("i")
    block = Block("b", (IterVar(v, Range.from_extent(IntImm(4, "int64"))),), (), (), BufferStore(A, 0, (v,)))
    f = func_of(rooted(For(i, 0, 4, "serial", BlockRealize((i,), TRUE, block))), (A,))
    rule_error(f, "block bindings")


def test_buffers_must_be_declared():
    A = Buffer("A", (4,), "int32")
    stray = Buffer("stray", (4,), "int32")
    f = func_of(BufferStore(A, stray[0], (0,)), (A,))
    error = rule_error(f, "buffer declared")
    assert "stray" in error.message
    local = Buffer("local", (4,), "int32")
    ok = func_of(Allocate(local, seq(BufferStore(local, 1, (0,)), BufferStore(A, local[0], (0,)))), (A,))
    verify_well_formed(ok)
    # an alloc_buffer is visible only inside its block
    inner = Block("b", (), (), (), BufferStore(local, 1, (0,)), alloc_buffers=(local,))
    outside = func_of(seq(BlockRealize((), TRUE, inner), BufferStore(local, 2, (1,))), (A,))
    rule_error(outside, "buffer declared")


def test_init_needs_a_reduction_iter_var():
    f = from_source(GOOD.replace('T.axis.remap("SR", [i, k])', 'T.axis.remap("SS", [i, k])'))
    error = rule_error(f, "init needs reduction")
    assert "block acc" in error.message


def test_stores_inside_declared_writes():
    f = from_source(GOOD.replace("T.writes(C[vi])", "T.writes(acc[vi])"))
    error = rule_error(f, "stores inside declared writes")
    assert "stores to C" in error.message
    # blocks without any declared regions (like root) are opaque and unchecked
    A = Buffer("A", (4,), "int32")
    opaque = Block("op", (), (), (), BufferStore(A, 1, (0,)))
    verify_well_formed(func_of(rooted(BlockRealize((), TRUE, opaque)), (A,)))


def test_match_buffer_may_introduce_shape_vars():
    A = Buffer("A", (16,), "float32")
    s = Var("s")
    view = Buffer("view", (4,), "float32", strides=(s,))
    v = Var("v")
    block = Block("b", (IterVar(v, Range.from_extent(4)),), (), (BufferRegion(A, (Range(v * 4, 4),)),),
                  BufferStore(view, FloatImm(1.0), (0,)),
                  match_buffers=(MatchBufferRegion(view, BufferRegion(A, (Range(v * 4, 4),))),))
    i = Var("i")
    f = func_of(rooted(For(i, 0, 4, "serial", BlockRealize((i,), TRUE, block))), (A,))
    verify_well_formed(f)


def test_error_types_and_inputs():
    with pytest.raises(TypeError):
        verify_well_formed(Var("x"))
    f = from_source(GOOD.replace('T.block("out")', 'T.block("acc")'))
    with pytest.raises(ValueError):  # IRError is a ValueError
        verify_well_formed(IRModule({"f": f}))
    assert not is_well_formed(f)


def test_blocks_see_outer_loops_only_through_bindings():
    bad = from_source(GOOD.replace("C[vi] = x", "C[vi] = x + T.Cast(\"float32\", i)"))
    error = rule_error(bad, "blocks use iter vars")
    assert "block out uses i" in error.message
    # loops inside the block, and opaque blocks, may use loop variables freely
    A = Buffer("A", (4, 4), "int32")
    i, j = Var("i"), Var("j")
    opaque = Block("op", (), (), (), For(j, 0, 4, "serial", BufferStore(A, i + j, (i, j))))
    verify_well_formed(func_of(rooted(For(i, 0, 4, "serial", BlockRealize((), TRUE, opaque))), (A,)))


def test_one_view_may_be_matched_by_several_blocks():
    A = Buffer("A", (16,), "float32")
    s = Var("s")
    view = Buffer("view", (4,), "float32", strides=(s,))
    realizes = []
    for name in ("t0", "t1"):
        v = Var("v")
        block = Block(name, (IterVar(v, Range.from_extent(4)),), (), (BufferRegion(A, (Range(v * 4, 4),)),),
                      BufferStore(view, FloatImm(1.0), (0,)),
                      match_buffers=(MatchBufferRegion(view, BufferRegion(A, (Range(v * 4, 4),))),))
        i = Var("i")
        realizes.append(For(i, 0, 4, "serial", BlockRealize((i,), TRUE, block)))
    verify_well_formed(func_of(rooted(seq(*realizes)), (A,)))
