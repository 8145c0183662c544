"""ONNX Resize: per-axis interpolation matrices, checked against the graph's own resize2d reference."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import refcomp
from refcomp.frontend import from_onnx
from refcomp.frontend.onnx.ops_resize import axis_weights
from refcomp.graph.op import registry


def resize_model(in_shape, sizes, **attrs):
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.asarray(sizes, np.int64), "sizes")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("coordinates", ["half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"])
def test_resize_matches_the_resize2d_reference(rng, mode, coordinates):
    x = rng.standard_normal((2, 3, 4, 5)).astype("float32")
    out = (7, 3)
    model = resize_model(list(x.shape), [2, 3, *out], mode=mode, coordinate_transformation_mode=coordinates)
    got = refcomp.runtime.VirtualMachine(refcomp.graph.build(from_onnx(model), target="c"))["main"](x)
    expected = registry.get("resize2d").evaluate([x], {"size": out, "method": mode,
                                                       "coordinate_transformation_mode": coordinates})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("antialias", [False, True])
def test_interpolation_weights_preserve_constants(mode, antialias):
    # every output is an affine combination of inputs (weights sum to 1), down- and upsampling
    for n_in, n_out in [(8, 3), (3, 8), (5, 5)]:
        weights, extrapolated = axis_weights(n_in, n_out, n_out / n_in, mode, "half_pixel", antialias=antialias)
        assert extrapolated is None
        np.testing.assert_allclose(weights.sum(axis=0), np.ones(n_out), atol=1e-12)


def test_nearest_asymmetric_floor_upsampling_repeats(rng):
    weights, _ = axis_weights(4, 8, 2.0, "nearest", "asymmetric", "floor")
    v = rng.standard_normal(4)
    np.testing.assert_array_equal(v @ weights, np.repeat(v, 2))
