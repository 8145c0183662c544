"""The script format of graph functions: printing, parsing back, round trips, parse errors."""
import pytest

import refcomp
from refcomp.ast import structural_equal
from refcomp.ast.parser import from_source
from refcomp.graph import BlockBuilder, Var, op, tensor
from refcomp.graph.pipeline import optimize
from refcomp.graph.passes import legalize_ops

from graph_helpers import one_op_module, symbolic_dims
from op_cases import CASES


def roundtrip(mod):
    text = mod.script()
    back = from_source(text)
    assert back.script() == text
    assert structural_equal(back["main"], mod["main"])
    return back


@pytest.mark.parametrize("index", range(0, len(CASES), 3), ids=[c.name for c in CASES[::3]])
def test_one_op_functions_round_trip(index):
    mod, _, _ = one_op_module(CASES[index], symbolic_dims(CASES[index]))
    roundtrip(mod)
    roundtrip(legalize_ops(mod))


def test_optimized_module_with_attrs_round_trips():
    n = refcomp.ast.SizeVar("n", "int64")
    x, w = Var("x", tensor((n, 8))), Var("w", tensor((8, 8)))
    bb = BlockBuilder()
    with bb.function("main", [x, w], attrs={"tir_var_upper_bound": {"n": 16}}):
        m = bb.match_cast(x, tensor((n, 8)))
        with bb.dataflow():
            h = bb.emit(op.relu(op.matmul(m, w)))
            parts = bb.emit(op.split(h, 2, axis=1))
            out = bb.emit_output(op.exp(refcomp.graph.TupleGetItem(parts, 1)))
        bb.emit_func_output(out)
    text = roundtrip(optimize(bb.get())).script()
    assert "R.call_tir(cls." in text and "memory_plan" in text
    roundtrip(bb.get())


def test_parse_errors_point_at_the_source():
    text = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((n, 4), "float32")) -> R.Tensor((n, 4), "float32"):
        return x
'''
    with pytest.raises(refcomp.ParseError, match="size var n is not declared"):
        from_source(text)
    text = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        y: R.Tensor((4,), "float32") = R.exp(z)
        return y
'''
    with pytest.raises(refcomp.ParseError, match="z is not defined"):
        from_source(text)
