"""Relax programs written the way TVMScript users write them: parsed, built, run, compared with numpy.

Bindings are left unannotated (struct info is inferred by the graph normalizer), shapes carry
arithmetic, size vars are declared with `T.int64()` or quoted in signatures, and the module mixes
graph functions with a `@T.prim_func` called through `R.call_tir`.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import refcomp
from refcomp.ast import structural_equal
from refcomp.ast.parser import from_source
from refcomp.graph import build
from refcomp.graph.passes import normalize
from refcomp.runtime.vm import VirtualMachine

HEADER = "from tvm.script import ir as I, relax as R, tir as T\n"

MLP = HEADER + '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 784), "float32"), w1: R.Tensor((784, 128), "float32"),
             b1: R.Tensor((128,), "float32"), w2: R.Tensor((128, 10), "float32")):
        n = T.int64()
        with R.dataflow():
            h = R.matmul(x, w1)
            h1 = R.add(h, b1)
            r = R.nn.relu(h1)
            y = R.matmul(r, w2)
            z = R.nn.softmax(y, axis=-1)
            R.output(z)
        return z
'''

CALL_TIR = HEADER + '''
@I.ir_module
class Module:
    @T.prim_func
    def add_one(a: T.handle, b: T.handle):
        n = T.int64()
        A = T.match_buffer(a, (n, 4), "float32")
        B = T.match_buffer(b, (n, 4), "float32")
        for i, j in T.grid(n, 4):
            with T.block("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = A[vi, vj] + T.float32(1)

    @R.function
    def main(x: R.Tensor(("n", 4), "float32")) -> R.Tensor(("n", 4), "float32"):
        n = T.int64()
        cls = Module
        with R.dataflow():
            y = R.call_tir(cls.add_one, (x,), out_sinfo=R.Tensor((n, 4), "float32"))
            z = R.multiply(y, y)
            R.output(z)
        return z
'''

RESHAPE = HEADER + '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", "k"), "float32"), g: R.Tensor(("n",), "float32"),
             b: R.Tensor(("n",), "float32")):
        n = T.int64()
        k = T.int64()
        with R.dataflow():
            flat = R.reshape(x, (n * k,))
            back = R.reshape(flat, R.shape([k, n]))
            t = R.permute_dims(back, axes=[1, 0])
            e = R.add(t, x)
            ln = R.nn.layer_norm(R.permute_dims(e), g, b, axes=[-1], epsilon=1e-5)
            s = R.sum(ln, axis=[0])
            R.output(flat, s)
        return (flat, s)
'''

MATCH_CAST = HEADER + '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(ndim=2, dtype="float32"), w: R.Tensor((8, 3), "float32")):
        m = T.int64()
        y = R.match_cast(x, R.Tensor((m, 8), "float32"))
        with R.dataflow():
            h = R.matmul(y, w)
            parts = R.split(h, 3, axis=1)
            a = parts[0]
            c = parts[2]
            out = R.subtract(a, c)
            sh = R.shape([m, 1])
            R.output(out, sh)
        p = R.prim_value(m * 2)
        return (out, sh, p)
'''

SYMBOLIC_RESHAPE = HEADER + '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", "k"), "float32")):
        n = T.int64()
        k = T.int64()
        with R.dataflow():
            r = R.reshape(x, (-1, 4))
            e = R.exp(r)
            R.output(e)
        return e
'''


def run(text, *args):
    vm = VirtualMachine(build(from_source(text), "c"))
    return vm["main"](*args)


def randn(rng, *shape):
    return rng.standard_normal(shape).astype("float32")


def softmax(v):
    e = np.exp(v - v.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def layer_norm(v, g, b, eps=1e-5):
    mean = v.mean(axis=-1, keepdims=True)
    var = v.var(axis=-1, keepdims=True)
    return (v - mean) / np.sqrt(var + eps) * g + b


@pytest.mark.parametrize("seed", [0, 1])
def test_mlp_with_unannotated_bindings_runs_at_several_batch_sizes(seed):
    rng = np.random.default_rng(seed)
    w1, b1, w2 = randn(rng, 784, 128) * 0.05, randn(rng, 128), randn(rng, 128, 10) * 0.1
    vm = VirtualMachine(build(from_source(MLP), "c"))
    for n in (1, 3, 8):
        x = randn(rng, n, 784)
        got = vm["main"](x, w1, b1, w2)
        want = softmax(np.maximum(x @ w1 + b1, 0) @ w2)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)


def test_mlp_struct_info_is_inferred_with_the_signature_size_var():
    main = normalize(from_source(MLP))["main"]
    (block,) = main.body.blocks
    infos = {b.var.name: str(b.var.struct_info) for b in block.bindings}
    assert infos["h"] == 'R.Tensor((n, 128), "float32")'
    assert infos["z"] == 'R.Tensor((n, 10), "float32")'
    assert str(main.ret_struct_info) == 'R.Tensor((n, 10), "float32")'


@pytest.mark.parametrize("seed", [0, 1])
def test_call_tir_to_a_prim_func_with_int64_sizes(seed):
    rng = np.random.default_rng(seed)
    for n in (1, 5, 12):
        x = randn(rng, n, 4)
        np.testing.assert_allclose(np.asarray(run(CALL_TIR, x)), (x + 1) ** 2, rtol=1e-6)


@pytest.mark.parametrize("seed", [0, 1])
def test_reshape_with_arithmetic_permute_and_layer_norm(seed):
    rng = np.random.default_rng(seed)
    vm = VirtualMachine(build(from_source(RESHAPE), "c"))
    for n, k in ((2, 3), (4, 4), (5, 1)):
        x, g, b = randn(rng, n, k), randn(rng, n), randn(rng, n)
        flat, s = vm["main"](x, g, b)
        np.testing.assert_allclose(np.asarray(flat), x.reshape(-1), rtol=1e-6)
        e = x.reshape(k, n).T + x
        want = layer_norm(e.T, g, b).sum(axis=0)
        np.testing.assert_allclose(np.asarray(s), want, rtol=1e-4, atol=1e-4)


def test_reshape_arithmetic_shape_is_inferred_symbolically():
    main = normalize(from_source(RESHAPE))["main"]
    infos = {b.var.name: str(b.var.struct_info) for blk in main.body.blocks for b in blk.bindings}
    assert infos["flat"] == 'R.Tensor((n * k,), "float32")'
    assert infos["back"] == 'R.Tensor((k, n), "float32")'
    assert infos["t"] == 'R.Tensor((n, k), "float32")'


@pytest.mark.parametrize("seed", [0, 1])
def test_match_cast_tuples_shape_and_prim_values(seed):
    rng = np.random.default_rng(seed)
    w = randn(rng, 8, 3)
    vm = VirtualMachine(build(from_source(MATCH_CAST), "c"))
    for m in (1, 6):
        x = randn(rng, m, 8)
        out, sh, p = vm["main"](x, w)
        h = x @ w
        np.testing.assert_allclose(np.asarray(out), h[:, 0:1] - h[:, 2:3], rtol=1e-5, atol=1e-6)
        assert tuple(int(v) for v in sh) == (m, 1)
        assert int(p) == 2 * m
    with pytest.raises(refcomp.ArgumentError):
        vm["main"](randn(rng, 3, 7), w)


def test_an_unprovable_relation_becomes_a_run_time_check():
    rng = np.random.default_rng(0)
    mod = normalize(from_source(SYMBOLIC_RESHAPE))
    assert mod["main"].attrs.get("runtime_checks")
    vm = VirtualMachine(build(from_source(SYMBOLIC_RESHAPE), "c"))
    x = randn(rng, 2, 6)
    np.testing.assert_allclose(np.asarray(vm["main"](x)), np.exp(x.reshape(3, 4)), rtol=1e-6)
    with pytest.raises(refcomp.ArgumentError, match="runtime shape check failed"):
        vm["main"](randn(rng, 3, 3))


def test_an_annotation_that_may_differ_is_checked_at_run_time():
    text = HEADER + '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n",), "float32"), y: R.Tensor(("m",), "float32")):
        n = T.int64()
        m = T.int64()
        with R.dataflow():
            e: R.Tensor((m,), "float32") = R.exp(x)
            s = R.add(e, y)
            R.output(s)
        return s
'''
    rng = np.random.default_rng(0)
    vm = VirtualMachine(build(from_source(text), "c"))
    x, y = randn(rng, 5), randn(rng, 5)
    np.testing.assert_allclose(np.asarray(vm["main"](x, y)), np.exp(x) + y, rtol=1e-6)
    with pytest.raises(refcomp.ArgumentError, match="runtime shape check failed"):
        vm["main"](x, randn(rng, 4))


def test_a_provable_conflict_is_a_shape_error_at_build_time():
    text = HEADER + '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n",), "float32")):
        n = T.int64()
        with R.dataflow():
            e: R.Tensor((n + 1,), "float32") = R.exp(x)
            R.output(e)
        return e
'''
    with pytest.raises(refcomp.ShapeError, match="never holds") as info:
        build(from_source(text), "c")
    assert "e: R.Tensor((n + 1,)" in str(info.value)
    static = MLP.replace("w2: R.Tensor((128, 10)", "w2: R.Tensor((127, 10)")
    with pytest.raises(refcomp.ShapeError):
        build(from_source(static), "c")


def test_a_match_cast_that_can_never_match_is_a_build_error():
    text = HEADER + '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32")):
        m = T.int64()
        y = R.match_cast(x, R.Tensor((m, 5), "float32"))
        return y
'''
    with pytest.raises(refcomp.ShapeError, match="never matches"):
        build(from_source(text), "c")


@pytest.mark.parametrize("text", [MLP, CALL_TIR, RESHAPE, MATCH_CAST, SYMBOLIC_RESHAPE],
                         ids=["mlp", "call_tir", "reshape", "match_cast", "symbolic_reshape"])
def test_programs_round_trip_before_and_after_normalization(text):
    for mod in (from_source(text), normalize(from_source(text))):
        printed = mod.script()
        back = from_source(printed)
        assert back.script() == printed
        assert structural_equal(back["main"], mod["main"])


LEAKY = HEADER + '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", "k"), "float32")):
        n = T.int64()
        k = T.int64()
        with R.dataflow():
            d = R.permute_dims(x, [1, 0])
            e = R.nn.leaky_relu(R.reshape(d, (k * n,)), alpha=0.125)
            f = R.reshape(e, (k, -1))
            g = R.sum(f, 1)
            R.output(g)
        return g
'''

_LEAKY_VM = []


@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 6), k=st.integers(1, 6), seed=st.integers(0, 2**31 - 1))
def test_positional_scalars_and_nested_calls_at_random_sizes(n, k, seed):
    if not _LEAKY_VM:
        _LEAKY_VM.append(VirtualMachine(build(from_source(LEAKY), "c")))
    x = randn(np.random.default_rng(seed), n, k)
    t = x.T
    want = np.where(t > 0, t, 0.125 * t).sum(axis=1)
    np.testing.assert_allclose(np.asarray(_LEAKY_VM[0]["main"](x)), want, rtol=1e-5, atol=1e-6)


BUFFER_PARAMS = HEADER + '''
@I.ir_module
class Module:
    @T.prim_func(private=True)
    def scale(A: T.Buffer((T.int64(8), T.int64(4)), "float32"), B: T.Buffer((T.int64(8), T.int64(4)), "float32")):
        T.func_attr({"tir.noalias": True})
        for i, j in T.grid(T.int64(8), T.int64(4)):
            with T.block("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                T.reads(A[vi, vj])
                T.writes(B[vi, vj])
                B[vi, vj] = A[vi, vj] * T.float32(2)

    @R.function
    def main(x: R.Tensor((8, 4), dtype="float32")) -> R.Tensor((8, 4), dtype="float32"):
        cls = Module
        with R.dataflow():
            y = R.call_tir(cls.scale, (x,), out_sinfo=R.Tensor((8, 4), dtype="float32"))
            gv = R.add(y, R.const(1.0, "float32"))
            R.output(gv)
        return gv
'''

HELPER = HEADER + '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), dtype="float32")):
        cls = Module
        y = cls.swish(x)
        both = R.concat((R.exp(x), y), axis=0)
        return R.sum(both, axis=0)

    @R.function
    def swish(a: R.Tensor(("m", 4), dtype="float32")):
        return R.multiply(a, R.sigmoid(a))
'''


def test_prim_func_with_buffer_params_and_keyword_dtypes():
    rng = np.random.default_rng(0)
    x = randn(rng, 8, 4)
    np.testing.assert_allclose(np.asarray(run(BUFFER_PARAMS, x)), x * 2 + 1, rtol=1e-6)
    main = normalize(from_source(BUFFER_PARAMS))["main"]
    assert str(main.params[0].struct_info) == 'R.Tensor((8, 4), "float32")'


def test_calls_of_graph_functions_nested_calls_and_returned_calls():
    rng = np.random.default_rng(1)
    vm = VirtualMachine(build(from_source(HELPER), "c"))
    for n in (1, 4):
        x = randn(rng, n, 4)
        swish = x / (1 + np.exp(-x))
        want = np.concatenate([np.exp(x), swish]).sum(axis=0)
        np.testing.assert_allclose(np.asarray(vm["main"](x)), want, rtol=1e-5, atol=1e-6)
    mod = normalize(from_source(HELPER))
    assert str(mod["main"].ret_struct_info) == 'R.Tensor((4,), "float32")'
    assert str(mod["swish"].ret_struct_info) == 'R.Tensor((m, 4), "float32")'


BRANCH = HEADER + '''
@I.ir_module
class Module:
    @R.function
    def main(c: R.Tensor((), "bool"), x: R.Tensor(("n", 3), "float32")):
        if c:
            a = R.exp(x)
            y = R.add(a, x)
        else:
            y = R.multiply(x, x)
        return R.sum(y, axis=1)
'''


def test_if_else_branches_join_their_struct_info():
    rng = np.random.default_rng(2)
    vm = VirtualMachine(build(from_source(BRANCH), "c"))
    x = randn(rng, 4, 3)
    np.testing.assert_allclose(np.asarray(vm["main"](np.array(True), x)), (np.exp(x) + x).sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(vm["main"](np.array(False), x)), (x * x).sum(axis=1), rtol=1e-5)
    mod = normalize(from_source(BRANCH))
    assert str(mod["main"].ret_struct_info) == 'R.Tensor((n,), "float32")'
    printed = mod.script()
    assert structural_equal(normalize(from_source(printed))["main"], mod["main"])
