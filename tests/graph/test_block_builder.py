"""BlockBuilder: normal form, struct-info inference with symbolic shapes, errors, runtime checks, scopes."""
import numpy as np
import pytest

import refcomp
from refcomp.ast import SizeVar
from refcomp.ast.graph import DataflowBlock, DataflowVar, MatchCast
from refcomp.ast.graph_struct_info import ShapeStructInfo
from refcomp.errors import IRError, ShapeError
from refcomp.graph import BlockBuilder, TensorStructInfo, Var, op, tensor
from refcomp.graph.passes import lower_to_vm


def sv(name):
    return SizeVar(name, "int64")


def test_nested_calls_are_bound_first_and_infos_inferred():
    n = sv("n")
    x = Var("x", tensor((n, 4)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(op.exp(op.add(x, x)))
            out = bb.emit_output(op.sum(y, axis=1))
        bb.emit_func_output(out)
    func = bb.get()["main"]
    (block,) = func.body.blocks
    assert isinstance(block, DataflowBlock) and len(block.bindings) == 3
    assert isinstance(block.bindings[0].var, DataflowVar)
    assert block.bindings[0].value.op_name == "add"
    assert str(out.struct_info) == 'R.Tensor((n,), "float32")'
    assert str(func.ret_struct_info) == 'R.Tensor((n,), "float32")'


def test_provable_conflict_is_a_shape_error_with_counterexample():
    n, k, m = sv("n"), sv("k"), sv("m")
    a, b = Var("a", tensor((n, k))), Var("b", tensor((m, n)))
    bb = BlockBuilder()
    with pytest.raises(ShapeError) as info:
        with bb.function("f", [a, b]):
            bb.emit(op.matmul(a, b))
    err = info.value
    assert "reduction lengths" in str(err) and "k == m" in str(err)
    assert err.counterexample is not None and err.counterexample["k"] != err.counterexample["m"]


def test_static_conflict_and_bad_dtypes():
    a, b = Var("a", tensor((3, 4))), Var("b", tensor((5, 2)))
    bb = BlockBuilder()
    with pytest.raises(ShapeError, match="4 == 5"):
        with bb.function("f", [a, b]):
            bb.emit(op.matmul(a, b))
    bb = BlockBuilder()
    c = Var("c", tensor((3, 4), "int32"))
    with pytest.raises(IRError, match="dtypes differ"):
        with bb.function("f", [a, c]):
            bb.emit(op.add(a, c))


def test_undecided_relation_becomes_runtime_check_and_vm_enforces_it():
    n = sv("n")
    x = Var("x", tensor((n, 6)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            parts = bb.emit(op.split(x, 3, axis=0))  # n divisible by 3: true for some n only
            first = bb.emit(refcomp.graph.TupleGetItem(parts, 0))
            out = bb.emit_output(op.exp(first))
        bb.emit_func_output(out)
    func = bb.get()["main"]
    checks = func.attrs["runtime_checks"]
    assert len(checks) == 1 and "divisible" in checks[0][1]
    ex = refcomp.graph.build(bb.get(), target="c")
    vm = refcomp.runtime.VirtualMachine(ex)
    x_ok = np.random.default_rng(0).standard_normal((6, 6)).astype("float32")
    np.testing.assert_allclose(vm["main"](x_ok), np.exp(x_ok[:2]), rtol=1e-5)
    with pytest.raises(refcomp.ArgumentError, match="divisible"):
        vm["main"](np.ones((4, 6), "float32"))


def test_match_cast_defines_new_size_vars_and_checks_at_run_time():
    n, m = sv("n"), sv("m")
    x = Var("x", tensor(None, "float32", ndim=1))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        y = bb.match_cast(x, tensor((m,)))
        with bb.dataflow():
            out = bb.emit_output(op.exp(y))
        bb.emit_func_output(out)
    func = bb.get()["main"]
    assert isinstance(func.body.blocks[0].bindings[0], MatchCast)
    # m is defined only inside: the return info is coarsened to rank and dtype
    assert func.ret_struct_info.shape is None and func.ret_struct_info.ndim == 1
    ex = refcomp.graph.build(bb.get(), target="c")
    arr = np.linspace(-1, 1, 7).astype("float32")
    np.testing.assert_allclose(refcomp.runtime.VirtualMachine(ex)["main"](arr), np.exp(arr), rtol=1e-6)
    with pytest.raises(refcomp.ArgumentError, match="1-d"):
        refcomp.runtime.VirtualMachine(ex)["main"](np.ones((2, 2), "float32"))
    del n


def test_shape_naming_an_undefined_var_is_rejected():
    n, m = sv("n"), sv("m")
    x = Var("x", tensor((n, 4)))
    bb = BlockBuilder()
    with pytest.raises(IRError, match="no parameter or match_cast defines"):
        with bb.function("f", [x]):
            bb.emit(op.full((m, 4), 0.0))


def test_reshape_rules():
    n = sv("n")
    x = Var("x", tensor((n, 6)))
    bb = BlockBuilder()
    with bb.function("f", [x]):
        y = bb.emit(op.reshape(x, (-1, 3)))
        assert str(y.struct_info) == 'R.Tensor((n * 2, 3), "float32")'
        with pytest.raises(ShapeError, match="element count"):
            bb.emit(op.reshape(x, (n, 5)))
        bb.emit_func_output(y)


def test_broadcast_symbolic_and_errors():
    n, m = sv("n"), sv("m")
    x, y = Var("x", tensor((n, 1, 4))), Var("y", tensor((m, 4)))
    bb = BlockBuilder()
    with bb.function("f", [x, y]):
        z = bb.emit(op.multiply(x, y))
        assert str(z.struct_info) == 'R.Tensor((n, m, 4), "float32")'
        with pytest.raises(ShapeError, match="broadcast"):
            bb.emit(op.add(x, Var("b", tensor((3, 5)))))
        bb.emit_func_output(z)


def test_dataflow_var_cannot_escape_and_outputs_only_in_dataflow():
    x = Var("x", tensor((2,)))
    bb = BlockBuilder()
    with pytest.raises(IRError, match="DataflowVar"):
        with bb.function("f", [x]):
            with bb.dataflow():
                y = bb.emit(op.exp(x))
            bb.emit_func_output(y)
    bb = BlockBuilder()
    with pytest.raises(IRError, match="emit_output"):
        with bb.function("f", [x]):
            bb.emit_output(op.exp(x))


def test_calling_another_function_substitutes_its_size_vars():
    n, k = sv("n"), sv("k")
    bb = BlockBuilder()
    a = Var("a", tensor((n, 3)))
    with bb.function("inner", [a]):
        with bb.dataflow():
            r = bb.emit_output(op.concat(a, a, axis=0))
        inner = bb.emit_func_output(r)
    b = Var("b", tensor((k, 3)))
    with bb.function("main", [b]):
        out = bb.emit(refcomp.graph.Call(inner, (b,)))
        bb.emit_func_output(out)
    assert str(out.struct_info) == 'R.Tensor((k * 2, 3), "float32")'
    ex = refcomp.graph.build(bb.get(), target="c")
    arr = np.arange(6, dtype="float32").reshape(2, 3)
    np.testing.assert_array_equal(refcomp.runtime.VirtualMachine(ex)["main"](arr), np.concatenate([arr, arr]))


def test_shape_struct_info_and_printing():
    info = ShapeStructInfo((sv("n"), 4))
    assert info.ndim == 2 and str(info) == "R.Shape((n, 4))"
    assert str(TensorStructInfo(None, "int32", 3)) == 'R.Tensor("int32", ndim=3)'


def test_lowering_requires_legalized_calls():
    x = Var("x", tensor((2,)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        y = bb.emit(op.exp(x))
        bb.emit_func_output(y)
    with pytest.raises(refcomp.BuildError, match="not legalized"):
        lower_to_vm(bb.get())
