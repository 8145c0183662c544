"""Convolution chains built by graph.build: each conv kernel (with its fused epilogue) gets the
conv recipe from the default schedule, and the chain computes what numpy computes."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import refcomp
from refcomp.ast import PrimFunc, SizeVar
from refcomp.graph import BlockBuilder, Var, op, tensor
from refcomp.graph.op.nn import _np_conv


def _chain(n, c, size, mid, width):
    x = Var("x", tensor((n, c, size, width)))
    w1, b1 = Var("w1", tensor((mid, c, 3, 3))), Var("b1", tensor((1, mid, 1, 1)))
    w2 = Var("w2", tensor((mid, 1, 3, 3)))
    bb = BlockBuilder()
    with bb.function("main", [x, w1, b1, w2]):
        with bb.dataflow():
            y = bb.emit(op.relu(op.add(op.conv2d(x, w1, padding=1), b1)))
            z = bb.emit(op.conv2d(y, w2, strides=2, padding=1, groups=mid))  # depthwise, stride 2
            out = bb.emit_output(z)
        bb.emit_func_output(out)
    return bb.get()


def _expected(x, w1, b1, w2):
    y = np.maximum(_np_conv(x.astype(np.float64), w1.astype(np.float64), (1, 1), (1, 1, 1, 1), (1, 1)) + b1, 0)
    return _np_conv(y, w2.astype(np.float64), (2, 2), (1, 1, 1, 1), (1, 1), w2.shape[0])


@pytest.mark.parametrize("n,c,size,mid,width", [(2, 3, 9, 8, 16), (1, 5, 7, 6, 11)])
def test_conv_chain_matches_numpy(rng, n, c, size, mid, width):
    mod = _chain(n, c, size, mid, width)
    ex = refcomp.graph.build(mod, target="c", blas=False)
    kernels = [f for f in ex.module.functions.values() if isinstance(f, PrimFunc)]
    # the 3x3 conv's weights are packed for its register tile (the depthwise one reads them in
    # place), or its reduction is short (3 x 3 x 3) and the channel-rows tile reads them in place
    assert c * 9 < 64 or any("_global" in f.script() for f in kernels)
    x = rng.standard_normal((n, c, size, width)).astype(np.float32)
    w1 = rng.standard_normal((mid, c, 3, 3)).astype(np.float32)
    b1 = rng.standard_normal((1, mid, 1, 1)).astype(np.float32)
    w2 = rng.standard_normal((mid, 1, 3, 3)).astype(np.float32)
    got = refcomp.runtime.VirtualMachine(ex)["main"](x, w1, b1, w2)
    np.testing.assert_allclose(got, _expected(x, w1, b1, w2), rtol=1e-4, atol=1e-4)


def test_symbolic_batch_conv_still_scheduled(rng):
    """A symbolic batch leaves the width and channels constant: the conv recipe still applies."""
    batch = SizeVar("batch", "int64")
    x, w = Var("x", tensor((batch, 4, 6, 16))), Var("w", tensor((8, 4, 3, 3)))
    bb = BlockBuilder()
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(op.conv2d(x, w, padding=1)))
        bb.emit_func_output(out)
    ex = refcomp.graph.build(bb.get(), target="c", blas=False)
    for n in (1, 3):
        xv = rng.standard_normal((n, 4, 6, 16)).astype(np.float32)
        wv = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
        got = refcomp.runtime.VirtualMachine(ex)["main"](xv, wv)
        np.testing.assert_allclose(got, _np_conv(xv, wv, (1, 1), (1, 1, 1, 1), (1, 1)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("c,size,out", [(3, 9, 16), (5, 7, 8)])
def test_residual_block_with_two_convolutions_in_one_kernel(rng, c, size, out):
    """A downsampling residual block: relu(conv3x3(x, stride 2) + conv1x1(x, stride 2)).  Fused into
    one kernel with two convolution blocks, both get the conv recipe (narrow strided outputs: the
    channel-vector tile, accumulated in a channel-blocked copy); a symbolic batch."""
    batch = SizeVar("batch", "int64")
    x = Var("x", tensor((batch, c, size, size)))
    w1, w2 = Var("w1", tensor((out, c, 3, 3))), Var("w2", tensor((out, c, 1, 1)))
    bb = BlockBuilder()
    with bb.function("main", [x, w1, w2]):
        with bb.dataflow():
            main = op.conv2d(x, w1, strides=2, padding=1)
            shortcut = op.conv2d(x, w2, strides=2)
            result = bb.emit_output(bb.emit(op.relu(op.add(main, shortcut))))
        bb.emit_func_output(result)
    ex = refcomp.graph.build(bb.get(), target="c", blas=False)
    (fused,) = [f for name, f in ex.module.functions.items() if isinstance(f, PrimFunc) and name.count("conv2d") == 2]
    assert fused.script().count("T.vectorized") >= 2  # both convolutions scheduled
    # the sum and relu folded into the second convolution's write-back: one of the two outputs
    # is an intermediate buffer, the other goes straight to the result
    out_shape = [str(d) for d in fused.buffers[-1].shape]
    intermediates = [b for b in _allocations(fused) if b.scope == "global" and [str(d) for d in b.shape] == out_shape]
    assert len(intermediates) == 1
    for n in (1, 2):
        xv = rng.standard_normal((n, c, size, size)).astype(np.float32)
        w1v = rng.standard_normal((out, c, 3, 3)).astype(np.float32)
        w2v = rng.standard_normal((out, c, 1, 1)).astype(np.float32)
        expected = np.maximum(_np_conv(xv, w1v, (2, 2), (1, 1, 1, 1), (1, 1))
                              + _np_conv(xv, w2v, (2, 2), (0, 0, 0, 0), (1, 1)), 0)
        got = refcomp.runtime.VirtualMachine(ex)["main"](xv, w1v, w2v)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def _allocations(func):
    from refcomp.ast import Block
    from refcomp.loops.primitives.tree import walk

    return [b for s in walk(func.body) if isinstance(s, Block) for b in s.alloc_buffers]


@pytest.mark.parametrize("c,size,width,k,stride", [(3, 9, 16, 3, 1), (4, 7, 23, 5, 2), (1, 1, 1, 3, 1)])
def test_padded_copy_is_parallel_over_planes_and_vectorized_per_row(rng, c, size, width, k, stride):
    """The padded input of a depthwise conv kernel: made one plane at a time inside the
    convolution's parallel channel loop (the row tile: one parallel region in all), or else its
    image planes fused and parallel; each row one vector loop (the boundary tests per row, not
    per element of a fused index)."""
    from refcomp.ast import For
    from refcomp.loops.primitives.tree import walk

    x, w = Var("x", tensor((2, c, size, width))), Var("w", tensor((c, 1, k, k)))
    bb = BlockBuilder()
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(op.conv2d(x, w, strides=stride, padding=k // 2, groups=c))
        bb.emit_func_output(out)
    ex = refcomp.graph.build(bb.get(), target="c", blas=False)
    (kernel,) = [f for f in ex.module.functions.values() if isinstance(f, PrimFunc)]
    text = kernel.script()
    assert 'T.block("pad")' in text
    pad_loops = [s for s in walk(kernel.body) if isinstance(s, For) and 'T.block("pad")' in str(s)]
    kinds = [s.kind for s in pad_loops]
    assert "parallel" in kinds and kinds[-1] == "vectorized"
    if width % 4 == 0:  # the depthwise row tile: the copy per plane, under the conv's parallel loop
        parallel = [s for s in walk(kernel.body) if isinstance(s, For) and s.kind == "parallel"]
        assert len(parallel) == 1 and str(parallel[0]).count("T.block(") >= 2
        # a small plane: one per thread on the stack (compaction keeps the plane a step writes)
        pad = next(a for a in _allocations(kernel) if a.name == "pad")
        assert pad.scope == "local"
    xv = rng.standard_normal((2, c, size, width)).astype(np.float32)
    wv = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    got = refcomp.runtime.VirtualMachine(ex)["main"](xv, wv)
    expected = _np_conv(xv.astype(np.float64), wv.astype(np.float64), (stride,) * 2, (k // 2,) * 4, (1, 1), c)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("symbolic", [False, True])
@pytest.mark.parametrize("groups,o", [(1, 32), (8, 8)])
def test_epilogue_is_applied_in_the_register_tile_write_back(rng, symbolic, groups, o):
    """conv + bias + relu6 on the channel-vector or depthwise-row tile: the epilogue is folded
    into the stage that writes the tile back (no conv output buffer remains), also with a
    symbolic batch; the numbers are numpy's."""
    batch = SizeVar("batch", "int64") if symbolic else 2
    x, w = Var("x", tensor((batch, 8, 7, 16))), Var("w", tensor((o, 8 // groups, 3, 3)))
    b = Var("b", tensor((1, o, 1, 1)))
    bb = BlockBuilder()
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            y = bb.emit(op.add(op.conv2d(x, w, padding=1, groups=groups), b))
            out = bb.emit_output(op.clip(y, 0.0, 6.0))
        bb.emit_func_output(out)
    ex = refcomp.graph.build(bb.get(), target="c", blas=False)
    (kernel,) = [f for f in ex.module.functions.values() if isinstance(f, PrimFunc)]
    from refcomp.ast import Block
    from refcomp.loops.primitives.tree import walk

    allocated = [buf for s in walk(kernel.body) if isinstance(s, Block) for buf in s.alloc_buffers]
    assert any(buf.scope == "local" for buf in allocated)
    # the padded input, the register tile and the packed weights: no conv output between stages
    assert all(buf.name == "pad" or buf.name.endswith(("_local", "_global")) for buf in allocated)
    xv = rng.standard_normal((2, 8, 7, 16)).astype(np.float32)
    wv = rng.standard_normal((o, 8 // groups, 3, 3)).astype(np.float32)
    bv = rng.standard_normal((1, o, 1, 1)).astype(np.float32)
    got = refcomp.runtime.VirtualMachine(ex)["main"](xv, wv, bv)
    expected = np.clip(_np_conv(xv.astype(np.float64), wv.astype(np.float64), (1, 1), (1,) * 4, (1, 1), groups) + bv,
                       0, 6)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("c,h,w,o,stride,residual", [
    (8, 7, 16, 32, 1, False), (5, 9, 13, 16, 1, True), (3, 11, 23, 16, 2, False),
    (16, 6, 7, 48, 1, True), (4, 5, 1, 16, 1, False), (3, 12, 96, 16, 2, False),
    (64, 3, 3, 32, 1, True), (80, 2, 5, 48, 2, False),
])
def test_channel_vector_write_back_runs_on_vectors(rng, c, h, w, o, stride, residual):
    """conv + bias (+ residual) + clip on the channel-vector tile: the write-back, with the
    epilogue folded in, stores vectors of output columns where a vector applies (always for 16
    columns); odd, prime, single-column and stride-2 outputs match numpy."""
    oh, ow = (h + 2 - 3) // stride + 1, (w + 2 - 3) // stride + 1
    ex, kernel = _conv_bias_clip(c, h, w, o, 3, stride, 1, (oh, ow) if residual else None)
    from refcomp.ast import BufferStore, For
    from refcomp.loops.primitives.tree import walk

    out_buffer = kernel.params[-1]
    vector_stores = [s for loop in walk(kernel.body) if isinstance(loop, For) and loop.kind == "vectorized"
                     for s in walk(loop.body) if isinstance(s, BufferStore) and s.buffer is out_buffer]
    if w == 16:
        assert vector_stores
    values = [rng.standard_normal((2, c, h, w)), rng.standard_normal((o, c, 3, 3)), rng.standard_normal((1, o, 1, 1))]
    if residual:
        values.append(rng.standard_normal((2, o, oh, ow)))
    values = [v.astype(np.float32) for v in values]
    got = refcomp.runtime.VirtualMachine(ex)["main"](*values)
    expected = _np_conv(values[0].astype(np.float64), values[1].astype(np.float64), (stride,) * 2, (1,) * 4, (1, 1))
    expected = expected + values[2] + (values[3] if residual else 0)
    np.testing.assert_allclose(got, np.clip(expected, 0, 6), rtol=1e-4, atol=1e-4)


def _conv_bias_clip(c, h, w, o, k, stride, padding, residual_hw):
    """(executable, its one kernel) of clip(conv2d(x, w) + b (+ r), 0, 6) at batch 2; residual_hw:
    the residual's spatial shape, or None for none."""
    x, wt, b = Var("x", tensor((2, c, h, w))), Var("w", tensor((o, c, k, k))), Var("b", tensor((1, o, 1, 1)))
    params = [x, wt, b] + ([Var("r", tensor((2, o) + tuple(residual_hw)))] if residual_hw else [])
    bb = BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            y = op.add(op.conv2d(x, wt, strides=stride, padding=padding), b)
            if residual_hw:
                y = op.add(y, params[3])
            out = bb.emit_output(op.clip(y, 0.0, 6.0))
        bb.emit_func_output(out)
    ex = refcomp.graph.build(bb.get(), target="c", blas=False)
    (kernel,) = [f for f in ex.module.functions.values() if isinstance(f, PrimFunc)]
    return ex, kernel


@pytest.mark.parametrize("c,h,w,o,residual", [(8, 6, 48, 48, False), (16, 5, 24, 96, True), (3, 4, 16, 17, True)])
def test_gemm_tile_epilogue_runs_under_the_tile_loop(rng, c, h, w, o, residual):
    """A 1x1 convolution over few channels (the GEMM tile form, which writes the output from the
    reduction) + bias (+ residual) + clip: the epilogue is moved under the convolution's parallel
    loop (reverse_compute_at), so each tile is finished while in cache; numpy's numbers."""
    ex, kernel = _conv_bias_clip(c, h, w, o, 1, 1, 0, (h, w) if residual else None)
    from refcomp.ast import BufferStore, For
    from refcomp.loops.primitives.tree import walk

    out_buffer = kernel.params[-1]
    parallel = [loop for loop in walk(kernel.body) if isinstance(loop, For) and loop.kind == "parallel"]
    if w % 8 == 0 and o % 8 == 0:  # the GEMM tile applies: one parallel nest holds the conv and its epilogue
        assert any(any(isinstance(s, BufferStore) and s.buffer is out_buffer for s in walk(loop.body))
                   and any(isinstance(s, BufferStore) and s.buffer is not out_buffer for s in walk(loop.body))
                   for loop in parallel)
    values = [rng.standard_normal((2, c, h, w)), rng.standard_normal((o, c, 1, 1)), rng.standard_normal((1, o, 1, 1))]
    if residual:
        values.append(rng.standard_normal((2, o, h, w)))
    values = [v.astype(np.float32) for v in values]
    got = refcomp.runtime.VirtualMachine(ex)["main"](*values)
    expected = _np_conv(values[0].astype(np.float64), values[1].astype(np.float64), (1, 1), (0,) * 4, (1, 1))
    expected = expected + values[2] + (values[3] if residual else 0)
    np.testing.assert_allclose(got, np.clip(expected, 0, 6), rtol=1e-4, atol=1e-4)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_conv_bias_clip_kernels_match_numpy_at_drawn_shapes(rng, data):
    """conv + bias (+ residual) + clip through graph.build at drawn shapes (odd, prime, 1, stride
    2, padding; depthwise, 1x1 and k x k): whichever form each kernel takes (the channel-vector
    write-back on vectors, the GEMM tile with its epilogue under the tile loop, the depthwise row
    tile with its padded input made per plane, stride-2 loads), the numbers are numpy's."""
    depthwise = data.draw(st.booleans(), label="depthwise")
    c = data.draw(st.sampled_from([1, 3, 8, 13, 16]), label="c")
    o = c if depthwise else data.draw(st.sampled_from([1, 7, 16, 32, 48]), label="o")
    k = data.draw(st.sampled_from([1, 3, 5]), label="k")
    stride = data.draw(st.integers(1, 2), label="stride")
    pad = data.draw(st.integers(0, k // 2), label="pad")
    h = data.draw(st.integers(max(k - 2 * pad, 1), 13), label="h")
    w = data.draw(st.sampled_from([v for v in (1, 2, 5, 7, 11, 16, 24, 31) if v + 2 * pad >= k]), label="w")
    residual = data.draw(st.booleans(), label="residual")
    groups = c if depthwise else 1
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    x, wt, b = Var("x", tensor((2, c, h, w))), Var("w", tensor((o, c // groups, k, k))), Var("b", tensor((1, o, 1, 1)))
    params = [x, wt, b] + ([Var("r", tensor((2, o, oh, ow)))] if residual else [])
    bb = BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            y = op.add(op.conv2d(x, wt, strides=stride, padding=pad, groups=groups), b)
            if residual:
                y = op.add(y, params[3])
            out = bb.emit_output(op.clip(y, 0.0, 6.0))
        bb.emit_func_output(out)
    ex = refcomp.graph.build(bb.get(), target="c", blas=False)
    shapes = [(2, c, h, w), (o, c // groups, k, k), (1, o, 1, 1)] + ([(2, o, oh, ow)] if residual else [])
    values = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    got = refcomp.runtime.VirtualMachine(ex)["main"](*values)
    expected = _np_conv(values[0].astype(np.float64), values[1].astype(np.float64), (stride,) * 2, (pad,) * 4,
                        (1, 1), groups) + values[2] + (values[3] if residual else 0)
    np.testing.assert_allclose(got, np.clip(expected, 0, 6), rtol=1e-4, atol=1e-4)


def test_padded_copy_of_a_channel_mixing_conv_stays_a_pass_of_its_own(rng):
    """A convolution that is not depthwise (one input channel, 16 outputs, 5 x 5, stride 2, a
    single output column) keeps its padded input as a pass of its own, and matches numpy (found
    by the drawn-shapes test: made per row tile, this one went wrong)."""
    x, wt, b = Var("x", tensor((2, 1, 7, 2))), Var("w", tensor((16, 1, 5, 5))), Var("b", tensor((1, 16, 1, 1)))
    bb = BlockBuilder()
    with bb.function("main", [x, wt, b]):
        with bb.dataflow():
            out = bb.emit_output(op.clip(op.add(op.conv2d(x, wt, strides=2, padding=2), b), 0.0, 6.0))
        bb.emit_func_output(out)
    ex = refcomp.graph.build(bb.get(), target="c", blas=False)
    values = [rng.standard_normal(s).astype(np.float32) for s in [(2, 1, 7, 2), (16, 1, 5, 5), (1, 16, 1, 1)]]
    got = refcomp.runtime.VirtualMachine(ex)["main"](*values)
    expected = _np_conv(values[0].astype(np.float64), values[1].astype(np.float64), (2, 2), (2,) * 4, (1, 1))
    np.testing.assert_allclose(got, np.clip(expected + values[2], 0, 6), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("c,size,stride,pad", [(32, 6, 1, 1), (48, 3, 1, 1), (16, 6, 2, 1), (32, 7, 2, 1), (16, 5, 1, 0)])
def test_depthwise_on_small_maps_in_vectors_of_channels(rng, c, size, stride, pad):
    """Depthwise 3x3 + bias + relu6 on a MobileNet's small maps through graph.build: on AVX-512
    the kernel reads its input in vectors of channels (a 5-d copy, its padded input made per
    channel block from it, on the stack) and the epilogue is folded into the tile's write-back;
    the numbers are numpy's."""
    from refcomp.ast import Block
    from refcomp.loops import recipes
    from refcomp.loops.primitives.tree import walk
    from refcomp.loops.recipes.transpose import channel_vectors_intrin

    x, wt, b = Var("x", tensor((2, c, size, size))), Var("w", tensor((c, 1, 3, 3))), Var("b", tensor((1, c, 1, 1)))
    bb = BlockBuilder()
    with bb.function("main", [x, wt, b]):
        with bb.dataflow():
            out = bb.emit_output(op.clip(op.add(op.conv2d(x, wt, strides=stride, padding=pad, groups=c), b), 0.0, 6.0))
        bb.emit_func_output(out)
    ex = refcomp.graph.build(bb.get(), target="c", blas=False)
    (kernel,) = [f for f in ex.module.functions.values() if isinstance(f, PrimFunc)]
    native = recipes.conv.native_lanes()
    intrin = channel_vectors_intrin(1, native)
    if intrin is not None and intrin.available():
        inputs = [a for a in _allocations(kernel) if len(a.shape) == 5 and a.name in ("pad", "x_global")]
        assert len(inputs) == (2 if pad else 1) and all(a.scope == "local" for a in inputs)
        assert not any(isinstance(s, Block) and s.name.startswith("compute") for s in walk(kernel.body))
    values = [rng.standard_normal(s).astype(np.float32) for s in ((2, c, size, size), (c, 1, 3, 3), (1, c, 1, 1))]
    expected = np.clip(_np_conv(values[0].astype(np.float64), values[1].astype(np.float64), (stride,) * 2,
                                (pad,) * 4, (1, 1), c) + values[2], 0, 6)
    np.testing.assert_allclose(refcomp.runtime.VirtualMachine(ex)["main"](*values), expected, rtol=1e-4, atol=1e-4)
    if "main" in getattr(ex, "compiled", {}):
        np.testing.assert_allclose(ex.compiled["main"](*values), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("c,size,out", [(96, 12, 16), (192, 6, 32), (96, 3, 16), (96, 2, 16)])
def test_single_channel_block_runs_its_images_in_parallel(rng, c, size, out):
    """A 1x1 projection to one channel block of the channel-vector tile at a small size (the tile
    takes whole rows, so no row loop is left outside it): the images are the parallel loop, not
    a lone channel block; numbers against numpy at batch 1, 2 and 3.  Which sizes give one block
    of whole rows depends on the vector width (a shape that does not is skipped on this CPU)."""
    from refcomp.ast import For
    from refcomp.loops.primitives.tree import walk
    from refcomp.loops.recipes import conv_tiles
    from refcomp.loops.recipes.conv_match import channel_lanes, native_lanes

    native = native_lanes()
    lanes = channel_lanes(out, native)
    mv = 2 if out % (2 * lanes) == 0 else 1
    preferred = conv_tiles._COLUMN_TILE.get(native, 12) // mv
    if out != mv * lanes or conv_tiles.whole_rows_tile(size, size, preferred) is None:
        pytest.skip(f"with {native}-lane vectors a {size} x {size} output to {out} channels is not one block of "
                    "whole rows")

    batch = SizeVar("batch", "int64")
    x, w = Var("x", tensor((batch, c, size, size))), Var("w", tensor((out, c, 1, 1)))
    bb = BlockBuilder()
    with bb.function("main", [x, w]):
        with bb.dataflow():
            result = bb.emit_output(bb.emit(op.conv2d(x, w)))
        bb.emit_func_output(result)
    ex = refcomp.graph.build(bb.get(), target="c", blas=False)
    (kernel,) = [f for f in ex.module.functions.values() if isinstance(f, PrimFunc)]
    parallel = [f for f in walk(kernel.body) if isinstance(f, For) and f.kind == "parallel"]
    assert any(str(f.extent) == "batch" for f in parallel)  # (the weights' packing is parallel too)
    for n in (1, 2, 3):
        xv = rng.standard_normal((n, c, size, size)).astype(np.float32)
        wv = rng.standard_normal((out, c, 1, 1)).astype(np.float32)
        got = refcomp.runtime.VirtualMachine(ex)["main"](xv, wv)
        np.testing.assert_allclose(got, _np_conv(xv, wv, (1, 1), (0, 0, 0, 0), (1, 1)), rtol=1e-4, atol=1e-4)
