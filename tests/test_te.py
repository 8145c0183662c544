"""te: tensor construction, dtype rules, reducers, and the layout create_prim_func produces."""
import math

import numpy as np
import pytest

from refcomp import IRError, te
from refcomp.ast import (
    Block, BlockRealize, BufferStore, Call, Cast, For, IfThenElse, IntImm, Max, SizeVar, Var,
    collect, structural_equal,
)


def stage_blocks(func):
    """The stage blocks of a te-made function, in order (the root excluded)."""
    return [b for b in collect(func.body, Block) if b.name != "root"]


def loops_above(func, block_name):
    found = []

    def walk(stmt, loops):
        if isinstance(stmt, For):
            walk(stmt.body, loops + [stmt])
        elif isinstance(stmt, BlockRealize):
            if stmt.block.name == block_name:
                found.extend(loops)
            walk(stmt.block.body, loops)
        elif hasattr(stmt, "stmts"):
            for s in stmt.stmts:
                walk(s, loops)

    walk(func.body, [])
    return found


def test_matmul_layout_follows_tvm():
    n = te.var("n")
    A = te.placeholder((n, 8), "float32", "A")
    B = te.placeholder((8, 6), "float32", "B")
    k = te.reduce_axis((0, 8), "k")
    C = te.compute((n, 6), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    func = te.create_prim_func([A, B, C])
    assert [p.name for p in func.params] == ["A", "B", "C"]
    assert isinstance(func.params[0].shape[0], SizeVar) and func.params[0].shape[0].name == "n"
    root = func.body.block
    assert root.name == "root" and root.alloc_buffers == ()
    (block,) = stage_blocks(func)
    assert block.name == "C"
    assert [(iv.var.name, iv.kind) for iv in block.iter_vars] == [("v_i", "spatial"), ("v_j", "spatial"), ("v_k", "reduce")]
    assert [loop.loop_var.name for loop in loops_above(func, "C")] == ["i", "j", "k"]
    assert all(loop.kind == "serial" for loop in loops_above(func, "C"))
    # reads are the exact points one instance touches; the output is not listed as read
    v_i, v_j, v_k = (iv.var for iv in block.iter_vars)
    (ra, rb) = block.reads
    assert ra.buffer is func.params[0] and [r.min for r in ra.region] == [v_i, v_k]
    assert rb.buffer is func.params[1] and [r.min for r in rb.region] == [v_k, v_j]
    assert all(r.extent.value == 1 for r in ra.region + rb.region)
    (w,) = block.writes
    assert w.buffer is func.params[2] and [r.min for r in w.region] == [v_i, v_j]
    assert isinstance(block.init, BufferStore) and block.init.value.value == 0.0
    assert isinstance(block.body, BufferStore)
    update = block.body.value
    assert update.a.buffer is func.params[2]  # C[v_i, v_j] + A * B


def test_intermediates_are_root_allocations_with_unique_names():
    A = te.placeholder((4,), "float32", "A")
    B1 = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    B2 = te.compute((4,), lambda i: B1[i] * 2.0, name="B")
    out = te.compute((4,), lambda i: B2[i] - 1.0, name="B")
    func = te.create_prim_func([A, out])
    assert [b.name for b in stage_blocks(func)] == ["B_1", "B_2", "B"]
    assert [b.name for b in func.body.block.alloc_buffers] == ["B_1", "B_2"]
    names = [b.name for b in func.params] + [b.name for b in func.body.block.alloc_buffers]
    assert len(set(names)) == len(names)


def test_reads_are_merged_offsets_and_full_region_when_guarded():
    A = te.placeholder((10,), "float32", "A")
    B = te.compute((8,), lambda i: A[i] + A[i + 2] + A[i + 1], name="B")
    C = te.compute((10,), lambda i: te.if_then_else(i < 9, A[i + 1], 0.0), name="C")
    func = te.create_prim_func([A, B, C])
    b, c = stage_blocks(func)
    (rng,) = b.reads[0].region
    assert rng.extent.value == 3 and structural_equal(rng.min, b.iter_vars[0].var)
    (rng,) = c.reads[0].region
    assert rng.min.value == 0 and rng.extent.value == 10


def test_reduction_with_where_and_max_identity():
    A = te.placeholder((3, 5), "float32", "A")
    k = te.reduce_axis(5, "k")
    M = te.compute((3,), lambda i: te.max(A[i, k], axis=k, where=k > 0), name="M")
    func = te.create_prim_func([A, M])
    (block,) = stage_blocks(func)
    assert block.init.value.value == -math.inf
    assert isinstance(block.body, IfThenElse)
    assert isinstance(block.body.then_case.value, Max)
    # guarded by where=, but k spans the dim (in bounds either way): the point, as unguarded
    assert block.reads[0].region[1].extent.value == 1


def test_guarded_read_is_the_whole_dim_only_where_its_index_may_leave_it():
    """A read under a condition keeps the exact index in a dim whose index is an iter var over
    that dim, and claims the whole dim where the index may leave the buffer when the condition
    is false (here k + 1 reaches 5)."""
    A = te.placeholder((3, 5), "float32", "A")
    k = te.reduce_axis(5, "k")
    M = te.compute((3,), lambda i: te.sum(te.if_then_else(k < 4, A[i, k + 1], 0.0), axis=k), name="M")
    (block,) = stage_blocks(te.create_prim_func([A, M]))
    row, col = block.reads[0].region
    assert row.extent.value == 1 and structural_equal(row.min, block.iter_vars[0].var)
    assert col.min.value == 0 and col.extent.value == 5


def test_identities_of_reducers_per_dtype():
    for dtype, lo, hi in [("int8", -128, 127), ("uint16", 0, 65535), ("float16", -math.inf, math.inf)]:
        A = te.placeholder((4,), dtype, "A")
        k = te.reduce_axis(4, "k")
        for reducer, want in [(te.max, lo), (te.min, hi), (te.sum, 0)]:
            R = te.compute((), lambda: reducer(A[k], axis=k), name="R")
            (block,) = stage_blocks(te.create_prim_func([A, R]))
            assert block.init.value.value == want and str(block.init.value.dtype) == dtype


def test_comm_reducer_and_elementwise_max():
    A = te.placeholder((4,), "int32", "A")
    k = te.reduce_axis(4, "k")
    bit_or = te.comm_reducer(lambda x, y: x | y if False else x * y, lambda t: te.const(1, t), name="mul")
    R = te.compute((1,), lambda i: bit_or(A[k], axis=k), name="R")
    (block,) = stage_blocks(te.create_prim_func([A, R]))
    assert block.init.value.value == 1
    m = te.max(A[0], A[1])
    assert isinstance(m, Max)


def test_dtype_promotion_follows_the_ir_rules():
    H = te.placeholder((4,), "float16", "H")
    I8 = te.placeholder((4,), "int8", "I8")
    I32 = te.placeholder((4,), "int32", "I32")
    assert str((H[0] * 0.5).dtype) == "float16"  # a Python float stays float16
    assert str((I8[0] + I32[0]).dtype) == "int32"
    assert str((I32[0] * 1.5).dtype) == "float32"
    assert str((I8[0] + 1).dtype) == "int8"
    with pytest.raises(TypeError):
        te.exp(I32[0])  # math intrinsics need floats: cast first
    assert str(te.exp(I32[0].astype("float32")).dtype) == "float32"


def test_intrinsics_build_calls():
    A = te.placeholder((4,), "float32", "A")
    for name in ["exp", "exp2", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan",
                 "tanh", "sigmoid", "erf", "floor", "ceil", "round", "trunc"]:
        call = getattr(te, name)(A[0])
        assert isinstance(call, Call) and call.op == name and str(call.dtype) == "float32"
    assert te.power(A[0], 2.0).op == "pow" and te.pow is te.power
    assert str(te.isnan(A[0]).dtype) == "bool"
    assert te.abs(A[0]).op == "abs"
    ite = te.if_then_else(A[0] > 0.0, A[1], 0.0)
    assert ite.op == "if_then_else" and str(ite.dtype) == "float32"


def test_float_predicates_of_integers_are_constants(rng):
    """isnan/isinf of integers are False and isfinite True, in every lane; compiled on a vector loop."""
    import refcomp
    from refcomp.ast import Broadcast, Ramp

    lanes = Ramp(0, 1, 8)
    for predicate, expected in ((te.isnan, False), (te.isinf, False), (te.isfinite, True)):
        scalar, vector = predicate(te.const(3, "int32")), predicate(lanes)
        assert bool(scalar.value) is expected
        assert isinstance(vector, Broadcast) and str(vector.dtype) == "boolx8" and bool(vector.value.value) is expected
    X = te.placeholder((64,), "int32", "X")
    Y = te.compute((64,), lambda i: te.if_then_else(te.isfinite(X[i]), X[i] + 1, X[i]), name="Y")
    sch = refcomp.Schedule(te.create_prim_func([X, Y]))
    (loop,) = sch.get_loops(sch.get_block("Y"))
    sch.vectorize(sch.split(loop, [None, 8])[1])
    x = rng.integers(-1000, 1000, 64, dtype=np.int32)
    y = np.empty(64, np.int32)
    refcomp.build(sch.func)(x, y)
    np.testing.assert_array_equal(y, x + 1)


def test_limits():
    assert te.max_value("int8").value == 127 and te.min_value("uint32").value == 0
    assert te.max_value("float16").value == 65504.0
    assert te.max_value("float32").value == float(np.finfo(np.float32).max)
    assert te.min_value("bfloat16").value < -3e38
    assert te.const(3, "int64").dtype.name == "int64"


def test_scalar_params_and_casts_in_compute():
    n = te.var("n")
    alpha = te.var("alpha", "float32")
    A = te.placeholder((n,), "int32", "A")
    B = te.compute((n,), lambda i: A[i].astype("float32") * alpha, name="B")
    func = te.create_prim_func([A, B, alpha])
    assert func.params[2] is alpha
    (block,) = stage_blocks(func)
    assert isinstance(block.body.value.a, Cast)


def test_errors():
    n = te.var("n")
    A = te.placeholder((n,), "float32", "A")
    alpha = te.var("alpha", "float32")
    B = te.compute((n,), lambda i: A[i] * alpha, name="B")
    with pytest.raises(IRError, match="alpha"):
        te.create_prim_func([A, B])  # alpha is neither a shape var nor a parameter
    C = te.compute((n,), lambda i: A[i] + 1.0, name="C")
    with pytest.raises(IRError, match="placeholder A"):
        te.create_prim_func([C])
    k = te.reduce_axis(4, "k")
    with pytest.raises(TypeError, match="whole body"):
        te.compute((n,), lambda i: te.sum(A[k], axis=k) + 1.0)
    with pytest.raises(TypeError, match="takes 2 indices"):
        te.compute((n,), lambda i, j: A[i])
    with pytest.raises(IndexError):
        A[0, 1]


def test_scalar_output_and_int64_shapes():
    A = te.placeholder((te.const(6, "int64"),), "float64", "A")
    k = te.reduce_axis(te.const(6, "int64"), "k")
    S = te.compute((), lambda: te.sum(A[k], axis=k), name="S")
    func = te.create_prim_func([A, S])
    (block,) = stage_blocks(func)
    assert block.iter_vars[0].var.dtype.name == "int64" and block.writes[0].region == ()
    assert isinstance(func.params[1].shape, tuple) and func.params[1].shape == ()


def test_same_graph_twice_gives_independent_functions():
    A = te.placeholder((4,), "float32", "A")
    B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
    f1, f2 = te.create_prim_func([A, B]), te.create_prim_func([A, B])
    assert f1.params[0] is not f2.params[0]
    assert structural_equal(f1, f2)


def test_reduce_axis_with_begin_end():
    A = te.placeholder((10,), "float32", "A")
    k = te.reduce_axis((2, 7), "k")
    S = te.compute((1,), lambda i: te.sum(A[k], axis=k), name="S")
    func = te.create_prim_func([A, S])
    (loop,) = [lp for lp in loops_above(func, "S") if lp.loop_var.name == "k"]
    assert loop.min.value == 2 and loop.extent.value == 5
    assert isinstance(loop.min, IntImm) and isinstance(loops_above(func, "S")[0].loop_var, Var)


def test_attrs_become_block_annotations_and_tag_is_kept():
    A = te.placeholder((4,), "float32", "A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B", tag="elemwise", attrs={"schedule_rule": "none"})
    assert B.op.tag == "elemwise" and B.op.axis[0].var.name == "i" and B.ndim == 1
    (block,) = stage_blocks(te.create_prim_func([A, B]))
    assert dict(block.annotations) == {"schedule_rule": "none"}
