"""ONNX import: dim_params become size vars (one executable, many sizes), errors name the node and op."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import refcomp
from refcomp.frontend import from_onnx
from refcomp.frontend.onnx import supported_ops


def mlp_model(rng):
    w = numpy_helper.from_array(rng.standard_normal((6, 4)).astype("float32"), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype("float32"), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Add", ["h", "b"], ["hb"], name="bias"),
        helper.make_node("Relu", ["hb"], ["r"], name="act"),
        helper.make_node("Softmax", ["r"], ["y"], name="sm", axis=-1),
    ]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_dim_params_become_size_vars_and_one_build_serves_all_sizes(rng):
    model = mlp_model(rng)
    mod = from_onnx(model)
    x_info = mod["main"].params[0].struct_info
    assert [getattr(d, "name", None) for d in x_info.shape[:2]] == ["batch", "seq"]
    ex = refcomp.graph.build(mod, target="c")
    vm = refcomp.runtime.VirtualMachine(ex)
    w = numpy_helper.to_array(model.graph.initializer[0])
    b = numpy_helper.to_array(model.graph.initializer[1])
    for batch, seq in [(1, 1), (2, 3), (5, 7)]:
        x = rng.standard_normal((batch, seq, 6)).astype("float32")
        r = np.maximum(x @ w + b, 0)
        e = np.exp(r - r.max(-1, keepdims=True))
        np.testing.assert_allclose(vm["main"](x), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_shape_dict_overrides_input_shapes(rng):
    mod = from_onnx(mlp_model(rng), shape_dict={"x": (2, "s", 6)})
    shape = mod["main"].params[0].struct_info.shape
    assert shape[0].value == 2 and shape[1].name == "s"


def test_unsupported_op_names_node_and_op():
    graph = helper.make_graph([helper.make_node("ImageDecoder", ["x"], ["y"], name="decode")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.UINT8, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)])
    with pytest.raises(refcomp.IRError, match=r"node decode \(ImageDecoder\).*not supported"):
        from_onnx(helper.make_model(graph))


def test_malformed_files_are_clear_errors(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x01garbage that is not a protobuf \xff\xff")
    with pytest.raises(refcomp.IRError, match="cannot read model"):
        from_onnx(str(bad))
    with pytest.raises(refcomp.IRError, match="not an ONNX model|cannot"):
        from_onnx(b"\xff\xff\xff")


def test_a_reshape_target_given_at_run_time_or_specialized(rng):
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="rs")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
                                           helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])])
    model = helper.make_model(graph)
    x = rng.standard_normal((2, 6)).astype("float32")
    run = refcomp.runtime.VirtualMachine(refcomp.graph.build(from_onnx(model), target="c"))["main"]
    np.testing.assert_array_equal(run(x, np.array([3, 4])), x.reshape(3, 4))
    np.testing.assert_array_equal(run(x, np.array([4, -1])), x.reshape(4, 3))
    mod = from_onnx(model, const_inputs={"shape": np.array([3, 4])})
    out = refcomp.runtime.VirtualMachine(refcomp.graph.build(mod, target="c"))["main"](x)
    np.testing.assert_array_equal(out, x.reshape(3, 4))


@pytest.mark.parametrize("seed", range(2))
def test_resize_sizes_may_be_read_at_run_time(seed):
    nodes = [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], name="rz")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2]),
                                           helper.make_tensor_value_info("sizes", TensorProto.INT64, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    run = refcomp.runtime.VirtualMachine(refcomp.graph.build(from_onnx(helper.make_model(graph)), target="c"))["main"]
    x = np.random.default_rng(seed).standard_normal((1, 1, 2, 2)).astype(np.float32)
    for k in (2, 3):  # nearest, half_pixel, round_prefer_floor: an integer upscale repeats each pixel
        got = run(x, np.asarray([1, 1, 2 * k, 2 * k], np.int64))
        np.testing.assert_array_equal(got, x.repeat(k, axis=2).repeat(k, axis=3))


def test_importer_claims_many_op_types():
    assert len(supported_ops()) >= 100


def test_a_node_missing_a_required_attribute_is_named():
    graph = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["y"], name="join")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    with pytest.raises(refcomp.IRError, match=r"node join \(Concat\): KeyError: 'axis'"):
        from_onnx(helper.make_model(graph))


def test_an_input_of_an_unsupported_element_type_is_named():
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.COMPLEX64, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.COMPLEX64, [2])])
    with pytest.raises(refcomp.IRError, match=r"input x: .*complex64"):
        from_onnx(helper.make_model(graph))
