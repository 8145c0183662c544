"""Errors on graph IR show the graph function with the spot marked (`-->` gutter, `^^^` underline),
as errors on loop-level IR do: the printer marks graph nodes, and the builder, the shape rules,
the passes and the module checker attach the function they work on."""
import pytest

import refcomp
from refcomp.ast import SizeVar
from refcomp.ast.graph import Call, DataflowBlock
from refcomp.ast.graph_struct_info import TensorStructInfo
from refcomp.ast.printer import script
from refcomp.errors import IRError, RefcompError, ShapeError
from refcomp.graph import BlockBuilder, Var, op, tensor


def sv(name):
    return SizeVar(name, "int64")


def _module():
    n, k = sv("n"), sv("k")
    a = Var("a", tensor((n, k)))
    bb = BlockBuilder()
    with bb.function("main", [a]):
        with bb.dataflow():
            y = bb.emit(op.exp(a))
            out = bb.emit_output(op.sum(y, axis=1))
        bb.emit_func_output(out)
    return bb.get()


def _marked_lines(text):
    """(marked line, the underline under it) pairs, the gutters stripped."""
    lines = text.split("\n")
    return [(lines[k][4:], lines[k + 1][4:]) for k, line in enumerate(lines) if line.startswith("--> ")]


def _underlined(line, carets):
    start = carets.index("^")
    return line[start:len(carets)]


def test_a_call_inside_a_graph_function_is_marked_with_gutter_and_underline():
    mod = _module()
    func = mod["main"]
    call = func.body.blocks[0].bindings[1].value
    text = RefcompError("boom", ir=func, spot=call).render_ir()
    ((line, carets),) = _marked_lines(text)
    assert line.strip().startswith("gv0: R.Tensor((n,), \"float32\") = R.sum(")
    assert _underlined(line, carets) == "R.sum(lv0, axis=(1,), keepdims=False)"
    assert "not part of" not in text
    # inside a module the same line is marked, in that function
    ((line_in_module, _),) = _marked_lines(script(mod, mark=call))
    assert line_in_module.strip() == line.strip()


def test_marks_on_arguments_parameters_size_vars_and_the_result():
    func = _module()["main"]
    (block,) = func.body.blocks
    exp_var = block.bindings[0].var
    # a var marks where it is bound and where it is used
    marked = _marked_lines(script(func, mark=exp_var))
    assert [_underlined(line, carets) for line, carets in marked] == ["lv0", "lv0"]
    (param,) = func.params
    (line, carets), (use, use_carets) = _marked_lines(script(func, mark=param))
    assert line.startswith("def main(") and _underlined(line, carets) == 'a: R.Tensor(("n", "k"), "float32")'
    assert "R.exp(a)" in use and _underlined(use, use_carets) == "a"
    n = param.struct_info.shape[0]
    ((line, carets),) = _marked_lines(script(func, mark=n))
    assert line.strip() == "n = T.int64()"
    ((line, carets),) = _marked_lines(script(func, mark=func.body))
    assert line.strip() == "return gv0"
    ((line, _),) = _marked_lines(script(func, mark=block))
    assert line.strip() == "with R.dataflow():"
    assert isinstance(block, DataflowBlock)


def test_graph_nodes_on_their_own_print_marked():
    call = _module()["main"].body.blocks[0].bindings[1].value
    assert script(call) == "R.sum(lv0, axis=(1,), keepdims=False)"
    ((line, carets),) = _marked_lines(script(call, mark=call.args[0]))
    assert _underlined(line, carets) == "lv0"
    assert "could not be printed" not in RefcompError("boom", ir=call, spot=call).render_ir()


def test_a_shape_rule_error_while_building_shows_the_function_so_far():
    n, k, m = sv("n"), sv("k"), sv("m")
    a, b = Var("a", tensor((n, k))), Var("b", tensor((m, n)))
    bb = BlockBuilder()
    with pytest.raises(ShapeError) as info:
        with bb.function("f", [a, b]):
            with bb.dataflow():
                y = bb.emit(op.exp(a))
                bb.emit(op.matmul(y, b))
    error = info.value
    assert isinstance(error.spot, Call) and error.spot.op_name == "matmul"
    text = str(error)
    assert "k == m does not hold" in text and "def f(a: " in text
    ((line, carets),) = _marked_lines(text)
    assert line.strip() == "lv1 = R.matmul(lv0, b)"
    assert _underlined(line, carets) == "R.matmul(lv0, b)"
    assert "lv0: R.Tensor((n, k), \"float32\") = R.exp(a)" in text  # the bindings before it


def test_a_graph_pass_error_shows_the_function_with_the_binding_marked():
    from refcomp.graph.passes.normalize import normalize

    func = _module()["main"]
    (block,) = func.body.blocks
    first = block.bindings[0]
    wrong = first.var.with_(struct_info=TensorStructInfo(first.var.struct_info.shape, "int32"))
    bad = func.with_(body=func.body.with_(blocks=(type(block)((first.with_(var=wrong),) + block.bindings[1:]),)))
    with pytest.raises(IRError, match="is annotated") as info:
        normalize(refcomp.ast.IRModule({"main": bad}))
    error = info.value
    assert error.ir is bad
    ((line, _),) = _marked_lines(str(error))
    assert line.strip() == "lv0: R.Tensor((n, k), \"int32\") = R.exp(a)"


def test_the_module_checker_marks_the_call_tir_it_refutes():
    from refcomp.graph.check import check_module
    from refcomp.graph.passes import legalize_ops

    mod = legalize_ops(_module())
    func = mod["main"]
    (block,) = func.body.blocks
    first = block.bindings[0]
    shape = func.params[0].struct_info.shape
    bad_call = first.value.with_(sinfo_args=(TensorStructInfo((shape[0], 7), "float32"),))
    bad = func.with_(body=func.body.with_(blocks=(type(block)((first.with_(value=bad_call),) + block.bindings[1:]),)))
    with pytest.raises(ShapeError, match="dim 1") as info:
        check_module(mod.with_function("main", bad))
    assert info.value.spot is bad_call
    ((line, carets),) = _marked_lines(str(info.value))
    assert _underlined(line, carets).startswith("R.call_tir(cls.exp, (a,), out_sinfo=R.Tensor((n, 7)")


def test_locate_keeps_ir_that_the_larger_ir_does_not_hold():
    func = _module()["main"]
    call = func.body.blocks[0].bindings[1].value
    from refcomp.workloads import exp_scale

    other = exp_scale(8)
    error = RefcompError("loop level", ir=other, spot=other.body)
    assert error.locate(func).ir is other  # about a PrimFunc the graph function does not hold
    error = RefcompError("on the call", ir=call)
    assert error.locate(func).ir is func and error.spot is call
    error = RefcompError("nothing yet")
    assert error.locate(func, spot=call).spot is call


def test_a_shape_rule_error_after_a_tuple_binding_is_located():
    """A Tuple node's `fields` (its elements) must not hide Node.fields() from the path search."""
    from refcomp.ast.graph import Tuple

    n, k, m = sv("n"), sv("k"), sv("m")
    a, b = Var("a", tensor((n, k))), Var("b", tensor((m, n)))
    bb = BlockBuilder()
    with pytest.raises(ShapeError) as info:
        with bb.function("f", [a, b]):
            with bb.dataflow():
                pair = bb.emit(Tuple((a, b)))
                bb.emit(op.matmul(a, b))
    assert pair is not None and "k == m does not hold" in str(info.value)
