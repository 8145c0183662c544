"""Pass lower_blocks: blocks become statements; init, predicates, allocations and match buffers."""
import pytest

from refcomp.ast import (
    Allocate, And, Block, BlockRealize, Buffer, BufferRegion, BufferStore, Call, EQ, Evaluate, For,
    IfThenElse, IntImm, IterVar, MatchBufferRegion, StringImm, PrimFunc, Range, SeqStmt, Var, assert_structural_equal,
    collect, const, seq,
)
from refcomp.errors import IRError
from refcomp.loops.passes.lower_blocks import lower_blocks

from lowering_programs import matmul, softmax, split
from numerics import check_same_results


def _grid(vars_and_extents, body):
    for var, extent in reversed(vars_and_extents):
        body = For(var, 0, extent, "serial", body)
    return body


def test_matmul_blocks_become_loops_with_init_under_first_k():
    func = matmul(4, 5, 3)
    A, B, C = func.params
    i, j, k = Var("i"), Var("j"), Var("k")
    expected = PrimFunc((A, B, C), _grid([(i, 4), (j, 5), (k, 3)], seq(
        IfThenElse(EQ(k, const(0)), BufferStore(C, const(0.0), (i, j))),
        BufferStore(C, C[i, j] + A[i, k] * B[k, j], (i, j)),
    )), name=func.name, attrs=func.attrs)
    assert_structural_equal(lower_blocks(func), expected)


def test_no_block_remains_and_intermediates_are_allocated_in_order():
    func = softmax(3, 8)
    lowered = lower_blocks(func)
    assert not collect(lowered, Block) and not collect(lowered, BlockRealize)
    root = func.body.block
    allocations = []
    stmt = lowered.body
    while isinstance(stmt, Allocate):
        allocations.append(stmt.buffer)
        stmt = stmt.body
    assert allocations == list(root.alloc_buffers)  # first buffer outermost, identity kept


def test_init_condition_is_on_the_bindings_after_a_reduction_split():
    func = split(matmul(4, 5, 6), "k", 2)
    lowered = lower_blocks(func)
    guard = [s for s in collect(lowered, IfThenElse)]
    assert len(guard) == 1
    condition = guard[0].condition
    k_o, k_i = [v for v in collect(condition, Var)]
    assert {k_o.name, k_i.name} == {"k_o", "k_i"}
    assert_structural_equal(condition, EQ(k_o * 2 + k_i, const(0)), map_free_vars=True)
    check_same_results(func, lowered)


def test_predicate_becomes_an_if_around_the_body():
    func = split(matmul(4, 5, 3), "j", 2)  # 5 = 2 * 3 - 1: imperfect
    lowered = lower_blocks(func)
    outer_ifs = [s for s in collect(lowered, IfThenElse) if isinstance(s.then_case, SeqStmt)]
    assert len(outer_ifs) == 1
    j_o, j_i = collect(outer_ifs[0].condition, Var)
    assert_structural_equal(outer_ifs[0].condition, j_o * 2 + j_i < 5)
    check_same_results(func, lowered)


def _tile_copy(view_dims=2, with_symbols=False):
    """B = A * 2 by 4x4 tiles, each tile a block whose match buffers view A and B."""
    A, B = Buffer("A", (8, 8)), Buffer("B", (8, 8))
    io, jo, ii, jj = Var("io"), Var("jo"), Var("ii"), Var("jj")
    vi, vj = Var("vi"), Var("vj")
    if view_dims == 2:
        a_shape, b_shape = (4, 4), (4, 4)
    else:  # a view of one row of the tile: the leading region dim has extent 1
        a_shape, b_shape = (4,), (4,)
    s0 = Var("s0")
    offset = Var("off")
    A_sub = Buffer("A_sub", a_shape, strides=(s0, IntImm(1, "int32")) if with_symbols and view_dims == 2 else (),
                   elem_offset=offset if with_symbols else None)
    B_sub = Buffer("B_sub", b_shape)
    if view_dims == 2:
        region_a = (Range(vi * 4, 4), Range(vj * 4, 4))
        body = _grid([(ii, 4), (jj, 4)], BufferStore(B_sub, A_sub[ii, jj] * 2.0, (ii, jj)))
        if with_symbols:
            body = seq(Evaluate(Call("call_extern", (StringImm("tile_hook"), Call("address_of", (A_sub[0, 0],), "handle"),
                                                     s0, offset), "int32")), body)
    else:
        region_a = (Range(vi * 4, 1), Range(vj * 4, 4))
        body = _grid([(jj, 4)], BufferStore(B_sub, A_sub[jj] * 2.0, (jj,)))
    region_b = region_a
    block = Block("tile", (IterVar(vi, Range(0, 2)), IterVar(vj, Range(0, 2))),
                  (BufferRegion(A, region_a),), (BufferRegion(B, region_b),), body,
                  match_buffers=(MatchBufferRegion(A_sub, BufferRegion(A, region_a)),
                                 MatchBufferRegion(B_sub, BufferRegion(B, region_b))))
    realize = BlockRealize((io, jo), const(True), block)
    return PrimFunc((A, B), _grid([(io, 2), (jo, 2)], realize)), (A, B, io, jo, ii, jj)


def test_match_buffers_resolve_to_offset_accesses_of_their_sources():
    func, (A, B, io, jo, ii, jj) = _tile_copy()
    expected = PrimFunc((A, B), _grid([(io, 2), (jo, 2), (ii, 4), (jj, 4)], BufferStore(
        B, A[io * 4 + ii, jo * 4 + jj] * 2.0, (io * 4 + ii, jo * 4 + jj))))
    assert_structural_equal(lower_blocks(func), expected)
    check_same_results(func, lower_blocks(func))


def test_lower_dimensional_view_keeps_the_leading_region_starts():
    func, (A, B, io, jo, ii, jj) = _tile_copy(view_dims=1)
    expected = PrimFunc((A, B), _grid([(io, 2), (jo, 2), (jj, 4)], BufferStore(
        B, A[io * 4, jo * 4 + jj] * 2.0, (io * 4, jo * 4 + jj))))
    assert_structural_equal(lower_blocks(func), expected)


def test_view_strides_and_offset_symbols_take_the_source_values():
    func, (A, B, io, jo, ii, jj) = _tile_copy(with_symbols=True)
    lowered = lower_blocks(func)
    call = collect(lowered, Evaluate)[0].value
    _, address, stride, offset = call.args
    assert address.args[0].buffer is A
    assert_structural_equal(address.args[0].indices[0], io * 4 + 0)
    assert stride.value == 8
    names = {v.name for v in collect(offset, Var)}
    assert names == {"io", "jo"} and "s0" not in {v.name for v in collect(lowered, Var)}


def test_block_with_iter_vars_but_no_realize_is_an_ir_error():
    A = Buffer("A", (4,))
    v = Var("v")
    block = Block("lonely", (IterVar(v, Range(0, 4)),), (), (), BufferStore(A, const(1.0), (v,)))
    with pytest.raises(IRError, match="lonely"):
        lower_blocks(PrimFunc((A,), block))


def test_loop_kinds_and_thread_bindings_are_kept():
    func = matmul(4, 5, 3)
    from lowering_programs import with_kind
    func = with_kind(with_kind(func, "i", "thread_binding", "blockIdx.x"), "j", "parallel")
    lowered = lower_blocks(func)
    kinds = {loop.loop_var.name: (loop.kind, loop.thread_binding) for loop in collect(lowered, For)}
    assert kinds["i"] == ("thread_binding", "blockIdx.x") and kinds["j"] == ("parallel", None)


def test_binding_read_from_memory_is_let_bound_once():
    # a gather-like block: v = idx[i]; the body overwrites idx[i] before using v again
    idx, out = Buffer("idx", (4,), "int32"), Buffer("out", (8,))
    i, v = Var("i"), Var("v")
    body = seq(BufferStore(idx, const(7), (i,)), BufferStore(out, const(1.0), (v,)))
    block = Block("scatter", (IterVar(v, Range(0, 8)),), (), (), body)
    func = PrimFunc((idx, out), _grid([(i, 4)], BlockRealize((idx[i],), const(True), block)))
    lowered = lower_blocks(func)
    from refcomp.ast import LetStmt
    assert isinstance(lowered.body.body, LetStmt) and lowered.body.body.var is v
    import numpy as np
    from numerics import interpreter
    results = []
    for version in (func, lowered):
        positions, out_array = np.array([5, 0, 3, 6], "int32"), np.zeros(8, "float32")
        interpreter()(version, positions, out_array)
        results.append(out_array)
    np.testing.assert_array_equal(results[0], results[1])
    assert results[1][[5, 0, 3, 6]].tolist() == [1.0] * 4 and results[1][7] == 0.0
