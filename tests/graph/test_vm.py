"""The VM: dynamic shapes served by one executable, argument errors, externs (Python and BLAS), tuples."""
import numpy as np
import pytest

import refcomp
from refcomp.ast import SizeVar
from refcomp.ast.graph import TupleGetItem
from refcomp.graph import BlockBuilder, Var, op, tensor
from refcomp.runtime.blas import openblas_path
from refcomp.runtime.vm import register_extern


def sv(name):
    return SizeVar(name, "int64")


def attention_like():
    b, s = sv("batch"), sv("seq")
    x = Var("x", tensor((b, s, 8)))
    w = Var("w", tensor((8, 8)))
    bb = BlockBuilder()
    with bb.function("main", [x, w], attrs={"tir_var_upper_bound": {"batch": 4, "seq": 16}}):
        with bb.dataflow():
            q = bb.emit(op.matmul(x, w))
            kt = bb.emit(op.permute_dims(q, (0, 2, 1)))
            scores = bb.emit(op.matmul(q, kt))
            p = bb.emit(op.softmax(op.multiply(scores, refcomp.graph.const(np.float32(0.125)))))
            out = bb.emit_output(op.matmul(p, q))
        bb.emit_func_output(out)
    return bb.get()


def attention_ref(x, w):
    q = x @ w
    s = q @ q.transpose(0, 2, 1) * np.float32(0.125)
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ q


@pytest.mark.parametrize("blas", [False, True])
def test_one_executable_serves_every_batch_and_sequence_length(rng, blas):
    if blas and openblas_path() is None:
        pytest.skip("numpy's OpenBLAS is not available")
    ex = refcomp.graph.build(attention_like(), target="c", blas=blas)
    vm = refcomp.runtime.VirtualMachine(ex)
    w = rng.standard_normal((8, 8)).astype("float32")
    for batch, seq in [(1, 1), (2, 5), (4, 16), (3, 7)]:
        x = rng.standard_normal((batch, seq, 8)).astype("float32")
        np.testing.assert_allclose(vm["main"](x, w), attention_ref(x, w), rtol=1e-4, atol=1e-5)
    assert ex.arena_bytes() > 0
    kinds = {type(i).__name__ for i in ex.functions["main"].code}
    assert ("CallPacked" in kinds) == blas


def test_argument_errors_name_the_parameter_and_dims(rng):
    vm = refcomp.runtime.VirtualMachine(refcomp.graph.build(attention_like(), target="c"))
    w = rng.standard_normal((8, 8)).astype("float32")
    with pytest.raises(refcomp.ArgumentError, match=r"argument x: dim 2 is 7 but must be 8 \(shape"):
        vm["main"](np.ones((1, 2, 7), "float32"), w)      # a constant dim: no "8 = 8"
    with pytest.raises(refcomp.ArgumentError, match="dtype float32"):
        vm["main"](np.ones((1, 2, 8), "float64"), w)
    with pytest.raises(refcomp.ArgumentError, match="3-d"):
        vm["main"](np.ones((2, 8), "float32"), w)
    with pytest.raises(refcomp.ArgumentError, match="takes 2 arguments"):
        vm["main"](w)


def test_same_size_var_in_two_params_must_agree():
    n = sv("n")
    x, y = Var("x", tensor((n,))), Var("y", tensor((n,)))
    bb = BlockBuilder()
    with bb.function("main", [x, y]):
        with bb.dataflow():
            out = bb.emit_output(op.add(x, y))
        bb.emit_func_output(out)
    vm = refcomp.runtime.VirtualMachine(refcomp.graph.build(bb.get(), target="c"))
    with pytest.raises(refcomp.ArgumentError, match="must be n = 3"):
        vm["main"](np.ones(3, "float32"), np.ones(4, "float32"))


def test_call_dps_packed_python_callable_and_tuple_results(rng):
    calls = []

    def twice_and_sum(a, out0, out1):
        calls.append(a.shape)
        out0[...] = 2 * a
        out1[...] = a.sum(axis=1)

    register_extern("test.twice_and_sum", twice_and_sum)
    n = sv("n")
    x = Var("x", tensor((n, 3)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            pair = bb.emit(op.call_dps_packed("test.twice_and_sum", (x,), [tensor((n, 3)), tensor((n,))]))
            first = bb.emit(TupleGetItem(pair, 0))
            second = bb.emit(TupleGetItem(pair, 1))
            y = bb.emit_output(op.add(first, op.expand_dims(second, 1)))
        bb.emit_func_output(y)
    vm = refcomp.runtime.VirtualMachine(refcomp.graph.build(bb.get(), target="c"))
    a = rng.standard_normal((4, 3)).astype("float32")
    np.testing.assert_allclose(vm["main"](a), 2 * a + a.sum(1, keepdims=True), rtol=1e-6)
    assert calls == [(4, 3)]


def test_missing_extern_is_a_clear_error():
    x = Var("x", tensor((2,)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        y = bb.emit(op.call_dps_packed("test.nowhere", (x,), tensor((2,))))
        bb.emit_func_output(y)
    vm = refcomp.runtime.VirtualMachine(refcomp.graph.build(bb.get(), target="c"))
    with pytest.raises(refcomp.RuntimeFailure, match="test.nowhere"):
        vm["main"](np.ones(2, "float32"))


def test_blas_sgemm_from_a_shared_library_matches_numpy(rng):
    if openblas_path() is None:
        pytest.skip("numpy's OpenBLAS is not available")
    m, k = sv("m"), sv("k")
    x, w, b = Var("x", tensor((2, m, k))), Var("w", tensor((5, k))), Var("b", tensor((5,)))
    bb = BlockBuilder()
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            out = bb.emit_output(op.relu(op.linear(x, w, b)))
        bb.emit_func_output(out)
    ex = refcomp.graph.build(bb.get(), target="c")
    assert any(type(i).__name__ == "CallPacked" for i in ex.functions["main"].code)
    vm = refcomp.runtime.VirtualMachine(ex)
    for mm, kk in [(3, 4), (1, 9), (6, 1)]:
        xa = rng.standard_normal((2, mm, kk)).astype("float32")
        wa = rng.standard_normal((5, kk)).astype("float32")
        ba = rng.standard_normal(5).astype("float32")
        np.testing.assert_allclose(vm["main"](xa, wa, ba), np.maximum(xa @ wa.T + ba, 0), rtol=1e-5, atol=1e-5)


def exp_or_negative():
    """A module whose main(c, x) is `exp(x) if c else -x` (an R.If with one binding per branch),
    and the If's result var."""
    from refcomp.ast.graph import BindingBlock, SeqExpr, VarBinding
    from refcomp.graph.block_builder import make_if

    n = sv("n")
    x, c = Var("x", tensor((n,))), Var("c", tensor((), "bool"))
    bb = BlockBuilder()
    with bb.function("main", [c, x]):
        branches = []
        for build in (op.exp, op.negative):
            value = bb.normalize(build(x))
            var = Var("r", value.struct_info)
            branches.append(SeqExpr((BindingBlock((VarBinding(var, value),)),), var))
        y = bb.emit(make_if(None, c, branches[0], branches[1], bb.defined_vars))
        bb.emit_func_output(y)
    return bb.get(), y


def test_if_runs_only_the_taken_branch(rng):
    mod, y = exp_or_negative()
    assert str(y.struct_info) == 'R.Tensor((n,), "float32")'
    vm = refcomp.runtime.VirtualMachine(refcomp.graph.build(mod, target="c"))
    a = rng.standard_normal(6).astype("float32")
    np.testing.assert_allclose(vm["main"](np.array(True), a), np.exp(a), rtol=1e-6)
    np.testing.assert_array_equal(vm["main"](np.array(False), a), -a)
    assert vm.kernel_calls == 2
