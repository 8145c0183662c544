"""The fusion and default-schedule rules that make graph kernels fast, each alone: what the IR looks
like before and after, and that the compiled result still equals numpy on random data."""
import numpy as np
import pytest

import refcomp
from refcomp.ast import For, PrimFunc, SizeVar, collect
from refcomp.ast.stmt import Block
from refcomp.graph import BlockBuilder, Var, const, op, tensor
from refcomp.graph.passes import dead_code_elimination, legalize_ops
from refcomp.graph.passes.block_indices import aligned_vector_width, simplify_block_indices
from refcomp.graph.passes.default_schedule import schedule_kernel, vector_lanes
from refcomp.graph.passes.fuse_ops import fuse_ops
from refcomp.graph.passes.fuse_tir import fuse_tir
from refcomp.graph.passes.op_pattern import analyze_pattern
from refcomp.loops.intrin import cpu


def single_output(params, body):
    bb = BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(body(bb, *params))
        bb.emit_func_output(out)
    return bb.get()


def fused_module(mod):
    return dead_code_elimination(fuse_tir(fuse_ops(dead_code_elimination(legalize_ops(mod)))))


def kernels(mod):
    return {name: f for name, f in mod.functions.items() if isinstance(f, PrimFunc)}


def calls(mod):
    return [b.value for block in mod["main"].body.blocks for b in block.bindings if b.value.op_name == "call_tir"]


def vm_run(mod, *arrays, **kwargs):
    ex = refcomp.graph.build(mod, target="c", blas=False, **kwargs)
    return refcomp.runtime.VirtualMachine(ex)["main"](*arrays), ex


def np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def masked_scores(n):
    """where(tril(full_like(s, 1)) > 0.5, s * 0.25, -1e9) then softmax: a causal attention row."""
    s = Var("s", tensor((4, n, n)))

    def body(bb, s):
        scaled = bb.emit(op.multiply(s, const(np.float32(0.25))))
        mask = bb.emit(op.tril(op.full_like(scaled, 1.0)))
        masked = bb.emit(op.where(op.greater(mask, const(np.float32(0.5))), scaled, const(np.float32(-1e9))))
        return op.softmax(masked, axis=-1)

    return single_output([s], body)


def np_masked(s):
    n = s.shape[-1]
    scaled = s * np.float32(0.25)
    masked = np.where(np.tril(np.ones((n, n), bool)), scaled, np.float32(-1e9))
    return np_softmax(masked)


# ----------------------------------------------------------------------------- fusion

def test_softmax_and_layer_norm_kernels_have_the_reduction_pattern():
    n = SizeVar("n", "int64")
    x = Var("x", tensor((n, 32)))
    g, b = Var("g", tensor((32,))), Var("b", tensor((32,)))
    for body in (lambda bb, x, g, b: op.softmax(x, axis=-1),
                 lambda bb, x, g, b: op.layer_norm(x, g, b, axes=(-1,))):
        legal = legalize_ops(single_output([x, g, b], body))
        (func,) = kernels(legal).values()
        assert len([blk for blk in collect(func.body, Block) if blk.init is not None]) >= 2  # several reductions
        assert analyze_pattern(func) == "reduction"


def test_a_value_read_twice_inside_one_group_still_fuses(rng):
    # s * 0.25 is read by full_like (its shape) and by where: both are in the mask's group
    n = SizeVar("n", "int64")
    mod = masked_scores(n)
    legal = dead_code_elimination(legalize_ops(mod))
    assert len(calls(legal)) == 6
    fused = fuse_tir(fuse_ops(legal))
    (call,) = calls(fused)
    assert call.args[0].name.startswith("fused_multiply")
    s = rng.standard_normal((4, 21, 21)).astype("float32")
    out, ex = vm_run(mod, s)
    np.testing.assert_allclose(out, np_masked(s), rtol=2e-5, atol=1e-7)
    unfused, _ = vm_run(mod, s, fuse=False)
    np.testing.assert_allclose(out, unfused, rtol=2e-5, atol=1e-7)


def test_costly_math_read_by_a_reduction_stays_in_memory():
    # sum(exp(x)) over rows: exp is not inlined into the (scalar) sum; cheap stages are
    n = SizeVar("n", "int64")
    x = Var("x", tensor((n, 24)))
    mod = single_output([x], lambda bb, x: op.sum(op.exp(op.add(x, const(np.float32(1.0)))), axis=(1,)))
    fused = fused_module(mod)
    (func,) = kernels(fused).values()
    names = [blk.name for blk in collect(func.body, Block) if blk.name != "root"]
    assert len(names) == 2  # the add went into exp; exp stays a stage of its own
    assert any(c.op == "exp" for blk in collect(func.body, Block) if blk.init is None and blk.name != "root"
               for c in collect(blk.body, refcomp.ast.expr.Call))


# ----------------------------------------------------------------------------- default schedule

def loops_of(func, kind):
    return [loop for loop in collect(func.body, For) if loop.kind == kind]


def test_vector_lanes_fill_the_widest_register():
    native = 16 if cpu.has("avx512f") else 8
    assert vector_lanes(32, 1024) == native
    assert vector_lanes(32, 24) == 8
    assert vector_lanes(32, 12) == 4
    assert vector_lanes(32, 6) == 1
    assert vector_lanes(32, None) == 1
    assert vector_lanes(16, 1024) == 2 * native


def test_symbolic_rows_get_a_predicated_vector_loop_and_parallel_rows(rng):
    n = SizeVar("n", "int64")
    a = Var("a", tensor((3, n, n)))
    mod = single_output([a], lambda bb, a: op.multiply(a, const(np.float32(1.5))))
    legal = legalize_ops(mod)
    (before,) = kernels(legal).values()
    assert not loops_of(before, "vectorized") and not loops_of(before, "parallel")
    after = schedule_kernel(before)
    (vec,) = loops_of(after, "vectorized")
    assert vec.extent.value == vector_lanes(32, 1 << 20)
    (par,) = loops_of(after, "parallel")
    assert not isinstance(par.extent, refcomp.ast.IntImm)  # the symbolic loop moved outermost, not 3
    for size in (1, 17, 40):
        x = rng.standard_normal((3, size, size)).astype("float32")
        out, _ = vm_run(mod, x)
        np.testing.assert_allclose(out, x * np.float32(1.5), rtol=1e-6)


@pytest.mark.parametrize("lead, fused", [((16,), 16), ((1, 16), 16), ((3, 16), 48)])
def test_constant_loops_of_16_or_more_stay_parallel_outermost_before_a_symbolic_one(rng, lead, fused):
    # (heads, n, n): moving n outermost would make each thread jump a whole head between rows
    n = SizeVar("n", "int64")
    a = Var("a", tensor(lead + (n, 24)))
    mod = single_output([a], lambda bb, a: op.multiply(a, const(np.float32(1.5))))
    (before,) = kernels(legalize_ops(mod)).values()
    after = schedule_kernel(before)
    (par,) = loops_of(after, "parallel")
    assert isinstance(par.extent, refcomp.ast.IntImm) and par.extent.value == fused
    assert len(collect(par.body, For)) == len(collect(after.body, For)) - 1  # outermost: all loops inside
    for size in (1, 17, 40):
        x = rng.standard_normal(lead + (size, 24)).astype("float32")
        out, _ = vm_run(mod, x)
        np.testing.assert_allclose(out, x * np.float32(1.5), rtol=1e-6)


def test_short_constant_leading_loops_are_fused_before_parallel():
    a = Var("a", tensor((2, 3, 64)))
    legal = legalize_ops(single_output([a], lambda bb, a: op.exp(a)))
    (func,) = kernels(legal).values()
    (par,) = loops_of(schedule_kernel(func), "parallel")
    assert par.extent.value == 6


def test_only_the_loops_making_64_iterations_are_fused(rng):
    """A (2, 1280, 3, 3) NCHW8c -> NCHW copy: n and c fused (2560 iterations), y and x stay nested
    loops, so the element's indices divide nothing; the copy still equals numpy's."""
    x = Var("x", tensor((2, 160, 3, 3, 8)))
    mod = single_output([x], lambda bb, x: op.layout_transform(x, "NCHW8c", "NCHW"))
    (func,) = kernels(legalize_ops(mod)).values()
    scheduled = schedule_kernel(func)
    (par,) = loops_of(scheduled, "parallel")
    assert par.extent.value == 2 * 1280
    assert [loop.extent.value for loop in collect(par.body, For)] == [3, 3]
    xv = rng.standard_normal((2, 160, 3, 3, 8)).astype(np.float32)
    out, _ = vm_run(mod, xv)
    np.testing.assert_array_equal(out, xv.transpose(0, 1, 4, 2, 3).reshape(2, 1280, 3, 3))


def test_vectorized_row_reduction_has_its_init_outside_the_vector_loop(rng):
    n = SizeVar("n", "int64")
    x = Var("x", tensor((n, n)))
    mod = single_output([x], lambda bb, x: op.softmax(x, axis=-1))
    (func,) = kernels(legalize_ops(mod)).values()
    partial = [blk for blk in collect(func.body, Block) if blk.name.endswith("_partial")]
    assert len(partial) == 2 and all(blk.init is not None for blk in partial)
    after = schedule_kernel(func)
    blocks = {blk.name: blk for blk in collect(after.body, Block)}
    assert {"max_partial_init", "sum_partial_init"} <= set(blocks)
    assert blocks["max_partial"].init is None
    assert len(loops_of(after, "vectorized")) >= 3  # both partial reductions and the output
    for size in (1, 15, 16, 33):
        a = rng.standard_normal((size, size)).astype("float32") * 3
        out, _ = vm_run(mod, a)
        np.testing.assert_allclose(out, np_softmax(a), rtol=2e-5, atol=1e-7)


def test_softmax_flushes_only_exps_below_the_normal_range(rng):
    n = SizeVar("n", "int64")
    x = Var("x", tensor((n, n)))
    mod = single_output([x], lambda bb, x: op.softmax(x, axis=-1))
    a = rng.standard_normal((9, 9)).astype("float32")
    a[:, 3] = -1e9  # masked: exp underflows to 0 either way
    a[:, 5] = a.max(axis=1) - 86.0  # exp(-86) ~ 4e-38 is kept
    a[0, :] = np.nan
    out, _ = vm_run(mod, a)
    want = np_softmax(a.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(out[1:], want[1:], rtol=2e-5, atol=0)
    assert np.all(out[1:, 5] > 0) and np.all(out[:, 3][1:] == 0)
    assert np.all(np.isnan(out[0]))


def test_block_indices_of_a_reshape_become_plain(rng):
    n = SizeVar("n", "int64")
    x = Var("x", tensor((n, 96)))
    mod = single_output([x], lambda bb, x: op.permute_dims(op.reshape(x, (n, 3, 2, 16)), (1, 2, 0, 3)))
    fused = fused_module(mod)
    (func,) = kernels(fused).values()
    divisions = (refcomp.ast.expr.FloorDiv, refcomp.ast.expr.FloorMod)
    assert collect(func.body, divisions)
    plain = simplify_block_indices(func)
    (store,) = collect(plain.body, refcomp.ast.BufferStore)
    assert not collect(store, divisions)
    a = rng.standard_normal((5, 96)).astype("float32")
    out, _ = vm_run(mod, a)
    np.testing.assert_array_equal(out, a.reshape(5, 3, 2, 16).transpose(1, 2, 0, 3))


def test_vector_width_is_aligned_to_the_divisors_of_the_vector_iter(rng):
    n = SizeVar("n", "int64")
    x = Var("x", tensor((4, n, 32)))
    mod = single_output([x], lambda bb, x: op.reshape(op.permute_dims(x, (1, 0, 2)), (n, 128)))
    (func,) = kernels(fused_module(mod)).values()
    plain = simplify_block_indices(func)
    (block,) = [blk for blk in collect(plain.body, Block) if blk.name != "root"]
    inner = block.iter_vars[-1].var
    assert aligned_vector_width(block, inner, 128, 8) == 32  # reads x[v // 32, i, v % 32]
    assert aligned_vector_width(block, inner, 128, 64) == 64
    after = schedule_kernel(func)
    (vec,) = loops_of(after, "vectorized")
    assert vec.extent.value == 32
    a = rng.standard_normal((4, 7, 32)).astype("float32")
    out, _ = vm_run(mod, a)
    np.testing.assert_array_equal(out, a.transpose(1, 0, 2).reshape(7, 128))


@pytest.mark.parametrize("rows", [1, 6, 13])
def test_masked_softmax_kernel_matches_numpy_at_several_sizes(rows, rng):
    n = SizeVar("n", "int64")
    mod = masked_scores(n)
    s = rng.standard_normal((4, rows, rows)).astype("float32") * 4
    out, _ = vm_run(mod, s)
    np.testing.assert_allclose(out, np_masked(s), rtol=2e-5, atol=1e-7)


# ----------------------------------------------------------------------------- BLAS dispatch

@pytest.mark.parametrize("batched", [False, True])
def test_matmul_of_a_swapped_permute_reads_the_source_transposed(batched, rng):
    from refcomp.graph.passes.dispatch_blas import dispatch_blas
    from refcomp.runtime.blas import register_blas

    if not register_blas():
        pytest.skip("numpy's OpenBLAS library was not found")
    n = SizeVar("n", "int64")
    lead = (3,) if batched else ()
    q, k = Var("q", tensor(lead + (n, 8))), Var("k", tensor(lead + (5, 8)))
    axes = (0, 2, 1) if batched else (1, 0)
    mod = single_output([q, k], lambda bb, q, k: op.matmul(q, bb.emit(op.permute_dims(k, axes))))
    dispatched = dead_code_elimination(dispatch_blas(mod))
    (gemm,) = [b.value for block in dispatched["main"].body.blocks for b in block.bindings]
    assert gemm.op_name == "call_dps_packed" and gemm.args[0].symbol == "refcomp.blas.sgemm_nt"
    assert k in gemm.args[1:] or k in getattr(gemm.args[1], "fields", ())  # read in place, no permute
    a = rng.standard_normal(lead + (7, 8)).astype("float32")
    b = rng.standard_normal(lead + (5, 8)).astype("float32")
    ex = refcomp.graph.build(mod, target="c", blas=True)
    out = refcomp.runtime.VirtualMachine(ex)["main"](a, b)
    np.testing.assert_allclose(out, a @ np.swapaxes(b, -1, -2), rtol=1e-5, atol=1e-6)
    # a permute that is not a swap of the last two axes keeps its kernel
    if batched:
        k2 = Var("k2", tensor((8, 3, 5)))
        other = single_output([q, k2], lambda bb, q, k: op.matmul(q, bb.emit(op.permute_dims(k, (1, 0, 2)))))
        values = [b.value for block in dispatch_blas(other)["main"].body.blocks for b in block.bindings]
        assert values[0].op_name == "permute_dims"


def exported_key_transpose(bb, k, heads, seq, dim, scale, split):
    """An exported attention's K^T: k (batch, heads, seq, dim) merged to (batch * heads, seq, dim),
    its last two axes swapped, split back to (batch, heads, dim, seq) and scaled (split False: the
    swap read through the merged (batch * heads, ...) tensor alone)."""
    merged = bb.emit(op.reshape(k, (-1, seq, dim)))
    swapped = bb.emit(op.permute_dims(merged, (0, 2, 1)))
    batch = k.struct_info.shape[0]
    back = bb.emit(op.reshape(swapped, (batch, heads, dim, seq))) if split else swapped
    return bb.emit(op.multiply(back, const(np.float32(scale)))) if scale is not None else back


@pytest.mark.parametrize("seq,scale,split", [(1, 0.42, True), (7, 0.42, True), (13, None, True), (5, 0.5, False)])
def test_an_exported_key_transpose_folds_into_sgemm_nt(seq, scale, split, rng):
    """reshape, permute_dims swapping the last two axes, reshape back and a scalar multiply (the
    chain torch's exporter writes for K^T) become sgemm_nt reading K as it is: no transposed copy,
    the scale applied to K element-wise."""
    from refcomp.graph.passes.dispatch_blas import dispatch_blas
    from refcomp.runtime.blas import register_blas

    if not register_blas():
        pytest.skip("numpy's OpenBLAS library was not found")
    b, s = SizeVar("b", "int64"), SizeVar("s", "int64")
    heads, dim = 3, 8
    lead = (b, heads) if split else (b * heads,)
    q = Var("q", tensor(lead + (s, dim)))
    k = Var("k", tensor((b, heads, s, dim)))
    mod = single_output([k, q], lambda bb, k, q: op.matmul(  # k first: it binds b
        q, exported_key_transpose(bb, k, heads, s, dim, scale, split)))
    dispatched = dead_code_elimination(dispatch_blas(mod))
    values = [x.value for block in dispatched["main"].body.blocks for x in block.bindings]
    assert not any(v.op_name == "permute_dims" for v in values)
    (gemm,) = [v for v in values if v.op_name == "call_dps_packed"]
    assert gemm.args[0].symbol == "refcomp.blas.sgemm_nt"
    a = rng.standard_normal((2, heads, seq, dim)).astype("float32")
    key = rng.standard_normal((2, heads, seq, dim)).astype("float32")
    expected = (a @ np.swapaxes(key, -1, -2)) * (1.0 if scale is None else np.float32(scale))
    if not split:
        a, expected = a.reshape(2 * heads, seq, dim), expected.reshape(2 * heads, seq, seq)
    ex = refcomp.graph.build(mod, target="c", blas=True)
    out = refcomp.runtime.VirtualMachine(ex)["main"](key, a)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_a_reshape_that_moves_the_last_axes_keeps_the_transposed_copy():
    """A reshape that changes the swapped operand's last two dims is no batch split: not folded."""
    from refcomp.graph.passes.dispatch_blas import dispatch_blas

    q, k = Var("q", tensor((2, 4, 6))), Var("k", tensor((2, 3, 8)))

    def body(bb, q, k):
        swapped = bb.emit(op.permute_dims(k, (0, 2, 1)))  # (2, 8, 3)
        return op.matmul(q, bb.emit(op.reshape(swapped, (2, 6, 4))))

    values = [x.value for block in dispatch_blas(single_output([q, k], body))["main"].body.blocks
              for x in block.bindings]
    assert values[-1].op_name == "call_dps_packed" and values[-1].args[0].symbol == "refcomp.blas.sgemm_nn"
    assert any(v.op_name == "permute_dims" for v in values)


@pytest.mark.parametrize("sections,axis", [(3, 1), ((2, 7), 1), ((0, 5), 1), (2, 0)])
def test_split_fields_become_slices_that_fuse_into_their_readers(sections, axis, rng):
    """split then per-field readers: each field a strided_slice of the input, folded into its
    reader's kernel (no split kernel), equal to numpy's split."""
    from refcomp.ast.graph import TupleGetItem
    from refcomp.graph.passes.split_to_slices import split_to_slices

    n = SizeVar("n", "int64")
    x = Var("x", tensor((4, 12) if axis == 0 else (n, 12)))

    def body(bb, x):
        parts = bb.emit(op.split(x, sections, axis=axis))
        count = sections if isinstance(sections, int) else len(sections) + 1
        fields = [bb.emit(TupleGetItem(parts, i)) for i in range(count)]
        outs = [bb.emit(op.multiply(f, const(np.float32(i + 1)))) for i, f in enumerate(fields)]
        return op.concat(outs, axis=axis)

    mod = single_output([x], body)
    sliced = split_to_slices(mod)
    ops = [b.value.op_name for block in sliced["main"].body.blocks for b in block.bindings
           if hasattr(b.value, "op_name")]
    assert "strided_slice" in ops
    assert not any(b.value.op_name == "split" for block in dead_code_elimination(sliced)["main"].body.blocks
                   for b in block.bindings if hasattr(b.value, "op_name"))
    assert all("split" not in name for name in kernels(fused_module(sliced)))
    a = rng.standard_normal((4, 12) if axis == 0 else (5, 12)).astype("float32")
    out, _ = vm_run(mod, a)
    pieces = np.split(a, sections if isinstance(sections, int) else list(sections), axis=axis)
    np.testing.assert_array_equal(out, np.concatenate([p * np.float32(i + 1) for i, p in enumerate(pieces)], axis=axis))


def test_a_split_along_a_symbolic_axis_stays():
    from refcomp.ast.graph import TupleGetItem
    from refcomp.graph.passes.split_to_slices import split_to_slices

    n = SizeVar("n", "int64")
    x = Var("x", tensor((n, 4)))
    mod = single_output([x], lambda bb, x: op.exp(bb.emit(TupleGetItem(bb.emit(op.split(x, 2, axis=0)), 1))))
    values = [b.value for block in split_to_slices(mod)["main"].body.blocks for b in block.bindings]
    assert [getattr(v, "op_name", None) for v in values] == ["split", None, "exp"]  # the field read stays


@pytest.mark.parametrize("mask", ["causal", "padding"])
@pytest.mark.parametrize("seq", [1, 7, 33])
def test_exported_attention_with_a_mask_matches_numpy(mask, seq, rng):
    """An attention block as torch exports it (Q and K scaled by d^-1/4, K^T through reshape /
    swap / reshape, an additive mask of 0 and float32's lowest value, softmax, NaN rows zeroed,
    times V): sgemm_nt reads K in place, the softmax kernel computes its exp once per element,
    and the result equals numpy's, fully masked rows included."""
    from refcomp.runtime.blas import register_blas

    if not register_blas():
        pytest.skip("numpy's OpenBLAS library was not found")
    b, s = SizeVar("b", "int64"), SizeVar("s", "int64")
    heads, dim = 2, 8
    scale = np.float32(dim ** -0.25)
    q, k, v = (Var(name, tensor((b, heads, s, dim))) for name in "qkv")
    m = Var("m", tensor((b, 1, s, s)))

    def body(bb, q, k, v, m):
        qs = bb.emit(op.multiply(q, const(scale)))
        kt = exported_key_transpose(bb, k, heads, s, dim, float(scale), True)
        scores = bb.emit(op.add(bb.emit(op.matmul(qs, kt)), m))
        p = bb.emit(op.softmax(scores, axis=-1))
        p = bb.emit(op.where(op.isnan(p), const(np.float32(0)), p))
        return op.matmul(p, v)

    mod = single_output([q, k, v, m], body)
    ex = refcomp.graph.build(mod, target="c", blas=True)
    assert not any("permute" in name for name in ex.kernels)
    (softmax,) = [kern for name, kern in ex.kernels.items() if "softmax" in name]
    lowest = np.finfo(np.float32).min
    if mask == "causal":
        allowed = np.broadcast_to(np.tril(np.ones((seq, seq), bool)), (2, 1, seq, seq))
    else:
        lengths = np.array([seq, max(seq - 3, 0)])  # the second batch entry padded (wholly when short)
        allowed = np.broadcast_to(np.arange(seq)[None, None, None, :] < lengths[:, None, None, None], (2, 1, seq, seq))
    additive = np.where(allowed, np.float32(0), lowest).astype(np.float32)
    qa, ka, va = (rng.standard_normal((2, heads, seq, dim)).astype(np.float32) for _ in range(3))
    out = refcomp.runtime.VirtualMachine(ex)["main"](qa, ka, va, additive)
    scores = (qa * scale) @ np.swapaxes(ka * scale, -1, -2) + additive
    with np.errstate(invalid="ignore"):
        e = np.exp(scores - scores.max(-1, keepdims=True))
        probs = e / e.sum(-1, keepdims=True)
    probs = np.where(np.isnan(probs), 0, probs)
    np.testing.assert_allclose(out, probs @ va, rtol=1e-4, atol=1e-5)
    assert softmax.source.count("rc_vexp_f32x16(") <= 3  # helper + sum partial + output (bound once)


# ----------------------------------------------------------------------------- constants and masks

def test_scalar_constants_of_a_fused_group_become_immediates(rng):
    n = SizeVar("n", "int64")
    x = Var("x", tensor((n, 8)))
    table = const(rng.standard_normal((8,)).astype("float32"))  # not a scalar: stays a parameter
    mod = single_output([x], lambda bb, x: op.add(op.multiply(bb.emit(op.exp(x)), const(np.float32(2.5))), table))
    fused = fused_module(mod)
    (call,) = calls(fused)
    (func,) = kernels(fused).values()
    assert len(func.buffers) == 3 and len(call.args) == 3  # x, table, out: the 2.5 is in the code
    assert any(isinstance(e, refcomp.ast.expr.FloatImm) and e.value == 2.5
               for e in collect(func.body, refcomp.ast.expr.FloatImm))
    a = rng.standard_normal((6, 8)).astype("float32")
    out, _ = vm_run(mod, a)
    np.testing.assert_allclose(out, np.exp(a) * np.float32(2.5) + table.data.array, rtol=1e-5, atol=1e-6)


def test_a_compare_of_a_constant_select_folds_to_its_condition():
    n = SizeVar("n", "int64")
    (func,) = kernels(fused_module(masked_scores(n))).values()

    def compares_of_selects(f):
        return [c for c in collect(f.body, refcomp.ast.expr.CompareOp) if isinstance(c.a, refcomp.ast.expr.Select)]

    assert compares_of_selects(func)  # tril(ones) > 0.5 reads select(i >= j, 1, 0) > 0.5
    assert not compares_of_selects(simplify_block_indices(func))
