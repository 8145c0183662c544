"""Ops whose output length depends on the data (NonZero, Unique, NonMaxSuppression), Resize with
run-time scales and sizes, and If on a run-time condition: one compiled model, many inputs,
each checked against onnx's reference evaluator."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import refcomp
from refcomp.errors import IRError
from refcomp.frontend import from_onnx

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402


def _model(node, inputs, n_outputs=1, opset=19):
    outputs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in node.output[:n_outputs]]
    graph = helper.make_graph([node], "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _compiled(model):
    return refcomp.runtime.VirtualMachine(refcomp.graph.build(from_onnx(model), target="c"))["main"]


def _check(run, model, *args, rtol=1e-5, atol=1e-6):
    want = ReferenceEvaluator(model).run(None, {i.name: a for i, a in zip(model.graph.input, args)})
    got = run(*args)
    got = list(got) if isinstance(got, tuple) else [got]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def _info(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


@pytest.fixture(scope="module")
def nonzero():
    model = _model(helper.make_node("NonZero", ["x"], ["y"]), [_info("x", TensorProto.FLOAT, [3, 4])])
    return _compiled(model), model


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2 ** 31 - 1), density=st.sampled_from([0.0, 0.3, 0.7, 1.0]))
def test_nonzero_length_is_read_at_run_time(nonzero, seed, density):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((3, 4)) * (rng.random((3, 4)) < density)).astype(np.float32)
    _check(*nonzero, x)


@pytest.fixture(scope="module", params=[(None, 1), (None, 0), (1, 1), (-1, 1)],
                ids=["flat_sorted", "flat_unsorted", "axis1", "axis_neg"])
def unique(request):
    axis, sorted_ = request.param
    attrs = {"sorted": sorted_} if axis is None else {"sorted": sorted_, "axis": axis}
    node = helper.make_node("Unique", ["x"], ["y", "indices", "inverse", "counts"], **attrs)
    model = _model(node, [_info("x", TensorProto.INT64, [4, 3])], n_outputs=4)
    return _compiled(model), model


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2 ** 31 - 1), distinct=st.integers(1, 4))
def test_unique_matches_the_reference(unique, seed, distinct):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, distinct, (4, 3)).astype(np.int64)
    if rng.random() < 0.5:
        x[2] = x[0]  # repeated slices
    run, model = unique
    attrs = {a.name: a.i for a in model.graph.node[0].attribute}
    got = run(x)
    want = _numpy_unique(x, attrs.get("axis"), attrs["sorted"])
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def _numpy_unique(x, axis, sorted_):
    """ONNX Unique by numpy: sorted, or in order of first occurrence."""
    y, first, inverse, counts = np.unique(x if axis is not None else x.reshape(-1), axis=axis, return_index=True,
                                          return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    if not sorted_:
        order = np.argsort(first, kind="stable")
        y, first, counts = np.take(y, order, axis=axis or 0), first[order], counts[order]
        inverse = np.argsort(order)[inverse]
    return y, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)


@pytest.fixture(scope="module", params=[0, 1], ids=["corners", "centers"])
def nms(request):
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "limit", "iou", "score"], ["y"],
                            center_point_box=request.param)
    model = _model(node, [_info("boxes", TensorProto.FLOAT, [2, 7, 4]), _info("scores", TensorProto.FLOAT, [2, 3, 7]),
                          _info("limit", TensorProto.INT64, [1]), _info("iou", TensorProto.FLOAT, [1]),
                          _info("score", TensorProto.FLOAT, [1])])
    return _compiled(model), model


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2 ** 31 - 1), limit=st.integers(0, 8), iou=st.sampled_from([0.0, 0.3, 0.6]),
       score=st.sampled_from([-1.0, 0.3, 0.8]))
def test_non_max_suppression_matches_the_reference(nms, seed, limit, iou, score):
    rng = np.random.default_rng(seed)
    boxes = rng.random((2, 7, 4)).astype(np.float32)
    scores = rng.random((2, 3, 7)).astype(np.float32)
    scores[0, 0, 3] = scores[0, 0, 5]  # a tie, broken by the box index
    _check(*nms, boxes, scores, np.asarray([limit], np.int64), np.asarray([iou], np.float32),
           np.asarray([score], np.float32))


RESIZE_MODES = [
    {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
    {"mode": "nearest", "nearest_mode": "round_prefer_ceil"},
    {"mode": "linear"},
    {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
    {"mode": "linear", "antialias": 1},
    {"mode": "cubic", "exclude_outside": 1, "cubic_coeff_a": -0.5},
    {"mode": "cubic", "antialias": 1, "coordinate_transformation_mode": "half_pixel_symmetric"},
]


@pytest.fixture(scope="module", params=range(len(RESIZE_MODES)), ids=lambda k: "-".join(
    str(v) for v in RESIZE_MODES[k].values()))
def resize_scales(request):
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], axes=[2, 3], **RESIZE_MODES[request.param])
    model = _model(node, [_info("x", TensorProto.FLOAT, [1, 2, 5, 6]), _info("scales", TensorProto.FLOAT, [2])])
    return _compiled(model), model


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2 ** 31 - 1), scales=st.tuples(*[st.sampled_from([0.4, 0.5, 0.8, 1.0, 1.5, 2.0, 3.0])] * 2))
def test_resize_scales_at_run_time(resize_scales, seed, scales):
    x = np.random.default_rng(seed).standard_normal((1, 2, 5, 6)).astype(np.float32)
    _check(*resize_scales, x, np.asarray(scales, np.float32), rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module", params=["stretch", "not_larger", "not_smaller"])
def resize_sizes(request):
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear",
                            keep_aspect_ratio_policy=request.param, axes=[1, 2])
    model = _model(node, [_info("x", TensorProto.FLOAT, [2, 4, 5]), _info("sizes", TensorProto.INT64, [2])])
    return _compiled(model), model


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2 ** 31 - 1), sizes=st.tuples(st.integers(1, 9), st.integers(1, 9)))
def test_resize_sizes_at_run_time(resize_sizes, seed, sizes):
    x = np.random.default_rng(seed).standard_normal((2, 4, 5)).astype(np.float32)
    _check(*resize_sizes, x, np.asarray(sizes, np.int64), rtol=1e-4, atol=1e-5)


def test_if_on_a_run_time_condition_selects_a_branch():
    def branch(name, value):
        out = helper.make_tensor_value_info(name, TensorProto.FLOAT, [3])
        return helper.make_graph([helper.make_node("Mul", ["x", name + "_c"], [name])], name, [], [out],
                                 [helper.make_tensor(name + "_c", TensorProto.FLOAT, [], [value])])

    node = helper.make_node("If", ["cond"], ["y"], then_branch=branch("t", 2.0), else_branch=branch("e", -1.0))
    graph = helper.make_graph([node], "g", [_info("cond", TensorProto.BOOL, []), _info("x", TensorProto.FLOAT, [3])],
                              [_info("y", TensorProto.FLOAT, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    run = _compiled(model)
    x = np.random.default_rng(0).standard_normal(3).astype(np.float32)
    np.testing.assert_allclose(run(np.asarray(True), x), 2 * x)
    np.testing.assert_allclose(run(np.asarray(False), x), -x)


def test_if_on_a_run_time_condition_with_branches_of_different_shapes_is_named():
    def branch(name, values):
        out = helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
        return helper.make_graph([helper.make_node("Constant", [], [name], value_floats=values)], name, [], [out])

    node = helper.make_node("If", ["cond"], ["y"], name="pick", then_branch=branch("t", [1.0, 2.0]),
                            else_branch=branch("e", [3.0]))
    graph = helper.make_graph([node], "g", [_info("cond", TensorProto.BOOL, [])], [_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    with pytest.raises(IRError, match=r"node pick \(If\).*one shape and type"):
        from_onnx(model)
