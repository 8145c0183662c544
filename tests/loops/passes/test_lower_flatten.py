"""Pass flatten_buffers: one-dimensional buffers and linear indices, identity and originals kept."""
from refcomp.ast import (
    Allocate, Buffer, BufferLoad, BufferStore, For, IntImm, PrimFunc, SizeVar, Var, assert_structural_equal,
    collect, const, seq,
)
from refcomp.loops.passes.flatten_buffers import flat_length, flatten_buffers, original_buffer
from refcomp.loops.passes.lower_blocks import lower_blocks

from lowering_programs import matmul, softmax
from numerics import check_same_results


def test_matmul_indices_become_row_major_linear():
    func = lower_blocks(matmul(4, 5, 3))
    flat = flatten_buffers(func)
    A, B, C = flat.params
    assert [b.shape[0].value for b in (A, B, C)] == [12, 15, 20]
    stores = collect(flat, BufferStore)
    i, j = (v for v in collect(stores[-1].indices[0], Var))
    assert_structural_equal(stores[-1].indices[0], i * 5 + j)
    check_same_results(func, flat)


def test_one_flat_buffer_per_original_and_originals_recorded():
    func = lower_blocks(softmax(3, 8))
    flat = flatten_buffers(func)
    for load in collect(flat, BufferLoad):
        assert len(load.buffer.shape) == 1
    buffers = {id(load.buffer): load.buffer for load in collect(flat, BufferLoad)}
    names = {}
    for buffer in buffers.values():
        assert names.setdefault(buffer.name, buffer) is buffer  # same name -> same object
    allocated = [s.buffer for s in collect(flat, Allocate)]
    assert all(b in buffers.values() or b.name == "O" for b in allocated)
    for new, old in zip(flat.params, func.params):
        assert original_buffer(flat, new) is old
        assert len(old.shape) == 2
    check_same_results(func, flat)


def test_symbolic_shape_length_and_index():
    n = SizeVar("n")
    A = Buffer("A", (n, 4))
    i, j = Var("i"), Var("j")
    func = PrimFunc((A,), For(i, 0, n, "serial", For(j, 0, 4, "serial", BufferStore(A, A[i, j] + 1.0, (i, j)))))
    flat = flatten_buffers(func)
    (F,) = flat.params
    assert_structural_equal(F.shape[0], n * 4, map_free_vars=False)
    assert_structural_equal(flat.body.body.body.indices[0], i * 4 + j, map_free_vars=False)


def test_explicit_strides_and_offset():
    A = Buffer("A", (3, 4), strides=(IntImm(8, "int32"), IntImm(1, "int32")), elem_offset=IntImm(2, "int32"))
    i, j = Var("i"), Var("j")
    func = PrimFunc((A,), For(i, 0, 3, "serial", For(j, 0, 4, "serial", BufferStore(A, const(1.0), (i, j)))))
    flat = flatten_buffers(func)
    (F,) = flat.params
    assert F.shape[0].value == 2 + 2 * 8 + 3 * 1 + 1 == flat_length(A).value
    assert not F.strides and F.elem_offset.value == 0
    assert_structural_equal(flat.body.body.body.indices[0], i * 8 + j + 2, map_free_vars=False)


def test_zero_dim_buffer_and_scope_kept():
    S = Buffer("S", (), scope="local")
    out = Buffer("out", (1,))
    func = PrimFunc((out,), Allocate(S, seq(BufferStore(S, const(3.0), ()), BufferStore(out, S[()], (0,)))))
    flat = flatten_buffers(func)
    allocate = flat.body
    assert allocate.buffer.shape[0].value == 1 and allocate.buffer.scope == "local"
    assert flat.body.body.stmts[0].indices[0].value == 0
    assert flat.params[0] is out  # already flat: kept as it is


def test_unchanged_one_dimensional_function_keeps_its_body():
    A = Buffer("A", (4,))
    i = Var("i")
    body = For(i, 0, 4, "serial", BufferStore(A, A[i] * 2.0, (i,)))
    flat = flatten_buffers(PrimFunc((A,), body))
    assert flat.body is body


def test_a_reshape_index_into_a_symbolic_dim_needs_no_division():
    """B[r, j] = A[r // s, r % s, j] with A (b, s, 4): the flat offset of the read is r * 4 + j
    (no floor division by the symbolic s, which the vectorizer cannot take), and the values stay."""
    from refcomp.ast.expr import FloorDiv

    b, s = SizeVar("b"), SizeVar("s")
    A, B = Buffer("A", (b, s, 4)), Buffer("B", (b * s, 4))
    r, j = Var("r"), Var("j")
    store = BufferStore(B, A[r // s, r % s, j] * 2.0, (r, j))
    func = PrimFunc((A, B), For(r, 0, b * s, "serial", For(j, 0, 4, "serial", store)))
    flat = flatten_buffers(func)
    (load,) = collect(flat, BufferLoad)
    assert_structural_equal(load.indices[0], r * 4 + j, map_free_vars=False)
    assert not collect(flat, FloorDiv)
    import numpy as np

    from refcomp.loops.interpreter import interpret

    rng = np.random.default_rng()
    for batch, seq in ((2, 3), (1, 1), (3, 5)):
        a = rng.standard_normal((batch, seq, 4)).astype(np.float32)
        got = np.full((batch * seq, 4), 9.0, np.float32)
        interpret(flat, a, got)
        np.testing.assert_allclose(got, 2 * a.reshape(batch * seq, 4), rtol=1e-6)


def test_a_division_by_another_dim_keeps_its_offset():
    """A[r // 3, r % 3] into A (n, s): 3 is not the dim s, so nothing merges."""
    from refcomp.ast.expr import FloorDiv

    n, s = SizeVar("n"), SizeVar("s")
    A = Buffer("A", (n, s))
    r = Var("r")
    func = PrimFunc((A,), For(r, 0, 3, "serial", BufferStore(A, A[r // 3, r % 3] + 1.0, (r // 3, r % 3))))
    assert collect(flatten_buffers(func), FloorDiv)
