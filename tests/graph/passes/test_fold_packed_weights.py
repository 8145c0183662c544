"""fold_packed_weights: the packing stage of a constant kernel argument (a convolution's weights in
its register tile's layout) runs once at build time; the kernel takes the packed array."""
import re

import numpy as np
import pytest

import refcomp
from refcomp.ast import PrimFunc, as_int
from refcomp.ast.graph import Constant
from refcomp.graph import BlockBuilder, Var, op, tensor
from refcomp.graph.op.nn import _np_conv
from refcomp.graph.passes.fold_packed_weights import find_packing_stage


def _kernels(ex):
    return {name: f for name, f in ex.module.functions.items() if isinstance(f, PrimFunc)}


def _packs(func) -> bool:
    """Whether func has a packing stage (a block named after the buffer it copies, *_global)."""
    return re.search(r'T\.block\("[^"]*_global"\)', func.script()) is not None


def _shape(buffer):
    return tuple(as_int(d) for d in buffer.shape)


def _conv_model(x_shape, w, stride, pad, groups, constant=True):
    x = Var("x", tensor(x_shape))
    params = [x]
    if constant:
        weight = Constant(w)
    else:
        weight = Var("w", tensor(w.shape))
        params.append(weight)
    bb = BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(op.relu(op.conv2d(x, weight, strides=stride, padding=pad, groups=groups)))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("x_shape,o,k,stride,pad,groups", [
    ((2, 16, 9, 9), 32, 3, 1, 1, 1),      # the channel-vector tile: Wp[o // L, c, r0, r1, o % L]
    ((1, 3, 16, 16), 8, 3, 1, 1, 1),      # a short reduction on the GEMM tile: packed per call
    ((1, 64, 7, 7), 16, 1, 2, 0, 1),      # a strided 1x1
    ((2, 6, 11, 13), 12, 3, 2, 1, 3),     # grouped, the direct form
])
def test_constant_weights_are_packed_at_build_time(rng, x_shape, o, k, stride, pad, groups):
    w = rng.standard_normal((o, x_shape[1] // groups, k, k)).astype(np.float32)
    ex = refcomp.graph.build(_conv_model(x_shape, w, stride, pad, groups), target="c")
    kernels = _kernels(ex)
    xv = rng.standard_normal(x_shape).astype(np.float32)
    got = np.asarray(refcomp.runtime.VirtualMachine(ex)["main"](xv))
    expected = np.maximum(_np_conv(xv.astype(np.float64), w.astype(np.float64), (stride,) * 2, (pad,) * 4,
                                   (1, 1), groups), 0)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    packed = [f for name, f in kernels.items() if name.endswith("_packed")]
    unpacked = [f for name, f in kernels.items() if not name.endswith("_packed")]
    if packed:  # the kernel reads the packed array; no copy of the weights runs per call
        (kernel,) = packed
        assert not unpacked
        assert _shape(kernel.params[1]) != w.shape and not _packs(kernel)
    else:  # a form that reads the weights in place, or the GEMM tile's micro-kernel (whose operand
        # address is taken: the argument checks count it as written, so no read-only constant)
        assert all(not _packs(f) or "tensorized" in f.script() for f in unpacked)


def test_weights_passed_at_run_time_keep_the_packing_stage(rng):
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    ex = refcomp.graph.build(_conv_model((1, 16, 9, 9), w, 1, 1, 1, constant=False), target="c")
    (kernel,) = _kernels(ex).values()
    assert _shape(kernel.params[1]) == w.shape and _packs(kernel)
    assert find_packing_stage(kernel, 1) is not None and find_packing_stage(kernel, 0) is None
    xv = rng.standard_normal((1, 16, 9, 9)).astype(np.float32)
    got = np.asarray(refcomp.runtime.VirtualMachine(ex)["main"](xv, w))
    expected = np.maximum(_np_conv(xv.astype(np.float64), w.astype(np.float64), (1, 1), (1,) * 4, (1, 1)), 0)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_two_convolutions_share_a_packed_kernel_with_their_own_constants(rng):
    w1 = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    w2 = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    x = Var("x", tensor((1, 16, 8, 8)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(op.conv2d(x, Constant(w1), padding=1))
            out = bb.emit_output(op.conv2d(y, Constant(w2), padding=1))
        bb.emit_func_output(out)
    ex = refcomp.graph.build(bb.get(), target="c")
    assert all(name.endswith("_packed") for name in _kernels(ex))
    xv = rng.standard_normal((1, 16, 8, 8)).astype(np.float32)
    conv = lambda a, w: _np_conv(a, w.astype(np.float64), (1, 1), (1,) * 4, (1, 1))  # noqa: E731
    expected = conv(conv(xv.astype(np.float64), w1), w2)
    np.testing.assert_allclose(np.asarray(refcomp.runtime.VirtualMachine(ex)["main"](xv)), expected,
                               rtol=1e-4, atol=1e-3)
