"""Broken or hostile ONNX files: each gives a typed refcomp error naming the node (or the model part),
never a crash, a hang or a huge allocation."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import refcomp
from refcomp.errors import IRError, ShapeError
from refcomp.frontend import from_onnx


def model(nodes, inputs, inits=(), outputs=("y",), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                                                   for o in outputs], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def x_info(shape=("n", 4)):
    return helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))


def test_truncated_protobuf_is_refused():
    data = model([helper.make_node("Relu", ["x"], ["y"])], [x_info()]).SerializeToString()
    for cut in (len(data) // 2, len(data) - 3):
        with pytest.raises(IRError, match="not an ONNX model|onnx import"):
            from_onnx(data[:cut])


def test_an_empty_file_is_refused(tmp_path):
    """protobuf reads zero bytes as an empty ModelProto; the importer names the problem instead of
    returning a model with no inputs and no outputs."""
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with pytest.raises(IRError, match=r"the model '.*empty\.onnx' has no graph outputs: an empty file"):
        from_onnx(path)
    with pytest.raises(IRError, match="has no graph outputs"):
        from_onnx(b"")


@pytest.mark.parametrize("shapes, message", [
    ({"y": (2, 4)}, r"shape_dict names 'y', which is no input of the model \(inputs: x\)"),
    ({"x": (2,)}, r"gives input x the shape \(2,\), but the model declares \(n, 4\): 2 dims, not 1"),
    ({"x": (2, 5)}, r"gives input x the shape \(2, 5\), but the model declares \(n, 4\)$"),
    ({"x": 2}, r"shape_dict\['x'\] must be a tuple of ints and dim names, got 2"),
])
def test_a_shape_dict_that_does_not_fit_the_inputs_is_named(shapes, message):
    relu = model([helper.make_node("Relu", ["x"], ["y"])], [x_info()])
    with pytest.raises(IRError, match=message):
        from_onnx(relu, shape_dict=shapes)
    mod = from_onnx(relu, shape_dict={"x": (3, 4)})            # a size for the symbolic dim is fine
    assert [int(d.value) for d in mod["main"].params[0].struct_info.shape] == [3, 4]


def test_a_node_with_the_wrong_input_count_is_named():
    with pytest.raises(IRError, match=r"node lonely \(Add\)"):
        from_onnx(model([helper.make_node("Add", ["x"], ["y"], name="lonely")], [x_info()]))


def test_an_undefined_input_is_named():
    with pytest.raises(IRError, match=r"node r \(Relu\): input ghost is not defined"):
        from_onnx(model([helper.make_node("Relu", ["ghost"], ["y"], name="r")], [x_info()]))


def test_calling_with_the_wrong_argument_count_is_a_typed_error(rng):
    mod = from_onnx(model([helper.make_node("Relu", ["x"], ["y"])], [x_info()]))
    run = refcomp.runtime.VirtualMachine(refcomp.graph.build(mod, target="c"))["main"]
    x = rng.standard_normal((2, 4)).astype("float32")
    with pytest.raises(refcomp.errors.RefcompError):
        run(x, x)


def test_an_unknown_op_is_named():
    with pytest.raises(IRError, match=r"node odd \(NoSuchOp\): op type NoSuchOp is not supported"):
        from_onnx(model([helper.make_node("NoSuchOp", ["x"], ["y"], name="odd")], [x_info()]))


def test_a_shape_contradicting_a_declared_dim_is_a_shape_error_naming_the_node():
    w = numpy_helper.from_array(np.ones((5, 3), np.float32), "w")
    with pytest.raises(ShapeError, match=r"node mm \(MatMul\)"):
        from_onnx(model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [x_info()], [w]))


def test_a_reshape_contradicting_the_element_count_is_named():
    target = numpy_helper.from_array(np.asarray([3, 5], np.int64), "t")
    with pytest.raises(ShapeError, match=r"node rs \(Reshape\)"):
        from_onnx(model([helper.make_node("Reshape", ["x", "t"], ["y"], name="rs")], [x_info((2, 4))], [target]))


def test_a_huge_constant_of_shape_is_refused_without_allocating():
    shape = numpy_helper.from_array(np.asarray([10 ** 6, 10 ** 6], np.int64), "s")
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["big"], name="big"),
             helper.make_node("Add", ["x", "big"], ["y"])]
    with pytest.raises(IRError, match=r"node big \(ConstantOfShape\).*1000000000000 elements"):
        from_onnx(model(nodes, [x_info((1, 1))], [shape]))


def test_a_huge_initializer_is_refused_without_allocating():
    proto = TensorProto()
    proto.name, proto.data_type = "w", TensorProto.FLOAT
    proto.dims.extend([10 ** 6, 10 ** 6])
    with pytest.raises(IRError, match=r"initializer w: a constant of shape \(1000000, 1000000\)"):
        from_onnx(model([helper.make_node("Add", ["x", "w"], ["y"])], [x_info()], [proto]))


def test_an_initializer_whose_data_does_not_fill_its_dims_is_named():
    proto = TensorProto()
    proto.name, proto.data_type = "w", TensorProto.FLOAT
    proto.dims.extend([3, 4])
    proto.raw_data = np.zeros(5, np.float32).tobytes()
    with pytest.raises(IRError, match=r"initializer w: cannot read its data"):
        from_onnx(model([helper.make_node("Add", ["x", "w"], ["y"])], [x_info()], [proto]))


def test_a_huge_constant_node_is_refused():
    proto = TensorProto()
    proto.name, proto.data_type = "c", TensorProto.FLOAT
    proto.dims.extend([10 ** 6, 10 ** 6])
    nodes = [helper.make_node("Constant", [], ["c"], value=proto, name="k"),
             helper.make_node("Add", ["x", "c"], ["y"])]
    with pytest.raises(IRError, match=r"node k \(Constant\).*1000000000000 elements"):
        from_onnx(model(nodes, [x_info()]))


def test_a_huge_range_is_refused():
    inits = [numpy_helper.from_array(np.asarray(v, np.int64), k) for k, v in (("a", 0), ("b", 10 ** 12), ("d", 1))]
    nodes = [helper.make_node("Range", ["a", "b", "d"], ["r"], name="rg"),
             helper.make_node("Cast", ["r"], ["y"], to=TensorProto.FLOAT)]
    with pytest.raises(IRError, match=r"node rg \(Range\)"):
        from_onnx(model(nodes, [x_info()], inits))


def test_a_zero_range_delta_is_named():
    inits = [numpy_helper.from_array(np.asarray(v, np.int64), k) for k, v in (("a", 0), ("d", 0))]
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Squeeze", ["s"], ["n"]),
             helper.make_node("Range", ["a", "n", "d"], ["r"], name="rg"),
             helper.make_node("Cast", ["r"], ["y"], to=TensorProto.FLOAT)]
    with pytest.raises(IRError, match=r"node rg \(Range\).*nonzero"):
        from_onnx(model(nodes, [x_info(("n",))], inits))


def test_a_resize_to_a_huge_output_is_refused_without_allocating():
    scales = numpy_helper.from_array(np.asarray([1.0, 1.0, 1e6, 1e6], np.float32), "scales")
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], name="grow")
    with pytest.raises(IRError, match=r"node grow \(Resize\).*elements"):
        from_onnx(model([node], [x_info((1, 1, 4, 4))], [scales], opset=19))
