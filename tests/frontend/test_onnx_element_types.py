"""ONNX models over the storage-only element types (float8/float4, int4/int2, string), checked
against onnx's ReferenceEvaluator; a node given a type its op does not take is a named error."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import refcomp
from refcomp.ast.dtype import storage_array
from refcomp.frontend import from_onnx

ml_dtypes = pytest.importorskip("ml_dtypes")


def _model(nodes, inputs, outputs, initializers=(), opset=23, ml=False):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("ai.onnx.ml", 4)] if ml else [])
    return helper.make_model(graph, opset_imports=opsets)


def _run(model, *arrays):
    ex = refcomp.graph.build(from_onnx(model), target="c")
    out = refcomp.runtime.VirtualMachine(ex)["main"](*arrays)
    return list(out) if isinstance(out, tuple) else [out]


def _floats(rng, n=300):
    x = (rng.standard_normal(n) * 2.0 ** rng.integers(-14, 18, n)).astype(np.float32)
    x[:6] = [np.nan, np.inf, -np.inf, -0.0, 1e9, -1e-30]
    return x


@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("to", [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2FNUZ, TensorProto.FLOAT4E2M1,
                                TensorProto.INT4, TensorProto.UINT2])
def test_cast_float_to_narrow_and_back_matches_the_reference(to, saturate, rng):
    narrow = helper.make_node("Cast", ["x"], ["y"], to=to, saturate=saturate) \
        if to not in (TensorProto.INT4, TensorProto.UINT2) else helper.make_node("Cast", ["x"], ["y"], to=to)
    wide = helper.make_node("Cast", ["y"], ["z"], to=TensorProto.FLOAT)
    model = _model([narrow, wide], [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                   [helper.make_tensor_value_info("y", to, ["n"]),
                    helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n"])])
    x = _floats(rng)
    if to in (TensorProto.INT4, TensorProto.UINT2):
        # in-range integral values: beyond the range ONNX's node tests wrap (-9 -> int4 7, as refcomp
        # does) while the reference evaluator gives 0
        low, high = (-8, 8) if to == TensorProto.INT4 else (0, 4)
        x = rng.integers(low, high, 300).astype(np.float32)
    want_y, want_z = ReferenceEvaluator(model).run(None, {"x": x})
    y, z = _run(model, x)
    assert np.array_equal(y, storage_array(want_y))
    assert np.array_equal(z, want_z, equal_nan=True)


def test_quantize_and_dequantize_int4_per_axis(rng):
    x = (rng.standard_normal((3, 8)) * 10).astype(np.float32)
    scale = np.array([0.5, 2.0, 3.5], np.float32)
    zero = numpy_helper.from_array(np.array([1, -2, 0], ml_dtypes.int4), "zp")
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zp"], ["q"], axis=0),
             helper.make_node("DequantizeLinear", ["q", "scale", "zp"], ["d"], axis=0)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8]),
                           helper.make_tensor_value_info("scale", TensorProto.FLOAT, [3])],
                   [helper.make_tensor_value_info("q", TensorProto.INT4, [3, 8]),
                    helper.make_tensor_value_info("d", TensorProto.FLOAT, [3, 8])], [zero])
    want_q, want_d = ReferenceEvaluator(model).run(None, {"x": x, "scale": scale})
    q, d = _run(model, x, scale)
    assert q.dtype == np.int8 and np.array_equal(q, storage_array(want_q))
    assert np.allclose(d, want_d)


def test_dequantize_takes_an_ml_dtypes_float8_argument(rng):
    codes = rng.integers(0, 256, 64).astype(np.uint8)
    x = codes.view(ml_dtypes.float8_e4m3fn)
    model = _model([helper.make_node("DequantizeLinear", ["x", "s"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT8E4M3FN, [64]),
                    helper.make_tensor_value_info("s", TensorProto.FLOAT, [])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])])
    s = np.float32(rng.uniform(0.5, 2.0))
    (want,) = ReferenceEvaluator(model).run(None, {"x": x, "s": np.asarray(s)})
    for arg in (x, codes):  # the ml_dtypes array or its bits
        (y,) = _run(model, arg, np.asarray(s))
        assert np.array_equal(y, want, equal_nan=True)


def test_a_cast_of_a_constant_folds_to_a_typed_constant():
    c = numpy_helper.from_array(np.array([0.3, -500.0, 1.0], np.float32), "c")
    nodes = [helper.make_node("Cast", ["c"], ["f8"], to=TensorProto.FLOAT8E4M3FN),
             helper.make_node("Concat", ["x", "f8"], ["y"], axis=0)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT8E4M3FN, [2])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT8E4M3FN, [5])], [c])
    mod = from_onnx(model)
    assert str(mod["main"].ret_struct_info.dtype) == "float8_e4m3fn"
    x = np.array([0x38, 0xB8], np.uint8)
    (y,) = _run(model, x)
    assert np.array_equal(y, np.concatenate([x, np.array([0.3, -448.0, 1.0], ml_dtypes.float8_e4m3fn).view(np.uint8)]))


def test_string_ops_match_the_reference():
    nodes = [helper.make_node("StringSplit", ["x"], ["parts", "counts"], delimiter="-"),
             helper.make_node("StringConcat", ["x", "suffix"], ["joined"]),
             helper.make_node("Equal", ["x", "suffix"], ["same"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.STRING, [3]),
                           helper.make_tensor_value_info("suffix", TensorProto.STRING, [1])],
                   [helper.make_tensor_value_info("parts", TensorProto.STRING, None),
                    helper.make_tensor_value_info("counts", TensorProto.INT64, [3]),
                    helper.make_tensor_value_info("joined", TensorProto.STRING, [3]),
                    helper.make_tensor_value_info("same", TensorProto.BOOL, [3])], opset=22)
    x, suffix = np.array(["a-b-c", "", "d"], dtype=object), np.array(["d"], dtype=object)
    want = ReferenceEvaluator(model).run(None, {"x": x, "suffix": suffix})
    got = _run(model, x, suffix)
    for g, w in zip(got, want):
        assert g.tolist() == np.asarray(w).tolist()


def test_reshape_concat_gather_on_strings():
    nodes = [helper.make_node("Concat", ["x", "x"], ["c"], axis=0),
             helper.make_node("Reshape", ["c", "shape"], ["r"]),
             helper.make_node("Gather", ["x", "i"], ["g"], axis=0),
             helper.make_node("Identity", ["g"], ["y"])]
    shape = numpy_helper.from_array(np.array([2, -1], np.int64), "shape")
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.STRING, [3]),
                           helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
                   [helper.make_tensor_value_info("r", TensorProto.STRING, [2, 3]),
                    helper.make_tensor_value_info("y", TensorProto.STRING, [2])], [shape])
    x, i = np.array(["a", "bb", "c c"], dtype=object), np.array([2, -3], np.int64)
    want = ReferenceEvaluator(model).run(None, {"x": x, "i": i})
    for g, w in zip(_run(model, x, i), want):
        assert g.tolist() == np.asarray(w).tolist()


def test_label_encoder_strings_to_ints():
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", keys_strings=["a", "b"],
                            values_int64s=[5, 7], default_int64=-9)
    model = _model([node], [helper.make_tensor_value_info("x", TensorProto.STRING, [4])],
                   [helper.make_tensor_value_info("y", TensorProto.INT64, [4])], ml=True)
    (y,) = _run(model, np.array(["b", "a", "zz", "a"]))
    assert y.tolist() == [7, 5, -9, 5]


@pytest.mark.parametrize("elem, node", [
    (TensorProto.FLOAT8E4M3FN, helper.make_node("Relu", ["x"], ["y"], name="act")),
    (TensorProto.INT4, helper.make_node("Add", ["x", "x"], ["y"], name="act")),
    (TensorProto.STRING, helper.make_node("Add", ["x", "x"], ["y"], name="act")),
])
def test_a_node_given_a_type_it_does_not_take_is_named(elem, node):
    model = _model([node], [helper.make_tensor_value_info("x", elem, [2, 3])],
                   [helper.make_tensor_value_info("y", elem, None)])
    name = {TensorProto.FLOAT8E4M3FN: "float8_e4m3fn", TensorProto.INT4: "int4", TensorProto.STRING: "string"}[elem]
    with pytest.raises(refcomp.IRError, match=rf"node act \({node.op_type}\).*{name}"):
        from_onnx(model)


def test_cast_between_strings_and_numbers(rng):
    nodes = [helper.make_node("Cast", ["x"], ["s"], to=TensorProto.STRING),
             helper.make_node("Cast", ["s"], ["back"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["s"], ["f8"], to=TensorProto.FLOAT8E4M3FN)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
                   [helper.make_tensor_value_info("s", TensorProto.STRING, [6]),
                    helper.make_tensor_value_info("back", TensorProto.FLOAT, [6]),
                    helper.make_tensor_value_info("f8", TensorProto.FLOAT8E4M3FN, [6])])
    x = np.concatenate([rng.standard_normal(4), [np.inf, -0.5]]).astype(np.float32)
    reference = _model(nodes[:2], list(model.graph.input), list(model.graph.output)[:2])
    s, back = ReferenceEvaluator(reference).run(None, {"x": x})
    got_s, got_back, got_f8 = _run(model, x)
    assert got_s.tolist() == s.tolist()
    assert np.array_equal(got_back, back)
    # a string to float8 goes through float32 (the reference evaluator cannot parse into float8)
    assert np.array_equal(got_f8, np.clip(back, -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8))
