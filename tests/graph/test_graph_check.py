"""The graph-module checker: call_tir shapes agree with the PrimFunc buffers; runtime checks are listed."""
import pytest

import refcomp
from refcomp.ast import SizeVar
from refcomp.ast.graph_struct_info import TensorStructInfo
from refcomp.graph import BlockBuilder, Var, op, tensor
from refcomp.graph.check import check_module
from refcomp.graph.passes import legalize_ops


def module():
    n = SizeVar("n", "int64")
    x = Var("x", tensor((n, 6)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(op.reshape(op.exp(x), (-1, 3)))
            parts = bb.emit(op.split(y, 2, axis=0))  # 2n divisible by 2: proved; no check
            z = bb.emit(op.split(x, 4, axis=0))  # n divisible by 4: a runtime check
            out = bb.emit_output(op.add(refcomp.graph.TupleGetItem(parts, 0), refcomp.graph.TupleGetItem(parts, 1)))
        bb.emit_func_output(out)
    del z
    return bb.get()


def test_legalized_module_checks_and_lists_runtime_checks():
    report = check_module(legalize_ops(module()))
    assert report.proved and not report.undecided
    assert len(report.runtime_checks) == 1 and "divisible" in report.runtime_checks[0]
    assert not report.ok


def test_a_wrong_out_sinfo_is_a_shape_error():
    mod = legalize_ops(module())
    func = mod["main"]
    block = func.body.blocks[0]
    first = block.bindings[0]
    n = SizeVar("m", "int64")
    bad_call = first.value.with_(sinfo_args=(TensorStructInfo((func.params[0].struct_info.shape[0], 7), "float32"),))
    bad = func.with_(body=func.body.with_(blocks=(type(block)((first.with_(value=bad_call),) + block.bindings[1:]),)))
    with pytest.raises(refcomp.ShapeError, match="dim 1"):
        check_module(mod.with_function("main", bad))
    del n
