"""Shape operands read at run time: one compiled model, many operand values, checked against numpy."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import refcomp
from refcomp.errors import ArgumentError, RefcompError
from refcomp.frontend import from_onnx

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

SHAPE = (2, 3, 4)


def _build(node, inputs, outputs, opset=18):
    graph = helper.make_graph([node], "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return refcomp.runtime.VirtualMachine(refcomp.graph.build(from_onnx(model), target="c"))["main"]


def _tensor(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


@pytest.fixture(scope="module", params=[0, 1], ids=["no_keepdims", "keepdims"])
def reduce_sum(request):
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=request.param)
    run = _build(node, [_tensor("x", TensorProto.FLOAT, SHAPE), _tensor("axes", TensorProto.INT64, [2])],
                 [_tensor("y", TensorProto.FLOAT, None)])
    return run, bool(request.param)


@settings(max_examples=12, deadline=None)
@given(pair=st.sampled_from([(a, b) for a in range(-3, 3) for b in range(-3, 3) if a % 3 != b % 3]),
       seed=st.integers(0, 2 ** 31 - 1))
def test_reduce_sum_axes_at_run_time(reduce_sum, pair, seed):
    run, keepdims = reduce_sum
    x = np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32)
    axes = np.asarray(pair, np.int64)
    got = run(x, axes)
    want = x.sum(axis=tuple(int(a) for a in axes), keepdims=keepdims)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_reduce_axes_out_of_range_or_repeated_are_refused(reduce_sum):
    run, _ = reduce_sum
    x = np.ones(SHAPE, np.float32)
    for bad in ([0, 3], [1, 1], [-4, 0]):
        with pytest.raises(ArgumentError):
            run(x, np.asarray(bad, np.int64))


@pytest.fixture(scope="module")
def reshape():
    node = helper.make_node("Reshape", ["x", "shape"], ["y"])
    return _build(node, [_tensor("x", TensorProto.FLOAT, SHAPE), _tensor("shape", TensorProto.INT64, [3])],
                  [_tensor("y", TensorProto.FLOAT, None)])


@pytest.mark.parametrize("target", [(4, 3, 2), (0, -1, 2), (-1, 1, 6), (24, 1, 1), (2, 0, 4)])
def test_reshape_target_at_run_time(reshape, target):
    x = np.random.default_rng(len(target) + sum(target)).standard_normal(SHAPE).astype(np.float32)
    want_shape = [SHAPE[k] if t == 0 else t for k, t in enumerate(target)]
    if -1 in want_shape:
        want_shape[want_shape.index(-1)] = x.size // -int(np.prod(want_shape))
    np.testing.assert_array_equal(reshape(x, np.asarray(target, np.int64)), x.reshape(want_shape))


def test_reshape_to_a_wrong_element_count_is_refused(reshape):
    with pytest.raises(RefcompError):
        reshape(np.ones(SHAPE, np.float32), np.asarray([5, 5, 1], np.int64))


@pytest.fixture(scope="module")
def topk():
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1)
    return _build(node, [_tensor("x", TensorProto.FLOAT, SHAPE), _tensor("k", TensorProto.INT64, [1])],
                  [_tensor("v", TensorProto.FLOAT, None), _tensor("i", TensorProto.INT64, None)])


@settings(max_examples=8, deadline=None)
@given(k=st.integers(0, 3), seed=st.integers(0, 2 ** 31 - 1))
def test_topk_k_at_run_time(topk, k, seed):
    x = np.random.default_rng(seed).permutation(24).reshape(SHAPE).astype(np.float32)
    values, indices = topk(x, np.asarray([k], np.int64))
    order = np.argsort(-x, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(indices, order)
    np.testing.assert_array_equal(values, np.take_along_axis(x, order, axis=1))


@pytest.fixture(scope="module")
def pad():
    node = helper.make_node("Pad", ["x", "pads", "value"], ["y"], mode="constant")
    return _build(node, [_tensor("x", TensorProto.FLOAT, SHAPE), _tensor("pads", TensorProto.INT64, [6]),
                         _tensor("value", TensorProto.FLOAT, [])], [_tensor("y", TensorProto.FLOAT, None)])


@settings(max_examples=10, deadline=None)
@given(pads=st.lists(st.integers(-1, 2), min_size=6, max_size=6), seed=st.integers(0, 2 ** 31 - 1))
def test_constant_pad_at_run_time(pad, pads, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(SHAPE).astype(np.float32)
    fill = np.float32(rng.standard_normal())
    got = pad(x, np.asarray(pads, np.int64), np.asarray(fill))
    cropped = x[tuple(slice(max(-b, 0), d - max(-e, 0)) for b, e, d in zip(pads[:3], pads[3:], SHAPE))]
    want = np.pad(cropped, [(max(b, 0), max(e, 0)) for b, e in zip(pads[:3], pads[3:])], constant_values=fill)
    np.testing.assert_array_equal(got, want)


def test_tensor_to_shape_binds_size_vars_in_the_vm():
    from refcomp.ast import SizeVar
    from refcomp.ast.graph import Var
    from refcomp.ast.graph_struct_info import ShapeStructInfo, TensorStructInfo
    from refcomp.graph import BlockBuilder, op

    n = SizeVar("n", "int64")
    t = Var("t", TensorStructInfo((1,), "int64"))
    bb = BlockBuilder()
    with bb.function("main", [t]):
        with bb.dataflow():
            shape = bb.emit(op.tensor_to_shape(t))
            bb.match_cast(shape, ShapeStructInfo((n,)))
            out = bb.emit_output(bb.emit(op.full((n,), 2.0, "float32")))
        bb.emit_func_output(out)
    run = refcomp.runtime.VirtualMachine(refcomp.graph.build(bb.get(), target="c"))["main"]
    np.testing.assert_array_equal(run(np.asarray([5], np.int64)), np.full(5, 2.0, np.float32))
    with pytest.raises(ArgumentError):
        run(np.asarray([-1], np.int64))


@pytest.fixture(scope="module")
def slice_():
    node = helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"])
    ints = [_tensor(n, TensorProto.INT64, [1]) for n in ("starts", "ends", "axes", "steps")]
    return _build(node, [_tensor("x", TensorProto.FLOAT, SHAPE)] + ints, [_tensor("y", TensorProto.FLOAT, None)])


@settings(max_examples=12, deadline=None)
@given(axis=st.integers(-3, 2), start=st.integers(-6, 6), end=st.integers(-6, 6),
       step=st.sampled_from([-3, -2, -1, 1, 2, 3]), seed=st.integers(0, 2 ** 31 - 1))
def test_slice_bounds_at_run_time(slice_, axis, start, end, step, seed):
    x = np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32)
    got = slice_(x, *(np.asarray([v], np.int64) for v in (start, end, axis, step)))
    index = [slice(None)] * 3
    index[axis] = slice(start, end, step)
    np.testing.assert_array_equal(got, x[tuple(index)])


@pytest.fixture(scope="module")
def compress():
    node = helper.make_node("Compress", ["x", "c"], ["y"], axis=2)
    return _build(node, [_tensor("x", TensorProto.FLOAT, SHAPE), _tensor("c", TensorProto.BOOL, [4])],
                  [_tensor("y", TensorProto.FLOAT, None)])


@settings(max_examples=8, deadline=None)
@given(keep=st.lists(st.booleans(), min_size=4, max_size=4), seed=st.integers(0, 2 ** 31 - 1))
def test_compress_condition_at_run_time(compress, keep, seed):
    x = np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32)
    np.testing.assert_array_equal(compress(x, np.asarray(keep)), np.compress(keep, x, axis=2))


def test_constant_of_shape_at_run_time():
    value = helper.make_tensor("v", TensorProto.FLOAT, [1], [1.5])
    node = helper.make_node("ConstantOfShape", ["s"], ["y"], value=value)
    run = _build(node, [_tensor("s", TensorProto.INT64, [2])], [_tensor("y", TensorProto.FLOAT, None)])
    for shape in ([2, 3], [0, 4], [1, 1]):
        np.testing.assert_array_equal(run(np.asarray(shape, np.int64)), np.full(shape, 1.5, np.float32))
    with pytest.raises(ArgumentError):
        run(np.asarray([-1, 2], np.int64))


def _squeeze_model(axes):
    """y = Squeeze(x) on x of shape (n, 1, 3) (n symbolic), with axes (an initializer) or without."""
    inits = [] if axes is None else [helper.make_tensor("axes", TensorProto.INT64, [len(axes)], axes)]
    node = helper.make_node("Squeeze", ["x"] + ([] if axes is None else ["axes"]), ["y"])
    graph = helper.make_graph([node], "g", [_tensor("x", TensorProto.FLOAT, ["n", 1, 3])],
                              [_tensor("y", TensorProto.FLOAT, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return refcomp.runtime.VirtualMachine(refcomp.graph.build(from_onnx(model), target="c"))["main"]


@pytest.mark.parametrize("seed", range(3))
def test_squeeze_without_axes_keeps_symbolic_dims_checked_at_run_time(seed):
    run = _squeeze_model(None)
    rng = np.random.default_rng(seed)
    for n in (2, 5):
        x = rng.standard_normal((n, 1, 3)).astype(np.float32)
        np.testing.assert_array_equal(run(x), x.reshape(n, 3))
    with pytest.raises(ArgumentError, match="is_not_1"):  # n = 1 would change the rank fixed at import
        run(rng.standard_normal((1, 1, 3)).astype(np.float32))


@pytest.mark.parametrize("seed", range(3))
def test_squeeze_of_a_symbolic_dim_is_checked_at_run_time(seed):
    run = _squeeze_model([0, 1])
    x = np.random.default_rng(seed).standard_normal((1, 1, 3)).astype(np.float32)
    np.testing.assert_array_equal(run(x), x.reshape(3))
    with pytest.raises(ArgumentError):
        run(np.ones((2, 1, 3), np.float32))


def _col2im_reference(x, image, block):
    """numpy Col2Im, stride 1, no pads or dilations: block column (c, offset) at position g adds to
    pixel position(g) + offset."""
    n, ck, _ = x.shape
    c = ck // int(np.prod(block))
    grid = [i - b + 1 for i, b in zip(image, block)]
    out = np.zeros((n, c, *image), x.dtype)
    cols = x.reshape(n, c, int(np.prod(block)), int(np.prod(grid)))
    for k, offset in enumerate(np.ndindex(*block)):
        for g, pos in enumerate(np.ndindex(*grid)):
            out[(slice(None), slice(None), *[p + o for p, o in zip(pos, offset)])] += cols[:, :, k, g]
    return out


@pytest.fixture(scope="module")
def col2im():
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"])
    return _build(node, [_tensor("x", TensorProto.FLOAT, [2, 4, 9]), _tensor("image", TensorProto.INT64, [2]),
                         _tensor("block", TensorProto.INT64, [2])], [_tensor("y", TensorProto.FLOAT, None)])


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("image,block", [((4, 4), (2, 2)), ((3, 4), (1, 2)), ((3, 3), (1, 1)), ((6, 3), (4, 1))])
def test_col2im_image_and_block_shapes_at_run_time(col2im, image, block, seed):
    x = np.random.default_rng(seed).standard_normal((2, 4, 9)).astype(np.float32)
    got = col2im(x, np.asarray(image, np.int64), np.asarray(block, np.int64))
    want = _col2im_reference(x, image, block)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_col2im_with_a_block_count_that_does_not_fit_is_refused(col2im):
    x = np.ones((2, 4, 9), np.float32)
    for image, block in (((5, 5), (2, 2)), ((3, 3), (3, 3)), ((4, 4), (0, 2))):
        with pytest.raises(ArgumentError):
            col2im(x, np.asarray(image, np.int64), np.asarray(block, np.int64))


@pytest.fixture(scope="module")
def max_unpool():
    node = helper.make_node("MaxUnpool", ["x", "i", "shape"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
    return _build(node, [_tensor("x", TensorProto.FLOAT, [1, 2, 2, 2]), _tensor("i", TensorProto.INT64, [1, 2, 2, 2]),
                         _tensor("shape", TensorProto.INT64, [4])], [_tensor("y", TensorProto.FLOAT, None)])


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("shape", [(1, 2, 4, 4), (1, 2, 5, 5), (1, 2, 6, 4)])
def test_max_unpool_output_shape_at_run_time(max_unpool, shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, 2, 2, 2)).astype(np.float32)
    # one position per 2 x 2 window of the 4 x 4 unpooled image, as flat indices into (1, 2, 4, 4)
    rows, cols = np.meshgrid(np.arange(2), np.arange(2), indexing="ij")
    index = np.zeros((1, 2, 2, 2), np.int64)
    for c in range(2):
        pick = rng.integers(0, 2, (2, 2, 2))
        index[0, c] = c * 16 + (2 * rows + pick[0]) * 4 + 2 * cols + pick[1]
    want = np.zeros(shape, np.float32)
    unpooled = np.zeros(32, np.float32)
    unpooled[index.reshape(-1)] = x.reshape(-1)
    want[:, :, :4, :4] = unpooled.reshape(1, 2, 4, 4)
    got = max_unpool(x, index, np.asarray(shape, np.int64))
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_max_unpool_output_shape_smaller_than_unpooled_is_refused(max_unpool):
    x, index = np.ones((1, 2, 2, 2), np.float32), np.zeros((1, 2, 2, 2), np.int64)
    with pytest.raises(ArgumentError):
        max_unpool(x, index, np.asarray((1, 2, 3, 4), np.int64))


def _dropout_model(seed):
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"], seed=seed)
    graph = helper.make_graph([node], "g", [_tensor("x", TensorProto.FLOAT, [3, 4, 5]), _tensor("r", TensorProto.FLOAT, []),
                                            _tensor("t", TensorProto.BOOL, [])],
                              [_tensor("y", TensorProto.FLOAT, None), _tensor("mask", TensorProto.BOOL, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return refcomp.runtime.VirtualMachine(refcomp.graph.build(from_onnx(model), target="c"))["main"]


@pytest.mark.parametrize("seed", [0, 3, 7])
def test_training_dropout_draws_numpy_random_state_of_its_seed(seed):
    run = _dropout_model(seed)
    x = np.random.default_rng(seed + 100).standard_normal((3, 4, 5)).astype(np.float32)
    draws = np.random.RandomState(seed).uniform(0.0, 1.0, (3, 4, 5))
    for ratio in (0.0, 0.25, 0.75):
        r = np.float32(ratio)
        y, mask = run(x, np.asarray(r), np.asarray(True))
        want_mask = draws >= r
        np.testing.assert_array_equal(mask, want_mask)
        np.testing.assert_array_equal(y, want_mask * x * (np.float32(1.0) / (np.float32(1.0) - r)))
        y, mask = run(x, np.asarray(r), np.asarray(False))  # not training: the identity, every mask entry true
        np.testing.assert_array_equal(y, x)
        assert mask.all()
