"""ONNX BitCast between number types of one width, compiled (C) and interpreted, against numpy's `.view()`."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import refcomp
from refcomp.frontend import from_onnx

# (ONNX type, the numpy dtype the runtime takes: bfloat16 travels as its uint16 bits)
TYPES = {"float32": (TensorProto.FLOAT, "float32"), "int32": (TensorProto.INT32, "int32"),
         "uint32": (TensorProto.UINT32, "uint32"), "float64": (TensorProto.DOUBLE, "float64"),
         "int64": (TensorProto.INT64, "int64"), "uint64": (TensorProto.UINT64, "uint64"),
         "float16": (TensorProto.FLOAT16, "float16"), "int16": (TensorProto.INT16, "int16"),
         "uint16": (TensorProto.UINT16, "uint16"), "bfloat16": (TensorProto.BFLOAT16, "uint16")}
PAIRS = [("float32", "int32"), ("int32", "float32"), ("float32", "uint32"), ("uint32", "float32"),
         ("float64", "int64"), ("int64", "float64"), ("float64", "uint64"), ("float16", "int16"),
         ("int16", "float16"), ("bfloat16", "uint16"), ("uint16", "bfloat16"), ("float16", "bfloat16")]
# (exponent mask, mantissa mask, quiet bit) of the float types
NAN_BITS = {"float16": (0x7C00, 0x03FF, 0x0200), "bfloat16": (0x7F80, 0x007F, 0x0040),
            "float32": (0x7F800000, 0x007FFFFF, 0x00400000)}


def bitcast_model(source: str, target: str) -> "onnx.ModelProto":
    graph = helper.make_graph([helper.make_node("BitCast", ["x"], ["y"], to=TYPES[target][0])], "bitcast",
                              [helper.make_tensor_value_info("x", TYPES[source][0], ["n", 37])],
                              [helper.make_tensor_value_info("y", TYPES[target][0], ["n", 37])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)])


def random_bits(source: str, avoid_nan_of: set, shape, rng) -> np.ndarray:
    """Random bit patterns of source's width, with NaNs of the types in avoid_nan_of made finite
    (their payloads need not survive: spec/ir.md), as the array the runtime takes for source."""
    array_dtype = np.dtype(TYPES[source][1])
    unsigned = np.dtype(f"uint{8 * array_dtype.itemsize}")
    bits = rng.integers(0, np.iinfo(unsigned).max, shape, dtype=unsigned, endpoint=True)
    bits.flat[:4] = [0, 1, np.iinfo(unsigned).max, unsigned.type(1) << unsigned.type(8 * unsigned.itemsize - 1)]
    for dtype in avoid_nan_of:
        exponent, mantissa, _ = NAN_BITS[dtype]
        nan = ((bits & exponent) == exponent) & ((bits & mantissa) != 0)
        bits[nan] &= unsigned.type(~exponent & np.iinfo(unsigned).max)
    return bits.view(array_dtype)


@pytest.mark.parametrize("source, target", PAIRS)
@pytest.mark.parametrize("build_target", ["c", "interpret"])
def test_bitcast_keeps_every_bit(source, target, build_target, rng):
    ex = refcomp.graph.build(from_onnx(bitcast_model(source, target)), target=build_target)
    vm = refcomp.runtime.VirtualMachine(ex)
    # float16/bfloat16 compute as float (a signaling NaN may turn quiet); the interpreter holds
    # float32 values as Python floats, which quiets a float32 signaling NaN too
    avoid = {source, target} & ({"float16", "bfloat16", "float32"} if build_target == "interpret"
                                else {"float16", "bfloat16"})
    x = random_bits(source, avoid, (3, 37), rng)
    y = vm["main"](x)
    want = x.view(TYPES[target][1])
    assert y.dtype == want.dtype and y.shape == want.shape
    np.testing.assert_array_equal(y.view(f"uint{8 * y.itemsize}"), want.view(f"uint{8 * y.itemsize}"))


def test_bitcast_fuses_with_integer_arithmetic(rng):
    """float(bits(x) + 1) is the next float away from zero: one fused kernel over the views."""
    one = helper.make_tensor("one", TensorProto.INT32, [], [1])
    extra = [helper.make_node("Constant", [], ["k"], value=one), helper.make_node("Add", ["b", "k"], ["c"]),
             helper.make_node("BitCast", ["c"], ["y"], to=TensorProto.FLOAT)]
    graph = helper.make_graph([helper.make_node("BitCast", ["x"], ["b"], to=TensorProto.INT32), *extra], "next",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 37])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 37])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)])
    vm = refcomp.runtime.VirtualMachine(refcomp.graph.build(from_onnx(model), target="c"))
    x = rng.standard_normal((4, 37)).astype(np.float32)
    np.testing.assert_array_equal(vm["main"](x).view(np.int32), x.view(np.int32) + 1)


def test_bitcast_between_widths_is_a_clear_import_error():
    with pytest.raises(refcomp.IRError, match=r"BitCast from float32 to int16 is not supported"):
        from_onnx(bitcast_model("float32", "int16"))
