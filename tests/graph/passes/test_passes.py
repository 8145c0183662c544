"""Each graph pass alone: what it rewrites, what it keeps, and that numbers do not change."""
import numpy as np
import pytest

import refcomp
from refcomp.ast import SizeVar
from refcomp.ast.graph import Call, Constant, Function, VarBinding
from refcomp.ast.function import PrimFunc
from refcomp.graph import BlockBuilder, Var, op, tensor
from refcomp.graph.passes import (
    arena_expression, arena_size, canonicalize_bindings, dead_code_elimination, fold_constant, legalize_ops,
    normalize, plan_memory,
)
from refcomp.graph.passes.fuse_ops import fuse_ops
from refcomp.graph.passes.fuse_tir import fuse_tir
from refcomp.graph.passes.op_pattern import analyze_pattern


def bindings(mod, name="main"):
    return [b for block in mod[name].body.blocks for b in block.bindings]


def mlp_module(upper=None):
    n = SizeVar("n", "int64")
    x = Var("x", tensor((n, 8)))
    w = Var("w", tensor((16, 8)))
    b = Var("b", tensor((16,)))
    bb = BlockBuilder()
    attrs = {"tir_var_upper_bound": {"n": upper}} if upper else None
    with bb.function("main", [x, w, b], attrs=attrs):
        with bb.dataflow():
            h = bb.emit(op.dense(x, w))
            h = bb.emit(op.add(h, b))
            h = bb.emit(op.relu(h))
            h = bb.emit(op.exp(h))
            s = bb.emit(op.sum(h, axis=1, keepdims=True))
            out = bb.emit_output(op.divide(h, s))
        bb.emit_func_output(out)
    return bb.get()


def reference(x, w, b):
    h = np.exp(np.maximum(x @ w.T + b, 0))
    return h / h.sum(axis=1, keepdims=True)


def run(mod, *arrays, **kwargs):
    ex = refcomp.graph.build(mod, target="c", **kwargs)
    return refcomp.runtime.VirtualMachine(ex)["main"](*arrays), ex


def random_inputs(rng, n=5):
    return [rng.standard_normal(s).astype("float32") for s in [(n, 8), (16, 8), (16,)]]


def test_legalize_ops_turns_every_op_into_call_tir_and_keeps_the_input():
    mod = mlp_module()
    before = bindings(mod)
    legal = legalize_ops(mod)
    assert all(b.value.op_name == "call_tir" for b in bindings(legal))
    assert [b.value.op_name for b in bindings(mod)] == [b.value.op_name for b in before]  # pure
    kernels = [f for _, f in legal if isinstance(f, PrimFunc)]
    assert len(kernels) == 6
    for b in bindings(legal):
        assert b.value.sinfo_args[0] is not None


def test_fold_constant_evaluates_constant_subgraphs(rng):
    x = Var("x", tensor((3,)))
    c = rng.standard_normal(3).astype("float32")
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            k = bb.emit(op.exp(Constant(c)))
            k2 = bb.emit(op.multiply(k, Constant(np.float32(2.0))))
            out = bb.emit_output(op.add(x, k2))
        bb.emit_func_output(out)
    folded = fold_constant(bb.get())
    final = bindings(folded)[-1].value
    assert isinstance(final.args[1], Constant)
    np.testing.assert_allclose(final.args[1].array, np.exp(c) * 2, rtol=1e-6)
    legal_folded = fold_constant(legalize_ops(bb.get()))  # call_tir on constants runs in the interpreter
    assert isinstance(bindings(legal_folded)[-1].value.args[2], Constant)


def test_dead_code_elimination_drops_unused_bindings_and_functions():
    x = Var("x", tensor((3,)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            bb.emit(op.exp(x))  # unused
            out = bb.emit_output(op.negative(x))
        bb.emit_func_output(out)
    mod = legalize_ops(bb.get())
    clean = dead_code_elimination(mod)
    assert len(bindings(clean)) == 1
    assert sorted(n for n, f in clean if isinstance(f, PrimFunc)) == ["negative"]


def test_canonicalize_bindings_removes_aliases():
    x = Var("x", tensor((3,)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(op.exp(x))
            b = bb.emit(a)
            out = bb.emit_output(b)
        bb.emit_func_output(out)
    mod = bb.get()
    assert len(bindings(mod)) == 3
    canon = canonicalize_bindings(mod)
    (only,) = bindings(canon)
    assert only.value.op_name == "exp" and only.var is canon["main"].body.body


def test_normalize_rechecks_annotations():
    x = Var("x", tensor((3,)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        y = bb.emit(op.exp(x))
        bb.emit_func_output(y)
    mod = bb.get()
    assert normalize(mod)["main"] is not None
    wrong = Var("y", tensor((3,), "int32"))
    bad = mod["main"].with_(body=mod["main"].body.with_(blocks=(
        type(mod["main"].body.blocks[0])((VarBinding(wrong, bindings(mod)[0].value),)),)))
    with pytest.raises(refcomp.IRError, match="annotated"):
        normalize(mod.with_function("main", bad))


def test_op_patterns_are_read_off_the_kernels():
    legal = legalize_ops(mlp_module())
    names = {b.var.name: b.value.args[0].name for b in bindings(legal)}
    patterns = [analyze_pattern(legal[k]) for k in names.values()]
    assert patterns == ["out_fusable", "broadcast", "elementwise", "elementwise", "reduction", "broadcast"]


def test_fuse_ops_and_fuse_tir_reduce_kernels_and_keep_values(rng):
    mod = mlp_module()
    fused = fuse_tir(fuse_ops(dead_code_elimination(legalize_ops(mod))))
    calls = [b.value for b in bindings(fused)]
    assert all(c.op_name == "call_tir" for c in calls)
    assert len(calls) < 6
    assert not any(isinstance(f, Function) and f.attrs.get("primitive") for _, f in fused)
    inputs = random_inputs(rng)
    unfused, _ = run(mod, *inputs, fuse=False, blas=False)
    out, ex = run(mod, *inputs, blas=False)
    np.testing.assert_allclose(out, reference(*inputs), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out, unfused, rtol=1e-5, atol=1e-7)
    assert ex.stats["kernel_calls_static"] == len(calls)


def test_fuse_tir_shares_one_kernel_between_groups_equal_but_for_their_names(rng):
    # the same fused group in two functions (two model layers, their weights other constants):
    # one merged kernel serves both calls, and each call still gets its own weight
    n = SizeVar("n", "int64")
    weights = [rng.standard_normal(8).astype(np.float32) for _ in range(2)]
    bb = BlockBuilder()
    for layer, w in enumerate(weights):
        x = Var("x", tensor((n, 8)))
        with bb.function(f"layer{layer}", [x]):
            with bb.dataflow():
                out = bb.emit_output(op.relu(op.add(op.multiply(x, Constant(w)), x)))
            bb.emit_func_output(out)
    mod = bb.get()
    fused = fuse_tir(fuse_ops(dead_code_elimination(legalize_ops(mod))))
    calls = [b.value for name in ("layer0", "layer1") for b in bindings(fused, name) if isinstance(b.value, Call)]
    assert len(calls) == 2 and calls[0].args[0].name == calls[1].args[0].name
    data = rng.standard_normal((5, 8)).astype(np.float32)
    ex = refcomp.graph.build(mod, target="c", blas=False)
    assert ex.stats["kernels"] == 1
    vm = refcomp.runtime.VirtualMachine(ex)
    for layer, w in enumerate(weights):
        np.testing.assert_allclose(vm[f"layer{layer}"](data), np.maximum(data * w + data, 0), rtol=1e-6, atol=1e-6)


def test_plan_memory_reuses_storage_within_upper_bounds(rng):
    planned = plan_memory(canonicalize_bindings(legalize_ops(mlp_module(upper=32))))
    func = planned["main"]
    plan = func.attrs["memory_plan"]
    assert len(plan) == 5  # every intermediate; the result is never planned
    assert len(set(plan.values())) < len(plan)  # tokens are reused
    assert arena_size(func) == sum(func.attrs["storage_limits"])
    total = arena_expression(func)
    from refcomp.shape import evaluate

    n = next(v for v in refcomp.ast.free_vars(total))
    assert evaluate(total, {n: 32}) == arena_size(func)
    small = random_inputs(rng, 7)
    out, ex = run(mlp_module(upper=32), *small)
    assert ex.arena_bytes() > 0
    np.testing.assert_allclose(out, reference(*small), rtol=1e-4, atol=1e-6)
    inputs = random_inputs(rng, 32)
    vm = refcomp.runtime.VirtualMachine(ex)
    np.testing.assert_allclose(vm["main"](*inputs), reference(*inputs), rtol=1e-4, atol=1e-6)
    with pytest.raises(refcomp.RuntimeFailure, match="upper bound"):
        vm["main"](*random_inputs(rng, 33))


def test_without_upper_bounds_nothing_is_planned():
    planned = plan_memory(legalize_ops(mlp_module()))
    assert "memory_plan" not in planned["main"].attrs


def test_default_schedule_keeps_results(rng):
    mod = mlp_module()
    inputs = random_inputs(rng, 9)
    plain, _ = run(mod, *inputs, schedule=False)
    scheduled, ex = run(mod, *inputs)
    np.testing.assert_allclose(scheduled, plain, rtol=1e-5, atol=1e-7)
    kinds = {loop.kind for _, f in ex.module if isinstance(f, PrimFunc)
             for loop in refcomp.ast.collect(f.body, refcomp.ast.For)}
    assert "parallel" in kinds and "vectorized" in kinds


_ = Call


def _mvn_module():
    """ONNX's MeanVarianceNormalization as exported: d = x - mean(x); d / (sqrt(mean(d * d)) + eps),
    d read by two kernels, the two means one shared kernel."""
    x = Var("x", tensor((4, 6)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            d = bb.emit(op.subtract(x, op.mean(x, axis=1, keepdims=True)))
            var = bb.emit(op.mean(op.multiply(d, d), axis=1, keepdims=True))
            out = bb.emit_output(op.divide(d, op.add(op.sqrt(var), Constant(np.float32(1e-9)))))
        bb.emit_func_output(out)
    return bb.get()


def _mvn(x):
    d = x - x.mean(axis=1, keepdims=True)
    return d / (np.sqrt((d * d).mean(axis=1, keepdims=True)) + 1e-9)


def test_a_value_read_by_several_kernels_of_one_group_fuses_and_keeps_its_values(rng):
    """d is read by the multiply and the divide: once the variance's chain has become one group
    ending in the divide, d's group (mean, subtract) joins it on the grouping's next round, and
    the one kernel (the shared mean kernel called twice) computes what numpy does."""
    fused = fuse_ops(dead_code_elimination(legalize_ops(normalize(_mvn_module()))))
    groups = [f for _, f in fused if isinstance(f, Function) and f.attrs.get("primitive")]
    assert len(groups) == 1 and len(groups[0].body.blocks[0].bindings) == 7
    x = rng.standard_normal((4, 6)).astype(np.float32)
    out, _ = run(_mvn_module(), x, blas=False)
    np.testing.assert_allclose(out, _mvn(x), rtol=1e-4, atol=1e-5)


def test_fuse_tir_gives_each_call_of_a_kernel_its_own_temporaries(rng):
    """A group calling the mean kernel twice (merged by hand: fuse_ops makes no such group):
    each call's accumulator is a buffer of its own, the merged kernel computes both means."""
    from refcomp.graph.passes.fuse_ops import _make_group

    legal = dead_code_elimination(legalize_ops(normalize(_mvn_module())))
    steps = bindings(legal)
    assert steps[0].value.args[0].name == steps[3].value.args[0].name  # the shared mean kernel
    new_funcs = {}
    group = _make_group(steps, [0, 1, 2, 3], "reduction", new_funcs, "main")
    (name, fn), = new_funcs.items()
    module = legal.with_function(name, fn)
    merged, _ = __import__("refcomp.graph.passes.fuse_tir", fromlist=["merge_group"]).merge_group(fn, module, name)
    temps = [b for b in merged.body.block.alloc_buffers]
    assert len({id(b) for b in temps}) == len(temps) and len({b.name for b in temps}) == len(temps)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    out = np.zeros((4, 1), np.float32)
    refcomp.build(merged, target="interpret")(x, out)
    d = x - x.mean(axis=1, keepdims=True)
    np.testing.assert_allclose(out, (d * d).mean(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)
    assert group.var is steps[3].var
