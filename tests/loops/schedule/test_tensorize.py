"""tensorize: matching tiles against registered descriptions, binding buffers and sizes, and the
typed errors for every way a tile can differ.  Numeric checks through compiled C live in
test_tensorize_numeric.py."""
from __future__ import annotations

import pytest

from refcomp import ScheduleError
from refcomp.ast import (
    Block, BlockRealize, Buffer, BufferStore, Call, Evaluate, For, IfThenElse, IntImm, IterVar,
    PrimFunc, Range, StringImm, Var, free_vars, structural_equal,
)
from refcomp.loops import intrin
from refcomp.loops.primitives.tensorize import tensorize
from refcomp.loops.primitives.tree import walk
from refcomp.loops.schedule import Schedule

from .tensorize_programs import tile_loop, tiled_matmul_update


def _tensorized_call(func) -> Call:
    blocks = [s for s in walk(func.body) if isinstance(s, Block) and "tensorized" in s.annotations]
    assert len(blocks) == 1
    body = blocks[0].body
    if isinstance(body, IfThenElse):  # a partial-tile intrinsic skips tiles past the edge
        body = body.then_case
    assert isinstance(body, Evaluate)
    return body.value


def _int_args(call: Call) -> list:
    return [a.value if isinstance(a, IntImm) else a for a in call.args[1:]]


def test_fp32_tile_binds_pointers_strides_and_k():
    func = tiled_matmul_update(12, 32, 8, 6, 16)
    out, _ = tensorize(func, tile_loop(func, "ii"), "x86.avx2.sgemm_6x16")
    call = _tensorized_call(out)
    assert call.op == "call_extern" and call.args[0].value == "refcomp_sgemm_avx2_6x16"
    a_ptr, a_rs, a_cs, b_ptr, ldb, c_ptr, ldc, k, m_rows = call.args[1:]
    assert (a_rs.value, a_cs.value, ldb.value, ldc.value, k.value, m_rows.value) == (8, 1, 32, 32, 8, 6)
    # the pointers are the tile origins: A[vi_o*6, 0], B[0, vj_o*16], C[vi_o*6, vj_o*16]
    outer = next(s for s in walk(out.body) if isinstance(s, Block) and s.name == "C_o")
    vi_o, vj_o = (iv.var for iv in outer.iter_vars)
    a, b, c = func.params
    assert structural_equal(a_ptr, Call("address_of", (a[vi_o * 6, 0],), "handle"), map_free_vars=False)
    assert structural_equal(b_ptr, Call("address_of", (b[0, vj_o * 16],), "handle"), map_free_vars=False)
    assert structural_equal(c_ptr, Call("address_of", (c[vi_o * 6, vj_o * 16],), "handle"),
                            map_free_vars=False)
    assert out.attrs["cpu_features"] == ("avx2", "fma")
    assert any("refcomp_sgemm_avx2_6x16" in h for h in out.attrs["c_helpers"])


def test_tensorize_through_schedule_records_trace():
    func = tiled_matmul_update(12, 32, 8, 6, 16)
    sch = Schedule(func)
    block = sch.get_block("C")
    loops = sch.get_loops(block)
    sch.tensorize(loops[2], "x86.avx2.sgemm_6x16")
    _tensorized_call(sch.func)
    assert "tensorize" in str(sch.trace)
    replayed = Schedule.from_trace(func, sch.trace.to_json())
    assert structural_equal(replayed.func, sch.func)


def test_tensorize_an_already_blockized_block():
    func = tiled_matmul_update(12, 32, 8, 6, 16)
    sch = Schedule(func)
    outer = sch.blockize(sch.get_loops(sch.get_block("C"))[2])
    sch.tensorize(outer, "x86.avx2.sgemm_6x16")
    assert _tensorized_call(sch.func).args[0].value == "refcomp_sgemm_avx2_6x16"


def test_split_k_tile_offsets_the_k_origin():
    func = tiled_matmul_update(6, 16, 32, 6, 16, kc=8)
    out, _ = tensorize(func, tile_loop(func, "ii"), "x86.avx2.sgemm_6x16")
    call = _tensorized_call(out)
    assert call.args[-2].value == 8  # K of one tile
    a_index = call.args[1].args[0].indices
    assert "vk_o" in a_index[1].script() and "8" in a_index[1].script()


def test_packed_panels_bind_ldb_to_the_panel_width():
    func = tiled_matmul_update(12, 32, 8, 6, 16, b_layout="panels")
    out, _ = tensorize(func, tile_loop(func, "ii"), "x86.avx2.sgemm_6x16")
    call = _tensorized_call(out)
    ldb = call.args[5]
    assert ldb.value == 16
    b_load = call.args[4].args[0]
    assert b_load.buffer is func.params[1] and len(b_load.indices) == 3  # Bp[vj_o, 0, 0]


def test_int8_pairs_layout_and_k_multiple():
    func = tiled_matmul_update(6, 16, 8, 6, 16, a_dtype="int8", b_dtype="int8", acc_dtype="int32",
                               b_layout="pairs")
    out, _ = tensorize(func, tile_loop(func, "ii"), "x86.avx2.i8gemm_6x16")
    assert _tensorized_call(out).args[-2].value == 8


def test_int8_split_k_pairs_offset():
    func = tiled_matmul_update(6, 16, 16, 6, 16, kc=4, a_dtype="int8", b_dtype="int8",
                               acc_dtype="int32", b_layout="pairs")
    out, _ = tensorize(func, tile_loop(func, "ii"), "x86.avx2.i8gemm_6x16")
    b_index = _tensorized_call(out).args[4].args[0].indices
    assert "vk_o * 2" in b_index[0].script()  # (vk_o*4 + k)//2 = vk_o*2 + k//2


def test_partial_row_tile_binds_m_rows():
    func = tiled_matmul_update(10, 16, 8, 6, 16)  # rows 6..9 form a partial tile
    out, _ = tensorize(func, tile_loop(func, "ii"), "x86.avx2.sgemm_6x16")
    m_rows = _tensorized_call(out).args[-1]
    assert "10" in m_rows.script() and "vi_o * 6" in m_rows.script()  # 10 - vi_o * 6
    guard = next(s for s in walk(out.body) if isinstance(s, IfThenElse))
    assert "vi_o * 6 < 10" in guard.condition.script()  # tiles wholly past the edge do nothing


def test_partial_tile_needs_a_partial_tile_intrinsic():
    func = tiled_matmul_update(40, 32, 64, 32, 32, a_dtype="bfloat16", b_dtype="bfloat16",
                               acc_dtype="float32", b_layout="pairs")
    message = _error(func, "ii", "x86.amx.bf16gemm_32x32")
    assert "predicate" in message


def test_loop_order_inside_the_tile_does_not_matter():
    func = tiled_matmul_update(6, 16, 4, 6, 16, k_inner_first=True)
    out, _ = tensorize(func, tile_loop(func, "ki"), "x86.avx2.sgemm_6x16")
    _tensorized_call(out)


# ----------------------------------------------------------------------------- mismatches

def _error(func, loop_name, name) -> str:
    with pytest.raises(ScheduleError) as info:
        tensorize(func, tile_loop(func, loop_name), name)
    return str(info.value)


def test_wrong_tile_extent_is_named():
    func = tiled_matmul_update(8, 32, 8, 4, 16)
    message = _error(func, "ii", "x86.avx2.sgemm_6x16")
    assert "extent of loop ii is 4, the description needs 6" in message


def test_wrong_dtype_is_named():
    func = tiled_matmul_update(6, 16, 8, 6, 16, a_dtype="float64", acc_dtype="float64", b_dtype="float64")
    assert "float64" in _error(func, "ii", "x86.avx2.sgemm_6x16")


def test_int8_k_not_a_multiple_of_the_pair_size():
    func = tiled_matmul_update(6, 16, 6, 6, 16, kc=3, a_dtype="int8", b_dtype="int8",
                               acc_dtype="int32", b_layout="pairs")
    assert "multiple of 2" in _error(func, "ii", "x86.avx2.i8gemm_6x16")


def test_transposed_operand_is_a_mismatch():
    # B stored as (N, K) and read as B[vj, vk]: same shapes as the tile, wrong access pattern.
    m, n, k = 6, 16, 16
    a, b, c = Buffer("A", (m, k)), Buffer("B", (n, k)), Buffer("C", (m, n))
    vi, vj, vk = Var("vi"), Var("vj"), Var("vk")
    ii, jj, kk = Var("ii"), Var("jj"), Var("kk")
    block = Block("C", (IterVar(vi, Range.from_extent(m)), IterVar(vj, Range.from_extent(n)),
                        IterVar(vk, Range.from_extent(k), "reduce")), (), (),
                  BufferStore(c, c[vi, vj] + a[vi, vk] * b[vj, vk], (vi, vj)))
    nest = For(ii, 0, m, "serial", For(jj, 0, n, "serial", For(kk, 0, k, "serial",
               BlockRealize((ii, jj, kk), IntImm(1, "bool"), block))))
    func = PrimFunc((a, b, c), nest)
    message = _error(func, "ii", "x86.avx2.sgemm_6x16")
    assert "computation differs" in message and "B" in message


def test_column_major_b_fails_the_stride_check():
    m, n, k = 6, 16, 8
    a, c = Buffer("A", (m, k)), Buffer("C", (m, n))
    b = Buffer("B", (k, n), strides=(1, k))  # column-major
    vi, vj, vk = Var("vi"), Var("vj"), Var("vk")
    ii, jj, kk = Var("ii"), Var("jj"), Var("kk")
    block = Block("C", (IterVar(vi, Range.from_extent(m)), IterVar(vj, Range.from_extent(n)),
                        IterVar(vk, Range.from_extent(k), "reduce")), (), (),
                  BufferStore(c, c[vi, vj] + a[vi, vk] * b[vk, vj], (vi, vj)))
    nest = For(ii, 0, m, "serial", For(jj, 0, n, "serial", For(kk, 0, k, "serial",
               BlockRealize((ii, jj, kk), IntImm(1, "bool"), block))))
    message = _error(PrimFunc((a, b, c), nest), "ii", "x86.avx2.sgemm_6x16")
    assert "stride 1 of B" in message


def _with_init(func):
    """func with C[vi, vj] = 0 as the init of its block C (the form te gives a reduction)."""
    from refcomp.loops.primitives.tree import replace_in_func

    update = next(s for s in walk(func.body) if isinstance(s, Block) and s.name == "C")
    c = func.params[2]
    vi, vj, _ = (iv.var for iv in update.iter_vars)
    realize = next(s for s in walk(func.body) if isinstance(s, BlockRealize) and s.block is update)
    return replace_in_func(func, {id(realize): realize.with_(block=update.with_(init=BufferStore(c, 0.0, (vi, vj))))})


@pytest.mark.parametrize("kc", [None, 4])
def test_reduction_init_moves_to_the_tile_block(kc):
    """Without an init form the intrinsic leaves the init to the tile block, which zeroes the tile
    before its first k slab."""
    import dataclasses

    base = intrin.get("x86.avx2.sgemm_6x16")
    intrin.register(dataclasses.replace(base, name="user.no_init_form", init_impl=None), override=True)
    try:
        func = _with_init(tiled_matmul_update(12, 32, 8, 6, 16, kc))
        out, _ = tensorize(func, tile_loop(func, "ii"), "user.no_init_form")
    finally:
        intrin.unregister("user.no_init_form")
    outer = next(s for s in walk(out.body) if isinstance(s, Block) and s.name == "C_o")
    assert outer.init is not None  # zeroes the tile before its first k slab
    assert any(iv.kind == "reduce" for iv in outer.iter_vars)  # a unit one when k is not split
    _tensorized_call(out)


def _calls(stmt) -> list[str]:
    return [s.value.args[0].value for s in walk(stmt) if isinstance(s, Evaluate) and isinstance(s.value, Call)]


@pytest.mark.parametrize("kc", [None, 4])
def test_zero_init_folds_into_the_init_form(kc):
    """An intrinsic with an init form takes the tile's zeroing: no init is left, and the first
    k slab calls the init form (C = A * B), the others the accumulating kernel."""
    func = _with_init(tiled_matmul_update(12, 32, 8, 6, 16, kc))
    out, _ = tensorize(func, tile_loop(func, "ii"), "x86.avx2.sgemm_6x16")
    outer = next(s for s in walk(out.body) if isinstance(s, Block) and s.name == "C_o")
    assert outer.init is None
    assert isinstance(outer.body, IfThenElse)
    reduce_var = next(iv.var for iv in outer.iter_vars if iv.kind == "reduce")
    assert reduce_var in free_vars(outer.body.condition)
    assert _calls(outer.body.then_case) == ["refcomp_sgemm_avx2_6x16_init"]
    assert _calls(outer.body.else_case) == ["refcomp_sgemm_avx2_6x16"]


def test_an_init_other_than_zero_stays():
    """C = 1 before the reduction is not the init form's zero: the init stays in the tile block."""
    func = tiled_matmul_update(12, 32, 8, 6, 16, 4)
    update = next(s for s in walk(func.body) if isinstance(s, Block) and s.name == "C")
    vi, vj, _ = (iv.var for iv in update.iter_vars)
    realize = next(s for s in walk(func.body) if isinstance(s, BlockRealize) and s.block is update)
    from refcomp.loops.primitives.tree import replace_in_func

    func = replace_in_func(func, {id(realize): realize.with_(
        block=update.with_(init=BufferStore(func.params[2], 1.0, (vi, vj))))})
    out, _ = tensorize(func, tile_loop(func, "ii"), "x86.avx2.sgemm_6x16")
    outer = next(s for s in walk(out.body) if isinstance(s, Block) and s.name == "C_o")
    assert outer.init is not None
    assert _calls(outer.body) == ["refcomp_sgemm_avx2_6x16"]


def test_description_with_init_needs_a_tile_with_init():
    from refcomp.loops.primitives.tree import replace_in_func

    base = intrin.get("x86.avx2.sgemm_6x16")
    d_block = next(s for s in walk(base.desc.body) if isinstance(s, Block))
    c = base.desc.params[2]
    vi, vj, _ = (iv.var for iv in d_block.iter_vars)
    d_realize = next(s for s in walk(base.desc.body) if isinstance(s, BlockRealize))
    desc = replace_in_func(base.desc, {id(d_realize): d_realize.with_(
        block=d_block.with_(init=BufferStore(c, 0.0, (vi, vj))))})
    intrin.register(intrin.TensorIntrin("user.init_tile", desc, base.impl, c_helpers=base.c_helpers), override=True)
    try:
        func = tiled_matmul_update(12, 32, 8, 6, 16)
        assert "has no init, the description does not agree" in _error(func, "ii", "user.init_tile")
    finally:
        intrin.unregister("user.init_tile")


def test_too_many_loops_in_the_tile():
    func = tiled_matmul_update(12, 32, 8, 6, 16)
    assert "the tile has 5 loops, the description 3" in _error(func, "io", "x86.avx2.sgemm_6x16")


def test_unknown_intrinsic_lists_the_registered_ones():
    func = tiled_matmul_update(6, 16, 8, 6, 16)
    message = _error(func, "ii", "x86.nope")
    assert "no tensor intrinsic named 'x86.nope'" in message and "x86.avx2.sgemm_6x16" in message


def test_failed_tensorize_leaves_the_schedule_unchanged():
    func = tiled_matmul_update(8, 32, 8, 4, 16)
    sch = Schedule(func)
    loops = sch.get_loops(sch.get_block("C"))
    before = sch.func
    with pytest.raises(ScheduleError):
        sch.tensorize(loops[2], "x86.avx2.sgemm_6x16")
    assert sch.func is before


# ----------------------------------------------------------------------------- user intrinsics

def _axpy4_intrin(name="user.axpy4", swap=False):
    """y[0:4] = y[0:4] + x[0:4] * 2 through a user C helper."""
    x, y = Buffer("x", (4,), strides=(1,)), Buffer("y", (4,), strides=(1,))
    i, vi = Var("i"), Var("vi")
    value = y[vi] + x[vi] * 2.0 if not swap else x[vi] * 2.0 + y[vi]
    block = Block("axpy", (IterVar(vi, Range.from_extent(4)),), (), (), BufferStore(y, value, (vi,)))
    desc = PrimFunc((x, y), For(i, 0, 4, "serial", BlockRealize((i,), IntImm(1, "bool"), block)))
    impl = PrimFunc((x, y), Evaluate(Call("call_extern", (
        StringImm("axpy4"), Call("address_of", (x[0],), "handle"), Call("address_of", (y[0],), "handle")), "int32")))
    helper = "static void axpy4(const float* x, float* y) { for (int i = 0; i < 4; ++i) y[i] += x[i] * 2.0f; }"
    return intrin.TensorIntrin(name, desc, impl, c_helpers=(helper,))


def _axpy_program(n=16):
    x, y = Buffer("X", (n,)), Buffer("Y", (n,))
    io, ii, v = Var("io"), Var("ii"), Var("v")
    block = Block("Y", (IterVar(v, Range.from_extent(n)),), (), (), BufferStore(y, y[v] + x[v] * 2.0, (v,)))
    nest = For(io, 0, n // 4, "serial", For(ii, 0, 4, "serial",
               BlockRealize((io * 4 + ii,), IntImm(1, "bool"), block)))
    return PrimFunc((x, y), nest, name="axpy")


@pytest.mark.parametrize("swap", [False, True])
def test_user_registered_intrinsic(swap):
    intrin.register(_axpy4_intrin(swap=swap), override=True)
    try:
        func = _axpy_program()
        out, _ = tensorize(func, tile_loop(func, "ii"), "user.axpy4")
        call = _tensorized_call(out)
        assert call.args[0].value == "axpy4"
        assert out.attrs["c_helpers"][-1].startswith("static void axpy4")
    finally:
        intrin.unregister("user.axpy4")


def test_register_refuses_a_duplicate_name():
    intrin.register(_axpy4_intrin("user.dup"))
    try:
        with pytest.raises(ValueError, match="already registered"):
            intrin.register(_axpy4_intrin("user.dup"))
    finally:
        intrin.unregister("user.dup")


def test_intrin_rejects_impl_with_other_buffers():
    good = _axpy4_intrin()
    with pytest.raises(TypeError, match="buffer params"):
        intrin.TensorIntrin("user.bad", good.desc, good.impl.with_(params=good.impl.params[:1]))


def test_available_follows_cpu_flags(monkeypatch):
    from refcomp.loops.intrin import cpu

    monkeypatch.setenv("REFCOMP_CPU_FEATURES", "avx2,fma")
    cpu.cpu_features.cache_clear()
    try:
        assert intrin.get("x86.avx2.sgemm_6x16").available()
        assert not intrin.get("x86.amx.bf16gemm_32x32").available()
        assert "x86.avx2.sgemm_6x16" in intrin.names(available_only=True)
    finally:
        monkeypatch.delenv("REFCOMP_CPU_FEATURES")
        cpu.cpu_features.cache_clear()


# ----------------------------------------------------------------------------- script before/after

BEFORE = '''
@T.prim_func
def matmul(A: T.Buffer((12, 8), "float32"), B: T.Buffer((8, 32), "float32"), C: T.Buffer((12, 32), "float32")):
    with T.block("root"):
        T.reads()
        T.writes()
        for io, jo, ii, jj, ki in T.grid(2, 2, 6, 16, 8):
            with T.block("C"):
                vi = T.axis.spatial(12, io * 6 + ii)
                vj = T.axis.spatial(32, jo * 16 + jj)
                vk = T.axis.reduce(8, ki)
                T.reads(C[vi, vj], A[vi, vk], B[vk, vj])
                T.writes(C[vi, vj])
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
'''

AFTER = '''
@T.prim_func
def matmul(A: T.Buffer((12, 8), "float32"), B: T.Buffer((8, 32), "float32"), C: T.Buffer((12, 32), "float32")):
    with T.block("root"):
        T.reads()
        T.writes()
        for io, jo in T.grid(2, 2):
            with T.block("C_o"):
                vi_o, vj_o = T.axis.remap("SS", [io, jo])
                T.reads(C[vi_o * 6:vi_o * 6 + 6, vj_o * 16:vj_o * 16 + 16], A[vi_o * 6:vi_o * 6 + 6, 0:8], B[0:8, vj_o * 16:vj_o * 16 + 16])
                T.writes(C[vi_o * 6:vi_o * 6 + 6, vj_o * 16:vj_o * 16 + 16])
                T.block_attr({"tensorized": "x86.avx2.sgemm_6x16"})
                T.evaluate(T.call_extern("int32", "refcomp_sgemm_avx2_6x16", T.address_of(A[vi_o * 6, 0]), 8, 1, T.address_of(B[0, vj_o * 16]), 32, T.address_of(C[vi_o * 6, vj_o * 16]), 32, 8, 6))
'''


def test_tensorize_script_before_after():
    import refcomp
    from refcomp.ast import assert_structural_equal

    before = refcomp.from_source(BEFORE)
    sch = Schedule(before)
    ii = sch.get_loops(sch.get_block("C"))[2]
    sch.tensorize(ii, "x86.avx2.sgemm_6x16")
    # the function attributes carry the C helper text; the IR itself is compared with the script
    assert_structural_equal(sch.func.with_(attrs={}), refcomp.from_source(AFTER))


def test_partial_tile_bound_by_a_product_of_sizes():
    """A tile guarded by `i < batch * seq` (a row count that is not affine in the sizes, as the
    flattened (batch, seq) rows of a linear layer give) matches a partial-rows description with
    `m_rows = batch * seq - first row`, the product taken as it is: before, tensorize refused it
    (the guard not of the form `x + offset < 0`); the graph-level test of flattened rows checks the
    numbers (tests/graph/passes/test_dispatch_blas_auto.py)."""
    from refcomp import te
    from refcomp.ast import SizeVar
    from refcomp.loops import recipes

    batch, seq = SizeVar("batch", "int64"), SizeVar("seq", "int64")
    a = te.placeholder((batch * seq, te.const(32, "int64")), "float32", "A")
    b = te.placeholder((te.const(32, "int64"), te.const(64, "int64")), "float32", "B")
    r = te.reduce_axis((te.const(0, "int64"), te.const(32, "int64")), "k")
    c = te.compute((batch * seq, te.const(64, "int64")), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    sch = recipes.matmul_fp32(te.create_prim_func([a, b, c]), "C")
    calls = [s.value for s in walk(sch.func.body) if isinstance(s, Evaluate) and isinstance(s.value, Call)
             and s.value.op == "call_extern"]
    assert calls  # the init form and the update form of the tile
    for call in calls:
        m_rows = call.args[-1].script()
        assert "batch * seq" in m_rows and "v_i_o" in m_rows  # the product as it is, less the tile's first row
