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


def _run_graph(nodes, inputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              list(inits))
    mod = from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))
    return refcomp.runtime.VirtualMachine(refcomp.graph.build(mod, target="c"))["main"]


def test_causal_mask_from_range_over_the_sequence_length(rng):
    # y = x + where(arange(seq)[None, :] <= arange(seq)[:, None], 0, -1e4): the exporters' causal mask
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=1, end=2),
             helper.make_node("Squeeze", ["s"], ["n"]),
             helper.make_node("Range", ["zero", "n", "one"], ["r"]),
             helper.make_node("Unsqueeze", ["r", "ax0"], ["row"]),
             helper.make_node("Unsqueeze", ["r", "ax1"], ["col"]),
             helper.make_node("LessOrEqual", ["row", "col"], ["keep"]),
             helper.make_node("Where", ["keep", "fzero", "neg"], ["mask"]),
             helper.make_node("Add", ["x", "mask"], ["y"])]
    inits = [ints("zero", 0), ints("one", 1), ints("ax0", [0]), ints("ax1", [1]),
             numpy_helper.from_array(np.asarray(0.0, np.float32), "fzero"),
             numpy_helper.from_array(np.asarray(-1e4, np.float32), "neg")]
    run = _run_graph(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "seq", "seq"])], inits)
    for b, t in [(1, 1), (2, 4), (3, 7)]:
        x = rng.standard_normal((b, t, t)).astype("float32")
        keep = np.arange(t)[None, :] <= np.arange(t)[:, None]
        np.testing.assert_allclose(run(x), x + np.where(keep, 0, -1e4).astype(np.float32))


def test_slice_with_ends_from_the_shape_and_position_ids(rng):
    # y = table[:, 0:seq] + x: a position table sliced to the sequence length, then expanded to the batch
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=1, end=2),
             helper.make_node("Slice", ["table", "zero1", "s", "ax1"], ["pos"]),
             helper.make_node("Shape", ["x"], ["full"]),
             helper.make_node("Expand", ["pos", "full"], ["e"]),
             helper.make_node("Add", ["x", "e"], ["y"])]
    table = rng.standard_normal((1, 16)).astype("float32")
    inits = [ints("zero1", [0]), ints("ax1", [1]), numpy_helper.from_array(table, "table")]
    run = _run_graph(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "seq"])], inits)
    for b, t in [(1, 1), (2, 5), (3, 16)]:
        x = rng.standard_normal((b, t)).astype("float32")
        np.testing.assert_allclose(run(x), x + table[:, :t])
    with pytest.raises(refcomp.errors.RefcompError):  # beyond the table, as in onnxruntime
        run(rng.standard_normal((1, 17)).astype("float32"))


def test_trilu_with_a_run_time_k_and_tile_by_a_shape_value(rng):
    # y = tile(triu(x, k), (1, b)) over a symbolic (n, n) matrix
    nodes = [helper.make_node("Trilu", ["x", "k"], ["t"]),
             helper.make_node("Shape", ["x"], ["s"], start=0, end=1),
             helper.make_node("Concat", ["one1", "s"], ["reps"], axis=0),
             helper.make_node("Tile", ["t", "reps"], ["y"])]
    run = _run_graph(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "n"]),
                             helper.make_tensor_value_info("k", TensorProto.INT64, [])], [ints("one1", [1])])
    for n, k in [(1, 0), (3, 1), (5, -2)]:
        x = rng.standard_normal((n, n)).astype("float32")
        np.testing.assert_allclose(run(x, np.asarray(k, np.int64)), np.tile(np.triu(x, k), (1, n)))


def test_comparisons_and_where_on_shape_values_decide_at_import():
    # target = where(shape == 0, 1, shape): decided for every value of the size vars (dims are >= 1 here)
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Equal", ["s", "minus"], ["is_minus"]),
             helper.make_node("Where", ["is_minus", "ones", "s"], ["target"]),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [ints("minus", [-1, -1]), ints("ones", [1, 1])])
    mod = from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert str(mod["main"].ret_struct_info) == 'R.Tensor((n, 4), "float32")'
