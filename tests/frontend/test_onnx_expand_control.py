"""ONNX import of ops defined by ONNX function bodies, and of control flow unrolled at import."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import refcomp
from refcomp.frontend import from_onnx


def run(model, *args, const_inputs=None):
    mod = from_onnx(model, const_inputs=const_inputs)
    return refcomp.runtime.VirtualMachine(refcomp.graph.build(mod, target="c"))["main"](*args)


def model_of(nodes, inputs, outputs, initializers=(), opset=18, extra_opsets=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    return helper.make_model(graph, opset_imports=opsets)


def test_an_op_without_converter_imports_through_its_function_body(rng):
    # NegativeLogLikelihoodLoss has no converter: its ONNX function body is imported instead
    node = helper.make_node("NegativeLogLikelihoodLoss", ["x", "t", "w"], ["loss"], reduction="mean",
                            ignore_index=1)
    model = model_of([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3]),
                              helper.make_tensor_value_info("t", TensorProto.INT64, [4]),
                              helper.make_tensor_value_info("w", TensorProto.FLOAT, [3])],
                     [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], opset=22)
    x = rng.standard_normal((4, 3)).astype("float32")
    t = rng.integers(0, 3, size=4).astype("int64")
    t[0] = 1  # at least one ignored row
    w = (rng.random(3) + 0.5).astype("float32")
    weight = np.where(t == 1, 0, w[t])
    expected = -(x[np.arange(4), t] * weight).sum() / weight.sum()
    np.testing.assert_allclose(run(model, x, t, w), expected, rtol=1e-5, atol=1e-6)


def test_errors_inside_an_expansion_name_the_expanded_node():
    # AffineGrid 3-d with align_corners: its body has an If on `D == 1` (D read at run time) whose
    # branches give a scalar and a 1-vector, which an If on a run-time condition cannot select between
    node = helper.make_node("AffineGrid", ["theta", "size"], ["grid"], name="grid_gen", align_corners=1)
    model = model_of([node], [helper.make_tensor_value_info("theta", TensorProto.FLOAT, [1, 3, 4]),
                              helper.make_tensor_value_info("size", TensorProto.INT64, [5])],
                     [helper.make_tensor_value_info("grid", TensorProto.FLOAT, None)], opset=20)
    with pytest.raises(refcomp.IRError, match=r"in the expansion of node grid_gen \(AffineGrid\)"):
        from_onnx(model)


@pytest.mark.parametrize("seed", range(2))
def test_affine_grid_2d_with_a_run_time_size(seed):
    """AffineGrid's body on a size read at run time (its Squeeze of a symbolic batch dim is checked
    at run time): grid[n, h, w] = theta[n] @ (x_w, y_h, 1), pixel centres in [-1, 1]."""
    node = helper.make_node("AffineGrid", ["theta", "size"], ["grid"], name="grid_gen")
    model = model_of([node], [helper.make_tensor_value_info("theta", TensorProto.FLOAT, [2, 2, 3]),
                              helper.make_tensor_value_info("size", TensorProto.INT64, [4])],
                     [helper.make_tensor_value_info("grid", TensorProto.FLOAT, None)], opset=20)
    run = refcomp.runtime.VirtualMachine(refcomp.graph.build(from_onnx(model), target="c"))["main"]
    theta = np.random.default_rng(seed).standard_normal((2, 2, 3)).astype(np.float32)
    for h, w in ((3, 4), (5, 2)):
        x = -1 + (2 * np.arange(w) + 1) / w
        y = -1 + (2 * np.arange(h) + 1) / h
        base = np.stack([np.broadcast_to(x, (h, w)), np.broadcast_to(y[:, None], (h, w)), np.ones((h, w))], -1)
        want = np.einsum("hwk,njk->nhwj", base, theta.astype(np.float64))
        got = run(theta, np.asarray([2, 1, h, w], np.int64))
        assert got.shape == (2, h, w, 2)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_unknown_op_of_another_domain_is_named():
    node = helper.make_node("Frobnicate", ["x"], ["y"], name="f", domain="com.example")
    model = model_of([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], extra_opsets=[("com.example", 1)])
    with pytest.raises(refcomp.IRError, match=r"node f \(Frobnicate\).*domain 'com.example'.*not supported"):
        from_onnx(model)


def _branch(name, value):
    const = helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name + "_v"))
    add = helper.make_node("Add", ["x", name], [name + "_out"])
    return helper.make_graph([const, add], name, [], [helper.make_tensor_value_info(name + "_out",
                                                                                    TensorProto.FLOAT, [3])])


def test_if_on_a_constant_condition_imports_the_taken_branch(rng):
    then_value, else_value = np.float32([1, 2, 3]), np.float32([-5, -6, -7])
    node = helper.make_node("If", ["c"], ["y"], name="choose", then_branch=_branch("t", then_value),
                            else_branch=_branch("e", else_value))
    model = model_of([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
                              helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    x = rng.standard_normal(3).astype("float32")
    np.testing.assert_allclose(run(model, x, const_inputs={"c": np.array(True)}), x + then_value)
    np.testing.assert_allclose(run(model, x, const_inputs={"c": np.array(False)}), x + else_value)
    # a condition known only at run time: both branches computed, the output selected
    vm = refcomp.runtime.VirtualMachine(refcomp.graph.build(from_onnx(model), target="c"))["main"]
    np.testing.assert_allclose(vm(x, np.array(True)), x + then_value)
    np.testing.assert_allclose(vm(x, np.array(False)), x + else_value)


def test_loop_with_constant_trip_count_is_unrolled(rng):
    # carried: acc += x each iteration; scan output: acc after each step
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["acc_in", "x"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["step_out"])],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("step_out", TensorProto.FLOAT, [2])])
    trips = numpy_helper.from_array(np.array(4, np.int64), "trips")
    cond = numpy_helper.from_array(np.array(True), "cond")
    node = helper.make_node("Loop", ["trips", "cond", "acc0"], ["acc", "steps"], body=body)
    model = model_of([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
                              helper.make_tensor_value_info("acc0", TensorProto.FLOAT, [2])],
                     [helper.make_tensor_value_info("acc", TensorProto.FLOAT, [2]),
                      helper.make_tensor_value_info("steps", TensorProto.FLOAT, [4, 2])], [trips, cond])
    x, acc0 = rng.standard_normal(2).astype("float32"), rng.standard_normal(2).astype("float32")
    acc, steps = run(model, x, acc0)
    # repeated float32 adds against one multiply: a few ulps of the largest term apart (atol for
    # sums that cancel towards 0)
    np.testing.assert_allclose(steps, acc0 + x * np.arange(1, 5, dtype="float32")[:, None], rtol=1e-6,
                               atol=1e-6 * float(np.abs(acc0).max() + 4 * np.abs(x).max()))
    np.testing.assert_allclose(acc, steps[-1])


def test_scan_is_unrolled_over_the_static_sequence(rng):
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Mul", ["s_out", "x_t"], ["y_t"])],
        "body", [helper.make_tensor_value_info("s_in", TensorProto.FLOAT, [3]),
                 helper.make_tensor_value_info("x_t", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("y_t", TensorProto.FLOAT, [3])])
    node = helper.make_node("Scan", ["s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1,
                            scan_input_directions=[1])
    model = model_of([node], [helper.make_tensor_value_info("s0", TensorProto.FLOAT, [3]),
                              helper.make_tensor_value_info("xs", TensorProto.FLOAT, [5, 3])],
                     [helper.make_tensor_value_info("s", TensorProto.FLOAT, [3]),
                      helper.make_tensor_value_info("ys", TensorProto.FLOAT, [5, 3])])
    s0, xs = rng.standard_normal(3).astype("float32"), rng.standard_normal((5, 3)).astype("float32")
    state, expected = s0.copy(), []
    for x_t in xs[::-1]:  # scan_input_directions=1 reads the sequence backwards
        state = state + x_t
        expected.append(state * x_t)
    s, ys = run(model, s0, xs)
    np.testing.assert_allclose(s, state, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ys, np.stack(expected), rtol=1e-5, atol=1e-6)


def test_a_transposed_constant_feeds_matmul_correctly(rng):
    # Transpose of an initializer folds at import to a constant; its layout must not leak to kernels
    w = rng.standard_normal((4, 6)).astype("float32")
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]), helper.make_node("MatMul", ["x", "wt"], ["y"])]
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 6])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
                     [numpy_helper.from_array(w, "w")])
    x = rng.standard_normal((3, 6)).astype("float32")
    np.testing.assert_allclose(run(model, x), x @ w.T, rtol=1e-5, atol=1e-5)


def test_training_optimizer_domain_converts(rng):
    node = helper.make_node("Momentum", ["R", "T", "X", "G", "V"], ["X_new", "V_new"],
                            domain="ai.onnx.preview.training", alpha=0.9, beta=0.5, norm_coefficient=0.01,
                            mode="nesterov")
    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in ("X", "G", "V")]
    model = model_of([node], [helper.make_tensor_value_info("R", TensorProto.FLOAT, []),
                              helper.make_tensor_value_info("T", TensorProto.INT64, [])] + info,
                     [helper.make_tensor_value_info("X_new", TensorProto.FLOAT, [3]),
                      helper.make_tensor_value_info("V_new", TensorProto.FLOAT, [3])],
                     extra_opsets=[("ai.onnx.preview.training", 1)])
    r, x, g, v = np.float32(0.1), *(rng.standard_normal(3).astype("float32") for _ in range(3))
    for t in (0, 3):
        g_reg = 0.01 * x + g
        v_new = 0.9 * v + (0.5 if t > 0 else 1.0) * g_reg
        x_new = x - r * (g_reg + 0.9 * v_new)
        got = run(model, np.array(r), np.array(t, np.int64), x, g, v)
        np.testing.assert_allclose(got[0], x_new, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[1], v_new, rtol=1e-5, atol=1e-6)


def test_ops_with_function_bodies_are_recognised():
    from refcomp.frontend.onnx.functions import has_function_body

    assert has_function_body("Attention") and has_function_body("HannWindow")
    assert not has_function_body("Unique") and not has_function_body("NoSuchOp")
