"""ONNX Loop with a trip count or condition known only at run time: recursion between two graph
functions, run by the VM; one compiled model, several trip counts, checked against numpy."""
import numpy as np
import pytest

import refcomp
from refcomp.errors import RefcompError
from refcomp.frontend import from_onnx

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402


def _vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def _model(stop_below=None):
    """y, ys = Loop(m, cond, y0): y' = y * 0.5 + w (w an outer input), ys stacks every y'; with
    stop_below the body's condition is y'.sum() > stop_below."""
    nodes = [helper.make_node("Mul", ["y_in", "half"], ["h"]), helper.make_node("Add", ["h", "w"], ["y_out"]),
             helper.make_node("Identity", ["y_out"], ["scan"])]
    inits = [helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])]
    if stop_below is None:
        nodes.append(helper.make_node("Identity", ["cond_in"], ["cond_out"]))
    else:
        inits.append(helper.make_tensor("limit", TensorProto.FLOAT, [], [stop_below]))
        nodes += [helper.make_node("ReduceSum", ["y_out"], ["total"], keepdims=0),
                  helper.make_node("Greater", ["total", "limit"], ["cond_out"])]
    body = helper.make_graph(nodes, "body", [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []),
                                             _vi("y_in", TensorProto.FLOAT, [3])],
                             [_vi("cond_out", TensorProto.BOOL, []), _vi("y_out", TensorProto.FLOAT, [3]),
                              _vi("scan", TensorProto.FLOAT, [3])], initializer=inits)
    loop = helper.make_node("Loop", ["m", "c", "y0"], ["y", "ys"], body=body)
    graph = helper.make_graph([loop], "g", [_vi("m", TensorProto.INT64, []), _vi("c", TensorProto.BOOL, []),
                                            _vi("y0", TensorProto.FLOAT, [3]), _vi("w", TensorProto.FLOAT, [3])],
                              [_vi("y", TensorProto.FLOAT, [3]), _vi("ys", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return refcomp.runtime.VirtualMachine(refcomp.graph.build(from_onnx(model), target="c"))["main"]


def _reference(m, cond, y, w, stop_below=None):
    ys = []
    for _ in range(m):
        if not cond:
            break
        y = y * np.float32(0.5) + w
        ys.append(y)
        if stop_below is not None:
            cond = y.sum() > np.float32(stop_below)
    return y, np.stack(ys) if ys else np.zeros((0, 3), np.float32)


@pytest.mark.parametrize("seed", range(2))
def test_loop_with_a_run_time_trip_count(seed):
    run = _model()
    rng = np.random.default_rng(seed)
    y0, w = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    for m in (0, 1, 5):
        y, ys = run(np.asarray(m, np.int64), np.asarray(True), y0, w)
        want_y, want_ys = _reference(m, True, y0, w)
        np.testing.assert_allclose(y, want_y, rtol=1e-6, atol=1e-6)
        assert ys.shape == want_ys.shape
        np.testing.assert_allclose(ys, want_ys, rtol=1e-6, atol=1e-6)
    y, ys = run(np.asarray(4, np.int64), np.asarray(False), y0, w)  # a false condition runs no iteration
    np.testing.assert_array_equal(y, y0)
    assert ys.shape == (0, 3)


@pytest.mark.parametrize("seed", range(2))
def test_loop_ending_on_a_condition_the_body_computes(seed):
    run = _model(stop_below=1.0)
    rng = np.random.default_rng(seed)
    y0 = (rng.random(3) * 8).astype(np.float32)
    w = np.full(3, 0.1, np.float32)
    y, ys = run(np.asarray(50, np.int64), np.asarray(True), y0, w)
    want_y, want_ys = _reference(50, True, y0, w, stop_below=1.0)
    assert ys.shape == want_ys.shape and 1 <= len(ys) < 50
    np.testing.assert_allclose(y, want_y, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ys, want_ys, rtol=1e-6, atol=1e-6)


def _slicing_loop(width_from_i):
    """ys = Loop(m): step i scans data[i : i + 1] (or data[0 : i] when width_from_i), a length the
    body computes at run time."""
    start, end = (["zero1", "i1"] if width_from_i else ["i1", "i_next"])
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Identity", ["y_in"], ["y_out"]),
         helper.make_node("Unsqueeze", ["i", "zero1"], ["i1"]), helper.make_node("Add", ["i1", "one1"], ["i_next"]),
         helper.make_node("Slice", ["data", start, end], ["scan"])],
        "body", [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []), _vi("y_in", TensorProto.FLOAT, [1])],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("y_out", TensorProto.FLOAT, [1]), _vi("scan", TensorProto.FLOAT, None)],
        initializer=[helper.make_tensor("zero1", TensorProto.INT64, [1], [0]),
                     helper.make_tensor("one1", TensorProto.INT64, [1], [1]),
                     helper.make_tensor("data", TensorProto.FLOAT, [4], [1, 2, 3, 4])])
    loop = helper.make_node("Loop", ["m", "", "y0"], ["y", "ys"], body=body, name="slicing")
    graph = helper.make_graph([loop], "g", [_vi("m", TensorProto.INT64, []), _vi("y0", TensorProto.FLOAT, [1])],
                              [_vi("y", TensorProto.FLOAT, [1]), _vi("ys", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return refcomp.runtime.VirtualMachine(refcomp.graph.build(from_onnx(model), target="c"))["main"]


def test_scan_outputs_of_a_length_computed_in_the_body():
    run = _slicing_loop(width_from_i=False)
    data = np.arange(1, 5, dtype=np.float32)
    for m in (0, 1, 4):
        _, ys = run(np.asarray(m, np.int64), np.zeros(1, np.float32))
        np.testing.assert_array_equal(ys, data[:m].reshape(m, 1) if m else np.zeros((0, 0), np.float32))


def test_scan_outputs_whose_shape_changes_between_steps_are_a_run_time_error():
    run = _slicing_loop(width_from_i=True)
    _, ys = run(np.asarray(1, np.int64), np.zeros(1, np.float32))  # one step: data[0:0]
    assert ys.shape == (1, 0)
    with pytest.raises(RefcompError):  # data[0:1] after data[0:0]: scan outputs must keep one shape
        run(np.asarray(2, np.int64), np.zeros(1, np.float32))


def test_a_loop_deeper_than_the_call_limit_is_a_typed_error(monkeypatch):
    from refcomp.errors import RuntimeFailure
    from refcomp.runtime import vm

    run = _model()
    y0, w = np.zeros(3, np.float32), np.ones(3, np.float32)
    y, ys = run(np.asarray(300, np.int64), np.asarray(True), y0, w)  # beyond Python's default recursion limit
    assert ys.shape == (300, 3) and np.allclose(y, 2 * (1 - 0.5 ** 300))
    monkeypatch.setattr(vm, "MAX_CALL_DEPTH", 40)
    assert run(np.asarray(15, np.int64), np.asarray(True), y0, w)[1].shape == (15, 3)
    with pytest.raises(RuntimeFailure, match="nested deeper than 40"):
        run(np.asarray(25, np.int64), np.asarray(True), y0, w)
