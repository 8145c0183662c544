"""Shape -> Gather/Concat/arithmetic -> Reshape/Expand/ConstantOfShape chains over dynamic dims."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import refcomp
from refcomp.frontend import from_onnx


def ints(name, values):
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def build(nodes, inputs, inits):
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    mod = from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    return mod, refcomp.runtime.VirtualMachine(refcomp.graph.build(mod, target="c"))["main"]


def test_reshape_target_computed_from_dynamic_dims(rng):
    # y = x.reshape(batch * seq, 2, 3) with batch * seq taken from Shape(x)
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "i0"], ["b"], axis=0),
             helper.make_node("Gather", ["s", "i1"], ["t"], axis=0),
             helper.make_node("Mul", ["b", "t"], ["bt"]),
             helper.make_node("Unsqueeze", ["bt", "ax"], ["bt1"]),
             helper.make_node("Concat", ["bt1", "rest"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    inits = [ints("i0", 0), ints("i1", 1), ints("ax", [0]), ints("rest", [2, 3])]
    mod, run = build(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 6])], inits)
    assert str(mod["main"].ret_struct_info.shape[0]) == "batch * seq"  # the target is symbolic, not pinned
    for b, t in [(1, 1), (2, 5), (3, 4)]:
        x = rng.standard_normal((b, t, 6)).astype("float32")
        np.testing.assert_array_equal(run(x), x.reshape(b * t, 2, 3))


def test_expand_and_constant_of_shape_follow_a_dynamic_shape(rng):
    # y = x broadcast to the shape of z, plus ones of z's shape
    nodes = [helper.make_node("Shape", ["z"], ["s"]),
             helper.make_node("Expand", ["x", "s"], ["e"]),
             helper.make_node("ConstantOfShape", ["s"], ["ones"],
                              value=numpy_helper.from_array(np.array([1.0], np.float32))),
             helper.make_node("Add", ["e", "ones"], ["y"])]
    _, run = build(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 4])], [])
    x = rng.standard_normal((1, 4)).astype("float32")
    for n in (1, 3):
        z = rng.standard_normal((n, 4)).astype("float32")
        np.testing.assert_allclose(run(x, z), np.broadcast_to(x, (n, 4)) + 1)


def test_slice_and_divide_of_a_shape(rng):
    # y = x.reshape(n, h // 2, 2): the trailing dim of Shape(x) halved
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "start", "end"], ["last"]),
             helper.make_node("Div", ["last", "two"], ["half"]),
             helper.make_node("Slice", ["s", "zero", "start"], ["first"]),
             helper.make_node("Concat", ["first", "half", "two1"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    inits = [ints("start", [1]), ints("end", [2]), ints("two", 2), ints("zero", [0]), ints("two1", [2])]
    _, run = build(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])], inits)
    x = rng.standard_normal((3, 8)).astype("float32")
    np.testing.assert_array_equal(run(x), x.reshape(3, 4, 2))


def test_a_symbolic_shape_used_as_float_data_becomes_a_tensor(rng):
    # y = float(Shape(x)) * x[0]: the shape's entries are computed from the size vars at run time
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Cast", ["s"], ["f"], to=TensorProto.FLOAT, name="to_float"),
             helper.make_node("Mul", ["f", "x"], ["y"])]
    _, run = build(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 1])], [])
    for n in (1, 3, 6):
        x = rng.standard_normal((n, 1)).astype("float32")
        np.testing.assert_allclose(run(x), np.asarray([n, 1], np.float32) * x)


def test_attention_body_over_dynamic_batch_and_sequence(rng):
    # Attention imports through its ONNX function body, whose Shape chains stay symbolic
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"])
    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["b", 2, "s", 8]) for n in "qkv"]
    graph = helper.make_graph([node], "g", info, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    mod = from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)]))
    dims = [getattr(d, "name", getattr(d, "value", None)) for d in mod["main"].ret_struct_info.shape]
    assert dims == ["b", 2, "s", 8]
    run = refcomp.runtime.VirtualMachine(refcomp.graph.build(mod, target="c"))["main"]
    for b, s in [(1, 3), (2, 5)]:
        q, k, v = (rng.standard_normal((b, 2, s, 8)).astype("float32") for _ in range(3))
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(8)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        np.testing.assert_allclose(run(q, k, v), weights @ v, rtol=1e-4, atol=1e-5)
