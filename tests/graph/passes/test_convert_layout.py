"""convert_layout: convolution chains in NCHW{L}c compute what the NCHW graph computes.

The pass is checked on the operators' numpy references (fast: hypothesis draws many shapes and
lane counts, channel counts not a multiple of L among them), then compiled through graph.build
with and without it against numpy; and it declines where it does not pay."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import refcomp
from refcomp.testing import evaluate_graph
from refcomp.ast import PrimFunc
from refcomp.ast.graph import Call, Constant, Op
from refcomp.graph import BlockBuilder, Var, op, pipeline, tensor
from refcomp.graph.op.nn import _np_conv, _np_pool
from refcomp.graph.passes.convert_layout import convert_layout, native_float_lanes


def _chain(rng, n, c, mid, h, w, depthwise, pool, tail_conv=True):
    """conv 3x3 -> + bias -> relu -> (pool) -> conv (depthwise or 1x1) * scale + residual -> clip,
    then global average pooling and a flatten (the edge back to NCHW), with its numpy reference."""
    x = Var("x", tensor((n, c, h, w)))
    w1 = rng.standard_normal((mid, c, 3, 3)).astype(np.float32)
    b1 = rng.standard_normal((1, mid, 1, 1)).astype(np.float32)
    w2 = rng.standard_normal((mid, 1, 3, 3) if depthwise else (mid, mid, 1, 1)).astype(np.float32)
    scale = rng.standard_normal((mid, 1, 1)).astype(np.float32)
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(op.relu(op.add(op.conv2d(x, Constant(w1), padding=1), Constant(b1))))
            if pool == "max":
                y = bb.emit(op.max_pool2d(y, 3, strides=2, padding=1))
            elif pool == "avg":
                y = bb.emit(op.avg_pool2d(y, 2, strides=1, padding=(0, 0, 1, 1)))
            z = y
            if tail_conv:
                z = bb.emit(op.conv2d(y, Constant(w2), padding=1 if depthwise else 0, groups=mid if depthwise else 1))
                z = bb.emit(op.clip(op.add(op.multiply(z, Constant(scale)), y), -1.0, 6.0))
            side = bb.emit_output(z)
            g = bb.emit(op.global_avg_pool(z))
            out = bb.emit_output(op.reshape(g, (n, mid)))
        bb.emit_func_output(refcomp.graph.Tuple((out, side)))

    def reference(xv):
        f = np.float64
        y = np.maximum(_np_conv(xv.astype(f), w1.astype(f), (1, 1), (1, 1, 1, 1), (1, 1)) + b1, 0)
        if pool == "max":
            y = _np_pool(True)(y, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1))
        elif pool == "avg":
            y = _np_pool(False)(y, (2, 2), (1, 1), (0, 0, 1, 1), (1, 1))
        z = y
        if tail_conv:
            z = _np_conv(y, w2.astype(f), (1, 1), (1,) * 4 if depthwise else (0,) * 4, (1, 1), mid if depthwise else 1)
            z = np.clip(z * scale + y, -1.0, 6.0)
        return z.mean(axis=(2, 3)).reshape(n, mid), z

    return bb.get(), reference


def _ops(mod) -> list[str]:
    from refcomp.ast import post_order_visit

    found = []
    post_order_visit(mod["main"], lambda e: found.append(e.op.name) if isinstance(e, Call)
                     and isinstance(e.op, Op) else None)
    return found


def _converted_in(mod) -> bool:
    """Whether main converts its parameter x to the blocked layout."""
    from refcomp.ast import post_order_visit

    found = []
    post_order_visit(mod["main"], lambda e: found.append(e) if isinstance(e, Call) and isinstance(e.op, Op)
                     and e.op.name == "layout_transform" and e.args[0] is mod["main"].params[0] else None)
    return bool(found)


def _close(got, want, rtol=1e-4):
    for g, w_ in zip(got, want):
        scale = float(np.abs(w_).max()) or 1.0
        np.testing.assert_allclose(g, w_, rtol=rtol, atol=rtol * scale)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 2), c=st.sampled_from([1, 2, 3, 5, 8, 13]), mid=st.sampled_from([3, 4, 7, 8, 11, 16, 17]),
       h=st.integers(1, 9), w=st.integers(1, 9), lanes=st.sampled_from([4, 8, 16]), depthwise=st.booleans(),
       pool=st.sampled_from([None, "max", "avg"]), seed=st.integers(0, 2 ** 32 - 1))
def test_converted_graph_matches_unconverted_and_numpy(n, c, mid, h, w, lanes, depthwise, pool, seed):
    rng = np.random.default_rng(seed)
    mod, reference = _chain(rng, n, c, mid, h, w, depthwise, pool)
    converted = convert_layout(refcomp.graph.passes.normalize(mod), lanes=lanes, min_convs=1)
    if mid >= lanes:
        assert "conv2d_nchwc" in _ops(converted) and "conv2d" not in _ops(converted)
        # in once, except into a stem of few channels (it reads x as it is), back at each edge
        assert _converted_in(converted) == (2 * c >= lanes)
        assert _ops(converted).count("layout_transform") >= 2
    else:  # too few channels to fill a vector: kept NCHW
        assert "layout_transform" not in _ops(converted)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    plain = evaluate_graph(refcomp.graph.passes.normalize(mod)["main"], x)
    blocked = evaluate_graph(converted["main"], x)
    _close(blocked, plain)
    _close(blocked, reference(x))


@pytest.mark.parametrize("n,c,mid,h,w,depthwise,pool", [
    (2, 9, 17, 7, 5, False, "max"),    # channels not a multiple of L, odd sizes
    (1, 3, 32, 5, 5, False, None),     # a stem of 3 channels reads x as it is, writes blocked
    (1, 8, 32, 9, 11, False, None),
    (2, 11, 24, 6, 6, False, "avg"),
    (2, 11, 24, 6, 6, True, "avg"),    # depthwise
    (1, 16, 16, 3, 7, True, "max"),
])
def test_compiled_with_and_without_layouts_matches_numpy(rng, n, c, mid, h, w, depthwise, pool):
    mod, reference = _chain(rng, n, c, mid, h, w, depthwise, pool)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    want = reference(x)
    lanes = native_float_lanes()
    takes = mid >= lanes
    for layouts in (True, False, "auto"):
        ex = refcomp.graph.build(mod, target="c", blas=False, layouts=layouts)
        got = refcomp.runtime.VirtualMachine(ex)["main"](x)
        _close([np.asarray(g) for g in got], want, rtol=1e-3)
        names = [f.name for f in ex.module.functions.values() if isinstance(f, PrimFunc)]
        # "auto" (the default) converts the chains with a depthwise convolution only
        expected = takes and (layouts is True or (layouts == "auto" and depthwise))
        assert any("nchwc" in name for name in names) == expected, (layouts, names)


def test_blocked_convolution_gets_the_channel_vector_tile(rng):
    """The blocked kernel's default schedule: a register tile ("local"), the lanes vectorized,
    no transposed write-back and no copy of the input planes."""
    mod, _ = _chain(rng, 2, 16, 32, 8, 8, False, None)
    ex = refcomp.graph.build(mod, target="c", blas=False, layouts=True)
    convs = [f for f in ex.module.functions.values() if isinstance(f, PrimFunc) and "conv2d_nchwc" in f.name]
    assert convs
    for func in convs:
        text = func.script()
        assert 'scope="local"' in text and "T.vectorized" in text and "T.parallel" in text
        assert "transpose" not in text and "_global" not in text


def test_declines_a_single_convolution_and_few_channels(rng):
    lanes = 8
    one, _ = _chain(rng, 1, 3, 16, 5, 5, False, None, tail_conv=False)
    assert "layout_transform" not in _ops(convert_layout(refcomp.graph.passes.normalize(one), lanes=lanes))
    narrow, _ = _chain(rng, 1, 8, 4, 5, 5, False, "max")
    assert "layout_transform" not in _ops(convert_layout(refcomp.graph.passes.normalize(narrow), lanes=lanes))
    stem, _ = _chain(rng, 1, 3, 16, 5, 5, False, "max")  # the 3-channel stem joins, reading x as it is
    converted = convert_layout(refcomp.graph.passes.normalize(stem), lanes=lanes)
    assert _ops(converted).count("conv2d_nchwc") == 2 and not _converted_in(converted)
    wide, _ = _chain(rng, 1, 8, 16, 5, 5, False, "max")
    assert "conv2d_nchwc" in _ops(convert_layout(refcomp.graph.passes.normalize(wide), lanes=lanes))


def test_layouts_switch(rng):
    dense, _ = _chain(rng, 1, 8, 32, 5, 5, False, None)
    separable, _ = _chain(rng, 1, 8, 32, 5, 5, True, None)
    assert "convert_layout" not in [name for name, _ in pipeline.default_pipeline(layouts=False)]

    def blocked(mod, **options):
        return any("nchwc" in name for name in pipeline.optimize(mod, schedule=False, **options).functions)

    assert not blocked(dense) and blocked(separable)  # the default, "auto": depthwise chains only
    assert blocked(dense, layouts=True) and blocked(separable, layouts=True)
    assert not blocked(dense, layouts=False) and not blocked(separable, layouts=False)
    from refcomp.errors import BuildError

    with pytest.raises(BuildError, match="layouts must be True, False or 'auto'"):
        refcomp.graph.build(dense, layouts="always")


def test_layout_transform_rejects_other_layouts():
    from refcomp.errors import IRError

    x = Var("x", tensor((1, 4, 2, 2)))
    bb = BlockBuilder()
    with pytest.raises(IRError, match="NCHW<L>c"):
        with bb.function("main", [x]):
            with bb.dataflow():
                bb.emit(op.layout_transform(x, src="NCHW", dst="NHWC"))


def test_depthwise_regions_only(rng):
    dense, _ = _chain(rng, 2, 8, 24, 6, 7, False, None)
    assert "layout_transform" not in _ops(convert_layout(refcomp.graph.passes.normalize(dense), lanes=8,
                                                         regions="depthwise"))
    mod, reference = _chain(rng, 2, 8, 24, 6, 7, True, None)
    converted = convert_layout(refcomp.graph.passes.normalize(mod), lanes=8, regions="depthwise")
    assert "conv2d_nchwc" in _ops(converted)
    x = rng.standard_normal((2, 8, 6, 7)).astype(np.float32)
    _close(evaluate_graph(converted["main"], x), reference(x))


@pytest.mark.parametrize("build, message", [
    (lambda x, w: op.layout_transform(x, src="NCHW8c", dst="NCHW", channels=17), "channels 17 is not in 1..16"),
    (lambda x, w: op.layout_transform(x, src="NCHW4c", dst="NCHW"), "4 lanes last"),
    (lambda x, w: op.layout_transform(x, src="NCHW8c", dst="NCHW8c"), "between NCHW and NCHW<L>c"),
    (lambda x, w: op.conv2d_nchwc(x, w), "same constant lane count"),
])
def test_blocked_ops_reject_bad_input_with_a_named_error(build, message):
    from refcomp.errors import IRError

    x = Var("x", tensor((1, 2, 3, 3, 8)))
    w = Var("w", tensor((1, 16, 3, 3, 4)))
    bb = BlockBuilder()
    with pytest.raises(IRError, match=message):
        with bb.function("main", [x, w]):
            with bb.dataflow():
                bb.emit(build(x, w))


@pytest.mark.parametrize("lanes", [4, 8])
@pytest.mark.parametrize("depthwise", [False, True])
def test_compiled_at_other_lane_counts(rng, lanes, depthwise):
    """Blocks narrower than this CPU's vector (the AVX2 width among them) compile and agree with
    numpy: the pass is run by hand with `lanes`, then the blocked module is built."""
    mod, reference = _chain(rng, 2, 6, 13, 5, 7, depthwise, "max")
    converted = convert_layout(refcomp.graph.passes.normalize(mod), lanes=lanes)
    assert "conv2d_nchwc" in _ops(converted)
    ex = refcomp.graph.build(converted, target="c", blas=False, layouts=False)
    x = rng.standard_normal((2, 6, 5, 7)).astype(np.float32)
    got = refcomp.runtime.VirtualMachine(ex)["main"](x)
    _close([np.asarray(g) for g in got], reference(x), rtol=1e-3)


def test_blocked_convolution_of_plain_data_checks_its_operands():
    """conv2d_nchwc over NCHW data (a stem): dense only, the weights' input channels the data's."""
    from refcomp.errors import IRError, ShapeError
    from refcomp.graph.op.layout import conv2d_nchwc

    x = Var("x", tensor((1, 3, 8, 8)))
    cases = [(Var("w", tensor((2, 3, 3, 3, 8))), {"depthwise": True}, IRError, "5-d"),
             (Var("w", tensor((2, 4, 3, 3, 8))), {}, ShapeError, "NCHW data's channels"),
             (Var("w", tensor((2, 3, 3, 3))), {}, IRError, "weight 5-d")]
    for w, attrs, error, words in cases:
        bb = BlockBuilder()
        with pytest.raises(error, match=words):
            with bb.function("f", [x, w]):
                bb.emit(conv2d_nchwc(x, w, padding=1, **attrs))
    bb = BlockBuilder()
    w = Var("w", tensor((2, 3, 3, 3, 8)))
    with bb.function("f", [x, w]):
        y = bb.emit(conv2d_nchwc(x, w, strides=2, padding=1))
        bb.emit_func_output(y)
    assert tuple(int(d.value) for d in y.struct_info.shape) == (1, 2, 4, 4, 8)
